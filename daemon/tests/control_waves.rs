//! The twin for a rack's concurrent power-on limit across rounds: nodes
//! still on their way up count against it, so a later round sends no more
//! than the limit allows, and the next wave goes once the earlier nodes
//! are up (or have failed).

use std::time::Duration;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::lifecycle::{Deadlines, Stage};
use accord::plan::Action;
use accord_api::control::Mode;
use accordd::control::decide::{Decider, Decision, Settings, Snapshot};

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

const T0: u64 = 100_000;

/// Two 8-GPU pods, no gang: each needs a node of its own.
fn two_pods() -> Demand {
    Demand::from_json(
        &serde_json::json!({"workloads": [{"name": "job", "namespace": "ml",
            "pod_sets": [{"name": "w", "count": 2,
                "pod": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"}}}]}]})
        .to_string(),
        "demand.json",
    )
    .unwrap()
}

fn sent(d: &Decision) -> Vec<String> {
    d.power
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_racks_power_on_limit_holds_across_rounds_and_the_next_wave_waits_for_the_first() {
    let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let mut decider = Decider::new(
        fleet,
        Settings {
            mode: Mode::Act,
            deadlines: Deadlines::default(),
            booking_s: 300,
            command_deadline_s: 600,
        },
        T0,
    );
    let mut world = Snapshot::default();
    for n in ["n1", "n2", "n3"] {
        world.bmc.insert(n.into(), false);
    }
    world.demand = two_pods();
    let mut now = T0;
    let round = |world: &Snapshot, decider: &mut Decider, now: &mut u64, after: u64| {
        *now += after;
        let mut snap = world.clone();
        snap.now = *now;
        snap.mono = Duration::from_secs(*now - T0);
        decider.decide(&snap)
    };
    // Two nodes planned (waves 0 and 1); one sent.
    let d = round(&world, &mut decider, &mut now, 1);
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
    assert_eq!(sent(&d), ["n1"]);
    // n1 is on its way up (the BMC shows On, it boots): nothing more,
    // round after round.
    world.bmc.insert("n1".into(), true);
    for _ in 0..3 {
        let d = round(&world, &mut decider, &mut now, 5);
        assert!(sent(&d).is_empty(), "{:?}", d.power);
    }
    assert_eq!(decider.life("n1").unwrap().stage, Stage::Booting);
    // n1 up: the next wave goes.
    world.agents.insert("n1".into(), now + 10);
    world.kube_ready.insert("n1".into(), true);
    let d = round(&world, &mut decider, &mut now, 10);
    assert_eq!(sent(&d), ["n2"]);
}
