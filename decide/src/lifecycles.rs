//! Each node's lifecycle through a round: finished actions absorbed, the
//! step function run on what the snapshot shows, and the fleet as the
//! lifecycles, reports and scheduler show it.

use super::*;

/// Each node's lifecycle and what the store was last given of them;
/// boots measured from power-on to Ready; this round's busy pods.
#[derive(Debug, Default)]
pub(super) struct Lifecycles {
    pub(super) nodes: BTreeMap<String, NodeLife>,
    /// The lifecycles as last handed to the store.
    pub(super) saved: BTreeMap<String, NodeLife>,
    /// Node → since when its current boot runs (its power-on asked for,
    /// or it was last seen Off before coming on outside Accord): only an
    /// agent report from then on makes its agent up.
    pub(super) booted_at: BTreeMap<String, u64>,
    /// The boots seen per profile (time to capacity).
    pub(super) boot_times: boot_times::BootTimes,
    /// This round's pods per node that keep it busy ([`busy_pods`]).
    pub(super) busy: BTreeMap<String, u32>,
    /// The latest transitions, for the status.
    pub(super) recent: Vec<String>,
    /// Power cycles of Unhealthy nodes (`power`).
    pub(super) repairs: super::power::Repairs,
}

impl Decider {
    /// A node's lifecycle.
    pub fn life(&self, node: &str) -> Option<&NodeLife> {
        self.life.nodes.get(node)
    }

    /// Every node's lifecycle, in name order (one per fleet node).
    pub fn lives(&self) -> impl Iterator<Item = (&str, &NodeLife)> {
        self.life.nodes.iter().map(|(n, l)| (n.as_str(), l))
    }

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
                if let Some(life) = self.life.nodes.get_mut(&e.node) {
                    let t = life.fail(now, format!("power action failed: {reason}"));
                    self.note(&e.node, &t);
                }
            }
        }
    }

    pub(super) fn step_lifecycles(&mut self, snap: &Snapshot, events: &mut Vec<Event>) {
        let seen = self.observations(snap);
        // Each lifecycle steps; only those that moved are followed up.
        let deadlines = &self.settings.deadlines;
        let mut moved = Vec::new();
        for ((name, life), (o, booted)) in self.life.nodes.iter_mut().zip(seen) {
            let t = life.observe(&o, snap.now, deadlines);
            if !t.is_empty() {
                moved.push((name.clone(), booted, t));
            }
        }
        for (name, booted, t) in moved {
            let name = &name;
            if t.first().is_some_and(|t| t.from == Stage::Off) {
                // Came on outside Accord: this boot began after it was
                // last seen Off.
                self.life.booted_at.insert(name.clone(), booted);
            }
            self.note(name, &t);
            if t.iter().any(|t| t.to == Stage::Failed) {
                events.push(Event {
                    regarding: node_ref(name),
                    reason: "NodeFailed",
                    action: "Fail",
                    note: self.life.nodes[name].reason.clone().unwrap_or_default(),
                    warning: true,
                });
            }
            if t.iter().any(|t| t.to == Stage::Unhealthy) {
                warn!(node = %name, reason = ?self.life.nodes[name].reason, "node unhealthy: not used for planning; its demand is planned again");
                events.push(Event {
                    regarding: node_ref(name),
                    reason: "NodeUnhealthy",
                    action: "Check",
                    note: format!(
                        "{}; Accord plans its demand elsewhere",
                        self.life.nodes[name].reason.clone().unwrap_or_default()
                    ),
                    warning: true,
                });
            }
        }
    }

    /// What the snapshot shows of every node, in name order (the
    /// lifecycles' order), and since when its current boot runs.
    fn observations(&self, snap: &Snapshot) -> Vec<(Observation, u64)> {
        use crate::in_order::{in_order, set_in_order};
        let observe_mode = self.settings.mode == Mode::Observe;
        let (mut kube_ready, mut agents, mut reports) = (
            in_order(&snap.kube_ready),
            in_order(&snap.agents),
            in_order(&snap.agent_reports),
        );
        let (mut bmc, mut cordoned) = (in_order(&snap.bmc), set_in_order(&snap.cordoned));
        let (mut booted_at, mut busy) = (in_order(&self.life.booted_at), in_order(&self.life.busy));
        let mut out = Vec::with_capacity(self.life.nodes.len());
        for (name, life) in &self.life.nodes {
            let (stage, since) = (life.stage, life.since);
            let kube_ready = kube_ready.get(name).copied().unwrap_or(false);
            let heard = agents.get(name);
            let booted_at = booted_at.get(name).copied();
            // Since when this boot runs: a node Off now would boot from
            // then on.
            let booted = match stage {
                Stage::Off => since,
                Stage::PoweringOn | Stage::Booting => booted_at.unwrap_or(since),
                _ => booted_at.unwrap_or(0),
            };
            // The agent counts once it has reported (a heartbeat is not
            // enough: only a report proves the machine) since this boot,
            // and is heard from since the node's current stage began (a
            // word from before a power-off does not count); observe mode
            // has no power-on to date it from.
            // A node whose BIOS profile did not take stays Failed while
            // it runs: its coming up does not make it usable.
            let reported = reports.get(name);
            let agent_up = ((heard.is_some_and(|at| *at >= since)
                && reported.is_some_and(|at| *at >= booted))
                || (observe_mode && heard.is_some()))
                && !self.bios_holds(name)
                && !self.commands.holds_node(name);
            let bmc_on = if observe_mode {
                // Observe mode reads no BMC: power is inferred.
                Some(kube_ready || heard.is_some())
            } else {
                bmc.get(name).copied()
            };
            let o = Observation {
                bmc_on,
                agent_up,
                kube_ready,
                pods: busy.get(name).copied().unwrap_or(0),
                agent_alive: heard.is_some(),
                cordoned: cordoned.contains(name),
            };
            out.push((o, booted));
        }
        out
    }

    pub(super) fn note(&mut self, node: &str, transitions: &[Transition]) {
        for t in transitions {
            if t.to == Stage::PoweringOn {
                self.life.booted_at.insert(node.to_owned(), self.clock.now);
            }
            // A boot Accord asked for, measured step by step (a node found
            // on, or coming back from Unhealthy, is no boot).
            let booting = matches!(
                (t.from, t.to),
                (Stage::PoweringOn, Stage::Booting)
                    | (Stage::Booting, Stage::AgentUp)
                    | (Stage::AgentUp, Stage::Ready)
            );
            if let (true, Some(&at)) = (booting, self.life.booted_at.get(node)) {
                let n = self.fleet.node(node);
                let profile = n.and_then(|n| n.profile.as_deref()).unwrap_or("");
                let rack = n.and_then(|n| n.rack.as_deref());
                self.life
                    .boot_times
                    .reached(profile, rack, t.to, at, self.clock.now);
            }
            let line = format!("{node}: {:?} → {:?} ({})", t.from, t.to, t.reason);
            if t.to == Stage::Failed {
                warn!(node, from = ?t.from, reason = %t.reason, "node failed");
            } else {
                info!(node, from = ?t.from, to = ?t.to, reason = %t.reason, "node stage");
            }
            self.life.recent.push(line);
        }
        let excess = self.life.recent.len().saturating_sub(50);
        self.life.recent.drain(..excess);
    }
}
