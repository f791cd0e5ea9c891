//! `soak-figures`: accordd's memory over a long run with continuous churn
//! (issue 16, item 12). The real accordd binary runs in act mode as a
//! child process against 1,000 simulated nodes (default) for 10 minutes
//! (default): BMCs (a Redfish stand-in), agents, Kubernetes (the fake API
//! server and a stand-in scheduler) and churn, all in this process (see
//! `accord_benches::soak`). accordd's RSS (`VmRSS`) is sampled every 10 s.
//!
//! Prints each sample, then RSS after warm-up (min, max, least-squares
//! slope in MiB per minute, the trend's growth over the judged span,
//! final) and what the run did (rounds, reports, heartbeats, pods
//! churned, BMC requests). Exits 1 when the trend after warm-up grows
//! more than `--max-growth-mib` (default 16 MiB), and says so.
//!
//! accordd: `--accordd PATH`, else `$ACCORDD`, else `accordd` next to this
//! binary (`cargo build --release -p accord-daemon`). Like accordd, this
//! binary uses the system allocator.
//!
//! ```text
//! cargo build --release -p accord-daemon -p accord-benches --bin accordd --bin soak-figures
//! target/release/soak-figures [--nodes 1000] [--seconds 600] [--seed 1]
//!     [--warmup-seconds 180] [--sample-seconds 10] [--max-growth-mib 16]
//!     [--workloads-per-minute R] [--accordd PATH] [--log FILE]
//! ```

use std::path::PathBuf;
use std::time::Duration;

use accord_benches::soak::{self, Figures, Options, Sample, Stats};

const USAGE: &str = "usage: soak-figures [--nodes N] [--seconds S] [--seed K] \
    [--warmup-seconds W] [--sample-seconds S] [--max-growth-mib M] [--workloads-per-minute R] \
    [--accordd PATH] [--log FILE]";

/// `--serve-accordd ARGS`: this binary plays accordd (`run --config FILE`
/// runs `accordd::serve`, the code the accordd binary's thin main runs),
/// for the smoke test, which cannot build accord-daemon's binary.
fn serve_accordd(args: &[String]) -> anyhow::Result<()> {
    accord_api::logging::init_logging("info");
    let file = args
        .last()
        .ok_or_else(|| anyhow::anyhow!("run --config FILE"))?;
    let config = accordd::config::DaemonConfig::load(std::path::Path::new(file))?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        // SIGTERM or SIGINT, as the accordd binary stops.
        let stop = accord_api::signals::stop_signal()?;
        accordd::serve(config, stop).await
    })
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut nodes = 1000usize;
    let mut seconds = 600u64;
    let mut seed = 1u64;
    let mut warmup = None;
    let mut sample = None;
    let mut growth = None;
    let mut accordd = std::env::var_os("ACCORDD").map(PathBuf::from);
    let mut log = None;
    let mut per_min = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value; {USAGE}"))
        };
        match flag.as_str() {
            "--nodes" => nodes = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            "--seed" => seed = value()?.parse()?,
            "--warmup-seconds" => warmup = Some(value()?.parse::<u64>()?),
            "--sample-seconds" => sample = Some(value()?.parse::<u64>()?),
            "--max-growth-mib" => growth = Some(value()?.parse::<f64>()?),
            "--accordd" => accordd = Some(PathBuf::from(value()?)),
            "--log" => log = Some(PathBuf::from(value()?)),
            "--workloads-per-minute" => per_min = Some(value()?.parse::<f64>()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other}; {USAGE}"),
        }
    }
    let accordd = match accordd {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("accordd"))
            .ok_or_else(|| anyhow::anyhow!("no directory for this binary"))?,
    };
    anyhow::ensure!(
        accordd.is_file(),
        "{}: no accordd binary (build it with `cargo build --release -p accord-daemon`, \
         or name it with --accordd or ACCORDD)",
        accordd.display()
    );
    let mut o = Options::new(accordd, nodes, Duration::from_secs(seconds), seed);
    if let Some(w) = warmup {
        o.warmup = Duration::from_secs(w);
    }
    if let Some(s) = sample {
        o.sample_every = Duration::from_secs(s.max(1));
    }
    if let Some(g) = growth {
        o.max_growth_mib = g;
    }
    if let Some(l) = log {
        o.log = l;
    }
    o.workloads_per_min = per_min;
    Ok(o)
}

fn print_sample(s: &Sample) {
    let stage = |k: &str| s.stages.get(k).copied().unwrap_or(0);
    println!(
        "t {:>5.0} s  RSS {:>7.1} MiB  round {:>5}  BMC On {:>4}  in use {:>4} idle {:>4} ready {:>4} \
         booting {:>3} unhealthy {:>3} failed {:>3}  workloads {:>4} (not bound {:>3})",
        s.at_s,
        s.rss_mib,
        s.round.map_or("-".to_owned(), |r| r.to_string()),
        s.powered,
        stage("in_use"),
        stage("idle"),
        stage("ready"),
        stage("powering_on") + stage("booting") + stage("agent_up"),
        stage("unhealthy"),
        stage("failed"),
        s.workloads,
        s.pending,
    );
}

fn summary(f: &Figures) -> bool {
    let o = &f.options;
    let s = &f.stats;
    let g = Stats::get;
    let judged = f.judged();
    println!();
    println!(
        "accordd RSS: {:.1} MiB when it served, {:.1} MiB at the end ({} samples, every {} s)",
        f.rss_at_start_mib,
        f.samples.last().map_or(0.0, |x| x.rss_mib),
        f.samples.len(),
        o.sample_every.as_secs()
    );
    let verdict = match (
        f.judged_range(),
        f.slope_mib_per_min(),
        f.trend_growth_mib(),
    ) {
        (Some((min, max)), Some(slope), Some(growth)) => {
            println!(
                "after warm-up ({} s, {} samples from t {:.0} s to {:.0} s): min {min:.1} MiB, max {max:.1} MiB, \
                 slope {slope:+.3} MiB/min, trend over the span {growth:+.1} MiB",
                o.warmup.as_secs(),
                judged.len(),
                judged.first().map_or(0.0, |x| x.at_s),
                judged.last().map_or(0.0, |x| x.at_s),
            );
            f.flat()
        }
        _ => {
            println!("after warm-up: fewer than 3 samples; nothing to judge");
            None
        }
    };
    let last_round = f.samples.iter().rev().find_map(|x| x.round).unwrap_or(0);
    println!(
        "rounds run {last_round}; agent reports {} (+{} not taken), heartbeats {} (+{} failed)",
        g(&s.reports),
        g(&s.report_errors),
        g(&s.heartbeats),
        g(&s.heartbeat_errors)
    );
    println!(
        "workloads created {} (bound {}, finished {}, given up {}); pods created {}, bound {}, deleted {}",
        g(&s.workloads_created),
        g(&s.workloads_bound),
        g(&s.workloads_finished),
        g(&s.workloads_given_up),
        g(&s.pods_created),
        g(&s.pods_bound),
        g(&s.pods_deleted)
    );
    println!(
        "BMC requests {} (Resets: On {}, off {}, restart {}); hardware changes {}; Node NotReady flaps {}, \
         agent silences {}; API compactions {}; scheduler passes {}",
        g(&s.bmc_requests),
        g(&s.resets_on),
        g(&s.resets_off),
        g(&s.resets_restart),
        g(&s.hardware_changes),
        g(&s.kubelet_flaps),
        g(&s.agent_silences),
        g(&s.compactions),
        g(&s.scheduler_passes)
    );
    println!(
        "accordd's store on disk at the end: {:.1} MiB",
        f.store_bytes as f64 / 1048576.0
    );
    let errors = s.errors.lock().expect("lock");
    let mut errors: Vec<(&String, &u64)> = errors.iter().collect();
    errors.sort_by(|a, b| b.1.cmp(a.1));
    for (what, n) in errors.iter().take(5) {
        println!("  agent request failed {n} x: {what}");
    }
    match verdict {
        Some(true) => {
            println!(
                "RSS flat after warm-up: trend {:+.1} MiB over the span, within the threshold of \
                 {:.0} MiB (the least-squares trend after warm-up may grow at most that much)",
                f.trend_growth_mib().unwrap_or(0.0),
                o.max_growth_mib
            );
            true
        }
        Some(false) => {
            println!(
                "FAIL: RSS grows after warm-up: trend {:+.1} MiB over the span, above the threshold of {:.0} MiB",
                f.trend_growth_mib().unwrap_or(0.0),
                o.max_growth_mib
            );
            false
        }
        None => {
            println!(
                "FAIL: too few samples after warm-up to judge (run longer, or sample more often)"
            );
            false
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve-accordd") {
        return serve_accordd(&args[1..]);
    }
    accord_api::logging::init_logging("info,soak=info");
    let options = parse(&args)?;
    println!(
        "soak: accordd {} in act mode, {} nodes, {} s of churn, seed {}, warm-up {} s, a sample every {} s; \
         accordd's log: {}",
        options.accordd.display(),
        options.nodes,
        options.duration.as_secs(),
        options.seed,
        options.warmup.as_secs(),
        options.sample_every.as_secs(),
        options.log.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let figures = runtime.block_on(soak::run(options, print_sample))?;
    if !summary(&figures) {
        std::process::exit(1);
    }
    Ok(())
}
