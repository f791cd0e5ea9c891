//! deploy/rbac.yaml grants exactly what accordd reads and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

fn grants() -> BTreeMap<(String, String), BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).unwrap();
        if v["kind"] != "ClusterRole" {
            continue;
        }
        for rule in v["rules"].as_array().unwrap() {
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    let verbs = rule["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_owned());
                    out.entry((
                        g.as_str().unwrap().to_owned(),
                        r.as_str().unwrap().to_owned(),
                    ))
                    .or_default()
                    .extend(verbs);
                }
            }
        }
    }
    out
}

#[test]
fn rbac_covers_every_watch_and_write_and_nothing_more() {
    let g = grants();
    let read = ["get", "list", "watch"];
    // Everything DemandWatch may watch (at whichever version is served:
    // RBAC is by group and resource, not version).
    let watched: Vec<(&str, &str)> = accord_kube::discovery::READS
        .iter()
        .map(|r| (r.group, r.plural))
        .collect();
    assert!(watched.contains(&("resource.k8s.io", "resourceslices")));
    assert!(watched.contains(&("", "nodes")));
    for (group, plural) in watched {
        let verbs = g
            .get(&(group.to_owned(), plural.to_owned()))
            .unwrap_or_else(|| panic!("{group}/{plural} not granted"));
        for v in read {
            assert!(verbs.contains(v), "{group}/{plural}: no {v}");
        }
    }
    // The CRDs written to are among those read.
    for ar in accord_kube::watch::crds() {
        assert!(
            g.contains_key(&(ar.group.clone(), ar.plural.clone())),
            "{ar:?}"
        );
    }
    // Writes. publish_node: get, then patch.
    assert!(g[&("".into(), "nodes".into())].contains("get"));
    assert!(g[&("".into(), "nodes".into())].contains("patch"));
    assert!(g[&("events.k8s.io".into(), "events".into())].contains("create"));
    assert!(g[&(
        "autoscaling.x-k8s.io".into(),
        "provisioningrequests/status".into()
    )]
        .contains("patch"));
    // Nothing else writes: no verb beyond reading except those three.
    let writes: BTreeSet<(String, String)> = g
        .iter()
        .filter(|(_, verbs)| verbs.iter().any(|v| !read.contains(&v.as_str())))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(
        writes,
        [
            ("".to_owned(), "nodes".to_owned()),
            (
                "autoscaling.x-k8s.io".to_owned(),
                "provisioningrequests/status".to_owned()
            ),
            ("events.k8s.io".to_owned(), "events".to_owned())
        ]
        .into_iter()
        .collect()
    );
    assert!(g.keys().all(|(_, r)| r != "secrets" && r != "*"));
}
