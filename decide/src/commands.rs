//! Agent commands (MIG repartitions) in *decide*: the plan's
//! `ReconfigureMig` actions become one journaled command per node (through
//! the agent, or the GPU Operator's mig-manager), followed until the
//! node's report shows the result or the deadline passes.
//!
//! - **In flight** (open): the node is planned as it will be (the target
//!   layouts applied to its model), so a round never proposes the same
//!   repartition again, and the workloads it is for wait as
//!   `Repartitioning` (not `Placed`: a ProvisioningRequest is not
//!   Provisioned on capacity that does not exist yet).
//! - **Done**: the agent's report must show every target layout; then the
//!   node keeps the new layout over a scheduler view that does not show it
//!   yet (the device plugin / DRA driver republish after the change) for
//!   up to [`SETTLE_S`]; meanwhile its workloads stay `Repartitioning`
//!   (the pods cannot bind before the Node or its slices show the new
//!   devices).
//! - **Refused or failed** (busy GPU, a reset not allowed, an NVML error):
//!   the GPUs are left alone for [`HOLD_S`] (`withheld`), so the next plan
//!   uses other GPUs or powers a node on.
//! - **Deadline passed**: the command is closed as failed, the node is
//!   Failed with that reason, and its demand is planned again.
//!
//! Agent mode on a node the GPU Operator serves: its operands (device
//! plugin, GFD, DCGM) are paused before the agent is handed the command
//! and set going again after, as mig-manager does ([`gpu_clients`]).
//!
//! `gpu-operator` mode: the command is journaled undeliverable; the
//! node's whole mig-parted configuration, under [`MigManager::label_tries`]
//! names, is put in the ConfigMap the ClusterPolicy names (by *effect*,
//! every round until the writer has seen it there); [`MigManager::sync_s`]
//! later (the kubelet's volume sync, which mig-manager reads through)
//! accordd sets the Node label `nvidia.com/mig.config` to the first name
//! the Node does not show already (mig-manager acts only on a change).
//! When mig-manager says `success` the command is released and the agent,
//! asked to rediscover, reports the new layout; `failed` moves the label
//! to the next name, and after the last one closes the command.
//!
//! [`MigManager::label_tries`]: crate::MigManager::label_tries
//! [`MigManager::sync_s`]: crate::MigManager::sync_s

use std::collections::{BTreeMap, BTreeSet};

use accord::fleet::{Fleet, MigVia, Node};
use accord::hardware::MigState;
use accord::plan::{Action, Plan};
use accord_api::agent::{CommandAction, CommandRecord, CommandResult, CommandState, MigTarget};
use accord_api::mig_parted::{self, DeviceConfig};
use tracing::{info, warn};

use super::{gpu_clients, node_ref, Event, MigManager, Snapshot};

mod operator;
pub use operator::config_alias;
use operator::{operator_config, OperatorHandshake};

/// How long a finished repartition's layout is preferred over a scheduler
/// view that does not show it yet.
pub(super) const SETTLE_S: u64 = 120;
/// How long GPUs an agent refused (or failed) to repartition are left
/// alone.
pub(super) const HOLD_S: u64 = 300;
/// How often the `nvidia.com/mig.config` label is sent again while the
/// Node does not show it.
const RELABEL_S: u64 = 30;
/// mig-manager sets `pending` as soon as it sees the label change; a
/// terminal state (`success`, `failed`) is taken as about Accord's
/// configuration once a non-terminal one was seen, or this long after the
/// Node first showed the label (a fast mig-manager can go from `pending`
/// to `success` between two rounds; a leftover state from an earlier
/// configuration would have been replaced by then).
const STATE_FRESH_S: u64 = 5;

/// What *effect* does about commands this round.
#[derive(Debug, Clone, Default)]
pub struct CommandEffects {
    /// New commands to journal (the store numbers them).
    pub open: Vec<CommandRecord>,
    /// (node, generation, result): commands accordd closes (deadline
    /// passed, mig-manager failed).
    pub close: Vec<(String, u64, CommandResult)>,
    /// (node, generation): `gpu-operator` commands the agent may now be
    /// handed (mig-manager says `success`).
    pub release: Vec<(String, u64)>,
    /// mig-parted configurations to add to the configs file (before their
    /// labels are set).
    pub mig_configs: Vec<(String, Vec<DeviceConfig>)>,
    /// (node, key, value): labels to set.
    pub labels: Vec<(String, String, String)>,
    /// (node, configuration): mig-manager said `failed` there; *effect*
    /// reads its reason from mig-manager's log and says it (an event).
    pub mig_manager_failed: Vec<(String, String)>,
    /// (namespace, name): the GPU Operator's validator pods to delete
    /// around an agent's repartition (mig-manager does,
    /// [`gpu_clients`]).
    pub delete_pods: Vec<(String, String)>,
}

#[derive(Debug, Default)]
pub(super) struct Commands {
    /// Each node's latest command, as the snapshot showed it.
    latest: BTreeMap<String, CommandRecord>,
    /// Node → the generation whose end was already acted on.
    handled: BTreeMap<String, u64>,
    /// (node, GPU position) → until when, and why, it is left alone.
    holds: BTreeMap<(String, usize), (u64, String)>,
    /// Node → until when, and the layouts (by GPU position) it now has.
    settling: BTreeMap<String, (u64, Vec<(usize, MigState)>)>,
    /// Node → (generation, when its mig.config label, or its operands'
    /// pause labels, were last sent).
    labelled: BTreeMap<String, (u64, u64)>,
    /// Node → when its paused operands' labels were last set back.
    restored: BTreeMap<String, u64>,
    /// Node → how its `gpu-operator` command is handed to mig-manager.
    operator: BTreeMap<String, OperatorHandshake>,
    /// A `gpu-operator` configuration's first name → its entries (what
    /// *effect* writes under each of its names).
    configs: BTreeMap<String, Vec<DeviceConfig>>,
    /// Nodes failed for a command past its deadline: held Failed (their
    /// coming up does not make them usable) until their agent reports
    /// again, or they go off.
    timed_out: BTreeSet<String>,
    /// The first round acts on no command that was already closed (after
    /// a restart, those were acted on before).
    seeded: bool,
}

/// The kind label of a command's metrics.
fn kind(via: MigVia) -> &'static str {
    match via {
        MigVia::Agent => "mig_agent",
        MigVia::GpuOperator => "mig_gpu_operator",
    }
}

fn via_text(via: MigVia) -> &'static str {
    match via {
        MigVia::Agent => "through the agent",
        MigVia::GpuOperator => "through the GPU Operator",
    }
}

fn result_label(r: &CommandResult) -> &'static str {
    match r {
        CommandResult::Done => "done",
        CommandResult::Busy { .. } => "busy",
        CommandResult::ResetRequired { .. } => "reset_required",
        CommandResult::Failed { .. } => "failed",
    }
}

/// The GPU position (what devices name) of NVML index `index` on `node`.
fn position(node: &Node, index: u32) -> Option<usize> {
    node.gpus
        .iter()
        .find(|g| g.nvml_index == index)
        .map(|g| g.index)
}

/// The target layouts of `rec` as MIG states of `node`'s GPUs (targets
/// that do not fit the GPU's profiles are left out: the agent refuses
/// them).
fn target_states(node: &Node, targets: &[MigTarget]) -> Vec<(usize, MigState)> {
    targets
        .iter()
        .filter_map(|t| {
            let g = node.gpus.iter().find(|g| g.nvml_index == t.index)?;
            let state = g.mig.as_ref()?.with_layout(&t.layout).ok()?;
            Some((g.index, state))
        })
        .collect()
}

/// Whether `node`'s model shows every target layout.
fn shows(node: &Node, targets: &[MigTarget]) -> Result<(), String> {
    for t in targets {
        let Some(g) = node.gpus.iter().find(|g| g.nvml_index == t.index) else {
            return Err(format!("the report has no GPU {}", t.index));
        };
        let Some(mig) = g.mig.as_deref() else {
            return Err(format!("the report shows no MIG state on GPU {}", t.index));
        };
        let wanted = mig.with_layout(&t.layout).map_err(|e| e.to_string())?;
        if !accord::plan::mig::same_layout(mig, &wanted) {
            return Err(format!(
                "GPU {} shows [{}], wanted [{}]",
                t.index,
                mig.layout()
                    .map(|l| l.join(", "))
                    .unwrap_or_else(|| "instances without placements".into()),
                t.layout.join(", ")
            ));
        }
    }
    Ok(())
}

/// What [`Commands::absorb`] found (and [`Commands::issue`] says).
#[derive(Debug, Default)]
pub(super) struct Absorbed {
    /// (node, reason): nodes to fail (a command's deadline passed).
    pub fail: Vec<(String, String)>,
    pub events: Vec<Event>,
    pub metrics: Vec<(&'static str, &'static str)>,
}

impl Commands {
    /// Takes this round's command records: acts once on each that ended
    /// (done, refused, failed), closes those past their deadline, and
    /// follows mig-manager for `gpu-operator` ones. `fleet` already holds
    /// this round's reports.
    pub(super) fn absorb(
        &mut self,
        snap: &Snapshot,
        fleet: &Fleet,
        act: bool,
        mig_manager: MigManager,
        effects: &mut CommandEffects,
    ) -> Absorbed {
        let now = snap.now;
        let mut out = Absorbed::default();
        self.holds.retain(|_, (until, _)| *until > now);
        self.settling.retain(|_, (until, _)| *until > now);
        // An agent that reports again is heard: its node is not held.
        self.timed_out.retain(|n| !snap.reports.contains_key(n));
        if snap.commands_unreadable {
            // Keep last round's view; nothing new is decided on it.
            return out;
        }
        self.latest = snap
            .commands
            .iter()
            .map(|c| (c.node.clone(), c.clone()))
            .collect();
        // What only open `gpu-operator` commands need.
        let open_configs: BTreeSet<&String> = snap
            .commands
            .iter()
            .filter(|c| c.is_open())
            .filter_map(|c| c.mig_config.as_ref())
            .collect();
        self.configs.retain(|k, _| open_configs.contains(k));
        let latest = &self.latest;
        self.operator.retain(|n, h| {
            latest
                .get(n)
                .is_some_and(|c| c.is_open() && c.generation == h.generation)
        });
        if !self.seeded {
            self.seeded = true;
            for c in snap.commands.iter().filter(|c| !c.is_open()) {
                self.handled.insert(c.node.clone(), c.generation);
            }
        }
        for rec in snap.commands.iter() {
            let node = &rec.node;
            if self.handled.get(node).is_some_and(|g| *g >= rec.generation) {
                continue;
            }
            let Some(model) = fleet.node(node) else {
                continue;
            };
            match &rec.state {
                CommandState::Closed { result, .. } => {
                    self.handled.insert(node.clone(), rec.generation);
                    self.ended(rec, result, model, now, &mut out);
                }
                _ if now >= rec.deadline => {
                    self.handled.insert(node.clone(), rec.generation);
                    let reason = format!(
                        "MIG repartition {} (command {}) did not complete within {} s",
                        via_text(rec.via),
                        rec.generation,
                        rec.deadline.saturating_sub(rec.opened_at)
                    );
                    warn!(node = %node, command = rec.generation, "{reason}; the node is failed and its demand planned again");
                    out.metrics.push((kind(rec.via), "timeout"));
                    out.events.push(Event {
                        regarding: node_ref(node),
                        reason: "MigRepartitionTimedOut",
                        action: "Repartition",
                        note: reason.clone(),
                        warning: true,
                    });
                    if act {
                        effects.close.push((
                            node.clone(),
                            rec.generation,
                            CommandResult::Failed {
                                reason: reason.clone(),
                            },
                        ));
                    }
                    // Its GPUs are left alone, and the node stays failed
                    // until its agent is heard reporting again.
                    for t in &rec.targets {
                        if let Some(pos) = position(model, t.index) {
                            self.holds
                                .insert((node.clone(), pos), (now + HOLD_S, reason.clone()));
                        }
                    }
                    self.timed_out.insert(node.clone());
                    out.fail.push((node.clone(), reason));
                }
                _ if rec.via == MigVia::GpuOperator && act => {
                    self.follow_operator(rec, snap, model, mig_manager, effects, &mut out);
                }
                _ if rec.via == MigVia::Agent && !rec.deliver && act => {
                    self.follow_pause(rec, snap, effects);
                }
                _ => {}
            }
        }
        if act {
            self.restore_operands(snap, fleet, effects);
        }
        out
    }

    /// Whether `rec`'s labels are to be sent now (first for its
    /// generation, or [`RELABEL_S`] since they last were); if so, noted
    /// as sent.
    fn relabel_due(&mut self, rec: &CommandRecord, now: u64) -> bool {
        let due = match self.labelled.get(&rec.node) {
            Some((g, at)) => *g != rec.generation || now >= at + RELABEL_S,
            None => true,
        };
        if due {
            self.labelled
                .insert(rec.node.clone(), (rec.generation, now));
        }
        due
    }

    /// Agent mode on a GPU Operator node: keep its operands' deploy labels
    /// paused; once none of their pods runs there, hand the agent its
    /// command ([`gpu_clients`]).
    fn follow_pause(&mut self, rec: &CommandRecord, snap: &Snapshot, effects: &mut CommandEffects) {
        let node = &rec.node;
        let Some(view) = snap.views.get(node) else {
            return;
        };
        let pause = gpu_clients::to_pause(&view.labels);
        if !pause.is_empty() {
            if self.relabel_due(rec, snap.now) {
                effects
                    .labels
                    .extend(pause.into_iter().map(|(k, v)| (node.clone(), k, v)));
            }
            return;
        }
        let running = gpu_clients::running(&snap.demand.bound, node);
        if running.is_empty() {
            info!(node = %node, command = rec.generation, "the GPU Operator's operands are paused; handing the agent its repartition");
            effects.delete_pods.extend(gpu_clients::pods_of(
                &snap.demand.bound,
                node,
                &gpu_clients::VALIDATORS_BEFORE,
            ));
            effects.release.push((node.clone(), rec.generation));
        }
    }

    /// Agent mode: operands paused on a node with no command in flight are
    /// set going again (every [`RELABEL_S`] until the Node shows it).
    fn restore_operands(&mut self, snap: &Snapshot, fleet: &Fleet, effects: &mut CommandEffects) {
        let now = snap.now;
        for (node, view) in &snap.views {
            if self.in_flight(node) || fleet.node(node).is_none_or(|n| n.mig_via != MigVia::Agent) {
                continue;
            }
            let restore = gpu_clients::to_restore(&view.labels);
            if restore.is_empty() {
                self.restored.remove(node);
                continue;
            }
            if self
                .restored
                .get(node)
                .is_some_and(|at| now < at + RELABEL_S)
            {
                continue;
            }
            info!(node = %node, labels = %restore.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(","), "setting the GPU Operator's paused operands going again");
            self.restored.insert(node.clone(), now);
            effects
                .labels
                .extend(restore.into_iter().map(|(k, v)| (node.clone(), k, v)));
            effects.delete_pods.extend(gpu_clients::pods_of(
                &snap.demand.bound,
                node,
                &gpu_clients::VALIDATORS_AFTER,
            ));
        }
    }

    /// A command ended with `result`: verify, settle or hold.
    fn ended(
        &mut self,
        rec: &CommandRecord,
        result: &CommandResult,
        model: &Node,
        now: u64,
        out: &mut Absorbed,
    ) {
        let node = &rec.node;
        let verdict = match result {
            CommandResult::Done => shows(model, &rec.targets).map_err(|why| {
                format!("the agent said done, but its report does not show it: {why}")
            }),
            other => Err(other.describe()),
        };
        match verdict {
            Ok(()) => {
                let layouts = target_states(model, &rec.targets);
                info!(node = %node, command = rec.generation, via = kind(rec.via), "MIG repartition done; the report shows it");
                out.metrics.push((kind(rec.via), "done"));
                out.events.push(Event {
                    regarding: node_ref(node),
                    reason: "MigRepartitioned",
                    action: "Repartition",
                    note: format!(
                        "MIG repartitioned {} for {}: {}",
                        via_text(rec.via),
                        rec.for_workloads.join(", "),
                        targets_text(&rec.targets)
                    ),
                    warning: false,
                });
                self.settling
                    .insert(node.clone(), (now + SETTLE_S, layouts));
            }
            Err(why) => {
                warn!(node = %node, command = rec.generation, reason = %why, "MIG repartition not done; its GPUs are left alone and the demand planned again");
                out.metrics.push((
                    kind(rec.via),
                    match result {
                        CommandResult::Done => "failed",
                        r => result_label(r),
                    },
                ));
                out.events.push(Event {
                    regarding: node_ref(node),
                    reason: "MigRepartitionRefused",
                    action: "Repartition",
                    note: format!(
                        "MIG repartition {} for {} not done: {why}",
                        via_text(rec.via),
                        rec.for_workloads.join(", ")
                    ),
                    warning: true,
                });
                for t in &rec.targets {
                    if let Some(pos) = position(model, t.index) {
                        self.holds
                            .insert((node.clone(), pos), (now + HOLD_S, why.clone()));
                    }
                }
            }
        }
    }

    /// Plans `node` as its commands make it: in flight or settling, the
    /// target layouts; held GPUs withheld from repartitioning. `viewed`:
    /// the scheduler's view agrees with the model (no scheduler drift), so
    /// a settled layout need not be forced.
    pub(super) fn overlay(&self, node: &mut Node, viewed_agrees: bool) {
        if let Some(rec) = self.latest.get(&node.name).filter(|r| r.is_open()) {
            for (pos, state) in target_states(node, &rec.targets) {
                accord::plan::mig::expect_layout(node, pos, &state);
            }
        } else if let (Some((_, layouts)), false) = (self.settling.get(&node.name), viewed_agrees) {
            for (pos, state) in layouts {
                accord::plan::mig::expect_layout(node, *pos, state);
            }
        }
        for g in &mut node.gpus {
            if self.holds.contains_key(&(node.name.clone(), g.index)) {
                g.withheld = true;
            }
        }
    }

    /// Whether a command is under way on the node, settling, or holds
    /// one of its GPUs (the fleet as seen overlays it).
    pub(super) fn touches(&self, node: &str) -> bool {
        if self.latest.is_empty() && self.settling.is_empty() && self.holds.is_empty() {
            return false;
        }
        self.latest.get(node).is_some_and(CommandRecord::is_open)
            || self.settling.contains_key(node)
            || self.holds.keys().any(|(n, _)| n == node)
    }

    /// A settling node whose scheduler view now agrees is settled.
    pub(super) fn settled(&mut self, agreeing: &BTreeSet<String>) {
        self.settling.retain(|n, _| !agreeing.contains(n));
    }

    /// Workloads of finished repartitions that the scheduler does not show
    /// yet: their node has a scheduler view (a Node) that disagrees with
    /// the new layout while it settles (the device plugin, GFD or the DRA
    /// driver has not republished). Not Placed until it does (nor a
    /// ProvisioningRequest Provisioned): the pods could not bind.
    pub(super) fn unshown(
        &self,
        viewed: &BTreeMap<String, accord::truth::SchedulerView>,
        agreeing: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        self.settling
            .keys()
            .filter(|n| viewed.contains_key(*n) && !agreeing.contains(*n))
            .filter_map(|n| self.latest.get(n))
            .flat_map(|r| r.for_workloads.iter().cloned())
            .collect()
    }

    /// Workloads waiting for a command in flight.
    pub(super) fn waiting(&self) -> BTreeSet<String> {
        self.latest
            .values()
            .filter(|r| r.is_open())
            .flat_map(|r| r.for_workloads.iter().cloned())
            .collect()
    }

    /// Whether `node` is held Failed for a command past its deadline.
    pub(super) fn holds_node(&self, node: &str) -> bool {
        self.timed_out.contains(node)
    }

    /// Lets go of held nodes that `off` says are off.
    pub(super) fn release_off(&mut self, off: impl Fn(&str) -> bool) {
        self.timed_out.retain(|n| !off(n));
    }

    /// Nodes with a command in flight.
    pub(super) fn in_flight(&self, node: &str) -> bool {
        self.latest.get(node).is_some_and(|r| r.is_open())
    }

    /// Each node's latest command (the status shows them).
    pub(super) fn latest(&self) -> Vec<CommandRecord> {
        self.latest.values().cloned().collect()
    }

    /// The plan's MIG repartitions as new commands, one per node (none
    /// while the node has one in flight). Returns the workloads they are
    /// for.
    pub(super) fn issue(
        &mut self,
        plan: &Plan,
        seen: &Fleet,
        now: u64,
        settings: &crate::Settings,
        effects: &mut CommandEffects,
        said: &mut Absorbed,
    ) -> BTreeSet<String> {
        let (deadline_s, mig_manager) = (settings.command_deadline_s, settings.mig_manager);
        // Node → (GPU position, layout) and the workloads they are for.
        type Wanted = (Vec<(usize, Vec<String>)>, BTreeSet<String>);
        let mut per_node: BTreeMap<&str, Wanted> = BTreeMap::new();
        for a in &plan.actions {
            if let Action::ReconfigureMig {
                node,
                gpu,
                layout,
                for_workloads,
            } = a
            {
                let e = per_node.entry(node.as_str()).or_default();
                e.0.push((*gpu, layout.clone()));
                e.1.extend(for_workloads.iter().cloned());
            }
        }
        let mut waiting = BTreeSet::new();
        for (name, (gpus, workloads)) in per_node {
            if self.in_flight(name) {
                continue;
            }
            let Some(node) = seen.node(name) else {
                continue;
            };
            let targets: Vec<MigTarget> = gpus
                .iter()
                .filter_map(|(pos, layout)| {
                    let g = node.gpus.iter().find(|g| g.index == *pos)?;
                    Some(MigTarget {
                        index: g.nvml_index,
                        uuid: g.uuid.clone(),
                        layout: layout.clone(),
                    })
                })
                .collect();
            if targets.is_empty() {
                continue;
            }
            let via = node.mig_via;
            let (action, deliver, mig_config) = match via {
                // On a GPU Operator node its operands are paused first
                // (the command handed over once their pods are gone).
                MigVia::Agent => {
                    let pause = gpu_clients::to_pause(&node.labels);
                    effects
                        .labels
                        .extend(pause.into_iter().map(|(k, v)| (name.to_owned(), k, v)));
                    (
                        CommandAction::ApplyMig {
                            gpus: targets.clone(),
                        },
                        !gpu_clients::deployed(&node.labels),
                        None,
                    )
                }
                // Its configuration goes into the ConfigMap now; the label
                // follows once mig-manager can read it ([`follow_operator`]).
                MigVia::GpuOperator => {
                    let entries = operator_config(node, &targets);
                    let config = mig_parted::config_name(&entries);
                    effects.mig_configs.extend(
                        (0..mig_manager.label_tries.max(1))
                            .map(|n| (config_alias(&config, n), entries.clone())),
                    );
                    self.configs.insert(config.clone(), entries);
                    (CommandAction::Rediscover, false, Some(config))
                }
            };
            info!(node = %name, via = kind(via), targets = %targets_text(&targets), workloads = %workloads.iter().cloned().collect::<Vec<_>>().join(","), "repartitioning MIG");
            said.events.push(Event {
                regarding: node_ref(name),
                reason: "MigRepartitioning",
                action: "Repartition",
                note: format!(
                    "repartitioning MIG {} for {}: {}",
                    via_text(via),
                    workloads.iter().cloned().collect::<Vec<_>>().join(", "),
                    targets_text(&targets)
                ),
                warning: false,
            });
            said.metrics.push((kind(via), "issued"));
            self.labelled.remove(name);
            waiting.extend(workloads.iter().cloned());
            effects.open.push(CommandRecord {
                node: name.to_owned(),
                generation: 0,
                action,
                via,
                targets,
                mig_config,
                deliver,
                for_workloads: workloads.into_iter().collect(),
                opened_at: now,
                deadline: now.saturating_add(deadline_s),
                state: CommandState::Open,
            });
        }
        waiting
    }
}

fn targets_text(targets: &[MigTarget]) -> String {
    targets
        .iter()
        .map(|t| format!("GPU {} → [{}]", t.index, t.layout.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}
