//! The store's error type, apart from the store itself so that the
//! journal (which keeps its records in the same sled database) can use it
//! without importing the store. Re-exported as `crate::store::StoreError`.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: cannot open")]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(
        "store {path} was written by schema {found}, newer than this accordd ({supported}); \
         run the newer accordd or restore a backup"
    )]
    Newer {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
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
    /// A record whose chunks do not follow on (`store/chunked.rs`).
    #[error("store: node {node}: record is broken (chunks missing)")]
    Broken { node: String },
    /// A report past one of the store's limits (`[store]`): nothing
    /// written.
    #[error("node {node}: report not stored: {what}")]
    Full { node: String, what: String },
    #[error(
        "node {node}: machine identity {reported} contradicts the stored {stored}; \
         if the machine was replaced, run `accordctl node replace {node}`"
    )]
    IdentityMismatch {
        node: String,
        stored: String,
        reported: String,
    },
    /// With a shared agent token a node name is bound to a machine by its
    /// identity: a report that has none cannot be bound or checked.
    #[error(
        "node {node}: the report carries no machine identity (no serial number and no GPU \
         UUIDs); with a shared agent token accordd binds a node name to its machine by them: \
         run a per-node agent token for this node"
    )]
    NoIdentity { node: String },
    /// The operating system gave no random bytes for a new agent session.
    #[error("node {node}: cannot make an agent session")]
    Session {
        node: String,
        #[source]
        source: getrandom::Error,
    },
    /// A node has one command at a time.
    #[error("node {node}: command {generation} is still open")]
    CommandOpen { node: String, generation: u64 },
    /// [`crate::store::Store::close`] waited for the database's file lock
    /// to be released, and it was not.
    #[error(
        "store {path}: still locked {waited:?} after close: a Journal or Executor of this \
         store is still alive, or sled's background threads are still writing"
    )]
    StillOpen { path: PathBuf, waited: Duration },
    /// The lock probe itself failed (not a lock held by someone else).
    #[error("store {path}: cannot check whether the store is released")]
    Probe {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Wraps a sled error with what the store was doing.
pub(crate) fn io(what: &'static str) -> impl FnOnce(sled::Error) -> StoreError {
    move |source| StoreError::Io { what, source }
}
