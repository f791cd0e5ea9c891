//! `accordd`: Accord's fleet daemon. It keeps the fleet's hardware model
//! (agents report to its HTTP API; a sled store remembers across restarts);
//! planning, Kubernetes and Redfish arrive in later releases.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// The system allocator: with mimalloc (transparent huge pages on), the
// daemon's RSS at 10,000 nodes was 137–154 MB against 95–99 MB with glibc
// malloc (`heartbeat-figures`). accordctl plans with mimalloc; revisit when
// the planner runs inside accordd (mimalloc plans about 15 % faster).

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
    /// The local lab: one machine playing a datacenter (emulated BMCs, a
    /// fake Kubernetes API, agents replaying recorded hardware, a stand-in
    /// scheduler) with accordd running against it unmodified.
    #[cfg(feature = "lab")]
    Lab {
        /// Scenario file (docs/lab.md); default: the embedded one.
        #[arg(long, value_name = "FILE")]
        scenario: Option<PathBuf>,
        /// Stop when the scenario is done and every node is idle or off,
        /// and print a summary.
        #[arg(long)]
        until_idle: bool,
        /// Print the summary as JSON (and no narration).
        #[arg(long)]
        json: bool,
    },
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ACCORD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => {
            use clap::CommandFactory;
            Cli::command().print_help().map_err(Into::into)
        }
        Some(Command::CheckConfig { file }) => accordd::config::DaemonConfig::load(&file)
            .map(|_| println!("{}: ok", file.display()))
            .map_err(Into::into),
        Some(Command::Run { config }) => run(&config),
        #[cfg(feature = "lab")]
        Some(Command::Lab {
            scenario,
            until_idle,
            json,
        }) => lab(scenario.as_deref(), until_idle, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accordd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(file: &std::path::Path) -> anyhow::Result<()> {
    init_tracing("info");
    let config = accordd::config::DaemonConfig::load(file)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(accordd::serve(config, async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }))
}

#[cfg(feature = "lab")]
fn lab(scenario: Option<&std::path::Path>, until_idle: bool, json: bool) -> anyhow::Result<()> {
    use accordd::lab::{Lab, LabOptions, Scenario};
    // The lab's own lines, and the agents' warnings only (ten agents
    // saying "hardware reported" is noise).
    init_tracing("info,accord_agent=warn");
    let scenario = match scenario {
        Some(f) => Scenario::load(f)?,
        None => Scenario::default_scenario(),
    };
    let until_off = scenario.lab.until_off;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let lab = Lab::start(
            scenario,
            LabOptions {
                accordd: std::env::current_exe()?,
                daemon_log: None,
                narrate: !json,
            },
        )
        .await?;
        lab.start_daemon()?;
        if !json {
            tracing::info!(
                target: "lab",
                "watch it: ACCORD_URL={} ACCORD_ADMIN_TOKEN_FILE={} accordctl status | explain WORKLOAD",
                lab.daemon_url,
                lab.dir.path().join("admin-token").display()
            );
        }
        let summary = if until_idle {
            lab.run_until_idle(until_off).await?
        } else {
            let _ = tokio::signal::ctrl_c().await;
            lab.summary(lab.status().await.as_ref())
        };
        let status = lab.status().await;
        lab.kill_daemon();
        if json {
            println!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            if let Some(s) = &status {
                println!("\n$ accordctl status\n{}", accordd::status::render_status(s));
            }
            println!("lab summary\n{}", summary.render());
        }
        Ok(())
    })
}
