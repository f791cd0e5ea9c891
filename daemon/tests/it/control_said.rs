//! The twin for the decider's memory: what it said once is kept in the
//! store (a restart does not say a CannotPlace again while it holds) and
//! dropped once it no longer holds, and workloads waiting for their nodes
//! are let go once they are gone or a node failed, so neither grows with
//! a long run's churn.

use accord::demand::{Demand, ObjectRef};
use accord::lifecycle::{Deadlines, Stage};
use accord::plan::Action;
use accordd::control::decide::{Decider, Decision, Snapshot};
use accordd::execute::{failure, Executed, PowerError};
use accordd::store::Store;

use crate::support;
use support::twin::{decide_at, decider, pods, T0};

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"

[policy]
idle_power_off_after_s = 10

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
"#;

/// Workload `ml/name` from a Job: `count` pods of `gpus` GPUs each.
fn job(name: &str, count: u32, gpus: u32) -> Demand {
    let mut d = pods(
        name,
        count,
        serde_json::json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()}),
    );
    d.workloads[0].sources = vec![ObjectRef::new("batch/v1", "Job", "ml", name)];
    d
}

fn cannot_place(d: &Decision) -> usize {
    d.events
        .iter()
        .filter(|e| e.reason == "CannotPlace")
        .count()
}

#[test]
fn a_restart_does_not_say_a_cannot_place_again_while_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut world = Snapshot::default();
    world.bmc.insert("n1".into(), false);
    world.bmc.insert("n2".into(), false);
    // 16 GPUs in one pod: no node has them.
    world.demand = job("big", 1, 16);
    let mut d = decider(FLEET, Deadlines::default());
    // The loop's effect: what changed goes to the store.
    let keep = |store: &Store, d: &Decision| {
        store.put_said(&d.said.added, &d.said.removed).unwrap();
    };
    let first = decide_at(&mut d, &world, T0);
    assert_eq!(cannot_place(&first), 1);
    keep(&store, &first);
    let again = decide_at(&mut d, &world, T0 + 5);
    assert_eq!(cannot_place(&again), 0);
    keep(&store, &again);

    // Without what was kept, a new accordd says it again...
    let mut fresh = decider(FLEET, Deadlines::default());
    assert_eq!(cannot_place(&decide_at(&mut fresh, &world, T0 + 10)), 1);
    // ...with it, not.
    let mut resumed: Decider = decider(FLEET, Deadlines::default());
    resumed.seed_said(store.said().unwrap().0);
    let d1 = decide_at(&mut resumed, &world, T0 + 10);
    assert_eq!(cannot_place(&d1), 0, "{:?}", d1.events);
    keep(&store, &d1);

    // Once it no longer holds (the Job is gone), it is forgotten, in the
    // store too; should it come back, it is said again.
    let mut gone = world.clone();
    gone.demand = Demand::default();
    let d2 = decide_at(&mut resumed, &gone, T0 + 15);
    assert_eq!(d2.said.removed.len(), 1, "{:?}", d2.said);
    keep(&store, &d2);
    assert!(store.said().unwrap().0.is_empty());
    assert_eq!(resumed.said_len(), 0);
    assert_eq!(cannot_place(&decide_at(&mut resumed, &world, T0 + 20)), 1);
}

/// The world the churn test plays: nodes come up at once when powered
/// on, except `failing`'s power-on, which fails; a failed node comes up
/// after all once the other is off.
struct Churn {
    decider: Decider,
    world: Snapshot,
    now: u64,
}

impl Churn {
    fn stage(&self, node: &str) -> Stage {
        self.decider.life(node).unwrap().stage
    }

    fn up(&mut self, node: &str) {
        self.world.bmc.insert(node.into(), true);
        self.world.agents.insert(node.into(), self.now + 1);
        self.world.agent_reports.insert(node.into(), self.now + 1);
        self.world.kube_ready.insert(node.into(), true);
    }

    fn round(&mut self, failing: &str) -> Decision {
        self.now += 5;
        let d = decide_at(&mut self.decider, &self.world, self.now);
        self.world.executed.clear();
        for a in &d.power {
            match a {
                Action::PowerOn { node, .. } if node == failing => {
                    self.world.executed.push(Executed {
                        intent: 0,
                        node: node.clone(),
                        result: Err(failure(PowerError::Refused {
                            node: node.clone(),
                            reason: "power state still Off after the timeout".into(),
                        })),
                    });
                }
                Action::PowerOn { node, .. } => self.up(node),
                Action::PowerOff { node, .. } => {
                    self.world.bmc.insert(node.clone(), false);
                    self.world.agents.remove(node);
                    self.world.kube_ready.insert(node.clone(), false);
                }
                _ => {}
            }
        }
        d
    }
}

#[test]
fn ten_thousand_rounds_of_churn_leave_the_said_and_waiting_sets_bounded() {
    let mut c = Churn {
        decider: decider(FLEET, Deadlines::default()),
        world: Snapshot::default(),
        now: T0,
    };
    c.world.bmc.insert("n1".into(), false);
    c.world.bmc.insert("n2".into(), false);
    let (mut cycle, mut phase, mut in_phase) = (0u32, 0u32, 0u32);
    let (mut cannot, mut power_ons) = (0usize, 0usize);
    let (mut most_said, mut most_waiting) = (0usize, 0usize);
    for _ in 0..10_000 {
        let failing = if cycle % 2 == 0 { "n1" } else { "n2" };
        let other = if failing == "n1" { "n2" } else { "n1" };
        // Each cycle: a gang of two 8-GPU pods (both nodes) and a pod that
        // fits nowhere; the gang is cancelled once its nodes are asked
        // for, the other after a few rounds.
        c.world.demand = Demand::default();
        if phase == 0 {
            c.world.demand = job(&format!("gang-{cycle}"), 2, 8);
        }
        if phase == 0 || in_phase < 3 {
            let big = job(&format!("big-{cycle}"), 1, 16);
            c.world.demand.workloads.extend(big.workloads);
        }
        let d = c.round(failing);
        cannot += cannot_place(&d);
        let ons = d
            .power
            .iter()
            .filter(|a| matches!(a, Action::PowerOn { .. }))
            .count();
        power_ons += ons;
        in_phase += 1;
        if phase == 0 && ons > 0 {
            (phase, in_phase) = (1, 0);
        }
        // The failed node comes up after all, once the other is off.
        if c.stage(failing) == Stage::Failed && c.stage(other) == Stage::Off {
            c.up(failing);
        }
        if phase == 1 && in_phase >= 3 && c.stage("n1") == Stage::Off && c.stage("n2") == Stage::Off
        {
            (cycle, phase, in_phase) = (cycle + 1, 0, 0);
        }
        most_said = most_said.max(c.decider.said_len());
        most_waiting = most_waiting.max(c.decider.waiting_len());
    }
    // The churn happened: workloads came and went, nodes failed, came up
    // and were powered off again and again.
    assert!(cycle >= 300, "only {cycle} cycles");
    assert!(power_ons >= 2 * cycle as usize, "{power_ons} power-ons");
    assert!(cannot >= cycle as usize, "{cannot} CannotPlace events");
    // Yet the decider remembers only what holds now.
    assert!(most_said <= 2, "said set reached {most_said}");
    assert!(most_waiting <= 1, "waiting set reached {most_waiting}");
}
