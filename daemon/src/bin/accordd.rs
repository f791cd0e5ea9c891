//! `accordd`: Accord's fleet daemon. In this release it only parses its
//! arguments; the agent API, store and control loop come next.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "accordd",
    version,
    about = "Accord's fleet daemon: keeps the hardware model, plans and powers GPU nodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon with a configuration file.
    Run {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check a configuration file and report every problem.
    CheckConfig { file: PathBuf },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
        Some(_) => {
            anyhow::bail!("not implemented yet: accordd only parses its arguments in this release")
        }
    }
}
