//! `alibaba-quality`: placement quality on the Alibaba GPU cluster trace
//! (clusterdata `cluster-trace-gpu-v2023`, openb), following the FGD paper's
//! protocol: nodes from a node list (default `openb_node_list_gpu_node.csv`);
//! pods from a pod list (default `openb_pod_list_default.csv`) submitted one
//! by one until the GPUs they request reach 130 % of the cluster's GPU
//! capacity; no departures; fractional GPUs as shared (consumable)
//! capacity; `gpu_spec` honoured (a pod only on GPUs of the models it
//! lists). Metric: GPU allocation ratio = GPU capacity allocated to placed
//! pods / total GPU capacity. Files are read and translated by
//! `accord_sim::openb`.
//!
//! Prints the ratio for the trace order (the pod list in order, repeated
//! until 130 %) and the mean over N seeded random draws (with
//! replacement), for the planner's first-fit and least-fragmentation
//! placements, and the published FGD and best-fit means for the pod list
//! when there are some (see [`PUBLISHED`]).
//!
//! `cargo run --release -p accord-benches --bin alibaba-quality -- [--pods FILE] [--nodes FILE] [--draws N]`
//!
//! Exit status 2, with a message naming file and line, on a file that
//! cannot be read or is not a valid openb list.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use accord::demand::Demand;
use accord::fleet::{Fleet, Placement, Policy, PowerState};
use accord_benches::Rng;
use accord_sim::openb::{self, OpenbPod};
use clap::Parser;

/// The FGD simulator's results for each pod list on the GPU node list
/// (1213 nodes, 6212 GPUs): GPU allocation in percent when the arrived
/// pods' GPU requests reach 130 % of capacity, mean of its 10 seeds, for
/// FGD and best-fit (file, FGD, best-fit). Source: hkust-adsl/
/// kubernetes-scheduler-simulator (the paper's artifact), commit 1853fc0e,
/// `experiments/analysis/expected_results/analysis_allo_discrete.csv`,
/// column `130`, policies `06-FGD` and `05-BestFit`.
const PUBLISHED: [(&str, f64, f64); 17] = [
    ("openb_pod_list_cpu050.csv", 95.21, 93.79),
    ("openb_pod_list_cpu100.csv", 95.35, 93.44),
    ("openb_pod_list_cpu200.csv", 95.05, 92.40),
    ("openb_pod_list_cpu250.csv", 93.41, 91.45),
    ("openb_pod_list_default.csv", 95.39, 93.08),
    ("openb_pod_list_gpushare100.csv", 86.90, 85.01),
    ("openb_pod_list_gpushare40.csv", 94.15, 91.69),
    ("openb_pod_list_gpushare60.csv", 91.40, 89.36),
    ("openb_pod_list_gpushare80.csv", 89.31, 87.01),
    ("openb_pod_list_gpuspec10.csv", 94.95, 93.31),
    ("openb_pod_list_gpuspec20.csv", 94.84, 93.30),
    ("openb_pod_list_gpuspec25.csv", 94.74, 93.23),
    ("openb_pod_list_gpuspec33.csv", 94.55, 93.09),
    ("openb_pod_list_multigpu20.csv", 95.65, 93.93),
    ("openb_pod_list_multigpu30.csv", 96.46, 94.72),
    ("openb_pod_list_multigpu40.csv", 96.99, 95.23),
    ("openb_pod_list_multigpu50.csv", 97.18, 95.74),
];

/// The node list the published figures were measured on.
const PUBLISHED_NODES: &str = "openb_node_list_gpu_node.csv";

fn fixture(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/traces/alibaba-gpu-v2023")
        .join(file)
}

/// Placement quality on an Alibaba openb trace (the FGD paper's protocol).
#[derive(Debug, Parser)]
#[command(name = "alibaba-quality")]
struct Args {
    /// Pod list (openb CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]).
    #[arg(long, value_name = "FILE", default_value_os_t = fixture("openb_pod_list_default.csv"))]
    pods: PathBuf,
    /// Node list (openb CSV: sn,cpu_milli,memory_mib,gpu,model).
    #[arg(long, value_name = "FILE", default_value_os_t = fixture(PUBLISHED_NODES))]
    nodes: PathBuf,
    /// Seeded random draws to average.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    draws: u64,
}

/// Reads and parses one list; the message names the file (and line).
fn load<T, E: std::fmt::Display>(
    path: &Path,
    parse: impl FnOnce(&str, &str) -> Result<T, E>,
) -> Result<T, String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    parse(&text, &name).map_err(|e| e.to_string())
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Allocation ratio for one submission sequence.
fn run(fleet: &Fleet, capacity: u64, seq: &[&OpenbPod], placement: Placement) -> f64 {
    let demand = Demand {
        workloads: seq
            .iter()
            .enumerate()
            .map(|(k, p)| openb::workload(p, &format!("pod-{k:05}"), "trace", k as u64))
            .collect(),
        ..Demand::default()
    };
    let policy = Policy {
        placement,
        ..Policy::default()
    };
    let plan = accord::plan::plan(fleet, &demand, &policy, 0);
    let allocated: u64 = plan
        .placements
        .iter()
        .filter_map(|w| {
            let k: usize = w.workload.strip_prefix("trace/pod-")?.parse().ok()?;
            Some(seq.get(k)?.gpu_milli_total())
        })
        .sum();
    allocated as f64 / capacity as f64
}

/// Pods until their GPU requests reach 130 % of capacity (the caller
/// makes sure some pod requests GPUs).
fn until_130<'a>(capacity: u64, mut next: impl FnMut() -> &'a OpenbPod) -> Vec<&'a OpenbPod> {
    let mut seq = Vec::new();
    let mut requested = 0;
    while requested * 10 < capacity * 13 {
        let p = next();
        requested += p.gpu_milli_total();
        seq.push(p);
    }
    seq
}

fn main() -> ExitCode {
    let args = Args::parse();
    match quality(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("alibaba-quality: {message}");
            ExitCode::from(2)
        }
    }
}

fn quality(args: &Args) -> Result<(), String> {
    let nodes = load(&args.nodes, openb::parse_nodes)?;
    let pods = load(&args.pods, openb::parse_pods)?;
    let fleet = openb::fleet_file(&nodes, PowerState::On)
        .build(&args.nodes.display().to_string(), &mut |_| {
            Err("no hardware files".into())
        })
        .map_err(|e| e.to_string())?;
    let capacity = openb::gpu_capacity_milli(&nodes);
    if capacity == 0 {
        return Err(format!("{}: no node has GPUs", args.nodes.display()));
    }
    // Without one, the submission to 130 % would never end.
    if pods.iter().all(|p| p.gpu_milli_total() == 0) {
        return Err(format!("{}: no pod requests a GPU", args.pods.display()));
    }
    let draws = args.draws;
    println!(
        "Alibaba openb trace: {} GPU nodes, {} GPUs ({}); {} pods in the list ({}), {} with gpu_spec",
        nodes.iter().filter(|n| n.gpus > 0).count(),
        capacity / 1000,
        file_name(&args.nodes),
        pods.len(),
        file_name(&args.pods),
        pods.iter()
            .filter(|p| p.num_gpu > 0 && !p.gpu_spec.is_empty())
            .count(),
    );
    for placement in [Placement::FirstFit, Placement::LeastFragmentation] {
        let start = Instant::now();
        let mut i = 0;
        let trace_seq = until_130(capacity, || {
            let p = &pods[i % pods.len()];
            i += 1;
            p
        });
        let trace = run(&fleet, capacity, &trace_seq, placement);
        let mut sum = 0.0;
        for seed in 0..draws {
            let mut rng = Rng::new(seed + 1);
            let seq = until_130(capacity, || &pods[rng.below(pods.len() as u64) as usize]);
            sum += run(&fleet, capacity, &seq, placement);
        }
        println!(
            "{placement:?}: trace order {:.2} %, mean of {draws} seeded draws {:.2} % ({:.1} s)",
            trace * 100.0,
            sum / draws as f64 * 100.0,
            start.elapsed().as_secs_f64()
        );
    }
    let pods_file = file_name(&args.pods);
    match PUBLISHED.iter().find(|(f, ..)| *f == pods_file) {
        Some((_, fgd, best_fit)) if file_name(&args.nodes) == PUBLISHED_NODES => println!(
            "Published for {pods_file} (FGD artifact, mean of 10 seeds): \
             FGD {fgd:.2} %, best-fit {best_fit:.2} %"
        ),
        _ => println!(
            "no published figure for {pods_file} on {}",
            file_name(&args.nodes)
        ),
    }
    Ok(())
}
