//! Volumes in plans: a bound PV's node affinity (VolumeBinding), available
//! local PVs that claims waiting for their consumer bind (one claim per
//! PV, pods placed earlier in the plan included), CSINode attach limits
//! (NodeVolumeLimits), and pods no node will do, each in the plugin's
//! words.

use std::collections::BTreeSet;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::plan::{filter_nodes, plan, Action, Plan};

const HOST: &str = "kubernetes.io/hostname";

/// Four dark 8-GPU nodes; `on` are powered.
fn fleet(on: &[&str]) -> Fleet {
    let mut text = String::from(
        r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.0
"#,
    );
    for name in ["n1", "n2", "n3", "n4"] {
        let power = if on.contains(&name) { "on" } else { "off" };
        text.push_str(&format!(
            "\n[[nodes]]\nname = \"{name}\"\nprofile = \"h100\"\npower = \"{power}\"\n"
        ));
    }
    Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap()
}

fn on_host(host: &str) -> serde_json::Value {
    serde_json::json!([ { "match_expressions": [ { "key": HOST, "operator": "In", "values": [host] } ] } ])
}

fn pod(gpus: u32, volumes: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "requests": { "nvidia.com/gpu": gpus.to_string() }, "volumes": volumes })
}

fn workload(name: &str, pod: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "name": name, "namespace": "ml",
        "pod_sets": [ { "name": "w", "count": 1, "pod": pod } ] })
}

fn run(fleet: &Fleet, demand: serde_json::Value) -> Plan {
    let demand = Demand::from_json(&demand.to_string(), "demand.json").unwrap();
    plan(fleet, &demand, &fleet.policy, 0)
}

fn powered(p: &Plan) -> BTreeSet<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

fn node_of(p: &Plan, w: &str) -> Option<String> {
    p.placements
        .iter()
        .find(|x| x.workload == w)
        .and_then(|x| x.pods.first())
        .map(|p| p.node.clone())
}

#[test]
fn a_pod_whose_claim_is_bound_to_a_local_pv_goes_where_the_pv_is() {
    // n1 is up with room; the PV lives on dark n3: n3 is powered, not n1.
    let f = fleet(&["n1"]);
    let volumes =
        serde_json::json!({ "bound": [ { "pv": "local-n3", "node_affinity": on_host("n3") } ] });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("db", pod(1, volumes)) ] }),
    );
    assert_eq!(node_of(&p, "ml/db").as_deref(), Some("n3"), "{p:#?}");
    assert_eq!(powered(&p), BTreeSet::from(["n3".to_owned()]));
}

#[test]
fn waiting_claims_take_one_available_pv_each_across_the_plan() {
    // Two pods, each with its own claim of a class with no provisioner;
    // the available local PVs are on n2 and n4. The first pod's PV is
    // taken for the second, which goes to the other PV's node.
    let f = fleet(&[]);
    let claim = |name: &str| {
        serde_json::json!({ "waiting": [ { "claim": format!("ml/{name}"), "size": 10,
            "candidates": [ { "pv": "pv-n2", "node_affinity": on_host("n2") },
                            { "pv": "pv-n4", "node_affinity": on_host("n4") } ] } ] })
    };
    let p = run(
        &f,
        serde_json::json!({ "workloads": [
            workload("a", pod(1, claim("data-a"))),
            workload("b", pod(1, claim("data-b"))) ] }),
    );
    let mut nodes: Vec<String> = ["ml/a", "ml/b"]
        .iter()
        .filter_map(|w| node_of(&p, w))
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n2", "n4"], "{p:#?}");
    assert_eq!(powered(&p).len(), 2);
    // Two pods sharing one claim: the second follows the PV the first bound.
    let shared = claim("shared");
    let p = run(
        &f,
        serde_json::json!({ "workloads": [
            workload("a", pod(1, shared.clone())), workload("b", pod(1, shared)) ] }),
    );
    assert_eq!(node_of(&p, "ml/a"), node_of(&p, "ml/b"), "{p:#?}");
    assert_eq!(powered(&p).len(), 1);
}

#[test]
fn a_node_at_its_csi_attach_limit_takes_no_new_volume() {
    // n1 and n2 are up; n1 holds one volume of the driver and may attach
    // one: a pod with another volume goes to n2, one that reuses the
    // attached volume may stay on n1.
    let f = fleet(&["n1", "n2"]);
    let csi = |h: &str| serde_json::json!({ "driver": "disk.csi.example", "handle": h });
    let demand = |handle: &str| {
        serde_json::json!({
            "csi_limits": { "n1": { "disk.csi.example": 1 }, "n2": { "disk.csi.example": 4 } },
            "bound": [ { "node": "n1", "namespace": "ml", "name": "old",
                "requests": { "nvidia.com/gpu": "1" }, "csi_volumes": [ csi("vol-1") ] } ],
            "workloads": [ workload("new", pod(1, serde_json::json!({ "csi": [ csi(handle) ] }))) ] })
    };
    let demand_json = demand("vol-2");
    let p = run(&f, demand_json.clone());
    assert_eq!(node_of(&p, "ml/new").as_deref(), Some("n2"), "{p:#?}");
    let d = Demand::from_json(&demand_json.to_string(), "demand.json").unwrap();
    let verdicts = filter_nodes(&f, &d, &f.policy, 0, "ml/new").unwrap();
    let n1 = verdicts.iter().find(|(n, _)| n == "n1").unwrap();
    assert_eq!(
        n1.1.as_ref().map(|f| f.category.as_str()),
        Some("NodeVolumeLimits: node(s) exceed max volume count")
    );
    let p = run(&f, demand("vol-1"));
    assert!(node_of(&p, "ml/new").is_some(), "{p:#?}");
}

#[test]
fn a_blocked_pod_is_placed_nowhere_and_says_why_in_the_plugins_words() {
    let f = fleet(&["n1"]);
    let volumes = serde_json::json!({ "blocked": { "plugin": "VolumeBinding",
        "reason": "pod has unbound immediate PersistentVolumeClaims" } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("stuck", pod(1, volumes)) ] }),
    );
    assert!(node_of(&p, "ml/stuck").is_none());
    assert!(powered(&p).is_empty());
    let why = &p
        .unsatisfied
        .iter()
        .find(|u| u.workload == "ml/stuck")
        .expect("unsatisfied")
        .reason;
    assert!(
        why.contains("VolumeBinding: pod has unbound immediate PersistentVolumeClaims"),
        "{why}"
    );
}

#[test]
fn a_class_provisions_only_where_its_allowed_topologies_admit() {
    // No PV: the claim is provisioned, and the class allows n4 only.
    let f = fleet(&["n1"]);
    let volumes = serde_json::json!({ "waiting": [ { "claim": "ml/scratch", "size": 1,
        "provisioning": on_host("n4") } ] });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("w", pod(1, volumes)) ] }),
    );
    assert_eq!(node_of(&p, "ml/w").as_deref(), Some("n4"), "{p:#?}");
    // A class that cannot provision, and no PV: nowhere, in the words.
    let volumes = serde_json::json!({ "waiting": [ { "claim": "ml/scratch", "size": 1 } ] });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("w", pod(1, volumes)) ] }),
    );
    assert!(node_of(&p, "ml/w").is_none());
    assert!(p.unsatisfied[0]
        .reason
        .contains("VolumeBinding: node(s) didn't find available persistent volumes to bind"));
}
