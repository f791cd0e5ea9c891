//! What the HTTP API and the control loop share, in one handle: the
//! store, the metrics, the last round's status and the agent-report
//! wake-up. Both take it; neither imports the other.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};

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
    /// Nodes whose stored hardware model changed since the control loop
    /// last looked: it reads (and decodes) only these.
    pub models_changed: Mutex<BTreeSet<String>>,
    /// The clock (Unix seconds), replaceable in tests.
    pub now: fn() -> u64,
    /// Whether this replica may act (`[ha]`); set once at start, before
    /// anything serves. Unset: a single replica, always acting.
    pub leadership: std::sync::OnceLock<crate::ha::Leadership>,
    /// This replica's identity with `[ha]`.
    pub identity: std::sync::OnceLock<String>,
    /// With `[ha]`: each node's agent command generation the shared state
    /// holds under this replica's term (the API hands over only those).
    pub fenced_commands: Mutex<std::collections::BTreeMap<String, u64>>,
    /// The control loop's door for admins' power requests; set when the
    /// loop starts (unset: accordd runs without `[control]`).
    pub admin_power: std::sync::OnceLock<tokio::sync::mpsc::Sender<AdminCall>>,
    /// Each registered node's device-plugin assignments as its agent's
    /// last heartbeat listed them (the kubelet's pod-resources API), with
    /// when. In memory only: they change with every pod, and the next
    /// heartbeat says them again after a restart. One entry per registered
    /// node at most (a heartbeat for an unknown node is refused first).
    pub assigned: Mutex<std::collections::BTreeMap<String, Assigned>>,
    /// The mig-parted configurations the Kubernetes writer last saw in
    /// mig-manager's ConfigMap (`gpu-operator` mode): observe hands them
    /// to *decide*, which labels a Node only after its configuration is
    /// there.
    pub mig_configs_written: Arc<Mutex<BTreeSet<String>>>,
}

/// A node's device-plugin assignments as its agent last said them.
#[derive(Debug, Clone, Default)]
pub struct Assigned {
    /// Unix seconds of the heartbeat that said them.
    pub at: u64,
    pub pods: Vec<accord_api::agent::PodDevices>,
}

/// An admin's power request on its way to the control loop, with where
/// the answer goes.
#[derive(Debug)]
pub struct AdminCall {
    pub node: String,
    pub request: accord_api::control::AdminPowerRequest,
    pub reply: tokio::sync::oneshot::Sender<AdminReply>,
}

pub use accord_api::control::{AdminRefusal, AdminReply, RefusalKind};

impl Shared {
    pub fn new(store: Store) -> Shared {
        Shared {
            store,
            metrics: Arc::new(Metrics::new()),
            control: RwLock::new(None),
            agent_reported: Notify::new(),
            models_changed: Mutex::new(BTreeSet::new()),
            now: unix_now,
            leadership: std::sync::OnceLock::new(),
            identity: std::sync::OnceLock::new(),
            fenced_commands: Mutex::new(Default::default()),
            admin_power: std::sync::OnceLock::new(),
            assigned: Mutex::new(Default::default()),
            mig_configs_written: Arc::new(Mutex::new(BTreeSet::new())),
        }
    }

    /// Whether the shared state holds `node`'s command `generation` under
    /// this replica's term.
    pub fn command_fenced(&self, node: &str, generation: u64) -> bool {
        self.fenced_commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            == Some(&generation)
    }

    /// Notes the commands the shared state holds under this term
    /// (`None`: the node has none); `reset` first forgets every other.
    pub fn set_fenced_commands<'a>(
        &self,
        commands: impl IntoIterator<Item = (&'a String, Option<u64>)>,
        reset: bool,
    ) {
        let mut fenced = self
            .fenced_commands
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if reset {
            fenced.clear();
        }
        for (node, generation) in commands {
            match generation {
                Some(g) => fenced.insert(node.clone(), g),
                None => fenced.remove(node),
            };
        }
    }

    /// The gate every action passes (a single replica: always open).
    pub fn leadership(&self) -> crate::ha::Leadership {
        self.leadership
            .get()
            .cloned()
            .unwrap_or_else(crate::ha::Leadership::single)
    }

    /// This replica and who leads (`None`: a single replica).
    pub fn replica(&self) -> Option<accord_api::control::ReplicaStatus> {
        let identity = self.identity.get()?.clone();
        let term = self.leadership().term()?;
        Some(match term {
            crate::ha::Term::Leader { fence, .. } => {
                let leading = self.leadership().may_act().is_ok();
                accord_api::control::ReplicaStatus {
                    identity,
                    leading,
                    leader: leading.then(|| fence.holder.clone()),
                    transitions: leading.then_some(fence.transitions),
                }
            }
            crate::ha::Term::Follower { leader } => accord_api::control::ReplicaStatus {
                identity,
                leading: false,
                leader,
                transitions: None,
            },
        })
    }
}

impl Shared {
    /// The nodes whose model changed since the last call.
    pub fn take_models_changed(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.models_changed.lock().expect("lock"))
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

pub use accord_api::admin_files::unix_now;
