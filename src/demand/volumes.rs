//! What a pod's volumes ask of a node, as kube-scheduler v1.37.2's volume
//! filters read them: VolumeBinding (bound PVs' node affinity, claims that
//! wait for their first consumer), VolumeZone (bound PVs' zone labels),
//! VolumeRestrictions (ReadWriteOncePod) and NodeVolumeLimits (CSINode
//! attach limits). The Kubernetes reader resolves PVCs, PVs,
//! StorageClasses and CSINodes into this; the rules are in
//! `crate::fit::volumes`.

use serde::{Deserialize, Serialize};

use super::NodeSelectorTerm;

/// A pod's volumes, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodVolumes {
    /// Claims bound to a PV (`spec.volumeName` and the PV controller's
    /// `pv.kubernetes.io/bind-completed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound: Vec<BoundVolume>,
    /// Unbound claims of a `WaitForFirstConsumer` class: bound or
    /// provisioned once the pod has a node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<WaitingClaim>,
    /// Its CSI volumes, which a node's attach limit counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub csi: Vec<CsiVolume>,
    /// Why no node will do (a missing claim, an unbound `Immediate` claim,
    /// a ReadWriteOncePod claim another pod uses): the plugin and its
    /// words. Every node is rejected with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<VolumeBlock>,
}

impl PodVolumes {
    pub fn is_empty(&self) -> bool {
        self.bound.is_empty()
            && self.waiting.is_empty()
            && self.csi.is_empty()
            && self.blocked.is_none()
    }
}

/// A PV a claim of the pod is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundVolume {
    pub pv: String,
    /// `spec.nodeAffinity.required`, as matched against a node's labels
    /// alone (`CheckNodeAffinity`): any term may match. `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// Its zone and region labels (VolumeZone): key → the zones its value
    /// lists (`a__b`: a or b).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<ZoneLabel>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneLabel {
    pub key: String,
    pub values: Vec<String>,
}

/// An unbound claim that waits for its pod's node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitingClaim {
    pub claim: String,
    /// Its storage request, bytes (claims are matched smallest first).
    #[serde(default)]
    pub size: u128,
    /// `volume.kubernetes.io/selected-node`: provisioning for that node
    /// has begun; no other node will do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_node: Option<String>,
    /// A PV already pre-bound to it (`claimRef`): it alone is tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prebound: Option<StaticVolume>,
    /// Available PVs it could bind (same class, mode and access modes,
    /// large enough), smallest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<StaticVolume>,
    /// Where its class can provision a volume: the class's
    /// `allowedTopologies` (empty: any node). `None`: it cannot (no
    /// provisioner, or `kubernetes.io/no-provisioner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Vec<NodeSelectorTerm>>,
}

/// An available PV a waiting claim may bind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticVolume {
    pub pv: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
}

/// A CSI volume: its driver and handle (NodeVolumeLimits counts unique
/// `driver/handle` pairs per driver).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiVolume {
    pub driver: String,
    pub handle: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeBlock {
    pub plugin: String,
    pub reason: String,
    /// Said by the plugin's Filter, node by node after the filters before
    /// it (a ReadWriteOncePod claim in use), not by its PreFilter before
    /// any node is looked at.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_filter: bool,
}
