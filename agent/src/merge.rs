//! Folds NVML's view into hwloc's: GPUs are matched by PCI bus id; what the
//! two sources disagree on is recorded in `discovery.disagreements`, never
//! silently resolved.

use std::collections::BTreeMap;

use accord::hardware::{
    limits, Disagreement, Gpu, NodeHardware, NvLink, NvLinkPeer, NvLinkPeerKind, NvSwitch,
    PciBusId, Source, SourceInfo,
};

use crate::nvml::{nvlink_link_bandwidth_mbps, NvmlSnapshot};

const NVIDIA_PCI_VENDOR: u16 = 0x10de;

/// Merges `snapshot` (from `origin`) into `hw`.
pub fn merge(hw: &mut NodeHardware, snapshot: &NvmlSnapshot, origin: String) {
    hw.discovery.nvml = Some(SourceInfo {
        origin,
        version: snapshot.driver_version.clone(),
    });
    hw.discovery.notes.extend(snapshot.notes.iter().cloned());
    let mut disagreements = Vec::new();
    let mut disagree = |bus: PciBusId, field: &str, hwloc: Option<String>, nvml: Option<String>| {
        disagreements.push(Disagreement {
            pci_bus_id: Some(bus),
            field: field.to_owned(),
            hwloc,
            nvml,
        });
    };

    for dev in &snapshot.devices {
        let bus = dev.pci_bus_id;
        let Some(gpu) = hw.gpus.iter_mut().find(|g| g.pci_bus_id == bus) else {
            disagree(bus, "present", None, Some(describe(dev.name.as_deref())));
            hw.gpus.push(Gpu {
                index: dev.index,
                uuid: dev.uuid.clone(),
                pci_bus_id: bus,
                vendor: Some("NVIDIA Corporation".to_owned()),
                model: dev.name.clone(),
                memory_bytes: dev.memory_total_bytes,
                architecture: dev.architecture.clone(),
                compute_capability: dev.compute_capability.clone(),
                numa_node: dev.numa_node,
                pcie_root: None,
                pcie_switch: None,
                serial: dev.serial.clone(),
                os_devices: Vec::new(),
                fabric: dev.fabric.clone(),
                mig: dev.mig.clone(),
                sources: vec![Source::Nvml],
            });
            continue;
        };
        // hwloc's own NVML backend names GPUs `nvmlN`; only then are its
        // model, UUID and serial comparable with NVML's.
        let hwloc_read_nvml = gpu.os_devices.iter().any(|o| o.starts_with("nvml"));
        let mut check =
            |field: &str, ours: &mut Option<String>, theirs: &Option<String>, comparable: bool| {
                match (ours.as_ref(), theirs) {
                    (Some(a), Some(b)) if a != b && comparable => {
                        disagree(bus, field, Some(a.clone()), Some(b.clone()));
                        // NVML is the authority on GPU identity.
                        *ours = Some(b.clone());
                    }
                    (_, Some(b)) => *ours = Some(b.clone()),
                    _ => {}
                }
            };
        check("uuid", &mut gpu.uuid, &dev.uuid, true);
        check("serial", &mut gpu.serial, &dev.serial, true);
        check("model", &mut gpu.model, &dev.name, hwloc_read_nvml);
        match (gpu.numa_node, dev.numa_node) {
            (Some(a), Some(b)) if a != b => {
                disagree(bus, "numa_node", Some(a.to_string()), Some(b.to_string()));
            }
            (None, Some(b)) => gpu.numa_node = Some(b),
            _ => {}
        }
        gpu.index = dev.index;
        gpu.memory_bytes = dev.memory_total_bytes.or(gpu.memory_bytes);
        gpu.architecture = dev.architecture.clone().or(gpu.architecture.take());
        gpu.compute_capability = dev
            .compute_capability
            .clone()
            .or(gpu.compute_capability.take());
        gpu.fabric = dev.fabric.clone();
        gpu.mig = dev.mig.clone();
        gpu.sources.push(Source::Nvml);
    }

    let nvml_buses: Vec<PciBusId> = snapshot.devices.iter().map(|d| d.pci_bus_id).collect();
    let nvidia_buses: Vec<PciBusId> = hw
        .pcie
        .devices
        .iter()
        .filter(|d| d.vendor_id == NVIDIA_PCI_VENDOR)
        .map(|d| d.bus_id)
        .collect();
    // hwloc-only GPUs are numbered after NVML's. Saturating: a snapshot's
    // indexes are refused past the GPU limit when it is loaded
    // (`nvml::check_snapshot`); this holds whatever the snapshot's source.
    let max_nvml_index = snapshot
        .devices
        .iter()
        .map(|d| d.index.saturating_add(1))
        .max()
        .unwrap_or(0);
    let hwloc_only = hw
        .gpus
        .iter_mut()
        .filter(|g| !g.sources.contains(&Source::Nvml));
    for (i, gpu) in hwloc_only.enumerate() {
        gpu.index = max_nvml_index.saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
        if nvidia_buses.contains(&gpu.pci_bus_id) && !nvml_buses.contains(&gpu.pci_bus_id) {
            disagree(
                gpu.pci_bus_id,
                "present",
                Some(describe(gpu.model.as_deref())),
                None,
            );
        }
    }

    merge_nvlinks(hw, snapshot, &mut disagreements);
    hw.discovery.disagreements.extend(disagreements);
    hw.canonicalize();
}

fn describe(model: Option<&str>) -> String {
    format!("GPU {}", model.unwrap_or("(unknown model)"))
}

/// Turns NVML's per-link view into per-pair connections and reconciles them
/// with hwloc's bandwidth matrix.
fn merge_nvlinks(hw: &mut NodeHardware, snapshot: &NvmlSnapshot, out: &mut Vec<Disagreement>) {
    // (a, b) → (links counted from each side, max version)
    let mut pairs: BTreeMap<(NvLinkPeer, NvLinkPeer), (BTreeMap<PciBusId, u32>, u32)> =
        BTreeMap::new();
    for dev in &snapshot.devices {
        let me = NvLinkPeer {
            kind: NvLinkPeerKind::Gpu,
            pci_bus_id: dev.pci_bus_id,
        };
        for link in dev.nvlinks.iter().filter(|l| l.active) {
            let Some(remote) = link.remote_pci_bus_id else {
                continue;
            };
            let peer = NvLinkPeer {
                kind: link.remote_kind,
                pci_bus_id: remote,
            };
            let key = if me < peer {
                (me.clone(), peer)
            } else {
                (peer, me.clone())
            };
            let entry = pairs.entry(key).or_default();
            let n = entry.0.entry(dev.pci_bus_id).or_insert(0u32);
            *n = n.saturating_add(1);
            entry.1 = entry.1.max(link.version.unwrap_or(0));
        }
    }
    for ((a, b), (per_side, version)) in pairs {
        // Both GPUs of a GPU–GPU pair report the same links; count once.
        let links = per_side.values().copied().max().unwrap_or(0);
        // Within the plausibility limit accordd holds reports to, however
        // many links a snapshot lists.
        let bandwidth = u64::from(links)
            .saturating_mul(nvlink_link_bandwidth_mbps(version))
            .min(limits::NVLINK_BANDWIDTH_MBPS);
        for peer in [&a, &b] {
            if peer.kind == NvLinkPeerKind::NvSwitch
                && !hw
                    .nvswitches
                    .iter()
                    .any(|s| s.pci_bus_id == peer.pci_bus_id)
            {
                hw.nvswitches.push(NvSwitch {
                    pci_bus_id: peer.pci_bus_id,
                    numa_node: None,
                    pcie_root: None,
                });
            }
        }
        let existing = hw.nvlinks.iter_mut().find(|l| {
            (l.a.pci_bus_id, l.b.pci_bus_id) == (a.pci_bus_id, b.pci_bus_id)
                || (l.a.pci_bus_id, l.b.pci_bus_id) == (b.pci_bus_id, a.pci_bus_id)
        });
        match existing {
            Some(link) => {
                if link.bandwidth_mbps != bandwidth {
                    out.push(Disagreement {
                        pci_bus_id: Some(a.pci_bus_id),
                        field: format!("nvlink bandwidth to {}", b.pci_bus_id),
                        hwloc: Some(link.bandwidth_mbps.to_string()),
                        nvml: Some(bandwidth.to_string()),
                    });
                    link.bandwidth_mbps = bandwidth;
                }
                link.links = Some(links);
                link.version = (version > 0).then_some(version);
                link.sources.push(Source::Nvml);
            }
            None => hw.nvlinks.push(NvLink {
                a,
                b,
                links: Some(links),
                bandwidth_mbps: bandwidth,
                version: (version > 0).then_some(version),
                sources: vec![Source::Nvml],
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::{NvmlDevice, NvmlLink, SNAPSHOT_VERSION};

    fn bus(s: &str) -> PciBusId {
        s.parse().unwrap()
    }

    fn hwloc_gpu(pci_bus_id: PciBusId) -> Gpu {
        Gpu {
            index: 0,
            uuid: None,
            pci_bus_id,
            vendor: None,
            model: None,
            memory_bytes: None,
            architecture: None,
            compute_capability: None,
            numa_node: None,
            pcie_root: None,
            pcie_switch: None,
            serial: None,
            os_devices: Vec::new(),
            fabric: None,
            mig: None,
            sources: vec![Source::Hwloc],
        }
    }

    fn device(index: u32, pci_bus_id: PciBusId, nvlinks: Vec<NvmlLink>) -> NvmlDevice {
        NvmlDevice {
            index,
            uuid: None,
            name: None,
            serial: None,
            pci_bus_id,
            memory_total_bytes: None,
            architecture: None,
            compute_capability: None,
            numa_node: None,
            nvlinks,
            fabric: None,
            mig: None,
        }
    }

    fn snapshot(devices: Vec<NvmlDevice>) -> NvmlSnapshot {
        NvmlSnapshot {
            snapshot_version: SNAPSHOT_VERSION,
            driver_version: None,
            nvml_version: None,
            cuda_driver_version: None,
            devices,
            notes: Vec::new(),
        }
    }

    /// A snapshot file's indexes are refused past the GPU limit when it is
    /// loaded; the merge saturates whatever snapshot it is given.
    #[test]
    fn a_hostile_nvml_gpu_index_saturates_in_the_merge_not_wraps() {
        for index in [u32::MAX, u32::MAX - 1] {
            let mut hw = NodeHardware::empty();
            hw.gpus = vec![
                hwloc_gpu(bus("0000:01:00.0")),
                hwloc_gpu(bus("0000:02:00.0")),
                hwloc_gpu(bus("0000:03:00.0")),
            ];
            let snap = snapshot(vec![device(index, bus("0000:01:00.0"), Vec::new())]);
            merge(&mut hw, &snap, "test".into());
            let indexes: Vec<u32> = hw.gpus.iter().map(|g| g.index).collect();
            assert_eq!(indexes, vec![index, u32::MAX, u32::MAX], "{index}");
        }
    }

    #[test]
    fn nvlink_bandwidth_over_many_links_is_cut_to_the_limit() {
        let gpu = bus("0000:01:00.0");
        let switch = bus("0000:80:00.0");
        let links = |n: u32| {
            (0..n)
                .map(|link| NvmlLink {
                    link,
                    active: true,
                    version: Some(5),
                    remote_pci_bus_id: Some(switch),
                    remote_kind: NvLinkPeerKind::NvSwitch,
                })
                .collect()
        };
        // 2000 links of 50 000 MB/s: the limit; 2001: past it, cut.
        for (n, want) in [(18, 900_000), (2000, 100_000_000), (2001, 100_000_000)] {
            let mut hw = NodeHardware::empty();
            hw.gpus = vec![hwloc_gpu(gpu)];
            merge(
                &mut hw,
                &snapshot(vec![device(0, gpu, links(n))]),
                "t".into(),
            );
            assert_eq!(hw.nvlinks.len(), 1);
            assert_eq!(hw.nvlinks[0].links, Some(n));
            assert_eq!(hw.nvlinks[0].bandwidth_mbps, want, "{n} links");
        }
    }
}
