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
const SCHEMA_KEY: &[u8] = b"schema";

mod bios;
mod commands;
mod state;

pub use state::Booking;

/// How long [`Store::close`] is usually given: the flush, sled's flusher
/// thread and its last writes take milliseconds, not seconds.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(10);

// The records the store keeps are the admin API's node views too.
pub use accord_api::nodes::{stale, MachineIdentity, NodeRecord, ReportOutcome};

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
    dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("nodes", &self.nodes.len())
            .finish()
    }
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
            dir,
        } = self;
        drop(lifecycle);
        drop(bookings);
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
                Ok((name, live.last_seen))
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
    /// written, when the machine identity contradicts the stored one.
    pub fn report(
        &self,
        name: &str,
        hardware: NodeHardware,
        agent_version: Option<String>,
        now: u64,
    ) -> Result<(ReportOutcome, NodeRecord), StoreError> {
        let identity = MachineIdentity::of(&hardware);
        let mut live = self.liveness_of(name)?;
        live.last_seen = now;
        if agent_version.is_some() {
            live.agent_version = agent_version;
        }
        let (outcome, stored) = match self.stored(name)? {
            None => (
                ReportOutcome::Registered,
                StoredNode {
                    name: name.to_owned(),
                    identity,
                    hardware,
                    generation: 1,
                    reported_at: now,
                    replacement_allowed: false,
                },
            ),
            Some(old) => {
                if !old.replacement_allowed && !old.identity.compatible(&identity) {
                    return Err(StoreError::IdentityMismatch {
                        node: name.to_owned(),
                        stored: old.identity.to_string(),
                        reported: identity.to_string(),
                    });
                }
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
                    },
                )
            }
        };
        self.put(&stored, &live)?;
        // Both halves are in hand: no need to read them back.
        Ok((outcome, joined(stored, live)))
    }

    /// Records a sign of life; `None` (and nothing written) for a node
    /// never registered. Returns the node's generation.
    pub fn heartbeat(&self, name: &str, beat: Liveness) -> Result<Option<u64>, StoreError> {
        let Some(stored) = self.stored_generation(name)? else {
            return Ok(None);
        };
        let mut live = beat;
        if live.agent_version.is_none() {
            live.agent_version = self.liveness_of(name)?.agent_version;
        }
        let bytes = serde_json::to_vec(&live).expect("records serialize");
        self.liveness
            .insert(name.as_bytes(), bytes)
            .map_err(io("write liveness"))?;
        Ok(Some(stored))
    }

    /// The generation of `name`, without decoding its hardware model.
    fn stored_generation(&self, name: &str) -> Result<Option<u64>, StoreError> {
        #[derive(Deserialize)]
        struct Generation {
            generation: u64,
        }
        let Some(bytes) = self.nodes.get(name).map_err(io("read node"))? else {
            return Ok(None);
        };
        // serde skips the other fields without building them.
        let g: Generation =
            serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
                node: name.to_owned(),
                source,
            })?;
        Ok(Some(g.generation))
    }

    /// Lets the next report for `name` carry a new machine identity.
    pub fn allow_replacement(&self, name: &str) -> Result<bool, StoreError> {
        let Some(mut stored) = self.stored(name)? else {
            return Ok(false);
        };
        stored.replacement_allowed = true;
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
