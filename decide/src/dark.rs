//! Dark machines' Nodes (`policy.dark_nodes = "delete"`, the default;
//! docs/kubernetes.md "Dark machines"). A machine Accord powered off
//! would stay a NotReady Node, which stalls DaemonSet rolling updates and
//! turns the node lifecycle controller's evictions off in a mostly dark
//! zone; so, as cluster-autoscaler and Karpenter do when they remove
//! capacity, its Node is deleted, and what others set on it is put back
//! when its kubelet registers it again.
//!
//! In three steps, each a round or more apart:
//! 1. **Kept.** A node Off whose Node still shows Accord's
//!    `accord.dev/powering-off` taint (the power-off was Accord's: a machine
//!    that dies by itself keeps its Node, for the node lifecycle controller
//!    to evict its pods), no work pod on it, no open intent and the BMC
//!    reading Off: what the Node has that its kubelet will not register
//!    again ([`KeptNode`]) is kept, written to the store (and the shared
//!    state) by this round's effect.
//! 2. **Deleted.** A later round, with the kept copy unchanged, deletes the
//!    Node with the uid and resourceVersion seen as preconditions: a Node
//!    changed since (an admin's new label) is not deleted, but kept again.
//!    A restart or a takeover in between finds the kept copy and the Node
//!    and deletes it then: once.
//! 3. **Restored.** When a Node of another uid appears (the kubelet
//!    registered it), what it lacks of the kept copy is written to it, and
//!    until it shows all of it the node stays behind `accord.dev/starting`
//!    (so no pod binds where an admin's taint would have kept it off);
//!    then the copy is dropped.
//!
//! The planner sees a dark machine from the scheduler view kept when it
//! was last seen (`Decider::views`) whether or not its Node is still
//! there, and counts it as no topology domain (`Node::node_deleted`): the
//! plan is the same with the Node or without it.

use std::collections::BTreeMap;

use accord::fleet::DarkNodes;
use accord::lifecycle::{NodeLife, Stage};
use accord::truth::{KeptNode, NodeKeys, SchedulerView, POWERING_OFF_TAINT_KEY};
use accord_api::control::WouldWrite;
use tracing::info;

use super::{node_ref, Decider, Snapshot};

/// A Kubernetes Node object as seen this round, beyond its scheduler view.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeObject {
    pub uid: String,
    pub resource_version: String,
    /// Its annotations that are kept ([`accord::truth::keeps_annotation`]).
    pub annotations: BTreeMap<String, String>,
}

/// A Node to delete, if it is still the object seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDelete {
    pub node: String,
    pub uid: String,
    pub resource_version: String,
}

/// What *effect* does for dark machines' Nodes: the kept copies written
/// (to the store, and the shared state) before any delete is sent.
#[derive(Debug, Clone, Default)]
pub struct DarkEffects {
    /// Node → its kept copy, or `None`: dropped.
    pub kept: Vec<(String, Option<KeptNode>)>,
    pub deletes: Vec<NodeDelete>,
    /// Node → what to put back on it (`uid`: the new registration's).
    pub restores: Vec<(String, KeptNode)>,
}

/// The kept copies and what was sent, between rounds.
#[derive(Debug, Clone, Default)]
pub(super) struct DarkBook {
    /// Nodes tainted for a power-off not sent yet (`power_off`).
    pub(super) drains: super::power_off::Drains,
    kept: BTreeMap<String, KeptNode>,
    /// Node → (uid, resourceVersion) of the delete sent, and when.
    deleted: BTreeMap<String, (String, String, u64)>,
    /// Node → (the new uid, when) of the restore sent.
    restored: BTreeMap<String, (String, u64)>,
}

impl DarkBook {
    pub(super) fn seed(&mut self, kept: BTreeMap<String, KeptNode>) {
        self.kept = kept;
    }

    pub(super) fn has_kept(&self, node: &str) -> bool {
        self.kept.contains_key(node)
    }
}

fn shows_powering_off(view: &SchedulerView) -> bool {
    view.taints.iter().any(|t| t.key == POWERING_OFF_TAINT_KEY)
}

impl Decider {
    fn deletes_nodes(&self) -> bool {
        self.fleet.policy.dark_nodes == DarkNodes::Delete
    }

    /// Accord powered `node` off and its Node is (or will be) deleted:
    /// the planner counts it as no topology domain.
    pub(super) fn node_deleted(&self, node: &str) -> bool {
        self.life
            .nodes
            .get(node)
            .is_some_and(|l| self.node_deleted_in(node, l))
    }

    /// [`Decider::node_deleted`], with the node's lifecycle at hand.
    pub(super) fn node_deleted_in(&self, node: &str, life: &NodeLife) -> bool {
        self.deletes_nodes()
            && life.stage == Stage::Off
            && (self.dark.has_kept(node)
                || self.truth.views.get(node).is_some_and(shows_powering_off))
    }

    /// A node whose Node came back without all its kept keys yet: held
    /// behind the starting taint until it shows them.
    pub(super) fn restoring(&self, node: &str, snap: &Snapshot) -> bool {
        if self.dark.kept.is_empty() {
            return false;
        }
        let (Some(kept), Some(obj)) = (self.dark.kept.get(node), snap.node_objects.get(node))
        else {
            return false;
        };
        obj.uid != kept.uid
    }

    /// The status's word on a dark machine's Node, after the stage's.
    pub(super) fn dark_reason(&self, node: &str, snap: &Snapshot) -> Option<&'static str> {
        if self.restoring(node, snap) {
            Some(
                "Node registered again: putting back what it had (held behind accord.dev/starting)",
            )
        } else if self.dark.has_kept(node) && !snap.views.contains_key(node) {
            Some("Node deleted while dark (its labels, taints and annotations kept)")
        } else {
            None
        }
    }

    /// The view to plan `node` with: while a Node registered again still
    /// lacks what Accord puts back, the view as it will be once it has it
    /// (the node is held until then), so that the plan does not move the
    /// node's work elsewhere for the moment in between.
    pub(super) fn view_to_plan<'a>(
        &self,
        node: &str,
        view: &'a SchedulerView,
        snap: &Snapshot,
    ) -> std::borrow::Cow<'a, SchedulerView> {
        if !self.restoring(node, snap) {
            return std::borrow::Cow::Borrowed(view);
        }
        let kept = &self.dark.kept[node];
        let mut v = view.clone();
        for (k, val) in &kept.labels {
            v.labels.entry(k.clone()).or_insert_with(|| val.clone());
        }
        for t in &kept.taints {
            if !v
                .taints
                .iter()
                .any(|h| h.key == t.key && h.effect == t.effect)
            {
                v.taints.push(t.clone());
            }
        }
        if kept.unschedulable
            && !v
                .taints
                .iter()
                .any(|t| t.key == accord::truth::UNSCHEDULABLE_TAINT_KEY)
        {
            v.taints.push(accord::demand::Taint {
                key: accord::truth::UNSCHEDULABLE_TAINT_KEY.to_owned(),
                value: None,
                effect: accord::demand::TaintEffect::NoSchedule,
            });
        }
        std::borrow::Cow::Owned(v)
    }

    /// This round's kept copies, deletes and restores (see the module).
    pub(super) fn dark_round(&mut self, snap: &Snapshot) -> DarkEffects {
        let act = self.settings.mode == accord_api::control::Mode::Act;
        let mut out = DarkEffects::default();
        let names: Vec<String> = self.life.nodes.keys().cloned().collect();
        for node in names {
            let (Some(view), Some(obj)) = (snap.views.get(&node), snap.node_objects.get(&node))
            else {
                continue;
            };
            let keys = NodeKeys {
                uid: &obj.uid,
                labels: &view.labels,
                taints: &view.taints,
                annotations: &obj.annotations,
                unschedulable: snap.cordoned.contains(&node),
            };
            if let Some(kept) = self.dark.kept.get(&node).cloned() {
                if kept.uid != obj.uid {
                    self.restore(&node, &kept, &keys, snap.now, act, &mut out);
                    continue;
                }
            }
            let stage = self.life.nodes.get(&node).map(|l| l.stage);
            if stage != Some(Stage::Off) {
                // Running again with the same Node (powered on before the
                // delete): nothing to put back.
                if self.dark.kept.remove(&node).is_some() {
                    out.kept.push((node.clone(), None));
                }
                continue;
            }
            if !self.deletes_nodes()
                || !shows_powering_off(view)
                || self.busy_on(&node) > 0
                || snap.open_intents.iter().any(|i| i.node == node)
                || (act && snap.bmc.get(&node) != Some(&false))
            {
                continue;
            }
            if !act {
                self.would_delete(&node);
                continue;
            }
            let kept = KeptNode::of(&keys, &|k| {
                accord::fleet::owns_label(&self.fleet.topology, k)
            });
            if self.dark.kept.get(&node) != Some(&kept) {
                // Kept first; deleted once that is in the store.
                info!(node = %node, labels = kept.labels.len(), taints = kept.taints.len(), annotations = kept.annotations.len(), "keeping the Node's labels, taints and annotations before deleting it (the machine is off)");
                self.dark.kept.insert(node.clone(), kept.clone());
                out.kept.push((node.clone(), Some(kept)));
                continue;
            }
            let sent = self.dark.deleted.get(&node);
            if sent.is_some_and(|(uid, rv, at)| {
                *uid == obj.uid
                    && *rv == obj.resource_version
                    && snap.now.saturating_sub(*at) < super::truth::REPUBLISH_S
            }) {
                continue;
            }
            info!(node = %node, uid = %obj.uid, "deleting the Node of a machine Accord powered off (policy.dark_nodes = \"delete\"); its kubelet registers it again when it is powered on");
            self.dark.deleted.insert(
                node.clone(),
                (obj.uid.clone(), obj.resource_version.clone(), snap.now),
            );
            out.deletes.push(NodeDelete {
                node: node.clone(),
                uid: obj.uid.clone(),
                resource_version: obj.resource_version.clone(),
            });
        }
        out
    }

    /// The Node registered again: what it lacks of `kept` is written; once
    /// it shows all of it the copy is dropped.
    fn restore(
        &mut self,
        node: &str,
        kept: &KeptNode,
        keys: &NodeKeys<'_>,
        now: u64,
        act: bool,
        out: &mut DarkEffects,
    ) {
        let missing = kept.missing_on(keys);
        if missing.is_empty() {
            info!(node = %node, "the Node registered again shows what it had before Accord deleted it");
            self.dark.kept.remove(node);
            self.dark.restored.remove(node);
            self.dark.deleted.remove(node);
            out.kept.push((node.to_owned(), None));
            return;
        }
        if !act {
            return;
        }
        if self.dark.restored.get(node).is_some_and(|(uid, at)| {
            *uid == missing.uid && now.saturating_sub(*at) < super::truth::REPUBLISH_S
        }) {
            return;
        }
        info!(node = %node, labels = missing.labels.len(), taints = missing.taints.len(), annotations = missing.annotations.len(), cordon = missing.unschedulable, "putting back on the Node registered again what it had before Accord deleted it");
        self.dark
            .restored
            .insert(node.to_owned(), (missing.uid.clone(), now));
        out.restores.push((node.to_owned(), missing));
    }

    /// Observe mode: the delete is said in the status, not made.
    fn would_delete(&mut self, node: &str) {
        let what =
            "delete the Node: Accord powered the machine off (policy.dark_nodes = \"delete\")";
        if self
            .said
            .would_write
            .iter()
            .any(|w| w.regarding.name == node && w.what == what)
        {
            return;
        }
        self.said.would_write.push(WouldWrite {
            regarding: node_ref(node),
            what: what.to_owned(),
        });
    }
}
