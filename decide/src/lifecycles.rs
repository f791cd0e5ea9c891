//! Each node's lifecycle through a round: finished actions absorbed, the
//! step function run on what the snapshot shows, and the fleet as the
//! lifecycles, reports and scheduler show it.

use super::*;

impl Decider {
    /// Power results: a failed power action fails its node at once (this
    /// round plans around it).
    pub(super) fn absorb(&mut self, done: &[Executed], now: u64, metrics: &mut RoundMetrics) {
        for e in done {
            metrics
                .power_results
                .push((e.node.clone(), e.result.is_ok()));
            if let Err(err) = &e.result {
                let reason = accord::config_file::error_chain(err);
                warn!(node = %e.node, intent = e.intent, error = %reason, "power action failed; the node is marked Failed and its demand re-planned");
                if let Some(life) = self.lives.get_mut(&e.node) {
                    let t = life.fail(now, format!("power action failed: {reason}"));
                    self.note(&e.node, &t);
                }
            }
        }
    }

    pub(super) fn step_lifecycles(&mut self, snap: &Snapshot, events: &mut Vec<Event>) {
        let observe_mode = self.settings.mode == Mode::Observe;
        let names: Vec<String> = self.lives.keys().cloned().collect();
        for name in &names {
            let (stage, since) = (self.lives[name].stage, self.lives[name].since);
            let kube_ready = snap.kube_ready.get(name).copied().unwrap_or(false);
            let heard = snap.agents.get(name);
            // Since when this boot runs: a node Off now would boot from
            // then on.
            let booted = match stage {
                Stage::Off => since,
                Stage::PoweringOn | Stage::Booting => {
                    self.booted_at.get(name).copied().unwrap_or(since)
                }
                _ => self.booted_at.get(name).copied().unwrap_or(0),
            };
            // The agent counts once it has reported (a heartbeat is not
            // enough: only a report proves the machine) since this boot,
            // and is heard from since the node's current stage began (a
            // word from before a power-off does not count); observe mode
            // has no power-on to date it from.
            // A node whose BIOS profile did not take stays Failed while
            // it runs: its coming up does not make it usable.
            let reported = snap.agent_reports.get(name);
            let agent_up = ((heard.is_some_and(|at| *at >= since)
                && reported.is_some_and(|at| *at >= booted))
                || (observe_mode && heard.is_some()))
                && !self.bios_holds(name)
                && !self.commands.holds_node(name);
            let bmc_on = if observe_mode {
                // Observe mode reads no BMC: power is inferred.
                Some(kube_ready || heard.is_some())
            } else {
                snap.bmc.get(name).copied()
            };
            let o = Observation {
                bmc_on,
                agent_up,
                kube_ready,
                pods: self.busy_on(name),
                agent_alive: heard.is_some(),
                cordoned: snap.cordoned.contains(name),
            };
            let t = self.lives.get_mut(name).expect("listed").observe(
                &o,
                snap.now,
                &self.settings.deadlines,
            );
            if t.first().is_some_and(|t| t.from == Stage::Off) {
                // Came on outside Accord: this boot began after it was
                // last seen Off.
                self.booted_at.insert(name.clone(), booted);
            }
            self.note(name, &t);
            if t.iter().any(|t| t.to == Stage::Failed) {
                events.push(Event {
                    regarding: node_ref(name),
                    reason: "NodeFailed",
                    action: "Fail",
                    note: self.lives[name].reason.clone().unwrap_or_default(),
                    warning: true,
                });
            }
            if t.iter().any(|t| t.to == Stage::Unhealthy) {
                warn!(node = %name, reason = ?self.lives[name].reason, "node unhealthy: not used for planning; its demand is planned again");
                events.push(Event {
                    regarding: node_ref(name),
                    reason: "NodeUnhealthy",
                    action: "Check",
                    note: format!(
                        "{}; Accord plans its demand elsewhere",
                        self.lives[name].reason.clone().unwrap_or_default()
                    ),
                    warning: true,
                });
            }
        }
    }

    /// The fleet as the lifecycles show it: booting nodes are committed
    /// (powering on), failed ones never used, idle ones carry
    /// `idle_since`; in act mode a node whose BMC cannot be read is not
    /// powered on (nor counted as dark capacity) until it can be.
    pub(super) fn fleet_as_seen(&self, snap: &Snapshot) -> (Fleet, BTreeMap<String, Vec<Drift>>) {
        let mut f = self.fleet.clone();
        let hold = f.policy.on_drift == OnDrift::Hold;
        let mut scheduler_drift = BTreeMap::new();
        for n in &mut f.nodes {
            let Some(life) = self.lives.get(&n.name) else {
                continue;
            };
            // The scheduler's view (now, or last seen), then the keys
            // Accord publishes: what kube-scheduler will see.
            let mut agrees = false;
            if let Some(view) = self.views.get(&n.name) {
                let view = self.view_to_plan(&n.name, view, snap);
                let d = n.apply_scheduler_view(&view);
                agrees = d.is_empty();
                if !d.is_empty() {
                    scheduler_drift.insert(n.name.clone(), d);
                }
            }
            // A repartition in flight or just done: the node as it will
            // be (and is, once the scheduler shows it); refused GPUs held.
            self.commands.overlay(n, agrees);
            // In observe mode nothing is written: the Nodes stay as they are.
            if self.settings.mode == Mode::Act {
                if let Some(p) = self.fleet.publication(&n.name, snap.now) {
                    n.apply_publication(&p, &self.fleet.topology);
                }
            }
            if hold && self.declared_drift.contains_key(&n.name) {
                n.failed = Some(format!(
                    "hardware drift ({}); held until an admin acts (policy.on_drift = \"hold\")",
                    drift_text(&self.declared_drift[&n.name])
                ));
            }
            let (power, failed) = life.planner_power();
            n.power = power;
            n.node_deleted = self.node_deleted(&n.name);
            if failed {
                n.failed = Some(life.reason.clone().unwrap_or_else(|| "failed".to_owned()));
            }
            // Held for a CapacityBuffer is not idle: the idle time counts
            // from the last round it was held.
            n.idle_since = (life.stage == Stage::Idle)
                .then(|| life.since.max(self.buffers.held_at(&n.name).unwrap_or(0)));
            n.expected_boot_s = self
                .boot_times
                .expected(n.profile.as_deref().unwrap_or(""), n.rack.as_deref());
            self.bios_plan_with(n);
            if self.settings.mode == Mode::Act
                && !snap.bmc.contains_key(&n.name)
                && n.power == PowerState::Off
                && n.failed.is_none()
            {
                n.failed = Some("BMC power state unreadable".into());
            }
        }
        (f, scheduler_drift)
    }

    pub(super) fn note(&mut self, node: &str, transitions: &[Transition]) {
        for t in transitions {
            if t.to == Stage::PoweringOn {
                self.booted_at.insert(node.to_owned(), self.clock);
            }
            // A boot Accord asked for, measured step by step (a node found
            // on, or coming back from Unhealthy, is no boot).
            let booting = matches!(
                (t.from, t.to),
                (Stage::PoweringOn, Stage::Booting)
                    | (Stage::Booting, Stage::AgentUp)
                    | (Stage::AgentUp, Stage::Ready)
            );
            if let (true, Some(&at)) = (booting, self.booted_at.get(node)) {
                let n = self.fleet.node(node);
                let profile = n.and_then(|n| n.profile.as_deref()).unwrap_or("");
                let rack = n.and_then(|n| n.rack.as_deref());
                self.boot_times.reached(profile, rack, t.to, at, self.clock);
            }
            let line = format!("{node}: {:?} → {:?} ({})", t.from, t.to, t.reason);
            if t.to == Stage::Failed {
                warn!(node, from = ?t.from, reason = %t.reason, "node failed");
            } else {
                info!(node, from = ?t.from, to = ?t.to, reason = %t.reason, "node stage");
            }
            self.recent.push(line);
        }
        let excess = self.recent.len().saturating_sub(50);
        self.recent.drain(..excess);
    }
}
