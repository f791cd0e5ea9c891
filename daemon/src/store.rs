//! The daemon's durable state, in sled: one tree per kind of record, a
//! schema version checked at open, and a flush before anything is
//! acknowledged (sled makes writes durable only on flush).

use std::path::{Path, PathBuf};

use accord::hardware::NodeHardware;
use serde::{Deserialize, Serialize};

/// Version of the records in the store. Raise it with a migration in
/// [`Store::migrate`] when a record's meaning changes.
pub const STORE_SCHEMA: u32 = 1;

const META: &str = "meta";
const CACHE_BYTES: u64 = 8 << 20;
const NODES: &str = "nodes";
const LIVENESS: &str = "liveness";
const JOURNAL: &str = "journal";
const SCHEMA_KEY: &[u8] = b"schema";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: cannot open")]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(
        "store {path} was written by schema {found}, newer than this accordd ({STORE_SCHEMA}); \
         run the newer accordd or restore a backup"
    )]
    Newer { path: PathBuf, found: u32 },
    #[error("store {path}: schema record is corrupt")]
    CorruptSchema { path: PathBuf },
    #[error("store: {what}")]
    Io {
        what: &'static str,
        #[source]
        source: sled::Error,
    },
    #[error("store: node {node}: record is corrupt")]
    Corrupt {
        node: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "node {node}: machine identity {reported} contradicts the stored {stored}; \
         if the machine was replaced, run `accordctl node replace {node}`"
    )]
    IdentityMismatch {
        node: String,
        stored: String,
        reported: String,
    },
}

/// What identifies the machine behind a node name: its serial if known,
/// else its GPU UUIDs. A report whose identity contradicts the stored one
/// is refused (a machine swapped under the same name must be declared).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineIdentity {
    pub serial: Option<String>,
    pub gpu_uuids: Vec<String>,
}

impl MachineIdentity {
    pub fn of(hw: &NodeHardware) -> MachineIdentity {
        let mut gpu_uuids: Vec<String> = hw.gpus.iter().filter_map(|g| g.uuid.clone()).collect();
        gpu_uuids.sort();
        MachineIdentity {
            serial: hw.machine.serial.clone(),
            gpu_uuids,
        }
    }

    /// Whether the two can be the same machine: equal where both know.
    pub fn compatible(&self, other: &MachineIdentity) -> bool {
        let serial_ok = match (&self.serial, &other.serial) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let gpus_ok = self.gpu_uuids.is_empty()
            || other.gpu_uuids.is_empty()
            || self.gpu_uuids == other.gpu_uuids;
        serial_ok && gpus_ok
    }
}

impl std::fmt::Display for MachineIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.serial {
            Some(s) => write!(f, "serial {s}")?,
            None => write!(f, "no serial")?,
        }
        write!(f, ", {} GPU UUIDs", self.gpu_uuids.len())?;
        if let Some(first) = self.gpu_uuids.first() {
            write!(f, " (first {first})")?;
        }
        Ok(())
    }
}

/// Everything the daemon keeps about one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub identity: MachineIdentity,
    pub hardware: NodeHardware,
    /// Raised each time the hardware model changes.
    pub generation: u64,
    /// Unix seconds of the last hardware report and of the last sign of life.
    pub reported_at: u64,
    pub last_seen: u64,
    pub agent_version: Option<String>,
    /// From the last heartbeat.
    #[serde(default)]
    pub uptime_s: Option<u64>,
    #[serde(default)]
    pub gpu_health: Option<String>,
    /// Set by `accordctl node replace`: the next report may carry a new
    /// machine identity.
    #[serde(default)]
    pub replacement_allowed: bool,
}

impl NodeRecord {
    /// Not heard from within `stale_after_s` of `now`.
    pub fn is_stale(&self, now: u64, stale_after_s: u64) -> bool {
        stale(self.last_seen, now, stale_after_s)
    }
}

/// Not heard from within `stale_after_s` of `now`, having last been heard
/// from at `last_seen`.
pub fn stale(last_seen: u64, now: u64, stale_after_s: u64) -> bool {
    now.saturating_sub(last_seen) > stale_after_s
}

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

/// What a report did to the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Registered,
    Changed,
    Unchanged,
}

pub struct Store {
    db: sled::Db,
    nodes: sled::Tree,
    liveness: sled::Tree,
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

pub(crate) fn io(what: &'static str) -> impl FnOnce(sled::Error) -> StoreError {
    move |source| StoreError::Io { what, source }
}

impl Store {
    /// The intent journal (its own tree in the same database).
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
                });
            }
        }
        let store = Store {
            nodes: db.open_tree(NODES).map_err(io("open nodes tree"))?,
            liveness: db.open_tree(LIVENESS).map_err(io("open liveness tree"))?,
            db,
        };
        store.migrate(found.unwrap_or(STORE_SCHEMA))?;
        meta.insert(SCHEMA_KEY, &STORE_SCHEMA.to_le_bytes())
            .map_err(io("write schema"))?;
        store.flush()?;
        Ok(store)
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
}
