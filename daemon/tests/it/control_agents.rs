//! The twin for agent liveness after a power-on: only a hardware report
//! made since the power-on makes a node's agent up (a heartbeat says the
//! agent is still there; with a shared agent token it carries only a
//! session, not the machine's identity). A node whose agent only
//! heartbeats fails at its boot deadline.

use accord::lifecycle::{Deadlines, Stage};
use accordd::control::decide::Snapshot;

use crate::support;
use support::twin::{decide_at, decider, pods, power_ons, T0};

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
"#;

/// n1 off, a pod that needs all of it, and a report from n1's agent long
/// before (an earlier boot).
fn world() -> Snapshot {
    let mut world = Snapshot::default();
    world.bmc.insert("n1".into(), false);
    world.demand = pods(
        "train",
        1,
        serde_json::json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"}),
    );
    world.agent_reports.insert("n1".into(), T0 - 500);
    world
}

#[test]
fn only_a_report_since_the_power_on_makes_the_agent_up() {
    let mut d = decider(FLEET, Deadlines::default());
    let mut world = world();
    let first = decide_at(&mut d, &world, T0);
    assert_eq!(power_ons(&first), ["n1"]);
    // The machine comes on; its agent heartbeats and its Node turns
    // Ready, but it has not reported since the power-on.
    world.bmc.insert("n1".into(), true);
    for t in [T0 + 5, T0 + 30, T0 + 60] {
        world.agents.insert("n1".into(), t);
        world.kube_ready.insert("n1".into(), true);
        decide_at(&mut d, &world, t);
        assert_eq!(d.life("n1").unwrap().stage, Stage::Booting, "at {t}");
    }
    // Its report (as the agent starts) makes it up: Ready at once.
    world.agent_reports.insert("n1".into(), T0 + 70);
    world.agents.insert("n1".into(), T0 + 70);
    decide_at(&mut d, &world, T0 + 70);
    assert_eq!(d.life("n1").unwrap().stage, Stage::Ready);
}

#[test]
fn an_agent_that_only_heartbeats_after_a_power_on_misses_the_boot_deadline() {
    let deadlines = Deadlines::default();
    let mut d = decider(FLEET, deadlines);
    let mut world = world();
    assert_eq!(power_ons(&decide_at(&mut d, &world, T0)), ["n1"]);
    world.bmc.insert("n1".into(), true);
    decide_at(&mut d, &world, T0 + 5);
    assert_eq!(d.life("n1").unwrap().stage, Stage::Booting);
    let mut t = T0 + 5;
    while t <= T0 + 5 + deadlines.boot_to_agent_s {
        t += 60;
        world.agents.insert("n1".into(), t);
        decide_at(&mut d, &world, t);
    }
    let life = d.life("n1").unwrap();
    assert_eq!(life.stage, Stage::Failed);
    assert_eq!(
        life.reason.as_deref(),
        Some(
            format!(
                "no agent within {} s of power-on",
                deadlines.boot_to_agent_s
            )
            .as_str()
        )
    );
}
