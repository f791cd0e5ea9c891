//! Imports an `nvidia-smi -q -x` dump as an NVML snapshot, so an admin can
//! send what `nvidia-smi` printed when the agent cannot run on the host.
//!
//! `nvidia-smi -q` names MIG devices by size only, so each instance's profile
//! is matched against NVIDIA's published table for the GPU model (SM count
//! and memory); placements are not in the dump and stay unknown.

use std::collections::BTreeMap;
use std::path::Path;

use accord::hardware::mig::catalog;
use accord::hardware::{
    limits, ComputeInstance, GpuFabric, GpuInstance, MigMode, MigProfile, MigState, PciBusId,
};
use roxmltree::Node;

use super::{NvmlDevice, NvmlSnapshot, SNAPSHOT_VERSION};
use crate::error::{read_file, DiscoveryError, Result};

pub fn import_file(path: &Path) -> Result<NvmlSnapshot> {
    let text = read_file(path)?;
    import(&text).map_err(|reason| DiscoveryError::BadNvidiaSmi {
        path: path.to_owned(),
        reason,
    })
}

fn child<'a>(node: Node<'a, 'a>, name: &str) -> Option<Node<'a, 'a>> {
    node.children().find(|c| c.has_tag_name(name))
}

/// Text of a descendant path like `pci/pci_bus_id`; `N/A` counts as absent.
fn text(node: Node<'_, '_>, path: &str) -> Option<String> {
    let mut cur = node;
    for part in path.split('/') {
        cur = child(cur, part)?;
    }
    let t = cur.text()?.trim();
    (!t.is_empty() && t != "N/A" && !t.starts_with("Not ")).then(|| t.to_owned())
}

/// `81920 MiB` → 81920.
fn mib(node: Node<'_, '_>, path: &str) -> Option<u64> {
    text(node, path)?.split_whitespace().next()?.parse().ok()
}

fn mode(node: Node<'_, '_>, path: &str) -> Option<MigMode> {
    match text(node, path)?.as_str() {
        "Enabled" => Some(MigMode::Enabled),
        "Disabled" => Some(MigMode::Disabled),
        _ => None,
    }
}

pub fn import(xml: &str) -> std::result::Result<NvmlSnapshot, String> {
    // Before roxmltree, which recurses once per nesting level.
    crate::xml::check_shape(xml, crate::xml::MAX_XML_DEPTH).map_err(|e| e.to_string())?;
    let doc = roxmltree::Document::parse_with_options(xml, crate::xml_options())
        .map_err(|e| e.to_string())?;
    let root = doc.root_element();
    if !root.has_tag_name("nvidia_smi_log") {
        return Err(format!(
            "root element is <{}>, expected <nvidia_smi_log>",
            root.tag_name().name()
        ));
    }
    let mut snapshot = NvmlSnapshot {
        snapshot_version: SNAPSHOT_VERSION,
        driver_version: text(root, "driver_version"),
        nvml_version: None,
        cuda_driver_version: None,
        devices: Vec::new(),
        notes: Vec::new(),
    };
    for (index, gpu) in root
        .children()
        .filter(|c| c.has_tag_name("gpu"))
        .enumerate()
    {
        let bus = text(gpu, "pci/pci_bus_id")
            .or_else(|| gpu.attribute("id").map(str::to_owned))
            .ok_or_else(|| format!("<gpu> #{index} has no PCI bus id"))?;
        let pci_bus_id: PciBusId = bus.parse().map_err(|e| format!("<gpu> #{index}: {e}"))?;
        let name = text(gpu, "product_name");
        let mig = import_mig(gpu, name.as_deref(), &mut snapshot.notes);
        let fabric = child(gpu, "fabric").and_then(|f| {
            let cluster_uuid = text(f, "cluster_uuid").or_else(|| text(f, "clusterUuid"))?;
            let clique_id = text(f, "clique_id")
                .or_else(|| text(f, "cliqueId"))?
                .parse()
                .ok()?;
            Some(GpuFabric {
                cluster_uuid,
                clique_id,
                state: text(f, "state"),
            })
        });
        let gpu_index = gpu_index(gpu, index)?;
        let memory_total_bytes = memory_bytes(gpu, index, &mut snapshot.notes);
        snapshot.devices.push(NvmlDevice {
            index: gpu_index,
            uuid: text(gpu, "uuid"),
            name,
            serial: text(gpu, "serial"),
            pci_bus_id,
            memory_total_bytes,
            architecture: text(gpu, "product_architecture"),
            compute_capability: None,
            numa_node: text(gpu, "numa_node").and_then(|n| n.parse().ok()),
            nvlinks: Vec::new(),
            fabric,
            mig,
        });
    }
    if let Some(attached) = text(root, "attached_gpus").and_then(|a| a.parse::<usize>().ok()) {
        if attached != snapshot.devices.len() {
            snapshot.notes.push(format!(
                "nvidia-smi reports {attached} attached GPUs but the dump describes {}",
                snapshot.devices.len()
            ));
        }
    }
    // What the import keeps is within the limits a snapshot file is held to.
    super::check_snapshot(&snapshot)?;
    Ok(snapshot)
}

/// The GPU's index: its `minor_number`, else its place in the dump. Refused
/// at or past the GPU limit (the merge numbers hwloc-only GPUs after the
/// largest).
fn gpu_index(gpu: Node<'_, '_>, position: usize) -> std::result::Result<u32, String> {
    let minor = text(gpu, "minor_number").and_then(|m| m.parse::<u64>().ok());
    let (what, value) = match minor {
        Some(m) => ("minor_number", m),
        None => ("index (no minor_number)", position as u64),
    };
    match u32::try_from(value) {
        Ok(i) if super::plausible_index(value) => Ok(i),
        _ => Err(format!(
            "<gpu> #{position}: {what} {value}; a GPU index is below {} (plausibility limit)",
            limits::GPUS
        )),
    }
}

/// `fb_memory_usage/total` in bytes: unknown, and said in a note, past the
/// plausibility limit (which accordd holds reports to), where MiB → bytes
/// would also wrap.
fn memory_bytes(gpu: Node<'_, '_>, position: usize, notes: &mut Vec<String>) -> Option<u64> {
    let m = mib(gpu, "fb_memory_usage/total")?;
    let bytes = m
        .checked_mul(1 << 20)
        .filter(|b| *b <= limits::GPU_MEMORY_BYTES);
    if bytes.is_none() {
        notes.push(format!(
            "<gpu> #{position}: fb_memory_usage/total is {m} MiB; more than {} GiB is not plausible: memory unknown",
            limits::GPU_MEMORY_GIB
        ));
    }
    bytes
}

fn import_mig(gpu: Node<'_, '_>, model: Option<&str>, notes: &mut Vec<String>) -> Option<MigState> {
    let current = mode(gpu, "mig_mode/current_mig")?;
    let pending = mode(gpu, "mig_mode/pending_mig").unwrap_or(current);
    let profiles = model
        .and_then(catalog::profiles_for_model)
        .unwrap_or_default();
    let mut instances: BTreeMap<u32, GpuInstance> = BTreeMap::new();
    let devices = child(gpu, "mig_devices")
        .into_iter()
        .flat_map(|m| m.children().filter(|c| c.has_tag_name("mig_device")));
    for dev in devices {
        let Some(gi) = text(dev, "gpu_instance_id").and_then(|v| v.parse().ok()) else {
            continue;
        };
        let ci = text(dev, "compute_instance_id")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let sms: Option<u32> =
            text(dev, "device_attributes/shared/multiprocessor_count").and_then(|v| v.parse().ok());
        // Unknown past the plausibility limit (accordd's too).
        let memory_mib = mib(dev, "fb_memory_usage/total").filter(|m| *m <= limits::GPU_MEMORY_MIB);
        let entry = instances.entry(gi).or_insert_with(|| {
            let profile = match_profile(&profiles, sms, memory_mib);
            if profile.is_none() {
                notes.push(format!(
                    "MIG instance {gi} on {}: no published profile with {} SMs and {} MiB",
                    model.unwrap_or("unknown GPU"),
                    sms.map_or("?".into(), |s| s.to_string()),
                    memory_mib.map_or("?".into(), |m| m.to_string()),
                ));
            }
            GpuInstance {
                id: gi,
                profile: profile.map_or_else(|| "unknown".to_owned(), |p| p.name.clone()),
                profile_id: profile.map(|p| p.id),
                placement: None,
                compute_instances: Vec::new(),
            }
        });
        entry.compute_instances.push(ComputeInstance {
            id: ci,
            uuid: text(dev, "uuid"),
            sm_count: sms,
            memory_mib,
        });
    }
    Some(MigState {
        capable: true,
        current_mode: current,
        pending_mode: pending,
        profiles,
        gpu_instances: instances.into_values().collect(),
    })
}

/// The published profile with this SM count and memory (within 1%). `+me`
/// variants share both with their plain profile; the plain one is chosen.
fn match_profile(
    profiles: &[MigProfile],
    sms: Option<u32>,
    memory_mib: Option<u64>,
) -> Option<&MigProfile> {
    let memory_mib = memory_mib?;
    profiles
        .iter()
        .filter(|p| !p.name.ends_with("+me"))
        .filter(|p| sms.is_none() || p.sm_count == sms)
        // `d <= m / 100` is `d * 100 <= m` for integers, and cannot wrap.
        .find(|p| p.memory_mib.abs_diff(memory_mib) <= p.memory_mib / 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mig_memory_far_from_every_profile_matches_none_not_wraps() {
        let profiles = catalog::profiles_for_model("NVIDIA A100-SXM4-80GB").unwrap();
        let name = |sms, mib| match_profile(&profiles, sms, mib).map(|p| p.name.as_str());
        assert_eq!(name(Some(14), Some(19968)), Some("1g.20gb"));
        // Within 1% of 19968 MiB (199 MiB), not 200.
        assert_eq!(name(Some(14), Some(19968 + 199)), Some("1g.20gb"));
        assert_eq!(name(Some(14), Some(19968 + 200)), None);
        // `abs_diff * 100` wrapped (a debug build panicked) and could match.
        assert_eq!(name(None, Some(u64::MAX)), None);
        assert_eq!(name(None, Some(u64::MAX / 50)), None);
        assert_eq!(name(Some(14), Some(184_467_440_737_095_516 + 19968)), None);
    }
}
