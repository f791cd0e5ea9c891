//! The fleet as the lifecycles, reports and scheduler show it, kept
//! between rounds: a node is worked out again only when something it is
//! worked out from changed (its model, its view, its lifecycle, what
//! holds it), so a round costs what changed, not the whole fleet.

use std::collections::{BTreeMap, BTreeSet};

use accord::fleet::{Fleet, OnDrift, PowerState};
use accord::lifecycle::{NodeLife, Stage};
use accord::truth::{Drift, Publication};
use accord_api::control::Mode;

use super::{drift_text, Decider, Snapshot};

/// The fleet as last seen, and what each node of it was worked out from.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Taken out for the round's plan, given back after it (none before
    /// the first round).
    fleet: Option<Fleet>,
    /// By the node's place in the fleet (its nodes are sorted by name).
    keys: Vec<Option<SeenKey>>,
    /// Node → where its model differs from the scheduler's view.
    drift: BTreeMap<String, Vec<Drift>>,
    /// Nodes whose model or scheduler view changed since they were seen.
    dirty: BTreeSet<String>,
    /// `Fleet::publication` per node, as last worked out: it changes only
    /// with the node's model (a report clears its entry) and with the
    /// reservations active (all cleared when they change).
    publications: BTreeMap<String, Option<Publication>>,
    /// The non-lendable reservations active when `publications` was kept.
    reservations_active: Vec<String>,
}

impl Seen {
    /// The node's scheduler view changed: worked out again.
    pub(super) fn changed(&mut self, node: &str) {
        self.dirty.insert(node.to_owned());
    }

    /// A node's model changed: its publication and its place in the
    /// fleet as seen are worked out again.
    pub(super) fn model_changed(&mut self, node: &str) {
        self.publications.remove(node);
        self.changed(node);
    }

    /// Whether the non-lendable reservations active at `now` differ from
    /// the last round's (publications and the fleet as seen change then).
    fn reservations_changed(&mut self, fleet: &Fleet, now: u64) -> bool {
        let active = fleet
            .reservations
            .iter()
            .filter(|r| !r.lendable && r.active(now))
            .map(|r| r.name.as_str());
        if active
            .clone()
            .eq(self.reservations_active.iter().map(String::as_str))
        {
            return false;
        }
        self.reservations_active = active.map(str::to_owned).collect();
        self.publications.clear();
        true
    }

    /// `fleet.publication(node, now)`, worked out once per node and model
    /// (and reservations: `reservations_changed` is asked first).
    pub(super) fn publication(
        &mut self,
        fleet: &Fleet,
        node: &str,
        now: u64,
    ) -> Option<&Publication> {
        if !self.publications.contains_key(node) {
            self.publications
                .insert(node.to_owned(), fleet.publication(node, now));
        }
        self.publications.get(node).and_then(Option::as_ref)
    }

    /// Everything changed (reservations opened or closed).
    pub(super) fn all_changed(&mut self) {
        self.keys.clear();
    }

    /// The round's plan is done with the fleet as seen.
    pub(super) fn give_back(&mut self, fleet: Fleet) {
        self.fleet = Some(fleet);
    }
}

/// What a node's place in the fleet as seen comes from, beside its model
/// and view (which mark it changed): while the key is the same, and
/// neither an agent command nor a BIOS profile is under way on it, the
/// node as seen is the same.
#[derive(Debug, Clone, PartialEq)]
struct SeenKey {
    life: NodeLife,
    held_at: Option<u64>,
    expected_boot_s: Option<u64>,
    deleted: bool,
    bmc_read: bool,
    /// A command or a BIOS profile touched it when it was worked out.
    touched: bool,
}

impl Decider {
    /// The fleet as the lifecycles show it: booting nodes are committed
    /// (powering on), failed ones never used, idle ones carry
    /// `idle_since`; in act mode a node whose BMC cannot be read is not
    /// powered on (nor counted as dark capacity) until it can be. With it,
    /// where each node's model differs from the scheduler's view. Give
    /// the fleet back with `Seen::give_back` after the plan.
    pub(super) fn fleet_as_seen(
        &mut self,
        snap: &Snapshot,
    ) -> (Fleet, BTreeMap<String, Vec<Drift>>) {
        if self.truth.seen.reservations_changed(&self.fleet, snap.now) {
            self.truth.seen.all_changed();
        }
        let mut f = match self.truth.seen.fleet.take() {
            Some(f) => f,
            None => {
                self.truth.seen.keys.clear();
                self.fleet.clone()
            }
        };
        let dirty = std::mem::take(&mut self.truth.seen.dirty);
        let mut keys = std::mem::take(&mut self.truth.seen.keys);
        keys.resize(f.nodes.len(), None);
        // First which nodes changed, then those worked out again.
        let mut changed: Vec<(usize, SeenKey)> = Vec::new();
        // The lifecycles and the BMC readings are keyed by the fleet's
        // node names, and all are sorted by name: walked side by side,
        // not looked up.
        let mut lives = self.life.nodes.iter().peekable();
        let mut bmc = crate::in_order::in_order(&snap.bmc);
        for (i, (n, kept)) in f.nodes.iter().zip(keys.iter()).enumerate() {
            while lives
                .next_if(|(name, _)| name.as_str() < n.name.as_str())
                .is_some()
            {}
            let Some((_, life)) = lives.next_if(|(name, _)| **name == n.name) else {
                continue;
            };
            let expected_boot_s = self
                .life
                .boot_times
                .expected(n.profile.as_deref().unwrap_or(""), n.rack.as_deref());
            let touched = n.bios_profile.is_some()
                || self.commands.touches(&n.name)
                || self.bios_touches(&n.name);
            let held_at = self.buffers.held_at(&n.name);
            let deleted = self.node_deleted_in(&n.name, life);
            let bmc_read = bmc.contains(&n.name);
            // (Compared in place: the lifecycle is copied into a key only
            // for a node that changed.)
            let same = !touched
                && kept.as_ref().is_some_and(|k| {
                    k.life == *life
                        && k.held_at == held_at
                        && k.expected_boot_s == expected_boot_s
                        && k.deleted == deleted
                        && k.bmc_read == bmc_read
                        && !k.touched
                })
                && (dirty.is_empty() || !dirty.contains(&n.name))
                && !self.restoring(&n.name, snap);
            if !same {
                let key = SeenKey {
                    life: life.clone(),
                    held_at,
                    expected_boot_s,
                    deleted,
                    bmc_read,
                    touched,
                };
                changed.push((i, key));
            }
        }
        for (i, key) in changed {
            let n = &mut f.nodes[i];
            if let Some(declared) = self.fleet.node(&n.name) {
                n.clone_from(declared);
            }
            self.see_node(n, &key.life, snap);
            keys[i] = Some(key);
        }
        self.truth.seen.keys = keys;
        #[cfg(debug_assertions)]
        self.check_seen(&f, snap);
        let drift = self.truth.seen.drift.clone();
        (f, drift)
    }

    /// Debug builds (every test that runs a decider): the fleet as kept
    /// is the fleet worked out afresh, node by node, every round on small
    /// fleets and every 16th on large ones. A change that the keys miss
    /// fails here, naming the node.
    #[cfg(debug_assertions)]
    fn check_seen(&mut self, kept: &Fleet, snap: &Snapshot) {
        if kept.nodes.len() > 64 && self.clock.round % 16 != 1 {
            return;
        }
        let drift = self.truth.seen.drift.clone();
        for kept_node in &kept.nodes {
            let Some(life) = self.life.nodes.get(&kept_node.name).cloned() else {
                continue;
            };
            let Some(mut fresh) = self.fleet.node(&kept_node.name).cloned() else {
                continue;
            };
            self.see_node(&mut fresh, &life, snap);
            assert!(
                fresh == *kept_node,
                "round {}: node {} of the fleet as seen is stale:\nkept  {kept_node:?}\nfresh {fresh:?}",
                self.clock.round,
                kept_node.name
            );
        }
        assert_eq!(
            self.truth.seen.drift, drift,
            "round {}: the scheduler drift kept is stale",
            self.clock.round
        );
    }

    /// One node of the fleet as seen, from its model.
    fn see_node(&mut self, n: &mut accord::fleet::Node, life: &NodeLife, snap: &Snapshot) {
        let hold = self.fleet.policy.on_drift == OnDrift::Hold;
        // The scheduler's view (now, or last seen), then the keys
        // Accord publishes: what kube-scheduler will see.
        let mut agrees = false;
        self.truth.seen.drift.remove(&n.name);
        if let Some(view) = self.truth.views.get(&n.name) {
            let view = self.view_to_plan(&n.name, view, snap);
            let d = n.apply_scheduler_view(&view);
            agrees = d.is_empty();
            if !d.is_empty() {
                self.truth.seen.drift.insert(n.name.clone(), d);
            }
        }
        // A repartition in flight or just done: the node as it will
        // be (and is, once the scheduler shows it); refused GPUs held.
        self.commands.overlay(n, agrees);
        // In observe mode nothing is written: the Nodes stay as they are.
        if self.settings.mode == Mode::Act {
            if let Some(p) = self.truth.seen.publication(&self.fleet, &n.name, snap.now) {
                n.apply_publication(p, &self.fleet.topology);
            }
        }
        if hold && self.truth.declared_drift.contains_key(&n.name) {
            n.failed = Some(format!(
                "hardware drift ({}); held until an admin acts (policy.on_drift = \"hold\")",
                drift_text(&self.truth.declared_drift[&n.name])
            ));
        }
        let (power, failed) = life.planner_power();
        n.power = power;
        n.node_deleted = self.node_deleted(&n.name);
        if failed {
            n.failed = Some(life.reason.clone().unwrap_or_else(|| "failed".to_owned()));
        }
        // Held for a CapacityBuffer is not idle: the idle time counts
        // from the last round it was held.
        n.idle_since = (life.stage == Stage::Idle)
            .then(|| life.since.max(self.buffers.held_at(&n.name).unwrap_or(0)));
        n.expected_boot_s = self
            .life
            .boot_times
            .expected(n.profile.as_deref().unwrap_or(""), n.rack.as_deref());
        self.bios_plan_with(n);
        if self.settings.mode == Mode::Act
            && !snap.bmc.contains_key(&n.name)
            && n.power == PowerState::Off
            && n.failed.is_none()
        {
            n.failed = Some("BMC power state unreadable".into());
        }
    }
}
