//! Executes a plan's power actions durably: each goes to the intent
//! journal (flushed) before the BMC is called, is marked sent, then done or
//! failed after verification; power-ons run wave by wave (a rack's
//! concurrent power-on limit). At start, [`Executor::resume`] reconciles
//! open intents with the BMCs before anything new runs: an intent sent
//! before a crash is only verified (no second Reset while it lands), one
//! never sent is sent, one already reached is closed. Power control is a
//! small trait with the Redfish client behind it (an in-memory twin for
//! tests is in accord-testkit). accordd's control loop drives it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use accord::plan::Action as PlanAction;

use crate::journal::{reconcile, Intent, IntentAction as Action, IntentState, Journal, Resume};
use crate::store::StoreError;

/// Why a power action or reading failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PowerError {
    #[error("node {node}: no BMC in the inventory")]
    NoBmc { node: String },
    #[error("node {node}: BMC")]
    Bmc {
        node: String,
        #[source]
        source: Arc<accord_redfish::RedfishError>,
    },
    /// A power control that is not Redfish (the simulated twin) refused.
    #[error("node {node}: {reason}")]
    Refused { node: String, reason: String },
}

/// What the executor needs from the machines' BMCs.
pub trait PowerControl: Send + Sync {
    /// Whether the node's machine is on (`Err`: unreadable).
    fn is_on(&self, node: &str) -> impl Future<Output = Result<bool, PowerError>> + Send;
    /// Reads, sends a Reset if needed, waits until reached.
    fn power_on(&self, node: &str) -> impl Future<Output = Result<(), PowerError>> + Send;
    fn power_off(
        &self,
        node: &str,
        force: bool,
    ) -> impl Future<Output = Result<(), PowerError>> + Send;
    /// Waits for a change already asked for (resends only if nothing moves).
    fn verify(&self, node: &str, on: bool) -> impl Future<Output = Result<(), PowerError>> + Send;
}

/// The Redfish implementation: one `Bmc` per node from the inventory.
#[derive(Debug)]
pub struct RedfishPower {
    bmcs: BTreeMap<String, accord_redfish::Bmc>,
}

impl RedfishPower {
    pub fn new(inventory: &accord_redfish::Inventory) -> anyhow::Result<RedfishPower> {
        let pool = accord_redfish::HttpPool::new(inventory.limits.max_in_flight_total);
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
        Ok(RedfishPower { bmcs })
    }

    fn bmc(&self, node: &str) -> Result<&accord_redfish::Bmc, PowerError> {
        self.bmcs.get(node).ok_or_else(|| PowerError::NoBmc {
            node: node.to_owned(),
        })
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
}

/// What executing did, per intent.
#[derive(Debug, Clone)]
pub struct Executed {
    pub intent: u64,
    pub node: String,
    pub result: Result<(), PowerError>,
}

pub struct Executor<P> {
    journal: Journal,
    power: Arc<P>,
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
        Executor { journal, power }
    }

    /// The journal it writes (the control loop reads what is in flight).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    async fn run(&self, mut intent: Intent, now: u64, send: bool) -> Result<Executed, StoreError> {
        let (on, force) = match intent.action {
            Action::PowerOn => (true, false),
            Action::PowerOff { force } => (false, force),
        };
        if send {
            // Durable before the BMC is touched.
            self.journal
                .mark(&mut intent, IntentState::Sent { at: now })?;
        }
        let result = match (send, on) {
            (true, true) => self.power.power_on(&intent.node).await,
            (true, false) => self.power.power_off(&intent.node, force).await,
            (false, on) => self.power.verify(&intent.node, on).await,
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
        Ok(Executed {
            intent: intent.id,
            node: intent.node,
            result,
        })
    }

    /// Reconciles every open intent with the BMCs (call at start, before
    /// planning). Unreadable BMCs leave their intents open.
    pub async fn resume(&self, now: u64) -> Result<Vec<Executed>, StoreError> {
        let mut out = Vec::new();
        for mut intent in self.journal.open_intents()? {
            let on = self.power.is_on(&intent.node).await.ok();
            match reconcile(&intent, on) {
                Resume::Reached => {
                    self.journal
                        .mark(&mut intent, IntentState::Done { at: now })?;
                    out.push(Executed {
                        intent: intent.id,
                        node: intent.node,
                        result: Ok(()),
                    });
                }
                Resume::Verify => out.push(self.run(intent, now, false).await?),
                Resume::Send => out.push(self.run(intent, now, true).await?),
                Resume::Unknown => {}
            }
        }
        Ok(out)
    }

    /// Executes a plan's power-ons (wave by wave, each wave's nodes
    /// together) and power-offs. Other actions are the loop's (BIOS before
    /// boot, MIG through the agent).
    pub async fn apply(
        &self,
        actions: &[PlanAction],
        now: u64,
    ) -> Result<Vec<Executed>, StoreError> {
        let mut waves: BTreeMap<u32, Vec<Intent>> = BTreeMap::new();
        let mut offs = Vec::new();
        for a in actions {
            match a {
                PlanAction::PowerOn {
                    node,
                    wave,
                    for_workloads,
                } => waves.entry(*wave).or_default().push(self.journal.record(
                    node,
                    Action::PowerOn,
                    for_workloads.clone(),
                    now,
                )?),
                PlanAction::PowerOff { node, .. } => offs.push(self.journal.record(
                    node,
                    Action::PowerOff { force: false },
                    Vec::new(),
                    now,
                )?),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for (_, wave) in waves {
            let runs = wave.into_iter().map(|i| self.run(i, now, true));
            for r in futures::future::join_all(runs).await {
                out.push(r?);
            }
        }
        let runs = offs.into_iter().map(|i| self.run(i, now, true));
        for r in futures::future::join_all(runs).await {
            out.push(r?);
        }
        Ok(out)
    }
}
