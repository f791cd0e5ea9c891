//! `accord-agent run`: registers this node with accordd, re-discovers on an
//! interval and on SIGHUP and reports only changes, heartbeats, and rides
//! out daemon outages with capped exponential backoff and jitter. It never
//! exits because the daemon is down. accordd's commands (in its answers)
//! are carried out once per generation ([`crate::command`]) and answered
//! with a report carrying the outcome, retried like any report; an
//! outcome accordd refuses is dropped (said once) and the report sent
//! without it. accordd not knowing the node (a new store) forgets the
//! last command too: the new store's generations start again from 1.
//! Reports and heartbeats carry the agent session accordd answered the
//! last accepted report with (the client keeps it); a heartbeat refused
//! for it (403: a shared token, and no session or an old one) is
//! answered by reporting again.
//!
//! With accordd's replicas (`daemon.urls`) the agent reports to each one,
//! independently: every URL has its own loop (a task) with all of the
//! above its own (backoff, outage, what that accordd acknowledged, its
//! session, its commands' generations), so that a replica down or slow
//! holds up no other. The machine is one: discovery runs once for all
//! (and tells every loop the new model), and a command from any replica
//! is carried out with the machine to itself, its model after it the
//! current one for every loop.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use accord::hardware::NodeHardware;
use accord_api::agent::{AgentCommand, AgentReply, CommandOutcome};
use accord_api::ClientError;
use tokio::sync::watch;
use tracing::{info, warn, Instrument};

use crate::command::{Commands, MigBackend};
use crate::config::AgentConfig;
use crate::mig::replay::ReplayedGpus;
pub use accord::backoff::Backoff;

/// accordd, as this node's agent talks to it (accord-api's typed client).
struct Client {
    api: accord_api::Client,
    node: String,
}

impl Client {
    async fn report(
        &self,
        hw: &NodeHardware,
        outcome: Option<&CommandOutcome>,
    ) -> Result<AgentReply, ClientError> {
        self.api
            .report_outcome(&self.node, hw, env!("CARGO_PKG_VERSION"), outcome)
            .await
    }

    async fn heartbeat(
        &self,
        uptime_s: u64,
        gpu_health: &str,
        assigned: Option<Vec<accord_api::agent::PodDevices>>,
    ) -> Result<AgentReply, ClientError> {
        let beat = accord_api::agent::Heartbeat {
            agent_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            uptime_s: Some(uptime_s),
            gpu_health: Some(gpu_health.to_owned()),
            assigned,
        };
        self.api.heartbeat(&self.node, &beat).await
    }
}

/// Where MIG commands go: the twin `gpus` (the lab's), else the twin of
/// the recorded snapshot, else nowhere for another recording, else the
/// host's NVML.
fn mig_backend(config: &AgentConfig, gpus: Option<ReplayedGpus>) -> anyhow::Result<MigBackend> {
    let d = &config.discovery;
    let Some(hwloc_xml) = d.hwloc_xml.clone() else {
        if gpus.is_some() {
            anyhow::bail!("replayed GPUs need a recorded topology (discovery.hwloc_xml)");
        }
        return Ok(MigBackend::Live);
    };
    if let Some(gpus) = gpus {
        let origin = d
            .nvml_snapshot
            .clone()
            .unwrap_or_else(|| PathBuf::from("replayed"));
        return Ok(MigBackend::Replayed {
            gpus,
            hwloc_xml,
            origin,
        });
    }
    if let Some(path) = &d.nvml_snapshot {
        return Ok(match crate::nvml::load_snapshot(path) {
            Ok(snapshot) => MigBackend::Replayed {
                gpus: ReplayedGpus::new(snapshot),
                hwloc_xml,
                origin: path.clone(),
            },
            // Discovery says why, each time it reads the file.
            Err(e) => MigBackend::Unavailable(format!(
                "NVML not available: the recorded NVML snapshot cannot be read: {e}"
            )),
        });
    }
    Ok(MigBackend::Unavailable(if d.nvidia_smi_xml.is_some() {
        "NVML not available: the NVML view is a recorded nvidia-smi dump".to_owned()
    } else {
        "NVML not available: the machine is a recording without an NVML view".to_owned()
    }))
}

async fn discover(config: &AgentConfig, backend: &MigBackend) -> Option<NodeHardware> {
    let config = config.clone();
    let backend = backend.clone();
    let result = tokio::task::spawn_blocking(move || backend.discover(config.sources())).await;
    match result {
        Ok(Ok(hw)) => Some(hw),
        Ok(Err(e)) => {
            warn!(error = %e, "discovery failed; keeping the last model");
            None
        }
        Err(e) => {
            warn!(error = %e, "discovery task failed");
            None
        }
    }
}

/// accordd refused a report for what it carries (a 4xx other than those
/// that say nothing about the body: unknown node, token, try later).
fn refuses_content(e: &ClientError) -> bool {
    use reqwest::StatusCode;
    e.status().is_some_and(|s| {
        s.is_client_error()
            && !matches!(
                s,
                StatusCode::NOT_FOUND
                    | StatusCode::UNAUTHORIZED
                    | StatusCode::FORBIDDEN
                    | StatusCode::REQUEST_TIMEOUT
                    | StatusCode::TOO_MANY_REQUESTS
            )
    })
}

/// One line on the GPUs, for heartbeats: how many, and whether hwloc and
/// NVML disagree about any of them.
pub fn gpu_health(hw: Option<&NodeHardware>) -> String {
    match hw {
        None => "unknown: discovery failed".to_owned(),
        Some(hw) => match hw.discovery.disagreements.len() {
            0 => format!("ok: {} GPUs", hw.gpus.len()),
            n => format!("{} GPUs; {n} hwloc/NVML disagreements", hw.gpus.len()),
        },
    }
}

/// `node.name`, else the hostname lowercased (as the kubelet names its
/// Node); either way a Kubernetes node name, or an error saying why not.
fn node_name(
    config: &AgentConfig,
    hw: Option<&NodeHardware>,
) -> Result<String, accord_api::NodeNameError> {
    let name = match &config.node.name {
        Some(n) => n.clone(),
        None => hw
            .and_then(|h| h.machine.hostname.clone())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|s| s.trim().to_owned())
            })
            .unwrap_or_else(|| "localhost".to_owned())
            .trim()
            .to_ascii_lowercase(),
    };
    accord_api::validate_node_name(&name)?;
    Ok(name)
}

/// Runs until `shutdown` resolves. Errors only for a token it cannot read,
/// a node name that is not a Kubernetes node name and a configuration
/// without a valid set of accordd URLs.
pub async fn run(
    config: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    run_with(config, None, shutdown).await
}

/// What every accordd's loop shares: the machine (its MIG backend, one
/// command or discovery at a time) and the model last discovered.
struct Machine {
    config: AgentConfig,
    backend: MigBackend,
    /// Held while a command is carried out or the machine discovered: a
    /// model published is never older than a command carried out before.
    busy: tokio::sync::Mutex<()>,
    /// The current model (`None` until a discovery works); every loop
    /// reports it to its accordd when it differs from what that accordd
    /// acknowledged.
    model: watch::Sender<Option<NodeHardware>>,
    started: std::time::Instant,
    /// The last thing said about the kubelet's pod-resources socket: each
    /// change is logged once, not every heartbeat.
    pod_resources_said: std::sync::Mutex<String>,
}

impl Machine {
    /// The device-plugin devices the kubelet has assigned, for a
    /// heartbeat: `None` when the socket is turned off, absent (no kubelet
    /// here) or does not answer well (said once per change).
    async fn assigned(&self) -> Option<Vec<accord_api::agent::PodDevices>> {
        let socket = &self.config.kubelet.pod_resources_socket;
        if socket.as_os_str().is_empty() {
            return None;
        }
        let (found, said) = match crate::pod_resources::list(socket).await {
            Ok(pods) => (
                Some(pods),
                format!(
                    "reading the kubelet's device assignments from {}",
                    socket.display()
                ),
            ),
            Err(crate::pod_resources::PodResourcesError::Connect { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                (None, format!("no kubelet pod-resources socket at {}; device-plugin GPUs are not reported", socket.display()))
            }
            Err(e) => (None, format!("cannot read the kubelet's device assignments: {}", accord::config_file::error_chain(&e))),
        };
        let mut last = self
            .pod_resources_said
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *last != said {
            if found.is_some() || said.starts_with("no kubelet") {
                info!("{said}");
            } else {
                warn!(
                    "{said}; accordd takes each pod's device-plugin GPUs to be the first free ones"
                );
            }
            *last = said;
        }
        found
    }

    /// Discovers the machine again; a model found becomes the current one.
    async fn rediscover(&self) {
        let _busy = self.busy.lock().await;
        if let Some(hw) = discover(&self.config, &self.backend).await {
            self.model.send_replace(Some(hw));
        }
    }

    /// Hands `cmd` to `commands` (one accordd's bookkeeping) with the
    /// machine to itself; the model after a command carried out becomes
    /// the current one, for every accordd. `false`: stopped first.
    async fn command(
        &self,
        commands: &mut Commands,
        cmd: AgentCommand,
        in_heartbeat: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let _busy = tokio::select! {
            busy = self.busy.lock() => busy,
            () = stopping(stop) => return false,
        };
        // The GPUs running pods hold, as the kubelet says now: never
        // repartitioned, whatever accordd planned with.
        let held = match &cmd.action {
            accord_api::agent::CommandAction::ApplyMig { .. } => {
                let pods = self.assigned().await.unwrap_or_default();
                let model = self.model.borrow().clone();
                model.map_or_else(Default::default, |hw| crate::command::held_gpus(&hw, &pods))
            }
            accord_api::agent::CommandAction::Rediscover => Default::default(),
        };
        if let Some(hw) = commands
            .receive(cmd, in_heartbeat, &self.backend, &self.config, &held)
            .await
        {
            self.model.send_replace(Some(hw));
        }
        true
    }
}

/// Resolves once the agent stops (told to, or its `run_with` gone).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// [`run`], replaying its recorded topology with the GPUs `gpus` (the
/// lab's handle on the machine, which its kubelet stand-in watches)
/// instead of a twin of the recorded snapshot: MIG commands change `gpus`,
/// discovery reads them. `None`: as [`run`]. Errors also for `gpus`
/// without `discovery.hwloc_xml`.
///
/// Each accordd URL has its own loop (a task): its reports, heartbeats,
/// backoff, outage, session and commands' bookkeeping, so that one
/// accordd down or slow holds up no other. Discovery (the interval,
/// SIGHUP) runs once for all of them, and so does each command: the
/// machine is one.
pub async fn run_with(
    config: AgentConfig,
    gpus: Option<ReplayedGpus>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(problem) = config.daemon_url_problems().into_iter().next() {
        anyhow::bail!("{problem}");
    }
    let backend = mig_backend(&config, gpus)?;
    let token = accord_api::files::read_to_string(
        &config.daemon.token_file,
        accord_api::files::limit::SECRET,
    )
    .with_context(|| format!("daemon.token_file: {}", config.daemon.token_file.display()))?
    .trim()
    .to_owned();
    let started = std::time::Instant::now();
    let current = discover(&config, &backend).await;
    let ca_pem = match &config.daemon.ca_file {
        Some(ca) => Some((
            ca.display().to_string(),
            accord_api::files::read(ca, accord_api::files::limit::CONFIG)
                .with_context(|| format!("daemon.ca_file: {}", ca.display()))?,
        )),
        None => None,
    };
    let node = node_name(&config, current.as_ref())
        .context("this host's node name (set node.name in the agent's configuration)")?;
    // One client per accordd: each keeps its own agent session.
    let mut clients = Vec::new();
    for url in config.daemon_urls() {
        let api = accord_api::Client::new(
            url,
            &token,
            accord_api::client::ClientOptions {
                ca_pem: ca_pem.clone(),
                timeout: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .with_context(|| format!("accordd at {url}"))?;
        clients.push((
            url.to_owned(),
            Client {
                api,
                node: node.clone(),
            },
        ));
    }
    let seed = std::process::id() as u64 ^ (started.elapsed().as_nanos() as u64).rotate_left(17);
    let mut rediscover = tokio::time::interval(Duration::from_secs(config.discovery.interval_s));
    rediscover.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    rediscover.tick().await; // the first tick is now; discovery just ran
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // systemd (Type=notify): the configuration is valid, discovery has run
    // and SIGHUP is handled; reaching accordd is the loops' business.
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        warn!(error = %e, "cannot tell systemd the agent is ready");
    }
    let machine = Arc::new(Machine {
        config,
        backend,
        busy: tokio::sync::Mutex::new(()),
        model: watch::channel(current).0,
        started,
        pod_resources_said: std::sync::Mutex::new(String::new()),
    });
    let daemons = clients.len();
    // Told to stop, or dropped with this future (the loops too: a JoinSet
    // dropped aborts its tasks).
    let (stop, stop_rx) = watch::channel(false);
    let mut loops = tokio::task::JoinSet::new();
    for (i, (url, client)) in clients.into_iter().enumerate() {
        // Each its own jitter.
        let seed = seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let span = tracing::info_span!("report", daemon = %url);
        loops.spawn(report_loop(machine.clone(), client, seed, stop_rx.clone()).instrument(span));
    }
    drop(stop_rx);
    info!(node = %node, daemons, "agent running");
    tokio::pin!(shutdown);
    let told = loop {
        tokio::select! {
            () = &mut shutdown => break Ok(()),
            // A loop ends only when told to stop: this one panicked.
            Some(ended) = loops.join_next() => break Err(ended),
            _ = rediscover.tick() => {
                tokio::select! {
                    () = machine.rediscover() => {}
                    () = &mut shutdown => break Ok(()),
                }
            }
            _ = hangup.recv() => {
                info!("SIGHUP: discovering again");
                tokio::select! {
                    () = machine.rediscover() => {}
                    () = &mut shutdown => break Ok(()),
                }
            }
        }
    };
    let _ = stop.send(true);
    let mut ended = told.err().into_iter().collect::<Vec<_>>();
    while let Some(e) = loops.join_next().await {
        ended.push(e);
    }
    for e in ended {
        if let Err(e) = e {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
            anyhow::bail!("an accordd's loop failed: {e}");
        }
    }
    Ok(())
}

/// One accordd: reports the current model when it differs from what this
/// accordd acknowledged (or a command's outcome has not reached it),
/// heartbeats, rides out its outages with its own backoff and carries out
/// its commands (once per generation of its store). Returns once `stop`
/// says so; every line it logs is in the span naming its `daemon`.
async fn report_loop(
    machine: Arc<Machine>,
    client: Client,
    seed: u64,
    mut stop: watch::Receiver<bool>,
) {
    let config = &machine.config;
    let mut model = machine.model.subscribe();
    let mut backoff = Backoff::new(config.backoff.initial_ms, config.backoff.max_ms, seed);
    let mut reported: Option<NodeHardware> = None;
    let mut commands = Commands::default();
    let mut heartbeat = tokio::time::interval(Duration::from_millis(config.heartbeat.interval_ms));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outage = false;
    info!(node = %client.node, "reporting to accordd");
    loop {
        // Report when the model differs from what the daemon acknowledged,
        // or a command's outcome has not reached it.
        let outcome = commands.to_send().cloned();
        let current = model.borrow_and_update().clone();
        if let Some(hw) = current.filter(|hw| reported.as_ref() != Some(hw) || outcome.is_some()) {
            let sent = tokio::select! {
                sent = client.report(&hw, outcome.as_ref()) => sent,
                () = stopping(&mut stop) => return,
            };
            match sent {
                Ok(reply) => {
                    match &outcome {
                        Some(o) => {
                            info!(node = %client.node, generation = reply.generation, command = o.generation, result = %o.result.describe(), "hardware reported with the command's outcome");
                            commands.sent(o);
                        }
                        None => {
                            info!(node = %client.node, generation = reply.generation, "hardware reported")
                        }
                    }
                    reported = Some(hw);
                    backoff.reset();
                    outage = false;
                    if let Some(cmd) = reply.command {
                        if !machine.command(&mut commands, cmd, false, &mut stop).await {
                            return;
                        }
                    }
                }
                // Sent again, it would be refused again: every report after
                // it held up, and no heartbeat meanwhile. Dropped (accordd's
                // command times out there), the hardware goes now.
                Err(e) if outcome.is_some() && refuses_content(&e) => {
                    if let Some(o) = &outcome {
                        warn!(error = %accord::config_file::error_chain(&e), command = o.generation, result = %o.result.describe(), "accordd refused the report carrying the command's outcome: reporting without it");
                        commands.refused(o);
                    }
                    continue;
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    if !outage || e.status().is_some() {
                        warn!(error = %accord::config_file::error_chain(&e), retry_in_ms = wait.as_millis() as u64, "report failed");
                    }
                    outage = true;
                    tokio::select! {
                        () = tokio::time::sleep(wait) => continue,
                        () = stopping(&mut stop) => return,
                    }
                }
            }
        }
        tokio::select! {
            () = stopping(&mut stop) => return,
            // A new model (discovery, or a command carried out for any
            // accordd): reported above when this accordd lacks it.
            Ok(()) = model.changed() => {}
            _ = heartbeat.tick() => {
                let health = gpu_health(model.borrow().as_ref());
                let assigned = tokio::select! {
                    a = machine.assigned() => a,
                    () = stopping(&mut stop) => return,
                };
                let beat = tokio::select! {
                    beat = client.heartbeat(machine.started.elapsed().as_secs(), &health, assigned) => beat,
                    () = stopping(&mut stop) => return,
                };
                match beat {
                    Ok(reply) => {
                        if outage {
                            info!("accordd reachable again");
                        }
                        outage = false;
                        backoff.reset();
                        if let Some(cmd) = reply.command {
                            if !machine.command(&mut commands, cmd, true, &mut stop).await {
                                return;
                            }
                        }
                    }
                    // The daemon does not know this node (a new store):
                    // report again, and forget the last command (the new
                    // store numbers its commands from 1 again).
                    Err(e) if e.status() == Some(reqwest::StatusCode::NOT_FOUND) => {
                        reported = None;
                        commands.forget();
                    }
                    // A shared agent token: accordd does not take this
                    // heartbeat as the node's agent's (no session yet, or
                    // another report since): report again, which proves
                    // the machine and gives a session.
                    Err(e) if e.status() == Some(reqwest::StatusCode::FORBIDDEN) => {
                        if reported.is_some() {
                            warn!(error = %accord::config_file::error_chain(&e), "heartbeat refused; reporting the hardware again");
                        }
                        reported = None;
                    }
                    Err(e) => {
                        if !outage {
                            warn!(error = %accord::config_file::error_chain(&e), "heartbeat failed; will keep trying");
                        }
                        outage = true;
                    }
                }
            }
        }
    }
}
