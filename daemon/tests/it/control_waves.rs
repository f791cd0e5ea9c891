//! The twin for a rack's concurrent power-on limit across rounds: nodes
//! still on their way up count against it, so a later round sends no more
//! than the limit allows, and the next wave goes once the earlier nodes
//! are up (or have failed).

use accord::lifecycle::{Deadlines, Stage};
use accord::plan::Action;
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
max_concurrent_power_ons = 1

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

#[test]
fn a_racks_power_on_limit_holds_across_rounds_and_the_next_wave_waits_for_the_first() {
    let mut decider = decider(FLEET, Deadlines::default());
    let mut world = Snapshot::default();
    for n in ["n1", "n2", "n3"] {
        world.bmc.insert(n.into(), false);
    }
    // Two 8-GPU pods, no gang: each needs a node of its own.
    world.demand = pods(
        "job",
        2,
        serde_json::json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"}),
    );
    // Two nodes planned (waves 0 and 1); one sent.
    let mut now = T0 + 1;
    let d = decide_at(&mut decider, &world, now);
    let planned: Vec<(String, u32)> = d
        .status
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, wave, .. } => Some((node.clone(), *wave)),
            _ => None,
        })
        .collect();
    assert_eq!(planned, [("n1".to_owned(), 0), ("n2".to_owned(), 1)]);
    assert_eq!(power_ons(&d), ["n1"]);
    // n1 is on its way up (the BMC shows On, it boots): nothing more,
    // round after round.
    world.bmc.insert("n1".into(), true);
    for _ in 0..3 {
        now += 5;
        let d = decide_at(&mut decider, &world, now);
        assert!(power_ons(&d).is_empty(), "{:?}", d.power);
    }
    assert_eq!(decider.life("n1").unwrap().stage, Stage::Booting);
    // n1 up: the next wave goes.
    now += 10;
    world.agents.insert("n1".into(), now);
    world.agent_reports.insert("n1".into(), now);
    world.kube_ready.insert("n1".into(), true);
    let d = decide_at(&mut decider, &world, now);
    assert_eq!(power_ons(&d), ["n2"]);
}
