//! What a new leader needs, kept in the API server: one `AccordNode`
//! object (`accord.dev/v1alpha1`, in the Lease's namespace, named after
//! the node; `deploy/crd-accordnode.yaml`) per fleet node, whose `spec` is
//! a [`NodeShared`]: the term that last wrote it (`fence`), the node's
//! open power intents, its lifecycle, bookings, BIOS record, agent
//! command and, while its machine is dark, what its deleted Node had.
//!
//! Every write carries the resourceVersion it read (optimistic
//! concurrency) and the writer's fence; an object whose fence is newer
//! than the writer's refuses it (`Deposed`): a new leader fences every
//! object at its takeover ([`SharedState::take_over`]), so a deposed
//! leader's next intent write fails and its action is never sent.
//! Intents are written before their action (`before_action`); the rest
//! follows the local store each round (write-behind, `mirror`).

use std::collections::BTreeMap;
use std::sync::Arc;

use accord::lifecycle::NodeLife;
use accord_api::agent::CommandRecord;
use accord_api::control::{BiosRecord, Intent};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{Fence, Leadership, NotLeading};

pub const GROUP: &str = "accord.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "AccordNode";
pub const PLURAL: &str = "accordnodes";

/// At most this many open intents are kept per node (a node has one or
/// two at a time; more is another writer's garbage).
const MAX_INTENTS_PER_NODE: usize = 64;
/// At most this many workloads named on one intent (a gang is one).
const MAX_WORKLOADS_PER_INTENT: usize = 1024;
/// At most this many ProvisioningRequests booking one node.
const MAX_BOOKINGS_PER_NODE: usize = 1024;
/// A takeover writes this many nodes' fences at once.
const TAKEOVER_WRITES_AT_ONCE: usize = 16;
/// Conflicting writes re-read and tried again this often, then an error.
const CONFLICT_RETRIES: usize = 5;

/// One node's shared state: an `AccordNode`'s `spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeShared {
    /// The term that last wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
    /// Its open power intents (closed ones are removed).
    #[serde(default)]
    pub intents: Vec<Intent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<NodeLife>,
    /// ProvisioningRequests (`namespace/name`) booking it, until when
    /// (Unix seconds).
    #[serde(default)]
    pub bookings: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<BiosRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandRecord>,
    /// What its Node had, when Accord deleted it (the machine is dark):
    /// put back when its kubelet registers it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<accord::truth::KeptNode>,
}

impl NodeShared {
    /// The same apart from the fence and intents (what `mirror` writes).
    fn same_parts(&self, other: &NodeShared) -> bool {
        self.lifecycle == other.lifecycle
            && self.bookings == other.bookings
            && self.bios == other.bios
            && self.command == other.command
            && self.kept == other.kept
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SharedStateError {
    #[error(transparent)]
    NotLeading(#[from] NotLeading),
    #[error("AccordNode {node}: written by {by:?} (a newer term than ours, {ours:?}): this replica was deposed")]
    Deposed {
        node: String,
        by: Fence,
        ours: Fence,
    },
    #[error("AccordNode {node}: still conflicting after {CONFLICT_RETRIES} tries")]
    Conflicts { node: String },
    #[error("AccordNode {node}: {what}")]
    Api {
        node: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("AccordNode {node}: more than {MAX_INTENTS_PER_NODE} open intents")]
    TooManyIntents { node: String },
}

/// An object as last read or written: its resourceVersion and state.
#[derive(Debug, Clone)]
struct Known {
    resource_version: Option<String>,
    state: NodeShared,
    /// Not decodable as a `NodeShared` (written by something else).
    unreadable: bool,
}

/// The shared state's client, one per replica.
pub struct SharedState {
    api: Api<DynamicObject>,
    resource: ApiResource,
    namespace: String,
    leadership: Leadership,
    /// Each node's object as last known, under a per-node lock that
    /// serialises this replica's writes to it.
    known: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Option<Known>>>>>,
}

impl std::fmt::Debug for SharedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedState")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The `AccordNode` resource.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

impl SharedState {
    pub fn new(client: kube::Client, namespace: &str, leadership: Leadership) -> SharedState {
        let resource = resource();
        SharedState {
            api: Api::namespaced_with(client, namespace, &resource),
            resource,
            namespace: namespace.to_owned(),
            leadership,
            known: Default::default(),
        }
    }

    fn slot(&self, node: &str) -> Arc<tokio::sync::Mutex<Option<Known>>> {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.entry(node.to_owned()).or_default().clone()
    }

    /// Reads `node`'s object (`None`: there is none).
    async fn read(&self, node: &str) -> Result<Option<Known>, SharedStateError> {
        let object = self
            .api
            .get_opt(node)
            .await
            .map_err(|source| SharedStateError::Api {
                node: node.to_owned(),
                what: "cannot read",
                source,
            })?;
        Ok(object.map(|o| decode(node, o)))
    }

    /// Applies `change` to `node`'s object under this replica's term and
    /// writes it with the resourceVersion read; on a conflict reads again
    /// and retries. Refused when this replica may not act now, or when the
    /// object carries a newer term.
    pub async fn update(
        &self,
        node: &str,
        change: impl Fn(&mut NodeShared),
    ) -> Result<(), SharedStateError> {
        let slot = self.slot(node);
        let mut known = slot.lock().await;
        for _ in 0..CONFLICT_RETRIES {
            let fence = self
                .leadership
                .may_act()?
                .expect("shared state is used with a Lease only");
            if known.is_none() {
                *known = self.read(node).await?;
            }
            let mut state = match known.as_ref() {
                Some(k) if !k.unreadable => k.state.clone(),
                _ => NodeShared::default(),
            };
            if let Some(by) = state.fence.as_ref().filter(|by| newer(by, &fence)) {
                return Err(SharedStateError::Deposed {
                    node: node.to_owned(),
                    by: by.clone(),
                    ours: fence,
                });
            }
            change(&mut state);
            if state.intents.len() > MAX_INTENTS_PER_NODE {
                return Err(SharedStateError::TooManyIntents {
                    node: node.to_owned(),
                });
            }
            state.fence = Some(fence);
            // Checked again at the last moment: the read may have taken
            // a while.
            self.leadership.may_act()?;
            match self
                .write(
                    node,
                    known.as_ref().and_then(|k| k.resource_version.clone()),
                    &state,
                )
                .await
            {
                Ok(written) => {
                    *known = Some(written);
                    return Ok(());
                }
                Err(Written::Conflict) => {
                    // Another writer: read again.
                    *known = None;
                }
                Err(Written::Failed(e)) => {
                    *known = None;
                    return Err(e);
                }
            }
        }
        Err(SharedStateError::Conflicts {
            node: node.to_owned(),
        })
    }

    /// Creates (no resourceVersion) or replaces the object.
    async fn write(
        &self,
        node: &str,
        resource_version: Option<String>,
        state: &NodeShared,
    ) -> Result<Known, Written> {
        let mut object = DynamicObject::new(node, &self.resource).within(&self.namespace);
        object.metadata.resource_version = resource_version.clone();
        object.data = serde_json::json!({
            "spec": serde_json::to_value(state).expect("plain data")
        });
        let pp = PostParams::default();
        let creating = resource_version.is_none();
        let result = match resource_version {
            Some(_) => self.api.replace(node, &pp, &object).await,
            None => self.api.create(&pp, &object).await,
        };
        match result {
            Ok(o) => Ok(Known {
                resource_version: o.metadata.resource_version.clone(),
                state: state.clone(),
                unreadable: false,
            }),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Written::Conflict),
            // Deleted meanwhile: created again on the retry.
            Err(kube::Error::Api(s)) if s.code == 404 && !creating => Err(Written::Conflict),
            Err(source @ kube::Error::Api(_)) if creating => {
                Err(Written::Failed(SharedStateError::Api {
                    node: node.to_owned(),
                    what: "cannot create (is deploy/crd-accordnode.yaml applied, and deploy/rbac.yaml?)",
                    source,
                }))
            }
            Err(source) => Err(Written::Failed(SharedStateError::Api {
                node: node.to_owned(),
                what: "cannot write",
                source,
            })),
        }
    }

    /// Before an intent's action: the intent (as it will be when sent)
    /// written under this replica's term. An error means the action must
    /// not be sent.
    /// Returns the term it was written under.
    pub async fn before_action(&self, intent: &Intent) -> Result<Option<Fence>, SharedStateError> {
        let mut intent = intent.clone();
        intent.fence = self.leadership.may_act()?;
        self.update(&intent.node.clone(), |s| {
            s.intents.retain(|i| i.id != intent.id);
            s.intents.push(intent.clone());
        })
        .await?;
        Ok(intent.fence)
    }

    /// After an intent's action: closed ones removed, open ones kept as
    /// they are now. Best effort (a leftover open intent is verified by the
    /// next leader, never resent at once).
    pub async fn after_action(&self, intent: &Intent) {
        let done = !intent.is_open();
        let kept = intent.clone();
        let result = self
            .update(&intent.node, |s| {
                s.intents.retain(|i| i.id != kept.id);
                if !done {
                    s.intents.push(kept.clone());
                }
            })
            .await;
        if let Err(e) = result {
            warn!(node = %intent.node, intent = intent.id, error = %accord::config_file::error_chain(&e), "cannot record the intent's outcome in the shared state; the next leader verifies it");
        }
    }

    /// The leader's write-behind: each node whose lifecycle, bookings,
    /// BIOS record or command differ from what its object holds is
    /// written. Errors are logged; the next round tries again. Returns the
    /// nodes whose object holds `parts` now.
    pub async fn mirror(&self, parts: &BTreeMap<String, NodeShared>) -> Vec<String> {
        let mut in_sync = Vec::new();
        for (node, want) in parts {
            let slot = self.slot(node);
            let same = {
                let known = slot.lock().await;
                known
                    .as_ref()
                    .is_some_and(|k| !k.unreadable && k.state.same_parts(want))
            };
            if same {
                in_sync.push(node.clone());
                continue;
            }
            let result = self
                .update(node, |s| {
                    s.lifecycle = want.lifecycle.clone();
                    s.bookings = want.bookings.clone();
                    s.bios = want.bios.clone();
                    s.command = want.command.clone();
                })
                .await;
            match result {
                Ok(()) => in_sync.push(node.clone()),
                Err(SharedStateError::NotLeading(_)) => return in_sync,
                Err(e) => {
                    warn!(node = %node, error = %accord::config_file::error_chain(&e), "cannot write the node's shared state; tried again next round");
                }
            }
        }
        in_sync
    }

    /// A new term's start: every fleet node's object read, then written
    /// with this term's fence (objects a deposed leader would write next
    /// now refuse it). A node without an object gets one from `local`
    /// (this replica's store: a fleet going from one replica to several
    /// keeps what it had). Returns each node's shared state as the previous
    /// leader left it.
    pub async fn take_over(
        &self,
        nodes: &[String],
        local: &BTreeMap<String, NodeShared>,
    ) -> Result<BTreeMap<String, NodeShared>, SharedStateError> {
        use futures::stream::{StreamExt, TryStreamExt};
        self.leadership.may_act()?;
        // One list for every object (what an earlier term knew is
        // forgotten), then the fences written, several at a time.
        let mut found = self.list().await?;
        let fleet: std::collections::BTreeSet<&String> = nodes.iter().collect();
        let others: Vec<String> = found
            .keys()
            .filter(|n| !fleet.contains(n))
            .cloned()
            .collect();
        let mut work = Vec::with_capacity(nodes.len());
        for node in nodes {
            let known = found.remove(node);
            let state = match &known {
                Some(k) if !k.unreadable => k.state.clone(),
                Some(_) => {
                    warn!(node = %node, "AccordNode cannot be read as Accord's shared state; replaced with this replica's");
                    local.get(node).cloned().unwrap_or_default()
                }
                None => local.get(node).cloned().unwrap_or_default(),
            };
            *self.slot(node).lock().await = known;
            work.push((node.clone(), state));
        }
        let out: BTreeMap<String, NodeShared> = futures::stream::iter(work)
            .map(|(node, state)| async move {
                // The fence is checked against the object's, then set.
                self.update(&node, |s| *s = state.clone()).await?;
                Ok::<_, SharedStateError>((node, state))
            })
            .buffer_unordered(TAKEOVER_WRITES_AT_ONCE)
            .try_collect()
            .await?;
        self.forget(&others).await?;
        info!(nodes = nodes.len(), "shared state taken over");
        Ok(out)
    }

    /// Every `AccordNode` in the namespace, by name.
    async fn list(&self) -> Result<BTreeMap<String, Known>, SharedStateError> {
        let listed = self
            .api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(|source| SharedStateError::Api {
                node: "*".to_owned(),
                what: "cannot list",
                source,
            })?;
        Ok(listed
            .items
            .into_iter()
            .filter_map(|o| {
                let name = o.metadata.name.clone()?;
                let known = decode(&name, o);
                Some((name, known))
            })
            .collect())
    }
}

impl SharedState {
    /// Objects of nodes no longer in the fleet are deleted (their state
    /// means nothing now), once every fleet node's object carries this
    /// term.
    async fn forget(&self, others: &[String]) -> Result<(), SharedStateError> {
        for name in others {
            self.leadership.may_act()?;
            match self.api.delete(name, &Default::default()).await {
                Ok(_) => {
                    info!(node = %name, "AccordNode of a node no longer in the fleet deleted")
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    return Err(SharedStateError::Api {
                        node: name.clone(),
                        what: "cannot delete",
                        source,
                    })
                }
            }
            self.known
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(name);
        }
        Ok(())
    }
}

enum Written {
    Conflict,
    Failed(SharedStateError),
}

/// Whether `by` is a later term than `ours` (or the same count held by
/// someone else: two holders of one term cannot both be right).
fn newer(by: &Fence, ours: &Fence) -> bool {
    by.transitions > ours.transitions
        || (by.transitions == ours.transitions && by.holder != ours.holder)
}

fn decode(node: &str, o: DynamicObject) -> Known {
    let resource_version = o.metadata.resource_version.clone();
    match o.data.get("spec") {
        None => Known {
            resource_version,
            state: NodeShared::default(),
            unreadable: false,
        },
        Some(spec) => match decode_spec(node, spec) {
            Ok(state) => Known {
                resource_version,
                state,
                unreadable: false,
            },
            Err(why) => {
                warn!(node, %why, "AccordNode spec is not Accord's shared state");
                Known {
                    resource_version,
                    state: NodeShared::default(),
                    unreadable: true,
                }
            }
        },
    }
}

/// An `AccordNode`'s `spec` as accordd takes it (outside input: whatever
/// is in the API server): its shape, at most `MAX_INTENTS_PER_NODE`
/// intents, each open and of this node, names and strings within
/// Kubernetes' bounds.
pub fn decode_spec(node: &str, spec: &serde_json::Value) -> Result<NodeShared, String> {
    let state: NodeShared = serde_json::from_value(spec.clone()).map_err(|e| e.to_string())?;
    if state.intents.len() > MAX_INTENTS_PER_NODE {
        return Err(format!(
            "{} intents (at most {MAX_INTENTS_PER_NODE})",
            state.intents.len()
        ));
    }
    for i in &state.intents {
        if i.node != node {
            return Err(format!(
                "intent {} is for node {:?}, not {node:?}",
                i.id, i.node
            ));
        }
        if !i.is_open() {
            return Err(format!(
                "intent {} is closed (only open ones are kept)",
                i.id
            ));
        }
        if i.for_workloads.len() > MAX_WORKLOADS_PER_INTENT {
            return Err(format!(
                "intent {} serves {} workloads (at most {MAX_WORKLOADS_PER_INTENT})",
                i.id,
                i.for_workloads.len()
            ));
        }
    }
    if let Some(f) = &state.fence {
        if f.transitions < 0 || accord_api::validate_node_name(&f.holder).is_err() {
            return Err(format!("fence {f:?} names no replica's term"));
        }
    }
    if let Some(c) = &state.command {
        if c.node != node {
            return Err(format!("command for node {:?}, not {node:?}", c.node));
        }
    }
    if state.bookings.len() > MAX_BOOKINGS_PER_NODE {
        return Err(format!(
            "{} bookings (at most {MAX_BOOKINGS_PER_NODE})",
            state.bookings.len()
        ));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_term_or_another_holder_of_ours_is_newer() {
        let f = |h: &str, t| Fence {
            holder: h.into(),
            transitions: t,
        };
        assert!(newer(&f("b", 2), &f("a", 1)));
        assert!(newer(&f("b", 1), &f("a", 1)));
        assert!(!newer(&f("a", 1), &f("a", 1)));
        assert!(!newer(&f("b", 0), &f("a", 1)));
    }

    #[test]
    fn node_shared_round_trips_and_tolerates_missing_fields() {
        let s: NodeShared = serde_json::from_str("{}").unwrap();
        assert_eq!(s, NodeShared::default());
        let back: NodeShared = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(serde_json::from_str::<NodeShared>(r#"{"intents": 3}"#).is_err());
    }

    #[test]
    fn a_spec_is_checked_against_its_node() {
        let intent = |node: &str, state: serde_json::Value| {
            serde_json::json!({"id": 1, "node": node, "action": {"kind": "power_on"},
                "created": 1, "for_workloads": [], "state": state})
        };
        let sent = serde_json::json!({"state": "sent", "at": 5});
        let ok = serde_json::json!({"intents": [intent("n1", sent.clone())]});
        let parsed = decode_spec("n1", &ok);
        assert!(parsed.is_ok(), "{parsed:?}");
        let other = serde_json::json!({"intents": [intent("n2", sent.clone())]});
        let e = decode_spec("n1", &other).unwrap_err();
        assert!(e.contains("for node \"n2\""), "{e}");
        let many: Vec<_> = (0..65).map(|_| intent("n1", sent.clone())).collect();
        let e = decode_spec("n1", &serde_json::json!({ "intents": many })).unwrap_err();
        assert!(e.contains("65 intents"), "{e}");
        let done = serde_json::json!({"state": "done", "at": 9});
        let closed = serde_json::json!({"intents": [intent("n1", done)]});
        assert!(decode_spec("n1", &closed).unwrap_err().contains("closed"));
        let fence = serde_json::json!({"fence": {"holder": "", "transitions": -1}});
        assert!(decode_spec("n1", &fence).is_err());
    }
}
