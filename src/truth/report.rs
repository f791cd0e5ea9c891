//! An agent's report against the fleet file's declaration: what the
//! declaration states, and every difference as [`Drift`].

use super::*;

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
pub(super) fn counted(items: &BTreeMap<String, usize>) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn memory_agrees(declared: &[u64], reported: &[u64]) -> bool {
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
pub(super) fn gib_text(bytes: &[u64]) -> String {
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

pub(super) fn mig_on(g: &Gpu) -> bool {
    g.mig
        .as_ref()
        .is_some_and(|m| m.current_mode == MigMode::Enabled)
}

pub(super) fn instances(g: &Gpu) -> &[crate::hardware::GpuInstance] {
    g.mig.as_ref().map_or(&[][..], |m| &m.gpu_instances[..])
}

pub(super) fn same_layout(a: &Gpu, b: &Gpu) -> bool {
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
pub(super) fn layout_text(g: &Gpu) -> String {
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

pub(super) fn roots_text(roots: &BTreeSet<&str>) -> String {
    roots.iter().copied().collect::<Vec<_>>().join(", ")
}

pub(super) fn rdma_nics(hw: &NodeHardware) -> usize {
    hw.nics
        .iter()
        .filter(|n| {
            matches!(n.kind, NicKind::Infiniband | NicKind::Roce) || !n.rdma_devices.is_empty()
        })
        .count()
}

/// GPUs per NVLink group (largest first) and active links, where every
/// link's count is known.
pub(super) fn nvlink_summary(hw: &NodeHardware) -> (Vec<usize>, Option<u32>) {
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
pub(super) fn nvlink_text((groups, links): &(Vec<usize>, Option<u32>)) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{hardware_from_profile, HardwareProfile};
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
