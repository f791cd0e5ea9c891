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
        AttrValue::String("1.0.0".into())
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
