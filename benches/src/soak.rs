//! The soak harness behind `soak-figures` (issue 16, item 12): the real
//! accordd binary, in act mode, as a child process against a simulated
//! fleet with continuous churn, its RSS sampled from `/proc/PID/status`.
//!
//! The fleet, all in this process:
//! - **BMCs**: a small Redfish stand-in (axum, one endpoint; each node is
//!   the system `/redfish/v1/Systems/{node}`, as the inventory's `system =
//!   "{node}"` pattern names it) answering the service root, the system
//!   with its `PowerState` and the Reset action (On, ForceOff,
//!   GracefulShutdown, ForceRestart); a power change lands 1–3 s after the
//!   Reset. Not sushy-emulator: too heavy for 1,000 systems on 2 cores.
//! - **Machines**: a machine boots 1.5 s after its BMC shows On; then its
//!   agent (played here over HTTP with accord-api's client) reports its
//!   hardware ([`crate::report`]: per-node serial and GPU UUIDs, stable
//!   for the run) and heartbeats, and 0.5 s later its kubelet registers
//!   the Node Ready (`nvidia.com/gpu` = its whole GPUs). Off: the agent
//!   stops, the Node turns NotReady with the unreachable taints (as the
//!   node lifecycle controller does) and its pods go.
//! - **Kubernetes**: accord-testkit's fake API server, and the lab's
//!   stand-in scheduler ([`accord_lab::binder`]) binding pods or marking
//!   them Unschedulable, once a second when anything changed. Compacted
//!   every 5 minutes as etcd is (watches get 410 Gone and re-list).
//! - **Churn**, once a second: new gangs (PodGroup + pods of 8 GPUs, half
//!   of them within one rack; gangs of 1, 2 or 4-GPU pods; single pods;
//!   gangs no node can hold), run 30–150 s once bound, then deleted;
//!   pending ones given up after 2 minutes; agents reporting changed
//!   hardware (MIG mode flipped on a GPU, the same machine identity);
//!   Nodes flapping NotReady and agents falling silent for 5–60 s (past
//!   `unhealthy_after_s` = 30 s for some). Idle nodes are powered off by
//!   accordd after 30 s idle, pending gangs power nodes on.
//!
//! Everything is seeded ([`crate::Rng`]); timing still varies run to run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::hardware::{MigMode, NodeHardware};
use accord_api::agent::Heartbeat;
use accord_testkit::fake_api::FakeApi;
use accord_testkit::process::Process;
use anyhow::Context as _;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::Rng;

const AGENT_TOKEN: &str = "soak-agent-token";
const ADMIN_TOKEN: &str = "soak-admin-token";
/// Nodes per rack in the generated fleet.
const PER_RACK: usize = 20;
/// BMC shows On → agent up.
const BOOT: Duration = Duration::from_millis(1500);
/// Agent up → Node Ready.
const KUBELET: Duration = Duration::from_millis(500);
/// Each agent's heartbeat interval (accordd's `stale_after_s` is 30).
const HEARTBEAT: Duration = Duration::from_secs(10);
/// A report refused or not answered is sent again after this.
const REPORT_RETRY: Duration = Duration::from_secs(2);
/// Agents' requests in flight at once.
const AGENT_CONNECTIONS: usize = 32;
/// How long a gang that is not bound stays before its owner gives up.
const GIVE_UP: Duration = Duration::from_secs(120);
/// How often the fake API server forgets its history (etcd's default).
const COMPACT_EVERY: Duration = Duration::from_secs(300);
const PRODUCT_LABEL: &str = "NVIDIA-H100-80GB-HBM3";
const RACK_LABEL: &str = "topology.accord.dev/rack";
/// What the node lifecycle controller puts on a Node that is not Ready.
const READINESS_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The accordd binary, and arguments before its own (`run --config
    /// FILE`): empty for the real binary, or a bench binary's flag that
    /// makes it play accordd.
    pub accordd: PathBuf,
    pub accordd_prefix: Vec<String>,
    pub nodes: usize,
    pub duration: Duration,
    pub seed: u64,
    /// Samples before this are warm-up: not judged.
    pub warmup: Duration,
    pub sample_every: Duration,
    /// The most RSS may grow after warm-up (the least-squares trend over
    /// the samples after warm-up, times their span), in MiB.
    pub max_growth_mib: f64,
    /// accordd's log (stderr), kept after the run.
    pub log: PathBuf,
    /// New workloads a minute; `None`: enough to keep about half the
    /// fleet busy (`nodes` x 0.1875: 187.5 a minute at 1,000 nodes).
    pub workloads_per_min: Option<f64>,
}

impl Options {
    /// Warm-up 30 % of the run (at most 3 minutes: the live workloads and
    /// busy nodes ramp up for about that long), a sample every
    /// 10 s (more often in short runs: at least 20 samples), at most
    /// 16 MiB of growth after warm-up.
    pub fn new(accordd: PathBuf, nodes: usize, duration: Duration, seed: u64) -> Options {
        Options {
            accordd,
            accordd_prefix: Vec::new(),
            nodes,
            duration,
            seed,
            warmup: (duration * 3 / 10).min(Duration::from_secs(180)),
            sample_every: (duration / 20).clamp(Duration::from_secs(1), Duration::from_secs(10)),
            max_growth_mib: 16.0,
            log: std::env::temp_dir().join("accord-soak-accordd.log"),
            workloads_per_min: None,
        }
    }
}

/// One look at accordd.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since accordd served.
    pub at_s: f64,
    pub rss_mib: f64,
    /// accordd's last round (`/v1/status`), if it answered.
    pub round: Option<u64>,
    /// Nodes by lifecycle stage, as accordd's status says.
    pub stages: BTreeMap<String, usize>,
    /// Gangs (and single pods) alive in the cluster, and of them not bound.
    pub workloads: usize,
    pub pending: usize,
    /// Nodes whose BMC shows On.
    pub powered: usize,
}

/// What the run did, counted by the simulation.
#[derive(Debug, Default)]
pub struct Stats {
    pub reports: AtomicU64,
    pub report_errors: AtomicU64,
    pub heartbeats: AtomicU64,
    pub heartbeat_errors: AtomicU64,
    pub workloads_created: AtomicU64,
    pub workloads_bound: AtomicU64,
    pub workloads_finished: AtomicU64,
    pub workloads_given_up: AtomicU64,
    pub pods_created: AtomicU64,
    pub pods_bound: AtomicU64,
    pub pods_deleted: AtomicU64,
    pub hardware_changes: AtomicU64,
    pub kubelet_flaps: AtomicU64,
    pub agent_silences: AtomicU64,
    pub bmc_requests: AtomicU64,
    pub resets_on: AtomicU64,
    pub resets_off: AtomicU64,
    pub resets_restart: AtomicU64,
    pub compactions: AtomicU64,
    pub scheduler_passes: AtomicU64,
    /// Gauges: workloads alive in the cluster now, and of them not bound.
    pub workloads_live: AtomicU64,
    pub workloads_pending: AtomicU64,
    /// Agents' failed requests by what went wrong (the node's name taken
    /// out), at most 20 kinds.
    pub errors: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    fn error(&self, what: &str, node: &str, e: &dyn std::fmt::Display) {
        let key = format!("{what}: {e}").replace(node, "NODE");
        let mut errors = self.errors.lock().expect("lock");
        let key = if errors.len() < 20 || errors.contains_key(&key) {
            key
        } else {
            format!("{what}: other")
        };
        *errors.entry(key).or_default() += 1;
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The run's figures.
#[derive(Debug)]
pub struct Figures {
    pub options: Options,
    pub samples: Vec<Sample>,
    pub stats: Arc<Stats>,
    pub rss_at_start_mib: f64,
    /// accordd's store directory on disk at the end, bytes.
    pub store_bytes: u64,
}

impl Figures {
    /// The samples after warm-up.
    pub fn judged(&self) -> &[Sample] {
        let warm = self.options.warmup.as_secs_f64();
        let from = self.samples.partition_point(|s| s.at_s < warm);
        &self.samples[from..]
    }

    /// Least-squares slope of RSS over the samples after warm-up, MiB per
    /// minute (`None`: fewer than 3 samples).
    pub fn slope_mib_per_min(&self) -> Option<f64> {
        let s = self.judged();
        if s.len() < 3 {
            return None;
        }
        let n = s.len() as f64;
        let mx = s.iter().map(|x| x.at_s).sum::<f64>() / n;
        let my = s.iter().map(|x| x.rss_mib).sum::<f64>() / n;
        let sxy: f64 = s.iter().map(|x| (x.at_s - mx) * (x.rss_mib - my)).sum();
        let sxx: f64 = s.iter().map(|x| (x.at_s - mx).powi(2)).sum();
        (sxx > 0.0).then(|| sxy / sxx * 60.0)
    }

    /// The trend's growth over the judged span, MiB.
    pub fn trend_growth_mib(&self) -> Option<f64> {
        let s = self.judged();
        let span_min = (s.last()?.at_s - s.first()?.at_s) / 60.0;
        Some(self.slope_mib_per_min()? * span_min)
    }

    /// Min and max RSS after warm-up.
    pub fn judged_range(&self) -> Option<(f64, f64)> {
        let s = self.judged();
        let min = s.iter().map(|x| x.rss_mib).reduce(f64::min)?;
        let max = s.iter().map(|x| x.rss_mib).reduce(f64::max)?;
        Some((min, max))
    }

    /// Flat: the trend after warm-up grows by at most `max_growth_mib`.
    /// `None`: too few samples to say.
    pub fn flat(&self) -> Option<bool> {
        Some(self.trend_growth_mib()? <= self.options.max_growth_mib)
    }
}

/// One machine of the simulated fleet.
#[derive(Debug)]
struct Machine {
    name: String,
    /// Its agent's report ([`crate::report`]).
    hw: NodeHardware,
    /// Changed hardware: its last GPU's MIG mode flipped from the report's.
    flipped: bool,
    /// The BMC's power state, and a change on its way (lands at).
    on: bool,
    change: Option<(bool, Instant)>,
    /// Since when it has power (booting, then up).
    up_since: Option<Instant>,
    agent_up: bool,
    report_due: bool,
    in_flight: bool,
    next_try: Instant,
    next_beat: Instant,
    /// The Node is posted Ready for this boot.
    registered: bool,
    kubelet_down_until: Option<Instant>,
    agent_silent_until: Option<Instant>,
}

impl Machine {
    /// Lands a power change whose time has come.
    fn settle(&mut self, now: Instant) {
        if let Some((on, at)) = self.change {
            if now >= at {
                self.on = on;
                self.change = None;
            }
        }
    }

    /// What its agent reports now.
    fn hardware(&self) -> NodeHardware {
        let mut hw = self.hw.clone();
        if self.flipped {
            if let Some(mig) = hw.gpus.last_mut().and_then(|g| g.mig.as_mut()) {
                if mig.current_mode == MigMode::Enabled {
                    mig.current_mode = MigMode::Disabled;
                    mig.pending_mode = MigMode::Disabled;
                    mig.gpu_instances.clear();
                } else {
                    // MIG mode on, not partitioned yet.
                    mig.current_mode = MigMode::Enabled;
                    mig.pending_mode = MigMode::Enabled;
                }
            }
        }
        hw
    }

    /// Whole GPUs (not in MIG mode): the device plugin's `nvidia.com/gpu`.
    fn whole_gpus(&self) -> usize {
        self.hardware()
            .gpus
            .iter()
            .filter(|g| {
                g.mig
                    .as_ref()
                    .is_none_or(|m| m.current_mode != MigMode::Enabled)
            })
            .count()
    }
}

/// The world the tasks share.
struct World {
    machines: Vec<Machine>,
    index: BTreeMap<String, usize>,
    rng: Rng,
}

/// One gang (or single pod) of the churn.
#[derive(Debug)]
struct Workload {
    namespace: String,
    name: String,
    pods: u32,
    group: bool,
    created: Instant,
    bound_at: Option<Instant>,
    run_for: Duration,
    give_up: Duration,
}

#[derive(Clone)]
struct Sim {
    world: Arc<Mutex<World>>,
    stats: Arc<Stats>,
    api: Arc<FakeApi>,
    agent: accord_api::Client,
}

fn node_name(k: usize) -> String {
    format!("r{:03}-n{:02}", k / PER_RACK, k % PER_RACK)
}

fn private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// The fleet file: `nodes` 8 x H100 machines in racks of 20, declared as
/// the generated reports show them, idle ones powered off after 30 s.
fn fleet_toml(nodes: usize) -> String {
    let mut t = String::from(
        "[policy]\nidle_power_off_after_s = 30\nreconfigure_mig = false\n\n\
         [profiles.h100]\ngpus = 8\ngpu_model = \"NVIDIA H100 80GB HBM3\"\ngpu_memory_gib = 80\n\
         cpu = \"192\"\nmemory = \"2Ti\"\npower_kw = 10.2\nnics = 8\n",
    );
    for r in 0..nodes.div_ceil(PER_RACK) {
        t.push_str(&format!("\n[[racks]]\nname = \"r{r:03}\"\n"));
    }
    for k in 0..nodes {
        t.push_str(&format!(
            "\n[[nodes]]\nname = \"{}\"\nrack = \"r{:03}\"\nprofile = \"h100\"\n",
            node_name(k),
            k / PER_RACK
        ));
    }
    t
}

/// The Redfish stand-in: every node a system under one endpoint.
mod bmc {
    use super::*;
    use axum::extract::{Path as UrlPath, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use axum::Json;

    fn system(sim: &Sim, id: &str) -> Option<Value> {
        let mut w = sim.world.lock().expect("lock");
        let k = *w.index.get(id)?;
        let m = &mut w.machines[k];
        m.settle(Instant::now());
        let path = format!("/redfish/v1/Systems/{id}");
        Some(json!({
            "@odata.id": path,
            "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
            "Id": id,
            "Name": id,
            "PowerState": if m.on { "On" } else { "Off" },
            "Actions": {"#ComputerSystem.Reset": {
                "target": format!("{path}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart"],
            }},
        }))
    }

    async fn root(State(sim): State<Sim>) -> Json<Value> {
        bump(&sim.stats.bmc_requests);
        Json(json!({
            "@odata.id": "/redfish/v1",
            "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
            "Id": "RootService",
            "RedfishVersion": "1.6.0",
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
        }))
    }

    async fn get_system(State(sim): State<Sim>, UrlPath(id): UrlPath<String>) -> Response {
        bump(&sim.stats.bmc_requests);
        match system(&sim, &id) {
            Some(v) => Json(v).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }

    async fn reset(
        State(sim): State<Sim>,
        UrlPath(id): UrlPath<String>,
        Json(body): Json<Value>,
    ) -> StatusCode {
        bump(&sim.stats.bmc_requests);
        let mut w = sim.world.lock().expect("lock");
        let delay = Duration::from_millis(1000 + w.rng.below(2000));
        let Some(&k) = w.index.get(&id) else {
            return StatusCode::NOT_FOUND;
        };
        let now = Instant::now();
        let m = &mut w.machines[k];
        m.settle(now);
        match body["ResetType"].as_str() {
            Some("On") => {
                bump(&sim.stats.resets_on);
                if !m.on && m.change.is_none() {
                    m.change = Some((true, now + delay));
                }
            }
            Some("ForceOff" | "GracefulShutdown") => {
                bump(&sim.stats.resets_off);
                if m.on {
                    m.change = Some((false, now + delay));
                }
            }
            Some("ForceRestart") => {
                bump(&sim.stats.resets_restart);
                m.on = false;
                m.change = Some((true, now + delay));
            }
            _ => return StatusCode::BAD_REQUEST,
        }
        StatusCode::NO_CONTENT
    }

    /// Serves on a free loopback port; returns its URL.
    pub(super) async fn start(sim: Sim) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
        let app = axum::Router::new()
            .route("/redfish/v1", get(root))
            .route("/redfish/v1/", get(root))
            .route("/redfish/v1/Systems/{id}", get(get_system))
            .route(
                "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset",
                post(reset),
            )
            .with_state(sim);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the BMC stand-in stopped");
            }
        });
        Ok((url, task))
    }
}

/// The Node a kubelet registers (device plugin and GFD labels with it).
fn node_object(name: &str, gpus: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.product": PRODUCT_LABEL,
            "nvidia.com/gpu.count": gpus.to_string(),
        }},
        "spec": {},
        "status": {
            "capacity": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
            "allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
        },
    })
}

fn without_readiness_taints(node: &Value) -> Vec<Value> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| !READINESS_TAINTS.contains(&t["key"].as_str().unwrap_or("")))
        .cloned()
        .collect()
}

/// The kubelet posts the Node Ready (registering it the first time), with
/// its whole GPUs; the readiness taints go. Others' labels and taints
/// (accordd's) stay.
fn node_ready(api: &FakeApi, name: &str, gpus: usize) {
    let updated = api.update("v1", "Node", "", name, |node| {
        let g = Value::from(gpus.to_string());
        node["metadata"]["labels"]["nvidia.com/gpu.count"] = g.clone();
        node["status"]["capacity"]["nvidia.com/gpu"] = g.clone();
        node["status"]["allocatable"]["nvidia.com/gpu"] = g;
        node["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
            "reason": "KubeletReady", "message": "kubelet is posting ready status"}]);
        node["spec"]["taints"] = Value::Array(without_readiness_taints(node));
    });
    if updated.is_none() {
        api.apply(node_object(name, gpus));
    }
}

/// The Node is not Ready: `unreachable` (machine off: Unknown) or
/// `not-ready` (kubelet says so: False), tainted as the node lifecycle
/// controller does.
fn node_not_ready(api: &FakeApi, name: &str, unreachable: bool) {
    api.update("v1", "Node", "", name, |node| {
        node["status"]["conditions"] = if unreachable {
            json!([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status."}])
        } else {
            json!([{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                    "message": "container runtime is down"}])
        };
        let key = READINESS_TAINTS[usize::from(!unreachable)];
        let mut taints = without_readiness_taints(node);
        for effect in ["NoSchedule", "NoExecute"] {
            taints.push(json!({"key": key, "effect": effect}));
        }
        node["spec"]["taints"] = Value::Array(taints);
    });
}

enum Job {
    Report(usize, String, Box<NodeHardware>),
    Beat(usize, String),
}

/// The machines: power → boot → agent → Node, and back; the agents'
/// reports and heartbeats. Every 200 ms.
async fn machines(sim: Sim) {
    let connections = Arc::new(tokio::sync::Semaphore::new(AGENT_CONNECTIONS));
    loop {
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut lost = Vec::new();
        let mut jobs = Vec::new();
        {
            let mut w = sim.world.lock().expect("lock");
            for (k, m) in w.machines.iter_mut().enumerate() {
                m.settle(now);
                if m.on && m.up_since.is_none() {
                    m.up_since = Some(now);
                }
                if !m.on && m.up_since.is_some() {
                    m.up_since = None;
                    m.agent_up = false;
                    m.report_due = false;
                    m.registered = false;
                    m.kubelet_down_until = None;
                    m.agent_silent_until = None;
                    lost.push(m.name.clone());
                    continue;
                }
                let Some(since) = m.up_since else { continue };
                if !m.agent_up && now >= since + BOOT {
                    m.agent_up = true;
                    m.report_due = true;
                    m.next_try = now;
                    m.next_beat = now + HEARTBEAT;
                }
                if m.kubelet_down_until.is_some_and(|t| now >= t) {
                    m.kubelet_down_until = None;
                    if m.registered {
                        ready.push((m.name.clone(), m.whole_gpus()));
                    }
                }
                if m.agent_up
                    && !m.registered
                    && m.kubelet_down_until.is_none()
                    && now >= since + BOOT + KUBELET
                {
                    m.registered = true;
                    ready.push((m.name.clone(), m.whole_gpus()));
                }
                if m.agent_silent_until.is_some_and(|t| now >= t) {
                    m.agent_silent_until = None;
                }
                if !m.agent_up || m.in_flight || m.agent_silent_until.is_some() {
                    continue;
                }
                if m.report_due && now >= m.next_try {
                    m.report_due = false;
                    m.in_flight = true;
                    jobs.push(Job::Report(k, m.name.clone(), Box::new(m.hardware())));
                } else if !m.report_due && now >= m.next_beat {
                    m.next_beat = now + HEARTBEAT;
                    m.in_flight = true;
                    jobs.push(Job::Beat(k, m.name.clone()));
                }
            }
        }
        for (name, gpus) in ready {
            node_ready(&sim.api, &name, gpus);
        }
        for name in lost {
            node_not_ready(&sim.api, &name, true);
            // Its pods go with it.
            for p in sim.api.list("v1", "Pod") {
                if p["spec"]["nodeName"] == name.as_str() {
                    let (ns, n) = pod_key(&p);
                    if sim.api.delete("v1", "Pod", &ns, &n) {
                        bump(&sim.stats.pods_deleted);
                    }
                }
            }
        }
        for job in jobs {
            let (sim, connections) = (sim.clone(), connections.clone());
            tokio::spawn(async move {
                let Ok(_permit) = connections.acquire().await else {
                    return;
                };
                let (k, ok) = match job {
                    Job::Report(k, name, hw) => {
                        let r = sim.agent.report(&name, &hw, "soak").await;
                        if let Err(e) = &r {
                            sim.stats.error("report", &name, e);
                        }
                        (k, Some(r.is_ok()))
                    }
                    Job::Beat(k, name) => {
                        let beat = Heartbeat {
                            agent_version: Some("soak".into()),
                            uptime_s: Some(60),
                            gpu_health: Some("ok".into()),
                            assigned: None,
                        };
                        let r = sim.agent.heartbeat(&name, &beat).await;
                        match &r {
                            Ok(_) => bump(&sim.stats.heartbeats),
                            Err(e) => {
                                bump(&sim.stats.heartbeat_errors);
                                sim.stats.error("heartbeat", &name, e);
                            }
                        }
                        (k, None)
                    }
                };
                let mut w = sim.world.lock().expect("lock");
                let m = &mut w.machines[k];
                m.in_flight = false;
                match ok {
                    Some(true) => bump(&sim.stats.reports),
                    Some(false) => {
                        bump(&sim.stats.report_errors);
                        if m.agent_up {
                            m.report_due = true;
                            m.next_try = Instant::now() + REPORT_RETRY;
                        }
                    }
                    None => {}
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pod_key(p: &Value) -> (String, String) {
    (
        p["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
    )
}

/// The stand-in kube-scheduler: a pass a second when anything changed.
async fn scheduler(sim: Sim) {
    let mut seen_rv = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rv = sim.api.resource_version();
        if rv == seen_rv {
            continue;
        }
        let nodes = sim.api.list("v1", "Node");
        let pods = sim.api.list("v1", "Pod");
        let groups = sim.api.list("scheduling.k8s.io/v1beta1", "PodGroup");
        let d = tokio::task::block_in_place(|| accord_lab::binder::decide(&nodes, &pods, &groups));
        bump(&sim.stats.scheduler_passes);
        for b in &d.bind {
            let bound = sim.api.update("v1", "Pod", &b.namespace, &b.pod, |pod| {
                pod["spec"]["nodeName"] = json!(b.node);
                pod["status"] = json!({
                    "phase": "Running",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                });
            });
            if bound.is_some() {
                bump(&sim.stats.pods_bound);
            }
        }
        for u in &d.unschedulable {
            sim.api.update("v1", "Pod", &u.namespace, &u.pod, |pod| {
                let cond = &pod["status"]["conditions"][0];
                if cond["reason"] == "Unschedulable" && cond["message"] == u.message.as_str() {
                    return;
                }
                pod["status"] = json!({
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False",
                                    "reason": "Unschedulable", "message": u.message}],
                });
            });
        }
        seen_rv = sim.api.resource_version();
    }
}

fn pod_object(namespace: &str, name: &str, group: Option<&str>, gpus: u32) -> Value {
    let mut spec = json!({
        "nodeSelector": {"nvidia.com/gpu.product": PRODUCT_LABEL},
        "containers": [{"name": "t", "image": "t", "resources": {
            "requests": {"cpu": "1", "memory": "64Gi"},
            "limits": {"nvidia.com/gpu": gpus.to_string()},
        }}],
    });
    if let Some(g) = group {
        spec["schedulingGroup"] = json!({"podGroupName": g});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": spec,
        "status": {"phase": "Pending"},
    })
}

/// The churn: workloads come and go, hardware changes, Nodes and agents
/// flap, the API server compacts. Once a second.
async fn churn(sim: Sim, nodes: usize, seed: u64, per_min: Option<f64>) {
    let mut rng = Rng::new(seed ^ 0x50a6);
    let mut live: BTreeMap<(String, String), Workload> = BTreeMap::new();
    let mut next = 0u64;
    // Arrivals per second for about half the fleet busy: a workload holds
    // ~1.8 nodes for ~90 s (+ its wait).
    let per_s = per_min.map_or(nodes as f64 * 0.5 / 160.0, |m| m / 60.0);
    let hw_per_s = nodes as f64 / 2000.0;
    let flaps_per_s = nodes as f64 / 5000.0;
    let (mut arrivals, mut hw_changes, mut flaps) = (0.0, 0.0, 0.0);
    let mut compacted = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Instant::now();
        arrivals += per_s;
        while arrivals >= 1.0 {
            arrivals -= 1.0;
            next += 1;
            let w = new_workload(&sim, &mut rng, next, now);
            live.insert((w.namespace.clone(), w.name.clone()), w);
        }
        // Bound, finished, given up.
        let mut bound_pods: BTreeMap<(String, String), u32> = BTreeMap::new();
        let mut busy: BTreeSet<String> = BTreeSet::new();
        for p in sim.api.list("v1", "Pod") {
            let Some(node) = p["spec"]["nodeName"].as_str() else {
                continue;
            };
            busy.insert(node.to_owned());
            let (ns, name) = pod_key(&p);
            let owner = p["spec"]["schedulingGroup"]["podGroupName"]
                .as_str()
                .map_or(name, str::to_owned);
            *bound_pods.entry((ns, owner)).or_default() += 1;
        }
        let mut gone = Vec::new();
        for (key, w) in live.iter_mut() {
            if w.bound_at.is_none() && bound_pods.get(key).copied().unwrap_or(0) >= w.pods {
                w.bound_at = Some(now);
                bump(&sim.stats.workloads_bound);
            }
            match w.bound_at {
                Some(t) if now >= t + w.run_for => {
                    bump(&sim.stats.workloads_finished);
                    gone.push(key.clone());
                }
                None if now >= w.created + w.give_up => {
                    bump(&sim.stats.workloads_given_up);
                    gone.push(key.clone());
                }
                _ => {}
            }
        }
        for key in gone {
            if let Some(w) = live.remove(&key) {
                delete_workload(&sim, &w);
            }
        }
        // Changed hardware: a machine that is up and idle flips MIG mode on
        // a GPU (its identity stays); its agent reports, its Node shows it.
        hw_changes += hw_per_s;
        while hw_changes >= 1.0 {
            hw_changes -= 1.0;
            let mut guard = sim.world.lock().expect("lock");
            let w = &mut *guard;
            let k = w.rng.below(w.machines.len() as u64) as usize;
            let m = &mut w.machines[k];
            if !m.agent_up || busy.contains(&m.name) {
                continue;
            }
            m.flipped = !m.flipped;
            m.report_due = true;
            bump(&sim.stats.hardware_changes);
            if m.registered && m.kubelet_down_until.is_none() {
                let (name, gpus) = (m.name.clone(), m.whole_gpus());
                drop(guard);
                node_ready(&sim.api, &name, gpus);
            }
        }
        // Flaps: a Node NotReady, or an agent silent, for 5–60 s.
        flaps += flaps_per_s;
        while flaps >= 1.0 {
            flaps -= 1.0;
            let mut guard = sim.world.lock().expect("lock");
            let w = &mut *guard;
            let k = w.rng.below(w.machines.len() as u64) as usize;
            let (kubelet, secs) = (w.rng.below(2) == 0, 5 + w.rng.below(56));
            let m = &mut w.machines[k];
            if !m.registered || m.kubelet_down_until.is_some() || m.agent_silent_until.is_some() {
                continue;
            }
            let until = Some(now + Duration::from_secs(secs));
            if kubelet {
                m.kubelet_down_until = until;
                let name = m.name.clone();
                drop(guard);
                bump(&sim.stats.kubelet_flaps);
                node_not_ready(&sim.api, &name, false);
            } else {
                m.agent_silent_until = until;
                bump(&sim.stats.agent_silences);
            }
        }
        if compacted.elapsed() >= COMPACT_EVERY {
            compacted = Instant::now();
            sim.api.compact();
            bump(&sim.stats.compactions);
        }
        let pending = live.values().filter(|w| w.bound_at.is_none()).count();
        let stats = &sim.stats;
        stats
            .workloads_live
            .store(live.len() as u64, Ordering::Relaxed);
        stats
            .workloads_pending
            .store(pending as u64, Ordering::Relaxed);
    }
}

fn new_workload(sim: &Sim, rng: &mut Rng, seq: u64, now: Instant) -> Workload {
    let namespace = format!("team-{}", seq % 5);
    let name = format!("w{seq:06}");
    let shape = rng.below(100);
    // (pods, GPUs per pod, gang, rack topology)
    let (pods, gpus, group, topology) = match shape {
        0..60 => (1 + rng.below(4) as u32, 8, true, rng.below(2) == 0),
        60..90 => (
            1 + rng.below(4) as u32,
            [1, 2, 4][rng.below(3) as usize],
            true,
            false,
        ),
        // No node holds 16 GPUs: never placed, given up.
        90..95 => (2, 16, true, false),
        _ => (1, 8, false, false),
    };
    if group {
        let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": pods}}});
        if topology {
            spec["schedulingConstraints"] = json!({"topology": [{"key": RACK_LABEL}]});
        }
        sim.api.apply(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"namespace": namespace, "name": name},
            "spec": spec,
        }));
    }
    for i in 0..pods {
        let pod = if group {
            format!("{name}-{i}")
        } else {
            name.clone()
        };
        sim.api.apply(pod_object(
            &namespace,
            &pod,
            group.then_some(name.as_str()),
            gpus,
        ));
        bump(&sim.stats.pods_created);
    }
    bump(&sim.stats.workloads_created);
    Workload {
        namespace,
        name,
        pods,
        group,
        created: now,
        bound_at: None,
        run_for: Duration::from_secs(30 + rng.below(121)),
        give_up: if gpus > 8 {
            Duration::from_secs(30 + rng.below(61))
        } else {
            GIVE_UP
        },
    }
}

fn delete_workload(sim: &Sim, w: &Workload) {
    for i in 0..w.pods {
        let pod = if w.group {
            format!("{}-{i}", w.name)
        } else {
            w.name.clone()
        };
        if sim.api.delete("v1", "Pod", &w.namespace, &pod) {
            bump(&sim.stats.pods_deleted);
        }
    }
    if w.group {
        sim.api.delete(
            "scheduling.k8s.io/v1beta1",
            "PodGroup",
            &w.namespace,
            &w.name,
        );
    }
}

/// The bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// VmRSS of `pid`, MiB; `None` when it cannot be read (the process is gone).
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Writes accordd's configuration (tokens, fleet, inventory) into `dir`;
/// returns the accordd.toml path.
fn write_config(
    dir: &Path,
    nodes: usize,
    bmc_url: &str,
    kube_url: &str,
) -> anyhow::Result<PathBuf> {
    private(&dir.join("agent-token"), AGENT_TOKEN)?;
    private(&dir.join("admin-token"), ADMIN_TOKEN)?;
    std::fs::write(dir.join("fleet.toml"), fleet_toml(nodes))?;
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    std::fs::write(
        dir.join("bmcs.toml"),
        format!(
            "# soak-figures: one Redfish stand-in, a system per node.\n\
             [power]\npoll_interval_ms = 1000\non_timeout_s = 60\noff_timeout_s = 60\n\
             resend_after_s = 20\ngraceful_timeout_s = 10\n\n\
             [[bmc]]\nnodes = {:?}\nendpoint = \"{bmc_url}\"\nsystem = \"{{node}}\"\n",
            names
        ),
    )?;
    let q = |p: PathBuf| format!("{:?}", p.display().to_string());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [store]\ndir = {}\n\
         [agents]\ntoken_file = {}\nstale_after_s = 30\n\
         [admin]\ntoken_file = {}\n\
         [fleet]\nfile = {}\n\
         [redfish]\ninventory = {}\n\
         [kubernetes]\nurl = \"{kube_url}\"\n\
         [control]\nmode = \"act\"\nbatch_idle_ms = 1000\nbatch_max_ms = 10000\n\
         bmc_poll_ms = 10000\ntransition_poll_ms = 1000\ntick_ms = 1000\n\
         deadlines = {{ power_on_s = 60, boot_to_agent_s = 120, agent_to_ready_s = 60, \
         power_off_s = 120, unhealthy_after_s = 30 }}\n",
        q(dir.join("store")),
        q(dir.join("agent-token")),
        q(dir.join("admin-token")),
        q(dir.join("fleet.toml")),
        q(dir.join("bmcs.toml")),
    );
    let path = dir.join("accordd.toml");
    std::fs::write(&path, config)?;
    Ok(path)
}

/// Runs the soak; `on_sample` sees each sample as it is taken. Fails when
/// accordd exits or stops answering its RSS.
pub async fn run(options: Options, mut on_sample: impl FnMut(&Sample)) -> anyhow::Result<Figures> {
    anyhow::ensure!(options.nodes > 0, "--nodes must be at least 1");
    let dir = tempfile::Builder::new().prefix("accord-soak").tempdir()?;
    let stats = Arc::new(Stats::default());
    let api = Arc::new(FakeApi::start().await);
    let mut rng = Rng::new(options.seed);
    let start = Instant::now();
    let mut fleet = Vec::new();
    let mut index = BTreeMap::new();
    for k in 0..options.nodes {
        let name = node_name(k);
        // Half the fleet on at the start, booted already.
        let on = rng.below(2) == 0;
        index.insert(name.clone(), k);
        fleet.push(Machine {
            name,
            hw: crate::report(k as u64, options.seed),
            flipped: false,
            on,
            change: None,
            up_since: on.then(|| start.checked_sub(BOOT + KUBELET).unwrap_or(start)),
            agent_up: false,
            report_due: false,
            in_flight: false,
            next_try: start,
            next_beat: start,
            registered: false,
            kubelet_down_until: None,
            agent_silent_until: None,
        });
    }
    let world = Arc::new(Mutex::new(World {
        machines: fleet,
        index,
        rng: Rng::new(options.seed ^ 0xb3c),
    }));
    // The agents' client points at accordd once it serves; the BMCs are
    // up before it starts.
    let placeholder =
        accord_api::Client::new("http://127.0.0.1:9", AGENT_TOKEN, Default::default())?;
    let sim = Sim {
        world,
        stats: stats.clone(),
        api: api.clone(),
        agent: placeholder,
    };
    let (bmc_url, bmc_task) = bmc::start(sim.clone()).await?;
    let config = write_config(dir.path(), options.nodes, &bmc_url, &api.url)?;
    let mut cmd = Command::new(&options.accordd);
    cmd.args(&options.accordd_prefix)
        .args(["run", "--config"])
        .arg(&config)
        .env("ACCORD_LOG", "info,accordd::api=warn")
        .env("NO_COLOR", "1")
        .env_remove("NOTIFY_SOCKET");
    let mut accordd = Process::spawn("accordd", &mut cmd, &options.log);
    let pid = accordd.id();
    let url = accord_testkit::daemon::wait_serving(&mut accordd).await;
    let served = Instant::now();
    let rss_at_start_mib = rss_mib(pid).unwrap_or(0.0);
    tracing::info!(%url, pid, nodes = options.nodes, "accordd serving; the fleet starts");
    let timeout = accord_api::client::ClientOptions {
        timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let sim = Sim {
        agent: accord_api::Client::new(&url, AGENT_TOKEN, timeout.clone())?,
        ..sim
    };
    let admin = accord_api::Client::new(&url, ADMIN_TOKEN, timeout)?;
    let tasks = [
        bmc_task,
        tokio::spawn(machines(sim.clone())),
        tokio::spawn(scheduler(sim.clone())),
        tokio::spawn(churn(
            sim.clone(),
            options.nodes,
            options.seed,
            options.workloads_per_min,
        )),
    ];
    let mut samples = Vec::new();
    let end = served + options.duration;
    let mut next = served;
    let outcome = loop {
        let Some(rss) = rss_mib(pid) else {
            break Err(anyhow::anyhow!(
                "accordd (pid {pid}) is gone ({:?}); {}",
                accordd.exited(),
                accordd.tail()
            ));
        };
        if let Some(status) = accordd.exited() {
            break Err(anyhow::anyhow!(
                "accordd exited ({status}); {}",
                accordd.tail()
            ));
        }
        let status = admin.status().await.ok();
        let mut stages = BTreeMap::new();
        for n in status.iter().flat_map(|s| &s.nodes) {
            let stage = serde_json::to_value(n.stage)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{:?}", n.stage));
            *stages.entry(stage).or_insert(0) += 1;
        }
        let powered = sim
            .world
            .lock()
            .expect("lock")
            .machines
            .iter()
            .filter(|m| m.on)
            .count();
        let sample = Sample {
            at_s: served.elapsed().as_secs_f64(),
            rss_mib: rss,
            round: status.as_ref().map(|s| s.round),
            stages,
            workloads: Stats::get(&stats.workloads_live) as usize,
            pending: Stats::get(&stats.workloads_pending) as usize,
            powered,
        };
        on_sample(&sample);
        samples.push(sample);
        if Instant::now() >= end {
            break Ok(());
        }
        next += options.sample_every;
        tokio::time::sleep_until(next.min(end)).await;
    };
    if outcome.is_ok() {
        // Stopped as systemd does, the fleet still running; a clean exit
        // is part of surviving the soak.
        accordd.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = accordd.exited() {
                break Ok(status);
            }
            if Instant::now() >= deadline {
                break Err(anyhow::anyhow!(
                    "accordd still running 30 s after SIGTERM at the end of the soak; {}",
                    accordd.tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        for t in &tasks {
            t.abort();
        }
        let status = status?;
        anyhow::ensure!(
            status.success(),
            "accordd exited {status} on SIGTERM; {}",
            accordd.tail()
        );
    }
    for t in &tasks {
        t.abort();
    }
    outcome?;
    Ok(Figures {
        options,
        samples,
        stats,
        rss_at_start_mib,
        store_bytes: dir_bytes(&dir.path().join("store")),
    })
}
