//! The intent journal: every BMC action is written here, and flushed,
//! before the BMC is called, and marked done after it is verified. On
//! start (in the background, their nodes held as in flight) and then in
//! any round whose BMC reading allows it, open intents are reconciled with
//! the real power state, so an intent is neither sent twice nor forgotten
//! across a crash. The control loop's executor writes it; closed intents
//! are pruned after a while (`prune_closed`).

use crate::store_error::{io, StoreError};

// The journal's records are wire types too: `GET /v1/status` shows the
// open ones.
pub use accord_api::control::{Intent, IntentAction, IntentState};

/// What to do with an open intent found at start, given the BMC's power
/// state now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The machine is where the intent wanted it: mark done.
    Reached,
    /// Sent before the crash, not reached yet: only verify (the client
    /// sends once more only if nothing changes for `resend_after`).
    Verify,
    /// Never sent: send now.
    Send,
    /// The BMC could not be read: try again next round.
    Unknown,
}

/// Pure: the decision for one open intent.
pub fn reconcile(intent: &Intent, bmc_on: Option<bool>) -> Resume {
    let Some(on) = bmc_on else {
        return Resume::Unknown;
    };
    let wanted_on = matches!(intent.action, IntentAction::PowerOn);
    match (&intent.state, on == wanted_on) {
        (_, true) => Resume::Reached,
        (IntentState::Sent { .. }, false) => Resume::Verify,
        (IntentState::Planned, false) => Resume::Send,
        // Closed intents are not reconciled.
        _ => Resume::Reached,
    }
}

/// One per store in a process: the open-intent index is built when it is
/// opened and kept by its own writes.
pub struct Journal {
    db: sled::Db,
    tree: sled::Tree,
    /// Ids of the open intents (derived from the tree at open), so the
    /// control loop's per-round look at what is in flight reads only those,
    /// not the whole history.
    open: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("intents", &self.tree.len())
            .finish()
    }
}

impl Journal {
    pub(crate) fn new(db: sled::Db, tree: sled::Tree) -> Result<Journal, StoreError> {
        let journal = Journal {
            db,
            tree,
            open: Default::default(),
        };
        let open = journal
            .all()?
            .into_iter()
            .filter(Intent::is_open)
            .map(|i| i.id)
            .collect();
        *journal.open.lock().expect("lock") = open;
        Ok(journal)
    }

    fn write(&self, intent: &Intent) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(intent).expect("plain data");
        self.tree
            .insert(intent.id.to_be_bytes(), bytes)
            .map_err(io("journal write"))?;
        // Durable before the BMC is touched (or the state is relied on).
        self.db.flush().map_err(io("journal flush"))?;
        let mut open = self.open.lock().expect("lock");
        if intent.is_open() {
            open.insert(intent.id);
        } else {
            open.remove(&intent.id);
        }
        Ok(())
    }

    /// Writes a new intent, durably, and returns it.
    pub fn record(
        &self,
        node: &str,
        action: IntentAction,
        for_workloads: Vec<String>,
        now: u64,
    ) -> Result<Intent, StoreError> {
        self.write_new(node, action, for_workloads, None, now)
    }

    /// Writes a new intent an admin asked for (`requested_by`: `admin`,
    /// `admin, forced`), durably, and returns it; a power-on carries the
    /// BIOS profile the plan stages with it, if any.
    pub fn record_requested(
        &self,
        node: &str,
        action: IntentAction,
        for_workloads: Vec<String>,
        bios_profile: Option<String>,
        requested_by: &str,
        now: u64,
    ) -> Result<Intent, StoreError> {
        let intent = self.new_intent(node, action, for_workloads, bios_profile, now)?;
        self.write_intent(Intent {
            requested_by: Some(requested_by.to_owned()),
            ..intent
        })
    }

    /// Writes a new power-on intent, with the BIOS profile staged before
    /// its Reset, durably, and returns it.
    pub fn record_power_on(
        &self,
        node: &str,
        for_workloads: Vec<String>,
        bios_profile: Option<String>,
        now: u64,
    ) -> Result<Intent, StoreError> {
        self.write_new(
            node,
            IntentAction::PowerOn,
            for_workloads,
            bios_profile,
            now,
        )
    }

    fn write_new(
        &self,
        node: &str,
        action: IntentAction,
        for_workloads: Vec<String>,
        bios_profile: Option<String>,
        now: u64,
    ) -> Result<Intent, StoreError> {
        let intent = self.new_intent(node, action, for_workloads, bios_profile, now)?;
        self.write_intent(intent)
    }

    /// Writes `intent`, durably, and returns it.
    fn write_intent(&self, intent: Intent) -> Result<Intent, StoreError> {
        self.write(&intent)?;
        Ok(intent)
    }

    /// A new planned intent under a fresh id (not written yet).
    fn new_intent(
        &self,
        node: &str,
        action: IntentAction,
        for_workloads: Vec<String>,
        bios_profile: Option<String>,
        now: u64,
    ) -> Result<Intent, StoreError> {
        let id = self.db.generate_id().map_err(io("journal id"))?;
        Ok(Intent {
            id,
            node: node.to_owned(),
            action,
            created: now,
            for_workloads,
            state: IntentState::Planned,
            bios_profile,
            fence: None,
            requested_by: None,
        })
    }

    /// Takes another replica's open intent (from the shared state, at a
    /// takeover) into this journal under a new id, durably; returns it.
    pub fn import(&self, shared: &Intent) -> Result<Intent, StoreError> {
        let id = self.db.generate_id().map_err(io("journal id"))?;
        let intent = Intent {
            id,
            ..shared.clone()
        };
        self.write(&intent)?;
        Ok(intent)
    }

    /// The database it writes (a power-on's BIOS staging is kept in the
    /// store's BIOS tree with it: `store/bios.rs`).
    pub(crate) fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Marks an intent's state, durably.
    pub fn mark(&self, intent: &mut Intent, state: IntentState) -> Result<(), StoreError> {
        intent.state = state;
        self.write(intent)
    }

    /// Every intent, oldest first.
    pub fn all(&self) -> Result<Vec<Intent>, StoreError> {
        self.tree
            .iter()
            .map(|kv| {
                let (_, v) = kv.map_err(io("journal read"))?;
                serde_json::from_slice(&v).map_err(|source| StoreError::Corrupt {
                    node: "journal".to_owned(),
                    source,
                })
            })
            .collect()
    }

    /// Removes closed intents (done or failed) closed more than
    /// `older_than_s` before `now`, and the oldest closed ones beyond
    /// `keep_at_most`: the journal is history only for as long as an admin
    /// reads it, and a fleet powering nodes on and off all day must not
    /// grow its store for good. Open intents are never removed. Returns how
    /// many were removed.
    pub fn prune_closed(
        &self,
        now: u64,
        older_than_s: u64,
        keep_at_most: usize,
    ) -> Result<usize, StoreError> {
        let open = self.open.lock().expect("lock").clone();
        let mut closed: Vec<(u64, u64)> = Vec::new();
        for kv in self.tree.iter() {
            let (k, v) = kv.map_err(io("journal read"))?;
            let Ok(id) = <[u8; 8]>::try_from(k.as_ref()).map(u64::from_be_bytes) else {
                continue;
            };
            if open.contains(&id) {
                continue;
            }
            // A record that cannot be read is left for `all` to report.
            let Ok(intent) = serde_json::from_slice::<Intent>(&v) else {
                continue;
            };
            let closed_at = match intent.state {
                IntentState::Done { at } | IntentState::Failed { at, .. } => at,
                IntentState::Planned | IntentState::Sent { .. } => continue,
            };
            closed.push((id, closed_at));
        }
        // Newest first: the first `keep_at_most` young enough are kept.
        closed.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        let mut removed = 0;
        for (rank, (id, closed_at)) in closed.into_iter().enumerate() {
            if rank >= keep_at_most || now.saturating_sub(closed_at) > older_than_s {
                self.tree
                    .remove(id.to_be_bytes())
                    .map_err(io("journal prune"))?;
                removed += 1;
            }
        }
        if removed > 0 {
            self.db.flush().map_err(io("journal flush"))?;
        }
        Ok(removed)
    }

    /// Intents not yet done or failed, oldest first.
    pub fn open_intents(&self) -> Result<Vec<Intent>, StoreError> {
        let ids: Vec<u64> = self.open.lock().expect("lock").iter().copied().collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(v) = self
                .tree
                .get(id.to_be_bytes())
                .map_err(io("journal read"))?
            else {
                continue;
            };
            let intent: Intent =
                serde_json::from_slice(&v).map_err(|source| StoreError::Corrupt {
                    node: "journal".to_owned(),
                    source,
                })?;
            out.push(intent);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_intents_are_pruned_by_age_and_count_open_ones_never() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let journal = Journal::new(db.clone(), db.open_tree("journal").unwrap()).unwrap();
        let mut ids = Vec::new();
        for (k, node) in ["a", "b", "c", "d"].iter().enumerate() {
            let mut i = journal
                .record(node, IntentAction::PowerOn, Vec::new(), 0)
                .unwrap();
            journal
                .mark(&mut i, IntentState::Done { at: 100 * k as u64 })
                .unwrap();
            ids.push(i.id);
        }
        let open = journal
            .record("e", IntentAction::PowerOff { force: false }, Vec::new(), 0)
            .unwrap();
        // Closed at 0, 100, 200, 300; now 1000, older than 950 s: the one
        // closed at 0 goes; at most 2 closed kept: the one at 100 too.
        assert_eq!(journal.prune_closed(1000, 950, 2).unwrap(), 2);
        let left: Vec<u64> = journal.all().unwrap().iter().map(|i| i.id).collect();
        assert_eq!(left, vec![ids[2], ids[3], open.id]);
        assert_eq!(journal.open_intents().unwrap(), vec![open.clone()]);
        // Keeping none removes every closed one, never an open one.
        assert_eq!(journal.prune_closed(1000, 10_000, 0).unwrap(), 2);
        assert_eq!(journal.all().unwrap(), vec![open]);
    }

    fn intent(action: IntentAction, state: IntentState) -> Intent {
        Intent {
            id: 1,
            node: "n1".into(),
            action,
            created: 0,
            for_workloads: vec![],
            state,
            bios_profile: None,
            fence: None,
            requested_by: None,
        }
    }

    #[test]
    fn records_written_before_bios_profiles_read_without_one() {
        let old = r#"{"id":7,"node":"n1","action":{"kind":"power_on"},"created":5,"for_workloads":["ml/a"],"state":{"state":"sent","at":6}}"#;
        let i: Intent = serde_json::from_str(old).unwrap();
        assert_eq!(i.bios_profile, None);
        assert_eq!(i.state, IntentState::Sent { at: 6 });
        let mut with = i.clone();
        with.bios_profile = Some("gpu-perf".into());
        let back: Intent = serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }

    #[test]
    fn a_sent_intent_is_verified_never_resent_at_once() {
        let sent = intent(IntentAction::PowerOn, IntentState::Sent { at: 5 });
        assert_eq!(reconcile(&sent, Some(false)), Resume::Verify);
        assert_eq!(reconcile(&sent, Some(true)), Resume::Reached);
        assert_eq!(reconcile(&sent, None), Resume::Unknown);
        let planned = intent(IntentAction::PowerOn, IntentState::Planned);
        assert_eq!(reconcile(&planned, Some(false)), Resume::Send);
        let off = intent(
            IntentAction::PowerOff { force: false },
            IntentState::Planned,
        );
        assert_eq!(reconcile(&off, Some(false)), Resume::Reached);
        assert_eq!(reconcile(&off, Some(true)), Resume::Send);
    }
}
