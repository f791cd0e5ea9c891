//! The loop with replicas (`[ha]`): a follower runs no round (its
//! watches, BMC readings and hardware models stay warm); a replica that
//! takes the Lease takes over the shared state (fencing every node's
//! `AccordNode` with its term), makes it its store's, seeds a new decider
//! from it and reconciles the open intents with the BMCs, as a restart
//! does; a leader whose term is over stops at once (power actions in
//! flight aborted; every BMC change and Kubernetes write asks the gate
//! anyway).

use std::collections::{BTreeMap, BTreeSet};

use accord_api::control::IntentState;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{seeded_decider, Controller, Wake};
use crate::ha::shared_state::NodeShared;
use crate::ha::Fence;

impl Controller {
    /// Whether this round acts: a single replica always; a replica while
    /// its term is valid, after taking over at its start.
    pub(super) async fn lead(&mut self, tx: &mpsc::Sender<Wake>) -> bool {
        if !self.leadership.is_ha() {
            return true;
        }
        match self.leadership.may_act() {
            Ok(Some(fence)) if self.term.as_ref() == Some(&fence) => true,
            Ok(Some(fence)) => {
                if self.term.is_some() {
                    self.step_down("a new term began");
                }
                let started = tokio::time::Instant::now();
                match self.take_over(&fence, tx).await {
                    Ok(()) => {
                        info!(identity = %fence.holder, transitions = fence.transitions, took_ms = started.elapsed().as_millis() as u64, "took over: leading");
                        self.term = Some(fence);
                        self.shared.metrics.took_over();
                        true
                    }
                    Err(e) => {
                        warn!(error = %accord::config_file::error_chain(e.as_ref()), "cannot take over the shared state; not acting (tried again next round)");
                        self.shared.metrics.set_leading(false);
                        false
                    }
                }
            }
            Ok(None) => true,
            Err(why) => {
                if self.term.is_some() {
                    self.step_down(&why.to_string());
                }
                self.shared.metrics.set_leading(false);
                false
            }
        }
    }

    /// Stops acting at once: power actions in flight are aborted (their
    /// intents stay open; the next leader reconciles them), the
    /// write-behind stops.
    fn step_down(&mut self, why: &str) {
        warn!(
            why,
            in_flight = self.in_flight.len(),
            "stepping down: no longer leading"
        );
        self.in_flight.abort_all();
        if let Some(m) = self.mirroring.take() {
            m.abort();
        }
        self.term = None;
        self.shared.set_fenced_commands([], true);
        self.shared.metrics.stepped_down();
    }

    /// Takes the shared state over under `fence`, makes it the store's,
    /// and starts this term as a restart starts.
    async fn take_over(
        &mut self,
        fence: &Fence,
        tx: &mpsc::Sender<Wake>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(shared_state) = self.shared_state.clone() else {
            return Ok(());
        };
        let nodes: Vec<String> = self.fleet.nodes.iter().map(|n| n.name.clone()).collect();
        let store = &self.shared.store;
        // What this replica has, for objects not there yet (a fleet going
        // from one replica to several).
        let mut local = store.shared_parts(&nodes)?;
        let executor = self.executor.clone();
        let local_open = match &executor {
            Some(ex) => ex.journal().open_intents()?,
            None => Vec::new(),
        };
        for i in &local_open {
            if let Some(s) = local.get_mut(&i.node) {
                s.intents.push(i.clone());
            }
        }
        info!(identity = %fence.holder, transitions = fence.transitions, nodes = nodes.len(), "taking over the shared state");
        let taken = shared_state.take_over(&nodes, &local).await?;
        if let Some(ex) = &executor {
            self.adopt_intents(ex.journal(), &local_open, &taken, &shared_state)
                .await?;
        }
        store.adopt(&taken)?;
        self.shared.set_fenced_commands(
            taken
                .iter()
                .map(|(n, s)| (n, s.command.as_ref().map(|c| c.generation))),
            true,
        );
        self.decider = seeded_decider(self.fleet.clone(), &self.config, &self.shared);
        if let Some(o) = self.observer.as_mut() {
            // The new decider needs every hardware model.
            o.models_loaded = false;
        }
        self.executed.clear();
        self.bios_reads.clear();
        self.open_intents.clear();
        if let Some(ex) = executor {
            self.resume(&ex, tx);
        }
        Ok(())
    }

    /// The journal made the shared state's: this replica's open intents
    /// the shared state does not hold are closed (never sent: an intent
    /// reaches the shared state before its action); the shared state's
    /// others are taken in under new ids, and written back with them.
    async fn adopt_intents(
        &self,
        journal: &crate::journal::Journal,
        local_open: &[accord_api::control::Intent],
        taken: &BTreeMap<String, NodeShared>,
        shared_state: &crate::ha::shared_state::SharedState,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let now = (self.shared.now)();
        let same = |a: &accord_api::control::Intent, b: &accord_api::control::Intent| {
            a.id == b.id && a.node == b.node && a.created == b.created && a.action == b.action
        };
        let mut kept: BTreeSet<u64> = BTreeSet::new();
        for mine in local_open {
            let held = taken
                .get(&mine.node)
                .is_some_and(|s| s.intents.iter().any(|t| same(t, mine)));
            if held {
                kept.insert(mine.id);
            } else {
                let mut closed = mine.clone();
                journal.mark(
                    &mut closed,
                    IntentState::Failed {
                        at: now,
                        reason:
                            "closed at a takeover: the shared state does not hold it (never sent)"
                                .to_owned(),
                    },
                )?;
            }
        }
        for (node, s) in taken {
            if s.intents.is_empty() {
                continue;
            }
            let mut now_held = Vec::new();
            let mut changed = false;
            for t in &s.intents {
                if !t.is_open() {
                    changed = true;
                    continue;
                }
                match local_open
                    .iter()
                    .find(|m| kept.contains(&m.id) && same(t, m))
                {
                    Some(m) => {
                        let mut m = m.clone();
                        // The shared state's word on its state wins.
                        if m.state != t.state {
                            journal.mark(&mut m, t.state.clone())?;
                        }
                        now_held.push(m);
                    }
                    None => {
                        let imported = journal.import(t)?;
                        info!(node = %node, intent = imported.id, from = ?t.fence, state = ?t.state, "open intent taken over");
                        now_held.push(imported);
                        changed = true;
                    }
                }
            }
            if changed {
                shared_state
                    .update(node, |s| s.intents = now_held.clone())
                    .await?;
            }
        }
        Ok(())
    }

    /// The leader's write-behind: lifecycles, bookings, BIOS records and
    /// commands that changed go to the shared state in the background
    /// (one pass at a time; a pass still running skips this round's).
    pub(super) fn mirror(&mut self) {
        let (Some(shared_state), Some(_)) = (self.shared_state.clone(), self.term.as_ref()) else {
            return;
        };
        if self.mirroring.as_ref().is_some_and(|m| !m.is_finished()) {
            return;
        }
        let nodes: Vec<String> = self.fleet.nodes.iter().map(|n| n.name.clone()).collect();
        let parts = match self.shared.store.shared_parts(&nodes) {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot read the store for the shared state; tried again next round");
                return;
            }
        };
        let shared = self.shared.clone();
        self.mirroring = Some(tokio::spawn(async move {
            let in_sync = shared_state.mirror(&parts).await;
            shared.set_fenced_commands(
                in_sync
                    .iter()
                    .map(|n| (n, parts[n].command.as_ref().map(|c| c.generation))),
                false,
            );
        }));
    }

    pub(super) fn spawn_leadership_forwarder(
        &self,
        tx: mpsc::Sender<Wake>,
    ) -> tokio::task::JoinHandle<()> {
        let mut terms = self.leadership.clone();
        // A replica follows until it has taken over.
        if self.leadership.is_ha() {
            self.shared.metrics.set_leading(false);
        }
        tokio::spawn(async move {
            loop {
                terms.changed().await;
                if tx.send(Wake::Leadership).await.is_err() {
                    return;
                }
            }
        })
    }
}
