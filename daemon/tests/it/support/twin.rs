//! What the twin tests (`decide` on hand-made snapshots, no I/O)
//! share: a decider on a fleet text, one round at a given time, the power
//! actions a decision sends, a workload of identical pods.
#![allow(dead_code)]

use std::time::Duration;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::lifecycle::Deadlines;
use accord::plan::Action;
use accord_api::control::Mode;
use accordd::control::decide::{Decider, Decision, Settings, Snapshot};

/// When the twins' deciders start (Unix seconds).
pub const T0: u64 = 100_000;

/// An act-mode decider on the fleet `text`, with `deadlines`, a 600 s
/// booking time and a 600 s command deadline.
pub fn decider(text: &str, deadlines: Deadlines) -> Decider {
    let fleet = Fleet::from_toml(text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    Decider::new(
        fleet,
        Settings {
            mode: Mode::Act,
            deadlines,
            booking_s: 600,
            command_deadline_s: 600,
            mig_manager: accord_decide::MigManager::default(),
        },
        T0,
    )
}

/// One round on `world` at `now`.
pub fn decide_at(d: &mut Decider, world: &Snapshot, now: u64) -> Decision {
    let mut snap = world.clone();
    snap.now = now;
    snap.mono = Duration::from_secs(now.saturating_sub(T0));
    d.decide(&snap)
}

/// The nodes a decision powers on, in its order.
pub fn power_ons(d: &Decision) -> Vec<String> {
    d.power
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

/// The nodes a decision powers off, in its order.
pub fn power_offs(d: &Decision) -> Vec<String> {
    d.power
        .iter()
        .filter_map(|a| match a {
            Action::PowerOff { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

/// Workload `ml/name`: `count` pods, each asking for `requests`.
pub fn pods(name: &str, count: u32, requests: serde_json::Value) -> Demand {
    Demand::from_json(
        &serde_json::json!({"workloads": [{"name": name, "namespace": "ml",
            "pod_sets": [{"name": "w", "count": count, "pod": {"requests": requests}}]}]})
        .to_string(),
        "demand.json",
    )
    .unwrap()
}
