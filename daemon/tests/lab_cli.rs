//! `accordd lab --until-idle --json > out.json` writes JSON and nothing
//! else: accordd runs the lab program (`ACCORD_LAB`; here this test binary,
//! which plays it through `accord_lab::cli::main`, the accord-lab binary's
//! whole main), the lab runs this accordd as its daemon (`ACCORDD`, set by
//! `accordd lab`), and every log line (the lab's, the agents', the child
//! accordd's) goes to stderr.
//!
//! Its own main (`harness = false`): run by accordd as the lab, it is the
//! lab; otherwise it is the test.

use std::process::{Command, ExitCode, Stdio};

/// Set when accordd runs this binary as the lab.
const AS_LAB: &str = "ACCORD_TEST_PLAYS_THE_LAB";
const NAME: &str = "accordd_lab_until_idle_json_prints_only_json";

/// The smallest lab: one node, on from the start (no power-on to wait for);
/// one pod that binds there and finishes, one that fits nowhere.
const SCENARIO: &str = r#"
[lab]
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
        println!("{NAME}: test");
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
    let selected = (filters.is_empty() || filters.iter().any(|f| NAME.contains(f.as_str())))
        && !skips.iter().any(|s| NAME.contains(s.as_str()));
    if !selected {
        println!("running 0 tests (1 filtered out)");
        return ExitCode::SUCCESS;
    }
    println!("running 1 test");
    accordd_lab_until_idle_json_prints_only_json();
    println!("test {NAME} ... ok");
    ExitCode::SUCCESS
}

fn accordd_lab_until_idle_json_prints_only_json() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_accordd"))
        .arg("lab")
        .args(["--until-idle", "--json", "--scenario"])
        .arg(&scenario)
        .env("ACCORD_LAB", std::env::current_exe().unwrap())
        .env(AS_LAB, "1")
        // The lab finds accordd through what `accordd lab` tells it.
        .env_remove("ACCORDD")
        .env_remove("ACCORD_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "accordd lab: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
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
}
