//! Which of the plan's power actions are sent: racks' limits, bookings,
//! busy nodes; and repairs of empty Unhealthy nodes.

use accord::truth::DO_NOT_DISRUPT;

use super::*;

/// Power-cycling Unhealthy nodes: the policy and what it did.
#[derive(Debug, Default)]
pub(super) struct Repairs {
    pub(super) policy: Repair,
    /// Node → power cycles done to repair it.
    pub(super) cycles: BTreeMap<String, u32>,
    /// Nodes powered off to repair them: powered on again once Off.
    pub(super) nodes: BTreeSet<String>,
}

impl Decider {
    /// The plan's power-ons, and its power-offs that pass every check:
    /// never a node with pods, never one that is not Idle now, never one
    /// booked for a ProvisioningRequest, never one an admin keeps on; in
    /// act mode each only once its node shows the powering-off taint
    /// (`power_off`). A node's BIOS profile goes with its power-on
    /// (`bios`); MIG repartitions are agent commands (`commands`).
    pub(super) fn choose_power(
        &mut self,
        plan: &Plan,
        snap: &Snapshot,
        events: &mut Vec<Event>,
    ) -> Vec<Action> {
        let mut ons = Vec::new();
        let mut offs = Vec::new();
        // Why a planned power-off was not taken (a drain under way is
        // cancelled for it).
        let mut skipped: BTreeMap<String, String> = BTreeMap::new();
        // The rack's concurrent power-on limit holds across rounds: the
        // planner counts nodes still on their way up (PoweringOn, Booting,
        // AgentUp) against it and puts what is over into later waves;
        // only wave 0 is sent now. The rest is planned again, and sent,
        // once those nodes are up (Ready) or have failed (their lifecycle
        // deadline).
        let later = plan.later_waves();
        for a in &plan.actions {
            if later.contains(a.node())
                && matches!(a, Action::PowerOn { .. } | Action::ApplyBiosProfile { .. })
            {
                if let Action::PowerOn { node, wave, .. } = a {
                    debug!(node = %node, wave, "power-on waits for its rack's earlier power-ons to come up");
                }
                continue;
            }
            match a {
                Action::PowerOn { .. } => ons.push(a.clone()),
                Action::PowerOff { node, reason } => {
                    let pods = self.busy_on(node);
                    let idle = self
                        .life
                        .nodes
                        .get(node)
                        .is_some_and(|l| l.stage == Stage::Idle);
                    // Debug: a booked node is skipped every round it is booked.
                    if self.is_booked(node, snap.now) {
                        debug!(node = %node, "planned power-off skipped: node booked for a ProvisioningRequest");
                        skipped.insert(node.clone(), "booked for a ProvisioningRequest".to_owned());
                    } else if let Some(why) = self.kept_on_by_admin(snap, node) {
                        self.say_once(
                            SaidKey::new(said::POWER_OFF_KEPT, node, why.clone()),
                            format!("node {node}: planned power-off skipped: {why}"),
                        );
                        skipped.insert(node.clone(), why);
                    } else if pods > 0 || !idle {
                        info!(node = %node, reason = %reason, pods, "planned power-off skipped: node not idle");
                        skipped.insert(
                            node.clone(),
                            if pods > 0 {
                                format!("{pods} work pod(s) bound to it")
                            } else {
                                "it is no longer idle".to_owned()
                            },
                        );
                    } else {
                        offs.push(a.clone());
                    }
                }
                // Staged with the node's power-on (it comes right before
                // it in the plan), within the same wave.
                Action::ApplyBiosProfile { node, profile } => {
                    if self.settings.mode == Mode::Act {
                        self.stage_bios(node, profile);
                    }
                    ons.push(a.clone());
                }
                // Agent commands: `commands::Commands::issue`.
                Action::ReconfigureMig { .. } => {}
            }
        }
        if self.settings.mode == Mode::Act {
            self.admin_offs(plan, snap, &mut offs, &mut skipped);
            offs = self.drain(offs, &skipped, snap, events);
            self.admin_offs_sent(&offs);
        }
        ons.extend(offs);
        ons
    }

    /// Repair (`[control.repair]`, act mode): an Unhealthy node with no
    /// pods is power-cycled (powered off, then on once Off), at most
    /// `max_cycles_per_node` times, and only while less than
    /// `max_unhealthy_percent` of the fleet is Unhealthy. Never a node
    /// with pods, nor one whose BMC cannot be read.
    pub(super) fn repairs(
        &mut self,
        snap: &Snapshot,
        events: &mut Vec<Event>,
        metrics: &mut RoundMetrics,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if !self.life.repairs.policy.enabled {
            return out;
        }
        // Those powered off for repair come back once Off.
        for node in self.life.repairs.nodes.clone() {
            match self.life.nodes.get(&node).map(|l| l.stage) {
                Some(Stage::Off) => {
                    self.life.repairs.nodes.remove(&node);
                    out.push(Action::PowerOn {
                        node,
                        wave: 0,
                        for_workloads: Vec::new(),
                    });
                }
                Some(Stage::PoweringOff | Stage::Unhealthy) => {}
                _ => {
                    self.life.repairs.nodes.remove(&node);
                }
            }
        }
        let total = self.life.nodes.len().max(1);
        let unhealthy: Vec<String> = self
            .life
            .nodes
            .iter()
            .filter(|(_, l)| l.stage == Stage::Unhealthy)
            .map(|(n, _)| n.clone())
            .collect();
        let percent = unhealthy.len() * 100 / total;
        for node in unhealthy {
            if self.life.repairs.nodes.contains(&node) {
                continue;
            }
            let pods = self.busy_on(&node);
            let cycles = self.life.repairs.cycles.get(&node).copied().unwrap_or(0);
            let skip = if pods > 0 {
                Some(format!("{pods} pod(s) bound"))
            } else if snap.cordoned.contains(&node) {
                Some("cordoned by an admin".to_owned())
            } else if snap.do_not_disrupt.contains(&node) {
                Some(format!("annotated {DO_NOT_DISRUPT}"))
            } else if cycles >= self.life.repairs.policy.max_cycles_per_node {
                Some(format!(
                    "power-cycled {cycles} time(s) already (control.repair.max_cycles_per_node)"
                ))
            } else if percent >= self.life.repairs.policy.max_unhealthy_percent as usize {
                Some(format!(
                    "{percent} % of the fleet is unhealthy (control.repair.max_unhealthy_percent = {})",
                    self.life.repairs.policy.max_unhealthy_percent
                ))
            } else if !snap.bmc.contains_key(&node) {
                Some("its BMC cannot be read".to_owned())
            } else {
                None
            };
            if let Some(why) = skip {
                self.say_once(
                    SaidKey::new(said::REPAIR_SKIPPED, &node, why.clone()),
                    format!("node {node}: unhealthy, not repaired: {why}"),
                );
                continue;
            }
            self.life.repairs.cycles.insert(node.clone(), cycles + 1);
            self.life.repairs.nodes.insert(node.clone());
            let reason = format!(
                "repair: power cycle {} of {} of an unhealthy node with no pods",
                cycles + 1,
                self.life.repairs.policy.max_cycles_per_node
            );
            warn!(node = %node, "{reason}");
            metrics.commands.push(("repair", "power_cycle"));
            events.push(Event {
                regarding: node_ref(&node),
                reason: "NodeRepair",
                action: "PowerCycle",
                note: format!(
                    "{reason} ({})",
                    self.life.nodes[&node].reason.clone().unwrap_or_default()
                ),
                warning: true,
            });
            out.push(Action::PowerOff { node, reason });
        }
        out
    }

    pub(super) fn is_booked(&self, node: &str, now: u64) -> bool {
        self.bookings
            .booked
            .values()
            .any(|(nodes, until)| *until > now && nodes.contains(node))
    }
}

/// Per node, the bound pods that keep it busy: all of them
/// (`pods_per_node`) but its node agents (DaemonSet and mirror pods that
/// do not ask not to be disrupted), which run on every node and so would
/// keep every node on for good.
pub(super) fn busy_pods(snap: &Snapshot) -> BTreeMap<String, u32> {
    let mut agents: BTreeMap<&str, u32> = BTreeMap::new();
    for b in snap.demand.bound.iter().filter(|b| !b.keeps_node_busy()) {
        *agents.entry(b.node.as_str()).or_default() += 1;
    }
    snap.pods_per_node
        .iter()
        .map(|(node, all)| {
            let agents = agents.get(node.as_str()).copied().unwrap_or(0);
            (node.clone(), all.saturating_sub(agents))
        })
        .collect()
}

impl Decider {
    /// This round's pods that keep `node` busy.
    pub(super) fn busy_on(&self, node: &str) -> u32 {
        self.life.busy.get(node).copied().unwrap_or(0)
    }

    /// Why an admin's word keeps `node` on though it is idle: its
    /// `accord.dev/do-not-disrupt` annotation, or a cordon (unless
    /// `policy.power_off_cordoned`).
    pub(super) fn kept_on_by_admin(&self, snap: &Snapshot, node: &str) -> Option<String> {
        if snap.do_not_disrupt.contains(node) {
            Some(format!("annotated {DO_NOT_DISRUPT}"))
        } else if snap.cordoned.contains(node) && !self.fleet.policy.power_off_cordoned {
            Some("cordoned by an admin (policy.power_off_cordoned = false)".to_owned())
        } else {
            None
        }
    }
}
