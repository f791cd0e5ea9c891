//! The twin for dark machines' Nodes (`policy.dark_nodes`): a machine
//! Accord powered off has its Node kept, then deleted once (with the uid
//! and resourceVersion seen), its copy surviving a restart between the
//! two; its kubelet's new registration gets back what it lacks and is held
//! behind the starting taint until it shows it; a machine that went dark
//! by itself keeps its Node; with `dark_nodes = "keep"` nothing is
//! deleted; and the plan for a dark machine is the same with its Node
//! object and without it.

use std::collections::BTreeMap;

use accord::demand::{BoundPod, Taint, TaintEffect};
use accord::lifecycle::{Deadlines, NodeLife, Stage};
use accord::truth::{KeptNode, SchedulerView, STARTING_TAINT_KEY};
use accordd::control::decide::dark::NodeObject;
use accordd::control::decide::{Decider, Decision, Snapshot};

use crate::support;
use support::twin::{decide_at, decider, power_offs, power_ons, T0};

const NODES: [&str; 3] = ["n1", "n2", "n3"];

fn fleet(dark_nodes: &str) -> String {
    let mut s = format!(
        "[policy]\nidle_power_off_after_s = 600\ndark_nodes = \"{dark_nodes}\"\n\
         [profiles.h100]\ngpus = 8\ngpu_model = \"NVIDIA H100 80GB HBM3\"\ncpu = \"192\"\nmemory = \"2Ti\"\n"
    );
    for (i, n) in NODES.iter().enumerate() {
        s.push_str(&format!(
            "[[racks]]\nname = \"r{i}\"\n[[nodes]]\nname = \"{n}\"\nrack = \"r{i}\"\nprofile = \"h100\"\n"
        ));
    }
    s
}

struct Twin {
    decider: Decider,
    world: Snapshot,
    now: u64,
    /// Node → registrations so far (its uid is `NODE-uid-N`).
    registrations: BTreeMap<String, u32>,
    lives: BTreeMap<String, NodeLife>,
    kept: BTreeMap<String, KeptNode>,
}

fn taint(key: &str, value: Option<&str>) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(str::to_owned),
        effect: TaintEffect::NoSchedule,
    }
}

fn work_pod(node: &str) -> BoundPod {
    serde_json::from_value(serde_json::json!({
        "node": node, "namespace": "ml", "name": format!("busy-{node}"),
        "requests": {"nvidia.com/gpu": "1"}
    }))
    .unwrap()
}

impl Twin {
    /// Every node on and registered; n1 carries an admin's label, taint
    /// and annotation; n2 and n3 run work.
    fn new(dark_nodes: &str) -> Twin {
        let mut t = Twin {
            decider: decider(&fleet(dark_nodes), Deadlines::default()),
            world: Snapshot::default(),
            now: T0,
            registrations: BTreeMap::new(),
            lives: BTreeMap::new(),
            kept: BTreeMap::new(),
        };
        t.decider.set_power_off_settle_s(1);
        for n in NODES {
            t.world.bmc.insert(n.into(), true);
            t.register(n, BTreeMap::new(), Vec::new());
        }
        let v = t.world.views.get_mut("n1").unwrap();
        v.labels.insert("team".into(), "vision".into());
        v.taints.push(taint("dedicated", Some("vision")));
        t.world
            .node_objects
            .get_mut("n1")
            .unwrap()
            .annotations
            .insert("owner".into(), "ml-infra".into());
        for n in ["n2", "n3"] {
            t.world.demand.bound.push(work_pod(n));
            t.world.pods_per_node.insert(n.into(), 1);
        }
        t.round(1);
        t.round(1);
        t
    }

    /// The machine's kubelet registers its Node (a new uid each time).
    fn register(&mut self, node: &str, labels: BTreeMap<String, String>, taints: Vec<Taint>) {
        let n = self.registrations.entry(node.into()).or_default();
        *n += 1;
        let uid = format!("{node}-uid-{n}");
        self.world.kube_ready.insert(node.into(), true);
        self.world.views.insert(
            node.into(),
            SchedulerView {
                labels,
                taints,
                ..SchedulerView::default()
            },
        );
        self.world.node_objects.insert(
            node.into(),
            NodeObject {
                uid,
                resource_version: "1".into(),
                annotations: BTreeMap::new(),
            },
        );
    }

    /// A write to the Node: its resourceVersion moves.
    fn touched(&mut self, node: &str) {
        let o = self.world.node_objects.get_mut(node).unwrap();
        o.resource_version = (o.resource_version.parse::<u64>().unwrap() + 1).to_string();
    }

    /// One round; the API server takes what it publishes, restores and
    /// deletes; what the store would keep is kept.
    fn round(&mut self, after_s: u64) -> Decision {
        self.now += after_s;
        for n in NODES {
            if self.world.kube_ready.get(n) == Some(&true) {
                self.world.agents.insert(n.into(), self.now);
                self.world.agent_reports.entry(n.into()).or_insert(self.now);
            }
        }
        let d = decide_at(&mut self.decider, &self.world, self.now);
        for (node, p) in &d.publish {
            if let Some(view) = self.world.views.get_mut(node) {
                view.labels.retain(|k, _| {
                    !k.starts_with("topology.accord.dev/") && !k.starts_with("accord.dev/")
                });
                view.labels.extend(p.labels.clone());
                view.taints.retain(|t| !accord::truth::owns_taint(&t.key));
                view.taints.extend(p.taints.clone());
                self.touched(node);
            }
        }
        for (node, r) in &d.dark.restores {
            if self
                .world
                .node_objects
                .get(node)
                .is_some_and(|o| o.uid == r.uid)
            {
                let view = self.world.views.get_mut(node).unwrap();
                for (k, v) in &r.labels {
                    view.labels.entry(k.clone()).or_insert(v.clone());
                }
                view.taints.extend(r.taints.clone());
                let o = self.world.node_objects.get_mut(node).unwrap();
                o.annotations.extend(r.annotations.clone());
                self.touched(node);
            }
        }
        for del in &d.dark.deletes {
            let o = &self.world.node_objects[&del.node];
            if o.uid == del.uid && o.resource_version == del.resource_version {
                self.node_gone(&del.node);
            }
        }
        for (n, l) in &d.lives_changed {
            self.lives.insert(n.clone(), l.clone());
        }
        for (n, k) in &d.dark.kept {
            match k {
                Some(k) => self.kept.insert(n.clone(), k.clone()),
                None => self.kept.remove(n),
            };
        }
        d
    }

    /// The Node is gone (deleted; the pod garbage collector takes its pods).
    fn node_gone(&mut self, node: &str) {
        self.world.views.remove(node);
        self.world.node_objects.remove(node);
        self.world.kube_ready.remove(node);
        self.world.demand.bound.retain(|b| b.node != node);
        self.world.pods_per_node.remove(node);
    }

    fn stage(&self, node: &str) -> Stage {
        self.decider.life(node).unwrap().stage
    }

    /// Idle n1 goes through its taint and power-off to Off (BMC Off).
    fn n1_goes_dark(&mut self) {
        let d = self.round(600);
        assert!(power_offs(&d).is_empty(), "the taint first: {:?}", d.power);
        let mut off = Vec::new();
        for _ in 0..4 {
            off.extend(power_offs(&self.round(1)));
        }
        assert_eq!(off, ["n1"]);
        self.world.bmc.insert("n1".into(), false);
        self.world.kube_ready.insert("n1".into(), false);
        self.world.agents.remove("n1");
    }
}

/// One pod asking `requests` that tolerates n1's admin taint.
fn tolerating(name: &str, requests: serde_json::Value) -> Vec<accord::demand::Workload> {
    accord::demand::Demand::from_json(
        &serde_json::json!({"workloads": [{"name": name, "namespace": "ml",
            "pod_sets": [{"name": "w", "count": 1, "pod": {"requests": requests,
                "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}]}]})
        .to_string(),
        "demand.json",
    )
    .unwrap()
    .workloads
}

fn deletes(d: &Decision) -> Vec<(String, String)> {
    d.dark
        .deletes
        .iter()
        .map(|x| (x.node.clone(), x.uid.clone()))
        .collect()
}

#[test]
fn a_node_accord_powered_off_is_kept_then_deleted_once_and_restored_when_it_registers() {
    let mut t = Twin::new("delete");
    t.n1_goes_dark();
    // Off: first its copy is kept (the store has it before any delete).
    let d = t.round(1);
    assert_eq!(t.stage("n1"), Stage::Off);
    assert!(deletes(&d).is_empty(), "{:?}", d.dark);
    let kept = t.kept.get("n1").expect("kept").clone();
    assert_eq!(kept.uid, "n1-uid-1");
    assert_eq!(kept.labels.get("team").map(String::as_str), Some("vision"));
    assert_eq!(kept.taints, [taint("dedicated", Some("vision"))]);
    assert_eq!(
        kept.annotations.get("owner").map(String::as_str),
        Some("ml-infra")
    );
    assert!(kept
        .labels
        .keys()
        .all(|k| !k.starts_with("topology.accord.dev/")));
    // Then deleted, with the uid and resourceVersion seen; n2 and n3 (work
    // on them) never.
    let d = t.round(1);
    assert_eq!(deletes(&d), [("n1".to_owned(), "n1-uid-1".to_owned())]);
    assert!(!t.world.views.contains_key("n1"));
    for _ in 0..5 {
        let d = t.round(30);
        assert!(deletes(&d).is_empty(), "once: {:?}", d.dark);
    }
    assert!(t.kept.contains_key("n1"), "kept while it is dark");
    // Work for n1: powered on; its kubelet registers a new Node with its
    // own labels and the starting taint.
    for n in ["n2", "n3"] {
        t.world.demand.bound.push(
            serde_json::from_value(serde_json::json!({
                "node": n, "namespace": "ml", "name": format!("full-{n}"),
                "requests": {"nvidia.com/gpu": "7"}
            }))
            .unwrap(),
        );
    }
    t.world.demand.workloads = tolerating("job", serde_json::json!({"nvidia.com/gpu": "8"}));
    let d = t.round(1);
    assert_eq!(power_ons(&d), ["n1"], "{:?}", d.power);
    t.world.bmc.insert("n1".into(), true);
    t.round(1);
    t.register(
        "n1",
        [("kubernetes.io/hostname".to_owned(), "n1".to_owned())].into(),
        vec![taint(STARTING_TAINT_KEY, None)],
    );
    // Its kept keys go back, and it stays behind the starting taint until
    // it shows them.
    let d = t.round(1);
    let (node, restore) = &d.dark.restores[0];
    assert_eq!(node, "n1");
    assert_eq!(restore.uid, "n1-uid-2");
    assert_eq!(
        restore.labels.get("team").map(String::as_str),
        Some("vision")
    );
    assert_eq!(restore.taints, [taint("dedicated", Some("vision"))]);
    assert_eq!(
        restore.annotations.get("owner").map(String::as_str),
        Some("ml-infra")
    );
    let v = &t.world.views["n1"];
    assert!(v.taints.contains(&taint(STARTING_TAINT_KEY, None)), "{v:?}");
    // Shown: the copy is dropped and the starting taint lifted (once the
    // node is Ready and not held for a gang).
    let mut lifted = false;
    for _ in 0..4 {
        t.round(1);
        lifted |= !t.world.views["n1"]
            .taints
            .contains(&taint(STARTING_TAINT_KEY, None));
    }
    assert!(!t.kept.contains_key("n1"));
    assert!(lifted, "{:?}", t.world.views["n1"]);
    assert!(t.world.views["n1"]
        .taints
        .contains(&taint("dedicated", Some("vision"))));
}

#[test]
fn a_restart_between_the_power_off_and_the_delete_deletes_the_node_once() {
    let mut t = Twin::new("delete");
    t.n1_goes_dark();
    t.round(1);
    assert!(t.kept.contains_key("n1"));
    // kill -9: a new decider from what the store kept.
    let mut fresh = decider(&fleet("delete"), Deadlines::default());
    fresh.seed_state(t.lives.clone(), BTreeMap::new());
    fresh.seed_views(t.world.views.clone());
    fresh.seed_kept_nodes(t.kept.clone());
    t.decider = fresh;
    let mut sent = Vec::new();
    for _ in 0..4 {
        sent.extend(deletes(&t.round(1)));
    }
    assert_eq!(sent, [("n1".to_owned(), "n1-uid-1".to_owned())]);
    assert_eq!(
        t.kept["n1"].labels.get("team").map(String::as_str),
        Some("vision")
    );
}

#[test]
fn an_admins_change_after_the_copy_is_kept_again_before_the_delete() {
    let mut t = Twin::new("delete");
    t.n1_goes_dark();
    t.round(1);
    t.world
        .views
        .get_mut("n1")
        .unwrap()
        .labels
        .insert("late".into(), "yes".into());
    t.touched("n1");
    let d = t.round(1);
    assert!(deletes(&d).is_empty(), "kept again first: {:?}", d.dark);
    assert_eq!(
        t.kept["n1"].labels.get("late").map(String::as_str),
        Some("yes")
    );
    let d = t.round(1);
    assert_eq!(deletes(&d).len(), 1);
}

/// Five rounds, 30 s apart, keep no copy and delete no Node.
fn nothing_kept_nor_deleted(t: &mut Twin) {
    for _ in 0..5 {
        let d = t.round(30);
        assert!(
            d.dark.deletes.is_empty() && d.dark.kept.is_empty(),
            "{:?}",
            d.dark
        );
    }
}

#[test]
fn a_machine_dark_by_itself_and_dark_nodes_keep_delete_nothing() {
    // n1 loses power without Accord: no powering-off taint on its Node.
    let mut t = Twin::new("delete");
    t.world.bmc.insert("n1".into(), false);
    t.world.kube_ready.insert("n1".into(), false);
    t.world.agents.remove("n1");
    nothing_kept_nor_deleted(&mut t);
    assert_eq!(t.stage("n1"), Stage::Off);
    // policy.dark_nodes = "keep": powered off by Accord, its Node stays.
    let mut t = Twin::new("keep");
    t.n1_goes_dark();
    nothing_kept_nor_deleted(&mut t);
    assert!(t.world.views.contains_key("n1"));
}

/// Pods spread one per node, where n1 is dark: its Node deleted or not
/// yet, the plan is the same (n1 is no topology domain either way, and
/// the pods still bound to its Node are no load there).
#[test]
fn the_plan_for_a_dark_machine_is_the_same_with_and_without_its_node() {
    let demand = accord::demand::Demand::from_json(
        &serde_json::json!({"workloads": [{"name": "spread", "namespace": "ml",
            "pod_sets": [{"name": "w", "count": 3, "pod": {
                "requests": {"nvidia.com/gpu": "2", "cpu": "100"},
                "labels": {"app": "spread"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "relations": {"spread": [{"max_skew": 1, "topology_key": "kubernetes.io/hostname",
                    "selector": {"match_labels": {"app": "spread"}}}]}}}]}]})
        .to_string(),
        "demand.json",
    );
    let demand = match demand {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    };
    let plan_of = |with_node: bool| {
        let mut t = Twin::new("delete");
        for n in NODES {
            t.world
                .views
                .get_mut(n)
                .unwrap()
                .labels
                .insert("kubernetes.io/hostname".into(), n.into());
        }
        // An old DaemonSet pod bound on n1, larger than the work leaves room
        // for: no load on a machine whose Node goes.
        t.world.demand.bound.push(
            serde_json::from_value(serde_json::json!({
                "node": "n1", "namespace": "kube-system", "name": "agent-n1",
                "requests": {"cpu": "150"}, "node_agent": true
            }))
            .unwrap(),
        );
        t.n1_goes_dark();
        t.round(1);
        if !with_node {
            t.node_gone("n1");
        } else {
            assert!(t.world.views.contains_key("n1"));
        }
        t.world.demand.workloads = demand.workloads.clone();
        let d = decide_at(&mut t.decider, &t.world, t.now + 1);
        (d.status.plan(), power_ons(&d))
    };
    let (with, ons_with) = plan_of(true);
    let (without, ons_without) = plan_of(false);
    assert_eq!(
        serde_json::to_string(&with).unwrap(),
        serde_json::to_string(&without).unwrap()
    );
    assert_eq!(ons_with, ons_without);
    assert_eq!(ons_with, ["n1"], "{with:?}");
}
