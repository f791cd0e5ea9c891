//! The lab's end-of-run summary (what `--until-idle` prints, or `--json`):
//! assembled from what the lab recorded, the BMC proxy's and emulator's
//! logs and accordd's last status ([`Lab::summary`]), and rendered.

use std::collections::{BTreeMap, BTreeSet};

use accord_api::control::{ControlStatus, ModelSource, WorkloadState};
use serde::Serialize;
use tokio::time::Instant;

use crate::{proxy, workload_keys, Lab};

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
    /// A job Kueue admitted through a ProvisioningRequest: when it said
    /// Provisioned=True, and which Nodes were Ready then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provisioning_request: Option<ProvisioningSummary>,
}

/// A ProvisioningRequest as the lab saw it turn Provisioned=True.
#[derive(Debug, Clone, Serialize)]
pub struct ProvisioningSummary {
    pub name: String,
    pub class: String,
    /// From the submission to Provisioned=True (seen by the lab, which
    /// looks every 100 ms).
    pub provisioned_s: f64,
    /// The Nodes registered Ready when the lab saw Provisioned=True.
    pub ready_nodes_then: Vec<String>,
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
    /// Upstream: DaemonSet pods the real controller made and the
    /// scheduler bound to it over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemonset_pods: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The Kubernetes version the lab ran.
    pub kube_version: String,
    /// `upstream` (the real control plane) or `fake`.
    pub kubernetes: String,
    /// Upstream: its components and versions (`kube-apiserver v1.37.2`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub control_plane: Vec<String>,
    /// Nodes on at the end.
    pub nodes_left_on: usize,
    /// What the lab says plainly about how the run ended where accordd
    /// did not do what the summary expects (nodes it left on, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Upstream: the scenario's pods found bound to a Node before it
    /// carried Accord's topology labels (`ns/name→node`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods_bound_before_labels: Vec<String>,
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
    /// BIOS profiles: Settings PATCHes accordd sent, nodes it verified
    /// and nodes it failed for theirs.
    pub bios: BiosSummary,
    /// MIG repartitions the machines' GPUs went through, by who carried
    /// them out (`agent`, `gpu-operator`); none: absent.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mig_repartitions: BTreeMap<String, u64>,
    /// A chaos run's faults and safety counts (absent without chaos).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chaos: Option<crate::chaos::ChaosSummary>,
    /// Several accordd replicas (`[lab.ha]`, `--replicas`): the Lease's
    /// holders, the fault and takeover, Resets and writes by replica
    /// (absent with one accordd).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha: Option<crate::ha::HaSummary>,
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
            if let Some(p) = &w.provisioning_request {
                out.push_str(&format!(
                    "{:<12} ProvisioningRequest {} ({}): Provisioned after {:.1} s, Nodes Ready then: {}\n",
                    "",
                    p.name,
                    p.class,
                    p.provisioned_s,
                    p.ready_nodes_then.join(",")
                ));
            }
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
        if self.bios != BiosSummary::default() {
            out.push_str(&format!(
                "\nBIOS profiles: staged {} (Settings PATCHes), verified on {} node(s), failed on {}\n",
                self.bios.staged, self.bios.verified, self.bios.failed
            ));
        }
        if !self.mig_repartitions.is_empty() {
            out.push_str(&format!(
                "\nMIG repartitions: {}\n",
                self.mig_repartitions
                    .iter()
                    .map(|(who, n)| format!(
                        "{n} by the {}",
                        if who == "agent" {
                            "agent"
                        } else {
                            "GPU Operator's mig-manager"
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(c) = &self.chaos {
            out.push_str(&c.render());
        }
        if let Some(h) = &self.ha {
            out.push_str(&h.render());
        }
        for why in &self.skipped {
            out.push_str(&format!("\nskipped: {why}"));
        }
        if !self.skipped.is_empty() {
            out.push('\n');
        }
        for f in &self.findings {
            out.push_str(&format!("\nfinding: {f}\n"));
        }
        let kubernetes = if self.control_plane.is_empty() {
            format!("Kubernetes {} (the fake API)", self.kube_version)
        } else {
            format!(
                "Kubernetes {} (upstream: {})",
                self.kube_version,
                self.control_plane.join(", ")
            )
        };
        out.push_str(&format!(
            "\n{kubernetes}; nodes powered on: {}; powered on but never used: {}; left on: {}; GPU-hours powered {:.2}, used {:.2}; Resets sent: {}; BMC requests: {}; {:.0} s\n",
            self.nodes_powered_on,
            self.nodes_powered_on_never_used,
            self.nodes_left_on,
            self.gpu_hours_powered,
            self.gpu_hours_used,
            self.resets_sent,
            self.bmc_requests,
            self.elapsed_s
        ));
        out
    }
}

impl Lab {
    /// The summary now.
    pub fn summary(&self, status: Option<&ControlStatus>) -> Summary {
        let now = Instant::now();
        let r = self.record.lock().expect("lock");
        let secs = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(b.duration_since(a).as_secs_f64()),
            _ => None,
        };
        let log = self.proxy.log();
        let workloads = self
            .scenario
            .submit
            .iter()
            .zip(&r.subs)
            .map(|(sub, s)| {
                let first_reset = s.submitted.and_then(|t0| {
                    log.iter()
                        .filter(|l| {
                            l.power_on
                                && l.at >= t0
                                && s.nodes.iter().any(|n| l.path == proxy::reset_path(n))
                        })
                        .map(|l| l.at.duration_since(t0).as_secs_f64())
                        .reduce(f64::min)
                });
                WorkloadSummary {
                    name: sub.name.clone(),
                    pods: s.pods.len(),
                    submitted_s: s
                        .submitted
                        .map(|t| t.duration_since(self.started).as_secs_f64()),
                    bound: s.bound.is_some(),
                    time_to_bound_s: secs(s.submitted, s.bound),
                    time_to_first_reset_s: first_reset,
                    nodes: s.nodes.iter().cloned().collect(),
                    // The status that ended the run says it (the record
                    // is filled by another task, a poll behind).
                    cannot_place: if s.bound.is_none() {
                        status
                            .and_then(|st| cannot_place_reason(st, &workload_keys(s)))
                            .or_else(|| s.cannot_place.clone())
                    } else {
                        None
                    },
                    provisioning_request: s.provisioned.as_ref().map(|p| ProvisioningSummary {
                        name: p.name.clone(),
                        class: p.class.clone(),
                        provisioned_s: s
                            .submitted
                            .map_or(0.0, |t| p.at.duration_since(t).as_secs_f64()),
                        ready_nodes_then: p.ready_nodes.clone(),
                    }),
                }
            })
            .collect();
        let mut powered_gpu_s = 0.0;
        // The GPUs the machine has (its recording), not the declared ones.
        let gpus_of = |name: &str| self.recordings.get(name).map_or(0.0, |m| m.gpus as f64);
        let nodes: Vec<NodeSummary> = r
            .nodes
            .iter()
            .map(|(name, n)| {
                let on_s = n.on_total.as_secs_f64()
                    + n.powered_at
                        .map(|t| now.duration_since(t).as_secs_f64())
                        .unwrap_or(0.0);
                powered_gpu_s += on_s * gpus_of(name);
                let st = status.and_then(|s| s.nodes.iter().find(|x| &x.name == name));
                // accordd's drift now, else the last it said while the run
                // went on.
                let drift = match st {
                    Some(x) if !x.drift.is_empty() => {
                        x.drift.iter().map(ToString::to_string).collect()
                    }
                    _ => n.drift.clone(),
                };
                NodeSummary {
                    name: name.clone(),
                    power_cycles: n.power_cycles,
                    on_now: n.on,
                    used: n.used,
                    on_s,
                    stage: st.map(|x| accord_api::control::stage_label(x.stage)),
                    recording: self
                        .recordings
                        .get(name)
                        .map(|m| m.recording.name.clone())
                        .unwrap_or_default(),
                    model: st.map(|x| x.model).or(n.model).map(model_label),
                    drift,
                    daemonset_pods: self.api.upstream().map(|_| n.daemonset_pods.len()),
                }
            })
            .collect();
        let used_gpu_s = r.used_gpu_s
            + r.bound
                .values()
                .map(|(t, g, _)| now.duration_since(*t).as_secs_f64() * g)
                .sum::<f64>();
        let resets = self
            .emulator
            .requests()
            .iter()
            .filter(|r| r.starts_with("POST ") && r.contains("/Actions/ComputerSystem.Reset"))
            .count();
        let mut mig_repartitions = BTreeMap::new();
        let all: u64 = r
            .nodes
            .values()
            .map(|n| n.repartitions + n.gpus.as_ref().map_or(0, |g| g.repartitions()))
            .sum();
        let operator: u64 = r.mig_operator.values().sum();
        for (who, n) in [
            ("agent", all.saturating_sub(operator)),
            ("gpu-operator", operator),
        ] {
            if n > 0 {
                mig_repartitions.insert(who.to_owned(), n);
            }
        }
        let ha = self.ha_summary();
        Summary {
            chaos: None,
            ha,
            mig_repartitions,
            kube_version: self.kube_version.to_string(),
            kubernetes: if self.api.fake().is_some() {
                "fake"
            } else {
                "upstream"
            }
            .to_owned(),
            control_plane: self.control_plane.clone(),
            nodes_left_on: nodes.iter().filter(|n| n.on_now).count(),
            findings: self.findings(&r),
            pods_bound_before_labels: r.bound_before_labels.clone(),
            skipped: self.skipped.clone(),
            elapsed_s: now.duration_since(self.started).as_secs_f64(),
            nodes_powered_on: nodes.iter().filter(|n| n.power_cycles > 0).count(),
            nodes_powered_on_never_used: nodes
                .iter()
                .filter(|n| n.power_cycles > 0 && !n.used)
                .count(),
            gpu_hours_powered: powered_gpu_s / 3600.0,
            gpu_hours_used: used_gpu_s / 3600.0,
            resets_sent: resets,
            bmc_requests: log.len(),
            bios: bios_summary(&log, status),
            workloads,
            nodes,
        }
    }
}

impl Lab {
    /// What the lab says of nodes accordd left on with none of the
    /// scenario's work, but those an admin cordoned (Accord leaves them
    /// as the admin left them unless `policy.power_off_cordoned`).
    fn findings(&self, r: &crate::Record) -> Vec<String> {
        let busy: BTreeSet<&str> = r.bound.values().map(|(_, _, n)| n.as_str()).collect();
        let cordoned = |name: &str| {
            !self.fleet.policy.power_off_cordoned
                && self
                    .scenario
                    .lab
                    .machines
                    .get(name)
                    .is_some_and(|m| m.cordoned)
        };
        let left_on_after =
            std::time::Duration::from_secs(self.fleet.policy.idle_power_off_after_s)
                + crate::wait::LEFT_ON_GRACE;
        let now = tokio::time::Instant::now();
        let left: Vec<String> = r
            .nodes
            .iter()
            .filter(|(name, n)| {
                n.on && n.registered
                    && !busy.contains(name.as_str())
                    && !cordoned(name)
                    && n.idle_since
                        .is_some_and(|t| now.duration_since(t) >= left_on_after)
            })
            .map(|(name, _)| name.clone())
            .collect();
        if left.is_empty() {
            return Vec::new();
        }
        vec![format!(
            "accordd left {} on with none of the scenario's work (node agents, such as \
             DaemonSet pods, are none) past the idle power-off time",
            left.join(", ")
        )]
    }
}

/// Accord's reason the workloads `keys` cannot be placed, from `status`:
/// the first of them it says so of.
fn cannot_place_reason(status: &ControlStatus, keys: &BTreeSet<String>) -> Option<String> {
    status
        .workloads
        .iter()
        .filter(|w| keys.contains(&w.workload) && w.state == WorkloadState::CannotPlace)
        .find_map(|w| w.reason.clone())
}

/// How the summary names where accordd's model of a node comes from.
fn model_label(m: ModelSource) -> String {
    match m {
        ModelSource::Declared => "declared",
        ModelSource::Reported => "reported",
        ModelSource::Held => "held",
    }
    .to_owned()
}

/// BIOS profiles in the lab's summary: Settings PATCHes accordd sent
/// (from the BMC proxy's log), nodes whose profile accordd verified and
/// nodes it failed for theirs (its last status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BiosSummary {
    pub staged: usize,
    pub verified: usize,
    pub failed: usize,
}

fn bios_summary(
    log: &[proxy::Logged],
    status: Option<&accord_api::control::ControlStatus>,
) -> BiosSummary {
    use accord_api::control::BiosState;
    let staged = log
        .iter()
        .filter(|l| l.method == "PATCH" && l.path.ends_with("/Bios/Settings"))
        .count();
    let states = status
        .into_iter()
        .flat_map(|s| &s.nodes)
        .filter_map(|n| n.bios.as_ref());
    let (mut verified, mut failed) = (0, 0);
    for b in states {
        match b.state {
            BiosState::Applied if b.verified_at.is_some() => verified += 1,
            BiosState::Failed => failed += 1,
            _ => {}
        }
    }
    BiosSummary {
        staged,
        verified,
        failed,
    }
}
