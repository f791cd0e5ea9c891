//! `accordd`: Accord's fleet daemon. Agents report to its HTTP API and a
//! sled store keeps the fleet's hardware model; with `[control]` it watches
//! Kubernetes demand, plans each round and (act mode) powers nodes on and
//! off through their Redfish BMCs. `accordd lab` runs the separate
//! accord-lab program. Thin: the work is in the `accordd` library.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// The system allocator, although accordd now plans every round: with
// mimalloc (transparent huge pages on) its RSS at 10,000 nodes was 137–154 MB
// against 95–99 MB with glibc malloc (`heartbeat-figures`), and a round's
// plan at lab scale takes milliseconds either way. mimalloc plans the 10k-node
// bench about 15 % faster (accordctl and the benches use it): measure both
// again before a fleet that size runs here.

/// sysexits.h EX_CONFIG: the configuration file is missing, unreadable,
/// not TOML of the right shape, or invalid.
const EX_CONFIG: u8 = 78;

#[derive(Debug, Parser)]
#[command(
    name = "accordd",
    version,
    about = "Accord's fleet daemon: keeps the hardware model, plans and powers GPU nodes",
    after_help = "\
Exit status:
  0   success; `run` stops on SIGTERM or SIGINT: it stops serving, lets the
      control loop and requests in flight finish, flushes and closes the store
  1   any other failure (the store cannot be opened, the port cannot be bound, ...)
  78  configuration error (EX_CONFIG): the file given to `run` or `check-config`
      is missing, unreadable, not valid TOML or fails validation

Environment:
  ACCORD_LOG  log filter (default `info`); logs go to stderr, never stdout
  NO_COLOR    set and not empty: no colour in logs (colour only on a terminal)"
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
    /// The local lab, with this accordd running against it (`accordd lab
    /// --help` for its options).
    ///
    /// One machine playing a datacenter: emulated BMCs, a fake Kubernetes
    /// API, agents replaying recorded hardware, a stand-in scheduler. Runs
    /// the lab program (`$ACCORD_LAB`, else `accord-lab` next to accordd,
    /// else on PATH) with the arguments; it runs this accordd (`ACCORDD` is
    /// set to it unless already set).
    #[command(disable_help_flag = true)]
    Lab {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// `completions SHELL`; hidden `man --out DIR` (section 8).
    #[command(flatten)]
    Docs(accord_api::cli_docs::DocsCommand),
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
        Some(Command::Lab { args }) => lab(args),
        Some(Command::Docs(docs)) => {
            use clap::CommandFactory;
            docs.run(Cli::command(), "8").map_err(Into::into)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accordd: {e:#}");
            if e.downcast_ref::<accordd::config::ConfigError>().is_some() {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(file: &std::path::Path) -> anyhow::Result<()> {
    accord_api::logging::init_logging("info");
    let config = accordd::config::DaemonConfig::load(file)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        // Installed before anything is served: a signal that comes early
        // still stops the daemon gracefully.
        let stop = accord_api::signals::stop_signal()?;
        accordd::serve(config, stop).await
    })
}

/// `accordd lab ARGS`: runs `accord-lab ARGS` in this process's place
/// (git and cargo style external subcommand: accordd does not link the
/// lab, whose in-process agents link hwloc). The program is `$ACCORD_LAB`,
/// else `accord-lab` next to this accordd, else on PATH; it runs this
/// accordd (`ACCORDD`) unless told otherwise.
fn lab(args: Vec<OsString>) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().ok();
    let program = std::env::var_os("ACCORD_LAB")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            exe.as_ref()
                .map(|e| e.with_file_name("accord-lab"))
                .filter(|p| p.is_file())
        })
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("accord-lab"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the lab is its own program, accord-lab, and it is not next to this accordd \
                 nor on PATH: build it with `cargo build -p accord-lab` (scripts/run does)"
            )
        })?;
    let mut cmd = std::process::Command::new(&program);
    cmd.arg0("accordd lab").args(&args);
    if std::env::var_os("ACCORDD").is_none() {
        if let Some(exe) = &exe {
            cmd.env("ACCORDD", exe);
        }
    }
    // exec returns only on failure.
    let e = cmd.exec();
    Err(anyhow::Error::new(e).context(format!("{}: cannot run", program.display())))
}
