//! Helpers shared by the modules of the `worlds` binary.
pub mod lab;

/// The accordctl binary (its own crate), built beside accordd.
pub fn accordctl_bin() -> std::path::PathBuf {
    accord_testkit::process::sibling_binary(env!("CARGO_BIN_EXE_accordd"), "accordctl")
}
