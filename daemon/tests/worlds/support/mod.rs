//! Helpers shared by the modules of the `worlds` binary.
pub mod lab;
