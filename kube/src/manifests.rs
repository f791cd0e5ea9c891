//! Kubernetes manifests (multi-document YAML, `List`s included) read into
//! typed objects. Kinds Accord plans from are decoded with k8s-openapi's
//! types for the newest API it offers (DRA's `resource.k8s.io/v1beta2` and
//! `v1beta1` objects are converted to v1 first: [`dra_as_v1`], also used
//! for what the watchers read at those versions); CRDs it needs (JobSet, the
//! coscheduling PodGroup, ProvisioningRequest) with small local types.
//! Versions it does not model are kept as "unsupported" (said once per
//! version and kind), objects that do not decode as "invalid" with the
//! reason; neither stops the rest.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate, PodTemplateSpec};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

mod queues;
pub use queues::*;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}:{line}:{column}: {message}")]
    Yaml {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
}

/// JobSet (`jobset.x-k8s.io/v1alpha2`): only what planning needs.
#[derive(Debug, Clone, Deserialize)]
pub struct JobSet {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: JobSetSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReplicatedJob {
    pub name: String,
    #[serde(default = "one")]
    pub replicas: i32,
    pub template: JobTemplate,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JobTemplate {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: k8s_openapi::api::batch::v1::JobSpec,
}

fn one() -> i32 {
    1
}

/// The coscheduling plugin's PodGroup (`scheduling.x-k8s.io/v1alpha1`).
#[derive(Debug, Clone, Deserialize)]
pub struct CoschedPodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CoschedSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoschedSpec {
    pub min_member: Option<i32>,
}

/// ProvisioningRequest (`autoscaling.x-k8s.io/v1`).
#[derive(Debug, Clone, Deserialize)]
pub struct ProvisioningRequest {
    /// `autoscaling.x-k8s.io/v1` or `v1beta1`: written back at the same.
    #[serde(default, rename = "apiVersion")]
    pub api_version: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: ProvisioningRequestSpec,
    #[serde(default)]
    pub status: ProvisioningRequestStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProvisioningRequestStatus {
    #[serde(default)]
    pub conditions: Vec<ProvisioningRequestCondition>,
}

/// One status condition (`Accepted`, `Provisioned`, `Failed`,
/// `BookingExpired`, `CapacityRevoked`).
#[derive(Debug, Clone, Deserialize)]
pub struct ProvisioningRequestCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, rename = "lastTransitionTime")]
    pub last_transition_time: Option<String>,
}

impl ProvisioningRequest {
    /// The `apiVersion` it was read at (`autoscaling.x-k8s.io/v1` when
    /// none was given).
    pub fn api_version(&self) -> &str {
        if self.api_version.is_empty() {
            "autoscaling.x-k8s.io/v1"
        } else {
            &self.api_version
        }
    }

    /// `parameters.noRetry: "true"`: when the capacity is not found the
    /// request fails rather than waits (cluster-autoscaler's
    /// `NoRetryParameterKey`; Kueue then retries with backoff).
    pub fn no_retry(&self) -> bool {
        self.spec.parameters.get("noRetry").map(String::as_str) == Some("true")
    }

    /// Whether condition `type_` is True.
    pub fn is(&self, type_: &str) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    }

    /// Provisioned, failed or expired: no longer demand (Provisioned
    /// capacity is held by the control loop for its booking time).
    pub fn settled(&self) -> bool {
        self.is("Provisioned") || self.is("Failed") || self.is("BookingExpired")
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpec {
    pub provisioning_class_name: String,
    #[serde(default)]
    pub pod_sets: Vec<ProvisioningPodSet>,
    #[serde(default)]
    pub parameters: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningPodSet {
    pub pod_template_ref: NameRef,
    pub count: i32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NameRef {
    pub name: String,
}

/// CapacityBuffer (`autoscaling.x-k8s.io/v1beta1` or `v1alpha1`, the same
/// shape: SIG Autoscaling's API as cluster-autoscaler's
/// `apis/capacitybuffer` and Karpenter's `pkg/apis/autoscaling` define it).
#[derive(Debug, Clone, Deserialize)]
pub struct CapacityBuffer {
    /// Written back at the version it was read at.
    #[serde(default, rename = "apiVersion")]
    pub api_version: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CapacityBufferSpec,
    #[serde(default)]
    pub status: CapacityBufferStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    #[serde(default)]
    pub provisioning_strategy: Option<String>,
    #[serde(default)]
    pub pod_template_ref: Option<NameRef>,
    #[serde(default)]
    pub scalable_ref: Option<ScalableRef>,
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default)]
    pub percentage: Option<i64>,
    /// Resource name → quantity (kept as written; parsed where used).
    #[serde(default)]
    pub limits: Option<std::collections::BTreeMap<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    #[serde(default)]
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default)]
    pub pod_template_ref: Option<NameRef>,
    #[serde(default)]
    pub pod_template_generation: Option<i64>,
    #[serde(default)]
    pub provisioning_strategy: Option<String>,
    #[serde(default)]
    pub conditions: Vec<ProvisioningRequestCondition>,
}

impl CapacityBuffer {
    /// The `apiVersion` it was read at (`autoscaling.x-k8s.io/v1beta1`
    /// when none was given).
    pub fn api_version(&self) -> &str {
        if self.api_version.is_empty() {
            "autoscaling.x-k8s.io/v1beta1"
        } else {
            &self.api_version
        }
    }
}

/// One object Accord reads.
#[derive(Debug, Clone)]
pub enum Object {
    Pod(Box<Pod>),
    PodTemplate(Box<PodTemplate>),
    Job(Box<Job>),
    Deployment(Box<Deployment>),
    DaemonSet(Box<DaemonSet>),
    JobSet(Box<JobSet>),
    ResourceClaim(Box<ResourceClaim>),
    ResourceClaimTemplate(Box<ResourceClaimTemplate>),
    DeviceClass(Box<DeviceClass>),
    PodGroup(Box<PodGroup>),
    Workload(Box<Workload>),
    CoschedPodGroup(Box<CoschedPodGroup>),
    VolcanoPodGroup(Box<VolcanoPodGroup>),
    KaiPodGroup(Box<KaiPodGroup>),
    KueueWorkload(Box<KueueWorkload>),
    KueueLocalQueue(Box<KueueLocalQueue>),
    KueueClusterQueue(Box<KueueClusterQueue>),
    KueueResourceFlavor(Box<KueueResourceFlavor>),
    KueueTopology(Box<KueueTopology>),
    ProvisioningRequest(Box<ProvisioningRequest>),
    CapacityBuffer(Box<CapacityBuffer>),
    Node(Box<Node>),
    PersistentVolumeClaim(Box<k8s_openapi::api::core::v1::PersistentVolumeClaim>),
    PersistentVolume(Box<k8s_openapi::api::core::v1::PersistentVolume>),
    StorageClass(Box<k8s_openapi::api::storage::v1::StorageClass>),
    CSINode(Box<k8s_openapi::api::storage::v1::CSINode>),
    Namespace(Box<k8s_openapi::api::core::v1::Namespace>),
}

/// What a set of manifests holds.
#[derive(Debug, Default)]
pub struct Manifests {
    pub objects: Vec<Object>,
    /// `apiVersion kind` Accord does not model, once each.
    pub unsupported: Vec<String>,
    /// Objects that did not decode: where and why.
    pub invalid: Vec<String>,
    /// Kinds read past (Namespace, ClusterQueue, …): kind → count.
    pub ignored: std::collections::BTreeMap<String, usize>,
}

use accord::yaml::flow_too_deep;
pub use accord::yaml::MAX_FLOW_NESTING;

impl Manifests {
    /// Reads `text` (from `file`): YAML documents separated by `---`.
    pub fn parse(text: &str, file: &str) -> Result<Manifests, ManifestError> {
        // Before the YAML parser: libyaml's scanner takes time quadratic
        // in flow nesting (100,000 `[` took a minute), and the
        // deserializer refuses past 128 levels anyway.
        if let Some((line, column)) = flow_too_deep(text, MAX_FLOW_NESTING) {
            return Err(ManifestError::Yaml {
                file: file.to_owned(),
                line,
                column,
                message: format!("flow collections nested deeper than {MAX_FLOW_NESTING} levels"),
            });
        }
        let mut m = Manifests::default();
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            // A key named twice in one mapping is refused (a plain Value
            // keeps the last; Go's yaml.v3, which kubectl reads with,
            // refuses it too: "mapping key ... already defined").
            let value = accord::json::UniqueValue::deserialize(doc)
                .map(|v| v.0)
                .map_err(|e| {
                    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
                    ManifestError::Yaml {
                        file: file.to_owned(),
                        line,
                        column,
                        message: e.to_string(),
                    }
                })?;
            m.add(value, &format!("{file} document {}", i + 1));
        }
        Ok(m)
    }

    /// Adds what another set of manifests holds (claims in one file may
    /// serve pods in another); unsupported versions stay said once.
    pub fn extend(&mut self, other: Manifests) {
        self.objects.extend(other.objects);
        for u in other.unsupported {
            if !self.unsupported.contains(&u) {
                self.unsupported.push(u);
            }
        }
        self.invalid.extend(other.invalid);
        for (k, n) in other.ignored {
            *self.ignored.entry(k).or_default() += n;
        }
    }

    /// Adds one decoded object (a `List`'s items each).
    pub fn add(&mut self, value: Value, at: &str) {
        if value.is_null() {
            return;
        }
        let api = value["apiVersion"].as_str().unwrap_or("").to_owned();
        let kind = value["kind"].as_str().unwrap_or("").to_owned();
        if kind == "List" || kind.ends_with("List") && value.get("items").is_some() {
            if let Some(items) = value.get("items").and_then(Value::as_array) {
                for (j, item) in items.iter().enumerate() {
                    self.add(item.clone(), &format!("{at} item {}", j + 1));
                }
            }
            return;
        }
        let name = object_name(&value);
        // 1.35's gangs as 1.36's (`workload_ref`): a Workload's pod groups
        // as PodGroups, a pod's workloadRef as its schedulingGroup.
        if (api.as_str(), kind.as_str()) == (crate::workload_ref::WORKLOAD_V1ALPHA1, "Workload") {
            for (j, group) in crate::workload_ref::workload_pod_groups(&value)
                .into_iter()
                .enumerate()
            {
                self.add(group, &format!("{at} pod group {}", j + 1));
            }
            return;
        }
        // DRA's beta versions are read as v1 (v1beta2: the same shape;
        // v1beta1: converted).
        let value = dra_as_v1(value);
        let result = match (api.as_str(), kind.as_str()) {
            ("v1", "Pod") => {
                decode(crate::workload_ref::pod_as_scheduling_group(value)).map(Object::Pod)
            }
            ("v1", "PodTemplate") => decode(value).map(Object::PodTemplate),
            ("v1", "Node") => decode(value).map(Object::Node),
            ("v1", "Namespace") => decode(value).map(Object::Namespace),
            ("v1", "PersistentVolumeClaim") => decode(value).map(Object::PersistentVolumeClaim),
            ("v1", "PersistentVolume") => decode(value).map(Object::PersistentVolume),
            ("storage.k8s.io/v1", "StorageClass") => decode(value).map(Object::StorageClass),
            ("storage.k8s.io/v1", "CSINode") => decode(value).map(Object::CSINode),
            ("batch/v1", "Job") => decode(value).map(Object::Job),
            ("apps/v1", "Deployment") => decode(value).map(Object::Deployment),
            ("apps/v1", "DaemonSet") => decode(value).map(Object::DaemonSet),
            ("jobset.x-k8s.io/v1alpha2", "JobSet") => decode(value).map(Object::JobSet),
            // Converted to v1 above.
            (DRA_V1 | DRA_V1BETA2 | DRA_V1BETA1, "ResourceClaim") => {
                decode(value).map(Object::ResourceClaim)
            }
            (DRA_V1 | DRA_V1BETA2 | DRA_V1BETA1, "ResourceClaimTemplate") => {
                decode(value).map(Object::ResourceClaimTemplate)
            }
            (DRA_V1 | DRA_V1BETA2 | DRA_V1BETA1, "DeviceClass") => {
                decode(value).map(Object::DeviceClass)
            }
            ("scheduling.k8s.io/v1beta1", "PodGroup") => decode(value).map(Object::PodGroup),
            // 1.36's v1alpha2 and 1.37's v1alpha3: what Accord reads
            // (gang minCount, topology, priority, resourceClaims) has
            // v1beta1's shape.
            ("scheduling.k8s.io/v1alpha2" | "scheduling.k8s.io/v1alpha3", "PodGroup") => {
                decode(pod_group_as_v1beta1(value)).map(Object::PodGroup)
            }
            ("scheduling.k8s.io/v1beta1", "Workload") => decode(value).map(Object::Workload),
            ("scheduling.x-k8s.io/v1alpha1", "PodGroup") => {
                decode(value).map(Object::CoschedPodGroup)
            }
            ("scheduling.volcano.sh/v1beta1", "PodGroup") => {
                decode(value).map(Object::VolcanoPodGroup)
            }
            ("scheduling.run.ai/v2alpha2", "PodGroup") => decode(value).map(Object::KaiPodGroup),
            // v1beta2 is what Kueue ≥ 0.15 stores; v1beta1 has the same
            // shape for what Accord reads (a ClusterQueue's `cohort` is
            // taken as `cohortName`).
            (KUEUE_V1BETA2 | KUEUE_V1BETA1, "Workload") => decode(value).map(Object::KueueWorkload),
            (KUEUE_V1BETA2 | KUEUE_V1BETA1, "LocalQueue") => {
                decode(value).map(Object::KueueLocalQueue)
            }
            (KUEUE_V1BETA2 | KUEUE_V1BETA1, "ClusterQueue") => {
                decode(value).map(Object::KueueClusterQueue)
            }
            (KUEUE_V1BETA2 | KUEUE_V1BETA1, "ResourceFlavor") => {
                decode(value).map(Object::KueueResourceFlavor)
            }
            (KUEUE_V1BETA2 | KUEUE_V1BETA1, "Topology") => decode(value).map(Object::KueueTopology),
            // v1beta1 has the same shape as v1 (cluster-autoscaler's
            // apis/provisioningrequest serves both).
            ("autoscaling.x-k8s.io/v1" | "autoscaling.x-k8s.io/v1beta1", "ProvisioningRequest") => {
                decode(value).map(Object::ProvisioningRequest)
            }
            (
                "autoscaling.x-k8s.io/v1beta1" | "autoscaling.x-k8s.io/v1alpha1",
                "CapacityBuffer",
            ) => decode(value).map(Object::CapacityBuffer),
            (
                _,
                "Pod"
                | "ResourceClaim"
                | "ResourceClaimTemplate"
                | "DeviceClass"
                | "PodGroup"
                | "Workload"
                | "ProvisioningRequest"
                | "CapacityBuffer"
                | "JobSet"
                | "Job",
            ) => {
                let key = format!("{api} {kind}");
                if !self.unsupported.contains(&key) {
                    self.unsupported.push(key);
                }
                return;
            }
            _ => {
                *self
                    .ignored
                    .entry(if kind.is_empty() {
                        "(no kind)".to_owned()
                    } else {
                        kind
                    })
                    .or_default() += 1;
                return;
            }
        };
        match result {
            Ok(o) => self.objects.push(o),
            Err(e) => self.invalid.push(format!("{at} ({kind} {name}): {e}")),
        }
    }
}

/// `kueue.x-k8s.io` versions Accord reads: what Kueue v0.15+ stores, and
/// the one it serves beside it.
pub const KUEUE_V1BETA2: &str = "kueue.x-k8s.io/v1beta2";
pub const KUEUE_V1BETA1: &str = "kueue.x-k8s.io/v1beta1";

/// `resource.k8s.io` versions Accord reads, best first: v1 (Kubernetes
/// 1.34+), v1beta2 (1.33) and v1beta1 (1.32), the betas converted to v1.
pub const DRA_V1: &str = "resource.k8s.io/v1";
pub const DRA_V1BETA2: &str = "resource.k8s.io/v1beta2";
pub const DRA_V1BETA1: &str = "resource.k8s.io/v1beta1";
pub const DRA_VERSIONS: [&str; 3] = [DRA_V1, DRA_V1BETA2, DRA_V1BETA1];

/// A DRA object (ResourceClaim, ResourceClaimTemplate, DeviceClass,
/// ResourceSlice) at `resource.k8s.io/v1beta2` or `v1beta1` in
/// `resource.k8s.io/v1`'s shape, `apiVersion` included: v1beta2 has it
/// already; v1beta1's device requests move their fields under `exactly`
/// (unless they are `firstAvailable` requests, which have v1's shape), and
/// its slices' devices lose the `basic` level. Anything else (another
/// version or kind, or not an object) comes back as it was. Never fails:
/// what does not have the expected shape is left for decoding to refuse.
pub fn dra_as_v1(mut value: Value) -> Value {
    let api = value["apiVersion"].as_str().unwrap_or("");
    if api != DRA_V1BETA2 && api != DRA_V1BETA1 {
        return value;
    }
    let beta1 = api == DRA_V1BETA1;
    let kind = value["kind"].as_str().unwrap_or("").to_owned();
    let Some(object) = value.as_object_mut() else {
        return value;
    };
    object.insert("apiVersion".into(), Value::from(DRA_V1));
    if !beta1 {
        return value;
    }
    match kind.as_str() {
        "ResourceClaim" => claim_spec_to_v1(value.pointer_mut("/spec")),
        "ResourceClaimTemplate" => claim_spec_to_v1(value.pointer_mut("/spec/spec")),
        "ResourceSlice" => {
            if let Some(devices) = value
                .pointer_mut("/spec/devices")
                .and_then(Value::as_array_mut)
            {
                for d in devices.iter_mut().filter_map(Value::as_object_mut) {
                    // v1beta1: {name, basic: {attributes, capacity, …}}.
                    if let Some(Value::Object(fields)) = d.remove("basic") {
                        for (k, v) in fields {
                            d.entry(k).or_insert(v);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    value
}

/// v1beta1 device requests → v1: `{name, deviceClassName, selectors,
/// count, …}` becomes `{name, exactly: {deviceClassName, selectors, count,
/// …}}`; a `firstAvailable` request is already v1's shape.
fn claim_spec_to_v1(spec: Option<&mut Value>) {
    let Some(requests) = spec
        .and_then(|s| s.pointer_mut("/devices/requests"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for r in requests.iter_mut().filter_map(Value::as_object_mut) {
        if r.contains_key("firstAvailable") || r.contains_key("exactly") {
            continue;
        }
        let fields: Vec<String> = r.keys().filter(|k| *k != "name").cloned().collect();
        let exactly: serde_json::Map<String, Value> = fields
            .into_iter()
            .filter_map(|k| r.remove(&k).map(|v| (k, v)))
            .collect();
        r.insert("exactly".into(), Value::Object(exactly));
    }
}

fn object_name(v: &Value) -> String {
    let ns = v["metadata"]["namespace"].as_str();
    let name = v["metadata"]["name"]
        .as_str()
        .or_else(|| v["metadata"]["generateName"].as_str())
        .unwrap_or("?");
    match ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// A `scheduling.k8s.io` v1alpha2 or v1alpha3 PodGroup as v1beta1: the
/// fields Accord reads, whose shape the versions share; the others
/// (`disruptionMode`, a string in v1alpha2, a struct in v1beta1;
/// template references) are left out.
pub fn pod_group_as_v1beta1(mut value: Value) -> Value {
    const KEPT: [&str; 5] = [
        "schedulingPolicy",
        "schedulingConstraints",
        "priority",
        "priorityClassName",
        "resourceClaims",
    ];
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        spec.retain(|k, _| KEPT.contains(&k.as_str()));
    }
    value["apiVersion"] = "scheduling.k8s.io/v1beta1".into();
    value
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<Box<T>, serde_json::Error> {
    serde_json::from_value(v).map(Box::new)
}

/// A pod template, whatever carried it.
pub fn template_of(t: &PodTemplate) -> Option<&PodTemplateSpec> {
    t.template.as_ref()
}
