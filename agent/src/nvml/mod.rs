//! NVML's view of the GPUs, as a recorded snapshot.
//!
//! Live discovery ([`live`]) and offline sources (a snapshot file, or an
//! `nvidia-smi -q -x` dump via [`nvidia_smi`]) all produce an
//! [`NvmlSnapshot`]; [`crate::merge`] folds it into hwloc's model. The JSON
//! form is documented in `docs/nvml-snapshot.md`.

pub mod live;
pub mod nvidia_smi;

use std::path::Path;

use accord::hardware::{limits, GpuFabric, MigState, NvLinkPeerKind, PciBusId};
use serde::{Deserialize, Serialize};

use crate::error::{read_file, DiscoveryError, Result};

pub const SNAPSHOT_VERSION: u32 = 1;

/// What NVML reported about every GPU of one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlSnapshot {
    pub snapshot_version: u32,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub cuda_driver_version: Option<i32>,
    pub devices: Vec<NvmlDevice>,
    /// Quirks of the source (e.g. a dump that lists fewer GPUs than attached).
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlDevice {
    pub index: u32,
    pub uuid: Option<String>,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: Option<String>,
    pub serial: Option<String>,
    pub pci_bus_id: PciBusId,
    pub memory_total_bytes: Option<u64>,
    pub architecture: Option<String>,
    /// `major.minor`.
    pub compute_capability: Option<String>,
    pub numa_node: Option<u32>,
    #[serde(default)]
    pub nvlinks: Vec<NvmlLink>,
    pub fabric: Option<GpuFabric>,
    pub mig: Option<MigState>,
}

/// One NVLink of a GPU, as `nvmlDeviceGetNvLink*` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlLink {
    pub link: u32,
    pub active: bool,
    pub version: Option<u32>,
    pub remote_pci_bus_id: Option<PciBusId>,
    pub remote_kind: NvLinkPeerKind,
}

/// Per-link NVLink bandwidth in MB/s, one direction, by NVLink version
/// (NVLink 1: 20 GB/s; 2–4: 25 GB/s; 5: 50 GB/s per link and direction).
pub fn nvlink_link_bandwidth_mbps(version: u32) -> u64 {
    match version {
        0 | 1 => 20_000,
        2..=4 => 25_000,
        _ => 50_000,
    }
}

/// Loads a snapshot file, refusing malformed files and newer formats.
pub fn load_snapshot(path: &Path) -> Result<NvmlSnapshot> {
    let text = read_file(path)?;
    let bad = |reason: String| DiscoveryError::BadSnapshot {
        path: path.to_owned(),
        reason,
    };
    let value: serde_json::Value = accord::json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let version = value
        .get("snapshot_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| bad("missing or non-numeric `snapshot_version`".into()))?;
    let version = u32::try_from(version).unwrap_or(u32::MAX);
    if version != SNAPSHOT_VERSION {
        return Err(DiscoveryError::UnsupportedSnapshotVersion {
            path: path.to_owned(),
            version,
            supported: SNAPSHOT_VERSION,
        });
    }
    // Parse the text again (not the Value) so errors carry line and column.
    let snapshot: NvmlSnapshot = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    check_snapshot(&snapshot).map_err(bad)?;
    Ok(snapshot)
}

/// A GPU index below [`limits::GPUS`].
pub(crate) fn plausible_index(index: u64) -> bool {
    usize::try_from(index).is_ok_and(|i| i < limits::GPUS)
}

/// The numbers of a snapshot against the plausibility limits: GPU indexes
/// below [`limits::GPUS`] (the merge numbers hwloc-only GPUs after the
/// largest), memory within [`limits::GPU_MEMORY_GIB`]. Past them a file is
/// hostile or broken, and what it says would be refused by accordd anyway:
/// refused, naming the field and value.
pub fn check_snapshot(snapshot: &NvmlSnapshot) -> std::result::Result<(), String> {
    let over = |field: String, value: u64, limit: u64| {
        format!("{field}: {value}; at most {limit} accepted (plausibility limit)")
    };
    for (i, d) in snapshot.devices.iter().enumerate() {
        if !plausible_index(u64::from(d.index)) {
            return Err(format!(
                "devices[{i}].index: {}; a GPU index is below {} (plausibility limit)",
                d.index,
                limits::GPUS
            ));
        }
        if let Some(m) = d.memory_total_bytes {
            if m > limits::GPU_MEMORY_BYTES {
                let field = format!("devices[{i}].memory_total_bytes");
                return Err(over(field, m, limits::GPU_MEMORY_BYTES));
            }
        }
        let Some(mig) = &d.mig else { continue };
        for (j, p) in mig.profiles.iter().enumerate() {
            if p.memory_mib > limits::GPU_MEMORY_MIB {
                let field = format!("devices[{i}].mig.profiles[{j}].memory_mib");
                return Err(over(field, p.memory_mib, limits::GPU_MEMORY_MIB));
            }
        }
        for (j, gi) in mig.gpu_instances.iter().enumerate() {
            for (k, ci) in gi.compute_instances.iter().enumerate() {
                if let Some(m) = ci.memory_mib.filter(|m| *m > limits::GPU_MEMORY_MIB) {
                    let field = format!(
                        "devices[{i}].mig.gpu_instances[{j}].compute_instances[{k}].memory_mib"
                    );
                    return Err(over(field, m, limits::GPU_MEMORY_MIB));
                }
            }
        }
    }
    Ok(())
}
