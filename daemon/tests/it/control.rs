//! The control loop's *decide* driven as a twin: rounds of
//! `Decider::decide` on hand-made snapshots, with the executor on the
//! in-memory `SimulatedPower` (the same journal and executor the running
//! loop uses), through the cases the running loop must get right: a
//! booting gang holds its nodes, observe mode sends nothing, a failed
//! power-on is re-planned elsewhere, an unreadable BMC's node is never
//! powered on, busy and booked nodes are never powered off, bookings
//! expire, check-capacity powers nothing on. Plus the batching window.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use accord::demand::{Demand, ObjectRef};
use accord::fleet::Fleet;
use accord::lifecycle::{Deadlines, Stage};
use accord::plan::Action;
use accord_api::control::{Mode, WorkloadState};
use accord_testkit::power::SimulatedPower;
use accordd::control::decide::{Decider, Decision, Settings, Snapshot};
use accordd::control::provisioning::{ConditionSeen, ProvisioningClass, ProvisioningSeen};
use accordd::control::Batcher;
use accordd::execute::{Executed, Executor};
use accordd::store::Store;

#[tokio::test(start_paused = true)]
async fn bursts_become_one_round_within_the_window() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let b = Batcher::default();
    // Three changes 400 ms apart: one batch, 1 s after the last.
    let sender = tokio::spawn(async move {
        for i in 0..3 {
            tx.send(i).await.unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Then a steady stream every 500 ms: cut at 10 s.
        for i in 10..40 {
            tx.send(i).await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let start = tokio::time::Instant::now();
    let first = b.next(&mut rx).await.unwrap();
    assert_eq!(first, [0, 1, 2]);
    // The third came at 0.8 s; the window closed 1 s later.
    assert_eq!(start.elapsed(), Duration::from_millis(1800));
    let t = tokio::time::Instant::now();
    let second = b.next(&mut rx).await.unwrap();
    // The stream began 2.4 s later; it is cut 10 s after its first item.
    assert_eq!(t.elapsed(), Duration::from_millis(12_400));
    assert!((20..=21).contains(&second.len()), "{}", second.len());
    sender.abort();
}

/// Two racks of two dark 8-GPU nodes; idle nodes go dark after 60 s.
const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.2

[policy]
idle_power_off_after_s = 60

[[racks]]
name = "r1"

[[racks]]
name = "r2"

[[nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"

[[nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"

[[nodes]]
name = "r2-n1"
rack = "r2"
profile = "h100"

[[nodes]]
name = "r2-n2"
rack = "r2"
profile = "h100"
"#;

const NODES: [&str; 4] = ["r1-n1", "r1-n2", "r2-n1", "r2-n2"];
const T0: u64 = 100_000;
const BOOKING_S: u64 = 300;

/// A gang of two 8-GPU pods that must share a rack.
fn gang(ns: &str, name: &str, source: ObjectRef) -> Demand {
    let mut d = Demand::from_json(
        &serde_json::json!({
            "workloads": [{
                "name": name,
                "namespace": ns,
                "topology": {"level": "rack", "mode": "required"},
                "pod_sets": [{"name": "w", "count": 2,
                    "pod": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}}}]
            }]
        })
        .to_string(),
        "demand.json",
    )
    .unwrap();
    d.workloads[0].sources = vec![source];
    d
}

fn podgroup(name: &str) -> ObjectRef {
    ObjectRef::new("scheduling.k8s.io/v1beta1", "PodGroup", "ml", name)
}

fn request(name: &str) -> ObjectRef {
    ObjectRef::new(
        "autoscaling.x-k8s.io/v1",
        "ProvisioningRequest",
        "team-b",
        name,
    )
}

/// The world the twin's rounds observe, and the executor that acts on it.
struct Twin {
    decider: Decider,
    power: Arc<SimulatedPower>,
    executor: Executor<SimulatedPower>,
    /// Kubernetes, agents and demand as a test sets them.
    world: Snapshot,
    /// Nodes whose BMC cannot be read.
    unreadable: BTreeSet<String>,
    executed: Vec<Executed>,
    now: u64,
    _dir: tempfile::TempDir,
}

impl Twin {
    fn new(mode: Mode) -> Twin {
        let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let power = Arc::new(SimulatedPower::with_nodes(&NODES));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let executor = Executor::new(store.journal().unwrap(), power.clone());
        let settings = Settings {
            mode,
            deadlines: Deadlines::default(),
            booking_s: BOOKING_S,
            command_deadline_s: 600,
            mig_manager: accord_decide::MigManager::default(),
        };
        Twin {
            decider: Decider::new(fleet, settings, T0),
            power,
            executor,
            world: Snapshot::default(),
            unreadable: BTreeSet::new(),
            executed: Vec::new(),
            now: T0,
            _dir: dir,
        }
    }

    /// Observe (the world, the twin's BMCs, results, open intents) →
    /// decide → execute the power actions, `after_s` after the last round.
    async fn round(&mut self, after_s: u64) -> Decision {
        self.now += after_s;
        let mut snap = self.world.clone();
        snap.now = self.now;
        snap.mono = Duration::from_secs(self.now - T0);
        snap.bmc = self
            .power
            .state
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| !self.unreadable.contains(*n))
            .map(|(n, on)| (n.clone(), *on))
            .collect();
        snap.executed = std::mem::take(&mut self.executed);
        snap.open_intents = self.executor.journal().open_intents().unwrap();
        let d = self.decider.decide(&snap);
        self.executed = self.executor.apply(&d.power, self.now).await.unwrap();
        d
    }

    /// The node's agent reports and its Kubernetes Node is Ready.
    fn comes_up(&mut self, node: &str) {
        self.world.agents.insert(node.into(), self.now + 1);
        self.world.agent_reports.insert(node.into(), self.now + 1);
        self.world.kube_ready.insert(node.into(), true);
    }

    fn stage(&self, node: &str) -> Stage {
        self.decider.life(node).unwrap().stage
    }

    fn resets(&self) -> Vec<String> {
        self.power.resets()
    }
}

fn power_ons(d: &Decision) -> Vec<String> {
    d.power
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

fn power_offs(d: &Decision) -> Vec<String> {
    d.power
        .iter()
        .filter_map(|a| match a {
            Action::PowerOff { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn observe_mode_plans_and_explains_and_sends_nothing() {
    let mut t = Twin::new(Mode::Observe);
    t.world.demand = gang("ml", "train", podgroup("train"));
    let d = t.round(0).await;
    let planned = d
        .status
        .actions
        .iter()
        .filter(|a| matches!(a, Action::PowerOn { .. }))
        .count();
    assert_eq!(planned, 2, "{:?}", d.status.actions);
    assert!(d.power.is_empty());
    assert!(t.resets().is_empty());
    assert_eq!(d.status.workloads[0].state, WorkloadState::PoweringOn);
    // Nothing written to Kubernetes either.
    assert!(d.events.is_empty() && d.conditions.is_empty() && d.publish.is_empty());
    // Nothing was sent, so nothing is on its way up.
    assert!(NODES.iter().all(|n| t.stage(n) == Stage::Off));
}

#[tokio::test]
async fn a_booting_gang_holds_its_nodes_until_they_are_ready() {
    let mut t = Twin::new(Mode::Act);
    t.world.demand = gang("ml", "train", podgroup("train"));
    let d = t.round(0).await;
    let ons = power_ons(&d);
    assert_eq!(ons.len(), 2, "{:?}", d.power);
    assert_eq!(t.resets().len(), 2);
    assert!(d.events.iter().any(|e| e.reason == "PoweringOn"));
    for n in &ons {
        assert_eq!(t.stage(n), Stage::PoweringOn);
    }
    // Their BMCs show On; the agents are not up: Booting, and the next
    // rounds power nothing more on for the same pods.
    for after in [5, 30, 60] {
        let d = t.round(after).await;
        assert!(d.power.is_empty(), "{:?}", d.power);
        for n in &ons {
            assert_eq!(t.stage(n), Stage::Booting);
        }
    }
    assert_eq!(t.resets().len(), 2);
    for n in &ons {
        t.comes_up(n);
    }
    let d = t.round(5).await;
    assert!(d.power.is_empty());
    for n in &ons {
        assert_eq!(t.stage(n), Stage::Ready);
    }
    assert_eq!(d.metrics.pending_to_ready.len(), 1, "{:?}", d.metrics);
}

#[tokio::test]
async fn a_failed_power_on_fails_the_node_and_the_gang_is_replanned_elsewhere() {
    let mut t = Twin::new(Mode::Act);
    t.world.demand = gang("ml", "train", podgroup("train"));
    // The first node the plan picks never powers on.
    let first = {
        let mut probe = Twin::new(Mode::Act);
        probe.world.demand = t.world.demand.clone();
        power_ons(&probe.round(0).await)[0].clone()
    };
    t.power.broken.lock().unwrap().push(first.clone());
    let d = t.round(0).await;
    assert!(power_ons(&d).contains(&first));
    let rack = &first[..2];
    // The failure comes back with the next round: the node is Failed,
    // and the gang, which needs one rack, moves to the other one.
    let d = t.round(1).await;
    assert_eq!(t.stage(&first), Stage::Failed);
    assert!(d.metrics.power_results.contains(&(first.clone(), false)));
    let ons = power_ons(&d);
    assert_eq!(ons.len(), 2, "{:?}", d.status.actions);
    assert!(ons.iter().all(|n| !n.starts_with(rack)), "{ons:?}");
    let reason = d
        .status
        .nodes
        .iter()
        .find(|n| n.name == first)
        .and_then(|n| n.reason.clone())
        .unwrap();
    assert!(reason.contains("power action failed"), "{reason}");
}

#[tokio::test]
async fn a_node_whose_bmc_cannot_be_read_is_never_powered_on() {
    let mut t = Twin::new(Mode::Act);
    t.world.demand = gang("ml", "train", podgroup("train"));
    t.unreadable
        .extend(["r1-n1".to_owned(), "r2-n1".to_owned()]);
    // No rack has two readable dark nodes: nothing is powered on, and
    // the gang cannot be placed.
    let d = t.round(0).await;
    assert!(d.power.is_empty(), "{:?}", d.power);
    assert!(t.resets().is_empty());
    assert_eq!(d.status.workloads[0].state, WorkloadState::CannotPlace);
    let r1n1 = d.status.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert_eq!(r1n1.bmc_on, None);
    // The event goes to the PodGroup, once.
    let events: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason == "CannotPlace")
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].regarding, podgroup("train"));
    assert!(t
        .round(5)
        .await
        .events
        .iter()
        .all(|e| e.reason != "CannotPlace"));
    // Once r2-n1 can be read, rack r2 is used.
    t.unreadable.remove("r2-n1");
    let d = t.round(5).await;
    let mut ons = power_ons(&d);
    ons.sort();
    assert_eq!(ons, ["r2-n1", "r2-n2"]);
}

/// Powers a gang's nodes on and up, binds its pods, then lets them go:
/// the nodes end Idle at `t.now`.
async fn gang_ran_and_finished(t: &mut Twin, demand: Demand) -> Vec<String> {
    t.world.demand = demand;
    let mut ons = power_ons(&t.round(0).await);
    ons.sort();
    t.round(5).await;
    for n in &ons {
        t.comes_up(n);
    }
    t.round(5).await;
    // Bound: no longer pending; one pod per node.
    t.world.demand = Demand::default();
    for n in &ons {
        t.world.pods_per_node.insert(n.clone(), 1);
    }
    t.round(5).await;
    for n in &ons {
        assert_eq!(t.stage(n), Stage::InUse);
    }
    t.world.pods_per_node.clear();
    t.round(5).await;
    for n in &ons {
        assert_eq!(t.stage(n), Stage::Idle);
    }
    ons
}

#[tokio::test]
async fn busy_nodes_are_never_powered_off_and_idle_ones_go_dark_after_the_timeout() {
    let mut t = Twin::new(Mode::Act);
    let ons = gang_ran_and_finished(&mut t, gang("ml", "train", podgroup("train"))).await;
    // One node gets a pod again; both are past the idle timeout.
    t.world.pods_per_node.insert(ons[0].clone(), 1);
    let d = t.round(120).await;
    assert_eq!(t.stage(&ons[0]), Stage::InUse);
    assert_eq!(power_offs(&d), [ons[1].clone()]);
    assert!(t.resets().contains(&format!("{} off", ons[1])));
    assert!(!t.resets().contains(&format!("{} off", ons[0])));
    // And the busy one stays on round after round.
    for _ in 0..3 {
        let d = t.round(120).await;
        assert!(!power_offs(&d).contains(&ons[0]), "{:?}", d.power);
    }
    assert_eq!(t.stage(&ons[0]), Stage::InUse);
    assert_eq!(t.stage(&ons[1]), Stage::Off);
}

fn provisioning(
    name: &str,
    class: ProvisioningClass,
    conditions: &[(&str, bool)],
) -> ProvisioningSeen {
    ProvisioningSeen {
        request: request(name),
        class,
        no_retry: false,
        conditions: conditions
            .iter()
            .map(|(t, s)| ConditionSeen {
                type_: (*t).into(),
                status: *s,
                reason: None,
                message: None,
                last_transition: None,
            })
            .collect(),
    }
}

fn written(d: &Decision) -> Vec<(String, bool, String)> {
    d.conditions
        .iter()
        .map(|c| {
            (
                c.condition.type_.clone(),
                c.condition.status,
                c.condition.reason.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_provisioned_request_books_its_nodes_until_the_booking_expires() {
    let mut t = Twin::new(Mode::Act);
    t.world.provisioning = vec![provisioning(
        "job-1-prov",
        ProvisioningClass::BestEffortAtomic,
        &[],
    )];
    t.world.demand = gang("team-b", "job-1-prov", request("job-1-prov"));
    let d = t.round(0).await;
    let mut ons = power_ons(&d);
    ons.sort();
    assert_eq!(ons.len(), 2);
    assert_eq!(
        written(&d),
        [
            ("Accepted".into(), true, "Accepted".into()),
            ("Provisioned".into(), false, "Provisioning".into())
        ]
    );
    t.round(5).await;
    for n in &ons {
        t.comes_up(n);
    }
    let d = t.round(5).await;
    assert!(
        written(&d).contains(&("Provisioned".into(), true, "CapacityIsProvisioned".into())),
        "{:?}",
        written(&d)
    );
    // The request shows Provisioned: it is no longer demand (the
    // translation drops it), its capacity is booked.
    t.world.provisioning = vec![provisioning(
        "job-1-prov",
        ProvisioningClass::BestEffortAtomic,
        &[("Accepted", true), ("Provisioned", true)],
    )];
    t.world.demand = Demand::default();
    t.round(5).await;
    for n in &ons {
        assert_eq!(t.stage(n), Stage::Idle);
    }
    // Idle well past the timeout, but booked: not powered off.
    for _ in 0..2 {
        let d = t.round(120).await;
        assert!(power_offs(&d).is_empty(), "{:?}", d.power);
        assert!(
            d.status
                .actions
                .iter()
                .any(|a| matches!(a, Action::PowerOff { .. })),
            "the planner proposes it; the booking holds it"
        );
    }
    assert!(
        t.resets().iter().all(|r| r.ends_with(" on")),
        "{:?}",
        t.resets()
    );
    // The booking runs out: BookingExpired, and the nodes go dark in
    // the same round.
    let d = t.round(BOOKING_S).await;
    assert_eq!(
        written(&d),
        [(
            "BookingExpired".into(),
            true,
            "CapacityReservationTimeExpired".into()
        )]
    );
    let mut offs = power_offs(&d);
    offs.sort();
    assert_eq!(offs, ons);
    t.world.provisioning[0].conditions.push(ConditionSeen {
        type_: "BookingExpired".into(),
        status: true,
        reason: None,
        message: None,
        last_transition: None,
    });
    let d = t.round(5).await;
    assert!(
        written(&d).is_empty() && d.power.is_empty(),
        "{:?}",
        d.power
    );
    for n in &ons {
        assert_eq!(t.stage(n), Stage::Off);
    }
}

#[tokio::test]
async fn check_capacity_powers_nothing_on_and_says_whether_it_fits_now() {
    let mut t = Twin::new(Mode::Act);
    t.world.provisioning = vec![provisioning("probe", ProvisioningClass::CheckCapacity, &[])];
    t.world.demand = gang("team-b", "probe", request("probe"));
    // Every node dark: it does not fit now, and nothing is powered on.
    let d = t.round(0).await;
    assert!(d.power.is_empty(), "{:?}", d.power);
    assert!(t.resets().is_empty());
    assert!(written(&d).contains(&("Provisioned".into(), false, "CapacityIsNotFound".into())));
    // Rack r2 comes up outside Accord: now it fits.
    for n in ["r2-n1", "r2-n2"] {
        t.power.state.lock().unwrap().insert(n.into(), true);
        t.comes_up(n);
    }
    let d = t.round(5).await;
    assert!(d.power.is_empty(), "{:?}", d.power);
    assert!(
        written(&d).contains(&("Provisioned".into(), true, "CapacityIsFound".into())),
        "{:?}",
        written(&d)
    );
}

/// An 8-GPU H100 node's model as its agent would report it, with `gpus`
/// GPUs.
fn reported_h100(gpus: u32) -> accord::hardware::NodeHardware {
    let profile = accord::fleet::HardwareProfile {
        gpus,
        gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
        gpu_memory_gib: 80,
        ..accord::fleet::HardwareProfile::new("192", "2Ti")
    };
    accord::fleet::hardware_from_profile(&profile, &[])
}

/// A registered Kubernetes Node as kube-scheduler sees it.
fn view(node: &str, gpus: u32) -> accord::truth::SchedulerView {
    accord::truth::SchedulerView {
        labels: [("kubernetes.io/hostname".to_owned(), node.to_owned())].into(),
        taints: Vec::new(),
        allocatable: [
            ("cpu".to_owned(), "192".to_owned()),
            ("memory".to_owned(), "2Ti".to_owned()),
            ("pods".to_owned(), "110".to_owned()),
            ("nvidia.com/gpu".to_owned(), gpus.to_string()),
        ]
        .into(),
        devices: None,
        counters: Default::default(),
    }
}

#[tokio::test]
async fn a_node_whose_agent_reports_seven_gpus_is_never_chosen_for_eight_gpu_pods() {
    let mut t = Twin::new(Mode::Act);
    // r1-n1 is declared with 8 GPUs; its agent reported 7 (a GPU fell
    // off the bus). The gang needs two 8-GPU nodes in one rack: only r2.
    t.world.reports.insert("r1-n1".into(), reported_h100(7));
    t.world.demand = gang("ml", "train", podgroup("train"));
    let d = t.round(0).await;
    assert_eq!(power_ons(&d), ["r2-n1", "r2-n2"], "{:?}", d.status.actions);
    let n = d.status.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert_eq!(n.model, accord_api::control::ModelSource::Reported);
    assert_eq!(n.gpus, 7);
    assert!(
        n.drift
            .iter()
            .any(|x| x.what == accord::truth::DriftKind::GpuCount
                && x.declared == "8"
                && x.reported == "7"),
        "{:?}",
        n.drift
    );
    let drift_events: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason == "HardwareDrift")
        .collect();
    assert_eq!(drift_events.len(), 1, "{:?}", d.events);
    assert!(drift_events[0].warning);
    assert_eq!(drift_events[0].regarding.name, "r1-n1");
    assert_eq!(
        d.metrics.drift.get(&("r1-n1".to_owned(), "declaration")),
        Some(&1)
    );
    // The same report again: no second event.
    let d = t.round(1).await;
    assert!(d.events.iter().all(|e| e.reason != "HardwareDrift"));
    // Nodes that agree with their declaration show none.
    assert!(d
        .status
        .nodes
        .iter()
        .filter(|n| n.name != "r1-n1")
        .all(|n| n.drift.is_empty()));
}

#[tokio::test]
async fn with_on_drift_hold_a_drifted_node_is_left_out() {
    let text = FLEET.replace("[policy]\n", "[policy]\non_drift = \"hold\"\n");
    let fleet = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let mut t = Twin::new(Mode::Act);
    t.decider = Decider::new(
        fleet,
        Settings {
            mode: Mode::Act,
            deadlines: Deadlines::default(),
            booking_s: BOOKING_S,
            command_deadline_s: 600,
            mig_manager: accord_decide::MigManager::default(),
        },
        T0,
    );
    // r1-n1 reports 9 GPUs: more than declared, still held.
    t.world.reports.insert("r1-n1".into(), reported_h100(9));
    // One single-GPU pod: r1-n1 would be first in preference order.
    t.world.demand = Demand::from_json(
        &serde_json::json!({"workloads": [{"name": "one", "namespace": "ml",
            "pod_sets": [{"name": "w", "count": 1,
                "pod": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}]})
        .to_string(),
        "demand.json",
    )
    .unwrap();
    let d = t.round(0).await;
    let ons = power_ons(&d);
    assert_eq!(ons.len(), 1, "{:?}", d.status.actions);
    assert_ne!(ons[0], "r1-n1");
    let n = d.status.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert_eq!(n.model, accord_api::control::ModelSource::Held);
    let text = accord_api::text::render_status(&d.status);
    assert!(text.contains("held"), "{text}");
}

#[tokio::test]
async fn accords_labels_are_published_in_act_mode_once_and_never_in_observe_mode() {
    for mode in [Mode::Act, Mode::Observe] {
        let mut t = Twin::new(mode);
        t.world.views.insert("r1-n1".into(), view("r1-n1", 8));
        let d = t.round(0).await;
        if mode == Mode::Observe {
            assert!(d.publish.is_empty(), "{:?}", d.publish);
            continue;
        }
        assert_eq!(d.publish.len(), 1, "{:?}", d.publish);
        let (node, p) = &d.publish[0];
        assert_eq!(node, "r1-n1");
        assert_eq!(
            p.labels.get("topology.accord.dev/rack").map(String::as_str),
            Some("r1")
        );
        // The Node has not changed yet: not sent again at once...
        let d = t.round(1).await;
        assert!(d.publish.is_empty(), "{:?}", d.publish);
        // ...and once the Node shows the labels, nothing more to write.
        let mut shown = view("r1-n1", 8);
        shown.labels.extend(p.labels.clone());
        t.world.views.insert("r1-n1".into(), shown);
        let d = t.round(1).await;
        assert!(d.publish.is_empty(), "{:?}", d.publish);
    }
}

#[tokio::test]
async fn a_node_that_goes_off_is_planned_with_its_last_scheduler_view() {
    let mut t = Twin::new(Mode::Act);
    // r1-n1's device plugin advertised only 6 GPUs when it was last up.
    t.world.views.insert("r1-n1".into(), view("r1-n1", 6));
    let d = t.round(0).await;
    assert_eq!(d.views_changed.len(), 1);
    let n = d.status.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert!(
        n.drift
            .iter()
            .any(|x| x.what == accord::truth::DriftKind::SchedulerResource),
        "{:?}",
        n.drift
    );
    assert!(d.events.iter().any(|e| e.reason == "SchedulerDrift"));
    // The Node is gone (the machine is off); its last view still holds.
    t.world.views.clear();
    t.world.demand = gang("ml", "train", podgroup("train"));
    let d = t.round(1).await;
    assert!(d.views_changed.is_empty());
    assert_eq!(power_ons(&d), ["r2-n1", "r2-n2"], "{:?}", d.status.actions);
}

#[tokio::test]
async fn an_off_nodes_unreachable_taint_does_not_keep_it_off() {
    let mut t = Twin::new(Mode::Act);
    // r1's machines are off; their Node objects stay, NotReady and tainted
    // unreachable by the node lifecycle controller.
    for n in ["r1-n1", "r1-n2"] {
        let mut v = view(n, 8);
        for effect in [
            accord::demand::TaintEffect::NoSchedule,
            accord::demand::TaintEffect::NoExecute,
        ] {
            v.taints.push(accord::demand::Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: None,
                effect,
            });
        }
        t.world.views.insert(n.into(), v);
    }
    t.world.demand = gang("ml", "train", podgroup("train"));
    let d = t.round(0).await;
    // r1 comes first in preference order and is powered on for the gang.
    assert_eq!(power_ons(&d), ["r1-n1", "r1-n2"], "{:?}", d.status);
}

#[tokio::test]
async fn observe_mode_writes_nothing_and_says_what_it_would_have_written() {
    // Three 8-GPU pods in one rack: no rack has three nodes.
    let mut demand = Demand::from_json(
        &serde_json::json!({"workloads": [{"name": "big", "namespace": "ml",
            "topology": {"level": "rack", "mode": "required"},
            "pod_sets": [{"name": "w", "count": 3,
                "pod": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}}}]}]})
        .to_string(),
        "demand.json",
    )
    .unwrap();
    demand.workloads[0].sources = vec![podgroup("big")];
    for mode in [Mode::Act, Mode::Observe] {
        let mut t = Twin::new(mode);
        t.world.demand = demand.clone();
        let d = t.round(0).await;
        let cannot_place = d.events.iter().any(|e| e.reason == "CannotPlace");
        match mode {
            Mode::Act => {
                assert!(cannot_place, "{:?}", d.events);
                assert!(d.status.would_write.is_empty());
            }
            Mode::Observe => {
                assert!(d.events.is_empty(), "{:?}", d.events);
                assert!(
                    d.status
                        .would_write
                        .iter()
                        .any(|w| w.regarding == podgroup("big") && w.what.contains("CannotPlace")),
                    "{:?}",
                    d.status.would_write
                );
                let text = accord_api::text::render_explain(&d.status, "ml/big").unwrap();
                assert!(text.contains("observe mode: would have written"), "{text}");
            }
        }
    }
}

/// Nodes powered on for a gang stay behind Accord's starting taint while
/// any of them is still on its way up (so the scheduler gives none of
/// them to other work), and it is lifted from all in one round; a node
/// registered with the taint (its kubelet's `--register-with-taints`)
/// gets its labels and loses the taint in the same publication.
#[tokio::test]
async fn a_gangs_nodes_are_held_behind_the_starting_taint_until_all_are_up() {
    use accord::truth::STARTING_TAINT_KEY;
    let starting =
        |p: &accord::truth::Publication| p.taints.iter().any(|t| t.key == STARTING_TAINT_KEY);
    let mut t = Twin::new(Mode::Act);
    t.world.demand = gang("ml", "train", podgroup("train"));
    let ons = power_ons(&t.round(0).await);
    assert_eq!(ons.len(), 2);
    t.round(5).await;
    // The first registers (with the taint) and comes up; the second boots.
    let mut registered = view(&ons[0], 8);
    registered.taints.push(accord::demand::Taint {
        key: STARTING_TAINT_KEY.into(),
        value: None,
        effect: accord::demand::TaintEffect::NoSchedule,
    });
    t.world.views.insert(ons[0].clone(), registered.clone());
    t.comes_up(&ons[0]);
    let d = t.round(1).await;
    let (node, p) = d.publish.iter().find(|(n, _)| n == &ons[0]).unwrap();
    assert!(starting(p), "{node}: held while {} boots: {p:?}", ons[1]);
    assert!(p.labels.contains_key("topology.accord.dev/rack"));
    // The second comes up: the taint is lifted from both at once.
    t.world.views.insert(ons[1].clone(), registered.clone());
    t.comes_up(&ons[1]);
    let d = t.round(1).await;
    for n in &ons {
        let (_, p) = d
            .publish
            .iter()
            .find(|(m, _)| m == n)
            .unwrap_or_else(|| panic!("{n} not published: {:?}", d.publish));
        assert!(!starting(p), "{n}: {p:?}");
    }
    // A lone pod's node is never held: registered with the taint, it is
    // lifted with the first publication.
    let mut t = Twin::new(Mode::Act);
    t.world.views.insert("r1-n1".into(), registered);
    let d = t.round(0).await;
    assert!(!starting(&d.publish[0].1), "{:?}", d.publish);
}
