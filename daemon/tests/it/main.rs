//! accordd's integration tests in one binary (one link, as rust-analyzer
//! does): the twin tests on the real `Decider`, the API, configuration,
//! the journal and executor, HA on a Lease against the fake API server,
//! Redfish against sushy-tools, signals, dashboards and `accordctl`.
//! The tests that run a whole world (a lab, an upstream control plane)
//! are the `worlds` binary; `hostile` (a counting global allocator) and
//! `lab_cli` (its own main) are separate because they must be.

mod support;

mod api;
mod config;
mod control;
mod control_agents;
mod control_bios;
mod control_dark;
mod control_health;
mod control_intents;
mod control_mig;
mod control_queues;
mod control_restart;
mod control_said;
mod control_waves;
mod dashboards;
mod execute;
mod ha_executor;
mod ha_lease;
mod ha_shared_state;
mod help;
mod journal;
mod redfish;
mod rogue;
mod signals;
