//! *Decide*: one round of the control loop as a synchronous function of a
//! [`Snapshot`]. It steps every node's lifecycle, plans on the fleet as
//! the lifecycles show it, chooses which power actions to run and which to
//! skip (a node with pods, one not Idle, one booked), keeps bookings,
//! works out ProvisioningRequest conditions and the events to write, and
//! builds the status to publish and the metrics to record. It reads no
//! clock for its decisions, does no I/O and imports nothing async: the
//! running loop (`run`) and the twin tests drive the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use accord::demand::{Demand, ObjectRef};
use accord::fleet::{Fleet, OnDrift, PowerState};
use accord::hardware::NodeHardware;
use accord::lifecycle::{Deadlines, NodeLife, Observation, Stage, Transition};
use accord::plan::{Action, Plan};
use accord::truth::{Drift, Publication, SchedulerView};
use accord_api::agent::CommandRecord;
use accord_api::control::{
    describe, stage_label, CannotPlan, ControlStatus, Intent, IntentAction, KindWatch, Mode,
    NodeStatus, WorkloadState, WorkloadStatus, WouldWrite,
};
use tracing::{debug, info, warn};

use super::provisioning::{self, Condition, ProvisioningSeen};
use crate::execute::Executed;
pub use crate::metrics::RoundMetrics;
use truth::drift_text;

mod admin;
mod bios;
mod commands;
pub mod gpu_clients;
mod power_off;
mod round;
mod said;
mod truth;

use crate::store::SaidKey;
pub use bios::BiosEffects;
pub use commands::CommandEffects;
pub use power_off::DEFAULT_SETTLE_S as DEFAULT_POWER_OFF_SETTLE_S;
use round::Round;
pub use said::SaidChanges;

/// Everything one round knows about the world, gathered by *observe*.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Unix seconds (lifecycles, bookings, intents).
    pub now: u64,
    /// A monotonic clock (time since the loop started), for how long
    /// workloads wait.
    pub mono: Duration,
    /// Pending demand, as the translation makes it of the cluster.
    pub demand: Demand,
    /// Objects that cannot be planned at all.
    pub cannot_plan: Vec<CannotPlanSeen>,
    /// Kubernetes Node → Ready and schedulable.
    pub kube_ready: BTreeMap<String, bool>,
    /// Pods bound per node, all of them (`demand.bound` says which are
    /// node agents: DaemonSet and mirror pods, which keep no node busy).
    pub pods_per_node: BTreeMap<String, u32>,
    /// Nodes an admin cordoned (`spec.unschedulable`): never Unhealthy,
    /// never repaired, powered off when idle only with
    /// `policy.power_off_cordoned`.
    pub cordoned: BTreeSet<String>,
    /// Nodes annotated `accord.dev/do-not-disrupt: "true"`: never powered
    /// off nor repaired by Accord.
    pub do_not_disrupt: BTreeSet<String>,
    /// Pending pod (`ns/name`) → its workload.
    pub pod_workload: BTreeMap<String, String>,
    /// Pending pod → the scheduler's PodScheduled message.
    pub scheduler: BTreeMap<String, String>,
    pub provisioning: Vec<ProvisioningSeen>,
    /// Agents heard from recently: node → Unix seconds of the last word
    /// (a report or a heartbeat).
    pub agents: BTreeMap<String, u64>,
    /// Node → Unix seconds of its agent's last accepted hardware report:
    /// only a report makes a node's agent up after a power-on (a
    /// heartbeat says it is still there).
    pub agent_reports: BTreeMap<String, u64>,
    /// BMC power readings (act mode); a node missing here could not be read.
    pub bmc: BTreeMap<String, bool>,
    /// Power actions finished since the last round.
    pub executed: Vec<Executed>,
    /// Power intents still open in the journal.
    pub open_intents: Vec<Intent>,
    /// Agents' hardware models that changed since the last round (on the
    /// first round: every stored one).
    pub reports: BTreeMap<String, NodeHardware>,
    /// The scheduler's view of every node registered in Kubernetes now:
    /// its Node and its ResourceSlice devices.
    pub views: BTreeMap<String, SchedulerView>,
    /// The kinds Accord reads, as the API server serves them.
    pub watches: Vec<KindWatch>,
    /// Each node's latest agent command, from the store.
    pub commands: Vec<CommandRecord>,
    /// The store's commands could not be read this round: no command is
    /// decided on (the last round's view is kept).
    pub commands_unreadable: bool,
    /// BIOS read back since the last round (asked for by `bios.checks`).
    pub bios_reads: Vec<crate::execute::BiosRead>,
}

/// An object the translation cannot plan, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CannotPlanSeen {
    pub workload: String,
    pub sources: Vec<ObjectRef>,
    pub reason: String,
}

/// A Kubernetes event to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub regarding: ObjectRef,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    pub warning: bool,
}

/// A ProvisioningRequest condition to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionWrite {
    pub request: ObjectRef,
    pub condition: Condition,
}

/// What *effect* carries out, in this order: power actions, then
/// Kubernetes writes, then metrics.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Power actions to execute now (empty in observe mode): the plan's
    /// power-ons and the power-offs that passed every check.
    pub power: Vec<Action>,
    pub events: Vec<Event>,
    pub conditions: Vec<ConditionWrite>,
    pub status: ControlStatus,
    pub metrics: RoundMetrics,
    /// Nodes on their way up or down: their BMCs are read often.
    pub transitional: BTreeSet<String>,
    /// Labels and taints to publish on Nodes (keys Accord owns; empty in
    /// observe mode).
    pub publish: Vec<(String, Publication)>,
    /// Scheduler views that changed: kept in the store, for when the node
    /// is off.
    pub views_changed: Vec<(String, SchedulerView)>,
    /// Agent commands to journal, close or release; mig-parted
    /// configurations and labels (act mode only).
    pub commands: CommandEffects,
    /// Lifecycles that changed this round: kept in the store.
    pub lives_changed: Vec<(String, NodeLife)>,
    /// The bookings, when they changed this round: kept in the store.
    pub bookings: Option<BTreeMap<String, crate::store::Booking>>,
    /// BIOS reads to make and outcomes to keep (act mode only).
    pub bios: BiosEffects,
    /// What was said once and what no longer holds: kept in the store.
    pub said: SaidChanges,
    /// The answers to the admins' power requests this round took, in the
    /// order they were asked (`Decider::ask_admin`).
    pub admin_replies: Vec<accord_api::control::AdminReply>,
    /// This round's power actions an admin asked for (their intents say
    /// so; a forced power-off is a ForceOff).
    pub requested: BTreeMap<String, accord_api::control::Requested>,
}

/// How the decider is set up (from `[control]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    pub deadlines: Deadlines,
    /// How long a Provisioned request's nodes are held.
    pub booking_s: u64,
    /// How long an agent command (a MIG repartition) may take before its
    /// node is failed.
    pub command_deadline_s: u64,
}

/// Power-cycling Unhealthy nodes (`[control.repair]`): off unless enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    pub enabled: bool,
    /// Power cycles per node at most (since accordd started).
    pub max_cycles_per_node: u32,
    /// No repair while this share of the fleet's nodes (percent) or more
    /// is Unhealthy: a fleet-wide problem (network, API server) is not
    /// fixed by power-cycling machines.
    pub max_unhealthy_percent: u32,
}

impl Default for Repair {
    fn default() -> Self {
        Repair {
            enabled: false,
            max_cycles_per_node: 1,
            max_unhealthy_percent: 20,
        }
    }
}

/// How many unmade observe-mode writes the status keeps.
const WOULD_WRITE_KEPT: usize = 100;

/// The loop's memory between rounds: lifecycles, bookings, what was said.
#[derive(Debug)]
pub struct Decider {
    fleet: Fleet,
    settings: Settings,
    lives: BTreeMap<String, NodeLife>,
    /// Workload → when it was first seen pending (monotonic).
    pending_since: BTreeMap<String, Duration>,
    /// Workload → nodes powered on for it, until they are Ready.
    waiting_ready: BTreeMap<String, BTreeSet<String>>,
    /// Provisioned request (`ns/name`) → its nodes and when the booking ends.
    booked: BTreeMap<String, (BTreeSet<String>, u64)>,
    /// This round's pods per node that keep it busy ([`busy_pods`]).
    busy: BTreeMap<String, u32>,
    round: u64,
    recent: Vec<String>,
    /// Things said that still hold (events and warnings are not repeated
    /// while they do).
    said: said::Said,
    /// Observe mode: the Kubernetes writes it did not make.
    would_write: Vec<WouldWrite>,
    /// Node → where its agent's report differs from its declaration.
    declared_drift: BTreeMap<String, Vec<Drift>>,
    /// Node → where its model differs from the scheduler's view (last round).
    scheduler_drift: BTreeMap<String, Vec<Drift>>,
    /// Node → the scheduler's view last seen (kept while the node is off).
    views: BTreeMap<String, SchedulerView>,
    /// Node → the publication last sent, with the view it corrected and
    /// when: not sent again until one of them changes, or a write that
    /// did not land has had `truth::REPUBLISH_S` to show.
    published: BTreeMap<String, (Publication, SchedulerView, u64)>,
    /// Agent commands: in flight, settling, held GPUs.
    commands: commands::Commands,
    /// BIOS profiles: staged, verified, failed.
    bios: bios::BiosBook,
    repair: Repair,
    /// Nodes tainted for a power-off not sent yet (`power_off`).
    drains: power_off::Drains,
    /// Admins' power requests (`admin`).
    admin: admin::AdminBook,
    /// The lifecycles and bookings as last handed to the store.
    saved_lives: BTreeMap<String, NodeLife>,
    saved_bookings: BTreeMap<String, (BTreeSet<String>, u64)>,
    /// Node → power cycles done to repair it.
    repair_cycles: BTreeMap<String, u32>,
    /// Nodes powered off to repair them: powered on again once Off.
    repairing: BTreeSet<String>,
    /// Node → since when its current boot runs (its power-on asked for,
    /// or it was last seen Off before coming on outside Accord): only an
    /// agent report from then on makes its agent up.
    booted_at: BTreeMap<String, u64>,
    /// The time of the round (or start-up) under way, for `note`.
    clock: u64,
}

impl Decider {
    /// Every node of `fleet` starts Off at `now`.
    pub fn new(fleet: Fleet, settings: Settings, now: u64) -> Decider {
        let lives = fleet
            .nodes
            .iter()
            .map(|n| (n.name.clone(), NodeLife::new(Stage::Off, now)))
            .collect();
        Decider {
            fleet,
            settings,
            lives,
            pending_since: BTreeMap::new(),
            waiting_ready: BTreeMap::new(),
            booked: BTreeMap::new(),
            busy: BTreeMap::new(),
            round: 0,
            recent: Vec::new(),
            said: said::Said::default(),
            would_write: Vec::new(),
            declared_drift: BTreeMap::new(),
            scheduler_drift: BTreeMap::new(),
            views: BTreeMap::new(),
            published: BTreeMap::new(),
            commands: commands::Commands::default(),
            bios: bios::BiosBook::default(),
            repair: Repair::default(),
            drains: power_off::Drains::default(),
            admin: admin::AdminBook::default(),
            saved_lives: BTreeMap::new(),
            saved_bookings: BTreeMap::new(),
            repair_cycles: BTreeMap::new(),
            repairing: BTreeSet::new(),
            booted_at: BTreeMap::new(),
            clock: now,
        }
    }

    /// Scheduler views kept from before a restart (the store's): nodes
    /// that are off are planned with what the scheduler last showed.
    pub fn seed_views(&mut self, views: BTreeMap<String, SchedulerView>) {
        let known: BTreeSet<&String> = self.lives.keys().collect();
        self.views = views
            .into_iter()
            .filter(|(n, _)| known.contains(n))
            .collect();
    }

    /// Lifecycles and bookings kept from before a restart (the store's):
    /// a node powering on keeps its deadline, an idle one its idle timer,
    /// a booked one its booking. Nodes no longer in the fleet are ignored.
    pub fn seed_state(
        &mut self,
        lives: BTreeMap<String, NodeLife>,
        bookings: BTreeMap<String, crate::store::Booking>,
    ) {
        for (node, life) in lives {
            if let Some(l) = self.lives.get_mut(&node) {
                *l = life;
            }
        }
        self.saved_lives = self.lives.clone();
        self.booked = bookings
            .into_iter()
            .map(|(k, b)| (k, (b.nodes, b.until)))
            .collect();
        self.saved_bookings = self.booked.clone();
    }

    /// What was said before a restart and still held then (the store's):
    /// not said again while it holds.
    pub fn seed_said(&mut self, keys: BTreeSet<SaidKey>) {
        self.said.seed(keys);
    }

    /// How many things said are kept (they still hold).
    pub fn said_len(&self) -> usize {
        self.said.len()
    }

    /// How many workloads wait for nodes powered on for them to be up.
    pub fn waiting_len(&self) -> usize {
        self.waiting_ready.len()
    }

    /// Sets how Unhealthy nodes are repaired (default: not at all).
    pub fn set_repair(&mut self, repair: Repair) {
        self.repair = repair;
    }

    /// How long the powering-off taint stands, once the Node shows it,
    /// before the power-off is sent (default
    /// [`DEFAULT_POWER_OFF_SETTLE_S`]).
    pub fn set_power_off_settle_s(&mut self, s: u64) {
        self.drains.set_settle_s(s);
    }

    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// A node's lifecycle.
    pub fn life(&self, node: &str) -> Option<&NodeLife> {
        self.lives.get(node)
    }

    /// Intents found open at start: their nodes are on their way (the
    /// executor reconciles them before the first round).
    pub fn resume_intents(&mut self, open: &[Intent], now: u64) {
        self.clock = now;
        for i in open {
            self.resume_bios(i);
            if let Some(life) = self.lives.get_mut(&i.node) {
                let t = match i.action {
                    IntentAction::PowerOn => life.power_on_requested(now),
                    IntentAction::PowerOff { .. } => life.power_off_requested(now),
                };
                self.note(&i.node.clone(), &t);
            }
        }
    }

    /// One round, in this order: what happened since the last is absorbed,
    /// the fleet as it shows now is planned, power is chosen and requested,
    /// and what to say, publish and keep follows.
    pub fn decide(&mut self, snap: &Snapshot) -> Decision {
        let now = snap.now;
        self.clock = now;
        self.round += 1;
        self.busy = busy_pods(snap);
        let act = self.settings.mode == Mode::Act;
        let mut r = Round::default();
        let views_changed = self.absorb_round(snap, &mut r);
        let (plan, workloads) = self.plan_round(snap, act, &mut r);
        let mut admin = self.admin_round(&plan, snap, &mut r.events);
        r.metrics.commands.extend(admin.counted.iter().copied());
        let power = self.power_round(&plan, snap, act, std::mem::take(&mut admin.now), &mut r);
        let requested = self.admin_requested();
        self.track_latency(&plan, &workloads, snap.mono, &mut r.metrics);
        let conditions = self.provision(snap, &workloads);
        if act {
            self.request_power(&power, &requested, now, &mut r.events);
        } else {
            self.say_what_would_be_done(&plan);
        }
        self.cannot_place_events(&workloads, &mut r.events);
        let transitional = self.count_round(&plan, &mut r.metrics);
        self.bios_checks(now, &mut r.metrics, &mut r.bios);
        let publish = if act {
            self.publications(snap)
        } else {
            Vec::new()
        };
        // Observe mode is read-only: what it would write is said in the
        // status (and `explain`), not written.
        let (events, conditions) = if act {
            (r.events, conditions)
        } else {
            self.would_write(r.events, conditions);
            (Vec::new(), Vec::new())
        };
        let status = self.status(snap, &plan, workloads, r.metrics.planner_seconds);
        let (lives_changed, bookings) = self.state_changes();
        Decision {
            power: if act { power } else { Vec::new() },
            events,
            conditions,
            status,
            metrics: r.metrics,
            transitional,
            publish,
            views_changed,
            commands: r.commands,
            bios: r.bios,
            lives_changed,
            bookings,
            said: self.said.end_round(),
            admin_replies: admin.replies,
            requested: if act { requested } else { BTreeMap::new() },
        }
    }

    /// What changed since the store was last given the lifecycles and
    /// bookings.
    #[allow(clippy::type_complexity)]
    fn state_changes(
        &mut self,
    ) -> (
        Vec<(String, NodeLife)>,
        Option<BTreeMap<String, crate::store::Booking>>,
    ) {
        let lives: Vec<(String, NodeLife)> = self
            .lives
            .iter()
            .filter(|(n, l)| self.saved_lives.get(*n) != Some(*l))
            .map(|(n, l)| (n.clone(), l.clone()))
            .collect();
        for (n, l) in &lives {
            self.saved_lives.insert(n.clone(), l.clone());
        }
        let bookings = (self.booked != self.saved_bookings).then(|| {
            self.saved_bookings = self.booked.clone();
            self.booked
                .iter()
                .map(|(k, (nodes, until))| {
                    (
                        k.clone(),
                        crate::store::Booking {
                            nodes: nodes.clone(),
                            until: *until,
                        },
                    )
                })
                .collect()
        });
        (lives, bookings)
    }

    /// Observe mode: keeps what would have been written (the last
    /// [`WOULD_WRITE_KEPT`]) for the status.
    fn would_write(&mut self, events: Vec<Event>, conditions: Vec<ConditionWrite>) {
        for e in events {
            self.would_write.push(WouldWrite {
                regarding: e.regarding,
                what: format!(
                    "{} event {}: {}",
                    if e.warning { "Warning" } else { "Normal" },
                    e.reason,
                    e.note
                ),
            });
        }
        for c in conditions {
            self.would_write.push(WouldWrite {
                regarding: c.request,
                what: format!(
                    "condition {}={}: {}: {}",
                    c.condition.type_,
                    if c.condition.status { "True" } else { "False" },
                    c.condition.reason,
                    c.condition.message
                ),
            });
        }
        let excess = self.would_write.len().saturating_sub(WOULD_WRITE_KEPT);
        self.would_write.drain(..excess);
    }

    /// Power results: a failed power action fails its node at once (this
    /// round plans around it).
    fn absorb(&mut self, done: &[Executed], now: u64, metrics: &mut RoundMetrics) {
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

    fn step_lifecycles(&mut self, snap: &Snapshot, events: &mut Vec<Event>) {
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
    fn fleet_as_seen(&self, snap: &Snapshot) -> (Fleet, BTreeMap<String, Vec<Drift>>) {
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
                let d = n.apply_scheduler_view(view);
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
            if failed {
                n.failed = Some(life.reason.clone().unwrap_or_else(|| "failed".to_owned()));
            }
            n.idle_since = (life.stage == Stage::Idle).then_some(life.since);
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

    /// The plan's power-ons, and its power-offs that pass every check:
    /// never a node with pods, never one that is not Idle now, never one
    /// booked for a ProvisioningRequest, never one an admin keeps on; in
    /// act mode each only once its node shows the powering-off taint
    /// (`power_off`). A node's BIOS profile goes with its power-on
    /// (`bios`); MIG repartitions are agent commands (`commands`).
    fn choose_power(
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
                    let idle = self.lives.get(node).is_some_and(|l| l.stage == Stage::Idle);
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
    fn repairs(
        &mut self,
        snap: &Snapshot,
        events: &mut Vec<Event>,
        metrics: &mut RoundMetrics,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if !self.repair.enabled {
            return out;
        }
        // Those powered off for repair come back once Off.
        for node in self.repairing.clone() {
            match self.lives.get(&node).map(|l| l.stage) {
                Some(Stage::Off) => {
                    self.repairing.remove(&node);
                    out.push(Action::PowerOn {
                        node,
                        wave: 0,
                        for_workloads: Vec::new(),
                    });
                }
                Some(Stage::PoweringOff | Stage::Unhealthy) => {}
                _ => {
                    self.repairing.remove(&node);
                }
            }
        }
        let total = self.lives.len().max(1);
        let unhealthy: Vec<String> = self
            .lives
            .iter()
            .filter(|(_, l)| l.stage == Stage::Unhealthy)
            .map(|(n, _)| n.clone())
            .collect();
        let percent = unhealthy.len() * 100 / total;
        for node in unhealthy {
            if self.repairing.contains(&node) {
                continue;
            }
            let pods = self.busy_on(&node);
            let cycles = self.repair_cycles.get(&node).copied().unwrap_or(0);
            let skip = if pods > 0 {
                Some(format!("{pods} pod(s) bound"))
            } else if snap.cordoned.contains(&node) {
                Some("cordoned by an admin".to_owned())
            } else if snap.do_not_disrupt.contains(&node) {
                Some(format!("annotated {DO_NOT_DISRUPT}"))
            } else if cycles >= self.repair.max_cycles_per_node {
                Some(format!(
                    "power-cycled {cycles} time(s) already (control.repair.max_cycles_per_node)"
                ))
            } else if percent >= self.repair.max_unhealthy_percent as usize {
                Some(format!(
                    "{percent} % of the fleet is unhealthy (control.repair.max_unhealthy_percent = {})",
                    self.repair.max_unhealthy_percent
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
            self.repair_cycles.insert(node.clone(), cycles + 1);
            self.repairing.insert(node.clone());
            let reason = format!(
                "repair: power cycle {} of {} of an unhealthy node with no pods",
                cycles + 1,
                self.repair.max_cycles_per_node
            );
            warn!(node = %node, "{reason}");
            metrics.commands.push(("repair", "power_cycle"));
            events.push(Event {
                regarding: node_ref(&node),
                reason: "NodeRepair",
                action: "PowerCycle",
                note: format!(
                    "{reason} ({})",
                    self.lives[&node].reason.clone().unwrap_or_default()
                ),
                warning: true,
            });
            out.push(Action::PowerOff { node, reason });
        }
        out
    }

    fn is_booked(&self, node: &str, now: u64) -> bool {
        self.booked
            .values()
            .any(|(nodes, until)| *until > now && nodes.contains(node))
    }

    fn workload_status(&self, plan: &Plan, demand: &Demand, mono: Duration) -> Vec<WorkloadStatus> {
        let mut powering: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (node, w) in power_ons_for(plan) {
            powering.entry(w).or_default().push(node.to_owned());
        }
        demand
            .workloads
            .iter()
            .map(|w| {
                let key = w.key();
                let placed = plan.placements.iter().find(|p| p.workload == key);
                let unsat = plan.unsatisfied.iter().find(|u| u.workload == key);
                let mut nodes: Vec<String> = placed
                    .map(|p| p.pods.iter().map(|p| p.node.clone()).collect())
                    .unwrap_or_default();
                nodes.sort();
                nodes.dedup();
                let powering_on = powering.get(key.as_str()).cloned().unwrap_or_default();
                let state = match (placed, unsat) {
                    (_, Some(_)) => WorkloadState::CannotPlace,
                    (Some(_), None) if !powering_on.is_empty() => WorkloadState::PoweringOn,
                    _ => WorkloadState::Placed,
                };
                WorkloadStatus {
                    sources: w.sources.clone(),
                    pods: w.pod_count(),
                    min: w.min(),
                    state,
                    nodes,
                    powering_on,
                    domain: placed.and_then(|p| p.domain.clone()),
                    reason: unsat.map(|u| u.reason.clone()),
                    pending_s: self
                        .pending_since
                        .get(&key)
                        .map(|t| mono.saturating_sub(*t).as_secs_f64())
                        .unwrap_or(0.0),
                    workload: key,
                }
            })
            .collect()
    }

    /// pending → power-on issued, → nodes Ready, → pods bound.
    fn track_latency(
        &mut self,
        plan: &Plan,
        workloads: &[WorkloadStatus],
        mono: Duration,
        metrics: &mut RoundMetrics,
    ) {
        let pending: BTreeSet<&str> = workloads.iter().map(|w| w.workload.as_str()).collect();
        // Bound: gone from the pending demand.
        let gone: Vec<String> = self
            .pending_since
            .keys()
            .filter(|k| !pending.contains(k.as_str()))
            .cloned()
            .collect();
        for k in gone {
            let since = self.pending_since.remove(&k).expect("listed");
            let s = mono.saturating_sub(since).as_secs_f64();
            metrics.pending_to_bound.push(s);
            info!(workload = %k, seconds = format!("{s:.1}"), "workload no longer pending (pods bound)");
        }
        for w in workloads {
            self.pending_since.entry(w.workload.clone()).or_insert(mono);
        }
        // Now exactly the workloads pending this round.
        metrics.oldest_pending_seconds = self
            .pending_since
            .values()
            .map(|since| mono.saturating_sub(*since).as_secs_f64())
            .fold(0.0, f64::max);
        if self.settings.mode == Mode::Act {
            for (node, w) in power_ons_for(plan) {
                if !self.waiting_ready.contains_key(w) {
                    if let Some(since) = self.pending_since.get(w) {
                        metrics
                            .pending_to_power_on
                            .push(mono.saturating_sub(*since).as_secs_f64());
                    }
                }
                self.waiting_ready
                    .entry(w.to_owned())
                    .or_default()
                    .insert(node.to_owned());
            }
        }
        // A workload no longer pending (bound or gone), or one a node of
        // which failed (its demand is planned again: new power-ons wait
        // afresh), waits no more.
        let lives = &self.lives;
        let pending_since = &self.pending_since;
        self.waiting_ready.retain(|w, nodes| {
            pending_since.contains_key(w)
                && nodes.iter().all(|n| {
                    lives
                        .get(n)
                        .is_some_and(|l| !matches!(l.stage, Stage::Failed | Stage::Unhealthy))
                })
        });
        let ready: Vec<String> = self
            .waiting_ready
            .iter()
            .filter(|(_, nodes)| nodes.iter().all(|n| lives.get(n).is_some_and(is_up)))
            .map(|(w, _)| w.clone())
            .collect();
        for w in ready {
            self.waiting_ready.remove(&w);
            if let Some(since) = self.pending_since.get(&w) {
                metrics
                    .pending_to_ready
                    .push(mono.saturating_sub(*since).as_secs_f64());
            }
        }
    }

    /// ProvisioningRequest conditions that changed; books the capacity of
    /// those it marks Provisioned and lets old bookings go. A booking is
    /// taken when the condition is decided and never extended: should the
    /// write keep failing (so the request never shows Provisioned and the
    /// condition is decided again each round), the nodes are still let go
    /// when the first booking ends.
    fn provision(&mut self, snap: &Snapshot, workloads: &[WorkloadStatus]) -> Vec<ConditionWrite> {
        let present: BTreeSet<String> = snap.provisioning.iter().map(|p| p.request.key()).collect();
        self.booked.retain(|k, _| present.contains(k));
        let mut out = Vec::new();
        for pr in &snap.provisioning {
            let key = pr.request.key();
            let w = workloads.iter().find(|w| w.workload == key);
            let nodes_up = w.is_some_and(|w| {
                !w.nodes.is_empty() && w.nodes.iter().all(|n| self.lives.get(n).is_some_and(is_up))
            });
            let booking_expired = match self.booked.get(&key) {
                Some((_, until)) => *until <= snap.now,
                // After a restart the bookings are gone: a request
                // Provisioned longer ago than the booking time expires.
                None => pr
                    .provisioned_at()
                    .is_some_and(|at| snap.now.saturating_sub(at) > self.settings.booking_s),
            };
            let seen = provisioning::Seen {
                pr,
                workload: w,
                cannot_plan: snap
                    .cannot_plan
                    .iter()
                    .find(|c| c.workload == key)
                    .map(|c| c.reason.as_str()),
                nodes_up,
                fits_now: w.map(|w| w.state == WorkloadState::Placed && w.reason.is_none()),
                booking_expired,
            };
            for c in provisioning::conditions(&seen) {
                info!(request = %key, condition = %c.type_, status = c.status, reason = %c.reason, message = %c.message, "ProvisioningRequest condition");
                if c.type_ == "Provisioned" && c.status {
                    let nodes = w
                        .map(|w| w.nodes.iter().cloned().collect())
                        .unwrap_or_default();
                    self.booked
                        .entry(key.clone())
                        .or_insert((nodes, snap.now + self.settings.booking_s));
                }
                if c.type_ == "BookingExpired" {
                    self.booked.remove(&key);
                }
                out.push(ConditionWrite {
                    request: pr.request.clone(),
                    condition: c,
                });
            }
        }
        out
    }

    /// A workload that cannot be placed: said once per reason, and a
    /// Warning event on the object it came from (`kubectl describe`).
    fn cannot_place_events(&mut self, workloads: &[WorkloadStatus], events: &mut Vec<Event>) {
        for w in workloads {
            if w.state != WorkloadState::CannotPlace {
                continue;
            }
            let reason = w.reason.clone().unwrap_or_default();
            let first = self.say_once(
                SaidKey::new(said::CANNOT_PLACE, &w.workload, reason.clone()),
                format!("workload {}: cannot place: {reason}", w.workload),
            );
            // Only an object the API server serves can carry an event.
            let target = w.sources.iter().find(|s| !s.api_version.is_empty());
            if let (true, Some(regarding)) = (first, target) {
                events.push(Event {
                    regarding: regarding.clone(),
                    reason: "CannotPlace",
                    action: "Plan",
                    note: format!("Accord cannot place it: {reason}; nothing is powered on for it"),
                    warning: true,
                });
            }
        }
    }

    fn status(
        &self,
        snap: &Snapshot,
        plan: &Plan,
        workloads: Vec<WorkloadStatus>,
        planner_seconds: f64,
    ) -> ControlStatus {
        ControlStatus {
            mode: self.settings.mode,
            round: self.round,
            at: snap.now,
            planner_ms: planner_seconds * 1000.0,
            nodes: self
                .fleet
                .nodes
                .iter()
                .map(|n| {
                    let life = &self.lives[&n.name];
                    NodeStatus {
                        name: n.name.clone(),
                        rack: n.rack.clone(),
                        stage: life.stage,
                        since: life.since,
                        reason: self.drain_reason(&n.name).or_else(|| life.reason.clone()),
                        pods: snap.pods_per_node.get(&n.name).copied().unwrap_or(0),
                        gpus: n.gpus.len() as u32,
                        bmc_on: snap.bmc.get(&n.name).copied(),
                        model: self.model_source(&n.name),
                        drift: self
                            .declared_drift
                            .get(&n.name)
                            .into_iter()
                            .chain(self.scheduler_drift.get(&n.name))
                            .flatten()
                            .cloned()
                            .collect(),
                        bios: self.bios_status(n),
                    }
                })
                .collect(),
            workloads,
            cannot_plan: snap
                .cannot_plan
                .iter()
                .map(|c| CannotPlan {
                    workload: c.workload.clone(),
                    reason: c.reason.clone(),
                })
                .collect(),
            actions: plan.actions.clone(),
            placements: plan.placements.clone(),
            unsatisfied: plan.unsatisfied.clone(),
            pods: snap.pod_workload.clone(),
            scheduler: snap.scheduler.clone(),
            open_intents: snap.open_intents.clone(),
            recent: self.recent.clone(),
            watches: snap.watches.clone(),
            would_write: self.would_write.clone(),
            commands: self.commands.latest(),
            replica: None,
        }
    }

    fn note(&mut self, node: &str, transitions: &[Transition]) {
        for t in transitions {
            if t.to == Stage::PoweringOn {
                self.booted_at.insert(node.to_owned(), self.clock);
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

    /// Logs `line` the first time `key` holds (again); true then.
    fn say_once(&mut self, key: SaidKey, line: String) -> bool {
        let first = self.said.once(key);
        if first {
            info!("{line}");
        }
        first
    }
}

use accord::truth::DO_NOT_DISRUPT;

/// Per node, the bound pods that keep it busy: all of them
/// (`pods_per_node`) but its node agents (DaemonSet and mirror pods that
/// do not ask not to be disrupted), which run on every node and so would
/// keep every node on for good.
fn busy_pods(snap: &Snapshot) -> BTreeMap<String, u32> {
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
    fn busy_on(&self, node: &str) -> u32 {
        self.busy.get(node).copied().unwrap_or(0)
    }

    /// Why an admin's word keeps `node` on though it is idle: its
    /// `accord.dev/do-not-disrupt` annotation, or a cordon (unless
    /// `policy.power_off_cordoned`).
    fn kept_on_by_admin(&self, snap: &Snapshot, node: &str) -> Option<String> {
        if snap.do_not_disrupt.contains(node) {
            Some(format!("annotated {DO_NOT_DISRUPT}"))
        } else if snap.cordoned.contains(node) && !self.fleet.policy.power_off_cordoned {
            Some("cordoned by an admin (policy.power_off_cordoned = false)".to_owned())
        } else {
            None
        }
    }
}

fn is_up(l: &NodeLife) -> bool {
    matches!(l.stage, Stage::Ready | Stage::InUse | Stage::Idle)
}

/// Events about a node go to its Kubernetes Node.
fn node_ref(node: &str) -> ObjectRef {
    ObjectRef::new("v1", "Node", "default", node)
}

/// (node, workload) for every power-on in the plan.
fn power_ons_for(plan: &Plan) -> impl Iterator<Item = (&str, &str)> {
    plan.actions.iter().flat_map(|a| match a {
        Action::PowerOn {
            node,
            for_workloads,
            ..
        } => for_workloads
            .iter()
            .map(|w| (node.as_str(), w.as_str()))
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One dark 8-GPU node; a workload of 16 GPUs in one pod never fits.
    const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"

[[racks]]
name = "r1"

[[nodes]]
name = "n1"
rack = "r1"
profile = "h100"
"#;

    fn round(d: &mut Decider, world: &Snapshot, after_s: u64) -> Decision {
        let mut snap = world.clone();
        snap.now = 100_000 + after_s;
        snap.mono = Duration::from_secs(after_s);
        d.decide(&snap)
    }

    #[test]
    fn the_oldest_pending_workload_age_counts_from_when_it_was_first_seen() {
        let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let mut d = Decider::new(
            fleet,
            Settings {
                mode: Mode::Observe,
                deadlines: Deadlines::default(),
                booking_s: 600,
                command_deadline_s: 600,
            },
            100_000,
        );
        let workload = |name: &str| {
            serde_json::json!({"name": name, "namespace": "ml", "pod_sets": [{"name": "w",
                "count": 1, "pod": {"requests": {"nvidia.com/gpu": "16"}}}]})
        };
        let demand = |names: &[&str]| {
            let w: Vec<_> = names.iter().map(|n| workload(n)).collect();
            Demand::from_json(
                &serde_json::json!({ "workloads": w }).to_string(),
                "demand.json",
            )
            .unwrap()
        };
        let mut world = Snapshot::default();
        assert_eq!(round(&mut d, &world, 0).metrics.oldest_pending_seconds, 0.0);
        world.demand = demand(&["big"]);
        assert_eq!(
            round(&mut d, &world, 10).metrics.oldest_pending_seconds,
            0.0
        );
        assert_eq!(
            round(&mut d, &world, 910).metrics.oldest_pending_seconds,
            900.0
        );
        // A newer one does not make the oldest younger.
        world.demand = demand(&["big", "bigger"]);
        assert_eq!(
            round(&mut d, &world, 1210).metrics.oldest_pending_seconds,
            1200.0
        );
        // The oldest gone: the next oldest.
        world.demand = demand(&["bigger"]);
        assert_eq!(
            round(&mut d, &world, 1510).metrics.oldest_pending_seconds,
            300.0
        );
        world.demand = Demand::default();
        assert_eq!(
            round(&mut d, &world, 1520).metrics.oldest_pending_seconds,
            0.0
        );
    }
}
