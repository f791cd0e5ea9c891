//! `discovery-figures`: runs the `accord-agent` binary on the DGX-2 export as
//! an admin would and prints its wall time and peak RSS.
//!
//! Usage: `cargo run --release -p accord-benches -- [PATH-TO-accord-agent] [RUNS]`
//! (default: the release agent next to this binary, 20 runs). Goal: under
//! 50 ms and under 20 MB.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::resource::{getrusage, UsageWho};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let agent = match args.next() {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()?
            .parent()
            .context("no parent dir")?
            .join("accord-agent"),
    };
    let runs: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(20);
    let xml =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hwloc/nvidiaDGX2.xml");
    let mut times: Vec<Duration> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let out = Command::new(&agent)
            .args(["discover", "--json", "--hwloc-xml"])
            .arg(&xml)
            .output()
            .with_context(|| format!("running {}", agent.display()))?;
        times.push(start.elapsed());
        if !out.status.success() {
            bail!("agent failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    times.sort();
    // ru_maxrss of waited-for children: the largest agent process, in KiB.
    let peak_kib = getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("accord-agent discover --json --hwloc-xml nvidiaDGX2.xml, {runs} runs");
    println!(
        "wall time: min {:.1} ms, median {:.1} ms, max {:.1} ms (goal < 50 ms)",
        ms(times[0]),
        ms(times[runs / 2]),
        ms(times[runs - 1])
    );
    println!(
        "peak RSS:  {:.1} MB (goal < 20 MB)",
        peak_kib as f64 / 1024.0
    );
    Ok(())
}
