//! The lab's end-of-run summary (what `--until-idle` prints, or `--json`).

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadSummary {
    pub name: String,
    pub pods: usize,
    pub submitted_s: Option<f64>,
    pub bound: bool,
    pub time_to_bound_s: Option<f64>,
    /// From submission to the first Reset accordd sent for a node its pods
    /// ended on (none when they needed no power-on).
    pub time_to_first_reset_s: Option<f64>,
    pub nodes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cannot_place: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    pub name: String,
    pub power_cycles: u32,
    pub on_now: bool,
    pub used: bool,
    pub on_s: f64,
    /// accordd's lifecycle stage for it.
    pub stage: Option<String>,
    /// The recording the machine replays (a built-in's name, or a path).
    pub recording: String,
    /// What accordd plans it with: `declared` (the fleet file), `reported`
    /// (its agent's report) or `held` (left out: it drifts).
    pub model: Option<String>,
    /// Where accordd found its agent's report (or the cluster) differing
    /// from its declaration (or the model), in accordd's words ("GPUs:
    /// declared 8, reported 7"); at the end, or the last it said.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The Kubernetes version the lab's API server emulated.
    pub kube_version: String,
    /// Submissions not made: the emulated version does not serve what
    /// they are made of.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    pub elapsed_s: f64,
    pub nodes_powered_on: usize,
    pub nodes_powered_on_never_used: usize,
    pub gpu_hours_powered: f64,
    pub gpu_hours_used: f64,
    pub resets_sent: usize,
    /// Every request accordd sent to a BMC (reads included).
    pub bmc_requests: usize,
    pub workloads: Vec<WorkloadSummary>,
    pub nodes: Vec<NodeSummary>,
}

impl Summary {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} s"));
        out.push_str(&format!(
            "{:<12} {:>4} {:>10} {:>8} {:>12} {:>14}  NODES\n",
            "WORKLOAD", "PODS", "SUBMITTED", "BOUND", "TO BOUND", "TO 1ST RESET"
        ));
        for w in &self.workloads {
            out.push_str(&format!(
                "{:<12} {:>4} {:>10} {:>8} {:>12} {:>14}  {}\n",
                w.name,
                w.pods,
                f(w.submitted_s),
                if w.bound { "yes" } else { "no" },
                f(w.time_to_bound_s),
                f(w.time_to_first_reset_s),
                if w.nodes.is_empty() {
                    w.cannot_place
                        .as_deref()
                        .map(|r| format!("cannot place: {r}"))
                        .unwrap_or_else(|| "-".into())
                } else {
                    w.nodes.join(",")
                }
            ));
        }
        out.push('\n');
        out.push_str(&format!(
            "{:<8} {:>6} {:>5} {:>6} {:>8}  {:<11} {:<9} RECORDING\n",
            "NODE", "CYCLES", "ON", "USED", "ON FOR", "STAGE", "MODEL"
        ));
        for n in &self.nodes {
            out.push_str(&format!(
                "{:<8} {:>6} {:>5} {:>6} {:>8}  {:<11} {:<9} {}\n",
                n.name,
                n.power_cycles,
                if n.on_now { "on" } else { "off" },
                if n.used { "yes" } else { "no" },
                format!("{:.0} s", n.on_s),
                n.stage.as_deref().unwrap_or("-"),
                n.model.as_deref().unwrap_or("-"),
                n.recording
            ));
        }
        let drifting: Vec<&NodeSummary> =
            self.nodes.iter().filter(|n| !n.drift.is_empty()).collect();
        if drifting.is_empty() {
            out.push_str("\ndrift: none (every machine as declared, as accordd saw them)\n");
        } else {
            out.push_str("\ndrift (accordd's words):\n");
            for n in drifting {
                out.push_str(&format!("  {:<8} {}\n", n.name, n.drift.join("; ")));
            }
        }
        for why in &self.skipped {
            out.push_str(&format!("\nskipped: {why}"));
        }
        if !self.skipped.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!(
            "\nKubernetes {} (emulated); nodes powered on: {}; powered on but never used: {}; GPU-hours powered {:.2}, used {:.2}; Resets sent: {}; BMC requests: {}; {:.0} s\n",
            self.kube_version,
            self.nodes_powered_on,
            self.nodes_powered_on_never_used,
            self.gpu_hours_powered,
            self.gpu_hours_used,
            self.resets_sent,
            self.bmc_requests,
            self.elapsed_s
        ));
        out
    }
}
