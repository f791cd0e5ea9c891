//! The running loop: what wakes it, the batching window, start-up
//! (journal reconciled, watchers listed, every BMC read once), and each
//! round's observe → decide → effect. *Effect* starts the power actions
//! first (in the background, so a slow BMC or API server never holds up a
//! Reset or the next round), then writes to Kubernetes, then records the
//! metrics once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use accord_kube::translate::Options;
use accord_kube::watch::DemandWatch;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn};

use super::bmc::BmcPoller;
use super::decide::{Decider, Decision, Settings};
use super::observe::Observer;
pub use super::wake::Wake;
use super::write::{KubeWriter, Writes};
use super::{Batcher, Mode};
use crate::config::{ControlConfig, DaemonConfig};
use crate::execute::{BiosRead, Executed, Executor, RedfishPower};
use crate::journal::Intent;
use crate::shared::Shared;

mod bios;
mod effect;
mod forward;
mod ha;

/// SIGHUP: every BMC's credentials file read again now (they are also
/// read again whenever a file changes, before the next login).
fn reload_credentials_on_sighup(power: Arc<RedfishPower>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGHUP; credentials files are still read again when they change");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let (changed, problems) = power.reload_credentials().await;
            info!(
                changed,
                problems = problems.len(),
                "SIGHUP: BMC credentials files read again"
            );
            for p in problems {
                warn!(problem = %p, "credentials file not read; the credentials in use are kept");
            }
        }
    })
}

/// Admins' power requests waiting for the loop at most: more are refused
/// (503) rather than queued without bound.
const ADMIN_QUEUE: usize = 64;

/// How long in-flight power actions may finish at shutdown; past it they
/// are left to the journal (a sent intent is verified at the next start).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long the first lists of the watched kinds may take before the loop
/// plans without the ones still missing.
const FIRST_LIST_WITHIN: Duration = Duration::from_secs(60);

/// The loop and what it owns between rounds.
pub struct Controller {
    config: ControlConfig,
    kube: kube::Client,
    shared: Arc<Shared>,
    options: Options,
    stale_after_s: u64,
    /// Built at the start of `run`, once the API server has said what it
    /// serves.
    observer: Option<Observer>,
    decider: Decider,
    /// Kubernetes writes, in the background.
    writer: KubeWriter,
    executor: Option<Arc<Executor<RedfishPower>>>,
    power: Option<Arc<RedfishPower>>,
    /// BMC readings (a node missing: not read, or unreadable).
    bmc: BTreeMap<String, bool>,
    /// Power results for the next round.
    executed: Vec<Executed>,
    /// The journal's open intents as last read.
    open_intents: Vec<Intent>,
    /// BIOS reads for the next round.
    bios_reads: Vec<BiosRead>,
    /// Power actions in flight.
    in_flight: JoinSet<()>,
    /// Admins' power requests for the next round.
    admin_calls: Vec<crate::shared::AdminCall>,
    started: Instant,
    /// mig-manager's ConfigMap (`gpu-operator` MIG mode).
    mig_parted_configmap: super::mig_parted::ConfigMapRef,
    /// When closed intents were last pruned from the journal.
    journal_pruned_at: Option<u64>,
    /// The fleet the decider was built from (rebuilt at a takeover).
    fleet: accord::fleet::Fleet,
    /// Whether this replica may act (a single replica: always).
    leadership: crate::ha::Leadership,
    /// With replicas: the API server's copy of what a new leader needs.
    shared_state: Option<Arc<crate::ha::shared_state::SharedState>>,
    /// The term this replica took over and acts in (`None`: following,
    /// or a single replica).
    term: Option<crate::ha::Fence>,
    /// The leader's write-behind of the shared state, one at a time.
    mirroring: Option<tokio::task::JoinHandle<()>>,
}

/// Closed intents are kept this long (`accordctl status` history, an
/// admin's look back after an incident)...
const JOURNAL_KEEP_S: u64 = 7 * 24 * 3600;
/// ...and at most this many of them, newest first.
const JOURNAL_KEEP_AT_MOST: usize = 10_000;
/// How often the journal is pruned (a scan of the closed intents).
const JOURNAL_PRUNE_EVERY_S: u64 = 3600;

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("mode", &self.config.mode)
            .field("decider", &self.decider)
            .finish_non_exhaustive()
    }
}

/// The Kubernetes client the configuration names.
pub async fn kube_client(config: &DaemonConfig) -> anyhow::Result<kube::Client> {
    use anyhow::Context;
    let k = &config.kubernetes;
    let options = kube::config::KubeConfigOptions {
        context: k.context.clone(),
        ..Default::default()
    };
    let cfg = match (&k.url, &k.kubeconfig) {
        (Some(url), _) => kube::Config::new(url.parse().context("kubernetes.url")?),
        (None, Some(path)) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("kubernetes.kubeconfig: {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("kubernetes.kubeconfig: {}", path.display()))?
        }
        (None, None) if options.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("kubernetes.context: $KUBECONFIG / ~/.kube/config")?,
        (None, None) => kube::Config::infer()
            .await
            .context("kubernetes: no in-cluster service account and no kubeconfig")?,
    };
    kube::Client::try_from(cfg).context("kubernetes: cannot build a client")
}

/// A decider seeded with where the loop was (the store's lifecycles with
/// their deadlines, bookings, scheduler views, what was said, BIOS
/// outcomes): at start, and at a replica's takeover once the store holds
/// the previous leader's state.
fn seeded_decider(
    fleet: accord::fleet::Fleet,
    control: &ControlConfig,
    shared: &Shared,
) -> Decider {
    let mut decider = Decider::new(
        fleet,
        Settings {
            mode: control.mode,
            deadlines: control.deadlines,
            booking_s: control.provisioning_booking_s,
            command_deadline_s: control.mig_deadline_s,
            mig_manager: accord_decide::MigManager {
                sync_s: control.mig_config_sync_s,
                label_tries: control.mig_label_tries,
            },
        },
        (shared.now)(),
    );
    decider.set_repair(control.repair.into());
    decider.set_power_off_settle_s(control.power_off_settle_s);
    decider.set_stopwatch(since_start);
    // Where the loop was: lifecycles (with their deadlines) and
    // bookings, before the journal's open intents are resumed.
    match (shared.store.lives(), shared.store.bookings()) {
        (Ok((lives, bad_lives)), Ok((bookings, bad_bookings))) => {
            if !bad_lives.is_empty() || !bad_bookings.is_empty() {
                warn!(nodes = %bad_lives.join(","), requests = %bad_bookings.join(","), "kept lifecycles or bookings that cannot be read are ignored");
            }
            decider.seed_state(lives, bookings);
        }
        (Err(e), _) | (_, Err(e)) => {
            warn!(error = %accord::config_file::error_chain(&e), "cannot read the kept lifecycles and bookings; every node is observed afresh")
        }
    }
    match shared.store.scheduler_views() {
        Ok((views, unreadable)) => {
            if !unreadable.is_empty() {
                warn!(nodes = %unreadable.join(","), "kept scheduler views that cannot be read are ignored (the watch gives them again)");
            }
            decider.seed_views(views);
        }
        Err(e) => {
            warn!(error = %accord::config_file::error_chain(&e), "cannot read the kept scheduler views; nodes that are off are planned with their models")
        }
    }
    // What deleted dark machines' Nodes had: put back when they register.
    match shared.store.kept_nodes() {
        Ok((kept, unreadable)) => {
            if !unreadable.is_empty() {
                warn!(nodes = %unreadable.join(","), "kept copies of deleted Nodes that cannot be read are ignored: their labels and taints are not put back");
            }
            decider.seed_kept_nodes(kept);
        }
        Err(e) => {
            warn!(error = %accord::config_file::error_chain(&e), "cannot read the kept copies of deleted Nodes: their labels and taints are not put back")
        }
    }
    // What was said and still held: not said again.
    match shared.store.said() {
        Ok((said, unreadable)) => {
            if unreadable > 0 {
                warn!(
                    unreadable,
                    "kept said-once keys that cannot be read are dropped (at worst said again)"
                );
            }
            decider.seed_said(said);
        }
        Err(e) => {
            warn!(error = %accord::config_file::error_chain(&e), "cannot read what was said before the restart; some events may be said again")
        }
    }
    bios::seed(shared, &mut decider);
    decider
}

impl Controller {
    /// Builds the loop from a validated configuration (the fleet and, in
    /// act mode, the inventory are read here, before anything runs).
    pub async fn new(config: &DaemonConfig, shared: Arc<Shared>) -> anyhow::Result<Controller> {
        let control = config.control.clone().expect("called with [control]");
        let fleet = crate::load_fleet(&config.fleet.as_ref().expect("validated").file)?;
        let kube = kube_client(config).await?;
        let leadership = shared.leadership();
        let shared_state = leadership.is_ha().then(|| {
            Arc::new(crate::ha::shared_state::SharedState::new(
                kube.clone(),
                &config.ha.namespace,
                leadership.clone(),
            ))
        });
        let (executor, power) = match (control.mode, &config.redfish) {
            (Mode::Act, Some(r)) => {
                let inventory = accord_redfish::Inventory::load(&r.inventory)?;
                // With replicas every change to a BMC asks the Lease first.
                let power = Arc::new(match leadership.is_ha() {
                    true => RedfishPower::gated(&inventory, leadership.clone())?,
                    false => RedfishPower::new(&inventory)?,
                });
                let journal = shared.store.journal()?;
                let executor = Executor::new(journal, power.clone());
                let executor = match &shared_state {
                    Some(s) => executor.with_shared_state(s.clone()),
                    None => executor,
                };
                (Some(Arc::new(executor)), Some(power))
            }
            _ => (None, None),
        };
        let mut options = Options::for_topology(&fleet.topology);
        options.limits = config.limits;
        options.schedulers = config.kubernetes.schedulers();
        let topology = fleet.topology.clone();
        let decider = seeded_decider(fleet.clone(), &control, &shared);
        let mig_parted_configmap =
            super::mig_parted::ConfigMapRef::parse(&control.mig_parted_configmap)
                .map_err(|e| anyhow::anyhow!("control.mig_parted_configmap: {e}"))?;
        if fleet
            .nodes
            .iter()
            .any(|n| n.mig_via == accord::fleet::MigVia::GpuOperator)
        {
            // Said once at start: without it mig-manager never reads what
            // accordd writes, and every repartition times out.
            let check = super::mig_parted::check_cluster_policy(&kube, &mig_parted_configmap);
            match tokio::time::timeout(Duration::from_secs(10), check).await {
                Ok(problems) => {
                    for p in problems {
                        warn!(configmap = %control.mig_parted_configmap, "{p}");
                    }
                }
                Err(_) => warn!("the GPU Operator's ClusterPolicy could not be read within 10 s; make sure its spec.migManager.config.name names [control] mig_parted_configmap"),
            }
        }
        if let Some(old) = &control.mig_parted_config {
            warn!(file = %old.display(), configmap = %control.mig_parted_configmap, "control.mig_parted_config is ignored: accordd writes mig-manager's ConfigMap (control.mig_parted_configmap)");
        }
        Ok(Controller {
            config: control,
            writer: KubeWriter::spawn(
                kube.clone(),
                topology,
                leadership.clone(),
                shared.mig_configs_written.clone(),
            ),
            kube,
            shared,
            options,
            stale_after_s: config.agents.stale_after_s,
            observer: None,
            decider,
            executor,
            power,
            bmc: BTreeMap::new(),
            executed: Vec::new(),
            open_intents: Vec::new(),
            bios_reads: Vec::new(),
            in_flight: JoinSet::new(),
            admin_calls: Vec::new(),
            started: Instant::now(),
            mig_parted_configmap,
            journal_pruned_at: None,
            fleet,
            leadership,
            shared_state,
            term: None,
            mirroring: None,
        })
    }

    /// Runs until `shutdown` resolves; then lets in-flight power actions
    /// finish (up to a grace period: what is left is in the journal).
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        // Watch what this API server serves, and only that.
        let served = tokio::select! {
            s = discover(&self.kube) => s,
            _ = &mut shutdown => return self.stop(Vec::new()).await,
        };
        self.observer = Some(Observer {
            watch: DemandWatch::start_served(self.kube.clone(), &served),
            options: self.options.clone(),
            shared: self.shared.clone(),
            stale_after_s: self.stale_after_s,
            models_loaded: false,
            slice_problems: Default::default(),
            unsupported_said: Default::default(),
        });
        let (tx, mut rx) = mpsc::channel::<Wake>(4096);
        let mut tasks = vec![self.spawn_kube_forwarder(tx.clone())];
        tasks.push(self.spawn_admin_forwarder(tx.clone()));
        tasks.push(self.spawn_agent_forwarder(tx.clone()));
        tasks.push(self.spawn_leadership_forwarder(tx.clone()));
        let (transitional_tx, transitional_rx) = watch::channel(BTreeSet::new());
        let polling = self.power.clone().map(|power| {
            BmcPoller {
                power,
                nodes: self
                    .decider
                    .fleet()
                    .nodes
                    .iter()
                    .map(|n| n.name.clone())
                    .collect(),
                transitional: transitional_rx,
                every: Duration::from_millis(self.config.bmc_poll_ms),
                often: Duration::from_millis(self.config.transition_poll_ms),
                leading: {
                    let l = self.leadership.clone();
                    Arc::new(move || !l.is_ha() || l.may_act().is_ok())
                },
            }
            .spawn(tx.clone())
        });
        if let Some(power) = self.power.clone() {
            tasks.push(reload_credentials_on_sighup(power));
        }
        let mut bmc_read = polling.is_none();
        tasks.extend(polling);
        info!(mode = ?self.config.mode, nodes = self.decider.fleet().nodes.len(), "control loop starting");
        // Reconcile the journal with the BMCs: an intent sent before a
        // crash is verified, not resent. In the background: a Reset that
        // never shows waits `resend_after` and its power timeout, and the
        // rest of the fleet is planned meanwhile (the decider holds the
        // intents' nodes as in flight).
        // With replicas, a leader does this when it takes over.
        if let (Some(ex), false) = (self.executor.clone(), self.leadership.is_ha()) {
            self.resume(&ex, &tx);
        }
        // Wait for the first lists, but not for good: a kind the server
        // serves and still refuses to list (RBAC, a broken conversion
        // webhook) is named and the loop runs with what there is. Except
        // Pods and Nodes: without them every node would look idle.
        let listed = loop {
            tokio::select! {
                _ = self.observer().watch.ready() => break true,
                _ = tokio::time::sleep(FIRST_LIST_WITHIN) => {
                    let watch = &self.observer().watch;
                    let waiting_for = watch.not_ready().join(", ");
                    if watch.pods_and_nodes_listed() {
                        warn!(%waiting_for, within_s = FIRST_LIST_WITHIN.as_secs(), "not every watched kind has been listed; planning with what there is");
                        break true;
                    }
                    warn!(%waiting_for, "Pods or Nodes not listed yet: nothing is planned until they are (a node's pods must be known)");
                }
                _ = &mut shutdown => break false,
            }
        };
        if !listed {
            return self.stop(tasks).await;
        }
        // Nor before every BMC has been read once: a node that is on but
        // not yet read would look dark, and the first round could power
        // on others instead of using it.
        while !bmc_read {
            tokio::select! {
                w = rx.recv() => match w {
                    Some(w) => bmc_read |= self.take(w),
                    None => return self.stop(tasks).await,
                },
                _ = &mut shutdown => return self.stop(tasks).await,
            }
        }
        let batcher = Batcher {
            idle: Duration::from_millis(self.config.batch_idle_ms),
            max: Duration::from_millis(self.config.batch_max_ms),
        };
        // The first round runs at once. Then a round per batch of
        // wake-ups, and at least one each tick_ms (deadlines, idle
        // timers). The tick is not a change: it only ends a wait.
        let tick = Duration::from_millis(self.config.tick_ms);
        loop {
            // A follower runs no round: its watches, BMC readings and
            // hardware models stay warm for a takeover.
            if self.lead(&tx).await {
                let decision = self.round();
                self.effect(decision, &tx, &transitional_tx).await;
                self.mirror();
            } else {
                self.refuse_admin_calls();
            }
            let next_tick = Instant::now() + tick;
            tokio::select! {
                b = batcher.next_until(&mut rx, Some(next_tick)) => match b {
                    Some(batch) => for w in batch {
                        self.take(w);
                    },
                    None => break,
                },
                _ = &mut shutdown => break,
            }
        }
        self.stop(tasks).await;
    }

    async fn stop(mut self, tasks: Vec<tokio::task::JoinHandle<()>>) {
        for t in tasks {
            t.abort();
        }
        if !self.in_flight.is_empty() {
            info!(
                actions = self.in_flight.len(),
                grace_s = SHUTDOWN_GRACE.as_secs(),
                "waiting for power actions in flight"
            );
            let finish = async {
                while let Some(done) = self.in_flight.join_next().await {
                    log_join(done);
                }
            };
            if tokio::time::timeout(SHUTDOWN_GRACE, finish).await.is_err() {
                warn!("power actions still in flight at shutdown; their intents stay open in the journal and are verified at the next start");
                self.in_flight.abort_all();
            }
        }
        self.writer.finish(SHUTDOWN_GRACE).await;
        if let Some(power) = &self.power {
            // BMCs hold few sessions: each one ours is deleted.
            if tokio::time::timeout(SHUTDOWN_GRACE, power.close())
                .await
                .is_err()
            {
                warn!("BMC sessions not all deleted at shutdown (they time out on the BMCs)");
            }
        }
        info!("control loop stopped");
    }

    /// Folds a wake-up into the loop's state; true for the BMC poller's
    /// first pass.
    fn take(&mut self, w: Wake) -> bool {
        match w {
            Wake::Kubernetes | Wake::Agent | Wake::Leadership => false,
            Wake::Bmc {
                readings,
                first_pass,
            } => {
                for (node, on) in readings {
                    match on {
                        Some(on) => self.bmc.insert(node, on),
                        None => self.bmc.remove(&node),
                    };
                }
                first_pass
            }
            Wake::Executed(done) => {
                self.executed.extend(done);
                false
            }
            Wake::Bios(reads) => {
                self.bios_reads.extend(reads);
                false
            }
            Wake::Admin(call) => {
                self.admin_calls.push(call);
                if self.leadership.may_act().is_err() {
                    self.refuse_admin_calls();
                }
                false
            }
        }
    }

    /// A replica that does not lead answers admins' power requests at
    /// once, naming the leader.
    fn refuse_admin_calls(&mut self) {
        if self.admin_calls.is_empty() {
            return;
        }
        let leader = match self.leadership.may_act() {
            Err(e) => e.leader,
            Ok(_) => return,
        };
        let reason = format!(
            "this replica does not lead; the leader is {} (ask it)",
            leader.as_deref().unwrap_or("not known yet")
        );
        for call in self.admin_calls.drain(..) {
            let _ = call.reply.send(Err(crate::shared::AdminRefusal {
                kind: crate::shared::RefusalKind::Unavailable,
                reason: reason.clone(),
            }));
        }
    }

    fn resume(&mut self, ex: &Arc<Executor<RedfishPower>>, tx: &mpsc::Sender<Wake>) {
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
        let now = (self.shared.now)();
        info!(
            intents = open.len(),
            "reconciling open intents with the BMCs (in the background)"
        );
        self.decider.resume_intents(&open, now);
        let (ex, tx) = (ex.clone(), tx.clone());
        self.in_flight.spawn(async move {
            match ex.resume(now).await {
                Ok(done) if done.is_empty() => {}
                Ok(done) => {
                    let _ = tx.send(Wake::Executed(done)).await;
                }
                Err(e) => {
                    warn!(error = %accord::config_file::error_chain(&e), "journal reconcile failed; tried again next round")
                }
            }
        });
    }

    /// Observe, then decide.
    fn round(&mut self) -> Decision {
        // A journal that cannot be read keeps the last round's view of
        // what is in flight rather than showing nothing.
        if let Some(ex) = &self.executor {
            match ex.journal().open_intents() {
                Ok(open) => self.open_intents = open,
                Err(e) => {
                    warn!(error = %accord::config_file::error_chain(&e), "cannot read the intent journal; using the last round's open intents")
                }
            }
        }
        let open_intents = self.open_intents.clone();
        let started = self.started;
        let bmc = &self.bmc;
        let mut snapshot = self.observer.as_mut().expect("run started it").snapshot(
            started.elapsed(),
            bmc,
            std::mem::take(&mut self.executed),
            open_intents,
        );
        snapshot.bios_reads = std::mem::take(&mut self.bios_reads);
        for call in &self.admin_calls {
            self.decider.ask_admin(&call.node, call.request);
        }
        self.decider.decide(&snapshot)
    }

    fn now(&self) -> u64 {
        (self.shared.now)()
    }
}

impl Controller {
    fn observer(&self) -> &Observer {
        self.observer.as_ref().expect("run started it")
    }
}

/// Asks the API server what it serves, until it answers: the first
/// failure is a warning, later ones are logged at debug level (the loop
/// cannot plan without the cluster; SIGTERM still stops it).
async fn discover(kube: &kube::Client) -> accord_kube::discovery::ServedApis {
    let mut backoff = accord::backoff::Backoff::new(500, 30_000, u64::from(std::process::id()));
    let mut failures = 0u32;
    loop {
        match accord_kube::discovery::ServedApis::discover(kube).await {
            Ok(s) => {
                if failures > 0 {
                    info!(failures, "the API server answered discovery");
                }
                return s;
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    warn!(error = %e, "cannot ask the API server what it serves; retrying with backoff");
                } else {
                    tracing::debug!(error = %e, failures, "API discovery failed again");
                }
                tokio::time::sleep(backoff.next_wait()).await;
            }
        }
    }
}

/// A power task that panicked or was cancelled says so: its nodes would
/// otherwise wait in PoweringOn until their deadline with nothing logged.
fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if !e.is_cancelled() {
            tracing::error!(error = %e, "a power action task failed; its intents stay open in the journal");
        }
    }
}

/// Monotonic time since this process first asked: the decider's
/// stopwatch for the planner.
fn since_start() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}
