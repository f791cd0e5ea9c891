//! `publish_node` against the fake API server: Accord's labels and taints
//! land, everyone else's stay, owned keys Accord no longer wants go,
//! nothing is written when nothing changes, and a Node changed since the
//! read is not overwritten (409 Conflict, from the resourceVersion the
//! patch carries).

use std::collections::BTreeMap;

use accord::demand::{Taint, TaintEffect};
use accord::truth::{Publication, GPU_MODEL_LABEL, RESERVATION_KEY};
use accord_kube::write::{self, PublishOutcome};
use accord_testkit::fake_api::FakeApi;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

fn owns_label(k: &str) -> bool {
    k.starts_with("accord.dev/") || k.starts_with("topology.accord.dev/")
}

fn owns_taint(k: &str) -> bool {
    k.starts_with("accord.dev/")
}

/// A Node with someone else's labels and taints, and two of Accord's
/// labels and its reservation taint from an earlier round.
fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-001", "labels": {
            "team": "a",
            "kubernetes.io/hostname": "gpu-001",
            "topology.accord.dev/rack": "r1",
            "accord.dev/gpu.count": "8"}},
        "spec": {"taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
             "timeAdded": "2026-01-01T00:00:00Z"},
            {"key": RESERVATION_KEY, "value": "old", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}})
}

fn want(rack: &str, reservation: Option<&str>) -> Publication {
    let labels: BTreeMap<String, String> = [
        ("topology.accord.dev/rack", rack),
        (GPU_MODEL_LABEL, "NVIDIA-H100-80GB-HBM3"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    Publication {
        labels,
        taints: reservation
            .map(|r| Taint {
                key: RESERVATION_KEY.to_owned(),
                value: Some(r.to_owned()),
                effect: TaintEffect::NoSchedule,
            })
            .into_iter()
            .collect(),
    }
}

async fn publish(api: &FakeApi, want: &Publication) -> PublishOutcome {
    write::publish_node(&api.client(), "gpu-001", want, &owns_label, &owns_taint)
        .await
        .unwrap()
}

fn patches(api: &FakeApi) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.starts_with("PATCH "))
        .collect()
}

fn taint_keys(node: &Value) -> Vec<(String, String)> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or("").to_owned(),
                t["value"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_node_sets_owned_keys_and_keeps_everyone_elses() {
    let api = FakeApi::start().await;
    api.apply(node());
    assert_eq!(
        publish(&api, &want("r3", Some("train-a"))).await,
        PublishOutcome::Written
    );
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["topology.accord.dev/rack"], "r3");
    assert_eq!(labels[GPU_MODEL_LABEL], "NVIDIA-H100-80GB-HBM3");
    assert!(
        labels.get("accord.dev/gpu.count").is_none(),
        "an owned key no longer wanted is removed: {labels}"
    );
    assert_eq!(labels["team"], "a", "others' labels stay");
    assert_eq!(labels["kubernetes.io/hostname"], "gpu-001");
    assert_eq!(
        taint_keys(&n),
        [
            ("node.kubernetes.io/unschedulable".to_owned(), String::new()),
            ("nvidia.com/gpu".to_owned(), "present".to_owned()),
            (RESERVATION_KEY.to_owned(), "train-a".to_owned()),
        ]
    );
    assert_eq!(
        n["spec"]["taints"][0]["timeAdded"], "2026-01-01T00:00:00Z",
        "others' taints stay as they were"
    );
    // One GET, one merge patch as accordd, with the GET's resourceVersion.
    let p = patches(&api);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("fieldManager=accordd"), "{p:?}");

    // Nothing changes: nothing is written.
    let rv = api.resource_version();
    assert_eq!(
        publish(&api, &want("r3", Some("train-a"))).await,
        PublishOutcome::Unchanged
    );
    assert_eq!(patches(&api).len(), 1);
    assert_eq!(api.resource_version(), rv);

    // The reservation ends: only Accord's taint goes.
    assert_eq!(
        publish(&api, &want("r3", None)).await,
        PublishOutcome::Written
    );
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert_eq!(
        taint_keys(&n),
        [
            ("node.kubernetes.io/unschedulable".to_owned(), String::new()),
            ("nvidia.com/gpu".to_owned(), "present".to_owned()),
        ]
    );
    assert_eq!(n["metadata"]["labels"]["team"], "a");

    // A label that is not Accord's is never written, even if asked.
    let mut foreign = want("r3", None);
    foreign.labels.insert("team".into(), "b".into());
    assert_eq!(publish(&api, &foreign).await, PublishOutcome::Unchanged);
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert_eq!(n["metadata"]["labels"]["team"], "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_node_removes_the_last_taint_and_handles_a_bare_node() {
    let api = FakeApi::start().await;
    api.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-001"}}));
    // No labels or taints at all: Accord's are added.
    assert_eq!(
        publish(&api, &want("r3", Some("x"))).await,
        PublishOutcome::Written
    );
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert_eq!(
        taint_keys(&n),
        [(RESERVATION_KEY.to_owned(), "x".to_owned())]
    );
    // The only taint was Accord's: none left.
    assert_eq!(
        publish(&api, &Publication::default()).await,
        PublishOutcome::Written
    );
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert!(taint_keys(&n).is_empty(), "{n}");
    assert!(
        n["metadata"]["labels"]
            .as_object()
            .is_none_or(|l| l.keys().all(|k| !owns_label(k))),
        "{n}"
    );
    assert_eq!(
        publish(&api, &Publication::default()).await,
        PublishOutcome::Unchanged
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_node_on_a_missing_node_is_not_found() {
    let api = FakeApi::start().await;
    assert_eq!(
        publish(&api, &want("r3", None)).await,
        PublishOutcome::NotFound
    );
    assert!(patches(&api).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_resource_version_gets_409_and_overwrites_nothing() {
    let api = FakeApi::start().await;
    api.apply(node());
    let nodes: Api<Node> = Api::all(api.client());
    // Accord reads the Node and works out its patch …
    let read = nodes.get("gpu-001").await.unwrap();
    let patch = write::publication_patch(&read, &want("r3", None), &owns_label, &owns_taint)
        .expect("something to write");
    assert_eq!(
        patch["metadata"]["resourceVersion"].as_str(),
        read.metadata.resource_version.as_deref()
    );
    // … someone else changes it in between …
    let mut changed = node();
    changed["metadata"]["labels"]["team"] = json!("b");
    api.apply(changed);
    // … so the patch is refused, and their change stands.
    match nodes
        .patch("gpu-001", &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"), "{s:?}")
        }
        other => panic!("expected 409 Conflict, got {other:?}"),
    }
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert_eq!(n["metadata"]["labels"]["team"], "b");
    assert_eq!(n["metadata"]["labels"]["topology.accord.dev/rack"], "r1");
    // The next round reads again and writes.
    assert_eq!(
        publish(&api, &want("r3", None)).await,
        PublishOutcome::Written
    );
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert_eq!(n["metadata"]["labels"]["team"], "b");
    assert_eq!(n["metadata"]["labels"]["topology.accord.dev/rack"], "r3");
    // A replace (PUT) with a stale resourceVersion is refused the same way.
    let mut stale = serde_json::to_value(&read).unwrap();
    stale["metadata"]["labels"]["team"] = json!("c");
    let resp = reqwest::Client::new()
        .put(format!("{}/api/v1/nodes/gpu-001", api.url))
        .json(&stale)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
}

#[test]
fn the_scheduler_view_is_the_node_and_its_devices() {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "gpu-001",
        "labels": {"team": "a"}},
        "spec": {"taints": [{"key": RESERVATION_KEY, "value": "x", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}))
    .unwrap();
    let c = accord_kube::cluster::cluster_node(&n);
    let v = accord_kube::cluster::scheduler_view(&c, None);
    assert_eq!(v.labels["team"], "a");
    assert_eq!(v.taints[0].key, RESERVATION_KEY);
    assert_eq!(v.allocatable["nvidia.com/gpu"], "8");
    assert!(v.devices.is_none());
    let v = accord_kube::cluster::scheduler_view(&c, Some(Default::default()));
    assert_eq!(v.devices, Some(Vec::new()));
}
