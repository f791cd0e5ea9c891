//! What Accord understood, as text for people (`accordctl demand`).

use super::*;

impl Translation {
    /// What Accord understood, for people: `accordctl demand`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let d = &self.demand;
        out.push_str(&format!(
            "{} workload(s), {} pod(s) pending; {} bound pod(s); {} device class(es)\n",
            d.workloads.len(),
            d.workloads.iter().map(|w| w.pod_count_u64()).sum::<u64>(),
            d.bound.len(),
            d.device_classes.len()
        ));
        for w in &d.workloads {
            out.push_str(&format!(
                "\nworkload {}  ({} pods, gang minimum {}, priority {})\n",
                w.key(),
                w.pod_count(),
                w.min(),
                w.priority
            ));
            if !w.sources.is_empty() {
                out.push_str(&format!("  from: {}\n", sources_text(&w.sources)));
            }
            if let Some(t) = &w.topology {
                out.push_str(&format!(
                    "  topology: {} {}\n",
                    match t.mode {
                        TopologyMode::Required => "all in one",
                        TopologyMode::Preferred => "preferably in one",
                    },
                    t.level
                ));
            }
            for s in &w.pod_sets {
                let req: Vec<String> = s
                    .pod
                    .requests
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                out.push_str(&format!(
                    "  pod set {} × {}: {}\n",
                    s.name,
                    s.count,
                    if req.is_empty() {
                        "no requests".to_owned()
                    } else {
                        req.join(" ")
                    }
                ));
                if !s.pod.node_selector.is_empty() {
                    let sel: Vec<String> = s
                        .pod
                        .node_selector
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    out.push_str(&format!("    node selector: {}\n", sel.join(", ")));
                }
                if !s.pod.affinity.is_empty() {
                    out.push_str(&format!(
                        "    required node affinity: {} term(s)\n",
                        s.pod.affinity.len()
                    ));
                }
                if !s.pod.tolerations.is_empty() {
                    let t: Vec<String> = s
                        .pod
                        .tolerations
                        .iter()
                        .map(|t| t.key.clone().unwrap_or_else(|| "*".to_owned()))
                        .collect();
                    out.push_str(&format!("    tolerates: {}\n", t.join(", ")));
                }
                for c in &s.pod.claims {
                    for r in &c.requests {
                        let alts: Vec<&ExactRequest> =
                            r.exactly.iter().chain(&r.first_available).collect();
                        let text: Vec<String> = alts
                            .iter()
                            .map(|e| {
                                let n = match e.allocation_mode {
                                    AllocationMode::All => "all".to_owned(),
                                    AllocationMode::ExactCount => e.count.to_string(),
                                };
                                let mut t = format!("{n} × {}", e.device_class);
                                for sel in &e.selectors {
                                    t.push_str(&format!(" where {sel}"));
                                }
                                for (k, v) in &e.capacity {
                                    t.push_str(&format!(" with {k}={v}"));
                                }
                                t
                            })
                            .collect();
                        out.push_str(&format!(
                            "    claim {} request {}: {}\n",
                            c.name,
                            r.name,
                            text.join(" | else ")
                        ));
                    }
                    for k in &c.constraints {
                        let on = if k.requests.is_empty() {
                            "all requests".to_owned()
                        } else {
                            k.requests.join(", ")
                        };
                        out.push_str(&format!(
                            "    claim {}: same {} for {on}\n",
                            c.name, k.match_attribute
                        ));
                    }
                }
            }
        }
        for c in &self.cannot_plan {
            out.push_str(&format!("\ncannot plan {}: {}\n", c.workload, c.reason));
            if !c.sources.is_empty() {
                out.push_str(&format!("  from: {}\n", sources_text(&c.sources)));
            }
        }
        if !self.unsupported.is_empty() {
            out.push_str(&format!(
                "\nunsupported (not read): {}\n",
                self.unsupported.join("; ")
            ));
        }
        for i in &self.invalid {
            out.push_str(&format!("\ninvalid: {i}\n"));
        }
        if !self.ignored.is_empty() {
            let ig: Vec<String> = self
                .ignored
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect();
            out.push_str(&format!("\nignored kinds: {}\n", ig.join(", ")));
        }
        if self.skipped_pods > 0 {
            out.push_str(&format!(
                "\n{} pod(s) neither pending nor bound: skipped\n",
                self.skipped_pods
            ));
        }
        if self.consuming_pods > 0 {
            out.push_str(&format!(
                "\n{} pending pod(s) consume a ProvisioningRequest's capacity: the request is their demand\n",
                self.consuming_pods
            ));
        }
        out
    }
}
