//! Nodes and ResourceSlices as Accord reads them.

use std::path::Path;

use accord::device::{AttrValue, DeviceKind};
use accord_kube::cluster::{cluster_node, slice_devices};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde::Deserialize;
use serde_json::Value;

#[test]
fn a_real_resource_slice_becomes_devices() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../tests/fixtures/kubernetes/dra/dra-example-driver/resourceslice-list.from-README.yaml",
    );
    let list = Value::deserialize(serde_yaml_ng::Deserializer::from_str(
        &std::fs::read_to_string(path).unwrap(),
    ))
    .unwrap();
    let slice: ResourceSlice = serde_json::from_value(list["items"][0].clone()).unwrap();
    let (node, devices) = slice_devices(&slice).unwrap();
    assert_eq!(node.as_deref(), Some("dra-example-driver-cluster-worker"));
    assert_eq!(devices.len(), 8);
    let d = &devices[0];
    assert_eq!(&*d.name, "gpu-0");
    assert_eq!(d.driver, "gpu.example.com");
    assert_eq!(d.kind, DeviceKind::Gpu);
    assert_eq!(d.attributes["gpu.example.com/index"], AttrValue::Int(0));
    assert_eq!(
        d.attributes["gpu.example.com/model"],
        AttrValue::String("LATEST-GPU-MODEL".into())
    );
    assert_eq!(
        d.attributes["gpu.example.com/driverVersion"],
        // A version attribute: a semver in CEL.
        AttrValue::Version {
            version: "1.0.0".into()
        }
    );
    assert_eq!(d.capacity["gpu.example.com/memory"], 80 * (1 << 30) * 1000);
    assert!(d.shared.is_none());
}

#[test]
fn nodes_show_taints_allocatable_and_readiness() {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu-001", "labels": {"topology.accord.dev/rack": "r1"}},
        "spec": {"unschedulable": true, "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "190", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}]}
    }))
    .unwrap();
    let n = cluster_node(&node);
    assert!(n.ready && n.unschedulable);
    assert_eq!(n.allocatable["nvidia.com/gpu"], "8");
    assert_eq!(n.taints[0].key, "nvidia.com/gpu");
    assert_eq!(n.labels["topology.accord.dev/rack"], "r1");
}

fn pool_slice(name: &str, pool: &str, generation: i64, count: i64) -> ResourceSlice {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                 "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                 "devices": [{"name": format!("{name}-gpu-0")}]}
    }))
    .unwrap()
}

/// A driver that republishes its pool writes the new generation before
/// deleting the old: only the newest, complete generation counts.
#[test]
fn only_each_pools_newest_complete_generation_counts() {
    let names = |v: &[ResourceSlice]| -> Vec<String> {
        v.iter().map(|s| s.metadata.name.clone().unwrap()).collect()
    };
    // Generation 1 (one slice) and generation 2 (one slice): 2 wins.
    let (kept, problems) = accord_kube::cluster::current_pools(vec![
        pool_slice("old", "n1", 1, 1),
        pool_slice("new", "n1", 2, 1),
    ]);
    assert_eq!(names(&kept), ["new"]);
    assert!(problems.is_empty(), "{problems:?}");
    // Generation 3 announces two slices and only one is there yet: the
    // pool is not planned with (and said).
    let (kept, problems) = accord_kube::cluster::current_pools(vec![
        pool_slice("new", "n1", 2, 1),
        pool_slice("newer-a", "n1", 3, 2),
        pool_slice("other", "n2", 1, 1),
    ]);
    assert_eq!(names(&kept), ["other"]);
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].contains("generation 3 has 1 of 2"),
        "{problems:?}"
    );
}

/// Partitionable devices as NVIDIA's driver publishes them since 1.35:
/// the counter set in a slice of its own, the partitions in another, one
/// pool. Fit allocates exactly what the published counters allow.
#[test]
fn partitions_draw_on_the_counters_their_pool_publishes() {
    let slice = |name: &str, spec: Value| -> ResourceSlice {
        let mut spec = spec;
        spec["driver"] = "gpu.nvidia.com".into();
        spec["nodeName"] = "n1".into();
        spec["pool"] = serde_json::json!({"name": "n1", "generation": 1, "resourceSliceCount": 2});
        serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    let counters = slice(
        "n1-counters",
        serde_json::json!({"sharedCounters": [{"name": "gpu-0-counters",
            "counters": {"memory": {"value": "80Gi"}}}]}),
    );
    let partition = |i: u32| {
        serde_json::json!({"name": format!("gpu-0-mig-3g40gb-{i}"),
            "attributes": {"type": {"string": "mig"}, "profile": {"string": "3g.40gb"}},
            "consumesCounters": [{"counterSet": "gpu-0-counters",
                                  "counters": {"memory": {"value": "40Gi"}}}]})
    };
    let devices = slice(
        "n1-devices",
        serde_json::json!({"devices": [partition(0), partition(1), partition(2)]}),
    );
    let (published, problems) =
        accord_kube::cluster::published(vec![counters.clone(), devices.clone()], &[]);
    assert!(problems.is_empty(), "{problems:?}");
    let p = &published["n1"];
    assert_eq!(p.devices.len(), 3);
    assert_eq!(
        p.counters["gpu-0-counters"]["memory"],
        80 * (1 << 30) * 1000
    );
    // Two 40Gi partitions fit in 80Gi, three do not (a guess from the
    // largest single draw would have allowed one).
    assert_eq!(allocate_mig(p.clone(), 2).unwrap().len(), 2);
    let err = allocate_mig(p.clone(), 3).unwrap_err();
    assert!(err.contains("devices unavailable"), "{err}");

    // Without the counter slice the pool is incomplete (2 slices
    // announced): nothing is planned with, and it is said.
    let (published, problems) = accord_kube::cluster::published(vec![devices.clone()], &[]);
    assert!(published.is_empty());
    assert!(problems[0].contains("has 1 of 2"), "{problems:?}");
    // A complete pool that does not publish the set its devices draw on:
    // said, and not allocatable.
    let mut alone = devices;
    alone.spec.pool.resource_slice_count = 1;
    let (published, problems) = accord_kube::cluster::published(vec![alone], &[]);
    assert!(
        problems[0].contains("draws on counter set gpu-0-counters, which pool n1"),
        "{problems:?}"
    );
    assert!(allocate_mig(published["n1"].clone(), 1).is_err());
}

/// A fleet node of one GPU whose DRA devices are `published`, asked for
/// `count` MIG devices through one claim: the devices allocated.
fn allocate_mig(
    published: accord_kube::cluster::Published,
    count: u32,
) -> Result<Vec<String>, String> {
    use accord::demand::{Claim, DeviceRequest, ExactRequest, PodSpec};
    let spec = PodSpec {
        claims: vec![Claim {
            name: "c".into(),
            requests: vec![DeviceRequest {
                name: "mig".into(),
                exactly: Some(ExactRequest {
                    name: None,
                    device_class: "mig.nvidia.com".into(),
                    selectors: Vec::new(),
                    count,
                    allocation_mode: Default::default(),
                    capacity: Default::default(),
                    tolerations: Vec::new(),
                }),
                first_available: Vec::new(),
            }],
            constraints: Vec::new(),
        }],
        ..PodSpec::default()
    };
    allocate_on("n1", published, &spec)
}

/// Accord's device fit of `spec` on fleet node `name` (one rack, its
/// model's GPUs) once the cluster's `published` devices are applied, as
/// accordd applies them: the devices allocated.
pub(crate) fn allocate_on(
    name: &str,
    published: accord_kube::cluster::Published,
    spec: &accord::demand::PodSpec,
) -> Result<Vec<String>, String> {
    use accord::fit::{
        allocate_devices, fingerprint, CelEngine, DeviceContext, NodeUse, PodRequest,
    };
    let fleet = accord::fleet::Fleet::from_toml(
        &format!("[profiles.g]\ngpus = 2\ngpu_model = \"NVIDIA H100 80GB HBM3\"\ngpu_memory_gib = 80\ncpu = \"16\"\nmemory = \"64Gi\"\n\n[[racks]]\nname = \"r1\"\n\n[[nodes]]\nname = \"{name}\"\nrack = \"r1\"\nprofile = \"g\"\npower = \"on\"\n"),
        "fleet.toml",
        &mut |_| Err("none".into()),
    )
    .unwrap();
    let mut node = fleet.nodes[0].clone();
    let cn = accord_kube::cluster::ClusterNode {
        name: name.into(),
        labels: Default::default(),
        taints: Vec::new(),
        allocatable: Default::default(),
        ready: true,
        unschedulable: false,
        do_not_disrupt: false,
        ..Default::default()
    };
    node.apply_scheduler_view(&accord_kube::cluster::scheduler_view(&cn, Some(published)));
    let mut cel = CelEngine::default();
    let classes = accord::demand::builtin_classes()
        .into_iter()
        .map(|c| (c.name, c.selectors.iter().map(|s| cel.id(s)).collect()))
        .collect();
    let prints: Vec<u64> = node.devices.iter().map(fingerprint).collect();
    let mut ctx = DeviceContext {
        cel: &mut cel,
        classes: &classes,
        prints: &prints,
        node_key: 0,
    };
    let req = PodRequest::parse(spec).unwrap();
    let uses = NodeUse::new(&node).devices;
    allocate_devices(spec, &req, &node, &uses, &mut ctx)
        .map(|(a, _)| a.into_iter().map(|a| a.device.to_string()).collect())
        .map_err(|f| f.to_string())
}

/// DeviceTaintRules (v1 from 1.37; the same shape at v1beta2 and
/// v1alpha3) taint the devices their selector names, on top of the
/// driver's own slice taints.
#[test]
fn taint_rules_and_slice_taints_reach_the_devices() {
    let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpus"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                 "devices": [
                    {"name": "gpu-0", "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]},
                    {"name": "gpu-1"}, {"name": "gpu-2"}]}
    }))
    .unwrap();
    let rule = |api: &str, selector: Value| {
        accord_kube::cluster::taint_rule(&serde_json::json!({
            "apiVersion": api, "kind": "DeviceTaintRule", "metadata": {"name": "maintenance"},
            "spec": {"deviceSelector": selector,
                     "taint": {"key": "example.com/maintenance", "effect": "NoExecute"}}
        }))
    };
    let one = rule(
        "resource.k8s.io/v1",
        serde_json::json!({"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"}),
    )
    .unwrap();
    let other_pool = rule("resource.k8s.io/v1beta2", serde_json::json!({"pool": "n2"})).unwrap();
    let (published, problems) =
        accord_kube::cluster::published(vec![slice.clone()], &[one, other_pool]);
    assert!(problems.is_empty(), "{problems:?}");
    let taints: Vec<Vec<(String, String)>> = published["n1"]
        .devices
        .iter()
        .map(|d| {
            d.taints
                .iter()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect()
        })
        .collect();
    assert_eq!(
        taints,
        [
            vec![("gpu.nvidia.com/xid".into(), "NoSchedule".into())],
            vec![("example.com/maintenance".into(), "NoExecute".into())],
            vec![],
        ]
    );
    // A v1alpha3 rule selecting by class or CEL is not applied, and said.
    let err = rule(
        "resource.k8s.io/v1alpha3",
        serde_json::json!({"deviceClassName": "gpu.nvidia.com"}),
    )
    .unwrap_err();
    assert!(err.contains("selects by deviceClassName"), "{err}");
}
