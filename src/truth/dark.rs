//! What a Node Accord deletes for a dark machine had that its kubelet will
//! not register again (`policy.dark_nodes = "delete"`, docs/kubernetes.md
//! "Dark machines"): the labels, taints, annotations and cordon others
//! set, kept when the Node is deleted and put back on the Node the
//! machine's kubelet registers when it comes back.
//!
//! Kept: every label, taint and annotation but those the machine's own
//! software publishes afresh as it boots (an old value would be stale, and
//! one of them, `nvidia.com/mig.config`, makes mig-manager repartition),
//! and Accord's own (published anew):
//! - labels: not Accord's, not `nvidia.com/` (GPU Feature Discovery, the
//!   GPU Operator), not `feature.node.kubernetes.io/` (NFD), not the
//!   kubelet's own ([`KUBERNETES_SET_LABELS`]);
//! - taints: not Accord's, not `node.kubernetes.io/` nor
//!   `node.cloudprovider.kubernetes.io/` (the kubelet's and the node
//!   lifecycle controller's, for conditions: `pkg/apis/core/well_known_taints.go`);
//! - annotations: not under a `kubernetes.io`, `k8s.io` or `nvidia.com`
//!   domain (the kubelet's, the attach-detach and CSI controllers',
//!   kubeadm's, NFD's, NVIDIA's), nor a CNI's (`projectcalico.org`,
//!   `flannel.alpha.coreos.com`, `cilium.io`): Accord's
//!   `accord.dev/do-not-disrupt` is kept.
//!
//! A key the new Node already has keeps its new value: the kubelet set it
//! at registration (`--node-labels`, `--register-with-taints`).

use super::*;

/// Label key prefixes the machine's own software publishes as it boots.
const NODE_SOFTWARE_LABELS: [&str; 2] = ["nvidia.com/", "feature.node.kubernetes.io/"];

/// Taint key prefixes of the kubelet and the node lifecycle controller.
const NODE_CONDITION_TAINTS: [&str; 2] =
    ["node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"];

/// Annotation domains of node software (the key's prefix is one of these
/// or a subdomain of one).
const NODE_SOFTWARE_ANNOTATIONS: [&str; 7] = [
    "kubernetes.io",
    "k8s.io",
    "nvidia.com",
    "projectcalico.org",
    "flannel.alpha.coreos.com",
    "cilium.io",
    "io.cilium",
];

/// Whether a Node label with `key` is kept (Accord's own are judged by the
/// caller, who knows the topology).
pub fn keeps_label(key: &str) -> bool {
    !KUBERNETES_SET_LABELS.contains(&key)
        && !NODE_SOFTWARE_LABELS.iter().any(|p| key.starts_with(p))
}

/// Whether a Node taint with `key` is kept.
pub fn keeps_taint(key: &str) -> bool {
    !owns_taint(key) && !NODE_CONDITION_TAINTS.iter().any(|p| key.starts_with(p))
}

/// Whether a Node annotation with `key` is kept.
pub fn keeps_annotation(key: &str) -> bool {
    let Some((prefix, _)) = key.rsplit_once('/') else {
        return true;
    };
    !NODE_SOFTWARE_ANNOTATIONS
        .iter()
        .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")))
}

/// What a deleted Node had that is put back; also what one restore
/// writes (the part the new Node lacks).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeptNode {
    /// The deleted Node's `metadata.uid`: a Node with another is the new
    /// registration.
    pub uid: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// An admin cordoned it (`spec.unschedulable`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
}

/// A Node as far as keeping and restoring go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeKeys<'a> {
    pub uid: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub annotations: &'a BTreeMap<String, String>,
    pub unschedulable: bool,
}

impl KeptNode {
    /// What is kept of `node`; `owns_label`: Accord's label keys.
    pub fn of(node: &NodeKeys<'_>, owns_label: &dyn Fn(&str) -> bool) -> KeptNode {
        let mut taints: Vec<Taint> = node
            .taints
            .iter()
            .filter(|t| keeps_taint(&t.key))
            .cloned()
            .collect();
        taints.sort();
        taints.dedup();
        KeptNode {
            uid: node.uid.to_owned(),
            labels: node
                .labels
                .iter()
                .filter(|(k, _)| keeps_label(k) && !owns_label(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints,
            annotations: node
                .annotations
                .iter()
                .filter(|(k, _)| keeps_annotation(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            unschedulable: node.unschedulable,
        }
    }

    /// What of this `node` lacks (a label or annotation key it does not
    /// have, a taint of a key and effect it does not have, the cordon);
    /// empty when it has all of it. Its `uid` is `node`'s.
    pub fn missing_on(&self, node: &NodeKeys<'_>) -> KeptNode {
        KeptNode {
            uid: node.uid.to_owned(),
            labels: self
                .labels
                .iter()
                .filter(|(k, _)| !node.labels.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: self
                .taints
                .iter()
                .filter(|t| {
                    !node
                        .taints
                        .iter()
                        .any(|n| n.key == t.key && n.effect == t.effect)
                })
                .cloned()
                .collect(),
            annotations: self
                .annotations
                .iter()
                .filter(|(k, _)| !node.annotations.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            unschedulable: self.unschedulable && !node.unschedulable,
        }
    }

    /// Nothing to put back.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
            && self.taints.is_empty()
            && self.annotations.is_empty()
            && !self.unschedulable
    }
}
