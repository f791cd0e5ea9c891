//! Reclaim on the real 1.37 control plane: a pod of another team borrows
//! a node of a lendable reservation; when the owner's gang arrives, accordd
//! evicts the borrower through the Eviction API (the API server deletes it
//! with its grace period, the lab's kubelet confirms), kube-scheduler binds
//! the gang on the two reserved nodes, and the unreserved node that would
//! otherwise have been powered on for it stays off.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord_lab::Scenario;

use crate::support;

const RECLAIM_ON_1_37: &str = r#"
[lab]
kube_version = "1.37"
runtime_config = ["scheduling.k8s.io/v1beta1=true"]
feature_gates = ["GenericWorkload=true"]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 300
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
power = "on"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
power = "on"
[[fleet.nodes]]
name = "r1-n3"
rack = "r1"
profile = "h100"
[[fleet.reservations]]
name = "team"
owner = { namespace = "team" }
nodes = ["r1-n1", "r1-n2"]
lendable = true
[[submit]]
name = "borrower"
run_ms = 600000
manifests = """
{apiVersion: v1, kind: Pod, metadata: {namespace: other, name: borrower}, spec: {terminationGracePeriodSeconds: 5, containers: [{name: b, image: b, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
"""
[[submit]]
name = "gang"
run_ms = 600000
manifests = """
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {namespace: team, name: gang}
spec:
  schedulingPolicy: {gang: {minCount: 2}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: team, name: gang-0}, spec: {schedulingGroup: {podGroupName: gang}, containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: team, name: gang-1}, spec: {schedulingGroup: {podGroupName: gang}, containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
"""
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_takes_its_lent_node_back_for_its_owners_gang_on_upstream_1_37() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(RECLAIM_ON_1_37, Path::new("reclaim-1.37.toml")).unwrap();
    let lab = support::lab::start("upstream-1.37-reclaim", s).await;
    lab.release("borrower").unwrap();
    support::lab::bound(&lab, "borrower", Duration::from_secs(120)).await;
    let lent = support::lab::nodes_of(&lab, "other/borrower");
    assert_eq!(lent.len(), 1, "{lent:?}");
    lab.release("gang").unwrap();
    support::lab::bound(&lab, "gang", Duration::from_secs(180)).await;

    let reserved: BTreeSet<String> = ["r1-n1", "r1-n2"].map(String::from).into();
    assert_eq!(support::lab::nodes_of(&lab, "team/gang-"), reserved);
    assert!(
        !lab.bound_pods().contains_key("other/borrower"),
        "the borrower was evicted: {:?}",
        lab.bound_pods()
    );
    assert!(
        !lab.nodes_powered_on().contains("r1-n3"),
        "no unreserved node powered on for the owner: {:?}",
        lab.nodes_powered_on()
    );
    let events = lab.api.list("events.k8s.io/v1", "Event");
    let said = events
        .iter()
        .find(|e| e["reason"] == "ReservationReclaimed" && e["regarding"]["name"] == "borrower");
    let said = said.unwrap_or_else(|| panic!("an Event on the borrower: {events:?}"));
    let note = said["note"].as_str().unwrap_or("");
    assert!(note.contains("team/gang"), "{note}");
}
