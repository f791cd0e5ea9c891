//! Plausibility limits on one machine, each far above any real one (the
//! largest today: 32 sockets, 16 NUMA nodes, 8-16 GPUs, a few dozen NICs,
//! a few hundred PCI functions). One table for every reader: the fleet
//! file's validation and synthetic model (`fleet/validate.rs`,
//! `fleet/install.rs`), accordd's check of
//! agents' reports and heartbeats (`daemon/src/api/limits.rs`), and the
//! agent's own caps on what it reads and sends (so what it sends is never
//! refused for size). Something past a limit is a typo or hostile; no
//! reader allocates by an unchecked number. Constants: changing one is a
//! code change, on purpose.

/// GPUs per node (an HGX/DGX board has 8, the largest systems 16); a
/// GPU's index (NVML's, nvidia-smi's minor number) is below it.
pub const GPUS: usize = 64;
/// GPUs under one PCIe root: the fleet's synthetic model makes them PCI
/// devices 0.. on the root's bus, its NIC device 0x1f.
pub const GPUS_PER_PCIE_ROOT: u32 = 16;
/// Memory per GPU, GiB (the largest today have under 300).
pub const GPU_MEMORY_GIB: u64 = 4096;
/// [`GPU_MEMORY_GIB`] in MiB (a MIG profile's or instance's memory) and
/// in bytes (a GPU's `memory_bytes`).
pub const GPU_MEMORY_MIB: u64 = GPU_MEMORY_GIB << 10;
pub const GPU_MEMORY_BYTES: u64 = GPU_MEMORY_GIB << 30;
/// NVLink bandwidth between two devices, MB/s one direction (an NVLink 5
/// GPU has 18 links of 50 GB/s: 900 000 MB/s in all).
pub const NVLINK_BANDWIDTH_MBPS: u64 = 100_000_000;
/// Processes named per busy GPU in a command's outcome.
pub const PIDS_PER_GPU: usize = 1024;
/// NICs per node, counting every port and virtual function reported.
pub const NICS: usize = 1024;
/// NUMA nodes per node.
pub const NUMA_NODES: usize = 64;
/// NUMA distance matrices (hwloc reports one or two).
pub const DISTANCE_MATRICES: usize = 16;
/// PCIe devices (all functions, bridges included).
pub const PCIE_DEVICES: usize = 4096;
/// PCIe switches.
pub const PCIE_SWITCHES: usize = 4096;
/// PCIe roots (host bridges).
pub const PCIE_ROOTS: usize = 1024;
/// Bridges between a device and its root.
pub const PCIE_PATH: usize = 64;
/// NVSwitches (a DGX-2 has 12, an NVL72 tray 18 visible).
pub const NVSWITCHES: usize = 64;
/// NVLink connections (a DGX-2: 8 GPUs × 6 switches × 2 boards).
pub const NVLINKS: usize = 4096;
/// MIG GPU instances per GPU (NVIDIA's maximum is 7).
pub const MIG_INSTANCES_PER_GPU: usize = 7;
/// Compute instances per MIG GPU instance (at most 7 slices).
pub const MIG_COMPUTE_INSTANCES: usize = 7;
/// MIG profiles a GPU lists (an H100 lists about 20).
pub const MIG_PROFILES: usize = 64;
/// Placements per MIG profile (at most one per slice).
pub const MIG_PLACEMENTS: usize = 8;
/// OS device names per GPU, interfaces and RDMA devices per NIC.
pub const NAMES_PER_DEVICE: usize = 64;
/// Discovery notes and hwloc/NVML disagreements.
pub const NOTES: usize = 1024;
pub const DISAGREEMENTS: usize = 4096;
/// CPU packages, cores and hardware threads.
pub const PACKAGES: u32 = 64;
pub const CORES: u32 = 65_536;
pub const THREADS: u32 = 262_144;
/// Bytes in any one string of a report (names, serials, notes).
pub const STRING_BYTES: usize = 4096;
/// Pods per node (kubelet's default is 110; large nodes run a few
/// hundred).
pub const PODS: i64 = 10_000;
/// Pods a heartbeat lists with assigned devices (the kubelet's `maxPods`
/// defaults to 110; clusters set a few hundred).
pub const ASSIGNED_PODS: usize = 4096;
/// Device IDs per pod (16 GPUs × 7 MIG devices, or shared replicas).
pub const IDS_PER_POD: usize = 1024;
/// Bytes in a device ID (an NVML UUID is 40; `::N` adds a few).
pub const DEVICE_ID_BYTES: usize = 128;
/// A node's draw when on, kW (an 8-GPU node draws about 10).
pub const NODE_POWER_KW: f64 = 1_000.0;
