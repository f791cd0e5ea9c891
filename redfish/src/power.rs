//! What a power executor needs from the machines' BMCs: the
//! [`PowerControl`] trait, its [`PowerError`], and a BIOS as read back.
//! Beside the Redfish client, which implements it in accordd
//! (`RedfishPower`), so that another implementation (accord-testkit's
//! in-memory twin) needs nothing of accordd.

use std::future::Future;
use std::sync::Arc;

use crate::RedfishError;

/// Why a power action or reading failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PowerError {
    #[error("node {node}: no BMC in the inventory")]
    NoBmc { node: String },
    #[error("node {node}: BMC")]
    Bmc {
        node: String,
        #[source]
        source: Arc<RedfishError>,
    },
    /// A power control that is not Redfish (the simulated twin) refused.
    #[error("node {node}: {reason}")]
    Refused { node: String, reason: String },
    /// Not sent: this replica does not lead, or its intent could not be
    /// written to the shared state under its term.
    #[error("node {node}: not sent")]
    NotSent {
        node: String,
        /// Why (accordd's shared-state error under HA).
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    #[error("node {node}: BIOS profile {profile:?} is not in the BMC inventory (its [bios_profiles]: {known})")]
    UnknownBiosProfile {
        node: String,
        profile: String,
        /// The inventory's profiles, for the message.
        known: String,
    },
}

pub use accord::hardware::BiosSeen;

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
    /// Stages BIOS profile `profile` (by name) so that it applies at the
    /// next Reset; reads first and sends only what differs.
    fn stage_bios(
        &self,
        node: &str,
        profile: &str,
    ) -> impl Future<Output = Result<(), PowerError>> + Send;
    /// The node's BIOS now, with what is staged and what `profile` wants.
    fn read_bios(
        &self,
        node: &str,
        profile: &str,
    ) -> impl Future<Output = Result<BiosSeen, PowerError>> + Send;
}

/// The error for a profile the inventory does not define.
pub fn unknown_bios_profile<'a>(
    node: &str,
    profile: &str,
    known: impl Iterator<Item = &'a String>,
) -> PowerError {
    let known: Vec<&str> = known.map(String::as_str).collect();
    PowerError::UnknownBiosProfile {
        node: node.to_owned(),
        profile: profile.to_owned(),
        known: if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        },
    }
}
