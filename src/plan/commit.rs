//! Keeping a trial: its cost, the actions it takes, the explanations of a
//! failure, and the power-offs of idle nodes at the end of the round.

use super::*;

impl Planner<'_> {
    /// Whether powering node `i` on stays within its rack's power budget,
    /// counting nodes already up, those planned up, and this trial's.
    pub(super) fn power_budget_ok(
        &self,
        i: usize,
        rack_kw: &BTreeMap<usize, f64>,
    ) -> Result<(), Failure> {
        let Some(r) = self.rack_of[i] else {
            return Ok(());
        };
        let Some(budget) = self.rack_budget_kw[r] else {
            return Ok(());
        };
        let committed = self.rack_up_kw[r] + rack_kw.get(&r).copied().unwrap_or(0.0);
        let need = self.nodes[i].power_kw;
        if committed + need > budget + 1e-9 {
            return Err(Failure::new(
                format!("rack {} power budget", self.rack_names[r]),
                format!("{committed:.1} of {budget:.1} kW committed, node needs {need:.1} kW"),
            ));
        }
        Ok(())
    }

    pub(super) fn cost(&self, t: &Trial, overrides: &BTreeMap<usize, mig::Override>) -> Cost {
        let cold: BTreeSet<usize> = t
            .power_ons
            .iter()
            .filter_map(|&i| self.rack_of[i])
            .filter(|&r| self.rack_up_nodes[r] == 0)
            .collect();
        Cost {
            power_ons: t.power_ons.len(),
            cold_racks: cold.len(),
            power_w: t
                .power_ons
                .iter()
                .map(|&i| (self.nodes[i].power_kw * 1000.0) as u64)
                .sum(),
            reconfigs: overrides.values().map(|o| o.gpus.len()).sum(),
            boot_s: if self.policy.prefer_fast_boot {
                // A node never measured is taken for the slowest.
                t.power_ons
                    .iter()
                    .map(|&i| self.nodes[i].expected_boot_s.unwrap_or(u64::MAX))
                    .max()
                    .unwrap_or(0)
            } else {
                0
            },
        }
    }

    pub(super) fn commit(
        &mut self,
        w: &Workload,
        pool: &Pool,
        domain: Option<String>,
        trial: Trial,
        overrides: BTreeMap<usize, mig::Override>,
    ) -> WorkloadPlacement {
        let key = w.key();
        // MIG reconfigurations first: the pods land on the new instances.
        for (i, o) in overrides {
            for (gpu, layout) in &o.gpus {
                self.actions.push(Action::ReconfigureMig {
                    node: self.nodes[i].name.clone(),
                    gpu: *gpu,
                    layout: layout.clone(),
                    for_workloads: vec![key.clone()],
                });
            }
            self.nodes[i] = Cow::Owned(o.node);
            self.prints[i] = Cow::Owned(o.prints);
            self.uses[i] = Rc::new(o.uses);
            self.refresh_free(i);
            self.touched.push(i);
        }
        for &i in &trial.power_ons {
            let node = &self.nodes[i];
            if let Some(profile) = &node.bios_profile {
                if node.bios_profile_applied.as_ref() != Some(profile) {
                    self.actions.push(Action::ApplyBiosProfile {
                        node: node.name.clone(),
                        profile: profile.clone(),
                    });
                }
            }
            let wave = self.wave(i);
            self.actions.push(Action::PowerOn {
                node: node.name.clone(),
                wave,
                for_workloads: vec![key.clone()],
            });
            self.planned_on[i] = true;
            self.up[i] = true;
            self.up_slots.add(self.free_gpus[i]);
            self.up_free += self.free_gpus[i];
            self.touched.push(i);
            for (_, idx) in self.candidate_cache.values_mut() {
                let p = idx.pos[i];
                if p != u32::MAX {
                    idx.set_up(p as usize);
                    idx.full = idx.full.min(p as usize);
                }
            }
            if let Some(r) = self.rack_of[i] {
                self.rack_up_kw[r] += self.nodes[i].power_kw;
                self.rack_up_nodes[r] += 1;
                self.rack_in_flight[r] += 1;
            }
        }
        for (i, u) in trial.uses {
            // For reconfigured nodes this use already refers to the new devices.
            self.uses[i] = Rc::new(u);
            self.refresh_free(i);
            self.touched.push(i);
        }
        self.claims.extend(trial.claims);
        if let Some(rel) = &mut self.relations {
            for (i, f) in &trial.placed {
                rel.add(*i, f.clone());
            }
        }
        WorkloadPlacement {
            workload: key,
            domain,
            reservation: pool
                .reservation
                .map(|ri| self.reservations[ri].name.clone()),
            pods: trial
                .pods
                .into_iter()
                .map(|(pod, i, devices)| PodPlacement {
                    pod,
                    node: self.nodes[i].name.clone(),
                    devices,
                    reclaimable: pool.reclaimable.contains(&i),
                })
                .collect(),
        }
    }

    /// The power-on wave for node `i`: its rack's concurrent power-on limit
    /// counts nodes already powering on and those planned before it.
    pub(super) fn wave(&self, i: usize) -> u32 {
        let Some(r) = self.rack_of[i] else {
            return 0;
        };
        match self.rack_limit[r] {
            Some(limit) => self.rack_in_flight[r] / limit.max(1),
            None => 0,
        }
    }

    pub(super) fn summarize(failures: &FailureCounts) -> String {
        let mut v: Vec<(&String, &FailureGroup)> = failures.iter().collect();
        v.sort_by(|a, b| b.1.nodes.cmp(&a.1.nodes).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(cat, g)| {
                let mut s = format!("{} nodes: {cat}", g.nodes);
                if !g.detail.is_empty() {
                    s.push_str(&format!(" ({})", g.detail));
                }
                if !g.names.is_empty() {
                    let more = g.nodes.saturating_sub(g.names.len());
                    s.push_str(&format!(" on {}", g.names.join(" ")));
                    if more > 0 {
                        s.push_str(&format!(" and {more} more"));
                    }
                }
                s
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn explain_flat(&self, w: &Workload, pods: &[PodItem<'_>], t: &Trial) -> String {
        let mut s = format!(
            "{} of {} pods fit, gang needs {}",
            t.pods.len(),
            pods.len(),
            w.min()
        );
        if let Some((pod, failures)) = &t.first_failure {
            s.push_str(&format!(
                "; {pod} fits no node: {}",
                Self::summarize(failures)
            ));
        }
        s
    }

    pub(super) fn explain_domains(
        &self,
        w: &Workload,
        level: &str,
        domains: usize,
        mut partial: Vec<(usize, String, Trial)>,
    ) -> String {
        if domains == 0 {
            return format!("no usable node has a {level}");
        }
        partial.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut s = format!(
            "gang needs {} pods in one {level}; none of {} {level}s holds it",
            w.min(),
            domains
        );
        if let Some((n, value, t)) = partial.first() {
            s.push_str(&format!(
                "; best {level} {value}: {n} of {} pods fit",
                w.min()
            ));
            if let Some((pod, failures)) = &t.first_failure {
                if pod.is_empty() {
                    s.push_str(&format!(" ({})", Self::summarize(failures)));
                } else {
                    s.push_str(&format!(" ({pod}: {})", Self::summarize(failures)));
                }
            }
        }
        s
    }

    /// Idle nodes past the idle time, not held by a reservation minimum or a
    /// warm-spare setting, and never one with workloads (node agents,
    /// DaemonSet and mirror pods, are none).
    pub(super) fn scale_down(&mut self) {
        let idle = |p: &Self, i: usize| {
            p.nodes[i].power == PowerState::On && !p.planned_on[i] && p.uses[i].runs_no_work()
        };
        let mut spares: BTreeMap<String, u32> = BTreeMap::new();
        let mut profile_spares: BTreeMap<String, u32> = BTreeMap::new();
        let mut kept_for_reservation: BTreeMap<usize, u32> = BTreeMap::new();
        for (ri, r) in self.reservations.iter().enumerate() {
            if r.active(self.now) {
                let up = (0..self.nodes.len())
                    .filter(|&i| self.reserved_by[i] == Some(ri) && self.up[i])
                    .count() as u32;
                kept_for_reservation.insert(ri, up);
            }
        }
        for i in 0..self.nodes.len() {
            if !idle(self, i) {
                continue;
            }
            let rack = self.nodes[i].rack.clone().unwrap_or_default();
            let profile = self.nodes[i].profile.clone().unwrap_or_default();
            let rack_kept = spares.get(&rack).copied().unwrap_or(0);
            let profile_kept = profile_spares.get(&profile).copied().unwrap_or(0);
            let profile_wants = self
                .policy
                .warm_spares_per_profile
                .get(&profile)
                .copied()
                .unwrap_or(0);
            if rack_kept < self.policy.warm_spares_per_rack || profile_kept < profile_wants {
                *spares.entry(rack).or_insert(0) += 1;
                *profile_spares.entry(profile).or_insert(0) += 1;
                continue;
            }
            let Some(since) = self.nodes[i].idle_since else {
                continue;
            };
            let idle_for = self.now.saturating_sub(since);
            if idle_for < self.policy.idle_power_off_after_s {
                continue;
            }
            if let Some(ri) = self.reserved_by[i] {
                let up = kept_for_reservation.entry(ri).or_insert(0);
                if *up <= self.reservations[ri].min_powered_on {
                    continue;
                }
                *up -= 1;
            }
            self.power_offs.push(Action::PowerOff {
                node: self.nodes[i].name.clone(),
                reason: format!(
                    "idle for {idle_for} s (threshold {} s)",
                    self.policy.idle_power_off_after_s
                ),
            });
        }
    }
}
