//! `accordctl`: the admin's command line for accordd. `plan` works offline
//! on files; the fleet commands arrive with the daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use accord::demand::Demand;
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
        name: String,
        /// With `replace`: the node to replace.
        target: Option<String>,
        #[command(flatten)]
        daemon: DaemonArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
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
    fn call(&self, method: reqwest::Method, path: &str) -> anyhow::Result<serde_json::Value> {
        let token = read(&self.token_file)?.trim().to_owned();
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let mut client = reqwest::Client::builder();
            if let Some(ca) = &self.ca_file {
                let cert = reqwest::Certificate::from_pem(read(ca)?.as_bytes())
                    .with_context(|| format!("{}: not a PEM certificate", ca.display()))?;
                client = client.add_root_certificate(cert);
            }
            let resp = client
                .build()?
                .request(method, &url)
                .bearer_auth(token)
                .send()
                .await
                .with_context(|| format!("cannot reach accordd at {url}"))?;
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            if !status.is_success() {
                let reason = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                    .unwrap_or(text);
                anyhow::bail!("{url}: {status}: {reason}");
            }
            if text.is_empty() {
                return Ok(serde_json::Value::Null);
            }
            serde_json::from_str(&text).with_context(|| format!("{url}: answer is not JSON"))
        })
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

fn nodes_table(nodes: &[accordd::api::NodeView], now: u64) -> String {
    let mut rows =
        vec![["NAME", "RACK", "POWER", "GPUS", "MIG", "LAST SEEN", "STATE"].map(str::to_owned)];
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
            // Power comes from the BMCs, which this release does not read.
            "-".to_owned(),
            gpus,
            if mig == 0 {
                "-".to_owned()
            } else {
                format!("{mig} instances")
            },
            age(now, n.record.last_seen),
            format!("{:?}", n.state).to_lowercase(),
        ]);
    }
    let widths: Vec<usize> = (0..7)
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
        Some(Command::Plan {
            fleet,
            demand,
            json,
            now,
        }) => {
            let fleet = accordd::load_fleet(&fleet)?;
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
        Some(Command::Nodes { daemon, json }) => {
            let v = daemon.call(reqwest::Method::GET, "/v1/nodes")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let nodes: Vec<accordd::api::NodeView> =
                    serde_json::from_value(v).context("accordd's node list")?;
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
                daemon.call(
                    reqwest::Method::POST,
                    &format!("/v1/nodes/{target}/replace"),
                )?;
                println!("{target}: its next report may come from a new machine");
                return Ok(());
            }
            if target.is_some() {
                anyhow::bail!("`node NAME` takes one name; did you mean `node replace NAME`?");
            }
            let v = daemon.call(reqwest::Method::GET, &format!("/v1/nodes/{name}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let node: accordd::api::NodeView =
                    serde_json::from_value(v).context("accordd's node")?;
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
