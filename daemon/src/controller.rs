//! The running control loop. Changes in Kubernetes demand and nodes, agent
//! reports, BMC power states and a periodic tick wake it; a batching
//! window collects bursts; then each round observes every node (BMC, agent,
//! Kubernetes, bound pods), steps its lifecycle, plans on the fleet as the
//! lifecycles show it, and in `act` mode executes the plan's power actions
//! through the intent journal (in the background, so the next round is not
//! held up by a slow BMC). At start, open intents are reconciled with the
//! BMCs before anything is planned. Each round's view is kept for
//! `GET /v1/status` (`accordctl status` / `explain`) and the metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::lifecycle::{Deadlines, NodeLife, Observation, Stage, Transition};
use accord::plan::{Action, Plan};
use accord_kube::translate::Options;
use accord_kube::watch::DemandWatch;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::api::ApiState;
use crate::config::{ControlConfig, DaemonConfig};
use crate::control::{fleet_as_seen, Batcher, Mode};
use crate::execute::{Executed, Executor, PowerControl, RedfishPower};
use crate::journal::{Action as IntentAction, Intent};
use crate::metrics::{KindResult, StageLabel};

/// Why the loop woke.
#[derive(Debug)]
pub enum Wake {
    Kubernetes,
    Agent,
    Bmc,
    /// Power actions finished (or failed) in the background; their results
    /// wait in `Controller::finished`.
    Executed,
}

/// One node as the last round saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    pub stage: Stage,
    pub since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub pods: u32,
    pub gpus: u32,
    /// The BMC's last power reading (`None`: not read, or observe mode).
    #[serde(default)]
    pub bmc_on: Option<bool>,
}

/// A pending workload and what Accord makes of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadStatus {
    /// `namespace/name`.
    pub workload: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub pods: u32,
    pub min: u32,
    /// `placed` (fits on nodes that are up or coming up), `powering_on`
    /// (this round's plan powers nodes on for it) or `cannot_place`.
    pub state: String,
    /// The nodes the plan puts its pods on.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Nodes powered on for it this round.
    #[serde(default)]
    pub powering_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds since Accord first saw it pending.
    pub pending_s: f64,
}

/// What `GET /v1/status` answers: the last round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlStatus {
    pub mode: Mode,
    pub round: u64,
    /// Unix seconds of the round.
    pub at: u64,
    pub planner_ms: f64,
    pub nodes: Vec<NodeStatus>,
    pub workloads: Vec<WorkloadStatus>,
    /// Objects that cannot be planned at all, with the reason.
    pub cannot_plan: Vec<(String, String)>,
    /// The round's plan (in observe mode: what Accord would do).
    pub actions: Vec<Action>,
    #[serde(default)]
    pub placements: Vec<accord::plan::WorkloadPlacement>,
    #[serde(default)]
    pub unsatisfied: Vec<accord::plan::Unsatisfied>,
    /// Pending pod (`ns/name`) → its workload.
    pub pods: BTreeMap<String, String>,
    /// Pending pod → the scheduler's word on it (its PodScheduled
    /// condition message).
    pub scheduler: BTreeMap<String, String>,
    /// Power actions in flight (journal intents not yet done).
    pub open_intents: Vec<Intent>,
    /// Recent lifecycle changes, newest last.
    pub recent: Vec<String>,
}

impl ControlStatus {
    /// The round's plan, as `accordctl plan` shows it.
    pub fn plan(&self) -> Plan {
        Plan {
            actions: self.actions.clone(),
            placements: self.placements.clone(),
            unsatisfied: self.unsatisfied.clone(),
            notes: Vec::new(),
        }
    }
}

/// Everything one round needs from outside, read at its start.
struct Observed {
    demand: Demand,
    cannot_plan: Vec<(String, String)>,
    kube_ready: BTreeMap<String, bool>,
    pods_per_node: BTreeMap<String, u32>,
    pod_workload: BTreeMap<String, String>,
    scheduler: BTreeMap<String, String>,
    provisioning: Vec<accord_kube::manifests::ProvisioningRequest>,
}

/// The loop's state between rounds.
pub struct Controller {
    fleet: Fleet,
    options: Options,
    config: ControlConfig,
    stale_after_s: u64,
    watch: DemandWatch,
    kube: kube::Client,
    api: Arc<ApiState>,
    executor: Option<Arc<Executor<RedfishPower>>>,
    power: Option<Arc<RedfishPower>>,
    /// Results of background power actions, for the next round.
    finished: Arc<Mutex<Vec<Executed>>>,
    /// The BMC poller's readings, and the nodes it reads often.
    bmc: Arc<Mutex<BTreeMap<String, bool>>>,
    transitional: Arc<Mutex<BTreeSet<String>>>,
    lives: BTreeMap<String, NodeLife>,
    /// Workload → when it was first seen pending.
    pending_since: BTreeMap<String, Instant>,
    /// Workload → nodes powered on for it, until they are Ready.
    waiting_ready: BTreeMap<String, BTreeSet<String>>,
    /// Provisioned ProvisioningRequest (`ns/name`) → its nodes, held until
    /// the booking runs out.
    booked: BTreeMap<String, (BTreeSet<String>, u64)>,
    round: u64,
    recent: Vec<String>,
    /// Warnings already said (events are not repeated each round).
    said: BTreeSet<String>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("mode", &self.config.mode)
            .field("nodes", &self.fleet.nodes.len())
            .field("round", &self.round)
            .finish_non_exhaustive()
    }
}

/// The Kubernetes client the configuration names.
pub async fn kube_client(config: &DaemonConfig) -> anyhow::Result<kube::Client> {
    use anyhow::Context;
    let cfg = match &config.kubernetes.url {
        Some(url) => kube::Config::new(url.parse().context("kubernetes.url")?),
        None => kube::Config::infer()
            .await
            .context("kubernetes: no in-cluster service account and no kubeconfig")?,
    };
    kube::Client::try_from(cfg).context("kubernetes: cannot build a client")
}

fn unix_now() -> u64 {
    crate::api::unix_now()
}

impl Controller {
    /// Builds the loop from a validated configuration (the fleet and, in
    /// act mode, the inventory are read here, before anything runs).
    pub async fn new(config: &DaemonConfig, api: Arc<ApiState>) -> anyhow::Result<Controller> {
        let control = config.control.clone().expect("called with [control]");
        let fleet = crate::load_fleet(&config.fleet.as_ref().expect("validated").file)?;
        let kube = kube_client(config).await?;
        let (executor, power) = match (control.mode, &config.redfish) {
            (Mode::Act, Some(r)) => {
                let inventory = accord_redfish::Inventory::load(&r.inventory)?;
                let power = Arc::new(RedfishPower::new(&inventory)?);
                let journal = api.store.journal()?;
                (
                    Some(Arc::new(Executor::new(journal, power.clone()))),
                    Some(power),
                )
            }
            _ => (None, None),
        };
        let options = Options::for_topology(&fleet.topology);
        let now = unix_now();
        let lives = fleet
            .nodes
            .iter()
            .map(|n| (n.name.clone(), NodeLife::new(Stage::Off, now)))
            .collect();
        Ok(Controller {
            options,
            stale_after_s: config.agents.stale_after_s,
            watch: DemandWatch::start(kube.clone()),
            kube,
            api,
            executor,
            power,
            finished: Default::default(),
            bmc: Default::default(),
            transitional: Default::default(),
            lives,
            pending_since: BTreeMap::new(),
            waiting_ready: BTreeMap::new(),
            booked: BTreeMap::new(),
            round: 0,
            recent: Vec::new(),
            said: BTreeSet::new(),
            fleet,
            config: control,
        })
    }

    /// Runs until `shutdown` resolves.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let (tx, mut rx) = mpsc::channel::<Wake>(4096);
        let mut tasks = Vec::new();
        tasks.push(self.spawn_kube_forwarder(tx.clone()));
        tasks.push(self.spawn_agent_forwarder(tx.clone()));
        let (first_pass, first_pass_done) = tokio::sync::oneshot::channel();
        if let Some(power) = &self.power {
            let poller = BmcPoller {
                power: power.clone(),
                nodes: self.fleet.nodes.iter().map(|n| n.name.clone()).collect(),
                readings: self.bmc.clone(),
                transitional: self.transitional.clone(),
                every: Duration::from_millis(self.config.bmc_poll_ms),
                often: Duration::from_millis(self.config.transition_poll_ms),
            };
            tasks.push(poller.spawn(tx.clone(), first_pass));
        } else {
            let _ = first_pass.send(());
        }
        tokio::pin!(shutdown);
        info!(mode = ?self.config.mode, nodes = self.fleet.nodes.len(), "control loop starting");
        // Reconcile the journal with the BMCs before anything new is
        // planned: an intent sent before a crash is verified, not resent.
        if let Some(ex) = self.executor.clone() {
            self.resume(&ex).await;
        }
        tokio::select! {
            _ = self.watch.ready() => {}
            _ = &mut shutdown => return,
        }
        // Nor before every BMC has been read once: a node that is on but
        // not yet read would look dark, and the first round could power
        // on others instead of using it.
        tokio::select! {
            _ = first_pass_done => {}
            _ = &mut shutdown => return,
        }
        let batcher = Batcher {
            idle: Duration::from_millis(self.config.batch_idle_ms),
            max: Duration::from_millis(self.config.batch_max_ms),
        };
        // The first round runs at once, on what the watchers listed. Then
        // a round per batch of changes, and at least one each tick_ms
        // (deadlines, idle timers). The tick is not a change: it must not
        // hold a batch window open. A batch cut short by the tick loses
        // only wake-ups, never results (those wait in `finished`), and the
        // round observes everything anyway.
        let tick = Duration::from_millis(self.config.tick_ms);
        loop {
            self.round(&tx).await;
            let next_tick = Instant::now() + tick;
            tokio::select! {
                b = batcher.next(&mut rx) => if b.is_none() { break },
                _ = tokio::time::sleep_until(next_tick) => {}
                _ = &mut shutdown => break,
            }
        }
        for t in tasks {
            t.abort();
        }
        info!("control loop stopped");
    }

    async fn resume(&mut self, ex: &Arc<Executor<RedfishPower>>) {
        let open = match ex.journal().open_intents() {
            Ok(o) => o,
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot read the intent journal");
                return;
            }
        };
        if open.is_empty() {
            return;
        }
        let now = unix_now();
        info!(
            intents = open.len(),
            "reconciling open intents with the BMCs before planning"
        );
        for i in &open {
            if let Some(life) = self.lives.get_mut(&i.node) {
                match i.action {
                    IntentAction::PowerOn => life.power_on_requested(now),
                    IntentAction::PowerOff { .. } => life.power_off_requested(now),
                };
            }
        }
        match ex.resume(now).await {
            Ok(done) => self.absorb(done, now),
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "journal reconcile failed")
            }
        }
    }

    fn spawn_kube_forwarder(&self, tx: mpsc::Sender<Wake>) -> tokio::task::JoinHandle<()> {
        let mut changes = self.watch.changes();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                if tx.send(Wake::Kubernetes).await.is_err() {
                    return;
                }
            }
        })
    }

    fn spawn_agent_forwarder(&self, tx: mpsc::Sender<Wake>) -> tokio::task::JoinHandle<()> {
        let changed = self.api.changed.clone();
        tokio::spawn(async move {
            loop {
                changed.notified().await;
                if tx.send(Wake::Agent).await.is_err() {
                    return;
                }
            }
        })
    }

    /// Power results: a failed power action fails its node at once (the
    /// next round plans around it).
    fn absorb(&mut self, done: Vec<Executed>, now: u64) {
        for e in done {
            let result = if e.result.is_ok() { "ok" } else { "failed" };
            self.api
                .metrics
                .actions
                .get_or_create(&KindResult {
                    kind: "power".into(),
                    result: result.into(),
                })
                .inc();
            if let Err(reason) = &e.result {
                self.api
                    .metrics
                    .bmc_errors
                    .get_or_create(&crate::metrics::BmcLabel {
                        bmc: e.node.clone(),
                    })
                    .inc();
                warn!(node = %e.node, intent = e.intent, error = %reason, "power action failed; the node is marked Failed and its demand re-planned");
                if let Some(life) = self.lives.get_mut(&e.node) {
                    let t = life.fail(now, format!("power action failed: {reason}"));
                    self.note(&e.node, &t);
                }
            }
        }
    }

    fn note(&mut self, node: &str, transitions: &[Transition]) {
        for t in transitions {
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

    fn observe_kube(&self) -> Observed {
        // One copy of the stores per round, translated as the live watcher
        // does (only pods the scheduler marked Unschedulable are pending).
        let manifests = self.watch.manifests();
        let mut options = self.options.clone();
        options.pending_without_status = false;
        let translation = accord_kube::translate::translate(&manifests, &options);
        let mut pods_per_node: BTreeMap<String, u32> = BTreeMap::new();
        for b in &translation.demand.bound {
            *pods_per_node.entry(b.node.clone()).or_default() += 1;
        }
        let kube_ready = self
            .watch
            .nodes()
            .into_iter()
            .map(|n| (n.name, n.ready && !n.unschedulable))
            .collect();
        // Pending pod → its workload, from the sources the translation
        // names for each workload (`..., Pod ns/name, ...`): the grouping is
        // the translation's, not a second copy of its rules.
        let mut pod_workload = BTreeMap::new();
        let sourced = translation
            .demand
            .workloads
            .iter()
            .map(|w| (w.key(), w.source.clone().unwrap_or_default()))
            .chain(
                translation
                    .cannot_plan
                    .iter()
                    .map(|c| (c.workload.clone(), c.sources.join(", "))),
            );
        for (workload, sources) in sourced {
            for pod in sources.split(", ").filter_map(|s| s.strip_prefix("Pod ")) {
                pod_workload.insert(pod.to_owned(), workload.clone());
            }
        }
        let mut scheduler = BTreeMap::new();
        let mut provisioning = Vec::new();
        for o in &manifests.objects {
            if let accord_kube::manifests::Object::ProvisioningRequest(pr) = o {
                provisioning.push((**pr).clone());
                continue;
            }
            let accord_kube::manifests::Object::Pod(p) = o else {
                continue;
            };
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                continue;
            }
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            let key = format!("{ns}/{name}");
            if let Some(c) = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            {
                let reason = c.reason.clone().unwrap_or_default();
                let msg = c.message.clone().unwrap_or_default();
                scheduler.insert(key, format!("{reason}: {msg}"));
            }
        }
        Observed {
            cannot_plan: translation
                .cannot_plan
                .iter()
                .map(|c| (c.workload.clone(), c.reason.clone()))
                .collect(),
            demand: translation.demand,
            kube_ready,
            pods_per_node,
            pod_workload,
            scheduler,
            provisioning,
        }
    }

    async fn round(&mut self, tx: &mpsc::Sender<Wake>) {
        let now = unix_now();
        self.round += 1;
        let done: Vec<Executed> = std::mem::take(&mut *self.finished.lock().expect("lock"));
        self.absorb(done, now);
        let obs = self.observe_kube();
        // Agents heard from recently (liveness only: no hardware decoded).
        let agents: BTreeMap<String, u64> = match self.api.store.last_seen() {
            Ok(seen) => seen
                .into_iter()
                .filter(|(_, at)| !crate::store::stale(*at, now, self.stale_after_s))
                .collect(),
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot read agents from the store");
                BTreeMap::new()
            }
        };
        let bmc = self.bmc.lock().expect("lock").clone();
        let deadlines: Deadlines = self.config.deadlines;
        let names: Vec<String> = self.lives.keys().cloned().collect();
        for name in &names {
            let life = self.lives.get(name).expect("listed");
            let kube_ready = obs.kube_ready.get(name).copied().unwrap_or(false);
            // The agent counts once it is heard from after the node's
            // current stage began (a report from before a power-off does not).
            let agent_up = agents.get(name).is_some_and(|seen| *seen >= life.since);
            let bmc_on = match self.config.mode {
                Mode::Act => bmc.get(name).copied(),
                // Observe mode reads no BMC: power is inferred from the
                // agent and Kubernetes.
                Mode::Observe => Some(kube_ready || agents.contains_key(name)),
            };
            let o = Observation {
                bmc_on,
                agent_up: agent_up
                    || (self.config.mode == Mode::Observe && agents.contains_key(name)),
                kube_ready,
                pods: obs.pods_per_node.get(name).copied().unwrap_or(0),
            };
            let t = self
                .lives
                .get_mut(name)
                .expect("listed")
                .observe(&o, now, &deadlines);
            self.note(name, &t);
            if t.iter().any(|t| t.to == Stage::Failed) {
                let reason = self.lives[name].reason.clone().unwrap_or_default();
                self.event_for_node(name, "NodeFailed", &reason, true).await;
            }
        }

        // Plan on the fleet as the lifecycles show it.
        let mut seen = fleet_as_seen(&self.fleet, &self.lives);
        for n in &mut seen.nodes {
            if let Some(life) = self.lives.get(&n.name) {
                n.idle_since = (life.stage == Stage::Idle).then_some(life.since);
            }
            // A node whose BMC cannot be read is not powered on (nor
            // counted as dark capacity) until it can be.
            if self.config.mode == Mode::Act
                && !bmc.contains_key(&n.name)
                && n.power == accord::fleet::PowerState::Off
                && n.failed.is_none()
            {
                n.failed = Some("BMC power state unreadable".into());
            }
        }
        // check-capacity ProvisioningRequests never power anything on:
        // they are planned apart, on the nodes that are up.
        let mut demand = obs.demand.clone();
        let (check_capacity, rest): (Vec<_>, Vec<_>) =
            demand.workloads.drain(..).partition(is_check_capacity);
        demand.workloads = rest;
        let started = std::time::Instant::now();
        let plan = accord::plan::plan(&seen, &demand, &seen.policy, now);
        let planner_s = started.elapsed().as_secs_f64();
        self.api.metrics.planner_seconds.observe(planner_s);
        let mut check_status = Vec::new();
        if !check_capacity.is_empty() {
            let mut up_only = seen.clone();
            for n in &mut up_only.nodes {
                if !n.is_up() {
                    n.failed = Some("check-capacity: only nodes that are up".into());
                }
            }
            let cc = Demand {
                workloads: check_capacity,
                ..obs.demand.clone()
            };
            let cc_plan = accord::plan::plan(&up_only, &cc, &up_only.policy, now);
            check_status = self.workload_status(&cc_plan, &cc);
        }

        let mut power_ons = Vec::new();
        let mut power_offs = Vec::new();
        for a in &plan.actions {
            match a {
                Action::PowerOn { .. } => power_ons.push(a.clone()),
                Action::PowerOff { node, reason } => {
                    // Belt and braces: never a node with pods, never one
                    // that is not idle now, never one booked for a
                    // ProvisioningRequest.
                    let life = self.lives.get(node);
                    let pods = obs.pods_per_node.get(node).copied().unwrap_or(0);
                    let booked = self
                        .booked
                        .values()
                        .any(|(nodes, until)| *until > now && nodes.contains(node));
                    if booked {
                        continue;
                    }
                    if pods == 0 && life.is_some_and(|l| l.stage == Stage::Idle) {
                        power_offs.push(a.clone());
                    } else {
                        info!(node = %node, reason = %reason, pods, "planned power-off skipped: node not idle");
                    }
                }
                Action::ApplyBiosProfile { node, profile } => {
                    self.say_once(
                        format!("bios {node} {profile}"),
                        format!("node {node}: BIOS profile {profile} is staged before boot with `accordctl bios apply`; the loop does not stage it yet"),
                    );
                }
                Action::ReconfigureMig {
                    node, gpu, layout, ..
                } => {
                    self.say_once(
                        format!("mig {node} {gpu}"),
                        format!("node {node}: MIG repartition of GPU {gpu} to {layout:?} planned; repartitioning through the agent is not done by the loop yet"),
                    );
                }
            }
        }

        let mut workloads = self.workload_status(&plan, &demand);
        workloads.extend(check_status);
        self.track_latency(&plan, &workloads);
        self.provision(&obs, &workloads, now).await;

        if self.config.mode == Mode::Act {
            if let Some(ex) = self.executor.clone() {
                if !power_ons.is_empty() || !power_offs.is_empty() {
                    for a in power_ons.iter().chain(&power_offs) {
                        let life = self.lives.get_mut(a.node()).expect("fleet node");
                        let t = match a {
                            Action::PowerOn { for_workloads, .. } => {
                                info!(node = %a.node(), workloads = %for_workloads.join(","), "powering on");
                                life.power_on_requested(now)
                            }
                            _ => {
                                info!(node = %a.node(), "powering off (idle)");
                                life.power_off_requested(now)
                            }
                        };
                        let node = a.node().to_owned();
                        self.note(&node, &t);
                    }
                    for a in &power_ons {
                        if let Action::PowerOn {
                            node,
                            for_workloads,
                            ..
                        } = a
                        {
                            let note =
                                format!("powering on node {node} for {}", for_workloads.join(", "));
                            self.event_for_node(node, "PoweringOn", &note, false).await;
                        }
                    }
                    let actions: Vec<Action> = power_ons.into_iter().chain(power_offs).collect();
                    let tx = tx.clone();
                    let finished = self.finished.clone();
                    tokio::spawn(async move {
                        match ex.apply(&actions, now).await {
                            Ok(done) => {
                                finished.lock().expect("lock").extend(done);
                                let _ = tx.send(Wake::Executed).await;
                            }
                            Err(e) => {
                                tracing::error!(error = %accord::config_file::error_chain(&e), "intent journal write failed; nothing sent");
                            }
                        }
                    });
                }
            }
        } else {
            for a in &plan.actions {
                self.say_once(
                    format!("observe {a:?}"),
                    format!("observe mode: would {}", describe(a)),
                );
            }
        }

        for w in &workloads {
            if w.state == "cannot_place" {
                let reason = w.reason.clone().unwrap_or_default();
                let first = self.say_once(
                    format!("cannot {} {reason}", w.workload),
                    format!("workload {}: cannot place: {reason}", w.workload),
                );
                // Once per reason, on the object it came from, for
                // `kubectl describe` / `kubectl get events`.
                if let Some(regarding) = first.then(|| regarding_of(w.source.as_deref()?)).flatten()
                {
                    let note =
                        format!("Accord cannot place it: {reason}; nothing is powered on for it");
                    if let Err(e) = accord_kube::write::record_event(
                        &self.kube,
                        regarding,
                        "CannotPlace",
                        "Plan",
                        &note,
                        true,
                    )
                    .await
                    {
                        self.say_once(
                            format!("event {e}"),
                            format!("cannot record a Kubernetes event: {e}"),
                        );
                    }
                }
            }
        }

        // Which nodes the BMC poller reads often.
        {
            let mut tr = self.transitional.lock().expect("lock");
            tr.clear();
            tr.extend(
                self.lives
                    .iter()
                    .filter(|(_, l)| {
                        matches!(
                            l.stage,
                            Stage::PoweringOn | Stage::Booting | Stage::PoweringOff
                        )
                    })
                    .map(|(n, _)| n.clone()),
            );
        }
        self.record_metrics(&plan);
        let open_intents = self
            .executor
            .as_ref()
            .and_then(|ex| ex.journal().open_intents().ok())
            .unwrap_or_default();
        let status = ControlStatus {
            mode: self.config.mode,
            round: self.round,
            at: now,
            planner_ms: planner_s * 1000.0,
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
                        reason: life.reason.clone(),
                        pods: obs.pods_per_node.get(&n.name).copied().unwrap_or(0),
                        gpus: n.gpus.len() as u32,
                        bmc_on: bmc.get(&n.name).copied(),
                    }
                })
                .collect(),
            workloads,
            cannot_plan: obs.cannot_plan,
            actions: plan.actions.clone(),
            placements: plan.placements.clone(),
            unsatisfied: plan.unsatisfied.clone(),
            pods: obs.pod_workload,
            scheduler: obs.scheduler,
            open_intents,
            recent: self.recent.clone(),
        };
        *self.api.control.write().expect("lock") = Some(status);
    }

    /// Writes ProvisioningRequest conditions that changed, books the
    /// capacity of those newly Provisioned, and expires old bookings.
    async fn provision(&mut self, obs: &Observed, workloads: &[WorkloadStatus], now: u64) {
        let present: BTreeSet<String> = obs
            .provisioning
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                    p.metadata.name.as_deref().unwrap_or("")
                )
            })
            .collect();
        self.booked.retain(|k, _| present.contains(k));
        for pr in &obs.provisioning {
            let ns = pr
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = pr.metadata.name.clone().unwrap_or_default();
            let key = format!("{ns}/{name}");
            let w = workloads.iter().find(|w| w.workload == key);
            let nodes_up = w.is_some_and(|w| {
                !w.nodes.is_empty()
                    && w.nodes.iter().all(|n| {
                        self.lives.get(n).is_some_and(|l| {
                            matches!(l.stage, Stage::Ready | Stage::InUse | Stage::Idle)
                        })
                    })
            });
            let seen = crate::provisioning::Seen {
                pr,
                workload: w,
                cannot_plan: obs
                    .cannot_plan
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, r)| r.as_str()),
                nodes_up,
                fits_now: w.map(|w| w.state == "placed" && w.reason.is_none()),
                booking_expired: self
                    .booked
                    .get(&key)
                    .is_some_and(|(_, until)| *until <= now)
                    || (!self.booked.contains_key(&key)
                        && pr.is("Provisioned")
                        && provisioned_long_ago(pr, now, self.config.provisioning_booking_s)),
            };
            for c in crate::provisioning::conditions(&seen) {
                match accord_kube::write::set_provisioning_condition(&self.kube, &ns, &name, &c)
                    .await
                {
                    Ok(()) => {
                        info!(request = %key, condition = %c.type_, status = c.status, reason = %c.reason, message = %c.message, "ProvisioningRequest condition");
                        if c.type_ == "Provisioned" && c.status {
                            let nodes = w
                                .map(|w| w.nodes.iter().cloned().collect())
                                .unwrap_or_default();
                            self.booked.insert(
                                key.clone(),
                                (nodes, now + self.config.provisioning_booking_s),
                            );
                        }
                        if c.type_ == "BookingExpired" {
                            self.booked.remove(&key);
                        }
                    }
                    Err(e) => {
                        self.say_once(
                            format!("pr {key} {e}"),
                            format!("ProvisioningRequest {key}: cannot set {}: {e}", c.type_),
                        );
                    }
                }
            }
        }
    }

    /// Logs `line` the first time `key` is seen; true then.
    fn say_once(&mut self, key: String, line: String) -> bool {
        let first = self.said.insert(key);
        if first {
            info!("{line}");
        }
        first
    }

    /// An event on the Kubernetes Node (when it exists), for admins who
    /// watch `kubectl get events`.
    async fn event_for_node(&mut self, node: &str, reason: &str, note: &str, warning: bool) {
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_owned()),
            namespace: Some("default".into()),
            ..Default::default()
        };
        let action = if warning { "Fail" } else { "PowerOn" };
        if let Err(e) =
            accord_kube::write::record_event(&self.kube, regarding, reason, action, note, warning)
                .await
        {
            self.say_once(
                format!("event {e}"),
                format!("cannot record a Kubernetes event: {e}"),
            );
        }
    }

    fn workload_status(&self, plan: &Plan, demand: &Demand) -> Vec<WorkloadStatus> {
        let mut powering: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (node, w) in power_ons_for(plan) {
            powering.entry(w).or_default().push(node.to_owned());
        }
        let now = Instant::now();
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
                    (_, Some(_)) => "cannot_place",
                    (Some(_), None) if !powering_on.is_empty() => "powering_on",
                    _ => "placed",
                };
                WorkloadStatus {
                    source: w.source.clone(),
                    pods: w.pod_count(),
                    min: w.min(),
                    state: state.to_owned(),
                    nodes,
                    powering_on,
                    domain: placed.and_then(|p| p.domain.clone()),
                    reason: unsat.map(|u| u.reason.clone()),
                    pending_s: self
                        .pending_since
                        .get(&key)
                        .map(|t| now.duration_since(*t).as_secs_f64())
                        .unwrap_or(0.0),
                    workload: key,
                }
            })
            .collect()
    }

    /// pending → power-on issued, → nodes Ready, → pods bound.
    fn track_latency(&mut self, plan: &Plan, workloads: &[WorkloadStatus]) {
        let now = Instant::now();
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
            let s = now.duration_since(since).as_secs_f64();
            self.api.metrics.pending_to_bound_seconds.observe(s);
            info!(workload = %k, seconds = format!("{s:.1}"), "workload no longer pending (pods bound)");
        }
        for w in workloads {
            self.pending_since.entry(w.workload.clone()).or_insert(now);
        }
        if self.config.mode == Mode::Act {
            for (node, w) in power_ons_for(plan) {
                if !self.waiting_ready.contains_key(w) {
                    if let Some(since) = self.pending_since.get(w) {
                        self.api
                            .metrics
                            .pending_to_power_on_seconds
                            .observe(now.duration_since(*since).as_secs_f64());
                    }
                }
                self.waiting_ready
                    .entry(w.to_owned())
                    .or_default()
                    .insert(node.to_owned());
            }
        }
        let lives = &self.lives;
        let ready: Vec<String> = self
            .waiting_ready
            .iter()
            .filter(|(_, nodes)| {
                nodes.iter().all(|n| {
                    lives.get(n).is_some_and(|l| {
                        matches!(l.stage, Stage::Ready | Stage::InUse | Stage::Idle)
                    })
                })
            })
            .map(|(w, _)| w.clone())
            .collect();
        for w in ready {
            self.waiting_ready.remove(&w);
            if let Some(since) = self.pending_since.get(&w) {
                self.api
                    .metrics
                    .pending_to_ready_seconds
                    .observe(now.duration_since(*since).as_secs_f64());
            }
        }
    }

    fn record_metrics(&self, plan: &Plan) {
        let m = &self.api.metrics;
        m.nodes_by_stage.clear();
        for life in self.lives.values() {
            m.nodes_by_stage
                .get_or_create(&StageLabel {
                    stage: format!("{:?}", life.stage).to_lowercase(),
                })
                .inc();
        }
        m.pending_workloads.clear();
        for u in &plan.unsatisfied {
            m.pending_workloads
                .get_or_create(&crate::metrics::Reason {
                    reason: crate::metrics::reason_class(&u.reason).to_owned(),
                })
                .inc();
        }
    }
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

/// The object a workload came from, from the first of its sources
/// (`PodGroup ml/train (scheduling.k8s.io/v1beta1)`, `Pod ml/p`, `Job ml/j`,
/// `ProvisioningRequest ns/n (class ...)`), for events about it.
pub fn regarding_of(source: &str) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
    let first = source.split(", ").next()?;
    let mut words = first.splitn(3, ' ');
    let kind = words.next()?;
    let (ns, name) = words.next()?.split_once('/')?;
    let rest = words.next().unwrap_or("");
    let api_version = match kind {
        "Pod" => "v1".to_owned(),
        "Job" => "batch/v1".to_owned(),
        "Deployment" => "apps/v1".to_owned(),
        "JobSet" => "jobset.x-k8s.io/v1alpha2".to_owned(),
        "ProvisioningRequest" => "autoscaling.x-k8s.io/v1".to_owned(),
        "PodGroup" => rest.strip_prefix('(')?.strip_suffix(')')?.to_owned(),
        _ => return None,
    };
    Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind.to_owned()),
        namespace: Some(ns.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    })
}

fn is_check_capacity(w: &accord::demand::Workload) -> bool {
    w.source.as_deref().is_some_and(|s| {
        s.starts_with("ProvisioningRequest ") && s.contains(accord_kube::translate::CHECK_CAPACITY)
    })
}

/// After a restart the bookings are gone: a request Provisioned longer ago
/// than the booking time (its condition's lastTransitionTime) expires.
fn provisioned_long_ago(
    pr: &accord_kube::manifests::ProvisioningRequest,
    now: u64,
    booking_s: u64,
) -> bool {
    pr.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Provisioned" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_deref())
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|t| now.saturating_sub(t.as_second().max(0) as u64) > booking_s)
}

/// One line for an action, for logs and `accordctl explain`.
pub fn describe(a: &Action) -> String {
    match a {
        Action::PowerOn {
            node,
            wave,
            for_workloads,
        } => format!(
            "power on {node} (wave {wave}) for {}",
            for_workloads.join(", ")
        ),
        Action::PowerOff { node, reason } => format!("power off {node}: {reason}"),
        Action::ApplyBiosProfile { node, profile } => {
            format!("apply BIOS profile {profile} to {node} before boot")
        }
        Action::ReconfigureMig {
            node, gpu, layout, ..
        } => format!("repartition GPU {gpu} of {node} as {}", layout.join(" ")),
    }
}

/// Reads BMC power states in the background (every node each `every`, the
/// ones in transition each `often`) and wakes the loop when one changes,
/// so a round never waits on a BMC.
struct BmcPoller<P> {
    power: Arc<P>,
    nodes: Vec<String>,
    readings: Arc<Mutex<BTreeMap<String, bool>>>,
    /// The nodes read every `often` (the rest every `every`).
    transitional: Arc<Mutex<BTreeSet<String>>>,
    every: Duration,
    often: Duration,
}

impl<P: PowerControl + 'static> BmcPoller<P> {
    /// Runs until the loop is gone; `first_pass` is told once every node
    /// has been read.
    fn spawn(
        self,
        tx: mpsc::Sender<Wake>,
        first_pass: tokio::sync::oneshot::Sender<()>,
    ) -> tokio::task::JoinHandle<()> {
        let BmcPoller {
            power,
            nodes,
            readings,
            transitional,
            every,
            often,
        } = self;
        tokio::spawn(async move {
            let mut first_pass = Some(first_pass);
            let mut last_full: Option<Instant> = None;
            let mut failing: BTreeSet<String> = BTreeSet::new();
            loop {
                let full = last_full.is_none_or(|t| t.elapsed() >= every);
                let targets: Vec<String> = if full {
                    last_full = Some(Instant::now());
                    nodes.clone()
                } else {
                    transitional.lock().expect("lock").iter().cloned().collect()
                };
                let reads = targets.iter().map(|n| {
                    let power = power.clone();
                    async move { (n.clone(), power.is_on(n).await) }
                });
                let mut changed = false;
                for (node, r) in futures::future::join_all(reads).await {
                    match r {
                        Ok(on) => {
                            failing.remove(&node);
                            let mut map = readings.lock().expect("lock");
                            if map.insert(node, on) != Some(on) {
                                changed = true;
                            }
                        }
                        Err(e) => {
                            if failing.insert(node.clone()) {
                                warn!(node = %node, error = %e, "cannot read the BMC's power state");
                            }
                            readings.lock().expect("lock").remove(&node);
                        }
                    }
                }
                if let Some(done) = first_pass.take() {
                    let _ = done.send(());
                }
                if changed && tx.send(Wake::Bmc).await.is_err() {
                    return;
                }
                tokio::time::sleep(often).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::regarding_of;

    #[test]
    fn events_go_to_the_object_a_workload_came_from() {
        let r = regarding_of(
            "PodGroup ml/train (scheduling.k8s.io/v1beta1), Pod ml/train-0, Pod ml/train-1",
        )
        .unwrap();
        assert_eq!(r.kind.as_deref(), Some("PodGroup"));
        assert_eq!(r.api_version.as_deref(), Some("scheduling.k8s.io/v1beta1"));
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref()),
            (Some("ml"), Some("train"))
        );
        let r = regarding_of("Pod lab/nb-0").unwrap();
        assert_eq!(
            (r.api_version.as_deref(), r.name.as_deref()),
            (Some("v1"), Some("nb-0"))
        );
        let r = regarding_of(
            "ProvisioningRequest team-b/job-1-prov (class check-capacity.autoscaling.x-k8s.io)",
        )
        .unwrap();
        assert_eq!(r.api_version.as_deref(), Some("autoscaling.x-k8s.io/v1"));
        assert!(regarding_of("Kueue pod group ml/g").is_none());
        assert!(regarding_of("").is_none());
    }
}
