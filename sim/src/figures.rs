//! What a simulation measured, per policy: the JSON written as
//! `figures.json` and what the HTML report draws. Every float is rounded
//! (see [`round3`]) so the same inputs and seed give byte-identical JSON.

use serde::{Deserialize, Serialize};

/// The whole result of `accordctl simulate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// The seed the boot and BMC delays were drawn with.
    pub seed: u64,
    pub inputs: Inputs,
    /// One entry per policy, in the order given on the command line.
    pub policies: Vec<PolicyFigures>,
}

/// What was simulated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    /// Where the fleet came from (a file name, or "embedded default").
    pub fleet: String,
    /// Where the demand came from.
    pub trace: String,
    pub nodes: usize,
    /// Whole GPUs in the fleet.
    pub gpus: u64,
    /// Workloads in the trace (each run once per policy).
    pub workloads: usize,
    /// Virtual seconds simulated (the same for every policy).
    pub horizon_s: u64,
    /// The control loop's round interval in virtual seconds.
    pub round_s: u64,
    /// Power-on request → BMC shows On, seconds: the range drawn from.
    pub bmc_delay_s: [u64; 2],
    /// BMC On → node Ready, seconds: the range drawn from.
    pub boot_delay_s: [u64; 2],
}

/// One policy's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyFigures {
    pub name: String,
    /// The policy as simulated (the fleet's `[policy]` with the file's keys).
    pub policy: accord::fleet::Policy,
    pub summary: Summary,
    /// The fleet over time, sampled at fixed steps (at most
    /// [`MAX_SAMPLES`] points): the state after the last round at or
    /// before each sample's time.
    pub series: Vec<Sample>,
    /// Submission → running, per workload class, as a CDF.
    pub time_to_running: Vec<ClassCdf>,
    /// GPU allocation against arrived demand (the FGD paper's Fig. 9a
    /// form), one point per round in which work arrived (at most
    /// [`MAX_POINTS`]).
    pub allocation: Vec<AllocationPoint>,
}

pub const MAX_SAMPLES: usize = 1000;
pub const MAX_POINTS: usize = 500;

/// The table row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Power-on requests sent.
    pub power_ons: u64,
    /// Power-off requests sent.
    pub power_offs: u64,
    /// Nodes powered off and later on again (each off → on counts once).
    pub power_cycles: u64,
    /// Power-ons after which the node ran no pod before it went off again
    /// (or before the end).
    pub unused_power_ons: u64,
    /// MIG repartitions carried out.
    pub mig_reconfigurations: u64,
    pub workloads: u64,
    /// Workloads that ran.
    pub started: u64,
    /// Workloads still pending at the end (never placed).
    pub never_started: u64,
    pub mean_time_to_running_s: Option<f64>,
    /// Median submission → running of the workloads that ran.
    #[serde(default)]
    pub p50_time_to_running_s: Option<f64>,
    pub p95_time_to_running_s: Option<f64>,
    /// Whole-GPU hours of nodes drawing power (BMC On).
    pub gpu_hours_powered: f64,
    /// GPU hours allocated to running pods (shares count as fractions).
    pub gpu_hours_used: f64,
    /// Powered minus used.
    pub gpu_hours_wasted: f64,
    /// From each node's profile `power_kw` while its BMC shows On.
    pub energy_kwh: f64,
    /// Running workloads evicted (a lent reserved node taken back by its
    /// owner) and started again later.
    #[serde(default)]
    pub evictions: u64,
}

/// The fleet at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_s: u64,
    /// GPUs requested by workloads that arrived and are not running
    /// (shares as fractions).
    pub pending_gpus: f64,
    pub pending_workloads: u32,
    pub nodes: NodesByStage,
    /// Whole GPUs on nodes whose BMC shows On.
    pub gpus_powered: u64,
    /// GPUs allocated to running pods (shares as fractions).
    pub gpus_used: f64,
}

/// Nodes per lifecycle stage (`accord::lifecycle::Stage`), grouped the
/// way the charts stack them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodesByStage {
    pub off: u32,
    pub powering_on: u32,
    /// Booting or AgentUp: the BMC shows On, not Ready yet.
    pub booting: u32,
    /// Ready or Idle: up, no pods.
    pub idle: u32,
    pub in_use: u32,
    pub powering_off: u32,
    /// Failed or Unhealthy.
    pub failed: u32,
}

/// Workload classes the CDF is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// More than one pod that must start together.
    Gang,
    /// One pod with whole GPUs.
    Single,
    /// Asks for MIG devices.
    Mig,
    /// Asks for a share of a GPU.
    Shared,
    /// No GPU at all.
    Cpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassCdf {
    pub class: Class,
    /// Workloads of the class that ran.
    pub started: u64,
    /// Of the class that never ran.
    pub never_started: u64,
    /// `[seconds, share 0..=1]`, ascending; at most [`MAX_POINTS`].
    pub points: Vec<[f64; 2]>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationPoint {
    /// GPUs requested by every workload arrived so far, as a share of the
    /// fleet's GPUs (may pass 1).
    pub arrived: f64,
    /// GPUs allocated to running pods now, as a share of the fleet's GPUs.
    pub allocated: f64,
}

/// Rounds to 3 decimals: the JSON stays short and the same bytes.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
