//! Manifests nested past reason: libyaml's scanner is quadratic in flow
//! nesting (100,000 `[` took a minute in a debug build, seconds in a
//! release one), so nesting is counted first, in linear time, and the text
//! refused with where it went too deep. Found by the hostile-input tests.

use std::time::{Duration, Instant};

use accord_kube::manifests::MAX_FLOW_NESTING;
use accord_kube::Manifests;

#[test]
fn deep_flow_nesting_is_refused_at_once_with_where() {
    for (open, close) in [("[", "]"), ("{", "}"), ("{a: ", "}")] {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {}{}\n",
            open.repeat(100_000),
            close.repeat(100_000)
        );
        let started = Instant::now();
        let e = Manifests::parse(&text, "deep.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(
            e.starts_with("deep.yaml:3:") && e.contains("nested deeper than 1000 levels"),
            "{e}"
        );
    }
}

#[test]
fn nesting_under_the_limit_is_the_parser_s_to_judge() {
    // 200 levels: past the deserializer's own limit, under ours.
    let text = format!("a: {}{}\n", "[".repeat(200), "]".repeat(200));
    let e = Manifests::parse(&text, "x.yaml").unwrap_err().to_string();
    assert!(e.contains("recursion limit"), "{e}");
    // Brackets in comments are not nesting; balanced ones never add up.
    let text = format!(
        "# {}\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {{x: '{}'}}\n",
        "[".repeat(MAX_FLOW_NESTING + 10),
        "[]".repeat(MAX_FLOW_NESTING + 10)
    );
    Manifests::parse(&text, "ok.yaml").unwrap();
}

/// A mapping that names a key twice means one thing to a reader that keeps
/// the first and another to one that keeps the last (a plain
/// `serde_json::Value` does): refused, with where.
#[test]
fn a_key_named_twice_in_one_mapping_is_refused() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    team: a\n    team: b\nspec:\n  containers: []\n";
    let e = Manifests::parse(text, "twice.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("twice.yaml:"), "{e}");
    assert!(e.contains("metadata.labels"), "{e}");
    assert!(e.contains("\"team\" twice"), "{e}");
    // The same key in two mappings is no repeat.
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {team: a}\n  annotations: {team: b}\nspec:\n  containers: []\n";
    Manifests::parse(text, "once.yaml").unwrap();
}
