//! `peer-figures`: Accord beside the real cluster-autoscaler and Karpenter
//! on the same trace, each arm one after another on a fresh upstream
//! control plane (issue 32; what it measures: `accord_benches::peers`).
//!
//! ```text
//! scripts/karpenter    # Karpenter's kwok provider, built once into the cache
//! cargo run --release -p accord-benches --bin peer-figures -- --out DIR \
//!     [--trace gang|holdout|both] [--arms accord,karpenter,karpenter-affinity] \
//!     [--horizon-s 300] [--boot-s 20] [--idle-s 30]
//! ```
//!
//! Writes DIR/peer-figures.json, DIR/peer-figures.html and each arm's logs;
//! prints the tables (Markdown) on stdout.

use std::path::{Path, PathBuf};

use accord_benches::peers::arms::{self, Arm, Settings};
use accord_benches::peers::report::{self, Report};
use accord_benches::peers::trace::{self, TraceName};
use clap::Parser;

/// cluster-autoscaler's kwok build, as tried through the module proxy
/// (403 "not available" for each, 2026-12-05).
const CLUSTER_AUTOSCALER_TRIED: &str = "cluster-autoscaler (both arms: plain pods, and ProvisioningRequests with \
     best-effort-atomic-scale-up): the Go module proxy serves no version of k8s.io/autoscaler/cluster-autoscaler \
     (tried v1.36.0, v1.35.0, v1.34.0, v1.33.0 and the version list: 403 'not available') nor of \
     sigs.k8s.io/cluster-autoscaler (version list and v1.37.0: 403)";

#[derive(Parser, Debug)]
#[command(
    about = "Accord beside Karpenter (and cluster-autoscaler, where served) on the same trace"
)]
struct Args {
    /// Where the JSON, the HTML page and the logs go.
    #[arg(long)]
    out: PathBuf,
    /// gang, holdout or both.
    #[arg(long, default_value = "both")]
    trace: String,
    /// The arms to run, in order (accord, karpenter, karpenter-affinity).
    #[arg(
        long,
        default_value = "accord,karpenter,karpenter-affinity",
        value_delimiter = ','
    )]
    arms: Vec<String>,
    /// Each arm's time (the trace arrives in its first 60 %).
    #[arg(long, default_value_t = 300.0)]
    horizon_s: f64,
    /// Powered (a peer: Node made) to Node Ready, for every arm.
    #[arg(long, default_value_t = 20.0)]
    boot_s: f64,
    /// Idle time before a machine is shut, for every arm.
    #[arg(long, default_value_t = 30.0)]
    idle_s: f64,
}

fn main() -> anyhow::Result<()> {
    let raw: Vec<String> = std::env::args().collect();
    if raw.get(1).map(String::as_str) == Some("--accordd") {
        // The Accord arm's daemon: what `accordd check-config FILE` and
        // `accordd run --config FILE` run.
        accord_api::logging::init_logging("info");
        let file = raw.last().expect("run --config FILE");
        let config = accordd::config::DaemonConfig::load(Path::new(file))?;
        if raw.get(2).map(String::as_str) == Some("check-config") {
            return Ok(());
        }
        let runtime = tokio::runtime::Runtime::new()?;
        return runtime.block_on(accordd::serve(config, async {
            let _ = tokio::signal::ctrl_c().await;
        }));
    }
    let args = Args::parse();
    let traces = match args.trace.as_str() {
        "gang" => vec![TraceName::Gang],
        "holdout" => vec![TraceName::Holdout],
        "both" => vec![TraceName::Gang, TraceName::Holdout],
        other => anyhow::bail!("--trace {other}: gang, holdout or both"),
    };
    let arms: Vec<Arm> = args
        .arms
        .iter()
        .map(|a| {
            Arm::parse(a).ok_or_else(|| {
                anyhow::anyhow!("--arms: {a} is not an arm (accord, karpenter, karpenter-affinity)")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(args.horizon_s >= 60.0, "--horizon-s: at least 60");
    std::fs::create_dir_all(&args.out)?;
    let settings = Settings {
        horizon_s: args.horizon_s,
        boot_s: args.boot_s,
        idle_s: args.idle_s,
        kube_minor: 37,
        out: args.out.clone(),
        exe: std::env::current_exe()?,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let mut figures = Vec::new();
    for t in &traces {
        let jobs = trace::trace(*t, settings.horizon_s);
        for arm in &arms {
            let started = std::time::Instant::now();
            let f = runtime.block_on(arms::run(*arm, t.as_str(), &jobs, &settings))?;
            eprintln!(
                "peer-figures: {}/{} done in {:.0} s",
                t.as_str(),
                arm.as_str(),
                started.elapsed().as_secs_f64()
            );
            figures.push(f);
        }
    }
    let report = Report {
        command: raw.join(" "),
        settings: serde_json::json!({
            "horizon_s": settings.horizon_s, "boot_s": settings.boot_s, "idle_s": settings.idle_s,
            "kubernetes": "v1.37.2 (scheduling.k8s.io/v1beta1, GenericWorkload, TopologyAwareWorkloadScheduling)",
            "karpenter": "sigs.k8s.io/karpenter v1.14.1 (kwok provider)",
            "fleet": "3 racks x 4 machines x 8 GPUs",
        }),
        not_served: vec![CLUSTER_AUTOSCALER_TRIED.to_owned()],
        caveats: caveats(&settings),
        figures,
    };
    std::fs::write(
        args.out.join("peer-figures.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    std::fs::write(args.out.join("peer-figures.html"), report::html(&report))?;
    println!("{}", report::markdown(&report));
    eprintln!(
        "peer-figures: wrote {}",
        args.out.join("peer-figures.html").display()
    );
    Ok(())
}

fn caveats(s: &Settings) -> Vec<String> {
    vec![
        format!(
            "Boot: every arm's machine is Ready {:.0} s after it is powered (a peer: its Node made); \
             Accord's also waits for sushy-emulator's power-on (1-11 s) and its agent's first report, \
             which favours the peers.",
            s.boot_s
        ),
        "Karpenter's Nodes exist from the moment they are launched, so a peer's machine-powered \
         seconds count from launch; Accord's from the BMC's power-on."
            .to_owned(),
        "The trace's gangs are scheduling.k8s.io/v1beta1 PodGroups, which Accord reads and Karpenter \
         does not: that is the difference measured, not a configuration of the peer. The \
         karpenter-affinity arm gives Karpenter the rack as a required pod affinity, the way its docs \
         keep pods in one topology domain."
            .to_owned(),
        "Karpenter's kubelets are peer-figures' stand-in (Ready after the boot time, Lease renewed, pods \
         Running); Accord's are the lab's: both only report, neither decides."
            .to_owned(),
        "NodePools have equal price and fixed weights (r1 > r2 > r3) and a 100 % disruption budget, so \
         Karpenter may shut every empty node at once, as Accord may."
            .to_owned(),
        "No DaemonSets run in any arm.".to_owned(),
    ]
}
