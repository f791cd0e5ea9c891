//! What the `worlds` binary's lab tests share: the scenario they
//! build, starting a lab with the real accordd, and waits (each with a
//! deadline that names what it waited for). Not every module uses every
//! helper.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord_api::control::{ControlStatus, WorkloadState};
use accord_api::text::render_status;
use accord_lab::fixtures::gang;
use accord_lab::{Lab, LabOptions, Scenario};

/// The machine's share of worlds: three at once, on the fake API or the
/// upstream control plane alike. Each mostly waits on boots, kubelets,
/// rounds and controllers it runs in real time: the worlds binary used
/// 0.54 of CI's two cores on average running two at once (`time`: 6m54s
/// of CPU in 12m52s), so three together take little more than one; every
/// wait has a deadline several times what it takes on an idle machine.
/// libtest must run as many tests at once (`scripts/test` runs this
/// binary alone with `--test-threads=3`; with fewer, fewer run). A world that asserts how
/// long something took against a tight bound (a Lease handover within a
/// retry period) or needs its kubelets' heartbeats on time (a zone that
/// must stay Normal) has the machine alone.
static WORLD_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(WORLDS_AT_ONCE);
const WORLDS_AT_ONCE: usize = 3;

/// Held for the whole of a world; dropping it lets the next one start,
/// and says on stderr (past libtest's capture: CI's log shows it) how
/// long the world took and waited, so the slow ones are named.
pub struct WorldSlot {
    _permit: tokio::sync::SemaphorePermit<'static>,
    name: String,
    asked: std::time::Instant,
    started: std::time::Instant,
}

impl WorldSlot {
    async fn take(slots: u32) -> WorldSlot {
        let asked = std::time::Instant::now();
        let permit = WORLD_SLOTS
            .acquire_many(slots)
            .await
            .expect("the world slots are never closed");
        WorldSlot {
            _permit: permit,
            name: std::thread::current()
                .name()
                .unwrap_or("a world")
                .to_owned(),
            asked,
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for WorldSlot {
    fn drop(&mut self) {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "world {}: {:.1} s (waited {:.1} s for the machine)",
            self.name,
            self.started.elapsed().as_secs_f64(),
            self.started.duration_since(self.asked).as_secs_f64()
        );
    }
}

/// A world that shares the machine with one other.
pub async fn shared_world() -> WorldSlot {
    WorldSlot::take(1).await
}

/// A world that has the machine alone.
pub async fn world_alone() -> WorldSlot {
    WorldSlot::take(WORLDS_AT_ONCE as u32).await
}

pub const CONTROL: &str = r#"
[control]
tick_ms = 1000
transition_poll_ms = 500
bmc_poll_ms = 5000
deadlines = { power_on_s = 60, boot_to_agent_s = 60, agent_to_ready_s = 30 }
"#;

/// The gangs are scheduling.k8s.io/v1beta1 PodGroups: the lab's
/// Kubernetes serves them with this (an admin's `--runtime-config`). These
/// tests run on the fake API (fast, and what they assert is accordd's own
/// behaviour); the lab on the upstream control plane is
/// real_control_plane.rs's.
pub const GANGS_ON: &str =
    "kubernetes = \"fake\"\nruntime_config = [\"scheduling.k8s.io/v1beta1=true\"]";

pub fn scenario(lab: &str, fleet: &str, submits: &[(&str, String, u64)]) -> Scenario {
    let mut text = format!("[lab]\n{GANGS_ON}\n{lab}\n{CONTROL}\n{fleet}\n");
    for (name, yaml, run_ms) in submits {
        text.push_str(&format!(
            "[[submit]]\nname = \"{name}\"\nrun_ms = {run_ms}\nmanifests = '''\n{yaml}'''\n"
        ));
    }
    Scenario::parse(&text, Path::new("test-scenario.toml")).expect("valid scenario")
}

pub const QUICK: &str =
    "boot_delay_ms = 1000\nkubelet_delay_ms = 500\nheartbeat_ms = 1000\nmax_s = 240";

/// Starts a lab for the test named `test`, and accordd, whose output goes
/// to its own file, `lab-{test}.accordd.log` in cargo's target tmp dir:
/// begun afresh each run, kept after it (a failure names it and quotes its
/// tail), appended to across a restart within the test.
pub async fn start(test: &str, s: Scenario) -> Lab {
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lab-{test}.accordd.log"));
    match std::fs::remove_file(&log) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("{}: cannot remove the last run's log: {e}", log.display()),
    }
    let lab = Lab::start(
        s,
        LabOptions {
            daemon_log: Some(log),
            ..LabOptions::new(env!("CARGO_BIN_EXE_accordd"))
        },
    )
    .await
    .expect("lab starts");
    lab.start_daemon().expect("accordd starts");
    // accordd's first round: it is watching and planning.
    lab.wait_status("accordd's first round", Duration::from_secs(60), |_| true)
        .await
        .unwrap();
    lab
}

/// A lab with one gang of `pods` 8-GPU pods named `name` (running until
/// the test ends), submitted once accordd runs.
pub async fn start_gang(test: &str, settings: &str, fleet: &str, name: &str, pods: usize) -> Lab {
    let lab = start(
        test,
        scenario(settings, fleet, &[(name, gang(name, pods), 600_000)]),
    )
    .await;
    lab.release(name).unwrap();
    lab
}

/// The nodes the pods whose `ns/name` starts with `prefix` are bound to.
pub fn nodes_of(lab: &Lab, prefix: &str) -> BTreeSet<String> {
    lab.bound_pods()
        .into_iter()
        .filter(|(p, _)| p.starts_with(prefix))
        .map(|(_, n)| n)
        .collect()
}

/// Waits until every pod of `name` is bound; returns seconds from its
/// submission to bound.
pub async fn bound(lab: &Lab, name: &str, within: Duration) -> f64 {
    let end = tokio::time::Instant::now() + within;
    loop {
        if let (Some(t0), Some(t1)) = lab.submission_times(name) {
            return t1.duration_since(t0).as_secs_f64();
        }
        if lab.daemon_exited().is_some() {
            panic!("waiting for {name} to be bound: {}", lab.daemon_report());
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{name} not bound within {within:?}; accordd's status:\n{}\n{}",
            lab.status()
                .await
                .map(|s| render_status(&s))
                .unwrap_or_else(|| "(none)".into()),
            lab.daemon_report()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until accordd's status shows `workload` in `state`. 90 s: on a
/// loaded two-core CI machine a 30 s deadline was once passed (observe
/// mode's first PoweringOn, in one of seven runs of daemon/tests/worlds/lab.rs).
pub async fn workload_in(lab: &Lab, workload: &str, state: WorkloadState) -> ControlStatus {
    lab.wait_status(
        &format!("{workload} {state} in accordd's status"),
        Duration::from_secs(90),
        |s| {
            s.workloads
                .iter()
                .any(|w| w.workload == workload && w.state == state)
        },
    )
    .await
    .unwrap()
}

/// Waits until accordd has run `n` more control rounds than `st`'s (at
/// least one per tick): the window in which something that must not happen
/// would have. Returns the last status.
pub async fn rounds_after(lab: &Lab, st: &ControlStatus, n: u64) -> ControlStatus {
    let r0 = st.round;
    lab.wait_status(
        &format!("{n} more control rounds after round {r0}"),
        Duration::from_secs(30),
        |s| s.round >= r0 + n,
    )
    .await
    .unwrap()
}

/// accordd's current status (its next round, if it has none yet).
pub async fn current_status(lab: &Lab) -> ControlStatus {
    lab.wait_status("a status from accordd", Duration::from_secs(30), |_| true)
        .await
        .unwrap()
}

/// Waits until the first power-on Reset reaches the BMC proxy (polled
/// every 5 ms, so a test can act at once).
pub async fn first_power_on_reset(lab: &Lab) {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    while lab.proxy.log().iter().all(|l| !l.power_on) {
        assert!(
            tokio::time::Instant::now() < end,
            "no power-on Reset reached the BMC proxy within 30 s; {}",
            lab.daemon_report()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

pub fn r2() -> BTreeSet<String> {
    set(&["r2-n1", "r2-n2", "r2-n3", "r2-n4"])
}

/// accordd's `/metrics` text.
pub async fn metrics(lab: &Lab) -> String {
    reqwest::get(format!("{}/metrics", lab.daemon_url))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics text")
}

/// Runs the accordctl binary against the lab's accordd as its admin:
/// (succeeded, stdout, stderr).
pub fn accordctl(lab: &Lab, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(super::accordctl_bin())
        .args(args)
        .env("ACCORD_URL", &lab.daemon_url)
        .env(
            "ACCORD_ADMIN_TOKEN_FILE",
            lab.dir.path().join("admin-token"),
        )
        .output()
        .expect("accordctl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl ARGS` with the lab's kubeconfig (the admin's): its output,
/// whatever its exit status.
pub fn kubectl_output(lab: &Lab, args: &[&str]) -> std::process::Output {
    let kubeconfig = lab.kubeconfig.as_ref().expect("the lab wrote a kubeconfig");
    let dir = accord_testkit::control_plane::Binaries::for_minor(lab.kube_version.minor()).unwrap();
    accord_testkit::process::output_within(
        std::process::Command::new(dir.path("kubectl").unwrap())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args),
        Duration::from_secs(150),
    )
}

/// `kubectl ARGS` with the lab's kubeconfig (the admin's): its stdout; it
/// must succeed.
pub fn kubectl(lab: &Lab, args: &[&str]) -> String {
    let out = kubectl_output(lab, args);
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
