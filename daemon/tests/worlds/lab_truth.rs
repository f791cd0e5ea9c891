//! End to end in the lab, with the real accordd: Accord plans with what
//! the machines and the cluster say. The lab's Kubernetes is derived from
//! each machine's recorded hardware (a kubelet and device-plugin stand-in),
//! not from the fleet file accordd reads, so a machine whose recording
//! differs from its declaration shows a real disagreement.

use std::time::Duration;

use accord::truth::DriftKind;
use accord_api::control::ModelSource;
use accord_lab::fixtures::gang;
use accord_lab::Lab;

use crate::support;
use support::lab::*;

/// Rack r1 has four nodes, one of which (r1-n1, on from the start: it ran
/// something earlier) is declared with 8 GPUs but replays a recording
/// with 7. Rack r2 has four healthy nodes. r3-n1 (on) is the research
/// team's, not lendable: accordd taints it.
const FLEET: &str = r#"
[fleet.topology]
also_label = { rack = ["topology.kubernetes.io/rack"] }

[fleet.policy]
idle_power_off_after_s = 600

[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1Ti"
power_kw = 10.2

[[fleet.racks]]
name = "r1"
[[fleet.racks]]
name = "r2"
[[fleet.racks]]
name = "r3"

[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
power = "on"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n3"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n4"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r2-n1"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n2"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n3"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n4"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r3-n1"
rack = "r3"
profile = "h100"
power = "on"

[[fleet.reservations]]
name = "research"
owner = { namespace = "research" }
nodes = ["r3-n1"]
lendable = false
"#;

fn node(lab: &Lab, name: &str) -> serde_json::Value {
    lab.api
        .get("v1", "Node", "", name)
        .unwrap_or_else(|| panic!("no Node {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reporting_7_of_8_gpus_is_planned_around_and_accordd_labels_and_taints_nodes() {
    let _slot = shared_world().await;
    let settings =
        format!("{QUICK}\n[lab.machines.r1-n1]\nrecording = {{ builtin = \"h100-7gpu\" }}\n");
    let lab = start(
        "a_node_reporting_7_of_8_gpus_is_planned_around",
        scenario(&settings, FLEET, &[("train", gang("train", 4), 600_000)]),
    )
    .await;

    // r1-n1's agent has reported: accordd sees the drift before any
    // demand arrives.
    let st = lab
        .wait_status(
            "r1-n1's GPU-count drift in accordd's status",
            Duration::from_secs(60),
            |s| {
                s.nodes.iter().any(|n| {
                    n.name == "r1-n1" && n.drift.iter().any(|d| d.what == DriftKind::GpuCount)
                })
            },
        )
        .await
        .unwrap();
    let r1n1 = st.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert_eq!(r1n1.model, ModelSource::Reported);
    assert_eq!(r1n1.gpus, 7);
    let d = r1n1
        .drift
        .iter()
        .find(|d| d.what == DriftKind::GpuCount)
        .unwrap();
    assert_eq!((d.declared.as_str(), d.reported.as_str()), ("8", "7"));

    // The rack gang: with the declaration r1 would do (one node already
    // on); with the truth only r2 has four 8-GPU nodes.
    lab.release("train").unwrap();
    bound(&lab, "train", Duration::from_secs(120)).await;
    let r2 = set(&["r2-n1", "r2-n2", "r2-n3", "r2-n4"]);
    assert_eq!(lab.nodes_powered_on(), r2);
    assert_eq!(nodes_of(&lab, "ml/train-"), r2, "{:?}", lab.bound_pods());
    for n in ["r1-n1", "r1-n2", "r1-n3", "r1-n4"] {
        assert_eq!(lab.emulator_resets(n), 0, "{n}");
    }
    let summary = lab.summary(None);
    assert_eq!(summary.nodes_powered_on, 4);
    assert_eq!(
        summary.nodes_powered_on_never_used,
        0,
        "{}",
        summary.render()
    );

    // The drift, where an admin looks: accordctl nodes, an event on the
    // Node, a metric.
    let (ok, text, err) = accordctl(&lab, &["nodes"]);
    assert!(ok, "{err}");
    let line = text
        .lines()
        .find(|l| l.starts_with("r1-n1 "))
        .unwrap_or_else(|| panic!("no r1-n1 in accordctl nodes:\n{text}"));
    assert!(line.contains("GPUs: declared 8, reported 7"), "{line}");
    assert!(line.contains("report"), "{line}");
    let events = lab.api.list("events.k8s.io/v1", "Event");
    assert!(
        events.iter().any(|e| e["reason"] == "HardwareDrift"
            && e["type"] == "Warning"
            && e["regarding"]["kind"] == "Node"
            && e["regarding"]["name"] == "r1-n1"),
        "{events:#?}"
    );
    let metrics = metrics(&lab).await;
    assert!(
        metrics.contains("accord_node_drift{node=\"r1-n1\",against=\"declaration\"} 1"),
        "{metrics}"
    );

    // Topology labels and the reservation's taint are on the Nodes,
    // written by accordd: the lab registers Nodes without them.
    for n in &r2 {
        let labels = &node(&lab, n)["metadata"]["labels"];
        assert_eq!(labels["topology.accord.dev/rack"], "r2", "{n}: {labels}");
        assert_eq!(labels["topology.kubernetes.io/rack"], "r2", "{n}: {labels}");
        assert_eq!(labels["accord.dev/gpu.count"], "8", "{n}: {labels}");
        // The lab's own (GPU feature discovery's) label stays.
        assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
    }
    lab.wait_lab(
        "accordd's reservation taint on r3-n1",
        Duration::from_secs(30),
        |lab| {
            node(lab, "r3-n1")["spec"]["taints"]
                .as_array()
                .is_some_and(|ts| {
                    ts.iter().any(|t| {
                        t["key"] == "accord.dev/reservation"
                            && t["value"] == "research"
                            && t["effect"] == "NoSchedule"
                    })
                })
        },
    )
    .await
    .unwrap();
    let reserved = node(&lab, "r3-n1");
    assert_eq!(
        reserved["metadata"]["labels"]["accord.dev/reservation"], "research",
        "{reserved}"
    );
    let patches: Vec<String> = lab
        .api
        .fake()
        .expect("these tests run on the fake API")
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("PATCH /api/v1/nodes/"))
        .collect();
    for n in ["r2-n1", "r3-n1"] {
        assert!(
            patches
                .iter()
                .any(|p| p.starts_with(&format!("PATCH /api/v1/nodes/{n}"))),
            "{n}: {patches:?}"
        );
    }
    // r1-n1's last report stays its model (it is on; the Node says 7).
    assert_eq!(
        node(&lab, "r1-n1")["status"]["allocatable"]["nvidia.com/gpu"],
        "7"
    );
}

/// A pending plain GPU pod (no gang, no claim) on a cluster of each
/// version: accordd starts, watches what is served, says what is not, and
/// powers on a node for the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_starts_and_powers_on_for_a_plain_gpu_pod_on_1_31_1_34_and_1_37() {
    let _slot = shared_world().await;
    const SMALL: &str = r#"
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1Ti"

[[fleet.racks]]
name = "r1"

[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
"#;
    const POD: &str = "{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: one}, \
        spec: {containers: [{name: t, image: t, resources: {requests: {cpu: \"1\", memory: 8Gi}, \
        limits: {nvidia.com/gpu: \"1\"}}}]}}\n";
    for (version, dra, pod_group) in [
        ("1.31", false, false),
        ("1.34", true, false),
        ("1.37", true, true),
    ] {
        let settings = format!("{QUICK}\nkube_version = \"{version}\"\n");
        let lab = start(
            &format!("plain_gpu_pod_on_{}", version.replace('.', "_")),
            scenario(&settings, SMALL, &[("one", POD.to_owned(), 600_000)]),
        )
        .await;
        let st = current_status(&lab).await;
        let served = |kind: &str| {
            st.watches
                .iter()
                .find(|w| w.kind == kind)
                .unwrap_or_else(|| panic!("{version}: {kind} not in {:?}", st.watches))
                .api_version
                .clone()
        };
        assert_eq!(served("Pod").as_deref(), Some("v1"), "{version}");
        assert_eq!(
            served("ResourceClaim").is_some(),
            dra,
            "{version}: {:?}",
            st.watches
        );
        if dra {
            assert_eq!(
                served("ResourceSlice").as_deref(),
                Some("resource.k8s.io/v1")
            );
        }
        let podgroup = st
            .watches
            .iter()
            .find(|w| {
                w.kind == "PodGroup"
                    && w.api_version
                        .as_deref()
                        .is_none_or(|v| v.starts_with("scheduling.k8s.io/"))
            })
            .unwrap_or_else(|| {
                panic!(
                    "{version}: no scheduling.k8s.io PodGroup in {:?}",
                    st.watches
                )
            });
        assert_eq!(
            podgroup.api_version.is_some(),
            pod_group,
            "{version}: {podgroup:?}"
        );
        lab.release("one").unwrap();
        bound(&lab, "one", Duration::from_secs(90)).await;
        assert_eq!(lab.nodes_powered_on().len(), 1, "{version}");
        println!("{version}: watched {:?}", st.watches);
        lab.stop_daemon(Duration::from_secs(20)).await.unwrap();
    }
}
