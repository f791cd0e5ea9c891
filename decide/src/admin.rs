//! Admins' power requests (`accordctl power`, `POST /v1/nodes/{name}/
//! power`), taken in the round after they arrive and checked as the loop
//! checks its own actions:
//!
//! - **off** (and the off of a **cycle**): refused while the node has
//!   work pods, is booked for a ProvisioningRequest, is annotated
//!   `accord.dev/do-not-disrupt`, is on its way up, has an unreadable BMC,
//!   or the plan places pending work on it. Accepted, it goes the way of
//!   the plan's idle power-offs (`power_off`): tainted, sent once the Node
//!   shows the taint and `settle_s` have passed, the checks made again
//!   every round until then (a work pod that slips in cancels it). A
//!   cordon does not refuse it: cordoning is how an admin takes a node out
//!   for maintenance.
//! - **on**: refused while the node powers off, its BMC cannot be read,
//!   or its rack already has `max_concurrent_power_ons` nodes on their
//!   way up; sent this round otherwise.
//! - **cycle**: the off above, then on once the BMC shows the node off.
//! - **`force`**: no check but the BMC's being readable (and the leader's,
//!   made by the loop before the request reaches here); an off is a
//!   ForceOff sent this round, without the taint's wait. A Warning event
//!   `PowerForced` and a warning log say so.
//!
//! Every action is journaled as the plan's, with `requested_by` (`admin`,
//! `admin, forced`). Accepted requests not sent yet (an off waiting for
//! its taint, a cycle's on) are not kept across a restart or a takeover:
//! the waiting off's taint is lifted then, and the admin asks again.

use std::collections::{BTreeMap, BTreeSet};

use accord::lifecycle::Stage;
use accord::plan::{Action, Plan};
use accord::truth::{DO_NOT_DISRUPT, POWERING_OFF_TAINT_KEY};
use accord_api::control::{
    stage_label, AdminPowerAction, AdminPowerAnswer, AdminPowerOutcome, AdminPowerRequest,
    AdminRefusal, AdminReply, Mode, RefusalKind, Requested,
};
use tracing::{info, warn};

use super::{node_ref, Decider, Event, Snapshot};

/// The reason a plan-less power-off carries.
const ADMIN_OFF_REASON: &str = "asked by an admin (accordctl power off)";

/// Admins' requests: those for the next round, and those accepted and
/// not sent yet.
#[derive(Debug, Clone, Default)]
pub(super) struct AdminBook {
    asks: Vec<(String, AdminPowerRequest)>,
    /// Nodes an admin asked off (not forced): powered off as the plan's
    /// idle power-offs, while the checks hold.
    offs: BTreeSet<String>,
    /// Nodes an admin asked to cycle: powered on again once Off.
    cycles: BTreeSet<String>,
    /// This round's actions an admin asked for (for the journal).
    requested: BTreeMap<String, Requested>,
}

/// What this round does for admins.
#[derive(Debug, Default)]
pub(super) struct AdminRound {
    /// Actions to send this round besides the plan's (an on, a forced off,
    /// a cycle's on).
    pub now: Vec<Action>,
    /// One answer per request, in the order asked.
    pub replies: Vec<AdminReply>,
    /// `accord_actions_total{kind="admin",result}` for each request taken
    /// (`on`, `off`, `cycle`, `forced_on`, `forced_off`, `forced_cycle`)
    /// or refused (`refused`).
    pub counted: Vec<(&'static str, &'static str)>,
}

/// What a request would do, checks passed.
enum Verdict {
    NothingToDo(String),
    Do(String),
}

impl Decider {
    /// Queues an admin's power request for the next round; its answer is
    /// in that round's `Decision::admin_replies`, in the order asked.
    pub fn ask_admin(&mut self, node: &str, request: AdminPowerRequest) {
        self.admin.asks.push((node.to_owned(), request));
    }

    /// The nodes of this round's actions that an admin asked for.
    pub(super) fn admin_requested(&mut self) -> BTreeMap<String, Requested> {
        std::mem::take(&mut self.admin.requested)
    }

    /// Answers the queued requests, and sends a cycle's on once its node
    /// is Off.
    pub(super) fn admin_round(
        &mut self,
        plan: &Plan,
        snap: &Snapshot,
        events: &mut Vec<Event>,
    ) -> AdminRound {
        self.admin.requested.clear();
        let mut round = AdminRound::default();
        for node in self.admin.cycles.clone() {
            let stage = self.life.nodes.get(&node).map(|l| l.stage);
            match stage {
                Some(Stage::Off) => {
                    self.admin.cycles.remove(&node);
                    info!(node = %node, "admin power cycle: off; powering on again");
                    self.admin
                        .requested
                        .insert(node.clone(), Requested { forced: false });
                    round.now.push(power_on(&node));
                }
                Some(Stage::PoweringOff) => {}
                _ if self.admin.offs.contains(&node) || self.dark.drains.contains(&node) => {}
                // Its off was cancelled, or it came on another way.
                _ => {
                    self.admin.cycles.remove(&node);
                }
            }
        }
        for (node, request) in std::mem::take(&mut self.admin.asks) {
            let reply = self.answer(&node, request, plan, snap, &mut round, events);
            match &reply {
                Ok(a) => info!(
                    node = %node,
                    action = request.action.word(),
                    forced = request.force,
                    dry_run = request.dry_run,
                    outcome = ?a.outcome,
                    detail = %a.detail,
                    "admin power request"
                ),
                Err(r) => info!(
                    node = %node,
                    action = request.action.word(),
                    forced = request.force,
                    refused = %r.reason,
                    "admin power request refused"
                ),
            }
            let result = match (&reply, request.force, request.action) {
                (Err(_), ..) => Some("refused"),
                (Ok(a), ..) if a.outcome != AdminPowerOutcome::Accepted => None,
                (Ok(_), false, AdminPowerAction::On) => Some("on"),
                (Ok(_), false, AdminPowerAction::Off) => Some("off"),
                (Ok(_), false, AdminPowerAction::Cycle) => Some("cycle"),
                (Ok(_), true, AdminPowerAction::On) => Some("forced_on"),
                (Ok(_), true, AdminPowerAction::Off) => Some("forced_off"),
                (Ok(_), true, AdminPowerAction::Cycle) => Some("forced_cycle"),
            };
            round.counted.extend(result.map(|r| ("admin", r)));
            round.replies.push(reply);
        }
        round
    }

    fn answer(
        &mut self,
        node: &str,
        request: AdminPowerRequest,
        plan: &Plan,
        snap: &Snapshot,
        round: &mut AdminRound,
        events: &mut Vec<Event>,
    ) -> AdminReply {
        let Some(stage) = self.life.nodes.get(node).map(|l| l.stage) else {
            return Err(AdminRefusal {
                kind: RefusalKind::UnknownNode,
                reason: format!("node {node} is not in the fleet"),
            });
        };
        if self.settings.mode == Mode::Observe {
            return Err(AdminRefusal::check(
                "accordd runs in observe mode (control.mode = \"observe\"): it sends nothing",
            ));
        }
        if !snap.bmc.contains_key(node) {
            return Err(AdminRefusal::check(format!(
                "node {node}: its BMC cannot be read now; nothing can be sent or verified"
            )));
        }
        let AdminPowerRequest {
            action,
            force,
            dry_run,
        } = request;
        let verdict = match action {
            AdminPowerAction::On => self.check_on(node, stage, force, snap, round),
            AdminPowerAction::Off | AdminPowerAction::Cycle => {
                self.check_off(node, stage, force, action, plan, snap)
            }
        }
        .map_err(|why| AdminRefusal::check(format!("node {node}: {why}")))?;
        let answer = |outcome, detail: String| AdminPowerAnswer {
            node: node.to_owned(),
            action,
            outcome,
            forced: force,
            detail,
        };
        let detail = match verdict {
            Verdict::NothingToDo(why) => {
                // An admin asking a node on that waits to power off
                // withdraws their own earlier off.
                if action == AdminPowerAction::On && !dry_run {
                    self.admin.offs.remove(node);
                    self.admin.cycles.remove(node);
                }
                return Ok(answer(AdminPowerOutcome::NothingToDo, why));
            }
            Verdict::Do(_) if dry_run => {
                return Ok(answer(
                    AdminPowerOutcome::WouldDo,
                    "every check passes; nothing was changed (dry run)".to_owned(),
                ));
            }
            Verdict::Do(detail) => detail,
        };
        let requested = Requested { forced: force };
        if action == AdminPowerAction::Cycle {
            self.admin.cycles.insert(node.to_owned());
        }
        if action == AdminPowerAction::On {
            self.admin.offs.remove(node);
            self.admin.requested.insert(node.to_owned(), requested);
            round.now.push(power_on(node));
        } else if force {
            self.admin.offs.remove(node);
            self.dark.drains.forget(node);
            self.admin.requested.insert(node.to_owned(), requested);
            round.now.push(Action::PowerOff {
                node: node.to_owned(),
                reason: format!("{ADMIN_OFF_REASON}, forced"),
            });
        } else {
            self.admin.offs.insert(node.to_owned());
            events.push(Event {
                regarding: node_ref(node),
                reason: "AdminPowerOff",
                action: "PowerOff",
                note: format!(
                    "an admin asked for a power {} of node {node}: {detail}",
                    action.word()
                ),
                warning: false,
            });
        }
        if force {
            warn!(node = %node, action = action.word(), "FORCED admin power action: no check made (work pods, bookings, do-not-disrupt, the plan)");
            events.push(Event {
                regarding: node_ref(node),
                reason: "PowerForced",
                action: "Power",
                note: format!(
                    "an admin forced a power {} of node {node} (accordctl power --force): no check made",
                    action.word()
                ),
                warning: true,
            });
        }
        Ok(answer(AdminPowerOutcome::Accepted, detail))
    }

    fn check_on(
        &self,
        node: &str,
        stage: Stage,
        force: bool,
        snap: &Snapshot,
        round: &AdminRound,
    ) -> Result<Verdict, String> {
        let bmc_on = snap.bmc.get(node).copied() == Some(true);
        match stage {
            Stage::Off => {}
            Stage::Failed if !bmc_on => {}
            Stage::PoweringOff if force => {}
            Stage::PoweringOff => {
                return Err("it is powering off; ask again once it is off (or --force)".to_owned())
            }
            _ => {
                let mut why = format!("it is already on ({})", stage_label(stage));
                if self.dark.drains.contains(node) || self.admin.offs.contains(node) {
                    why.push_str(&format!(
                        "; a power-off waits for its {POWERING_OFF_TAINT_KEY} taint: annotate the Node {DO_NOT_DISRUPT} to keep it on"
                    ));
                }
                return Ok(Verdict::NothingToDo(why));
            }
        }
        if !force {
            if let Some(why) = self.rack_full(node, round) {
                return Err(why);
            }
        }
        Ok(Verdict::Do(
            "power-on journaled and sent this round; the node comes up as any other (and is powered off again once idle, unless annotated accord.dev/do-not-disrupt)".to_owned(),
        ))
    }

    fn check_off(
        &self,
        node: &str,
        stage: Stage,
        force: bool,
        action: AdminPowerAction,
        plan: &Plan,
        snap: &Snapshot,
    ) -> Result<Verdict, String> {
        let cycle = action == AdminPowerAction::Cycle;
        match stage {
            Stage::Off if cycle => {
                return Err(
                    "it is off: nothing to cycle (`accordctl power on` powers it on)".to_owned(),
                )
            }
            Stage::Off => return Ok(Verdict::NothingToDo("it is already off".to_owned())),
            Stage::PoweringOff if !cycle => {
                return Ok(Verdict::NothingToDo(
                    "it is already powering off".to_owned(),
                ))
            }
            _ => {}
        }
        if force {
            return Ok(Verdict::Do(if cycle {
                "ForceOff journaled and sent this round (forced: no check made), then on once the BMC shows it off".to_owned()
            } else {
                "ForceOff journaled and sent this round (forced: no check made)".to_owned()
            }));
        }
        if let Some(why) = self.off_refusal(node, plan, snap) {
            return Err(format!("{why} (or --force)"));
        }
        if matches!(
            stage,
            Stage::PoweringOn | Stage::Booting | Stage::AgentUp | Stage::PoweringOff
        ) {
            return Err(format!(
                "it is {}; ask again once it is up",
                stage_label(stage)
            ));
        }
        let how = if snap.views.contains_key(node) {
            format!(
                "tainted {POWERING_OFF_TAINT_KEY}; powered off once the Node shows the taint and {} s pass with no work pod (a work pod that comes cancels it)",
                self.dark.drains.settle_s()
            )
        } else {
            "powered off this round (no Kubernetes Node is registered for it)".to_owned()
        };
        Ok(Verdict::Do(if cycle {
            format!("{how}; then on once the BMC shows it off")
        } else {
            how
        }))
    }

    /// Why `node` may not be powered off now at an admin's word (not
    /// forced); checked on asking and every round until it is sent.
    fn off_refusal(&self, node: &str, plan: &Plan, snap: &Snapshot) -> Option<String> {
        let pods = self.busy_on(node);
        if pods > 0 {
            return Some(format!(
                "{pods} work pod(s) bound to it (drain it first: kubectl drain {node})"
            ));
        }
        if self.is_booked(node, snap.now) {
            return Some("booked for a ProvisioningRequest".to_owned());
        }
        if snap.do_not_disrupt.contains(node) {
            return Some(format!("annotated {DO_NOT_DISRUPT}"));
        }
        let placed: BTreeSet<&str> = plan
            .placements
            .iter()
            .filter(|w| w.pods.iter().any(|p| p.node == node))
            .map(|w| w.workload.as_str())
            .collect();
        if !placed.is_empty() {
            return Some(format!(
                "the plan places pending work on it ({})",
                placed.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        None
    }

    /// Why the rack of `node` may not start another power-on now.
    fn rack_full(&self, node: &str, round: &AdminRound) -> Option<String> {
        let rack = self
            .fleet
            .nodes
            .iter()
            .find(|n| n.name == node)?
            .rack
            .clone()?;
        let limit = self.fleet.racks.get(&rack)?.max_concurrent_power_ons?;
        let in_rack = |n: &str| {
            self.fleet
                .nodes
                .iter()
                .any(|f| f.name == n && f.rack.as_deref() == Some(rack.as_str()))
        };
        let coming_up = self
            .life
            .nodes
            .iter()
            .filter(|(n, l)| {
                matches!(l.stage, Stage::PoweringOn | Stage::Booting | Stage::AgentUp) && in_rack(n)
            })
            .count()
            + round
                .now
                .iter()
                .filter(|a| matches!(a, Action::PowerOn { .. }) && in_rack(a.node()))
                .count();
        (coming_up >= limit as usize).then(|| {
            format!(
                "rack {rack} has {coming_up} node(s) on their way up (max_concurrent_power_ons = {limit}); ask again once they are up"
            )
        })
    }

    /// The admins' accepted power-offs still to send: added to this
    /// round's `offs` (they then wait for their taint as the plan's), or
    /// dropped with the reason a check now gives (`skipped`: a drain under
    /// way is cancelled for it).
    pub(super) fn admin_offs(
        &mut self,
        plan: &Plan,
        snap: &Snapshot,
        offs: &mut Vec<Action>,
        skipped: &mut BTreeMap<String, String>,
    ) {
        for node in self.admin.offs.clone() {
            let stage = self.life.nodes.get(&node).map(|l| l.stage);
            if matches!(stage, None | Some(Stage::Off | Stage::PoweringOff)) {
                self.admin.offs.remove(&node);
                continue;
            }
            if let Some(why) = self.off_refusal(&node, plan, snap) {
                info!(node = %node, why = %why, "an admin's power-off is dropped");
                self.admin.offs.remove(&node);
                skipped.insert(node, why);
                continue;
            }
            skipped.remove(&node);
            if !offs.iter().any(|a| a.node() == node) {
                offs.push(Action::PowerOff {
                    node,
                    reason: ADMIN_OFF_REASON.to_owned(),
                });
            }
        }
    }

    /// Notes the power-offs sent this round that an admin asked for.
    pub(super) fn admin_offs_sent(&mut self, sent: &[Action]) {
        for a in sent {
            if matches!(a, Action::PowerOff { .. }) && self.admin.offs.remove(a.node()) {
                self.admin
                    .requested
                    .entry(a.node().to_owned())
                    .or_insert(Requested { forced: false });
            }
        }
    }
}

fn power_on(node: &str) -> Action {
    Action::PowerOn {
        node: node.to_owned(),
        wave: 0,
        for_workloads: Vec::new(),
    }
}
