//! `lab-figures`: latency of the whole loop in the local lab. Each run
//! starts a fresh lab (sushy-emulator BMCs, fake Kubernetes API, agents,
//! binder), lets accordd settle, submits a 4 x 8-GPU gang that must share a
//! rack, and measures pending → first Reset issued (seen by the lab's BMC
//! proxy) and pending → all pods bound. accordd runs with the production
//! control settings (1 s batch idle window, 10 s max, 5 s tick); the
//! machines boot in 1.5 s (a real GPU server takes minutes, so the bound
//! figure is mostly the emulator's 1–11 s power-on delay).
//! Goal (issue 7): pending → Reset under 1.5 s including the batch window.
//!
//! accordd runs as a child process: this binary with `--accordd run
//! --config FILE` runs `accordd::serve`, the code the `accordd` binary's
//! thin main runs (and `--accordd check-config FILE` checks the file), so
//! the figures are of a release build.
//!
//! `cargo run --release -p accord-benches --bin lab-figures [RUNS]`

use std::path::Path;
use std::time::Duration;

use accord_lab::{Lab, LabOptions, Scenario};

/// The lab settings and production control settings; the fleet and gang
/// are the end-to-end tests' (three racks; the gang fits only r2).
const SETTINGS: &str = r#"
[lab]
kubernetes = "fake"
boot_delay_ms = 1000
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 120

[control]
bmc_poll_ms = 30000
transition_poll_ms = 1000
"#;

fn scenario_text() -> String {
    use accord_lab::fixtures::{gang, FLEET};
    format!(
        "{SETTINGS}\n{FLEET}\n[[submit]]\nname = \"gang\"\nrun_ms = 600000\nmanifests = \'\'\'\n{}\'\'\'\n",
        gang("gang", 4)
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn one_run() -> anyhow::Result<(f64, f64)> {
    let scenario = Scenario::parse(&scenario_text(), Path::new("lab-figures"))?;
    let lab = Lab::start(
        scenario,
        LabOptions {
            accordd_prefix: vec!["--accordd".into()],
            daemon_log: Some(std::env::temp_dir().join("accord-lab-figures.log")),
            ..LabOptions::new(std::env::current_exe()?)
        },
    )
    .await?;
    lab.start_daemon()?;
    lab.wait_status("accordd's first round", Duration::from_secs(60), |_| true)
        .await?;
    // A quiet moment: no batch window open when the gang arrives.
    tokio::time::sleep(Duration::from_secs(2)).await;
    lab.release("gang")?;
    let end = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let (Some(t0), Some(t1)) = lab.submission_times("gang") {
            let first_reset = lab
                .proxy
                .log()
                .iter()
                .filter(|l| l.power_on && l.at >= t0)
                .map(|l| l.at.duration_since(t0).as_secs_f64())
                .reduce(f64::min)
                .unwrap_or(f64::NAN);
            return Ok((first_reset, t1.duration_since(t0).as_secs_f64()));
        }
        anyhow::ensure!(tokio::time::Instant::now() < end, "gang not bound in 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--accordd") {
        // The daemon side: what `accordd check-config FILE` and `accordd
        // run --config FILE` run.
        let file = args.last().expect("run --config FILE");
        let config = accordd::config::DaemonConfig::load(Path::new(file))?;
        if args.get(2).map(String::as_str) == Some("check-config") {
            return Ok(());
        }
        let runtime = tokio::runtime::Runtime::new()?;
        return runtime.block_on(accordd::serve(config, async {
            let _ = tokio::signal::ctrl_c().await;
        }));
    }
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let runtime = tokio::runtime::Runtime::new()?;
    let mut resets = Vec::new();
    let mut bounds = Vec::new();
    for i in 0..runs {
        let (reset, bound) = runtime.block_on(one_run())?;
        println!(
            "run {}: pending → first Reset {reset:.3} s, pending → 4 pods bound {bound:.1} s",
            i + 1
        );
        resets.push(reset);
        bounds.push(bound);
    }
    let (rmin, rmax) = (
        resets.iter().cloned().fold(f64::INFINITY, f64::min),
        resets.iter().cloned().fold(0.0, f64::max),
    );
    let r = median(&mut resets);
    let b = median(&mut bounds);
    println!(
        "\n{runs} runs: pending → first Reset median {r:.3} s (min {rmin:.3}, max {rmax:.3}; goal < 1.5 s: {}), \
         pending → bound median {b:.1} s",
        if rmax < 1.5 { "met" } else { "NOT met" }
    );
    Ok(())
}
