//! Safe power-off. A planned power-off that passes every check is not
//! sent at once: the node is first tainted `accord.dev/powering-off:
//! NoSchedule` (published with Accord's other keys), and the power-off
//! goes only once the Node shows the taint, `settle_s` have passed since
//! (a pod the scheduler bound just before it saw the taint has had time
//! to show in the pod watch) and the node is still idle with no work pod.
//! Whatever makes the plan stop powering it off in between (a work pod
//! that slipped in, a pending workload the plan now places there, a
//! booking, an admin's cordon or annotation) cancels it: the taint is
//! lifted and an event says why.
//!
//! The taint stays while the node powers off and while it is off (a Node
//! that outlives its machine shows it), and is lifted with the next
//! power-on. Nothing here is journaled: a restart or a takeover between
//! the taint and the power-off begins the wait afresh if the node is still
//! idle (the taint seen again), and lifts the taint otherwise; the
//! power-off itself is journaled as every power action.
//!
//! A node with no Kubernetes Node (never registered) is powered off
//! directly: nothing can be scheduled to it. Repair power cycles
//! (`repairs`) are of Unhealthy nodes, which are NotReady (tainted so by
//! Kubernetes) or have a silent agent; they are not tainted first.

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{Taint, TaintEffect};
use accord::lifecycle::Stage;
use accord::plan::Action;
use accord::truth::{SchedulerView, POWERING_OFF_TAINT_KEY};
use tracing::info;

use super::{node_ref, Decider, Event, Snapshot};

/// How long the taint stands, once seen, before the power-off is sent
/// (`[control] power_off_settle_s`).
pub const DEFAULT_SETTLE_S: u64 = 5;

/// Nodes tainted for a power-off not sent yet.
#[derive(Debug, Clone)]
pub(super) struct Drains {
    nodes: BTreeMap<String, Drain>,
    settle_s: u64,
}

impl Default for Drains {
    fn default() -> Self {
        Drains {
            nodes: BTreeMap::new(),
            settle_s: DEFAULT_SETTLE_S,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Drain {
    /// When the node was first tainted (Unix seconds).
    since: u64,
    /// The first round the Node showed the taint.
    seen: Option<u64>,
}

impl Drains {
    pub(super) fn set_settle_s(&mut self, s: u64) {
        self.settle_s = s;
    }

    pub(super) fn contains(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    pub(super) fn settle_s(&self) -> u64 {
        self.settle_s
    }

    /// Drops `node`'s drain without a word (a forced power-off replaces it).
    pub(super) fn forget(&mut self, node: &str) {
        self.nodes.remove(node);
    }
}

/// The taint itself.
pub(super) fn powering_off_taint() -> Taint {
    Taint {
        key: POWERING_OFF_TAINT_KEY.to_owned(),
        value: None,
        effect: TaintEffect::NoSchedule,
    }
}

fn shows_taint(view: &SchedulerView) -> bool {
    view.taints
        .iter()
        .any(|t| t.key == POWERING_OFF_TAINT_KEY && t.effect == TaintEffect::NoSchedule)
}

impl Decider {
    /// Of this round's power-offs that passed every check (`offs`), those
    /// to send now; the others wait for their taint (see the module).
    /// `skipped` says, per node, why the plan's power-off was not taken
    /// this round: a drain of such a node is cancelled with that reason.
    pub(super) fn drain(
        &mut self,
        offs: Vec<Action>,
        skipped: &BTreeMap<String, String>,
        snap: &Snapshot,
        events: &mut Vec<Event>,
    ) -> Vec<Action> {
        let wanted: BTreeSet<String> = offs.iter().map(|a| a.node().to_owned()).collect();
        let cancelled: Vec<String> = self
            .dark
            .drains
            .nodes
            .keys()
            .filter(|n| !wanted.contains(*n))
            .cloned()
            .collect();
        for node in cancelled {
            self.dark.drains.nodes.remove(&node);
            let pods = self.busy_on(&node);
            let stage = self.life.nodes.get(&node).map(|l| l.stage);
            let why = if pods > 0 {
                format!("{pods} work pod(s) bound to it")
            } else if let Some(why) = skipped.get(&node) {
                why.clone()
            } else if stage != Some(Stage::Idle) {
                format!(
                    "it is {} now",
                    stage.map_or_else(
                        || "gone from the fleet".to_owned(),
                        accord_api::control::stage_label
                    )
                )
            } else {
                "the plan keeps it on for pending work".to_owned()
            };
            info!(node = %node, why = %why, "power-off cancelled; the powering-off taint is lifted");
            events.push(Event {
                regarding: node_ref(&node),
                reason: "PowerOffCancelled",
                action: "PowerOff",
                note: format!(
                    "power-off of node {node} cancelled: {why}; taint {POWERING_OFF_TAINT_KEY} lifted"
                ),
                warning: false,
            });
        }
        let now = snap.now;
        let settle_s = self.dark.drains.settle_s;
        let mut send = Vec::new();
        for a in offs {
            let node = a.node().to_owned();
            let Some(view) = snap.views.get(&node) else {
                // Not a registered Node: nothing can be bound to it.
                self.dark.drains.nodes.remove(&node);
                send.push(a);
                continue;
            };
            let d = self.dark.drains.nodes.entry(node.clone()).or_insert_with(|| {
                info!(node = %node, settle_s, "tainting the node {POWERING_OFF_TAINT_KEY} before its power-off");
                Drain {
                    since: now,
                    seen: None,
                }
            });
            if d.seen.is_none() && shows_taint(view) {
                d.seen = Some(now);
            }
            if d.seen.is_some_and(|at| now >= at.saturating_add(settle_s)) {
                info!(node = %node, tainted_s = now.saturating_sub(d.since), "the Node shows the powering-off taint and no work pod came: powering off");
                self.dark.drains.nodes.remove(&node);
                send.push(a);
            }
        }
        send
    }

    /// The powering-off taint `node` should show: while a power-off waits
    /// for it or is under way, and while the node is off if the Node still
    /// has it (lifted by the next power-on).
    pub(super) fn powering_off_taint_of(&self, node: &str, view: &SchedulerView) -> Option<Taint> {
        let stage = self.life.nodes.get(node)?.stage;
        let keep = self.dark.drains.contains(node)
            || stage == Stage::PoweringOff
            || (stage == Stage::Off && shows_taint(view));
        keep.then(powering_off_taint)
    }

    /// The status's word on a node waiting for its power-off.
    pub(super) fn drain_reason(&self, node: &str) -> Option<String> {
        let d = self.dark.drains.nodes.get(node)?;
        Some(match d.seen {
            None => format!(
                "powering off: tainted {POWERING_OFF_TAINT_KEY}, waiting for the Node to show it"
            ),
            Some(at) => format!(
                "powering off: the Node shows {POWERING_OFF_TAINT_KEY}; powered off at {} unless a work pod comes",
                at.saturating_add(self.dark.drains.settle_s)
            ),
        })
    }
}
