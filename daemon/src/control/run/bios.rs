//! *Effect*'s part about BIOS profiles: the BIOS reads *decide* asks for
//! run in the background, as power actions do (their results come back
//! as a wake-up for the next round); outcomes are kept in the store. At
//! start the store's records seed the decider, so a profile verified
//! before a restart is not staged again, and one staged (the executor
//! keeps a `staged` record with the power-on) but not yet read back is
//! read back once its machine is on.

use tokio::sync::mpsc;
use tracing::warn;

use super::{Controller, Wake};
use crate::control::decide::{BiosEffects, Decider};
use crate::shared::Shared;

/// Seeds `decider` with the BIOS outcomes the store keeps.
pub(super) fn seed(shared: &Shared, decider: &mut Decider) {
    match shared.store.bios_records() {
        Ok((records, unreadable)) => {
            if !unreadable.is_empty() {
                warn!(nodes = %unreadable.join(","), "kept BIOS outcomes that cannot be read are ignored (those nodes' profiles count as not verified)");
            }
            decider.seed_bios(records);
        }
        Err(e) => {
            warn!(error = %accord::config_file::error_chain(&e), "cannot read the kept BIOS outcomes; planning with the fleet file's bios_profile_applied")
        }
    }
}

impl Controller {
    /// Keeps this round's outcomes (flushed: small, synchronous, so the
    /// next start sees them) and starts its reads.
    pub(super) fn bios_effect(&mut self, b: &BiosEffects, tx: &mpsc::Sender<Wake>) {
        for (node, rec) in &b.records {
            if let Err(e) = self.shared.store.put_bios_record(node, rec) {
                warn!(node = %node, profile = %rec.profile, error = %accord::config_file::error_chain(&e), "cannot keep the node's BIOS outcome");
            }
        }
        if let (Some(ex), false) = (self.executor.clone(), b.checks.is_empty()) {
            let tx = tx.clone();
            let checks = b.checks.clone();
            self.in_flight.spawn(async move {
                let reads = ex.read_bios(&checks).await;
                let _ = tx.send(Wake::Bios(reads)).await;
            });
        }
    }
}
