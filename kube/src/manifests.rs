//! Kubernetes manifests (multi-document YAML, `List`s included) read into
//! typed objects. Kinds Accord plans from are decoded with k8s-openapi's
//! types for the newest API it offers; CRDs it needs (JobSet, the
//! coscheduling PodGroup, ProvisioningRequest) with small local types.
//! Versions it does not model are kept as "unsupported" (said once per
//! version and kind), objects that do not decode as "invalid" with the
//! reason; neither stops the rest.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate, PodTemplateSpec};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

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

/// One object Accord reads.
#[derive(Debug, Clone)]
pub enum Object {
    Pod(Box<Pod>),
    PodTemplate(Box<PodTemplate>),
    Job(Box<Job>),
    Deployment(Box<Deployment>),
    JobSet(Box<JobSet>),
    ResourceClaim(Box<ResourceClaim>),
    ResourceClaimTemplate(Box<ResourceClaimTemplate>),
    DeviceClass(Box<DeviceClass>),
    PodGroup(Box<PodGroup>),
    Workload(Box<Workload>),
    CoschedPodGroup(Box<CoschedPodGroup>),
    ProvisioningRequest(Box<ProvisioningRequest>),
    Node(Box<Node>),
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

impl Manifests {
    /// Reads `text` (from `file`): YAML documents separated by `---`.
    pub fn parse(text: &str, file: &str) -> Result<Manifests, ManifestError> {
        let mut m = Manifests::default();
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(doc).map_err(|e| {
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
        let mut value = value;
        if api == "resource.k8s.io/v1beta2" {
            // Same shape as v1: read as v1.
            value["apiVersion"] = Value::from("resource.k8s.io/v1");
        }
        let result = match (api.as_str(), kind.as_str()) {
            ("v1", "Pod") => decode(value).map(Object::Pod),
            ("v1", "PodTemplate") => decode(value).map(Object::PodTemplate),
            ("v1", "Node") => decode(value).map(Object::Node),
            ("batch/v1", "Job") => decode(value).map(Object::Job),
            ("apps/v1", "Deployment") => decode(value).map(Object::Deployment),
            ("jobset.x-k8s.io/v1alpha2", "JobSet") => decode(value).map(Object::JobSet),
            // v1beta2 has v1's shape (exactly / firstAvailable).
            ("resource.k8s.io/v1" | "resource.k8s.io/v1beta2", "ResourceClaim") => {
                decode(value).map(Object::ResourceClaim)
            }
            ("resource.k8s.io/v1" | "resource.k8s.io/v1beta2", "ResourceClaimTemplate") => {
                decode(value).map(Object::ResourceClaimTemplate)
            }
            ("resource.k8s.io/v1" | "resource.k8s.io/v1beta2", "DeviceClass") => {
                decode(value).map(Object::DeviceClass)
            }
            ("scheduling.k8s.io/v1beta1", "PodGroup") => decode(value).map(Object::PodGroup),
            ("scheduling.k8s.io/v1beta1", "Workload") => decode(value).map(Object::Workload),
            ("scheduling.x-k8s.io/v1alpha1", "PodGroup") => {
                decode(value).map(Object::CoschedPodGroup)
            }
            ("autoscaling.x-k8s.io/v1", "ProvisioningRequest") => {
                decode(value).map(Object::ProvisioningRequest)
            }
            (
                _,
                "Pod"
                | "ResourceClaim"
                | "ResourceClaimTemplate"
                | "DeviceClass"
                | "PodGroup"
                | "Workload"
                | "ProvisioningRequest"
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

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<Box<T>, serde_json::Error> {
    serde_json::from_value(v).map(Box::new)
}

/// A pod template, whatever carried it.
pub fn template_of(t: &PodTemplate) -> Option<&PodTemplateSpec> {
    t.template.as_ref()
}
