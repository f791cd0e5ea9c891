//! `plan-figures`: timed plans of the planner benchmark inputs, with what
//! they decided: 10,000 nodes / 20,000 pods and 40,000 nodes / 80,000 pods,
//! every node planned with its own agent report (`Fleet::apply_report`),
//! and for comparison the 10k input on one shared declared profile.
//! `cargo run --release -p accord-benches --bin plan-figures`.

use std::time::Instant;

use accord::demand::Demand;
use accord::fleet::Fleet;

/// The same allocator as `accordctl plan`, whose planning this measures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn figures(label: &str, fleet: &Fleet, demand: &Demand, runs: usize) {
    let mut times = Vec::new();
    let mut plan = None;
    for _ in 0..runs {
        let start = Instant::now();
        let p = accord::plan::plan(fleet, demand, &fleet.policy, 1_000_000);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        plan = Some(p);
    }
    times.sort_by(f64::total_cmp);
    let best = times[0];
    let median = if runs.is_multiple_of(2) {
        (times[runs / 2 - 1] + times[runs / 2]) / 2.0
    } else {
        times[runs / 2]
    };
    let p = plan.expect("ran");
    let pods: usize = p.placements.iter().map(|w| w.pods.len()).sum();
    println!(
        "plan ({label}): {} nodes, {} gangs: best of {runs} {best:.1} ms, median {median:.1} ms; {} gangs placed ({pods} pods), {} unsatisfied, {} actions",
        fleet.nodes.len(),
        demand.workloads.len(),
        p.placements.len(),
        p.unsatisfied.len(),
        p.actions.len()
    );
}

/// The benchmark fleet with a report per node, and how long installing
/// the reports took.
fn reported(racks: usize) -> Fleet {
    let start = Instant::now();
    let fleet = accord_benches::fleet_reported(racks, 40, 1);
    let drifted = fleet
        .nodes
        .iter()
        .filter(|n| {
            n.gpus.len() != 8
                || n.gpus
                    .iter()
                    .any(|g| g.mig.as_ref().is_some_and(|m| !m.gpu_instances.is_empty()))
        })
        .count();
    println!(
        "fleet: {} nodes built and reported in {:.0} ms ({drifted} differ from the profile)",
        fleet.nodes.len(),
        start.elapsed().as_secs_f64() * 1000.0
    );
    fleet
}

fn main() {
    let demand = accord_benches::demand(2_000, 10, 2);
    figures(
        "one shared profile",
        &accord_benches::fleet(250, 40, 1),
        &demand,
        10,
    );
    figures("per-node reports", &reported(250), &demand, 10);
    let demand = accord_benches::demand(8_000, 10, 2);
    figures("per-node reports", &reported(1_000), &demand, 7);
}
