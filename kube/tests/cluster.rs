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
