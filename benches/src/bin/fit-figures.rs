//! Accord's fit against kube-scheduler v1.37.2's own filter plugins on
//! seeded random clusters (benches/src/fitdiff.rs): how many cases and
//! pods, how many node verdicts each plugin rejected, and every
//! disagreement on the feasible set with both answers.
//!
//!   cargo run --release -p accord-benches --bin fit-figures -- \
//!       [--cases 20000] [--seed 1] [--harness PATH]
//!
//! The harness: `scripts/controlplane 1.37 fit-harness` builds it
//! (scripts/bootstrap does); the default is its place in the cache.

use std::path::PathBuf;
use std::time::Instant;

use accord_benches::fitdiff::{compare, Harness, Tally};

fn main() -> anyhow::Result<()> {
    let mut cases: u64 = 20_000;
    let mut seed: u64 = 1;
    let mut harness: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--cases" => cases = value()?.parse()?,
            "--seed" => seed = value()?.parse()?,
            "--harness" => harness = Some(value()?.into()),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let harness = match harness {
        Some(h) => h,
        None => accord_testkit::control_plane::Binaries::for_minor(37)
            .and_then(|b| b.path("fit-harness"))
            .map_err(anyhow::Error::msg)?,
    };
    let mut h = Harness::start(&harness).map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut disagreements = Vec::new();
    for s in seed..seed + cases {
        disagreements.extend(compare(&mut h, s, &mut tally).map_err(anyhow::Error::msg)?);
    }
    println!(
        "{cases} cases from seed {seed} in {:.1} s; {} disagreements on the feasible set",
        started.elapsed().as_secs_f64(),
        disagreements.len()
    );
    println!("rejections per kube-scheduler plugin (node verdicts):");
    for (p, n) in &tally.rejections {
        match p.split_once(": ") {
            None => println!("  {p:<20} {n}"),
            Some((_, reason)) => println!("      {n:>7}  {reason}"),
        }
    }
    let both = tally.same_plugin + tally.other_plugin;
    println!(
        "nodes both reject: {both}; Accord names the scheduler's plugin for {} ({:.2}%)",
        tally.same_plugin,
        100.0 * tally.same_plugin as f64 / both.max(1) as f64
    );
    if let Some((theirs, ours)) = &tally.other_example {
        println!("  another plugin, e.g. kube-scheduler {theirs:?}, Accord {ours:?}");
    }
    for d in disagreements.iter().take(10) {
        println!("\nseed {} pod {}:", d.seed, d.pod);
        for (node, theirs) in &d.scheduler {
            let ours = d.accord.get(node).map_or("(missing)", String::as_str);
            if theirs.is_empty() != ours.is_empty() {
                println!("  {node}: kube-scheduler {theirs:?}, Accord {ours:?}");
            }
        }
    }
    if !disagreements.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
