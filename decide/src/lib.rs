//! *Decide*: one round of the control loop as a synchronous function of a
//! [`Snapshot`]. It steps every node's lifecycle, plans on the fleet as
//! the lifecycles show it, chooses which power actions to run and which to
//! skip (a node with pods, one not Idle, one booked), keeps bookings,
//! works out ProvisioningRequest conditions and the events to write, and
//! builds the status to publish and the metrics to record. It reads no
//! clock, does no I/O and imports nothing async: its Cargo.toml has no
//! runtime, client or store, so the compiler holds that. accordd's loop
//! (`accordd::control::run`) and the twin tests drive the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use accord::demand::{Demand, ObjectRef};
use accord::fleet::Fleet;
use accord::hardware::NodeHardware;
use accord::lifecycle::{Deadlines, NodeLife, Observation, Stage, Transition};
use accord::plan::{Action, Plan};
use accord::truth::{Publication, SchedulerView};
use accord_api::agent::CommandRecord;
use accord_api::control::{
    describe, stage_label, CannotPlan, ControlStatus, Intent, IntentAction, KindWatch, Mode,
    NodeStatus, WorkloadState, WorkloadStatus,
};
use tracing::{debug, info, warn};

pub use metrics::RoundMetrics;
pub use provisioning::Booking;
use provisioning::{Condition, ProvisioningSeen};
pub use results::{BiosCheck, BiosRead, Executed, Failure};
pub use said::SaidKey;

mod admin;
mod bios;
mod boot_times;
pub mod buffers;
mod commands;
pub mod dark;
pub mod gpu_clients;
mod in_order;
mod lifecycles;
pub mod metrics;
mod power;
mod power_off;
mod reclaim;
pub use reclaim::Eviction;
pub mod provisioning;
mod results;
mod round;
mod said;
mod seen;
mod truth;
pub mod warm;
mod workloads;

pub use bios::BiosEffects;
pub use commands::{config_alias, CommandEffects};
use power::busy_pods;
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
    /// Pending pods left to another scheduler, or to kube-scheduler's
    /// preemption (nominated): never planned, said once each.
    pub not_planned: Vec<CannotPlanSeen>,
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
    /// CapacityBuffers, resolved.
    pub buffers: Vec<buffers::BufferSeen>,
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
    pub bios_reads: Vec<BiosRead>,
    /// Every registered Node's uid, resourceVersion and kept annotations
    /// (dark machines' Nodes are deleted and restored by them).
    pub node_objects: BTreeMap<String, dark::NodeObject>,
    /// The mig-parted configurations mig-manager's ConfigMap was last seen
    /// to hold (by *effect*'s writer; `gpu-operator` mode).
    pub mig_configs_written: BTreeSet<String>,
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
    /// CapacityBuffer statuses that changed.
    pub buffer_status: Vec<buffers::BufferStatusWrite>,
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
    pub bookings: Option<BTreeMap<String, Booking>>,
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
    /// Dark machines' Nodes: copies kept (stored first), deletes, restores
    /// (act mode only).
    pub dark: dark::DarkEffects,
    /// Pods to evict through the Eviction API: borrowers of lent reserved
    /// nodes their owner takes back (act mode only; `reclaim`).
    pub evictions: Vec<Eviction>,
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
    /// The GPU Operator's mig-manager handshake (`gpu-operator` mode).
    pub mig_manager: MigManager,
}

/// How accordd hands mig-manager a configuration (`[control]`
/// `mig_config_sync_s`, `mig_label_tries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigManager {
    /// How long after its ConfigMap holds a configuration the Node label
    /// naming it is set: mig-manager reads the ConfigMap from a volume the
    /// kubelet syncs (up to its sync period plus the cache's propagation
    /// delay behind the API; Kubernetes' "Mounted ConfigMaps are updated
    /// automatically"), and validates the label's configuration against
    /// that file first (mig-parted `pkg/mig/reconfigure/reconfigure.go`,
    /// `validateMigConfig`: `failed` when it is not there yet).
    pub sync_s: u64,
    /// Labels tried per command: after `failed`, the label is changed to
    /// another name of the same configuration (mig-manager acts only on a
    /// change of the label, `cmd/nvidia-mig-manager/main.go`,
    /// `ContinuouslySyncMigConfigChanges`).
    pub label_tries: u32,
}

impl Default for MigManager {
    fn default() -> Self {
        MigManager {
            sync_s: 90,
            label_tries: 3,
        }
    }
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

/// The loop's memory between rounds: the fleet, the settings, the clock,
/// and one book per concern (docs/ARCHITECTURE.md, "A new rule").
#[derive(Debug)]
pub struct Decider {
    fleet: Fleet,
    settings: Settings,
    clock: Clock,
    /// Lifecycles, boots, repairs, this round's busy pods (`lifecycles`).
    life: lifecycles::Lifecycles,
    /// How long workloads wait (`workloads`).
    latency: workloads::Latency,
    /// Provisioned requests' nodes (`provisioning`).
    bookings: provisioning::Bookings,
    /// Declared and scheduler drift, views, publications (`truth`).
    truth: truth::Truth,
    /// Things said that still hold; observe mode's unmade writes (`said`).
    said: said::Said,
    /// Agent commands: in flight, settling, held GPUs.
    commands: commands::Commands,
    /// BIOS profiles: staged, verified, failed.
    bios: bios::BiosBook,
    /// Admins' power requests (`admin`).
    admin: admin::AdminBook,
    /// Warm capacity ahead of demand: the arrivals seen, the budget spent.
    warmth: warm::Warmth,
    /// CapacityBuffers' placeholders and the nodes they hold.
    buffers: buffers::Buffers,
    /// Machines going dark: the powering-off taints, the Nodes deleted
    /// and restored (`power_off`, `dark`).
    dark: dark::DarkBook,
    /// Lent reserved capacity taken back for its owner: the borrowers
    /// asked to leave (`reclaim`).
    reclaim: reclaim::Reclaim,
}

/// The time of the round under way (or start-up, for `note`), the rounds
/// taken, and the planner's stopwatch (none: reported as 0, for the
/// simulator, whose bytes must repeat).
#[derive(Debug, Default)]
struct Clock {
    now: u64,
    round: u64,
    stopwatch: Option<Stopwatch>,
}

/// A monotonic clock the caller owns (time since some start), given to
/// [`Decider::set_stopwatch`]: decide itself reads none.
pub type Stopwatch = fn() -> Duration;

impl Decider {
    /// Every node of `fleet` starts Off at `now`.
    pub fn new(mut fleet: Fleet, settings: Settings, now: u64) -> Decider {
        // The rounds walk the fleet beside maps keyed by node name.
        if !fleet.nodes.is_sorted_by(|a, b| a.name <= b.name) {
            fleet.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let lives = fleet
            .nodes
            .iter()
            .map(|n| (n.name.clone(), NodeLife::new(Stage::Off, now)))
            .collect();
        Decider {
            fleet,
            settings,
            clock: Clock {
                now,
                ..Clock::default()
            },
            life: lifecycles::Lifecycles {
                nodes: lives,
                ..Default::default()
            },
            latency: Default::default(),
            bookings: Default::default(),
            truth: Default::default(),
            said: Default::default(),
            commands: Default::default(),
            bios: Default::default(),
            admin: Default::default(),
            warmth: Default::default(),
            buffers: Default::default(),
            dark: Default::default(),
            reclaim: Default::default(),
        }
    }

    /// The copies of deleted Nodes kept from before a restart (the
    /// store's): put back when their kubelets register them again.
    pub fn seed_kept_nodes(&mut self, kept: BTreeMap<String, accord::truth::KeptNode>) {
        let known: BTreeSet<&String> = self.life.nodes.keys().collect();
        self.dark.seed(
            kept.into_iter()
                .filter(|(n, _)| known.contains(n))
                .collect(),
        );
    }

    /// Scheduler views kept from before a restart (the store's): nodes
    /// that are off are planned with what the scheduler last showed.
    pub fn seed_views(&mut self, views: BTreeMap<String, SchedulerView>) {
        let known: BTreeSet<&String> = self.life.nodes.keys().collect();
        self.truth.views = views
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
        bookings: BTreeMap<String, Booking>,
    ) {
        for (node, life) in lives {
            if let Some(l) = self.life.nodes.get_mut(&node) {
                *l = life;
            }
        }
        self.life.saved = self.life.nodes.clone();
        self.bookings.booked = bookings
            .into_iter()
            .map(|(k, b)| (k, (b.nodes, b.until)))
            .collect();
        self.bookings.saved = self.bookings.booked.clone();
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
        self.latency.waiting_ready.len()
    }

    /// Sets how Unhealthy nodes are repaired (default: not at all).
    pub fn set_repair(&mut self, repair: Repair) {
        self.life.repairs.policy = repair;
    }

    /// How long the powering-off taint stands, once the Node shows it,
    /// before the power-off is sent (default
    /// [`DEFAULT_POWER_OFF_SETTLE_S`]).
    pub fn set_power_off_settle_s(&mut self, s: u64) {
        self.dark.drains.set_settle_s(s);
    }

    /// Times the planner with `stopwatch` (status `planner_ms`, metric
    /// `accord_planner_seconds`).
    pub fn set_stopwatch(&mut self, stopwatch: Stopwatch) {
        self.clock.stopwatch = Some(stopwatch);
    }

    /// The last round's warm capacity (`policy.warm`).
    pub fn warm_round(&self) -> &warm::WarmRound {
        &self.warmth.round
    }

    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Intents found open at start: their nodes are on their way (the
    /// executor reconciles them before the first round).
    pub fn resume_intents(&mut self, open: &[Intent], now: u64) {
        self.clock.now = now;
        for i in open {
            self.resume_bios(i);
            if let Some(life) = self.life.nodes.get_mut(&i.node) {
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
        self.clock.now = now;
        self.clock.round += 1;
        self.life.busy = busy_pods(snap);
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
        self.say_not_planned(snap);
        let transitional = self.count_round(&plan, &mut r.metrics);
        self.bios_checks(now, &mut r.metrics, &mut r.bios);
        let dark = self.dark_round(snap);
        let publish = if act {
            self.publications(snap)
        } else {
            Vec::new()
        };
        // Observe mode is read-only: what it would write is said in the
        // status (and `explain`), not written.
        let buffer_status = self.buffers.statuses(&snap.buffers);
        let (events, conditions, buffer_status) = if act {
            (r.events, conditions, buffer_status)
        } else {
            self.would_write(r.events, conditions, buffer_status);
            (Vec::new(), Vec::new(), Vec::new())
        };
        r.metrics.time_to_capacity_seconds = workloads
            .iter()
            .filter_map(|w| w.capacity_in_s)
            .max()
            .unwrap_or(0) as f64;
        r.metrics.boot_ready_seconds = self
            .life
            .boot_times
            .status()
            .into_iter()
            .map(|b| (b.profile, (b.ready_median_s as f64, b.ready_p90_s as f64)))
            .collect();
        let status = self.status(snap, &plan, workloads, r.metrics.planner_seconds);
        let (lives_changed, bookings) = self.state_changes();
        Decision {
            power: if act { power } else { Vec::new() },
            events,
            conditions,
            buffer_status,
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
            dark,
            evictions: if act { r.evictions } else { Vec::new() },
        }
    }

    /// What changed since the store was last given the lifecycles and
    /// bookings.
    #[allow(clippy::type_complexity)]
    fn state_changes(&mut self) -> (Vec<(String, NodeLife)>, Option<BTreeMap<String, Booking>>) {
        // Both maps by name: walked side by side.
        let mut saved = in_order::in_order(&self.life.saved);
        let lives: Vec<(String, NodeLife)> = self
            .life
            .nodes
            .iter()
            .filter(|(n, l)| saved.get(n) != Some(*l))
            .map(|(n, l)| (n.clone(), l.clone()))
            .collect();
        for (n, l) in &lives {
            self.life.saved.insert(n.clone(), l.clone());
        }
        let bookings = (self.bookings.booked != self.bookings.saved).then(|| {
            self.bookings.saved = self.bookings.booked.clone();
            self.bookings
                .booked
                .iter()
                .map(|(k, (nodes, until))| {
                    (
                        k.clone(),
                        Booking {
                            nodes: nodes.clone(),
                            until: *until,
                        },
                    )
                })
                .collect()
        });
        (lives, bookings)
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

/// Differences as one line.
fn drift_text(drift: &[accord::truth::Drift]) -> String {
    drift
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Events about a node go to its Kubernetes Node.
fn node_ref(node: &str) -> ObjectRef {
    ObjectRef::new("v1", "Node", "default", node)
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
                mig_manager: MigManager::default(),
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

    #[test]
    fn pods_left_to_another_scheduler_or_to_preemption_are_not_planned_and_said_once() {
        let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let mut d = Decider::new(
            fleet,
            Settings {
                mode: Mode::Act,
                deadlines: Deadlines::default(),
                booking_s: 600,
                command_deadline_s: 600,
                mig_manager: MigManager::default(),
            },
            100_000,
        );
        let seen = |pod: &str, reason: &str| CannotPlanSeen {
            workload: format!("ml/{pod}"),
            sources: vec![ObjectRef::new("v1", "Pod", "ml", pod)],
            reason: reason.to_owned(),
        };
        let mut world = Snapshot {
            not_planned: vec![
                seen(
                    "volcano-pod",
                    "spec.schedulerName \"volcano\" is not a scheduler Accord plans for",
                ),
                seen("preemptor", "kube-scheduler nominated node n9 for it"),
            ],
            ..Snapshot::default()
        };
        let first = round(&mut d, &world, 0);
        let said: Vec<&str> = first
            .said
            .added
            .iter()
            .filter(|k| k.kind == said::NOT_PLANNED)
            .map(|k| k.object.as_str())
            .collect();
        assert_eq!(said, ["ml/preemptor", "ml/volcano-pod"]);
        assert!(
            first.status.actions.is_empty(),
            "{:?}",
            first.status.actions
        );
        assert!(first.status.placements.is_empty());
        let listed: Vec<&str> = first
            .status
            .cannot_plan
            .iter()
            .map(|c| c.workload.as_str())
            .collect();
        assert_eq!(listed, ["ml/volcano-pod", "ml/preemptor"]);
        assert_eq!(first.status.pods["ml/preemptor"], "ml/preemptor");
        // Said once: the next round says nothing new while it holds.
        let second = round(&mut d, &world, 10);
        assert!(second.said.added.is_empty(), "{:?}", second.said.added);
        assert!(second.said.removed.is_empty());
        // Gone (bound by its scheduler): forgotten, so said again if it returns.
        world.not_planned.clear();
        let third = round(&mut d, &world, 20);
        assert_eq!(
            third
                .said
                .removed
                .iter()
                .filter(|k| k.kind == said::NOT_PLANNED)
                .count(),
            2
        );
    }
}
