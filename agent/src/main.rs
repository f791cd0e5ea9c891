//! `accord-agent`: thin command-line front of the `accord_agent` library.

use std::path::PathBuf;
use std::process::ExitCode;

use accord_agent::{capture, discover, nvml, summary, Sources};
use anyhow::Context;
use clap::{Parser, Subcommand};

/// sysexits.h EX_CONFIG: the configuration file is missing, unreadable,
/// not TOML of the right shape, or invalid.
const EX_CONFIG: u8 = 78;

#[derive(Debug, Parser)]
#[command(
    name = "accord-agent",
    version,
    about = "Accord's host agent: discovers this machine's GPUs, NICs, NUMA and PCIe topology",
    after_help = "\
Exit status:
  0   success; `run` stops on SIGTERM or SIGINT, after the report or heartbeat in flight
  1   any other failure (discovery, an unreadable token file, ...)
  2   the command line is wrong
  78  configuration error (EX_CONFIG): the file given to `run` or `check-config`
      is missing, unreadable, not valid TOML or fails validation

Output: results on stdout (with --json, JSON only); notes, errors and logs on stderr.

Environment:
  ACCORD_LOG  log filter (default `info`)
  NO_COLOR    set and not empty: no colour in logs (colour only on a terminal)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Discover the hardware and print it (a summary, or the model as JSON).
    Discover {
        /// Print the hardware model as JSON (the agent–daemon contract).
        #[arg(long)]
        json: bool,
        /// Read the topology from an hwloc XML export instead of this host.
        #[arg(long, value_name = "FILE")]
        hwloc_xml: Option<PathBuf>,
        /// Read NVML's view from a snapshot file instead of the driver.
        #[arg(long, value_name = "FILE", conflicts_with = "nvidia_smi_xml")]
        nvml_snapshot: Option<PathBuf>,
        /// Read NVML's view from an `nvidia-smi -q -x` dump.
        #[arg(long, value_name = "FILE")]
        nvidia_smi_xml: Option<PathBuf>,
    },
    /// Record this host's topology and NVML view into DIR, for replay.
    Capture {
        /// Directory to write topology.xml, nvml.json and model.json into.
        dir: PathBuf,
    },
    /// Report to accordd: register, heartbeat, re-discover on an interval
    /// and on SIGHUP, report changes; ride out daemon outages.
    Run {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check an agent configuration file and report every problem.
    CheckConfig { file: PathBuf },
    /// Convert an `nvidia-smi -q -x` dump into an NVML snapshot (JSON).
    ImportNvidiaSmi {
        /// The `nvidia-smi -q -x` output file.
        file: PathBuf,
    },
    /// `completions SHELL`; hidden `man --out DIR` (section 8).
    #[command(flatten)]
    Docs(accord_api::cli_docs::DocsCommand),
}

/// JSON for stdout: what a hostile NVML string holds escaped as JSON
/// escapes (`accord_api::terminal::json_for_terminal`).
fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    let text = serde_json::to_string_pretty(value).context("serialising to JSON")?;
    Ok(accord_api::terminal::json_for_terminal(&text).into_owned())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Discover {
            json: as_json,
            hwloc_xml,
            nvml_snapshot,
            nvidia_smi_xml,
        } => {
            let hw = discover(Sources {
                hwloc_xml: hwloc_xml.as_deref(),
                nvml_snapshot: nvml_snapshot.as_deref(),
                nvidia_smi_xml: nvidia_smi_xml.as_deref(),
            })?;
            if as_json {
                for note in &hw.discovery.notes {
                    accord_api::esayln!("accord-agent: note: {note}");
                }
                println!("{}", json(&hw)?);
            } else {
                accord_api::say!("{}", summary::render(&hw));
            }
        }
        Command::Capture { dir } => {
            let done = capture::capture(&dir)?;
            for file in &done.files {
                accord_api::sayln!("wrote {}", file.display());
            }
            if let Some(reason) = done.nvml_missing {
                accord_api::sayln!("no NVML snapshot: {reason}");
            }
        }
        Command::Run { config } => {
            let config = accord_agent::config::AgentConfig::load(&config)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let stop = accord_api::signals::stop_signal()?;
                accord_agent::run::run(config, stop).await
            })?;
        }
        Command::CheckConfig { file } => {
            accord_agent::config::AgentConfig::load(&file)?;
            accord_api::sayln!("{}: ok", file.display());
        }
        Command::ImportNvidiaSmi { file } => {
            let snapshot = nvml::nvidia_smi::import_file(&file)?;
            println!("{}", json(&snapshot)?);
        }
        Command::Docs(docs) => {
            use clap::CommandFactory;
            docs.run(Cli::command(), "8")?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    accord_api::logging::init_logging("info");
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the whole error chain.
            accord_api::esayln!("accord-agent: error: {e:#}");
            if e.downcast_ref::<accord_agent::config::AgentConfigError>()
                .is_some()
            {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
