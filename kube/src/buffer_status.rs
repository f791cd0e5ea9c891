//! CapacityBuffer status, as the upstream buffer controller and autoscaler
//! write it (`replicas`, `podTemplateRef`, `podTemplateGeneration`,
//! `provisioningStrategy`, the `ReadyForProvisioning` and `Provisioning`
//! conditions): one conditional merge patch of the status subresource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{json, Value};

use crate::write::{
    jiff_now, merged_conditions, patch_status_read_first, ConditionWriteError, PublishOutcome,
};

/// A buffer's status as Accord writes it (the core's one type).
pub use accord::conditions::BufferStatus;

/// The merge patch that makes `buffer`'s status show `want` (other status
/// fields and conditions of other types stay as they are), or `None` when
/// it already does. Pure.
pub fn buffer_status_patch(
    buffer: &DynamicObject,
    want: &BufferStatus,
    now: Time,
) -> Option<Value> {
    let (conditions, mut changed) = merged_conditions(buffer, &want.conditions, now);
    let status = &buffer.data["status"];
    let fields = [
        ("replicas", want.replicas.map(Value::from)),
        (
            "podTemplateRef",
            want.pod_template.as_ref().map(|n| json!({ "name": n })),
        ),
        (
            "podTemplateGeneration",
            want.pod_template_generation.map(Value::from),
        ),
        (
            "provisioningStrategy",
            want.strategy.as_ref().map(|s| Value::from(s.as_str())),
        ),
    ];
    let mut patch = json!({ "conditions": conditions });
    for (key, value) in fields {
        let now_shown = status.get(key).filter(|v| !v.is_null());
        if now_shown != value.as_ref() {
            changed = true;
        }
        // A merge patch's null removes the field.
        patch[key] = value.unwrap_or(Value::Null);
    }
    if !changed {
        return None;
    }
    let mut metadata = json!({});
    if let Some(rv) = &buffer.metadata.resource_version {
        metadata["resourceVersion"] = Value::from(rv.as_str());
    }
    Some(json!({ "metadata": metadata, "status": patch }))
}

/// Writes `want` to the status of CapacityBuffer `namespace/name` (read at
/// `api_version`), conditional on the resourceVersion read; a conflict is
/// read and worked out again, up to [`crate::write::CONDITION_WRITE_ATTEMPTS`] times.
pub async fn set_buffer_status(
    client: &kube::Client,
    api_version: &str,
    namespace: &str,
    name: &str,
    want: &BufferStatus,
) -> Result<PublishOutcome, ConditionWriteError> {
    let version = api_version
        .strip_prefix("autoscaling.x-k8s.io/")
        .unwrap_or("v1beta1");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.x-k8s.io", version, "CapacityBuffer"),
        "capacitybuffers",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    patch_status_read_first(&api, name, |current| {
        buffer_status_patch(current, want, Time(jiff_now()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::ProvisioningCondition;

    fn cond(type_: &str, status: bool, reason: &str) -> ProvisioningCondition {
        ProvisioningCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn the_patch_sets_what_differs_and_nothing_once_shown() {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "b", "namespace": "ml", "resourceVersion": "7", "generation": 2},
            "spec": {"podTemplateRef": {"name": "gpu"}, "replicas": 2},
            "status": {"conditions": [{"type": "Other", "status": "True", "reason": "X",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let want = BufferStatus {
            replicas: Some(2),
            pod_template: Some("gpu".into()),
            pod_template_generation: Some(1),
            strategy: Some("buffer.x-k8s.io/active-capacity".into()),
            conditions: vec![
                cond("ReadyForProvisioning", true, "Resolved"),
                cond("Provisioning", false, "RequiresNewCapacity"),
            ],
        };
        let now = Time(jiff_now());
        let patch = buffer_status_patch(&obj, &want, now.clone()).unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let st = &patch["status"];
        assert_eq!(st["replicas"], 2);
        assert_eq!(st["podTemplateRef"]["name"], "gpu");
        assert_eq!(st["podTemplateGeneration"], 1);
        let types: Vec<&str> = st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Other", "ReadyForProvisioning", "Provisioning"]);
        assert_eq!(st["conditions"][2]["observedGeneration"], 2);
        // Applied: nothing more to write.
        obj.data["status"] = st.clone();
        assert!(buffer_status_patch(&obj, &want, now.clone()).is_none());
        // Unresolved: replicas and the template are removed.
        let gone = BufferStatus {
            conditions: want.conditions.clone(),
            strategy: want.strategy.clone(),
            ..BufferStatus::default()
        };
        let patch = buffer_status_patch(&obj, &gone, now).unwrap();
        assert!(patch["status"]["replicas"].is_null());
        assert!(patch["status"]["podTemplateRef"].is_null());
    }
}
