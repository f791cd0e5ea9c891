//! `accordctl simulate`: reads the fleet, the trace and the policy files,
//! runs `accord-sim`, and writes `report.html` and `figures.json` into the
//! output directory. The simulation itself is pure; this is its I/O.

use std::path::{Path, PathBuf};
use std::time::Instant;

use accord::fleet::{Fleet, PowerState};
use accord_sim::{openb, Input, Trace, World};
use anyhow::Context;

/// The largest trace file read (an openb pod list of some 4 million pods).
pub const MAX_TRACE_BYTES: u64 = 512 << 20;

/// What the command line asked for.
#[derive(Debug, Clone)]
pub struct SimulateArgs {
    pub fleet: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    /// `NAME=FILE`, in order.
    pub policies: Vec<String>,
    pub seed: u64,
    pub out: PathBuf,
}

/// What a run produced, for the caller to print.
#[derive(Debug)]
pub struct SimulateOutcome {
    pub figures: accord_sim::Figures,
    pub report: PathBuf,
    pub json: PathBuf,
    /// Wall-clock seconds the simulation took (reading and writing aside).
    pub elapsed_s: f64,
}

fn read_capped(path: &Path, cap: u64) -> anyhow::Result<String> {
    accord_api::files::read_to_string(path, cap)
        .with_context(|| format!("{}: cannot read file", path.display()))
}

/// A fleet TOML, or an openb node list (every node dark at the start).
fn fleet(path: &Path) -> anyhow::Result<Fleet> {
    let text = read_capped(path, MAX_TRACE_BYTES)?;
    let name = path.display().to_string();
    if openb::is_node_list(&text) {
        let nodes = openb::parse_nodes(&text, &name)?;
        let file = openb::fleet_file(&nodes, PowerState::Off);
        return Ok(file.build(&name, &mut |_| {
            Err("an openb node list names no hardware files".into())
        })?);
    }
    Ok(accord_api::admin_files::load_fleet(path)?)
}

/// Accord's trace or demand JSON, or an openb pod list.
fn trace(path: &Path) -> anyhow::Result<Trace> {
    let text = read_capped(path, MAX_TRACE_BYTES)?;
    let name = path.display().to_string();
    Ok(if openb::is_pod_list(&text) {
        Trace::from_openb(&text, &name)?
    } else {
        Trace::from_json(&text, &name)?
    })
}

/// Reads, simulates, writes.
pub fn run(args: &SimulateArgs) -> anyhow::Result<SimulateOutcome> {
    let (fleet, fleet_source) = match &args.fleet {
        Some(p) => (fleet(p)?, p.display().to_string()),
        None => (
            accord_sim::default_fleet(),
            "embedded default fleet".to_owned(),
        ),
    };
    let (trace, trace_source) = match &args.trace {
        Some(p) => (trace(p)?, p.display().to_string()),
        None => (
            accord_sim::trace::default_trace(),
            "embedded default trace (a synthetic day)".to_owned(),
        ),
    };
    let mut policies = Vec::new();
    for spec in &args.policies {
        let (name, file) = spec
            .split_once('=')
            .with_context(|| format!("--policy {spec:?}: give NAME=FILE"))?;
        let path = Path::new(file);
        let text = read_capped(path, accord::config_file::MAX_CONFIG_BYTES as u64)?;
        let policy = accord_sim::policy_from_toml(&text, file, &fleet.policy, &fleet)?;
        policies.push((name.to_owned(), policy));
    }
    if policies.is_empty() {
        policies.push(("fleet".to_owned(), fleet.policy.clone()));
    }
    let names: Vec<&str> = policies.iter().map(|(n, _)| n.as_str()).collect();
    accord_sim::check_policy_names(&names)?;

    let input = Input {
        fleet,
        fleet_source,
        trace,
        trace_source,
        policies,
        seed: args.seed,
        world: World::default(),
    };
    let started = Instant::now();
    let figures = accord_sim::simulate(&input);
    let elapsed_s = started.elapsed().as_secs_f64();

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("{}: cannot create the output directory", args.out.display()))?;
    let json = args.out.join("figures.json");
    let mut text = serde_json::to_string_pretty(&figures).context("figures as JSON")?;
    text.push('\n');
    // Replaced, never written through: a symlink planted in the output
    // directory does not make accordctl overwrite its target.
    accord_api::files::write_replacing(&json, text.as_bytes())
        .with_context(|| format!("{}: cannot write", json.display()))?;
    let report = args.out.join("report.html");
    accord_api::files::write_replacing(
        &report,
        accord_sim::report::render_html(&figures).as_bytes(),
    )
    .with_context(|| format!("{}: cannot write", report.display()))?;
    Ok(SimulateOutcome {
        figures,
        report,
        json,
        elapsed_s,
    })
}
