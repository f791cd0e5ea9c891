//! The steps of one round of `Decider::decide`, in the order it takes them:
//! absorb what happened, plan, choose power, request it, count.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{Demand, Workload};
use accord::fleet::Fleet;
use accord::lifecycle::Stage;
use accord::plan::{Action, Plan};
use accord_api::agent::{CommandResult, CommandState};
use accord_api::control::{Requested, WorkloadState, WorkloadStatus};
use tracing::info;

use super::bios::BiosEffects;
use super::commands::{self, CommandEffects};
use super::{node_ref, said, stage_label, Decider, Event, Snapshot};
use crate::metrics::RoundMetrics;
use crate::provisioning::ProvisioningClass;
use crate::said::SaidKey;

/// What one round gathers as it goes, for its `Decision`.
#[derive(Default)]
pub(super) struct Round {
    pub events: Vec<Event>,
    pub metrics: RoundMetrics,
    pub bios: BiosEffects,
    pub commands: CommandEffects,
    pub evictions: Vec<crate::reclaim::Eviction>,
}

impl Decider {
    /// What happened since the last round: finished actions, BIOS reads,
    /// agents' reports, scheduler views and agent commands; then each
    /// lifecycle steps. Returns the scheduler views that changed.
    pub(super) fn absorb_round(
        &mut self,
        snap: &Snapshot,
        r: &mut Round,
    ) -> Vec<(String, accord::truth::SchedulerView)> {
        let now = snap.now;
        self.absorb(&snap.executed, now, &mut r.metrics);
        self.absorb_bios(snap, &mut r.events, &mut r.metrics, &mut r.bios);
        self.absorb_reports(&snap.reports, &repartitioned(snap), &mut r.events);
        let views_changed = self.absorb_views(&snap.views);
        let act = self.settings.mode == accord_api::control::Mode::Act;
        let absorbed = self.commands.absorb(
            snap,
            &self.fleet,
            act,
            self.settings.mig_manager,
            &mut r.commands,
        );
        r.events.extend(absorbed.events);
        r.metrics.commands.extend(absorbed.metrics);
        for (node, reason) in absorbed.fail {
            if let Some(life) = self.life.nodes.get_mut(&node) {
                let t = life.fail(now, reason);
                self.note(&node, &t);
            }
        }
        self.step_lifecycles(snap, &mut r.events);
        let lives = &self.life.nodes;
        self.commands
            .release_off(|n| lives.get(n).is_some_and(|l| l.stage == Stage::Off));
        views_changed
    }

    /// Plans on the fleet as the lifecycles, the reports and the scheduler
    /// show it; check-capacity requests apart, on the nodes that are up.
    pub(super) fn plan_round(
        &mut self,
        snap: &Snapshot,
        act: bool,
        r: &mut Round,
    ) -> (Plan, Vec<WorkloadStatus>) {
        let (seen, scheduler_drift) = self.fleet_as_seen(snap);
        let agreeing: BTreeSet<String> = self
            .truth
            .views
            .keys()
            .filter(|n| !scheduler_drift.contains_key(*n))
            .cloned()
            .collect();
        self.commands.settled(&agreeing);
        self.scheduler_drift_events(&scheduler_drift, &mut r.events);
        self.say_driver_partitions(&seen);
        self.truth.scheduler_drift = scheduler_drift;
        // The snapshot's demand as it is, copied only when a workload is
        // taken out of it or a placeholder added (most rounds: neither).
        let mut demand = Cow::Borrowed(&snap.demand);
        let check_capacity = take_check_capacity(snap, &mut demand);
        self.reclaim.leaving(&mut demand);
        // Buffers' and warm placeholders are planned after the real
        // demand (lowest priorities), then taken out of the plan but for
        // the power-ons they are for.
        let (buffered, standby) = self.buffers.split(&snap.buffers, &mut demand);
        let (warm, mut warm_round) = self.warmth.placeholders(&seen.policy, &demand, snap.now);
        let real = demand.workloads.len();
        if !buffered.is_empty() || !warm.is_empty() {
            let d = demand.to_mut();
            d.workloads.extend(buffered);
            d.workloads.extend(warm);
        }
        let started = self.clock.stopwatch.map(|now| now());
        let mut plan = accord::plan::plan(&seen, &demand, &seen.policy, snap.now);
        let reclaimed = self.reclaim_round(&seen, &mut demand, real, &plan, snap.now);
        if reclaimed.replan {
            plan = accord::plan::plan(&seen, &demand, &seen.policy, snap.now);
        }
        r.events.extend(reclaimed.events);
        r.evictions = reclaimed.evictions;
        r.metrics.planner_seconds = match (self.clock.stopwatch, started) {
            (Some(now), Some(started)) => now().saturating_sub(started).as_secs_f64(),
            _ => 0.0,
        };
        if demand.workloads.len() > real {
            demand.to_mut().workloads.truncate(real);
        }
        let lives = &self.life.nodes;
        let stage = |n: &str| lives.get(n).map(|l| l.stage);
        self.buffers.settle(&mut plan, stage, snap.now);
        self.buffers.plan_standby(
            standby,
            &demand,
            &seen,
            &mut plan,
            stage,
            &snap.agent_reports,
            snap.now,
        );
        self.warmth.settle(
            &mut plan,
            &seen,
            &self.life.busy,
            snap.now,
            seen.policy.warm_lookahead_s,
            &mut warm_round,
        );
        self.warmth.round = warm_round;
        let mut workloads = self.workload_status(&plan, &demand, snap.mono);
        let repartitioning = self.repartitioning(&plan, &seen, &agreeing, snap, act, r);
        for w in &mut workloads {
            if w.state == WorkloadState::Placed && repartitioning.contains(&w.workload) {
                w.state = WorkloadState::Repartitioning;
            }
        }
        if !check_capacity.is_empty() {
            workloads.extend(self.check_capacity(&seen, check_capacity, snap));
        }
        self.truth.seen.give_back(seen);
        (plan, workloads)
    }

    /// Workloads a repartition makes room for wait for it: those of
    /// commands in flight, and of this round's (issued in act mode).
    fn repartitioning(
        &mut self,
        plan: &Plan,
        seen: &Fleet,
        agreeing: &BTreeSet<String>,
        snap: &Snapshot,
        act: bool,
        r: &mut Round,
    ) -> BTreeSet<String> {
        let mut repartitioning = self.commands.waiting();
        repartitioning.extend(self.commands.unshown(&self.truth.views, agreeing));
        if act && !snap.commands_unreadable {
            let mut said = commands::Absorbed::default();
            repartitioning.extend(self.commands.issue(
                plan,
                seen,
                snap.now,
                &self.settings,
                &mut r.commands,
                &mut said,
            ));
            r.events.extend(said.events);
            r.metrics.commands.extend(said.metrics);
        } else {
            repartitioning.extend(plan.actions.iter().flat_map(|a| match a {
                Action::ReconfigureMig { for_workloads, .. } => for_workloads.clone(),
                _ => Vec::new(),
            }));
        }
        repartitioning
    }

    /// check-capacity requests never power anything on: they are planned
    /// apart, on the nodes that are up, and nothing is changed for them,
    /// MIG layouts included.
    fn check_capacity(
        &self,
        seen: &Fleet,
        workloads: Vec<Workload>,
        snap: &Snapshot,
    ) -> Vec<WorkloadStatus> {
        let mut up_only = seen.clone();
        up_only.policy.reconfigure_mig = false;
        for n in &mut up_only.nodes {
            if !n.is_up() {
                n.failed = Some("check-capacity: only nodes that are up".into());
            }
        }
        let cc = Demand {
            workloads,
            ..snap.demand.clone()
        };
        let cc_plan = accord::plan::plan(&up_only, &cc, &up_only.policy, snap.now);
        self.workload_status(&cc_plan, &cc, snap.mono)
    }

    /// The plan's power actions that pass every check, repairs (act mode),
    /// and the admins' actions on nodes the plan leaves alone.
    pub(super) fn power_round(
        &mut self,
        plan: &Plan,
        snap: &Snapshot,
        act: bool,
        admin_now: Vec<Action>,
        r: &mut Round,
    ) -> Vec<Action> {
        let mut power = self.choose_power(plan, snap, &mut r.events);
        if act {
            power.extend(self.repairs(snap, &mut r.events, &mut r.metrics));
        }
        for a in admin_now {
            if !power.iter().any(|p| p.node() == a.node()) {
                power.push(a);
            }
        }
        power
    }

    /// Act mode: each power action steps its node's lifecycle, and a
    /// power-on is an event saying for whom.
    pub(super) fn request_power(
        &mut self,
        power: &[Action],
        requested: &BTreeMap<String, Requested>,
        now: u64,
        events: &mut Vec<Event>,
    ) {
        for a in power {
            let node = a.node().to_owned();
            let life = self.life.nodes.get_mut(&node).expect("a fleet node");
            let t = match a {
                Action::PowerOn { for_workloads, .. } => {
                    info!(node = %node, workloads = %for_workloads.join(","), "powering on");
                    events.push(Event {
                        regarding: node_ref(&node),
                        reason: "PoweringOn",
                        action: "PowerOn",
                        note: if requested.contains_key(&node) {
                            format!("powering on node {node}: asked by an admin (accordctl power)")
                        } else if for_workloads.is_empty() {
                            format!("powering on node {node} again (repair power cycle)")
                        } else if for_workloads.iter().all(|w| self.buffers.is_standby(w)) {
                            format!(
                                "powering on node {node} to make it ready as standby capacity \
                                 (BIOS profile staged and verified, agent report refreshed; \
                                 then off): {}",
                                for_workloads.join(", ")
                            )
                        } else if for_workloads.iter().all(|w| self.buffers.is_placeholder(w)) {
                            format!(
                                "powering on node {node} for capacity kept spare \
                                 (CapacityBuffer: {})",
                                for_workloads.join(", ")
                            )
                        } else if for_workloads.iter().all(|w| self.warmth.is_placeholder(w)) {
                            // (for_workloads is not empty here)
                            format!(
                                "powering on node {node} ahead of demand (policy.warm = \
                                 \"predictive\": {})",
                                for_workloads.join(", ")
                            )
                        } else {
                            format!("powering on node {node} for {}", for_workloads.join(", "))
                        },
                        warning: false,
                    });
                    life.power_on_requested(now)
                }
                // Staged by the executor with the node's power-on.
                Action::ApplyBiosProfile { .. } => continue,
                Action::PowerOff { reason, .. } => {
                    info!(node = %node, reason = %reason, "powering off");
                    life.power_off_requested(now)
                }
                Action::ReconfigureMig { .. } => continue,
            };
            self.note(&node, &t);
        }
    }

    /// Observe mode: each action the plan would take, said once.
    pub(super) fn say_what_would_be_done(&mut self, plan: &Plan) {
        for a in &plan.actions {
            self.say_once(
                SaidKey::new(said::OBSERVE, a.node(), format!("{a:?}")),
                format!("observe mode: would {}", super::describe(a)),
            );
        }
    }

    /// The round's gauges: nodes by stage, pending by reason, drift per
    /// node. Returns the nodes on their way up or down.
    pub(super) fn count_round(&self, plan: &Plan, metrics: &mut RoundMetrics) -> BTreeSet<String> {
        for life in self.life.nodes.values() {
            *metrics
                .nodes_by_stage
                .entry(stage_label(life.stage))
                .or_default() += 1;
        }
        for u in &plan.unsatisfied {
            *metrics
                .pending_by_reason
                .entry(crate::metrics::reason_class(&u.reason))
                .or_default() += 1;
        }
        for (node, d) in &self.truth.declared_drift {
            if !d.is_empty() {
                metrics
                    .drift
                    .insert((node.clone(), "declaration"), d.len() as u32);
            }
        }
        for (node, d) in &self.truth.scheduler_drift {
            if !d.is_empty() {
                metrics
                    .drift
                    .insert((node.clone(), "scheduler"), d.len() as u32);
            }
        }
        self.life
            .nodes
            .iter()
            .filter(|(_, l)| {
                matches!(
                    l.stage,
                    Stage::PoweringOn | Stage::Booting | Stage::PoweringOff
                )
            })
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Nodes whose agent command finished with success (their reports may now
/// show a new MIG layout).
fn repartitioned(snap: &Snapshot) -> BTreeSet<String> {
    snap.commands
        .iter()
        .filter(|c| {
            matches!(
                &c.state,
                CommandState::Closed {
                    result: CommandResult::Done,
                    ..
                }
            )
        })
        .map(|c| c.node.clone())
        .collect()
}

/// Takes the workloads of check-capacity ProvisioningRequests out of the
/// demand to plan and returns them: a workload is one when it came from
/// such a request (not merely when a Job shares its name).
fn take_check_capacity(snap: &Snapshot, demand: &mut Cow<'_, Demand>) -> Vec<Workload> {
    let check_capacity: BTreeSet<String> = snap
        .provisioning
        .iter()
        .filter(|p| p.class == ProvisioningClass::CheckCapacity)
        .map(|p| p.request.key())
        .collect();
    let is_check = |w: &Workload| {
        w.sources
            .first()
            .is_some_and(|s| s.kind == "ProvisioningRequest" && check_capacity.contains(&s.key()))
    };
    if check_capacity.is_empty() || !demand.workloads.iter().any(is_check) {
        return Vec::new();
    }
    let d = demand.to_mut();
    let (cc_workloads, rest): (Vec<_>, Vec<_>) = d.workloads.drain(..).partition(is_check);
    d.workloads = rest;
    cc_workloads
}
