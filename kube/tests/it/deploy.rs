//! Every manifest in deploy/ is the Kubernetes object it says it is (typed
//! by k8s-openapi), and the replicas' manifests agree with what accordd's
//! high availability needs: the AccordNode CRD accordd writes, in the
//! namespace its Lease is in, a stable address per replica.

use std::path::Path;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;

fn documents(file: &str) -> Vec<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn the_accord_node_crd_is_namespaced_v1alpha1_and_keeps_any_spec() {
    let docs = documents("crd-accordnode.yaml");
    assert_eq!(docs.len(), 1);
    let crd: CustomResourceDefinition = serde_json::from_value(docs[0].clone()).unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some("accordnodes.accord.dev"));
    assert_eq!(crd.spec.group, "accord.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "AccordNode");
    assert_eq!(crd.spec.names.plural, "accordnodes");
    let v = &crd.spec.versions[0];
    assert!(v.name == "v1alpha1" && v.served && v.storage);
    let schema = v
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap();
    let spec = &schema.properties.as_ref().unwrap()["spec"];
    assert_eq!(spec.x_kubernetes_preserve_unknown_fields, Some(true));
}

#[test]
fn the_replicas_run_as_a_stateful_set_behind_a_headless_service() {
    let docs = documents("accordd-replicas.yaml");
    let service: Service = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "Service")
            .unwrap()
            .clone(),
    )
    .unwrap();
    let set: StatefulSet = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "StatefulSet")
            .unwrap()
            .clone(),
    )
    .unwrap();
    assert_eq!(
        service.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("None"),
        "headless: one address per replica for the agents"
    );
    for ns in [&service.metadata.namespace, &set.metadata.namespace] {
        assert_eq!(
            ns.as_deref(),
            Some("accord-system"),
            "the Lease's namespace"
        );
    }
    let spec = set.spec;
    assert_eq!(
        spec.service_name.as_deref(),
        service.metadata.name.as_deref()
    );
    assert!(spec.replicas.unwrap() >= 2);
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("accordd"));
    assert_eq!(
        pod.containers[0].args.as_deref().unwrap(),
        ["run", "--config", "/etc/accord/accordd.toml"]
    );
}
