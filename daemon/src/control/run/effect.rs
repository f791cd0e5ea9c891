//! *Effect*: a round's decision carried out: power actions started in the
//! background, intents retried, agent commands and Kubernetes writes, the
//! journal pruned.

use super::*;

impl Controller {
    /// Power first, then the status, then Kubernetes, then metrics. The
    /// decision is taken apart whole (no `..`): a new effect does not
    /// compile until it is carried out here and in the simulator
    /// (`sim/src/engine/world.rs`).
    pub(super) async fn effect(
        &mut self,
        d: Decision,
        tx: &mpsc::Sender<Wake>,
        transitional_tx: &watch::Sender<BTreeSet<String>>,
    ) {
        let Decision {
            power,
            events,
            conditions,
            buffer_status,
            status,
            metrics,
            transitional,
            publish,
            views_changed,
            commands,
            lives_changed,
            bookings,
            bios,
            said,
            admin_replies,
            requested,
            dark,
            evictions,
        } = d;
        let _ = transitional_tx.send(transitional);
        let round_at = status.at;
        for (call, reply) in self.admin_calls.drain(..).zip(admin_replies) {
            let _ = call.reply.send(reply);
        }
        if let (Some(ex), false) = (self.executor.clone(), power.is_empty()) {
            let tx = tx.clone();
            let actions = power.clone();
            self.in_flight.spawn(async move {
                match ex.apply_requested(&actions, &requested, round_at).await {
                    Ok(done) => {
                        let _ = tx.send(Wake::Executed(done)).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %accord::config_file::error_chain(&e), "intent journal write failed; nothing sent");
                    }
                }
            });
        }
        self.retry_intents(&power, round_at, tx);
        self.bios_effect(&bios, tx);
        // Reap what finished (their results came as wake-ups).
        while let Some(done) = self.in_flight.try_join_next() {
            log_join(done);
        }
        let shared = self.shared.clone();
        *shared.control.write().expect("lock") = Some(status);
        if let Err(e) = shared.store.put_lives(&lives_changed) {
            warn!(error = %accord::config_file::error_chain(&e), "cannot keep the nodes' lifecycles");
        }
        if let Some(b) = &bookings {
            if let Err(e) = shared.store.put_bookings(b) {
                warn!(error = %accord::config_file::error_chain(&e), "cannot keep the bookings");
            }
        }
        if let Err(e) = shared.store.put_said(&said.added, &said.removed) {
            warn!(error = %accord::config_file::error_chain(&e), "cannot keep what was said once; after a restart it may be said again");
        }
        for (node, view) in &views_changed {
            if let Err(e) = shared.store.put_scheduler_view(node, view) {
                warn!(node = %node, error = %accord::config_file::error_chain(&e), "cannot keep the node's scheduler view");
            }
        }
        // Before any delete is sent: what a deleted Node had is durable.
        let kept_ok = match shared.store.put_kept_nodes(&dark.kept) {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot keep what dark machines' Nodes have; none is deleted this round");
                false
            }
        };
        let labels = self.commands(&commands);
        let mig_configs = (!commands.mig_configs.is_empty())
            .then(|| (self.mig_parted_configmap.clone(), commands.mig_configs));
        self.writer
            .send(Writes {
                events,
                conditions,
                buffers: buffer_status,
                nodes: publish,
                labels,
                mig_configs,
                restores: dark.restores,
                deletes: if kept_ok { dark.deletes } else { Vec::new() },
                pod_deletes: commands.delete_pods,
                mig_manager_failed: commands.mig_manager_failed,
                evictions,
            })
            .await;
        shared.metrics.record_round(&metrics);
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
    pub(super) fn retry_intents(
        &mut self,
        power: &[accord::plan::Action],
        now: u64,
        tx: &mpsc::Sender<Wake>,
    ) {
        let Some(ex) = self.executor.clone() else {
            return;
        };
        let acted: BTreeSet<&str> = power.iter().map(|a| a.node()).collect();
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
