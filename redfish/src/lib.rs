//! Accord's Redfish client: powers machines on and off and reconfigures
//! them through their BMCs.
//!
//! - [`inventory`]: `bmcs.toml`, which BMC powers which node;
//! - [`client`]: one BMC over HTTP (sessions, limits, retries, tasks);
//! - [`model`]: tolerant parsing of what firmware sends (pure);
//! - [`ops`]: idempotent, verified power, boot and BIOS actions;
//! - [`probe`]: `accordctl bmc probe`;
//! - [`power`]: the `PowerControl` trait accordd's executor drives.
//!
//! A thin client over reqwest rather than `nv-redfish`: see
//! docs/ARCHITECTURE.md ("Decisions").

pub mod client;
pub mod error;
pub mod inventory;
pub mod login;
pub mod model;
pub mod ops;
pub mod power;
pub mod probe;

pub use client::{Bmc, BmcSettings, BmcTarget, HttpPool, TlsMode, WriteGate};
pub use error::{RedfishError, Secret};
pub use inventory::Inventory;
pub use login::Credentials;
pub use model::PowerState;
