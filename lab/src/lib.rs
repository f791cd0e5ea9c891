//! The local lab: one machine playing a datacenter, with `accordd` running
//! against it unmodified (a child process, its own config file, the same
//! format as production, HTTP to everything). The `accord-lab` binary
//! ([`cli`]) is what `accordd lab` runs.
//!
//! - BMCs: `sushy-emulator --fake`, one system per fleet node, reached
//!   through [`proxy::BmcProxy`] (which logs what accordd sends and plays
//!   broken machines);
//! - Kubernetes ([`cluster`]): by default the upstream control plane
//!   ([`upstream`]: etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler; Accord installed with kubectl as an admin would,
//!   accordd with its own ServiceAccount's token, a 403 fails the lab);
//!   or the in-repo fake API server (real list/watch over HTTP; chaos and
//!   HA runs, fast tests);
//! - machines: when a node's BMC shows On, after `boot_delay_ms` its agent
//!   starts (accord-agent's own `run`, replaying the machine's recording:
//!   [`recordings`]) and after `kubelet_delay_ms` its Kubernetes Node
//!   registers Ready, with the NVIDIA device plugin's resources, GPU
//!   Feature Discovery's labels and (where Kubernetes serves DRA) the
//!   NVIDIA DRA driver's ResourceSlice, all from that recording
//!   ([`kubelet`]), not from the fleet file; upstream, its kubelet keeps
//!   the Node's Lease and runs what is bound to it ([`kubelets`]); when
//!   the BMC shows Off all stop;
//! - a scheduler: upstream's kube-scheduler; on the fake API, [`binder`],
//!   written independently of the planner, binds pending pods to Ready
//!   nodes that fit, or marks them Unschedulable;
//! - a scenario ([`scenario`]): workloads submitted over time, finished
//!   after a run time;
//! - with `[lab.ha] replicas` ≥ 2 ([`ha`]): several accordd replicas
//!   electing a leader on a Lease, what each sends told apart, and a
//!   fault for the leader (killed or paused as machines power on).
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
pub mod bios;
pub mod builtins;
pub mod chaos;
pub mod cli;
pub mod cluster;
mod daemon;
pub mod fixtures;
mod gpus;
pub use gpus::{CLIENT_APP, DEVICE_PLUGIN_APP, DRA_DRIVER_APP};
pub mod ha;
pub mod kubelet;
mod kubelets;
pub mod kueue;
mod mig_manager;
pub mod proxy;
pub mod recordings;
pub mod scenario;
mod summary;
pub mod upstream;
mod wait;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::fleet::Fleet;
use accord_testkit::fake_api::{FakeApi, KubeVersion};
use anyhow::Context;
pub use cluster::Cluster;
use serde_json::Value;
use tokio::time::Instant;

use accord_api::control::{ControlStatus, Mode, ModelSource};
pub use ha::HaSummary;
pub use recordings::{published_objects, resolve_recordings, MachineRecording, Recording};
pub use scenario::Scenario;
pub use summary::{NodeSummary, ProvisioningSummary, Summary, WorkloadSummary};

const ADMIN_TOKEN: &str = "lab-admin-token";
const AGENT_TOKEN: &str = "lab-agent-token";
/// accordd's mig-parted configs file, in the lab's directory.

#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The accordd binary to run.
    pub accordd: PathBuf,
    /// Arguments before accordd's own (`run --config FILE`,
    /// `check-config FILE`): a bench binary that plays accordd.
    pub accordd_prefix: Vec<String>,
    /// accordd's output (stdout and stderr): a file, or `None` for this
    /// process's stderr. Never this process's stdout, which is the
    /// summary's (`--json`). With several replicas each has its own file,
    /// named after this one with its identity before the extension
    /// (`accordd.log`: `accordd.accordd-a.log`, ...).
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
    /// Its Jobs (namespace, name, pods it runs at once): their pods, made
    /// by the job controller once Kueue admits the job, join `pods` as
    /// they appear.
    jobs: Vec<(String, String, usize)>,
    /// The ProvisioningRequest Kueue made for its job, once Provisioned.
    provisioned: Option<ProvisionedSeen>,
    others: Vec<Value>,
    bound: Option<Instant>,
    finished: Option<Instant>,
    nodes: BTreeSet<String>,
    /// Accord's last word when it cannot place it.
    cannot_place: Option<String>,
}

/// A ProvisioningRequest the lab saw turn Provisioned=True.
#[derive(Debug, Clone)]
struct ProvisionedSeen {
    name: String,
    class: String,
    at: Instant,
    /// The Nodes registered Ready then.
    ready_nodes: Vec<String>,
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
    /// Its GPUs while it is booted (agent started) and its recording has
    /// an NVML view: the twin its agent and kubelet share, fresh from the
    /// recording at each boot (`world::machines`).
    gpus: Option<accord_agent::mig::replay::ReplayedGpus>,
    /// Repartitions its GPUs carried out in earlier boots.
    repartitions: u64,
    /// Its software hangs ([`Lab::hang`]): agent and kubelet stopped while
    /// the BMC shows On, until the machine is powered off.
    hung: bool,
    /// Upstream: the DaemonSet pods the real controller made and the
    /// scheduler bound to it (`ns/name`), over the whole run.
    daemonset_pods: BTreeSet<String>,
    /// When it was last seen up with none of the scenario's pods (for
    /// what the lab says of a node accordd leaves on).
    idle_since: Option<Instant>,
    /// When its kubelet stand-in registered it Ready, each boot.
    registered_at: Vec<Instant>,
}

#[derive(Debug, Default)]
struct Record {
    subs: Vec<SubState>,
    nodes: BTreeMap<String, NodeSim>,
    /// Pod → (bound at, GPUs, node).
    bound: BTreeMap<(String, String), (Instant, f64, String)>,
    used_gpu_s: f64,
    explained: BTreeSet<String>,
    /// Repartitions the mig-manager stand-in carried out, per machine (the
    /// rest of a machine's repartitions are its agent's).
    mig_operator: BTreeMap<String, u64>,
    /// Per machine with the GPU Operator's operands: how often its device
    /// plugin started, and how often its GPUs changed while it ran.
    /// (node, operand `app`) → what the GPU Operator's operand stand-in
    /// saw there.
    operands: BTreeMap<(String, String), DevicePluginSeen>,
    /// Every pod the binder bound, from when until deleted or evicted:
    /// what the busy-node count is judged against.
    bindings: Vec<chaos::safety::BindingSpan>,
    /// Upstream: the scenario's pods the kubelet stand-in found bound to
    /// a Node that did not carry Accord's topology labels yet
    /// (`ns/name → node`).
    bound_before_labels: Vec<String>,
    /// When the scenario's timed submissions start counting (`at_ms`):
    /// once accordd runs and every machine on at the start has reported
    /// to it (the datacenter was running before the scenario began), so a
    /// submission never races the first reports.
    clock: Option<Instant>,
}

/// The GPU Operator's device plugin on one machine, as the lab saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevicePluginSeen {
    /// Its pod started (each start enumerates the GPUs).
    pub starts: u32,
    /// Its pod stopped (its deploy label paused).
    pub stops: u32,
    /// The GPUs changed (MIG) while its pod ran: what mig-manager pauses
    /// it to avoid.
    pub changed_under_it: u32,
}

pub struct Lab {
    pub scenario: Scenario,
    pub fleet: Fleet,
    /// The Kubernetes version the fake API server emulates.
    pub kube_version: KubeVersion,
    /// What each machine replays.
    pub recordings: Arc<BTreeMap<String, MachineRecording>>,
    /// The lab's Kubernetes: the upstream control plane, or the fake API.
    pub api: Cluster,
    /// Upstream: the admin's kubeconfig (`kubectl --kubeconfig`).
    pub kubeconfig: Option<PathBuf>,
    /// Upstream: accordd's kubeconfig (its ServiceAccount's token).
    accordd_kubeconfig: Option<PathBuf>,
    /// Upstream: its components and versions (`kube-apiserver v1.37.2`).
    pub control_plane: Vec<String>,
    /// Submissions skipped because the emulated version does not serve
    /// what they are made of, with why.
    pub skipped: Vec<String>,
    pub emulator: accord_testkit::sushy::Peer,
    pub proxy: proxy::BmcProxy,
    pub dir: tempfile::TempDir,
    /// accordd's configuration (with several replicas: the first's).
    pub config: PathBuf,
    /// accordd's API (with several replicas: the first's).
    pub daemon_url: String,
    options: LabOptions,
    /// The accordd processes: one, or the replicas (`[lab.ha]`).
    replicas: Arc<ha::Replicas>,
    /// What the lab saw of the Lease and the fault for the leader.
    ha: Arc<Mutex<ha::HaRecord>>,
    record: Arc<Mutex<Record>>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// accordd's API, as the admin (a chaos run's: it has one accordd).
    admin: accord_api::Client,
    /// The chaos run's schedule and state (`[lab.chaos]`, `--chaos`).
    chaos: Option<chaos::Chaos>,
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
    api: Cluster,
    record: Arc<Mutex<Record>>,
    fleet: Arc<Fleet>,
    scenario: Arc<Scenario>,
    emulator_url: String,
    /// Where the machines' agents reach accordd: accordd itself, or the
    /// agent proxy in a chaos run; with several replicas, every one.
    agent_urls: Vec<String>,
    /// accordd: its API as the admin (with several replicas, the
    /// leader's).
    daemons: Arc<ha::Replicas>,
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
        let mut skipped = scenario.skip_unserved(kube);
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
            bios::machines(&scenario, &fleet),
            scenario
                .lab
                .bmc_sessions
                .then(|| (BMC_USER.to_owned(), BMC_PASSWORD.to_owned())),
        )
        .await?;
        let (runtime_config, _) = scenario.runtime_config_for(kube);
        let (api, kubeconfig, accordd_kubeconfig, control_plane) = match scenario.kubernetes() {
            scenario::KubernetesKind::Fake => {
                let resources =
                    accord_testkit::fake_api::resources_with(kube, true, &runtime_config)
                        .map_err(|e| anyhow::anyhow!("lab.runtime_config: {e}"))?;
                let api =
                    FakeApi::start_version_with(kube, resources, Duration::from_millis(500)).await;
                (Cluster::Fake(Arc::new(api)), None, None, Vec::new())
            }
            scenario::KubernetesKind::Upstream => {
                let started = upstream::start(&scenario, kube, &runtime_config, dir.path()).await?;
                for why in &started.left_out {
                    tracing::warn!(target: "lab", kube_version = %kube, "{why}");
                }
                skipped.extend(started.left_out.iter().cloned());
                (
                    Cluster::Upstream(Arc::new(started.upstream)),
                    Some(started.admin_kubeconfig),
                    Some(started.accordd_kubeconfig),
                    started.components,
                )
            }
        };
        if fleet
            .nodes
            .iter()
            .any(|n| n.mig_via == accord::fleet::MigVia::GpuOperator)
        {
            // What the GPU Operator installs: its namespace and
            // mig-manager's ConfigMap with NVIDIA's configurations.
            mig_manager::install(&api, &scenario.lab.gpu_operator);
        }
        let ha_settings = scenario.lab.ha.clone();
        let identities = ha::identities(ha_settings.replicas);
        let several = ha_settings.enabled();
        let ports: Vec<u16> = identities
            .iter()
            .map(|_| accord_testkit::sushy::free_port())
            .collect();
        let urls: Vec<String> = ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect();
        let daemon_url = urls[0].clone();
        // A chaos run: the agents reach accordd through the agent proxy,
        // which notes what accordd acknowledged.
        let chaos = match &scenario.lab.chaos {
            Some(options) => {
                let agents = chaos::agents::AgentProxy::start(&daemon_url).await?;
                let names: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
                Some(chaos::Chaos::new(options.clone(), &names, agents))
            }
            None => None,
        };
        let agent_urls = match &chaos {
            Some(c) => vec![c.agents.url.clone()],
            None => urls.clone(),
        };
        let d = dir.path();
        private(&d.join("admin-token"), ADMIN_TOKEN)?;
        private(&d.join("agent-token"), AGENT_TOKEN)?;
        std::fs::write(d.join("fleet.toml"), scenario.fleet_toml())?;
        let mut control = scenario.control.clone();
        // mig-manager's volume lags the API by the lab's sync delay:
        // accordd waits twice that before it labels (unless the scenario
        // says otherwise).
        control
            .entry("mig_config_sync_s")
            .or_insert(toml::Value::from(
                (scenario.lab.gpu_operator.volume_sync_ms * 2).div_ceil(1000) as i64,
            ));
        control.insert(
            "mode".into(),
            toml::Value::from(match scenario.lab.mode {
                Mode::Act => "act",
                Mode::Observe => "observe",
            }),
        );
        let names: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
        let mut replicas = Vec::new();
        for ((identity, port), url) in identities.iter().zip(&ports).zip(&urls) {
            // One accordd: its files in the lab's directory, the proxy's
            // and the API server's main listeners. Several: each its own
            // directory and listeners (what it sends told apart).
            // Upstream: no URL, accordd finds its kubeconfig ($KUBECONFIG).
            let (files, bmc_url, kube_url, ha_section) = match (several, api.fake()) {
                (true, Some(fake)) => {
                    let files = d.join(identity);
                    std::fs::create_dir_all(&files)
                        .with_context(|| format!("{}: cannot make", files.display()))?;
                    (
                        files,
                        proxy.listen_for(identity).await?,
                        Some(fake.listen_tagged(identity).await),
                        Some(ha_settings.section(identity)),
                    )
                }
                (true, None) => anyhow::bail!("lab.ha: several replicas run on the fake API"),
                (false, fake) => (
                    d.to_owned(),
                    proxy.url.clone(),
                    fake.map(|f| f.url.clone()),
                    None,
                ),
            };
            let files = Files {
                lab: d,
                own: &files,
            };
            let config = files.write(
                &scenario,
                &names,
                *port,
                &bmc_url,
                kube_url.as_deref(),
                &control,
                ha_section,
                chaos.is_some(),
            )?;
            // Fail here, with accordd's own words, rather than in the child.
            daemon::check_config(&options, &config, accordd_kubeconfig.as_deref())?;
            let admin = accord_api::Client::new(
                url,
                ADMIN_TOKEN,
                accord_api::client::ClientOptions {
                    timeout: Duration::from_secs(10),
                    ..Default::default()
                },
            )?;
            replicas.push(ha::Replica {
                identity: identity.clone(),
                url: url.clone(),
                store: files.own.join("store"),
                log: options.daemon_log.as_deref().map(|l| {
                    if several {
                        replica_log(l, identity)
                    } else {
                        l.to_owned()
                    }
                }),
                config,
                admin,
                child: Mutex::new(None),
                paused: Default::default(),
            });
        }
        let config_path = replicas[0].config.clone();
        let admin = replicas[0].admin.clone();
        let replicas = Arc::new(ha::Replicas {
            list: replicas,
            api: api.clone(),
            ha: several,
        });

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
            agent_urls,
            daemons: replicas.clone(),
            dir: d.to_owned(),
            http,
            narrate: options.narrate,
            started,
            kube,
            recordings: recordings.clone(),
        };
        let ha_record = Arc::new(Mutex::new(ha::HaRecord::default()));
        let mut tasks = vec![
            tokio::spawn(world::machines(ctx.clone())),
            tokio::spawn(world::submitter(ctx.clone())),
            tokio::spawn(mig_manager::run(ctx.clone())),
        ];
        if api.fake().is_some() {
            // The fake API has no scheduler and no controllers: the lab
            // plays kube-scheduler and the taint-based eviction.
            tasks.push(tokio::spawn(world::scheduler(ctx.clone())));
            tasks.push(tokio::spawn(world::evictor(ctx.clone())));
        } else {
            // Upstream's scheduler binds and its controllers evict; the
            // machines' kubelets keep their Leases and run what is bound.
            tasks.push(tokio::spawn(kubelets::leases(ctx.clone())));
            tasks.push(tokio::spawn(kubelets::pods(ctx.clone())));
        }
        tasks.push(tokio::spawn(world::watch_status(ctx)));
        if several {
            tasks.push(tokio::spawn(ha::watch_lease(
                api.clone(),
                ha_record.clone(),
                options.narrate,
            )));
            say!(options, replicas = %replicas.list.iter().map(|r| format!("{} {}", r.identity, r.url)).collect::<Vec<_>>().join(", "), "{} accordd replicas electing a leader on the Lease {}/{}", replicas.list.len(), ha::NAMESPACE, ha::LEASE_NAME);
        }
        let kubernetes = if control_plane.is_empty() {
            format!("fake Kubernetes API (Kubernetes {kube})")
        } else {
            format!("upstream control plane ({})", control_plane.join(", "))
        };
        say!(options, dir = %d.display(), nodes = fleet.nodes.len(), bmcs = %emulator.url(), kube = %api.url(), "lab up: {} emulated BMCs, {kubernetes}{}, accordd config {}", fleet.nodes.len(), kube.dra_api_version().map_or(", no DRA".to_owned(), |v| format!(", DRA {v}")), config_path.display());
        if let Some(k) = &kubeconfig {
            say!(options, kubeconfig = %k.display(), "kubectl --kubeconfig {} get nodes,pods,resourceclaims -A", k.display());
        }
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
            kubeconfig,
            accordd_kubeconfig,
            control_plane,
            emulator,
            proxy,
            dir,
            config: config_path,
            daemon_url,
            options,
            replicas,
            ha: ha_record,
            record,
            started,
            tasks,
            admin,
            chaos,
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

    /// accordd's store directory (`[store] dir` in the lab's accordd.toml;
    /// with several replicas, the first's).
    /// The BMCs' credentials file accordd's inventory names
    /// (`lab.bmc_sessions`; [`write_bmc_credentials`] changes it).
    pub fn bmc_credentials_file(&self) -> PathBuf {
        self.dir.path().join("bmc-credentials.toml")
    }

    pub fn store_dir(&self) -> PathBuf {
        self.replicas.list[0].store.clone()
    }

    /// accordd's last control round (`GET /v1/status`); with several
    /// replicas, the leader's (per the Lease), else the first that
    /// answers.
    pub async fn status(&self) -> Option<ControlStatus> {
        self.replicas.status().await
    }

    /// Resets accordd sent for `node`, as the emulator logged them (a
    /// broken node's dropped ones never reach it).
    pub fn emulator_resets(&self, node: &str) -> usize {
        self.emulator
            .count(&format!("POST {}", proxy::reset_path(node)))
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

    /// Each boot the lab measured: (node, seconds from the power-on Reset
    /// accordd sent, as the BMC proxy logged it, to the Node registered
    /// Ready by the lab's kubelet stand-in), in the order they came up.
    pub fn boots_measured(&self) -> Vec<(String, f64)> {
        let log = self.proxy.log();
        let r = self.record.lock().expect("lock");
        let mut out: Vec<(Instant, String, f64)> = Vec::new();
        for (name, n) in &r.nodes {
            let path = proxy::reset_path(name);
            for &ready in &n.registered_at {
                let reset = log
                    .iter()
                    .filter(|l| l.power_on && !l.dropped && l.path == path && l.at <= ready)
                    .map(|l| l.at)
                    .max();
                if let Some(reset) = reset {
                    out.push((
                        ready,
                        name.clone(),
                        ready.duration_since(reset).as_secs_f64(),
                    ));
                }
            }
        }
        out.sort_by_key(|a| a.0);
        out.into_iter().map(|(_, n, s)| (n, s)).collect()
    }

    /// Upstream: the scenario's pods found bound to a Node that did not
    /// carry Accord's topology labels yet (`ns/name→node`).
    pub fn pods_bound_before_labels(&self) -> Vec<String> {
        self.record
            .lock()
            .expect("lock")
            .bound_before_labels
            .clone()
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
}

impl Lab {
    /// A machine's GPUs while it is booted: the handle its agent and its
    /// kubelet stand-in share (MIG commands, busy processes); `None` while
    /// it is off or when its recording has no NVML view.
    pub fn machine_gpus(&self, node: &str) -> Option<accord_agent::mig::replay::ReplayedGpus> {
        let r = self.record.lock().expect("lock");
        r.nodes.get(node).and_then(|n| n.gpus.clone())
    }

    /// What the GPU Operator's device plugin stand-in saw on `node`
    /// (`lab.machines.NODE.gpu_operator_operands`).
    pub fn device_plugin(&self, node: &str) -> DevicePluginSeen {
        self.operand(node, gpus::DEVICE_PLUGIN_APP)
    }

    /// What the GPU Operator's operand `app` stand-in saw on `node`
    /// (`gpus::DRA_DRIVER_APP`, `gpus::CLIENT_APP`, a validator's).
    pub fn operand(&self, node: &str, app: &str) -> DevicePluginSeen {
        let r = self.record.lock().expect("lock");
        r.operands
            .get(&(node.to_owned(), app.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// MIG repartitions a machine's GPUs carried out since the lab started
    /// (commands that changed them, by its agent or the mig-manager).
    pub fn repartitions(&self, node: &str) -> u64 {
        let r = self.record.lock().expect("lock");
        r.nodes.get(node).map_or(0, |n| {
            n.repartitions + n.gpus.as_ref().map_or(0, |g| g.repartitions())
        })
    }
}

impl Lab {
    /// The machine's software hangs: its agent stops and its kubelet stops
    /// posting status (the Node goes NotReady, tainted unreachable), while
    /// the BMC still shows it On; a power cycle brings it back. False when
    /// the machine is not up.
    pub fn hang(&self, node: &str) -> bool {
        let stop = {
            let mut r = self.record.lock().expect("lock");
            let Some(sim) = r.nodes.get_mut(node).filter(|s| s.on && s.registered) else {
                return false;
            };
            sim.hung = true;
            sim.agent.take()
        };
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        world::node_lost(&self.api, node);
        true
    }
}

/// [`Lab::machine_gpus`] for the lab's tasks.
fn machine_gpus(ctx: &Ctx, node: &str) -> Option<accord_agent::mig::replay::ReplayedGpus> {
    let r = ctx.record.lock().expect("lock");
    r.nodes.get(node).and_then(|n| n.gpus.clone())
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

/// accordd's last round; `None` while it is not up (or has no round yet).
/// With several replicas, the leader's ([`ha::Replicas::status`]).
async fn fetch_status(daemons: &ha::Replicas) -> Option<ControlStatus> {
    daemons.status().await
}

/// A replica's log file: `log` with its identity before the extension.
fn replica_log(log: &Path, identity: &str) -> PathBuf {
    let stem = log
        .file_stem()
        .map_or_else(|| "accordd".into(), |s| s.to_string_lossy().into_owned());
    let name = match log.extension() {
        Some(ext) => format!("{stem}.{identity}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{identity}"),
    };
    log.with_file_name(name)
}

/// The BMCs' account (`lab.bmc_sessions`).
pub const BMC_USER: &str = "accord";
pub const BMC_PASSWORD: &str = "lab-bmc-password";

/// Writes the BMCs' credentials file (mode 0600, replaced whole as an
/// admin's tool replaces it): accordd reads it again when it changes.
pub fn write_bmc_credentials(file: &Path, password: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = file.with_extension("new");
    std::fs::write(
        &tmp,
        format!("username = \"{BMC_USER}\"\npassword = \"{password}\"\n"),
    )?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, file)
}

/// Where one accordd's files go: the lab's directory (the shared ones:
/// tokens, fleet file, mig-parted configs) and its own (accordd.toml,
/// bmcs.toml, store; the lab's directory itself with one accordd).
struct Files<'a> {
    lab: &'a Path,
    own: &'a Path,
}

impl Files<'_> {
    /// Writes the BMC inventory and accordd.toml (`[ha]` when given) for
    /// an accordd listening on `port`, reaching the BMCs at `bmc_url` and
    /// Kubernetes at `kube_url`: accordd.toml's path.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        scenario: &Scenario,
        names: &[String],
        port: u16,
        bmc_url: &str,
        kube_url: Option<&str>,
        control: &toml::Table,
        ha_section: Option<toml::Table>,
        chaos: bool,
    ) -> anyhow::Result<PathBuf> {
        let (d, own) = (self.lab, self.own);
        let inventory = format!(
            "# The lab's BMCs: sushy-emulator systems behind the lab's proxy.\n\
             [power]\npoll_interval_ms = 500\non_timeout_s = {}\nresend_after_s = 20\n\
             graceful_timeout_s = 20\n\n[[bmc]]\nnodes = {}\nendpoint = \"{}\"\nsystem = \"{{node}}\"\n",
            scenario.lab.power_on_timeout_s,
            toml::Value::from(names.to_vec()),
            bmc_url
        );
        let mut inventory = inventory + &bios::inventory_toml(scenario)?;
        let mut defaults = String::new();
        if chaos {
            // A hang holds an answer past this (the default is 30 s).
            defaults.push_str(&format!(
                "# Chaos run: BMC hangs are held past this.\nrequest_timeout_ms = {}\n",
                chaos::REDFISH_TIMEOUT_MS
            ));
        }
        if scenario.lab.bmc_sessions {
            let file = self.lab.join("bmc-credentials.toml");
            write_bmc_credentials(&file, BMC_PASSWORD)?;
            defaults.push_str(&format!(
                "# The BMCs ask for credentials (lab.bmc_sessions).\ncredentials_file = {}\n",
                toml::Value::from(file.display().to_string())
            ));
        }
        if !defaults.is_empty() {
            inventory.push_str(&format!("\n[defaults]\n{defaults}"));
        }
        std::fs::write(own.join("bmcs.toml"), inventory)?;
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
        config.insert(
            "store".into(),
            table(vec![("dir", path(own.join("store")))]),
        );
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
            table(vec![("inventory", path(own.join("bmcs.toml")))]),
        );
        if let Some(url) = kube_url {
            config.insert(
                "kubernetes".into(),
                table(vec![("url", toml::Value::from(url))]),
            );
        }
        config.insert("control".into(), toml::Value::Table(control.clone()));
        if let Some(ha) = ha_section {
            config.insert("ha".into(), toml::Value::Table(ha));
        }
        let config_path = own.join("accordd.toml");
        std::fs::write(
            &config_path,
            format!(
                "# Written by the lab (`accordd lab`): accordd's configuration for this lab.\n{}",
                toml::to_string(&config)?
            ),
        )?;
        Ok(config_path)
    }
}
