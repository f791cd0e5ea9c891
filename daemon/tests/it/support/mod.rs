//! Helpers shared by the modules of the `it` binary.
pub mod twin;
