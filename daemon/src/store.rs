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
/// [`Store::migrate`] when a record's meaning changes. 2: node records
/// and scheduler views kept as chunks ([`chunked`]).
pub const STORE_SCHEMA: u32 = 2;

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
/// What deleted dark machines' Nodes had (`kept_nodes.rs`).
const KEPT_NODES: &str = "kept_nodes";
const SCHEMA_KEY: &[u8] = b"schema";

mod bios;
mod chunked;
mod commands;
mod kept_nodes;
mod nodes;
mod replicated;
mod said;
mod state;

pub use said::SaidKey;
pub use state::Booking;

/// How long [`Store::close`] is usually given: the flush, sled's flusher
/// thread and its last writes take milliseconds, not seconds.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// Bounds on what agents' reports may make the store hold (`[store]` in
/// accordd.toml): a report past one is refused with nothing written
/// ([`StoreError::Full`]). They bound the disk (sled keeps a few times
/// the live bytes, never more: [`chunked`]) and what a full listing or
/// the control loop's first read of every model holds in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Registered nodes.
    pub max_nodes: usize,
    /// One node's record (its hardware model, identity and session), as
    /// stored.
    pub max_node_bytes: u64,
    /// Every node's record together.
    pub max_bytes: u64,
}

impl Default for StoreLimits {
    /// 10,000 nodes; 1 MiB a node (an 8-GPU H100's report is about
    /// 60 KiB); 1 GiB in all.
    fn default() -> Self {
        StoreLimits {
            max_nodes: 10_000,
            max_node_bytes: 1 << 20,
            max_bytes: 1 << 30,
        }
    }
}

/// What the node records take, by node, and in all.
#[derive(Debug, Default)]
struct Usage {
    bytes: std::collections::BTreeMap<String, u64>,
    total: u64,
}

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

/// The store. sled holds an exclusive lock on the directory while any
/// handle on the database lives (this store, every [`Journal`] from
/// [`Store::journal`], sled's background threads); [`Store::close`]
/// flushes, lets go and waits until the lock is released, so the
/// directory can be opened again at once.
///
/// [`Journal`]: crate::journal::Journal
pub struct Store {
    db: sled::Db,
    nodes: chunked::Chunked,
    liveness: sled::Tree,
    views: chunked::Chunked,
    commands: sled::Tree,
    /// Serialises the read-modify-writes of `commands` (the API hands
    /// commands out while the loop opens and closes them).
    commands_lock: std::sync::Mutex<()>,
    lifecycle: sled::Tree,
    bookings: sled::Tree,
    said: sled::Tree,
    kept_nodes: chunked::Chunked,
    limits: StoreLimits,
    /// Kept with every node write (they go through it one at a time).
    usage: std::sync::Mutex<Usage>,
    dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("nodes", &self.node_count())
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

    /// Opens (or creates) the store in `dir` with the default
    /// [`StoreLimits`].
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Self::open_with(dir, StoreLimits::default())
    }

    /// Opens (or creates) the store in `dir`, refusing one written by a
    /// newer schema. The limits bound what reports may add; records
    /// already there are kept, whatever they take.
    pub fn open_with(dir: &Path, limits: StoreLimits) -> Result<Store, StoreError> {
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
            nodes: chunked::Chunked::new(db.open_tree(NODES).map_err(io("open nodes tree"))?),
            liveness: db.open_tree(LIVENESS).map_err(io("open liveness tree"))?,
            views: chunked::Chunked::new(
                db.open_tree(SCHEDULER_VIEWS)
                    .map_err(io("open scheduler views tree"))?,
            ),
            commands: db.open_tree(COMMANDS).map_err(io("open commands tree"))?,
            commands_lock: std::sync::Mutex::new(()),
            lifecycle: db.open_tree(LIFECYCLE).map_err(io("open lifecycle tree"))?,
            bookings: db.open_tree(BOOKINGS).map_err(io("open bookings tree"))?,
            said: db.open_tree(SAID).map_err(io("open said tree"))?,
            kept_nodes: chunked::Chunked::new(
                db.open_tree(KEPT_NODES)
                    .map_err(io("open kept nodes tree"))?,
            ),
            limits,
            usage: std::sync::Mutex::new(Usage::default()),
            db,
            dir: dir.to_owned(),
        };
        store.migrate(found.unwrap_or(STORE_SCHEMA))?;
        store.count_usage()?;
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
            kept_nodes,
            limits: _,
            usage: _,
            dir,
        } = self;
        drop(kept_nodes);
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
    /// 1 → 2: node records and scheduler views, kept whole, become chunks
    /// (blobs sled left behind before are not reclaimed by this).
    fn migrate(&self, from: u32) -> Result<(), StoreError> {
        debug_assert!(from <= STORE_SCHEMA);
        if from < 2 {
            self.nodes
                .migrate_whole()
                .map_err(io("migrate node records"))?;
            self.views
                .migrate_whole()
                .map_err(io("migrate scheduler views"))?;
        }
        Ok(())
    }

    /// What each stored node record takes, read once at open.
    fn count_usage(&self) -> Result<(), StoreError> {
        let mut usage = Usage::default();
        for record in self.nodes.records(None) {
            let (name, bytes) = record.map_err(chunk_error("count node records"))?;
            usage.total += bytes.len() as u64;
            usage.bytes.insert(name, bytes.len() as u64);
        }
        *self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = usage;
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(io("flush"))?;
        Ok(())
    }

    fn stored(&self, name: &str) -> Result<Option<StoredNode>, StoreError> {
        self.node_as(name)
    }

    /// `name`'s record decoded as `T` (the whole record, or the part of
    /// it `T` has: serde skips the other fields without building them).
    fn node_as<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StoreError> {
        let Some(bytes) = self.nodes.get(name).map_err(chunk_error("read node"))? else {
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
        Ok(self.nodes_page(None, usize::MAX)?.0)
    }

    /// At most `limit` nodes by name, from the first after `after` on,
    /// and the name to continue after when there are more.
    pub fn nodes_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<NodeRecord>, Option<String>), StoreError> {
        let mut page = Vec::new();
        for record in self.nodes.records(after) {
            let (name, bytes) = record.map_err(chunk_error("list nodes"))?;
            if page.len() == limit {
                let last = page.last().map(|r: &NodeRecord| r.name.clone());
                return Ok((page, last));
            }
            let n: StoredNode = serde_json::from_slice(&bytes)
                .map_err(|source| StoreError::Corrupt { node: name, source })?;
            page.push(self.record(n)?);
        }
        Ok((page, None))
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
            .put(name, &bytes)
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
        for record in self.views.records(None) {
            let (name, v) = match record {
                Ok(r) => r,
                Err(chunked::ChunkError::Broken(name)) => {
                    bad.push(name);
                    continue;
                }
                Err(e) => return Err(chunk_error("list scheduler views")(e)),
            };
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
        self.usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .bytes
            .len()
    }

    /// The store's limits, and what node records take now (bytes).
    pub fn usage(&self) -> (StoreLimits, u64) {
        let usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (self.limits, usage.total)
    }
}

/// Wraps a chunked read's error with what the store was doing.
fn chunk_error(what: &'static str) -> impl FnOnce(chunked::ChunkError) -> StoreError {
    move |e| match e {
        chunked::ChunkError::Sled(source) => StoreError::Io { what, source },
        chunked::ChunkError::Broken(node) => StoreError::Broken { node },
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
mod tests;
