//! The hardware model of one node: what `accord-agent` discovers and reports,
//! and what `accordd` and the planner consume ("one hardware model, two
//! consumers").
//!
//! The JSON form of [`NodeHardware`] is the contract between agent and daemon;
//! it is documented in `docs/hardware-model.md`. Every collection is ordered
//! (by PCI bus id, NUMA id or index) so the same machine always serialises to
//! the same bytes.

pub mod bios;
pub mod limits;
pub mod mig;
pub mod pci;
mod queries;

use serde::{Deserialize, Serialize};

pub use bios::BiosSeen;
pub use mig::{
    ComputeInstance, GpuInstance, MigLayoutError, MigMode, MigPlacement, MigProfile, MigQueryError,
    MigState,
};
pub use pci::{PciBusId, PciBusIdError};
pub use queries::{NvLinkGroup, PcieScope};

/// Version of the JSON form. Bump it on any change a reader of the previous
/// version would misread; additive optional fields do not need a bump.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything Accord knows about one node's hardware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeHardware {
    pub schema_version: u32,
    pub machine: Machine,
    /// Sorted by `id`.
    pub numa_nodes: Vec<NumaNode>,
    /// NUMA distance matrices reported by the firmware or OS (hwloc's
    /// `NUMALatency`, ...), in the order of `numa_nodes` ids listed in each.
    #[serde(default)]
    pub numa_distances: Vec<DistanceMatrix>,
    pub pcie: PcieTopology,
    /// Sorted by `index`.
    pub gpus: Vec<Gpu>,
    /// Sorted by PCI bus id, then name.
    pub nics: Vec<Nic>,
    /// Sorted by PCI bus id.
    #[serde(default)]
    pub nvswitches: Vec<NvSwitch>,
    /// One entry per connected pair (GPU–GPU or GPU–NVSwitch), sorted.
    pub nvlinks: Vec<NvLink>,
    pub discovery: Discovery,
}

/// Identity and CPU/memory totals of the machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: Option<String>,
    pub vendor: Option<String>,
    pub product: Option<String>,
    pub serial: Option<String>,
    pub cpu_model: Option<String>,
    pub packages: u32,
    pub cores: u32,
    /// Hardware threads (hwloc PUs).
    pub threads: u32,
    pub memory_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// OS index (`/sys/devices/system/node/nodeN`).
    pub id: u32,
    /// CPUs in Linux list form, e.g. `0-23,48-71`.
    pub cpuset: String,
    /// Number of hardware threads in `cpuset`.
    pub cpus: u32,
    pub memory_bytes: u64,
}

/// A square matrix over NUMA nodes: `values[i][j]` is the distance from
/// `nodes[i]` to `nodes[j]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistanceMatrix {
    pub name: String,
    pub nodes: Vec<u32>,
    pub values: Vec<Vec<u64>>,
}

/// The PCIe tree: root complexes, switches, and every device's path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PcieTopology {
    /// Sorted by id.
    pub roots: Vec<PcieRoot>,
    /// Sorted by bus id.
    pub switches: Vec<PcieSwitch>,
    /// Sorted by bus id.
    pub devices: Vec<PciDevice>,
}

/// A PCIe root complex (host bridge).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieRoot {
    /// `pci<domain>:<bus>`, the value DRA drivers publish as
    /// `resource.kubernetes.io/pcieRoot` (e.g. `pci0000:00`).
    pub id: String,
    pub domain: u16,
    pub bus: u8,
    pub numa_node: Option<u32>,
}

/// A PCIe switch, named by the bus id of its upstream port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieSwitch {
    pub bus_id: PciBusId,
    pub root: String,
    /// The switch above this one, for cascaded switches.
    pub parent: Option<PciBusId>,
    pub vendor_id: u16,
    pub device_id: u16,
    pub name: Option<String>,
    pub numa_node: Option<u32>,
}

/// What a PCI device is, as far as Accord cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PciDeviceRole {
    Gpu,
    Nic,
    NvSwitch,
    Storage,
    Other,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciDevice {
    pub bus_id: PciBusId,
    pub role: PciDeviceRole,
    /// PCI class code (e.g. `0x0302` 3D controller).
    pub class_id: u16,
    pub vendor_id: u16,
    pub device_id: u16,
    pub vendor: Option<String>,
    pub name: Option<String>,
    /// The root complex id (`pci0000:00`).
    pub root: String,
    /// Bus ids of the PCI-PCI bridges from the root down to this device.
    pub path: Vec<PciBusId>,
    /// The nearest PCIe switch above the device, if any.
    pub switch: Option<PciBusId>,
    pub numa_node: Option<u32>,
    /// Link speed in GB/s as reported by hwloc (0 when unknown).
    pub link_gbps: Option<f32>,
}

/// Where a fact came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Hwloc,
    Nvml,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// NVML index when NVML saw the GPU, else the order by PCI bus id.
    pub index: u32,
    pub uuid: Option<String>,
    pub pci_bus_id: PciBusId,
    pub vendor: Option<String>,
    pub model: Option<String>,
    pub memory_bytes: Option<u64>,
    pub architecture: Option<String>,
    /// CUDA compute capability, `major.minor`.
    pub compute_capability: Option<String>,
    pub numa_node: Option<u32>,
    pub pcie_root: Option<String>,
    pub pcie_switch: Option<PciBusId>,
    pub serial: Option<String>,
    /// OS device names (`nvml0`, `cuda0`, `card1`, ...).
    #[serde(default)]
    pub os_devices: Vec<String>,
    /// Multi-node NVLink fabric membership, where NVML reports it.
    pub fabric: Option<GpuFabric>,
    /// `None` when the GPU is not MIG capable or MIG state is unknown.
    pub mig: Option<MigState>,
    pub sources: Vec<Source>,
}

/// The NVLink fabric (multi-node NVLink domain) a GPU belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFabric {
    pub cluster_uuid: String,
    pub clique_id: u32,
    pub state: Option<String>,
}

impl GpuFabric {
    /// The clique label NVIDIA GPU Feature Discovery publishes
    /// (`nvidia.com/gpu.clique`): `<ClusterUUID>.<CliqueID>`.
    pub fn clique(&self) -> String {
        format!("{}.{}", self.cluster_uuid, self.clique_id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicKind {
    Ethernet,
    Infiniband,
    /// An RDMA device whose link layer is Ethernet.
    Roce,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    /// The first network interface name, else the RDMA device name.
    pub name: String,
    pub kind: NicKind,
    pub pci_bus_id: Option<PciBusId>,
    pub vendor: Option<String>,
    pub model: Option<String>,
    pub numa_node: Option<u32>,
    pub pcie_root: Option<String>,
    pub pcie_switch: Option<PciBusId>,
    /// Kernel network interfaces (`eth0`, `ib0`).
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// RDMA devices (`mlx5_0`).
    #[serde(default)]
    pub rdma_devices: Vec<String>,
    pub link_speed_mbps: Option<u64>,
    /// MAC address or port GUID, where known.
    pub address: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvSwitch {
    pub pci_bus_id: PciBusId,
    pub numa_node: Option<u32>,
    pub pcie_root: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NvLinkPeerKind {
    Gpu,
    NvSwitch,
    Other,
}

/// One end of an NVLink connection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NvLinkPeer {
    pub kind: NvLinkPeerKind,
    pub pci_bus_id: PciBusId,
}

/// NVLink connectivity between two devices (`a < b`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLink {
    pub a: NvLinkPeer,
    pub b: NvLinkPeer,
    /// Number of active links, where known (NVML).
    pub links: Option<u32>,
    /// Bandwidth in MB/s, one direction, all links together.
    pub bandwidth_mbps: u64,
    /// NVLink version, where known (NVML).
    pub version: Option<u32>,
    pub sources: Vec<Source>,
}

/// How the model was obtained, and what did not add up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Discovery {
    /// Where hwloc's view came from (`live`, or the XML file).
    pub hwloc: Option<SourceInfo>,
    /// Where NVML's view came from; `None` when NVML was not available.
    pub nvml: Option<SourceInfo>,
    /// Things an admin should know (NVML missing, a file quirk, ...).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Facts the sources disagree on; never silently resolved.
    #[serde(default)]
    pub disagreements: Vec<Disagreement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// `live` or the file it was loaded from.
    pub origin: String,
    /// Library or driver version, where known.
    pub version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    pub pci_bus_id: Option<PciBusId>,
    pub field: String,
    pub hwloc: Option<String>,
    pub nvml: Option<String>,
}

impl NodeHardware {
    /// An empty model at the current schema version.
    pub fn empty() -> Self {
        NodeHardware {
            schema_version: SCHEMA_VERSION,
            machine: Machine::default(),
            numa_nodes: Vec::new(),
            numa_distances: Vec::new(),
            pcie: PcieTopology::default(),
            gpus: Vec::new(),
            nics: Vec::new(),
            nvswitches: Vec::new(),
            nvlinks: Vec::new(),
            discovery: Discovery::default(),
        }
    }

    pub fn gpu(&self, bus_id: &PciBusId) -> Option<&Gpu> {
        self.gpus.iter().find(|g| &g.pci_bus_id == bus_id)
    }

    /// The first PCI device at `bus_id`. Real exports occasionally list two
    /// devices at one bus id (noted in `discovery.notes`); placement queries
    /// therefore use each device's own root and switch, not this lookup.
    pub fn pci_device(&self, bus_id: &PciBusId) -> Option<&PciDevice> {
        self.pcie.devices.iter().find(|d| &d.bus_id == bus_id)
    }

    /// Puts every collection in its canonical order, so equal machines
    /// serialise to equal bytes.
    pub fn canonicalize(&mut self) {
        self.numa_nodes.sort_by_key(|n| n.id);
        self.pcie.roots.sort_by(|a, b| a.id.cmp(&b.id));
        self.pcie.switches.sort_by_key(|s| s.bus_id);
        self.pcie.devices.sort_by_key(|d| d.bus_id);
        self.gpus
            .sort_by(|a, b| (a.index, &a.pci_bus_id).cmp(&(b.index, &b.pci_bus_id)));
        self.nics
            .sort_by(|a, b| (&a.pci_bus_id, &a.name).cmp(&(&b.pci_bus_id, &b.name)));
        self.nvswitches.sort_by_key(|s| s.pci_bus_id);
        for link in &mut self.nvlinks {
            if link.b < link.a {
                std::mem::swap(&mut link.a, &mut link.b);
            }
        }
        self.nvlinks.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
        for gpu in &mut self.gpus {
            gpu.sources.sort();
            gpu.sources.dedup();
            if let Some(mig) = &mut gpu.mig {
                mig.canonicalize();
            }
        }
    }
}
