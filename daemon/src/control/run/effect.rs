//! *Effect*: a round's decision carried out: power actions started in the
//! background, intents retried, agent commands and Kubernetes writes, the
//! journal pruned.

use super::*;

impl Controller {
    /// Power first, then the status, then Kubernetes, then metrics.
    pub(super) async fn effect(&mut self, mut d: Decision, tx: &mpsc::Sender<Wake>) {
        let round_at = d.status.at;
        for (call, reply) in self
            .admin_calls
            .drain(..)
            .zip(std::mem::take(&mut d.admin_replies))
        {
            let _ = call.reply.send(reply);
        }
        if let (Some(ex), false) = (self.executor.clone(), d.power.is_empty()) {
            let tx = tx.clone();
            let now = d.status.at;
            let actions = d.power.clone();
            let requested = d.requested.clone();
            self.in_flight.spawn(async move {
                match ex.apply_requested(&actions, &requested, now).await {
                    Ok(done) => {
                        let _ = tx.send(Wake::Executed(done)).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %accord::config_file::error_chain(&e), "intent journal write failed; nothing sent");
                    }
                }
            });
        }
        self.retry_intents(&d, tx);
        self.bios_effect(&d.bios, tx);
        // Reap what finished (their results came as wake-ups).
        while let Some(done) = self.in_flight.try_join_next() {
            log_join(done);
        }
        let shared = self.shared.clone();
        *shared.control.write().expect("lock") = Some(d.status);
        if let Err(e) = shared.store.put_lives(&d.lives_changed) {
            warn!(error = %accord::config_file::error_chain(&e), "cannot keep the nodes' lifecycles");
        }
        if let Some(b) = &d.bookings {
            if let Err(e) = shared.store.put_bookings(b) {
                warn!(error = %accord::config_file::error_chain(&e), "cannot keep the bookings");
            }
        }
        if let Err(e) = shared.store.put_said(&d.said.added, &d.said.removed) {
            warn!(error = %accord::config_file::error_chain(&e), "cannot keep what was said once; after a restart it may be said again");
        }
        for (node, view) in &d.views_changed {
            if let Err(e) = shared.store.put_scheduler_view(node, view) {
                warn!(node = %node, error = %accord::config_file::error_chain(&e), "cannot keep the node's scheduler view");
            }
        }
        // Before any delete is sent: what a deleted Node had is durable.
        let kept_ok = match shared.store.put_kept_nodes(&d.dark.kept) {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot keep what dark machines' Nodes have; none is deleted this round");
                false
            }
        };
        let labels = self.commands(&d.commands);
        let mig_configs = (!d.commands.mig_configs.is_empty()).then(|| {
            (
                self.mig_parted_configmap.clone(),
                d.commands.mig_configs.clone(),
            )
        });
        self.writer
            .send(Writes {
                events: d.events,
                conditions: d.conditions,
                buffers: d.buffer_status,
                nodes: d.publish,
                labels,
                mig_configs,
                restores: d.dark.restores,
                deletes: if kept_ok { d.dark.deletes } else { Vec::new() },
                pod_deletes: d.commands.delete_pods.clone(),
                mig_manager_failed: d.commands.mig_manager_failed.clone(),
            })
            .await;
        shared.metrics.record_round(&d.metrics);
        self.prune_journal(round_at);
    }

    /// Closed intents older than `JOURNAL_KEEP_S`, or beyond the newest
    /// `JOURNAL_KEEP_AT_MOST`, are removed, at most once an hour: the
    /// store does not grow with every power action for good.
    pub(super) fn prune_journal(&mut self, now: u64) {
        let Some(ex) = &self.executor else {
            return;
        };
        if self
            .journal_pruned_at
            .is_some_and(|at| now.saturating_sub(at) < JOURNAL_PRUNE_EVERY_S)
        {
            return;
        }
        self.journal_pruned_at = Some(now);
        match ex
            .journal()
            .prune_closed(now, JOURNAL_KEEP_S, JOURNAL_KEEP_AT_MOST)
        {
            Ok(0) => {}
            Ok(removed) => info!(removed, "closed intents pruned from the journal"),
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot prune the journal; tried again in an hour")
            }
        }
    }

    /// Open intents whose node's BMC the poller can read now (left open
    /// at start because it could not, or by a journal write that failed)
    /// are reconciled in the background as at start: reached → closed,
    /// sent → verified, planned → sent. Never one of a node with an intent
    /// in flight in this process (the executor's claims), nor of a node
    /// this round powers on or off (its own intent goes first).
    pub(super) fn retry_intents(&mut self, d: &Decision, tx: &mpsc::Sender<Wake>) {
        let Some(ex) = self.executor.clone() else {
            return;
        };
        let acted: BTreeSet<&str> = d.power.iter().map(|a| a.node()).collect();
        let readable: BTreeSet<String> = self
            .open_intents
            .iter()
            .filter(|i| {
                self.bmc.contains_key(&i.node)
                    && !acted.contains(i.node.as_str())
                    && !ex.is_busy(&i.node)
            })
            .map(|i| i.node.clone())
            .collect();
        if readable.is_empty() {
            return;
        }
        let tx = tx.clone();
        let now = d.status.at;
        self.in_flight.spawn(async move {
            match ex.retry_open(&readable, now).await {
                Ok(done) if done.is_empty() => {}
                Ok(done) => {
                    let _ = tx.send(Wake::Executed(done)).await;
                }
                Err(e) => {
                    warn!(error = %accord::config_file::error_chain(&e), "cannot reconcile open intents with the journal; tried again next round");
                }
            }
        });
    }

    /// Agent commands: journaled (flushed) before any agent can be handed
    /// them; closes and releases; the labels that name mig-parted
    /// configurations returned (the writer puts the configurations in
    /// mig-manager's ConfigMap first). Store writes are small and synchronous, so the
    /// next round's observe sees them.
    pub(super) fn commands(
        &self,
        c: &crate::control::decide::CommandEffects,
    ) -> Vec<(String, String, String)> {
        let store = &self.shared.store;
        let chain = |e: &dyn std::error::Error| accord::config_file::error_chain(e);
        for (node, generation, result) in &c.close {
            if let Err(e) = store.close_command(node, *generation, result.clone(), self.now()) {
                warn!(node = %node, command = generation, error = %chain(&e), "cannot close the agent command");
            }
        }
        for (node, generation) in &c.release {
            if let Err(e) = store.release_command(node, *generation) {
                warn!(node = %node, command = generation, error = %chain(&e), "cannot release the agent command");
            }
        }
        let mut unjournaled = std::collections::BTreeSet::new();
        for rec in &c.open {
            match store.open_command(rec.clone()) {
                Ok(r) => {
                    info!(node = %r.node, command = r.generation, via = ?r.via, "agent command journaled")
                }
                Err(e) => {
                    warn!(node = %rec.node, error = %chain(&e), "cannot journal the agent command; nothing is sent");
                    unjournaled.insert(rec.node.as_str());
                }
            }
        }
        // A label names a configuration for a journaled command only (the
        // writer sets none when the ConfigMap holding it was not written).
        c.labels
            .iter()
            .filter(|(node, _, _)| !unjournaled.contains(node.as_str()))
            .cloned()
            .collect()
    }
}
