//! The local lab: one machine playing a datacenter, with `accordd` running
//! against it unmodified (a child process, its own config file, the same
//! format as production, HTTP to everything). The `accord-lab` binary
//! ([`cli`]) is what `accordd lab` runs.
//!
//! - BMCs: `sushy-emulator --fake`, one system per fleet node, reached
//!   through [`proxy::BmcProxy`] (which logs what accordd sends and plays
//!   broken machines);
//! - Kubernetes: the in-repo fake API server (real list/watch over HTTP);
//! - machines: when a node's BMC shows On, after `boot_delay_ms` its agent
//!   starts (accord-agent's own `run`, replaying the machine's recording:
//!   [`recordings`]) and after `kubelet_delay_ms` its Kubernetes Node
//!   registers Ready, with the NVIDIA device plugin's resources, GPU
//!   Feature Discovery's labels and (where the emulated Kubernetes serves
//!   DRA) the NVIDIA DRA driver's ResourceSlice, all from that recording
//!   ([`kubelet`]), not from the fleet file; when the BMC shows Off all
//!   go away;
//! - a scheduler: [`binder`], written independently of the planner, binds
//!   pending pods to Ready nodes that fit, or marks them Unschedulable;
//! - a scenario ([`scenario`]): workloads submitted over time, finished
//!   after a run time.
//!
//! At the end a summary: per workload submitted / bound / time to bound,
//! per node power cycles, totals (powered on, powered on but never used,
//! GPU-hours powered vs used, Resets sent).

/// A `lab:` line, when the lab narrates (`accord-lab` without --json).
macro_rules! say {
    ($lab:expr, $($arg:tt)*) => {
        if $lab.narrate {
            tracing::info!(target: "lab", $($arg)*);
        }
    };
}

pub mod binder;
pub mod cli;
pub mod fixtures;
pub mod kubelet;
pub mod proxy;
pub mod recordings;
pub mod scenario;
mod summary;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::fleet::Fleet;
use accord_testkit::fake_api::{FakeApi, KubeVersion};
use anyhow::Context;
use serde_json::Value;
use tokio::time::Instant;
use tracing::info;

use accord_api::control::{ControlStatus, Mode, ModelSource, WorkloadState};
pub use recordings::Recording;
pub use scenario::Scenario;
pub use summary::{NodeSummary, Summary, WorkloadSummary};

const ADMIN_TOKEN: &str = "lab-admin-token";
const AGENT_TOKEN: &str = "lab-agent-token";

#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The accordd binary to run.
    pub accordd: PathBuf,
    /// Arguments before accordd's own (`run --config FILE`,
    /// `check-config FILE`): a bench binary that plays accordd.
    pub accordd_prefix: Vec<String>,
    /// accordd's output (stdout and stderr): a file, or `None` for this
    /// process's stderr. Never this process's stdout, which is the
    /// summary's (`--json`).
    pub daemon_log: Option<PathBuf>,
    /// Say what happens (`lab:` log lines, explanations).
    pub narrate: bool,
}

impl LabOptions {
    /// Runs `accordd`, its output on this process's stderr, no narration.
    pub fn new(accordd: impl Into<PathBuf>) -> LabOptions {
        LabOptions {
            accordd: accordd.into(),
            accordd_prefix: Vec::new(),
            daemon_log: None,
            narrate: false,
        }
    }
}

/// What the lab keeps of one submission.
#[derive(Debug, Clone, Default)]
struct SubState {
    released: bool,
    submitted: Option<Instant>,
    pods: Vec<(String, String)>,
    others: Vec<Value>,
    bound: Option<Instant>,
    finished: Option<Instant>,
    nodes: BTreeSet<String>,
    /// Accord's last word when it cannot place it.
    cannot_place: Option<String>,
}

#[derive(Debug, Default)]
struct NodeSim {
    on: bool,
    powered_at: Option<Instant>,
    on_total: Duration,
    power_cycles: u32,
    used: bool,
    agent: Option<tokio::sync::oneshot::Sender<()>>,
    agent_started: bool,
    registered: bool,
    /// What accordd last said it plans the node with.
    model: Option<ModelSource>,
    /// accordd's last non-empty drift for the node (`Drift`'s words).
    drift: Vec<String>,
}

/// The recording one machine replays, and what its agent sees in it.
#[derive(Debug, Clone)]
pub struct MachineRecording {
    pub recording: Recording,
    /// Where it was named (`lab.machines.r1-n1.recording`,
    /// `lab.recordings.hgx-h100`, the default).
    pub from: String,
    /// GPUs NVML shows in it.
    pub gpus: usize,
    /// `7 x NVIDIA H100 80GB HBM3, MIG off`.
    pub describe: String,
}

/// Each fleet node's recording (built-ins written under `dir`), each
/// discovered once with the agent's library: a recording that does not
/// discover is an error naming the node, the key and the file.
pub fn resolve_recordings(
    scenario: &Scenario,
    fleet: &Fleet,
    dir: &Path,
) -> anyhow::Result<BTreeMap<String, MachineRecording>> {
    let mut seen: BTreeMap<Recording, (usize, String)> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for n in &fleet.nodes {
        let (spec, from) = scenario.recording_of(&n.name);
        let recording = Recording::resolve(&spec, &scenario.base, dir)
            .with_context(|| format!("machine {} ({from})", n.name))?;
        let (gpus, describe) = match seen.get(&recording) {
            Some(v) => v.clone(),
            None => {
                let m = recording
                    .discover()
                    .with_context(|| format!("machine {} ({from})", n.name))?;
                let v = (m.gpus().len(), m.describe());
                seen.insert(recording.clone(), v.clone());
                v
            }
        };
        out.insert(
            n.name.clone(),
            MachineRecording {
                recording,
                from,
                gpus,
                describe,
            },
        );
    }
    Ok(out)
}

/// What every machine of `scenario` publishes when it is up (its Node and,
/// where the Kubernetes version serves DRA, its ResourceSlice), built
/// from its recording by the lab's stand-ins: `accord-lab --print-nodes`.
pub fn published_objects(scenario: &Scenario) -> anyhow::Result<Vec<Value>> {
    let fleet = scenario.resolve_fleet().context("the scenario's fleet")?;
    let version = scenario.kube_version().map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let mut out = Vec::new();
    for (name, m) in resolve_recordings(scenario, &fleet, dir.path())? {
        let machine = m.recording.discover()?;
        out.push(kubelet::node_object(&name, &machine));
        if let Some(api) = version.dra_api_version() {
            out.extend(kubelet::resource_slice(&name, &machine, api));
        }
    }
    Ok(out)
}

#[derive(Debug, Default)]
struct Record {
    subs: Vec<SubState>,
    nodes: BTreeMap<String, NodeSim>,
    /// Pod → (bound at, GPUs, node).
    bound: BTreeMap<(String, String), (Instant, f64, String)>,
    used_gpu_s: f64,
    explained: BTreeSet<String>,
}

pub struct Lab {
    pub scenario: Scenario,
    pub fleet: Fleet,
    /// The Kubernetes version the fake API server emulates.
    pub kube_version: KubeVersion,
    /// What each machine replays.
    pub recordings: Arc<BTreeMap<String, MachineRecording>>,
    pub api: Arc<FakeApi>,
    /// Submissions skipped because the emulated version does not serve
    /// what they are made of, with why.
    pub skipped: Vec<String>,
    pub emulator: accord_testkit::sushy::Peer,
    pub proxy: proxy::BmcProxy,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub daemon_url: String,
    options: LabOptions,
    daemon: Mutex<Option<Child>>,
    record: Arc<Mutex<Record>>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// accordd's API, as the admin.
    admin: accord_api::Client,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("dir", &self.dir.path())
            .field("daemon_url", &self.daemon_url)
            .finish_non_exhaustive()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.kill_daemon();
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// What the background tasks share.
#[derive(Clone)]
struct Ctx {
    api: Arc<FakeApi>,
    record: Arc<Mutex<Record>>,
    fleet: Arc<Fleet>,
    scenario: Arc<Scenario>,
    emulator_url: String,
    daemon_url: String,
    /// accordd's API, as the admin.
    admin: accord_api::Client,
    dir: PathBuf,
    /// The lab's own reads of the emulator.
    http: reqwest::Client,
    narrate: bool,
    started: Instant,
    kube: KubeVersion,
    recordings: Arc<BTreeMap<String, MachineRecording>>,
}

impl Lab {
    /// Starts the emulated BMCs, the fake API, the BMC proxy and the lab's
    /// machines, binder and submitter; accordd is started separately
    /// ([`Lab::start_daemon`]) so a test can kill and restart it.
    pub async fn start(scenario: Scenario, options: LabOptions) -> anyhow::Result<Lab> {
        let fleet = scenario.resolve_fleet().context("the scenario's fleet")?;
        let kube = scenario
            .kube_version()
            .map_err(|e| anyhow::anyhow!("lab.kube_version: {e}"))?;
        // A submission made of objects this version does not serve would be
        // refused by its API server (`kubectl apply` fails): it is skipped,
        // said now and in the summary, and the rest runs.
        let mut scenario = scenario;
        let skipped = scenario.skip_unserved(kube);
        for why in &skipped {
            tracing::warn!(target: "lab", kube_version = %kube, "skipped: {why}");
        }
        let dir = tempfile::Builder::new()
            .prefix("accord-lab")
            .tempdir()
            .context("cannot make the lab directory")?;
        let recordings = Arc::new(resolve_recordings(
            &scenario,
            &fleet,
            &dir.path().join("recordings"),
        )?);
        let systems: Vec<accord_testkit::sushy::FakeSystem> = fleet
            .nodes
            .iter()
            .map(|n| accord_testkit::sushy::FakeSystem {
                id: n.name.clone(),
                power_on: n.power == accord::fleet::PowerState::On,
            })
            .collect();
        let emulator = accord_testkit::sushy::start_emulator(&systems, &Default::default())
            .map_err(|e| anyhow::anyhow!("sushy-emulator: {e}"))?;
        let proxy = proxy::BmcProxy::start(
            &emulator.url(),
            scenario.lab.broken.iter().cloned().collect(),
        )
        .await?;
        let api = Arc::new(FakeApi::start_version(kube).await);
        let port = accord_testkit::sushy::free_port();
        let daemon_url = format!("http://127.0.0.1:{port}");
        let d = dir.path();
        private(&d.join("admin-token"), ADMIN_TOKEN)?;
        private(&d.join("agent-token"), AGENT_TOKEN)?;
        std::fs::write(d.join("fleet.toml"), scenario.fleet_toml())?;
        let names: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
        let inventory = format!(
            "# The lab's BMCs: sushy-emulator systems behind the lab's proxy.\n\
             [power]\npoll_interval_ms = 500\non_timeout_s = {}\nresend_after_s = 20\n\
             graceful_timeout_s = 20\n\n[[bmc]]\nnodes = {}\nendpoint = \"{}\"\nsystem = \"{{node}}\"\n",
            scenario.lab.power_on_timeout_s,
            toml::Value::from(names.clone()),
            proxy.url
        );
        std::fs::write(d.join("bmcs.toml"), inventory)?;
        let mut control = scenario.control.clone();
        control.insert(
            "mode".into(),
            toml::Value::from(match scenario.lab.mode {
                Mode::Act => "act",
                Mode::Observe => "observe",
            }),
        );
        let mut config = toml::Table::new();
        let table = |pairs: Vec<(&str, toml::Value)>| {
            toml::Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        };
        let path = |p: PathBuf| toml::Value::from(p.display().to_string());
        config.insert(
            "server".into(),
            table(vec![(
                "listen",
                toml::Value::from(format!("127.0.0.1:{port}")),
            )]),
        );
        // Lab::store_dir.
        config.insert("store".into(), table(vec![("dir", path(d.join("store")))]));
        config.insert(
            "agents".into(),
            table(vec![
                ("token_file", path(d.join("agent-token"))),
                ("stale_after_s", toml::Value::from(30)),
            ]),
        );
        config.insert(
            "admin".into(),
            table(vec![("token_file", path(d.join("admin-token")))]),
        );
        config.insert(
            "fleet".into(),
            table(vec![("file", path(d.join("fleet.toml")))]),
        );
        config.insert(
            "redfish".into(),
            table(vec![("inventory", path(d.join("bmcs.toml")))]),
        );
        config.insert(
            "kubernetes".into(),
            table(vec![("url", toml::Value::from(api.url.clone()))]),
        );
        config.insert("control".into(), toml::Value::Table(control));
        let config_path = d.join("accordd.toml");
        std::fs::write(
            &config_path,
            format!(
                "# Written by the lab (`accordd lab`): accordd's configuration for this lab.\n{}",
                toml::to_string(&config)?
            ),
        )?;
        // Fail here, with accordd's own words, rather than in the child.
        check_config(&options, &config_path)?;

        let mut record = Record::default();
        for n in &fleet.nodes {
            record.nodes.insert(
                n.name.clone(),
                NodeSim {
                    on: n.power == accord::fleet::PowerState::On,
                    powered_at: (n.power == accord::fleet::PowerState::On).then(Instant::now),
                    ..Default::default()
                },
            );
        }
        record.subs = vec![SubState::default(); scenario.submit.len()];
        let record = Arc::new(Mutex::new(record));
        let started = Instant::now();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let admin = accord_api::Client::new(
            &daemon_url,
            ADMIN_TOKEN,
            accord_api::client::ClientOptions {
                timeout: Duration::from_secs(10),
                ..Default::default()
            },
        )?;
        let scenario = Arc::new(scenario);
        let fleet = Arc::new(fleet);
        let ctx = Ctx {
            api: api.clone(),
            record: record.clone(),
            fleet: fleet.clone(),
            scenario: scenario.clone(),
            emulator_url: emulator.url(),
            daemon_url: daemon_url.clone(),
            admin: admin.clone(),
            dir: d.to_owned(),
            http,
            narrate: options.narrate,
            started,
            kube,
            recordings: recordings.clone(),
        };
        let tasks = vec![
            tokio::spawn(world::machines(ctx.clone())),
            tokio::spawn(world::scheduler(ctx.clone())),
            tokio::spawn(world::submitter(ctx.clone())),
            tokio::spawn(world::watch_status(ctx)),
        ];
        say!(options, dir = %d.display(), nodes = fleet.nodes.len(), bmcs = %emulator.url(), kube = %api.url, "lab up: {} emulated BMCs, fake Kubernetes API (Kubernetes {kube}{}), accordd config {}", fleet.nodes.len(), kube.dra_api_version().map_or(", no DRA".to_owned(), |v| format!(", DRA {v}")), config_path.display());
        for (name, m) in recordings.iter() {
            say!(options, node = %name, "replays {} ({}; {})", m.recording.name, m.describe, m.from);
        }
        Ok(Lab {
            scenario: (*scenario).clone(),
            fleet: (*fleet).clone(),
            kube_version: kube,
            skipped,
            recordings,
            api,
            emulator,
            proxy,
            dir,
            config: config_path,
            daemon_url,
            options,
            daemon: Mutex::new(None),
            record,
            started,
            tasks,
            admin,
        })
    }

    /// Submits the submission named `name` now (one without `at_ms`).
    pub fn release(&self, name: &str) -> anyhow::Result<()> {
        let i = self
            .scenario
            .submit
            .iter()
            .position(|s| s.name == name)
            .with_context(|| format!("no submission named {name}"))?;
        self.record.lock().expect("lock").subs[i].released = true;
        Ok(())
    }

    /// When a submission was submitted and when all its pods were bound.
    pub fn submission_times(&self, name: &str) -> (Option<Instant>, Option<Instant>) {
        let Some(i) = self.scenario.submit.iter().position(|s| s.name == name) else {
            return (None, None);
        };
        let r = self.record.lock().expect("lock");
        (r.subs[i].submitted, r.subs[i].bound)
    }

    /// Starts `accordd run --config` on the lab's configuration; its
    /// output goes to [`LabOptions::daemon_log`] or this process's stderr.
    pub fn start_daemon(&self) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.options.accordd);
        cmd.args(&self.options.accordd_prefix)
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null());
        if std::env::var_os("ACCORD_LOG").is_none() {
            cmd.env("ACCORD_LOG", "info,accordd::api=warn");
        }
        let (out, err) = daemon_output(self.options.daemon_log.as_deref())?;
        cmd.stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .with_context(|| format!("{}: cannot start", self.options.accordd.display()))?;
        info!(target: "lab", pid = child.id(), "accordd started");
        *self.daemon.lock().expect("lock") = Some(child);
        Ok(())
    }

    /// `kill -9` accordd (no shutdown of any kind), and reaps it.
    pub fn kill_daemon(&self) {
        if let Some(mut c) = self.daemon.lock().expect("lock").take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops accordd as systemd does: SIGTERM, then waits up to `within`
    /// for it to exit, and returns its exit status. If it is still running
    /// then, it is killed (SIGKILL) and this is an error naming what it
    /// waited for, with accordd's log. An error too if accordd was not
    /// started (or was killed or stopped already).
    pub async fn stop_daemon(&self, within: Duration) -> anyhow::Result<std::process::ExitStatus> {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let Some(mut child) = self.daemon.lock().expect("lock").take() else {
            anyhow::bail!(
                "stopping accordd: it is not running (not started, or killed or stopped already)"
            );
        };
        let pid = Pid::from_raw(i32::try_from(child.id()).context("accordd's pid")?);
        // A child that exited and is not reaped yet is still signalled
        // without error: only a failure to signal at all is one here.
        if let Err(e) = kill(pid, Signal::SIGTERM) {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("stopping accordd: SIGTERM to {pid}: {e}");
        }
        let end = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().context("waiting for accordd")? {
                info!(target: "lab", %status, "accordd stopped");
                return Ok(status);
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let status = child.wait().context("waiting for accordd")?;
                anyhow::bail!(
                    "accordd did not exit within {within:?} of SIGTERM; killed it ({status}){}",
                    self.log_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether accordd has exited, with its status.
    pub fn daemon_exited(&self) -> Option<std::process::ExitStatus> {
        self.daemon
            .lock()
            .expect("lock")
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// accordd's store directory (`[store] dir` in the lab's accordd.toml).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Where accordd's output goes ([`LabOptions::daemon_log`]); `None`:
    /// this process's stderr.
    pub fn daemon_log(&self) -> Option<&Path> {
        self.options.daemon_log.as_deref()
    }

    /// accordd's state for an error message: running, exited (with its
    /// status) or not running, then its log's path and last lines.
    pub fn daemon_report(&self) -> String {
        let state = match self.daemon.lock().expect("lock").as_mut() {
            None => {
                "accordd is not running (not started, or killed or stopped by the lab)".to_owned()
            }
            Some(c) => match c.try_wait() {
                Ok(Some(status)) => format!("accordd exited ({status})"),
                Ok(None) => format!("accordd is running (pid {})", c.id()),
                Err(e) => format!("accordd: cannot tell whether it runs: {e}"),
            },
        };
        format!("{state}{}", self.log_report())
    }

    /// accordd's log: its path and last lines (or that it is on stderr).
    fn log_report(&self) -> String {
        match self.daemon_log() {
            Some(log) => format!("; {}", accord_testkit::process::tail(log)),
            None => "; its output is on this process's stderr".to_owned(),
        }
    }

    /// accordd's last control round (`GET /v1/status`).
    pub async fn status(&self) -> Option<ControlStatus> {
        fetch_status(&self.admin).await
    }

    /// Resets accordd sent for `node`, as the emulator logged them (a
    /// broken node's dropped ones never reach it).
    pub fn emulator_resets(&self, node: &str) -> usize {
        self.emulator
            .count(&format!("POST {}", proxy::reset_path(node)))
    }

    /// Whether every submission is done: finished, or pending while
    /// accordd says it cannot be placed.
    fn scenario_done(&self, status: Option<&ControlStatus>) -> bool {
        let r = self.record.lock().expect("lock");
        r.subs.iter().all(|s| {
            if s.finished.is_some() {
                return true;
            }
            if s.submitted.is_none() || s.bound.is_some() {
                return false;
            }
            let keys = workload_keys(s);
            status.is_some_and(|st| {
                !keys.is_empty()
                    && keys.iter().all(|k| {
                        st.workloads
                            .iter()
                            .any(|w| &w.workload == k && w.state == WorkloadState::CannotPlace)
                    })
            })
        })
    }

    /// Every node off, or on with no pods and nothing coming up.
    fn fleet_settled(&self, dark: bool) -> bool {
        let r = self.record.lock().expect("lock");
        let busy: BTreeSet<&str> = r.bound.values().map(|(_, _, n)| n.as_str()).collect();
        r.nodes
            .iter()
            .all(|(name, n)| !n.on || (!dark && n.registered && !busy.contains(name.as_str())))
    }

    /// What keeps the scenario from settling: submissions not done, nodes
    /// busy or on their way up.
    fn unsettled(&self) -> String {
        let r = self.record.lock().expect("lock");
        let mut out = Vec::new();
        for (sub, s) in self.scenario.submit.iter().zip(&r.subs) {
            if s.finished.is_some() {
                continue;
            }
            let state = match (s.submitted, s.bound) {
                (None, _) => "not submitted".to_owned(),
                (Some(_), None) => format!("{} pods not all bound", s.pods.len()),
                (Some(_), Some(_)) => "running".to_owned(),
            };
            out.push(format!("{}: {state}", sub.name));
        }
        let busy: BTreeSet<&str> = r.bound.values().map(|(_, _, n)| n.as_str()).collect();
        for (name, n) in &r.nodes {
            if n.on && !n.registered {
                out.push(format!("{name}: on, its Node not registered yet"));
            } else if n.on && busy.contains(name.as_str()) {
                out.push(format!("{name}: on, with pods"));
            }
        }
        if out.is_empty() {
            "accordd has power actions in flight, or nodes are on".to_owned()
        } else {
            out.join("; ")
        }
    }

    /// Runs until the scenario is done and every node is idle or off (and
    /// accordd has no power action in flight); with `dark`, until every
    /// node is off. Errors after `lab.max_s`, or if accordd exits.
    pub async fn run_until_idle(&self, dark: bool) -> anyhow::Result<Summary> {
        let deadline = self.started + Duration::from_secs(self.scenario.lab.max_s);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if self.daemon_exited().is_some() {
                anyhow::bail!("the scenario did not settle: {}", self.daemon_report());
            }
            let status = self.status().await;
            let quiet = status.as_ref().is_some_and(|s| s.open_intents.is_empty());
            if quiet && self.scenario_done(status.as_ref()) && self.fleet_settled(dark) {
                let summary = self.summary(status.as_ref());
                return Ok(summary);
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the scenario did not settle within lab.max_s = {} s ({}); {}",
                    self.scenario.lab.max_s,
                    self.unsettled(),
                    self.daemon_report()
                );
            }
        }
    }

    /// Waits until `cond` holds for accordd's status, up to `timeout`;
    /// the error names `what` was waited for, with accordd's last status,
    /// its state and its log ([`Lab::daemon_report`]). Fails at once if
    /// accordd exits.
    pub async fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&ControlStatus) -> bool,
    ) -> anyhow::Result<ControlStatus> {
        let end = Instant::now() + timeout;
        loop {
            let status = self.status().await;
            if let Some(s) = &status {
                if cond(s) {
                    return Ok(status.expect("checked"));
                }
            }
            if self.daemon_exited().is_some() {
                anyhow::bail!("waiting for {what}: {}", self.daemon_report());
            }
            if Instant::now() > end {
                anyhow::bail!(
                    "waited {timeout:?} for {what}; accordd's last status:\n{}\n{}",
                    status
                        .as_ref()
                        .map(accord_api::text::render_status)
                        .unwrap_or_else(|| "(none)".into()),
                    self.daemon_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `cond` holds for the lab itself (its machines, the
    /// fake API, the proxy's log), up to `timeout`; the error names `what`
    /// was waited for, with accordd's state and log. Fails at once if
    /// accordd exits.
    pub async fn wait_lab(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&Lab) -> bool,
    ) -> anyhow::Result<()> {
        let end = Instant::now() + timeout;
        loop {
            if cond(self) {
                return Ok(());
            }
            if self.daemon_exited().is_some() {
                anyhow::bail!("waiting for {what}: {}", self.daemon_report());
            }
            if Instant::now() > end {
                anyhow::bail!("waited {timeout:?} for {what}; {}", self.daemon_report());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The pods bound now: pod (`ns/name`) → node.
    pub fn bound_pods(&self) -> BTreeMap<String, String> {
        self.api
            .list("v1", "Pod")
            .iter()
            .filter_map(|p| {
                let node = p["spec"]["nodeName"].as_str()?;
                Some((
                    format!(
                        "{}/{}",
                        p["metadata"]["namespace"].as_str().unwrap_or(""),
                        p["metadata"]["name"].as_str().unwrap_or("")
                    ),
                    node.to_owned(),
                ))
            })
            .collect()
    }

    /// Nodes the emulator saw powered on at any time since the start.
    pub fn nodes_powered_on(&self) -> BTreeSet<String> {
        self.record
            .lock()
            .expect("lock")
            .nodes
            .iter()
            .filter(|(_, n)| n.power_cycles > 0)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Nodes on now, as the lab's machines see their BMCs.
    pub fn nodes_on(&self) -> BTreeSet<String> {
        self.record
            .lock()
            .expect("lock")
            .nodes
            .iter()
            .filter(|(_, n)| n.on)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The summary now.
    pub fn summary(&self, status: Option<&ControlStatus>) -> Summary {
        let now = Instant::now();
        let r = self.record.lock().expect("lock");
        let secs = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(b.duration_since(a).as_secs_f64()),
            _ => None,
        };
        let log = self.proxy.log();
        let workloads = self
            .scenario
            .submit
            .iter()
            .zip(&r.subs)
            .map(|(sub, s)| {
                let first_reset = s.submitted.and_then(|t0| {
                    log.iter()
                        .filter(|l| {
                            l.power_on
                                && l.at >= t0
                                && s.nodes.iter().any(|n| l.path == proxy::reset_path(n))
                        })
                        .map(|l| l.at.duration_since(t0).as_secs_f64())
                        .reduce(f64::min)
                });
                WorkloadSummary {
                    name: sub.name.clone(),
                    pods: s.pods.len(),
                    submitted_s: s
                        .submitted
                        .map(|t| t.duration_since(self.started).as_secs_f64()),
                    bound: s.bound.is_some(),
                    time_to_bound_s: secs(s.submitted, s.bound),
                    time_to_first_reset_s: first_reset,
                    nodes: s.nodes.iter().cloned().collect(),
                    // The status that ended the run says it (the record
                    // is filled by another task, a poll behind).
                    cannot_place: if s.bound.is_none() {
                        status
                            .and_then(|st| cannot_place_reason(st, &workload_keys(s)))
                            .or_else(|| s.cannot_place.clone())
                    } else {
                        None
                    },
                }
            })
            .collect();
        let mut powered_gpu_s = 0.0;
        // The GPUs the machine has (its recording), not the declared ones.
        let gpus_of = |name: &str| self.recordings.get(name).map_or(0.0, |m| m.gpus as f64);
        let nodes: Vec<NodeSummary> = r
            .nodes
            .iter()
            .map(|(name, n)| {
                let on_s = n.on_total.as_secs_f64()
                    + n.powered_at
                        .map(|t| now.duration_since(t).as_secs_f64())
                        .unwrap_or(0.0);
                powered_gpu_s += on_s * gpus_of(name);
                let st = status.and_then(|s| s.nodes.iter().find(|x| &x.name == name));
                // accordd's drift now, else the last it said while the run
                // went on.
                let drift = match st {
                    Some(x) if !x.drift.is_empty() => {
                        x.drift.iter().map(ToString::to_string).collect()
                    }
                    _ => n.drift.clone(),
                };
                NodeSummary {
                    name: name.clone(),
                    power_cycles: n.power_cycles,
                    on_now: n.on,
                    used: n.used,
                    on_s,
                    stage: st.map(|x| accord_api::control::stage_label(x.stage)),
                    recording: self
                        .recordings
                        .get(name)
                        .map(|m| m.recording.name.clone())
                        .unwrap_or_default(),
                    model: st.map(|x| x.model).or(n.model).map(model_label),
                    drift,
                }
            })
            .collect();
        let used_gpu_s = r.used_gpu_s
            + r.bound
                .values()
                .map(|(t, g, _)| now.duration_since(*t).as_secs_f64() * g)
                .sum::<f64>();
        let resets = self
            .emulator
            .requests()
            .iter()
            .filter(|r| r.starts_with("POST ") && r.contains("/Actions/ComputerSystem.Reset"))
            .count();
        Summary {
            kube_version: self.kube_version.to_string(),
            skipped: self.skipped.clone(),
            elapsed_s: now.duration_since(self.started).as_secs_f64(),
            nodes_powered_on: nodes.iter().filter(|n| n.power_cycles > 0).count(),
            nodes_powered_on_never_used: nodes
                .iter()
                .filter(|n| n.power_cycles > 0 && !n.used)
                .count(),
            gpu_hours_powered: powered_gpu_s / 3600.0,
            gpu_hours_used: used_gpu_s / 3600.0,
            resets_sent: resets,
            bmc_requests: log.len(),
            workloads,
            nodes,
        }
    }
}

/// Where accordd's stdout and stderr go: the log file, else this
/// process's stderr (never its stdout: `--json` prints the summary there).
fn daemon_output(log: Option<&Path>) -> anyhow::Result<(Stdio, Stdio)> {
    use std::os::fd::AsFd;
    Ok(match log {
        Some(log) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .with_context(|| format!("{}: cannot open", log.display()))?;
            (f.try_clone()?.into(), f.into())
        }
        None => {
            let err = std::io::stderr().as_fd().try_clone_to_owned()?;
            (err.try_clone()?.into(), err.into())
        }
    })
}

/// `accordd check-config FILE`: the lab's accordd.toml, checked by the
/// accordd it will run (its own words on a problem).
fn check_config(options: &LabOptions, config: &Path) -> anyhow::Result<()> {
    let out = Command::new(&options.accordd)
        .args(&options.accordd_prefix)
        .arg("check-config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "{}: cannot run (the accordd binary the lab runs; build it with \
                 `cargo build -p accord-daemon`, or name it with --accordd or ACCORDD)",
                options.accordd.display()
            )
        })?;
    if !out.status.success() {
        anyhow::bail!(
            "the lab's accordd.toml ({}): {} check-config: {}{}",
            config.display(),
            options.accordd.display(),
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(())
}

/// The workloads (`ns/name`) a submission's pods make, as accordd keys
/// them: its PodGroups and ProvisioningRequests, else each pod.
fn workload_keys(s: &SubState) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for o in &s.others {
        if o["kind"] == "PodGroup" || o["kind"] == "ProvisioningRequest" {
            keys.insert(format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or("default"),
                o["metadata"]["name"].as_str().unwrap_or("")
            ));
        }
    }
    if keys.is_empty() {
        keys.extend(s.pods.iter().map(|(ns, n)| format!("{ns}/{n}")));
    }
    keys
}

/// Accord's reason the workloads `keys` cannot be placed, from `status`:
/// the first of them it says so of.
fn cannot_place_reason(status: &ControlStatus, keys: &BTreeSet<String>) -> Option<String> {
    status
        .workloads
        .iter()
        .filter(|w| keys.contains(&w.workload) && w.state == WorkloadState::CannotPlace)
        .find_map(|w| w.reason.clone())
}

/// How the summary names where accordd's model of a node comes from.
fn model_label(m: ModelSource) -> String {
    match m {
        ModelSource::Declared => "declared",
        ModelSource::Reported => "reported",
        ModelSource::Held => "held",
    }
    .to_owned()
}

/// accordd's last round; `None` while it is not up (or has no round yet).
async fn fetch_status(admin: &accord_api::Client) -> Option<ControlStatus> {
    admin.status().await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the default scenario's machines publish when up: each its own
    /// recording, whatever the fleet file declares (r1-n1 is declared with
    /// 8 GPUs and has 7); ResourceSlices only where DRA is served.
    #[test]
    fn the_default_scenarios_machines_publish_their_recordings() {
        let mut s = Scenario::default_scenario();
        let objects = published_objects(&s).unwrap();
        let node = |name: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == "Node" && o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no Node {name}"))
        };
        let gpu = |name: &str, r: &str| node(name)["status"]["allocatable"][r].clone();
        assert_eq!(gpu("r1-n1", "nvidia.com/gpu"), "7");
        assert_eq!(gpu("r1-n2", "nvidia.com/gpu"), "8");
        assert_eq!(gpu("r3-n1", "nvidia.com/gpu"), "0");
        assert_eq!(gpu("r3-n1", "nvidia.com/mig-1g.10gb"), "56");
        assert_eq!(gpu("r3-n2", "cpu"), "4");
        assert_eq!(node("r3-n2")["spec"], serde_json::json!({}));
        let slices: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "ResourceSlice")
            .collect();
        assert_eq!(slices.len(), 11);
        assert!(slices
            .iter()
            .all(|s| s["apiVersion"] == "resource.k8s.io/v1"));

        s.lab.kube_version = Some("1.31".into());
        let objects = published_objects(&s).unwrap();
        assert!(objects.iter().all(|o| o["kind"] == "Node"));
        s.lab.kube_version = Some("1.32".into());
        let objects = published_objects(&s).unwrap();
        assert!(objects
            .iter()
            .filter(|o| o["kind"] == "ResourceSlice")
            .all(|s| s["apiVersion"] == "resource.k8s.io/v1beta1"
                && s["spec"]["devices"][0]["basic"].is_object()));
    }
}
