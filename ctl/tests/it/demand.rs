//! `accordctl demand` and `accordctl plan --demand MANIFESTS.yaml`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn accordctl(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_accordctl"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn demand_prints_what_accord_understands_and_every_reason() {
    let sched = repo("tests/fixtures/kubernetes/written/sched-podgroup.yaml");
    let broken = repo("tests/fixtures/kubernetes/written/broken.yaml");
    let (ok, text) = accordctl(&["demand", sched.to_str().unwrap(), broken.to_str().unwrap()]);
    assert!(ok, "{text}");
    for expected in [
        "workload ml/train-a  (4 pods, gang minimum 4, priority 100)",
        "topology: all in one rack",
        "pod set train-a × 4: cpu=40250m memory=263288Mi",
        "claim gpus request gpus: 8 × gpu.nvidia.com",
        "cannot plan bad/pod-unknown-function",
        "unknown function `fuzzyMatch`",
    ] {
        assert!(text.contains(expected), "missing {expected:?}:\n{text}");
    }
    let (ok, json) = accordctl(&["demand", sched.to_str().unwrap(), "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["demand"]["workloads"][0]["min_count"], 4);
    // Bad YAML names the file and line.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: Pod\nmetadata: [\n").unwrap();
    let (ok, text) = accordctl(&["demand", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(text.contains("bad.yaml:"), "{text}");
}

#[test]
fn plan_accepts_manifests() {
    let dir = repo("tests/scenarios/gang-rack-mixed");
    let (ok, text) = accordctl(&[
        "plan",
        "--fleet",
        dir.join("fleet.toml").to_str().unwrap(),
        "--demand",
        dir.join("manifests.yaml").to_str().unwrap(),
        "--now",
        "100000",
        "--json",
    ]);
    assert!(ok, "{text}");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    assert_eq!(plan["actions"], expected["actions"]);
}
