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
use accord::fleet::{hardware_from_profile, Fleet, FleetError, HardwareProfile, Node};

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
        tolerations: Vec::new(),
    }
}

#[test]
fn taints_selectors_and_affinity_follow_kube_scheduler() {
    let n = node();
    let mut spec = PodSpec::default();
    let err = static_fit(&spec, &n).unwrap_err();
    assert_eq!(
        err.to_string(),
        "TaintToleration: node(s) had untolerated taint(s) (nvidia.com/gpu:NoSchedule)"
    );
    spec.tolerations.push(Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: TolerationOperator::Exists,
        value: None,
        effect: Some(TaintEffect::NoSchedule),
    });
    assert!(static_fit(&spec, &n).is_ok());
    spec.node_selector.insert("pool".into(), "infer".into());
    assert_eq!(
        static_fit(&spec, &n).unwrap_err().to_string(),
        "NodeAffinity: node(s) didn't match Pod's node affinity/selector \
         (nodeSelector pool=infer, node has pool=train)"
    );
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
    assert_eq!(
        err.to_string(),
        "NodeResourcesFit: Insufficient cpu (100 requested, 92 free)"
    );
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
fn device_taints_keep_requests_away_unless_tolerated() {
    use accord::device::{DeviceTaint, DeviceToleration};
    let mut n = node();
    // NVIDIA's DRA driver taints an unhealthy GPU NoSchedule; an admin's
    // DeviceTaintRule may add NoExecute; `None` only informs.
    let taint = |key: &str, effect: &str| DeviceTaint {
        key: key.into(),
        value: "xid-79".into(),
        effect: effect.into(),
    };
    let mut devices = n.devices.to_vec();
    devices[0]
        .taints
        .push(taint("gpu.nvidia.com/unhealthy", "NoSchedule"));
    devices[1]
        .taints
        .push(taint("example.com/drain", "NoExecute"));
    devices[2].taints.push(taint("example.com/note", "None"));
    // A tainted NIC is no reason a GPU request waits: explain counts
    // only the devices the request could have had.
    let nic = devices
        .iter_mut()
        .find(|d| d.kind == accord::device::DeviceKind::Nic)
        .expect("the node has a NIC");
    nic.taints
        .push(taint("example.com/link-down", "NoSchedule"));
    n.devices = devices.into();
    let gpus = |count: u32, tolerations: Vec<DeviceToleration>| {
        claim(
            vec![DeviceRequest {
                name: "gpu".into(),
                exactly: Some(ExactRequest {
                    tolerations,
                    ..exact("gpu.nvidia.com", &[], count)
                }),
                first_available: vec![],
            }],
            None,
        )
    };
    // The tainted GPUs are skipped; the informational taint is not.
    assert_eq!(allocate(&gpus(1, vec![]), &n).unwrap(), ["gpu:gpu-2"]);
    let err = allocate(&gpus(7, vec![]), &n).unwrap_err();
    assert!(err.contains("2 device(s) tainted, not tolerated"), "{err}");
    // Tolerating one key (Exists) opens that GPU only; a wrong value
    // under Equal does not; key-less Exists tolerates everything.
    let exists = |key: &str| DeviceToleration {
        key: key.into(),
        operator: "Exists".into(),
        value: String::new(),
        effect: String::new(),
    };
    let got = allocate(&gpus(7, vec![exists("gpu.nvidia.com/unhealthy")]), &n).unwrap();
    assert!(got.contains(&"gpu:gpu-0".to_owned()), "{got:?}");
    assert!(!got.contains(&"gpu:gpu-1".to_owned()), "{got:?}");
    let wrong_value = DeviceToleration {
        key: "example.com/drain".into(),
        operator: "Equal".into(),
        value: "other".into(),
        effect: "NoExecute".into(),
    };
    assert!(allocate(&gpus(7, vec![wrong_value.clone()]), &n).is_err());
    let right_value = DeviceToleration {
        value: "xid-79".into(),
        ..wrong_value
    };
    let got = allocate(&gpus(7, vec![right_value]), &n).unwrap();
    assert!(got.contains(&"gpu:gpu-1".to_owned()), "{got:?}");
    assert_eq!(allocate(&gpus(8, vec![exists("")]), &n).unwrap().len(), 8);
    // The wrong effect does not tolerate.
    let other_effect = DeviceToleration {
        effect: "NoExecute".into(),
        ..exists("gpu.nvidia.com/unhealthy")
    };
    assert!(allocate(&gpus(7, vec![other_effect]), &n).is_err());
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

/// A DeviceClass or claim is cluster input: a selector that would run
/// forever, overflow the stack or panic the cel crate is an invalid
/// selector, said as such, and planning goes on.
#[test]
fn hostile_selectors_are_invalid_not_a_hang_or_a_crash() {
    let n = node();
    let ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]";
    let mut nested = "device.driver == 'gpu.nvidia.com'".to_owned();
    for v in 0..7 {
        nested = format!("{ten}.all(v{v}, {nested})");
    }
    let hostile = [
        // 10^7 evaluations of the body: never finishes in practice.
        (nested, "too costly"),
        // A syntax error past column 65,535 (the cel crate's message
        // panics there).
        (
            format!("device.driver == 'x' && {} ==", "1 + ".repeat(20_000)),
            "bytes long",
        ),
        (
            format!("{}true{}", "(".repeat(5_000), ")".repeat(5_000)),
            "brackets nested",
        ),
        // Deep enough to overflow the evaluator's stack.
        (
            format!("device.driver == 'x' && 1{} > 0", " + 1".repeat(2_000)),
            "levels deep",
        ),
        (
            "device.driver.matches('(?:\\\\w{100}){100}')".to_owned(),
            "compiles to more than 256 KiB",
        ),
    ];
    for (selector, needle) in &hostile {
        let checked = accord::fit::check_selector(selector).unwrap_err();
        assert!(checked.contains(needle), "{needle}: {checked}");
        let spec = claim(
            vec![DeviceRequest {
                name: "gpu".into(),
                exactly: Some(exact("gpu.nvidia.com", &[selector], 1)),
                first_available: vec![],
            }],
            None,
        );
        let err = allocate(&spec, &n).unwrap_err();
        assert!(
            err.contains("invalid CEL selector") && err.contains(needle),
            "{needle}: {err}"
        );
        assert!(err.len() < 1_000, "the selector is quoted short: {err}");
    }
    // Extremes compare, without overflow (`quantity` of a non-quantity is
    // the smallest integer).
    let extreme = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('x')) > 0";
    let spec = claim(
        vec![DeviceRequest {
            name: "gpu".into(),
            exactly: Some(exact("gpu.nvidia.com", &[extreme], 1)),
            first_available: vec![],
        }],
        None,
    );
    assert_eq!(allocate(&spec, &n).unwrap(), ["gpu:gpu-0"]);
}

/// Every selector in the Kubernetes manifests we translate is within the
/// limits (a fixture may still name a function we lack, on purpose).
#[test]
fn fixture_selectors_are_within_the_limits() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubernetes");
    let mut dirs = vec![root];
    let mut checked = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for selector in expressions(&text) {
                if let Err(e) = accord::fit::check_selector(&selector) {
                    assert!(
                        e.starts_with("unknown function"),
                        "{}: {selector}: {e}",
                        path.display()
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked}");
}

/// The `expression:` values of a YAML text: quoted on the line, or a block
/// scalar (`|`, `|-`) on the lines indented below it.
fn expressions(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(at) = line.find("expression:") else {
            continue;
        };
        let value = line[at + "expression:".len()..].trim();
        let value = value.strip_suffix('}').unwrap_or(value).trim();
        if value.starts_with('|') {
            let indent = line.len() - line.trim_start().len();
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|l| l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .collect();
            out.push(block.join("\n"));
        } else if let Some(q) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            out.push(q.to_owned());
        }
    }
    out
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

/// A list in a file is counted while it is read: the first entry past
/// the limit stops the read with a located error.
#[test]
fn lists_are_counted_while_they_are_read() {
    #[derive(Debug, serde::Deserialize)]
    struct Few {
        #[serde(deserialize_with = "three")]
        items: Vec<u32>,
    }
    fn three<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        accord::demand::at_most(d, 3)
    }
    let ok: Few = serde_json::from_str(r#"{"items": [1, 2, 3]}"#).unwrap();
    assert_eq!(ok.items, [1, 2, 3]);
    let e = serde_json::from_str::<Few>(r#"{"items": [1, 2, 3, 4, "never read"]}"#).unwrap_err();
    assert!(
        e.to_string()
            .contains("more than 3 entries; refused while reading"),
        "{e}"
    );
    assert_eq!(
        (e.line(), e.column()),
        (1, 23),
        "stopped at the fourth: {e}"
    );
}

/// Fleet node names are node names: path-like, escape-laden, upper-case,
/// lookalike (Cyrillic `а`) and 300-character names are refused, said
/// escaped, before they reach a plan or a BMC lookup.
#[test]
fn fleet_node_names_are_node_names() {
    let long = "n".repeat(300);
    let mut text = "[profiles.p]\ncpu = \"1\"\nmemory = \"1Gi\"\n".to_owned();
    for name in [
        "../etc/passwd",
        "gpu-01\\u001b[31m",
        "GPU-01",
        "gpu-\u{430}",
        &long,
        "gpu-01",
    ] {
        text.push_str(&format!("[[nodes]]\nname = \"{name}\"\nprofile = \"p\"\n"));
    }
    let err = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap_err();
    let FleetError::Invalid { problems, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(problems.len(), 5, "{problems:?}");
    assert!(
        problems.iter().all(|p| p.starts_with("nodes: ")),
        "{problems:?}"
    );
    assert!(
        problems.iter().all(|p| !p.contains('\u{1b}')),
        "{problems:?}"
    );
    assert!(problems[0].contains("\"../etc/passwd\""), "{problems:?}");
}

/// The hostile values of issue 16: each is refused with a line naming its
/// key, before anything is built by it (a million GPUs would abort on
/// allocation, NaN power would pass every rack budget).
#[test]
fn hostile_fleet_numbers_are_refused_by_key() {
    let hostile = r#"
[policy]
idle_power_off_after_s = 9223372036854775807
warm_spares_per_rack = 4294967295
warm_spares_per_profile = { big = 4294967295 }

[profiles.big]
gpus = 1000000
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 9223372036854775807
cpu = "-200"
memory = "-1Gi"
pods = -1
power_kw = nan
nics = 4294967295
numa_nodes = 4294967295
gpus_per_pcie_root = 4294967295
mig_enabled = true
mig_layout = ["9g.99gb@0"]

[profiles.overlap]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "1"
memory = "1Gi"
pods = 1000000
power_kw = -3.0
mig_enabled = true
mig_layout = ["3g.40gb@0", "2g.20gb@2"]

[profiles.no-table]
gpus = 1
gpu_model = "NVIDIA L40S"
cpu = "1"
memory = "1Gi"
power_kw = inf
mig_enabled = true
mig_layout = ["1g.10gb@0"]

[[racks]]
name = "r1"
power_budget_kw = nan
max_concurrent_power_ons = 0

[[racks]]
name = "r2"
power_budget_kw = -5.0

[[nodes]]
name = "n1"
rack = "r1"
profile = "overlap"
cpu = "-1"
memory = "-5"
power_kw = nan
extended = { "example.com/fpga" = "-2" }
mig_layout = ["3g.40gb@1"]

[[nodes]]
name = "n2"
profile = "big"
mig_layout = ["1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6", "1g.10gb@7"]
"#;
    let err = Fleet::from_toml(hostile, "fleet.toml", &mut |_| Err("none".into())).unwrap_err();
    let FleetError::Invalid { problems, .. } = &err else {
        panic!("{err}")
    };
    for (key, needle) in [
        ("policy.idle_power_off_after_s", "above the limit"),
        ("policy.warm_spares_per_rack", "above the limit"),
        ("policy.warm_spares_per_profile.big", "above the limit"),
        ("profiles.big.gpus", "1000000 is above the limit of 64"),
        ("profiles.big.gpu_memory_gib", "above the limit"),
        ("profiles.big.cpu", "negative quantity \"-200\""),
        ("profiles.big.memory", "negative quantity"),
        ("profiles.big.pods", "-1 is not a pod limit"),
        ("profiles.big.power_kw", "NaN is not a power draw"),
        ("profiles.big.nics", "4294967295 is above the limit of 1024"),
        ("profiles.big.numa_nodes", "above the limit"),
        ("profiles.big.gpus_per_pcie_root", "above the limit"),
        (
            "profiles.big.mig_layout",
            "\"9g.99gb@0\": the GPU has no such profile",
        ),
        ("profiles.overlap.pods", "not a pod limit"),
        ("profiles.overlap.power_kw", "-3 is not a power draw"),
        (
            "profiles.overlap.mig_layout",
            "overlaps an earlier instance",
        ),
        ("profiles.no-table.power_kw", "inf is not a power draw"),
        (
            "profiles.no-table.mig_layout",
            "no published MIG profile table",
        ),
        ("racks.r1.power_budget_kw", "NaN is not a power budget"),
        ("racks.r1.max_concurrent_power_ons", "must be at least 1"),
        ("racks.r2.power_budget_kw", "-5 is not a power budget"),
        ("nodes.n1.cpu", "negative quantity"),
        ("nodes.n1.memory", "negative quantity"),
        ("nodes.n1.power_kw", "NaN is not a power draw"),
        ("nodes.n1.extended.example.com/fpga", "negative quantity"),
        ("nodes.n1.mig_layout", "not a placement of that profile"),
        ("nodes.n2.mig_layout", "\"1g.10gb@7\""),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("{key}: ")) && p.contains(needle)),
            "missing {key}: ...{needle}... in {problems:#?}"
        );
    }
    // One line per problem, each naming its key.
    assert!(problems.iter().all(|p| !p.contains('\n')), "{problems:#?}");
}

/// A profile's synthetic model is bounded even where `validate` did not
/// run: counts clamp to the limits, and 64 GPUs on 64 PCIe roots get 64
/// distinct PCI addresses that read back.
#[test]
fn a_profile_model_is_bounded_even_unchecked() {
    let hostile = HardwareProfile {
        gpus: 1_000_000,
        gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
        gpu_memory_gib: u64::MAX,
        nics: Some(u32::MAX),
        numa_nodes: Some(u32::MAX),
        gpus_per_pcie_root: Some(u32::MAX),
        mig_enabled: true,
        mig_layout: vec!["3g.40gb@0".into(), "2g.20gb@2".into()],
        ..HardwareProfile::new("-200", "-1Gi")
    };
    let hw = hardware_from_profile(&hostile, &hostile.mig_layout);
    assert_eq!(hw.gpus.len(), 64);
    assert_eq!(hw.nics.len(), 1024);
    assert_eq!(hw.numa_nodes.len(), 64);
    assert_eq!(hw.machine.memory_bytes, 0);
    // An overlapping layout is not made up: the GPU has no instances.
    assert!(hw.gpus[0].mig.as_ref().unwrap().gpu_instances.is_empty());

    let one_per_root = HardwareProfile {
        gpus: 64,
        gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
        nics: Some(64),
        gpus_per_pcie_root: Some(1),
        ..HardwareProfile::new("1", "1Gi")
    };
    let hw = hardware_from_profile(&one_per_root, &[]);
    let ids: std::collections::BTreeSet<_> = hw
        .gpus
        .iter()
        .map(|g| g.pci_bus_id)
        .chain(hw.nics.iter().filter_map(|n| n.pci_bus_id))
        .collect();
    assert_eq!(ids.len(), 128, "every GPU and NIC has its own address");
    for id in ids {
        assert_eq!(id.to_string().parse::<accord::hardware::PciBusId>(), Ok(id));
    }
    let roots: std::collections::BTreeSet<_> =
        hw.gpus.iter().filter_map(|g| g.pcie_root.clone()).collect();
    assert_eq!(roots.len(), 64);
    // The first 15 roots are spelled as before.
    assert_eq!(hw.gpus[0].pcie_root.as_deref(), Some("pci0000:10"));
    assert_eq!(hw.gpus[14].pcie_root.as_deref(), Some("pci0000:f0"));
    assert_eq!(hw.gpus[15].pcie_root.as_deref(), Some("pci0001:10"));
}

/// A node with a model file: its MIG layout is checked on the model's GPUs.
#[test]
fn a_model_files_mig_layout_is_checked() {
    let h100 = HardwareProfile {
        gpus: 2,
        gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
        ..HardwareProfile::new("1", "1Gi")
    };
    let fleet = |layout: &str| {
        let text =
            format!("[[nodes]]\nname = \"n1\"\nhardware = \"n1.json\"\nmig_layout = {layout}\n");
        Fleet::from_toml(&text, "fleet.toml", &mut |_| {
            Ok(hardware_from_profile(&h100, &[]))
        })
    };
    let ok = fleet(r#"["3g.40gb@0", "3g.40gb@4"]"#).unwrap();
    let migs = ok.nodes[0]
        .devices
        .iter()
        .filter(|d| d.kind == accord::device::DeviceKind::Mig)
        .count();
    assert_eq!(migs, 4, "two instances on each of two GPUs");
    for (layout, needle) in [
        (r#"["3g.40gb@0", "3g.40gb@2"]"#, "not a placement"),
        (r#"["4g.40gb@0", "3g.40gb@0"]"#, "overlaps"),
        (r#"["1g.10gb+me@0", "1g.10gb+me@1"]"#, "more instances"),
        (r#"["x"]"#, "is not PROFILE@START"),
    ] {
        let err = fleet(layout).unwrap_err().to_string();
        assert!(
            err.contains("nodes.n1.mig_layout: ") && err.contains(needle),
            "{layout}: {err}"
        );
    }
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
            // Policies for `accordctl simulate --policy`: a fleet file's
            // [policy] keys (merged onto the fleet's by accord-sim).
            "policy-power-saver.toml" | "policy-warm-spares.toml" | "policy-predictive.toml" => {
                let policy: accord::fleet::Policy =
                    accord::config_file::parse(&text, &name).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(policy.validate(), Vec::<String>::new(), "{name}");
                let table: toml::Table = toml::from_str(&text).unwrap();
                assert!(
                    table.contains_key("idle_power_off_after_s"),
                    "{name}: sets the idle timeout"
                );
                assert!(policy.idle_power_off_after_s > 0);
            }
            // The daemon's, the agent's and the BMC inventory: checked by
            // daemon/tests/it/config.rs, agent/tests/it/run.rs and
            // redfish/tests/it/inventory.rs.
            "accordd.toml" | "agent.toml" | "bmcs.toml" => {}
            other => panic!("config/{other}: no test knows this file; add it here"),
        }
        checked += 1;
    }
    assert!(checked >= 1);
}

/// A model file's MIG instances are checked against NVIDIA's tables as a
/// report's are: seven 7g.80gb on one H100 are refused, naming the file.
#[test]
fn a_model_files_mig_instances_are_checked() {
    let text = include_str!("../fixtures/models/h100-8gpu-mig.json");
    let mut hw: accord::hardware::NodeHardware = serde_json::from_str(text).unwrap();
    let good = hw.clone();
    let mig = hw.gpus[0].mig.as_mut().unwrap();
    let whole = mig
        .profiles
        .iter()
        .find(|p| p.name == "7g.80gb")
        .expect("the H100 has 7g.80gb")
        .clone();
    let placement = accord::hardware::mig::MigPlacement { start: 0, size: 8 };
    mig.gpu_instances = (0..7)
        .map(|id| accord::hardware::mig::GpuInstance {
            id,
            profile: whole.name.clone(),
            profile_id: Some(whole.id),
            placement: Some(placement),
            compute_instances: Vec::new(),
        })
        .collect();
    let fleet = |hw: accord::hardware::NodeHardware| {
        Fleet::from_toml(
            "[[nodes]]\nname = \"n1\"\nhardware = \"n1.json\"\n",
            "fleet.toml",
            &mut |_| Ok(hw.clone()),
        )
    };
    fleet(good).unwrap();
    let err = fleet(hw).unwrap_err().to_string();
    assert!(
        err.contains("n1.json") && err.contains("gpus[0].mig"),
        "{err}"
    );
}
