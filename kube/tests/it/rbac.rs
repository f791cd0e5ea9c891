//! deploy/rbac.yaml grants exactly what accordd reads and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// accordd's namespace: its ServiceAccount, Lease and AccordNodes.
const NAMESPACE: &str = "accord-system";

/// Every document of deploy/rbac.yaml.
fn documents() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect()
}

/// What the ClusterRole grants, by (group, resource).
fn grants() -> BTreeMap<(String, String), BTreeSet<String>> {
    grants_of("ClusterRole")
}

/// What the documents of `kind` (ClusterRole, Role) grant, by (group,
/// resource).
fn grants_of(kind: &str) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for v in documents() {
        if v["kind"] != kind {
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
    // dark_nodes::delete_node.
    assert!(g[&("".into(), "nodes".into())].contains("delete"));
    assert!(g[&("events.k8s.io".into(), "events".into())].contains("create"));
    // write::evict_pod: the Eviction API, create only.
    assert_eq!(
        g[&("".into(), "pods/eviction".into())],
        ["create".to_owned()].into_iter().collect()
    );
    assert!(g[&(
        "autoscaling.x-k8s.io".into(),
        "provisioningrequests/status".into()
    )]
        .contains("patch"));
    assert!(g[&(
        "autoscaling.x-k8s.io".into(),
        "capacitybuffers/status".into()
    )]
        .contains("patch"));
    // Nothing else writes: no verb beyond reading except those five.
    let writes: BTreeSet<(String, String)> = g
        .iter()
        .filter(|(_, verbs)| verbs.iter().any(|v| !read.contains(&v.as_str())))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(
        writes,
        [
            ("".to_owned(), "nodes".to_owned()),
            ("".to_owned(), "pods/eviction".to_owned()),
            (
                "autoscaling.x-k8s.io".to_owned(),
                "capacitybuffers/status".to_owned()
            ),
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

/// High availability: in accordd's namespace only, the leader-election
/// Lease (read, created, renewed or taken over by replace) and Accord's own
/// AccordNode objects (listed and watched, read, created, replaced,
/// deleted); granted by a Role bound to accordd's ServiceAccount, and by
/// nothing cluster-wide.
#[test]
fn rbac_grants_the_lease_and_accord_nodes_in_accordds_namespace_only() {
    let docs = documents();
    let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Role").collect();
    assert_eq!(roles.len(), 1, "one Role");
    assert_eq!(roles[0]["metadata"]["namespace"], NAMESPACE);
    let verbs = |vs: &[&str]| -> BTreeSet<String> { vs.iter().map(|v| (*v).to_owned()).collect() };
    let expect: BTreeMap<(String, String), BTreeSet<String>> = [
        (
            ("coordination.k8s.io".to_owned(), "leases".to_owned()),
            verbs(&["get", "create", "update"]),
        ),
        (
            ("accord.dev".to_owned(), "accordnodes".to_owned()),
            verbs(&["get", "list", "create", "update", "delete"]),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(grants_of("Role"), expect);
    // Not cluster-wide.
    let cluster = grants();
    for (group, resource) in expect.keys() {
        assert!(
            !cluster
                .keys()
                .any(|(g, r)| g == group && r.split('/').next() == Some(resource.as_str())),
            "{group}/{resource} granted cluster-wide"
        );
    }
    // Bound to accordd's ServiceAccount, in the same namespace.
    let bindings: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "RoleBinding").collect();
    assert_eq!(bindings.len(), 1, "one RoleBinding");
    let b = bindings[0];
    assert_eq!(b["metadata"]["namespace"], NAMESPACE);
    assert_eq!(b["roleRef"]["kind"], "Role");
    assert_eq!(b["roleRef"]["name"], roles[0]["metadata"]["name"]);
    let account = docs
        .iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .expect("a ServiceAccount");
    assert_eq!(account["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        b["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                            "namespace": NAMESPACE}])
    );
}

/// GPU Operator: accordd's mig-parted ConfigMap in the operator's
/// namespace only, by name for reads and updates (a create cannot be
/// limited by name), pod deletes there (the validator pods), and reading
/// ClusterPolicies, all bound to accordd's ServiceAccount; the lab applies
/// it on the upstream control plane.
#[test]
fn rbac_for_the_gpu_operator_grants_only_its_configmap_validators_and_cluster_policies() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac-gpu-operator.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect();
    let role = docs.iter().find(|d| d["kind"] == "Role").unwrap();
    assert_eq!(role["metadata"]["namespace"], "gpu-operator");
    let rules = role["rules"].as_array().unwrap();
    for r in rules {
        assert_eq!(r["apiGroups"], serde_json::json!([""]));
    }
    let named: Vec<&Value> = rules
        .iter()
        .filter(|r| r["resourceNames"].is_array())
        .collect();
    assert_eq!(named.len(), 1);
    assert_eq!(named[0]["resources"], serde_json::json!(["configmaps"]));
    assert_eq!(
        named[0]["resourceNames"],
        serde_json::json!(["accord-mig-parted-config"])
    );
    assert_eq!(named[0]["verbs"], serde_json::json!(["get", "update"]));
    let pods: Vec<&Value> = rules
        .iter()
        .filter(|r| r["resources"] == serde_json::json!(["pods"]))
        .collect();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["verbs"], serde_json::json!(["delete"]));
    let logs: Vec<&Value> = rules
        .iter()
        .filter(|r| r["resources"] == serde_json::json!(["pods/log"]))
        .collect();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0]["verbs"], serde_json::json!(["get"]));
    let cluster = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    assert_eq!(
        cluster["rules"],
        serde_json::json!([{"apiGroups": ["nvidia.com"], "resources": ["clusterpolicies"], "verbs": ["get", "list"]}])
    );
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        let binding = docs.iter().find(|d| d["kind"] == kind).unwrap();
        assert_eq!(binding["subjects"][0]["name"], "accordd");
        assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    }
}

/// The delete of Nodes (deploy/rbac.yaml) is narrowed by a
/// ValidatingAdmissionPolicy to Nodes carrying Accord's powering-off taint,
/// bound with Deny, matching accordd's ServiceAccount only.
#[test]
fn node_deletes_are_narrowed_to_nodes_accord_powered_off() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/node-delete-policy.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .unwrap();
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .unwrap();
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    let rule = &policy["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["operations"], serde_json::json!(["DELETE"]));
    assert_eq!(rule["resources"], serde_json::json!(["nodes"]));
    let user = policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        user.contains("system:serviceaccount:accord-system:accordd"),
        "{user}"
    );
    let check = policy["spec"]["validations"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        check.contains(accord::truth::POWERING_OFF_TAINT_KEY),
        "{check}"
    );
}
