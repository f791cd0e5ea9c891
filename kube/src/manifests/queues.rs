//! The queueing systems GPU clusters run in front of the scheduler, as
//! small local types holding only what planning reads: Kueue's Workload,
//! LocalQueue, ClusterQueue, ResourceFlavor and Topology
//! (`kueue.x-k8s.io/v1beta2`, the version v0.17 stores; v1beta1, served
//! beside it, has the same shape for these fields but the ClusterQueue's
//! `cohort`), Volcano's PodGroup (`scheduling.volcano.sh/v1beta1`) and
//! NVIDIA KAI's (`scheduling.run.ai/v2alpha2`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Deserialize;

/// Kueue's `Workload` (apis/kueue/v1beta2/workload_types.go).
#[derive(Debug, Clone, Deserialize)]
pub struct KueueWorkload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: KueueWorkloadSpec,
    #[serde(default)]
    pub status: KueueWorkloadStatus,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueWorkloadSpec {
    #[serde(default)]
    pub pod_sets: Vec<KueuePodSet>,
    #[serde(default)]
    pub queue_name: String,
    #[serde(default)]
    pub priority: Option<i32>,
    /// `false`: deactivated (by a user or by Kueue past its retries).
    #[serde(default)]
    pub active: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueuePodSet {
    pub name: String,
    #[serde(default)]
    pub template: PodTemplateSpec,
    pub count: i32,
    /// Partial admission's lower bound; Accord plans the full count.
    #[serde(default)]
    pub min_count: Option<i32>,
    #[serde(default)]
    pub topology_request: Option<KueueTopologyRequest>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueTopologyRequest {
    #[serde(default)]
    pub required: Option<String>,
    #[serde(default)]
    pub preferred: Option<String>,
    #[serde(default)]
    pub unconstrained: Option<bool>,
    #[serde(default)]
    pub pod_set_slice_required_topology: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueWorkloadStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub admission: Option<KueueAdmission>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueAdmission {
    #[serde(default)]
    pub cluster_queue: String,
}

impl KueueWorkload {
    /// Whether condition `type_` is True.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    }
}

/// Kueue's `LocalQueue`: the namespaced name a Workload's `queueName` is.
#[derive(Debug, Clone, Deserialize)]
pub struct KueueLocalQueue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KueueLocalQueueSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueLocalQueueSpec {
    #[serde(default)]
    pub cluster_queue: String,
    #[serde(default)]
    pub stop_policy: Option<String>,
}

/// Kueue's `ClusterQueue`: its quota per flavor, and what is reserved.
#[derive(Debug, Clone, Deserialize)]
pub struct KueueClusterQueue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KueueClusterQueueSpec,
    #[serde(default)]
    pub status: KueueClusterQueueStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueClusterQueueSpec {
    #[serde(default)]
    pub resource_groups: Vec<KueueResourceGroup>,
    /// v1beta1 calls it `cohort`.
    #[serde(default, alias = "cohort")]
    pub cohort_name: Option<String>,
    /// `Hold` or `HoldAndDrain`: nothing is admitted.
    #[serde(default)]
    pub stop_policy: Option<String>,
    #[serde(default)]
    pub admission_checks: Vec<String>,
    #[serde(default)]
    pub admission_checks_strategy: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueResourceGroup {
    #[serde(default)]
    pub covered_resources: Vec<String>,
    #[serde(default)]
    pub flavors: Vec<KueueFlavorQuotas>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueFlavorQuotas {
    pub name: String,
    #[serde(default)]
    pub resources: Vec<KueueResourceQuota>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueResourceQuota {
    pub name: String,
    #[serde(default)]
    pub nominal_quota: Option<Quantity>,
    #[serde(default)]
    pub borrowing_limit: Option<Quantity>,
    #[serde(default)]
    pub lending_limit: Option<Quantity>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueClusterQueueStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Quota reserved by workloads (admitted or not yet): what Kueue
    /// subtracts before it admits another.
    #[serde(default)]
    pub flavors_reservation: Vec<KueueFlavorUsage>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueFlavorUsage {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub resources: Vec<KueueResourceUsage>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueResourceUsage {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub total: Option<Quantity>,
}

/// Kueue's `ResourceFlavor`: the nodes it means and the topology it has.
#[derive(Debug, Clone, Deserialize)]
pub struct KueueResourceFlavor {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KueueResourceFlavorSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueResourceFlavorSpec {
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub node_taints: Vec<Taint>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub topology_name: Option<String>,
}

/// Kueue's `Topology`: its levels, highest first, each a node label.
#[derive(Debug, Clone, Deserialize)]
pub struct KueueTopology {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KueueTopologySpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct KueueTopologySpec {
    #[serde(default)]
    pub levels: Vec<KueueTopologyLevel>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueTopologyLevel {
    #[serde(default)]
    pub node_label: String,
}

/// Volcano's PodGroup (volcano.sh/apis, pkg/apis/scheduling/v1beta1/types.go).
/// Its pods name it in the annotation `scheduling.k8s.io/group-name`.
#[derive(Debug, Clone, Deserialize)]
pub struct VolcanoPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VolcanoPodGroupSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupSpec {
    #[serde(default)]
    pub min_member: Option<i32>,
    #[serde(default)]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
}

/// NVIDIA KAI's PodGroup (pkg/apis/scheduling/v2alpha2/podgroup_types.go).
/// Its pods name it in the annotation `pod-group-name`.
#[derive(Debug, Clone, Deserialize)]
pub struct KaiPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KaiPodGroupSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KaiPodGroupSpec {
    #[serde(default)]
    pub min_member: Option<i32>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub topology_constraint: Option<KaiTopologyConstraint>,
    /// Subgroups (leaf `minMember`s): read for the gang's minimum when the
    /// group sets none of its own.
    #[serde(default, alias = "subgroups")]
    pub sub_groups: Vec<KaiSubGroup>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KaiTopologyConstraint {
    #[serde(default)]
    pub topology: Option<String>,
    #[serde(default)]
    pub required_topology_level: Option<String>,
    #[serde(default)]
    pub preferred_topology_level: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KaiSubGroup {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub min_member: Option<i32>,
    #[serde(default)]
    pub parent: Option<String>,
}
