//! Accord's test doubles, out of the crates that ship: nothing in accord,
//! accord-agent, accord-daemon, accord-redfish, accord-kube or accord-api
//! depends on this crate except as a dev-dependency.
//!
//! - [`fake_api`]: an in-repo Kubernetes API server (axum) with real
//!   list/watch semantics;
//! - [`sushy`]: OpenStack's `sushy-emulator --fake` and `sushy-static`
//!   Redfish peers, started on free ports and stopped on drop;
//! - `power` (feature `power`): `SimulatedPower`, the in-memory twin of
//!   accordd's `PowerControl`.

pub mod fake_api;
#[cfg(feature = "power")]
pub mod power;
pub mod sushy;
