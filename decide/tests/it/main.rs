//! accord-decide's integration tests, one binary: what the crate may link.
//! Its behaviour is tested where it is driven: the twin tests in
//! daemon/tests/it (the real Decider on simulated worlds) and the unit
//! tests beside each module.

use std::collections::BTreeSet;
use std::process::Command;

/// Decide does no I/O: no runtime, client, store, server nor metrics
/// library is in its normal dependency tree (the compiler then holds it:
/// nothing of theirs can be called). Read from cargo itself.
#[test]
fn decide_links_no_runtime_client_store_server_nor_metrics() {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "accord-decide", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The tree was read: the crate and what it needs are in it.
    for needed in ["accord-decide", "accord", "accord-api", "serde_json"] {
        assert!(crates.contains(needed), "{needed} missing from {crates:?}");
    }
    for banned in [
        "tokio",
        "futures",
        "kube",
        "k8s-openapi",
        "sled",
        "reqwest",
        "hyper",
        "axum",
        "prometheus-client",
        "plotters",
    ] {
        assert!(
            !crates.contains(banned),
            "accord-decide links {banned}: {crates:?}"
        );
    }
}
