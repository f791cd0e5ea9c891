//! `round-figures`: what one round of accordd's decider costs at fleet
//! scale: 10,000 machines (500 racks of 20 8-GPU nodes), all up and
//! Ready, 20,000 pods bound on them (two 3-GPU pods a node), act mode. It
//! times a round with nothing new and a round with one new pending 1-GPU
//! pod (placed on a node that is up), median of the rounds, and prints
//! both. No scheduler views (no Node objects): the round plans with the
//! model and publishes on every node once. The targets
//! (issue 57): unchanged ≤ 20 ms, one new pod ≤ 50 ms (release).
//!
//! `cargo run --release -p accord-benches --bin round-figures [ROUNDS]`

use std::time::{Duration, Instant};

use accord::demand::{BoundPod, Demand, Workload};
use accord::lifecycle::Deadlines;
use accord_api::control::Mode;
use accordd::control::decide::{Decider, MigManager, Settings, Snapshot};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RACKS: usize = 500;
const PER_RACK: usize = 20;

fn bound(node: &str, k: usize) -> BoundPod {
    serde_json::from_value(serde_json::json!({
        "node": node,
        "namespace": "bench",
        "name": format!("{node}-p{k}"),
        "requests": {"nvidia.com/gpu": "3", "cpu": "12", "memory": "48Gi"},
    }))
    .expect("a bound pod")
}

fn pending(name: &str) -> Workload {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "namespace": "bench",
        "pod_sets": [{"name": "p", "count": 1,
            "pod": {"requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}}],
    }))
    .expect("a workload")
}

fn median(mut xs: Vec<Duration>) -> f64 {
    xs.sort();
    xs[xs.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(21);
    let fleet = accord_benches::fleet(RACKS, PER_RACK, 7);
    let names: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let settings = Settings {
        mode: Mode::Act,
        deadlines: Deadlines::default(),
        booking_s: 600,
        command_deadline_s: 600,
        mig_manager: MigManager::default(),
    };
    let start = 1_000_000;
    let mut decider = Decider::new(fleet, settings, start);
    let mut snap = Snapshot {
        now: start,
        demand: Demand {
            bound: names
                .iter()
                .flat_map(|n| [bound(n, 0), bound(n, 1)])
                .collect(),
            ..Demand::default()
        },
        ..Snapshot::default()
    };
    for n in &names {
        snap.bmc.insert(n.clone(), true);
        snap.kube_ready.insert(n.clone(), true);
        snap.pods_per_node.insert(n.clone(), 2);
        snap.agents.insert(n.clone(), start);
        snap.agent_reports.insert(n.clone(), start);
    }
    // Every machine found on, its agent heard and its Node Ready: a few
    // rounds bring every lifecycle to Ready.
    let mut t = start;
    let mut round = |decider: &mut Decider, snap: &mut Snapshot| {
        t += 10;
        snap.now = t;
        snap.mono = Duration::from_secs(t - start);
        for at in snap.agents.values_mut() {
            *at = t;
        }
        let began = Instant::now();
        let d = decider.decide(snap);
        (began.elapsed(), d)
    };
    for _ in 0..5 {
        round(&mut decider, &mut snap);
    }
    let mut stages: std::collections::BTreeMap<String, usize> = Default::default();
    for n in &names {
        let stage = decider.life(n).map(|l| format!("{:?}", l.stage));
        *stages.entry(stage.unwrap_or_default()).or_default() += 1;
    }

    let mut unchanged = Vec::new();
    for _ in 0..rounds {
        unchanged.push(round(&mut decider, &mut snap).0);
    }
    let mut one_new = Vec::new();
    let mut placed = 0;
    for k in 0..rounds {
        snap.demand.workloads = vec![pending(&format!("new-{k}"))];
        let (took, d) = round(&mut decider, &mut snap);
        one_new.push(took);
        placed += d.status.placements.len();
        snap.demand.workloads.clear();
        round(&mut decider, &mut snap);
    }
    println!(
        "{} machines (stages {stages:?}), {} pods bound, act mode, {rounds} rounds each (release):",
        names.len(),
        snap.demand.bound.len()
    );
    println!(
        "  a round with nothing new: median {:.1} ms (target ≤ 20 ms)",
        median(unchanged)
    );
    println!(
        "  a round with one new pod: median {:.1} ms (target ≤ 50 ms; placed {placed} of {rounds})",
        median(one_new)
    );
}
