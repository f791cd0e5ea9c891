//! `fuzz-figures`: hostile input at volume. Every parser that takes
//! outside data (the targets of `daemon/tests/hostile.rs` and
//! `agent/tests/hostile.rs`, included here by path) runs many seeded
//! cases mutated from the recorded fixtures (`accord_testkit::hostile`),
//! each guarded: a panic, a case over the deadline (a hang) or over the
//! memory bound is a finding with the seed and case that replay it. Prints
//! cases per second, accepted share, peak heap and slowest case per parser,
//! then every finding.
//!
//! Each parser runs in a child process (this program again), so a crash
//! the harness cannot catch (a stack overflow, a C `abort()`) is reported
//! with its case, from the case thread's name, and the run goes on after it.
//!
//! ```text
//! cargo run --release -p accord-benches --bin fuzz-figures -- \
//!     [--cases N] [--seed S] [--parser NAME]... [--seconds T] \
//!     [--case I [--dump FILE]] [--list]
//! ```
//!
//! `--cases` per parser (default 10,000), `--seconds` a time budget per
//! parser (default none), `--case I` replays one case (`--dump FILE`
//! writes its input).

#[path = "../../../daemon/tests/hostile/targets.rs"]
#[allow(dead_code)]
mod daemon_targets;

#[path = "../../../agent/tests/hostile/targets.rs"]
#[allow(dead_code)]
mod agent_targets;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accord_testkit::hostile::{self, CountingAlloc, Limits, Target};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[derive(Debug, Clone)]
struct Args {
    cases: u64,
    seed: u64,
    parsers: Vec<String>,
    seconds: Option<f64>,
    case: Option<u64>,
    dump: Option<String>,
    list: bool,
    /// Internal: run one parser from `from` in this process.
    child: bool,
    from: u64,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        cases: 10_000,
        seed: 16,
        parsers: Vec::new(),
        seconds: None,
        case: None,
        dump: None,
        list: false,
        child: false,
        from: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--cases" => a.cases = value()?.parse()?,
            "--seed" => a.seed = value()?.parse()?,
            "--parser" => a.parsers.push(value()?),
            "--seconds" => a.seconds = Some(value()?.parse()?),
            "--case" => a.case = Some(value()?.parse()?),
            "--dump" => a.dump = Some(value()?),
            "--from" => a.from = value()?.parse()?,
            "--child" => a.child = true,
            "--list" => a.list = true,
            "--help" | "-h" => {
                println!(
                    "fuzz-figures [--cases N] [--seed S] [--parser NAME]... [--seconds T] [--case I [--dump FILE]] [--list]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (--help)"),
        }
    }
    Ok(a)
}

fn targets() -> Vec<Target> {
    let mut all = daemon_targets::all();
    all.extend(agent_targets::all());
    all
}

fn find(name: &str) -> anyhow::Result<Target> {
    targets()
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| anyhow::anyhow!("no parser {name:?} (--list)"))
}

fn limits() -> Limits {
    Limits::default()
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    if a.list {
        for t in targets() {
            println!("{:<16} {:?}, {} seeds", t.name, t.dialect, t.corpus.len());
        }
        return Ok(());
    }
    if let Some(index) = a.case {
        return replay(&a, index);
    }
    if a.child {
        return child(&a);
    }
    parent(&a)
}

/// One case, again: its result, and its input written out if asked.
fn replay(a: &Args, index: u64) -> anyhow::Result<()> {
    let [name] = a.parsers.as_slice() else {
        anyhow::bail!("--case needs exactly one --parser");
    };
    let t = find(name)?;
    let input = hostile::case(&t.corpus, t.dialect, a.seed, index);
    if let Some(path) = &a.dump {
        std::fs::write(path, &input)?;
        println!("{} bytes written to {path}", input.len());
    }
    let limits = limits().for_input(&t, input.len());
    let r = hostile::run_input(t.name, a.seed, index, input, &t.parse, &limits);
    println!(
        "{} seed {} case {}: {} bytes, {}, problem {:?}, peak {} KiB, {:?}",
        t.name,
        a.seed,
        index,
        r.input_len,
        match &r.reason {
            None if r.accepted => "accepted".to_owned(),
            None => "no answer".to_owned(),
            Some(why) => format!("refused: {why}"),
        },
        r.problem,
        r.peak.unwrap_or(0) >> 10,
        r.elapsed
    );
    Ok(())
}

/// In the child: one parser, cases `from..cases`, a summary on stdout.
fn child(a: &Args) -> anyhow::Result<()> {
    let [name] = a.parsers.as_slice() else {
        anyhow::bail!("--child needs exactly one --parser");
    };
    let t = find(name)?;
    let budget = a.seconds.map(Duration::from_secs_f64);
    // Each case's index on stderr before it runs: a crash no thread name
    // names (a segfault in C) is the last one said.
    let s = hostile::run_observed(&t, a.seed, a.from..a.cases, &limits(), budget, &mut |i| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "CASE {i}");
    });
    let (peak, peak_case) = s.peak.unwrap_or((0, 0));
    println!(
        "SUMMARY {} {} {} {} {} {} {} {}",
        s.cases,
        s.accepted,
        s.refused,
        peak,
        peak_case,
        s.slowest.0.as_micros(),
        s.slowest.1,
        s.elapsed.as_micros()
    );
    for f in &s.findings {
        println!("FINDING {f}");
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    accepted: u64,
    peak: (u64, u64),
    slowest: (u64, u64),
    elapsed: Duration,
    findings: Vec<String>,
}

/// Runs each parser in children (again after a crash, from the next case)
/// and prints the figures.
fn parent(a: &Args) -> anyhow::Result<()> {
    let names: Vec<String> = if a.parsers.is_empty() {
        targets().iter().map(|t| t.name.to_owned()).collect()
    } else {
        a.parsers.clone()
    };
    let exe = std::env::current_exe()?;
    println!(
        "fuzz-figures: seed {}, up to {} cases per parser{}, deadline {:?}, memory bound {} MiB per case",
        a.seed,
        a.cases,
        a.seconds
            .map(|s| format!(" or {s} s"))
            .unwrap_or_default(),
        limits().deadline,
        limits().max_bytes >> 20
    );
    let mut rows = Vec::new();
    for name in &names {
        let mut tally = Tally::default();
        let mut from = 0u64;
        let started = Instant::now();
        while from < a.cases {
            let left = a.seconds.map(|s| s - started.elapsed().as_secs_f64());
            if left.is_some_and(|l| l <= 0.0) {
                break;
            }
            let mut cmd = Command::new(&exe);
            cmd.args(["--child", "--parser", name])
                .args(["--seed", &a.seed.to_string()])
                .args(["--cases", &a.cases.to_string()])
                .args(["--from", &from.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(l) = left {
                cmd.args(["--seconds", &format!("{l:.3}")]);
            }
            let out = cmd.output()?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let mut summarized = false;
            for line in stdout.lines() {
                if let Some(rest) = line.strip_prefix("SUMMARY ") {
                    let n: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap_or(0)).collect();
                    tally.cases += n[0];
                    tally.accepted += n[1];
                    if n[3] > tally.peak.0 {
                        tally.peak = (n[3], n[4]);
                    }
                    if n[5] > tally.slowest.0 {
                        tally.slowest = (n[5], n[6]);
                    }
                    tally.elapsed += Duration::from_micros(n[7]);
                    summarized = true;
                } else if let Some(f) = line.strip_prefix("FINDING ") {
                    tally.findings.push(f.to_owned());
                }
            }
            if summarized && out.status.success() {
                // A hang ends a child's run early: go on after it.
                let hang = tally
                    .findings
                    .last()
                    .filter(|f| f.contains(": hang:"))
                    .and_then(|f| case_of(f, name, a.seed));
                match hang {
                    Some(i) if i + 1 > from && i + 1 < a.cases => from = i + 1,
                    _ => break,
                }
                continue;
            }
            // A crash: the case thread's name says which case.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let prefix = format!("hostile:{name}:{}:", a.seed);
            let named = stderr.rfind(&prefix).and_then(|at| {
                stderr[at + prefix.len()..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|d| d.parse::<u64>().ok())
            });
            let said = stderr
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("CASE ")?.trim().parse::<u64>().ok());
            let index = named.or(said);
            let tail: String = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty() && !l.starts_with("CASE "))
                .unwrap_or("")
                .chars()
                .take(300)
                .collect();
            let Some(index) = index else {
                tally
                    .findings
                    .push(format!("{name}: the child failed ({}): {tail}", out.status));
                break;
            };
            tally.findings.push(format!(
                "{name} seed {} case {index}: crash ({}): {tail} — replay: fuzz-figures --parser {name} --seed {} --case {index}",
                a.seed, out.status, a.seed
            ));
            // The cases before it ran: count them (their figures are lost
            // with the child; the count is not).
            tally.cases += index + 1 - from;
            from = index + 1;
        }
        print_row(name, &tally);
        rows.push((name.clone(), tally));
    }
    let total: u64 = rows.iter().map(|(_, t)| t.cases).sum();
    let findings: Vec<&String> = rows.iter().flat_map(|(_, t)| &t.findings).collect();
    println!("{total} cases, {} findings", findings.len());
    for f in findings {
        println!("  {f}");
    }
    Ok(())
}

fn case_of(finding: &str, name: &str, seed: u64) -> Option<u64> {
    let key = format!("{name} seed {seed} case ");
    let rest = finding.strip_prefix(&key)?;
    rest.split(' ').next()?.parse().ok()
}

fn print_row(name: &str, t: &Tally) {
    let rate = t.cases as f64 / t.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{name:<16} {:>8} cases {:>9.0} cases/s  accepted {:>5.1} %  peak {:>7.1} MiB (case {})  slowest {:>8.1} ms (case {})  findings {}",
        t.cases,
        rate,
        100.0 * t.accepted as f64 / (t.cases.max(1)) as f64,
        t.peak.0 as f64 / (1u64 << 20) as f64,
        t.peak.1,
        t.slowest.0 as f64 / 1000.0,
        t.slowest.1,
        t.findings.len()
    );
}
