//! Hardware truth: what a node is, when its agent and the cluster say
//! something other than the fleet file declares.
//!
//! Precedence, per node: the scheduler's view (the Kubernetes Node's
//! labels, taints and allocatable, and the DRA driver's ResourceSlices)
//! for what fit checks; the agent's last report for the hardware model;
//! the fleet file's declaration for machines never seen. Where report and
//! declaration disagree, or the scheduler's devices differ from the
//! model's, that is [`Drift`]. Pure: the daemon observes, this compares.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::demand::{Taint, TaintEffect};
use crate::device::{
    fingerprint, AttrValue, CounterSets, Device, DeviceKind, GPU_DRIVER, NIC_DRIVER, PCI_BUS_ID,
};
use crate::fit::{GPU_RESOURCE, MIG_RESOURCE_PREFIX};
use crate::fleet::{Fleet, HardwareProfile, Node, TopologyConfig};
use crate::hardware::{Gpu, MigMode, NicKind, NodeHardware};
use crate::quantity;

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

/// What Accord publishes on one Node: the keys it owns, with the values
/// they should have. Keys Accord owns that are absent here are removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Publication {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

/// Which facts a node's declaration states: what [`compare`] checks. A
/// profile states only its keys that are set (an undeclared key never
/// drifts); a model file (`hardware = FILE`) states everything it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stated {
    pub gpu_count: bool,
    pub gpu_model: bool,
    pub gpu_memory: bool,
    /// MIG mode and layout per GPU. Not for dynamic MIG: there the DRA
    /// driver creates instances as it allocates.
    pub mig: bool,
    pub numa_nodes: bool,
    pub pcie: Option<PcieStated>,
    pub nics: bool,
    pub nvlink: bool,
}

/// How a declaration states where GPUs sit on PCIe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PcieStated {
    /// A profile's `gpus_per_pcie_root`: the reported GPUs should sit
    /// under ceil(GPUs / n) roots.
    GpusPerRoot(u32),
    /// A model's GPUs' root ids.
    Roots,
}

impl Stated {
    /// What a profile states: GPU count always; model, memory (when > 0),
    /// NUMA nodes, GPUs per PCIe root and NICs when set; MIG mode and
    /// layout unless MIG is dynamic.
    pub fn profile(p: &HardwareProfile, mig_dynamic: bool) -> Stated {
        Stated {
            gpu_count: true,
            gpu_model: p.gpu_model.is_some(),
            gpu_memory: p.gpu_memory_gib > 0,
            mig: !mig_dynamic,
            numa_nodes: p.numa_nodes.is_some(),
            pcie: p.gpus_per_pcie_root.map(PcieStated::GpusPerRoot),
            nics: p.nics.is_some(),
            nvlink: false,
        }
    }

    /// What a full model states: everything (MIG unless dynamic).
    pub fn model(mig_dynamic: bool) -> Stated {
        Stated {
            gpu_count: true,
            gpu_model: true,
            gpu_memory: true,
            mig: !mig_dynamic,
            numa_nodes: true,
            pcie: Some(PcieStated::Roots),
            nics: true,
            nvlink: true,
        }
    }
}

/// How `reported` differs from the `declared` model, on what `stated`
/// says the declaration states. Deterministic: by kind, then GPU index.
///
/// GPU models are compared as a multiset when the counts agree, else as a
/// set (one missing GPU is a count drift, not a model drift too). GPU
/// memory agrees within 5 % of the declared GiB, or of the declared number
/// read as GB (NVML reports 81559 MiB for an "80GB" H100, 46068 MiB for a
/// "48GB" L40S). MIG is compared per GPU index (a profile's GPUs are all
/// alike); a GPU without MIG state counts as MIG disabled; instances whose
/// placement is unknown are compared by profile only. NUMA nodes, PCIe
/// roots and NVLink are not compared when either side does not know them
/// (a model without NUMA nodes, GPUs without a root).
pub fn compare(declared: &NodeHardware, stated: &Stated, reported: &NodeHardware) -> Vec<Drift> {
    let mut out = Vec::new();
    let mut push = |what, declared: String, reported: String| {
        out.push(Drift {
            what,
            declared,
            reported,
        })
    };
    let (dn, rn) = (declared.gpus.len(), reported.gpus.len());
    if stated.gpu_count && dn != rn {
        push(DriftKind::GpuCount, dn.to_string(), rn.to_string());
    }
    if stated.gpu_model {
        let (d, r) = (declared.gpu_models(), reported.gpu_models());
        let differ = if dn == rn {
            d != r
        } else {
            !d.keys().eq(r.keys())
        };
        if differ {
            push(DriftKind::GpuModel, counted(&d), counted(&r));
        }
    }
    if stated.gpu_memory {
        let d: Vec<u64> = declared
            .gpus
            .iter()
            .filter_map(|g| g.memory_bytes)
            .collect();
        let r: Vec<u64> = reported
            .gpus
            .iter()
            .filter_map(|g| g.memory_bytes)
            .collect();
        if !d.is_empty() && !r.is_empty() && !memory_agrees(&d, &r) {
            push(DriftKind::GpuMemory, gib_text(&d), gib_text(&r));
        }
    }
    if stated.mig {
        let uniform = declared.gpus.windows(2).all(|w| w[0].mig == w[1].mig);
        for g in &reported.gpus {
            let Some(dg) = declared
                .gpus
                .iter()
                .find(|d| d.index == g.index)
                .or_else(|| declared.gpus.first().filter(|_| uniform))
            else {
                continue;
            };
            let (dm, rm) = (mig_on(dg), mig_on(g));
            let i = g.index;
            if dm != rm {
                let mode = |on: bool| if on { "enabled" } else { "disabled" };
                push(
                    DriftKind::MigMode,
                    format!("GPU {i}: {}", mode(dm)),
                    format!("GPU {i}: {}", mode(rm)),
                );
            } else if dm && !same_layout(dg, g) {
                push(
                    DriftKind::MigLayout,
                    format!("GPU {i}: {}", layout_text(dg)),
                    format!("GPU {i}: {}", layout_text(g)),
                );
            }
        }
    }
    if stated.numa_nodes {
        let (d, r) = (declared.numa_nodes.len(), reported.numa_nodes.len());
        if d > 0 && r > 0 && d != r {
            push(DriftKind::NumaNodes, d.to_string(), r.to_string());
        }
    }
    match stated.pcie {
        Some(PcieStated::GpusPerRoot(n)) => {
            let roots = reported.gpu_pcie_roots().len();
            let want = rn.div_ceil(n.max(1) as usize);
            if roots > 0 && roots != want {
                let per = if n == 1 { "GPU" } else { "GPUs" };
                push(
                    DriftKind::PcieRoots,
                    format!("{want} ({n} {per} per root)"),
                    roots.to_string(),
                );
            }
        }
        Some(PcieStated::Roots) => {
            let (d, r) = (declared.gpu_pcie_roots(), reported.gpu_pcie_roots());
            if !d.is_empty() && !r.is_empty() && d != r {
                push(DriftKind::PcieRoots, roots_text(&d), roots_text(&r));
            }
        }
        None => {}
    }
    if stated.nics {
        let (d, r) = (rdma_nics(declared), rdma_nics(reported));
        if d != r {
            push(DriftKind::Nics, d.to_string(), r.to_string());
        }
    }
    if stated.nvlink {
        let (d, r) = (nvlink_summary(declared), nvlink_summary(reported));
        let links_differ = matches!((d.1, r.1), (Some(a), Some(b)) if a != b);
        if d.0 != r.0 || links_differ {
            push(DriftKind::NvLink, nvlink_text(&d), nvlink_text(&r));
        }
    }
    out.sort_by_key(|d| d.what);
    out
}

/// `"NVIDIA H100 80GB HBM3 x8"`, several joined by `", "`; `"none"`.
fn counted(items: &BTreeMap<String, usize>) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn memory_agrees(declared: &[u64], reported: &[u64]) -> bool {
    let close = |d: u64, r: u64| {
        let (d, r) = (d as f64, r as f64);
        let as_gb = d / f64::from(1u32 << 30) * 1e9;
        (r - d).abs() <= 0.05 * d || (r - as_gb).abs() <= 0.05 * as_gb
    };
    reported
        .iter()
        .all(|&r| declared.iter().any(|&d| close(d, r)))
        && declared
            .iter()
            .all(|&d| reported.iter().any(|&r| close(d, r)))
}

/// Memory per GPU in whole GiB (rounded): `"80 GiB"`, or
/// `"40 GiB x4, 80 GiB x4"` when GPUs differ.
fn gib_text(bytes: &[u64]) -> String {
    let mut by: BTreeMap<u64, usize> = BTreeMap::new();
    for b in bytes {
        // Rounded; saturating: `b` is the agent's, and may be anything.
        *by.entry(b.saturating_add(1 << 29) >> 30).or_insert(0) += 1;
    }
    if by.len() == 1 {
        let gib = by.keys().next().copied().unwrap_or(0);
        return format!("{gib} GiB");
    }
    by.iter()
        .map(|(g, n)| format!("{g} GiB x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mig_on(g: &Gpu) -> bool {
    g.mig
        .as_ref()
        .is_some_and(|m| m.current_mode == MigMode::Enabled)
}

fn instances(g: &Gpu) -> &[crate::hardware::GpuInstance] {
    g.mig.as_ref().map_or(&[][..], |m| &m.gpu_instances[..])
}

fn same_layout(a: &Gpu, b: &Gpu) -> bool {
    let (a, b) = (instances(a), instances(b));
    let known = a.iter().chain(b).all(|i| i.placement.is_some());
    if known {
        let set = |xs: &[crate::hardware::GpuInstance]| {
            xs.iter()
                .map(|i| (i.placement.map(|p| p.start), i.profile.clone()))
                .collect::<BTreeSet<_>>()
        };
        set(a) == set(b)
    } else {
        let mut pa: Vec<&str> = a.iter().map(|i| i.profile.as_str()).collect();
        let mut pb: Vec<&str> = b.iter().map(|i| i.profile.as_str()).collect();
        pa.sort_unstable();
        pb.sort_unstable();
        pa == pb
    }
}

/// `"1g.10gb@0,1g.10gb@1"` by start (`@?`: placement unknown); `"none"`.
fn layout_text(g: &Gpu) -> String {
    let mut xs: Vec<(u32, &str)> = g
        .mig
        .iter()
        .flat_map(|m| &m.gpu_instances)
        .map(|i| {
            (
                i.placement.map_or(u32::MAX, |p| p.start),
                i.profile.as_str(),
            )
        })
        .collect();
    if xs.is_empty() {
        return "none".into();
    }
    xs.sort_unstable();
    xs.iter()
        .map(|&(start, p)| match start {
            u32::MAX => format!("{p}@?"),
            s => format!("{p}@{s}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn roots_text(roots: &BTreeSet<&str>) -> String {
    roots.iter().copied().collect::<Vec<_>>().join(", ")
}

fn rdma_nics(hw: &NodeHardware) -> usize {
    hw.nics
        .iter()
        .filter(|n| {
            matches!(n.kind, NicKind::Infiniband | NicKind::Roce) || !n.rdma_devices.is_empty()
        })
        .count()
}

/// GPUs per NVLink group (largest first) and active links, where every
/// link's count is known.
fn nvlink_summary(hw: &NodeHardware) -> (Vec<usize>, Option<u32>) {
    let mut groups: Vec<usize> = hw.nvlink_groups().iter().map(|g| g.gpus.len()).collect();
    groups.sort_unstable_by(|a, b| b.cmp(a));
    let live: Vec<_> = hw.nvlinks.iter().filter(|l| l.bandwidth_mbps > 0).collect();
    let links = if live.is_empty() {
        None
    } else {
        // Checked: link counts are the agent's (a sum past u32 is unknown).
        live.iter()
            .try_fold(0u32, |t, l| l.links.and_then(|n| t.checked_add(n)))
    };
    (groups, links)
}

/// `"8+8 GPUs, 96 links"`; `"none"`.
fn nvlink_text((groups, links): &(Vec<usize>, Option<u32>)) -> String {
    let mut t = if groups.is_empty() {
        "none".to_owned()
    } else {
        let sizes: Vec<String> = groups.iter().map(ToString::to_string).collect();
        format!("{} GPUs", sizes.join("+"))
    };
    if let Some(n) = links {
        t.push_str(&format!(", {n} links"));
    }
    t
}

/// Whether Accord owns the Node label `key`: exactly the topology labels
/// (`<label_prefix><level>` for each of `topology.levels`, and every
/// `also_label` key), [`GPU_MODEL_LABEL`], [`GPU_COUNT_LABEL`] and
/// [`RESERVATION_KEY`]. Owned keys are set to what Accord publishes and
/// removed when it publishes none; other keys under `label_prefix` are
/// not Accord's (the prefix may be shared, e.g. `topology.kubernetes.io/`
/// with the cloud provider's zone and region). Keys Kubernetes sets
/// ([`KUBERNETES_SET_LABELS`]) are never owned.
pub fn owns_label(topology: &TopologyConfig, key: &str) -> bool {
    if KUBERNETES_SET_LABELS.contains(&key) {
        return false;
    }
    matches!(key, GPU_MODEL_LABEL | GPU_COUNT_LABEL | RESERVATION_KEY)
        || key
            .strip_prefix(topology.label_prefix.as_str())
            .is_some_and(|level| topology.levels.iter().any(|l| l == level))
        || topology.also_label.values().flatten().any(|k| k == key)
}

/// Node labels the kubelet or the cloud provider sets, that Accord never
/// owns (validation rejects a topology key naming one).
/// `topology.kubernetes.io/zone` and `/region` are not here: an admin may
/// map a level to them explicitly (`also_label`), and then Accord owns
/// them.
pub const KUBERNETES_SET_LABELS: [&str; 7] = [
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
];

/// Whether `key` is a valid Kubernetes label key: an optional DNS
/// subdomain prefix (at most 253 characters, lowercase) and `/`, then a
/// name of at most 63 characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let dns_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(dns_label));
    prefix_ok && !name.is_empty() && valid_label_value(name)
}

/// Whether `value` is a valid Kubernetes label value: at most 63
/// characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, or empty.
pub fn valid_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    let end = |c: &u8| c.is_ascii_alphanumeric();
    value.len() <= 63
        && (b.is_empty()
            || (b.first().is_some_and(end)
                && b.last().is_some_and(end)
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))))
}

/// Taints the node lifecycle controller sets for a Node's readiness: a
/// powered-off or booting machine's Node keeps them until its kubelet
/// reports Ready. Accord models power and boot itself (the node's
/// lifecycle), so a scheduler view's taints of these keys are not the
/// node's: left in, an off node would never fit and never be powered on.
/// The condition taints for pressure (`memory-pressure`, `disk-pressure`,
/// `pid-pressure`) and `network-unavailable` stay: they describe a running
/// node. `node.kubernetes.io/unschedulable` (a cordon) is an admin's
/// choice and stays too.
pub const READINESS_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// The Node annotation (`"true"`) by which an admin keeps Accord from
/// powering the node off or repairing it.
pub const DO_NOT_DISRUPT: &str = "accord.dev/do-not-disrupt";

fn is_readiness_taint(key: &str) -> bool {
    READINESS_TAINTS.contains(&key)
}

/// Whether Accord owns Node taints with `key`: [`RESERVATION_KEY`],
/// [`BIOS_TAINT_KEY`] and [`POWERING_OFF_TAINT_KEY`].
pub fn owns_taint(key: &str) -> bool {
    key == RESERVATION_KEY || key == BIOS_TAINT_KEY || key == POWERING_OFF_TAINT_KEY
}

/// `s` as a valid label value: spaces become `-`, other characters than
/// `[A-Za-z0-9._-]` are dropped, at most 63 characters, starting and
/// ending alphanumeric (`"NVIDIA H100 80GB HBM3"` → `"NVIDIA-H100-80GB-HBM3"`).
/// Empty when nothing is left.
pub fn label_value(s: &str) -> String {
    let kept: String = s
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') => Some(c),
            _ => None,
        })
        .take(63)
        .collect();
    kept.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

impl Fleet {
    /// What Accord publishes on node `name`'s Kubernetes Node at `now`:
    /// its topology labels (`<label_prefix><level>` and the level's
    /// `also_label` keys, for the levels of `topology.levels`: the keys
    /// Accord owns), its GPU model and count (from the model it is
    /// planned with), and for a node of a non-lendable reservation active
    /// at `now`, the reservation's label and `NoSchedule` taint (the first
    /// such reservation by name). `None` when there is no such node.
    pub fn publication(&self, name: &str, now: u64) -> Option<Publication> {
        let node = self.node(name)?;
        let mut p = Publication::default();
        for (level, value) in &node.domains {
            if !self.topology.levels.contains(level) {
                continue;
            }
            let value = label_value(value);
            if value.is_empty() {
                continue;
            }
            p.labels.insert(
                format!("{}{level}", self.topology.label_prefix),
                value.clone(),
            );
            for key in self.topology.also_label.get(level).into_iter().flatten() {
                p.labels.insert(key.clone(), value.clone());
            }
        }
        if let Some(g) = node.gpus.first() {
            let model = label_value(&g.model);
            if !model.is_empty() {
                p.labels.insert(GPU_MODEL_LABEL.to_owned(), model);
            }
            p.labels
                .insert(GPU_COUNT_LABEL.to_owned(), node.gpus.len().to_string());
        }
        let reservation = self
            .reservations
            .iter()
            .filter(|r| {
                !r.lendable
                    && r.active(now)
                    && r.nodes.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
            })
            .min_by(|a, b| a.name.cmp(&b.name));
        if let Some(r) = reservation {
            let value = label_value(&r.name);
            p.labels.insert(RESERVATION_KEY.to_owned(), value.clone());
            p.taints.push(Taint {
                key: RESERVATION_KEY.to_owned(),
                value: Some(value),
                effect: TaintEffect::NoSchedule,
            });
        }
        Some(p)
    }
}

/// Allocatable keys that are not extended resources (or that fit treats
/// as devices).
fn not_extended(key: &str) -> bool {
    matches!(
        key,
        "cpu" | "memory" | "pods" | "ephemeral-storage" | GPU_RESOURCE
    ) || key.starts_with("hugepages-")
        || key.starts_with(MIG_RESOURCE_PREFIX)
}

/// A whole-number count (`"8"`); `None` for anything else.
fn count(q: &str) -> Option<usize> {
    quantity::parse(q)
        .ok()
        .filter(|m| *m >= 0 && m % 1000 == 0)
        .and_then(|m| usize::try_from(m / 1000).ok())
}

fn str_attr<'d>(d: &'d Device, name: &str) -> Option<&'d str> {
    match d.attr(name) {
        Some(AttrValue::String(s)) => Some(s),
        _ => None,
    }
}

/// A device as the drift comparison counts it: (kind, product name, MIG
/// profile or NIC kind). `None`: not compared (another driver's device,
/// or a NIC when the view has none).
fn device_class(d: &Device, nics: bool) -> Option<(DeviceKind, String)> {
    let name = |attr: &str| str_attr(d, attr).unwrap_or("unknown").to_owned();
    match d.kind {
        DeviceKind::Gpu if d.driver == GPU_DRIVER => {
            Some((d.kind, name("gpu.nvidia.com/productName")))
        }
        DeviceKind::Mig if d.driver == GPU_DRIVER => Some((d.kind, name("gpu.nvidia.com/profile"))),
        DeviceKind::Nic if nics => Some((d.kind, name("rdma.accord.dev/kind"))),
        _ => None,
    }
}

fn devices_text(summary: &BTreeMap<(DeviceKind, String), usize>) -> String {
    if summary.is_empty() {
        return "none".into();
    }
    summary
        .iter()
        .map(|((kind, name), n)| {
            let kind = match kind {
                DeviceKind::Gpu => "GPU",
                DeviceKind::Mig => "MIG",
                DeviceKind::Nic => "NIC",
            };
            format!("{kind} {name} x{n}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The model's devices against the DRA driver's, as multisets of
/// (kind, product name or MIG profile); NICs only when the view has some
/// (no RDMA driver publishing is not a difference).
fn device_drift(model: &[Device], view: &[Device]) -> Option<Drift> {
    let nics = view.iter().any(|d| d.kind == DeviceKind::Nic);
    let summary = |ds: &[Device]| {
        let mut out: BTreeMap<(DeviceKind, String), usize> = BTreeMap::new();
        for c in ds.iter().filter_map(|d| device_class(d, nics)) {
            *out.entry(c).or_insert(0) += 1;
        }
        out
    };
    let (m, v) = (summary(model), summary(view));
    (m != v).then(|| Drift {
        what: DriftKind::SchedulerDevices,
        declared: devices_text(&m),
        reported: devices_text(&v),
    })
}

impl Node {
    /// Plans the node as kube-scheduler sees it (`view`: its Kubernetes
    /// Node, up now or last seen) and returns where that differs from the
    /// node's model.
    ///
    /// - labels and taints are the Node's, less the readiness taints
    ///   ([`READINESS_TAINTS`]: Accord's lifecycle models power and boot);
    /// - when the Node shows any allocatable: cpu, memory and pods from it
    ///   (each falling back to the declared value when absent or not a
    ///   quantity), and extended resources are exactly its other keys
    ///   (not ephemeral-storage, hugepages-*, `nvidia.com/gpu`,
    ///   `nvidia.com/mig-*`: fit counts those as devices);
    /// - with `view.devices` (the DRA drivers' ResourceSlices), each
    ///   driver's devices there replace the model's devices of that
    ///   driver (see `use_view_devices` for drivers the model lacks),
    ///   each GPU device tied to its physical GPU by UUID (parent UUID
    ///   for MIG) or PCI bus id; over the replaced drivers, a difference
    ///   from the model's devices (kind and product name or MIG profile,
    ///   as multisets) is a [`DriftKind::SchedulerDevices`] drift;
    /// - `nvidia.com/gpu` and each `nvidia.com/mig-<profile>` the Node
    ///   advertises are compared with the model's whole GPUs (those not in
    ///   MIG mode) and MIG instances of that profile
    ///   ([`DriftKind::SchedulerResource`]); where it advertises fewer,
    ///   the excess devices are dropped (highest GPU index first), so fit
    ///   never allocates more than the scheduler offers. A key the Node
    ///   does not advertise constrains nothing; nor does anything while
    ///   all of them add up to 0 on a node the model gives GPUs (the
    ///   device plugin has not registered yet, as right after a boot).
    ///
    /// A GPU that lost devices this way, or that the view's devices cannot
    /// be tied to, is `withheld`: the planner does not repartition it
    /// (simplification: without knowing why the scheduler offers less, its
    /// MIG layout is left alone). Partitionable (dynamic MIG) devices are
    /// not capped by `nvidia.com/mig-*`. Counter sets the view's devices
    /// draw on that the model lacks are taken as large as the largest
    /// single draw on each counter (a view carries no counter sets).
    ///
    /// Applying a view again starts from the model, not from the earlier
    /// view.
    pub fn apply_scheduler_view(&mut self, view: &SchedulerView) -> Vec<Drift> {
        if self.viewed {
            if let Some(s) = &self.source {
                self.devices = s.devices.clone();
                self.device_prints = s.prints.clone();
                self.counters = s.counters.clone();
            }
            for g in &mut self.gpus {
                g.withheld = false;
            }
        }
        self.viewed = true;
        self.labels = view.labels.clone();
        self.taints = view
            .taints
            .iter()
            .filter(|t| !is_readiness_taint(&t.key))
            .cloned()
            .collect();
        if !view.allocatable.is_empty() {
            let declared = self
                .source
                .as_ref()
                .map_or(&self.allocatable, |s| &s.allocatable)
                .clone();
            let get = |k: &str| {
                view.allocatable
                    .get(k)
                    .and_then(|q| quantity::parse(q).ok())
            };
            self.allocatable.cpu = get("cpu").unwrap_or(declared.cpu);
            self.allocatable.memory = get("memory").unwrap_or(declared.memory);
            self.allocatable.pods = get("pods").map_or(declared.pods, |m| m / 1000);
            self.allocatable.extended = view
                .allocatable
                .iter()
                .filter(|(k, _)| !not_extended(k))
                .filter_map(|(k, q)| Some((k.clone(), quantity::parse(q).ok()?)))
                .collect();
        }
        let mut drift = Vec::new();
        if let Some(devices) = &view.devices {
            drift.extend(self.use_view_devices(devices));
        }
        drift.extend(self.apply_device_plugin(&view.allocatable));
        drift.sort_by_key(|d| d.what);
        drift
    }

    /// Replaces the model's devices with the view's, driver by driver, tied
    /// to the model's GPUs; returns how the replaced drivers' devices
    /// differ.
    ///
    /// Only drivers that appear in the view are replaced: the model's
    /// devices of other drivers stay (a node can publish, say,
    /// `compute-domain.nvidia.com` channels or dranet NICs in node-local
    /// slices while its GPUs come from the device plugin). A view driver
    /// the model has no devices of is taken only when it is one whose
    /// devices' kind Accord knows ([`GPU_DRIVER`], [`NIC_DRIVER`]); any
    /// other driver's devices are left out of planning, since the kube
    /// side cannot tell what they are and would count them as GPUs.
    fn use_view_devices(&mut self, view: &[Device]) -> Option<Drift> {
        let model_drivers: BTreeSet<&str> =
            self.devices.iter().map(|d| d.driver.as_str()).collect();
        let replaced: BTreeSet<String> = view
            .iter()
            .map(|d| d.driver.as_str())
            .filter(|d| model_drivers.contains(d) || matches!(*d, GPU_DRIVER | NIC_DRIVER))
            .map(str::to_owned)
            .collect();
        if replaced.is_empty() {
            return None;
        }
        let kept_model: Vec<(Device, u64)> = self
            .devices
            .iter()
            .zip(self.device_prints.iter())
            .filter(|(d, _)| !replaced.contains(&d.driver))
            .map(|(d, p)| (d.clone(), *p))
            .collect();
        let replaced_model: Vec<Device> = self
            .devices
            .iter()
            .filter(|d| replaced.contains(&d.driver))
            .cloned()
            .collect();
        let view: Vec<Device> = view
            .iter()
            .filter(|d| replaced.contains(&d.driver))
            .cloned()
            .collect();
        let drift = device_drift(&replaced_model, &view);
        // The model's GPU identities: UUID and PCI bus id → GPU.
        let mut by_uuid: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_bus: BTreeMap<String, usize> = BTreeMap::new();
        for d in self.devices.iter() {
            let Some(g) = d.gpu else { continue };
            let uuid = match d.kind {
                DeviceKind::Gpu => str_attr(d, "gpu.nvidia.com/uuid"),
                DeviceKind::Mig => str_attr(d, "gpu.nvidia.com/parentUUID"),
                DeviceKind::Nic => None,
            };
            if let Some(u) = uuid {
                by_uuid.insert(u.to_owned(), g);
            }
            if let Some(b) = str_attr(d, PCI_BUS_ID) {
                by_bus.insert(b.to_owned(), g);
            }
        }
        let mut devices: Vec<Device> = view;
        let mut tied: BTreeSet<usize> = BTreeSet::new();
        let mut untied = false;
        for d in &mut devices {
            if d.driver != GPU_DRIVER || d.kind == DeviceKind::Nic {
                continue;
            }
            let uuid = match d.kind {
                DeviceKind::Mig => str_attr(d, "gpu.nvidia.com/parentUUID"),
                _ => str_attr(d, "gpu.nvidia.com/uuid"),
            };
            let found = uuid
                .and_then(|u| by_uuid.get(u))
                .or_else(|| str_attr(d, PCI_BUS_ID).and_then(|b| by_bus.get(b)))
                .copied()
                .or(d.gpu);
            match found {
                Some(g) => {
                    d.gpu = Some(g);
                    tied.insert(g);
                }
                None => untied = true,
            }
        }
        if replaced.contains(GPU_DRIVER) {
            for g in &mut self.gpus {
                if untied || !tied.contains(&g.index) {
                    g.withheld = true;
                }
            }
        }
        let mut extra: CounterSets = BTreeMap::new();
        for d in &devices {
            for (set, counters) in &d.consumes {
                if self.counters.contains_key(set) {
                    continue;
                }
                for (counter, amount) in counters {
                    let c = extra
                        .entry(set.clone())
                        .or_default()
                        .entry(counter.clone())
                        .or_insert(0);
                    *c = (*c).max(*amount);
                }
            }
        }
        self.counters.extend(extra);
        let mut prints: Vec<u64> = devices.iter().map(fingerprint).collect();
        for (d, p) in kept_model {
            devices.push(d);
            prints.push(p);
        }
        self.device_prints = prints.into();
        self.devices = devices.into();
        drift
    }

    /// Compares and caps device-plugin resources (see
    /// [`Node::apply_scheduler_view`]).
    fn apply_device_plugin(&mut self, allocatable: &BTreeMap<String, String>) -> Vec<Drift> {
        let mut drift = Vec::new();
        let on = |g: &crate::device::PlannerGpu| {
            g.mig
                .as_ref()
                .is_some_and(|m| m.current_mode == MigMode::Enabled)
        };
        let whole = self.gpus.iter().filter(|g| !on(g)).count();
        let mut mig: BTreeMap<String, usize> = BTreeMap::new();
        for g in self.gpus.iter().filter(|g| on(g)) {
            for i in g.mig.iter().flat_map(|m| &m.gpu_instances) {
                *mig.entry(i.profile.clone()).or_insert(0) += 1;
            }
        }
        // Right after a boot the Node can be Ready before the device plugin
        // has registered: it then advertises nothing, or zeros. Nothing at
        // all advertised while the model has GPUs is read as not
        // advertised yet (no cap, no drift), not as a node without GPUs.
        let total = allocatable
            .iter()
            .filter(|(k, _)| k.as_str() == GPU_RESOURCE || k.starts_with(MIG_RESOURCE_PREFIX))
            .filter_map(|(_, q)| count(q))
            .fold(0usize, usize::saturating_add);
        if total == 0 && !self.gpus.is_empty() {
            return drift;
        }
        let mut resource = |name: &str, model: usize, shown: usize| {
            if model != shown {
                drift.push(Drift {
                    what: DriftKind::SchedulerResource,
                    declared: format!("{name}={model}"),
                    reported: format!("{name}={shown}"),
                });
            }
        };
        if let Some(n) = allocatable.get(GPU_RESOURCE).and_then(|q| count(q)) {
            resource(GPU_RESOURCE, whole, n);
            self.cap(n, |d| d.kind == DeviceKind::Gpu);
        }
        for (key, q) in allocatable {
            let Some(profile) = key.strip_prefix(MIG_RESOURCE_PREFIX) else {
                continue;
            };
            let Some(n) = count(q) else { continue };
            resource(key, mig.get(profile).copied().unwrap_or(0), n);
            self.cap(n, |d| {
                d.kind == DeviceKind::Mig
                    && d.consumes.is_empty()
                    && d.mig_profile() == Some(profile)
            });
        }
        drift
    }

    /// Keeps at most `n` of the NVIDIA devices `matching`, dropping those
    /// on the highest GPU indices first; their GPUs are withheld.
    fn cap(&mut self, n: usize, matching: impl Fn(&Device) -> bool) {
        let mut found: Vec<(usize, usize)> = self
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.driver == GPU_DRIVER && matching(d))
            .map(|(i, d)| (d.gpu.unwrap_or(usize::MAX), i))
            .collect();
        if found.len() <= n {
            return;
        }
        found.sort_unstable();
        let drop: BTreeSet<usize> = found[n..].iter().map(|&(_, i)| i).collect();
        for &(g, _) in &found[n..] {
            if let Some(pg) = self.gpus.iter_mut().find(|pg| pg.index == g) {
                pg.withheld = true;
            }
        }
        let keep = |i: &usize| !drop.contains(i);
        self.devices = (0..self.devices.len())
            .filter(keep)
            .map(|i| self.devices[i].clone())
            .collect();
        self.device_prints = (0..self.device_prints.len())
            .filter(keep)
            .map(|i| self.device_prints[i])
            .collect();
    }

    /// Sets the labels and taints Accord owns to `p`'s (owned labels `p`
    /// lacks are removed), leaving everyone else's alone: the node as
    /// kube-scheduler will see it once Accord has written `p`.
    pub fn apply_publication(&mut self, p: &Publication, topology: &TopologyConfig) {
        self.labels
            .retain(|k, _| !owns_label(topology, k) || p.labels.contains_key(k));
        self.labels
            .extend(p.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.taints.retain(|t| !owns_taint(&t.key));
        self.taints.extend(p.taints.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::hardware_from_profile;
    use crate::hardware::{GpuInstance, MigPlacement, MigState};

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn memory_agrees_with_what_nvml_reports_for_the_advertised_size() {
        // (declared GiB, what NVML reports): H100 80GB, L40S 48GB, H200
        // 141GB, A100 40GB.
        for (gib, mib) in [(80, 81_559), (48, 46_068), (141, 143_771), (40, 40_960)] {
            assert!(memory_agrees(&[gib * GIB], &[mib * MIB]), "{gib} GiB");
        }
        assert!(!memory_agrees(&[80 * GIB], &[40_960 * MIB]));
        assert!(!memory_agrees(&[80 * GIB], &[81_559 * MIB, 40_960 * MIB]));
        assert_eq!(gib_text(&[81_559 * MIB; 8]), "80 GiB");
        assert_eq!(
            gib_text(&[80 * GIB, 40 * GIB, 80 * GIB]),
            "40 GiB x1, 80 GiB x2"
        );
    }

    #[test]
    fn reported_numbers_do_not_overflow() {
        assert_eq!(gib_text(&[u64::MAX]), format!("{} GiB", u64::MAX >> 30));
        let mut hw = NodeHardware::empty();
        let peer = |b: u8| crate::hardware::NvLinkPeer {
            kind: crate::hardware::NvLinkPeerKind::Gpu,
            pci_bus_id: crate::hardware::PciBusId::new(0, b, 0, 0),
        };
        for (b, links) in [(1, Some(u32::MAX)), (2, Some(1))] {
            hw.nvlinks.push(crate::hardware::NvLink {
                a: peer(b),
                b: peer(b + 10),
                links,
                bandwidth_mbps: 1,
                version: None,
                sources: vec![],
            });
        }
        assert_eq!(nvlink_summary(&hw).1, None);
    }

    #[test]
    fn a_profile_states_only_its_set_keys() {
        let p = HardwareProfile::new("1", "1Gi");
        let s = Stated::profile(&p, false);
        assert_eq!(
            s,
            Stated {
                gpu_count: true,
                mig: true,
                ..Stated::default()
            }
        );
        assert!(!Stated::profile(&p, true).mig);
        let p = HardwareProfile {
            gpu_model: Some("X".into()),
            gpu_memory_gib: 1,
            nics: Some(0),
            gpus_per_pcie_root: Some(2),
            numa_nodes: Some(1),
            ..p
        };
        let s = Stated::profile(&p, false);
        assert!(s.gpu_model && s.gpu_memory && s.nics && s.numa_nodes && !s.nvlink);
        assert_eq!(s.pcie, Some(PcieStated::GpusPerRoot(2)));
        assert_eq!(Stated::model(false).pcie, Some(PcieStated::Roots));
    }

    #[test]
    fn layouts_read_by_start_and_unknown_placements_by_profile() {
        let mut hw = hardware_from_profile(
            &HardwareProfile {
                gpus: 1,
                gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
                ..HardwareProfile::new("1", "1Gi")
            },
            &[],
        );
        let inst = |id, profile: &str, start: Option<u32>| GpuInstance {
            id,
            profile: profile.into(),
            profile_id: None,
            placement: start.map(|start| MigPlacement { start, size: 1 }),
            compute_instances: vec![],
        };
        hw.gpus[0].mig = Some(MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: vec![],
            gpu_instances: vec![inst(2, "1g.10gb", Some(4)), inst(1, "3g.40gb", Some(0))],
        });
        assert_eq!(layout_text(&hw.gpus[0]), "3g.40gb@0,1g.10gb@4");
        let mut other = hw.gpus[0].clone();
        other.mig.as_mut().unwrap().gpu_instances =
            vec![inst(1, "1g.10gb", None), inst(2, "3g.40gb", None)];
        assert_eq!(layout_text(&other), "1g.10gb@?,3g.40gb@?");
        assert!(same_layout(&hw.gpus[0], &other));
        other.mig.as_mut().unwrap().gpu_instances.pop();
        assert!(!same_layout(&hw.gpus[0], &other));
        assert_eq!(nvlink_text(&(vec![8, 8], Some(96))), "8+8 GPUs, 96 links");
        assert_eq!(nvlink_text(&(vec![], None)), "none");
    }

    #[test]
    fn scheduler_drift_reads_model_against_scheduler() {
        let d = Drift {
            what: DriftKind::SchedulerDevices,
            declared: "GPU X x8".into(),
            reported: "GPU X x7".into(),
        };
        assert_eq!(
            d.to_string(),
            "DRA devices: model GPU X x8, scheduler GPU X x7"
        );
        assert!(!d.what.is_declaration());
        assert!(DriftKind::NvLink.is_declaration());
    }
}
