//! The local lab: one machine playing a datacenter, with `accordd` running
//! against it unmodified (a child process, its own config file, the same
//! format as production).
//!
//! - BMCs: `sushy-emulator --fake`, one system per fleet node, reached
//!   through [`proxy::BmcProxy`] (which logs what accordd sends and plays
//!   broken machines);
//! - Kubernetes: the in-repo fake API server (real list/watch over HTTP);
//! - machines: when a node's BMC shows On, after `boot_delay_ms` its agent
//!   starts (accord-agent's own `run`, replaying a recorded DGX-2 board and
//!   H100 NVML snapshot) and after `kubelet_delay_ms` its Kubernetes Node
//!   registers Ready; when the BMC shows Off both go away;
//! - a scheduler: [`binder`], written independently of the planner, binds
//!   pending pods to Ready nodes that fit, or marks them Unschedulable;
//! - a scenario ([`scenario`]): workloads submitted over time, finished
//!   after a run time.
//!
//! At the end a summary: per workload submitted / bound / time to bound,
//! per node power cycles, totals (powered on, powered on but never used,
//! GPU-hours powered vs used, Resets sent).

pub mod binder;
pub mod fixtures;
pub mod proxy;
pub mod scenario;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::fleet::Fleet;
use accord_kube::fake_api::FakeApi;
use anyhow::Context;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;
use tracing::info;

use crate::controller::ControlStatus;
pub use scenario::Scenario;

/// Recorded hardware every lab agent replays: one HGX baseboard of a real
/// DGX-2 (hwloc export) with a recorded 8 x H100 NVML view.
const HWLOC_XML: &str =
    include_str!("../../../tests/fixtures/hwloc/derived/dgx2-board0-no-nvml.xml");
const NVML_SNAPSHOT: &str = include_str!("../../../tests/fixtures/nvml/h100-8gpu-mig.json");

const ADMIN_TOKEN: &str = "lab-admin-token";
const AGENT_TOKEN: &str = "lab-agent-token";

#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The accordd binary to run.
    pub accordd: PathBuf,
    /// accordd's output: a file, or `None` for this process's stderr.
    pub daemon_log: Option<PathBuf>,
    /// Say what happens (`lab:` log lines, explanations).
    pub narrate: bool,
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
    pub api: Arc<FakeApi>,
    pub emulator: accord_redfish::testing::Peer,
    pub proxy: proxy::BmcProxy,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub daemon_url: String,
    options: LabOptions,
    daemon: Mutex<Option<Child>>,
    record: Arc<Mutex<Record>>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    http: reqwest::Client,
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

macro_rules! say {
    ($lab:expr, $($arg:tt)*) => {
        if $lab.narrate {
            info!(target: "lab", $($arg)*);
        }
    };
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
    dir: PathBuf,
    http: reqwest::Client,
    narrate: bool,
    started: Instant,
}

impl Lab {
    /// Starts the emulated BMCs, the fake API, the BMC proxy and the lab's
    /// machines, binder and submitter; accordd is started separately
    /// ([`Lab::start_daemon`]) so a test can kill and restart it.
    pub async fn start(scenario: Scenario, options: LabOptions) -> anyhow::Result<Lab> {
        let fleet = scenario
            .resolve_fleet()
            .map_err(|e| anyhow::anyhow!("scenario fleet: {e}"))?;
        let dir = tempfile::Builder::new()
            .prefix("accord-lab")
            .tempdir()
            .context("cannot make the lab directory")?;
        let systems: Vec<accord_redfish::testing::FakeSystem> = fleet
            .nodes
            .iter()
            .map(|n| accord_redfish::testing::FakeSystem {
                id: n.name.clone(),
                power_on: n.power == accord::fleet::PowerState::On,
            })
            .collect();
        let emulator = accord_redfish::testing::start_emulator(&systems, &Default::default())
            .map_err(|e| anyhow::anyhow!("sushy-emulator: {e}"))?;
        let proxy = proxy::BmcProxy::start(
            &emulator.url(),
            scenario.lab.broken.iter().cloned().collect(),
        )
        .await?;
        let api = Arc::new(FakeApi::start().await);
        let port = accord_redfish::testing::free_port();
        let daemon_url = format!("http://127.0.0.1:{port}");
        let d = dir.path();
        std::fs::write(d.join("topology.xml"), HWLOC_XML)?;
        std::fs::write(d.join("nvml.json"), NVML_SNAPSHOT)?;
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
                crate::control::Mode::Act => "act",
                crate::control::Mode::Observe => "observe",
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
                "# Written by `accordd lab`: accordd's configuration for this lab.\n{}",
                toml::to_string(&config)?
            ),
        )?;
        // Fail here, with accordd's own words, rather than in the child.
        crate::config::DaemonConfig::load(&config_path)
            .with_context(|| format!("the lab's accordd.toml ({})", config_path.display()))?;

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
        let scenario = Arc::new(scenario);
        let fleet = Arc::new(fleet);
        let ctx = Ctx {
            api: api.clone(),
            record: record.clone(),
            fleet: fleet.clone(),
            scenario: scenario.clone(),
            emulator_url: emulator.url(),
            daemon_url: daemon_url.clone(),
            dir: d.to_owned(),
            http: http.clone(),
            narrate: options.narrate,
            started,
        };
        let tasks = vec![
            tokio::spawn(machines(ctx.clone())),
            tokio::spawn(scheduler(ctx.clone())),
            tokio::spawn(submitter(ctx.clone())),
            tokio::spawn(watch_status(ctx)),
        ];
        say!(options, dir = %d.display(), nodes = fleet.nodes.len(), bmcs = %emulator.url(), kube = %api.url, "lab up: {} emulated BMCs, fake Kubernetes API, accordd config {}", fleet.nodes.len(), config_path.display());
        Ok(Lab {
            scenario: (*scenario).clone(),
            fleet: (*fleet).clone(),
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
            http,
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

    /// Starts `accordd run --config` on the lab's configuration.
    pub fn start_daemon(&self) -> anyhow::Result<()> {
        self.start_daemon_with(&[])
    }

    /// The same, with `prefix` arguments before `run` (a bench binary
    /// that plays accordd).
    pub fn start_daemon_with(&self, prefix: &[&str]) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.options.accordd);
        cmd.args(prefix)
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null());
        if std::env::var_os("ACCORD_LOG").is_none() {
            cmd.env("ACCORD_LOG", "info,accordd::api=warn");
        }
        if let Some(log) = &self.options.daemon_log {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)?;
            cmd.stdout(f.try_clone()?).stderr(f);
        }
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

    /// Whether accordd has exited, with its status.
    pub fn daemon_exited(&self) -> Option<std::process::ExitStatus> {
        self.daemon
            .lock()
            .expect("lock")
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// accordd's last control round (`GET /v1/status`).
    pub async fn status(&self) -> Option<ControlStatus> {
        fetch_status(&self.http, &self.daemon_url).await
    }

    /// Seconds since the lab started.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Resets accordd sent for `node`, as the emulator logged them (a
    /// broken node's dropped ones never reach it).
    pub fn emulator_resets(&self, node: &str) -> usize {
        self.emulator.count(&format!(
            "POST /redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset"
        ))
    }

    /// Whether every submission is done: finished, or pending while
    /// accordd says it cannot be placed.
    fn scenario_done(&self, status: Option<&ControlStatus>) -> bool {
        let r = self.record.lock().expect("lock");
        r.subs.iter().enumerate().all(|(i, s)| {
            if s.finished.is_some() {
                return true;
            }
            if s.submitted.is_none() || s.bound.is_some() {
                return false;
            }
            let keys = workload_keys(&self.scenario.submit[i], s);
            status.is_some_and(|st| {
                !keys.is_empty()
                    && keys.iter().all(|k| {
                        st.workloads
                            .iter()
                            .any(|w| &w.workload == k && w.state == "cannot_place")
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

    /// Runs until the scenario is done and every node is idle or off (and
    /// accordd has no power action in flight); with `dark`, until every
    /// node is off. Errors after `lab.max_s`, or if accordd exits.
    pub async fn run_until_idle(&self, dark: bool) -> anyhow::Result<Summary> {
        let deadline = self.started + Duration::from_secs(self.scenario.lab.max_s);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Some(code) = self.daemon_exited() {
                anyhow::bail!("accordd exited ({code})");
            }
            let status = self.status().await;
            let quiet = status.as_ref().is_some_and(|s| s.open_intents.is_empty());
            if quiet && self.scenario_done(status.as_ref()) && self.fleet_settled(dark) {
                let summary = self.summary(status.as_ref());
                return Ok(summary);
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the scenario did not settle within lab.max_s = {} s",
                    self.scenario.lab.max_s
                );
            }
        }
    }

    /// Waits until `what` holds for accordd's status, up to `timeout`.
    pub async fn wait_status(
        &self,
        timeout: Duration,
        what: impl Fn(&ControlStatus) -> bool,
    ) -> anyhow::Result<ControlStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(s) = self.status().await {
                if what(&s) {
                    return Ok(s);
                }
            }
            if Instant::now() > end {
                anyhow::bail!("accordd's status did not get there within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
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
                                && s.nodes.iter().any(|n| l.path == reset_path(n))
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
                    cannot_place: if s.bound.is_none() {
                        s.cannot_place.clone()
                    } else {
                        None
                    },
                }
            })
            .collect();
        let mut powered_gpu_s = 0.0;
        let gpus_of = |name: &str| {
            self.fleet
                .nodes
                .iter()
                .find(|n| n.name == name)
                .map(|n| n.gpus.len() as f64)
                .unwrap_or(0.0)
        };
        let nodes: Vec<NodeSummary> = r
            .nodes
            .iter()
            .map(|(name, n)| {
                let on_s = n.on_total.as_secs_f64()
                    + n.powered_at
                        .map(|t| now.duration_since(t).as_secs_f64())
                        .unwrap_or(0.0);
                powered_gpu_s += on_s * gpus_of(name);
                NodeSummary {
                    name: name.clone(),
                    power_cycles: n.power_cycles,
                    on_now: n.on,
                    used: n.used,
                    on_s,
                    stage: status.and_then(|s| {
                        s.nodes
                            .iter()
                            .find(|x| &x.name == name)
                            .map(|x| format!("{:?}", x.stage).to_lowercase())
                    }),
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

fn reset_path(node: &str) -> String {
    format!("/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset")
}

/// The workloads (`ns/name`) a submission's pods make, as accordd keys them.
fn workload_keys(sub: &scenario::Submission, s: &SubState) -> BTreeSet<String> {
    let _ = sub;
    let mut keys = BTreeSet::new();
    for o in &s.others {
        if o["kind"] == "PodGroup" {
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

async fn fetch_status(http: &reqwest::Client, url: &str) -> Option<ControlStatus> {
    let r = http
        .get(format!("{url}/v1/status"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadSummary {
    pub name: String,
    pub pods: usize,
    pub submitted_s: Option<f64>,
    pub bound: bool,
    pub time_to_bound_s: Option<f64>,
    /// From submission to the first Reset accordd sent for a node its pods
    /// ended on (none when they needed no power-on).
    pub time_to_first_reset_s: Option<f64>,
    pub nodes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cannot_place: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    pub name: String,
    pub power_cycles: u32,
    pub on_now: bool,
    pub used: bool,
    pub on_s: f64,
    /// accordd's lifecycle stage for it.
    pub stage: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub elapsed_s: f64,
    pub nodes_powered_on: usize,
    pub nodes_powered_on_never_used: usize,
    pub gpu_hours_powered: f64,
    pub gpu_hours_used: f64,
    pub resets_sent: usize,
    /// Every request accordd sent to a BMC (reads included).
    pub bmc_requests: usize,
    pub workloads: Vec<WorkloadSummary>,
    pub nodes: Vec<NodeSummary>,
}

impl Summary {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} s"));
        out.push_str(&format!(
            "{:<12} {:>4} {:>10} {:>8} {:>12} {:>14}  NODES\n",
            "WORKLOAD", "PODS", "SUBMITTED", "BOUND", "TO BOUND", "TO 1ST RESET"
        ));
        for w in &self.workloads {
            out.push_str(&format!(
                "{:<12} {:>4} {:>10} {:>8} {:>12} {:>14}  {}\n",
                w.name,
                w.pods,
                f(w.submitted_s),
                if w.bound { "yes" } else { "no" },
                f(w.time_to_bound_s),
                f(w.time_to_first_reset_s),
                if w.nodes.is_empty() {
                    w.cannot_place
                        .as_deref()
                        .map(|r| format!("cannot place: {r}"))
                        .unwrap_or_else(|| "-".into())
                } else {
                    w.nodes.join(",")
                }
            ));
        }
        out.push('\n');
        out.push_str(&format!(
            "{:<8} {:>6} {:>5} {:>6} {:>8}  STAGE\n",
            "NODE", "CYCLES", "ON", "USED", "ON FOR"
        ));
        for n in &self.nodes {
            out.push_str(&format!(
                "{:<8} {:>6} {:>5} {:>6} {:>8}  {}\n",
                n.name,
                n.power_cycles,
                if n.on_now { "on" } else { "off" },
                if n.used { "yes" } else { "no" },
                format!("{:.0} s", n.on_s),
                n.stage.as_deref().unwrap_or("-")
            ));
        }
        out.push_str(&format!(
            "\nnodes powered on: {}; powered on but never used: {}; GPU-hours powered {:.2}, used {:.2}; Resets sent: {}; BMC requests: {}; {:.0} s\n",
            self.nodes_powered_on,
            self.nodes_powered_on_never_used,
            self.gpu_hours_powered,
            self.gpu_hours_used,
            self.resets_sent,
            self.bmc_requests,
            self.elapsed_s
        ));
        out
    }
}

/// The Kubernetes Node a lab machine registers: the fleet's labels (what
/// NFD / the GPU operator and Accord's topology labels give a real node)
/// and allocatable from its profile.
fn node_object(node: &accord::fleet::Node) -> Value {
    let milli = |m: i64| format!("{m}m");
    let mut alloc = serde_json::Map::new();
    alloc.insert("cpu".into(), json!(milli(node.allocatable.cpu)));
    alloc.insert(
        "memory".into(),
        json!(format!("{}", node.allocatable.memory / 1000)),
    );
    alloc.insert("pods".into(), json!(node.allocatable.pods.to_string()));
    let whole = node
        .devices
        .iter()
        .filter(|d| d.kind == accord::device::DeviceKind::Gpu)
        .count();
    if whole > 0 {
        alloc.insert("nvidia.com/gpu".into(), json!(whole.to_string()));
    }
    let mut mig: BTreeMap<String, usize> = BTreeMap::new();
    for d in &node.devices {
        if d.kind == accord::device::DeviceKind::Mig {
            if let Some(p) = d.mig_profile() {
                *mig.entry(format!("nvidia.com/mig-{p}")).or_default() += 1;
            }
        }
    }
    for (k, v) in mig {
        alloc.insert(k, json!(v.to_string()));
    }
    for (k, v) in &node.allocatable.extended {
        alloc.insert(k.clone(), json!(milli(*v)));
    }
    let taints: Vec<Value> = node
        .taints
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": node.labels},
        "spec": {"taints": taints},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    })
}

async fn power_state(ctx: &Ctx, node: &str) -> Option<bool> {
    let r = ctx
        .http
        .get(format!("{}/redfish/v1/Systems/{node}", ctx.emulator_url))
        .send()
        .await
        .ok()?;
    let v: Value = r.json().await.ok()?;
    Some(v["PowerState"].as_str()? == "On")
}

fn agent_config(ctx: &Ctx, node: &str) -> anyhow::Result<accord_agent::run::AgentConfig> {
    let d = &ctx.dir;
    let text = format!(
        "[daemon]\nurl = \"{}\"\ntoken_file = \"{}\"\n[node]\nname = \"{node}\"\n\
         [discovery]\ninterval_s = 3600\nhwloc_xml = \"{}\"\nnvml_snapshot = \"{}\"\n\
         [heartbeat]\ninterval_ms = {}\n[backoff]\ninitial_ms = 200\nmax_ms = 2000\n",
        ctx.daemon_url,
        d.join("agent-token").display(),
        d.join("topology.xml").display(),
        d.join("nvml.json").display(),
        ctx.scenario.lab.heartbeat_ms
    );
    Ok(accord_agent::run::AgentConfig::parse(
        &text,
        &d.join(format!("agent-{node}.toml")),
    )?)
}

/// The lab's machines: follow each BMC's power state; boot the agent and
/// register the Kubernetes Node after the configured delays; take both
/// away (and the node's pods) when the machine goes off.
async fn machines(ctx: Ctx) {
    let boot = Duration::from_millis(ctx.scenario.lab.boot_delay_ms);
    let kubelet = Duration::from_millis(ctx.scenario.lab.kubelet_delay_ms);
    let mut came_on: BTreeMap<String, Instant> = BTreeMap::new();
    let mut agent_at: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let reads = ctx.fleet.nodes.iter().map(|n| {
            let ctx = ctx.clone();
            async move { (n.name.clone(), power_state(&ctx, &n.name).await) }
        });
        let readings = futures::future::join_all(reads).await;
        let now = Instant::now();
        for (name, on) in readings {
            let Some(on) = on else { continue };
            let node = ctx
                .fleet
                .nodes
                .iter()
                .find(|n| n.name == name)
                .expect("fleet node");
            let mut start_agent = false;
            let mut register = false;
            let mut went_off = false;
            {
                let mut r = ctx.record.lock().expect("lock");
                let sim = r.nodes.get_mut(&name).expect("fleet node");
                if on && !sim.on {
                    sim.on = true;
                    sim.power_cycles += 1;
                    sim.powered_at = Some(now);
                    came_on.insert(name.clone(), now);
                    say!(ctx, node = %name, "BMC shows On: booting");
                } else if on && sim.powered_at.is_some() && !came_on.contains_key(&name) {
                    // On from the start: booted already.
                    came_on.insert(name.clone(), now - boot - kubelet);
                }
                if on
                    && !sim.agent_started
                    && came_on
                        .get(&name)
                        .is_some_and(|t| now.duration_since(*t) >= boot)
                {
                    sim.agent_started = true;
                    start_agent = true;
                    agent_at.insert(name.clone(), now);
                }
                if on
                    && sim.agent_started
                    && !sim.registered
                    && agent_at
                        .get(&name)
                        .is_some_and(|t| now.duration_since(*t) >= kubelet)
                {
                    sim.registered = true;
                    register = true;
                }
                if !on && sim.on {
                    sim.on = false;
                    if let Some(t) = sim.powered_at.take() {
                        sim.on_total += now.duration_since(t);
                    }
                    if let Some(stop) = sim.agent.take() {
                        let _ = stop.send(());
                    }
                    sim.agent_started = false;
                    sim.registered = false;
                    came_on.remove(&name);
                    agent_at.remove(&name);
                    went_off = true;
                }
            }
            if start_agent {
                match agent_config(&ctx, &name) {
                    Ok(cfg) => {
                        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                        ctx.record
                            .lock()
                            .expect("lock")
                            .nodes
                            .get_mut(&name)
                            .expect("fleet node")
                            .agent = Some(tx);
                        say!(ctx, node = %name, "booted: accord-agent starting (replaying a recorded DGX-2 board, 8 x H100)");
                        tokio::spawn(async move {
                            if let Err(e) = accord_agent::run::run(cfg, async {
                                let _ = rx.await;
                            })
                            .await
                            {
                                tracing::warn!(target: "lab", error = %e, "agent stopped");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(target: "lab", node = %name, error = %e, "agent config")
                    }
                }
            }
            if register {
                ctx.api.apply(node_object(node));
                say!(ctx, node = %name, "Kubernetes Node registered Ready");
            }
            if went_off {
                ctx.api.delete("v1", "Node", "", &name);
                say!(ctx, node = %name, "BMC shows Off: agent stopped, Node removed");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn key_of(p: &Value) -> (String, String) {
    (
        p["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
    )
}

fn pod_gpus(p: &Value) -> f64 {
    let mut g = 0.0;
    for c in p["spec"]["containers"].as_array().into_iter().flatten() {
        let r = &c["resources"];
        let v = r["requests"]["nvidia.com/gpu"]
            .as_str()
            .or_else(|| r["limits"]["nvidia.com/gpu"].as_str());
        g += v.and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // A MIG 1g slice is a seventh of a GPU.
        for (k, v) in r["limits"].as_object().into_iter().flatten() {
            if let Some(rest) = k.strip_prefix("nvidia.com/mig-") {
                let slices: f64 = rest
                    .split('g')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(1.0);
                g += slices / 7.0 * v.as_str().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            }
        }
    }
    g
}

/// The stand-in scheduler: on each change, one [`binder::decide`] pass;
/// binds what fits, marks the rest Unschedulable (only when the message
/// changed, so it does not churn the watch).
async fn scheduler(ctx: Ctx) {
    let mut seen_rv = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rv = ctx.api.resource_version();
        if rv == seen_rv {
            continue;
        }
        let nodes = ctx.api.list("v1", "Node");
        let pods = ctx.api.list("v1", "Pod");
        let groups = ctx.api.list("scheduling.k8s.io/v1beta1", "PodGroup");
        let d = binder::decide(&nodes, &pods, &groups);
        for b in &d.bind {
            let Some(mut pod) = ctx.api.get("v1", "Pod", &b.namespace, &b.pod) else {
                continue;
            };
            pod["spec"]["nodeName"] = json!(b.node);
            pod["status"] = json!({
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
            });
            let gpus = pod_gpus(&pod);
            ctx.api.apply(pod);
            let mut r = ctx.record.lock().expect("lock");
            r.bound.insert(
                (b.namespace.clone(), b.pod.clone()),
                (Instant::now(), gpus, b.node.clone()),
            );
            if let Some(n) = r.nodes.get_mut(&b.node) {
                n.used = true;
            }
            let key = (b.namespace.clone(), b.pod.clone());
            for s in r.subs.iter_mut() {
                if s.pods.contains(&key) {
                    s.nodes.insert(b.node.clone());
                }
            }
        }
        if !d.bind.is_empty() {
            let names: Vec<String> = d
                .bind
                .iter()
                .map(|b| format!("{}/{}→{}", b.namespace, b.pod, b.node))
                .collect();
            say!(ctx, "scheduler bound {}", names.join(", "));
        }
        for u in &d.unschedulable {
            let Some(mut pod) = ctx.api.get("v1", "Pod", &u.namespace, &u.pod) else {
                continue;
            };
            let cond = &pod["status"]["conditions"][0];
            if cond["reason"] == "Unschedulable" && cond["message"] == u.message.as_str() {
                continue;
            }
            pod["status"] = json!({
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "message": u.message}],
            });
            ctx.api.apply(pod);
        }
        seen_rv = ctx.api.resource_version();
    }
}

/// Submits the scenario's workloads on time, notes when all their pods are
/// bound, and finishes them (deletes the pods and groups) after `run_ms`.
async fn submitter(ctx: Ctx) {
    loop {
        let now = Instant::now();
        for (i, sub) in ctx.scenario.submit.iter().enumerate() {
            let (submitted, released) = {
                let r = ctx.record.lock().expect("lock");
                (r.subs[i].submitted, r.subs[i].released)
            };
            let due = match sub.at_ms {
                Some(at) => now >= ctx.started + Duration::from_millis(at),
                None => released,
            };
            match submitted {
                None if due => {
                    let objects = match ctx.scenario.objects(sub) {
                        Ok(o) => o,
                        Err(e) => {
                            tracing::error!(target: "lab", submission = %sub.name, error = %format!("{e:#}"), "cannot submit");
                            ctx.record.lock().expect("lock").subs[i].submitted = Some(now);
                            continue;
                        }
                    };
                    let mut pods = Vec::new();
                    let mut others = Vec::new();
                    for o in objects {
                        if o["kind"] == "Pod" {
                            pods.push(key_of(&o));
                        } else {
                            others.push(o.clone());
                        }
                        ctx.api.apply(o);
                    }
                    say!(ctx, submission = %sub.name, pods = pods.len(), "submitted");
                    let mut r = ctx.record.lock().expect("lock");
                    let s = &mut r.subs[i];
                    s.submitted = Some(now);
                    s.pods = pods;
                    s.others = others;
                }
                Some(t0) => {
                    let (bound, finished, pods) = {
                        let r = ctx.record.lock().expect("lock");
                        let s = &r.subs[i];
                        (s.bound, s.finished, s.pods.clone())
                    };
                    if finished.is_some() || pods.is_empty() {
                        continue;
                    }
                    match bound {
                        None => {
                            let all = pods.iter().all(|(ns, n)| {
                                ctx.api
                                    .get("v1", "Pod", ns, n)
                                    .is_some_and(|p| p["spec"]["nodeName"].is_string())
                            });
                            if all {
                                let mut r = ctx.record.lock().expect("lock");
                                r.subs[i].bound = Some(now);
                                let nodes: Vec<String> = r.subs[i].nodes.iter().cloned().collect();
                                say!(ctx, submission = %sub.name, seconds = format!("{:.1}", now.duration_since(t0).as_secs_f64()), nodes = %nodes.join(","), "all pods bound: Pending → Running");
                            }
                        }
                        Some(b) if now.duration_since(b) >= Duration::from_millis(sub.run_ms) => {
                            finish(&ctx, i, &sub.name);
                        }
                        Some(_) => {}
                    }
                }
                None => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn finish(ctx: &Ctx, i: usize, name: &str) {
    let (pods, others) = {
        let r = ctx.record.lock().expect("lock");
        (r.subs[i].pods.clone(), r.subs[i].others.clone())
    };
    for (ns, n) in &pods {
        ctx.api.delete("v1", "Pod", ns, n);
    }
    for o in &others {
        let (ns, n) = key_of(o);
        let api = o["apiVersion"].as_str().unwrap_or("");
        let kind = o["kind"].as_str().unwrap_or("");
        ctx.api.delete(api, kind, &ns, &n);
    }
    let now = Instant::now();
    let mut r = ctx.record.lock().expect("lock");
    for key in &pods {
        if let Some((t, g, _)) = r.bound.remove(key) {
            r.used_gpu_s += now.duration_since(t).as_secs_f64() * g;
        }
    }
    r.subs[i].finished = Some(now);
    drop(r);
    say!(ctx, submission = %name, "finished: pods done and deleted");
}

/// Follows accordd's status: notes what cannot be placed, and explains
/// each workload once when Accord first acts on it (or cannot).
async fn watch_status(ctx: Ctx) {
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let Some(st) = fetch_status(&ctx.http, &ctx.daemon_url).await else {
            continue;
        };
        let mut r = ctx.record.lock().expect("lock");
        for i in 0..r.subs.len() {
            let keys = workload_keys(&ctx.scenario.submit[i], &r.subs[i]);
            for w in st.workloads.iter().filter(|w| keys.contains(&w.workload)) {
                if w.state == "cannot_place" {
                    r.subs[i].cannot_place = w.reason.clone();
                }
                if w.state != "placed"
                    && r.explained.insert(format!("{}:{}", w.workload, w.state))
                    && ctx.narrate
                {
                    if let Some(text) = crate::status::render_explain(&st, &w.workload) {
                        info!(target: "lab", "accordctl explain {}\n{}", w.workload, text.trim_end());
                    }
                }
            }
        }
    }
}
