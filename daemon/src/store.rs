//! The daemon's durable state, in sled: one tree per kind of record, a
//! schema version checked at open, and a flush before anything is
//! acknowledged (sled makes writes durable only on flush).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accord::hardware::NodeHardware;
use serde::{Deserialize, Serialize};

pub(crate) use crate::store_error::io;
pub use crate::store_error::StoreError;

/// Version of the records in the store. Raise it with a migration in
/// [`Store::migrate`] when a record's meaning changes.
pub const STORE_SCHEMA: u32 = 1;

const META: &str = "meta";
const CACHE_BYTES: u64 = 8 << 20;
const NODES: &str = "nodes";
const LIVENESS: &str = "liveness";
const JOURNAL: &str = "journal";
/// The last Kubernetes Node and ResourceSlice devices seen per node: what
/// fit uses for a node that is off now.
const SCHEDULER_VIEWS: &str = "scheduler_views";
/// Agent commands: each node's latest (`commands.rs`).
const COMMANDS: &str = "commands";
/// The control loop's lifecycles and bookings (`state.rs`).
const LIFECYCLE: &str = "lifecycle";
const BOOKINGS: &str = "bookings";
/// What the control loop has said once (`said.rs`).
const SAID: &str = "said";
const SCHEMA_KEY: &[u8] = b"schema";

mod bios;
mod commands;
mod replicated;
mod said;
mod state;

pub use said::SaidKey;
pub use state::Booking;

/// How long [`Store::close`] is usually given: the flush, sled's flusher
/// thread and its last writes take milliseconds, not seconds.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(10);

// The records the store keeps are the admin API's node views too.
pub use accord_api::agent::ReportOutcome;
pub use accord_api::nodes::{stale, MachineIdentity, NodeRecord};

/// The part of a node that changes with reports: flushed before a report
/// is acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredNode {
    name: String,
    identity: MachineIdentity,
    hardware: NodeHardware,
    generation: u64,
    reported_at: u64,
    #[serde(default)]
    replacement_allowed: bool,
    /// The agent session the last report that bound (or rebound) the node
    /// was answered with: heartbeats prove themselves by it. A secret:
    /// never in a [`NodeRecord`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<String>,
}

/// The part that changes with every heartbeat: small, kept apart so a
/// heartbeat does not rewrite the hardware model, and not flushed per
/// heartbeat (sled flushes it within half a second; a crash can only make
/// a node look a little older).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Liveness {
    pub last_seen: u64,
    pub agent_version: Option<String>,
    pub uptime_s: Option<u64>,
    pub gpu_health: Option<String>,
    /// Unix seconds of the last accepted hardware report (changed or
    /// not): only a report makes an agent up after a power-on. Kept by
    /// heartbeats.
    #[serde(default)]
    pub last_report: u64,
}

/// How a report's machine identity is checked against the node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityRule {
    /// Per-node agent tokens: the token names the node; a report whose
    /// identity contradicts the stored one is refused, one that says
    /// nothing is taken.
    Lenient,
    /// A shared agent token: the first report binds the name to its
    /// machine; a later one must prove it (the serial where both know
    /// one, else at least half the GPU UUIDs: `MachineIdentity::proves`),
    /// and one without any identity is refused.
    Bound,
}

/// An accepted report: what it did, the node now, and the agent session
/// to answer with.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub outcome: ReportOutcome,
    pub record: NodeRecord,
    pub session: String,
}

/// When a node's agent was last heard from, and last reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentSeen {
    pub last_seen: u64,
    pub last_report: u64,
}

/// What became of a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// Recorded; the node's generation.
    Recorded(u64),
    /// The node was never registered: nothing written.
    NotRegistered,
    /// The heartbeat does not carry the node's current agent session
    /// (required with a shared token): nothing written.
    NoSession,
}

/// 32 random bytes, hex: an agent session.
fn new_session(node: &str) -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|source| StoreError::Session {
        node: node.to_owned(),
        source,
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Constant-time equality of a given and a kept session.
fn same_session(given: Option<&str>, kept: Option<&str>) -> bool {
    use subtle::ConstantTimeEq;
    match (given, kept) {
        (Some(g), Some(k)) => bool::from(g.as_bytes().ct_eq(k.as_bytes())),
        _ => false,
    }
}

/// The store. sled holds an exclusive lock on the directory while any
/// handle on the database lives (this store, every [`Journal`] from
/// [`Store::journal`], sled's background threads); [`Store::close`]
/// flushes, lets go and waits until the lock is released, so the
/// directory can be opened again at once.
///
/// [`Journal`]: crate::journal::Journal
pub struct Store {
    db: sled::Db,
    nodes: sled::Tree,
    liveness: sled::Tree,
    views: sled::Tree,
    commands: sled::Tree,
    /// Serialises the read-modify-writes of `commands` (the API hands
    /// commands out while the loop opens and closes them).
    commands_lock: std::sync::Mutex<()>,
    lifecycle: sled::Tree,
    bookings: sled::Tree,
    said: sled::Tree,
    dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// What a heartbeat needs of a node's record.
#[derive(Deserialize)]
struct Head {
    generation: u64,
    #[serde(default)]
    session: Option<String>,
}

/// A node's stored record and liveness, as one view.
fn joined(n: StoredNode, live: Liveness) -> NodeRecord {
    NodeRecord {
        last_seen: live.last_seen.max(n.reported_at),
        agent_version: live.agent_version,
        uptime_s: live.uptime_s,
        gpu_health: live.gpu_health,
        name: n.name,
        identity: n.identity,
        hardware: n.hardware,
        generation: n.generation,
        reported_at: n.reported_at,
        replacement_allowed: n.replacement_allowed,
    }
}

impl Store {
    /// The intent journal (its own tree in the same database). It holds
    /// the database open: drop it, and every `Executor` built on it,
    /// before [`Store::close`].
    pub fn journal(&self) -> Result<crate::journal::Journal, StoreError> {
        let tree = self.db.open_tree(JOURNAL).map_err(io("open journal"))?;
        crate::journal::Journal::new(self.db.clone(), tree)
    }

    /// Opens (or creates) the store in `dir`, refusing one written by a
    /// newer schema.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        // sled's page cache defaults to 1 GiB; the hot data here is small
        // (hardware models are read on admin requests, liveness is tiny).
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .open()
            .map_err(|source| StoreError::Open {
                path: dir.to_owned(),
                source,
            })?;
        let meta = db.open_tree(META).map_err(io("open meta tree"))?;
        let found = match meta.get(SCHEMA_KEY).map_err(io("read schema"))? {
            None => None,
            Some(v) => {
                let bytes: [u8; 4] =
                    v.as_ref()
                        .try_into()
                        .map_err(|_| StoreError::CorruptSchema {
                            path: dir.to_owned(),
                        })?;
                Some(u32::from_le_bytes(bytes))
            }
        };
        if let Some(found) = found {
            if found > STORE_SCHEMA {
                return Err(StoreError::Newer {
                    path: dir.to_owned(),
                    found,
                    supported: STORE_SCHEMA,
                });
            }
        }
        let store = Store {
            nodes: db.open_tree(NODES).map_err(io("open nodes tree"))?,
            liveness: db.open_tree(LIVENESS).map_err(io("open liveness tree"))?,
            views: db
                .open_tree(SCHEDULER_VIEWS)
                .map_err(io("open scheduler views tree"))?,
            commands: db.open_tree(COMMANDS).map_err(io("open commands tree"))?,
            commands_lock: std::sync::Mutex::new(()),
            lifecycle: db.open_tree(LIFECYCLE).map_err(io("open lifecycle tree"))?,
            bookings: db.open_tree(BOOKINGS).map_err(io("open bookings tree"))?,
            said: db.open_tree(SAID).map_err(io("open said tree"))?,
            db,
            dir: dir.to_owned(),
        };
        store.migrate(found.unwrap_or(STORE_SCHEMA))?;
        meta.insert(SCHEMA_KEY, &STORE_SCHEMA.to_le_bytes())
            .map_err(io("write schema"))?;
        store.flush()?;
        Ok(store)
    }

    /// Flushes, lets go of the database and waits, up to `within`, until
    /// sled has released the directory's lock, so that the same directory
    /// can be opened again at once, by this process or another.
    ///
    /// sled releases the lock when the last handle on the database is
    /// gone: this store's, every journal from [`Store::journal`] (and so
    /// every `Executor` built on one), and sled's background threads (its
    /// flusher, joined when the last handle drops, and write-backs on its
    /// thread pool). The caller drops the journals first; one still alive
    /// makes this fail with [`StoreError::StillOpen`] at the deadline.
    /// Blocking (sled is): async callers run it on a blocking thread.
    pub fn close(self, within: Duration) -> Result<(), StoreError> {
        self.flush()?;
        let Store {
            db,
            nodes,
            liveness,
            views,
            commands,
            commands_lock: _,
            lifecycle,
            bookings,
            said,
            dir,
        } = self;
        drop(lifecycle);
        drop(bookings);
        drop(said);
        drop(nodes);
        drop(liveness);
        drop(views);
        drop(commands);
        drop(db);
        wait_released(&dir, within)
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Brings records written by schema `from` up to [`STORE_SCHEMA`].
    /// Schema 1 is the first; there is nothing to migrate yet.
    fn migrate(&self, from: u32) -> Result<(), StoreError> {
        debug_assert!(from <= STORE_SCHEMA);
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(io("flush"))?;
        Ok(())
    }

    fn stored(&self, name: &str) -> Result<Option<StoredNode>, StoreError> {
        let Some(bytes) = self.nodes.get(name).map_err(io("read node"))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                node: name.to_owned(),
                source,
            })
    }

    fn liveness_of(&self, name: &str) -> Result<Liveness, StoreError> {
        let Some(bytes) = self.liveness.get(name).map_err(io("read liveness"))? else {
            return Ok(Liveness::default());
        };
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
            node: name.to_owned(),
            source,
        })
    }

    fn record(&self, n: StoredNode) -> Result<NodeRecord, StoreError> {
        let live = self.liveness_of(&n.name)?;
        Ok(joined(n, live))
    }

    pub fn node(&self, name: &str) -> Result<Option<NodeRecord>, StoreError> {
        self.stored(name)?.map(|n| self.record(n)).transpose()
    }

    /// All nodes, by name.
    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.nodes
            .iter()
            .map(|kv| {
                let (k, v) = kv.map_err(io("list nodes"))?;
                let n: StoredNode =
                    serde_json::from_slice(&v).map_err(|source| StoreError::Corrupt {
                        node: String::from_utf8_lossy(&k).into_owned(),
                        source,
                    })?;
                self.record(n)
            })
            .collect()
    }

    /// When each node was last heard from, without decoding any hardware
    /// model (the control loop reads this every round).
    pub fn last_seen(&self) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        Ok(self
            .agents_seen()?
            .into_iter()
            .map(|(n, a)| (n, a.last_seen))
            .collect())
    }

    /// When each node's agent was last heard from and last reported,
    /// without decoding any hardware model.
    pub fn agents_seen(&self) -> Result<std::collections::BTreeMap<String, AgentSeen>, StoreError> {
        self.liveness
            .iter()
            .map(|kv| {
                let (k, v) = kv.map_err(io("list liveness"))?;
                let name = String::from_utf8_lossy(&k).into_owned();
                let live: Liveness =
                    serde_json::from_slice(&v).map_err(|source| StoreError::Corrupt {
                        node: name.clone(),
                        source,
                    })?;
                let seen = AgentSeen {
                    last_seen: live.last_seen,
                    last_report: live.last_report,
                };
                Ok((name, seen))
            })
            .collect()
    }

    /// Keeps the scheduler's view of a node (its last Kubernetes Node and
    /// slices). A cache of what the API server said: not flushed here
    /// (sled flushes within half a second; a crash loses at most a view
    /// the next watch gives again).
    pub fn put_scheduler_view(
        &self,
        name: &str,
        view: &accord::truth::SchedulerView,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(view).expect("views serialize");
        self.views
            .insert(name.as_bytes(), bytes)
            .map_err(io("write scheduler view"))?;
        Ok(())
    }

    /// Every kept scheduler view, by node. One that cannot be decoded (a
    /// view written by another release) is skipped and named in the
    /// second list: it is only a cache.
    pub fn scheduler_views(
        &self,
    ) -> Result<
        (
            std::collections::BTreeMap<String, accord::truth::SchedulerView>,
            Vec<String>,
        ),
        StoreError,
    > {
        let mut out = std::collections::BTreeMap::new();
        let mut bad = Vec::new();
        for kv in self.views.iter() {
            let (k, v) = kv.map_err(io("list scheduler views"))?;
            let name = String::from_utf8_lossy(&k).into_owned();
            match serde_json::from_slice(&v) {
                Ok(view) => {
                    out.insert(name, view);
                }
                Err(_) => bad.push(name),
            }
        }
        Ok((out, bad))
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn put(&self, n: &StoredNode, live: &Liveness) -> Result<(), StoreError> {
        let node = serde_json::to_vec(n).expect("records serialize");
        let live = serde_json::to_vec(live).expect("records serialize");
        self.nodes
            .insert(n.name.as_bytes(), node)
            .map_err(io("write node"))?;
        self.liveness
            .insert(n.name.as_bytes(), live)
            .map_err(io("write liveness"))?;
        // Durable before the caller acknowledges.
        self.flush()
    }

    /// Stores a hardware report for `name`. Refused, with nothing
    /// written, when the machine identity contradicts the stored one
    /// ([`IdentityRule::Lenient`]).
    pub fn report(
        &self,
        name: &str,
        hardware: NodeHardware,
        agent_version: Option<String>,
        now: u64,
    ) -> Result<(ReportOutcome, NodeRecord), StoreError> {
        self.report_as(
            name,
            hardware,
            agent_version,
            now,
            IdentityRule::Lenient,
            None,
        )
        .map(|a| (a.outcome, a.record))
    }

    /// Stores a hardware report for `name`, its machine identity checked
    /// by `rule`; refused with nothing written otherwise. `session` is the
    /// one the agent sent: kept when it is the node's current one, else a
    /// new one is made (the report proved the machine) and returned.
    /// Under [`IdentityRule::Bound`] the binding only grows: a bound serial
    /// or GPU set stays; one not yet bound is added.
    pub fn report_as(
        &self,
        name: &str,
        hardware: NodeHardware,
        agent_version: Option<String>,
        now: u64,
        rule: IdentityRule,
        session: Option<&str>,
    ) -> Result<Accepted, StoreError> {
        let reported = MachineIdentity::of(&hardware);
        if rule == IdentityRule::Bound && reported.is_empty() {
            return Err(StoreError::NoIdentity {
                node: name.to_owned(),
            });
        }
        let mut live = self.liveness_of(name)?;
        live.last_seen = now;
        live.last_report = now;
        if agent_version.is_some() {
            live.agent_version = agent_version;
        }
        let (outcome, stored) = match self.stored(name)? {
            None => (
                ReportOutcome::Registered,
                StoredNode {
                    name: name.to_owned(),
                    identity: reported,
                    hardware,
                    generation: 1,
                    reported_at: now,
                    replacement_allowed: false,
                    session: Some(new_session(name)?),
                },
            ),
            Some(old) => {
                let proven = match rule {
                    IdentityRule::Lenient => old.identity.compatible(&reported),
                    IdentityRule::Bound => reported.proves(&old.identity),
                };
                if !old.replacement_allowed && !proven {
                    return Err(StoreError::IdentityMismatch {
                        node: name.to_owned(),
                        stored: old.identity.to_string(),
                        reported: reported.to_string(),
                    });
                }
                // Under a shared token the binding only grows by proof: a
                // serial is added once, the bound GPU UUIDs stay as they
                // were (replacing them with a report's that shares half
                // would let two reports walk the name to another machine);
                // a change of machine is `accordctl node replace`.
                let identity = match rule {
                    IdentityRule::Bound if !old.replacement_allowed && !old.identity.is_empty() => {
                        MachineIdentity {
                            serial: old.identity.serial.clone().or(reported.serial),
                            gpu_uuids: if old.identity.gpu_uuids.is_empty() {
                                reported.gpu_uuids
                            } else {
                                old.identity.gpu_uuids.clone()
                            },
                        }
                    }
                    _ => reported,
                };
                // The agent's session goes on; any other report that
                // proved the machine (a restarted agent) starts a new one.
                let session =
                    if !old.replacement_allowed && same_session(session, old.session.as_deref()) {
                        old.session.clone()
                    } else {
                        Some(new_session(name)?)
                    };
                let changed = old.hardware != hardware || old.identity != identity;
                let outcome = if changed {
                    ReportOutcome::Changed
                } else {
                    ReportOutcome::Unchanged
                };
                (
                    outcome,
                    StoredNode {
                        name: name.to_owned(),
                        generation: old.generation + u64::from(changed),
                        reported_at: if changed { now } else { old.reported_at },
                        replacement_allowed: false,
                        identity,
                        hardware,
                        session,
                    },
                )
            }
        };
        let session = stored.session.clone().expect("set above");
        self.put(&stored, &live)?;
        // Both halves are in hand: no need to read them back.
        Ok(Accepted {
            outcome,
            record: joined(stored, live),
            session,
        })
    }

    /// Records a sign of life; `None` (and nothing written) for a node
    /// never registered. Returns the node's generation.
    pub fn heartbeat(&self, name: &str, beat: Liveness) -> Result<Option<u64>, StoreError> {
        Ok(match self.heartbeat_as(name, beat, None, false)? {
            Beat::Recorded(g) => Some(g),
            Beat::NotRegistered | Beat::NoSession => None,
        })
    }

    /// Records a sign of life, refused (nothing written) when
    /// `need_session` and `session` is not the node's current one.
    pub fn heartbeat_as(
        &self,
        name: &str,
        beat: Liveness,
        session: Option<&str>,
        need_session: bool,
    ) -> Result<Beat, StoreError> {
        let Some(stored) = self.stored_head(name)? else {
            return Ok(Beat::NotRegistered);
        };
        if need_session && !same_session(session, stored.session.as_deref()) {
            return Ok(Beat::NoSession);
        }
        let old = self.liveness_of(name)?;
        let mut live = beat;
        if live.agent_version.is_none() {
            live.agent_version = old.agent_version;
        }
        live.last_report = old.last_report;
        let bytes = serde_json::to_vec(&live).expect("records serialize");
        self.liveness
            .insert(name.as_bytes(), bytes)
            .map_err(io("write liveness"))?;
        Ok(Beat::Recorded(stored.generation))
    }

    /// The generation and agent session of `name`, without decoding its
    /// hardware model.
    fn stored_head(&self, name: &str) -> Result<Option<Head>, StoreError> {
        let Some(bytes) = self.nodes.get(name).map_err(io("read node"))? else {
            return Ok(None);
        };
        // serde skips the other fields without building them.
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt {
                node: name.to_owned(),
                source,
            })
    }

    /// Lets the next report for `name` carry a new machine identity.
    pub fn allow_replacement(&self, name: &str) -> Result<bool, StoreError> {
        let Some(mut stored) = self.stored(name)? else {
            return Ok(false);
        };
        stored.replacement_allowed = true;
        // The replaced machine's agent proves nothing any more.
        stored.session = None;
        let live = self.liveness_of(name)?;
        self.put(&stored, &live)?;
        Ok(true)
    }
}

/// Waits, up to `within`, until no handle on the sled database in `dir`
/// is left (in this process or another): sled holds an exclusive lock on
/// it until then. [`Store::close`] ends with this; it is public for a
/// database opened with sled directly (tests).
pub fn wait_released(dir: &Path, within: Duration) -> Result<(), StoreError> {
    let started = Instant::now();
    loop {
        match released(dir) {
            Ok(true) => return Ok(()),
            Ok(false) if started.elapsed() < within => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(false) => {
                return Err(StoreError::StillOpen {
                    path: dir.to_owned(),
                    waited: started.elapsed(),
                })
            }
            Err(source) => {
                return Err(StoreError::Probe {
                    path: dir.to_owned(),
                    source,
                })
            }
        }
    }
}

/// Whether nobody holds sled's lock on the store in `dir`: takes it (the
/// same `flock` sled takes on `dir/db`) and lets go at once.
fn released(dir: &Path) -> std::io::Result<bool> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("db"))?;
    match file.try_lock() {
        // Dropping the file releases the probe's lock.
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hardware() -> NodeHardware {
        let text = include_str!("../../tests/fixtures/models/x9drg-wholeio.json");
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn silent_nodes_turn_stale_and_stay_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.report("a", hardware(), None, 1_000).unwrap();
        let record = store.node("a").unwrap().unwrap();
        assert!(!record.is_stale(1_100, 120));
        assert!(record.is_stale(1_121, 120));
        // A heartbeat makes it fresh again; nothing is ever deleted.
        let beat = Liveness {
            last_seen: 1_200,
            ..Liveness::default()
        };
        assert_eq!(store.heartbeat("a", beat).unwrap(), Some(1));
        let record = store.node("a").unwrap().unwrap();
        assert!(!record.is_stale(1_300, 120));
        assert_eq!(store.node_count(), 1);
        assert_eq!(
            store.heartbeat("unknown", Liveness::default()).unwrap(),
            None
        );
        assert_eq!(store.node_count(), 1);
    }

    #[test]
    fn a_closed_store_opens_again_at_once() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20u64 {
            let store = Store::open(dir.path()).unwrap();
            store.report("a", hardware(), None, 1_000 + round).unwrap();
            drop(store.journal().unwrap());
            store.close(CLOSE_WITHIN).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.node("a").unwrap().unwrap().last_seen, 1_019);
        store.close(CLOSE_WITHIN).unwrap();
    }

    #[test]
    fn close_says_when_a_journal_still_holds_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let journal = store.journal().unwrap();
        let err = store.close(Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, StoreError::StillOpen { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        assert!(msg.contains("Journal"), "{msg}");
        drop(journal);
    }
}
