//! The fleet: nodes with their hardware, power state and place in the
//! topology; racks with power budgets; reservations; the planner's policy.
//!
//! The file form is TOML (`FleetFile`), the same file admins will configure
//! accordd with. Parsing is pure: hardware-model files a node names are read
//! by the caller and handed in through a loader.

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

pub use crate::truth::{owns_label, owns_taint};
use crate::truth::{
    valid_label_key, valid_label_value, GPU_COUNT_LABEL, GPU_MODEL_LABEL, KUBERNETES_SET_LABELS,
    RESERVATION_KEY,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// Levels from widest to narrowest; nodes carry a value per level.
    #[serde(default = "default_levels")]
    pub levels: Vec<String>,
    /// Node labels are `<prefix><level>` (e.g. `topology.accord.dev/rack`).
    #[serde(default = "default_prefix")]
    pub label_prefix: String,
    /// Further label keys per level, for schedulers that already use their
    /// own (Kueue TAS `Topology` levels, `topology.kubernetes.io/rack`):
    /// nodes carry each, and topology constraints naming one mean the level.
    #[serde(default)]
    pub also_label: BTreeMap<String, Vec<String>>,
}

fn default_levels() -> Vec<String> {
    ["site", "row", "rack", "block"].map(String::from).to_vec()
}

fn default_prefix() -> String {
    "topology.accord.dev/".into()
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            levels: default_levels(),
            label_prefix: default_prefix(),
            also_label: BTreeMap::new(),
        }
    }
}

/// How the planner trades things off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// A powered node idle this long is proposed for power-off.
    #[serde(default = "default_idle")]
    pub idle_power_off_after_s: u64,
    /// Idle powered nodes kept per rack as warm spares.
    #[serde(default)]
    pub warm_spares_per_rack: u32,
    /// Idle powered nodes kept per hardware profile as warm spares (a node
    /// kept for its rack counts for its profile too).
    #[serde(default)]
    pub warm_spares_per_profile: BTreeMap<String, u32>,
    /// Propose MIG reconfiguration of idle GPUs before powering on nodes.
    #[serde(default = "yes")]
    pub reconfigure_mig: bool,
    /// How pods are spread over nodes that are already up.
    #[serde(default)]
    pub placement: Placement,
    /// What to do with a node whose agent reports hardware other than the
    /// fleet file declares.
    #[serde(default)]
    pub on_drift: OnDrift,
    /// Who repartitions MIG GPUs (a profile's `mig_via` overrides it).
    #[serde(default)]
    pub mig_via: MigVia,
    /// A node an admin cordoned is powered off when idle, as any other
    /// (default: it is left as the admin left it, on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub power_off_cordoned: bool,
}

/// Who carries out a MIG repartition on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigVia {
    /// accord-agent applies the layout through NVML itself.
    #[default]
    Agent,
    /// The NVIDIA GPU Operator's mig-manager does: accordd sets the Node
    /// label `nvidia.com/mig.config` to a named mig-parted configuration
    /// and waits for `nvidia.com/mig.config.state=success`.
    GpuOperator,
}

/// What a node whose report differs from its declaration is planned with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDrift {
    /// Plan with what the agent reports (and say what differs).
    #[default]
    PlanWithReport,
    /// Leave the node out of planning until an admin acts (fixes the
    /// machine or the declaration).
    Hold,
}

/// Node choice among nodes that are up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// First node that fits, in preference order: fast, packs nodes.
    #[default]
    FirstFit,
    /// The node whose GPU fragmentation (the free GPU capacity that the
    /// pending mix of pod shapes could not use) grows least: the FGD
    /// heuristic (Weng et al., USENIX ATC '23). Slower; best with shared
    /// GPUs.
    LeastFragmentation,
}

fn default_idle() -> u64 {
    600
}

fn yes() -> bool {
    true
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            idle_power_off_after_s: default_idle(),
            warm_spares_per_rack: 0,
            warm_spares_per_profile: BTreeMap::new(),
            reconfigure_mig: true,
            placement: Placement::FirstFit,
            on_drift: OnDrift::PlanWithReport,
            mig_via: MigVia::Agent,
            power_off_cordoned: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    On,
    #[default]
    Off,
    PoweringOn,
    PoweringOff,
}

/// A declared machine type, for nodes Accord has not seen an agent report
/// from yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    #[serde(default)]
    pub gpus: u32,
    #[serde(default)]
    pub gpu_model: Option<String>,
    #[serde(default)]
    pub gpu_memory_gib: u64,
    /// CPU allocatable, a quantity (`"192"`).
    pub cpu: String,
    /// Memory allocatable, a quantity (`"2Ti"`).
    pub memory: String,
    #[serde(default = "default_pods")]
    pub pods: i64,
    /// Power draw when on, for rack budgets.
    #[serde(default)]
    pub power_kw: f64,
    /// RDMA NICs, spread over the PCIe roots after the GPUs' ones (unset:
    /// none in the synthetic model, and reports are not checked for them).
    #[serde(default)]
    pub nics: Option<u32>,
    /// GPUs sharing one PCIe root (and one NIC, when `nics` >= roots);
    /// unset: 1 in the synthetic model, reports not checked.
    #[serde(default)]
    pub gpus_per_pcie_root: Option<u32>,
    /// NUMA nodes; unset: 2 in the synthetic model, reports not checked.
    #[serde(default)]
    pub numa_nodes: Option<u32>,
    /// MIG enabled on every GPU, with this layout (`"3g.40gb@0"`).
    #[serde(default)]
    pub mig_enabled: bool,
    #[serde(default)]
    pub mig_layout: Vec<String>,
    /// Publish MIG-capable GPUs partitionably (whole GPU and every MIG
    /// placement, sharing counters): the DRA allocator chooses the layout.
    #[serde(default)]
    pub mig_dynamic: bool,
    /// Who repartitions this profile's GPUs; unset: `policy.mig_via`.
    #[serde(default)]
    pub mig_via: Option<MigVia>,
}

impl HardwareProfile {
    /// A profile with this CPU and memory and every other key at its default.
    pub fn new(cpu: &str, memory: &str) -> Self {
        HardwareProfile {
            gpus: 0,
            gpu_model: None,
            gpu_memory_gib: 0,
            cpu: cpu.to_owned(),
            memory: memory.to_owned(),
            pods: default_pods(),
            power_kw: 0.0,
            nics: None,
            gpus_per_pcie_root: None,
            numa_nodes: None,
            mig_enabled: false,
            mig_layout: Vec::new(),
            mig_dynamic: false,
            mig_via: None,
        }
    }
}

impl NodeConfig {
    /// A node of a declared profile, every other key at its default.
    pub fn new(name: &str, profile: &str) -> Self {
        NodeConfig {
            name: name.to_owned(),
            rack: None,
            profile: Some(profile.to_owned()),
            hardware: None,
            cpu: None,
            memory: None,
            power_kw: None,
            power: PowerState::Off,
            schedulable: true,
            failed: None,
            idle_since: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            levels: BTreeMap::new(),
            extended: BTreeMap::new(),
            gpu_sharing: None,
            bios_profile: None,
            bios_profile_applied: None,
            mig_layout: None,
            mig_dynamic: None,
        }
    }
}

fn default_pods() -> i64 {
    110
}

/// Synthetic-model defaults for profile keys left unset.
const DEFAULT_GPUS_PER_PCIE_ROOT: u32 = 1;
const DEFAULT_NUMA_NODES: u32 = 2;

/// The fleet file's own plausibility limits, far above any real fleet; a
/// machine's (GPUs, NICs, NUMA nodes, pods, power) are the one table in
/// [`crate::hardware::limits`]. `validate` refuses what is past them;
/// building the fleet clamps to them as well, so nothing allocates or
/// overflows by an unchecked number even without `validate`.
pub mod max {
    /// A rack's power budget, kW (a liquid-cooled rack takes about 130).
    pub const RACK_POWER_KW: f64 = 1_000_000.0;
    /// Seconds an idle node waits for its power-off: ten years.
    pub const IDLE_POWER_OFF_AFTER_S: u64 = 10 * 365 * 24 * 3600;
    /// Warm spares kept per rack or per profile.
    pub const WARM_SPARES: u32 = 10_000;
}

/// A machine's limits as the fleet file's `u32` fields count them.
const MAX_GPUS: u32 = limits::GPUS as u32;
const MAX_NICS: u32 = limits::NICS as u32;
const MAX_NUMA_NODES: u32 = limits::NUMA_NODES as u32;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackConfig {
    pub name: String,
    #[serde(default)]
    pub site: Option<String>,
    #[serde(default)]
    pub row: Option<String>,
    #[serde(default)]
    pub block: Option<String>,
    /// Other levels by name (e.g. `nvlink_domain`).
    #[serde(default)]
    pub levels: BTreeMap<String, String>,
    pub power_budget_kw: Option<f64>,
    pub max_concurrent_power_ons: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub name: String,
    #[serde(default)]
    pub rack: Option<String>,
    /// A declared profile from `[profiles]`...
    #[serde(default)]
    pub profile: Option<String>,
    /// ...or an agent-produced hardware model (JSON file).
    #[serde(default)]
    pub hardware: Option<String>,
    /// Allocatable overrides for a `hardware` node (defaults: all threads,
    /// 95 % of memory, 110 pods).
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub power_kw: Option<f64>,
    #[serde(default)]
    pub power: PowerState,
    /// Cordoned or otherwise unusable.
    #[serde(default = "yes")]
    pub schedulable: bool,
    #[serde(default)]
    pub failed: Option<String>,
    /// Seconds since the epoch the node has had no workload.
    #[serde(default)]
    pub idle_since: Option<u64>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Levels set on the node itself (override the rack's).
    #[serde(default)]
    pub levels: BTreeMap<String, String>,
    #[serde(default)]
    pub extended: BTreeMap<String, String>,
    /// GPUs can be shared (DRA consumable capacity).
    #[serde(default)]
    pub gpu_sharing: Option<Sharing>,
    #[serde(default)]
    pub bios_profile: Option<String>,
    #[serde(default)]
    pub bios_profile_applied: Option<String>,
    /// Overrides the profile's MIG layout.
    #[serde(default)]
    pub mig_layout: Option<Vec<String>>,
    /// Overrides the profile's `mig_dynamic`.
    #[serde(default)]
    pub mig_dynamic: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    #[serde(default)]
    pub namespace: Option<String>,
    /// Workload labels that must all match.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationConfig {
    pub name: String,
    pub owner: Owner,
    /// Specific nodes...
    #[serde(default)]
    pub nodes: Vec<String>,
    /// ...or N nodes of a profile (chosen by name, stable).
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub start: Option<u64>,
    #[serde(default)]
    pub end: Option<u64>,
    /// Idle reserved nodes may serve others, reclaimably.
    #[serde(default)]
    pub lendable: bool,
    /// Reserved nodes kept powered on even when idle.
    #[serde(default)]
    pub min_powered_on: u32,
}

/// The fleet file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    #[serde(default)]
    pub topology: TopologyConfig,
    #[serde(default)]
    pub policy: Policy,
    #[serde(default)]
    pub profiles: BTreeMap<String, HardwareProfile>,
    #[serde(default)]
    pub racks: Vec<RackConfig>,
    #[serde(default)]
    pub nodes: Vec<NodeConfig>,
    #[serde(default)]
    pub reservations: Vec<ReservationConfig>,
}

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

/// Labels the model implies (rebuilt when a report replaces the model).
const MODEL_LABELS: [&str; 2] = ["nvidia.com/gpu.product", "nvidia.com/gpu.count"];

fn model_labels(hw: &NodeHardware) -> Vec<(&'static str, String)> {
    match hw.gpus.first().and_then(|g| g.model.as_deref()) {
        Some(model) => vec![
            (MODEL_LABELS[0], model.replace(' ', "-")),
            (MODEL_LABELS[1], hw.gpus.len().to_string()),
        ],
        None => Vec::new(),
    }
}

/// A model's devices as the planner holds them (shareable).
#[derive(Clone)]
struct Installed {
    gpus: Vec<PlannerGpu>,
    devices: Arc<[Device]>,
    prints: Arc<[u64]>,
    counters: CounterSets,
}

fn installed(hw: &NodeHardware, sharing: Option<Sharing>, dynamic: bool) -> Installed {
    let NodeDevices {
        gpus,
        devices,
        counters,
    } = devices_from_hardware(hw, sharing, dynamic);
    Installed {
        gpus,
        prints: devices.iter().map(crate::device::fingerprint).collect(),
        devices: devices.into(),
        counters,
    }
}

impl Node {
    /// Plans the node with `hw` from now on: GPUs, devices, counters and
    /// the model-implied labels come from it; declared settings stay.
    fn install(&mut self, source: NodeSource, hw: &NodeHardware) {
        let m = installed(hw, source.sharing, source.dynamic_mig);
        self.install_devices(source, m, hw);
    }

    fn install_devices(&mut self, mut source: NodeSource, m: Installed, hw: &NodeHardware) {
        for key in MODEL_LABELS {
            if !source.pinned_labels.contains_key(key) {
                self.labels.remove(key);
            }
        }
        for (key, value) in model_labels(hw) {
            if !source.pinned_labels.contains_key(key) {
                self.labels.insert(key.to_owned(), value);
            }
        }
        self.gpus = m.gpus;
        self.devices = m.devices.clone();
        self.device_prints = m.prints.clone();
        self.counters = m.counters.clone();
        self.viewed = false;
        source.devices = m.devices;
        source.prints = m.prints;
        source.counters = m.counters;
        self.source = Some(Arc::new(source));
    }

    /// The source record, or one made up from the node as it is (nothing
    /// declared that reports could be compared with).
    fn source_or_default(&self) -> NodeSource {
        match &self.source {
            Some(s) => NodeSource::clone(s),
            None => NodeSource {
                declared: Arc::new(NodeHardware::empty()),
                stated: Stated::default(),
                reported: false,
                sharing: None,
                dynamic_mig: false,
                pinned_labels: BTreeMap::new(),
                allocatable: self.allocatable.clone(),
                devices: self.devices.clone(),
                prints: self.device_prints.clone(),
                counters: self.counters.clone(),
            },
        }
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
        self.node(name)
            .and_then(|n| n.source.as_deref())
            .is_some_and(|s| s.reported)
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

impl FleetFile {
    /// Validates, then resolves profiles, racks and reservations into the
    /// planner's fleet.
    pub fn build(
        &self,
        file: &str,
        load_hardware: &mut HardwareLoader<'_>,
    ) -> Result<Fleet, FleetError> {
        let problems = self.validate();
        if !problems.is_empty() {
            return Err(FleetError::Invalid {
                file: file.to_owned(),
                problems,
            });
        }
        self.resolve(file, load_hardware)
    }

    /// Every problem at once, each naming the key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.topology.label_prefix.is_empty() {
            problems.push(
                "topology.label_prefix: must not be empty (Accord owns the Node labels under it)"
                    .into(),
            );
        }
        let levels = self.topology.levels.join(", ");
        for level in &self.topology.levels {
            let key = format!("{}{level}", self.topology.label_prefix);
            if !valid_label_key(&key) || KUBERNETES_SET_LABELS.contains(&key.as_str()) {
                problems.push(format!(
                    "topology.levels: {level:?} makes the label key {key:?} (label_prefix \
                     and level), not a valid Kubernetes label key Accord may own"
                ));
            }
        }
        let owned = [GPU_MODEL_LABEL, GPU_COUNT_LABEL, RESERVATION_KEY];
        for (level, keys) in &self.topology.also_label {
            if !self.topology.levels.contains(level) {
                problems.push(format!(
                    "topology.also_label.{level}: not one of topology.levels ({levels})"
                ));
            }
            for key in keys {
                if !valid_label_key(key) {
                    problems.push(format!(
                        "topology.also_label.{level}: {key:?} is not a valid Kubernetes label key"
                    ));
                } else if KUBERNETES_SET_LABELS.contains(&key.as_str())
                    || owned.contains(&key.as_str())
                {
                    problems.push(format!(
                        "topology.also_label.{level}: {key:?} is set by Kubernetes or Accord \
                         itself; Accord cannot own it as a topology label"
                    ));
                }
            }
        }
        for (p, n) in &self.policy.warm_spares_per_profile {
            if !self.profiles.contains_key(p) {
                problems.push(format!(
                    "policy.warm_spares_per_profile.{p}: no such profile"
                ));
            }
            at_most(
                &mut problems,
                &format!("policy.warm_spares_per_profile.{p}"),
                u64::from(*n),
                u64::from(max::WARM_SPARES),
            );
        }
        at_most(
            &mut problems,
            "policy.warm_spares_per_rack",
            u64::from(self.policy.warm_spares_per_rack),
            u64::from(max::WARM_SPARES),
        );
        at_most(
            &mut problems,
            "policy.idle_power_off_after_s",
            self.policy.idle_power_off_after_s,
            max::IDLE_POWER_OFF_AFTER_S,
        );
        let racks: BTreeSet<&str> = self.racks.iter().map(|r| r.name.as_str()).collect();
        if racks.len() != self.racks.len() {
            problems.push("racks: duplicate rack names".into());
        }
        // Rack names, level values and reservation names become Node label
        // values: each must be one as it is ("rack 1" would else publish as
        // "rack-1" and merge with a rack of that name).
        let mut value = |key: String, v: &str| {
            if v.is_empty() || !valid_label_value(v) {
                problems.push(format!(
                    "{key}: {v:?} is not a valid Kubernetes label value (1-63 characters, \
                     letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
                ));
            }
        };
        for r in &self.racks {
            value(format!("racks.{}.name", r.name), &r.name);
            for (level, v) in [("site", &r.site), ("row", &r.row), ("block", &r.block)] {
                if let Some(v) = v {
                    value(format!("racks.{}.{level}", r.name), v);
                }
            }
            for (level, v) in &r.levels {
                value(format!("racks.{}.levels.{level}", r.name), v);
            }
        }
        for n in &self.nodes {
            for (level, v) in &n.levels {
                value(format!("nodes.{}.levels.{level}", n.name), v);
            }
        }
        for r in &self.reservations {
            value(format!("reservations.{}.name", r.name), &r.name);
        }
        for (key, levels_of) in self
            .racks
            .iter()
            .map(|r| (format!("racks.{}.levels", r.name), &r.levels))
            .chain(
                self.nodes
                    .iter()
                    .map(|n| (format!("nodes.{}.levels", n.name), &n.levels)),
            )
        {
            for level in levels_of.keys() {
                if !self.topology.levels.contains(level) {
                    problems.push(format!(
                        "{key}.{level}: not one of topology.levels ({levels})"
                    ));
                }
            }
        }
        for r in &self.racks {
            if let Some(kw) = r.power_budget_kw {
                if !(kw.is_finite() && kw > 0.0 && kw <= max::RACK_POWER_KW) {
                    problems.push(format!(
                        "racks.{}.power_budget_kw: {kw} is not a power budget (kW, above 0 \
                         and at most {})",
                        r.name,
                        max::RACK_POWER_KW
                    ));
                }
            }
            if r.max_concurrent_power_ons == Some(0) {
                problems.push(format!(
                    "racks.{}.max_concurrent_power_ons: must be at least 1",
                    r.name
                ));
            }
        }
        for (name, p) in &self.profiles {
            let key = |k: &str| format!("profiles.{name}.{k}");
            problems.extend(quantity_problem(&key("cpu"), &p.cpu));
            problems.extend(quantity_problem(&key("memory"), &p.memory));
            if p.gpus > 0 && p.gpu_model.is_none() {
                problems.push(format!("profiles.{name}.gpu_model: required when gpus > 0"));
            }
            at_most(
                &mut problems,
                &key("gpus"),
                u64::from(p.gpus),
                u64::from(MAX_GPUS),
            );
            at_most(
                &mut problems,
                &key("gpu_memory_gib"),
                p.gpu_memory_gib,
                limits::GPU_MEMORY_GIB,
            );
            if let Some(nics) = p.nics {
                at_most(
                    &mut problems,
                    &key("nics"),
                    u64::from(nics),
                    u64::from(MAX_NICS),
                );
            }
            if !(0..=limits::PODS).contains(&p.pods) {
                problems.push(format!(
                    "profiles.{name}.pods: {} is not a pod limit (0 to {})",
                    p.pods,
                    limits::PODS
                ));
            }
            problems.extend(power_problem(&key("power_kw"), p.power_kw));
            for (k, value, limit) in [
                (
                    "gpus_per_pcie_root",
                    p.gpus_per_pcie_root,
                    limits::GPUS_PER_PCIE_ROOT,
                ),
                ("numa_nodes", p.numa_nodes, MAX_NUMA_NODES),
            ] {
                match value {
                    Some(0) => problems.push(format!("profiles.{name}.{k}: must be at least 1")),
                    Some(n) => at_most(&mut problems, &key(k), u64::from(n), u64::from(limit)),
                    None => {}
                }
            }
            problems.extend(layout_problem(&key("mig_layout"), p, &p.mig_layout));
        }
        let mut names = BTreeSet::new();
        for n in &self.nodes {
            if !names.insert(n.name.as_str()) {
                problems.push(format!("nodes.{}: duplicate node name", n.name));
            }
            if let Some(r) = &n.rack {
                if !racks.contains(r.as_str()) {
                    problems.push(format!("nodes.{}.rack: unknown rack {r:?}", n.name));
                }
            }
            match (&n.profile, &n.hardware) {
                (Some(p), None) if !self.profiles.contains_key(p) => {
                    problems.push(format!("nodes.{}.profile: unknown profile {p:?}", n.name));
                }
                (None, None) => {
                    problems.push(format!("nodes.{}: needs `profile` or `hardware`", n.name))
                }
                (Some(_), Some(_)) => {
                    problems.push(format!(
                        "nodes.{}: `profile` and `hardware` are exclusive",
                        n.name
                    ));
                }
                _ => {}
            }
            for (key, q) in [("cpu", &n.cpu), ("memory", &n.memory)] {
                if let Some(q) = q {
                    problems.extend(quantity_problem(&format!("nodes.{}.{key}", n.name), q));
                }
            }
            for (k, q) in &n.extended {
                problems.extend(quantity_problem(
                    &format!("nodes.{}.extended.{k}", n.name),
                    q,
                ));
            }
            if let Some(kw) = n.power_kw {
                problems.extend(power_problem(&format!("nodes.{}.power_kw", n.name), kw));
            }
            // A node of a profile: its layout on the profile's GPUs; one
            // with a model file: checked on its GPUs once loaded.
            if let (Some(layout), Some(p)) = (
                &n.mig_layout,
                n.profile.as_ref().and_then(|p| self.profiles.get(p)),
            ) {
                problems.extend(layout_problem(
                    &format!("nodes.{}.mig_layout", n.name),
                    p,
                    layout,
                ));
            }
        }
        let mut res_names = BTreeSet::new();
        for r in &self.reservations {
            if !res_names.insert(r.name.as_str()) {
                problems.push(format!("reservations.{}: duplicate name", r.name));
            }
            if r.owner.namespace.is_none() && r.owner.selector.is_empty() {
                problems.push(format!(
                    "reservations.{}.owner: needs a namespace or a selector",
                    r.name
                ));
            }
            for n in &r.nodes {
                if !names.contains(n.as_str()) {
                    problems.push(format!("reservations.{}.nodes: unknown node {n:?}", r.name));
                }
            }
            match (r.nodes.is_empty(), r.count, &r.profile) {
                (false, None, None) => {}
                (true, Some(_), Some(p)) => {
                    if !self.profiles.contains_key(p) {
                        problems.push(format!(
                            "reservations.{}.profile: unknown profile {p:?}",
                            r.name
                        ));
                    }
                }
                _ => problems.push(format!(
                    "reservations.{}: give either `nodes`, or `count` and `profile`",
                    r.name
                )),
            }
            if let (Some(s), Some(e)) = (r.start, r.end) {
                if e <= s {
                    problems.push(format!("reservations.{}.end: must be after start", r.name));
                }
            }
        }
        problems
    }

    fn resolve(
        &self,
        file: &str,
        load_hardware: &mut HardwareLoader<'_>,
    ) -> Result<Fleet, FleetError> {
        let racks: BTreeMap<String, Rack> = self
            .racks
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    Rack {
                        name: r.name.clone(),
                        // Checked; unchecked, a budget that is not a
                        // number powers nothing on (NaN would pass every
                        // comparison with it).
                        power_budget_kw: r
                            .power_budget_kw
                            .map(|kw| if kw.is_nan() { 0.0 } else { kw }),
                        max_concurrent_power_ons: r.max_concurrent_power_ons,
                    },
                )
            })
            .collect();
        // One declared model per (profile or file, MIG layout), and one
        // device list per (model, sharing, dynamic MIG): 40,000 nodes of a
        // few profiles hold a few copies, not 40,000.
        type ModelKey = (bool, String, Option<Vec<String>>);
        let mut models: BTreeMap<ModelKey, Arc<NodeHardware>> = BTreeMap::new();
        type DeviceKey = (usize, Option<(Option<Milli>, Option<Milli>)>, bool);
        let mut device_lists: BTreeMap<DeviceKey, Installed> = BTreeMap::new();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for cfg in &self.nodes {
            let (hw, stated, cpu, memory, pods, power_kw) = match (&cfg.profile, &cfg.hardware) {
                (Some(p), _) => {
                    let prof = &self.profiles[p];
                    let layout = cfg
                        .mig_layout
                        .clone()
                        .unwrap_or_else(|| prof.mig_layout.clone());
                    let key = (false, p.clone(), prof.mig_enabled.then_some(layout));
                    let hw = match models.get(&key) {
                        Some(hw) => hw.clone(),
                        None => {
                            let layout = key.2.as_deref().unwrap_or_default();
                            let hw = Arc::new(hardware_from_profile(prof, layout));
                            models.insert(key, hw.clone());
                            hw
                        }
                    };
                    (
                        hw,
                        Stated::profile(prof, self.dynamic_mig(cfg)),
                        allocatable(&prof.cpu).unwrap_or(0),
                        allocatable(&prof.memory).unwrap_or(0),
                        prof.pods.clamp(0, limits::PODS),
                        prof.power_kw,
                    )
                }
                (None, Some(path)) => {
                    let key = (true, path.clone(), cfg.mig_layout.clone());
                    let hw = match models.get(&key) {
                        Some(hw) => hw.clone(),
                        None => {
                            let mut hw =
                                load_hardware(path).map_err(|reason| FleetError::Hardware {
                                    file: file.to_owned(),
                                    node: cfg.name.clone(),
                                    path: path.clone(),
                                    reason,
                                })?;
                            if let Some(layout) = &cfg.mig_layout {
                                let key = format!("nodes.{}.mig_layout", cfg.name);
                                if let Some(problem) = model_layout_problem(&key, &hw, layout) {
                                    return Err(FleetError::Invalid {
                                        file: file.to_owned(),
                                        problems: vec![problem],
                                    });
                                }
                                apply_layout(&mut hw, layout);
                            }
                            let hw = Arc::new(hw);
                            models.insert(key, hw.clone());
                            hw
                        }
                    };
                    let cpu = i64::from(hw.machine.threads) * 1000;
                    let mem = crate::device::to_milli(hw.machine.memory_bytes / 100 * 95);
                    (hw, Stated::model(self.dynamic_mig(cfg)), cpu, mem, 110, 0.0)
                }
                (None, None) => unreachable!("validated"),
            };
            let dynamic = self.dynamic_mig(cfg);
            let sharing = cfg.gpu_sharing;
            let dkey = (
                Arc::as_ptr(&hw) as usize,
                sharing.map(|s| (s.min_compute_milli, s.step_compute_milli)),
                dynamic,
            );
            let m = device_lists
                .entry(dkey)
                .or_insert_with(|| installed(&hw, sharing, dynamic))
                .clone();
            nodes.push(self.resolve_node(cfg, hw, stated, m, cpu, memory, pods, power_kw));
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let reservations = self
            .reservations
            .iter()
            .map(|r| {
                let mut members = r.nodes.clone();
                if let (Some(count), Some(profile)) = (r.count, &r.profile) {
                    members = nodes
                        .iter()
                        .filter(|n| n.profile.as_deref() == Some(profile.as_str()))
                        .take(count as usize)
                        .map(|n| n.name.clone())
                        .collect();
                }
                members.sort();
                Reservation {
                    name: r.name.clone(),
                    owner: r.owner.clone(),
                    nodes: members,
                    start: r.start,
                    end: r.end,
                    lendable: r.lendable,
                    min_powered_on: r.min_powered_on,
                }
            })
            .collect();
        Ok(Fleet {
            topology: self.topology.clone(),
            policy: self.policy.clone(),
            racks,
            nodes,
            reservations,
        })
    }

    /// The node's `mig_dynamic`, else its profile's.
    fn dynamic_mig(&self, cfg: &NodeConfig) -> bool {
        cfg.mig_dynamic.unwrap_or_else(|| {
            cfg.profile
                .as_ref()
                .and_then(|p| self.profiles.get(p))
                .is_some_and(|p| p.mig_dynamic)
        })
    }

    /// The node's profile's `mig_via`, else the policy's.
    fn mig_via(&self, cfg: &NodeConfig) -> MigVia {
        cfg.profile
            .as_ref()
            .and_then(|p| self.profiles.get(p))
            .and_then(|p| p.mig_via)
            .unwrap_or(self.policy.mig_via)
    }

    #[allow(clippy::too_many_arguments)]
    fn resolve_node(
        &self,
        cfg: &NodeConfig,
        hw: Arc<NodeHardware>,
        stated: Stated,
        m: Installed,
        cpu: Milli,
        memory: Milli,
        pods: i64,
        power_kw: f64,
    ) -> Node {
        let mut domains = BTreeMap::new();
        if let Some(rack) = cfg
            .rack
            .as_ref()
            .and_then(|r| self.racks.iter().find(|x| &x.name == r))
        {
            for (level, v) in [
                ("site", &rack.site),
                ("row", &rack.row),
                ("block", &rack.block),
            ] {
                if let Some(v) = v {
                    domains.insert(level.to_owned(), v.clone());
                }
            }
            domains.insert("rack".to_owned(), rack.name.clone());
            domains.extend(rack.levels.clone());
        }
        domains.extend(cfg.levels.clone());
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/hostname".to_owned(), cfg.name.clone());
        for (level, v) in domains
            .iter()
            .filter(|(l, _)| self.topology.levels.contains(l))
        {
            labels.insert(format!("{}{level}", self.topology.label_prefix), v.clone());
            for key in self.topology.also_label.get(level).into_iter().flatten() {
                labels.insert(key.clone(), v.clone());
            }
        }
        for (key, value) in model_labels(&hw) {
            labels.insert(key.to_owned(), value);
        }
        labels.extend(cfg.labels.clone());
        let extended = cfg
            .extended
            .iter()
            .map(|(k, v)| (k.clone(), allocatable(v).unwrap_or(0)))
            .collect();
        let allocatable = Resources {
            cpu: cfg.cpu.as_deref().and_then(allocatable).unwrap_or(cpu),
            memory: cfg
                .memory
                .as_deref()
                .and_then(allocatable)
                .unwrap_or(memory),
            pods,
            extended,
        };
        let source = NodeSource {
            declared: hw,
            stated,
            reported: false,
            sharing: cfg.gpu_sharing,
            dynamic_mig: self.dynamic_mig(cfg),
            pinned_labels: cfg
                .labels
                .iter()
                .filter(|(k, _)| MODEL_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            allocatable: allocatable.clone(),
            devices: m.devices.clone(),
            prints: m.prints.clone(),
            counters: m.counters.clone(),
        };
        Node {
            name: cfg.name.clone(),
            rack: cfg.rack.clone(),
            profile: cfg.profile.clone(),
            domains,
            labels,
            taints: cfg.taints.clone(),
            power: cfg.power,
            schedulable: cfg.schedulable,
            failed: cfg.failed.clone(),
            idle_since: cfg.idle_since,
            allocatable,
            power_kw: power_draw(cfg.power_kw.unwrap_or(power_kw)),
            bios_profile: cfg.bios_profile.clone(),
            bios_profile_applied: cfg.bios_profile_applied.clone(),
            gpus: m.gpus,
            devices: m.devices,
            counters: m.counters,
            device_prints: m.prints,
            source: Some(Arc::new(source)),
            viewed: false,
            mig_via: self.mig_via(cfg),
        }
    }
}

/// `"3g.40gb@4"` → (profile, start).
pub fn parse_layout_entry(entry: &str) -> Option<(&str, u32)> {
    let (profile, start) = entry.split_once('@')?;
    Some((profile, start.parse().ok()?))
}

/// A declared allocatable amount: a quantity, not negative (`validate`
/// refuses others; unchecked, they count as not given).
fn allocatable(q: &str) -> Option<Milli> {
    quantity::parse(q).ok().filter(|v| *v >= 0)
}

/// A declared power draw as the planner sums it: checked by `validate`;
/// unchecked, one that is not a number or past the limit counts as the
/// limit (never as free), a negative one as none.
fn power_draw(kw: f64) -> f64 {
    if kw.is_nan() {
        limits::NODE_POWER_KW
    } else {
        kw.clamp(0.0, limits::NODE_POWER_KW)
    }
}

/// `KEY: VALUE is above the limit of LIMIT`, when it is.
fn at_most(problems: &mut Vec<String>, key: &str, value: u64, limit: u64) {
    if value > limit {
        problems.push(format!("{key}: {value} is above the limit of {limit}"));
    }
}

/// Why `q` is no allocatable amount: not a quantity, or negative.
fn quantity_problem(key: &str, q: &str) -> Option<String> {
    match quantity::parse(q) {
        Err(_) => Some(format!("{key}: invalid quantity {q:?}")),
        Ok(v) if v < 0 => Some(format!("{key}: negative quantity {q:?}")),
        Ok(_) => None,
    }
}

/// Why `kw` is no node's power draw: not a number (NaN would pass every
/// rack budget), infinite, negative, or past [`limits::NODE_POWER_KW`].
fn power_problem(key: &str, kw: f64) -> Option<String> {
    (!(kw.is_finite() && (0.0..=limits::NODE_POWER_KW).contains(&kw))).then(|| {
        format!(
            "{key}: {kw} is not a power draw (kW, 0 to {})",
            limits::NODE_POWER_KW
        )
    })
}

/// A GPU with MIG enabled, no instances, and these profiles.
fn empty_mig(profiles: Vec<MigProfile>) -> MigState {
    MigState {
        capable: true,
        current_mode: MigMode::Enabled,
        pending_mode: MigMode::Enabled,
        profiles,
        gpu_instances: Vec::new(),
    }
}

/// Why `layout` does not fit the GPUs of profile `p`: an entry that is not
/// `PROFILE@START`, or (as [`MigState::with_layout`] finds) a profile or
/// placement the GPU model's published table lacks, instances that
/// overlap, more of a profile than a GPU holds. A layout for a GPU model
/// without a table is an error where MIG is enabled: nothing could check
/// it, and its instances would be made up.
fn layout_problem(key: &str, p: &HardwareProfile, layout: &[String]) -> Option<String> {
    if layout.is_empty() {
        return None;
    }
    if let Some(entry) = layout.iter().find(|e| parse_layout_entry(e).is_none()) {
        return Some(format!("{key}: {entry:?} is not PROFILE@START"));
    }
    let model = p.gpu_model.as_deref().unwrap_or_default();
    match p.gpu_model.as_deref().and_then(catalog::profiles_for_model) {
        Some(profiles) => empty_mig(profiles)
            .with_layout(layout)
            .err()
            .map(|e| format!("{key}: {e} ({model})")),
        None if p.mig_enabled => Some(format!(
            "{key}: no published MIG profile table for gpu_model {model:?} to check it \
             against (Accord has NVIDIA's for A100 40GB and 80GB and H100 80GB)"
        )),
        None => None,
    }
}

/// Why `layout` does not fit the GPUs of a node's model file: as
/// [`layout_problem`], on each GPU with a published table; none having
/// one is an error too.
fn model_layout_problem(key: &str, hw: &NodeHardware, layout: &[String]) -> Option<String> {
    if layout.is_empty() {
        return None;
    }
    if let Some(entry) = layout.iter().find(|e| parse_layout_entry(e).is_none()) {
        return Some(format!("{key}: {entry:?} is not PROFILE@START"));
    }
    let mut tables = 0;
    for gpu in &hw.gpus {
        let Some(model) = gpu.model.as_deref() else {
            continue;
        };
        let Some(profiles) = catalog::profiles_for_model(model) else {
            continue;
        };
        tables += 1;
        if let Err(e) = empty_mig(profiles).with_layout(layout) {
            return Some(format!("{key}: GPU {}: {e} ({model})", gpu.index));
        }
    }
    (tables == 0).then(|| {
        format!(
            "{key}: no GPU of the model has a published MIG profile table to check it \
             against (Accord has NVIDIA's for A100 40GB and 80GB and H100 80GB)"
        )
    })
}

/// Applies a MIG layout to every MIG-capable GPU (mode on, these
/// instances). The layout was checked (`validate`, `resolve`); one that
/// does not fit a GPU (possible only unchecked) leaves it without
/// instances rather than with made-up or overlapping ones.
fn apply_layout(hw: &mut NodeHardware, layout: &[String]) {
    for gpu in &mut hw.gpus {
        let Some(profiles) = gpu.model.as_deref().and_then(catalog::profiles_for_model) else {
            continue;
        };
        let empty = empty_mig(profiles);
        gpu.mig = Some(empty.with_layout(layout).unwrap_or(empty));
    }
}

/// A synthetic hardware model for a declared profile: GPUs and NICs spread
/// over PCIe roots and NUMA nodes the way HGX boards are built. Counts are
/// clamped to the [`max`] limits `validate` holds them to: nothing here
/// allocates or overflows by an unchecked number.
pub fn hardware_from_profile(p: &HardwareProfile, mig_layout: &[String]) -> NodeHardware {
    let mut hw = NodeHardware::empty();
    hw.machine.memory_bytes =
        u64::try_from(quantity::parse(&p.memory).unwrap_or(0).max(0) / 1000).unwrap_or(0);
    let gpus = p.gpus.min(MAX_GPUS);
    let per_root = p
        .gpus_per_pcie_root
        .unwrap_or(DEFAULT_GPUS_PER_PCIE_ROOT)
        .clamp(1, limits::GPUS_PER_PCIE_ROOT);
    let roots = gpus.div_ceil(per_root).max(1);
    let numa = p
        .numa_nodes
        .unwrap_or(DEFAULT_NUMA_NODES)
        .clamp(1, MAX_NUMA_NODES);
    // Both at most 64: no overflow.
    let root_numa = |r: u32| (r * numa / roots).min(numa - 1);
    for id in 0..numa {
        hw.numa_nodes.push(NumaNode {
            id,
            cpuset: String::new(),
            cpus: 0,
            memory_bytes: hw.machine.memory_bytes / u64::from(numa),
        });
    }
    let memory_bytes = p.gpu_memory_gib.min(limits::GPU_MEMORY_GIB) << 30;
    for i in 0..gpus {
        let r = i / per_root;
        let (domain, bus) = root_bus(r);
        hw.gpus.push(Gpu {
            index: i,
            uuid: None,
            pci_bus_id: PciBusId::new(domain, bus, (i % per_root) as u8, 0),
            vendor: Some("NVIDIA Corporation".into()),
            model: p.gpu_model.clone(),
            memory_bytes: Some(memory_bytes),
            architecture: None,
            compute_capability: None,
            numa_node: Some(root_numa(r)),
            pcie_root: Some(root_name(r)),
            pcie_switch: None,
            serial: None,
            os_devices: Vec::new(),
            fabric: None,
            mig: None,
            sources: vec![Source::Hwloc],
        });
    }
    for k in 0..p.nics.unwrap_or(0).min(MAX_NICS) {
        let r = k % roots;
        let (domain, bus) = root_bus(r);
        hw.nics.push(Nic {
            name: format!("ib{k}"),
            kind: NicKind::Infiniband,
            pci_bus_id: Some(PciBusId::new(domain, bus, 0x1f, 0)),
            vendor: None,
            model: None,
            numa_node: Some(root_numa(r)),
            pcie_root: Some(root_name(r)),
            pcie_switch: None,
            interfaces: vec![format!("ib{k}")],
            rdma_devices: vec![format!("mlx5_{k}")],
            link_speed_mbps: None,
            address: None,
        });
    }
    if p.mig_enabled {
        apply_layout(&mut hw, mig_layout);
    }
    hw
}

/// The PCI domain and bus of synthetic PCIe root `r`: buses 0x10, 0x20, ...
/// 0xf0 of domain 0, then the same of domain 1, and so on (a bus number is
/// one byte: 64 roots must not wrap onto each other).
fn root_bus(r: u32) -> (u32, u8) {
    let bus = 0x10 + (r % 15) * 0x10;
    (r / 15, u8::try_from(bus).unwrap_or(0xf0))
}

/// Synthetic PCIe root `r`'s name, as hwloc spells a host bridge.
fn root_name(r: u32) -> String {
    let (domain, bus) = root_bus(r);
    format!("pci{domain:04x}:{bus:02x}")
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
