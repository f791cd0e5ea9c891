//! Admin power and BIOS actions over the BMC inventory (`accordctl power
//! status`, `accordctl power --direct`, `accordctl bios`): many nodes at
//! once, within the inventory's request limits and each rack's
//! `max_concurrent_power_ons`; and the rendering of accordd's answers to
//! `accordctl power` (which goes through accordd, `decide/admin.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use accord::fleet::Fleet;
use accord_redfish::inventory::{expand_range, Inventory};
use accord_redfish::ops::{BiosOutcome, PowerOutcome};
use accord_redfish::{Bmc, HttpPool, PowerState, RedfishError};
use serde::Serialize;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PowerVerb {
    On,
    Off,
    Cycle,
    Status,
}

/// One node's result, for the table and `--json`.
#[derive(Debug, Serialize)]
pub struct NodeResult<T> {
    pub node: String,
    #[serde(flatten)]
    pub result: NodeOutcome<T>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeOutcome<T> {
    Ok(T),
    Error { kind: String, error: String },
}

impl<T> NodeOutcome<T> {
    fn from(r: Result<T, RedfishError>) -> NodeOutcome<T> {
        match r {
            Ok(t) => NodeOutcome::Ok(t),
            Err(e) => NodeOutcome::Error {
                kind: e.kind().to_owned(),
                error: accord::config_file::error_chain(&e),
            },
        }
    }
}

#[derive(Debug, Serialize)]
pub struct StatusView {
    pub power: PowerState,
    pub watts: Option<f64>,
}

/// The request `accordctl power VERB` makes of accordd (`status` reads
/// the BMCs directly).
pub fn admin_action(verb: PowerVerb) -> Option<accord_api::control::AdminPowerAction> {
    use accord_api::control::AdminPowerAction;
    match verb {
        PowerVerb::On => Some(AdminPowerAction::On),
        PowerVerb::Off => Some(AdminPowerAction::Off),
        PowerVerb::Cycle => Some(AdminPowerAction::Cycle),
        PowerVerb::Status => None,
    }
}

/// Node names as given (ranges like `gpu-[01-04]` expanded), each a
/// Kubernetes node name; accordd checks them against its fleet.
pub fn expand_names(args: &[String]) -> anyhow::Result<Vec<String>> {
    let (mut out, mut seen) = (Vec::new(), std::collections::HashSet::new());
    for a in args {
        for (name, _) in expand_range(a).map_err(|e| anyhow::anyhow!(e))? {
            accord_api::names::validate_node_name(&name)?;
            if seen.insert(name.clone()) {
                out.push(name);
            }
        }
    }
    Ok(out)
}

/// accordd's reason for a refusal (the check it names), else the error.
pub fn refusal_text(e: &accord_api::ClientError) -> String {
    match e {
        accord_api::ClientError::Refused { reason, .. } => reason.clone(),
        e => accord::config_file::error_chain(e),
    }
}

/// One line per node for accordd's answers.
pub fn render_admin(results: &[NodeResult<accord_api::control::AdminPowerAnswer>]) -> String {
    use accord_api::control::AdminPowerOutcome;
    let mut out = String::new();
    let width = results.iter().map(|r| r.node.len()).max().unwrap_or(4);
    for r in results {
        let line = match &r.result {
            NodeOutcome::Error { kind, error } if kind == "refused" => format!("REFUSED  {error}"),
            NodeOutcome::Error { error, .. } => format!("FAILED  {error}"),
            NodeOutcome::Ok(a) => {
                let what = match a.outcome {
                    AdminPowerOutcome::Accepted if a.forced => "accepted (FORCED)",
                    AdminPowerOutcome::Accepted => "accepted",
                    AdminPowerOutcome::NothingToDo => "nothing to do",
                    AdminPowerOutcome::WouldDo => "would do",
                };
                format!("{} {what}: {}", a.action.word(), a.detail)
            }
        };
        out.push_str(&format!("{:<width$}  {line}\n", r.node));
    }
    out
}

/// Node names as given (ranges like `gpu-[01-04]` expanded), each checked
/// against the inventory.
pub fn expand_nodes(inventory: &Inventory, args: &[String]) -> anyhow::Result<Vec<String>> {
    let known = inventory
        .resolve()
        .map_err(|p| anyhow::anyhow!("inventory: {}", p.join("; ")))?;
    let (mut out, mut seen) = (Vec::new(), std::collections::HashSet::new());
    for a in args {
        for (name, _) in expand_range(a).map_err(|e| anyhow::anyhow!(e))? {
            if !known.contains_key(&name) {
                anyhow::bail!("node {name}: no BMC in the inventory");
            }
            if seen.insert(name.clone()) {
                out.push(name);
            }
        }
    }
    Ok(out)
}

fn bmcs(inventory: &Inventory, nodes: &[String]) -> anyhow::Result<(Vec<Arc<Bmc>>, HttpPool)> {
    let pool = HttpPool::new(inventory.limits.max_in_flight_total);
    let mut out = Vec::new();
    for n in nodes {
        let target = inventory.target(n)?;
        out.push(Arc::new(Bmc::new(target, &pool)?));
    }
    Ok((out, pool))
}

/// A semaphore per rack sized by its `max_concurrent_power_ons` (none: no
/// limit beyond the inventory's).
fn rack_limits(fleet: Option<&Fleet>) -> BTreeMap<String, Arc<Semaphore>> {
    let mut out = BTreeMap::new();
    if let Some(f) = fleet {
        for (name, rack) in &f.racks {
            if let Some(n) = rack.max_concurrent_power_ons {
                out.insert(name.clone(), Arc::new(Semaphore::new(n.max(1) as usize)));
            }
        }
    }
    out
}

fn rack_of(fleet: Option<&Fleet>, node: &str) -> Option<String> {
    fleet?
        .nodes
        .iter()
        .find(|n| n.name == node)
        .and_then(|n| n.rack.clone())
}

/// How `power` acts.
#[derive(Debug, Clone, Copy, Default)]
pub struct PowerOptions {
    /// `off`: ForceOff at once.
    pub force: bool,
    /// Read and decide; send nothing.
    pub dry_run: bool,
    /// `on`/`cycle`: boot from the network once (re-imaging) — a one-time
    /// boot override set before the power-on.
    pub pxe: bool,
}

pub async fn power(
    inventory: &Inventory,
    fleet: Option<&Fleet>,
    verb: PowerVerb,
    nodes: &[String],
    options: PowerOptions,
) -> anyhow::Result<Vec<NodeResult<serde_json::Value>>> {
    let PowerOptions {
        force,
        dry_run,
        pxe,
    } = options;
    let (bmcs, _pool) = bmcs(inventory, nodes)?;
    let limits = rack_limits(fleet);
    let mut tasks = Vec::new();
    for bmc in bmcs {
        let rack_limit = rack_of(fleet, bmc.name()).and_then(|r| limits.get(&r).cloned());
        tasks.push(tokio::spawn(async move {
            // Power-ons draw inrush current: at most the rack's limit at once.
            let _permit = match (&rack_limit, verb) {
                (Some(s), PowerVerb::On | PowerVerb::Cycle) if !dry_run => {
                    Some(s.clone().acquire_owned().await.expect("never closed"))
                }
                _ => None,
            };
            let pxe_set = if pxe && matches!(verb, PowerVerb::On | PowerVerb::Cycle) {
                match bmc.boot_once("Pxe", dry_run).await {
                    Ok(set) => Some(set),
                    Err(e) => {
                        bmc.close().await;
                        return NodeResult {
                            node: bmc.name().to_owned(),
                            result: NodeOutcome::from(Err(e)),
                        };
                    }
                }
            } else {
                None
            };
            let with_pxe = |mut v: serde_json::Value| {
                if let Some(set) = pxe_set {
                    v["pxe_once_set"] = serde_json::Value::Bool(set);
                }
                v
            };
            let result: Result<serde_json::Value, RedfishError> = match verb {
                PowerVerb::On => bmc.power_on(dry_run).await.map(to_json).map(with_pxe),
                PowerVerb::Off => bmc.power_off(force, dry_run).await.map(to_json),
                PowerVerb::Cycle => bmc.power_cycle(dry_run).await.map(to_json).map(with_pxe),
                PowerVerb::Status => match bmc.power_state().await {
                    Ok(power) => {
                        let watts = bmc.power_watts().await.ok().flatten();
                        Ok(to_json(StatusView { power, watts }))
                    }
                    Err(e) => Err(e),
                },
            };
            bmc.close().await;
            NodeResult {
                node: bmc.name().to_owned(),
                result: NodeOutcome::from(result),
            }
        }));
    }
    join(tasks).await
}

/// The tasks' results, in the order they were started.
async fn join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> anyhow::Result<Vec<T>> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await?);
    }
    Ok(out)
}

fn to_json<T: Serialize>(t: T) -> serde_json::Value {
    serde_json::to_value(t).expect("plain data")
}

/// The nodes of `rack` that have a BMC, by the fleet file.
pub fn rack_nodes(inventory: &Inventory, fleet: &Fleet, rack: &str) -> anyhow::Result<Vec<String>> {
    if !fleet.racks.contains_key(rack) {
        anyhow::bail!(
            "rack {rack} is not in the fleet file (racks: {})",
            fleet.racks.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let known = inventory
        .resolve()
        .map_err(|p| anyhow::anyhow!("inventory: {}", p.join("; ")))?;
    let nodes: Vec<String> = fleet
        .nodes
        .iter()
        .filter(|n| n.rack.as_deref() == Some(rack) && known.contains_key(&n.name))
        .map(|n| n.name.clone())
        .collect();
    if nodes.is_empty() {
        anyhow::bail!("rack {rack}: no node with a BMC in the inventory");
    }
    Ok(nodes)
}

/// Stages a BIOS profile on every node of a rack, at most the rack's
/// `max_concurrent_power_ons` at once (1 when it sets none): the settings
/// apply at each node's next reset, and a rollout should never touch a
/// whole rack at once.
pub async fn bios_apply(
    inventory: &Inventory,
    fleet: &Fleet,
    profile: &str,
    rack: &str,
    dry_run: bool,
) -> anyhow::Result<Vec<NodeResult<BiosOutcome>>> {
    let p = inventory.bios_profiles.get(profile).ok_or_else(|| {
        anyhow::anyhow!(
            "BIOS profile {profile} is not in the inventory (profiles: {})",
            inventory
                .bios_profiles
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let nodes = rack_nodes(inventory, fleet, rack)?;
    let width = fleet.racks[rack]
        .max_concurrent_power_ons
        .unwrap_or(1)
        .max(1) as usize;
    let (bmcs, _pool) = bmcs(inventory, &nodes)?;
    let limit = Arc::new(Semaphore::new(width));
    let attributes = Arc::new(p.attributes.clone());
    let mut tasks = Vec::new();
    for bmc in bmcs {
        let limit = limit.clone();
        let attributes = attributes.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.expect("never closed");
            let result = bmc.apply_bios(&attributes, dry_run).await;
            bmc.close().await;
            NodeResult {
                node: bmc.name().to_owned(),
                result: NodeOutcome::from(result),
            }
        }));
    }
    join(tasks).await
}

/// One line per node for people.
pub fn render_power(results: &[NodeResult<serde_json::Value>], verb: PowerVerb) -> String {
    let mut out = String::new();
    let width = results.iter().map(|r| r.node.len()).max().unwrap_or(4);
    for r in results {
        let line = match &r.result {
            NodeOutcome::Error { error, .. } => format!("FAILED  {error}"),
            NodeOutcome::Ok(v) if verb == PowerVerb::Status => {
                let power = v["power"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v["power"].to_string());
                match v["watts"].as_f64() {
                    Some(w) => format!("{power}  {w} W"),
                    None => power,
                }
            }
            NodeOutcome::Ok(v) => {
                let o: PowerOutcome = serde_json::from_value(v.clone()).expect("ours");
                let sent = if o.sent.is_empty() {
                    "nothing sent (already there)".to_owned()
                } else if o.dry_run {
                    format!("would send {}", o.sent.join(" then "))
                } else {
                    format!("sent {}", o.sent.join(" then "))
                };
                let sent = match v["pxe_once_set"].as_bool() {
                    Some(true) if o.dry_run => format!("would set PXE boot once; {sent}"),
                    Some(true) => format!("PXE boot once set; {sent}"),
                    Some(false) => format!("PXE boot once already set; {sent}"),
                    None => sent,
                };
                if o.dry_run {
                    format!("{:?}  {sent}", o.before)
                } else {
                    format!(
                        "{:?} → {:?}  {sent}  ({:.1} s)",
                        o.before,
                        o.after,
                        o.took_ms as f64 / 1000.0
                    )
                }
            }
        };
        out.push_str(&format!("{:<width$}  {line}\n", r.node));
    }
    out
}

pub fn render_bios(results: &[NodeResult<BiosOutcome>], profile: &str) -> String {
    let mut out = String::new();
    let width = results.iter().map(|r| r.node.len()).max().unwrap_or(4);
    for r in results {
        let line = match &r.result {
            NodeOutcome::Error { error, .. } => format!("FAILED  {error}"),
            NodeOutcome::Ok(o) => {
                let keys: Vec<&str> = o.changes.keys().map(String::as_str).collect();
                let mut s = if keys.is_empty() {
                    format!("{profile}: already set")
                } else if o.dry_run {
                    format!("{profile}: would stage {}", keys.join(", "))
                } else {
                    format!(
                        "{profile}: staged {}; applies at the next reset",
                        keys.join(", ")
                    )
                };
                if !o.unknown.is_empty() {
                    s.push_str(&format!(" (not in this BIOS: {})", o.unknown.join(", ")));
                }
                s
            }
        };
        out.push_str(&format!("{:<width$}  {line}\n", r.node));
    }
    out
}

/// Whether every node succeeded.
pub fn all_ok<T>(results: &[NodeResult<T>]) -> bool {
    results
        .iter()
        .all(|r| matches!(r.result, NodeOutcome::Ok(_)))
}
