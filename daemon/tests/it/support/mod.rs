//! Helpers shared by the modules of the `it` binary.
pub mod twin;

/// The accordctl binary (its own crate), built beside accordd.
pub fn accordctl_bin() -> std::path::PathBuf {
    accord_testkit::process::sibling_binary(env!("CARGO_BIN_EXE_accordd"), "accordctl")
}
