//! accordd's high availability in the lab (`[lab.ha]`, `--replicas N`):
//! N accordd replicas, `accordd-a`, `accordd-b`, ..., each its own child
//! process with its own store, listen port and accordd.toml (with an
//! `[ha]` section), its own listener of the fake API
//! (`FakeApi::listen_tagged`: its requests told apart) and of the BMC
//! proxy ([`crate::proxy::BmcProxy::listen_for`]: every BMC request and
//! Reset attributed to it). They elect a leader on the `accord-system/
//! accordd` Lease; the lab reads the Lease itself (never accordd's word)
//! to say who leads.
//!
//! A fault for the leader (`kill_leader`, `pause_leader`) at a moment of
//! the scenario (`powering_on`: the first power-on Reset reaching a
//! machine) is driven beside [`Lab::run_until_idle`]; the summary's `ha`
//! section says what followed: the Lease's holders, the takeover, the
//! power-on Resets per node (all replicas together), each replica's BMC
//! writes and, for a pause, what the paused replica sent after it was
//! resumed.
//!
//! With one replica (the default) none of this exists: the lab is the
//! lab without HA, its accordd.toml without `[ha]`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::Cluster;
use accord_api::control::ControlStatus;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::chaos::safety::ResetDirection;
use crate::Lab;

/// The Lease's namespace (and the `AccordNode` objects').
pub const NAMESPACE: &str = "accord-system";
/// The Lease's name.
pub const LEASE_NAME: &str = "accordd";
/// The most replicas a lab runs (identities `accordd-a` to `accordd-z`).
pub const MAX_REPLICAS: u32 = 26;

/// `[lab.ha]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaSettings {
    /// accordd replicas; 1: the lab without HA (no `[ha]` in accordd.toml).
    pub replicas: u32,
    /// accordd.toml's `[ha]` timings.
    pub lease_duration_s: u64,
    pub renew_deadline_s: u64,
    pub retry_period_s: u64,
    /// The leader killed (SIGKILL) at a moment, started again after
    /// another replica took the Lease.
    pub kill_leader: Option<FaultAt>,
    /// The leader paused (SIGSTOP) at a moment for `pause_s`, then
    /// resumed (SIGCONT).
    pub pause_leader: Option<PauseAt>,
}

impl Default for HaSettings {
    fn default() -> Self {
        HaSettings {
            replicas: 1,
            lease_duration_s: 15,
            renew_deadline_s: 10,
            retry_period_s: 2,
            kill_leader: None,
            pause_leader: None,
        }
    }
}

/// When a fault comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[clap(rename_all = "snake_case")]
pub enum Moment {
    /// When the BMC proxy first sees a power-on Reset reach a machine (a
    /// workload's nodes are powering on).
    PoweringOn,
}

impl Moment {
    pub fn label(self) -> &'static str {
        match self {
            Moment::PoweringOn => "powering_on",
        }
    }
}

/// `kill_leader = { at = "powering_on" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FaultAt {
    pub at: Moment,
}

/// `pause_leader = { at = "powering_on", pause_s = 20 }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PauseAt {
    pub at: Moment,
    /// How long it stays stopped; default `lease_duration_s + 5` (past
    /// the Lease: another replica takes it meanwhile).
    pub pause_s: Option<u64>,
}

/// The fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Kill { at: Moment },
    Pause { at: Moment, pause: Duration },
}

impl Fault {
    pub fn label(self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill_leader",
            Fault::Pause { .. } => "pause_leader",
        }
    }

    fn at(self) -> Moment {
        match self {
            Fault::Kill { at } | Fault::Pause { at, .. } => at,
        }
    }
}

impl HaSettings {
    /// Its problems, each naming its key under `key`.
    pub fn problems(&self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            out.push(format!(
                "{key}.replicas: must be 1 to {MAX_REPLICAS} (have {})",
                self.replicas
            ));
        }
        // accordd's own rule ([ha] in accordd.toml).
        if !(1..=3600).contains(&self.retry_period_s) {
            out.push(format!("{key}.retry_period_s: must be 1 to 3600"));
        }
        if self.lease_duration_s > 3600 {
            out.push(format!("{key}.lease_duration_s: at most 3600"));
        }
        if !(self.retry_period_s < self.renew_deadline_s
            && self.renew_deadline_s < self.lease_duration_s)
        {
            out.push(format!(
                "{key}: need retry_period_s < renew_deadline_s < lease_duration_s (have {} < {} < {})",
                self.retry_period_s, self.renew_deadline_s, self.lease_duration_s
            ));
        }
        if self.kill_leader.is_some() && self.pause_leader.is_some() {
            out.push(format!("{key}: set one of kill_leader or pause_leader"));
        }
        if self.fault().is_some() && self.replicas < 2 {
            out.push(format!(
                "{key}: a fault for the leader needs replicas = 2 or more (have {})",
                self.replicas
            ));
        }
        if let Some(p) = &self.pause_leader {
            if p.pause_s.is_some_and(|s| s == 0 || s > 3600) {
                out.push(format!("{key}.pause_leader.pause_s: must be 1 to 3600"));
            }
        }
        out
    }

    /// The fault the run injects, if any (a kill over a pause).
    pub fn fault(&self) -> Option<Fault> {
        if let Some(k) = &self.kill_leader {
            return Some(Fault::Kill { at: k.at });
        }
        self.pause_leader.as_ref().map(|p| Fault::Pause {
            at: p.at,
            pause: Duration::from_secs(p.pause_s.unwrap_or(self.lease_duration_s + 5)),
        })
    }

    /// Whether the lab runs several replicas (HA on).
    pub fn enabled(&self) -> bool {
        self.replicas > 1
    }

    /// accordd.toml's `[ha]` for replica `identity`.
    pub fn section(&self, identity: &str) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("enabled".into(), true.into());
        t.insert("identity".into(), identity.into());
        t.insert("namespace".into(), NAMESPACE.into());
        t.insert("lease_name".into(), LEASE_NAME.into());
        for (k, v) in [
            ("lease_duration_s", self.lease_duration_s),
            ("renew_deadline_s", self.renew_deadline_s),
            ("retry_period_s", self.retry_period_s),
        ] {
            t.insert(k.into(), toml::Value::Integer(v as i64));
        }
        t
    }
}

/// Replica `i`'s identity: `accordd-a`, `accordd-b`, ...
pub fn identity(i: usize) -> String {
    let letter = char::from(b'a' + u8::try_from(i % 26).expect("below 26"));
    format!("accordd-{letter}")
}

/// The identities of a lab with `replicas` replicas: `accordd` alone
/// without HA, else `accordd-a`, `accordd-b`, ...
pub fn identities(replicas: u32) -> Vec<String> {
    if replicas <= 1 {
        vec!["accordd".to_owned()]
    } else {
        (0..replicas as usize).map(identity).collect()
    }
}

/// One accordd the lab runs.
#[derive(Debug)]
pub(crate) struct Replica {
    pub identity: String,
    /// Its API (`[server] listen`).
    pub url: String,
    pub config: PathBuf,
    /// Its sled directory (`[store] dir`).
    pub store: PathBuf,
    /// Where its output goes (`None`: this process's stderr).
    pub log: Option<PathBuf>,
    /// Its API, as the admin.
    pub admin: accord_api::Client,
    pub child: Mutex<Option<Child>>,
    /// Stopped with SIGSTOP and not resumed yet.
    pub paused: AtomicBool,
}

impl Replica {
    /// `kill -9` this accordd (stopped or not) and reaps it.
    pub(crate) fn kill(&self) {
        if let Some(mut c) = self.child.lock().expect("lock").take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Sends `signal` to this accordd, running.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
        use nix::unistd::Pid;
        let mut child = self.child.lock().expect("lock");
        let Some(c) = child.as_mut() else {
            anyhow::bail!("{signal} to accordd {}: it is not running", self.identity);
        };
        if !matches!(c.try_wait(), Ok(None)) {
            anyhow::bail!("{signal} to accordd {}: it has exited", self.identity);
        }
        let pid = Pid::from_raw(i32::try_from(c.id()).context("accordd's pid")?);
        nix::sys::signal::kill(pid, signal)
            .with_context(|| format!("{signal} to accordd {} ({pid})", self.identity))
    }
}

/// The lab's accordd replicas (one without HA), and how the lab reads
/// the Lease.
#[derive(Debug)]
pub(crate) struct Replicas {
    pub list: Vec<Replica>,
    pub api: Cluster,
    /// Several replicas, electing a leader on the Lease.
    pub ha: bool,
}

impl Replicas {
    /// The Lease's holder now (`spec.holderIdentity`, not empty); `None`
    /// without HA, before any replica took it, or when released.
    pub fn leader(&self) -> Option<String> {
        if !self.ha {
            return None;
        }
        lease_holder(&self.api)
    }

    pub fn get(&self, identity: &str) -> anyhow::Result<&Replica> {
        self.list
            .iter()
            .find(|r| r.identity == identity)
            .with_context(|| {
                format!(
                    "no accordd replica {identity:?} (there are: {})",
                    self.list
                        .iter()
                        .map(|r| r.identity.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }

    /// accordd's last round: the leader's (per the Lease), else the first
    /// replica that answers; paused replicas are not asked.
    pub async fn status(&self) -> Option<ControlStatus> {
        let leader = self.leader();
        let mut order: Vec<&Replica> = self.list.iter().collect();
        if let Some(l) = &leader {
            order.sort_by_key(|r| &r.identity != l);
        }
        for r in order {
            if r.paused.load(Ordering::SeqCst) {
                continue;
            }
            if let Ok(s) = r.admin.status().await {
                return Some(s);
            }
        }
        None
    }
}

/// The Lease's `spec.holderIdentity` in the fake API, if set and not empty.
pub fn lease_holder(api: &Cluster) -> Option<String> {
    let lease = api.get("coordination.k8s.io/v1", "Lease", NAMESPACE, LEASE_NAME)?;
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
}

/// One change of the Lease's holder, as the lab saw it.
#[derive(Debug, Clone)]
pub(crate) struct HolderChange {
    pub at: Instant,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The fault, as it went.
#[derive(Debug, Clone)]
pub(crate) struct FaultRecord {
    pub fault: Fault,
    pub replica: String,
    pub at: Instant,
    /// When another replica held the Lease, and which.
    pub takeover: Option<(Instant, String)>,
    /// A pause: when it was resumed, and how many API writes it had made
    /// by then.
    pub resumed: Option<(Instant, usize)>,
    /// A kill: when it was started again.
    pub restarted: Option<Instant>,
}

/// What the lab records of HA while it runs.
#[derive(Debug, Default)]
pub(crate) struct HaRecord {
    pub changes: Vec<HolderChange>,
    pub fault: Option<FaultRecord>,
    /// A fault is under way (the run does not settle meanwhile).
    pub busy: bool,
}

/// Follows the Lease's holder (every 100 ms), noting each change.
pub(crate) async fn watch_lease(api: Cluster, record: Arc<Mutex<HaRecord>>, narrate: bool) {
    let mut last: Option<String> = None;
    loop {
        let now = lease_holder(&api);
        if now != last {
            if narrate {
                info!(target: "lab", from = ?last, to = ?now, "the Lease's holder changed");
            }
            record.lock().expect("lock").changes.push(HolderChange {
                at: Instant::now(),
                from: last.clone(),
                to: now.clone(),
            });
            last = now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A leader change in the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaderChange {
    /// Seconds since the lab started.
    pub at_s: f64,
    /// `None`: nobody held the Lease (the first election).
    pub from: Option<String>,
    /// `None`: the Lease was released.
    pub to: Option<String>,
}

/// The fault in the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultSummary {
    /// `kill_leader` or `pause_leader`.
    pub kind: String,
    /// `powering_on`.
    pub moment: String,
    /// The replica it hit (the Lease's holder then).
    pub replica: String,
    pub at_s: f64,
    /// A pause: when it was resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_at_s: Option<f64>,
    /// A kill: when it was started again (after the takeover).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarted_at_s: Option<f64>,
    /// The replica that took the Lease over.
    pub new_leader: Option<String>,
}

/// What a paused replica sent after it was resumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WritesAfterResume {
    /// BMC writes (POST, PATCH, ...) through its proxy listener.
    pub bmc: usize,
    /// Kubernetes writes (anything but GET) through its API listener.
    pub api: usize,
}

/// The summary's `ha` section (only with 2 or more replicas).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HaSummary {
    pub replicas: usize,
    /// The Lease's holder changes, the first election included.
    pub leader_changes: Vec<LeaderChange>,
    /// The fault, if one was injected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultSummary>,
    /// From the fault to another replica holding the Lease.
    pub takeover_s: Option<f64>,
    /// From the takeover to the new leader's first BMC write (POST or
    /// PATCH through its proxy listener); none: it had none to make.
    pub first_action_after_takeover_s: Option<f64>,
    /// Power-on Resets that reached each machine, all replicas together
    /// (more than one per power-on: duplicates).
    pub resets_per_node: BTreeMap<String, usize>,
    /// BMC writes (Resets, BIOS stagings) per replica.
    pub bmc_writes_by_replica: BTreeMap<String, usize>,
    /// A pause: what the paused replica sent after it was resumed (all 0
    /// when it knew it no longer led).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes_after_resume: Option<WritesAfterResume>,
}

impl HaSummary {
    pub fn render(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} s"));
        let who = |w: &Option<String>| w.clone().unwrap_or_else(|| "none".to_owned());
        let mut out = format!("\nHA: {} accordd replicas\n", self.replicas);
        out.push_str("  leader changes (the Lease's holder):");
        if self.leader_changes.is_empty() {
            out.push_str(" none (no replica took the Lease)");
        }
        for c in &self.leader_changes {
            out.push_str(&format!(
                " {:.1} s {} -> {};",
                c.at_s,
                who(&c.from),
                who(&c.to)
            ));
        }
        out.push('\n');
        if let Some(fault) = &self.fault {
            out.push_str(&format!(
                "  {} at {} ({:.1} s) hit {}: takeover {} (by {}), its first BMC write {} after\n",
                fault.kind,
                fault.moment,
                fault.at_s,
                fault.replica,
                f(self.takeover_s),
                who(&fault.new_leader),
                f(self.first_action_after_takeover_s)
            ));
        }
        let joined = |m: &BTreeMap<String, usize>| {
            if m.is_empty() {
                "none".to_owned()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        out.push_str(&format!(
            "  power-on Resets per node: {}\n  BMC writes by replica: {}\n",
            joined(&self.resets_per_node),
            joined(&self.bmc_writes_by_replica)
        ));
        if let Some(w) = &self.writes_after_resume {
            out.push_str(&format!(
                "  after its resume the paused replica sent {} BMC writes, {} API writes\n",
                w.bmc, w.api
            ));
        }
        out
    }
}

/// How long a fault waits for another replica to take the Lease before
/// the killed replica is started again anyway.
fn takeover_wait(s: &HaSettings) -> Duration {
    Duration::from_secs(2 * s.lease_duration_s + 10)
}

impl Lab {
    /// How many accordd replicas the lab runs (1: without HA).
    pub fn replica_count(&self) -> usize {
        self.replicas.list.len()
    }

    /// The replicas' identities, in order (`accordd` alone without HA).
    pub fn replica_identities(&self) -> Vec<String> {
        self.replicas
            .list
            .iter()
            .map(|r| r.identity.clone())
            .collect()
    }

    /// The Lease's holder (`spec.holderIdentity` of `accord-system/accordd`
    /// in the fake API: what the API server says, not what accordd says);
    /// `None` without HA or while nobody holds it.
    pub fn leader(&self) -> Option<String> {
        self.replicas.leader()
    }

    /// Waits up to `timeout` for a replica to hold the Lease: its identity.
    pub async fn wait_leader(&self, timeout: Duration) -> anyhow::Result<String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Ok(l);
            }
            if Instant::now() > end {
                anyhow::bail!(
                    "waited {timeout:?} for a replica to hold the Lease {NAMESPACE}/{LEASE_NAME}; {}",
                    self.daemon_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `identity`'s API URL.
    pub fn replica_url(&self, identity: &str) -> Option<String> {
        self.replicas.get(identity).ok().map(|r| r.url.clone())
    }

    /// `identity`'s accordd.toml.
    pub fn replica_config(&self, identity: &str) -> Option<PathBuf> {
        self.replicas.get(identity).ok().map(|r| r.config.clone())
    }

    /// `identity`'s store directory (its sled database).
    pub fn replica_store_dir(&self, identity: &str) -> Option<PathBuf> {
        self.replicas.get(identity).ok().map(|r| r.store.clone())
    }

    /// `kill -9` replica `identity` (paused or not), and reaps it. An
    /// error for an unknown identity; nothing when it is not running.
    pub fn kill_replica(&self, identity: &str) -> anyhow::Result<()> {
        let r = self.replicas.get(identity)?;
        r.kill();
        info!(target: "lab", replica = identity, "accordd replica killed (SIGKILL)");
        Ok(())
    }

    /// Stops replica `identity` with SIGSTOP (it keeps its sockets and
    /// state; it does nothing until [`Lab::resume_replica`]).
    pub fn pause_replica(&self, identity: &str) -> anyhow::Result<()> {
        self.stop_or_continue(identity, true)
    }

    /// Resumes a paused replica (SIGCONT).
    pub fn resume_replica(&self, identity: &str) -> anyhow::Result<()> {
        self.stop_or_continue(identity, false)
    }

    /// SIGSTOP (`pause`) or SIGCONT to replica `identity`, noted.
    fn stop_or_continue(&self, identity: &str, pause: bool) -> anyhow::Result<()> {
        use nix::sys::signal::Signal;
        let r = self.replicas.get(identity)?;
        let signal = if pause {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        r.signal(signal)?;
        r.paused.store(pause, Ordering::SeqCst);
        let what = if pause { "paused" } else { "resumed" };
        info!(target: "lab", replica = identity, %signal, "accordd replica {what}");
        Ok(())
    }

    /// Starts replica `identity` again: kills it first if it runs (`kill
    /// -9`), and with `wipe_store` deletes its store directory (its sled
    /// database) before the start.
    pub fn restart_replica(&self, identity: &str, wipe_store: bool) -> anyhow::Result<()> {
        let r = self.replicas.get(identity)?;
        r.kill();
        if wipe_store && r.store.exists() {
            std::fs::remove_dir_all(&r.store)
                .with_context(|| format!("{}: cannot delete", r.store.display()))?;
        }
        self.start_replica(r)
    }

    /// The requests replica `identity` sent to the BMCs (through its
    /// proxy listener): method, path, when. Without HA: every request.
    pub fn bmc_requests_from(&self, identity: &str) -> Vec<(String, String, Instant)> {
        let log = if self.replicas.ha {
            self.proxy.log_from(identity)
        } else {
            self.proxy.log()
        };
        log.into_iter().map(|l| (l.method, l.path, l.at)).collect()
    }

    /// The Kubernetes writes replica `identity` sent (every request but
    /// GETs through its API listener, as `METHOD path?query`). Without
    /// HA: empty (its requests are not told apart from the lab's own).
    pub fn api_writes_from(&self, identity: &str) -> Vec<String> {
        let Some(fake) = self.api.fake().filter(|_| self.replicas.ha) else {
            return Vec::new();
        };
        fake.requests_from(identity)
            .into_iter()
            .filter(|r| !r.starts_with("GET "))
            .collect()
    }

    /// Whether a fault for the leader is under way.
    pub(crate) fn ha_busy(&self) -> bool {
        self.ha.lock().expect("lock").busy
    }

    /// Notes what followed the fault under way.
    fn note_fault(&self, note: impl FnOnce(&mut FaultRecord)) {
        if let Some(f) = self.ha.lock().expect("lock").fault.as_mut() {
            note(f);
        }
    }

    /// Runs the scenario's fault for the leader (nothing without one): at
    /// its moment, kills (or pauses) the Lease's holder, waits for another
    /// replica to take the Lease, then starts the killed replica again (or
    /// resumes the paused one after `pause_s`). Errors when a killed
    /// replica cannot be started again.
    pub async fn drive_ha(&self) -> anyhow::Result<()> {
        let Some(fault) = self.scenario.lab.ha.fault().filter(|_| self.replicas.ha) else {
            return Ok(());
        };
        match fault.at() {
            Moment::PoweringOn => loop {
                let on = self
                    .proxy
                    .resets_reached()
                    .iter()
                    .any(|r| ResetDirection::of(&r.reset_type) == ResetDirection::On);
                if on {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            },
        }
        let victim = match self.leader() {
            Some(l) => l,
            None => {
                let first = self.replicas.list[0].identity.clone();
                warn!(target: "lab", replica = %first, "{}: no replica holds the Lease; the fault hits the first replica", fault.label());
                first
            }
        };
        let at = Instant::now();
        {
            let mut h = self.ha.lock().expect("lock");
            h.busy = true;
            h.fault = Some(FaultRecord {
                fault,
                replica: victim.clone(),
                at,
                takeover: None,
                resumed: None,
                restarted: None,
            });
        }
        match fault {
            Fault::Kill { .. } => self.kill_replica(&victim)?,
            Fault::Pause { .. } => self.pause_replica(&victim)?,
        }
        say!(self.options, replica = %victim, "{}: the leader {victim} {} as the first power-on Reset reached a machine", fault.label(), if matches!(fault, Fault::Kill { .. }) { "killed (SIGKILL)" } else { "paused (SIGSTOP)" });
        let takeover = async {
            let end = at + takeover_wait(&self.scenario.lab.ha);
            loop {
                if let Some(l) = self.leader().filter(|l| *l != victim) {
                    let now = Instant::now();
                    say!(self.options, replica = %l, "takeover: {l} holds the Lease {:.1} s after the fault", now.duration_since(at).as_secs_f64());
                    self.note_fault(|f| f.takeover = Some((now, l)));
                    return;
                }
                if Instant::now() > end {
                    warn!(target: "lab", "{}: no other replica took the Lease within {:?}", fault.label(), takeover_wait(&self.scenario.lab.ha));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let result = match fault {
            Fault::Kill { .. } => {
                takeover.await;
                let r = self.restart_replica(&victim, false);
                if r.is_ok() {
                    self.note_fault(|f| f.restarted = Some(Instant::now()));
                }
                r
            }
            Fault::Pause { pause, .. } => {
                let resume = async {
                    tokio::time::sleep_until(at + pause).await;
                    let writes = self.api_writes_from(&victim).len();
                    let r = self.resume_replica(&victim);
                    self.note_fault(|f| f.resumed = Some((Instant::now(), writes)));
                    r
                };
                let ((), r) = tokio::join!(takeover, resume);
                r
            }
        };
        self.ha.lock().expect("lock").busy = false;
        result
    }

    /// The summary's `ha` section: `None` with one replica.
    pub(crate) fn ha_summary(&self) -> Option<HaSummary> {
        if !self.replicas.ha {
            return None;
        }
        let h = self.ha.lock().expect("lock");
        let since = |t: Instant| t.duration_since(self.started).as_secs_f64();
        let log = self.proxy.log();
        let mut resets_per_node = BTreeMap::new();
        for r in self.proxy.resets_reached() {
            if ResetDirection::of(&r.reset_type) == ResetDirection::On {
                *resets_per_node.entry(r.node).or_insert(0) += 1;
            }
        }
        let mut bmc_writes_by_replica: BTreeMap<String, usize> = self
            .replicas
            .list
            .iter()
            .map(|r| (r.identity.clone(), 0))
            .collect();
        for l in log.iter().filter(|l| l.is_write()) {
            if let Some(r) = &l.replica {
                *bmc_writes_by_replica.entry(r.clone()).or_insert(0) += 1;
            }
        }
        let fault = h.fault.as_ref();
        let takeover_s = fault.and_then(|f| {
            f.takeover
                .as_ref()
                .map(|(t, _)| t.duration_since(f.at).as_secs_f64())
        });
        // The new leader's first write since the fault (the lab sees the
        // Lease change a poll late: a write just before is the first too).
        let first_action_after_takeover_s = fault.and_then(|f| {
            let (t, who) = f.takeover.as_ref()?;
            log.iter()
                .filter(|l| l.is_write() && l.replica.as_deref() == Some(who) && l.at >= f.at)
                .map(|l| l.at)
                .min()
                .map(|first| {
                    first
                        .checked_duration_since(*t)
                        .unwrap_or_default()
                        .as_secs_f64()
                })
        });
        let writes_after_resume = fault.and_then(|f| {
            let (resumed, api_before) = f.resumed?;
            Some(WritesAfterResume {
                bmc: log
                    .iter()
                    .filter(|l| {
                        l.is_write()
                            && l.replica.as_deref() == Some(f.replica.as_str())
                            && l.at >= resumed
                    })
                    .count(),
                api: self
                    .api_writes_from(&f.replica)
                    .len()
                    .saturating_sub(api_before),
            })
        });
        Some(HaSummary {
            replicas: self.replicas.list.len(),
            leader_changes: h
                .changes
                .iter()
                .map(|c| LeaderChange {
                    at_s: since(c.at),
                    from: c.from.clone(),
                    to: c.to.clone(),
                })
                .collect(),
            fault: fault.map(|f| FaultSummary {
                kind: f.fault.label().to_owned(),
                moment: f.fault.at().label().to_owned(),
                replica: f.replica.clone(),
                at_s: since(f.at),
                resumed_at_s: f.resumed.map(|(t, _)| since(t)),
                restarted_at_s: f.restarted.map(since),
                new_leader: f.takeover.as_ref().map(|(_, l)| l.clone()),
            }),
            takeover_s,
            first_action_after_takeover_s,
            resets_per_node,
            bmc_writes_by_replica,
            writes_after_resume,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_lettered_and_one_replica_is_plain_accordd() {
        assert_eq!(identities(1), ["accordd"]);
        assert_eq!(identities(3), ["accordd-a", "accordd-b", "accordd-c"]);
        assert_eq!(identity(25), "accordd-z");
    }

    #[test]
    fn settings_are_checked_as_accordd_checks_them() {
        assert!(HaSettings::default().problems("lab.ha").is_empty());
        assert_eq!(HaSettings::default().fault(), None);
        let s = HaSettings {
            replicas: 0,
            renew_deadline_s: 15,
            kill_leader: Some(FaultAt {
                at: Moment::PoweringOn,
            }),
            pause_leader: Some(PauseAt {
                at: Moment::PoweringOn,
                pause_s: Some(0),
            }),
            ..Default::default()
        };
        let p = s.problems("lab.ha");
        for want in [
            "lab.ha.replicas: must be 1 to 26",
            "lab.ha: need retry_period_s < renew_deadline_s < lease_duration_s (have 2 < 15 < 15)",
            "lab.ha: set one of kill_leader or pause_leader",
            "lab.ha: a fault for the leader needs replicas = 2 or more",
            "lab.ha.pause_leader.pause_s: must be 1 to 3600",
        ] {
            assert!(p.iter().any(|p| p.starts_with(want)), "{want}: {p:?}");
        }
    }

    #[test]
    fn a_pause_lasts_past_the_lease_by_default() {
        let s = HaSettings {
            replicas: 2,
            pause_leader: Some(PauseAt {
                at: Moment::PoweringOn,
                pause_s: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            s.fault(),
            Some(Fault::Pause {
                at: Moment::PoweringOn,
                pause: Duration::from_secs(20)
            })
        );
        assert!(s.problems("lab.ha").is_empty());
    }

    #[test]
    fn the_ha_section_is_accordds() {
        let s = HaSettings {
            replicas: 2,
            lease_duration_s: 6,
            renew_deadline_s: 4,
            retry_period_s: 1,
            ..Default::default()
        };
        let text = toml::to_string(&s.section("accordd-b")).unwrap();
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(back["enabled"].as_bool(), Some(true));
        assert_eq!(back["identity"].as_str(), Some("accordd-b"));
        assert_eq!(back["namespace"].as_str(), Some("accord-system"));
        assert_eq!(back["lease_name"].as_str(), Some("accordd"));
        assert_eq!(back["lease_duration_s"].as_integer(), Some(6));
        assert_eq!(back["renew_deadline_s"].as_integer(), Some(4));
        assert_eq!(back["retry_period_s"].as_integer(), Some(1));
    }

    #[test]
    fn the_summary_section_names_everything() {
        let s = HaSummary {
            replicas: 2,
            leader_changes: vec![
                LeaderChange {
                    at_s: 1.0,
                    from: None,
                    to: Some("accordd-a".into()),
                },
                LeaderChange {
                    at_s: 30.0,
                    from: Some("accordd-a".into()),
                    to: Some("accordd-b".into()),
                },
            ],
            fault: Some(FaultSummary {
                kind: "pause_leader".into(),
                moment: "powering_on".into(),
                replica: "accordd-a".into(),
                at_s: 14.0,
                resumed_at_s: Some(34.0),
                restarted_at_s: None,
                new_leader: Some("accordd-b".into()),
            }),
            takeover_s: Some(16.0),
            first_action_after_takeover_s: Some(0.5),
            resets_per_node: [("r1-n1".to_owned(), 1)].into(),
            bmc_writes_by_replica: [("accordd-a".to_owned(), 3), ("accordd-b".to_owned(), 2)]
                .into(),
            writes_after_resume: Some(WritesAfterResume { bmc: 0, api: 0 }),
        };
        let text = s.render();
        for want in [
            "HA: 2 accordd replicas",
            "1.0 s none -> accordd-a; 30.0 s accordd-a -> accordd-b;",
            "pause_leader at powering_on (14.0 s) hit accordd-a: takeover 16.0 s (by accordd-b), its first BMC write 0.5 s after",
            "power-on Resets per node: r1-n1 1",
            "BMC writes by replica: accordd-a 3, accordd-b 2",
            "0 BMC writes, 0 API writes",
        ] {
            assert!(text.contains(want), "{want}:\n{text}");
        }
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["replicas"], 2);
        assert_eq!(json["leader_changes"][0]["from"], serde_json::Value::Null);
        assert_eq!(json["leader_changes"][1]["to"], "accordd-b");
        assert_eq!(json["takeover_s"], 16.0);
        assert_eq!(json["first_action_after_takeover_s"], 0.5);
        assert_eq!(json["resets_per_node"]["r1-n1"], 1);
        assert_eq!(json["bmc_writes_by_replica"]["accordd-b"], 2);
        assert_eq!(json["writes_after_resume"]["bmc"], 0);
        assert_eq!(json["writes_after_resume"]["api"], 0);
        assert_eq!(json["fault"]["kind"], "pause_leader");
        assert!(json["fault"].get("restarted_at_s").is_none());
    }
}
