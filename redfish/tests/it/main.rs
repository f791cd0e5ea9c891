//! The Redfish client's integration tests, one binary (each test binary
//! is linked on its own: one per crate keeps CI's link time down).

mod emulator;
mod faults;
mod hostile;
mod inventory;
mod mockups;
mod support;
