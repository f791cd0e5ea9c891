//! Pieces of the control loop: the modes, the batching window that turns
//! bursts of changes into one round, the fleet as the node lifecycles show
//! it, and one synchronous round (plan, then in `act` mode execute through
//! the journal) used with the simulated twin. The running loop is
//! `controller`.

use std::collections::BTreeMap;
use std::time::Duration;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::lifecycle::NodeLife;
use accord::plan::Plan;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::execute::{Executed, Executor, PowerControl};
use crate::store::StoreError;

/// `observe`: plan, explain, log, expose; act on nothing (where admins
/// start). `act`: execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Observe,
    Act,
}

/// Collects wake-ups (changes in demand, nodes, agents, BMCs) into rounds:
/// a round starts once `idle` passes without a new wake-up, or `max` after
/// the first, whichever is sooner.
#[derive(Debug, Clone, Copy)]
pub struct Batcher {
    pub idle: Duration,
    pub max: Duration,
}

impl Default for Batcher {
    fn default() -> Self {
        Batcher {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl Batcher {
    /// Waits for the next batch; `None` when every sender is gone.
    pub async fn next<T>(&self, rx: &mut mpsc::Receiver<T>) -> Option<Vec<T>> {
        let first = rx.recv().await?;
        let started = Instant::now();
        let mut batch = vec![first];
        loop {
            let idle_end = Instant::now() + self.idle;
            let end = idle_end.min(started + self.max);
            match tokio::time::timeout_at(end, rx.recv()).await {
                Ok(Some(item)) => batch.push(item),
                Ok(None) | Err(_) => return Some(batch),
            }
        }
    }
}

/// The fleet as the lifecycles show it: booting nodes are committed
/// (powering on), failed ones are never used.
pub fn fleet_as_seen(fleet: &Fleet, lives: &BTreeMap<String, NodeLife>) -> Fleet {
    let mut f = fleet.clone();
    for n in &mut f.nodes {
        if let Some(life) = lives.get(&n.name) {
            let (power, failed) = life.planner_power();
            n.power = power;
            if failed {
                n.failed = Some(life.reason.clone().unwrap_or_else(|| "failed".to_owned()));
            }
        }
    }
    f
}

#[derive(Debug)]
pub struct RoundReport {
    pub plan: Plan,
    /// Empty in `observe` mode.
    pub executed: Vec<Executed>,
}

/// One round: plan on the fleet as seen, then execute (in `act` mode),
/// moving each powered node's lifecycle to PoweringOn first.
pub async fn round<P: PowerControl + 'static>(
    fleet: &Fleet,
    lives: &mut BTreeMap<String, NodeLife>,
    demand: &Demand,
    mode: Mode,
    executor: &Executor<P>,
    now: u64,
) -> Result<RoundReport, StoreError> {
    let seen = fleet_as_seen(fleet, lives);
    let plan = accord::plan::plan(&seen, demand, &seen.policy, now);
    let mut executed = Vec::new();
    if mode == Mode::Act {
        for a in &plan.actions {
            if let accord::plan::Action::PowerOn { node, .. } = a {
                lives
                    .entry(node.clone())
                    .or_insert_with(|| NodeLife::new(accord::lifecycle::Stage::Off, now))
                    .power_on_requested(now);
            }
        }
        executed = executor.apply(&plan.actions, now).await?;
    }
    Ok(RoundReport { plan, executed })
}
