//! What Accord writes back: its labels and taints on Nodes (the topology
//! it plans with, so kube-scheduler, Kueue TAS and PodGroup constraints
//! see the same domains; reservations as taints), events on pending pods
//! and groups, and ProvisioningRequest status conditions. The control loop
//! decides what; these write it.

use std::collections::BTreeSet;

use accord::demand::{Taint, TaintEffect};
use accord::truth::Publication;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Map, Value};

/// Who Accord says it is on events and patches.
pub const MANAGER: &str = "accordd";

/// What [`publish_node`] (or [`set_node_label`],
/// [`set_provisioning_condition`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The object already showed it: nothing written.
    Unchanged,
    /// One merge patch written.
    Written,
    /// No such object (gone, or a Node not registered yet).
    NotFound,
}

pub(crate) fn effect_name(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// Whether a Node's taint (as the API server sent it) is `t`.
fn same_taint(node_taint: &Value, t: &Taint) -> bool {
    let value = node_taint["value"].as_str().filter(|v| !v.is_empty());
    node_taint["key"].as_str() == Some(t.key.as_str())
        && node_taint["effect"].as_str() == Some(effect_name(t.effect))
        && value == t.value.as_deref()
}

/// Publishes Accord's labels and taints on Node `node`: the keys Accord
/// owns (`owns_label`, `owns_taint`) get `want`'s values, owned keys the
/// Node has and `want` lacks are removed, every other key stays as it is
/// (a key of `want` that Accord does not own is not written). The Node's
/// taints become those whose key Accord does not own plus `want.taints`
/// (one per key and effect; a taint already there keeps its
/// `timeAdded`).
///
/// One GET; nothing more when the Node already shows it
/// ([`PublishOutcome::Unchanged`]); else one JSON merge patch (field
/// manager `accordd`) carrying the GET's `metadata.resourceVersion`, so
/// a Node changed in between is not overwritten: the API server answers
/// `409 Conflict`, returned as the error (the caller tries again next
/// round, from a fresh GET).
pub async fn publish_node(
    client: &kube::Client,
    node: &str,
    want: &Publication,
    owns_label: &(dyn Fn(&str) -> bool + Sync),
    owns_taint: &(dyn Fn(&str) -> bool + Sync),
) -> Result<PublishOutcome, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let Some(current) = api.get_opt(node).await? else {
        return Ok(PublishOutcome::NotFound);
    };
    let Some(patch) = publication_patch(&current, want, owns_label, owns_taint) else {
        return Ok(PublishOutcome::Unchanged);
    };
    merge_patch_node(&api, node, &patch).await
}

/// A Node's taints as the API server sent them (`timeAdded` and all).
pub(crate) fn taints_as_sent(node: &Node) -> Vec<Value> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .collect()
}

/// One JSON merge patch of Node `node` as field manager `accordd`:
/// `Written`, or `NotFound` for a Node that is gone.
pub(crate) async fn merge_patch_node(
    api: &Api<Node>,
    node: &str,
    patch: &Value,
) -> Result<PublishOutcome, kube::Error> {
    let params = PatchParams {
        field_manager: Some(MANAGER.to_owned()),
        ..Default::default()
    };
    match api.patch(node, &params, &Patch::Merge(patch)).await {
        Ok(_) => Ok(PublishOutcome::Written),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(PublishOutcome::NotFound),
        Err(e) => Err(e),
    }
}

/// What [`update_configmap_key`] makes of a key's text (`None`: missing):
/// `Ok(None)` when nothing changes, `Err(why)` when it cannot be read.
pub type KeyUpdate<'a> = dyn Fn(Option<&str>) -> Result<Option<String>, String> + Sync + 'a;

/// Attempts of [`update_configmap_key`] when the ConfigMap changes under it.
pub const CONFIGMAP_WRITE_ATTEMPTS: usize = 5;

/// Why [`update_configmap_key`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMapError {
    #[error("ConfigMap {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ConfigMap {namespace}/{name} key {key}: {reason}")]
    Content {
        namespace: String,
        name: String,
        key: String,
        reason: String,
    },
    #[error("ConfigMap {namespace}/{name}: changed under every one of {attempts} attempts")]
    Conflict {
        namespace: String,
        name: String,
        attempts: usize,
    },
}

/// Makes key `key` of ConfigMap `namespace/name` what `update` makes of
/// its text now (`None`: the key or the ConfigMap is missing); `update`
/// answers `Ok(None)` when nothing changes. The ConfigMap is created when
/// missing; else replaced with the resourceVersion read, every other key
/// and every label kept, so a concurrent writer's change is a 409, read
/// and worked out again (up to [`CONFIGMAP_WRITE_ATTEMPTS`]). For
/// mig-manager's mig-parted configs (`accordd`'s GPU Operator mode).
pub async fn update_configmap_key(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
    update: &KeyUpdate<'_>,
) -> Result<PublishOutcome, ConfigMapError> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let api_error = |source| ConfigMapError::Api {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    let params = PostParams {
        field_manager: Some(MANAGER.to_owned()),
        ..Default::default()
    };
    for _ in 0..CONFIGMAP_WRITE_ATTEMPTS {
        let current = api.get_opt(name).await.map_err(api_error)?;
        let text = current
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(key))
            .map(String::as_str);
        let Some(new) = update(text).map_err(|reason| ConfigMapError::Content {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
            reason,
        })?
        else {
            return Ok(PublishOutcome::Unchanged);
        };
        let result = match current {
            Some(mut cm) => {
                cm.data
                    .get_or_insert_with(Default::default)
                    .insert(key.to_owned(), new);
                cm.metadata.managed_fields = None;
                api.replace(name, &params, &cm).await
            }
            None => {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(namespace.to_owned()),
                        ..Default::default()
                    },
                    data: Some([(key.to_owned(), new)].into_iter().collect()),
                    ..Default::default()
                };
                api.create(&params, &cm).await
            }
        };
        match result {
            Ok(_) => return Ok(PublishOutcome::Written),
            // Changed (or made) by another writer since the read: again.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(api_error(e)),
        }
    }
    Err(ConfigMapError::Conflict {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        attempts: CONFIGMAP_WRITE_ATTEMPTS,
    })
}

/// Sets one label on Node `node` to `value` (a merge patch carrying the
/// resourceVersion read, so a concurrent change is a 409 and decided
/// again). For labels another component reads and Accord sets on request,
/// such as the GPU Operator's `nvidia.com/mig.config`: Accord never
/// removes them.
/// The reason mig-manager gave for its last failure on `node`: the last
/// `level=error` line of its pod's log there (pods labelled
/// `app=nvidia-mig-manager`, the GPU Operator's DaemonSet), its `msg`.
/// mig-manager writes no event: `cmd/nvidia-mig-manager/main.go` logs
/// `Error: <why>` (logrus) and sets `nvidia.com/mig.config.state=failed`.
/// `Ok(None)`: no such pod, or no error line in its last 200.
pub async fn mig_manager_error(
    client: &kube::Client,
    node: &str,
) -> Result<Option<String>, kube::Error> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::all(client.clone());
    let params = kube::api::ListParams::default()
        .labels("app=nvidia-mig-manager")
        .fields(&format!("spec.nodeName={node}"));
    let Some(pod) = pods.list(&params).await?.items.into_iter().next() else {
        return Ok(None);
    };
    let (Some(ns), Some(name)) = (pod.metadata.namespace, pod.metadata.name) else {
        return Ok(None);
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let text = api
        .logs(
            &name,
            &kube::api::LogParams {
                tail_lines: Some(200),
                // Bounded, whatever the lines hold.
                limit_bytes: Some(64 * 1024),
                ..Default::default()
            },
        )
        .await?;
    Ok(last_error(&text))
}

/// The `msg` of the last logrus `level=error` line of `text` (the line
/// itself when it has none), at most 1000 characters.
pub fn last_error(text: &str) -> Option<String> {
    let line = text.lines().rev().find(|l| l.contains("level=error"))?;
    let msg = match line.split_once("msg=\"") {
        Some((_, rest)) => {
            let mut out = String::new();
            let mut chars = rest.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => out.extend(chars.next()),
                    '"' => break,
                    c => out.push(c),
                }
            }
            out
        }
        None => line.to_owned(),
    };
    Some(msg.chars().take(1000).collect())
}

/// Deletes pod `namespace/name` (a pod already gone is no error): the
/// GPU Operator's validator pods, which its DaemonSet starts again, as
/// mig-manager deletes them around a repartition.
pub async fn delete_pod(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<PublishOutcome, kube::Error> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(PublishOutcome::Written),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(PublishOutcome::NotFound),
        Err(e) => Err(e),
    }
}

/// What asking the API server to evict a pod came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictOutcome {
    /// Accepted: the pod is deleted with its grace period.
    Evicted,
    /// Refused with 429 Too Many Requests: a PodDisruptionBudget does not
    /// allow it now (or the API server is busy); the message says which.
    /// A wait, not an error: asked again later.
    Refused(String),
    /// No such pod (gone already).
    NotFound,
}

/// Evicts a pod through the Eviction API (`POST
/// /api/v1/namespaces/{ns}/pods/{name}/eviction`, policy/v1): never a
/// delete, so its PodDisruptionBudgets and grace period hold (kubernetes
/// `pkg/registry/core/pod/storage/eviction.go`: 429 when a budget does
/// not allow the disruption).
pub async fn evict_pod(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<EvictOutcome, kube::Error> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    match api.evict(name, &kube::api::EvictParams::default()).await {
        Ok(_) => Ok(EvictOutcome::Evicted),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(EvictOutcome::NotFound),
        Err(kube::Error::Api(e)) if e.code == 429 => Ok(EvictOutcome::Refused(e.message)),
        Err(e) => Err(e),
    }
}

pub async fn set_node_label(
    client: &kube::Client,
    node: &str,
    key: &str,
    value: &str,
) -> Result<PublishOutcome, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let Some(current) = api.get_opt(node).await? else {
        return Ok(PublishOutcome::NotFound);
    };
    let have = current
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str);
    if have == Some(value) {
        return Ok(PublishOutcome::Unchanged);
    }
    let mut metadata = json!({ "labels": { key: value } });
    if let Some(rv) = &current.metadata.resource_version {
        metadata["resourceVersion"] = Value::from(rv.as_str());
    }
    merge_patch_node(&api, node, &json!({ "metadata": metadata })).await
}

/// The merge patch that makes `node` show `want` (see [`publish_node`]),
/// or `None` when it already does. Pure.
pub fn publication_patch(
    node: &Node,
    want: &Publication,
    owns_label: &(dyn Fn(&str) -> bool + Sync),
    owns_taint: &(dyn Fn(&str) -> bool + Sync),
) -> Option<Value> {
    let empty = Default::default();
    let have = node.metadata.labels.as_ref().unwrap_or(&empty);
    let mut labels = Map::new();
    for (k, v) in &want.labels {
        if owns_label(k) && have.get(k) != Some(v) {
            labels.insert(k.clone(), Value::from(v.as_str()));
        }
    }
    for k in have.keys() {
        if owns_label(k) && !want.labels.contains_key(k) {
            labels.insert(k.clone(), Value::Null);
        }
    }

    // The Node's taints as sent (timeAdded and all).
    let current = taints_as_sent(node);
    let mut taints: Vec<Value> = current
        .iter()
        .filter(|t| !owns_taint(t["key"].as_str().unwrap_or("")))
        .cloned()
        .collect();
    let mut seen = BTreeSet::new();
    for t in &want.taints {
        // One taint per key and effect (the API server refuses more).
        if !owns_taint(&t.key) || !seen.insert((t.key.as_str(), effect_name(t.effect))) {
            continue;
        }
        match current.iter().find(|c| same_taint(c, t)) {
            Some(c) => taints.push(c.clone()),
            None => {
                let mut v = json!({"key": t.key, "effect": effect_name(t.effect)});
                if let Some(value) = &t.value {
                    v["value"] = Value::from(value.as_str());
                }
                taints.push(v);
            }
        }
    }
    let sorted = |v: &[Value]| {
        let mut s: Vec<String> = v.iter().map(Value::to_string).collect();
        s.sort();
        s
    };
    let taints_changed = sorted(&taints) != sorted(&current);

    if labels.is_empty() && !taints_changed {
        return None;
    }
    let mut metadata = json!({});
    if let Some(rv) = &node.metadata.resource_version {
        metadata["resourceVersion"] = Value::from(rv.as_str());
    }
    if !labels.is_empty() {
        metadata["labels"] = Value::Object(labels);
    }
    let mut patch = json!({"metadata": metadata});
    if taints_changed {
        patch["spec"] = json!({
            "taints": if taints.is_empty() { Value::Null } else { Value::Array(taints) },
        });
    }
    Some(patch)
}

/// An event about `regarding` (`events.k8s.io/v1`), e.g. reason
/// `PoweringOn`, note "powering on node n17 in rack r3 for podgroup
/// train-a"; `warning` for "cannot satisfy".
pub async fn record_event(
    client: &kube::Client,
    regarding: ObjectReference,
    reason: &str,
    action: &str,
    note: &str,
    warning: bool,
) -> Result<(), kube::Error> {
    let ns = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let now = jiff_now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(event_name(
                regarding.name.as_deref().unwrap_or("accord"),
                now.as_nanosecond(),
            )),
            namespace: Some(ns),
            ..Default::default()
        },
        action: Some(action.to_owned()),
        event_time: Some(MicroTime(now)),
        note: Some(note.chars().take(1024).collect()),
        reason: Some(reason.to_owned()),
        regarding: Some(regarding),
        reporting_controller: Some("accord.dev/accordd".to_owned()),
        reporting_instance: Some(MANAGER.to_owned()),
        type_: Some(if warning { "Warning" } else { "Normal" }.to_owned()),
        ..Default::default()
    };
    api.create(&PostParams::default(), &event).await.map(drop)
}

/// An event's name as client-go's recorders make it
/// (`tools/record/util/util.go` `GenerateEventName`): the object's name, a
/// dot, the time in hex nanoseconds. Not a `generateName`: a prefix ending
/// in a dot is refused by the apiserver's validation ("metadata.generateName:
/// Invalid value"). Past a DNS subdomain's 253 characters, upstream falls
/// back to a UUID; here to `accord.` and the time.
pub fn event_name(regarding: &str, unix_nanos: i128) -> String {
    let name = format!("{regarding}.{unix_nanos:x}");
    if name.len() <= 253 {
        name
    } else {
        format!("accord.{unix_nanos:x}")
    }
}

pub(crate) fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

#[cfg(test)]
mod event_name_tests {
    use super::event_name;

    #[test]
    fn event_names_are_client_gos() {
        assert_eq!(event_name("r1-n1", 0x1f), "r1-n1.1f");
        let long = "a".repeat(251);
        assert_eq!(event_name(&long, 0x1f), "accord.1f");
    }
}

/// The ProvisioningRequest condition types Accord writes (those
/// cluster-autoscaler's provisioning classes define); every other
/// condition on a request is someone else's and left as it is.
pub const PROVISIONING_CONDITION_TYPES: [&str; 5] = [
    "Accepted",
    "Provisioned",
    "Failed",
    "BookingExpired",
    "CapacityRevoked",
];

/// How many times [`set_provisioning_condition`] reads and writes before
/// it gives up on a request that keeps changing under it.
pub const CONDITION_WRITE_ATTEMPTS: u32 = 5;

/// The pause between attempts after a conflict (as client-go's
/// `retry.RetryOnConflict`).
const CONFLICT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(10);

/// One ProvisioningRequest condition, as Kueue reads them: `Accepted`,
/// `Provisioned`, `Failed`, `BookingExpired`, `CapacityRevoked` (the
/// core's one condition type).
pub use accord::conditions::Condition as ProvisioningCondition;

/// Why [`set_provisioning_condition`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum ConditionWriteError {
    /// Not one of [`PROVISIONING_CONDITION_TYPES`]: Accord does not write
    /// other components' conditions.
    #[error("{0:?} is not a condition type Accord writes")]
    NotAccords(String),
    /// The request as read carries no resourceVersion, so a write could
    /// not be conditional; none is made.
    #[error("the object as read has no resourceVersion; an unconditional write is not made")]
    NoResourceVersion,
    /// Every attempt found the request changed since its read (`409
    /// Conflict`); the next round decides again.
    #[error(
        "the object changed between read and write in each of {attempts} attempts (409 Conflict)"
    )]
    Conflict { attempts: u32 },
    /// The read or the write failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Sets one of Accord's conditions on a ProvisioningRequest, through the
/// status subresource, changing nothing else.
///
/// Each attempt reads the request and works out its conditions with
/// [`provisioning_condition_patch`]: nothing is written when the
/// condition already shows what Accord wants ([`PublishOutcome::Unchanged`]);
/// else one JSON merge patch (field manager `accordd`) of
/// `status.conditions` carrying the read's `metadata.resourceVersion`, so
/// a request changed in between (by cluster-autoscaler, Kueue or a user)
/// is not overwritten: the API server answers `409 Conflict` and the
/// request is read and worked out again, up to
/// [`CONDITION_WRITE_ATTEMPTS`] times, then
/// [`ConditionWriteError::Conflict`]. `NotFound` for a request that is
/// gone.
pub async fn set_provisioning_condition(
    client: &kube::Client,
    api_version: &str,
    namespace: &str,
    name: &str,
    condition: &ProvisioningCondition,
) -> Result<PublishOutcome, ConditionWriteError> {
    if !PROVISIONING_CONDITION_TYPES.contains(&condition.type_.as_str()) {
        return Err(ConditionWriteError::NotAccords(condition.type_.clone()));
    }
    let mut ar = crate::watch::crds()
        .into_iter()
        .find(|a| a.kind == "ProvisioningRequest")
        .expect("listed");
    // Written at the version it was read at (v1beta1 on older CRDs).
    if let Some((_, version)) = api_version.split_once('/') {
        if api_version.starts_with("autoscaling.x-k8s.io/") {
            ar.api_version = api_version.to_owned();
            ar.version = version.to_owned();
        }
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    patch_status_read_first(&api, name, |current| {
        provisioning_condition_patch(current, condition, Time(jiff_now()))
    })
    .await
}

/// Reads `name`'s status and writes `patch_for`'s merge patch of it (field
/// manager `accordd`, carrying the read's resourceVersion); on `409
/// Conflict` reads and works it out again, up to
/// [`CONDITION_WRITE_ATTEMPTS`] times. `patch_for` answering `None`: the
/// object already shows it ([`PublishOutcome::Unchanged`]).
pub(crate) async fn patch_status_read_first(
    api: &Api<DynamicObject>,
    name: &str,
    patch_for: impl Fn(&DynamicObject) -> Option<Value>,
) -> Result<PublishOutcome, ConditionWriteError> {
    let params = PatchParams {
        field_manager: Some(MANAGER.to_owned()),
        ..Default::default()
    };
    for attempt in 1..=CONDITION_WRITE_ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(CONFLICT_BACKOFF).await;
        }
        let current = match api.get_status(name).await {
            Ok(c) => c,
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(PublishOutcome::NotFound),
            Err(e) => return Err(e.into()),
        };
        if current.metadata.resource_version.is_none() {
            return Err(ConditionWriteError::NoResourceVersion);
        }
        let Some(patch) = patch_for(&current) else {
            return Ok(PublishOutcome::Unchanged);
        };
        match api.patch_status(name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(PublishOutcome::Written),
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(PublishOutcome::NotFound),
            Err(kube::Error::Api(s)) if s.is_conflict() => {
                tracing::debug!(name, attempt, "changed since read; reading it again");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ConditionWriteError::Conflict {
        attempts: CONDITION_WRITE_ATTEMPTS,
    })
}

fn status_word(status: bool) -> &'static str {
    if status {
        "True"
    } else {
        "False"
    }
}

/// The merge patch for `pr`'s status subresource that makes it show
/// `condition`, or `None` when it already does. Pure.
///
/// The patch carries `pr`'s `metadata.resourceVersion` and the whole
/// `status.conditions` list (a merge patch replaces lists): every
/// condition of another type stays as it is, in its place; the one of
/// `condition`'s type (the first, a duplicate is dropped) keeps its
/// other fields and gets the status, reason and message, with
/// `observedGeneration` the request's `metadata.generation`; its
/// `lastTransitionTime` becomes `now` only when the status flips (or it
/// has none), as Kubernetes' condition conventions say. A condition not
/// there yet is added at the end.
pub fn provisioning_condition_patch(
    pr: &DynamicObject,
    condition: &ProvisioningCondition,
    now: Time,
) -> Option<Value> {
    let (conditions, changed) = merged_conditions(pr, std::slice::from_ref(condition), now);
    if !changed {
        return None;
    }
    let mut metadata = json!({});
    if let Some(rv) = &pr.metadata.resource_version {
        metadata["resourceVersion"] = Value::from(rv.as_str());
    }
    Some(json!({"metadata": metadata, "status": {"conditions": conditions}}))
}

/// `obj`'s `status.conditions` made to show each of `want` as
/// [`provisioning_condition_patch`] says, and whether that changed them.
pub(crate) fn merged_conditions(
    obj: &DynamicObject,
    want: &[ProvisioningCondition],
    now: Time,
) -> (Vec<Value>, bool) {
    let generation = obj.metadata.generation;
    let now = serde_json::to_value(now).unwrap_or(Value::Null);
    let mut conditions: Vec<Value> = obj.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for condition in want {
        let want_status = status_word(condition.status);
        let is_ours = |c: &Value| c["type"].as_str() == Some(condition.type_.as_str());
        let mut found = false;
        let mut kept = Vec::with_capacity(conditions.len() + 1);
        for c in conditions {
            if !is_ours(&c) {
                kept.push(c);
                continue;
            }
            if found {
                // A second condition of the type (a list map has one per
                // type; the API server would refuse the write with both).
                changed = true;
                continue;
            }
            found = true;
            let mut c = c;
            let flips = c["status"].as_str() != Some(want_status);
            let same = !flips
                && c["reason"].as_str() == Some(condition.reason.as_str())
                && c["message"].as_str() == Some(condition.message.as_str())
                && generation.is_none_or(|g| c["observedGeneration"].as_i64() == Some(g))
                && c["lastTransitionTime"].is_string();
            if !same {
                changed = true;
                if flips || !c["lastTransitionTime"].is_string() {
                    c["lastTransitionTime"] = now.clone();
                }
                c["status"] = Value::from(want_status);
                c["reason"] = Value::from(condition.reason.as_str());
                c["message"] = Value::from(condition.message.as_str());
                if let Some(g) = generation {
                    c["observedGeneration"] = Value::from(g);
                }
            }
            kept.push(c);
        }
        if !found {
            changed = true;
            let mut c = json!({
                "type": condition.type_,
                "status": want_status,
                "reason": condition.reason,
                "message": condition.message,
                "lastTransitionTime": now,
            });
            if let Some(g) = generation {
                c["observedGeneration"] = Value::from(g);
            }
            kept.push(c);
        }
        conditions = kept;
    }
    (conditions, changed)
}

#[cfg(test)]
mod mig_manager_log_tests {
    use super::last_error;

    #[test]
    fn the_last_error_lines_message_is_the_reason() {
        // As mig-manager (logrus, text formatter) writes them.
        let log = "time=\"2026-12-07T10:00:00Z\" level=info msg=\"Updating to MIG config: accord-1\"\n\
                   time=\"2026-12-07T10:00:01Z\" level=error msg=\"Error: failed to validate MIG configuration: exit status 1\"\n\
                   time=\"2026-12-07T10:00:02Z\" level=error msg=\"Error: failed to apply: \\\"3g.40gb\\\" does not fit\"\n\
                   time=\"2026-12-07T10:00:03Z\" level=info msg=\"Waiting for change to 'nvidia.com/mig.config' label\"\n";
        assert_eq!(
            last_error(log).as_deref(),
            Some("Error: failed to apply: \"3g.40gb\" does not fit")
        );
        assert_eq!(last_error("level=info msg=\"fine\"\n"), None);
        assert_eq!(
            last_error("E1207 level=error boom").as_deref(),
            Some("E1207 level=error boom")
        );
    }
}
