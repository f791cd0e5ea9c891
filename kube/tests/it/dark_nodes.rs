//! A dark machine's Node deleted and put back against the fake API server
//! (whose DELETE checks preconditions as kube-apiserver's `BeforeDelete`
//! does) and what is kept of a Node: a delete lands only on the object
//! seen; a restore writes only what the Node registered again lacks, and
//! only on that registration.

use std::collections::BTreeMap;

use accord::demand::{Taint, TaintEffect};
use accord::truth::{KeptNode, NodeKeys, POWERING_OFF_TAINT_KEY};
use accord_kube::dark_nodes::{delete_node, restore_node};
use accord_kube::write::PublishOutcome;
use accord_testkit::fake_api::FakeApi;
use serde_json::{json, Value};

/// The Node of a machine Accord powered off: an admin's label, taint,
/// annotation and cordon; the kubelet's, GFD's, Accord's and the node
/// lifecycle controller's keys.
fn dark_node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-001",
            "labels": {"team": "vision", "node-role.kubernetes.io/gpu": "",
                "kubernetes.io/hostname": "gpu-001", "nvidia.com/gpu.product": "H100",
                "topology.accord.dev/rack": "r1"},
            "annotations": {"accord.dev/do-not-disrupt": "false", "owner": "ml-infra",
                "node.alpha.kubernetes.io/ttl": "0",
                "csi.volume.kubernetes.io/nodeid": "{}"}},
        "spec": {"unschedulable": true, "taints": [
            {"key": "dedicated", "value": "vision", "effect": "NoSchedule"},
            {"key": POWERING_OFF_TAINT_KEY, "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}})
}

/// A Node's uid, labels, taints, annotations and cordon.
type Keys = (
    String,
    BTreeMap<String, String>,
    Vec<Taint>,
    BTreeMap<String, String>,
    bool,
);

fn keys_of(n: &Value) -> Keys {
    let map = |v: &Value| -> BTreeMap<String, String> {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
            .collect()
    };
    let taints = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| Taint {
            key: t["key"].as_str().unwrap().to_owned(),
            value: t["value"].as_str().map(str::to_owned),
            effect: match t["effect"].as_str().unwrap() {
                "NoExecute" => TaintEffect::NoExecute,
                "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                _ => TaintEffect::NoSchedule,
            },
        })
        .collect();
    (
        n["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
        map(&n["metadata"]["labels"]),
        taints,
        map(&n["metadata"]["annotations"]),
        n["spec"]["unschedulable"].as_bool().unwrap_or(false),
    )
}

fn kept_of(n: &Value) -> KeptNode {
    let (uid, labels, taints, annotations, unschedulable) = keys_of(n);
    KeptNode::of(
        &NodeKeys {
            uid: &uid,
            labels: &labels,
            taints: &taints,
            annotations: &annotations,
            unschedulable,
        },
        &|k| k.starts_with("topology.accord.dev/"),
    )
}

#[test]
fn what_is_kept_is_what_others_set_and_no_node_software_republishes() {
    let kept = kept_of(
        &json!({"metadata": dark_node()["metadata"].clone(), "spec": dark_node()["spec"].clone()}),
    );
    assert_eq!(
        kept.labels.keys().collect::<Vec<_>>(),
        ["node-role.kubernetes.io/gpu", "team"],
        "not the kubelet's, GFD's nor Accord's"
    );
    assert_eq!(
        kept.taints,
        [Taint {
            key: "dedicated".into(),
            value: Some("vision".into()),
            effect: TaintEffect::NoSchedule
        }],
        "not Accord's nor the node lifecycle controller's"
    );
    assert_eq!(
        kept.annotations.keys().collect::<Vec<_>>(),
        ["accord.dev/do-not-disrupt", "owner"],
        "not the kubelet's nor the CSI controller's"
    );
    assert!(kept.unschedulable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_lands_only_on_the_node_seen() {
    let api = FakeApi::start().await;
    api.apply(dark_node());
    let seen = api.get("v1", "Node", "", "gpu-001").unwrap();
    let uid = seen["metadata"]["uid"].as_str().unwrap().to_owned();
    let rv = seen["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // An admin labels it after Accord saw it: the copy lacks the label, so
    // the delete is refused (409) and the Node stays.
    api.update("v1", "Node", "", "gpu-001", |n| {
        n["metadata"]["labels"]["late"] = json!("yes");
    });
    let err = delete_node(&api.client(), "gpu-001", &uid, &rv)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.message.contains("Precondition failed: ResourceVersion")),
        "{err}"
    );
    assert!(api.get("v1", "Node", "", "gpu-001").is_some());
    // Another uid (a Node registered again): refused.
    let now = api.get("v1", "Node", "", "gpu-001").unwrap();
    let rv = now["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let err = delete_node(&api.client(), "gpu-001", "another-uid", &rv)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err}"
    );
    // The object seen: deleted; a second delete finds it gone.
    assert_eq!(
        delete_node(&api.client(), "gpu-001", &uid, &rv)
            .await
            .unwrap(),
        PublishOutcome::Written
    );
    assert!(api.get("v1", "Node", "", "gpu-001").is_none());
    assert_eq!(
        delete_node(&api.client(), "gpu-001", &uid, &rv)
            .await
            .unwrap(),
        PublishOutcome::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_puts_back_what_the_new_registration_lacks() {
    let api = FakeApi::start().await;
    api.apply(dark_node());
    let kept = kept_of(&api.get("v1", "Node", "", "gpu-001").unwrap());
    api.delete("v1", "Node", "", "gpu-001");
    // The kubelet registers it again: its own labels, one an admin's kept
    // label shares (its value wins), its starting taint.
    api.apply(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-001", "labels": {"kubernetes.io/hostname": "gpu-001", "team": "vision-2"}},
        "spec": {"taints": [{"key": "accord.dev/starting", "effect": "NoSchedule"}]}}));
    let new = api.get("v1", "Node", "", "gpu-001").unwrap();
    let (new_uid, labels, taints, annotations, unschedulable) = keys_of(&new);
    assert_ne!(new_uid, kept.uid);
    // A restore for the old registration writes nothing.
    assert_eq!(
        restore_node(&api.client(), "gpu-001", &kept).await.unwrap(),
        PublishOutcome::NotFound
    );
    let missing = kept.missing_on(&NodeKeys {
        uid: &new_uid,
        labels: &labels,
        taints: &taints,
        annotations: &annotations,
        unschedulable,
    });
    assert!(
        !missing.labels.contains_key("team"),
        "present: the kubelet's value holds"
    );
    assert_eq!(
        restore_node(&api.client(), "gpu-001", &missing)
            .await
            .unwrap(),
        PublishOutcome::Written
    );
    let n = api.get("v1", "Node", "", "gpu-001").unwrap();
    assert_eq!(n["metadata"]["labels"]["team"], "vision-2");
    assert_eq!(n["metadata"]["labels"]["node-role.kubernetes.io/gpu"], "");
    assert_eq!(n["metadata"]["annotations"]["owner"], "ml-infra");
    assert_eq!(
        n["metadata"]["annotations"]["accord.dev/do-not-disrupt"],
        "false"
    );
    assert!(n["metadata"]["annotations"]
        .get("node.alpha.kubernetes.io/ttl")
        .is_none());
    assert_eq!(n["spec"]["unschedulable"], true);
    let keys: Vec<&str> = n["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["accord.dev/starting", "dedicated"]);
    // Shown: nothing more to write.
    assert_eq!(
        restore_node(&api.client(), "gpu-001", &missing)
            .await
            .unwrap(),
        PublishOutcome::Unchanged
    );
}
