//! The agent's integration tests, one binary (each test binary is linked
//! on its own: one per crate keeps CI's link time down). hostile.rs
//! stays a binary of its own: it counts allocations with its own global
//! allocator, which other tests running beside it would disturb.

mod cli;
mod commands;
mod discovery;
mod run;
mod signals;
