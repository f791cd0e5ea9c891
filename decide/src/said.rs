//! What the decider has said once (events and log lines not to repeat),
//! kept only while it still holds: each round marks the keys whose
//! condition holds (said now, or said before and still true), and the
//! rest are dropped at the round's end (a workload gone or placeable, a
//! drift gone, an action no longer planned), so the set is bounded by what
//! holds now, not by everything that ever happened. What changed goes to
//! the store (`Decision::said`), which seeds it after a restart: what was
//! said and still holds is not said again.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// One thing said: what kind of thing, about which object (a workload
/// `ns/name`, a node), and what exactly (the reason, the drift). accordd's
/// store keeps them (tree `said`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SaidKey {
    pub kind: String,
    pub object: String,
    pub what: String,
}

impl SaidKey {
    pub fn new(kind: &str, object: &str, what: impl Into<String>) -> SaidKey {
        SaidKey {
            kind: kind.to_owned(),
            object: object.to_owned(),
            what: what.into(),
        }
    }
}

/// Kinds whose condition is not looked at every round (a node reporting
/// that the fleet does not declare: seen only when its report changes):
/// kept, bounded by the nodes the store knows.
const STICKY: &[&str] = &[UNKNOWN_NODE];

pub(super) const CANNOT_PLACE: &str = "cannot_place";
pub(super) const OBSERVE: &str = "observe";
pub(super) const REPAIR_SKIPPED: &str = "repair_skipped";
pub(super) const POWER_OFF_KEPT: &str = "power_off_kept";
pub(super) const UNKNOWN_NODE: &str = "unknown_node";
pub(super) const SCHEDULER_DRIFT: &str = "scheduler_drift";
pub(super) const NOT_PLANNED: &str = "not_planned";
pub(super) const DRIVER_PARTITIONS: &str = "driver_partitions";

/// What was said that still holds.
#[derive(Debug, Default)]
pub(super) struct Said {
    keys: BTreeSet<SaidKey>,
    /// Keys whose condition held this round.
    held: BTreeSet<SaidKey>,
    /// Since the store was last given the changes.
    added: BTreeSet<SaidKey>,
    removed: BTreeSet<SaidKey>,
    /// Observe mode: the Kubernetes writes it did not make.
    pub(super) would_write: Vec<accord_api::control::WouldWrite>,
}

/// What the store is to keep and forget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaidChanges {
    pub added: Vec<SaidKey>,
    pub removed: Vec<SaidKey>,
}

impl Said {
    /// The keys kept before a restart.
    pub(super) fn seed(&mut self, keys: BTreeSet<SaidKey>) {
        self.keys = keys;
        self.added.clear();
        self.removed.clear();
    }

    /// Marks `key` as holding; true the first time (it is to be said).
    pub(super) fn once(&mut self, key: SaidKey) -> bool {
        self.held.insert(key.clone());
        let first = self.keys.insert(key.clone());
        if first && !self.removed.remove(&key) {
            self.added.insert(key);
        }
        first
    }

    /// Marks `key` as still holding, without saying it.
    pub(super) fn hold(&mut self, key: SaidKey) {
        if self.keys.contains(&key) {
            self.held.insert(key);
        }
    }

    /// Ends a round: drops what did not hold in it; returns what changed
    /// since the last call.
    pub(super) fn end_round(&mut self) -> SaidChanges {
        let gone: Vec<SaidKey> = self
            .keys
            .iter()
            .filter(|k| !self.held.contains(*k) && !STICKY.contains(&k.kind.as_str()))
            .cloned()
            .collect();
        for k in gone {
            self.keys.remove(&k);
            if !self.added.remove(&k) {
                self.removed.insert(k);
            }
        }
        self.held.clear();
        SaidChanges {
            added: std::mem::take(&mut self.added).into_iter().collect(),
            removed: std::mem::take(&mut self.removed).into_iter().collect(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// How many unmade observe-mode writes the status keeps.
const WOULD_WRITE_KEPT: usize = 100;

impl super::Decider {
    /// Observe mode: keeps what would have been written (the last
    /// [`WOULD_WRITE_KEPT`]) for the status.
    pub(super) fn would_write(
        &mut self,
        events: Vec<super::Event>,
        conditions: Vec<super::ConditionWrite>,
        buffers: Vec<super::buffers::BufferStatusWrite>,
    ) {
        for e in events {
            self.said.would_write.push(accord_api::control::WouldWrite {
                regarding: e.regarding,
                what: format!(
                    "{} event {}: {}",
                    if e.warning { "Warning" } else { "Normal" },
                    e.reason,
                    e.note
                ),
            });
        }
        for c in conditions {
            self.said.would_write.push(accord_api::control::WouldWrite {
                regarding: c.request,
                what: format!(
                    "condition {}={}: {}: {}",
                    c.condition.type_,
                    if c.condition.status { "True" } else { "False" },
                    c.condition.reason,
                    c.condition.message
                ),
            });
        }
        for b in buffers {
            let conditions: Vec<String> = b
                .status
                .conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={} {}",
                        c.type_,
                        if c.status { "True" } else { "False" },
                        c.reason
                    )
                })
                .collect();
            self.said.would_write.push(accord_api::control::WouldWrite {
                regarding: b.buffer,
                what: format!(
                    "status replicas {:?}, {}",
                    b.status.replicas,
                    conditions.join(", ")
                ),
            });
        }
        let excess = self.said.would_write.len().saturating_sub(WOULD_WRITE_KEPT);
        self.said.would_write.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(object: &str, what: &str) -> SaidKey {
        SaidKey::new(CANNOT_PLACE, object, what)
    }

    #[test]
    fn what_no_longer_holds_is_dropped_and_said_again_if_it_returns() {
        let mut s = Said::default();
        assert!(s.once(key("ml/a", "r1")));
        assert!(!s.once(key("ml/a", "r1")));
        let c = s.end_round();
        assert_eq!(c.added, [key("ml/a", "r1")]);
        assert!(!s.once(key("ml/a", "r1")));
        assert_eq!(s.end_round(), SaidChanges::default());
        // A round without it: dropped, the store told.
        let c = s.end_round();
        assert_eq!(c.removed, [key("ml/a", "r1")]);
        assert_eq!(s.len(), 0);
        assert!(s.once(key("ml/a", "r1")));
        // Sticky kinds stay.
        s.once(SaidKey::new(UNKNOWN_NODE, "x", ""));
        s.end_round();
        s.end_round();
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn seeded_keys_are_not_said_again_while_they_hold() {
        let mut s = Said::default();
        s.seed([key("ml/a", "r1"), key("ml/b", "r2")].into());
        assert!(!s.once(key("ml/a", "r1")));
        let c = s.end_round();
        assert_eq!(c.added, Vec::<SaidKey>::new());
        assert_eq!(c.removed, [key("ml/b", "r2")]);
    }
}
