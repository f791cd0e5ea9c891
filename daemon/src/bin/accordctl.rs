//! `accordctl`: the admin's command line for accordd. `plan` works offline
//! on files; the fleet commands arrive with the daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::hardware::{NodeHardware, SCHEMA_VERSION};
use anyhow::Context;
use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "accordctl",
    version,
    about = "Administer an Accord fleet through accordd"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Plan offline: what Accord would do for this demand on this fleet.
    Plan {
        /// Fleet TOML (the file accordd is configured with).
        #[arg(long, value_name = "FILE")]
        fleet: PathBuf,
        /// Demand JSON (pending workloads, bound pods).
        #[arg(long, value_name = "FILE")]
        demand: PathBuf,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
        /// Plan as of this time (seconds since the epoch; default: now).
        #[arg(long)]
        now: Option<u64>,
    },
    /// List the fleet's nodes (arrives with accordd).
    Nodes {
        #[arg(long)]
        json: bool,
    },
    /// Show one node's full hardware model (arrives with accordd).
    Node {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read file", path.display()))
}

/// Loads a fleet file; hardware-model paths are relative to it.
pub fn load_fleet(path: &Path) -> anyhow::Result<Fleet> {
    let text = read(path)?;
    let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
    let mut loader = |rel: &str| -> Result<NodeHardware, String> {
        let file = dir.join(rel);
        let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read: {e}"))?;
        let hw: NodeHardware = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        if hw.schema_version > SCHEMA_VERSION {
            return Err(format!(
                "schema_version {} is newer than this accordctl ({SCHEMA_VERSION})",
                hw.schema_version
            ));
        }
        Ok(hw)
    };
    Ok(Fleet::from_toml(
        &text,
        &path.display().to_string(),
        &mut loader,
    )?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
        Some(Command::Plan {
            fleet,
            demand,
            json,
            now,
        }) => {
            let fleet = load_fleet(&fleet)?;
            let demand = Demand::from_json(&read(&demand)?, &demand.display().to_string())?;
            let now = match now {
                Some(n) => n,
                None => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            };
            let plan = accord::plan::plan(&fleet, &demand, &fleet.policy, now);
            if json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{}", accord::plan::render(&plan));
            }
            Ok(())
        }
        Some(_) => anyhow::bail!("not implemented yet: this command arrives with accordd"),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accordctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
