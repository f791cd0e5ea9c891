//! `accordctl`: the admin's command line for accordd. In this release it
//! only parses its arguments.

use clap::{Parser, Subcommand};

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
    /// List the fleet's nodes.
    Nodes {
        #[arg(long)]
        json: bool,
    },
    /// Show one node's full hardware model.
    Node {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
        Some(_) => anyhow::bail!(
            "not implemented yet: accordctl only parses its arguments in this release"
        ),
    }
}
