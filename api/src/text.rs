//! `accordctl status` and `accordctl explain` from the control loop's last
//! round (pure: a [`ControlStatus`] in, text out), shared with the lab's
//! narration so both say the same thing.

use std::collections::BTreeMap;

use crate::control::{
    describe, stage_label, ControlStatus, Mode, ReplicaStatus, WorkloadState, WorkloadStatus,
};

/// One line on a replica: who it is, whether it leads, who does.
pub fn render_replica(r: &ReplicaStatus) -> String {
    match (r.leading, &r.leader) {
        (true, _) => format!(
            "replica {}: leading (term {})\n",
            r.identity,
            r.transitions.map_or("-".to_owned(), |t| t.to_string())
        ),
        (false, Some(l)) => format!("replica {}: following; the leader is {l}\n", r.identity),
        (false, None) => format!("replica {}: following; no leader known yet\n", r.identity),
    }
}

/// The fleet summary: nodes by stage, per node, pending workloads, actions.
pub fn render_status(s: &ControlStatus) -> String {
    let mut out = String::new();
    if let Some(r) = &s.replica {
        out.push_str(&render_replica(r));
    }
    let mut by_stage: BTreeMap<String, usize> = BTreeMap::new();
    for n in &s.nodes {
        *by_stage.entry(stage_label(n.stage)).or_default() += 1;
    }
    let stages: Vec<String> = by_stage.iter().map(|(k, v)| format!("{v} {k}")).collect();
    out.push_str(&format!(
        "mode {:?}, round {}, planned in {:.1} ms; {} nodes: {}\n\n",
        s.mode,
        s.round,
        s.planner_ms,
        s.nodes.len(),
        stages.join(", ")
    ));
    if !s.boot_times.is_empty() {
        let per: Vec<String> = s
            .boot_times
            .iter()
            .map(|b| {
                format!(
                    "{} median {} s (p90 {} s, {} boots)",
                    b.profile, b.ready_median_s, b.ready_p90_s, b.boots
                )
            })
            .collect();
        out.push_str(&format!("power-on to Node Ready: {}\n\n", per.join("; ")));
    }
    if let Some(w) = &s.warm {
        out.push_str(&format!(
            "warm (predictive): {:.1} arrivals expected within {} s; {} placeholders, \
             {} GPUs held for them; {:.1} of {} GPU-hours spent in 24 h\n\n",
            w.expected_arrivals,
            w.lookahead_s,
            w.placeholders,
            w.held_gpus,
            w.spent_gpu_hours,
            w.budget_gpu_hours
        ));
    }
    out.push_str(&format!(
        "{:<12} {:<6} {:<13} {:>4} {:>5} {:>8}  REASON\n",
        "NODE", "RACK", "STAGE", "GPUS", "PODS", "FOR"
    ));
    for n in &s.nodes {
        out.push_str(&format!(
            "{:<12} {:<6} {:<13} {:>4} {:>5} {:>8}  {}\n",
            n.name,
            n.rack.as_deref().unwrap_or("-"),
            stage_label(n.stage),
            n.gpus,
            n.pods,
            format!("{} s", s.at.saturating_sub(n.since)),
            n.reason.as_deref().unwrap_or("")
        ));
    }
    let drifted: Vec<_> = s.nodes.iter().filter(|n| !n.drift.is_empty()).collect();
    if !drifted.is_empty() {
        out.push_str("\ndrift (planned with the agent's report and the scheduler's view):\n");
        for n in drifted {
            let held = if n.model == crate::control::ModelSource::Held {
                " [held: left out until an admin acts]"
            } else {
                ""
            };
            for d in &n.drift {
                out.push_str(&format!("  {}: {d}{held}\n", n.name));
            }
        }
    }
    let missing: Vec<_> = s
        .watches
        .iter()
        .filter(|w| w.api_version.is_none())
        .collect();
    if !missing.is_empty() {
        out.push_str("\nnot served by this cluster (not watched):\n");
        for w in missing {
            out.push_str(&format!(
                "  {}{}\n",
                w.kind,
                w.note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            ));
        }
    }
    out.push('\n');
    if s.workloads.is_empty() {
        out.push_str("no pending workloads\n");
    } else {
        out.push_str(&format!(
            "{:<28} {:>4} {:<13} {:>9}  DETAIL\n",
            "PENDING WORKLOAD", "PODS", "STATE", "PENDING"
        ));
        for w in &s.workloads {
            out.push_str(&format!(
                "{:<28} {:>4} {:<13} {:>9}  {}\n",
                w.workload,
                w.pods,
                w.state,
                format!("{:.0} s", w.pending_s),
                detail(w)
            ));
        }
    }
    for c in &s.cannot_plan {
        out.push_str(&format!("cannot plan {}: {}\n", c.workload, c.reason));
    }
    if !s.actions.is_empty() {
        out.push_str(&format!(
            "\n{} ({}):\n",
            if s.mode == Mode::Act {
                "actions this round"
            } else {
                "would do (observe mode)"
            },
            s.actions.len()
        ));
        for a in &s.actions {
            out.push_str(&format!("  {}\n", describe(a)));
        }
    }
    if s.mode == Mode::Observe && !s.would_write.is_empty() {
        out.push_str(&format!(
            "\nobserve mode: {} Kubernetes write(s) not made (`--json` lists them); latest: {} {}: {}\n",
            s.would_write.len(),
            s.would_write[s.would_write.len() - 1].regarding.kind,
            s.would_write[s.would_write.len() - 1].regarding.key(),
            s.would_write[s.would_write.len() - 1].what
        ));
    }
    if !s.open_intents.is_empty() {
        out.push_str(&format!(
            "\npower actions in flight: {}\n",
            s.open_intents
                .iter()
                .map(|i| format!("{} {:?}", i.node, i.action))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !s.commands.is_empty() {
        out.push_str(
            "
MIG repartitions (each node's latest):
",
        );
        for c in &s.commands {
            out.push_str(&format!("  {}\n", command_line(c, s.at)));
        }
    }
    out
}

/// One line on an agent command: node, generation, who, what, where it is.
pub fn command_line(c: &crate::agent::CommandRecord, now: u64) -> String {
    use crate::agent::CommandState;
    let via = match c.via {
        accord::fleet::MigVia::Agent => "agent",
        accord::fleet::MigVia::GpuOperator => "gpu-operator",
    };
    let what = c
        .targets
        .iter()
        .map(|t| format!("GPU {} → [{}]", t.index, t.layout.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let state = match &c.state {
        CommandState::Open if c.mig_config.is_some() && !c.deliver => format!(
            "waiting for mig-manager (nvidia.com/mig.config={})",
            c.mig_config.as_deref().unwrap_or("")
        ),
        CommandState::Open => "journaled, not yet handed to the agent".to_owned(),
        CommandState::Sent { at } => {
            format!("with the agent for {} s", now.saturating_sub(*at))
        }
        CommandState::Closed { result, .. } => result.describe(),
    };
    format!(
        "{} #{} via {via}: {what}, for {}: {state}",
        c.node,
        c.generation,
        c.for_workloads.join(", ")
    )
}

fn detail(w: &WorkloadStatus) -> String {
    match w.state {
        WorkloadState::CannotPlace => w.reason.clone().unwrap_or_default(),
        WorkloadState::PoweringOn => format!("powering on {}", w.powering_on.join(", ")),
        WorkloadState::Repartitioning => format!("repartitioning MIG on {}", w.nodes.join(", ")),
        WorkloadState::Placed => format!("fits on {}", w.nodes.join(", ")),
    }
}

/// Why `query` (a workload `ns/name`, a pending pod `ns/name`, or a bare
/// name) is pending, what Accord will do, and whether the scheduler
/// agrees. `None` when nothing pending matches.
/// The predicted time to capacity of a placed workload, and what it rests
/// on (the boots measured of its nodes' profiles).
fn time_to_capacity(s: &ControlStatus, w: &crate::control::WorkloadStatus) -> String {
    let booting = s.nodes.iter().any(|n| {
        w.nodes.contains(&n.name)
            && matches!(
                n.stage,
                accord::lifecycle::Stage::Off
                    | accord::lifecycle::Stage::PoweringOn
                    | accord::lifecycle::Stage::Booting
                    | accord::lifecycle::Stage::AgentUp
            )
    });
    if !booting {
        return String::new();
    }
    let seen: Vec<String> = s
        .boot_times
        .iter()
        .map(|b| {
            format!(
                "{}: median {} s, 90th percentile {} s over {} boot(s)",
                b.profile, b.ready_median_s, b.ready_p90_s, b.boots
            )
        })
        .collect();
    match w.capacity_in_s {
        Some(0) => format!(
            "Accord: its nodes are past their expected boot time; Ready any moment ({})\n",
            seen.join("; ")
        ),
        Some(t) => format!(
            "Accord: predicted time to capacity: {t} s (power-on to Node Ready measured: {})\n",
            seen.join("; ")
        ),
        None => "Accord: predicted time to capacity: unknown (no boot of its nodes' profile \
                 measured yet)\n"
            .to_owned(),
    }
}

pub fn render_explain(s: &ControlStatus, query: &str) -> Option<String> {
    let (workload, pod) = if s.workloads.iter().any(|w| w.workload == query)
        || (!s.pods.contains_key(query) && s.cannot_plan.iter().any(|c| c.workload == query))
    {
        (query.to_owned(), None)
    } else if let Some(w) = s.pods.get(query) {
        (w.clone(), Some(query.to_owned()))
    } else {
        // A bare name: a workload or pod of that name in any namespace.
        let by_workload = s
            .workloads
            .iter()
            .find(|w| w.workload.rsplit('/').next() == Some(query));
        match by_workload {
            Some(w) => (w.workload.clone(), None),
            None => {
                let (p, w) = s
                    .pods
                    .iter()
                    .find(|(p, _)| p.rsplit('/').next() == Some(query))?;
                (w.clone(), Some(p.clone()))
            }
        }
    };
    let mut out = String::new();
    let w = s.workloads.iter().find(|x| x.workload == workload);
    let cannot = s
        .cannot_plan
        .iter()
        .find(|c| c.workload == workload)
        .map(|c| &c.reason);
    if let Some(p) = &pod {
        out.push_str(&format!("pod {p} belongs to workload {workload}\n"));
    }
    let members: Vec<&String> = s
        .pods
        .iter()
        .filter(|(_, w)| **w == workload)
        .map(|(p, _)| p)
        .collect();
    match (w, cannot) {
        (_, Some(reason)) => {
            out.push_str(&format!(
                "{workload}: Accord cannot plan it: {reason}\nnothing will be powered on for it\n"
            ));
        }
        (Some(w), None) => {
            out.push_str(&format!(
                "{}: {} pod(s), gang minimum {}{}; pending {:.0} s\n",
                w.workload,
                w.pods,
                w.min,
                if w.sources.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", accord::demand::sources_text(&w.sources))
                },
                w.pending_s
            ));
            if let Some(a) = &w.approximation {
                out.push_str(&format!("note: {a}\n"));
            }
            match w.state {
                WorkloadState::CannotPlace => out.push_str(&format!(
                    "Accord: cannot place it: {}\nAccord: nothing will be powered on for it\n",
                    w.reason.as_deref().unwrap_or("")
                )),
                WorkloadState::PoweringOn => out.push_str(&format!(
                    "Accord: {} {} for it{}; its pods go to {}\n",
                    if s.mode == Mode::Act {
                        "powering on"
                    } else {
                        "would power on (observe mode: nothing is sent)"
                    },
                    w.powering_on.join(", "),
                    w.domain
                        .as_deref()
                        .map(|d| format!(" (all in {d})"))
                        .unwrap_or_default(),
                    w.nodes.join(", ")
                )),
                WorkloadState::Repartitioning => out.push_str(&format!(
                    "Accord: {} MIG GPUs on {} for it (no node is powered on); its pods go to the new instances once the node's report shows them\n",
                    if s.mode == Mode::Act {
                        "repartitioning"
                    } else {
                        "would repartition (observe mode: nothing is sent)"
                    },
                    w.nodes.join(", ")
                )),
                WorkloadState::Placed => out.push_str(&format!(
                    "Accord: it fits on nodes that are up or coming up: {}{}\n",
                    w.nodes.join(", "),
                    w.domain
                        .as_deref()
                        .map(|d| format!(" (all in {d})"))
                        .unwrap_or_default()
                )),
            }
            if w.state != WorkloadState::CannotPlace {
                out.push_str(&time_to_capacity(s, w));
            }
        }
        (None, None) => {
            out.push_str(&format!(
                "{workload}: not pending in Accord's last round (bound, gone, or not yet seen)\n"
            ));
        }
    }
    // The scheduler's word, and whether it agrees with Accord.
    let said: Vec<(&String, &String)> = members
        .iter()
        .filter_map(|p| s.scheduler.get(*p).map(|m| (*p, m)))
        .collect();
    if let Some((p, msg)) = said.first() {
        out.push_str(&format!("scheduler ({p}): {msg}\n"));
        let up: std::collections::BTreeSet<&str> = s
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.stage,
                    accord::lifecycle::Stage::Ready
                        | accord::lifecycle::Stage::InUse
                        | accord::lifecycle::Stage::Idle
                )
            })
            .map(|n| n.name.as_str())
            .collect();
        if let Some(w) = w {
            let verdict = match w.state {
                WorkloadState::Placed if !w.nodes.is_empty() && w.nodes.iter().all(|n| up.contains(n.as_str())) => {
                    "DISAGREE: Accord finds room on Ready nodes the scheduler refused; check taints, selectors and device plugins on those nodes"
                }
                WorkloadState::Placed => "agree: it does not fit yet; Accord's nodes are still coming up",
                WorkloadState::PoweringOn => "agree: it does not fit on nodes that are up; Accord powers nodes on for it",
                WorkloadState::Repartitioning => "agree: it does not fit the MIG devices there are; Accord repartitions an idle GPU for it",
                WorkloadState::CannotPlace => "agree: it fits nowhere",
            };
            out.push_str(&format!("{verdict}\n"));
        }
    } else if !members.is_empty() {
        out.push_str("scheduler: has not tried its pods yet\n");
    }
    // Observe mode: what Accord would have written about it.
    if let Some(w) = w {
        for ww in s
            .would_write
            .iter()
            .filter(|ww| w.sources.contains(&ww.regarding))
        {
            out.push_str(&format!(
                "observe mode: would have written on {} {}: {}\n",
                ww.regarding.kind,
                ww.regarding.key(),
                ww.what
            ));
        }
    }
    Some(out)
}
