//! The twin for running nodes that fail: a node that was up whose
//! Kubernetes node goes NotReady and whose agent falls silent becomes
//! Unhealthy after `unhealthy_after_s`; its demand is planned elsewhere;
//! with repair on, an Unhealthy node with no pods is power-cycled (off,
//! then on once Off), at most `max_cycles_per_node` times and never while
//! too much of the fleet is unhealthy; a node with pods never is.

use accord::demand::{BoundPod, Demand, TaintEffect};
use accord::lifecycle::{Deadlines, Stage};
use accord::truth::{SchedulerView, POWERING_OFF_TAINT_KEY};
use accord_api::control::{
    AdminPowerAction, AdminPowerAnswer, AdminPowerOutcome, AdminPowerRequest,
};
use accordd::control::decide::{Decider, Decision, Repair, Snapshot};
use accordd::execute::Requested;
use accordd::shared::{AdminReply, RefusalKind};

use crate::support;
use support::twin::{decide_at, decider, pods, power_offs, power_ons, T0};

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"

[[racks]]
name = "r1"

[[nodes]]
name = "n1"
rack = "r1"
profile = "h100"

[[nodes]]
name = "n2"
rack = "r1"
profile = "h100"

[[nodes]]
name = "n3"
rack = "r1"
profile = "h100"
"#;

const UNHEALTHY_AFTER_S: u64 = 60;

fn one_gpu_pod() -> Demand {
    pods(
        "job",
        1,
        serde_json::json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}),
    )
}

struct Twin {
    decider: Decider,
    world: Snapshot,
    now: u64,
}

impl Twin {
    /// Every node on, its agent heard and its Kubernetes node Ready.
    fn new(repair: Repair) -> Twin {
        Twin::on(FLEET, repair)
    }

    /// As [`Twin::new`], on the fleet `text`.
    fn on(text: &str, repair: Repair) -> Twin {
        let mut decider = decider(
            text,
            Deadlines {
                unhealthy_after_s: UNHEALTHY_AFTER_S,
                ..Deadlines::default()
            },
        );
        decider.set_repair(repair);
        let mut t = Twin {
            decider,
            world: Snapshot::default(),
            now: T0,
        };
        for n in ["n1", "n2", "n3"] {
            t.world.bmc.insert(n.into(), true);
            t.world.kube_ready.insert(n.into(), true);
        }
        t.round(1);
        t.round(1);
        for n in ["n1", "n2", "n3"] {
            assert_eq!(t.stage(n), Stage::Idle, "{n}");
        }
        t
    }

    fn round(&mut self, after_s: u64) -> Decision {
        self.now += after_s;
        // Agents that are up report once (as they start), then heartbeat
        // every round.
        for n in ["n1", "n2", "n3"] {
            if self.world.kube_ready.get(n) == Some(&true) {
                self.world.agents.insert(n.into(), self.now);
                self.world.agent_reports.entry(n.into()).or_insert(self.now);
            }
        }
        decide_at(&mut self.decider, &self.world, self.now)
    }

    /// The machine hangs: kubelet and agent stop, the BMC still shows On.
    fn hangs(&mut self, node: &str) {
        self.world.kube_ready.insert(node.into(), false);
        self.world.agents.remove(node);
        self.world.agent_reports.remove(node);
    }

    fn stage(&self, node: &str) -> Stage {
        self.decider.life(node).unwrap().stage
    }
}

fn offs(d: &Decision) -> Vec<String> {
    power_offs(d)
}

fn ons(d: &Decision) -> Vec<String> {
    power_ons(d)
}

#[test]
fn a_node_that_stops_answering_becomes_unhealthy_and_its_demand_goes_elsewhere() {
    let mut t = Twin::new(Repair::default());
    // n1 runs the job.
    t.world.pods_per_node.insert("n1".into(), 1);
    t.round(1);
    assert_eq!(t.stage("n1"), Stage::InUse);
    t.hangs("n1");
    t.round(1);
    let d = t.round(UNHEALTHY_AFTER_S);
    assert_eq!(t.stage("n1"), Stage::InUse, "not before the limit");
    assert!(d.events.iter().all(|e| e.reason != "NodeUnhealthy"));
    let d = t.round(1);
    assert_eq!(t.stage("n1"), Stage::Unhealthy);
    let why = t.decider.life("n1").unwrap().reason.clone().unwrap();
    assert_eq!(
        why,
        "Kubernetes node NotReady and agent silent for more than 60 s"
    );
    let e = d
        .events
        .iter()
        .find(|e| e.reason == "NodeUnhealthy")
        .unwrap();
    assert!(e.warning && e.regarding.name == "n1", "{e:?}");
    assert_eq!(d.metrics.nodes_by_stage.get("unhealthy"), Some(&1));
    // Its pod was evicted and is pending again: planned on another node,
    // never on n1; and n1, with a pod still bound, is not powered off.
    t.world.demand = one_gpu_pod();
    let d = t.round(1);
    let placed = &d.status.placements[0];
    assert!(placed.pods.iter().all(|p| p.node != "n1"), "{placed:?}");
    assert!(offs(&d).is_empty());
    // Repair is off by default: nothing is power-cycled, ever.
    t.world.pods_per_node.clear();
    for _ in 0..3 {
        let d = t.round(10);
        assert!(offs(&d).is_empty() && ons(&d).is_empty(), "{:?}", d.power);
    }
    // Both back: Ready again.
    t.world.kube_ready.insert("n1".into(), true);
    t.round(1);
    assert!(matches!(t.stage("n1"), Stage::Idle | Stage::Ready));
}

#[test]
fn with_repair_an_empty_unhealthy_node_is_power_cycled_once_and_one_with_pods_never() {
    let mut t = Twin::new(Repair {
        enabled: true,
        max_cycles_per_node: 1,
        max_unhealthy_percent: 50,
    });
    // n2 has a pod and hangs: unhealthy, never power-cycled.
    t.world.pods_per_node.insert("n2".into(), 1);
    t.round(1);
    t.hangs("n2");
    t.round(1);
    t.round(UNHEALTHY_AFTER_S + 1);
    assert_eq!(t.stage("n2"), Stage::Unhealthy);
    for _ in 0..3 {
        let d = t.round(5);
        assert!(offs(&d).is_empty(), "{:?}", d.power);
    }
    // Its pod is gone (evicted): now it is repaired. Off first...
    t.world.pods_per_node.clear();
    let d = t.round(1);
    assert_eq!(offs(&d), ["n2"]);
    assert!(d.events.iter().any(|e| e.reason == "NodeRepair"));
    assert_eq!(d.metrics.commands, [("repair", "power_cycle")]);
    assert_eq!(t.stage("n2"), Stage::PoweringOff);
    let d = t.round(1);
    assert!(offs(&d).is_empty() && ons(&d).is_empty());
    // ...then on, once the BMC shows Off.
    t.world.bmc.insert("n2".into(), false);
    let d = t.round(5);
    assert_eq!(ons(&d), ["n2"]);
    assert_eq!(t.stage("n2"), Stage::PoweringOn);
    // It comes back.
    t.world.bmc.insert("n2".into(), true);
    t.world.kube_ready.insert("n2".into(), true);
    t.round(5);
    t.round(1);
    assert!(
        matches!(t.stage("n2"), Stage::Idle | Stage::Ready),
        "{:?}",
        t.stage("n2")
    );
    // It hangs again: one cycle was the limit.
    t.hangs("n2");
    t.round(1);
    t.round(UNHEALTHY_AFTER_S + 1);
    assert_eq!(t.stage("n2"), Stage::Unhealthy);
    for _ in 0..3 {
        let d = t.round(5);
        assert!(offs(&d).is_empty(), "{:?}", d.power);
    }
}

#[test]
fn no_repair_while_too_much_of_the_fleet_is_unhealthy() {
    let mut t = Twin::new(Repair {
        enabled: true,
        max_cycles_per_node: 3,
        // One node of three is 33 %: at or over the threshold, no repair.
        max_unhealthy_percent: 33,
    });
    t.hangs("n3");
    t.round(1);
    t.round(UNHEALTHY_AFTER_S + 1);
    assert_eq!(t.stage("n3"), Stage::Unhealthy);
    for _ in 0..3 {
        let d = t.round(5);
        assert!(offs(&d).is_empty(), "{:?}", d.power);
    }
}

/// `count` pods bound to `node`, as the translation gives them:
/// `node_agent` for a DaemonSet's, `do_not_disrupt` for one that opts out.
fn bound(node: &str, count: u32, node_agent: bool, do_not_disrupt: bool) -> Vec<BoundPod> {
    (0..count)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "node": node, "namespace": "kube-system", "name": format!("{node}-agent-{i}"),
                "requests": {"cpu": "10m", "memory": "32Mi"},
                "node_agent": node_agent, "do_not_disrupt": do_not_disrupt
            }))
            .unwrap()
        })
        .collect()
}

/// Each node runs four DaemonSet pods, as every real node does.
fn daemonset_pods_everywhere(t: &mut Twin) {
    for n in ["n1", "n2", "n3"] {
        t.world.demand.bound.extend(bound(n, 4, true, false));
        t.world.pods_per_node.insert(n.into(), 4);
    }
}

const IDLE_S: u64 = 600;

#[test]
fn nodes_that_run_only_daemonset_pods_are_idle_go_dark_and_are_repaired() {
    let mut t = Twin::new(Repair {
        enabled: true,
        max_cycles_per_node: 1,
        max_unhealthy_percent: 50,
    });
    daemonset_pods_everywhere(&mut t);
    // n2's node agent asks not to be disrupted (karpenter.sh/do-not-disrupt).
    t.world.demand.bound.extend(bound("n2", 1, true, true));
    *t.world.pods_per_node.get_mut("n2").unwrap() += 1;
    t.round(1);
    assert_eq!(t.stage("n1"), Stage::Idle, "node agents are no work");
    assert_eq!(t.stage("n2"), Stage::InUse);
    // n3 hangs: Unhealthy, and repaired though its node agents are bound.
    t.hangs("n3");
    t.round(1);
    let d = t.round(UNHEALTHY_AFTER_S + 1);
    assert_eq!(offs(&d), ["n3"], "{:?}", d.power);
    assert_eq!(t.stage("n3"), Stage::PoweringOff);
    // Past the idle time n1 goes dark; n2 stays on.
    let d = t.round(IDLE_S);
    assert_eq!(offs(&d), ["n1"], "{:?}", d.power);
    for _ in 0..3 {
        let d = t.round(IDLE_S);
        assert!(!offs(&d).contains(&"n2".to_owned()), "{:?}", d.power);
    }
}

#[test]
fn a_cordoned_node_is_never_unhealthy_repaired_or_powered_off_when_idle() {
    let repair = Repair {
        enabled: true,
        max_cycles_per_node: 1,
        max_unhealthy_percent: 50,
    };
    let mut t = Twin::new(repair);
    daemonset_pods_everywhere(&mut t);
    // The admin cordons n1 for maintenance and takes it down: its Node
    // goes NotReady and its agent silent.
    t.world.cordoned.insert("n1".into());
    t.hangs("n1");
    // n2 is annotated accord.dev/do-not-disrupt and hangs too.
    t.world.do_not_disrupt.insert("n2".into());
    t.hangs("n2");
    t.round(1);
    for _ in 0..3 {
        let d = t.round(UNHEALTHY_AFTER_S + 1);
        assert!(offs(&d).is_empty(), "{:?}", d.power);
    }
    assert_eq!(t.stage("n1"), Stage::Idle, "a cordon is not a fault");
    assert_eq!(t.stage("n2"), Stage::Unhealthy, "but is not repaired");
    // Past the idle time only n3 goes dark.
    let d = t.round(IDLE_S);
    assert_eq!(offs(&d), ["n3"], "{:?}", d.power);
    for _ in 0..3 {
        let d = t.round(IDLE_S);
        assert!(offs(&d).is_empty(), "{:?}", d.power);
    }
    // With policy.power_off_cordoned, an idle cordoned node goes dark too.
    let mut t = Twin::on(
        &format!("{FLEET}\n[policy]\npower_off_cordoned = true\n"),
        repair,
    );
    daemonset_pods_everywhere(&mut t);
    t.world.cordoned.insert("n1".into());
    t.round(1);
    let mut d = t.round(IDLE_S);
    let mut off = offs(&d);
    off.sort();
    assert_eq!(off, ["n1", "n2", "n3"], "{:?}", d.power);
    d = t.round(1);
    assert!(offs(&d).is_empty());
}

/// Every node registered in Kubernetes, as the scheduler sees it.
fn registered(t: &mut Twin) {
    for n in ["n1", "n2", "n3"] {
        t.world.views.insert(n.into(), SchedulerView::default());
    }
}

/// The API server takes what the decision publishes: the Nodes show it.
fn published(t: &mut Twin, d: &Decision) {
    for (node, p) in &d.publish {
        let view = t.world.views.get_mut(node).expect("a registered node");
        view.labels = p.labels.clone();
        view.taints = p.taints.clone();
    }
}

fn shows_powering_off(t: &Twin, node: &str) -> bool {
    t.world.views[node]
        .taints
        .iter()
        .any(|x| x.key == POWERING_OFF_TAINT_KEY && x.effect == TaintEffect::NoSchedule)
}

const SETTLE_S: u64 = 5;

#[test]
fn a_power_off_waits_for_its_taint_on_the_node_then_the_settle_time() {
    let mut t = Twin::new(Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    daemonset_pods_everywhere(&mut t);
    t.world.pods_per_node.insert("n2".into(), 5);
    t.world.demand.bound.extend(bound("n2", 1, false, false));
    t.round(1);
    // Past the idle time: n1 and n3 are tainted, not powered off.
    let first = t.round(IDLE_S);
    let d = &first;
    assert!(offs(d).is_empty(), "{:?}", d.power);
    let tainted: Vec<&str> = d
        .publish
        .iter()
        .filter(|(_, p)| p.taints.iter().any(|x| x.key == POWERING_OFF_TAINT_KEY))
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(tainted, ["n1", "n3"], "{:?}", d.publish);
    let st = d.status.nodes.iter().find(|n| n.name == "n1").unwrap();
    assert!(
        st.reason.as_deref().unwrap_or("").contains("powering off"),
        "{st:?}"
    );
    // Not while the Nodes do not show it (the write has not landed).
    for _ in 0..3 {
        let d = t.round(SETTLE_S);
        assert!(offs(&d).is_empty(), "{:?}", d.power);
    }
    // Shown on n1 only: n1 goes once the settle time has passed.
    let n1: Vec<_> = first
        .publish
        .iter()
        .filter(|(n, _)| n == "n1")
        .cloned()
        .collect();
    published(
        &mut t,
        &Decision {
            publish: n1,
            ..first
        },
    );
    assert!(shows_powering_off(&t, "n1") && !shows_powering_off(&t, "n3"));
    let d = t.round(1);
    assert!(offs(&d).is_empty(), "the taint just seen: {:?}", d.power);
    let d = t.round(SETTLE_S - 1);
    assert!(offs(&d).is_empty(), "{:?}", d.power);
    let d = t.round(1);
    assert_eq!(offs(&d), ["n1"], "{:?}", d.power);
    assert_eq!(t.stage("n1"), Stage::PoweringOff);
    // The taint stays while it powers off and while it is off...
    t.world.bmc.insert("n1".into(), false);
    t.world.kube_ready.insert("n1".into(), false);
    t.world.agents.remove("n1");
    for _ in 0..3 {
        let d = t.round(1);
        published(&mut t, &d);
    }
    assert_eq!(t.stage("n1"), Stage::Off);
    assert!(shows_powering_off(&t, "n1"));
    // ...and is lifted by the next power-on: n2 and n3 are full now, a
    // pending pod needs n1.
    for n in ["n2", "n3"] {
        t.world.demand.bound.push(
            serde_json::from_value(serde_json::json!({
                "node": n, "namespace": "ml", "name": format!("full-{n}"),
                "requests": {"nvidia.com/gpu": "8"}
            }))
            .unwrap(),
        );
        *t.world.pods_per_node.get_mut(n).unwrap() += 1;
    }
    t.world.demand.workloads = one_gpu_pod().workloads;
    let d = t.round(1);
    assert_eq!(ons(&d), ["n1"], "{:?}", d.power);
    published(&mut t, &d);
    assert_eq!(t.stage("n1"), Stage::PoweringOn);
    assert!(!shows_powering_off(&t, "n1"), "{:?}", t.world.views["n1"]);
}

/// A work pod bound to n1 while its power-off waits: the next rounds send
/// none, say `PowerOffCancelled` naming the pod, and lift the taint.
fn a_work_pod_slips_into_n1_and_cancels_its_power_off(t: &mut Twin) {
    t.world.demand.bound.extend(bound("n1", 1, false, false));
    *t.world.pods_per_node.get_mut("n1").unwrap() += 1;
    let mut cancelled = false;
    for _ in 0..4 {
        let d = t.round(SETTLE_S);
        assert!(!offs(&d).contains(&"n1".to_owned()), "{:?}", d.power);
        cancelled |= d.events.iter().any(|e| {
            e.reason == "PowerOffCancelled"
                && e.regarding.name == "n1"
                && e.note.contains("1 work pod(s)")
        });
        published(t, &d);
    }
    assert!(cancelled, "a PowerOffCancelled event for n1");
    assert!(!shows_powering_off(t, "n1"), "{:?}", t.world.views["n1"]);
    assert_eq!(t.stage("n1"), Stage::InUse);
}

#[test]
fn a_work_pod_that_slips_in_cancels_the_power_off_and_lifts_the_taint() {
    let mut t = Twin::new(Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    daemonset_pods_everywhere(&mut t);
    t.round(1);
    let d = t.round(IDLE_S);
    published(&mut t, &d);
    assert!(shows_powering_off(&t, "n1"));
    let d = t.round(1);
    assert!(offs(&d).is_empty(), "{:?}", d.power);
    // A pod bound straight to n1 (spec.nodeName: no scheduler, no taint
    // check) while it waits.
    a_work_pod_slips_into_n1_and_cancels_its_power_off(&mut t);
    // The others, idle, went dark.
    assert_eq!(t.stage("n2"), Stage::PoweringOff);
    assert_eq!(t.stage("n3"), Stage::PoweringOff);
}

#[test]
fn pending_work_placed_on_a_node_being_drained_cancels_its_power_off() {
    let mut t = Twin::new(Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    daemonset_pods_everywhere(&mut t);
    t.round(1);
    let d = t.round(IDLE_S);
    published(&mut t, &d);
    for n in ["n1", "n2", "n3"] {
        assert!(shows_powering_off(&t, n), "{n}");
    }
    // A pod comes pending: the plan places it on a node that is up (its
    // own taint is not the scheduler's last word: Accord lifts it), not on
    // a node to power on; while work is pending the plan powers nothing
    // off, so every drain is cancelled and every taint lifted.
    t.world.demand = one_gpu_pod();
    let d = t.round(1);
    assert!(ons(&d).is_empty(), "{:?}", d.power);
    assert!(offs(&d).is_empty(), "{:?}", d.power);
    let placed = &d.status.placements[0].pods[0].node;
    published(&mut t, &d);
    let cancelled: Vec<&str> = d
        .events
        .iter()
        .filter(|e| e.reason == "PowerOffCancelled")
        .map(|e| e.regarding.name.as_str())
        .collect();
    assert!(
        cancelled.contains(&placed.as_str()),
        "{placed}: {:?}",
        d.events
    );
    assert!(!shows_powering_off(&t, placed));
}

// Admins' power requests (`accordctl power` through accordd): the loop's
// checks, then the loop's path.

fn ask(t: &mut Twin, node: &str, action: AdminPowerAction, force: bool, dry_run: bool) {
    t.decider.ask_admin(
        node,
        AdminPowerRequest {
            action,
            force,
            dry_run,
        },
    );
}

/// The only answer of the round `d`.
fn answer(d: &Decision) -> &AdminReply {
    assert_eq!(d.admin_replies.len(), 1, "{:?}", d.admin_replies);
    &d.admin_replies[0]
}

fn refused(d: &Decision, kind: RefusalKind, says: &str) {
    match answer(d) {
        Err(r) => {
            assert_eq!(r.kind, kind, "{r:?}");
            assert!(
                r.reason.contains(says),
                "{:?} does not say {says:?}",
                r.reason
            );
        }
        Ok(a) => panic!("accepted, not refused ({says}): {a:?}"),
    }
}

fn accepted(d: &Decision, outcome: AdminPowerOutcome) -> &AdminPowerAnswer {
    match answer(d) {
        Ok(a) => {
            assert_eq!(a.outcome, outcome, "{a:?}");
            a
        }
        Err(r) => panic!("refused: {r:?}"),
    }
}

fn tainted(d: &Decision, node: &str) -> bool {
    d.publish
        .iter()
        .any(|(n, p)| n == node && p.taints.iter().any(|x| x.key == POWERING_OFF_TAINT_KEY))
}

#[test]
fn an_admins_power_off_is_checked_as_the_loops_and_goes_through_the_taint() {
    let mut t = Twin::new(Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    daemonset_pods_everywhere(&mut t);
    // n2 runs a work pod; n3 is annotated accord.dev/do-not-disrupt.
    t.world.demand.bound.extend(bound("n2", 1, false, false));
    *t.world.pods_per_node.get_mut("n2").unwrap() += 1;
    t.world.do_not_disrupt.insert("n3".into());
    t.round(1);
    ask(&mut t, "n2", AdminPowerAction::Off, false, false);
    let d = t.round(1);
    refused(&d, RefusalKind::Check, "node n2: 1 work pod(s) bound to it");
    assert_eq!(d.metrics.commands, [("admin", "refused")]);
    assert!(offs(&d).is_empty() && !tainted(&d, "n2"), "{:?}", d.power);
    ask(&mut t, "n3", AdminPowerAction::Cycle, false, false);
    refused(
        &t.round(1),
        RefusalKind::Check,
        "annotated accord.dev/do-not-disrupt",
    );
    ask(&mut t, "n9", AdminPowerAction::Off, false, false);
    refused(
        &t.round(1),
        RefusalKind::UnknownNode,
        "node n9 is not in the fleet",
    );
    // A dry run says it would, and changes nothing.
    ask(&mut t, "n1", AdminPowerAction::Off, false, true);
    let d = t.round(1);
    accepted(&d, AdminPowerOutcome::WouldDo);
    assert!(!tainted(&d, "n1") && offs(&d).is_empty(), "{:?}", d.publish);
    // n1 is idle (well within its idle time): tainted now, powered off
    // once the Node shows it and the settle time has passed.
    ask(&mut t, "n1", AdminPowerAction::Off, false, false);
    let d = t.round(1);
    let a = accepted(&d, AdminPowerOutcome::Accepted);
    assert!(
        !a.forced && a.detail.contains("tainted accord.dev/powering-off"),
        "{a:?}"
    );
    assert!(tainted(&d, "n1") && offs(&d).is_empty(), "{:?}", d.power);
    assert!(d
        .events
        .iter()
        .any(|e| e.reason == "AdminPowerOff" && e.regarding.name == "n1"));
    assert_eq!(d.metrics.commands, [("admin", "off")]);
    published(&mut t, &d);
    let d = t.round(1);
    assert!(offs(&d).is_empty(), "the taint just seen: {:?}", d.power);
    let d = t.round(SETTLE_S);
    assert_eq!(offs(&d), ["n1"], "{:?}", d.power);
    assert_eq!(d.requested.get("n1"), Some(&Requested { forced: false }));
    assert_eq!(t.stage("n1"), Stage::PoweringOff);
    // Asked again: nothing to do.
    ask(&mut t, "n1", AdminPowerAction::Off, false, false);
    accepted(&t.round(1), AdminPowerOutcome::NothingToDo);
}

#[test]
fn a_work_pod_that_slips_in_cancels_an_admins_power_off() {
    let mut t = Twin::new(Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    daemonset_pods_everywhere(&mut t);
    t.round(1);
    ask(&mut t, "n1", AdminPowerAction::Off, false, false);
    let d = t.round(1);
    accepted(&d, AdminPowerOutcome::Accepted);
    published(&mut t, &d);
    assert!(shows_powering_off(&t, "n1"));
    a_work_pod_slips_into_n1_and_cancels_its_power_off(&mut t);
}

#[test]
fn a_forced_power_off_skips_the_checks_and_goes_at_once_as_forced() {
    let mut t = Twin::new(Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    t.world.demand.bound.extend(bound("n2", 1, false, false));
    t.world.pods_per_node.insert("n2".into(), 1);
    t.round(1);
    ask(&mut t, "n2", AdminPowerAction::Off, true, false);
    let d = t.round(1);
    let a = accepted(&d, AdminPowerOutcome::Accepted);
    assert!(a.forced, "{a:?}");
    assert_eq!(
        offs(&d),
        ["n2"],
        "sent this round, no taint wait: {:?}",
        d.power
    );
    assert_eq!(d.requested.get("n2"), Some(&Requested { forced: true }));
    assert_eq!(d.metrics.commands, [("admin", "forced_off")]);
    let e = d
        .events
        .iter()
        .find(|e| e.reason == "PowerForced")
        .expect("a PowerForced event");
    assert!(e.warning && e.regarding.name == "n2", "{e:?}");
    assert_eq!(t.stage("n2"), Stage::PoweringOff);
}

#[test]
fn an_admins_power_on_keeps_the_racks_limit_and_a_cycle_comes_back_on() {
    let fleet = FLEET.replace(
        "name = \"r1\"\n",
        "name = \"r1\"\nmax_concurrent_power_ons = 1\n",
    );
    let mut t = Twin::on(&fleet, Repair::default());
    t.decider.set_power_off_settle_s(SETTLE_S);
    registered(&mut t);
    // n1 cycled: off through its taint, then on once the BMC shows it off.
    ask(&mut t, "n1", AdminPowerAction::Cycle, false, false);
    let d = t.round(1);
    accepted(&d, AdminPowerOutcome::Accepted);
    published(&mut t, &d);
    t.round(1);
    let d = t.round(SETTLE_S);
    assert_eq!(offs(&d), ["n1"], "{:?}", d.power);
    t.world.bmc.insert("n1".into(), false);
    t.world.kube_ready.insert("n1".into(), false);
    t.world.agents.remove("n1");
    t.world.agent_reports.remove("n1");
    // The round that sees it Off powers it on again.
    let d = t.round(1);
    assert_eq!(ons(&d), ["n1"], "{:?}", d.power);
    assert_eq!(t.stage("n1"), Stage::PoweringOn);
    assert_eq!(d.requested.get("n1"), Some(&Requested { forced: false }));
    assert!(d
        .events
        .iter()
        .any(|e| e.reason == "PoweringOn" && e.note.contains("asked by an admin")));
    // n1 is on its way up: the rack's one power-on at a time is taken.
    for n in ["n2", "n3"] {
        t.world.bmc.insert(n.into(), false);
        t.world.kube_ready.insert(n.into(), false);
        t.world.agents.remove(n);
        t.world.agent_reports.remove(n);
    }
    for _ in 0..2 {
        t.round(1);
    }
    assert_eq!(t.stage("n2"), Stage::Off);
    ask(&mut t, "n2", AdminPowerAction::On, false, false);
    let d = t.round(1);
    refused(
        &d,
        RefusalKind::Check,
        "rack r1 has 1 node(s) on their way up (max_concurrent_power_ons = 1)",
    );
    assert!(ons(&d).is_empty(), "{:?}", d.power);
    // Forced: no rack limit.
    ask(&mut t, "n2", AdminPowerAction::On, true, false);
    let d = t.round(1);
    accepted(&d, AdminPowerOutcome::Accepted);
    assert_eq!(ons(&d), ["n2"], "{:?}", d.power);
}
