//! The core's hardware-model queries over models the agent produced from real
//! recorded machines (tests/fixtures/models, kept current by the agent's
//! `golden_models_are_current` test).

use accord::hardware::{
    MigQueryError, Nic, NicKind, NodeHardware, PciBusId, PcieScope, SCHEMA_VERSION,
};

fn model(name: &str) -> NodeHardware {
    let path = format!(
        "{}/tests/fixtures/models/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn bus(s: &str) -> PciBusId {
    s.parse().unwrap()
}

fn buses(gpus: Vec<&accord::hardware::Gpu>) -> Vec<String> {
    gpus.iter().map(|g| g.pci_bus_id.to_string()).collect()
}

#[test]
fn stored_models_are_current_schema_and_round_trip_byte_identical() {
    for name in ["dgx2.json", "h100-8gpu-mig.json", "x9drg-wholeio.json"] {
        let path = format!(
            "{}/tests/fixtures/models/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        let hw: NodeHardware = serde_json::from_str(&text).unwrap();
        assert_eq!(hw.schema_version, SCHEMA_VERSION);
        assert_eq!(
            serde_json::to_string_pretty(&hw).unwrap() + "\n",
            text,
            "{name}"
        );
    }
}

#[test]
fn gpus_local_to_a_numa_node() {
    let hw = model("dgx2.json");
    assert_eq!(hw.gpus_on_numa_node(0).len(), 8);
    assert_eq!(hw.gpus_on_numa_node(1).len(), 8);
    assert!(hw.gpus_on_numa_node(2).is_empty());
    let x9 = model("x9drg-wholeio.json");
    assert_eq!(buses(x9.gpus_on_numa_node(0)), ["0000:03:00.0"]);
}

fn nic_at(name: &str, root: Option<&str>, switch: Option<PciBusId>) -> Nic {
    Nic {
        name: name.into(),
        kind: NicKind::Infiniband,
        pci_bus_id: None,
        vendor: None,
        model: None,
        numa_node: Some(0),
        pcie_root: root.map(str::to_owned),
        pcie_switch: switch,
        interfaces: vec![],
        rdma_devices: vec![name.into()],
        link_speed_mbps: None,
        address: None,
    }
}

#[test]
fn gpus_sharing_a_switch_or_root_with_a_nic() {
    // The DGX-2 export was trimmed of NICs; place HCAs where DGX-2 has them:
    // one beside GPU 0 under its leaf PLX switch, one on a root port.
    let hw = model("dgx2.json");
    let g0 = hw.gpu(&bus("0000:34:00.0")).unwrap();
    let leaf = nic_at("mlx5_0", g0.pcie_root.as_deref(), g0.pcie_switch);
    let on_root_port = nic_at("mlx5_1", g0.pcie_root.as_deref(), None);

    assert_eq!(
        buses(hw.gpus_near_nic(&leaf, PcieScope::NearestSwitch)),
        ["0000:34:00.0", "0000:36:00.0"]
    );
    // Cascaded PLX switches: all four GPUs of the root share the top one.
    let four = [
        "0000:34:00.0",
        "0000:36:00.0",
        "0000:39:00.0",
        "0000:3b:00.0",
    ];
    assert_eq!(buses(hw.gpus_near_nic(&leaf, PcieScope::Switch)), four);
    assert_eq!(buses(hw.gpus_near_nic(&leaf, PcieScope::Root)), four);
    assert!(hw
        .gpus_near_nic(&on_root_port, PcieScope::Switch)
        .is_empty());
    assert_eq!(
        buses(hw.gpus_near_nic(&on_root_port, PcieScope::Root)),
        four
    );

    // The real HCA of the X9DRG board shares root pci0000:80 with 3 GPUs.
    let x9 = model("x9drg-wholeio.json");
    let ib0 = x9.nic("ib0").unwrap();
    assert_eq!(
        buses(x9.gpus_near_nic(ib0, PcieScope::Root)),
        ["0000:83:00.0", "0000:84:00.0", "0000:84:00.1"]
    );
}

#[test]
fn nvlink_groups() {
    let dgx2 = model("dgx2.json");
    let groups = dgx2.nvlink_groups();
    assert_eq!(groups.len(), 2);
    assert!(groups
        .iter()
        .all(|g| g.gpus.len() == 8 && g.nvswitches.len() == 6));
    let h100 = model("h100-8gpu-mig.json");
    let groups = h100.nvlink_groups();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].gpus.len(), 8);
    assert!(model("x9drg-wholeio.json").nvlink_groups().is_empty());
}

#[test]
fn free_mig_placements_for_a_profile() {
    let hw = model("h100-8gpu-mig.json");
    let starts = |i: usize, p: &str| -> Result<Vec<u32>, MigQueryError> {
        hw.gpus[i]
            .free_mig_placements(p)
            .map(|v| v.into_iter().map(|x| x.start).collect())
    };
    assert_eq!(starts(5, "1g.10gb"), Ok(vec![3]));
    assert_eq!(starts(6, "2g.20gb"), Ok(vec![0, 2, 4]));
    assert_eq!(starts(6, "7g.80gb"), Ok(vec![0]));
    assert_eq!(starts(4, "1g.10gb"), Ok(vec![]));
    assert!(matches!(
        starts(0, "1g.10gb"),
        Err(MigQueryError::Disabled { .. })
    ));
    let v100 = model("dgx2.json");
    assert_eq!(
        v100.gpus[0].free_mig_placements("1g.10gb"),
        Err(MigQueryError::NotCapable)
    );
}
