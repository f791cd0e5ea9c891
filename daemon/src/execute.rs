//! Executes a plan's power actions durably: each goes to the intent
//! journal (flushed) before the BMC is called, is marked sent, then done or
//! failed after verification; power-ons run wave by wave (a rack's
//! concurrent power-on limit). At start, [`Executor::resume`] reconciles
//! open intents with the BMCs (the loop runs it in the background, their
//! nodes held as in flight): an intent sent
//! before a crash is only verified (no second Reset while it lands), one
//! never sent is sent, one already reached is closed. One whose BMC could
//! not be read stays open and is reconciled the same way by
//! [`Executor::retry_open`] once its BMC is readable (the loop asks every
//! round); never an intent this process is carrying out now: every intent
//! is claimed (its node marked busy) from the moment it is recorded until
//! its run ends, and a node with a claimed intent is left alone; and one
//! run per node at a time. Power control is a small trait with the
//! Redfish client behind it (an in-memory twin for tests is in
//! accord-testkit). accordd's control loop drives it.
//!
//! A power-on whose node gets a BIOS profile (the plan's
//! `ApplyBiosProfile` before its `PowerOn`) stages the profile first,
//! within the same wave (staging is part of the power-on, so the rack's
//! concurrent power-on limit covers it), and records the profile on the
//! intent and in the store's BIOS tree (a `staged` record, which outlives
//! the intent: a restart before the read-back still verifies it). Once
//! the machine is up the loop asks for the attributes back
//! ([`Executor::read_bios`]); comparing them is *decide*'s.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use accord::plan::Action as PlanAction;
use serde_json::{Map, Value};
use tracing::{info, warn};

use crate::journal::{reconcile, Intent, IntentAction as Action, IntentState, Journal, Resume};
use crate::store::StoreError;
pub use accord_redfish::power::{unknown_bios_profile, BiosSeen, PowerControl, PowerError};

pub use accord_decide::{BiosCheck, BiosRead, Executed, Failure};

/// A power error as the decider takes it (typed, behind a shared `dyn`).
pub fn failure(e: PowerError) -> Failure {
    Arc::new(e)
}

/// The Redfish implementation: one `Bmc` per node from the inventory.
#[derive(Debug)]
pub struct RedfishPower {
    bmcs: BTreeMap<String, accord_redfish::Bmc>,
    /// The inventory's BIOS profiles: name → attributes.
    bios_profiles: BTreeMap<String, Map<String, Value>>,
}

impl RedfishPower {
    pub fn new(inventory: &accord_redfish::Inventory) -> anyhow::Result<RedfishPower> {
        Self::with_pool(
            inventory,
            accord_redfish::HttpPool::new(inventory.limits.max_in_flight_total),
        )
    }

    /// Every change to a BMC (not a read) waits for `leadership` to allow
    /// it at the moment it would be sent.
    pub fn gated(
        inventory: &accord_redfish::Inventory,
        leadership: crate::ha::Leadership,
    ) -> anyhow::Result<RedfishPower> {
        let gate = accord_redfish::WriteGate::new(move || {
            leadership.may_act().map(drop).map_err(|e| e.to_string())
        });
        Self::with_pool(
            inventory,
            accord_redfish::HttpPool::new(inventory.limits.max_in_flight_total)
                .with_write_gate(gate),
        )
    }

    fn with_pool(
        inventory: &accord_redfish::Inventory,
        pool: accord_redfish::HttpPool,
    ) -> anyhow::Result<RedfishPower> {
        let mut bmcs = BTreeMap::new();
        for (node, r) in inventory
            .resolve()
            .map_err(|p| anyhow::anyhow!("inventory: {}", p.join("; ")))?
        {
            bmcs.insert(
                node,
                accord_redfish::Bmc::new(inventory.target_of(&r)?, &pool)?,
            );
        }
        let bios_profiles = inventory
            .bios_profiles
            .iter()
            .map(|(name, p)| (name.clone(), p.attributes.clone()))
            .collect();
        Ok(RedfishPower {
            bmcs,
            bios_profiles,
        })
    }

    /// Deletes every BMC session this process made (at shutdown).
    pub async fn close(&self) {
        futures::future::join_all(self.bmcs.values().map(|b| b.close())).await;
    }

    /// Reads every credentials file again (SIGHUP): how many BMCs' changed,
    /// and the problems of files that could not be read.
    pub async fn reload_credentials(&self) -> (usize, Vec<String>) {
        let results =
            futures::future::join_all(self.bmcs.values().map(|b| b.reload_credentials())).await;
        let mut changed = 0;
        let mut problems = Vec::new();
        for r in results {
            match r {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(p) => problems.push(p),
            }
        }
        problems.sort();
        problems.dedup();
        (changed, problems)
    }

    fn bmc(&self, node: &str) -> Result<&accord_redfish::Bmc, PowerError> {
        self.bmcs.get(node).ok_or_else(|| PowerError::NoBmc {
            node: node.to_owned(),
        })
    }

    fn bios_profile(&self, node: &str, profile: &str) -> Result<&Map<String, Value>, PowerError> {
        self.bios_profiles
            .get(profile)
            .ok_or_else(|| unknown_bios_profile(node, profile, self.bios_profiles.keys()))
    }
}

fn bmc_error(node: &str) -> impl FnOnce(accord_redfish::RedfishError) -> PowerError + '_ {
    move |e| PowerError::Bmc {
        node: node.to_owned(),
        source: Arc::new(e),
    }
}

impl PowerControl for RedfishPower {
    async fn is_on(&self, node: &str) -> Result<bool, PowerError> {
        let state = self
            .bmc(node)?
            .power_state()
            .await
            .map_err(bmc_error(node))?;
        Ok(state == accord_redfish::PowerState::On)
    }
    async fn power_on(&self, node: &str) -> Result<(), PowerError> {
        self.bmc(node)?
            .power_on(false)
            .await
            .map(drop)
            .map_err(bmc_error(node))
    }
    async fn power_off(&self, node: &str, force: bool) -> Result<(), PowerError> {
        self.bmc(node)?
            .power_off(force, false)
            .await
            .map(drop)
            .map_err(bmc_error(node))
    }
    async fn verify(&self, node: &str, on: bool) -> Result<(), PowerError> {
        self.bmc(node)?
            .verify_power(on)
            .await
            .map(drop)
            .map_err(bmc_error(node))
    }
    async fn stage_bios(&self, node: &str, profile: &str) -> Result<(), PowerError> {
        let wanted = self.bios_profile(node, profile)?;
        let out = self
            .bmc(node)?
            .apply_bios(wanted, false)
            .await
            .map_err(bmc_error(node))?;
        if !out.unknown.is_empty() {
            // Not sent; the read-back after boot names them.
            warn!(node, profile, attributes = %out.unknown.join(","), "the BIOS has no such attributes; the profile cannot take");
        }
        info!(
            node,
            profile,
            staged = out.changes.len(),
            apply_time = out.apply_time.as_deref().unwrap_or("-"),
            "BIOS profile staged before the power-on"
        );
        Ok(())
    }
    async fn read_bios(&self, node: &str, profile: &str) -> Result<BiosSeen, PowerError> {
        let wanted = self.bios_profile(node, profile)?.clone();
        let bmc = self.bmc(node)?;
        let bios = bmc.bios().await.map_err(bmc_error(node))?;
        let (pending, _) = bmc.bios_pending(&bios).await.map_err(bmc_error(node))?;
        Ok(BiosSeen {
            wanted,
            current: bios.attributes,
            pending,
        })
    }
}

pub use accord_api::control::Requested;

pub struct Executor<P> {
    journal: Journal,
    power: Arc<P>,
    /// With replicas: each intent written to the API server under the
    /// leader's term before its action (refused once deposed).
    shared_state: Option<Arc<crate::ha::shared_state::SharedState>>,
    /// Intents being carried out in this process now (id → node): claimed
    /// when recorded (or picked for reconciling), released when their run
    /// ends. A node with one is not reconciled concurrently.
    in_flight: Mutex<BTreeMap<u64, String>>,
    /// One run per node at a time: a power-on planned for a node whose
    /// older intent is being reconciled waits for it (and then reads the
    /// BMC first: nothing is sent twice).
    node_runs: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// An intent claimed by a run: released (whatever the outcome, a task
/// aborted at shutdown too) when dropped.
struct Claim<'a> {
    in_flight: &'a Mutex<BTreeMap<u64, String>>,
    id: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        // A poisoned lock still holds the set: release from it.
        let mut set = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.remove(&self.id);
    }
}

impl<P> std::fmt::Debug for Executor<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("journal", &self.journal)
            .finish()
    }
}

impl<P: PowerControl + 'static> Executor<P> {
    pub fn new(journal: Journal, power: Arc<P>) -> Executor<P> {
        Executor {
            journal,
            power,
            shared_state: None,
            in_flight: Mutex::new(BTreeMap::new()),
            node_runs: Mutex::new(BTreeMap::new()),
        }
    }

    /// Writes each intent to `shared` before its action (HA).
    pub fn with_shared_state(
        mut self,
        shared: Arc<crate::ha::shared_state::SharedState>,
    ) -> Executor<P> {
        self.shared_state = Some(shared);
        self
    }

    /// The lock a run for `node` holds (one per fleet node, kept).
    fn node_run(&self, node: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut runs = self
            .node_runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        runs.entry(node.to_owned()).or_default().clone()
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, String>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether an intent for `node` is being carried out in this process
    /// now (recorded by `apply` and not finished, or being reconciled).
    pub fn is_busy(&self, node: &str) -> bool {
        self.in_flight().values().any(|n| n == node)
    }

    /// Records an intent and claims it, under the claim lock: an open
    /// intent is never seen unclaimed between its record and its run.
    fn record_claimed(
        &self,
        record: impl FnOnce(&Journal) -> Result<Intent, StoreError>,
    ) -> Result<(Intent, Claim<'_>), StoreError> {
        let mut set = self.in_flight();
        let intent = record(&self.journal)?;
        set.insert(intent.id, intent.node.clone());
        let claim = Claim {
            in_flight: &self.in_flight,
            id: intent.id,
        };
        Ok((intent, claim))
    }

    /// The journal it writes (the control loop reads what is in flight).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    async fn run(&self, intent: Intent, now: u64, send: bool) -> Result<Executed, StoreError> {
        let node_run = self.node_run(&intent.node);
        let _one_at_a_time = node_run.lock().await;
        self.run_held(intent, now, send).await
    }

    /// `run`, with the node's run lock held by the caller.
    async fn run_held(
        &self,
        mut intent: Intent,
        now: u64,
        send: bool,
    ) -> Result<Executed, StoreError> {
        let (on, force) = match intent.action {
            Action::PowerOn => (true, false),
            Action::PowerOff { force } => (false, force),
        };
        // With replicas: in the API server, as it will be when sent, under
        // this leader's term, before anything reaches the BMC. A deposed
        // leader's write is refused, and it sends nothing (its intent
        // stays open here; the next takeover closes it).
        if let Some(shared) = &self.shared_state {
            let mut as_sent = intent.clone();
            if send {
                as_sent.state = IntentState::Sent { at: now };
            }
            match shared.before_action(&as_sent).await {
                Ok(fence) => intent.fence = fence,
                Err(e) => {
                    warn!(node = %intent.node, intent = intent.id, error = %accord::config_file::error_chain(&e), "intent not written to the shared state; nothing sent");
                    return Ok(Executed {
                        intent: intent.id,
                        node: intent.node.clone(),
                        result: Err(Arc::new(PowerError::NotSent {
                            node: intent.node,
                            source: Arc::new(e),
                        })),
                    });
                }
            }
        }
        if send {
            // Durable before the BMC is touched.
            self.journal
                .mark(&mut intent, IntentState::Sent { at: now })?;
        }
        // The BIOS profile goes before the Reset (it applies during POST).
        // Resumed after a crash it is staged again: staging reads first
        // and sends only what is neither current nor pending.
        let staged = match (&intent.bios_profile, on) {
            (Some(profile), true) => self.power.stage_bios(&intent.node, profile).await,
            _ => Ok(()),
        };
        let result = match (staged, send, on) {
            (Err(e), _, _) => Err(e),
            (Ok(()), true, true) => self.power.power_on(&intent.node).await,
            (Ok(()), true, false) => self.power.power_off(&intent.node, force).await,
            (Ok(()), false, on) => self.power.verify(&intent.node, on).await,
        };
        let state = match &result {
            Ok(()) => IntentState::Done { at: now },
            // The journal keeps the whole chain as text: it is a record
            // for admins, never parsed back.
            Err(e) => IntentState::Failed {
                at: now,
                reason: accord::config_file::error_chain(e),
            },
        };
        self.journal.mark(&mut intent, state)?;
        if let Some(shared) = &self.shared_state {
            shared.after_action(&intent).await;
        }
        Ok(Executed {
            intent: intent.id,
            node: intent.node,
            result: result.map_err(failure),
        })
    }

    /// Reconciles every open intent with the BMCs (called at start; the
    /// loop plans meanwhile, holding their nodes as in flight). Unreadable BMCs leave their intents open (for
    /// [`Executor::retry_open`]).
    pub async fn resume(&self, now: u64) -> Result<Vec<Executed>, StoreError> {
        self.reconcile_open(|_| true, now).await
    }

    /// Reconciles the open intents whose node's BMC the loop has a reading
    /// of (`readable`) as [`Executor::resume`] does at start: reached →
    /// closed, sent → verified (never resent at once), planned → sent.
    /// Intents of a node this process is carrying out an intent for are
    /// left alone (they are not open for long: their run closes them).
    pub async fn retry_open(
        &self,
        readable: &BTreeSet<String>,
        now: u64,
    ) -> Result<Vec<Executed>, StoreError> {
        self.reconcile_open(|i| readable.contains(&i.node), now)
            .await
    }

    /// Claims the open intents `pick` chooses whose nodes have nothing in
    /// flight, then reconciles them: a node's oldest first, nodes together.
    async fn reconcile_open(
        &self,
        pick: impl Fn(&Intent) -> bool,
        now: u64,
    ) -> Result<Vec<Executed>, StoreError> {
        let mut by_node: BTreeMap<String, Vec<(Intent, Claim<'_>)>> = BTreeMap::new();
        {
            let mut set = self.in_flight();
            let busy: BTreeSet<String> = set.values().cloned().collect();
            for intent in self.journal.open_intents()? {
                if busy.contains(&intent.node) || !pick(&intent) {
                    continue;
                }
                set.insert(intent.id, intent.node.clone());
                let claim = Claim {
                    in_flight: &self.in_flight,
                    id: intent.id,
                };
                by_node
                    .entry(intent.node.clone())
                    .or_default()
                    .push((intent, claim));
            }
        }
        let nodes = by_node.into_values().map(|intents| async move {
            let mut out = Vec::new();
            for (intent, _claim) in intents {
                if let Some(done) = self.reconcile_one(intent, now).await? {
                    out.push(done);
                }
            }
            Ok::<_, StoreError>(out)
        });
        let mut out = Vec::new();
        for r in futures::future::join_all(nodes).await {
            out.extend(r?);
        }
        Ok(out)
    }

    /// One open intent against its BMC now (`None`: still unreadable).
    async fn reconcile_one(
        &self,
        mut intent: Intent,
        now: u64,
    ) -> Result<Option<Executed>, StoreError> {
        let node_run = self.node_run(&intent.node);
        let _one_at_a_time = node_run.lock().await;
        let on = self.power.is_on(&intent.node).await.ok();
        let what = reconcile(&intent, on);
        if what != Resume::Unknown {
            info!(node = %intent.node, intent = intent.id, action = ?what, "open intent reconciled with its BMC");
        }
        Ok(match what {
            Resume::Reached => {
                self.journal
                    .mark(&mut intent, IntentState::Done { at: now })?;
                if let Some(shared) = &self.shared_state {
                    shared.after_action(&intent).await;
                }
                Some(Executed {
                    intent: intent.id,
                    node: intent.node,
                    result: Ok(()),
                })
            }
            Resume::Verify => Some(self.run_held(intent, now, false).await?),
            Resume::Send => Some(self.run_held(intent, now, true).await?),
            Resume::Unknown => None,
        })
    }

    /// Executes a plan's power-ons (wave by wave, each wave's nodes
    /// together; a node's `ApplyBiosProfile` is staged with its power-on)
    /// and power-offs. Other actions are the loop's (MIG through the
    /// agent).
    pub async fn apply(
        &self,
        actions: &[PlanAction],
        now: u64,
    ) -> Result<Vec<Executed>, StoreError> {
        self.apply_requested(actions, &BTreeMap::new(), now).await
    }

    /// `apply`, with the nodes an admin asked for (`accordctl power`):
    /// their intents say who asked, and a forced power-off is a ForceOff.
    pub async fn apply_requested(
        &self,
        actions: &[PlanAction],
        requested: &BTreeMap<String, Requested>,
        now: u64,
    ) -> Result<Vec<Executed>, StoreError> {
        let bios: BTreeMap<&str, &str> = actions
            .iter()
            .filter_map(|a| match a {
                PlanAction::ApplyBiosProfile { node, profile } => {
                    Some((node.as_str(), profile.as_str()))
                }
                _ => None,
            })
            .collect();
        let mut waves: BTreeMap<u32, Vec<(Intent, Claim<'_>)>> = BTreeMap::new();
        let mut offs = Vec::new();
        for a in actions {
            match a {
                PlanAction::PowerOn {
                    node,
                    wave,
                    for_workloads,
                } => {
                    let profile = bios.get(node.as_str()).map(|p| (*p).to_owned());
                    let claimed = match requested.get(node) {
                        Some(r) => self.record_claimed(|j| {
                            j.record_requested(
                                node,
                                Action::PowerOn,
                                for_workloads.clone(),
                                profile.clone(),
                                r.by(),
                                now,
                            )
                        })?,
                        None => self.record_claimed(|j| {
                            j.record_power_on(node, for_workloads.clone(), profile.clone(), now)
                        })?,
                    };
                    // The staging outlives the intent (closed once the
                    // BMC shows On, minutes before POST is over): kept
                    // until the read-back, for a restart in between.
                    if let Some(profile) = &profile {
                        self.journal.record_bios_staged(node, profile, now)?;
                    }
                    waves.entry(*wave).or_default().push(claimed);
                }
                PlanAction::PowerOff { node, .. } => offs.push(match requested.get(node) {
                    Some(r) => self.record_claimed(|j| {
                        j.record_requested(
                            node,
                            Action::PowerOff { force: r.forced },
                            Vec::new(),
                            None,
                            r.by(),
                            now,
                        )
                    })?,
                    None => self.record_claimed(|j| {
                        j.record(node, Action::PowerOff { force: false }, Vec::new(), now)
                    })?,
                }),
                _ => {}
            }
        }
        for (intent, _) in waves.values().flatten().chain(offs.iter()) {
            if let Some(by) = &intent.requested_by {
                info!(node = %intent.node, intent = intent.id, action = ?intent.action, requested_by = %by, "admin power action journaled");
            }
        }
        let mut out = Vec::new();
        for (_, wave) in waves {
            let runs = wave.into_iter().map(|(i, claim)| async move {
                let _claim = claim;
                self.run(i, now, true).await
            });
            for r in futures::future::join_all(runs).await {
                out.push(r?);
            }
        }
        let runs = offs.into_iter().map(|(i, claim)| async move {
            let _claim = claim;
            self.run(i, now, true).await
        });
        for r in futures::future::join_all(runs).await {
            out.push(r?);
        }
        Ok(out)
    }
}

impl<P: PowerControl + 'static> Executor<P> {
    /// Reads back the BIOS of the nodes the loop names, together (reads
    /// only: nothing is journaled).
    pub async fn read_bios(&self, checks: &[BiosCheck]) -> Vec<BiosRead> {
        let reads = checks.iter().map(|c| async {
            BiosRead {
                node: c.node.clone(),
                profile: c.profile.clone(),
                result: self
                    .power
                    .read_bios(&c.node, &c.profile)
                    .await
                    .map_err(failure),
            }
        });
        futures::future::join_all(reads).await
    }
}
