//! Dark machines on the real 1.37 control plane (`policy.dark_nodes =
//! "delete"`): with 7 of 10 machines powered off by Accord, their Nodes
//! are gone (`kubectl get nodes` lists no NotReady one), a DaemonSet
//! rolling update (`maxUnavailable: 1`) completes on the live ones, the
//! node lifecycle controller's zone stays Normal (its own log), and a
//! machine that dies without Accord keeps its Node, is tainted
//! `node.kubernetes.io/unreachable:NoExecute` and its pod evicted. accordd
//! is killed (-9) as a machine goes dark, before its Node is deleted:
//! restarted, it deletes it once (the apiserver's audit log). Two pods
//! that only the admin's labelled, tainted machines take are planned on
//! them while dark: powered on, their Nodes come back with the admin's
//! label, taint and annotation, and the pods bind there (nothing else
//! powered on). accordd's delete is narrowed by the
//! ValidatingAdmissionPolicy of deploy/node-delete-policy.yaml: refused
//! for a Node without Accord's powering-off taint.

use crate::support;
use support::lab::{kubectl, kubectl_output};

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use accord_lab::{Lab, Scenario};
use serde_json::Value;

const LIVE: [&str; 3] = ["r1-n1", "r1-n2", "r1-n3"];
/// The admin's machines: labelled `team=vision`, tainted
/// `dedicated=vision:NoSchedule`, annotated `owner=ml-infra`.
const VISION: [&str; 2] = ["r1-n4", "r1-n5"];

fn scenario() -> Scenario {
    let mut s = String::from(
        r#"
[lab]
kube_version = "1.37"
kubelet_starting_taint = true
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 600
cluster_manifests = """
{apiVersion: apps/v1, kind: DaemonSet, metadata: {namespace: kube-system, name: node-agent}, spec: {selector: {matchLabels: {app: node-agent}}, updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}, template: {metadata: {labels: {app: node-agent}}, spec: {tolerations: [{operator: Exists}], containers: [{name: a, image: agent-v1, resources: {requests: {cpu: 100m}}}]}}}}
"""
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.policy]
idle_power_off_after_s = 20
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "16"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
"#,
    );
    for m in VISION {
        s.push_str(&format!(
            "[lab.machines.{m}]\nadmin_labels = {{ team = \"vision\" }}\n\
             admin_taints = [\"dedicated=vision:NoSchedule\"]\n\
             admin_annotations = {{ owner = \"ml-infra\" }}\n"
        ));
    }
    for n in 1..=10 {
        s.push_str(&format!(
            "[[fleet.nodes]]\nname = \"r1-n{n}\"\nrack = \"r1\"\nprofile = \"h100\"\npower = \"on\"\n"
        ));
    }
    let pod = |name: &str, spec: &str| {
        format!(
            "{{apiVersion: v1, kind: Pod, metadata: {{namespace: ml, name: {name}}}, spec: {{{spec}, \
             containers: [{{name: t, image: t, resources: {{limits: {{nvidia.com/gpu: \"8\"}}}}}}]}}}}\n"
        )
    };
    let on = |node: &str| {
        format!(
            "affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: \
             [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]}}]}}}}}}"
        )
    };
    // Work that keeps r1-n1..3 on, evicted 2 s after its node is unreachable.
    let live: Vec<String> = LIVE
        .iter()
        .enumerate()
        .map(|(i, n)| {
            pod(
                &format!("live-{i}"),
                &format!(
                    "{}, tolerations: [{{key: node.kubernetes.io/unreachable, operator: Exists, \
                     effect: NoExecute, tolerationSeconds: 2}}]",
                    on(n)
                ),
            )
        })
        .collect();
    let vision = "tolerations: [{key: dedicated, operator: Exists}]";
    let late = pod("late-0", &format!("{}, {vision}", on("r1-n4")));
    let gang: Vec<String> = (0..2)
        .map(|i| {
            pod(
                &format!("vision-{i}"),
                &format!("nodeSelector: {{team: vision}}, {vision}"),
            )
        })
        .collect();
    for (name, run_ms, manifests) in [
        ("live", 3_600_000, live.join("---\n")),
        ("late", 30_000, late),
        ("vision", 3_600_000, gang.join("---\n")),
    ] {
        s.push_str(&format!(
            "[[submit]]\nname = \"{name}\"\nrun_ms = {run_ms}\nmanifests = \"\"\"\n{manifests}\"\"\"\n"
        ));
    }
    Scenario::parse(&s, Path::new("dark-1.37.toml")).unwrap()
}

/// The Nodes `kubectl get nodes` lists, each with whether it is Ready.
fn nodes(lab: &Lab) -> Vec<(String, bool, Value)> {
    let list: Value = serde_json::from_str(&kubectl(lab, &["get", "nodes", "-o", "json"])).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let ready = n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (
                n["metadata"]["name"].as_str().unwrap().to_owned(),
                ready,
                n.clone(),
            )
        })
        .collect()
}

/// Polls `what` every 500 ms until it holds, for at most `within`.
async fn until(lab: &Lab, what: &str, within: Duration, mut holds: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !holds() {
        assert!(
            Instant::now() < end,
            "{what}: not within {within:?}\n{}",
            lab.daemon_report()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// kube-controller-manager's log (the node lifecycle controller's zone
/// states: `handleDisruption`, node_lifecycle_controller.go).
fn controller_manager_log(lab: &Lab) -> String {
    let up = lab.api.upstream().expect("upstream");
    let dir = up.plane.lock().unwrap().dir().to_owned();
    std::fs::read_to_string(dir.join("kube-controller-manager.log")).unwrap_or_default()
}

fn zone_states(lab: &Lab) -> Vec<String> {
    controller_manager_log(lab)
        .lines()
        .filter(|l| l.contains("zone is now in new state") || l.contains("master disruption mode"))
        .map(str::to_owned)
        .collect()
}

/// accordd's DELETEs of Node `node` the apiserver answered 200, from its
/// audit log.
fn deletes_of(lab: &Lab, node: &str) -> usize {
    let up = lab.api.upstream().expect("upstream");
    let log = up.plane.lock().unwrap().audit_log();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let user = accord_lab::upstream::accordd_user();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == user.as_str()
                && e["verb"] == "delete"
                && e["objectRef"]["resource"] == "nodes"
                && e["objectRef"]["name"] == node
                && e["responseStatus"]["code"] == 200
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dark_machines_nodes_are_deleted_and_come_back_with_the_admins_keys() {
    let _slot = support::lab::world_alone().await;
    let lab = support::lab::start("upstream-1.37-dark", scenario()).await;
    lab.release("live").unwrap();
    lab.release("late").unwrap();
    support::lab::bound(&lab, "live", Duration::from_secs(180)).await;
    support::lab::bound(&lab, "late", Duration::from_secs(180)).await;

    // r1-n4 goes dark last (its pod runs 30 s): accordd is killed as the
    // BMC shows it off, and started again.
    until(&lab, "r1-n4 powered off", Duration::from_secs(240), || {
        !lab.nodes_on().contains("r1-n4")
    })
    .await;
    let node_there = nodes(&lab).iter().any(|(n, _, _)| n == "r1-n4");
    lab.kill_daemon();
    eprintln!("accordd killed with r1-n4 off; its Node still there: {node_there}");
    lab.start_daemon().expect("accordd starts again");

    // 7 of 10 dark: their Nodes gone, none NotReady.
    until(&lab, "7 Nodes deleted", Duration::from_secs(180), || {
        nodes(&lab).len() == LIVE.len()
    })
    .await;
    let listed = nodes(&lab);
    let names: BTreeSet<&str> = listed.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, LIVE.into_iter().collect(), "only the live machines");
    assert!(
        listed.iter().all(|(_, ready, _)| *ready),
        "no NotReady Node"
    );
    assert_eq!(
        deletes_of(&lab, "r1-n4"),
        1,
        "deleted once across the restart"
    );
    for n in 5..=10 {
        assert_eq!(deletes_of(&lab, &format!("r1-n{n}")), 1, "r1-n{n}");
    }

    // accordd may delete no Node without Accord's powering-off taint.
    let refused = kubectl_output(
        &lab,
        &[
            "delete",
            "node",
            "r1-n2",
            &format!("--as={}", accord_lab::upstream::accordd_user()),
        ],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("accordd deletes only the Nodes"),
        "{said}"
    );

    // A DaemonSet rolling update completes on every live node.
    let started = Instant::now();
    kubectl(
        &lab,
        &[
            "-n",
            "kube-system",
            "set",
            "image",
            "ds/node-agent",
            "a=agent-v2",
        ],
    );
    kubectl(
        &lab,
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "ds/node-agent",
            "--timeout=120s",
        ],
    );
    let took = started.elapsed().as_secs_f64();
    let ds: Value = serde_json::from_str(&kubectl(
        &lab,
        &["-n", "kube-system", "get", "ds/node-agent", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(
        ds["status"]["desiredNumberScheduled"], 3,
        "{}",
        ds["status"]
    );
    assert_eq!(
        ds["status"]["updatedNumberScheduled"], 3,
        "{}",
        ds["status"]
    );
    assert_eq!(ds["status"]["numberAvailable"], 3, "{}", ds["status"]);
    eprintln!("figure: DaemonSet rolling update (maxUnavailable 1) with 7 of 10 machines dark: {took:.1} s");

    // The zone stayed Normal.
    let states = zone_states(&lab);
    assert!(
        states.iter().any(|l| l.contains("newState=\"Normal\"")),
        "{states:?}"
    );
    assert!(
        states
            .iter()
            .all(|l| !l.contains("Disruption") && !l.contains("master disruption")),
        "{states:?}"
    );

    // A machine that dies without Accord: tainted unreachable:NoExecute,
    // its pod evicted, its Node kept.
    assert!(lab.hang("r1-n1"));
    until(
        &lab,
        "r1-n1 tainted unreachable:NoExecute and live-0 evicted",
        Duration::from_secs(120),
        || {
            let tainted = nodes(&lab).iter().any(|(n, _, o)| {
                n == "r1-n1"
                    && o["spec"]["taints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|t| {
                            t["key"] == "node.kubernetes.io/unreachable"
                                && t["effect"] == "NoExecute"
                        })
            });
            let pod = kubectl_output(&lab, &["-n", "ml", "get", "pod", "live-0", "-o", "json"]);
            let evicted = !pod.status.success()
                || serde_json::from_slice::<Value>(&pod.stdout)
                    .is_ok_and(|p| p["metadata"]["deletionTimestamp"].is_string());
            tainted && evicted
        },
    )
    .await;
    assert!(
        nodes(&lab).iter().any(|(n, _, _)| n == "r1-n1"),
        "its Node stays"
    );
    let states = zone_states(&lab);
    assert!(
        states.iter().all(|l| !l.contains("Disruption")),
        "{states:?}"
    );

    // Two pods only the admin's dark machines take: powered on, their
    // Nodes come back with the admin's keys, and the pods bind there.
    lab.release("vision").unwrap();
    let end = Instant::now() + Duration::from_secs(240);
    while lab.submission_times("vision").1.is_none() {
        if Instant::now() > end {
            let nodes = kubectl(&lab, &["get", "nodes", "-o", "yaml"]);
            let leases = kubectl(
                &lab,
                &["-n", "kube-node-lease", "get", "leases", "-o", "yaml"],
            );
            let kcm: Vec<String> = controller_manager_log(&lab)
                .lines()
                .filter(|l| VISION.iter().any(|v| l.contains(v)))
                .map(str::to_owned)
                .collect();
            panic!(
                "vision not bound within 240 s\n{}\nNODES\n{nodes}\nLEASES\n{leases}\nKCM\n{}",
                lab.daemon_report(),
                kcm.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let on = support::lab::nodes_of(&lab, "ml/vision-");
    assert_eq!(on, VISION.iter().map(|s| (*s).to_owned()).collect());
    let powered: BTreeSet<String> = lab
        .fleet
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .filter(|n| !lab.proxy.power_ons(n).is_empty())
        .collect();
    assert_eq!(powered, on, "nothing powered on and left unused");
    for (name, _, node) in nodes(&lab)
        .iter()
        .filter(|(n, _, _)| VISION.contains(&n.as_str()))
    {
        assert_eq!(node["metadata"]["labels"]["team"], "vision", "{name}");
        assert_eq!(
            node["metadata"]["annotations"]["owner"], "ml-infra",
            "{name}"
        );
        assert!(
            node["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["key"] == "dedicated" && t["value"] == "vision" && t["effect"] == "NoSchedule"
                }),
            "{name}: {}",
            node["spec"]
        );
    }
}
