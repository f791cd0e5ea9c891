//! An in-repo Kubernetes API server for tests and the local lab: real HTTP,
//! list and watch with the API server's semantics — a global
//! resourceVersion, `limit`/`continue` chunked lists, watches that replay
//! from a resourceVersion then stream (chunked JSON lines), bookmarks, and
//! `410 Gone` (an ERROR event with an Expired Status) for a watch from a
//! compacted version, after which clients re-list. Faults for the lab's
//! chaos runs: every open watch stream cut off mid-stream
//! ([`FakeApi::drop_watches`]), history compacted so resuming watches get
//! 410 Gone ([`FakeApi::compact`]), writes answered late
//! ([`FakeApi::slow_writes`]). It serves get, create,
//! replace, merge patch (also for `/status`, where they change only the
//! status) and delete, for the resources Accord reads and writes; a
//! `metadata.resourceVersion` in a patch or replace (of the object or its
//! status) must be the stored one (else `409 Conflict`). A test can make
//! another writer's change land just before a write
//! ([`FakeApi::change_before_next_write`]). It is not a
//! validating server: objects are stored as given, and an object stored
//! at one version of a group is not converted to the others.
//!
//! It serves the API set of a chosen Kubernetes version ([`KubeVersion`],
//! [`resources_for`]) and answers discovery for exactly that set, as a
//! real API server does: `/version`; `/api` (`APIVersions`) and `/apis`
//! (`APIGroupList` with each group's preferred version), or, when the
//! client accepts `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`,
//! aggregated discovery (`APIGroupDiscoveryList`); `/api/v1` and
//! `/apis/GROUP/VERSION` (`APIResourceList`: name, singularName,
//! namespaced, kind, verbs, status subresources); `/apis/GROUP`
//! (`APIGroup`); and a `404` `NotFound` Status for any group, version or
//! resource not in the set.
//!
//! Several clients (accordd replicas electing a leader on a Lease) can
//! share one server and still be told apart: [`FakeApi::listen_tagged`]
//! serves the same state on another loopback listener whose requests are
//! recorded with a tag ([`FakeApi::requests_from`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::broadcast;

/// One resource the server knows.
#[derive(Debug, Clone)]
pub struct ResourceSpec {
    /// `/api/v1` or `/apis/GROUP/VERSION`.
    pub prefix: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

impl ResourceSpec {
    fn api_version(&self) -> &'static str {
        self.prefix
            .strip_prefix("/apis/")
            .or_else(|| self.prefix.strip_prefix("/api/"))
            .unwrap_or(self.prefix)
    }

    /// The API group (`""` for the core group).
    fn group(&self) -> &'static str {
        match self.prefix.strip_prefix("/apis/") {
            Some(gv) => gv.split_once('/').map_or(gv, |(g, _)| g),
            None => "",
        }
    }

    /// The version within the group (`v1`, `v1beta2`).
    fn version(&self) -> &'static str {
        let gv = self.api_version();
        gv.rsplit_once('/').map_or(gv, |(_, v)| v)
    }

    /// The subresources a real server lists for it in discovery.
    fn subresources(&self) -> &'static [&'static str] {
        match (self.group(), self.plural) {
            ("", "pods") => &["status", "binding", "eviction", "log"],
            ("", "nodes" | "namespaces" | "persistentvolumeclaims" | "persistentvolumes") => {
                &["status"]
            }
            ("batch", "jobs") | ("resource.k8s.io", "resourceclaims") => &["status"],
            ("apps", "daemonsets") => &["status"],
            ("apps", "deployments") => &["status", "scale"],
            // Volcano's PodGroup CRD declares no subresource
            // (config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml).
            ("scheduling.volcano.sh", "podgroups") => &[],
            // Kueue's CRDs (config/components/crd/bases, v0.17): status on
            // these three; ResourceFlavor and Topology have none.
            ("kueue.x-k8s.io", "workloads" | "clusterqueues" | "localqueues") => &["status"],
            ("nvidia.com", "clusterpolicies") => &["status"],
            // Upstream's Workload (scheduling.k8s.io, 1.37) has no status.
            (_, "podgroups" | "jobsets" | "provisioningrequests" | "capacitybuffers") => {
                &["status"]
            }
            _ => &[],
        }
    }
}

/// A Kubernetes minor version whose API set the fake server can serve:
/// the built-in groups and versions Accord reads that a cluster of that
/// version serves by default (plus DRA's beta group where noted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KubeVersion {
    V1_31,
    V1_32,
    V1_33,
    V1_34,
    V1_35,
    V1_36,
    V1_37,
}

impl KubeVersion {
    /// The newest version (today's default set).
    pub const NEWEST: KubeVersion = KubeVersion::V1_37;
    /// Every version, oldest first.
    pub const ALL: [KubeVersion; 7] = [
        KubeVersion::V1_31,
        KubeVersion::V1_32,
        KubeVersion::V1_33,
        KubeVersion::V1_34,
        KubeVersion::V1_35,
        KubeVersion::V1_36,
        KubeVersion::V1_37,
    ];

    /// The minor version number (31 for 1.31).
    pub fn minor(self) -> u32 {
        match self {
            KubeVersion::V1_31 => 31,
            KubeVersion::V1_32 => 32,
            KubeVersion::V1_33 => 33,
            KubeVersion::V1_34 => 34,
            KubeVersion::V1_35 => 35,
            KubeVersion::V1_36 => 36,
            KubeVersion::V1_37 => 37,
        }
    }

    /// `"1.31"` or `"v1.31"` (a patch level, `1.31.4`, is accepted and
    /// dropped).
    pub fn parse(text: &str) -> Result<KubeVersion, String> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let (major, minor) = (parts.next(), parts.next());
        let patch_ok = match parts.next() {
            None => true,
            Some(p) => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()),
        };
        if major == Some("1") && patch_ok && parts.next().is_none() {
            if let Some(v) = minor
                .and_then(|m| m.parse::<u32>().ok())
                .and_then(|m| KubeVersion::ALL.into_iter().find(|v| v.minor() == m))
            {
                return Ok(v);
            }
        }
        Err(format!(
            "unknown Kubernetes version {text:?}: expected one of {}",
            KubeVersion::ALL.map(|v| v.to_string()).join(", ")
        ))
    }

    /// The `resource.k8s.io` version (as `apiVersion`) Accord would read
    /// DRA objects at: the newest the server serves. `None` for 1.31 (only
    /// `v1alpha3`, off by default). 1.32 (`v1beta1`) and 1.33 (`v1beta2`,
    /// with `v1beta1` beside it) serve DRA only on a cluster with the
    /// feature enabled (the `DynamicResourceAllocation` gate and the beta
    /// API in `--runtime-config`); the fake serves those versions as such
    /// a cluster does. From 1.34 `resource.k8s.io/v1` is on by default.
    pub fn dra_api_version(self) -> Option<&'static str> {
        match self {
            KubeVersion::V1_31 => None,
            KubeVersion::V1_32 => Some("resource.k8s.io/v1beta1"),
            KubeVersion::V1_33 => Some("resource.k8s.io/v1beta2"),
            _ => Some("resource.k8s.io/v1"),
        }
    }

    /// Whether `scheduling.k8s.io/v1beta1` (PodGroup and Workload) can be
    /// served: 1.37 and later, where an admin turns it on
    /// (`--runtime-config scheduling.k8s.io/v1beta1=true`, with the
    /// `GenericWorkload` gate): a beta API introduced after 1.24, it is off
    /// by default, as kube-apiserver v1.37.2 shows
    /// (testkit/tests/it/fake_api_discovery.rs).
    pub fn can_serve_pod_group_v1beta1(self) -> bool {
        self >= KubeVersion::V1_37
    }
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "1.{}", self.minor())
    }
}

impl std::str::FromStr for KubeVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<KubeVersion, String> {
        KubeVersion::parse(s)
    }
}

/// The resources Accord reads and writes: the newest Kubernetes with the
/// CRDs installed and gang scheduling's API turned on
/// (`resources_with(KubeVersion::NEWEST, true, &["scheduling.k8s.io/v1beta1=true"])`),
/// the cluster most tests want. [`FakeApi::start_version`] serves a
/// version's defaults instead.
pub fn default_resources() -> Vec<ResourceSpec> {
    resources_with(KubeVersion::NEWEST, true, &[GANG_RUNTIME_CONFIG])
        .expect("the newest version serves scheduling.k8s.io/v1beta1 when turned on")
}

/// The `--runtime-config` entry that turns on scheduling.k8s.io/v1beta1
/// PodGroups and Workloads (with the `GenericWorkload` gate).
pub const GANG_RUNTIME_CONFIG: &str = "scheduling.k8s.io/v1beta1=true";

/// The resources a cluster of version `v` serves among those Accord reads
/// and writes (and PriorityClass, so `scheduling.k8s.io` is a group on
/// every version, as on a real server), and `coordination.k8s.io/v1`
/// Leases (accordd's leader election; served by every version); `crds`:
/// the x-k8s.io CRDs (coscheduling PodGroup, ProvisioningRequest, JobSet)
/// and Accord's own (`accord.dev/v1alpha1` AccordNode, namespaced: the
/// replicas' shared state, deploy/crd-accordnode.yaml) are installed.
pub fn resources_for(v: KubeVersion, crds: bool) -> Vec<ResourceSpec> {
    let r = |prefix, plural, kind, namespaced| ResourceSpec {
        prefix,
        plural,
        kind,
        namespaced,
    };
    let mut out = vec![
        r("/api/v1", "pods", "Pod", true),
        r("/api/v1", "nodes", "Node", false),
        r("/api/v1", "podtemplates", "PodTemplate", true),
        r("/api/v1", "configmaps", "ConfigMap", true),
        r("/api/v1", "events", "Event", true),
        r("/api/v1", "namespaces", "Namespace", false),
        r(
            "/api/v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
        ),
        r("/api/v1", "persistentvolumes", "PersistentVolume", false),
        r(
            "/apis/storage.k8s.io/v1",
            "storageclasses",
            "StorageClass",
            false,
        ),
        r("/apis/storage.k8s.io/v1", "csinodes", "CSINode", false),
        r("/apis/events.k8s.io/v1", "events", "Event", true),
        r("/apis/batch/v1", "jobs", "Job", true),
        r("/apis/apps/v1", "deployments", "Deployment", true),
        r("/apis/apps/v1", "daemonsets", "DaemonSet", true),
        r(
            "/apis/scheduling.k8s.io/v1",
            "priorityclasses",
            "PriorityClass",
            false,
        ),
        r("/apis/coordination.k8s.io/v1", "leases", "Lease", true),
    ];
    let dra = |prefix: &'static str| {
        [
            r(prefix, "resourceclaims", "ResourceClaim", true),
            r(
                prefix,
                "resourceclaimtemplates",
                "ResourceClaimTemplate",
                true,
            ),
            r(prefix, "deviceclasses", "DeviceClass", false),
            r(prefix, "resourceslices", "ResourceSlice", false),
        ]
    };
    match v {
        KubeVersion::V1_31 => {}
        KubeVersion::V1_32 => out.extend(dra("/apis/resource.k8s.io/v1beta1")),
        KubeVersion::V1_33 => {
            out.extend(dra("/apis/resource.k8s.io/v1beta2"));
            out.extend(dra("/apis/resource.k8s.io/v1beta1"));
        }
        _ => out.extend(dra("/apis/resource.k8s.io/v1")),
    }
    // DeviceTaintRules: GA and served by default from 1.37 (beta and alpha
    // before, off by default).
    if v >= KubeVersion::V1_37 {
        out.push(r(
            "/apis/resource.k8s.io/v1",
            "devicetaintrules",
            "DeviceTaintRule",
            false,
        ));
    }
    if crds {
        out.push(r(
            "/apis/scheduling.x-k8s.io/v1alpha1",
            "podgroups",
            "PodGroup",
            true,
        ));
        out.push(r(
            "/apis/autoscaling.x-k8s.io/v1",
            "provisioningrequests",
            "ProvisioningRequest",
            true,
        ));
        // Karpenter's CRD (deploy/crd-capacitybuffer.yaml): v1beta1.
        out.push(r(
            "/apis/autoscaling.x-k8s.io/v1beta1",
            "capacitybuffers",
            "CapacityBuffer",
            true,
        ));
        out.push(r(
            "/apis/jobset.x-k8s.io/v1alpha2",
            "jobsets",
            "JobSet",
            true,
        ));
        out.push(r(
            "/apis/accord.dev/v1alpha1",
            "accordnodes",
            "AccordNode",
            true,
        ));
        // Kueue (v0.17: v1beta2 stored, v1beta1 served beside it).
        for prefix in [
            "/apis/kueue.x-k8s.io/v1beta2",
            "/apis/kueue.x-k8s.io/v1beta1",
        ] {
            out.push(r(prefix, "workloads", "Workload", true));
            out.push(r(prefix, "localqueues", "LocalQueue", true));
            out.push(r(prefix, "clusterqueues", "ClusterQueue", false));
            out.push(r(prefix, "resourceflavors", "ResourceFlavor", false));
            out.push(r(prefix, "topologies", "Topology", false));
        }
        out.push(r(
            "/apis/scheduling.volcano.sh/v1beta1",
            "podgroups",
            "PodGroup",
            true,
        ));
        out.push(r(
            "/apis/scheduling.run.ai/v2alpha2",
            "podgroups",
            "PodGroup",
            true,
        ));
        // The GPU Operator's ClusterPolicy (gpu-operator v26,
        // `api/nvidia/v1/clusterpolicy_types.go`: cluster-scoped, status
        // subresource).
        out.push(r(
            "/apis/nvidia.com/v1",
            "clusterpolicies",
            "ClusterPolicy",
            false,
        ));
    }
    out
}

/// What `--runtime-config` entries the fake can play, per version: the
/// group version and the resources it brings.
fn runtime_config_resources(v: KubeVersion, group_version: &str) -> Option<Vec<ResourceSpec>> {
    let r = |prefix, plural, kind| ResourceSpec {
        prefix,
        plural,
        kind,
        namespaced: true,
    };
    match group_version {
        "scheduling.k8s.io/v1beta1" if v.can_serve_pod_group_v1beta1() => Some(vec![
            r("/apis/scheduling.k8s.io/v1beta1", "podgroups", "PodGroup"),
            r("/apis/scheduling.k8s.io/v1beta1", "workloads", "Workload"),
        ]),
        // 1.35's gang API, alpha (with the `GenericWorkload` gate): the
        // Workload, as kube-apiserver v1.35.4 serves it.
        "scheduling.k8s.io/v1alpha1" if v == KubeVersion::V1_35 => Some(vec![r(
            "/apis/scheduling.k8s.io/v1alpha1",
            "workloads",
            "Workload",
        )]),
        // 1.36's gang API, alpha (with the `GenericWorkload` gate), as
        // kube-apiserver v1.36.3 serves it (testkit/tests/it/fake_api_discovery.rs).
        "scheduling.k8s.io/v1alpha2" if v == KubeVersion::V1_36 => Some(vec![
            r("/apis/scheduling.k8s.io/v1alpha2", "podgroups", "PodGroup"),
            r("/apis/scheduling.k8s.io/v1alpha2", "workloads", "Workload"),
        ]),
        _ => None,
    }
}

/// [`resources_for`] with an admin's `--runtime-config` entries applied
/// (`scheduling.k8s.io/v1beta1=true`, `resource.k8s.io/v1=false`): `=true`
/// (or no value) adds a group version the fake can play at `v`, `=false`
/// takes a served one away. An entry it cannot play is an error naming
/// it, never ignored.
pub fn resources_with(
    v: KubeVersion,
    crds: bool,
    runtime_config: &[impl AsRef<str>],
) -> Result<Vec<ResourceSpec>, String> {
    let mut out = resources_for(v, crds);
    for entry in runtime_config {
        let entry = entry.as_ref().trim();
        let (gv, value) = entry.split_once('=').unwrap_or((entry, "true"));
        match value {
            "true" => {
                if out.iter().any(|r| r.api_version() == gv) {
                    continue;
                }
                let more = runtime_config_resources(v, gv).ok_or_else(|| {
                    if gv == "scheduling.k8s.io/v1beta1" {
                        format!(
                            "--runtime-config {entry:?}: Kubernetes {v} has no {gv} (it \
                             arrived in 1.37)"
                        )
                    } else {
                        format!(
                            "--runtime-config {entry:?}: the fake API cannot serve {gv} as \
                             Kubernetes {v} would (it plays scheduling.k8s.io/v1beta1 from \
                             1.37, scheduling.k8s.io/v1alpha2 on 1.36, and turning off a \
                             served version)"
                        )
                    }
                })?;
                out.extend(more);
            }
            "false" => {
                let before = out.len();
                out.retain(|r| r.api_version() != gv);
                if out.len() == before {
                    return Err(format!(
                        "--runtime-config {entry:?}: Kubernetes {v} does not serve {gv} by default"
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "--runtime-config {entry:?}: the value must be true or false"
                ))
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum Event {
    Change {
        rv: u64,
        resource: usize,
        kind: &'static str,
        object: Value,
    },
    /// Every open watch ends (the client reconnects).
    Close,
    /// Every open watch's connection is cut mid-stream (an error in the
    /// body, no clean end): a dropped watch.
    Cut,
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    objects: Vec<BTreeMap<(String, String), Value>>,
    log: Vec<(u64, usize, &'static str, Value)>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
    uid: u64,
    /// Other writers' changes, each made when the next write to its
    /// object arrives ([`FakeApi::change_before_next_write`]).
    interposed: Vec<Interposed>,
    /// Writes still to be answered late, and how late
    /// ([`FakeApi::slow_writes`]).
    slow_writes: Vec<Duration>,
    /// Writes that were answered late.
    writes_slowed: u64,
    /// Watches answered 410 Gone (resuming from a compacted version).
    gone_answered: u64,
    /// Containers' output by pod (namespace, name), as the kubelet would
    /// serve it through `pods/log` ([`FakeApi::append_pod_log`]).
    pod_logs: BTreeMap<(String, String), String>,
}

/// A change to one object (resource, namespace, name) that lands just
/// before the next write to it.
struct Interposed {
    resource: usize,
    key: (String, String),
    change: Box<dyn FnOnce(&mut Value) + Send>,
}

impl std::fmt::Debug for Interposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interposed")
            .field("resource", &self.resource)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Shared {
    resources: Vec<ResourceSpec>,
    inner: Mutex<Inner>,
    events: broadcast::Sender<Event>,
    /// Every request, as `METHOD path?query`, with the tag of the
    /// listener it came in on (`None`: the main one).
    requests: Mutex<Vec<(Option<Arc<str>>, String)>>,
    bookmark_every: Duration,
    /// What `/version` says.
    version: KubeVersion,
    /// Whether `/api` and `/apis` answer aggregated discovery
    /// (`apidiscovery.k8s.io/v2`) when the client asks for it.
    aggregated: AtomicBool,
}

/// What a listener's requests are handled with: the one server state,
/// and the listener's tag ([`FakeApi::listen_tagged`]; `None`: the main
/// listener).
#[derive(Debug, Clone)]
struct Listener {
    shared: Arc<Shared>,
    tag: Option<Arc<str>>,
}

/// A running fake API server; stopped on drop (its tagged listeners too).
#[derive(Debug)]
pub struct FakeApi {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    /// The tagged listeners' server tasks ([`FakeApi::listen_tagged`]).
    tagged: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
        let tagged = self.tagged.get_mut().unwrap_or_else(|e| e.into_inner());
        for task in tagged.drain(..) {
            task.abort();
        }
    }
}

/// Serves `shared` on a free loopback port, requests recorded with `tag`:
/// the base URL and the server's task.
async fn serve(
    shared: Arc<Shared>,
    tag: Option<Arc<str>>,
) -> (String, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(Listener { shared, tag });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

fn now_rfc3339() -> String {
    // Kubernetes `Time`: RFC 3339, whole seconds, UTC.
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn status(code: u16, reason: &str, message: String) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
           "reason": reason, "message": message, "metadata": {}})
}

/// What a real API server answers for a path it does not serve (an
/// unserved group, version or resource).
fn no_such_path() -> Response {
    let mut body = status(
        404,
        "NotFound",
        "the server could not find the requested resource".into(),
    );
    body["details"] = json!({});
    reply(StatusCode::NOT_FOUND, body)
}

fn conflict(plural: &str, name: &str) -> Response {
    let mut body = status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {plural} \"{name}\": the object has been \
             modified; please apply your changes to the latest version and try again"
        ),
    );
    body["details"] = json!({"name": name, "kind": plural});
    reply(StatusCode::CONFLICT, body)
}

/// A request body that is a JSON object whose `metadata`, if any, is an
/// object; else why not (a 400).
fn object_body(body: &[u8]) -> Result<Value, &'static str> {
    let v: Value = serde_json::from_slice(body).map_err(|_| "not JSON")?;
    if !v.is_object() {
        return Err("not a JSON object");
    }
    if !(v["metadata"].is_null() || v["metadata"].is_object()) {
        return Err("metadata: not an object");
    }
    Ok(v)
}

fn bad_request(why: &str) -> Response {
    reply(
        StatusCode::BAD_REQUEST,
        status(400, "BadRequest", why.to_owned()),
    )
}

fn not_found(plural: &str, name: &str) -> Response {
    reply(
        StatusCode::NOT_FOUND,
        status(404, "NotFound", format!("{plural} \"{name}\" not found")),
    )
}

fn reply(code: StatusCode, body: Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Merge patch (RFC 7386): objects merge, null deletes, the rest replaces.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl FakeApi {
    /// Starts on a free loopback port with [`default_resources`].
    pub async fn start() -> FakeApi {
        FakeApi::start_with(default_resources(), Duration::from_millis(500)).await
    }

    /// Starts serving what a cluster of version `v` serves, with the
    /// x-k8s.io CRDs installed: [`resources_for`]`(v, true)`; `/version`
    /// says `v`.
    pub async fn start_version(v: KubeVersion) -> FakeApi {
        FakeApi::start_version_with(v, resources_for(v, true), Duration::from_millis(500)).await
    }

    /// [`FakeApi::start_version`] with an admin's `--runtime-config`
    /// entries ([`resources_with`]); panics on an entry it cannot play.
    pub async fn start_version_config(v: KubeVersion, runtime_config: &[&str]) -> FakeApi {
        let resources = resources_with(v, true, runtime_config).unwrap_or_else(|e| panic!("{e}"));
        FakeApi::start_version_with(v, resources, Duration::from_millis(500)).await
    }

    /// Starts serving `resources` (e.g. [`default_resources`] less a CRD).
    pub async fn start_with(resources: Vec<ResourceSpec>, bookmark_every: Duration) -> FakeApi {
        FakeApi::start_version_with(KubeVersion::NEWEST, resources, bookmark_every).await
    }

    /// Starts serving `resources`, with `/version` saying `version`.
    pub async fn start_version_with(
        version: KubeVersion,
        resources: Vec<ResourceSpec>,
        bookmark_every: Duration,
    ) -> FakeApi {
        let (events, _) = broadcast::channel(65_536);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                objects: vec![BTreeMap::new(); resources.len()],
                rv: 1,
                ..Default::default()
            }),
            resources,
            events,
            requests: Mutex::new(Vec::new()),
            bookmark_every,
            version,
            aggregated: AtomicBool::new(true),
        });
        let (url, task) = serve(shared.clone(), None).await;
        FakeApi {
            url,
            shared,
            task,
            tagged: Mutex::new(Vec::new()),
        }
    }

    /// The same server (the same objects, versions, faults) on another
    /// free loopback port, for one of several clients a test tells apart
    /// (an accordd replica): returns its base URL. Requests arriving on
    /// it are recorded with `tag` ([`FakeApi::requests_from`]) as well as
    /// among [`FakeApi::requests`]. It stops when this `FakeApi` is
    /// dropped.
    pub async fn listen_tagged(&self, tag: &str) -> String {
        let (url, task) = serve(self.shared.clone(), Some(Arc::from(tag))).await;
        self.tagged.lock().expect("lock").push(task);
        url
    }

    /// A kube-rs client for this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("our URL"));
        kube::Client::try_from(config).expect("plain HTTP client")
    }

    fn resource_of(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.shared
            .resources
            .iter()
            .position(|r| r.api_version() == api_version && r.kind == kind)
    }

    /// Creates or replaces an object (by apiVersion, kind, namespace,
    /// name), as a controller or kubectl would. Returns its new
    /// resourceVersion.
    pub fn apply(&self, object: Value) -> u64 {
        let api = object["apiVersion"].as_str().unwrap_or("").to_owned();
        let kind = object["kind"].as_str().unwrap_or("").to_owned();
        let r = self
            .resource_of(&api, &kind)
            .unwrap_or_else(|| panic!("fake API serves no {api} {kind}"));
        let namespaced = self.shared.resources[r].namespaced;
        let ns = if namespaced {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned()
        } else {
            String::new()
        };
        let name = object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        self.shared.put(r, ns, name, object)
    }

    /// Changes an existing object in place under the store's lock (a read
    /// then write that no request can come between, as a PATCH): `change`
    /// gets the stored object. Returns the new resourceVersion, or `None`
    /// when there is no such object.
    pub fn update(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Option<u64> {
        let r = self.resource_of(api_version, kind)?;
        let mut inner = self.shared.inner.lock().expect("lock");
        let key = (namespace.to_owned(), name.to_owned());
        let mut object = inner.objects[r].get(&key)?.clone();
        change(&mut object);
        Some(self.shared.put_locked(&mut inner, r, key.0, key.1, object))
    }

    /// Another writer's change to an existing object, made (as
    /// [`FakeApi::update`] does) the moment the next write (PUT or PATCH,
    /// of the object or a subresource) to it arrives, before that write is
    /// checked: a write whose client read the object before is then
    /// stale, as when another writer wins the race between a client's
    /// read and its write. Several queued for one object land one per
    /// write, in order. Panics when the kind is not served.
    pub fn change_before_next_write(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value) + Send + 'static,
    ) {
        let resource = self
            .resource_of(api_version, kind)
            .unwrap_or_else(|| panic!("fake API serves no {api_version} {kind}"));
        self.shared
            .inner
            .lock()
            .expect("lock")
            .interposed
            .push(Interposed {
                resource,
                key: (namespace.to_owned(), name.to_owned()),
                change: Box::new(change),
            });
    }

    /// Deletes an object; false when there was none.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let r = self.resource_of(api_version, kind).expect("served");
        self.shared
            .remove(r, namespace.to_owned(), name.to_owned())
            .is_some()
    }

    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let r = self.resource_of(api_version, kind)?;
        let inner = self.shared.inner.lock().expect("lock");
        inner.objects[r]
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every object of a kind.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let Some(r) = self.resource_of(api_version, kind) else {
            return Vec::new();
        };
        let inner = self.shared.inner.lock().expect("lock");
        inner.objects[r].values().cloned().collect()
    }

    /// Cuts every open watch stream mid-stream, as a dropped connection
    /// (an API server restart, a load balancer) does: clients see an
    /// error, reconnect from their last resourceVersion and carry on (the
    /// history is kept). Returns the watches open at that moment.
    pub fn drop_watches(&self) -> usize {
        let open = self.shared.events.receiver_count();
        let _ = self.shared.events.send(Event::Cut);
        open
    }

    /// The next `count` writes (create, replace, patch, delete over HTTP;
    /// not the lab's own [`FakeApi::apply`]) are each answered `delay`
    /// late, the change made after the wait, as an overloaded API server
    /// or etcd does.
    pub fn slow_writes(&self, count: usize, delay: Duration) {
        let mut inner = self.shared.inner.lock().expect("lock");
        inner.slow_writes.extend(std::iter::repeat_n(delay, count));
    }

    /// Writes answered late so far ([`FakeApi::slow_writes`]).
    pub fn writes_slowed(&self) -> u64 {
        self.shared.inner.lock().expect("lock").writes_slowed
    }

    /// Watches answered 410 Gone so far (resumed from a compacted
    /// resourceVersion).
    pub fn gone_answered(&self) -> u64 {
        self.shared.inner.lock().expect("lock").gone_answered
    }

    /// Forgets history up to now, as etcd compaction does, and ends every
    /// open watch: clients reconnect from their last resourceVersion, get
    /// 410 Gone and must list again.
    pub fn compact(&self) {
        {
            let mut inner = self.shared.inner.lock().expect("lock");
            // Past every version a client holds (a bookmark's is the
            // current one), and a list after it returns this version,
            // which a watch may then start from: etcd compacts at a
            // revision at or below the current one, so a fresh list's
            // revision is never compacted away.
            inner.rv += 1;
            inner.compacted = inner.rv;
            inner.log.clear();
        }
        let _ = self.shared.events.send(Event::Close);
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.inner.lock().expect("lock").rv
    }

    /// Whether `/api` and `/apis` answer aggregated discovery when asked
    /// (on by default, as every supported version does); off, they answer
    /// the legacy lists whatever the client accepts, as a server before
    /// 1.26 (or a proxy that drops the `Accept` parameters) does.
    pub fn set_aggregated_discovery(&self, on: bool) {
        self.shared.aggregated.store(on, Ordering::Relaxed);
    }

    /// Adds `line` to what pod `namespace/name` wrote (its `pods/log`).
    pub fn append_pod_log(&self, namespace: &str, name: &str, line: &str) {
        let mut inner = self.shared.inner.lock().expect("lock");
        let log = inner
            .pod_logs
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default();
        log.push_str(line);
        log.push('\n');
    }

    /// Requests so far, as `METHOD path?query`, on every listener.
    pub fn requests(&self) -> Vec<String> {
        let requests = self.shared.requests.lock().expect("lock");
        requests.iter().map(|(_, r)| r.clone()).collect()
    }

    /// Requests so far that came in on the listener tagged `tag`
    /// ([`FakeApi::listen_tagged`]), as [`FakeApi::requests`] says them.
    pub fn requests_from(&self, tag: &str) -> Vec<String> {
        let requests = self.shared.requests.lock().expect("lock");
        requests
            .iter()
            .filter(|(t, _)| t.as_deref() == Some(tag))
            .map(|(_, r)| r.clone())
            .collect()
    }
}

impl Shared {
    fn put(&self, r: usize, ns: String, name: String, object: Value) -> u64 {
        let mut inner = self.inner.lock().expect("lock");
        self.put_locked(&mut inner, r, ns, name, object)
    }

    /// Stores `object` (a JSON object whose `metadata`, if any, is an
    /// object: the callers check) under `inner`'s lock.
    fn put_locked(
        &self,
        inner: &mut Inner,
        r: usize,
        ns: String,
        name: String,
        mut object: Value,
    ) -> u64 {
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        inner.rv += 1;
        let rv = inner.rv;
        let spec = &self.resources[r];
        let existed = inner.objects[r].get(&(ns.clone(), name.clone())).cloned();
        object["apiVersion"] = Value::from(spec.api_version());
        object["kind"] = Value::from(spec.kind);
        let meta = &mut object["metadata"];
        meta["resourceVersion"] = Value::from(rv.to_string());
        if spec.namespaced {
            meta["namespace"] = Value::from(ns.clone());
        }
        match &existed {
            Some(old) => {
                meta["uid"] = old["metadata"]["uid"].clone();
                meta["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
            }
            None => {
                inner.uid += 1;
                let uid = format!("00000000-0000-4000-8000-{:012}", inner.uid);
                let meta = &mut object["metadata"];
                meta["uid"] = Value::from(uid);
                if meta.get("creationTimestamp").is_none_or(Value::is_null) {
                    meta["creationTimestamp"] = Value::from(now_rfc3339());
                }
            }
        }
        let kind = if existed.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        inner.objects[r].insert((ns, name), object.clone());
        inner.log.push((rv, r, kind, object.clone()));
        let _ = self.events.send(Event::Change {
            rv,
            resource: r,
            kind,
            object,
        });
        rv
    }

    fn remove(&self, r: usize, ns: String, name: String) -> Option<Value> {
        let mut inner = self.inner.lock().expect("lock");
        let mut old = inner.objects[r].remove(&(ns, name))?;
        inner.rv += 1;
        let rv = inner.rv;
        old["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        inner.log.push((rv, r, "DELETED", old.clone()));
        let _ = self.events.send(Event::Change {
            rv,
            resource: r,
            kind: "DELETED",
            object: old.clone(),
        });
        Some(old)
    }
}

/// Sort key of an API version, highest priority first as the API server
/// orders a group's versions: GA before beta before alpha, then by number
/// (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha3`).
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let major = rest[..digits].parse().unwrap_or(0);
    let tail = &rest[digits..];
    let (stability, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stability, major, minor)
}

/// The groups served, in the order first seen, each with its versions,
/// preferred (highest priority) first. The core group is `""`.
fn served_groups(resources: &[ResourceSpec]) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in resources {
        let (g, v) = (r.group(), r.version());
        match out.iter_mut().find(|(name, _)| *name == g) {
            Some((_, versions)) if !versions.contains(&v) => versions.push(v),
            Some(_) => {}
            None => out.push((g, vec![v])),
        }
    }
    for (_, versions) in &mut out {
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    }
    out
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A resource's verbs in discovery: all of them, but Namespaces have no
/// `deletecollection` (kube-apiserver v1.37.2).
fn verbs(r: &ResourceSpec) -> &'static [&'static str] {
    if r.group().is_empty() && r.plural == "namespaces" {
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    } else {
        &VERBS
    }
}

/// The kind a subresource answers with, when not the resource's own:
/// (group, version, kind), as kube-apiserver's discovery says it.
fn subresource_kind(sub: &str) -> Option<(&'static str, &'static str, &'static str)> {
    match sub {
        "binding" => Some(("", "", "Binding")),
        "eviction" => Some(("policy", "v1", "Eviction")),
        "scale" => Some(("autoscaling", "v1", "Scale")),
        _ => None,
    }
}

/// A legacy discovery entry for subresource `sub` of `r`.
fn subresource_entry(r: &ResourceSpec, sub: &str) -> Value {
    let mut entry = json!({"name": format!("{}/{sub}", r.plural), "singularName": "",
        "namespaced": r.namespaced, "kind": r.kind, "verbs": subresource_verbs(sub)});
    if let Some((group, version, kind)) = subresource_kind(sub) {
        entry["kind"] = json!(kind);
        if !group.is_empty() {
            entry["group"] = json!(group);
            entry["version"] = json!(version);
        }
    }
    entry
}

fn subresource_verbs(sub: &str) -> &'static [&'static str] {
    match sub {
        "binding" | "eviction" => &["create"],
        "log" => &["get"],
        _ => &["get", "patch", "update"],
    }
}

/// `APIResourceList` for one group/version (`/api/v1`, `/apis/G/V`).
fn resource_list(resources: &[ResourceSpec], group: &str, version: &str) -> Value {
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut list = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group() == group && r.version() == version)
    {
        list.push(
            json!({"name": r.plural, "singularName": r.kind.to_lowercase(),
            "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs(r)}),
        );
        for sub in r.subresources() {
            list.push(subresource_entry(r, sub));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
           "resources": list})
}

/// `APIGroup` (`/apis/G`, and each item of `/apis`).
fn api_group(group: &str, versions: &[&str]) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({"name": group, "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
           "preferredVersion": gv(versions[0])})
}

/// One `APIGroupDiscovery` of aggregated discovery (`apidiscovery.k8s.io/v2`).
fn group_discovery(resources: &[ResourceSpec], group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let list: Vec<Value> = resources
                .iter()
                .filter(|r| r.group() == group && r.version() == *v)
                .map(|r| {
                    // The group and version are empty where they are the
                    // entry's own, as kube-apiserver writes them.
                    let kind = json!({"group": "", "version": "", "kind": r.kind});
                    let subs: Vec<Value> = r
                        .subresources()
                        .iter()
                        .map(|s| {
                            let kind = match subresource_kind(s) {
                                Some((g, v, k)) => json!({"group": g, "version": v, "kind": k}),
                                None => kind.clone(),
                            };
                            json!({"subresource": s, "responseKind": kind,
                                        "verbs": subresource_verbs(s)})
                        })
                        .collect();
                    json!({"resource": r.plural, "responseKind": kind,
                           "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                           "singularResource": r.kind.to_lowercase(), "verbs": verbs(r),
                           "subresources": subs})
                })
                .collect();
            json!({"version": v, "resources": list, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
}

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client accepts aggregated discovery v2 (kube-rs and
/// client-go ask for it first, with plain JSON as the fallback).
fn wants_aggregated(headers: &HeaderMap) -> bool {
    headers
        .get_all("accept")
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(','))
        .any(|range| {
            let params: Vec<&str> = range.split(';').map(str::trim).collect();
            params.contains(&"g=apidiscovery.k8s.io")
                && params.contains(&"v=v2")
                && params.contains(&"as=APIGroupDiscoveryList")
        })
}

fn aggregated_reply(items: Vec<Value>) -> Response {
    let body = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
                      "metadata": {}, "items": items});
    (
        StatusCode::OK,
        [("content-type", AGGREGATED_V2)],
        body.to_string(),
    )
        .into_response()
}

/// Answers the discovery endpoints as a real API server does for the
/// resources served: `/version`, `/api` (`APIVersions`), `/apis`
/// (`APIGroupList`), both as aggregated discovery when asked, `/api/v1`
/// and `/apis/G/V` (`APIResourceList`), `/apis/G` (`APIGroup`); 404 for a
/// group or version not served. `None`: not a discovery path.
fn discovery(shared: &Shared, path: &str, headers: &HeaderMap) -> Option<Response> {
    let path = path.trim_end_matches('/');
    let resources = &shared.resources;
    let groups = served_groups(resources);
    let aggregated = shared.aggregated.load(Ordering::Relaxed) && wants_aggregated(headers);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let response = match parts.as_slice() {
        ["version"] => {
            let minor = shared.version.minor();
            reply(
                StatusCode::OK,
                json!({"major": "1", "minor": minor.to_string(),
                       "gitVersion": format!("v1.{minor}.0"), "gitCommit": "fake",
                       "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                       "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"}),
            )
        }
        ["api"] => {
            let core = groups.iter().find(|(g, _)| g.is_empty());
            if aggregated {
                aggregated_reply(
                    core.map(|(_, vs)| group_discovery(resources, "", vs))
                        .into_iter()
                        .collect(),
                )
            } else {
                let versions = core.map(|(_, vs)| vs.clone()).unwrap_or_default();
                reply(
                    StatusCode::OK,
                    json!({"kind": "APIVersions", "versions": versions,
                           "serverAddressByClientCIDRs": [
                               {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
                )
            }
        }
        ["apis"] => {
            let named = groups.iter().filter(|(g, _)| !g.is_empty());
            if aggregated {
                aggregated_reply(
                    named
                        .map(|(g, vs)| group_discovery(resources, g, vs))
                        .collect(),
                )
            } else {
                let list: Vec<Value> = named.map(|(g, vs)| api_group(g, vs)).collect();
                reply(
                    StatusCode::OK,
                    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}),
                )
            }
        }
        ["api", v] => match groups.iter().find(|(g, _)| g.is_empty()) {
            Some((_, vs)) if vs.contains(v) => {
                reply(StatusCode::OK, resource_list(resources, "", v))
            }
            _ => no_such_path(),
        },
        ["apis", g] => match groups.iter().find(|(name, _)| name == g) {
            Some((g, vs)) if !g.is_empty() => {
                let mut body = api_group(g, vs);
                body["kind"] = json!("APIGroup");
                body["apiVersion"] = json!("v1");
                reply(StatusCode::OK, body)
            }
            _ => no_such_path(),
        },
        ["apis", g, v] => match groups.iter().find(|(name, _)| name == g) {
            Some((g, vs)) if !g.is_empty() && vs.contains(v) => {
                reply(StatusCode::OK, resource_list(resources, g, v))
            }
            _ => no_such_path(),
        },
        _ => return None,
    };
    Some(response)
}

/// The resource, namespace, name and subresource a path names.
struct Target {
    resource: usize,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn route(shared: &Shared, path: &str) -> Option<Target> {
    for (i, r) in shared.resources.iter().enumerate() {
        let Some(rest) = path.strip_prefix(r.prefix) else {
            continue;
        };
        // `/apis/G/v1` is no prefix of `/apis/G/v1beta1/…`.
        if !(rest.is_empty() || rest.starts_with('/')) {
            continue;
        }
        let parts: Vec<&str> = rest
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        let (ns, rest): (Option<String>, &[&str]) = match parts.as_slice() {
            ["namespaces", ns, rest @ ..] if r.namespaced && !rest.is_empty() => {
                (Some((*ns).to_owned()), rest)
            }
            all => (None, all),
        };
        match rest {
            [p] if *p == r.plural => {
                return Some(Target {
                    resource: i,
                    namespace: ns,
                    name: None,
                    subresource: None,
                })
            }
            [p, name] if *p == r.plural => {
                return Some(Target {
                    resource: i,
                    namespace: ns,
                    name: Some((*name).to_owned()),
                    subresource: None,
                })
            }
            [p, name, sub] if *p == r.plural => {
                return Some(Target {
                    resource: i,
                    namespace: ns,
                    name: Some((*name).to_owned()),
                    subresource: Some((*sub).to_owned()),
                })
            }
            _ => {}
        }
    }
    None
}

async fn handle(
    State(Listener { shared, tag }): State<Listener>,
    method: Method,
    uri: Uri,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.requests.lock().expect("lock").push((
        tag,
        format!(
            "{method} {}",
            uri.path_and_query().map(|p| p.as_str()).unwrap_or("")
        ),
    ));
    if method == Method::GET {
        if let Some(r) = discovery(&shared, uri.path(), &headers) {
            return r;
        }
    }
    let Some(t) = route(&shared, uri.path()) else {
        return no_such_path();
    };
    if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        let late = {
            let mut inner = shared.inner.lock().expect("lock");
            let late = (!inner.slow_writes.is_empty()).then(|| inner.slow_writes.remove(0));
            if late.is_some() {
                inner.writes_slowed += 1;
            }
            late
        };
        if let Some(delay) = late {
            tokio::time::sleep(delay).await;
        }
    }
    let spec = shared.resources[t.resource].clone();
    let ns_key = |t: &Target| -> String {
        if spec.namespaced {
            t.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        }
    };
    match (method.clone(), &t.name) {
        (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            watch(shared, t.resource, t.namespace.clone(), &query)
        }
        (Method::GET, None) => list(&shared, t.resource, t.namespace.as_deref(), &query),
        // A pod's output, as text (the kubelet's, through the API
        // server): its last `tailLines` lines.
        (Method::GET, Some(name)) if t.subresource.as_deref() == Some("log") => {
            let inner = shared.inner.lock().expect("lock");
            let key = (ns_key(&t), name.clone());
            if !inner.objects[t.resource].contains_key(&key) {
                return not_found(spec.plural, name);
            }
            let text = inner.pod_logs.get(&key).cloned().unwrap_or_default();
            let tail = query.get("tailLines").and_then(|n| n.parse::<usize>().ok());
            let lines: Vec<&str> = text.lines().collect();
            let from = tail.map_or(0, |n| lines.len().saturating_sub(n));
            let mut body = lines[from..].join("\n");
            if !body.is_empty() {
                body.push('\n');
            }
            (StatusCode::OK, [("content-type", "text/plain")], body).into_response()
        }
        (Method::GET, Some(name)) => {
            let inner = shared.inner.lock().expect("lock");
            match inner.objects[t.resource].get(&(ns_key(&t), name.clone())) {
                Some(o) => reply(StatusCode::OK, o.clone()),
                None => not_found(spec.plural, name),
            }
        }
        (Method::POST, None) => {
            let mut object = match object_body(&body) {
                Ok(o) => o,
                Err(why) => return bad_request(why),
            };
            let name = match object["metadata"]["name"].as_str() {
                Some(n) => n.to_owned(),
                None => match object["metadata"]["generateName"].as_str() {
                    Some(g) => {
                        let n = format!("{g}{:05}", shared.inner.lock().expect("lock").rv);
                        object["metadata"]["name"] = Value::from(n.clone());
                        n
                    }
                    None => {
                        return reply(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            status(422, "Invalid", "metadata.name: Required value".into()),
                        )
                    }
                },
            };
            let ns = ns_key(&t);
            // Checked and stored under one lock, as the API server's
            // create is one transaction on etcd: of two replicas creating
            // the same Lease at once, one gets 409 (checked apart, both
            // "created" it, and both led).
            let mut inner = shared.inner.lock().expect("lock");
            if inner.objects[t.resource].contains_key(&(ns.clone(), name.clone())) {
                return reply(
                    StatusCode::CONFLICT,
                    status(
                        409,
                        "AlreadyExists",
                        format!("{} \"{name}\" already exists", spec.plural),
                    ),
                );
            }
            shared.put_locked(&mut inner, t.resource, ns.clone(), name.clone(), object);
            reply(
                StatusCode::CREATED,
                inner.objects[t.resource][&(ns, name)].clone(),
            )
        }
        (Method::PUT | Method::PATCH, Some(name)) => {
            let ns = ns_key(&t);
            let patch = match object_body(&body) {
                Ok(p) => p,
                Err(why) => return bad_request(why),
            };
            let apply = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/apply-patch"));
            // Read, check, merge and store under one lock, as the API
            // server's compare-and-swap on etcd does.
            let mut inner = shared.inner.lock().expect("lock");
            let key = (ns.clone(), name.clone());
            // Another writer's change queued for this object lands first.
            if let Some(i) = inner
                .interposed
                .iter()
                .position(|c| c.resource == t.resource && c.key == key)
            {
                let other = inner.interposed.remove(i);
                if let Some(mut o) = inner.objects[t.resource].get(&key).cloned() {
                    (other.change)(&mut o);
                    shared.put_locked(&mut inner, t.resource, ns.clone(), name.clone(), o);
                }
            }
            let current = inner.objects[t.resource].get(&key).cloned();
            // Optimistic concurrency: a resourceVersion in the body must
            // be the stored one.
            if let (Some(cur), Some(want)) = (&current, patch["metadata"].get("resourceVersion")) {
                let have = &cur["metadata"]["resourceVersion"];
                if !want.is_null() && want != have {
                    return conflict(spec.plural, name);
                }
            }
            let mut object = match (current, apply) {
                (Some(o), _) => o,
                (None, true) => json!({"metadata": {"name": name}}),
                (None, false) => return not_found(spec.plural, name),
            };
            let status_only = t.subresource.as_deref() == Some("status");
            if method == Method::PUT && status_only {
                // A replace of the status changes only the status.
                match patch.get("status") {
                    Some(s) => object["status"] = s.clone(),
                    None => {
                        if let Some(o) = object.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            } else if method == Method::PUT {
                object = patch;
            } else if status_only {
                // A status patch changes only the status.
                if let Some(s) = patch.get("status") {
                    merge(&mut object["status"], s);
                }
            } else {
                merge(&mut object, &patch);
            }
            if !object["metadata"].is_object() {
                return reply(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    status(422, "Invalid", "metadata: must be an object".into()),
                );
            }
            object["metadata"]["name"] = Value::from(name.clone());
            shared.put_locked(&mut inner, t.resource, ns.clone(), name.clone(), object);
            reply(
                StatusCode::OK,
                inner.objects[t.resource][&(ns, name.clone())].clone(),
            )
        }
        (Method::DELETE, Some(name)) => {
            // DeleteOptions' preconditions, checked against the object as
            // stored (apiserver `pkg/registry/rest/delete.go`,
            // `BeforeDelete`: a mismatch is 409 Conflict, "Precondition
            // failed: ...").
            let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let pre = &options["preconditions"];
            let current = {
                let inner = shared.inner.lock().expect("lock");
                inner.objects[t.resource]
                    .get(&(ns_key(&t), name.clone()))
                    .cloned()
            };
            let Some(current) = current else {
                return not_found(spec.plural, name);
            };
            for (field, meta) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
                if let Some(want) = pre[field].as_str() {
                    let have = current["metadata"][field].as_str().unwrap_or("");
                    if want != have {
                        let mut body = status(
                            409,
                            "Conflict",
                            format!(
                                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: \
                                 {meta} in precondition: {want}, {meta} in object meta: {have}",
                                spec.plural
                            ),
                        );
                        body["details"] = json!({"name": name, "kind": spec.plural});
                        return reply(StatusCode::CONFLICT, body);
                    }
                }
            }
            match shared.remove(t.resource, ns_key(&t), name.clone()) {
                Some(old) => reply(StatusCode::OK, old),
                None => not_found(spec.plural, name),
            }
        }
        _ => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            status(
                405,
                "MethodNotAllowed",
                format!("{method} not supported here"),
            ),
        ),
    }
}

fn in_namespace(o: &Value, ns: Option<&str>) -> bool {
    ns.is_none_or(|ns| o["metadata"]["namespace"].as_str() == Some(ns))
}

fn matches_labels(o: &Value, selector: Option<&String>) -> bool {
    let Some(sel) = selector else { return true };
    sel.split(',')
        .filter(|s| !s.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => o["metadata"]["labels"][k.trim_end_matches('=')].as_str() == Some(v),
            None => o["metadata"]["labels"].get(term).is_some(),
        })
}

fn list(shared: &Shared, r: usize, ns: Option<&str>, query: &BTreeMap<String, String>) -> Response {
    let inner = shared.inner.lock().expect("lock");
    let spec = &shared.resources[r];
    let all: Vec<&Value> = inner.objects[r]
        .values()
        .filter(|o| in_namespace(o, ns) && matches_labels(o, query.get("labelSelector")))
        .collect();
    // continue = "<offset>:<resourceVersion of the first page>"
    let (offset, rv) = match query.get("continue").and_then(|c| c.split_once(':')) {
        Some((o, rv)) => (o.parse().unwrap_or(0), rv.parse().unwrap_or(inner.rv)),
        None => (0usize, inner.rv),
    };
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<Value> = all
        .iter()
        .skip(offset)
        .take(limit)
        .map(|o| (*o).clone())
        .collect();
    let next = offset + page.len();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if next < all.len() {
        metadata["continue"] = Value::from(format!("{next}:{rv}"));
        metadata["remainingItemCount"] = Value::from(all.len() - next);
    }
    reply(
        StatusCode::OK,
        json!({"apiVersion": spec.api_version(), "kind": format!("{}List", spec.kind),
               "metadata": metadata, "items": page}),
    )
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn watch(
    shared: Arc<Shared>,
    r: usize,
    ns: Option<String>,
    query: &BTreeMap<String, String>,
) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300));
    let selector = query.get("labelSelector").cloned();
    let spec = shared.resources[r].clone();
    // Subscribe before replaying, so nothing falls between.
    let mut rx = shared.events.subscribe();
    let (replay, gone, mut last) = {
        let mut inner = shared.inner.lock().expect("lock");
        if from != 0 && from < inner.compacted {
            inner.gone_answered += 1;
            (Vec::new(), true, inner.rv)
        } else {
            let replay: Vec<Bytes> = inner
                .log
                .iter()
                .filter(|(rv, res, _, o)| {
                    *rv > from
                        && *res == r
                        && in_namespace(o, ns.as_deref())
                        && matches_labels(o, selector.as_ref())
                })
                .map(|(_, _, k, o)| event_line(k, o))
                .collect();
            (replay, false, inner.rv)
        }
    };
    let replayed_up_to = last;
    let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1024);
    let bookmark_every = shared.bookmark_every;
    tokio::spawn(async move {
        if gone {
            let s = status(410, "Expired", format!("too old resource version: {from}"));
            let _ = tx.send(Ok(event_line("ERROR", &s))).await;
            return;
        }
        for line in replay {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tick = tokio::time::interval(bookmark_every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tick.tick(), if bookmarks => {
                    let b = json!({"apiVersion": spec.api_version(), "kind": spec.kind,
                                   "metadata": {"resourceVersion": last.to_string()}});
                    if tx.send(Ok(event_line("BOOKMARK", &b))).await.is_err() { return; }
                }
                ev = rx.recv() => match ev {
                    Ok(Event::Change { rv, resource, kind, object }) => {
                        last = last.max(rv);
                        if resource != r || rv <= from || rv <= replayed_up_to
                            || !in_namespace(&object, ns.as_deref())
                            || !matches_labels(&object, selector.as_ref()) {
                            continue;
                        }
                        if tx.send(Ok(event_line(kind, &object))).await.is_err() { return; }
                    }
                    Ok(Event::Close) | Err(broadcast::error::RecvError::Closed) => return,
                    Ok(Event::Cut) => {
                        let cut = std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "watch dropped (fake API fault)",
                        );
                        let _ = tx.send(Err(cut)).await;
                        return;
                    }
                    // Fell behind: end the watch; the client resumes.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                }
            }
        }
    });
    let stream = futures::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chaos faults: a cut watch ends in an error (no clean end),
    /// slow writes are answered late (then no longer), and after a
    /// compaction a watch from a fresh list's version is served while one
    /// from before gets 410 Gone.
    #[tokio::test]
    async fn watches_cut_slow_writes_and_compaction() {
        let api = FakeApi::start().await;
        let http = reqwest::Client::new();
        let pods = format!("{}/api/v1/namespaces/a/pods", api.url);
        let mut watch = http
            .get(format!(
                "{}/api/v1/pods?watch=true&resourceVersion=1",
                api.url
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(api.drop_watches(), 1);
        let end = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match watch.chunk().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            }
        })
        .await
        .expect("the cut watch ends within 10 s");
        assert!(end.is_err(), "a cut watch ends in an error, not cleanly");

        api.slow_writes(1, Duration::from_millis(300));
        for (name, late) in [("p1", true), ("p2", false)] {
            let t = tokio::time::Instant::now();
            let r = http
                .post(&pods)
                .body(json!({"metadata": {"name": name}}).to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
            assert_eq!(t.elapsed() >= Duration::from_millis(300), late, "{name}");
        }
        assert_eq!(api.writes_slowed(), 1);

        let old = api.resource_version();
        api.compact();
        let list: Value = http
            .get(format!("{}/api/v1/pods", api.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let fresh = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let first_line = |rv: String| {
            let http = http.clone();
            let url = format!("{}/api/v1/pods?watch=true&resourceVersion={rv}", api.url);
            async move {
                let mut r = http.get(url).send().await.unwrap();
                tokio::time::timeout(Duration::from_millis(500), r.chunk())
                    .await
                    .ok()
                    .and_then(|c| c.ok().flatten())
            }
        };
        let gone = first_line(old.to_string()).await.expect("an ERROR line");
        let gone: Value = serde_json::from_slice(&gone).unwrap();
        assert_eq!(gone["object"]["code"], 410, "{gone}");
        // Nothing changed since the list: no line, and no 410.
        assert_eq!(first_line(fresh).await, None);
        assert_eq!(api.gone_answered(), 1);
    }

    #[test]
    fn versions_parse_and_print() {
        for v in KubeVersion::ALL {
            assert_eq!(KubeVersion::parse(&v.to_string()), Ok(v));
            assert_eq!(KubeVersion::parse(&format!("v{v}")), Ok(v));
            assert_eq!(KubeVersion::parse(&format!("{v}.4")), Ok(v));
        }
        assert_eq!(KubeVersion::parse("1.31"), Ok(KubeVersion::V1_31));
        assert_eq!("v1.37".parse(), Ok(KubeVersion::NEWEST));
        for bad in [
            "", "1", "1.30", "1.38", "2.31", "v", "1.31.", "1.31.x", "1.31.0.1", "x1.31",
        ] {
            let e = KubeVersion::parse(bad).unwrap_err();
            assert!(e.contains("1.31, 1.32"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_version_serves_its_set() {
        let has = |v: KubeVersion, prefix: &str, plural: &str| {
            resources_for(v, false)
                .iter()
                .any(|r| r.prefix == prefix && r.plural == plural)
        };
        for v in KubeVersion::ALL {
            let dra = v.dra_api_version();
            for d in ["v1", "v1beta2", "v1beta1"] {
                let prefix = format!("/apis/resource.k8s.io/{d}");
                let served = has(v, &prefix, "resourceslices");
                // The version Accord reads is served; v1beta1 also beside
                // v1beta2 on 1.33.
                let expect =
                    dra == Some(&prefix[6..]) || (v == KubeVersion::V1_33 && d == "v1beta1");
                assert_eq!(served, expect, "{v} {d}");
            }
            // Off by default on every version (a beta API since 1.24 rules);
            // served from 1.37 where an admin turns it on.
            assert!(
                !has(v, "/apis/scheduling.k8s.io/v1beta1", "podgroups"),
                "{v}"
            );
            let turned_on = resources_with(v, false, &["scheduling.k8s.io/v1beta1=true"]);
            assert_eq!(
                turned_on.is_ok_and(|rs| rs
                    .iter()
                    .any(|r| r.prefix == "/apis/scheduling.k8s.io/v1beta1"
                        && r.plural == "podgroups")),
                v.can_serve_pod_group_v1beta1(),
                "{v}"
            );
            assert!(!has(v, "/apis/jobset.x-k8s.io/v1alpha2", "jobsets"));
            assert!(resources_for(v, true).iter().any(|r| r.plural == "jobsets"));
            // Leases on every version; Accord's own CRD only installed.
            assert!(has(v, "/apis/coordination.k8s.io/v1", "leases"), "{v}");
            assert!(!has(v, "/apis/accord.dev/v1alpha1", "accordnodes"));
            assert!(resources_for(v, true)
                .iter()
                .any(|r| r.prefix == "/apis/accord.dev/v1alpha1"
                    && r.plural == "accordnodes"
                    && r.kind == "AccordNode"
                    && r.namespaced));
        }
        let names = |r: Vec<ResourceSpec>| -> Vec<String> {
            r.iter()
                .map(|r| format!("{}/{}", r.prefix, r.plural))
                .collect()
        };
        assert_eq!(
            names(default_resources()),
            names(resources_with(KubeVersion::NEWEST, true, &[GANG_RUNTIME_CONFIG]).unwrap())
        );
    }

    #[test]
    fn groups_list_their_preferred_version_first() {
        let groups = served_groups(&resources_for(KubeVersion::V1_33, false));
        let dra = groups
            .iter()
            .find(|(g, _)| *g == "resource.k8s.io")
            .unwrap();
        assert_eq!(dra.1, ["v1beta2", "v1beta1"]);
        let groups = served_groups(&default_resources());
        let sched = groups
            .iter()
            .find(|(g, _)| *g == "scheduling.k8s.io")
            .unwrap();
        assert_eq!(sched.1, ["v1", "v1beta1"]);
        let mut vs = ["v1alpha1", "v2", "v1beta1", "v1", "v1beta2", "v10"];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(vs, ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }
}
