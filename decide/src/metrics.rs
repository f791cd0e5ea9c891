//! What one round measured, as plain data: accordd records it in its
//! Prometheus registry (`accordd::metrics::Metrics::record_round`), the
//! simulator may add it up; neither is known here.

use std::collections::BTreeMap;

/// A few stable classes of "cannot place" reasons, for a label with
/// bounded values (the full reason is in `accordctl explain` and events).
pub fn reason_class(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    if r.contains("topology") || r.contains("domain") {
        "topology"
    } else if r.contains("budget") {
        "power_budget"
    } else if r.contains("reservation") {
        "reservation"
    } else if r.contains("claim") || r.contains("device") || r.contains("cel") {
        "devices"
    } else {
        "capacity"
    }
}

/// What one control round measured (its *decide* fills it; *effect*
/// records it once with `Metrics::record_round`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundMetrics {
    pub planner_seconds: f64,
    /// Lower-case stage name → nodes.
    pub nodes_by_stage: BTreeMap<String, u32>,
    /// Reason class → unsatisfied workloads.
    pub pending_by_reason: BTreeMap<&'static str, u32>,
    /// Finished power actions: (node, succeeded).
    pub power_results: Vec<(String, bool)>,
    pub pending_to_power_on: Vec<f64>,
    pub pending_to_ready: Vec<f64>,
    pub pending_to_bound: Vec<f64>,
    /// Seconds since the oldest workload still pending was first seen
    /// pending (0 when none is).
    pub oldest_pending_seconds: f64,
    /// (node, against) → differences, for nodes with any.
    pub drift: BTreeMap<(String, &'static str), u32>,
    /// BIOS profiles this round by result: `staged` (with a power-on that
    /// went through), `verified`, `failed`.
    pub bios_profiles: BTreeMap<&'static str, u32>,
    /// Agent commands this round: (kind, result), e.g. (`mig_agent`,
    /// `issued`), (`mig_gpu_operator`, `done`), (`mig_agent`, `timeout`).
    pub commands: Vec<(&'static str, &'static str)>,
    /// The longest predicted time to capacity of the workloads placed on
    /// nodes on their way up (0 when none is, or none can be predicted).
    pub time_to_capacity_seconds: f64,
    /// Profile → (median, 90th percentile) power-on → Node Ready measured.
    pub boot_ready_seconds: BTreeMap<String, (f64, f64)>,
}
