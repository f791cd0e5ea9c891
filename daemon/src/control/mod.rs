//! The control loop, as observe → decide → effect:
//!
//! - [`observe`] gathers one [`decide::Snapshot`]: the Kubernetes stores
//!   (translated to demand), agents' liveness from the store, BMC power
//!   readings, finished power actions, open intents, the clock;
//! - [`decide`] (the `accord-decide` crate) is synchronous and pure of
//!   I/O: lifecycles, the plan, which power actions run, bookings,
//!   ProvisioningRequest conditions, events, the status and the metrics;
//! - [`run`] owns the loop: wake-ups and batching, then *effect*: power
//!   actions start first (in the background, through the journal), then
//!   Kubernetes writes (queued to [`write`]'s background writer), then
//!   metrics are recorded once.
//!
//! [`bmc`] polls BMC power in the background; [`provisioning`] (in
//! `accord-decide`) is the pure ProvisioningRequest condition logic.

pub mod batch;
pub mod bmc;
pub mod mig_parted;
pub mod observe;
pub mod run;
pub mod wake;
pub mod write;

pub use accord_api::control::Mode;
pub use accord_decide as decide;
pub use accord_decide::provisioning;
pub use batch::Batcher;
pub use run::Controller;
