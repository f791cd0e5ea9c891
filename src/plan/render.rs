//! The human-readable form of a plan.

use super::*;

/// The human-readable form of a plan (`accordctl plan`).
pub fn render(plan: &Plan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "Actions ({})", plan.actions.len());
    for a in &plan.actions {
        let _ = match a {
            Action::PowerOn {
                node,
                wave,
                for_workloads,
            } => writeln!(
                s,
                "  power on   {node} (wave {wave}) for {}",
                for_workloads.join(", ")
            ),
            Action::ApplyBiosProfile { node, profile } => {
                writeln!(s, "  bios       {node}: apply profile {profile}")
            }
            Action::ReconfigureMig {
                node,
                gpu,
                layout,
                for_workloads,
            } => writeln!(
                s,
                "  mig        {node} gpu {gpu} -> [{}] for {}",
                layout.join(", "),
                for_workloads.join(", ")
            ),
            Action::PowerOff { node, reason } => writeln!(s, "  power off  {node}: {reason}"),
        };
    }
    let _ = writeln!(s, "Placements ({})", plan.placements.len());
    for p in &plan.placements {
        let mut head = format!("  {}", p.workload);
        if let Some(d) = &p.domain {
            head.push_str(&format!(" in {d}"));
        }
        if let Some(r) = &p.reservation {
            head.push_str(&format!(" (reservation {r})"));
        }
        let _ = writeln!(s, "{head}");
        for pod in &p.pods {
            let devices: Vec<String> = pod
                .devices
                .iter()
                .map(|d| {
                    if d.capacity.is_empty() {
                        d.device.to_string()
                    } else {
                        let caps: Vec<String> = d
                            .capacity
                            .iter()
                            .map(|(k, v)| format!("{k}={}", quantity::Display(*v)))
                            .collect();
                        format!("{}[{}]", d.device, caps.join(","))
                    }
                })
                .collect();
            let _ = writeln!(
                s,
                "    {} -> {}{}{}",
                pod.pod,
                pod.node,
                if devices.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", devices.join(", "))
                },
                if pod.reclaimable {
                    " (reclaimable)"
                } else {
                    ""
                }
            );
        }
    }
    let _ = writeln!(s, "Unsatisfied ({})", plan.unsatisfied.len());
    for u in &plan.unsatisfied {
        match u.sources.first() {
            Some(src) => writeln!(s, "  {} ({src}): {}", u.workload, u.reason),
            None => writeln!(s, "  {}: {}", u.workload, u.reason),
        }
        .ok();
    }
    for n in &plan.notes {
        let _ = writeln!(s, "Note: {n}");
    }
    s
}
