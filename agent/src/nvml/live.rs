//! Live NVML discovery through `nvml-wrapper`.
//!
//! NVML is optional at run time: `libnvidia-ml.so` is loaded dynamically, and
//! a host without the NVIDIA driver gets [`LiveNvml::Unavailable`] with the
//! reason, never an error. A field a GPU does not support is left unknown.
//!
//! Known gaps of `nvml-wrapper` 0.13, worked around here:
//! - `possible_placements` returns an empty list (it never sets the vector's
//!   length) and GPU-instance ids and placements are not wrapped: both come
//!   from the raw calls in [`crate::mig::nvml`]; where those fail, placements
//!   come from NVIDIA's published table for the model and instances are
//!   reported with unknown placement (said in the notes);
//! - the fabric (clique) info is not wrapped, so `fabric` stays unknown.
//!   Snapshot files carry it.

use accord::hardware::{
    ComputeInstance, GpuInstance, MigMode, MigProfile, MigState, NvLinkPeerKind, PciBusId,
};
use nvml_wrapper::enum_wrappers::nv_link::IntDeviceType;
use nvml_wrapper::{Device, Nvml};

use crate::mig::nvml::{instances_of, mig_device_ids, mig_profiles, unavailable_reason};

use super::{NvmlDevice, NvmlLink, NvmlSnapshot, SNAPSHOT_VERSION};

/// NVML's `NVML_NVLINK_MAX_LINKS` for current GPUs (Blackwell has 18).
const MAX_NVLINKS: u32 = 18;
#[derive(Debug)]
pub enum LiveNvml {
    Available(NvmlSnapshot),
    /// NVML could not be used; the reason is for the admin.
    Unavailable(String),
}

/// Collects a snapshot from the running driver.
pub fn collect() -> LiveNvml {
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(e) => return LiveNvml::Unavailable(unavailable_reason(&e)),
    };
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => return LiveNvml::Unavailable(format!("NVML device count failed: {e}")),
    };
    let mut snapshot = NvmlSnapshot {
        snapshot_version: SNAPSHOT_VERSION,
        driver_version: nvml.sys_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        devices: Vec::new(),
        notes: Vec::new(),
    };
    // A driver answering an implausible count would keep this loop going
    // for hours, and past the GPU limit accordd refuses the report.
    let cap = u32::try_from(accord::hardware::limits::GPUS).unwrap_or(u32::MAX);
    if count > cap {
        snapshot.notes.push(format!(
            "NVML reports {count} GPUs; more than {cap} is not plausible: the first {cap} are read"
        ));
    }
    for index in 0..count.min(cap) {
        match nvml.device_by_index(index) {
            Ok(device) => {
                let (dev, notes) = read_device(index, &device);
                snapshot.notes.extend(notes);
                if let Some(dev) = dev {
                    snapshot.devices.push(dev);
                }
            }
            Err(e) => snapshot
                .notes
                .push(format!("NVML GPU {index} could not be opened: {e}")),
        }
    }
    LiveNvml::Available(snapshot)
}

fn read_device(index: u32, device: &Device<'_>) -> (Option<NvmlDevice>, Vec<String>) {
    let mut notes = Vec::new();
    let pci_bus_id = match device.pci_info() {
        Ok(pci) => match pci.bus_id.parse::<PciBusId>() {
            Ok(id) => id,
            Err(e) => {
                notes.push(format!("NVML GPU {index}: {e}"));
                return (None, notes);
            }
        },
        Err(e) => {
            notes.push(format!("NVML GPU {index}: no PCI info: {e}"));
            return (None, notes);
        }
    };
    let name = device.name().ok();
    let mig = read_mig(device, name.as_deref(), &mut notes);
    let dev = NvmlDevice {
        index,
        uuid: device.uuid().ok(),
        name,
        serial: device.serial().ok(),
        pci_bus_id,
        memory_total_bytes: device.memory_info().ok().map(|m| m.total),
        architecture: device.architecture().ok().map(|a| a.to_string()),
        compute_capability: device
            .cuda_compute_capability()
            .ok()
            .map(|c| format!("{}.{}", c.major, c.minor)),
        numa_node: device.numa_node_id().ok(),
        nvlinks: read_nvlinks(device),
        fabric: None,
        mig,
    };
    (Some(dev), notes)
}

fn read_nvlinks(device: &Device<'_>) -> Vec<NvmlLink> {
    let mut links = Vec::new();
    for link in 0..MAX_NVLINKS {
        let wrapper = device.link_wrapper_for(link);
        // A link index past the GPU's last link answers InvalidArg or
        // NotSupported: not an error, just the end of its links.
        let Ok(active) = wrapper.is_active() else {
            continue;
        };
        let remote_kind = match wrapper.remote_device_type(link) {
            Ok(IntDeviceType::Gpu) => NvLinkPeerKind::Gpu,
            Ok(IntDeviceType::Switch) => NvLinkPeerKind::NvSwitch,
            _ => NvLinkPeerKind::Other,
        };
        links.push(NvmlLink {
            link,
            active,
            version: wrapper.version().ok(),
            remote_pci_bus_id: wrapper
                .remote_pci_info()
                .ok()
                .and_then(|p| p.bus_id.parse().ok()),
            remote_kind,
        });
    }
    links
}

fn read_mig(device: &Device<'_>, model: Option<&str>, notes: &mut Vec<String>) -> Option<MigState> {
    let mode = device.mig_mode().ok()?;
    let as_mode = |m: u32| {
        if m == 1 {
            MigMode::Enabled
        } else {
            MigMode::Disabled
        }
    };
    let (profiles, published) = mig_profiles(device, model);
    if profiles.iter().any(|p| p.placements.is_empty()) && !published {
        notes.push(format!(
            "MIG placements for {} are unknown (NVML did not say, and no published table in this agent)",
            model.unwrap_or("this GPU")
        ));
    }
    let mut gpu_instances = Vec::new();
    if mode.current == 1 {
        gpu_instances = match instances_of(device) {
            Ok(list) => placed_instances(device, list, &profiles),
            Err(e) => {
                notes.push(format!(
                    "MIG GPU-instance placements unknown: listing GPU instances failed: {e}"
                ));
                unplaced_instances(device, &profiles)
            }
        };
    }
    Some(MigState {
        capable: true,
        current_mode: as_mode(mode.current),
        pending_mode: as_mode(mode.pending),
        profiles,
        gpu_instances,
    })
}

/// GPU instances as NVML lists them (ids, profiles, placements), with the
/// UUID and memory of each compute instance's MIG device.
fn placed_instances(
    device: &Device<'_>,
    list: Vec<crate::mig::GpuInstanceInfo>,
    profiles: &[MigProfile],
) -> Vec<GpuInstance> {
    let mut out: Vec<GpuInstance> = list
        .into_iter()
        .map(|gi| GpuInstance {
            id: gi.id,
            profile: profiles
                .iter()
                .find(|p| p.id == gi.profile_id)
                .map_or_else(|| "unknown".to_owned(), |p| p.name.clone()),
            profile_id: Some(gi.profile_id),
            placement: Some(gi.placement),
            compute_instances: gi
                .compute_instances
                .into_iter()
                .map(|id| ComputeInstance {
                    id,
                    uuid: None,
                    sm_count: None,
                    memory_mib: None,
                })
                .collect(),
        })
        .collect();
    let max = device.mig_device_count().unwrap_or(0);
    for i in 0..max {
        let Ok(mig_dev) = device.mig_device_by_index(i) else {
            continue;
        };
        let Ok((gi, ci)) = mig_device_ids(&mig_dev) else {
            continue;
        };
        if let Some(c) = out
            .iter_mut()
            .filter(|g| g.id == gi)
            .flat_map(|g| g.compute_instances.iter_mut())
            .find(|c| c.id == ci)
        {
            c.uuid = mig_dev.uuid().ok();
            c.memory_mib = mig_dev.memory_info().ok().map(|m| m.total / (1024 * 1024));
        }
    }
    out
}

/// GPU instances from the MIG devices alone (ids and placements unknown):
/// when the instance calls fail.
fn unplaced_instances(device: &Device<'_>, profiles: &[MigProfile]) -> Vec<GpuInstance> {
    let mut gpu_instances = Vec::new();
    let max = device.mig_device_count().unwrap_or(0);
    for i in 0..max {
        let Ok(mig_dev) = device.mig_device_by_index(i) else {
            continue;
        };
        let memory_mib = mig_dev.memory_info().ok().map(|m| m.total / (1024 * 1024));
        let profile = memory_mib
            .and_then(|mib| {
                profiles
                    .iter()
                    .filter(|p| !p.name.ends_with("+me"))
                    .min_by_key(|p| p.memory_mib.abs_diff(mib))
            })
            .map(|p| p.name.clone())
            .unwrap_or_else(|| "unknown".to_owned());
        gpu_instances.push(GpuInstance {
            id: i,
            profile,
            profile_id: None,
            placement: None,
            compute_instances: vec![ComputeInstance {
                id: 0,
                uuid: mig_dev.uuid().ok(),
                sm_count: None,
                memory_mib,
            }],
        });
    }
    gpu_instances
}
