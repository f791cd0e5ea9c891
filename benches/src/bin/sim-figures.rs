//! `sim-figures`: how long `accordctl simulate` takes on a big day: a
//! 1,000-node fleet (50 racks of 20 8-GPU nodes, about 60 % on at the
//! start) and 50,000 pods over 24 hours (single pods of 1–8 GPUs and
//! rack-local gangs of two 8-GPU pods, running 5–40 minutes), for one and
//! for two policies side by side. The target: under 30 s on the 2-core
//! development machine. Prints the figures and what the runs measured.
//!
//! `cargo run --release -p accord-benches --bin sim-figures [PODS]`

use std::collections::BTreeMap;
use std::time::Instant;

use accord::demand::{PodSet, PodSpec, TopologyMode, TopologyRequirement, Workload};
use accord::fleet::{Placement, Policy};
use accord_benches::Rng;
use accord_sim::{Input, Job, Trace, World};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn trace(pods: usize, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let day = 86_400u64;
    let mut jobs = Vec::with_capacity(pods);
    let mut k = 0;
    while jobs.len() < pods {
        let submit_s = k as u64 * day / pods as u64;
        let gang = rng.below(10) == 0;
        let gpus = if gang {
            8
        } else {
            [1, 1, 2, 4, 8][rng.below(5) as usize]
        };
        let requests = BTreeMap::from([
            ("cpu".to_owned(), format!("{}", 4 * gpus)),
            ("memory".to_owned(), format!("{}Gi", 16 * gpus)),
            ("nvidia.com/gpu".to_owned(), gpus.to_string()),
        ]);
        jobs.push(Job {
            submit_s,
            run_s: Some(300 + rng.below(2100)),
            workload: Workload {
                name: format!("w{k:06}"),
                namespace: "bench".into(),
                labels: BTreeMap::new(),
                min_count: None,
                priority: 0,
                created: submit_s,
                topology: gang.then(|| TopologyRequirement {
                    level: "rack".into(),
                    mode: TopologyMode::Required,
                }),
                reservation: None,
                approximation: None,
                sources: Vec::new(),
                pod_sets: vec![PodSet {
                    name: "p".into(),
                    count: if gang { 2 } else { 1 },
                    pod: PodSpec {
                        requests,
                        ..PodSpec::default()
                    },
                }],
            },
        });
        k += 1;
    }
    let text = serde_json::to_string(&Trace {
        device_classes: Vec::new(),
        jobs,
    })
    .expect("a trace serializes");
    // Through the parser, as accordctl reads it: checked and sorted.
    Trace::from_json(&text, "generated").expect("the generated trace is valid")
}

fn main() {
    let pods: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000);
    let fleet = accord_benches::fleet(50, 20, 7);
    let trace = trace(pods, 7);
    let idle_short = Policy {
        idle_power_off_after_s: 300,
        ..Policy::default()
    };
    let spares = Policy {
        idle_power_off_after_s: 1800,
        warm_spares_per_rack: 1,
        placement: Placement::FirstFit,
        ..Policy::default()
    };
    for policies in [
        vec![("idle-5m".to_owned(), idle_short.clone())],
        vec![
            ("idle-5m".to_owned(), idle_short),
            ("spares-30m".to_owned(), spares),
        ],
    ] {
        let input = Input {
            fleet: fleet.clone(),
            fleet_source: "generated: 50 racks x 20 nodes".into(),
            trace: trace.clone(),
            trace_source: format!("generated: {pods} pods over 24 h"),
            policies,
            seed: 1,
            world: World::default(),
        };
        let start = Instant::now();
        let figures = accord_sim::simulate(&input);
        let took = start.elapsed().as_secs_f64();
        println!(
            "{} nodes, {} pods, {} policies side by side: {took:.1} s (targets, issue 57: one policy ≤ 12 s, two ≤ 15 s)",
            figures.inputs.nodes,
            figures.inputs.workloads,
            figures.policies.len()
        );
        for p in &figures.policies {
            let s = &p.summary;
            println!(
                "  {}: started {} of {}, power-ons {}, unused {}, mean to running {:.0} s, p95 {:.0} s, GPU-h powered {:.0} used {:.0}, {:.0} kWh",
                p.name,
                s.started,
                s.workloads,
                s.power_ons,
                s.unused_power_ons,
                s.mean_time_to_running_s.unwrap_or(0.0),
                s.p95_time_to_running_s.unwrap_or(0.0),
                s.gpu_hours_powered,
                s.gpu_hours_used,
                s.energy_kwh
            );
        }
    }
}
