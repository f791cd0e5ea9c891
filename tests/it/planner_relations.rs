//! Pod-to-pod filters in plans: required pod anti-affinity and affinity
//! (kube-scheduler's InterPodAffinity), DoNotSchedule topology spread
//! (PodTopologySpread) and host ports (NodePorts), with the pods placed
//! earlier in the same plan counting as bound pods do.

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::plan::{plan, Action, Plan};

const RACK: &str = "topology.accord.dev/rack";
const HOST: &str = "kubernetes.io/hostname";

/// Three racks of two 8-GPU nodes; `on` are powered.
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
    for r in ["r1", "r2", "r3"] {
        text.push_str(&format!("\n[[racks]]\nname = \"{r}\"\n"));
    }
    for r in ["r1", "r2", "r3"] {
        for n in ["a", "b"] {
            let name = format!("{r}-{n}");
            let power = if on.contains(&name.as_str()) {
                "on"
            } else {
                "off"
            };
            text.push_str(&format!(
                "\n[[nodes]]\nname = \"{name}\"\nrack = \"{r}\"\nprofile = \"h100\"\npower = \"{power}\"\n"
            ));
        }
    }
    Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap()
}

fn run(fleet: &Fleet, demand: serde_json::Value) -> Plan {
    let demand = Demand::from_json(&demand.to_string(), "demand.json").unwrap();
    plan(fleet, &demand, &fleet.policy, 0)
}

fn term(app: &str, key: &str) -> serde_json::Value {
    serde_json::json!({ "selector": { "match_labels": { "app": app } }, "topology_key": key })
}

fn workload(name: &str, count: u32, gpus: u32, pod: serde_json::Value) -> serde_json::Value {
    let mut pod = pod;
    pod["requests"] = serde_json::json!({ "nvidia.com/gpu": gpus.to_string() });
    serde_json::json!({ "name": name, "namespace": "ml",
        "pod_sets": [ { "name": "w", "count": count, "pod": pod } ] })
}

fn nodes_of(p: &Plan, workload: &str) -> Vec<String> {
    p.placements
        .iter()
        .find(|w| w.workload == workload)
        .map(|w| w.pods.iter().map(|p| p.node.clone()).collect())
        .unwrap_or_default()
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

#[test]
fn a_gang_that_wants_a_machine_per_pod_is_planned_one_per_node() {
    // The issue's case: four 2-GPU workers, each on its own machine, every
    // machine dark. Without anti-affinity all four fit one 8-GPU node.
    let f = fleet(&[]);
    let pod = serde_json::json!({ "labels": { "app": "w" },
        "relations": { "anti_affinity": [ term("w", HOST) ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("train", 4, 2, pod) ] }),
    );
    let nodes = nodes_of(&p, "ml/train");
    let distinct: BTreeSet<&String> = nodes.iter().collect();
    assert_eq!(nodes.len(), 4, "{p:?}");
    assert_eq!(distinct.len(), 4, "one pod per node: {nodes:?}");
    assert_eq!(powered(&p).len(), 4, "exactly the nodes it binds to");
    assert_eq!(
        powered(&p),
        distinct.into_iter().cloned().collect::<BTreeSet<_>>()
    );

    // Without the labels the term matches nothing: one node holds all four.
    let unlabelled = serde_json::json!({ "relations": { "anti_affinity": [ term("w", HOST) ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("train", 4, 2, unlabelled) ] }),
    );
    assert_eq!(powered(&p).len(), 1);
}

#[test]
fn anti_affinity_over_racks_takes_one_node_per_rack_and_says_why_not_more() {
    let f = fleet(&["r1-a", "r1-b"]);
    let pod = serde_json::json!({ "labels": { "app": "w" },
        "relations": { "anti_affinity": [ term("w", RACK) ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("three", 3, 1, pod.clone()) ] }),
    );
    let racks: BTreeSet<String> = nodes_of(&p, "ml/three")
        .iter()
        .map(|n| n[..2].to_owned())
        .collect();
    assert_eq!(racks.len(), 3, "{p:?}");
    // Four cannot be placed: three racks. The reason is the plugin's.
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("four", 4, 1, pod) ] }),
    );
    assert!(p.placements.is_empty());
    let why = &p.unsatisfied[0].reason;
    assert!(
        why.contains("InterPodAffinity: node(s) didn't match pod anti-affinity rules"),
        "{why}"
    );
}

#[test]
fn a_bound_pods_anti_affinity_keeps_pending_pods_off_its_node() {
    let f = fleet(&["r1-a", "r1-b"]);
    let bound = serde_json::json!({ "node": "r1-a", "namespace": "ml", "name": "guard",
        "labels": { "app": "guard" },
        "relations": { "anti_affinity": [ term("w", HOST) ] } });
    let pod = serde_json::json!({ "labels": { "app": "w" } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("one", 1, 8, pod) ], "bound": [ bound ] }),
    );
    assert_eq!(nodes_of(&p, "ml/one"), ["r1-b"]);
    // Its namespace only: the same pod in another namespace is not avoided.
    let mut other = workload("one", 1, 8, serde_json::json!({ "labels": { "app": "w" } }));
    other["namespace"] = "web".into();
    let bound = serde_json::json!({ "node": "r1-a", "namespace": "ml", "name": "guard",
        "relations": { "anti_affinity": [ term("w", HOST) ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ other ], "bound": [ bound ] }),
    );
    assert_eq!(nodes_of(&p, "web/one"), ["r1-a"]);
}

#[test]
fn required_affinity_follows_the_pods_it_needs_or_starts_a_series() {
    let f = fleet(&["r1-a", "r1-b", "r2-a"]);
    let bound = serde_json::json!({ "node": "r2-a", "namespace": "ml", "name": "db-0",
        "labels": { "app": "db" } });
    let pod = serde_json::json!({ "relations": { "affinity": [ term("db", RACK) ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("near-db", 2, 4, pod.clone()) ], "bound": [ bound ] }),
    );
    assert!(
        nodes_of(&p, "ml/near-db")
            .iter()
            .all(|n| n.starts_with("r2")),
        "{p:?}"
    );
    // No db pod anywhere and the pod is no db: nowhere.
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("near-db", 1, 4, pod) ] }),
    );
    assert!(p.placements.is_empty());
    assert!(p.unsatisfied[0]
        .reason
        .contains("InterPodAffinity: node(s) didn't match pod affinity rules"));
    // Pods with affinity to each other: the first goes anywhere, the rest
    // with it (kube-scheduler's first-of-a-series rule).
    let series = serde_json::json!({ "labels": { "app": "w" },
        "relations": { "affinity": [ term("w", HOST) ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("pack", 4, 2, series) ] }),
    );
    let nodes: BTreeSet<String> = nodes_of(&p, "ml/pack").into_iter().collect();
    assert_eq!(nodes.len(), 1, "{p:?}");
}

#[test]
fn spread_over_racks_powers_a_node_in_each_rack() {
    // Six pods, maxSkew 1 over three racks, only r1 powered: the scheduler
    // counts every rack (their Nodes exist), so each takes two.
    let f = fleet(&["r1-a", "r1-b"]);
    let pod = serde_json::json!({ "labels": { "app": "web" },
        "relations": { "spread": [ { "max_skew": 1, "topology_key": RACK,
            "selector": { "match_labels": { "app": "web" } } } ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("web", 6, 1, pod) ] }),
    );
    let mut per_rack: BTreeMap<String, u32> = BTreeMap::new();
    for n in nodes_of(&p, "ml/web") {
        *per_rack.entry(n[..2].to_owned()).or_default() += 1;
    }
    assert_eq!(
        per_rack,
        BTreeMap::from([("r1".into(), 2), ("r2".into(), 2), ("r3".into(), 2)]),
        "{p:?}"
    );
    let racks_powered: BTreeSet<String> = powered(&p).iter().map(|n| n[..2].to_owned()).collect();
    assert_eq!(racks_powered, BTreeSet::from(["r2".into(), "r3".into()]));
    assert_eq!(powered(&p).len(), 2, "one node in each dark rack");
}

#[test]
fn spread_counts_pods_already_bound() {
    // r1 already runs two web pods: the next two go to r2 and r3 (a third
    // in r1 would make the skew 3 - 0 > 1).
    let f = fleet(&["r1-a", "r1-b", "r2-a", "r3-a"]);
    let bound = |n: &str, name: &str| serde_json::json!({ "node": n, "namespace": "ml", "name": name, "labels": { "app": "web" } });
    let pod = serde_json::json!({ "labels": { "app": "web" },
        "relations": { "spread": [ { "max_skew": 1, "topology_key": RACK,
            "selector": { "match_labels": { "app": "web" } } } ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("web", 2, 1, pod) ],
            "bound": [ bound("r1-a", "web-0"), bound("r1-b", "web-1") ] }),
    );
    let mut nodes = nodes_of(&p, "ml/web");
    nodes.sort();
    assert_eq!(nodes, ["r2-a", "r3-a"], "{p:?}");
}

#[test]
fn host_ports_take_one_pod_per_node() {
    let f = fleet(&["r1-a", "r1-b"]);
    let pod = serde_json::json!({ "relations": { "host_ports": [ { "port": 8080 } ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("agents", 3, 1, pod) ] }),
    );
    let nodes: BTreeSet<String> = nodes_of(&p, "ml/agents").into_iter().collect();
    assert_eq!(nodes.len(), 3, "{p:?}");
    assert_eq!(powered(&p).len(), 1);
    // Another protocol is another port.
    let bound = serde_json::json!({ "node": "r1-a", "namespace": "x", "name": "dns",
        "relations": { "host_ports": [ { "port": 8080, "protocol": "UDP" } ] } });
    let one = serde_json::json!({ "relations": { "host_ports": [ { "port": 8080 } ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("tcp", 1, 8, one) ], "bound": [ bound ] }),
    );
    assert_eq!(nodes_of(&p, "ml/tcp"), ["r1-a"]);
}

#[test]
fn plans_with_relations_are_deterministic() {
    let f = fleet(&["r1-a"]);
    let pod = serde_json::json!({ "labels": { "app": "w" },
        "relations": { "anti_affinity": [ term("w", HOST) ],
            "spread": [ { "max_skew": 1, "topology_key": RACK,
                "selector": { "match_labels": { "app": "w" } } } ] } });
    let d = serde_json::json!({ "workloads": [ workload("a", 5, 2, pod.clone()), workload("b", 1, 2, pod) ] });
    let first = serde_json::to_string(&run(&f, d.clone())).unwrap();
    for _ in 0..3 {
        assert_eq!(serde_json::to_string(&run(&f, d.clone())).unwrap(), first);
    }
}

#[test]
fn machines_never_registered_are_no_spread_domains_until_powered_on() {
    // Only r1's Nodes were ever seen (r2 and r3 never registered): to the
    // scheduler r1 is the only domain, so it binds all six there, and
    // powering r2 or r3 on for them would leave those machines unused.
    let mut f = fleet(&["r1-a", "r1-b"]);
    for n in f.nodes.iter_mut().filter(|n| n.name.starts_with("r1")) {
        let view = accord::truth::SchedulerView {
            labels: n.labels.clone(),
            taints: Vec::new(),
            allocatable: BTreeMap::new(),
            devices: None,
            counters: BTreeMap::new(),
        };
        n.apply_scheduler_view(&view);
    }
    let pod = serde_json::json!({ "labels": { "app": "web" },
        "relations": { "spread": [ { "max_skew": 1, "topology_key": RACK,
            "selector": { "match_labels": { "app": "web" } } } ] } });
    let p = run(
        &f,
        serde_json::json!({ "workloads": [ workload("web", 6, 1, pod) ] }),
    );
    assert!(
        nodes_of(&p, "ml/web").iter().all(|n| n.starts_with("r1")),
        "{p:?}"
    );
    assert!(powered(&p).is_empty());
}
