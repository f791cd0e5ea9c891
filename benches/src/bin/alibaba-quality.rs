//! `alibaba-quality`: placement quality on the Alibaba GPU cluster trace
//! (clusterdata `cluster-trace-gpu-v2023`, openb), following the FGD paper's
//! protocol: nodes from `openb_node_list_gpu_node.csv`; pods from
//! `openb_pod_list_default.csv` submitted one by one until the GPUs they
//! request reach 130 % of the cluster's GPU capacity; no departures;
//! fractional GPUs as shared (consumable) capacity. Metric: GPU allocation
//! ratio = GPU capacity allocated to placed pods / total GPU capacity.
//!
//! Prints the ratio for the trace order (the pod list in order, repeated
//! until 130 %) and the mean over 10 seeded random draws (with
//! replacement), for the planner's first-fit and least-fragmentation
//! placements. Published means on this trace: FGD 95.39 %, best-fit 93.08 %.
//!
//! `cargo run --release -p accord-benches --bin alibaba-quality [DRAWS]`

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use accord::demand::{Claim, Demand, DeviceRequest, ExactRequest, PodSet, PodSpec, Workload};
use accord::device::Sharing;
use accord::fleet::{FleetFile, HardwareProfile, NodeConfig, Placement, Policy, PowerState};
use accord_benches::Rng;

struct TracePod {
    cpu_milli: u64,
    memory_mib: u64,
    num_gpu: u64,
    gpu_milli: u64,
}

fn trace_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/traces/alibaba-gpu-v2023")
}

fn rows(file: &str) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(trace_dir().join(file)).expect("trace file");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn num(r: &BTreeMap<String, String>, k: &str) -> u64 {
    r[k].parse().unwrap_or(0)
}

fn fleet() -> (accord::fleet::Fleet, u64) {
    let mut file = FleetFile::default();
    let mut capacity = 0;
    for (i, r) in rows("openb_node_list_gpu_node.csv").iter().enumerate() {
        let gpus = num(r, "gpu") as u32;
        let model = r["model"].clone();
        let profile = format!("{gpus}x{model}");
        file.profiles
            .entry(profile.clone())
            .or_insert_with(|| HardwareProfile {
                gpus,
                gpu_model: Some(model.clone()),
                gpu_memory_gib: 16,
                pods: 1000,
                power_kw: 1.0,
                numa_nodes: Some(1),
                ..HardwareProfile::new("1", "1Gi")
            });
        capacity += u64::from(gpus) * 1000;
        file.nodes.push(NodeConfig {
            rack: None,
            cpu: Some(format!("{}m", num(r, "cpu_milli"))),
            memory: Some(format!("{}Mi", num(r, "memory_mib"))),
            power: PowerState::On,
            gpu_sharing: Some(Sharing::default()),
            ..NodeConfig::new(&format!("node-{i:04}"), &profile)
        });
    }
    (
        file.build("trace", &mut |_| Err("no files".into()))
            .expect("valid fleet"),
        capacity,
    )
}

fn pods() -> Vec<TracePod> {
    rows("openb_pod_list_default.csv")
        .iter()
        .map(|r| TracePod {
            cpu_milli: num(r, "cpu_milli"),
            memory_mib: num(r, "memory_mib"),
            num_gpu: num(r, "num_gpu"),
            gpu_milli: num(r, "gpu_milli"),
        })
        .collect()
}

fn workload(k: usize, p: &TracePod) -> Workload {
    let mut claims = Vec::new();
    if p.num_gpu > 0 {
        let mut capacity = BTreeMap::new();
        if p.gpu_milli < 1000 {
            capacity.insert(
                "gpu.nvidia.com/compute".to_owned(),
                format!("{}m", p.gpu_milli),
            );
        }
        claims.push(Claim {
            name: "gpu".into(),
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                exactly: Some(ExactRequest {
                    name: None,
                    device_class: "gpu.nvidia.com".into(),
                    selectors: vec![],
                    count: p.num_gpu as u32,
                    allocation_mode: Default::default(),
                    capacity,
                }),
                first_available: vec![],
            }],
            constraints: vec![],
        });
    }
    Workload {
        name: format!("pod-{k:05}"),
        namespace: "trace".into(),
        labels: BTreeMap::new(),
        min_count: None,
        priority: 0,
        created: k as u64,
        topology: None,
        reservation: None,
        sources: Vec::new(),
        pod_sets: vec![PodSet {
            name: "p".into(),
            count: 1,
            pod: PodSpec {
                requests: BTreeMap::from([
                    ("cpu".to_owned(), format!("{}m", p.cpu_milli)),
                    ("memory".to_owned(), format!("{}Mi", p.memory_mib)),
                ]),
                claims,
                ..PodSpec::default()
            },
        }],
    }
}

/// Allocation ratio for one submission sequence.
fn run(
    fleet: &accord::fleet::Fleet,
    capacity: u64,
    seq: &[&TracePod],
    placement: Placement,
) -> f64 {
    let demand = Demand {
        workloads: seq
            .iter()
            .enumerate()
            .map(|(k, p)| workload(k, p))
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
        .map(|w| {
            let k: usize = w
                .workload
                .trim_start_matches("trace/pod-")
                .parse()
                .unwrap_or(0);
            seq[k].num_gpu * seq[k].gpu_milli
        })
        .sum();
    allocated as f64 / capacity as f64
}

/// Pods until their GPU requests reach 130 % of capacity.
fn until_130<'a>(capacity: u64, mut next: impl FnMut() -> &'a TracePod) -> Vec<&'a TracePod> {
    let mut seq = Vec::new();
    let mut requested = 0;
    while requested * 10 < capacity * 13 {
        let p = next();
        requested += p.num_gpu * p.gpu_milli;
        seq.push(p);
    }
    seq
}

fn main() {
    let draws: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let (fleet, capacity) = fleet();
    let pods = pods();
    println!(
        "Alibaba openb trace: {} GPU nodes, {} GPUs; {} pods in the list",
        fleet.nodes.len(),
        capacity / 1000,
        pods.len()
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
}
