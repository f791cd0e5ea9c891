//! `accordctl simulate` end to end: the embedded default with the two
//! reference policies, twice with one seed (byte-identical figures), the
//! report written, and bad input refused with the file named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn simulate(args: &[&str], out: &Path) -> Output {
    let power_saver = repo().join("config/policy-power-saver.toml");
    let warm_spares = repo().join("config/policy-warm-spares.toml");
    Command::new(env!("CARGO_BIN_EXE_accordctl"))
        .arg("simulate")
        .arg(format!("--policy=power-saver={}", power_saver.display()))
        .arg(format!("--policy=warm-spares={}", warm_spares.display()))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn the_default_with_two_policies_writes_the_report_and_the_same_figures_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    let out = simulate(&["--seed", "42", "--json"], &a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // --json: JSON only on stdout.
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["policies"][0]["name"], "power-saver");
    assert_eq!(summary["policies"][1]["name"], "warm-spares");
    assert!(summary["elapsed_s"].as_f64().is_some());
    let out = simulate(&["--seed", "42"], &b);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("power-saver") && text.contains("report:"),
        "{text}"
    );

    let fa = std::fs::read(a.join("figures.json")).unwrap();
    let fb = std::fs::read(b.join("figures.json")).unwrap();
    assert!(fa == fb, "the same seed gave different figures.json");
    let figures: serde_json::Value = serde_json::from_slice(&fa).unwrap();
    assert_eq!(figures["seed"], 42);
    assert_eq!(figures["inputs"]["fleet"], "embedded default fleet");
    let saver = &figures["policies"][0];
    let spares = &figures["policies"][1];
    assert_eq!(saver["policy"]["idle_power_off_after_s"], 120);
    assert_eq!(spares["policy"]["placement"], "least_fragmentation");
    // A key neither file sets keeps the fleet's value.
    assert_eq!(
        saver["policy"]["warm_spares_per_profile"]["hgx-h100-mig"],
        1
    );
    assert!(
        spares["summary"]["power_ons"].as_u64() < saver["summary"]["power_ons"].as_u64(),
        "warm spares power on less often"
    );

    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") || html.starts_with("<!doctype html>"));
    assert!(html.matches("<svg").count() >= 5, "charts inline");
    assert!(
        !html.contains("http://") || !html.contains("<script src"),
        "no external scripts"
    );
    assert!(html.contains("power-saver") && html.contains("warm-spares"));

    // Another seed draws other delays.
    let out = simulate(&["--seed", "43"], &c);
    assert!(out.status.success());
    assert!(fa != std::fs::read(c.join("figures.json")).unwrap());
}

#[test]
fn bad_inputs_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad_policy = dir.path().join("bad.toml");
    std::fs::write(&bad_policy, "idle_power_off_after_s = \"soon\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_accordctl"))
        .args(["simulate", "--out"])
        .arg(dir.path().join("o"))
        .arg(format!("--policy=x={}", bad_policy.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:1:"), "{err}");
    assert!(!dir.path().join("o").exists(), "nothing written");

    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, "{\"jobs\": [{\"submit_s\": 1}]}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_accordctl"))
        .args(["simulate", "--out"])
        .arg(dir.path().join("o"))
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("trace.json:1:"));

    let out = Command::new(env!("CARGO_BIN_EXE_accordctl"))
        .args(["simulate", "--out"])
        .arg(dir.path().join("o"))
        .arg("--policy=nofile")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NAME=FILE"));
}

/// `--out` may be a directory others can write to: a symlink planted there
/// is replaced, its target left alone; a FIFO given as the trace is
/// refused at once (no hang waiting for a writer).
#[test]
fn planted_symlinks_are_not_followed_and_fifos_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, out_dir.join("figures.json")).unwrap();
    std::os::unix::fs::symlink(&victim, out_dir.join("report.html")).unwrap();
    let out = simulate(&["--seed", "7"], &out_dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let figures = std::fs::symlink_metadata(out_dir.join("figures.json")).unwrap();
    assert!(figures.is_file(), "figures.json is a file of its own now");

    let fifo = dir.path().join("trace.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_accordctl"))
        .args(["simulate", "--out"])
        .arg(dir.path().join("o"))
        .arg("--trace")
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("accordctl still waited on the FIFO after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("a FIFO, not a regular file"), "{err}");
}
