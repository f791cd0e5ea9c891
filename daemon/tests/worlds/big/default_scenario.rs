//! The lab's default scenario on the upstream control plane, as
//! `scripts/run` runs it: with its DaemonSets and cordoned node on v1.37,
//! kubectl against the lab's apiserver, and on an older minor (1.34) to
//! the end. Every wait has a condition, a deadline and says what it
//! waited for.

use crate::support;
use support::lab::kubectl;

use std::collections::BTreeSet;
use std::time::Duration;

use accord_lab::Scenario;

fn default_on(minor: &str) -> Scenario {
    let mut s = Scenario::default_scenario();
    s.lab.kube_version = Some(minor.to_owned());
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_scenario_runs_on_upstream_1_37() {
    let _slot = support::lab::shared_world().await;
    let lab = support::lab::start("upstream-1.37", default_on("1.37")).await;

    // kubectl works against the lab's apiserver, and the apiserver's
    // authorizer says what accordd's ServiceAccount may do.
    let granted = kubectl(
        &lab,
        &[
            "auth",
            "can-i",
            "--list",
            &format!("--as={}", accord_lab::upstream::accordd_user()),
        ],
    );
    assert!(granted.contains("nodes"), "{granted}");
    assert!(
        granted.contains("resourceslices.resource.k8s.io"),
        "{granted}"
    );

    let s = lab
        .run_until_idle(true)
        .await
        .expect("the scenario settles");
    // The lab still runs: what the cluster holds, as an admin lists it.
    // Settled, the idle machines are dark and their Nodes deleted (a last
    // one within a round or two): the admin's cordoned r1-n4 stays on
    // (Accord leaves it as the admin left it), and no Node is NotReady.
    let list = || {
        kubectl(
            &lab,
            &[
                "get",
                "nodes,pods,resourceclaims,clusterqueues,localqueues",
                "-A",
            ],
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut listed = list();
    while listed.contains("NotReady") {
        assert!(
            std::time::Instant::now() < deadline,
            "a NotReady Node 60 s after the scenario settled: {listed}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        listed = list();
    }
    for seen in [
        "node/r1-n4",
        "pod/nvidia-dcgm-exporter-",
        "clusterqueue.kueue.x-k8s.io/batch",
        "localqueue.kueue.x-k8s.io/gpu",
    ] {
        assert!(listed.contains(seen), "{seen}: {listed}");
    }
    assert_eq!(s.kubernetes, "upstream");
    for c in [
        "kube-apiserver v1.37.2",
        "kube-controller-manager v1.37.2",
        "kube-scheduler v1.37.2",
    ] {
        assert!(
            s.control_plane.iter().any(|x| x == c),
            "{:?}",
            s.control_plane
        );
    }
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    let bound: BTreeSet<&str> = s
        .workloads
        .iter()
        .filter(|w| w.bound)
        .map(|w| w.name.as_str())
        .collect();
    assert_eq!(
        bound,
        BTreeSet::from(["train-a", "notebooks", "sweep", "batch"]),
        "{}",
        s.render()
    );
    // Real Kueue admitted the batch job through a ProvisioningRequest of
    // a class Accord serves, which Accord said Provisioned only once the
    // nodes its pods then went to were Ready.
    assert!(
        s.control_plane.iter().any(|x| x == "kueue v0.17.0"),
        "{:?}",
        s.control_plane
    );
    let batch = s.workloads.iter().find(|w| w.name == "batch").unwrap();
    let pr = batch
        .provisioning_request
        .as_ref()
        .unwrap_or_else(|| panic!("no Provisioned=True seen: {}", s.render()));
    assert_eq!(
        pr.class, "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "{pr:?}"
    );
    assert_eq!(batch.nodes.len(), 2, "{}", s.render());
    for n in &batch.nodes {
        assert!(pr.ready_nodes_then.contains(n), "{n}: {pr:?}");
    }
    // The real scheduler kept the gang in one rack (the topology gate on),
    // and no pod was bound to a Node before Accord's rack label was on it
    // (the kubelets register with Accord's starting taint, lifted in the
    // patch that sets the labels).
    let train = s.workloads.iter().find(|w| w.name == "train-a").unwrap();
    let racks: BTreeSet<&str> = train.nodes.iter().map(|n| &n[..2]).collect();
    assert_eq!(racks.len(), 1, "{}", s.render());
    assert!(
        s.pods_bound_before_labels.is_empty(),
        "{:?}",
        s.pods_bound_before_labels
    );
    // A gang no rack holds: Accord's explanation beside the real
    // scheduler's word on the same pods.
    let st = lab.status().await.expect("accordd's status");
    let explained = accord_api::text::render_explain(&st, "ml/huge").unwrap();
    println!("lab figures: accordctl explain ml/huge on upstream 1.37:\n{explained}");
    assert!(
        explained.contains("none of 3 racks holds it"),
        "{explained}"
    );
    assert!(explained.contains("scheduler (ml/huge-"), "{explained}");
    assert_eq!(s.nodes_powered_on_never_used, 0, "{}", s.render());
    // The real DaemonSet controller made a pod of each of the four
    // DaemonSets on every node that came up.
    for n in &s.nodes {
        let up = n.power_cycles > 0 || n.name == "r1-n1" || n.name == "r1-n4";
        let want = if up { 4 } else { 0 };
        assert_eq!(n.daemonset_pods, Some(want), "{}: {}", n.name, s.render());
    }
    // They are no work: every node went dark at the end but the one the
    // admin cordoned, which is neither failed nor powered off.
    assert!(s.findings.is_empty(), "{}", s.render());
    let on: Vec<&str> = s
        .nodes
        .iter()
        .filter(|n| n.on_now)
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(on, ["r1-n4"], "{}", s.render());
    assert_eq!(s.nodes_left_on, 1);
    let cordoned = s.nodes.iter().find(|n| n.name == "r1-n4").unwrap();
    assert!(
        matches!(cordoned.stage.as_deref(), Some("idle" | "ready")),
        "{}",
        s.render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_scenario_runs_to_the_end_on_upstream_1_34() {
    let _slot = support::lab::shared_world().await;
    let lab = support::lab::start("upstream-1.34", default_on("1.34")).await;
    let s = lab
        .run_until_idle(true)
        .await
        .expect("the scenario settles");
    assert!(
        s.control_plane
            .iter()
            .any(|x| x == "kube-apiserver v1.34.4"),
        "{:?}",
        s.control_plane
    );
    // 1.34 serves no scheduling.k8s.io/v1beta1 and knows neither gate:
    // the gangs are skipped and said, the rest runs.
    for what in [
        "train-a",
        "GenericWorkload",
        "TopologyAwareWorkloadScheduling",
    ] {
        assert!(
            s.skipped.iter().any(|x| x.contains(what)),
            "{what}: {:?}",
            s.skipped
        );
    }
    // The rest runs, the Kueue job (submitted at the start, the gang it
    // waits for being skipped) among it.
    for name in ["notebooks", "batch"] {
        let w = s.workloads.iter().find(|w| w.name == name).unwrap();
        assert!(w.bound, "{name}: {}", s.render());
    }
}
