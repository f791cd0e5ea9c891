//! What Accord writes back: node labels (the topology it plans with, so
//! kube-scheduler, Kueue TAS and PodGroup constraints see the same
//! domains), events on pending pods and groups, and ProvisioningRequest
//! status conditions. The control loop decides what; these write it.

use std::collections::BTreeMap;

use accord::fleet::Fleet;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// Who Accord says it is on events and patches.
pub const MANAGER: &str = "accordd";

/// The labels Accord owns on a node: `<label_prefix><level>` for each
/// topology level the node has a value for, and every `also_label` key.
pub fn topology_labels(fleet: &Fleet, node: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(n) = fleet.nodes.iter().find(|n| n.name == node) else {
        return out;
    };
    for (level, value) in &n.domains {
        out.insert(
            format!("{}{level}", fleet.topology.label_prefix),
            value.clone(),
        );
        for key in fleet.topology.also_label.get(level).into_iter().flatten() {
            out.insert(key.clone(), value.clone());
        }
    }
    out
}

/// Sets `labels` on a node (a merge patch: other labels stay).
pub async fn label_node(
    client: &kube::Client,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": labels}});
    api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

/// An event about `regarding` (`events.k8s.io/v1`), e.g. reason
/// `PoweringOn`, note "powering on node n17 in rack r3 for podgroup
/// train-a"; `warning` for "cannot satisfy".
pub async fn record_event(
    client: &kube::Client,
    regarding: ObjectReference,
    reason: &str,
    action: &str,
    note: &str,
    warning: bool,
) -> Result<(), kube::Error> {
    let ns = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let now = jiff_now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}.",
                regarding
                    .name
                    .clone()
                    .unwrap_or_else(|| "accord".to_owned())
            )),
            namespace: Some(ns),
            ..Default::default()
        },
        action: Some(action.to_owned()),
        event_time: Some(MicroTime(now)),
        note: Some(note.chars().take(1024).collect()),
        reason: Some(reason.to_owned()),
        regarding: Some(regarding),
        reporting_controller: Some("accord.dev/accordd".to_owned()),
        reporting_instance: Some(MANAGER.to_owned()),
        type_: Some(if warning { "Warning" } else { "Normal" }.to_owned()),
        ..Default::default()
    };
    api.create(&PostParams::default(), &event).await.map(drop)
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// One ProvisioningRequest condition, as Kueue reads them: `Accepted`,
/// `Provisioned`, `Failed`, `BookingExpired`, `CapacityRevoked`.
#[derive(Debug, Clone)]
pub struct ProvisioningCondition {
    pub type_: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// Sets a condition on a ProvisioningRequest's status (replacing one of the
/// same type; the others stay), through the status subresource.
pub async fn set_provisioning_condition(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    condition: &ProvisioningCondition,
) -> Result<(), kube::Error> {
    let ar = crate::watch::crds()
        .into_iter()
        .find(|a| a.kind == "ProvisioningRequest")
        .expect("listed");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let current = api.get_status(name).await?;
    let mut conditions: Vec<serde_json::Value> = current.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != condition.type_.as_str());
    let generation = current.metadata.generation.unwrap_or(0);
    conditions.push(json!({
        "type": condition.type_,
        "status": if condition.status { "True" } else { "False" },
        "reason": condition.reason,
        "message": condition.message,
        "observedGeneration": generation,
        "lastTransitionTime": Time(jiff_now()),
    }));
    let patch = json!({"status": {"conditions": conditions}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}
