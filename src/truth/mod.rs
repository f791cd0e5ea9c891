//! Hardware truth: what a node is, when its agent and the cluster say
//! something other than the fleet file declares.
//!
//! Precedence, per node: the scheduler's view (the Kubernetes Node's
//! labels, taints and allocatable, and the DRA driver's ResourceSlices)
//! for what fit checks; the agent's last report for the hardware model;
//! the fleet file's declaration for machines never seen. Where report and
//! declaration disagree, or the scheduler's devices differ from the
//! model's, that is [`Drift`]. Pure: the daemon observes, this compares.

mod dark;
mod publish;
mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::demand::Taint;
use crate::device::Device;
use crate::hardware::{Gpu, MigMode, NicKind, NodeHardware};

pub use dark::{keeps_annotation, keeps_label, keeps_taint, KeptNode, NodeKeys};
pub use publish::{
    is_readiness_taint, label_value, owns_taint, valid_label_key, valid_label_value,
    DO_NOT_DISRUPT, KUBERNETES_SET_LABELS, READINESS_TAINTS, UNSCHEDULABLE_TAINT_KEY,
};
pub use report::{compare, PcieStated, Stated};

/// What differs between two views of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftKind {
    /// Number of GPUs.
    GpuCount,
    /// GPU models (product names).
    GpuModel,
    /// Memory per GPU.
    GpuMemory,
    /// MIG mode (enabled / disabled) of some GPU.
    MigMode,
    /// MIG instances (profile@start) of some GPU.
    MigLayout,
    /// Number of NUMA nodes.
    NumaNodes,
    /// PCIe root complexes the GPUs sit under.
    PcieRoots,
    /// Number of RDMA NICs (InfiniBand, RoCE, or with an RDMA device).
    Nics,
    /// NVLink groups (GPUs connected directly or through NVSwitches) and
    /// active links.
    NvLink,
    /// A device-plugin resource the Kubernetes Node advertises
    /// (`nvidia.com/gpu`, `nvidia.com/mig-*`) against the model's count.
    SchedulerResource,
    /// The DRA driver's published devices against the model's.
    SchedulerDevices,
}

impl DriftKind {
    /// Whether the difference is between the agent's report and the fleet
    /// file (else: between the model and the scheduler's view).
    pub fn is_declaration(self) -> bool {
        !matches!(
            self,
            DriftKind::SchedulerResource | DriftKind::SchedulerDevices
        )
    }
}

/// One difference: what, and both sides as text an admin reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Drift {
    pub what: DriftKind,
    /// The fleet file's declaration (or, for scheduler kinds, the model).
    pub declared: String,
    /// The agent's report (or, for scheduler kinds, the scheduler's view).
    pub reported: String,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b) = if self.what.is_declaration() {
            ("declared", "reported")
        } else {
            ("model", "scheduler")
        };
        let what = match self.what {
            DriftKind::GpuCount => "GPUs",
            DriftKind::GpuModel => "GPU model",
            DriftKind::GpuMemory => "GPU memory",
            DriftKind::MigMode => "MIG mode",
            DriftKind::MigLayout => "MIG layout",
            DriftKind::NumaNodes => "NUMA nodes",
            DriftKind::PcieRoots => "PCIe roots",
            DriftKind::Nics => "NICs",
            DriftKind::NvLink => "NVLink",
            DriftKind::SchedulerResource => "device-plugin resource",
            DriftKind::SchedulerDevices => "DRA devices",
        };
        write!(f, "{what}: {a} {}, {b} {}", self.declared, self.reported)
    }
}

/// The Kubernetes Node and its ResourceSlices as kube-scheduler sees them:
/// what fit uses for a node that is up, and (kept in accordd's store) for
/// one that was seen before and is off now.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SchedulerView {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// `status.allocatable`, quantities as the API server spells them.
    pub allocatable: BTreeMap<String, String>,
    /// The node-local devices of the DRA drivers' ResourceSlices; `None`
    /// when the cluster publishes none for the node (no DRA, or no driver
    /// there): devices are then derived from the model.
    #[serde(default)]
    pub devices: Option<Vec<Device>>,
    /// The counter sets the drivers publish for the node's pools
    /// (`sharedCounters`, partitionable devices): set → counter → total.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: crate::device::CounterSets,
}

/// Label keys Accord owns on a Node besides the topology ones
/// (`<label_prefix><level>` and every `also_label` key).
pub const GPU_MODEL_LABEL: &str = "accord.dev/gpu.model";
pub const GPU_COUNT_LABEL: &str = "accord.dev/gpu.count";
/// The label and taint key of a non-lendable reservation's nodes: value
/// the reservation's name, taint effect NoSchedule.
pub const RESERVATION_KEY: &str = "accord.dev/reservation";
/// The taint key (effect NoSchedule) of a node whose BIOS profile Accord
/// has not verified: `unverified` while it is staged and not yet read
/// back (a kubelet of such a node registers with it), `failed` when it
/// did not take. Accord removes it once the profile is verified.
pub const BIOS_TAINT_KEY: &str = "accord.dev/bios";
/// The taint key (effect NoSchedule, no value) of a node Accord is about
/// to power off: set before the power-off and seen on the Node before it
/// is sent, so that kube-scheduler binds nothing there in between; lifted
/// when the power-off is cancelled and on the next power-on.
pub const POWERING_OFF_TAINT_KEY: &str = "accord.dev/powering-off";
/// The taint key (effect NoSchedule, no value) of a node on its way up:
/// a kubelet registers with it (`--register-with-taints`), so that no pod
/// binds before Accord's labels are on the Node (Accord lifts it in the
/// patch that sets them), and Accord keeps it on the nodes it powered on
/// for a gang until all of them are up, so that the scheduler gives none
/// of them to other work in between. The planner counts such a node as
/// free (it is Accord's to lift).
pub const STARTING_TAINT_KEY: &str = "accord.dev/starting";

/// What Accord publishes on one Node: the keys it owns, with the values
/// they should have. Keys Accord owns that are absent here are removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Publication {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}
