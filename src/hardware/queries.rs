//! Derived queries the planner asks of one node's hardware.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Gpu, MigPlacement, MigQueryError, Nic, NodeHardware, NvLinkPeerKind, PciBusId};

/// How close on the PCIe tree two devices must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PcieScope {
    /// Directly below the same (nearest) PCIe switch: GPUDirect RDMA's
    /// sweet spot.
    NearestSwitch,
    /// Below one common PCIe switch at any level of a cascade.
    Switch,
    /// Below one root complex (DRA's `resource.kubernetes.io/pcieRoot`).
    Root,
}

/// GPUs that reach each other over NVLink, directly or through NVSwitches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLinkGroup {
    /// Sorted.
    pub gpus: Vec<PciBusId>,
    /// Sorted; empty for direct GPU–GPU meshes.
    pub nvswitches: Vec<PciBusId>,
}

impl Gpu {
    /// Placements where an instance of MIG `profile` could be created now.
    pub fn free_mig_placements(&self, profile: &str) -> Result<Vec<MigPlacement>, MigQueryError> {
        match &self.mig {
            Some(mig) => mig.free_placements(profile),
            None => Err(MigQueryError::NotCapable),
        }
    }
}

impl NodeHardware {
    /// The chain of switches from `nearest` up to the root, nearest first.
    fn switch_chain(&self, nearest: Option<PciBusId>) -> Vec<PciBusId> {
        let mut out = Vec::new();
        let mut next = nearest;
        while let Some(id) = next {
            if out.contains(&id) {
                break; // a malformed report must not loop forever
            }
            out.push(id);
            next = self
                .pcie
                .switches
                .iter()
                .find(|s| s.bus_id == id)
                .and_then(|s| s.parent);
        }
        out
    }

    /// Whether two devices, given by their PCIe root and nearest switch, are
    /// within `scope` of each other. Uses the devices' own placement rather
    /// than a lookup by bus id, which real exports do not always keep unique.
    fn pcie_close(
        &self,
        a: (Option<&str>, Option<PciBusId>),
        b: (Option<&str>, Option<PciBusId>),
        scope: PcieScope,
    ) -> bool {
        match scope {
            PcieScope::Root => a.0.is_some() && a.0 == b.0,
            PcieScope::NearestSwitch => a.1.is_some() && a.1 == b.1,
            PcieScope::Switch => {
                let above_a = self.switch_chain(a.1);
                self.switch_chain(b.1).iter().any(|s| above_a.contains(s))
            }
        }
    }

    /// GPUs that share a PCIe switch, or a root complex, with `nic`.
    pub fn gpus_near_nic(&self, nic: &Nic, scope: PcieScope) -> Vec<&Gpu> {
        let at_nic = (nic.pcie_root.as_deref(), nic.pcie_switch);
        self.gpus
            .iter()
            .filter(|g| self.pcie_close((g.pcie_root.as_deref(), g.pcie_switch), at_nic, scope))
            .collect()
    }

    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| {
            n.name == name
                || n.interfaces.iter().any(|i| i == name)
                || n.rdma_devices.iter().any(|r| r == name)
        })
    }

    /// GPUs whose closest NUMA node is `numa_node`.
    pub fn gpus_on_numa_node(&self, numa_node: u32) -> Vec<&Gpu> {
        self.gpus
            .iter()
            .filter(|g| g.numa_node == Some(numa_node))
            .collect()
    }

    /// Groups of two or more GPUs connected by NVLink, directly or through
    /// NVSwitches. Ordered by their first GPU.
    pub fn nvlink_groups(&self) -> Vec<NvLinkGroup> {
        // Union-find over PCI bus ids of GPUs and NVSwitches.
        let mut parent: BTreeMap<PciBusId, PciBusId> = BTreeMap::new();
        fn find(parent: &mut BTreeMap<PciBusId, PciBusId>, x: PciBusId) -> PciBusId {
            let p = *parent.entry(x).or_insert(x);
            if p == x {
                return x;
            }
            let root = find(parent, p);
            parent.insert(x, root);
            root
        }
        let mut kinds: BTreeMap<PciBusId, NvLinkPeerKind> = BTreeMap::new();
        for link in self.nvlinks.iter().filter(|l| l.bandwidth_mbps > 0) {
            kinds.insert(link.a.pci_bus_id, link.a.kind);
            kinds.insert(link.b.pci_bus_id, link.b.kind);
            let ra = find(&mut parent, link.a.pci_bus_id);
            let rb = find(&mut parent, link.b.pci_bus_id);
            if ra != rb {
                parent.insert(ra.max(rb), ra.min(rb));
            }
        }
        let mut groups: BTreeMap<PciBusId, NvLinkGroup> = BTreeMap::new();
        for (id, kind) in &kinds {
            let root = find(&mut parent, *id);
            let group = groups.entry(root).or_insert_with(|| NvLinkGroup {
                gpus: Vec::new(),
                nvswitches: Vec::new(),
            });
            match kind {
                NvLinkPeerKind::Gpu => group.gpus.push(*id),
                NvLinkPeerKind::NvSwitch => group.nvswitches.push(*id),
                NvLinkPeerKind::Other => {}
            }
        }
        let mut out: Vec<NvLinkGroup> =
            groups.into_values().filter(|g| g.gpus.len() >= 2).collect();
        out.sort_by(|a, b| a.gpus.cmp(&b.gpus));
        out
    }

    /// NVLink bandwidth (MB/s, one direction) between two devices that are
    /// linked directly; 0 when they are not. Saturating: a model may come
    /// from an agent's report.
    pub fn nvlink_bandwidth(&self, a: &PciBusId, b: &PciBusId) -> u64 {
        self.nvlinks
            .iter()
            .filter(|l| {
                (l.a.pci_bus_id == *a && l.b.pci_bus_id == *b)
                    || (l.a.pci_bus_id == *b && l.b.pci_bus_id == *a)
            })
            .fold(0u64, |sum, l| sum.saturating_add(l.bandwidth_mbps))
    }

    /// Counts of GPUs by model, for summaries and labels.
    pub fn gpu_models(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for g in &self.gpus {
            let model = g.model.clone().unwrap_or_else(|| "unknown".to_owned());
            *out.entry(model).or_insert(0) += 1;
        }
        out
    }

    /// PCIe root complexes that hold at least one GPU.
    pub fn gpu_pcie_roots(&self) -> BTreeSet<&str> {
        self.gpus
            .iter()
            .filter_map(|g| g.pcie_root.as_deref())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NvLink, NvLinkPeer, Source};
    use super::*;

    #[test]
    fn nvlink_bandwidth_past_u64_saturates_not_wraps() {
        let a: PciBusId = "0000:34:00.0".parse().unwrap();
        let b: PciBusId = "0000:36:00.0".parse().unwrap();
        let link = |bandwidth_mbps| NvLink {
            a: NvLinkPeer {
                kind: NvLinkPeerKind::Gpu,
                pci_bus_id: a,
            },
            b: NvLinkPeer {
                kind: NvLinkPeerKind::Gpu,
                pci_bus_id: b,
            },
            links: None,
            bandwidth_mbps,
            version: None,
            sources: vec![Source::Nvml],
        };
        let mut hw = NodeHardware::empty();
        // Two records of one pair (a report may hold both): their sum
        // passes u64; `.sum()` wrapped it to 1 (or panicked).
        hw.nvlinks = vec![link(u64::MAX), link(2)];
        assert_eq!(hw.nvlink_bandwidth(&a, &b), u64::MAX);
        assert_eq!(hw.nvlink_bandwidth(&b, &a), u64::MAX);
        hw.nvlinks = vec![link(25_000), link(50_000)];
        assert_eq!(hw.nvlink_bandwidth(&a, &b), 75_000);
    }
}
