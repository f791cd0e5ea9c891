//! `accordd lab`, the command: accordd runs the lab program
//! (`ACCORD_LAB`; here this test binary, which plays it through
//! `accord_lab::cli::main`, the accord-lab binary's whole main), the lab
//! runs this accordd as its daemon (`ACCORDD`, set by `accordd lab`).
//!
//! - `accordd lab --until-idle --json > out.json` writes JSON and nothing
//!   else: every log line (the lab's, the agents', the child accordd's)
//!   goes to stderr; accordd is stopped cleanly at the end;
//! - `accordd lab` (no --until-idle) runs until SIGTERM (systemd's stop) or
//!   SIGINT, then stops accordd with SIGTERM and leaves nothing behind.
//!
//! Its own main (`harness = false`): run by accordd as the lab, it is the
//! lab; otherwise it is the test.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Set when accordd runs this binary as the lab.
const AS_LAB: &str = "ACCORD_TEST_PLAYS_THE_LAB";

const TESTS: &[(&str, fn())] = &[
    (
        "accordd_lab_until_idle_json_prints_only_json",
        accordd_lab_until_idle_json_prints_only_json,
    ),
    (
        "accordd_lab_stops_cleanly_on_sigterm",
        accordd_lab_stops_cleanly_on_sigterm,
    ),
];

/// The smallest lab: one node, on from the start (no power-on to wait for);
/// one pod that binds there and finishes, one that fits nowhere.
const SCENARIO: &str = r#"
[lab]
kubernetes = "fake"
boot_delay_ms = 200
kubelet_delay_ms = 200
heartbeat_ms = 1000
max_s = 120

[control]
tick_ms = 1000

[fleet.policy]
idle_power_off_after_s = 600
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"
[[fleet.racks]]
name = "r1"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
power = "on"

[[submit]]
name = "small"
at_ms = 0
run_ms = 500
manifests = '''
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: small-0}, spec: {containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "1"}}}]}}
'''

[[submit]]
name = "huge"
at_ms = 0
manifests = '''
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: huge-0}, spec: {containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "16"}}}]}}
'''
"#;

fn main() -> ExitCode {
    if std::env::var_os(AS_LAB).is_some() {
        return accord_lab::cli::main();
    }
    // The libtest conventions cargo and IDEs use: --list, filters, --skip.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in TESTS {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--skip" {
            skips.extend(it.next());
        } else if !a.starts_with('-') {
            filters.push(a);
        }
    }
    let selected: Vec<&(&str, fn())> = TESTS
        .iter()
        .filter(|(name, _)| {
            (filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
                && !skips.iter().any(|s| name.contains(s.as_str()))
        })
        .collect();
    println!(
        "running {} test(s) ({} filtered out)",
        selected.len(),
        TESTS.len() - selected.len()
    );
    // One lab at a time (two cores); a failure panics, failing the binary.
    for (name, test) in selected {
        test();
        println!("test {name} ... ok");
    }
    ExitCode::SUCCESS
}

/// `accordd lab ARGS --scenario FILE`, playing the lab, its output piped.
fn accordd_lab(args: &[&str], scenario: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_accordd"))
        .arg("lab")
        .args(args)
        .arg("--scenario")
        .arg(scenario)
        .env("ACCORD_LAB", std::env::current_exe().unwrap())
        .env(AS_LAB, "1")
        // The lab finds accordd through what `accordd lab` tells it.
        .env_remove("ACCORDD")
        .env_remove("ACCORD_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn accordd_lab_until_idle_json_prints_only_json() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let mut child = accordd_lab(&["--until-idle", "--json"], &scenario);
    let mut stdout = Pipe::new(child.stdout.take().unwrap());
    let mut stderr = Pipe::new(child.stderr.take().unwrap());
    // The scenario's own limit (lab.max_s) is 120 s; past this the lab is
    // stuck.
    let status = exit_within(
        &mut child,
        Duration::from_secs(200),
        &mut stdout,
        &mut stderr,
    );
    let (stdout, stderr) = closed(stdout, stderr);
    assert!(
        status.success(),
        "accordd lab: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not only JSON: {e}\nstdout:\n{stdout}"));
    let workload = |name: &str| {
        summary["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no workload {name}: {summary}"))
    };
    assert_eq!(workload("small")["bound"], true, "{summary}");
    assert_eq!(workload("small")["nodes"][0], "r1-n1", "{summary}");
    assert_eq!(workload("huge")["bound"], false, "{summary}");
    assert!(workload("huge")["cannot_place"].is_string(), "{summary}");
    assert_eq!(summary["nodes"][0]["on_now"], true, "{summary}");
    assert_eq!(summary["resets_sent"], 0, "{summary}");
    // accordd's own log lines reached stderr (not stdout, not lost), with
    // no colour: stderr is not a terminal.
    assert!(stderr.contains("accordd serving"), "stderr:\n{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes on a stderr that is not a terminal:\n{stderr}"
    );
    // The lab stopped accordd cleanly (SIGTERM; the lab exits 1 unless
    // accordd exited 0): accordd closed its store.
    assert!(stderr.contains("store closed"), "stderr:\n{stderr}");
}

/// `systemctl stop` (SIGTERM) of a lab that runs until stopped: it stops
/// accordd with SIGTERM (accordd exits 0), prints the summary and exits 0,
/// and no process it started is left (none holds its output open).
fn accordd_lab_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let mut child = accordd_lab(&["--json"], &scenario);
    let mut stdout = Pipe::new(child.stdout.take().unwrap());
    let mut stderr = Pipe::new(child.stderr.take().unwrap());
    // Up: accordd serves (the lab started it after its own start).
    let within = Duration::from_secs(60);
    if !stderr.wait_for("accordd serving", within) {
        let status = stop(&mut child);
        let (stdout, stderr) = closed(stdout, stderr);
        panic!(
            "no \"accordd serving\" on stderr within {within:?} (then the lab: {status})\n\
             stdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
    signal(&child, "TERM");
    let status = exit_within(
        &mut child,
        Duration::from_secs(60),
        &mut stdout,
        &mut stderr,
    );
    let (stdout, stderr) = closed(stdout, stderr);
    assert!(
        status.success(),
        "accordd lab on SIGTERM: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not only JSON: {e}\nstdout:\n{stdout}"));
    assert_eq!(summary["nodes"][0]["name"], "r1-n1", "{summary}");
    assert!(stderr.contains("store closed"), "stderr:\n{stderr}");
}

/// `kill -SIGNAL` to the child.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {}: {status}", child.id());
}

/// Stops a lab as systemd would: SIGTERM, up to 40 s (it gives accordd
/// 30 s), then SIGKILL. Says how it ended.
fn stop(child: &mut Child) -> String {
    if let Ok(Some(status)) = child.try_wait() {
        return format!("had exited: {status}");
    }
    signal(child, "TERM");
    match wait_exit(child, Duration::from_secs(40)) {
        Some(status) => format!("exited on SIGTERM: {status}"),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            "still running 40 s after SIGTERM: killed".to_owned()
        }
    }
}

/// The child's exit status within `within`; else it is stopped ([`stop`])
/// and this panics with what it printed.
fn exit_within(
    child: &mut Child,
    within: Duration,
    stdout: &mut Pipe,
    stderr: &mut Pipe,
) -> ExitStatus {
    if let Some(status) = wait_exit(child, within) {
        return status;
    }
    let how = stop(child);
    stdout.read_for(Duration::from_secs(5));
    stderr.read_for(Duration::from_secs(5));
    panic!(
        "accordd lab did not exit within {within:?} ({how})\nstdout:\n{}\nstderr:\n{}",
        stdout.text, stderr.text
    );
}

/// The child's exit status, or `None` if it is still running after
/// `within`.
fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Everything a lab that exited wrote on stdout and stderr. Each pipe
/// ends when every process holding it has exited: accordd holds the lab's
/// stderr, so one still open 10 s after the lab exited is a child the lab
/// left behind, a failure.
fn closed(mut stdout: Pipe, mut stderr: Pipe) -> (String, String) {
    let within = Duration::from_secs(10);
    let out_closed = stdout.read_for(within);
    let err_closed = stderr.read_for(within);
    assert!(
        out_closed && err_closed,
        "the lab exited and its output is still open {within:?} later \
         (stdout closed: {out_closed}, stderr closed: {err_closed}): a process it started \
         is still running\nstdout:\n{}\nstderr:\n{}",
        stdout.text,
        stderr.text
    );
    (stdout.text, stderr.text)
}

/// A child's output, read line by line on a thread (so the child never
/// blocks on a full pipe).
struct Pipe {
    lines: mpsc::Receiver<String>,
    text: String,
}

impl Pipe {
    fn new(pipe: impl std::io::Read + Send + 'static) -> Pipe {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Pipe {
            lines,
            text: String::new(),
        }
    }

    /// Reads until a line contains `needle` (true) or `within` passes or
    /// the pipe ends (false).
    fn wait_for(&mut self, needle: &str, within: Duration) -> bool {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.text.push_str(&line);
                    self.text.push('\n');
                    if found {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Reads until the pipe ends (true) or `within` passes (false).
    fn read_for(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.text.push_str(&line);
                    self.text.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return true,
                Err(mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }
}
