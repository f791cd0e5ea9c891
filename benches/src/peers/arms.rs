//! The arms of `peer-figures`, each on a fresh upstream control plane (the
//! lab's pinned Kubernetes, its PodGroup API and gates on, as the lab's
//! default scenario runs it) and driven by one loop ([`drive`]): it submits
//! the trace, deletes each job `run_s` after its pods are all bound, plays
//! the kubelets of a peer's Nodes, and folds what it sees into
//! [`Figures`].
//!
//! - **accord**: the lab (sushy-emulator BMCs, agents, its kubelet
//!   stand-in) with accordd in act mode: a machine is powered on through
//!   its BMC, boots `boot_s`, then registers its Node.
//! - **karpenter**, **karpenter-affinity**: Karpenter's kwok provider (one
//!   NodePool per rack, `limits.nodes: 4`, `WhenEmpty` after the idle
//!   time): its Node is made at once and turns Ready `boot_s` later (the
//!   kubelet stand-in here, [`PeerKubelets`]).
//! - cluster-autoscaler: not served by the module proxy (the note and the
//!   report say what was tried).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accord_lab::cluster::{Cluster, Upstream};
use accord_testkit::control_plane::{ControlPlane, Options};
use accord_testkit::process::Process;
use anyhow::Context;
use serde_json::{json, Value};

use super::measure::{Figures, Measure, Seen};
use super::trace::{self, Job, NAMESPACE, NODES_PER_RACK, RACKS, RACK_LABEL};

/// The arms, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    Accord,
    Karpenter,
    KarpenterAffinity,
}

impl Arm {
    pub const ALL: [Arm; 3] = [Arm::Accord, Arm::Karpenter, Arm::KarpenterAffinity];

    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Accord => "accord",
            Arm::Karpenter => "karpenter",
            Arm::KarpenterAffinity => "karpenter-affinity",
        }
    }

    pub fn parse(s: &str) -> Option<Arm> {
        Arm::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// What every arm shares.
#[derive(Debug, Clone)]
pub struct Settings {
    pub horizon_s: f64,
    /// A machine's boot: powered (a peer: Node made) to Node Ready.
    pub boot_s: f64,
    /// Idle time before a machine is shut (Accord's
    /// `idle_power_off_after_s`, Karpenter's `consolidateAfter`).
    pub idle_s: f64,
    /// The Kubernetes minor every arm runs.
    pub kube_minor: u32,
    /// Where each arm's logs go.
    pub out: PathBuf,
    /// This binary (accordd, for the Accord arm, runs as it with
    /// `--accordd`).
    pub exe: PathBuf,
}

/// The gates and API the trace's PodGroups need, as the lab's default
/// scenario turns them on.
const RUNTIME_CONFIG: [&str; 1] = ["scheduling.k8s.io/v1beta1=true"];
const FEATURE_GATES: [&str; 2] = [
    "GenericWorkload=true",
    "TopologyAwareWorkloadScheduling=true",
];
/// The node lifecycle timings the lab runs with (lab/src/upstream.rs).
const CONTROLLER_MANAGER_ARGS: [&str; 2] = [
    "--node-monitor-grace-period=10s",
    "--node-monitor-period=2s",
];

/// Runs `arm` on `jobs` and measures it.
pub async fn run(
    arm: Arm,
    trace_name: &str,
    jobs: &[Job],
    s: &Settings,
) -> anyhow::Result<Figures> {
    match arm {
        Arm::Accord => accord(trace_name, jobs, s).await,
        Arm::Karpenter | Arm::KarpenterAffinity => karpenter(arm, trace_name, jobs, s).await,
    }
}

fn accord_scenario(s: &Settings) -> String {
    let mut fleet = format!(
        "[fleet.policy]\nidle_power_off_after_s = {}\n\n\
         [fleet.profiles.h100]\ngpus = 8\ngpu_model = \"NVIDIA H100 80GB HBM3\"\n\
         gpus_per_pcie_root = 4\ncpu = \"4\"\nmemory = \"1500Gi\"\npower_kw = 10.2\n",
        s.idle_s as u64
    );
    for r in 1..=RACKS {
        fleet.push_str(&format!("\n[[fleet.racks]]\nname = \"r{r}\"\n"));
    }
    for r in 1..=RACKS {
        for n in 1..=NODES_PER_RACK {
            fleet.push_str(&format!(
                "\n[[fleet.nodes]]\nname = \"r{r}-n{n}\"\nrack = \"r{r}\"\nprofile = \"h100\"\n"
            ));
        }
    }
    let quoted = |v: &[&str]| {
        v.iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "[lab]\nmode = \"act\"\nkubernetes = \"upstream\"\nkube_version = \"1.{minor}\"\n\
         boot_delay_ms = {boot}\nkubelet_delay_ms = 0\nheartbeat_ms = 2000\n\
         power_on_timeout_s = 120\nmax_s = {max}\nkubelet_starting_taint = true\n\
         runtime_config = [{rc}]\nfeature_gates = [{fg}]\n\n\
         [control]\nbmc_poll_ms = 5000\ntransition_poll_ms = 1000\n\n{fleet}",
        minor = s.kube_minor,
        boot = (s.boot_s * 1000.0) as u64,
        max = (s.horizon_s as u64) * 4 + 600,
        rc = quoted(&RUNTIME_CONFIG),
        fg = quoted(&FEATURE_GATES),
    )
}

async fn accord(trace_name: &str, jobs: &[Job], s: &Settings) -> anyhow::Result<Figures> {
    use accord_lab::{Lab, LabOptions, Scenario};
    let scenario = Scenario::parse(&accord_scenario(s), Path::new("peer-figures"))?;
    let lab = Lab::start(
        scenario,
        LabOptions {
            accordd_prefix: vec!["--accordd".into()],
            daemon_log: Some(s.out.join(format!("{trace_name}-accord-accordd.log"))),
            ..LabOptions::new(&s.exe)
        },
    )
    .await?;
    lab.start_daemon()?;
    lab.wait_status("accordd's first round", Duration::from_secs(120), |_| true)
        .await?;
    let lab = Arc::new(lab);
    let cluster = lab.api.clone();
    let powered = {
        let lab = Arc::clone(&lab);
        move || lab.nodes_on()
    };
    let jobs = jobs.to_vec();
    let s2 = s.clone();
    let name = trace_name.to_owned();
    let figures = tokio::task::spawn_blocking(move || {
        prepare_namespace(&cluster)?;
        drive(&cluster, &jobs, &s2, false, None, powered, "accord", &name)
    })
    .await??;
    drop(lab);
    Ok(figures)
}

/// The instance type every NodePool offers: the lab's machine (8 H100s).
fn instance_types() -> Value {
    json!([{
        "name": "h100-8gpu",
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": "32", "memory": "1500Gi", "nvidia.com/gpu": "8", "pods": "110"},
        "offerings": [{"Price": 98.32, "Available": true, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["dc-1"]}]}],
    }])
}

/// One NodePool per rack, as Karpenter's docs advise for a domain a pod
/// selects (a label in the template); weights make the order fixed, as
/// cluster-autoscaler's priority expander would.
fn node_pools(s: &Settings) -> Vec<Value> {
    let mut out = vec![json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
    })];
    for r in 1..=RACKS {
        out.push(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": format!("rack-r{r}")},
            "spec": {
                "weight": 10 * (RACKS + 1 - r),
                "limits": {"nodes": NODES_PER_RACK.to_string()},
                "disruption": {
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": format!("{}s", s.idle_s as u64),
                    "budgets": [{"nodes": "100%"}],
                },
                "template": {
                    "metadata": {"labels": {
                        RACK_LABEL: format!("r{r}"),
                        "nvidia.com/gpu.product": trace::GPU_PRODUCT,
                    }},
                    "spec": {
                        "expireAfter": "Never",
                        "startupTaints": [{"key": BOOTING_TAINT, "effect": "NoSchedule"}],
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                        "requirements": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["h100-8gpu"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        ],
                    },
                },
            },
        }));
    }
    out
}

/// The repository's `scripts/karpenter` (this crate's `..`).
fn karpenter_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/karpenter")
}

/// Karpenter's cache directory (`scripts/karpenter --print-dir`), built
/// first where it is not there (a fresh clone: Go modules, about 2 min).
fn karpenter_dir() -> anyhow::Result<PathBuf> {
    let script = karpenter_script();
    let mut build = Command::new(&script);
    let out = accord_testkit::process::output_within(&mut build, Duration::from_secs(1800));
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut print = Command::new(&script);
    print.arg("--print-dir");
    let out = accord_testkit::process::output_within(&mut print, Duration::from_secs(60));
    anyhow::ensure!(
        out.status.success(),
        "{} --print-dir failed",
        script.display()
    );
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn kubectl_ok(mut cmd: Command, what: &str) -> anyhow::Result<()> {
    let out = accord_testkit::process::output_within(&mut cmd, Duration::from_secs(120));
    anyhow::ensure!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn karpenter(
    arm: Arm,
    trace_name: &str,
    jobs: &[Job],
    s: &Settings,
) -> anyhow::Result<Figures> {
    let dir = karpenter_dir()?;
    let binary = dir.join("karpenter-kwok");
    anyhow::ensure!(
        binary.is_file(),
        "{}: not built by scripts/karpenter",
        binary.display()
    );
    let mut options = Options::full(s.kube_minor);
    options.feature_gates = FEATURE_GATES.map(String::from).to_vec();
    options.runtime_config = RUNTIME_CONFIG.map(String::from).to_vec();
    options.controller_manager_args = CONTROLLER_MANAGER_ARGS.map(String::from).to_vec();
    let plane = ControlPlane::start(options)
        .await
        .map_err(|e| anyhow::anyhow!("the upstream control plane: {e}"))?;
    let kubeconfig = plane
        .admin_kubeconfig()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let kubectl = || plane.kubectl().map_err(|e| anyhow::anyhow!("{e}"));
    let mut apply = kubectl()?;
    apply
        .args(["apply", "--server-side", "-f"])
        .arg(dir.join("crd"));
    kubectl_ok(apply, "the Karpenter CRDs")?;
    let mut wait = kubectl()?;
    wait.args([
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/nodepools.karpenter.sh",
        "crd/nodeclaims.karpenter.sh",
        "crd/kwoknodeclasses.karpenter.kwok.sh",
    ]);
    kubectl_ok(wait, "the Karpenter CRDs established")?;
    let upstream = Upstream::new(plane).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cluster = Cluster::Upstream(Arc::new(upstream));
    for o in node_pools(s) {
        cluster
            .upstream()
            .expect("upstream")
            .apply(&o)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    cluster
        .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "karpenter"}}));
    let types = s.out.join("karpenter-instance-types.json");
    std::fs::write(&types, serde_json::to_vec_pretty(&instance_types())?)?;
    let log = s.out.join(format!("{trace_name}-{}.log", arm.as_str()));
    let mut cmd = Command::new(&binary);
    cmd.env("KUBECONFIG", &kubeconfig)
        .env("SYSTEM_NAMESPACE", "karpenter")
        .env("DISABLE_LEADER_ELECTION", "true")
        .env("INSTANCE_TYPES_FILE_PATH", &types)
        .env("METRICS_PORT", free_port()?.to_string())
        .env("HEALTH_PROBE_PORT", free_port()?.to_string())
        .env("LOG_LEVEL", "debug");
    let process = Process::spawn("karpenter-kwok", &mut cmd, &log);
    let jobs = jobs.to_vec();
    let s2 = s.clone();
    let name = trace_name.to_owned();
    let c2 = cluster.clone();
    let powered = move || -> BTreeSet<String> {
        c2.list("v1", "Node")
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    let kubelets = PeerKubelets::new(s.boot_s);
    let arm_name = arm.as_str();
    let figures = tokio::task::spawn_blocking(move || {
        prepare_namespace(&cluster)?;
        drive(
            &cluster,
            &jobs,
            &s2,
            arm == Arm::KarpenterAffinity,
            Some(kubelets),
            powered,
            arm_name,
            &name,
        )
    })
    .await??;
    drop(process);
    Ok(figures)
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The trace's namespace, and its `default` ServiceAccount (made by the
/// serviceaccount controller; a pod cannot be made before it).
fn prepare_namespace(cluster: &Cluster) -> anyhow::Result<()> {
    cluster
        .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}));
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster
        .get("v1", "ServiceAccount", NAMESPACE, "default")
        .is_none()
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the serviceaccount controller made no default ServiceAccount in {NAMESPACE} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// A NodePool's startup taint (`spec.template.spec.startupTaints`) that
/// [`PeerKubelets`] lifts when the machine has booted: Karpenter puts it on
/// the Node in the same write that lifts its `unregistered` taint, so no
/// pod is bound to a machine still booting. (Without it, the kwok
/// provider's Node, made with no conditions, loses the apiserver's
/// `not-ready` taint to the node lifecycle controller within a second, and
/// the scheduler bound pods to it 3 s after it was made.)
pub const BOOTING_TAINT: &str = "peer-figures.accord.dev/booting";

/// The kubelets of a peer's Nodes: a Node its provider made reports
/// NotReady, then Ready `boot_s` after it was made, its startup taint
/// lifted (and renews its Lease, as the lab's kubelets do); the pods bound
/// to a Ready Node run.
#[derive(Debug)]
pub struct PeerKubelets {
    boot: Duration,
    made: std::collections::BTreeMap<String, Instant>,
    renewed: Option<Instant>,
}

impl PeerKubelets {
    fn new(boot_s: f64) -> PeerKubelets {
        PeerKubelets {
            boot: Duration::from_secs_f64(boot_s),
            made: Default::default(),
            renewed: None,
        }
    }

    fn step(&mut self, cluster: &Cluster, nodes: &[Value], pods: &[Value]) {
        let now = Instant::now();
        let stamp = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let micro = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        let renew = self
            .renewed
            .is_none_or(|r| now.duration_since(r) >= Duration::from_secs(2));
        let names: BTreeSet<String> = nodes
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        self.made.retain(|n, _| names.contains(n));
        let mut ready = BTreeSet::new();
        for n in nodes {
            let Some(name) = n["metadata"]["name"].as_str() else {
                continue;
            };
            let made = *self.made.entry(name.to_owned()).or_insert(now);
            let booted = now.duration_since(made) >= self.boot;
            let (status, reason) = if booted {
                ready.insert(name.to_owned());
                ("True", "KubeletReady")
            } else {
                ("False", "KubeletNotReady")
            };
            let reported = n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == status);
            let tainted = n["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["key"] == BOOTING_TAINT);
            if !reported || renew || (booted && tainted) {
                let st = stamp.clone();
                cluster.update("v1", "Node", "", name, |node| {
                    node["status"]["conditions"] = json!([{
                        "type": "Ready", "status": status, "reason": reason,
                        "message": "peer-figures' kubelet stand-in",
                        "lastHeartbeatTime": st, "lastTransitionTime": st}]);
                    if booted {
                        // Booted: the startup taint is lifted, as the
                        // agent a startup taint waits for would.
                        if let Some(taints) = node["spec"]["taints"].as_array_mut() {
                            taints.retain(|t| t["key"] != BOOTING_TAINT);
                        }
                    }
                });
            }
            if renew {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"namespace": "kube-node-lease", "name": name},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro},
                });
                cluster.apply(lease);
            }
        }
        if renew {
            self.renewed = Some(now);
        }
        for p in pods {
            let Some(node) = p["spec"]["nodeName"].as_str() else {
                continue;
            };
            if !ready.contains(node) || p["status"]["phase"] == "Running" {
                continue;
            }
            let (Some(ns), Some(name)) = (
                p["metadata"]["namespace"].as_str(),
                p["metadata"]["name"].as_str(),
            ) else {
                continue;
            };
            let st = stamp.clone();
            cluster.update("v1", "Pod", ns, name, |pod| {
                pod["status"]["phase"] = json!("Running");
                pod["status"]["startTime"] = json!(st);
                pod["status"]["conditions"] = json!([
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": st},
                    {"type": "Ready", "status": "True", "lastTransitionTime": st}]);
            });
        }
    }
}

/// The one loop of every arm: submits each job when its time comes,
/// deletes it `run_s` after all its pods are bound, plays the peer's
/// kubelets, and measures, every 500 ms, for the horizon.
#[allow(clippy::too_many_arguments)]
fn drive(
    cluster: &Cluster,
    jobs: &[Job],
    s: &Settings,
    rack_affinity: bool,
    mut kubelets: Option<PeerKubelets>,
    powered: impl Fn() -> BTreeSet<String>,
    arm: &str,
    trace_name: &str,
) -> anyhow::Result<Figures> {
    let mut measure = Measure::new(jobs, s.idle_s);
    let started = Instant::now();
    let horizon = Duration::from_secs_f64(s.horizon_s);
    let mut submitted = vec![false; jobs.len()];
    let mut all_bound: Vec<Option<f64>> = vec![None; jobs.len()];
    let mut deleted = vec![false; jobs.len()];
    eprintln!(
        "peer-figures: {trace_name}/{arm}: driving {} jobs for {:.0} s",
        jobs.len(),
        s.horizon_s
    );
    while started.elapsed() < horizon {
        let t = started.elapsed().as_secs_f64();
        for (i, job) in jobs.iter().enumerate() {
            if !submitted[i] && job.at_s <= t {
                for o in trace::objects(job, rack_affinity) {
                    cluster
                        .upstream()
                        .context("an upstream control plane")?
                        .apply(&o)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", job.name))?;
                }
                submitted[i] = true;
            }
        }
        let nodes = cluster.list("v1", "Node");
        let pods = cluster.list("v1", "Pod");
        if let Some(k) = kubelets.as_mut() {
            k.step(cluster, &nodes, &pods);
        }
        let seen = Seen::from_objects(t, powered(), &nodes, &pods);
        measure.tick(&seen);
        for (i, job) in jobs.iter().enumerate() {
            if !submitted[i] || deleted[i] {
                continue;
            }
            let bound = seen
                .pods
                .iter()
                .filter(|(j, n)| j == &job.name && n.is_some())
                .count() as u32;
            if all_bound[i].is_none() && bound >= job.pods {
                all_bound[i] = Some(t);
                let on: BTreeSet<&str> = seen
                    .pods
                    .iter()
                    .filter(|(j, _)| j == &job.name)
                    .filter_map(|(_, n)| n.as_deref())
                    .collect();
                let ages: Vec<String> = on
                    .iter()
                    .map(|n| format!("{n} ({})", node_age(&nodes, n)))
                    .collect();
                eprintln!(
                    "peer-figures: {trace_name}/{arm}: {:>6.1} s {} bound ({} pod(s)) on {}",
                    t,
                    job.name,
                    job.pods,
                    ages.join(", ")
                );
            }
            if all_bound[i].is_some_and(|b| t - b >= job.run_s) {
                for p in 0..job.pods {
                    cluster.delete("v1", "Pod", NAMESPACE, &trace::pod_name(job, p));
                }
                if job.gang {
                    cluster.delete(
                        "scheduling.k8s.io/v1beta1",
                        "PodGroup",
                        NAMESPACE,
                        &job.name,
                    );
                }
                deleted[i] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let figures = measure.figures(arm, trace_name, s.horizon_s);
    eprintln!("peer-figures: {trace_name}/{arm}: {figures:?}");
    Ok(figures)
}

/// How long ago `node`'s Node object was made (its creationTimestamp).
fn node_age(nodes: &[Value], node: &str) -> String {
    let created = nodes
        .iter()
        .find(|n| n["metadata"]["name"] == node)
        .and_then(|n| n["metadata"]["creationTimestamp"].as_str())
        .and_then(|c| c.parse::<k8s_openapi::jiff::Timestamp>().ok());
    match created {
        Some(c) => format!(
            "made {:.0} s ago",
            (k8s_openapi::jiff::Timestamp::now() - c).get_seconds()
        ),
        None => "no Node".to_owned(),
    }
}
