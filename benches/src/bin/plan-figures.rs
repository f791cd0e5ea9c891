//! `plan-figures`: one timed plan of the 10k-node / 20k-pod benchmark input,
//! with what it decided. `cargo run --release -p accord-benches --bin plan-figures`.

use std::time::Instant;

/// The same allocator as `accordctl plan`, whose planning this measures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let fleet = accord_benches::fleet(250, 40, 1);
    let demand = accord_benches::demand(2_000, 10, 2);
    let mut times = Vec::new();
    let mut plan = None;
    for _ in 0..10 {
        let start = Instant::now();
        let p = accord::plan::plan(&fleet, &demand, &fleet.policy, 1_000_000);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        plan = Some(p);
    }
    times.sort_by(f64::total_cmp);
    let (best, median) = (times[0], (times[4] + times[5]) / 2.0);
    let p = plan.expect("ran");
    let pods: usize = p.placements.iter().map(|w| w.pods.len()).sum();
    println!(
        "plan: {} nodes, {} gangs: best of 10 {best:.1} ms, median {median:.1} ms; {} gangs placed ({pods} pods), {} unsatisfied, {} actions",
        fleet.nodes.len(),
        demand.workloads.len(),
        p.placements.len(),
        p.unsatisfied.len(),
        p.actions.len()
    );
}
