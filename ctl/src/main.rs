//! `accordctl`: the admin's command line for accordd. `plan` works offline
//! on files; `nodes`, `node` and `power` ask accordd; `power status`,
//! `power --direct`, `bios` and `bmc` talk to the BMCs directly through
//! the inventory.

mod machines;
mod offline;
mod power;
mod simulate;
mod tables;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use accord_api::admin_files::{load_fleet, parse_demand, unix_now};
use anyhow::Context;
use clap::{Parser, Subcommand};
use machines::{bios_cmd, bmc_cmd, power_cmd, power_through_accordd};
use offline::{simulate, translate_files};
use tables::{age, node_row, nodes_table, render_rows};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "accordctl",
    version,
    about = "Administer an Accord fleet through accordd",
    after_help = "\
Exit status:
  0  success
  1  failure (for power and bios: any node failed; the output says which)
  2  the command line is wrong

Output: results on stdout (with --json, JSON only); messages and logs on stderr.

Environment:
  ACCORD_LOG  log filter (default `warn`)
  NO_COLOR    set and not empty: no colour in logs (colour only on a terminal)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What Accord does next: without --fleet/--demand, the running
    /// accordd's plan for its next round (the last round's plan; in observe
    /// mode, what it would do); with both, offline: what Accord would do
    /// for this demand on this fleet.
    Plan {
        /// Fleet TOML (the file accordd is configured with).
        #[arg(long, value_name = "FILE", requires = "demand")]
        fleet: Option<PathBuf>,
        /// Demand: the native JSON, or Kubernetes manifests (YAML).
        #[arg(long, value_name = "FILE", requires = "fleet")]
        demand: Option<PathBuf>,
        #[command(flatten)]
        daemon: DaemonArgs,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
        /// Plan as of this time (seconds since the epoch; default: now).
        #[arg(long)]
        now: Option<u64>,
    },
    /// What Accord understands from Kubernetes manifests (multi-document
    /// YAML: Pods, Jobs, Deployments, JobSets, PodGroups, claims, claim
    /// templates, device classes, ProvisioningRequests): workloads, gangs,
    /// per-pod requirements, device requests, topology, and every
    /// "cannot plan: reason". The first thing to run when a pod stays
    /// pending.
    Demand {
        #[arg(required = true, value_name = "MANIFESTS")]
        files: Vec<PathBuf>,
        /// Fleet TOML, for the topology labels it defines (default: the
        /// default levels site, row, rack, block under topology.accord.dev/).
        #[arg(long, value_name = "FILE")]
        fleet: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// The control loop's view of the fleet: nodes by lifecycle stage,
    /// pending workloads and what Accord does for each, actions in flight.
    Status {
        #[command(flatten)]
        daemon: DaemonArgs,
        #[arg(long)]
        json: bool,
    },
    /// With replicas (`[ha]`): which replica this is, whether it leads, and
    /// who does. Works against any replica.
    Replica {
        #[command(flatten)]
        daemon: DaemonArgs,
        #[arg(long)]
        json: bool,
    },
    /// Why a pod or workload (`ns/name`, or a bare name) is pending, what
    /// Accord will do about it or why it can't, and whether the scheduler
    /// agrees.
    Explain {
        name: String,
        #[command(flatten)]
        daemon: DaemonArgs,
    },
    /// List the nodes accordd knows.
    Nodes {
        #[command(flatten)]
        daemon: DaemonArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one node's full model; `node replace NAME` lets NAME's next
    /// report carry a new machine identity (a swapped machine); `node
    /// forget NAME` removes a node accordd holds that is not in its fleet
    /// file (its record, identity, agent session and liveness).
    Node {
        #[arg(value_parser = node_arg)]
        name: String,
        /// With `replace` or `forget`: the node.
        #[arg(value_parser = node_arg)]
        target: Option<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Power nodes on, off or cycle them through accordd, which checks
    /// each request as its own actions (work pods, bookings,
    /// do-not-disrupt, the plan, the rack's power-on limit, the leader)
    /// and journals what it sends; an off taints the node
    /// accord.dev/powering-off first. `status` reads the BMCs directly.
    /// NODE may be a range (`gpu-[001-016]`).
    Power {
        #[arg(value_enum)]
        action: crate::power::PowerVerb,
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
        /// Check and say what would be done; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Emergency: accordd skips its checks (not the leader's) and an
        /// off is a ForceOff sent at once; journaled and logged as forced.
        /// With --direct: ForceOff at once, no graceful shutdown.
        #[arg(long)]
        force: bool,
        /// Emergency, when accordd is down: talk to the BMCs directly
        /// through the inventory, bypassing accordd's checks, journal and
        /// leader. Every action reads first and sends nothing when the
        /// node is already there, then waits until the BMC shows the state.
        #[arg(long)]
        direct: bool,
        /// With --direct, `on`/`cycle`: boot from the network once
        /// (re-imaging).
        #[arg(long, requires = "direct")]
        pxe: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        daemon: DaemonArgs,
        #[command(flatten)]
        files: InventoryArgs,
    },
    /// BIOS profiles: stage one on a rack, or show a node's attributes.
    Bios {
        #[command(subcommand)]
        command: BiosCommand,
    },
    /// Talk to a BMC directly.
    Bmc {
        #[command(subcommand)]
        command: BmcCommand,
    },
    /// What a policy would have done to a demand: Accord's planner and
    /// node lifecycle in virtual time over a trace and a fleet, boot and
    /// BMC delays drawn from the seed, each policy side by side. Writes
    /// DIR/report.html (self-contained, charts inline) and
    /// DIR/figures.json (the same seed gives the same bytes).
    Simulate {
        /// Fleet TOML, or an Alibaba openb node list CSV (every node dark
        /// at the start). Default: the embedded default fleet.
        #[arg(long, value_name = "FILE")]
        fleet: Option<PathBuf>,
        /// Accord's trace JSON (jobs with submit_s and run_s), demand JSON
        /// (workloads' `created` as submission times), or an Alibaba
        /// openb pod list CSV. Default: the embedded synthetic day.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// A policy to simulate, as NAME=FILE: the keys of a fleet file's
        /// [policy] table; keys left out keep the fleet's. Repeat for
        /// several side by side. Default: the fleet's own, as "fleet".
        #[arg(long = "policy", value_name = "NAME=FILE")]
        policies: Vec<String>,
        /// Seed for the boot and BMC delays.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Directory for report.html and figures.json (created).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Print a JSON summary (per policy, and the time taken).
        #[arg(long)]
        json: bool,
    },
    /// `completions SHELL`; hidden `man --out DIR` (section 1).
    #[command(flatten)]
    Docs(accord_api::cli_docs::DocsCommand),
}

#[derive(Debug, Subcommand)]
enum BiosCommand {
    /// Stage a BIOS profile (from the inventory) on every node of a rack,
    /// at most the rack's max_concurrent_power_ons at once. The settings
    /// apply at each node's next reset.
    Apply {
        /// Profile name (`[bios_profiles.NAME]` in the inventory).
        profile: String,
        /// The rack (from the fleet file).
        #[arg(long)]
        rack: String,
        /// Read and compare; send nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        files: InventoryArgs,
    },
    /// A node's current BIOS attributes and where changes go.
    Show {
        node: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        files: InventoryArgs,
    },
}

#[derive(Debug, Subcommand)]
enum BmcCommand {
    /// Inspect a BMC before adding it to the inventory: service root,
    /// systems, power state, advertised reset types and the ones Accord
    /// would use, BIOS settings target, chassis power; and every firmware
    /// quirk tolerated. Needs no accordd configuration. Fails (exit 1)
    /// on anything that is not a Redfish service root, saying what came
    /// back, and on an answer over 16 MiB.
    Probe {
        /// The BMC, e.g. https://10.0.5.17
        url: String,
        #[arg(long)]
        user: Option<String>,
        /// File holding the password (mode 600).
        #[arg(long, requires = "user")]
        password_file: Option<PathBuf>,
        /// PEM bundle to verify the BMC's certificate against.
        #[arg(long, conflicts_with = "insecure")]
        ca: Option<PathBuf>,
        /// Do not verify the BMC's certificate.
        #[arg(long)]
        insecure: bool,
        #[arg(long)]
        json: bool,
    },
}

/// Where the BMC inventory (and the fleet file, for racks) are found.
#[derive(Debug, clap::Args)]
struct InventoryArgs {
    /// BMC inventory (bmcs.toml). Default: accordd.toml's redfish.inventory.
    #[arg(long, env = "ACCORD_BMC_INVENTORY", value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Fleet file, for racks. Default: accordd.toml's fleet.file.
    #[arg(long, env = "ACCORD_FLEET", value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// accordd's configuration, read for the two files above.
    #[arg(
        long,
        env = "ACCORD_CONFIG",
        value_name = "FILE",
        default_value = "/etc/accord/accordd.toml"
    )]
    config: PathBuf,
}

/// What accordctl reads of accordd's configuration: the fleet file and the
/// BMC inventory, each where accordd's own keys say (`[fleet] file`,
/// `[redfish] inventory`; their types checked, the rest of the file left
/// to `accordd check-config`). accordctl links none of accordd.
#[derive(Debug, serde::Deserialize)]
struct AccorddFiles {
    fleet: Option<FleetKey>,
    redfish: Option<RedfishKey>,
}

#[derive(Debug, serde::Deserialize)]
struct FleetKey {
    file: PathBuf,
}

#[derive(Debug, serde::Deserialize)]
struct RedfishKey {
    inventory: PathBuf,
}

impl InventoryArgs {
    fn daemon_config(&self) -> anyhow::Result<AccorddFiles> {
        let text = read(&self.config)?;
        Ok(accord::config_file::parse(
            &text,
            &self.config.display().to_string(),
        )?)
    }

    fn inventory(&self) -> anyhow::Result<accord_redfish::Inventory> {
        let path = match &self.inventory {
            Some(p) => p.clone(),
            None => self
                .daemon_config()
                .context("no --inventory given")?
                .redfish
                .map(|r| r.inventory)
                .with_context(|| {
                    format!(
                        "{}: no [redfish] inventory; give --inventory",
                        self.config.display()
                    )
                })?,
        };
        Ok(accord_redfish::Inventory::load(&path)?)
    }

    /// The fleet file, when one is given or configured.
    fn fleet(&self, required: bool) -> anyhow::Result<Option<accord::fleet::Fleet>> {
        let path = match &self.fleet {
            Some(p) => Some(p.clone()),
            None => match self.daemon_config() {
                Ok(c) => c.fleet.map(|f| f.file),
                Err(e) if required => return Err(e.context("no --fleet given")),
                Err(_) => None,
            },
        };
        match path {
            Some(p) => Ok(Some(load_fleet(&p)?)),
            None if required => anyhow::bail!("racks come from the fleet file: give --fleet"),
            None => Ok(None),
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

#[derive(Debug, clap::Args)]
struct DaemonArgs {
    /// accordd's API address.
    #[arg(long, env = "ACCORD_URL", default_value = "http://127.0.0.1:7480")]
    url: String,
    /// File holding the admin token.
    #[arg(
        long,
        env = "ACCORD_ADMIN_TOKEN_FILE",
        default_value = "/etc/accord/admin-token"
    )]
    token_file: PathBuf,
    /// PEM CA certificate to trust for an https URL.
    #[arg(long, env = "ACCORD_CA_FILE")]
    ca_file: Option<PathBuf>,
}

impl DaemonArgs {
    /// Runs `f` with a client for accordd on a small runtime.
    fn with<T, F: std::future::Future<Output = Result<T, accord_api::ClientError>>>(
        &self,
        f: impl FnOnce(accord_api::Client) -> F,
    ) -> anyhow::Result<T> {
        self.with_timeout(accord_api::client::ClientOptions::default().timeout, f)
    }

    /// `with`, each request given `timeout`.
    fn with_timeout<T, F: std::future::Future<Output = Result<T, accord_api::ClientError>>>(
        &self,
        timeout: std::time::Duration,
        f: impl FnOnce(accord_api::Client) -> F,
    ) -> anyhow::Result<T> {
        let token = read(&self.token_file)?.trim().to_owned();
        let ca_pem = match &self.ca_file {
            Some(ca) => Some((ca.display().to_string(), read(ca)?.into_bytes())),
            None => None,
        };
        let client = accord_api::Client::new(
            &self.url,
            &token,
            accord_api::client::ClientOptions {
                ca_pem,
                timeout,
                ..Default::default()
            },
        )?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(runtime.block_on(f(client))?)
    }
}

/// A node name on the command line must be a Kubernetes node name: clap
/// refuses anything else (exit 2) before any request is made.
fn node_arg(s: &str) -> Result<String, String> {
    accord_api::validate_node_name(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.to_string())
}

fn read(path: &Path) -> anyhow::Result<String> {
    accord_api::files::read_to_string(path, accord_api::files::limit::MODEL)
        .with_context(|| format!("{}: cannot read file", path.display()))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
        Some(Command::Simulate {
            fleet,
            trace,
            policies,
            seed,
            out,
            json,
        }) => simulate(
            &crate::simulate::SimulateArgs {
                fleet,
                trace,
                policies,
                seed,
                out,
            },
            json,
        ),
        Some(Command::Docs(docs)) => {
            use clap::CommandFactory;
            Ok(docs.run(Cli::command(), "1")?)
        }
        Some(Command::Plan {
            fleet,
            demand,
            daemon,
            json,
            now,
        }) => {
            let (Some(fleet), Some(demand)) = (fleet, demand) else {
                let s = daemon.with(|c| async move { c.status().await })?;
                let plan = s.plan();
                if json {
                    accord_api::terminal::print_json(&plan)?;
                } else {
                    accord_api::sayln!(
                        "accordd round {} ({:?} mode){}",
                        s.round,
                        s.mode,
                        if s.mode == accord_api::control::Mode::Observe {
                            ": nothing of this is sent"
                        } else {
                            ""
                        }
                    );
                    accord_api::say!("{}", accord::plan::render(&plan));
                }
                return Ok(());
            };
            let fleet = load_fleet(&fleet)?;
            let text = read(&demand)?;
            let (demand, from_manifests) = if text.trim_start().starts_with('{') {
                (parse_demand(&text, &demand.display().to_string())?, None)
            } else {
                let t = translate_files(std::slice::from_ref(&demand), &fleet.topology)?;
                (t.demand.clone(), Some(t))
            };
            let now = match now {
                Some(n) => n,
                None => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            };
            let plan = accord::plan::plan(&fleet, &demand, &fleet.policy, now);
            if json {
                accord_api::terminal::print_json(&plan)?;
            } else {
                accord_api::say!("{}", accord::plan::render(&plan));
                for c in from_manifests.iter().flat_map(|t| &t.cannot_plan) {
                    accord_api::sayln!("cannot plan {}: {}", c.workload, c.reason);
                }
            }
            Ok(())
        }
        Some(Command::Demand { files, fleet, json }) => {
            let topology = match fleet {
                Some(f) => load_fleet(&f)?.topology,
                None => accord::fleet::TopologyConfig::default(),
            };
            let t = translate_files(&files, &topology)?;
            if json {
                accord_api::terminal::print_json(&t)?;
            } else {
                accord_api::say!("{}", t.render());
            }
            Ok(())
        }
        Some(Command::Status { daemon, json }) => {
            let s = daemon.with(|c| async move { c.status().await })?;
            if json {
                accord_api::terminal::print_json(&s)?;
            } else {
                accord_api::say!("{}", accord_api::text::render_status(&s));
            }
            Ok(())
        }
        Some(Command::Replica { daemon, json }) => {
            let r = daemon.with(|c| async move { c.replica().await })?;
            if json {
                accord_api::terminal::print_json(&r)?;
            } else {
                accord_api::say!("{}", accord_api::text::render_replica(&r));
            }
            Ok(())
        }
        Some(Command::Explain { name, daemon }) => {
            let s = daemon.with(|c| async move { c.status().await })?;
            match accord_api::text::render_explain(&s, &name) {
                Some(text) => {
                    accord_api::say!("{text}");
                    Ok(())
                }
                None => anyhow::bail!(
                    "{name}: no pending pod or workload of that name in accordd's last round"
                ),
            }
        }
        Some(Command::Nodes { daemon, json }) => {
            // Page by page: a page's nodes are printed (JSON) or kept as
            // table rows, then let go, however many nodes accordd holds.
            let now = unix_now();
            let rows = daemon.with(|c| async move {
                let mut rows = Vec::new();
                let mut after: Option<String> = None;
                let mut first = true;
                loop {
                    let (page, next) = c.nodes_page(after.as_deref()).await?;
                    // Opened once the first page is in: a refusal prints
                    // no JSON at all.
                    if json && after.is_none() {
                        println!("[");
                    }
                    for n in &page {
                        if json {
                            let text = serde_json::to_string_pretty(n).expect("plain data");
                            let text = accord_api::terminal::json_for_terminal(&text);
                            let sep = if first { "" } else { ",\n" };
                            print!("{sep}{text}");
                            first = false;
                        } else {
                            rows.push(node_row(n, now));
                        }
                    }
                    match next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                if json {
                    println!("\n]");
                }
                Ok(rows)
            })?;
            if !json {
                accord_api::say!("{}", render_rows(rows));
            }
            Ok(())
        }
        Some(Command::Node {
            name,
            target,
            daemon,
            json,
        }) => {
            if let ("replace", Some(target)) = (name.as_str(), &target) {
                daemon.with(|c| async move { c.allow_replacement(target).await })?;
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "node": target, "replacement_allowed": true })
                    );
                } else {
                    accord_api::sayln!("{target}: its next report may come from a new machine");
                }
                return Ok(());
            }
            if let ("forget", Some(target)) = (name.as_str(), &target) {
                daemon.with(|c| async move { c.forget(target).await })?;
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "node": target, "forgotten": true })
                    );
                } else {
                    accord_api::sayln!("{target}: forgotten");
                }
                return Ok(());
            }
            if target.is_some() {
                anyhow::bail!(
                    "`node NAME` takes one name; did you mean `node replace NAME` or `node forget NAME`?"
                );
            }
            let node = daemon.with(|c| {
                let name = name.clone();
                async move { c.node(&name).await }
            })?;
            if json {
                accord_api::terminal::print_json(&node)?;
            } else {
                accord_api::say!("{}", nodes_table(std::slice::from_ref(&node), unix_now()));
                accord_api::sayln!(
                    "generation {}, reported {}, agent {}",
                    node.record.generation,
                    age(unix_now(), node.record.reported_at),
                    node.record.agent_version.as_deref().unwrap_or("unknown")
                );
                accord_api::sayln!("{}", serde_json::to_string_pretty(&node.record.hardware)?);
            }
            Ok(())
        }
        Some(Command::Power {
            action,
            nodes,
            dry_run,
            force,
            direct,
            pxe,
            json,
            daemon,
            files,
        }) => match crate::power::admin_action(action) {
            Some(admin) if !direct => {
                power_through_accordd(admin, &nodes, force, dry_run, json, &daemon)
            }
            _ => power_cmd(
                action,
                nodes,
                crate::power::PowerOptions {
                    force,
                    dry_run,
                    pxe,
                },
                json,
                files,
            ),
        },
        Some(Command::Bios { command }) => bios_cmd(command),
        Some(Command::Bmc { command }) => bmc_cmd(command),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    accord_api::logging::init_logging("warn");
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            accord_api::esayln!("accordctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
