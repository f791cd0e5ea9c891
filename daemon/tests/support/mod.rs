//! Helpers shared by the daemon's test binaries.
pub mod lab;
pub mod twin;
