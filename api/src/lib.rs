//! What travels between Accord's programs, in one place: the agent's
//! report and heartbeat and accordd's answer (`agent`), the admin view of
//! a node (`nodes`), the control loop's last round (`control`) and its text
//! (`text`), the one escaping rule for what a person reads (`terminal`),
//! and the typed HTTP client (`client`) the agent, accordctl and
//! the lab use. accordd serves these types; nothing here does I/O except
//! the client and `files` (the one way a file we are pointed at is read
//! or written).
//! With the `cli` feature, what every binary sets up the same way: logging,
//! the stop signals, and its shell completions and man pages (`cli_docs`).

pub mod admin_files;
pub mod agent;
#[cfg(feature = "cli")]
pub mod cli_docs;
#[cfg(feature = "client")]
pub mod client;
pub mod control;
pub mod files;
#[cfg(feature = "cli")]
pub mod logging;
pub mod mig_parted;
pub use accord::names;
pub mod nodes;
#[cfg(feature = "cli")]
pub mod signals;
pub mod terminal;
pub mod text;

#[cfg(feature = "client")]
pub use client::{Client, ClientError};
pub use names::{validate_node_name, NodeNameError};
