//! The fleet file's TOML form, as admins write it: topology, policy,
//! hardware profiles, racks, nodes and reservations, with their defaults.

use super::*;

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

pub(super) fn default_levels() -> Vec<String> {
    ["site", "row", "rack", "block"].map(String::from).to_vec()
}

pub(super) fn default_prefix() -> String {
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
    /// How a machine Accord powered off appears to Kubernetes (default:
    /// its Node is deleted, and restored when its kubelet registers again).
    #[serde(default, skip_serializing_if = "DarkNodes::is_default")]
    pub dark_nodes: DarkNodes,
    /// Capacity kept warm ahead of demand (default: none beyond the spares).
    #[serde(default, skip_serializing_if = "Warm::is_off")]
    pub warm: Warm,
    /// `warm = "predictive"`: how far ahead arrivals are kept warm for
    /// (about a boot: the capacity must be up when they come).
    #[serde(
        default = "default_warm_lookahead",
        skip_serializing_if = "is_default_warm_lookahead"
    )]
    pub warm_lookahead_s: u64,
    /// `warm = "predictive"`: keep warm for this many arrivals, the
    /// percentile of the arrivals expected in the lookahead (Poisson).
    #[serde(
        default = "default_warm_coverage",
        skip_serializing_if = "is_default_warm_coverage"
    )]
    pub warm_coverage_percent: u32,
    /// `warm = "predictive"`: GPU-hours of capacity held warm (for
    /// predicted, not pending, work) at most in any 24 hours; required.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warm_budget_gpu_hours_per_day: u32,
    /// Among choices of equal cost (power-ons, cold racks, power, MIG
    /// repartitions), the one whose nodes accordd measured to boot
    /// fastest wins (default: the first in the fleet file's order).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefer_fast_boot: bool,
    /// A node kept off for a standby CapacityBuffer
    /// (`accord.dev/standby-capacity`) is ready for it while its BIOS
    /// profile is verified and its agent reported within this long; else
    /// it is powered on to stage and verify them, then off again.
    #[serde(
        default = "default_standby_refresh",
        skip_serializing_if = "is_default_standby_refresh"
    )]
    pub standby_refresh_s: u64,
}

/// Capacity kept warm ahead of demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Warm {
    /// None but `warm_spares_*` (idle nodes kept, never powered on for it).
    #[default]
    Off,
    /// Placeholders shaped like the latest arrivals, as many as the
    /// arrival rate (recent, or at this time of day) makes likely within
    /// `warm_lookahead_s`, planned after all real demand and never bound:
    /// the capacity they hold is powered on ahead of time and kept.
    Predictive,
}

impl Warm {
    fn is_off(&self) -> bool {
        *self == Warm::Off
    }
}

pub(super) fn default_standby_refresh() -> u64 {
    7 * 24 * 3600
}

fn is_default_standby_refresh(s: &u64) -> bool {
    *s == default_standby_refresh()
}

pub(super) fn default_warm_lookahead() -> u64 {
    600
}

fn is_default_warm_lookahead(s: &u64) -> bool {
    *s == default_warm_lookahead()
}

pub(super) fn default_warm_coverage() -> u32 {
    90
}

fn is_default_warm_coverage(p: &u32) -> bool {
    *p == default_warm_coverage()
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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

/// How a machine Accord powered off appears to Kubernetes
/// (docs/kubernetes.md, "Dark machines").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DarkNodes {
    /// Once the power-off is confirmed (the `accord.dev/powering-off`
    /// taint on the Node, no work pod, the BMC reading Off), accordd
    /// deletes the Node, as cluster-autoscaler and Karpenter do when they
    /// remove capacity; it keeps the Node's labels, taints, annotations
    /// and cordon, and puts back those the Node lacks when the machine's
    /// kubelet registers it again.
    #[default]
    Delete,
    /// The Node stays, NotReady, while the machine is off: DaemonSet
    /// rolling updates stall on it, and a zone mostly dark turns the node
    /// lifecycle controller's evictions off.
    Keep,
}

impl DarkNodes {
    fn is_default(&self) -> bool {
        *self == DarkNodes::Delete
    }
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

pub(super) fn default_idle() -> u64 {
    600
}

pub(super) fn yes() -> bool {
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
            dark_nodes: DarkNodes::Delete,
            warm: Warm::Off,
            warm_lookahead_s: default_warm_lookahead(),
            warm_coverage_percent: default_warm_coverage(),
            warm_budget_gpu_hours_per_day: 0,
            prefer_fast_boot: false,
            standby_refresh_s: default_standby_refresh(),
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

pub(super) fn default_pods() -> i64 {
    110
}

/// Synthetic-model defaults for profile keys left unset.
pub(super) const DEFAULT_GPUS_PER_PCIE_ROOT: u32 = 1;

pub(super) const DEFAULT_NUMA_NODES: u32 = 2;

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
    /// `warm_lookahead_s`: a day.
    pub const WARM_LOOKAHEAD_S: u64 = 24 * 3600;
    /// `standby_refresh_s`: a year.
    pub const STANDBY_REFRESH_S: u64 = 365 * 24 * 3600;
    /// `warm_budget_gpu_hours_per_day`: a million GPUs all day.
    pub const WARM_BUDGET_GPU_HOURS_PER_DAY: u32 = 24_000_000;
}

/// A machine's limits as the fleet file's `u32` fields count them.
pub(super) const MAX_GPUS: u32 = limits::GPUS as u32;

pub(super) const MAX_NICS: u32 = limits::NICS as u32;

pub(super) const MAX_NUMA_NODES: u32 = limits::NUMA_NODES as u32;

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
