//! Fit semantics (kube-scheduler and DRA) and the fleet/demand file forms.

use std::collections::BTreeMap;

use accord::demand::{
    Claim, Demand, DeviceRequest, ExactRequest, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    SelectorOperator, TaintEffect, Toleration, TolerationOperator,
};
use accord::fit::{
    allocate_devices, fingerprint, resource_fit, static_fit, CelEngine, DeviceContext, NodeUse,
    PodRequest,
};
use accord::fleet::{Fleet, FleetError, Node};

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
nics = 4
gpus_per_pcie_root = 2

[[racks]]
name = "r1"
row = "a"

[[nodes]]
name = "n1"
rack = "r1"
profile = "h100"
power = "on"
taints = [{ key = "nvidia.com/gpu", effect = "NoSchedule" }]
labels = { "pool" = "train" }
"#;

fn node() -> Node {
    Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into()))
        .unwrap()
        .nodes
        .remove(0)
}

fn classes(cel: &mut CelEngine) -> BTreeMap<String, Vec<usize>> {
    accord::demand::builtin_classes()
        .into_iter()
        .map(|c| {
            let ids = c.selectors.iter().map(|s| cel.id(s)).collect();
            (c.name, ids)
        })
        .collect()
}

fn allocate(spec: &PodSpec, node: &Node) -> Result<Vec<String>, String> {
    let mut cel = CelEngine::default();
    let classes = classes(&mut cel);
    let prints: Vec<u64> = node.devices.iter().map(fingerprint).collect();
    let mut ctx = DeviceContext {
        cel: &mut cel,
        classes: &classes,
        prints: &prints,
        node_key: 0,
    };
    let req = PodRequest::parse(spec).unwrap();
    let uses = NodeUse::new(node).devices;
    allocate_devices(spec, &req, node, &uses, &mut ctx)
        .map(|(a, _)| {
            a.into_iter()
                .map(|a| format!("{}:{}", a.request, a.device))
                .collect()
        })
        .map_err(|f| f.to_string())
}

fn claim(requests: Vec<DeviceRequest>, match_attribute: Option<&str>) -> PodSpec {
    PodSpec {
        claims: vec![Claim {
            name: "c".into(),
            requests,
            constraints: match_attribute
                .map(|a| {
                    vec![accord::demand::Constraint {
                        requests: vec![],
                        match_attribute: a.into(),
                    }]
                })
                .unwrap_or_default(),
        }],
        ..PodSpec::default()
    }
}

fn exact(class: &str, selectors: &[&str], count: u32) -> ExactRequest {
    ExactRequest {
        name: None,
        device_class: class.into(),
        selectors: selectors.iter().map(|s| s.to_string()).collect(),
        count,
        allocation_mode: Default::default(),
        capacity: BTreeMap::new(),
    }
}

#[test]
fn taints_selectors_and_affinity_follow_kube_scheduler() {
    let n = node();
    let mut spec = PodSpec::default();
    let err = static_fit(&spec, &n).unwrap_err();
    assert_eq!(err.category, "untolerated taint nvidia.com/gpu:NoSchedule");
    spec.tolerations.push(Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: TolerationOperator::Exists,
        value: None,
        effect: Some(TaintEffect::NoSchedule),
    });
    assert!(static_fit(&spec, &n).is_ok());
    spec.node_selector.insert("pool".into(), "infer".into());
    assert!(static_fit(&spec, &n)
        .unwrap_err()
        .category
        .contains("node selector pool=infer"));
    spec.node_selector.clear();
    // Terms are ORed, expressions ANDed.
    let term = |key: &str, op, values: &[&str]| NodeSelectorTerm {
        match_expressions: vec![NodeSelectorRequirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
    };
    spec.affinity = vec![term("pool", SelectorOperator::In, &["infer"])];
    assert!(static_fit(&spec, &n).is_err());
    spec.affinity.push(term(
        "topology.accord.dev/rack",
        SelectorOperator::In,
        &["r1"],
    ));
    assert!(static_fit(&spec, &n).is_ok());
    spec.affinity = vec![term("nvidia.com/gpu.count", SelectorOperator::Gt, &["4"])];
    assert!(static_fit(&spec, &n).is_ok());
    spec.affinity = vec![term("pool", SelectorOperator::DoesNotExist, &[])];
    assert!(static_fit(&spec, &n).is_err());
}

#[test]
fn resources_count_allocatable_minus_bound() {
    let n = node();
    let mut used = NodeUse::new(&n);
    let spec = PodSpec {
        requests: BTreeMap::from([
            ("cpu".into(), "100".into()),
            ("memory".into(), "1Ti".into()),
        ]),
        ..PodSpec::default()
    };
    let req = PodRequest::parse(&spec).unwrap();
    assert!(resource_fit(&req, &n, &used).is_ok());
    used.add(&req);
    let err = resource_fit(&req, &n, &used).unwrap_err();
    assert_eq!(err.to_string(), "insufficient cpu (100 requested, 92 free)");
}

#[test]
fn gpu_and_nic_on_one_pcie_root() {
    let n = node();
    // 8 GPUs, 2 per root; 4 NICs, one per root.
    let spec = claim(
        vec![
            DeviceRequest {
                name: "gpu".into(),
                exactly: Some(exact("gpu.nvidia.com", &[], 2)),
                first_available: vec![],
            },
            DeviceRequest {
                name: "nic".into(),
                exactly: Some(exact("rdma.accord.dev", &[], 1)),
                first_available: vec![],
            },
        ],
        Some("resource.kubernetes.io/pcieRoot"),
    );
    assert_eq!(
        allocate(&spec, &n).unwrap(),
        ["gpu:gpu-0", "gpu:gpu-1", "nic:nic-0"]
    );
    // Three GPUs never share a root here.
    let mut three = spec.clone();
    three.claims[0].requests[0].exactly.as_mut().unwrap().count = 3;
    let err = allocate(&three, &n).unwrap_err();
    assert!(
        err.contains("no devices with matching resource.kubernetes.io/pcieRoot"),
        "{err}"
    );
}

#[test]
fn first_available_falls_back_in_order() {
    let n = node();
    let spec = claim(
        vec![DeviceRequest {
            name: "gpu".into(),
            exactly: None,
            first_available: vec![
                ExactRequest {
                    name: Some("a100".into()),
                    ..exact(
                        "gpu.nvidia.com",
                        &["device.attributes['gpu.nvidia.com'].productName.contains('A100')"],
                        1,
                    )
                },
                ExactRequest {
                    name: Some("h100".into()),
                    ..exact(
                        "gpu.nvidia.com",
                        &["device.attributes['gpu.nvidia.com'].productName.contains('H100')"],
                        1,
                    )
                },
            ],
        }],
        None,
    );
    assert_eq!(allocate(&spec, &n).unwrap(), ["gpu/h100:gpu-0"]);
}

#[test]
fn a_selector_that_cannot_be_evaluated_is_an_explained_no() {
    let n = node();
    for (selector, needle) in [
        (
            "device.attributes['gpu.nvidia.com'].noSuchAttribute == 1",
            "cannot be evaluated",
        ),
        ("device.attributes[", "does not compile"),
        ("'not a boolean'", "not a boolean"),
    ] {
        let spec = claim(
            vec![DeviceRequest {
                name: "gpu".into(),
                exactly: Some(exact("gpu.nvidia.com", &[selector], 1)),
                first_available: vec![],
            }],
            None,
        );
        let err = allocate(&spec, &n).unwrap_err();
        assert!(err.contains(needle), "{selector}: {err}");
    }
}

#[test]
fn unknown_device_class_is_refused() {
    let n = node();
    let spec = claim(
        vec![DeviceRequest {
            name: "x".into(),
            exactly: Some(exact("fpga.example.com", &[], 1)),
            first_available: vec![],
        }],
        None,
    );
    assert!(allocate(&spec, &n)
        .unwrap_err()
        .contains("unknown device class fpga.example.com"));
}

#[test]
fn fleet_errors_name_file_line_and_key() {
    let bad = "[[nodes]]\nname = \"n1\"\nprofile = \"p\"\ncolour = \"blue\"\n";
    let err = Fleet::from_toml(bad, "fleet.toml", &mut |_| Err("none".into())).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            FleetError::Config(accord::config_file::ConfigFileError::Parse { line: 4, .. })
        ),
        "{msg}"
    );
    assert!(
        msg.starts_with("fleet.toml:4:") && msg.contains("unknown field `colour`"),
        "{msg}"
    );

    let invalid = r#"
[profiles.p]
cpu = "lots"
memory = "1Gi"

[[nodes]]
name = "n1"
rack = "nowhere"
profile = "p"

[[nodes]]
name = "n1"
profile = "missing"

[[reservations]]
name = "r"
owner = {}
nodes = ["ghost"]
"#;
    let err = Fleet::from_toml(invalid, "fleet.toml", &mut |_| Err("none".into())).unwrap_err();
    let FleetError::Invalid { problems, .. } = &err else {
        panic!("{err}")
    };
    for needle in [
        "profiles.p.cpu: invalid quantity \"lots\"",
        "nodes.n1.rack: unknown rack \"nowhere\"",
        "nodes.n1: duplicate node name",
        "nodes.n1.profile: unknown profile \"missing\"",
        "reservations.r.owner: needs a namespace or a selector",
        "reservations.r.nodes: unknown node \"ghost\"",
    ] {
        assert!(
            problems.iter().any(|p| p == needle),
            "missing {needle:?} in {problems:?}"
        );
    }

    let hw = "[[nodes]]\nname = \"n1\"\nhardware = \"missing.json\"\n";
    let err =
        Fleet::from_toml(hw, "fleet.toml", &mut |p| Err(format!("{p}: cannot read"))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "fleet.toml: node n1: hardware missing.json: missing.json: cannot read"
    );
}

#[test]
fn demand_errors_name_line_and_column() {
    let err =
        Demand::from_json("{\n  \"workloads\": [ { \"name\": 3 } ]\n}", "demand.json").unwrap_err();
    assert_eq!((err.file.as_str(), err.line), ("demand.json", 2));
}

/// Every file in config/ parses and validates: the reference stays true.
#[test]
fn reference_config_files_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        match name.as_str() {
            "fleet.toml" => {
                let fleet = Fleet::from_toml(&text, &name, &mut |_| Err("none".into()))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(fleet.nodes.len(), 3);
                assert_eq!(fleet.reservations[0].nodes, ["gpu-002"]);
                assert_eq!(
                    fleet.policy.on_drift,
                    accord::fleet::OnDrift::PlanWithReport
                );
            }
            // The daemon's, the agent's and the BMC inventory: checked by
            // daemon/tests/config.rs, agent/tests/run.rs and
            // redfish/tests/inventory.rs.
            "accordd.toml" | "agent.toml" | "bmcs.toml" => {}
            other => panic!("config/{other}: no test knows this file; add it here"),
        }
        checked += 1;
    }
    assert!(checked >= 1);
}
