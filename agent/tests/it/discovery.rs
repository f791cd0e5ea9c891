//! Discovery over real hwloc exports and NVML snapshots (tests/fixtures).

use std::path::PathBuf;

use accord::hardware::{
    MigMode, MigPlacement, MigQueryError, NodeHardware, NvLinkPeerKind, PciBusId, PcieScope, Source,
};
use accord_agent::nvml::{NvmlDevice, NvmlLink, NvmlSnapshot, SNAPSHOT_VERSION};
use accord_agent::{discover, hwloc, merge, nvml, DiscoveryError, Sources};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(rel)
}

fn from_xml(rel: &str) -> NodeHardware {
    let path = fixture(rel);
    discover(Sources {
        hwloc_xml: Some(&path),
        ..Sources::default()
    })
    .unwrap()
}

fn bus(s: &str) -> PciBusId {
    s.parse().unwrap()
}

const DGX2_NUMA0_GPUS: [&str; 8] = ["34", "36", "39", "3b", "57", "59", "5c", "5e"];
const DGX2_NUMA1_GPUS: [&str; 8] = ["b7", "b9", "bc", "be", "e0", "e2", "e5", "e7"];

fn gpu_buses(ids: &[&str]) -> Vec<PciBusId> {
    ids.iter().map(|b| bus(&format!("0000:{b}:00.0"))).collect()
}

#[test]
fn dgx2_has_16_gpus_on_two_numa_nodes() {
    let hw = from_xml("hwloc/nvidiaDGX2.xml");
    assert_eq!(hw.machine.product.as_deref(), Some("NVIDIA DGX-2H"));
    assert_eq!(hw.numa_nodes.len(), 2);
    assert_eq!(hw.gpus.len(), 16);
    for g in &hw.gpus {
        assert_eq!(g.model.as_deref(), Some("Tesla V100-SXM3-32GB-H"));
        assert!(g.uuid.as_deref().unwrap().starts_with("GPU-"));
        assert!(
            g.pcie_switch.is_some(),
            "{} is behind PLX switches",
            g.pci_bus_id
        );
    }
    let on = |n| -> Vec<PciBusId> {
        hw.gpus_on_numa_node(n)
            .iter()
            .map(|g| g.pci_bus_id)
            .collect()
    };
    assert_eq!(on(0), gpu_buses(&DGX2_NUMA0_GPUS));
    assert_eq!(on(1), gpu_buses(&DGX2_NUMA1_GPUS));
    // Four root complexes, four GPUs each.
    assert_eq!(hw.gpu_pcie_roots().len(), 4);
    assert_eq!(
        hw.numa_distances[0].values,
        vec![vec![10, 21], vec![21, 10]]
    );
}

#[test]
fn dgx2_nvlink_matrix_and_nvswitches() {
    let hw = from_xml("hwloc/nvidiaDGX2.xml");
    assert_eq!(hw.nvswitches.len(), 12);
    // hwloc's NVLinkBandwidth matrix: each V100 has one NVLink 2 link
    // (25 GB/s) to each of the six NVSwitches on its baseboard, none to
    // other GPUs directly.
    assert_eq!(hw.nvlinks.len(), 96);
    for link in &hw.nvlinks {
        assert_eq!(link.a.kind, NvLinkPeerKind::Gpu);
        assert_eq!(link.b.kind, NvLinkPeerKind::NvSwitch);
        assert_eq!(link.bandwidth_mbps, 25_000);
        assert_eq!(link.sources, vec![Source::Hwloc]);
    }
    let g0 = bus("0000:34:00.0");
    let g1 = bus("0000:36:00.0");
    assert_eq!(hw.nvlink_bandwidth(&g0, &bus("0000:61:00.0")), 25_000);
    assert_eq!(hw.nvlink_bandwidth(&g0, &g1), 0);
    for g in &hw.gpus {
        let switches = hw
            .nvlinks
            .iter()
            .filter(|l| l.a.pci_bus_id == g.pci_bus_id)
            .count();
        assert_eq!(switches, 6, "{}", g.pci_bus_id);
    }
    // The export has no NVSwitch-to-NVSwitch trunk links, so the two
    // baseboards appear as two NVLink groups of 8 GPUs over 6 switches.
    let groups = hw.nvlink_groups();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].gpus, gpu_buses(&DGX2_NUMA0_GPUS));
    assert_eq!(groups[1].gpus, gpu_buses(&DGX2_NUMA1_GPUS));
    assert!(groups.iter().all(|g| g.nvswitches.len() == 6));
}

/// Counts `lstopo-no-graphics --input FILE --no-collapse` (hwloc 2.9.0)
/// printed for each export: NUMA nodes, cores, PUs, PCI devices.
const LSTOPO_COUNTS: &[(&str, usize, u32, u32, usize)] = &[
    ("16amd64-4distances.xml", 8, 16, 16, 0),
    ("24em64t-2n6c2t-pci.xml", 2, 12, 24, 9),
    ("32em64t-2n8c2t-pci-wholeio.xml", 2, 16, 32, 10),
    ("nvidiaDGX2.xml", 2, 4, 4, 28),
];

#[test]
fn exports_match_lstopo_counts() {
    for &(file, numa, cores, pus, pci) in LSTOPO_COUNTS {
        let hw = from_xml(&format!("hwloc/{file}"));
        assert_eq!(hw.numa_nodes.len(), numa, "{file} NUMA");
        assert_eq!(hw.machine.cores, cores, "{file} cores");
        assert_eq!(hw.machine.threads, pus, "{file} PUs");
        assert_eq!(hw.pcie.devices.len(), pci, "{file} PCI devices");
    }
}

/// Re-derives the table above from lstopo itself where it is installed
/// (`scripts/bootstrap` installs it; CI requires it).
#[test]
fn lstopo_agrees_with_recorded_counts() {
    let probe = std::process::Command::new("lstopo-no-graphics")
        .arg("--version")
        .output();
    if probe.is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "lstopo-no-graphics missing in CI"
        );
        eprintln!("lstopo-no-graphics not installed; skipping the cross-check");
        return;
    }
    for &(file, numa, cores, pus, pci) in LSTOPO_COUNTS {
        let out = std::process::Command::new("lstopo-no-graphics")
            .args(["--no-collapse", "--of", "console", "--input"])
            .arg(fixture(&format!("hwloc/{file}")))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let count =
            |pred: &dyn Fn(&str) -> bool| text.lines().filter(|l| pred(l.trim_start())).count();
        assert_eq!(count(&|l| l.contains("NUMANode L#")), numa, "{file}");
        assert_eq!(count(&|l| l.contains("Core L#")), cores as usize, "{file}");
        assert_eq!(count(&|l| l.contains("PU L#")), pus as usize, "{file}");
        assert_eq!(
            count(&|l| l.starts_with("PCI ") || l.starts_with("PCI(")),
            pci,
            "{file}"
        );
    }
}

#[test]
fn hwloc3_export_is_refused_clearly() {
    let path = fixture("hwloc/hwloc3-format/nvidiaDGX2.xml");
    let err = hwloc::load_xml_file(&path).unwrap_err();
    assert!(
        matches!(err, DiscoveryError::UnsupportedHwlocVersion { ref version, .. } if version == "3.0")
    );
    assert!(
        err.to_string()
            .contains("unsupported hwloc XML version 3.0"),
        "{err}"
    );
}

#[test]
fn nics_and_gpus_share_pcie_roots() {
    let hw = from_xml("hwloc/32em64t-2n8c2t-pci-wholeio.xml");
    let ib = hw.nic("ib0").unwrap();
    assert_eq!(ib.kind, accord::hardware::NicKind::Infiniband);
    assert_eq!(ib.rdma_devices, vec!["mlx5_0".to_owned()]);
    assert_eq!(hw.nic("mlx5_0").unwrap().name, "ib0");
    let near: Vec<String> = hw
        .gpus_near_nic(ib, PcieScope::Root)
        .iter()
        .map(|g| g.pci_bus_id.to_string())
        .collect();
    assert_eq!(near, ["0000:83:00.0", "0000:84:00.0", "0000:84:00.1"]);
    // No PCIe switches on this board: nothing shares a switch.
    assert!(hw.gpus_near_nic(ib, PcieScope::Switch).is_empty());
    let eth0 = hw.nic("eth0").unwrap();
    assert_eq!(eth0.address.as_deref(), Some("00:25:90:95:71:12"));
    // The BMC's VGA chip is not a GPU; the Radeon with an OpenCL device is.
    assert_eq!(hw.gpus.len(), 4);
    assert!(hw.gpus.iter().all(|g| g.pci_bus_id != bus("0000:05:03.0")));
}

fn h100_on_board0() -> NodeHardware {
    let topo = fixture("hwloc/derived/dgx2-board0-no-nvml.xml");
    let snap = fixture("nvml/h100-8gpu-mig.json");
    discover(Sources {
        hwloc_xml: Some(&topo),
        nvml_snapshot: Some(&snap),
        nvidia_smi_xml: None,
    })
    .unwrap()
}

#[test]
fn h100_snapshot_merges_with_hwloc_topology() {
    let hw = h100_on_board0();
    assert!(
        hw.discovery.disagreements.is_empty(),
        "{:?}",
        hw.discovery.disagreements
    );
    assert_eq!(hw.gpus.len(), 8);
    for (i, g) in hw.gpus.iter().enumerate() {
        assert_eq!(g.index as usize, i);
        assert_eq!(g.sources, vec![Source::Hwloc, Source::Nvml]);
        assert_eq!(g.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(g.numa_node, Some(0), "NUMA comes from hwloc");
        assert!(g.pcie_root.as_deref().unwrap().starts_with("pci0000:"));
        assert_eq!(g.compute_capability.as_deref(), Some("9.0"));
    }
    // NVLink from NVML: 18 links per GPU over 4 NVSwitches (5+4+4+5).
    assert_eq!(hw.nvlinks.len(), 32);
    let g0 = bus("0000:34:00.0");
    assert_eq!(hw.nvlink_bandwidth(&g0, &bus("0000:61:00.0")), 125_000);
    let link = hw.nvlinks.iter().find(|l| l.a.pci_bus_id == g0).unwrap();
    assert_eq!(link.version, Some(4));
    let groups = hw.nvlink_groups();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].gpus.len(), 8);
    assert_eq!(groups[0].nvswitches.len(), 4);
}

#[test]
fn h100_mig_state_and_free_placements() {
    let hw = h100_on_board0();
    let gpu = |i: usize| &hw.gpus[i];
    let starts = |v: Vec<MigPlacement>| v.into_iter().map(|p| p.start).collect::<Vec<_>>();

    assert_eq!(gpu(0).mig.as_ref().unwrap().current_mode, MigMode::Disabled);
    assert!(matches!(
        gpu(0).free_mig_placements("1g.10gb"),
        Err(MigQueryError::Disabled { .. })
    ));
    // Seven 1g.10gb: full.
    assert_eq!(gpu(4).mig.as_ref().unwrap().gpu_instances.len(), 7);
    assert!(gpu(4).free_mig_placements("1g.10gb").unwrap().is_empty());
    // 2g.20gb@0, 1g.10gb@2, 3g.40gb@4: only slice 3 is left.
    assert_eq!(
        starts(gpu(5).free_mig_placements("1g.10gb").unwrap()),
        vec![3]
    );
    assert!(gpu(5).free_mig_placements("3g.40gb").unwrap().is_empty());
    assert_eq!(
        starts(gpu(6).free_mig_placements("3g.40gb").unwrap()),
        vec![0, 4]
    );
    let pending = gpu(7).mig.as_ref().unwrap();
    assert_eq!(
        (pending.current_mode, pending.pending_mode),
        (MigMode::Disabled, MigMode::Enabled)
    );
    let mig_uuid = &gpu(5).mig.as_ref().unwrap().gpu_instances[0].compute_instances[0].uuid;
    assert!(mig_uuid.as_deref().unwrap().starts_with("MIG-"));
}

#[test]
fn disagreements_between_sources_are_reported() {
    // The DGX-2 export carries hwloc's own NVML data (V100s); replaying an
    // H100 snapshot over it must surface every conflict.
    let topo = fixture("hwloc/nvidiaDGX2.xml");
    let snap = fixture("nvml/h100-8gpu-mig.json");
    let hw = discover(Sources {
        hwloc_xml: Some(&topo),
        nvml_snapshot: Some(&snap),
        nvidia_smi_xml: None,
    })
    .unwrap();
    let d = &hw.discovery.disagreements;
    let has = |busid: &str, field: &str| {
        d.iter()
            .any(|x| x.pci_bus_id == Some(bus(busid)) && x.field == field)
    };
    assert!(has("0000:34:00.0", "model"));
    assert!(has("0000:34:00.0", "uuid"));
    assert!(has("0000:b7:00.0", "present"), "hwloc-only NVIDIA GPU");
    assert!(d.iter().any(|x| x.field.starts_with("nvlink bandwidth")));
    // NVML is the authority on identity; hwloc-only GPUs are kept.
    assert_eq!(
        hw.gpu(&bus("0000:34:00.0")).unwrap().model.as_deref(),
        Some("NVIDIA H100 80GB HBM3")
    );
    assert_eq!(hw.gpus.len(), 16);
    assert_eq!(hw.gpu(&bus("0000:b7:00.0")).unwrap().index, 8);
}

#[test]
fn snapshot_agreeing_with_hwloc_merges_cleanly() {
    // An NVML view consistent with the DGX-2 export: same identities, one
    // NVLink 2 link to each of six NVSwitches.
    let mut hw = from_xml("hwloc/nvidiaDGX2.xml");
    let devices = hw
        .gpus
        .iter()
        .map(|g| NvmlDevice {
            index: g.index,
            uuid: g.uuid.clone(),
            name: g.model.clone(),
            serial: g.serial.clone(),
            pci_bus_id: g.pci_bus_id,
            memory_total_bytes: Some(32 << 30),
            architecture: Some("Volta".into()),
            compute_capability: Some("7.0".into()),
            numa_node: g.numa_node,
            nvlinks: hw
                .nvlinks
                .iter()
                .filter(|l| l.a.pci_bus_id == g.pci_bus_id)
                .enumerate()
                .map(|(i, l)| NvmlLink {
                    link: i as u32,
                    active: true,
                    version: Some(2),
                    remote_pci_bus_id: Some(l.b.pci_bus_id),
                    remote_kind: NvLinkPeerKind::NvSwitch,
                })
                .collect(),
            fabric: None,
            mig: None,
        })
        .collect();
    let snapshot = NvmlSnapshot {
        snapshot_version: SNAPSHOT_VERSION,
        driver_version: Some("418.40.04".into()),
        nvml_version: None,
        cuda_driver_version: None,
        devices,
        notes: vec![],
    };
    merge::merge(&mut hw, &snapshot, "test".into());
    assert!(
        hw.discovery.disagreements.is_empty(),
        "{:?}",
        hw.discovery.disagreements
    );
    assert_eq!(hw.nvlinks.len(), 96);
    assert!(hw
        .nvlinks
        .iter()
        .all(|l| l.sources == vec![Source::Hwloc, Source::Nvml] && l.links == Some(1)));
    assert!(hw.gpus.iter().all(|g| g.memory_bytes == Some(32 << 30)));
}

#[test]
fn nvidia_smi_dump_imports_as_snapshot() {
    let snap = nvml::nvidia_smi::import_file(&fixture("nvidia-smi/a100-sxm4-v12.xml")).unwrap();
    assert_eq!(snap.driver_version.as_deref(), Some("535.54.03"));
    // The dump says 4 GPUs are attached but holds one <gpu>: said, not hidden.
    assert_eq!(snap.devices.len(), 1);
    assert!(
        snap.notes.iter().any(|n| n.contains("4 attached GPUs")),
        "{:?}",
        snap.notes
    );
    let gpu = &snap.devices[0];
    assert_eq!(gpu.pci_bus_id, bus("0000:01:00.0"));
    assert_eq!(
        gpu.uuid.as_deref(),
        Some("GPU-513536b6-7d19-9063-b049-1e69664bb298")
    );
    assert_eq!(gpu.serial.as_deref(), Some("1650522003820"));
    assert_eq!(gpu.memory_total_bytes, Some(81920 << 20));
    let mig = gpu.mig.as_ref().unwrap();
    assert_eq!(mig.current_mode, MigMode::Enabled);
    // Four MIG devices of 14 SMs and 19968 MiB: A100-80GB's 1g.20gb.
    let ids: Vec<u32> = mig.gpu_instances.iter().map(|g| g.id).collect();
    assert_eq!(ids, vec![3, 4, 5, 6]);
    assert!(mig
        .gpu_instances
        .iter()
        .all(|g| g.profile == "1g.20gb" && g.profile_id == Some(15)));
    // nvidia-smi -q does not say where instances sit: no guessing.
    assert!(matches!(
        mig.free_placements("1g.20gb"),
        Err(MigQueryError::UnknownPlacement { instance: 3 })
    ));
}

#[test]
fn models_are_deterministic_and_round_trip() {
    let a = serde_json::to_string_pretty(&h100_on_board0()).unwrap();
    let b = serde_json::to_string_pretty(&h100_on_board0()).unwrap();
    assert_eq!(a, b);
    let back: NodeHardware = serde_json::from_str(&a).unwrap();
    assert_eq!(serde_json::to_string_pretty(&back).unwrap(), a);
}

/// The models in tests/fixtures/models/ are what the agent produces from the
/// recorded sources; the core's tests read them. `UPDATE_GOLDEN=1`
/// regenerates them after an intended change.
#[test]
fn golden_models_are_current() {
    let cases: [(&str, Option<&str>, &str); 3] = [
        ("hwloc/nvidiaDGX2.xml", None, "models/dgx2.json"),
        (
            "hwloc/derived/dgx2-board0-no-nvml.xml",
            Some("nvml/h100-8gpu-mig.json"),
            "models/h100-8gpu-mig.json",
        ),
        (
            "hwloc/32em64t-2n8c2t-pci-wholeio.xml",
            None,
            "models/x9drg-wholeio.json",
        ),
    ];
    for (topo, snap, golden) in cases {
        let topo = fixture(topo);
        let snap = snap.map(fixture);
        let mut hw = discover(Sources {
            hwloc_xml: Some(&topo),
            nvml_snapshot: snap.as_deref(),
            nvidia_smi_xml: None,
        })
        .unwrap();
        // Origins are machine-specific paths; keep only file names.
        for info in [&mut hw.discovery.hwloc, &mut hw.discovery.nvml]
            .into_iter()
            .flatten()
        {
            info.origin = PathBuf::from(&info.origin)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
        }
        let text = serde_json::to_string_pretty(&hw).unwrap() + "\n";
        let path = fixture(golden);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            // In CI a stale model must fail, not be rewritten into a pass.
            assert!(
                std::env::var_os("CI").is_none(),
                "UPDATE_GOLDEN is refused when CI is set: regenerate the models locally \
                 after an intended change, review the diff and commit it"
            );
            // Whole or not at all: a temporary file beside it, renamed over it.
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let tmp = path.with_file_name(format!(
                "{}.tmp-{}",
                path.file_name().unwrap().to_string_lossy(),
                std::process::id()
            ));
            std::fs::write(&tmp, &text).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
        let stored = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            stored == text,
            "{} is stale; rerun with UPDATE_GOLDEN=1",
            path.display()
        );
    }
}

/// `text` with `from` replaced once (it must be there), written to a file
/// `name` in `dir`.
fn edited(dir: &tempfile::TempDir, rel: &str, name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(fixture(rel)).unwrap();
    assert!(text.contains(from), "{rel} holds {from:?}");
    let path = dir.path().join(name);
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path
}

fn discover_xml(path: &std::path::Path) -> NodeHardware {
    discover(Sources {
        hwloc_xml: Some(path),
        ..Sources::default()
    })
    .unwrap()
}

#[test]
fn a_gpu_memory_size_past_u64_in_hwloc_xml_is_unknown_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let rel = "hwloc/32em64t-2n8c2t-pci-wholeio.xml";
    let cuda = bus("0000:84:00.0");
    assert_eq!(
        from_xml(rel).gpu(&cuda).unwrap().memory_bytes,
        Some(11_796_032 << 10)
    );
    // 2^54 KiB is 2^64 bytes: `* 1024` wrapped it to 0 (a debug build
    // panicked); just past the limit (4096 GiB + 1 KiB) is no GPU either.
    for kib in ["18014398509481984", "4294967297", "18446744073709551615"] {
        let path = edited(
            &dir,
            rel,
            "topology.xml",
            r#"name="CUDAGlobalMemorySize" value="11796032""#,
            &format!(r#"name="CUDAGlobalMemorySize" value="{kib}""#),
        );
        let hw = discover_xml(&path);
        assert_eq!(hw.gpu(&cuda).unwrap().memory_bytes, None, "{kib} KiB");
        assert!(
            hw.discovery.notes.iter().any(|n| n
                == &format!(
                    "hwloc reports {kib} KiB of memory on GPU 0000:84:00.0; more than 4096 GiB is not plausible: memory unknown"
                )),
            "{:?}",
            hw.discovery.notes
        );
    }
    // At the limit: taken.
    let path = edited(
        &dir,
        rel,
        "topology.xml",
        r#"name="CUDAGlobalMemorySize" value="11796032""#,
        r#"name="CUDAGlobalMemorySize" value="4294967296""#,
    );
    assert_eq!(
        discover_xml(&path).gpu(&cuda).unwrap().memory_bytes,
        Some(4096 << 30)
    );
}

#[test]
fn an_nvlink_bandwidth_past_the_limit_in_hwloc_xml_is_cut_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let rel = "hwloc/nvidiaDGX2.xml";
    let text = std::fs::read_to_string(fixture(rel)).unwrap();
    let matrix = text.find(r#"name="NVLinkBandwidth""#).unwrap();
    // A `length` attribute counts the element's characters.
    let values = |v: &str| format!(r#"<u64values length="{}">{v}</u64values>"#, v.len());
    let row = values("0 0 0 0 0 0 25000 25000 25000 25000 ");
    let at = matrix + text[matrix..].find(&row).unwrap();
    let hostile = format!(
        "{}{}{}",
        &text[..at],
        values("0 0 0 0 0 0 18446744073709551615 25000 25000 25000 "),
        &text[at + row.len()..]
    );
    let path = dir.path().join("topology.xml");
    std::fs::write(&path, hostile).unwrap();
    let hw = discover_xml(&path);
    let max = accord::hardware::limits::NVLINK_BANDWIDTH_MBPS;
    let cut: Vec<_> = hw
        .nvlinks
        .iter()
        .filter(|l| l.bandwidth_mbps != 25_000)
        .collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0].bandwidth_mbps, max);
    assert!(
        hw.discovery.notes.iter().any(|n| n.starts_with(
            "hwloc's NVLinkBandwidth matrix holds 1 bandwidths over 100000000 MB/s (up to 18446744073709551615)"
        )),
        "{:?}",
        hw.discovery.notes
    );
    // Sums over the pair saturate rather than wrap (the core's query).
    assert_eq!(
        hw.nvlink_bandwidth(&cut[0].a.pci_bus_id, &cut[0].b.pci_bus_id),
        max
    );
}

#[test]
fn a_gpu_memory_past_u64_in_nvidia_smi_xml_is_unknown_not_wrapped() {
    let text = std::fs::read_to_string(fixture("nvidia-smi/a100-sxm4-v12.xml")).unwrap();
    // 2^44 MiB is 2^64 bytes: `* 1024 * 1024` wrapped it to 0.
    for mib in ["17592186044416", "4194305", "18446744073709551615"] {
        let hostile = text.replacen(
            "<total>81920 MiB</total>",
            &format!("<total>{mib} MiB</total>"),
            1,
        );
        let snap = nvml::nvidia_smi::import(&hostile).unwrap();
        assert_eq!(snap.devices[0].memory_total_bytes, None, "{mib} MiB");
        assert!(
            snap.notes.iter().any(|n| n
                == &format!(
                    "<gpu> #0: fb_memory_usage/total is {mib} MiB; more than 4096 GiB is not plausible: memory unknown"
                )),
            "{:?}",
            snap.notes
        );
    }
}

#[test]
fn a_mig_memory_past_u64_in_nvidia_smi_xml_matches_no_profile_not_wraps() {
    let text = std::fs::read_to_string(fixture("nvidia-smi/a100-sxm4-v12.xml")).unwrap();
    let hostile = text.replacen(
        "<total>19968 MiB</total>",
        "<total>18446744073709551615 MiB</total>",
        1,
    );
    let snap = nvml::nvidia_smi::import(&hostile).unwrap();
    let mig = snap.devices[0].mig.as_ref().unwrap();
    let gi = &mig.gpu_instances[0];
    assert_eq!(gi.profile, "unknown");
    assert_eq!(gi.compute_instances[0].memory_mib, None);
    // The other instances still match their profile.
    assert!(mig.gpu_instances[1..]
        .iter()
        .all(|g| g.profile == "1g.20gb"));
}

#[test]
fn a_gpu_index_at_or_past_the_gpu_limit_in_nvidia_smi_xml_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rel = "nvidia-smi/a100-sxm4-v12.xml";
    for minor in ["64", "4294967295", "99999999999"] {
        let path = edited(
            &dir,
            rel,
            "nvidia-smi.xml",
            "<minor_number>1</minor_number>",
            &format!("<minor_number>{minor}</minor_number>"),
        );
        let err = nvml::nvidia_smi::import_file(&path).unwrap_err();
        assert!(
            matches!(err, DiscoveryError::BadNvidiaSmi { .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{}: invalid nvidia-smi XML: <gpu> #0: minor_number {minor}; a GPU index is below 64 (plausibility limit)",
                path.display()
            )
        );
    }
    let path = edited(
        &dir,
        rel,
        "nvidia-smi.xml",
        "<minor_number>1</minor_number>",
        "<minor_number>63</minor_number>",
    );
    assert_eq!(
        nvml::nvidia_smi::import_file(&path).unwrap().devices[0].index,
        63
    );
}

#[test]
fn a_gpu_index_at_or_past_the_gpu_limit_in_an_nvml_snapshot_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let topo = fixture("hwloc/derived/dgx2-board0-no-nvml.xml");
    // u32::MAX: `index + 1` wrapped to 0 in the merge (a debug build
    // panicked), and the hwloc-only GPUs' numbering overflowed after it.
    for index in ["64", "4294967295"] {
        let snap = edited(
            &dir,
            "nvml/h100-7gpu.json",
            "nvml.json",
            r#""index": 0,"#,
            &format!(r#""index": {index},"#),
        );
        let err = discover(Sources {
            hwloc_xml: Some(&topo),
            nvml_snapshot: Some(&snap),
            nvidia_smi_xml: None,
        })
        .unwrap_err();
        assert!(matches!(err, DiscoveryError::BadSnapshot { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: invalid NVML snapshot: devices[0].index: {index}; a GPU index is below 64 (plausibility limit)",
                snap.display()
            )
        );
    }
}

#[test]
fn gpu_and_mig_memory_past_the_limits_in_an_nvml_snapshot_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "nvml/h100-8gpu.json",
            r#""memory_total_bytes": 85520809984,"#,
            r#""memory_total_bytes": 18446744073709551615,"#,
            "devices[0].memory_total_bytes: 18446744073709551615; at most 4398046511104 accepted",
        ),
        (
            "nvml/h100-8gpu-mig.json",
            r#""memory_mib": 80896,"#,
            r#""memory_mib": 17592186044416,"#,
            "devices[0].mig.profiles[0].memory_mib: 17592186044416; at most 4194304 accepted",
        ),
    ];
    for (rel, from, to, reason) in cases {
        let snap = edited(&dir, rel, "nvml.json", from, to);
        let err = nvml::load_snapshot(&snap).unwrap_err();
        let prefix = format!("{}: invalid NVML snapshot: {reason}", snap.display());
        assert!(err.to_string().starts_with(&prefix), "{err}");
    }
}
