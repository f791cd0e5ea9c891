//! What the HTTP API and the control loop share, in one handle: the
//! store, the metrics, the last round's status and the agent-report
//! wake-up. Both take it; neither imports the other.

use std::sync::{Arc, RwLock};

use accord_api::control::ControlStatus;
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::store::Store;

pub struct Shared {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// The control loop's last round (`GET /v1/status`); `None` when
    /// accordd runs without `[control]`, or before its first round.
    pub control: RwLock<Option<ControlStatus>>,
    /// Raised on each accepted agent report: wakes the control loop.
    pub agent_reported: Notify,
    /// The clock (Unix seconds), replaceable in tests.
    pub now: fn() -> u64,
}

impl Shared {
    pub fn new(store: Store) -> Shared {
        Shared {
            store,
            metrics: Arc::new(Metrics::new()),
            control: RwLock::new(None),
            agent_reported: Notify::new(),
            now: unix_now,
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
