//! Reads BMC power states in the background, so a round never waits on a
//! BMC: every node each `every`, the ones in transition (which the loop
//! names through a watch channel) each `often`. Changes travel to the loop
//! as wake-ups that carry the readings. A follower replica (`[ha]`) reads
//! every node only each [`FOLLOWER_EVERY`] (it decides nothing; its
//! readings are only kept roughly warm) and nothing in between: a fleet's
//! BMCs are not polled once per replica. On taking over it reads every
//! node at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::warn;

use super::wake::{Readings, Wake};
use crate::execute::PowerControl;

/// How often a follower replica reads every BMC.
pub const FOLLOWER_EVERY: Duration = Duration::from_secs(300);

pub struct BmcPoller<P> {
    pub power: Arc<P>,
    pub nodes: Vec<String>,
    /// The nodes read every `often` (the rest every `every`).
    pub transitional: watch::Receiver<BTreeSet<String>>,
    pub every: Duration,
    pub often: Duration,
    /// Whether this replica leads now (always, without `[ha]`).
    pub leading: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl<P> std::fmt::Debug for BmcPoller<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BmcPoller")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl<P: PowerControl + 'static> BmcPoller<P> {
    /// Runs until the loop is gone. The first pass reads every node and is
    /// sent whole, marked `first_pass`, even when nothing changed.
    pub fn spawn(self, tx: mpsc::Sender<Wake>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let BmcPoller {
                power,
                nodes,
                transitional,
                every,
                often,
                leading,
            } = self;
            let mut last_full: Option<Instant> = None;
            let mut led = true;
            let mut known: BTreeMap<String, Option<bool>> = BTreeMap::new();
            loop {
                let first_pass = last_full.is_none();
                let leads = leading();
                let (period, fast) = if leads {
                    (every, true)
                } else {
                    (every.max(FOLLOWER_EVERY), false)
                };
                // Taking over: every node read afresh.
                let took_over = leads && !led;
                led = leads;
                let full = took_over || last_full.is_none_or(|t| t.elapsed() >= period);
                let targets: Vec<String> = if full {
                    last_full = Some(Instant::now());
                    nodes.clone()
                } else if fast {
                    transitional.borrow().iter().cloned().collect()
                } else {
                    Vec::new()
                };
                let reads = targets.iter().map(|n| {
                    let power = power.clone();
                    async move { (n.clone(), power.is_on(n).await) }
                });
                let mut changed: Readings = Vec::new();
                for (node, r) in futures::future::join_all(reads).await {
                    let reading = match r {
                        Ok(on) => Some(on),
                        Err(e) => {
                            if known.get(&node) != Some(&None) {
                                warn!(node = %node, error = %accord::config_file::error_chain(&e), "cannot read the BMC's power state");
                            }
                            None
                        }
                    };
                    if first_pass || known.get(&node) != Some(&reading) {
                        changed.push((node.clone(), reading));
                    }
                    known.insert(node, reading);
                }
                if (first_pass || !changed.is_empty())
                    && tx
                        .send(Wake::Bmc {
                            readings: changed,
                            first_pass,
                        })
                        .await
                        .is_err()
                {
                    return;
                }
                tokio::time::sleep(often).await;
            }
        })
    }
}
