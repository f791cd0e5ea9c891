//! The lab on the upstream control plane (etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler built by
//! `scripts/controlplane`), as `scripts/run` runs it: the default scenario
//! with its DaemonSets and cordoned node on v1.37 and on an older minor,
//! kubectl against the lab's apiserver, and a permission taken from
//! accordd failing the lab. Every wait has a condition, a deadline and
//! says what it waited for.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord_lab::{Lab, Scenario};
use accord_testkit::process::output_within;

/// `kubectl ARGS` with the lab's kubeconfig (the admin's): its stdout.
fn kubectl(lab: &Lab, args: &[&str]) -> String {
    let kubeconfig = lab.kubeconfig.as_ref().expect("the lab wrote a kubeconfig");
    let dir = accord_testkit::control_plane::Binaries::for_minor(lab.kube_version.minor()).unwrap();
    let out = output_within(
        std::process::Command::new(dir.path("kubectl").unwrap())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn default_on(minor: &str) -> Scenario {
    let mut s = Scenario::default_scenario();
    s.lab.kube_version = Some(minor.to_owned());
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_scenario_runs_on_upstream_1_37() {
    let _one = support::lab::ONE_LAB_AT_A_TIME.lock().await;
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
    let listed = kubectl(
        &lab,
        &[
            "get",
            "nodes,pods,resourceclaims,clusterqueues,localqueues",
            "-A",
        ],
    );
    for seen in [
        "node/r1-n1",
        "node/r2-n4",
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
    // The real scheduler kept the gang in one rack (the topology gate on).
    let train = s.workloads.iter().find(|w| w.name == "train-a").unwrap();
    let racks: BTreeSet<&str> = train.nodes.iter().map(|n| &n[..2]).collect();
    assert_eq!(racks.len(), 1, "{}", s.render());
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
    let _one = support::lab::ONE_LAB_AT_A_TIME.lock().await;
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

/// A small fleet: one node off, a gang of one released by the test.
const FLEET: &str = r#"
[lab]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 180
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[submit]]
name = "one"
manifests = '''
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: one}, spec: {containers: [{name: c, image: c, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
'''
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_taken_from_accordd_fails_the_lab() {
    let _one = support::lab::ONE_LAB_AT_A_TIME.lock().await;
    let s = Scenario::parse(FLEET, Path::new("forbidden.toml")).unwrap();
    let lab = support::lab::start("upstream-forbidden", s).await;
    // The admin takes accordd's cluster-wide permissions away; the pod
    // then needs a node powered on and published (Node writes).
    kubectl(&lab, &["delete", "clusterrolebinding", "accordd"]);
    lab.release("one").unwrap();
    // Never true: the wait ends on accordd's first refusal (or its
    // deadline, and then the assertions below say so).
    let e = lab
        .wait_lab(
            "the lab to fail on accordd's refusal",
            Duration::from_secs(150),
            |_| false,
        )
        .await
        .unwrap_err();
    let text = format!("{e:#}");
    assert!(text.contains("403"), "{text}");
    assert!(
        text.contains("system:serviceaccount:accord-system:accordd"),
        "{text}"
    );
}
