//! The machines' kubelets on the upstream control plane, beyond
//! registering their Nodes ([`crate::world`]): while a machine is up its
//! kubelet renews the Node's Lease in `kube-node-lease` (which the node
//! lifecycle controller reads; a powered-off machine's stops, and the
//! controller marks the Node Unknown and taints it), runs the pods the
//! real scheduler bound to it (status Running, Ready) and confirms the
//! deletion of its pods that are terminating. The lab notes each binding
//! the scheduler made as it did its binder's: the scenario's pods are the
//! nodes' work; DaemonSet pods are counted per node.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::world::{key_of, note_bound, note_gone, pod_gpus};
use crate::Ctx;

/// The Lease a kubelet holds: upstream's default duration.
const LEASE_DURATION_S: u64 = 40;
/// How often a kubelet renews it (upstream: a quarter of the duration;
/// here sooner, as the lab's node lifecycle grace is 10 s).
const RENEW_EVERY: Duration = Duration::from_secs(2);

/// Kubernetes `MicroTime`, UTC.
fn micro_time_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The machines up now (on, Node registered, not hung).
fn nodes_up(ctx: &Ctx) -> BTreeSet<String> {
    let r = ctx.record.lock().expect("lock");
    r.nodes
        .iter()
        .filter(|(_, n)| n.on && n.registered && !n.hung)
        .map(|(k, _)| k.clone())
        .collect()
}

/// Renews each up machine's node Lease.
pub(crate) async fn leases(ctx: Ctx) {
    loop {
        for node in nodes_up(&ctx) {
            let now = micro_time_now();
            let renewed = ctx.api.update(
                "coordination.k8s.io/v1",
                "Lease",
                "kube-node-lease",
                &node,
                |l| {
                    l["spec"]["renewTime"] = json!(now);
                    l["spec"]["holderIdentity"] = json!(node);
                },
            );
            if !renewed {
                let uid = ctx
                    .api
                    .get("v1", "Node", "", &node)
                    .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_owned));
                let mut lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"namespace": "kube-node-lease", "name": node},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_S,
                             "renewTime": now},
                });
                if let Some(uid) = uid {
                    // As the kubelet's: owned by its Node.
                    lease["metadata"]["ownerReferences"] = json!([{
                        "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]);
                }
                ctx.api.apply(lease);
            }
            post_ready(&ctx, &node);
        }
        tokio::time::sleep(RENEW_EVERY).await;
    }
}

/// The kubelet's node status loop (`pkg/kubelet/kubelet_node_status.go`,
/// `tryUpdateNodeStatus`, every `nodeStatusUpdateFrequency`): it posts the
/// Node's status when it differs from what the kubelet reports, so a Ready
/// condition the node lifecycle controller turned Unknown while the
/// machine runs (a Node registered again under the name of one the
/// controller still holds health for, before its first Lease renewal) is
/// set back to Ready. Only then: the lab posts nothing while it agrees.
fn post_ready(ctx: &Ctx, node: &str) {
    let Some(n) = ctx.api.get("v1", "Node", "", node) else {
        return;
    };
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    if ready {
        return;
    }
    let now = crate::world::time_now();
    ctx.api.update("v1", "Node", "", node, |n| {
        let mut conditions: Vec<Value> = n["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] != "Ready")
            .cloned()
            .collect();
        conditions.push(
            json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now}),
        );
        n["status"]["conditions"] = Value::Array(conditions);
    });
}

/// A pod's status once its kubelet runs it.
fn running(pod: &Value, since: &str) -> Value {
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": "",
                   "ready": true, "started": true, "restartCount": 0,
                   "state": {"running": {"startedAt": since}}})
        })
        .collect();
    let mut status = pod["status"].clone();
    status["phase"] = json!("Running");
    status["startTime"] = json!(since);
    status["hostIP"] = json!("127.0.0.1");
    status["containerStatuses"] = Value::Array(containers);
    status["conditions"] = json!(["PodScheduled", "Initialized", "ContainersReady", "Ready"]
        .iter()
        .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": since}))
        .collect::<Vec<_>>());
    status
}

fn owned_by_daemon_set(pod: &Value) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|r| r["kind"] == "DaemonSet"))
}

/// Whether `node`'s Node carries every topology label Accord publishes
/// for it (`<label_prefix><level>` for each level the fleet gives it).
fn has_accords_labels(ctx: &Ctx, node: &str) -> bool {
    let Some(want) = ctx.fleet.publication(node, 0) else {
        return true;
    };
    let prefix = &ctx.fleet.topology.label_prefix;
    let Some(n) = ctx.api.get("v1", "Node", "", node) else {
        return false;
    };
    want.labels
        .iter()
        .filter(|(k, _)| k.starts_with(prefix.as_str()))
        .all(|(k, v)| n["metadata"]["labels"][k].as_str() == Some(v.as_str()))
}

/// Follows the pods: notes the scheduler's bindings, runs what is bound
/// to an up machine, confirms the deletion of its terminating pods.
pub(crate) async fn pods(ctx: Ctx) {
    // The scenario's pods seen bound, to their node.
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let up = nodes_up(&ctx);
        let pods = ctx.api.list("v1", "Pod");
        let now = Instant::now();
        let mut present: BTreeSet<(String, String)> = BTreeSet::new();
        let mut bound_now = Vec::new();
        for pod in &pods {
            let key = key_of(pod);
            let Some(node) = pod["spec"]["nodeName"].as_str() else {
                continue;
            };
            present.insert(key.clone());
            let terminating = pod["metadata"]["deletionTimestamp"].is_string();
            if terminating && up.contains(node) {
                ctx.api.delete("v1", "Pod", &key.0, &key.1);
                continue;
            }
            if owned_by_daemon_set(pod) {
                let mut r = ctx.record.lock().expect("lock");
                if let Some(n) = r.nodes.get_mut(node) {
                    n.daemonset_pods.insert(format!("{}/{}", key.0, key.1));
                }
            } else if !seen.contains_key(&key) {
                let mut r = ctx.record.lock().expect("lock");
                if r.subs.iter().any(|s| s.pods.contains(&key)) {
                    if !has_accords_labels(&ctx, node) {
                        r.bound_before_labels
                            .push(format!("{}/{}→{node}", key.0, key.1));
                    }
                    note_bound(&mut r, key.clone(), node, pod_gpus(pod));
                    seen.insert(key.clone(), node.to_owned());
                    bound_now.push(format!("{}/{}→{node}", key.0, key.1));
                }
            }
            let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
            if !terminating && up.contains(node) && phase == "Pending" {
                let since = crate::world::time_now();
                ctx.api.update("v1", "Pod", &key.0, &key.1, |p| {
                    p["status"] = running(p, &since);
                });
            }
        }
        if !bound_now.is_empty() {
            say!(ctx, "kube-scheduler bound {}", bound_now.join(", "));
        }
        // Gone or no longer bound: deleted (the scenario's finish notes
        // its own) or evicted by the taint-eviction controller.
        let gone: Vec<(String, String)> = seen
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        if !gone.is_empty() {
            let mut r = ctx.record.lock().expect("lock");
            for key in gone {
                seen.remove(&key);
                note_gone(&mut r, &key, now);
            }
        }
    }
}
