//! Kubernetes 1.35's gangs: a `scheduling.k8s.io/v1alpha1` Workload lists
//! pod groups (`spec.podGroups[]`: a name and a gang or basic policy), and
//! a pod names its group with `spec.workloadRef` (`name`, `podGroup`,
//! `podGroupReplicaKey`), behind the `GenericWorkload` gate
//! (k8s.io/api v0.35.4, scheduling/v1alpha1/types.go, core/v1/types.go
//! `WorkloadReference`). 1.36 moved the group to an object of its own (the
//! PodGroup) and the pod's reference to `spec.schedulingGroup`.
//!
//! Accord reads 1.35's shape as 1.36's: each of a Workload's pod groups
//! becomes a PodGroup named `WORKLOAD/GROUP` (a name no object can have,
//! so never a real PodGroup's), and a pod's `workloadRef` becomes its
//! `schedulingGroup` naming it; a replica key names `WORKLOAD/GROUP/KEY`,
//! which has its group's policy (the policy holds for each replica
//! apart). The typed Pod of the newest API has no `workloadRef`: the live
//! watch reads it with [`PodWorkloadRef`], a second, small read of pods.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{json, Value};

/// The Workload API version of 1.35.
pub const WORKLOAD_V1ALPHA1: &str = "scheduling.k8s.io/v1alpha1";

/// The annotation on a PodGroup made from a Workload's pod group: the
/// Workload's name (what `explain` and events name).
pub const FROM_WORKLOAD: &str = "accord.dev/from-workload";

/// A pod's `spec.workloadRef`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReference {
    pub name: String,
    pub pod_group: String,
    #[serde(default)]
    pub pod_group_replica_key: Option<String>,
}

impl WorkloadReference {
    /// The PodGroup name it reads as.
    pub fn pod_group_name(&self) -> String {
        match self
            .pod_group_replica_key
            .as_deref()
            .filter(|k| !k.is_empty())
        {
            Some(key) => format!("{}/{}/{key}", self.name, self.pod_group),
            None => format!("{}/{}", self.name, self.pod_group),
        }
    }
}

/// The group a replica's PodGroup name (`W/G/KEY`) has its policy from
/// (`W/G`); `None` for any other name.
pub fn replica_of(name: &str) -> Option<&str> {
    let (group, _key) = name.rsplit_once('/')?;
    group.contains('/').then_some(group)
}

/// A Pod's JSON with its `spec.workloadRef`, if any, read as the
/// `spec.schedulingGroup` it stands for (one it already has is kept).
pub fn pod_as_scheduling_group(mut pod: Value) -> Value {
    let Some(r) = pod["spec"]
        .get("workloadRef")
        .and_then(|r| WorkloadReference::deserialize(r).ok())
    else {
        return pod;
    };
    if pod["spec"].get("schedulingGroup").is_none() {
        pod["spec"]["schedulingGroup"] = json!({ "podGroupName": r.pod_group_name() });
    }
    pod
}

/// A v1alpha1 Workload's pod groups as v1beta1 PodGroups (see the module
/// text); a group without a policy Accord reads (neither `gang` nor
/// `basic`) keeps what it says, which the PodGroup's reader refuses by name.
pub fn workload_pod_groups(workload: &Value) -> Vec<Value> {
    let meta = &workload["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let namespace = meta["namespace"].as_str().unwrap_or("default");
    let groups = workload["spec"]["podGroups"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    // Kubernetes allows 8 (`WorkloadMaxPodGroups`); more is not a
    // Workload the apiserver accepted.
    groups
        .iter()
        .take(8)
        .map(|g| {
            let group = g["name"].as_str().unwrap_or_default();
            json!({
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "namespace": namespace,
                    "name": format!("{name}/{group}"),
                    "annotations": { FROM_WORKLOAD: name },
                },
                "spec": { "schedulingPolicy": g["policy"].clone() },
            })
        })
        .collect()
}

/// What the live watch reads of a pod where 1.35's Workloads are served:
/// its metadata and `spec.workloadRef`, nothing else (serde passes over
/// the rest without building it).
#[derive(Debug, Clone, Deserialize)]
pub struct PodWorkloadRef {
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: RefSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct RefSpec {
    #[serde(default, rename = "workloadRef")]
    workload_ref: Option<WorkloadReference>,
}

impl PodWorkloadRef {
    pub fn workload_ref(&self) -> Option<&WorkloadReference> {
        self.spec.workload_ref.as_ref()
    }
}

impl kube::Resource for PodWorkloadRef {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_and_its_pods_read_as_pod_groups() {
        let w = json!({"apiVersion": WORKLOAD_V1ALPHA1, "kind": "Workload",
            "metadata": {"namespace": "ml", "name": "train"},
            "spec": {"podGroups": [
                {"name": "workers", "policy": {"gang": {"minCount": 4}}},
                {"name": "driver", "policy": {"basic": {}}}]}});
        let groups = workload_pod_groups(&w);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["metadata"]["name"], "train/workers");
        assert_eq!(groups[0]["metadata"]["annotations"][FROM_WORKLOAD], "train");
        assert_eq!(groups[0]["spec"]["schedulingPolicy"]["gang"]["minCount"], 4);
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "spec": {"workloadRef": {"name": "train", "podGroup": "workers",
                                      "podGroupReplicaKey": "r1"}}});
        let read = pod_as_scheduling_group(pod);
        assert_eq!(
            read["spec"]["schedulingGroup"]["podGroupName"],
            "train/workers/r1"
        );
        assert_eq!(replica_of("train/workers/r1"), Some("train/workers"));
        assert_eq!(replica_of("train/workers"), None);
        assert_eq!(replica_of("plain"), None);
        // A pod that names a schedulingGroup of its own keeps it.
        let both = json!({"spec": {"schedulingGroup": {"podGroupName": "g"},
            "workloadRef": {"name": "w", "podGroup": "p"}}});
        assert_eq!(
            pod_as_scheduling_group(both)["spec"]["schedulingGroup"]["podGroupName"],
            "g"
        );
    }
}
