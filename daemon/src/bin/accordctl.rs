//! `accordctl`: the admin's command line for accordd. `plan` works offline
//! on files; `nodes`, `node` and `power` ask accordd; `power status`,
//! `power --direct`, `bios` and `bmc` talk to the BMCs directly through
//! the inventory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

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
    /// report carry a new machine identity (a swapped machine).
    Node {
        #[arg(value_parser = node_arg)]
        name: String,
        /// With `replace`: the node to replace.
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
        action: accordd::power::PowerVerb,
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

impl InventoryArgs {
    fn daemon_config(&self) -> anyhow::Result<accordd::config::DaemonConfig> {
        let text = read(&self.config)?;
        Ok(accordd::config::DaemonConfig::parse(&text, &self.config)?)
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
            Some(p) => Ok(Some(accordd::load_fleet(&p)?)),
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
            accord_api::client::ClientOptions { ca_pem, timeout },
        )?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(runtime.block_on(f(client))?)
    }
}

/// "12s ago", "5m ago", "3h ago", "2d ago".
fn age(now: u64, then: u64) -> String {
    let s = now.saturating_sub(then);
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}m ago", s / 60),
        7200..=172_799 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

use accord_api::control::ModelSource;

/// A node's BIOS profile in `accordctl nodes`: `gpu-perf` (applied and
/// verified by Accord), `gpu-perf (declared)` (the fleet file says so),
/// `gpu-perf staged`, `gpu-perf pending`, `gpu-perf FAILED`; `-` for none.
fn bios_cell(b: Option<&accord_api::control::BiosStatus>) -> String {
    use accord_api::control::BiosState;
    let Some(b) = b else {
        return "-".to_owned();
    };
    let wanted = b.wanted.as_deref().or(b.applied.as_deref()).unwrap_or("-");
    match b.state {
        BiosState::Applied if b.verified_at.is_some() => wanted.to_owned(),
        BiosState::Applied => format!("{wanted} (declared)"),
        BiosState::Staged => format!("{wanted} staged"),
        BiosState::Pending => format!("{wanted} pending"),
        BiosState::Failed => format!("{wanted} FAILED"),
    }
}

fn nodes_table(nodes: &[accord_api::nodes::NodeView], now: u64) -> String {
    let mut rows = vec![[
        "NAME",
        "RACK",
        "GPUS",
        "MIG",
        "LAST SEEN",
        "STATE",
        "PLANNED WITH",
        "BIOS",
        "DRIFT",
    ]
    .map(str::to_owned)];
    for n in nodes {
        let hw = &n.record.hardware;
        let mut models: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for g in &hw.gpus {
            *models
                .entry(g.model.as_deref().unwrap_or("unknown"))
                .or_insert(0) += 1;
        }
        let gpus = if models.is_empty() {
            "-".to_owned()
        } else {
            models
                .iter()
                .map(|(m, c)| format!("{c}× {m}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mig: usize = hw
            .gpus
            .iter()
            .filter_map(|g| g.mig.as_ref())
            .map(|m| m.gpu_instances.len())
            .sum();
        rows.push([
            n.record.name.clone(),
            n.rack.clone().unwrap_or_else(|| "-".to_owned()),
            gpus,
            if mig == 0 {
                "-".to_owned()
            } else {
                format!("{mig} instances")
            },
            age(now, n.record.last_seen),
            format!("{:?}", n.state).to_lowercase(),
            match n.model {
                Some(ModelSource::Reported) => "report",
                Some(ModelSource::Declared) => "declaration",
                Some(ModelSource::Held) => "held (drift)",
                None => "-",
            }
            .to_owned(),
            bios_cell(n.bios.as_ref()),
            if n.drift.is_empty() {
                "-".to_owned()
            } else {
                n.drift
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        ]);
    }
    let widths: Vec<usize> = (0..9)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A node name on the command line must be a Kubernetes node name: clap
/// refuses anything else (exit 2) before any request is made.
fn node_arg(s: &str) -> Result<String, String> {
    accord_api::validate_node_name(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.to_string())
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read file", path.display()))
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
            &accordd::simulate::SimulateArgs {
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
                    println!("{}", serde_json::to_string_pretty(&plan)?);
                } else {
                    println!(
                        "accordd round {} ({:?} mode){}",
                        s.round,
                        s.mode,
                        if s.mode == accord_api::control::Mode::Observe {
                            ": nothing of this is sent"
                        } else {
                            ""
                        }
                    );
                    print!("{}", accord::plan::render(&plan));
                }
                return Ok(());
            };
            let fleet = accordd::load_fleet(&fleet)?;
            let text = read(&demand)?;
            let (demand, from_manifests) = if text.trim_start().starts_with('{') {
                (
                    accordd::parse_demand(&text, &demand.display().to_string())?,
                    None,
                )
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
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{}", accord::plan::render(&plan));
                for c in from_manifests.iter().flat_map(|t| &t.cannot_plan) {
                    println!("cannot plan {}: {}", c.workload, c.reason);
                }
            }
            Ok(())
        }
        Some(Command::Demand { files, fleet, json }) => {
            let topology = match fleet {
                Some(f) => accordd::load_fleet(&f)?.topology,
                None => accord::fleet::TopologyConfig::default(),
            };
            let t = translate_files(&files, &topology)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                print!("{}", t.render());
            }
            Ok(())
        }
        Some(Command::Status { daemon, json }) => {
            let s = daemon.with(|c| async move { c.status().await })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", accord_api::text::render_status(&s));
            }
            Ok(())
        }
        Some(Command::Replica { daemon, json }) => {
            let r = daemon.with(|c| async move { c.replica().await })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", accord_api::text::render_replica(&r));
            }
            Ok(())
        }
        Some(Command::Explain { name, daemon }) => {
            let s = daemon.with(|c| async move { c.status().await })?;
            match accord_api::text::render_explain(&s, &name) {
                Some(text) => {
                    print!("{text}");
                    Ok(())
                }
                None => anyhow::bail!(
                    "{name}: no pending pod or workload of that name in accordd's last round"
                ),
            }
        }
        Some(Command::Nodes { daemon, json }) => {
            let nodes = daemon.with(|c| async move { c.nodes().await })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&nodes)?);
            } else {
                print!("{}", nodes_table(&nodes, accordd::api::unix_now()));
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
                    println!("{target}: its next report may come from a new machine");
                }
                return Ok(());
            }
            if target.is_some() {
                anyhow::bail!("`node NAME` takes one name; did you mean `node replace NAME`?");
            }
            let node = daemon.with(|c| {
                let name = name.clone();
                async move { c.node(&name).await }
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&node)?);
            } else {
                print!(
                    "{}",
                    nodes_table(std::slice::from_ref(&node), accordd::api::unix_now())
                );
                println!(
                    "generation {}, reported {}, agent {}",
                    node.record.generation,
                    age(accordd::api::unix_now(), node.record.reported_at),
                    node.record.agent_version.as_deref().unwrap_or("unknown")
                );
                println!("{}", serde_json::to_string_pretty(&node.record.hardware)?);
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
        }) => match accordd::power::admin_action(action) {
            Some(admin) if !direct => {
                power_through_accordd(admin, &nodes, force, dry_run, json, &daemon)
            }
            _ => power_cmd(
                action,
                nodes,
                accordd::power::PowerOptions {
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

/// Reads manifests from every file and translates them together (claims
/// in one file may serve pods in another).
fn translate_files(
    files: &[PathBuf],
    topology: &accord::fleet::TopologyConfig,
) -> anyhow::Result<accord_kube::Translation> {
    let mut all = accord_kube::Manifests::default();
    for f in files {
        all.extend(accord_kube::Manifests::parse(
            &read(f)?,
            &f.display().to_string(),
        )?);
    }
    let options = accord_kube::Options::for_topology(topology);
    Ok(accord_kube::translate(&all, &options))
}

/// `accordctl power on|off|cycle` without --direct: one request per node
/// to accordd, in order; every node is asked even when one is refused.
fn power_through_accordd(
    action: accord_api::control::AdminPowerAction,
    nodes: &[String],
    force: bool,
    dry_run: bool,
    json: bool,
    daemon: &DaemonArgs,
) -> anyhow::Result<()> {
    let nodes = accordd::power::expand_names(nodes)?;
    let request = accord_api::control::AdminPowerRequest {
        action,
        force,
        dry_run,
    };
    if force && !dry_run {
        eprintln!(
            "accordctl: warning: --force: accordd makes none of its checks (work pods, bookings, do-not-disrupt, the plan); the action is journaled and logged as forced"
        );
    }
    let results = daemon.with_timeout(
        accordd::api::ADMIN_ANSWER_WITHIN + std::time::Duration::from_secs(15),
        |client| async move {
            let mut out = Vec::new();
            for node in nodes {
                let result = match client.power(&node, &request).await {
                    Ok(a) => accordd::power::NodeOutcome::Ok(a),
                    // accordd unreachable: no node can be asked.
                    Err(e @ accord_api::ClientError::Unreachable { .. }) => return Err(e),
                    Err(e) => accordd::power::NodeOutcome::Error {
                        kind: e
                            .status()
                            .map_or("client", |s| match s.as_u16() {
                                404 => "unknown_node",
                                409 => "refused",
                                503 => "unavailable",
                                _ => "error",
                            })
                            .to_owned(),
                        error: accordd::power::refusal_text(&e),
                    },
                };
                out.push(accordd::power::NodeResult { node, result });
            }
            Ok(out)
        },
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", accordd::power::render_admin(&results));
    }
    if !accordd::power::all_ok(&results) {
        let failed = results
            .iter()
            .filter(|r| !matches!(r.result, accordd::power::NodeOutcome::Ok(_)))
            .count();
        anyhow::bail!("{failed} of {} node(s) refused or failed", results.len());
    }
    Ok(())
}

fn power_cmd(
    action: accordd::power::PowerVerb,
    nodes: Vec<String>,
    options: accordd::power::PowerOptions,
    json: bool,
    files: InventoryArgs,
) -> anyhow::Result<()> {
    let inventory = files.inventory()?;
    let fleet = files.fleet(false)?;
    let nodes = accordd::power::expand_nodes(&inventory, &nodes)?;
    let insecure: Vec<String> = inventory
        .insecure_nodes()
        .into_iter()
        .filter(|n| nodes.contains(n))
        .collect();
    if !insecure.is_empty() {
        eprintln!(
            "accordctl: warning: BMC certificates not verified for {} (insecure = true)",
            insecure.join(", ")
        );
    }
    let results = runtime()?.block_on(accordd::power::power(
        &inventory,
        fleet.as_ref(),
        action,
        &nodes,
        options,
    ))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", accordd::power::render_power(&results, action));
    }
    let failed = results.len()
        - results
            .iter()
            .filter(|r| matches!(r.result, accordd::power::NodeOutcome::Ok(_)))
            .count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} node(s) failed", results.len());
    }
    Ok(())
}

fn bios_cmd(command: BiosCommand) -> anyhow::Result<()> {
    match command {
        BiosCommand::Apply {
            profile,
            rack,
            dry_run,
            json,
            files,
        } => {
            let inventory = files.inventory()?;
            let fleet = files.fleet(true)?.expect("required");
            let results = runtime()?.block_on(accordd::power::bios_apply(
                &inventory, &fleet, &profile, &rack, dry_run,
            ))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&results)?);
            } else {
                print!("{}", accordd::power::render_bios(&results, &profile));
            }
            if !accordd::power::all_ok(&results) {
                anyhow::bail!("BIOS profile {profile} not staged on every node of rack {rack}");
            }
            Ok(())
        }
        BiosCommand::Show { node, json, files } => {
            let inventory = files.inventory()?;
            let target = inventory.target(&node)?;
            let pool = accord_redfish::HttpPool::new(4);
            let bmc = accord_redfish::Bmc::new(target, &pool)?;
            let bios = runtime()?.block_on(async {
                let b = bmc.bios().await;
                bmc.close().await;
                b
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&bios)?);
            } else {
                println!(
                    "{node}: {} ({} attributes); changes go to {}",
                    bios.path,
                    bios.attributes.len(),
                    bios.settings_target.as_deref().unwrap_or(&bios.path)
                );
                for (k, v) in &bios.attributes {
                    println!("  {k} = {v}");
                }
            }
            Ok(())
        }
    }
}

fn bmc_cmd(command: BmcCommand) -> anyhow::Result<()> {
    let BmcCommand::Probe {
        url,
        user,
        password_file,
        ca,
        insecure,
        json,
    } = command;
    let endpoint: reqwest::Url = url.parse().with_context(|| format!("{url}: not a URL"))?;
    if !endpoint.username().is_empty() || endpoint.password().is_some() {
        anyhow::bail!("{url}: give the user with --user and the password with --password-file, not in the URL");
    }
    let credentials = match (user, password_file) {
        (Some(username), Some(file)) => {
            if let Some(p) = accordd::config::check_secret("--password-file", &file) {
                anyhow::bail!(p);
            }
            Some(accord_redfish::Credentials {
                username,
                password: accord_redfish::Secret::new(read(&file)?.trim_end_matches(['\n', '\r'])),
            })
        }
        (Some(_), None) => anyhow::bail!("--user needs --password-file"),
        _ => None,
    };
    let settings = accord_redfish::BmcSettings {
        retry_attempts: 2,
        request_timeout: std::time::Duration::from_secs(15),
        ..Default::default()
    };
    let target = accord_redfish::BmcTarget {
        name: endpoint.host_str().unwrap_or("bmc").to_owned(),
        endpoint,
        system: None,
        credentials,
        credentials_file: None,
        tls: if insecure {
            accord_redfish::TlsMode::Insecure
        } else {
            accord_redfish::TlsMode::Verify { ca_file: ca }
        },
        settings,
    };
    let pool = accord_redfish::HttpPool::new(4);
    let bmc = accord_redfish::Bmc::new(target, &pool)?;
    let report = runtime()?.block_on(async {
        let r = accord_redfish::probe::probe(&bmc).await;
        bmc.close().await;
        r
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(())
}

fn simulate(args: &accordd::simulate::SimulateArgs, json: bool) -> anyhow::Result<()> {
    let done = accordd::simulate::run(args)?;
    let f = &done.figures;
    if json {
        let summary = serde_json::json!({
            "report": done.report,
            "figures": done.json,
            "elapsed_s": (done.elapsed_s * 1000.0).round() / 1000.0,
            "nodes": f.inputs.nodes,
            "workloads": f.inputs.workloads,
            "policies": f.policies.iter().map(|p| serde_json::json!({
                "name": p.name,
                "summary": p.summary,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    println!(
        "simulated {} workloads on {} nodes ({} GPUs), {:.1} h of virtual time, {} polic{} in {:.1} s",
        f.inputs.workloads,
        f.inputs.nodes,
        f.inputs.gpus,
        f.inputs.horizon_s as f64 / 3600.0,
        f.policies.len(),
        if f.policies.len() == 1 { "y" } else { "ies" },
        done.elapsed_s
    );
    println!(
        "{:<16} {:>9} {:>7} {:>7} {:>8} {:>9} {:>9} {:>12} {:>10}",
        "POLICY",
        "POWER-ONS",
        "CYCLES",
        "UNUSED",
        "STARTED",
        "MEAN(s)",
        "P95(s)",
        "WASTED GPU-H",
        "kWh"
    );
    for p in &f.policies {
        let s = &p.summary;
        let secs = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.0}"));
        println!(
            "{:<16} {:>9} {:>7} {:>7} {:>8} {:>9} {:>9} {:>12.1} {:>10.1}",
            p.name,
            s.power_ons,
            s.power_cycles,
            s.unused_power_ons,
            format!("{}/{}", s.started, s.workloads),
            secs(s.mean_time_to_running_s),
            secs(s.p95_time_to_running_s),
            s.gpu_hours_wasted,
            s.energy_kwh
        );
    }
    println!("report: {}", done.report.display());
    println!("figures: {}", done.json.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    accord_api::logging::init_logging("warn");
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accordctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
