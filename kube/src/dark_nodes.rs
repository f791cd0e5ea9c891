//! The two Node writes of a dark machine (`policy.dark_nodes = "delete"`):
//! its Node deleted once the power-off is confirmed, and what that Node
//! had put back on the one its kubelet registers when it comes back.

use accord::truth::KeptNode;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Preconditions};
use serde_json::{json, Map, Value};

use crate::write::PublishOutcome;

/// Deletes Node `node` if it is still the object seen: the delete carries
/// `uid` and `resource_version` as preconditions, so a Node registered
/// again since (another uid), or changed since (an admin's label that the
/// kept copy lacks), is not deleted: the API server answers 409 Conflict
/// (`staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`,
/// `BeforeDelete`), returned as the error, and the next round decides
/// again from what it sees. A Node already gone is
/// [`PublishOutcome::NotFound`].
pub async fn delete_node(
    client: &kube::Client,
    node: &str,
    uid: &str,
    resource_version: &str,
) -> Result<PublishOutcome, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: Some(resource_version.to_owned()),
        }),
        ..DeleteParams::default()
    };
    match api.delete(node, &params).await {
        Ok(_) => Ok(PublishOutcome::Written),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(PublishOutcome::NotFound),
        Err(e) => Err(e),
    }
}

/// Puts `kept` on Node `node` where the Node is the registration `kept.uid`
/// names and lacks it: label and annotation keys it does not have, taints
/// of a key and effect it does not have (appended to its own), the cordon.
/// A key the Node has keeps its value. One GET, then (when anything is
/// missing) one JSON merge patch carrying the GET's resourceVersion (409
/// when the Node changed in between: tried again next round). A Node of
/// another uid, or none, is [`PublishOutcome::NotFound`].
pub async fn restore_node(
    client: &kube::Client,
    node: &str,
    kept: &KeptNode,
) -> Result<PublishOutcome, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let Some(current) = api.get_opt(node).await? else {
        return Ok(PublishOutcome::NotFound);
    };
    if current.metadata.uid.as_deref() != Some(kept.uid.as_str()) {
        return Ok(PublishOutcome::NotFound);
    }
    let Some(patch) = restore_patch(&current, kept) else {
        return Ok(PublishOutcome::Unchanged);
    };
    crate::write::merge_patch_node(&api, node, &patch).await
}

/// The merge patch that puts what `node` lacks of `kept` on it; `None`
/// when it lacks nothing.
pub fn restore_patch(node: &Node, kept: &KeptNode) -> Option<Value> {
    let empty = Default::default();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let current = crate::write::taints_as_sent(node);
    let has_taint = |key: &str, effect: &str| {
        current
            .iter()
            .any(|c| c["key"].as_str() == Some(key) && c["effect"].as_str() == Some(effect))
    };
    let add_labels: Map<String, Value> = kept
        .labels
        .iter()
        .filter(|(k, _)| !labels.contains_key(*k))
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    let add_annotations: Map<String, Value> = kept
        .annotations
        .iter()
        .filter(|(k, _)| !annotations.contains_key(*k))
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    let mut taints = current.clone();
    for t in &kept.taints {
        let effect = crate::write::effect_name(t.effect);
        if has_taint(&t.key, effect) {
            continue;
        }
        let mut v = json!({"key": t.key, "effect": effect});
        if let Some(value) = &t.value {
            v["value"] = Value::from(value.as_str());
        }
        taints.push(v);
    }
    let cordon = kept.unschedulable
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
    if add_labels.is_empty()
        && add_annotations.is_empty()
        && taints.len() == current.len()
        && !cordon
    {
        return None;
    }
    let mut metadata = Map::new();
    if let Some(rv) = &node.metadata.resource_version {
        metadata.insert("resourceVersion".into(), Value::from(rv.as_str()));
    }
    if !add_labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(add_labels));
    }
    if !add_annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(add_annotations));
    }
    let mut spec = Map::new();
    if taints.len() != current.len() {
        spec.insert("taints".into(), Value::Array(taints));
    }
    if cordon {
        spec.insert("unschedulable".into(), Value::Bool(true));
    }
    let mut patch = json!({ "metadata": metadata });
    if !spec.is_empty() {
        patch["spec"] = Value::Object(spec);
    }
    Some(patch)
}
