//! Planning with what the machines and the cluster say: agents' reports
//! against the fleet file's declarations (drift), the scheduler's view of
//! a node (labels, taints, allocatable, device-plugin counts, DRA devices),
//! and what Accord publishes on Nodes.

use std::collections::BTreeMap;

use accord::demand::{Demand, Taint, TaintEffect};
use accord::device::DeviceKind;
use accord::fit::{static_fit, DeviceContext, NodeUse, PodRequest};
use accord::fleet::owns_label;
use accord::fleet::{hardware_from_profile, Fleet, HardwareProfile, Node, OnDrift};
use accord::hardware::{GpuInstance, MigMode, MigPlacement, MigState, NodeHardware};
use accord::plan::{plan, Plan};
use accord::truth::{
    label_value, owns_taint, Drift, DriftKind, Publication, SchedulerView, GPU_COUNT_LABEL,
    GPU_MODEL_LABEL, RESERVATION_KEY,
};

const H100: &str = "NVIDIA H100 80GB HBM3";

const FLEET: &str = r#"
[topology]
also_label = { rack = ["topology.kubernetes.io/rack"] }

[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.0

[profiles.h100-mig]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"
mig_enabled = true
mig_layout = ["3g.40gb@0", "3g.40gb@4"]

[profiles.h100-full]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"
numa_nodes = 2
nics = 8
gpus_per_pcie_root = 2

[[racks]]
name = "r1"
site = "dc1"

[[racks]]
name = "r2"
site = "dc1"

[[nodes]]
name = "r1-a"
rack = "r1"
profile = "h100"
power = "on"
labels = { "pool" = "train" }

[[nodes]]
name = "r1-b"
rack = "r1"
profile = "h100"
power = "on"

[[nodes]]
name = "r2-mig"
rack = "r2"
profile = "h100-mig"
power = "on"

[[nodes]]
name = "r2-full"
rack = "r2"
profile = "h100-full"

[[reservations]]
name = "research"
owner = { namespace = "research" }
nodes = ["r1-b"]
start = 1000
end = 2000

[[reservations]]
name = "lent"
owner = { namespace = "lent" }
nodes = ["r2-full"]
lendable = true
"#;

fn fleet() -> Fleet {
    Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("no files".into())).unwrap()
}

fn profile(gpus: u32) -> HardwareProfile {
    HardwareProfile {
        gpus,
        gpu_model: Some(H100.into()),
        gpu_memory_gib: 80,
        ..HardwareProfile::new("192", "2Ti")
    }
}

/// An agent's report of an H100 machine with `gpus` GPUs.
fn reported(gpus: u32) -> NodeHardware {
    hardware_from_profile(&profile(gpus), &[])
}

fn node<'f>(fleet: &'f Fleet, name: &str) -> &'f Node {
    fleet.nodes.iter().find(|n| n.name == name).unwrap()
}

fn node_mut<'f>(fleet: &'f mut Fleet, name: &str) -> &'f mut Node {
    fleet.nodes.iter_mut().find(|n| n.name == name).unwrap()
}

/// One workload per `(name, pods, requests)`, in namespace `ml`.
fn demand(workloads: &[(&str, u32, serde_json::Value)]) -> Demand {
    let workloads: Vec<serde_json::Value> = workloads
        .iter()
        .enumerate()
        .map(|(i, (name, count, pod))| {
            serde_json::json!({"name": name, "namespace": "ml", "created": i,
                "pod_sets": [{"name": "w", "count": count, "pod": pod}]})
        })
        .collect();
    Demand::from_json(
        &serde_json::json!({ "workloads": workloads }).to_string(),
        "demand.json",
    )
    .unwrap()
}

fn gpus(n: u32) -> serde_json::Value {
    serde_json::json!({"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": n.to_string()}})
}

/// Nodes each workload's pods landed on.
fn placed(p: &Plan) -> BTreeMap<String, Vec<String>> {
    p.placements
        .iter()
        .map(|w| {
            (
                w.workload.clone(),
                w.pods.iter().map(|x| x.node.clone()).collect(),
            )
        })
        .collect()
}

fn kinds(drift: &[Drift]) -> Vec<DriftKind> {
    drift.iter().map(|d| d.what).collect()
}

#[test]
fn declared_eight_reported_seven_is_count_drift_and_no_eight_gpu_pod_lands_there() {
    let mut f = fleet();
    let drift = f.apply_report("r1-a", &reported(7)).unwrap();
    assert_eq!(
        drift,
        vec![Drift {
            what: DriftKind::GpuCount,
            declared: "8".into(),
            reported: "7".into(),
        }]
    );
    assert_eq!(drift[0].to_string(), "GPUs: declared 8, reported 7");
    assert!(f.is_reported("r1-a"));
    assert!(!f.is_reported("r1-b"));
    let n = node(&f, "r1-a");
    assert_eq!(n.gpus.len(), 7);
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Gpu)
            .count(),
        7
    );
    assert_eq!(n.device_prints.len(), n.devices.len());
    // The model's labels follow the report; declared ones and the rest stay.
    assert_eq!(n.labels["nvidia.com/gpu.count"], "7");
    assert_eq!(n.labels["pool"], "train");
    assert_eq!(n.labels["topology.accord.dev/rack"], "r1");
    assert_eq!(n.allocatable.cpu, 192_000);
    assert_eq!(n.power_kw, 10.0);
    // The declaration is still known.
    assert_eq!(f.declared_hardware("r1-a").unwrap().gpus.len(), 8);

    // r1-a comes first among the up nodes with whole GPUs: with its
    // declaration it would take the 8-GPU pod; with its report, r1-b.
    let one = demand(&[("eight", 1, gpus(8))]);
    let p = plan(&fleet(), &one, &f.policy, 0);
    assert_eq!(placed(&p)["ml/eight"], ["r1-a"]);
    let p = plan(&f, &one, &f.policy, 0);
    assert_eq!(placed(&p)["ml/eight"], ["r1-b"]);
    // Seven fit there, though.
    let p = plan(&f, &demand(&[("seven", 1, gpus(7))]), &f.policy, 0);
    assert_eq!(placed(&p)["ml/seven"], ["r1-a"]);
    // Many 8-GPU pods: never on r1-a.
    let many = demand(&[(
        "eights",
        3,
        serde_json::json!({"requests": {"nvidia.com/gpu": "8"}}),
    )]);
    let p = plan(&f, &many, &f.policy, 0);
    for w in &p.placements {
        assert!(w.pods.iter().all(|x| x.node != "r1-a"), "{p:?}");
    }

    // Back to the declaration.
    assert!(f.forget_report("r1-a"));
    assert!(!f.is_reported("r1-a"));
    assert_eq!(node(&f, "r1-a").gpus.len(), 8);
    assert_eq!(node(&f, "r1-a").labels["nvidia.com/gpu.count"], "8");
    assert_eq!(*node(&f, "r1-a"), *node(&fleet(), "r1-a"));
    assert!(!f.forget_report("nope"));
    assert_eq!(f.apply_report("nope", &reported(8)), None);
}

#[test]
fn a_report_that_matches_the_declaration_has_no_drift() {
    let mut f = fleet();
    for name in ["r1-a", "r2-mig", "r2-full"] {
        let declared = f.declared_hardware(name).unwrap().clone();
        assert_eq!(f.apply_report(name, &declared).unwrap(), vec![], "{name}");
    }
    // What an agent says of a real 80GB H100: 81559 MiB, not 80 GiB.
    let mut hw = reported(8);
    for g in &mut hw.gpus {
        g.memory_bytes = Some(81_559 << 20);
        g.uuid = Some(format!("GPU-{}", g.index));
    }
    assert_eq!(f.apply_report("r1-a", &hw).unwrap(), vec![]);
    // A report planned with keeps the node the same to the planner as
    // its declaration when they agree (but for the GPUs' identities).
    let same = demand(&[("g", 2, gpus(4))]);
    assert_eq!(
        placed(&plan(&f, &same, &f.policy, 0)),
        placed(&plan(&fleet(), &same, &f.policy, 0))
    );
}

#[test]
fn only_what_a_profile_declares_is_compared() {
    let mut f = fleet();
    // r1-a's profile declares no NUMA nodes, NICs or PCIe layout.
    let odd = hardware_from_profile(
        &HardwareProfile {
            numa_nodes: Some(4),
            nics: Some(2),
            gpus_per_pcie_root: Some(4),
            ..profile(8)
        },
        &[],
    );
    assert_eq!(f.apply_report("r1-a", &odd).unwrap(), vec![]);
    // r2-full's does: 2 NUMA nodes, 8 NICs, 2 GPUs per root (4 roots).
    let drift = f.apply_report("r2-full", &odd).unwrap();
    assert_eq!(
        kinds(&drift),
        [DriftKind::NumaNodes, DriftKind::PcieRoots, DriftKind::Nics]
    );
    let text: Vec<String> = drift.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "NUMA nodes: declared 2, reported 4",
            "PCIe roots: declared 4 (2 GPUs per root), reported 2",
            "NICs: declared 8, reported 2",
        ]
    );
    // A GPU short, still 2 per root: only the count differs.
    let seven = hardware_from_profile(
        &HardwareProfile {
            numa_nodes: Some(2),
            nics: Some(8),
            gpus_per_pcie_root: Some(2),
            ..profile(7)
        },
        &[],
    );
    assert_eq!(
        kinds(&f.apply_report("r2-full", &seven).unwrap()),
        [DriftKind::GpuCount]
    );
}

#[test]
fn gpu_model_and_memory_drift() {
    let mut f = fleet();
    let mut hw = reported(8);
    hw.gpus[7].model = Some("NVIDIA A100-SXM4-40GB".into());
    hw.gpus[7].memory_bytes = Some(40_960 << 20);
    let drift = f.apply_report("r1-a", &hw).unwrap();
    assert_eq!(
        drift,
        vec![
            Drift {
                what: DriftKind::GpuModel,
                declared: "NVIDIA H100 80GB HBM3 x8".into(),
                reported: "NVIDIA A100-SXM4-40GB x1, NVIDIA H100 80GB HBM3 x7".into(),
            },
            Drift {
                what: DriftKind::GpuMemory,
                declared: "80 GiB".into(),
                reported: "40 GiB x1, 80 GiB x7".into(),
            },
        ]
    );
    // r2-mig's profile states no memory: not compared.
    let mut hw = f.declared_hardware("r2-mig").unwrap().clone();
    for g in &mut hw.gpus {
        g.memory_bytes = Some(1 << 30);
    }
    assert_eq!(f.apply_report("r2-mig", &hw).unwrap(), vec![]);
}

fn instance(id: u32, profile: &str, start: u32, size: u32) -> GpuInstance {
    GpuInstance {
        id,
        profile: profile.into(),
        profile_id: None,
        placement: Some(MigPlacement { start, size }),
        compute_instances: vec![],
    }
}

#[test]
fn mig_mode_and_layout_drift_name_the_gpu() {
    let mut f = fleet();
    let mut hw = f.declared_hardware("r2-mig").unwrap().clone();
    // GPU 3: seven 1g.10gb instead of two 3g.40gb; GPU 5: MIG off.
    let mig = hw.gpus[3].mig.as_mut().unwrap();
    mig.gpu_instances = (0..7).map(|k| instance(k + 1, "1g.10gb", k, 1)).collect();
    hw.gpus[5].mig.as_mut().unwrap().current_mode = MigMode::Disabled;
    let drift = f.apply_report("r2-mig", &hw).unwrap();
    assert_eq!(
        drift,
        vec![
            Drift {
                what: DriftKind::MigMode,
                declared: "GPU 5: enabled".into(),
                reported: "GPU 5: disabled".into(),
            },
            Drift {
                what: DriftKind::MigLayout,
                declared: "GPU 3: 3g.40gb@0,3g.40gb@4".into(),
                reported:
                    "GPU 3: 1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6"
                        .into(),
            },
        ]
    );
    // The node is planned with the report: GPU 5 whole, GPU 3's 1g.10gb.
    let n = node(&f, "r2-mig");
    let count = |kind: DeviceKind, profile: Option<&str>| {
        n.devices
            .iter()
            .filter(|d| d.kind == kind && (profile.is_none() || d.mig_profile() == profile))
            .count()
    };
    assert_eq!(count(DeviceKind::Gpu, None), 1);
    assert_eq!(count(DeviceKind::Mig, Some("1g.10gb")), 7);
    assert_eq!(count(DeviceKind::Mig, Some("3g.40gb")), 12);
    // The same layout in another order is no drift; an unknown placement
    // (live NVML) is compared by profile only.
    let mut hw = f.declared_hardware("r2-mig").unwrap().clone();
    hw.gpus[0].mig.as_mut().unwrap().gpu_instances.reverse();
    for i in &mut hw.gpus[1].mig.as_mut().unwrap().gpu_instances {
        i.placement = None;
    }
    assert_eq!(f.apply_report("r2-mig", &hw).unwrap(), vec![]);
    // MIG on where the profile says off.
    let mut hw = reported(8);
    hw.gpus[0].mig = Some(MigState {
        capable: true,
        current_mode: MigMode::Enabled,
        pending_mode: MigMode::Enabled,
        profiles: vec![],
        gpu_instances: vec![instance(1, "7g.80gb", 0, 8)],
    });
    assert_eq!(
        f.apply_report("r1-a", &hw).unwrap(),
        vec![Drift {
            what: DriftKind::MigMode,
            declared: "GPU 0: disabled".into(),
            reported: "GPU 0: enabled".into(),
        }]
    );
}

#[test]
fn a_model_file_declaration_is_compared_on_everything() {
    let text = std::fs::read_to_string("tests/fixtures/models/h100-8gpu-mig.json").unwrap();
    let model: NodeHardware = serde_json::from_str(&text).unwrap();
    let toml = "[[nodes]]\nname = \"m\"\nhardware = \"h100.json\"\npower = \"on\"\n";
    let mut f = Fleet::from_toml(toml, "fleet.toml", &mut |_| Ok(model.clone())).unwrap();
    assert_eq!(f.apply_report("m", &model).unwrap(), vec![]);
    let mut hw = model.clone();
    let gone = hw.gpus.pop().unwrap().pci_bus_id;
    hw.nvlinks
        .retain(|l| l.a.pci_bus_id != gone && l.b.pci_bus_id != gone);
    hw.numa_nodes.pop();
    let drift = f.apply_report("m", &hw).unwrap();
    let got = kinds(&drift);
    assert!(got.contains(&DriftKind::GpuCount), "{drift:?}");
    assert!(got.contains(&DriftKind::NumaNodes), "{drift:?}");
    assert!(got.contains(&DriftKind::NvLink), "{drift:?}");
    assert!(!got.contains(&DriftKind::GpuModel), "{drift:?}");
    let nv = drift.iter().find(|d| d.what == DriftKind::NvLink).unwrap();
    assert_ne!(nv.declared, nv.reported);
    assert!(nv.declared.contains("GPUs"), "{nv:?}");
}

fn view(gpus: Option<u32>) -> SchedulerView {
    let mut allocatable: BTreeMap<String, String> = [
        ("cpu", "190"),
        ("memory", "1900Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "100Gi"),
        ("hugepages-1Gi", "0"),
        ("example.com/fpga", "2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if let Some(n) = gpus {
        allocatable.insert("nvidia.com/gpu".into(), n.to_string());
    }
    SchedulerView {
        labels: [("kubernetes.io/hostname", "r1-a"), ("team", "blue")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("blue".into()),
            effect: TaintEffect::NoSchedule,
        }],
        allocatable,
        devices: None,
        counters: Default::default(),
    }
}

fn tolerating(pod: serde_json::Value) -> serde_json::Value {
    let mut pod = pod;
    pod["tolerations"] = serde_json::json!([{"key": "dedicated", "operator": "Exists"}]);
    pod
}

#[test]
fn a_node_advertising_six_of_eight_gpus_takes_six_not_eight() {
    let mut f = fleet();
    let drift = node_mut(&mut f, "r1-a").apply_scheduler_view(&view(Some(6)));
    assert_eq!(
        drift,
        vec![Drift {
            what: DriftKind::SchedulerResource,
            declared: "nvidia.com/gpu=8".into(),
            reported: "nvidia.com/gpu=6".into(),
        }]
    );
    assert_eq!(
        drift[0].to_string(),
        "device-plugin resource: model nvidia.com/gpu=8, scheduler nvidia.com/gpu=6"
    );
    let n = node(&f, "r1-a");
    // The excess goes from the highest GPU indices.
    let left: Vec<usize> = n
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Gpu)
        .filter_map(|d| d.gpu)
        .collect();
    assert_eq!(left, [0, 1, 2, 3, 4, 5]);
    assert_eq!(n.device_prints.len(), n.devices.len());
    assert!(n.gpus[6].withheld && n.gpus[7].withheld && !n.gpus[5].withheld);
    // Only r1-a is offered to the pods: everything else is cordoned.
    for other in ["r1-b", "r2-mig", "r2-full"] {
        node_mut(&mut f, other).schedulable = false;
    }
    let p = plan(
        &f,
        &demand(&[("eight", 1, tolerating(gpus(8)))]),
        &f.policy,
        0,
    );
    assert!(p.placements.is_empty(), "{p:?}");
    assert_eq!(p.unsatisfied.len(), 1);
    let p = plan(
        &f,
        &demand(&[("six", 1, tolerating(gpus(6)))]),
        &f.policy,
        0,
    );
    assert_eq!(placed(&p)["ml/six"], ["r1-a"]);
    // DRA claims draw on the same devices.
    let claim = serde_json::json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "claims": [{"name": "c", "requests": [{"name": "g", "exactly":
            {"device_class": "gpu.nvidia.com", "count": 7}}]}]});
    let p = plan(&f, &demand(&[("claim7", 1, claim)]), &f.policy, 0);
    assert!(p.placements.is_empty(), "{p:?}");

    // A key the Node does not advertise constrains nothing and is no drift.
    let mut g = fleet();
    let n = node_mut(&mut g, "r1-a");
    assert_eq!(n.apply_scheduler_view(&view(None)), vec![]);
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Gpu)
            .count(),
        8
    );
    // More than the model: drift, nothing dropped.
    let drift = n.apply_scheduler_view(&view(Some(9)));
    assert_eq!(kinds(&drift), [DriftKind::SchedulerResource]);
    assert_eq!(n.gpus.iter().filter(|g| g.withheld).count(), 0);
}

#[test]
fn applying_a_view_again_starts_from_the_model() {
    let mut f = fleet();
    let n = node_mut(&mut f, "r1-a");
    n.apply_scheduler_view(&view(Some(2)));
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Gpu)
            .count(),
        2
    );
    let drift = n.apply_scheduler_view(&view(Some(8)));
    assert_eq!(drift, vec![]);
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Gpu)
            .count(),
        8
    );
    assert!(n.gpus.iter().all(|g| !g.withheld));
    let once = n.clone();
    n.apply_scheduler_view(&view(Some(8)));
    assert_eq!(*n, once);
}

#[test]
fn mig_device_plugin_counts_are_compared_and_capped_per_profile() {
    let mut f = fleet();
    let mut v = view(Some(0));
    v.allocatable
        .insert("nvidia.com/mig-3g.40gb".into(), "10".into());
    v.allocatable
        .insert("nvidia.com/mig-1g.10gb".into(), "0".into());
    let n = node_mut(&mut f, "r2-mig");
    let drift = n.apply_scheduler_view(&v);
    // 1g.10gb: none in the model, none advertised; no whole GPUs either.
    assert_eq!(
        drift.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["device-plugin resource: model nvidia.com/mig-3g.40gb=16, scheduler nvidia.com/mig-3g.40gb=10"]
    );
    let mig: Vec<usize> = n
        .devices
        .iter()
        .filter(|d| d.mig_profile() == Some("3g.40gb"))
        .filter_map(|d| d.gpu)
        .collect();
    assert_eq!(mig, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
    assert!(n.gpus[5].withheld && !n.gpus[4].withheld);
}

#[test]
fn labels_taints_and_allocatable_of_the_view_are_what_fit_uses() {
    let mut f = fleet();
    let n = node_mut(&mut f, "r1-a");
    n.apply_scheduler_view(&view(Some(8)));
    assert_eq!(n.labels.get("pool"), None);
    assert_eq!(n.labels["team"], "blue");
    assert_eq!(n.allocatable.cpu, 190_000);
    assert_eq!(n.allocatable.memory, 1900 * (1 << 30) * 1000);
    assert_eq!(n.allocatable.pods, 110);
    assert_eq!(
        n.allocatable.extended,
        BTreeMap::from([("example.com/fpga".to_owned(), 2000)])
    );
    let spec = |pod: serde_json::Value| -> accord::demand::PodSpec {
        serde_json::from_value(pod).unwrap()
    };
    // Untolerated taint from the Node.
    let plain = spec(serde_json::json!({"node_selector": {"team": "blue"}}));
    let err = static_fit(&plain, n).unwrap_err();
    assert!(err.detail.contains("dedicated=blue"), "{err}");
    let ok = spec(serde_json::json!({"node_selector": {"team": "blue"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}]}));
    assert_eq!(static_fit(&ok, n), Ok(()));
    // The declared label is gone: the scheduler does not see it.
    let declared = spec(serde_json::json!({"node_selector": {"pool": "train"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}]}));
    assert!(static_fit(&declared, n).is_err());
    // Allocatable: 190 CPUs, not the profile's 192.
    let req = PodRequest::parse(&spec(serde_json::json!({"requests": {"cpu": "191"}}))).unwrap();
    assert!(accord::fit::resource_fit(&req, n, &NodeUse::new(n)).is_err());
    let req = PodRequest::parse(&spec(
        serde_json::json!({"requests": {"example.com/fpga": "2"}}),
    ))
    .unwrap();
    assert_eq!(accord::fit::resource_fit(&req, n, &NodeUse::new(n)), Ok(()));

    // A view without allocatable (not yet reported) keeps the declaration's.
    let mut g = fleet();
    let n = node_mut(&mut g, "r1-a");
    n.apply_scheduler_view(&SchedulerView::default());
    assert_eq!(n.allocatable.cpu, 192_000);
    assert!(n.labels.is_empty() && n.taints.is_empty());
}

#[test]
fn the_dra_drivers_devices_replace_the_models() {
    let mut f = fleet();
    let n = node_mut(&mut f, "r1-a");
    // What the driver publishes: the model's GPUs but GPU 7, renamed and
    // in another order (the cluster's names), with no tie to a GPU index.
    let mut published: Vec<accord::device::Device> = n
        .devices
        .iter()
        .filter(|d| d.gpu != Some(7))
        .cloned()
        .collect();
    published.reverse();
    for (k, d) in published.iter_mut().enumerate() {
        d.name = format!("gpu-dev-{k}").into();
        d.gpu = None;
    }
    let mut v = view(None);
    v.devices = Some(published);
    let drift = n.apply_scheduler_view(&v);
    assert_eq!(
        drift,
        vec![Drift {
            what: DriftKind::SchedulerDevices,
            declared: format!("GPU {H100} x8"),
            reported: format!("GPU {H100} x7"),
        }]
    );
    assert_eq!(n.devices.len(), 7);
    assert_eq!(n.device_prints.len(), 7);
    assert_eq!(&*n.devices[0].name, "gpu-dev-0");
    // Tied back to the physical GPUs by UUID; GPU 7, with no device, is
    // left alone by MIG planning.
    assert_eq!(n.devices[0].gpu, Some(6));
    assert!(n.gpus[7].withheld);
    assert!(n.gpus[..7].iter().all(|g| !g.withheld));
    // Allocation uses the published devices.
    let mut cel = accord::fit::CelEngine::default();
    let classes: BTreeMap<String, Vec<usize>> = accord::demand::builtin_classes()
        .into_iter()
        .map(|c| {
            let ids = c.selectors.iter().map(|s| cel.id(s)).collect();
            (c.name, ids)
        })
        .collect();
    let spec: accord::demand::PodSpec =
        serde_json::from_value(serde_json::json!({"requests": {"nvidia.com/gpu": "1"}})).unwrap();
    let req = PodRequest::parse(&spec).unwrap();
    let prints = n.device_prints.clone();
    let mut ctx = DeviceContext {
        cel: &mut cel,
        classes: &classes,
        prints: &prints,
        node_key: 0,
    };
    let (allocs, _) =
        accord::fit::allocate_devices(&spec, &req, n, &NodeUse::new(n).devices, &mut ctx).unwrap();
    assert_eq!(&*allocs[0].device, "gpu-dev-0");
    // NICs are compared only when the view has some: r2-full's 8 against
    // the one a driver publishes.
    let mut nic_view = view(None);
    let mut nic = n.devices[0].clone();
    nic.kind = DeviceKind::Nic;
    nic.driver = accord::device::NIC_DRIVER.into();
    nic_view.devices = Some(vec![nic]);
    let drift = node_mut(&mut f, "r2-full").apply_scheduler_view(&nic_view);
    assert_eq!(kinds(&drift), [DriftKind::SchedulerDevices]);
    assert_eq!(drift[0].reported, "NIC unknown x1");
}

#[test]
fn publication_carries_topology_gpu_and_reservation_keys() {
    let mut f = fleet();
    f.apply_report("r1-a", &reported(7)).unwrap();
    let p = f.publication("r1-a", 0).unwrap();
    let want: BTreeMap<String, String> = [
        ("topology.accord.dev/site", "dc1"),
        ("topology.accord.dev/rack", "r1"),
        ("topology.kubernetes.io/rack", "r1"),
        (GPU_MODEL_LABEL, "NVIDIA-H100-80GB-HBM3"),
        (GPU_COUNT_LABEL, "7"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(p.labels, want);
    assert!(p.taints.is_empty());
    // r1-b: "research" is not lendable, active on [1000, 2000).
    let reserved = Taint {
        key: RESERVATION_KEY.into(),
        value: Some("research".into()),
        effect: TaintEffect::NoSchedule,
    };
    for (now, active) in [(999, false), (1000, true), (1999, true), (2000, false)] {
        let p = f.publication("r1-b", now).unwrap();
        assert_eq!(p.taints == [reserved.clone()], active, "at {now}");
        assert_eq!(
            p.labels.get(RESERVATION_KEY).map(String::as_str),
            active.then_some("research"),
            "at {now}"
        );
    }
    // r2-full's reservation is lendable: no taint, no label.
    let p = f.publication("r2-full", 1500).unwrap();
    assert!(p.taints.is_empty() && !p.labels.contains_key(RESERVATION_KEY));
    assert_eq!(f.publication("nope", 0), None);
}

#[test]
fn publishing_touches_only_accords_keys() {
    let f = fleet();
    let topology = &f.topology;
    for key in [
        "topology.accord.dev/rack",
        "topology.accord.dev/site",
        "topology.kubernetes.io/rack",
        GPU_MODEL_LABEL,
        GPU_COUNT_LABEL,
        RESERVATION_KEY,
    ] {
        assert!(owns_label(topology, key), "{key}");
    }
    for key in [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
        "nvidia.com/gpu.product",
        "topology.accord.dev/",
        "topology.accord.dev/anything",
        "team",
    ] {
        assert!(!owns_label(topology, key), "{key}");
    }
    assert!(owns_taint(RESERVATION_KEY));
    assert!(!owns_taint("dedicated") && !owns_taint("nvidia.com/gpu"));

    let mut f = fleet();
    let mut v = view(Some(8));
    // Stale values of Accord's keys, and everyone else's.
    v.labels
        .insert("topology.accord.dev/rack".into(), "old".into());
    v.labels
        .insert("topology.accord.dev/row".into(), "x".into());
    v.labels
        .insert("topology.accord.dev/other".into(), "y".into());
    v.labels.insert(GPU_COUNT_LABEL.into(), "3".into());
    v.taints.push(Taint {
        key: RESERVATION_KEY.into(),
        value: Some("old".into()),
        effect: TaintEffect::NoSchedule,
    });
    let p = f.publication("r1-b", 1500).unwrap();
    let n = node_mut(&mut f, "r1-b");
    n.apply_scheduler_view(&v);
    n.apply_publication(&p, topology);
    assert_eq!(n.labels["topology.accord.dev/rack"], "r1");
    // r1 has no row: Accord's row label goes; a key under the prefix that
    // is no level is someone else's.
    assert_eq!(n.labels.get("topology.accord.dev/row"), None);
    assert_eq!(n.labels["topology.accord.dev/other"], "y");
    assert_eq!(n.labels[GPU_COUNT_LABEL], "8");
    assert_eq!(n.labels[RESERVATION_KEY], "research");
    assert_eq!(n.labels["team"], "blue");
    assert_eq!(n.labels["kubernetes.io/hostname"], "r1-a");
    assert_eq!(
        n.taints,
        vec![
            Taint {
                key: "dedicated".into(),
                value: Some("blue".into()),
                effect: TaintEffect::NoSchedule,
            },
            Taint {
                key: RESERVATION_KEY.into(),
                value: Some("research".into()),
                effect: TaintEffect::NoSchedule,
            },
        ]
    );
    // After the reservation ends, its taint and label go; others stay.
    let later = Publication {
        labels: p
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() != RESERVATION_KEY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        taints: vec![],
    };
    n.apply_publication(&later, topology);
    assert!(!n.labels.contains_key(RESERVATION_KEY));
    assert_eq!(n.taints.len(), 1);
    assert_eq!(n.taints[0].key, "dedicated");
}

#[test]
fn reservation_taint_keeps_others_off_the_node_once_published() {
    let mut f = fleet();
    // Everything but r1-b cordoned; r1-b reserved for "research".
    for other in ["r1-a", "r2-mig", "r2-full"] {
        node_mut(&mut f, other).schedulable = false;
    }
    let p = f.publication("r1-b", 1500).unwrap();
    let topology = f.topology.clone();
    node_mut(&mut f, "r1-b").apply_publication(&p, &topology);
    let d = demand(&[("one", 1, gpus(1))]);
    let out = plan(&f, &d, &f.policy, 1500);
    assert!(out.placements.is_empty(), "{out:?}");
    assert!(
        out.unsatisfied[0].reason.contains("reserved for research"),
        "{}",
        out.unsatisfied[0].reason
    );
}

#[test]
fn label_values_are_made_valid() {
    assert_eq!(label_value(H100), "NVIDIA-H100-80GB-HBM3");
    assert_eq!(
        label_value("Tesla V100-SXM3-32GB-H"),
        "Tesla-V100-SXM3-32GB-H"
    );
    assert_eq!(label_value(" (R) GPU/x "), "R-GPUx");
    assert_eq!(label_value("---"), "");
    let long = "A".repeat(70) + " B";
    assert_eq!(label_value(&long).len(), 63);
    let edge = format!("{}-B", "A".repeat(62));
    assert_eq!(label_value(&edge), "A".repeat(62));
}

#[test]
fn on_drift_is_a_policy_key() {
    assert_eq!(fleet().policy.on_drift, OnDrift::PlanWithReport);
    let text = format!("[policy]\non_drift = \"hold\"\n{FLEET}");
    let f = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    assert_eq!(f.policy.on_drift, OnDrift::Hold);
    let bad = "[policy]\non_drift = \"ignore\"\n";
    let err = Fleet::from_toml(bad, "fleet.toml", &mut |_| Err("none".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("on_drift"), "{err}");
}

#[test]
fn undeclared_profile_keys_keep_their_synthetic_defaults() {
    let hw = hardware_from_profile(&profile(8), &[]);
    assert_eq!(hw.numa_nodes.len(), 2);
    assert_eq!(hw.gpu_pcie_roots().len(), 8);
    assert!(hw.nics.is_empty());
    let bad =
        "[profiles.p]\ncpu = \"1\"\nmemory = \"1Gi\"\nnuma_nodes = 0\ngpus_per_pcie_root = 0\n";
    let err = Fleet::from_toml(bad, "fleet.toml", &mut |_| Err("none".into()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("profiles.p.numa_nodes: must be at least 1"),
        "{err}"
    );
    assert!(
        err.contains("profiles.p.gpus_per_pcie_root: must be at least 1"),
        "{err}"
    );
}

#[test]
fn same_inputs_give_the_same_drift_and_plans_byte_for_byte() {
    let reports: Vec<(&str, NodeHardware)> = vec![
        ("r1-a", reported(7)),
        ("r2-full", reported(8)),
        ("r2-mig", reported(8)),
    ];
    let run = |order: &[usize]| {
        let mut f = fleet();
        let mut drift = BTreeMap::new();
        for &k in order {
            let (name, hw) = &reports[k];
            drift.insert(*name, f.apply_report(name, hw).unwrap());
        }
        let mut v = view(Some(6));
        v.taints.clear();
        let views = drift.len();
        let sched = node_mut(&mut f, "r1-b").apply_scheduler_view(&v);
        let d = demand(&[
            ("a", 2, gpus(4)),
            ("b", 3, gpus(8)),
            (
                "c",
                1,
                serde_json::json!({"requests": {"nvidia.com/mig-3g.40gb": "1"}}),
            ),
        ]);
        let p = plan(&f, &d, &f.policy, 1500);
        (
            serde_json::to_string(&drift).unwrap(),
            serde_json::to_string(&sched).unwrap(),
            serde_json::to_string(&p).unwrap(),
            views,
        )
    };
    let first = run(&[0, 1, 2]);
    assert_eq!(first, run(&[2, 0, 1]));
    assert_eq!(first, run(&[1, 2, 0]));
    assert!(first.0.contains("gpu_count"), "{}", first.0);
}

/// What the agent reports (the recorded H100 machine: hwloc merged with
/// NVML, whose GPUs name no PCI vendor) is planned with all its GPUs.
#[test]
fn an_agents_recorded_report_is_planned_with_its_gpus() {
    let fleet_toml = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1Ti"
[[nodes]]
name = "n1"
profile = "h100"
"#;
    let mut f = Fleet::from_toml(fleet_toml, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let text = include_str!("../fixtures/models/h100-8gpu-mig.json");
    let hw: accord::hardware::NodeHardware = serde_json::from_str(text).unwrap();
    assert!(hw.gpus.iter().all(|g| g.vendor.is_none()));
    f.apply_report("n1", &hw).unwrap();
    let n = f.node("n1").unwrap();
    assert_eq!(n.gpus.len(), 8);
    // GPUs 0-3 whole; GPU 4 has 7 MIG instances, GPU 5 three.
    assert!(n.devices.len() >= 4 + 7 + 3, "{}", n.devices.len());
}

#[test]
fn readiness_taints_of_an_off_node_do_not_keep_it_off() {
    let mut f = fleet();
    for other in ["r1-a", "r1-b", "r2-mig"] {
        node_mut(&mut f, other).schedulable = false;
    }
    // r2-full is off; its Node, last seen, carries the node lifecycle
    // controller's taints, and a cordon-like admin taint on another try.
    let mut v = view(None);
    v.taints.clear();
    for key in [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ] {
        for effect in [TaintEffect::NoSchedule, TaintEffect::NoExecute] {
            v.taints.push(Taint {
                key: key.into(),
                value: None,
                effect,
            });
        }
    }
    let n = node_mut(&mut f, "r2-full");
    n.apply_scheduler_view(&v);
    assert!(n.taints.is_empty(), "{:?}", n.taints);
    let p = plan(&f, &demand(&[("one", 1, gpus(1))]), &f.policy, 0);
    assert_eq!(placed(&p)["ml/one"], ["r2-full"]);
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, accord::plan::Action::PowerOn { node, .. } if node == "r2-full")),
        "{p:?}"
    );
    // A cordon taint is the admin's: it stays, and the node is not used.
    v.taints.push(Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    });
    node_mut(&mut f, "r2-full").apply_scheduler_view(&v);
    assert_eq!(node(&f, "r2-full").taints.len(), 1);
    let p = plan(&f, &demand(&[("one", 1, gpus(1))]), &f.policy, 0);
    assert!(p.placements.is_empty(), "{p:?}");
}

#[test]
fn other_drivers_slices_leave_the_gpus_alone() {
    let mut f = fleet();
    let n = node_mut(&mut f, "r1-a");
    let gpu = n.devices[0].clone();
    let channel = |k: usize, driver: &str| {
        let mut d = gpu.clone();
        d.name = format!("channel-{k}").into();
        d.driver = driver.into();
        d.attributes.clear();
        d.gpu = None;
        d
    };
    // Only other drivers' node-local devices: the GPUs (from the device
    // plugin) stay, no drift, nothing withheld, and the unknown drivers'
    // devices are not planned with.
    let mut v = view(Some(8));
    v.devices = Some(vec![
        channel(0, "compute-domain.nvidia.com"),
        channel(1, "dra.net"),
    ]);
    assert_eq!(n.apply_scheduler_view(&v), vec![]);
    assert_eq!(n.devices.len(), 8);
    assert!(n.devices.iter().all(|d| d.kind == DeviceKind::Gpu));
    assert!(n.devices.iter().all(|d| d.driver == "gpu.nvidia.com"));
    assert!(n.gpus.iter().all(|g| !g.withheld));
    // The GPU driver's devices with them: only its devices are replaced
    // and compared.
    let mut published: Vec<accord::device::Device> = node(&f, "r1-a")
        .devices
        .iter()
        .filter(|d| d.gpu != Some(7))
        .cloned()
        .collect();
    published.push(channel(2, "compute-domain.nvidia.com"));
    v.devices = Some(published);
    let n = node_mut(&mut f, "r1-a");
    let drift = n.apply_scheduler_view(&v);
    assert_eq!(kinds(&drift), [DriftKind::SchedulerDevices]);
    assert_eq!(drift[0].reported, format!("GPU {H100} x7"));
    assert_eq!(n.devices.len(), 7);
    assert_eq!(n.device_prints.len(), 7);
    assert!(n.gpus[7].withheld);
    // r2-full has NICs (Accord's RDMA driver) and GPUs: a view of the NIC
    // driver only replaces its NICs, keeps the GPUs, and withholds none.
    let n = node_mut(&mut f, "r2-full");
    let nic = n
        .devices
        .iter()
        .find(|d| d.kind == DeviceKind::Nic)
        .unwrap()
        .clone();
    let mut v = view(None);
    v.devices = Some(vec![nic.clone(), nic]);
    let drift = n.apply_scheduler_view(&v);
    assert_eq!(kinds(&drift), [DriftKind::SchedulerDevices]);
    assert_eq!(drift[0].declared, "NIC infiniband x8");
    assert_eq!(drift[0].reported, "NIC infiniband x2");
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Gpu)
            .count(),
        8
    );
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Nic)
            .count(),
        2
    );
    assert_eq!(n.device_prints.len(), n.devices.len());
    assert!(n.gpus.iter().all(|g| !g.withheld));
}

#[test]
fn a_device_plugin_not_registered_yet_caps_nothing() {
    let mut f = fleet();
    // Whole GPUs: "0" while the model has 8.
    let n = node_mut(&mut f, "r1-a");
    assert_eq!(n.apply_scheduler_view(&view(Some(0))), vec![]);
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Gpu)
            .count(),
        8
    );
    assert!(n.gpus.iter().all(|g| !g.withheld));
    // MIG: every key 0.
    let mut v = view(Some(0));
    v.allocatable
        .insert("nvidia.com/mig-3g.40gb".into(), "0".into());
    let n = node_mut(&mut f, "r2-mig");
    assert_eq!(n.apply_scheduler_view(&v), vec![]);
    assert_eq!(
        n.devices
            .iter()
            .filter(|d| d.mig_profile() == Some("3g.40gb"))
            .count(),
        16
    );
    // Once it advertises anything, the counts are compared again.
    v.allocatable
        .insert("nvidia.com/mig-3g.40gb".into(), "2".into());
    let drift = n.apply_scheduler_view(&v);
    assert_eq!(kinds(&drift), [DriftKind::SchedulerResource]);
}

fn invalid(fleet: &str) -> Vec<String> {
    match Fleet::from_toml(fleet, "fleet.toml", &mut |_| Err("no files".into())) {
        Ok(_) => vec![],
        Err(accord::fleet::FleetError::Invalid { problems, .. }) => problems,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn topology_keys_accord_owns_are_valid_and_not_kubernetes_own() {
    let base = |topology: &str| {
        format!(
            "[topology]\n{topology}\n[profiles.p]\ncpu = \"1\"\nmemory = \"1Gi\"\n\
             [[racks]]\nname = \"r1\"\n[[nodes]]\nname = \"n\"\nrack = \"r1\"\nprofile = \"p\"\n"
        )
    };
    assert_eq!(invalid(&base("")), Vec::<String>::new());
    // A shared prefix is fine: only <prefix><level> is Accord's.
    let shared = base("label_prefix = \"topology.kubernetes.io/\"");
    assert_eq!(invalid(&shared), Vec::<String>::new());
    let f = Fleet::from_toml(&shared, "fleet.toml", &mut |_| Err("x".into())).unwrap();
    assert!(owns_label(&f.topology, "topology.kubernetes.io/rack"));
    assert!(!owns_label(&f.topology, "topology.kubernetes.io/zone"));
    assert!(!owns_label(&f.topology, "topology.kubernetes.io/region"));
    // Mapped explicitly, zone is the admin's choice.
    let zone = base("also_label = { site = [\"topology.kubernetes.io/zone\"] }");
    assert_eq!(invalid(&zone), Vec::<String>::new());
    for (topology, says) in [
        (
            "also_label = { rack = [\"kubernetes.io/hostname\"] }",
            "topology.also_label.rack: \"kubernetes.io/hostname\" is set by Kubernetes",
        ),
        (
            "also_label = { rack = [\"kubernetes.io/arch\"] }",
            "topology.also_label.rack: \"kubernetes.io/arch\"",
        ),
        (
            "also_label = { rack = [\"accord.dev/reservation\"] }",
            "topology.also_label.rack: \"accord.dev/reservation\"",
        ),
        (
            "also_label = { rack = [\"Bad_Prefix/rack\"] }",
            "topology.also_label.rack: \"Bad_Prefix/rack\" is not a valid Kubernetes label key",
        ),
        (
            "also_label = { rack = [\"x/rack 1\"] }",
            "is not a valid Kubernetes label key",
        ),
        (
            "label_prefix = \"kubernetes.io/\"\nlevels = [\"hostname\"]",
            "topology.levels: \"hostname\"",
        ),
        (
            "levels = [\"my level\"]",
            "topology.levels: \"my level\" makes the label key",
        ),
    ] {
        let problems = invalid(&base(topology));
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(says) || p.contains(says)),
            "{topology}: {problems:?}"
        );
    }
    for (key, ok) in [
        ("rack", true),
        ("topology.accord.dev/rack", true),
        ("a.b-c/X_y.z", true),
        ("", false),
        ("/rack", false),
        ("a/", false),
        ("a/b/c", false),
        ("-a/b", false),
        ("a..b/c", false),
        (&format!("a/{}", "x".repeat(64)), false),
    ] {
        assert_eq!(accord::truth::valid_label_key(key), ok, "{key:?}");
    }
}

#[test]
fn rack_level_and_reservation_names_must_be_label_values() {
    let fleet = |rack: &str, site: &str, level: &str, reservation: &str| {
        format!(
            "[profiles.p]\ncpu = \"1\"\nmemory = \"1Gi\"\n\
             [[racks]]\nname = {rack:?}\nsite = {site:?}\nlevels = {{ block = {level:?} }}\n\
             [[nodes]]\nname = \"n\"\nrack = {rack:?}\nprofile = \"p\"\n\
             [[reservations]]\nname = {reservation:?}\nowner = {{ namespace = \"x\" }}\nnodes = [\"n\"]\n"
        )
    };
    assert_eq!(
        invalid(&fleet("rack-1", "dc_1.a", "b1", "research")),
        Vec::<String>::new()
    );
    let problems = invalid(&fleet("rack 1", "-dc", &"b".repeat(64), "!!"));
    let keys: Vec<&str> = problems
        .iter()
        .map(|p| p.split(':').next().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "racks.rack 1.name",
            "racks.rack 1.site",
            "racks.rack 1.levels.block",
            "reservations.!!.name",
        ],
        "{problems:?}"
    );
    assert!(problems[0].contains("not a valid Kubernetes label value"));
    // A level a rack or node names must be one of topology.levels.
    let undeclared = fleet("r1", "dc", "b1", "x").replace("block = ", "nvlink_domain = ");
    let problems = invalid(&undeclared);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("racks.r1.levels.nvlink_domain: not one of topology.levels"));
    assert!(accord::truth::valid_label_value(""));
    assert!(!accord::truth::valid_label_value("a b"));
}

#[test]
fn hostile_reports_neither_overflow_nor_take_quadratic_time() {
    let mut f = fleet();
    // Memory near u64::MAX: a drift, not an overflow.
    let mut hw = reported(8);
    for g in &mut hw.gpus {
        g.memory_bytes = Some(u64::MAX);
    }
    let drift = f.apply_report("r1-a", &hw).unwrap();
    assert_eq!(kinds(&drift), [DriftKind::GpuMemory]);
    assert_eq!(drift[0].reported, format!("{} GiB", u64::MAX >> 30));
    // Many GPUs, each in its own MIG state: built in linear time, and
    // GPUs in one state share one copy.
    let gpus = 60_000;
    // (A profile's synthetic model stops at the 64 GPUs a fleet file may
    // declare: this report is built past it.)
    let mut hw = reported(1);
    let one = hw.gpus[0].clone();
    hw.gpus = (0..gpus)
        .map(|index| accord::hardware::Gpu {
            index,
            ..one.clone()
        })
        .collect();
    for (i, g) in hw.gpus.iter_mut().enumerate() {
        g.mig = Some(MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: vec![],
            gpu_instances: vec![instance(i as u32 / 2, "1g.10gb", 0, 1)],
        });
    }
    let start = std::time::Instant::now();
    let d = accord::device::devices_from_hardware(&hw, None, false);
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(d.gpus.len(), gpus as usize);
    let (a, b, c) = (&d.gpus[0], &d.gpus[1], &d.gpus[2]);
    assert!(std::sync::Arc::ptr_eq(
        a.mig.as_ref().unwrap(),
        b.mig.as_ref().unwrap()
    ));
    assert!(!std::sync::Arc::ptr_eq(
        a.mig.as_ref().unwrap(),
        c.mig.as_ref().unwrap()
    ));
    // Dynamic MIG with placements past any GPU's memory slices (and one
    // that overflows): left out, no huge counter set, no panic.
    let mut hw = reported(1);
    let profile = accord::hardware::MigProfile {
        id: 19,
        name: "1g.10gb".into(),
        slices: 1,
        memory_mib: u64::MAX,
        max_count: 7,
        sm_count: None,
        placements: vec![
            MigPlacement { start: 0, size: 1 },
            MigPlacement {
                start: u32::MAX,
                size: 2,
            },
            MigPlacement {
                start: 1,
                size: u32::MAX - 1,
            },
        ],
    };
    hw.gpus[0].mig = Some(MigState {
        capable: true,
        current_mode: MigMode::Disabled,
        pending_mode: MigMode::Disabled,
        profiles: vec![profile],
        gpu_instances: vec![],
    });
    let d = accord::device::devices_from_hardware(&hw, None, true);
    assert_eq!(d.counters["gpu-0"].len(), 1);
    assert_eq!(d.devices.len(), 2); // the whole GPU and 1g.10gb@0
}
