//! accordd's commands, as the agent carries them out: an accordd stub
//! (axum, in process) answers heartbeats and reports with a command until
//! the test changes it, and keeps every report. The agent applies each
//! generation once, reports the outcome with the hardware discovered after
//! it, and answers a repeat with the stored outcome. Like accordd, the stub
//! refuses (422) a report past accordd's limits and answers 404 to a
//! heartbeat from a node its store does not know.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accord::hardware::{MigMode, NodeHardware};
use accord_agent::config::AgentConfig;
use accord_agent::mig::replay::ReplayedGpus;
use accord_api::agent::{
    AgentCommand, AgentReply, BusyGpu, CommandAction, CommandResult, Heartbeat, MigTarget,
    PodDevices, Report,
};
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::Json;

/// How long any wait here waits for its condition.
const WAIT: Duration = Duration::from_secs(30);

type Task = tokio::task::JoinHandle<anyhow::Result<()>>;

#[derive(Debug, Default)]
struct NodeStub {
    command: Option<AgentCommand>,
    reports: Vec<Report>,
    heartbeats: u64,
    /// The store does not know the node (replaced): heartbeats are
    /// answered 404 until a report comes.
    unknown: bool,
    /// Every report carrying an outcome is refused (422).
    refuse_outcomes: bool,
    /// The reports refused.
    refused: Vec<Report>,
    /// The last heartbeat's device assignments (`None`: it said none).
    assigned: Option<Vec<PodDevices>>,
}

type Stub = Arc<Mutex<BTreeMap<String, NodeStub>>>;

fn reply(node: String, stub: &NodeStub) -> Json<AgentReply> {
    Json(AgentReply {
        node,
        generation: stub.reports.len() as u64,
        session: None,
        outcome: None,
        command: stub.command.clone(),
    })
}

type Answer = Result<Json<AgentReply>, (StatusCode, String)>;

async fn report(
    State(stub): State<Stub>,
    UrlPath(node): UrlPath<String>,
    Json(r): Json<Report>,
) -> Answer {
    let mut s = stub.lock().unwrap();
    let n = s.entry(node.clone()).or_default();
    let refusal = accordd::api::limits::check_report(&r).err().or_else(|| {
        (n.refuse_outcomes && r.command.is_some()).then(|| "outcomes refused".to_owned())
    });
    if let Some(reason) = refusal {
        n.refused.push(r);
        return Err((
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("report refused: {reason}"),
        ));
    }
    n.unknown = false;
    n.reports.push(r);
    Ok(reply(node, n))
}

async fn heartbeat(
    State(stub): State<Stub>,
    UrlPath(node): UrlPath<String>,
    body: axum::body::Bytes,
) -> Answer {
    let beat: Heartbeat = if body.is_empty() {
        Heartbeat::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?
    };
    if let Err(reason) = accordd::api::limits::check_heartbeat(&beat) {
        return Err((StatusCode::UNPROCESSABLE_ENTITY, reason));
    }
    let mut s = stub.lock().unwrap();
    let n = s.entry(node.clone()).or_default();
    n.heartbeats += 1;
    n.assigned = beat.assigned;
    if n.unknown {
        return Err((StatusCode::NOT_FOUND, format!("node {node} is not known")));
    }
    Ok(reply(node, n))
}

/// The stub on a free port: its URL and state.
async fn stub() -> (String, Stub) {
    let state = Stub::default();
    let app = axum::Router::new()
        .route("/v1/nodes/{node}/report", axum::routing::post(report))
        .route("/v1/nodes/{node}/heartbeat", axum::routing::post(heartbeat))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, state)
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(rel)
}

/// An agent config replaying the H100 board (`nvml`: its NVML snapshot).
fn config(dir: &Path, url: &str, node: &str, nvml: Option<&str>) -> AgentConfig {
    config_with(dir, &format!("url = \"{url}\""), node, nvml)
}

/// [`config`], with `daemon` the accordd URL line(s) of `[daemon]`.
fn config_with(dir: &Path, daemon: &str, node: &str, nvml: Option<&str>) -> AgentConfig {
    let token = accord_testkit::daemon::secret(dir, &format!("{node}-token"), "t");
    let nvml = nvml
        .map(|n| {
            format!(
                "nvml_snapshot = \"{}\"\n",
                fixture(&format!("nvml/{n}.json")).display()
            )
        })
        .unwrap_or_default();
    let text = format!(
        "[daemon]\n{daemon}\ntoken_file = \"{}\"\n[node]\nname = \"{node}\"\n\
         [discovery]\ninterval_s = 3600\nhwloc_xml = \"{}\"\n{nvml}\
         [heartbeat]\ninterval_ms = 50\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n[mig]\nallow_gpu_reset = false\n",
        token.display(),
        fixture("hwloc/derived/dgx2-board0-no-nvml.xml").display()
    );
    let file = dir.join(format!("{node}.toml"));
    std::fs::write(&file, text).unwrap();
    AgentConfig::load(&file).unwrap()
}

/// Waits (up to [`WAIT`]) until `cond` holds for `node`'s stub state,
/// panicking if the agent ends first; returns what `cond` returned.
async fn wait<T>(
    stub: &Stub,
    node: &str,
    agent: &mut Task,
    what: &str,
    cond: impl Fn(&NodeStub) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = stub.lock().unwrap().get(node).and_then(&cond) {
            return v;
        }
        if agent.is_finished() {
            panic!(
                "the agent ended while waiting for {what}: {:?}",
                agent.await
            );
        }
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last report carrying the outcome of `generation`, once there is one.
fn outcome_of(
    generation: u64,
) -> impl Fn(&NodeStub) -> Option<(CommandResult, NodeHardware, usize)> {
    move |n| {
        n.reports.iter().enumerate().rev().find_map(|(i, r)| {
            let c = r.command.as_ref().filter(|c| c.generation == generation)?;
            Some((c.result.clone(), r.hardware.clone(), i))
        })
    }
}

fn layout(hw: &NodeHardware, gpu: u32) -> Option<Vec<String>> {
    let mig = hw.gpus.iter().find(|g| g.index == gpu)?.mig.as_ref()?;
    (mig.current_mode == MigMode::Enabled).then(|| mig.layout().unwrap_or_default())
}

fn apply_mig(generation: u64, gpu: u32, uuid: Option<String>, layout: &[&str]) -> AgentCommand {
    AgentCommand {
        generation,
        action: CommandAction::ApplyMig {
            gpus: vec![MigTarget {
                index: gpu,
                uuid,
                layout: layout.iter().map(|s| (*s).to_owned()).collect(),
            }],
        },
    }
}

fn set_command(stub: &Stub, node: &str, cmd: Option<AgentCommand>) {
    stub.lock()
        .unwrap()
        .entry(node.to_owned())
        .or_default()
        .command = cmd;
}

async fn stop(stop: tokio::sync::oneshot::Sender<()>, agent: Task) {
    let _ = stop.send(());
    match tokio::time::timeout(WAIT, agent).await {
        Ok(r) => r.unwrap().unwrap(),
        Err(_) => panic!("the agent still runs 30 s after being told to stop"),
    }
}

/// The agent on `gpus`, running until the sender is used or dropped.
fn spawn_agent(
    cfg: AgentConfig,
    gpus: &ReplayedGpus,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(accord_agent::run::run_with(
        cfg,
        Some(gpus.clone()),
        async {
            let _ = rx.await;
        },
    ));
    (tx, agent)
}

/// The command → outcome path on the lab's kind of agent (its GPUs a
/// handle the test holds too): applied once, reported with the hardware
/// after it; a repeat of the generation (the stub sends it in every
/// answer) is answered with the stored outcome, never applied again; a
/// new generation with the same layout is done without a change; a busy
/// GPU is refused and left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_applied_once_and_answered_with_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (url, stub) = stub().await;
    let node = "gpu-a";
    let cfg = config(dir.path(), &url, node, Some("h100-8gpu"));
    let snapshot = accord_agent::nvml::load_snapshot(&fixture("nvml/h100-8gpu.json")).unwrap();
    let gpus = ReplayedGpus::new(snapshot);
    let (tx, mut agent) = spawn_agent(cfg, &gpus);

    let first = wait(&stub, node, &mut agent, "the first report", |n| {
        n.reports.first().cloned()
    })
    .await;
    assert!(first.command.is_none());
    assert_eq!(layout(&first.hardware, 3), None, "MIG is off as recorded");
    let uuid = first
        .hardware
        .gpus
        .iter()
        .find(|g| g.index == 3)
        .unwrap()
        .uuid
        .clone();

    let want = ["3g.40gb@0", "3g.40gb@4"];
    set_command(&stub, node, Some(apply_mig(7, 3, uuid.clone(), &want)));
    let (result, hw, at) = wait(
        &stub,
        node,
        &mut agent,
        "the outcome of generation 7",
        outcome_of(7),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(layout(&hw, 3).unwrap(), want);
    assert_eq!((gpus.repartitions(), gpus.version()), (1, 1));

    // Someone else (mig-manager, an admin) changes the GPU. accordd keeps
    // sending generation 7: each repeat is answered with the stored
    // outcome and the hardware as it is, never applied again.
    let other = [MigTarget {
        index: 3,
        uuid: None,
        layout: vec!["7g.80gb@0".to_owned()],
    }];
    assert_eq!(gpus.apply(&other, &Default::default()), CommandResult::Done);
    let beats = stub.lock().unwrap()[node].heartbeats;
    wait(&stub, node, &mut agent, "10 more heartbeats", |n| {
        (n.heartbeats >= beats + 10).then_some(())
    })
    .await;
    // The agent discovers on an hour's interval: the change is seen with
    // the next command.
    set_command(
        &stub,
        node,
        Some(AgentCommand {
            generation: 8,
            action: CommandAction::Rediscover,
        }),
    );
    let (result, hw, _) = wait(
        &stub,
        node,
        &mut agent,
        "the outcome of generation 8",
        outcome_of(8),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(
        layout(&hw, 3).unwrap(),
        ["7g.80gb@0"],
        "generation 7 was applied again"
    );
    let repeats = stub.lock().unwrap()[node].reports[at + 1..]
        .iter()
        .filter(|r| r.command.as_ref().is_some_and(|c| c.generation == 7))
        .count();
    assert!(repeats >= 1, "the repeats were not answered");

    // A new generation with the layout in place: done, nothing changed.
    set_command(&stub, node, Some(apply_mig(9, 3, uuid, &["7g.80gb@0"])));
    let (result, _, _) = wait(
        &stub,
        node,
        &mut agent,
        "the outcome of generation 9",
        outcome_of(9),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(
        (gpus.repartitions(), gpus.version()),
        (2, 2),
        "only the test's own change"
    );

    // A GPU in use by a process Kubernetes does not know: refused, left
    // alone.
    gpus.set_busy(5, vec![4242]);
    set_command(&stub, node, Some(apply_mig(10, 5, None, &["7g.80gb@0"])));
    let (result, hw, _) = wait(
        &stub,
        node,
        &mut agent,
        "the outcome of generation 10",
        outcome_of(10),
    )
    .await;
    assert_eq!(
        result,
        CommandResult::Busy {
            gpus: vec![BusyGpu {
                index: 5,
                pids: vec![4242]
            }]
        }
    );
    assert_eq!(layout(&hw, 5), None);
    set_command(&stub, node, None);
    stop(tx, agent).await;
}

/// An agent replaying a recording from its config alone: the twin of the
/// recorded snapshot takes the command and discovery reads the twin, not
/// the file. An agent with no NVML view answers that NVML is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaying_agent_rediscovers_its_twin_and_one_without_nvml_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (url, stub) = stub().await;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let cfg = config(dir.path(), &url, "gpu-b", Some("h100-8gpu-mig-1g"));
    let mut agent = tokio::spawn(accord_agent::run::run(cfg, async {
        let _ = rx.await;
    }));
    set_command(
        &stub,
        "gpu-b",
        Some(apply_mig(1, 0, None, &["4g.40gb@0", "3g.40gb@4"])),
    );
    let (result, hw, _) = wait(&stub, "gpu-b", &mut agent, "gpu-b's outcome", outcome_of(1)).await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(layout(&hw, 0).unwrap(), ["4g.40gb@0", "3g.40gb@4"]);
    assert_eq!(layout(&hw, 1).unwrap().len(), 7, "the others as recorded");
    stop(tx, agent).await;

    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let cfg = config(dir.path(), &url, "no-nvml", None);
    let mut agent = tokio::spawn(accord_agent::run::run(cfg, async {
        let _ = rx.await;
    }));
    set_command(
        &stub,
        "no-nvml",
        Some(apply_mig(1, 0, None, &["7g.80gb@0"])),
    );
    let (result, _, _) = wait(
        &stub,
        "no-nvml",
        &mut agent,
        "no-nvml's outcome",
        outcome_of(1),
    )
    .await;
    let CommandResult::Failed { reason } = result else {
        panic!("{result:?}");
    };
    assert!(reason.starts_with("NVML not available"), "{reason}");
    stop(tx, agent).await;
}

/// An agent on a twin of the H100 board (the lab's kind), its first
/// report in: the way to stop it, the agent, its GPUs and the first
/// report.
async fn twin_agent(
    dir: &Path,
    url: &str,
    stub: &Stub,
    node: &str,
) -> (tokio::sync::oneshot::Sender<()>, Task, ReplayedGpus, Report) {
    let cfg = config(dir, url, node, Some("h100-8gpu"));
    let snapshot = accord_agent::nvml::load_snapshot(&fixture("nvml/h100-8gpu.json")).unwrap();
    let gpus = ReplayedGpus::new(snapshot);
    let (tx, mut agent) = spawn_agent(cfg, &gpus);
    let first = wait(stub, node, &mut agent, "the first report", |n| {
        n.reports.first().cloned()
    })
    .await;
    (tx, agent, gpus, first)
}

/// accordd's store is replaced: the node is unknown (a heartbeat answered
/// 404) and the new store numbers its commands from 1 again. The agent
/// forgets the old generation 1: the new one is carried out, not answered
/// with the old outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_accordds_store_is_replaced_its_generation_1_is_carried_out() {
    let dir = tempfile::tempdir().unwrap();
    let (url, stub) = stub().await;
    let node = "gpu-c";
    let (tx, mut agent, gpus, _) = twin_agent(dir.path(), &url, &stub, node).await;

    set_command(&stub, node, Some(apply_mig(1, 3, None, &["7g.80gb@0"])));
    let (result, hw, _) = wait(
        &stub,
        node,
        &mut agent,
        "generation 1's outcome",
        outcome_of(1),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(layout(&hw, 3).unwrap(), ["7g.80gb@0"]);
    // The command closed: after two heartbeats answered without it, the
    // agent only heartbeats (a repeat answered before is reported by then).
    set_command(&stub, node, None);
    let beats = stub.lock().unwrap()[node].heartbeats;
    wait(&stub, node, &mut agent, "2 more heartbeats", |n| {
        (n.heartbeats >= beats + 2).then_some(())
    })
    .await;

    // A new store: the node unknown, its first command generation 1.
    let want = ["3g.40gb@0", "3g.40gb@4"];
    stub.lock().unwrap().insert(
        node.to_owned(),
        NodeStub {
            command: Some(apply_mig(1, 3, None, &want)),
            unknown: true,
            ..NodeStub::default()
        },
    );
    let (result, hw, _) = wait(
        &stub,
        node,
        &mut agent,
        "the new store's generation 1's outcome",
        outcome_of(1),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(
        layout(&hw, 3).unwrap(),
        want,
        "answered with the old generation 1's outcome"
    );
    assert_eq!(gpus.repartitions(), 2);
    set_command(&stub, node, None);
    stop(tx, agent).await;
}

/// A report carrying an outcome that accordd refuses (422) does not hold
/// the agent up: the outcome is dropped, said once, the hardware reported
/// without it and the heartbeats go on; accordd repeating the command
/// neither re-applies it nor sends the refused outcome again. An outcome
/// past accordd's limits (a GPU busy with 2000 processes) is cut to fit
/// before it is sent, and accordd takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_accordd_refuses_is_dropped_and_the_hardware_still_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (url, stub) = stub().await;
    let node = "gpu-d";
    let (tx, mut agent, gpus, first) = twin_agent(dir.path(), &url, &stub, node).await;
    assert_eq!(layout(&first.hardware, 3), None);

    stub.lock().unwrap().get_mut(node).unwrap().refuse_outcomes = true;
    let want = ["3g.40gb@0", "3g.40gb@4"];
    set_command(&stub, node, Some(apply_mig(1, 3, None, &want)));
    let refused = wait(&stub, node, &mut agent, "the refused report", |n| {
        n.refused.first().cloned()
    })
    .await;
    assert_eq!(refused.command.unwrap().generation, 1);
    let hw = wait(
        &stub,
        node,
        &mut agent,
        "the hardware reported without the outcome",
        |n| {
            n.reports
                .iter()
                .find(|r| r.command.is_none() && layout(&r.hardware, 3).is_some())
                .map(|r| r.hardware.clone())
        },
    )
    .await;
    assert_eq!(layout(&hw, 3).unwrap(), want);
    // Generation 1 stays in every answer: heartbeats go on, the refused
    // outcome is not sent again, the command not applied again.
    let beats = stub.lock().unwrap()[node].heartbeats;
    wait(&stub, node, &mut agent, "5 more heartbeats", |n| {
        (n.heartbeats >= beats + 5).then_some(())
    })
    .await;
    {
        let s = stub.lock().unwrap();
        assert_eq!(s[node].refused.len(), 1, "the refused outcome sent again");
        assert!(s[node].reports.iter().all(|r| r.command.is_none()));
    }
    assert_eq!(gpus.repartitions(), 1);

    // Past accordd's limits: cut to fit at the source, taken.
    stub.lock().unwrap().get_mut(node).unwrap().refuse_outcomes = false;
    gpus.set_busy(5, (1..=2000).rev().collect());
    set_command(&stub, node, Some(apply_mig(2, 5, None, &["7g.80gb@0"])));
    let (result, _, _) = wait(
        &stub,
        node,
        &mut agent,
        "generation 2's outcome",
        outcome_of(2),
    )
    .await;
    assert_eq!(
        result,
        CommandResult::Busy {
            gpus: vec![BusyGpu {
                index: 5,
                pids: (1..=1024).collect(),
            }]
        }
    );
    assert_eq!(stub.lock().unwrap()[node].refused.len(), 1);
    set_command(&stub, node, None);
    stop(tx, agent).await;
}

/// accordd's replicas, each its own stub: a command from one (the leader)
/// is carried out once, its outcome reported to that one only, and the
/// hardware after it reported to the other too (the machine is one). After
/// a failover, the new leader's command for the same layout is carried out
/// for it (its own generations) and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_from_one_replica_changes_the_model_every_replica_gets() {
    let dir = tempfile::tempdir().unwrap();
    let (url_a, stub_a) = stub().await;
    let (url_b, stub_b) = stub().await;
    let node = "gpu-ha";
    let cfg = config_with(
        dir.path(),
        &format!("urls = [\"{url_a}\", \"{url_b}\"]"),
        node,
        Some("h100-8gpu"),
    );
    let snapshot = accord_agent::nvml::load_snapshot(&fixture("nvml/h100-8gpu.json")).unwrap();
    let gpus = ReplayedGpus::new(snapshot);
    let (tx, mut agent) = spawn_agent(cfg, &gpus);
    for (name, stub) in [("A", &stub_a), ("B", &stub_b)] {
        let first = wait(
            stub,
            node,
            &mut agent,
            &format!("the first report to replica {name}"),
            |n| n.reports.first().cloned(),
        )
        .await;
        assert_eq!(layout(&first.hardware, 3), None, "MIG is off as recorded");
    }

    // Replica A leads: its command is carried out and answered to it.
    let want = ["3g.40gb@0", "3g.40gb@4"];
    set_command(&stub_a, node, Some(apply_mig(1, 3, None, &want)));
    let (result, hw, _) = wait(
        &stub_a,
        node,
        &mut agent,
        "replica A's generation 1's outcome",
        outcome_of(1),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(layout(&hw, 3).unwrap(), want);
    // Replica B gets the hardware after it, without A's outcome.
    let hw_b = wait(
        &stub_b,
        node,
        &mut agent,
        "replica B to get the repartitioned hardware",
        |n| {
            n.reports
                .iter()
                .find(|r| layout(&r.hardware, 3).is_some_and(|l| l == want))
                .cloned()
        },
    )
    .await;
    assert_eq!(hw_b.command, None, "A's outcome reported to B");
    assert_eq!(gpus.repartitions(), 1);
    set_command(&stub_a, node, None);

    // Failover: B leads and asks for the same layout (its generation 2).
    set_command(&stub_b, node, Some(apply_mig(2, 3, None, &want)));
    let (result, hw, _) = wait(
        &stub_b,
        node,
        &mut agent,
        "replica B's generation 2's outcome",
        outcome_of(2),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(layout(&hw, 3).unwrap(), want);
    assert_eq!(gpus.repartitions(), 1, "the layout in place was made again");
    set_command(&stub_b, node, None);
    let outcomes: Vec<u64> = stub_a.lock().unwrap()[node]
        .reports
        .iter()
        .filter_map(|r| r.command.as_ref().map(|c| c.generation))
        .collect();
    assert!(
        outcomes.iter().all(|g| *g == 1),
        "B's outcome reported to A: {outcomes:?}"
    );
    stop(tx, agent).await;
}

/// The kubelet's device assignments ride every heartbeat, read from its
/// pod-resources API: served here by upstream's own server code
/// (`podresources-kubelet`, built from the pinned k8s.io/kubernetes by
/// scripts/controlplane) over its unix socket. Only `nvidia.com/…`
/// devices, pod by pod; a pod that goes is gone from the next heartbeat;
/// a GPU a pod holds is never repartitioned, even on accordd's command;
/// a kubelet that stops answering makes the agent say nothing (accordd
/// then falls back), and the heartbeats go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_device_assignments_ride_each_heartbeat() {
    let binaries = accord_testkit::control_plane::Binaries::for_minor(37).unwrap();
    let kubelet_bin = binaries.path("podresources-kubelet").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let state = dir.path().join("pods.json");
    let pods = |ids: &[&str]| {
        serde_json::json!({"pods": [
            {"namespace": "ml", "name": "train-0", "uid": "u-1", "containers": [
                {"name": "main", "devices": [{"resource": "nvidia.com/gpu", "ids": ids}]},
                {"name": "side", "devices": [{"resource": "example.com/fpga", "ids": ["fpga-0"]}]}
            ]},
            {"namespace": "ml", "name": "infer", "uid": "u-2", "containers": [
                {"name": "main", "devices": [{"resource": "nvidia.com/mig-1g.10gb", "ids": ["MIG-7c1e::2"]}]}
            ]},
            {"namespace": "kube-system", "name": "dns", "uid": "u-3", "containers": [{"name": "dns"}]}
        ]})
        .to_string()
    };
    // train-0 holds GPUs 0 and 1 of the replayed H100 board.
    const GPU0: &str = "GPU-00005a17-0000-4000-a100-d6cc78506ee0";
    const GPU1: &str = "GPU-00005a18-0001-4000-a100-d6cc78506ef0";
    std::fs::write(&state, pods(&[GPU1, GPU0])).unwrap();
    let mut kubelet = accord_testkit::process::Process::spawn(
        "podresources-kubelet",
        std::process::Command::new(&kubelet_bin)
            .arg("-socket")
            .arg(&socket)
            .arg("-state")
            .arg(&state),
        &dir.path().join("kubelet.log"),
    );
    let (url, stub) = stub().await;
    let node = "gpu-k";
    let file = dir.path().join("agent.toml");
    // The usual configuration (written to {node}.toml), with the
    // kubelet's socket.
    let _ = config(dir.path(), &url, node, Some("h100-8gpu"));
    let text = std::fs::read_to_string(dir.path().join(format!("{node}.toml"))).unwrap();
    std::fs::write(
        &file,
        format!(
            "{text}[kubelet]\npod_resources_socket = \"{}\"\n",
            socket.display()
        ),
    )
    .unwrap();
    let cfg = AgentConfig::load(&file).unwrap();
    let snapshot = accord_agent::nvml::load_snapshot(&fixture("nvml/h100-8gpu.json")).unwrap();
    let gpus = ReplayedGpus::new(snapshot);
    let (stop_tx, mut agent) = spawn_agent(cfg, &gpus);
    let pod = |name: &str, ids: &[&str]| PodDevices {
        namespace: "ml".into(),
        name: name.into(),
        ids: ids.iter().map(|s| (*s).to_owned()).collect(),
    };
    let both = vec![
        pod("infer", &["MIG-7c1e::2"]),
        pod("train-0", &[GPU0, GPU1]),
    ];
    wait(
        &stub,
        node,
        &mut agent,
        "a heartbeat with both pods' NVIDIA devices",
        |n| (n.assigned.as_ref() == Some(&both)).then_some(()),
    )
    .await;
    // A repartition of a GPU the kubelet assigned is refused, whatever
    // accordd planned with (train-0 has started no process on it: NVML
    // alone would not know).
    set_command(&stub, node, Some(apply_mig(1, 1, None, &["7g.80gb@0"])));
    let (result, _, _) = wait(
        &stub,
        node,
        &mut agent,
        "the outcome of generation 1",
        outcome_of(1),
    )
    .await;
    let CommandResult::Failed { reason } = &result else {
        panic!("{result:?}");
    };
    assert!(reason.contains("GPU 1 (pod ml/train-0)"), "{reason}");
    assert_eq!(gpus.repartitions(), 0);
    // The kubelet releases train-0's GPUs (the pod ended).
    std::fs::write(&state, pods(&[])).unwrap();
    let one = vec![pod("infer", &["MIG-7c1e::2"])];
    wait(
        &stub,
        node,
        &mut agent,
        "a heartbeat without train-0",
        |n| (n.assigned.as_ref() == Some(&one)).then_some(()),
    )
    .await;
    // Free now: the same repartition is carried out.
    set_command(&stub, node, Some(apply_mig(2, 1, None, &["7g.80gb@0"])));
    let (result, _, _) = wait(
        &stub,
        node,
        &mut agent,
        "the outcome of generation 2",
        outcome_of(2),
    )
    .await;
    assert_eq!(result, CommandResult::Done);
    assert_eq!(gpus.repartitions(), 1);
    // The kubelet goes: heartbeats go on, saying nothing.
    kubelet.kill();
    let beats = stub.lock().unwrap()[node].heartbeats;
    wait(
        &stub,
        node,
        &mut agent,
        "3 heartbeats without assignments",
        |n| (n.heartbeats >= beats + 3 && n.assigned.is_none()).then_some(()),
    )
    .await;
    stop(stop_tx, agent).await;
}
