//! Devices as DRA sees them: what a node's GPUs, MIG instances and NICs look
//! like in a ResourceSlice (driver, attributes, capacity), derived from the
//! hardware model or from a declared hardware profile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::hardware::{MigMode, MigState, NicKind, NodeHardware};
use crate::quantity::Milli;

/// The device plugin's whole-GPU resource, and the prefix of its MIG
/// resources (`nvidia.com/mig-1g.10gb`), as Nodes advertise them.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";
pub const GPU_DRIVER: &str = "gpu.nvidia.com";
pub const NIC_DRIVER: &str = "rdma.accord.dev";
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// NUMA node of a device (Accord's attribute; no upstream standard yet).
pub const NUMA_NODE: &str = "accord.dev/numaNode";

/// A DRA device attribute value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    String(String),
    /// A semantic version (DRA's `version` attribute): a `semver` in CEL.
    Version {
        version: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Gpu,
    Mig,
    Nic,
}

/// How a shareable device's capacity may be drawn (DRA consumable capacity,
/// KEP-5075 `requestPolicy`): requests below `min` are raised to it, others
/// rounded up to a multiple of `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RequestPolicy {
    pub default: Option<Milli>,
    pub min: Option<Milli>,
    pub step: Option<Milli>,
}

impl RequestPolicy {
    /// The amount actually consumed for a request of `asked`.
    pub fn consumed(&self, asked: Option<Milli>) -> Option<Milli> {
        let mut v = asked.or(self.default)?;
        if let Some(min) = self.min {
            v = v.max(min);
        }
        if let Some(step) = self.step.filter(|s| *s > 0) {
            v = (v + step - 1) / step * step;
        }
        Some(v)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Unique within the node: `gpu-0`, `gpu-3-mig-7`, `nic-1`. Shared:
    /// every allocation of the device names it.
    pub name: std::sync::Arc<str>,
    pub driver: String,
    pub kind: DeviceKind,
    /// Qualified attribute names (`gpu.nvidia.com/productName`,
    /// `resource.kubernetes.io/pcieRoot`).
    pub attributes: BTreeMap<String, AttrValue>,
    /// Capacity in milli-units (`gpu.nvidia.com/memory`, `gpu.nvidia.com/compute`).
    pub capacity: BTreeMap<String, Milli>,
    /// `Some` when several allocations may share the device
    /// (`allowMultipleAllocations`), with a policy per capacity name.
    pub shared: Option<BTreeMap<String, RequestPolicy>>,
    /// The physical GPU (index into the node's GPUs) this device lives on.
    pub gpu: Option<usize>,
    /// Partitionable devices (KEP-4815): counters this device draws from
    /// its node's counter sets while allocated (set → counter → amount).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumes: BTreeMap<String, BTreeMap<String, Milli>>,
    /// DRA device taints: from the driver's ResourceSlice and from
    /// DeviceTaintRules. A request gets the device only if it tolerates
    /// every `NoSchedule` and `NoExecute` one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<DeviceTaint>,
}

/// One DRA device taint (`resource.k8s.io` `DeviceTaint`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceTaint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `NoExecute` or `None` (shown, not enforced).
    pub effect: String,
}

impl DeviceTaint {
    /// Whether it keeps new allocations away (`None` only informs).
    pub fn restricts(&self) -> bool {
        self.effect != "None"
    }
}

/// One toleration of a DRA device request (`DeviceToleration`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceToleration {
    #[serde(default)]
    pub key: String,
    /// `Equal` (also when empty) or `Exists`.
    #[serde(default)]
    pub operator: String,
    #[serde(default)]
    pub value: String,
    /// Empty: every effect.
    #[serde(default)]
    pub effect: String,
}

impl DeviceToleration {
    /// As upstream's `resourceclaim.ToleratesTaint`
    /// (k8s.io/dynamic-resource-allocation/resourceclaim, a copy of
    /// core/v1's `Toleration.ToleratesTaint`).
    pub fn tolerates(&self, taint: &DeviceTaint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator.as_str() {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// Whether `tolerations` tolerate every taint of `device` that restricts
/// allocation (the allocator's `allTaintsTolerated`).
pub fn taints_tolerated(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device
        .taints
        .iter()
        .filter(|t| t.restricts())
        .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
}

impl Device {
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes.get(name)
    }

    pub fn mig_profile(&self) -> Option<&str> {
        match self.attr("gpu.nvidia.com/profile") {
            Some(AttrValue::String(p)) => Some(p),
            _ => None,
        }
    }
}

fn s(v: impl Into<String>) -> AttrValue {
    AttrValue::String(v.into())
}

/// Attribute names that differ between otherwise identical devices (a
/// selector naming one cannot share results across nodes).
pub(crate) const NODE_SPECIFIC: &[&str] = &[
    "uuid",
    "UUID",
    "pciBusID",
    "pcieRoot",
    "numaNode",
    "clique",
    "interface",
];

/// FNV-1a: stable across runs and platforms, unlike `DefaultHasher`.
fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
    *h ^= 0xff;
    *h = h.wrapping_mul(0x100_0000_01b3);
}

/// Identity of a device for selector purposes, ignoring node-specific
/// attributes.
pub fn fingerprint(device: &Device) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, device.driver.as_bytes());
    for (k, v) in &device.attributes {
        if NODE_SPECIFIC.iter().any(|n| k.contains(n)) {
            continue;
        }
        fnv(&mut h, k.as_bytes());
        match v {
            AttrValue::Bool(b) => fnv(&mut h, &[u8::from(*b)]),
            AttrValue::Int(i) => fnv(&mut h, &i.to_le_bytes()),
            AttrValue::String(s) => fnv(&mut h, s.as_bytes()),
            AttrValue::Version { version } => {
                fnv(&mut h, b"v");
                fnv(&mut h, version.as_bytes())
            }
        }
    }
    for (k, v) in &device.capacity {
        fnv(&mut h, k.as_bytes());
        fnv(&mut h, &v.to_le_bytes());
    }
    h
}

/// Memory slices a MIG placement may end at, at most (a GPU has 8 today).
const MAX_MIG_SLICES: u32 = 64;

/// Capacity names the planner uses.
pub const MEMORY: &str = "gpu.nvidia.com/memory";
pub const COMPUTE: &str = "gpu.nvidia.com/compute";

/// GPU sharing (consumable capacity) configuration of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sharing {
    /// Smallest share of a GPU's compute, in milli-GPU (e.g. 10 = 1 %).
    pub min_compute_milli: Option<Milli>,
    /// Shares are rounded up to a multiple of this, in milli-GPU.
    pub step_compute_milli: Option<Milli>,
}

/// A physical GPU as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerGpu {
    /// Position in the model's GPU list (what devices' `gpu` name).
    pub index: usize,
    /// NVML's index of the GPU (what an agent command names).
    #[serde(default)]
    pub nvml_index: u32,
    #[serde(default)]
    pub uuid: Option<String>,
    pub model: String,
    pub memory_bytes: u64,
    /// Shared: a node's GPUs in one MIG state hold one copy.
    pub mig: Option<std::sync::Arc<crate::hardware::MigState>>,
    /// The scheduler does not offer all of this GPU (its device plugin
    /// advertises fewer devices, or the DRA driver's devices cannot be
    /// tied to it): the planner leaves its MIG layout alone.
    #[serde(default)]
    pub withheld: bool,
    /// The DRA driver publishes this GPU's MIG partitions as devices drawing
    /// on its shared counters (NVIDIA's `DynamicMIG`: instances are made at
    /// allocation, `cmd/gpu-kubelet-plugin/partitions.go`): its layout is
    /// the driver's; the planner fits partitions on the counters and never
    /// repartitions it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub driver_partitions: bool,
}

/// Marks each GPU whose MIG partitions `devices` publish as partitionable
/// (a `Mig` device of the GPU driver that consumes counters).
pub fn mark_driver_partitions(gpus: &mut [PlannerGpu], devices: &[Device]) {
    // One pass over the devices (a report may carry many GPUs).
    let partitioned: std::collections::BTreeSet<usize> = devices
        .iter()
        .filter(|d| d.driver == GPU_DRIVER && d.kind == DeviceKind::Mig && !d.consumes.is_empty())
        .filter_map(|d| d.gpu)
        .collect();
    for g in gpus.iter_mut() {
        g.driver_partitions = partitioned.contains(&g.index);
    }
}

/// Shared counter sets of a node (ResourceSlice `sharedCounters`): set →
/// counter → capacity.
pub type CounterSets = BTreeMap<String, BTreeMap<String, Milli>>;

/// A node's devices as the planner sees them.
#[derive(Debug, Clone, Default)]
pub struct NodeDevices {
    pub gpus: Vec<PlannerGpu>,
    pub devices: Vec<Device>,
    pub counters: CounterSets,
}

/// Builds the node's devices from its hardware model. With `dynamic_mig`,
/// each MIG-capable GPU is published partitionably: the whole GPU and every
/// published MIG placement, all drawing on the GPU's memory-slice counters,
/// so the DRA allocator picks a layout (the driver creates instances on
/// allocation).
pub fn devices_from_hardware(
    hw: &NodeHardware,
    sharing: Option<Sharing>,
    dynamic_mig: bool,
) -> NodeDevices {
    let mut gpus: Vec<PlannerGpu> = Vec::new();
    let mut devices = Vec::new();
    let mut counters = CounterSets::new();
    // One shared copy per distinct MIG state: looked up by value (a hash
    // map, so a report with many GPUs of distinct states stays linear).
    let mut mig_states: HashMap<&MigState, Arc<MigState>> = HashMap::new();
    for (gi, g) in hw.gpus.iter().enumerate() {
        // Only NVIDIA GPUs are published by the NVIDIA DRA driver; others
        // (an AMD card beside them) stay out of this model for now. NVML
        // sees only NVIDIA GPUs, and names no vendor: a GPU it reported is
        // one.
        let nvidia = g
            .vendor
            .as_deref()
            .is_some_and(|v| v.to_ascii_lowercase().contains("nvidia"))
            || g.sources.contains(&crate::hardware::Source::Nvml);
        if !nvidia {
            continue;
        }
        let model = g.model.clone().unwrap_or_else(|| "unknown".into());
        let memory = g.memory_bytes.unwrap_or(0);
        gpus.push(PlannerGpu {
            index: gi,
            nvml_index: g.index,
            uuid: g.uuid.clone(),
            model: model.clone(),
            memory_bytes: memory,
            // GPUs of one node usually share a MIG state (every profile
            // table alike): one copy.
            mig: g.mig.as_ref().map(|m| {
                mig_states
                    .entry(m)
                    .or_insert_with(|| Arc::new(m.clone()))
                    .clone()
            }),
            withheld: false,
            driver_partitions: false,
        });
        let mut common = BTreeMap::new();
        common.insert("gpu.nvidia.com/productName".into(), s(model.clone()));
        if let Some(arch) = &g.architecture {
            common.insert("gpu.nvidia.com/architecture".into(), s(arch.clone()));
        }
        if let Some(cc) = &g.compute_capability {
            common.insert("gpu.nvidia.com/cudaComputeCapability".into(), s(cc.clone()));
        }
        if let Some(root) = &g.pcie_root {
            common.insert(PCIE_ROOT.into(), s(root.clone()));
        }
        common.insert(PCI_BUS_ID.into(), s(g.pci_bus_id.to_string()));
        if let Some(n) = g.numa_node {
            common.insert(NUMA_NODE.into(), AttrValue::Int(i64::from(n)));
        }
        if let Some(f) = &g.fabric {
            common.insert("gpu.nvidia.com/clique".into(), s(f.clique()));
        }
        let uuid = g
            .uuid
            .clone()
            .unwrap_or_else(|| format!("GPU-{}", g.pci_bus_id));
        let mig_on = g
            .mig
            .as_ref()
            .is_some_and(|m| m.current_mode == MigMode::Enabled);
        let published = g
            .mig
            .as_ref()
            .filter(|m| m.capable && !m.profiles.is_empty())
            .map(|m| m.profiles.clone())
            .or_else(|| crate::hardware::mig::catalog::profiles_for_model(&model));
        if let (true, Some(profiles)) = (dynamic_mig, published) {
            let set = format!("gpu-{gi}");
            // Placements are the agent's: one ending past any real GPU's
            // memory slices (or overflowing) is left out, so a hostile
            // report cannot make the counter set huge.
            let usable = |pl: &&crate::hardware::MigPlacement| {
                pl.start
                    .checked_add(pl.size)
                    .is_some_and(|end| end <= MAX_MIG_SLICES)
            };
            let slices = profiles
                .iter()
                .flat_map(|p| {
                    p.placements
                        .iter()
                        .filter(usable)
                        .map(|pl| pl.start + pl.size)
                })
                .max()
                .unwrap_or(0);
            let slice = |k: u32| format!("memory-slice-{k}");
            counters.insert(set.clone(), (0..slices).map(|k| (slice(k), 1000)).collect());
            let draw = |start: u32, size: u32| -> BTreeMap<String, BTreeMap<String, Milli>> {
                BTreeMap::from([(
                    set.clone(),
                    (start..start + size).map(|k| (slice(k), 1000)).collect(),
                )])
            };
            let mut whole_attrs = common.clone();
            whole_attrs.insert("gpu.nvidia.com/type".into(), s("gpu"));
            whole_attrs.insert("gpu.nvidia.com/uuid".into(), s(uuid.clone()));
            let mut whole = gpu_device(gi, whole_attrs, memory, None);
            whole.consumes = draw(0, slices);
            devices.push(whole);
            for p in profiles.iter().filter(|p| !p.name.ends_with("+me")) {
                for pl in p.placements.iter().filter(usable) {
                    let mut attrs = common.clone();
                    attrs.insert("gpu.nvidia.com/type".into(), s("mig"));
                    attrs.insert("gpu.nvidia.com/profile".into(), s(p.name.clone()));
                    attrs.insert("gpu.nvidia.com/parentUUID".into(), s(uuid.clone()));
                    devices.push(Device {
                        name: format!("gpu-{gi}-{}@{}", p.name, pl.start).into(),
                        driver: GPU_DRIVER.into(),
                        kind: DeviceKind::Mig,
                        attributes: attrs,
                        capacity: BTreeMap::from([(
                            MEMORY.into(),
                            to_milli(p.memory_mib.saturating_mul(1 << 20)),
                        )]),
                        shared: None,
                        gpu: Some(gi),
                        consumes: draw(pl.start, pl.size),
                        taints: Vec::new(),
                    });
                }
            }
        } else if mig_on {
            let mig = g.mig.as_ref().expect("checked");
            for inst in &mig.gpu_instances {
                let mut attrs = common.clone();
                attrs.insert("gpu.nvidia.com/type".into(), s("mig"));
                attrs.insert("gpu.nvidia.com/profile".into(), s(inst.profile.clone()));
                attrs.insert("gpu.nvidia.com/parentUUID".into(), s(uuid.clone()));
                if let Some(ci) = inst.compute_instances.first().and_then(|c| c.uuid.clone()) {
                    attrs.insert("gpu.nvidia.com/uuid".into(), s(ci));
                }
                let mem = mig
                    .profile(&inst.profile)
                    .map(|p| p.memory_mib.saturating_mul(1 << 20))
                    .unwrap_or(0);
                devices.push(Device {
                    name: format!("gpu-{gi}-mig-{}", inst.id).into(),
                    driver: GPU_DRIVER.into(),
                    kind: DeviceKind::Mig,
                    attributes: attrs,
                    capacity: BTreeMap::from([(MEMORY.into(), to_milli(mem))]),
                    shared: None,
                    gpu: Some(gi),
                    consumes: BTreeMap::new(),
                    taints: Vec::new(),
                });
            }
        } else {
            let mut attrs = common;
            attrs.insert("gpu.nvidia.com/type".into(), s("gpu"));
            attrs.insert("gpu.nvidia.com/uuid".into(), s(uuid));
            devices.push(gpu_device(gi, attrs, memory, sharing));
        }
    }
    for (ni, nic) in hw.nics.iter().enumerate() {
        let mut attrs = BTreeMap::new();
        attrs.insert("rdma.accord.dev/type".into(), s("nic"));
        let kind = match nic.kind {
            NicKind::Ethernet => "ethernet",
            NicKind::Infiniband => "infiniband",
            NicKind::Roce => "roce",
            NicKind::Unknown => "unknown",
        };
        attrs.insert("rdma.accord.dev/kind".into(), s(kind));
        attrs.insert("rdma.accord.dev/interface".into(), s(nic.name.clone()));
        if let Some(root) = &nic.pcie_root {
            attrs.insert(PCIE_ROOT.into(), s(root.clone()));
        }
        if let Some(b) = nic.pci_bus_id {
            attrs.insert(PCI_BUS_ID.into(), s(b.to_string()));
        }
        if let Some(n) = nic.numa_node {
            attrs.insert(NUMA_NODE.into(), AttrValue::Int(i64::from(n)));
        }
        devices.push(Device {
            name: format!("nic-{ni}").into(),
            driver: NIC_DRIVER.into(),
            kind: DeviceKind::Nic,
            attributes: attrs,
            capacity: BTreeMap::new(),
            shared: None,
            gpu: None,
            consumes: BTreeMap::new(),
            taints: Vec::new(),
        });
    }
    mark_driver_partitions(&mut gpus, &devices);
    NodeDevices {
        gpus,
        devices,
        counters,
    }
}

pub(crate) fn to_milli(units: u64) -> Milli {
    i64::try_from(units)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000)
}

pub(crate) fn gpu_device(
    gi: usize,
    attrs: BTreeMap<String, AttrValue>,
    memory_bytes: u64,
    sharing: Option<Sharing>,
) -> Device {
    let capacity = BTreeMap::from([
        (MEMORY.to_owned(), to_milli(memory_bytes)),
        (COMPUTE.to_owned(), 1000),
    ]);
    let shared = sharing.map(|sh| {
        BTreeMap::from([
            (
                COMPUTE.to_owned(),
                RequestPolicy {
                    default: Some(1000),
                    min: sh.min_compute_milli,
                    step: sh.step_compute_milli,
                },
            ),
            (MEMORY.to_owned(), RequestPolicy::default()),
        ])
    });
    Device {
        name: format!("gpu-{gi}").into(),
        driver: GPU_DRIVER.into(),
        kind: DeviceKind::Gpu,
        attributes: attrs,
        capacity,
        shared,
        gpu: Some(gi),
        consumes: BTreeMap::new(),
        taints: Vec::new(),
    }
}
