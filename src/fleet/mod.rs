//! The fleet: nodes with their hardware, power state and place in the
//! topology; racks with power budgets; reservations; the planner's policy.
//!
//! The file form is TOML (`FleetFile`), the same file admins will configure
//! accordd with. Parsing is pure: hardware-model files a node names are read
//! by the caller and handed in through a loader.
//!
//! `schema` is the file's form, `validate` its checks, `install` the build
//! of the planner's fleet from it; this module is the fleet as planned.

mod install;
mod schema;
mod validate;
mod view;

pub use install::{hardware_from_profile, parse_layout_entry};
pub use schema::{
    max, DarkNodes, FleetFile, HardwareProfile, MigVia, NodeConfig, OnDrift, Owner, Placement,
    Policy, PowerState, RackConfig, ReservationConfig, TopologyConfig, Warm,
};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::demand::{Taint, TaintEffect};
use crate::device::{devices_from_hardware, CounterSets, Device, NodeDevices, PlannerGpu, Sharing};
use crate::hardware::{
    limits, mig::catalog, Gpu, MigMode, MigProfile, MigState, Nic, NicKind, NodeHardware, NumaNode,
    PciBusId, Source,
};
use crate::quantity::{self, Milli};
use crate::truth::{compare, Drift, Stated};

pub use crate::truth::owns_taint;
use crate::truth::{
    valid_label_key, valid_label_value, GPU_COUNT_LABEL, GPU_MODEL_LABEL, KUBERNETES_SET_LABELS,
    RESERVATION_KEY,
};
pub use view::owns_label;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Not TOML, or not a fleet file's shape (file, line, column, key).
    #[error(transparent)]
    Config(#[from] crate::config_file::ConfigFileError),
    #[error("{file}: {} problem(s): {}", problems.len(), problems.join("; "))]
    Invalid { file: String, problems: Vec<String> },
    #[error("{file}: node {node}: hardware {path}: {reason}")]
    Hardware {
        file: String,
        node: String,
        path: String,
        reason: String,
    },
}

/// The planner's view of one rack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rack {
    pub name: String,
    pub power_budget_kw: Option<f64>,
    pub max_concurrent_power_ons: Option<u32>,
}

/// Allocatable resources, milli-units.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Resources {
    pub cpu: Milli,
    pub memory: Milli,
    pub pods: i64,
    pub extended: BTreeMap<String, Milli>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub rack: Option<String>,
    pub profile: Option<String>,
    /// Topology level → domain value.
    pub domains: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub power: PowerState,
    pub schedulable: bool,
    pub failed: Option<String>,
    pub idle_since: Option<u64>,
    pub allocatable: Resources,
    pub power_kw: f64,
    pub bios_profile: Option<String>,
    pub bios_profile_applied: Option<String>,
    /// Seconds from a power-on to Node Ready, as measured by accordd (its
    /// rack's boots, else its profile's); none before any was measured.
    /// With `policy.prefer_fast_boot`, the faster of equal choices wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_boot_s: Option<u64>,
    pub gpus: Vec<PlannerGpu>,
    /// The node's DRA devices (also what `nvidia.com/gpu` and
    /// `nvidia.com/mig-*` requests draw on). Shared: nodes built from one
    /// declared profile hold one list.
    pub devices: Arc<[Device]>,
    /// Shared counter sets the node's partitionable devices draw on.
    #[serde(default)]
    pub counters: CounterSets,
    /// CEL fingerprints of `devices`, computed once when the fleet is built.
    #[serde(skip)]
    pub device_prints: Arc<[u64]>,
    /// Where the node's model comes from (declaration, report) and the
    /// declared settings a scheduler view falls back to. `None` for a node
    /// not built by [`FleetFile::build`] (e.g. deserialised).
    #[serde(skip)]
    pub(crate) source: Option<Arc<NodeSource>>,
    /// A scheduler view changed `devices` (or withheld GPUs) since the
    /// model was installed.
    #[serde(skip)]
    pub(crate) viewed: bool,
    /// Accord powered the machine off and its Node is gone, or goes
    /// (`policy.dark_nodes = "delete"`): no topology domain to the
    /// scheduler until it is powered on, whether or not the Node object
    /// is still there (so the plan is the same either way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_deleted: bool,
    /// Who repartitions its MIG GPUs (its profile's `mig_via`, else the
    /// policy's).
    #[serde(default)]
    pub mig_via: MigVia,
}

/// What a node was declared as, and what it is planned with. Kept per node
/// (one `Arc`, so fleet clones stay cheap); the declared hardware is shared
/// by the nodes of one profile and MIG layout (or one model file).
#[derive(Clone, PartialEq)]
pub(crate) struct NodeSource {
    /// The declared model: synthetic for a profile, the file for `hardware`.
    pub declared: Arc<NodeHardware>,
    /// What the declaration states (what reports are compared on).
    pub stated: Stated,
    /// The node is planned with an agent's report.
    pub reported: bool,
    pub sharing: Option<Sharing>,
    pub dynamic_mig: bool,
    /// Declared labels that override model-implied ones
    /// (`nvidia.com/gpu.product`, `nvidia.com/gpu.count`).
    pub pinned_labels: BTreeMap<String, String>,
    /// Allocatable from the declaration (a scheduler view's missing keys
    /// fall back to it).
    pub allocatable: Resources,
    /// The installed model's devices (restored before a new view applies).
    pub devices: Arc<[Device]>,
    pub prints: Arc<[u64]>,
    pub counters: CounterSets,
}

impl std::fmt::Debug for NodeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSource")
            .field("reported", &self.reported)
            .field("stated", &self.stated)
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Whether it is planned with its agent's report (not its declaration).
    pub fn is_reported(&self) -> bool {
        self.source.as_deref().is_some_and(|s| s.reported)
    }

    /// Usable by the planner at all (not failed, not cordoned, not going down).
    pub fn usable(&self) -> bool {
        self.schedulable && self.failed.is_none() && self.power != PowerState::PoweringOff
    }

    pub fn is_up(&self) -> bool {
        matches!(self.power, PowerState::On | PowerState::PoweringOn)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    pub name: String,
    pub owner: Owner,
    /// Resolved node names, sorted.
    pub nodes: Vec<String>,
    pub start: Option<u64>,
    pub end: Option<u64>,
    pub lendable: bool,
    pub min_powered_on: u32,
}

impl Reservation {
    pub fn active(&self, now: u64) -> bool {
        self.start.is_none_or(|s| s <= now) && self.end.is_none_or(|e| now < e)
    }

    pub fn owns(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.owner
            .namespace
            .as_deref()
            .is_none_or(|ns| ns == namespace)
            && self
                .owner
                .selector
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && (self.owner.namespace.is_some() || !self.owner.selector.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    pub topology: TopologyConfig,
    pub policy: Policy,
    pub racks: BTreeMap<String, Rack>,
    /// Sorted by name.
    pub nodes: Vec<Node>,
    pub reservations: Vec<Reservation>,
}

/// Reads a hardware-model file named by a node; supplied by the caller so
/// the core does no I/O.
pub type HardwareLoader<'a> = dyn FnMut(&str) -> Result<NodeHardware, String> + 'a;

impl Fleet {
    /// The node named `name` (found by binary search: `nodes` stay
    /// sorted by name, as built).
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.position(name).map(|i| &self.nodes[i])
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.nodes
            .binary_search_by(|n| n.name.as_str().cmp(name))
            .ok()
    }

    /// Plans node `name` with its agent's reported model from now on (its
    /// GPUs, devices, counters and model-implied labels), keeping what is
    /// declared configuration (rack, domains, declared labels and taints,
    /// allocatable, power, GPU sharing, dynamic MIG, BIOS). Returns how the
    /// report differs from the declaration (empty: they agree), or `None`
    /// when the fleet has no such node.
    pub fn apply_report(&mut self, name: &str, hw: &NodeHardware) -> Option<Vec<Drift>> {
        let i = self.position(name)?;
        let node = &mut self.nodes[i];
        let mut source = node.source_or_default();
        let drift = compare(&source.declared, &source.stated, hw);
        source.reported = true;
        node.install(source, hw);
        Some(drift)
    }

    /// Plans node `name` with its declared model again. False when there is
    /// no such node.
    pub fn forget_report(&mut self, name: &str) -> bool {
        let Some(i) = self.position(name) else {
            return false;
        };
        let node = &mut self.nodes[i];
        let mut source = node.source_or_default();
        if !source.reported {
            return true;
        }
        source.reported = false;
        let declared = source.declared.clone();
        node.install(source, &declared);
        true
    }

    /// The model node `name` is declared with (synthetic for a profile).
    pub fn declared_hardware(&self, name: &str) -> Option<&NodeHardware> {
        self.node(name)?.source.as_deref().map(|s| &*s.declared)
    }

    /// Whether node `name` is planned with an agent's report (false when
    /// with its declaration, or when there is no such node).
    pub fn is_reported(&self, name: &str) -> bool {
        self.node(name).is_some_and(Node::is_reported)
    }

    /// Parses and validates a fleet TOML text. `file` names it in errors.
    pub fn from_toml(
        text: &str,
        file: &str,
        load_hardware: &mut HardwareLoader<'_>,
    ) -> Result<Fleet, FleetError> {
        let parsed: FleetFile = crate::config_file::parse(text, file)?;
        parsed.build(file, load_hardware)
    }
}

impl Taint {
    pub fn no_schedule(key: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: None,
            effect: TaintEffect::NoSchedule,
        }
    }
}
