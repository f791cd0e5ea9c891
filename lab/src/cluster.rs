//! The lab's Kubernetes, as its stand-ins and tests reach it: the upstream
//! control plane ([`Upstream`], the default) or the in-repo fake API (for
//! fast tests and the runs that inject API faults: chaos, HA's tagged
//! writes). One small surface over both (get, list, create-or-replace,
//! read-modify-write, delete), synchronous as the fake's is.
//!
//! The upstream calls are blocking HTTP on a thread of their own (its own
//! runtime and client), so a lab task may call them wherever it calls the
//! fake, even under the lab's record lock, and never nests a runtime.
//! Every call is on loopback to a separate process: no call can wait on
//! the caller's runtime.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_testkit::control_plane::{ControlPlane, ADMIN_TOKEN};
use accord_testkit::fake_api::FakeApi;
use serde_json::{json, Value};

/// The lab's Kubernetes.
#[derive(Clone)]
pub enum Cluster {
    Fake(Arc<FakeApi>),
    Upstream(Arc<Upstream>),
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cluster::Fake(api) => write!(f, "Cluster::Fake({})", api.url),
            Cluster::Upstream(u) => write!(f, "Cluster::Upstream({})", u.url),
        }
    }
}

impl Cluster {
    /// The fake API, where the lab runs on it.
    pub fn fake(&self) -> Option<&Arc<FakeApi>> {
        match self {
            Cluster::Fake(api) => Some(api),
            Cluster::Upstream(_) => None,
        }
    }

    /// The upstream control plane, where the lab runs on it.
    pub fn upstream(&self) -> Option<&Arc<Upstream>> {
        match self {
            Cluster::Fake(_) => None,
            Cluster::Upstream(u) => Some(u),
        }
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        match self {
            Cluster::Fake(api) => &api.url,
            Cluster::Upstream(u) => &u.url,
        }
    }

    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        match self {
            Cluster::Fake(api) => api.get(api_version, kind, namespace, name),
            Cluster::Upstream(u) => u.get(api_version, kind, namespace, name),
        }
    }

    /// Every object of a kind (every namespace).
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        match self {
            Cluster::Fake(api) => api.list(api_version, kind),
            Cluster::Upstream(u) => u.list(api_version, kind),
        }
    }

    /// Creates or replaces an object, its status included (upstream:
    /// through the status subresource, as its writers do).
    pub fn apply(&self, object: Value) {
        match self {
            Cluster::Fake(api) => {
                api.apply(object);
            }
            Cluster::Upstream(u) => {
                if let Err(e) = u.apply(&object) {
                    tracing::warn!(target: "lab", error = %e, "the lab's write was refused");
                }
            }
        }
    }

    /// Changes an existing object: read, `change`, write (upstream: again
    /// on a conflict, from a fresh read). False when there is none.
    pub fn update(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl Fn(&mut Value),
    ) -> bool {
        match self {
            Cluster::Fake(api) => api
                .update(api_version, kind, namespace, name, change)
                .is_some(),
            Cluster::Upstream(u) => match u.update(api_version, kind, namespace, name, &change) {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(target: "lab", error = %e, "the lab's update was refused");
                    false
                }
            },
        }
    }

    /// Deletes an object (a pod at once: the lab deletes finished work);
    /// false when there was none.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        match self {
            Cluster::Fake(api) => api.delete(api_version, kind, namespace, name),
            Cluster::Upstream(u) => u.delete(api_version, kind, namespace, name),
        }
    }
}

/// One request for the HTTP thread.
#[derive(Debug)]
struct Call {
    method: reqwest::Method,
    path: String,
    body: Option<(Value, &'static str)>,
    reply: mpsc::Sender<Result<(u16, Value), String>>,
}

/// The upstream control plane, as the lab's admin reaches it.
#[derive(Debug)]
pub struct Upstream {
    pub url: String,
    /// The processes (killed when the lab is dropped).
    pub plane: Mutex<ControlPlane>,
    /// Processes that run against it and go with it (Kueue's manager,
    /// where the scenario runs it): each is killed when it is dropped.
    pub companions: Mutex<Vec<Box<dyn std::fmt::Debug + Send>>>,
    calls: Mutex<mpsc::Sender<Call>>,
}

impl Upstream {
    /// The lab's handle on `plane`: starts the HTTP thread.
    pub fn new(plane: ControlPlane) -> Result<Upstream, String> {
        let http = plane.http()?;
        let url = plane.url.clone();
        let (tx, rx) = mpsc::channel::<Call>();
        let base = url.clone();
        std::thread::Builder::new()
            .name("lab-kube-http".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the lab's HTTP runtime");
                while let Ok(call) = rx.recv() {
                    let answer = rt.block_on(send(&http, &base, &call));
                    let _ = call.reply.send(answer);
                }
            })
            .map_err(|e| format!("the lab's HTTP thread: {e}"))?;
        Ok(Upstream {
            url,
            plane: Mutex::new(plane),
            companions: Mutex::new(Vec::new()),
            calls: Mutex::new(tx),
        })
    }

    /// `method path` as the admin: the answer's code and body.
    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(Value, &'static str)>,
    ) -> Result<(u16, Value), String> {
        let (reply, answer) = mpsc::channel();
        self.calls
            .lock()
            .expect("lock")
            .send(Call {
                method,
                path: path.to_owned(),
                body,
                reply,
            })
            .map_err(|_| "the lab's HTTP thread is gone".to_owned())?;
        answer
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| format!("{path}: no answer within 60 s"))?
    }

    fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let path = object_path(api_version, kind, namespace, name);
        match self.call(reqwest::Method::GET, &path, None) {
            Ok((200, v)) => Some(v),
            Ok((404, _)) => None,
            Ok((code, v)) => {
                tracing::warn!(target: "lab", %path, code, answer = %v, "GET refused");
                None
            }
            Err(e) => {
                tracing::warn!(target: "lab", error = %e, "GET failed");
                None
            }
        }
    }

    fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let path = collection_path(api_version, kind, None);
        match self.call(reqwest::Method::GET, &path, None) {
            Ok((200, v)) => v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    // A list's items carry no kind of their own.
                    let mut o = o.clone();
                    o["apiVersion"] = json!(api_version);
                    o["kind"] = json!(kind);
                    o
                })
                .collect(),
            Ok((404, _)) => Vec::new(),
            Ok((code, v)) => {
                tracing::warn!(target: "lab", %path, code, answer = %v, "LIST refused");
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(target: "lab", error = %e, "LIST failed");
                Vec::new()
            }
        }
    }

    /// Create, else replace (from the stored resourceVersion); then the
    /// status, where the object has one.
    pub fn apply(&self, object: &Value) -> Result<Value, String> {
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or("");
        let namespace = namespace_of(kind, object);
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let what = format!("{kind} {namespace}/{name}");
        let mut body = object.clone();
        if let Some(m) = body["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("uid");
        }
        let created = self.call(
            reqwest::Method::POST,
            &collection_path(api_version, kind, Some(&namespace)),
            Some((body.clone(), "application/json")),
        )?;
        let stored = match created {
            (200 | 201, v) => v,
            (409, _) => {
                let path = object_path(api_version, kind, &namespace, name);
                let mut tries = 0;
                loop {
                    let (code, old) = self.call(reqwest::Method::GET, &path, None)?;
                    if code != 200 {
                        return Err(format!("{what}: GET {code}: {old}"));
                    }
                    body["metadata"]["resourceVersion"] =
                        old["metadata"]["resourceVersion"].clone();
                    match self.call(
                        reqwest::Method::PUT,
                        &path,
                        Some((body.clone(), "application/json")),
                    )? {
                        (200 | 201, v) => break v,
                        (409, _) if tries < 5 => tries += 1,
                        (code, v) => return Err(format!("{what}: PUT {code}: {v}")),
                    }
                }
            }
            (code, v) => return Err(format!("{what}: POST {code}: {v}")),
        };
        if object["status"].is_object() && has_status(kind) && stored["status"] != object["status"]
        {
            return self.put_status(api_version, kind, &namespace, name, &stored, object);
        }
        Ok(stored)
    }

    /// `object`'s status over `stored` (its resourceVersion).
    fn put_status(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        stored: &Value,
        object: &Value,
    ) -> Result<Value, String> {
        let mut with = stored.clone();
        with["status"] = object["status"].clone();
        let object_at = object_path(api_version, kind, namespace, name);
        let path = format!("{object_at}/status");
        for _ in 0..8 {
            match self.call(
                reqwest::Method::PUT,
                &path,
                Some((with.clone(), "application/json")),
            )? {
                (200 | 201, v) => return Ok(v),
                // Another writer (accordd's labels) came between: the
                // status again, over what is stored now.
                (409, _) => {
                    let (code, now) = self.call(reqwest::Method::GET, &object_at, None)?;
                    if code != 200 {
                        return Err(format!("GET {object_at}: {code}: {now}"));
                    }
                    with["metadata"]["resourceVersion"] =
                        now["metadata"]["resourceVersion"].clone();
                }
                (code, v) => return Err(format!("PUT {path}: {code}: {v}")),
            }
        }
        Err(format!("PUT {path}: conflicts on every one of 8 tries"))
    }

    fn update(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: &dyn Fn(&mut Value),
    ) -> Result<bool, String> {
        let path = object_path(api_version, kind, namespace, name);
        for _ in 0..8 {
            let (code, old) = self.call(reqwest::Method::GET, &path, None)?;
            match code {
                200 => {}
                404 => return Ok(false),
                _ => return Err(format!("GET {path}: {code}: {old}")),
            }
            let mut new = old.clone();
            change(&mut new);
            let mut stored = old.clone();
            let mut main = new.clone();
            if let Some(m) = main.as_object_mut() {
                match old.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
            if main != old {
                match self.call(
                    reqwest::Method::PUT,
                    &path,
                    Some((main, "application/json")),
                )? {
                    (200 | 201, v) => stored = v,
                    (409, _) => continue,
                    (code, v) => return Err(format!("PUT {path}: {code}: {v}")),
                }
            }
            if has_status(kind) && new["status"] != old["status"] {
                let mut with = stored.clone();
                with["status"] = new["status"].clone();
                match self.call(
                    reqwest::Method::PUT,
                    &format!("{path}/status"),
                    Some((with, "application/json")),
                )? {
                    (200 | 201, _) => {}
                    (409, _) => continue,
                    (code, v) => return Err(format!("PUT {path}/status: {code}: {v}")),
                }
            }
            return Ok(true);
        }
        Err(format!("{path}: conflicts on every one of 8 tries"))
    }

    fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let path = object_path(api_version, kind, namespace, name);
        // As `kubectl delete` does: dependents (a Job's pods, Kueue's
        // Workload) go in the background; batch/v1's own default orphans
        // them. A pod goes at once (its kubelet is the lab's).
        let body = if kind == "Pod" {
            json!({"gracePeriodSeconds": 0})
        } else {
            json!({"propagationPolicy": "Background"})
        };
        let body = Some((body, "application/json"));
        match self.call(reqwest::Method::DELETE, &path, body) {
            Ok((200 | 202, _)) => true,
            Ok((404, _)) => false,
            Ok((code, v)) => {
                tracing::warn!(target: "lab", %path, code, answer = %v, "DELETE refused");
                false
            }
            Err(e) => {
                tracing::warn!(target: "lab", error = %e, "DELETE failed");
                false
            }
        }
    }
}

async fn send(http: &reqwest::Client, base: &str, call: &Call) -> Result<(u16, Value), String> {
    let what = format!("{} {}", call.method, call.path);
    let mut request = http
        .request(call.method.clone(), format!("{base}{}", call.path))
        .bearer_auth(ADMIN_TOKEN)
        .header("accept", "application/json");
    if let Some((body, content_type)) = &call.body {
        request = request
            .header("content-type", *content_type)
            .body(body.to_string());
    }
    let r = request.send().await.map_err(|e| format!("{what}: {e}"))?;
    let code = r.status().as_u16();
    let text = r.text().await.map_err(|e| format!("{what}: {e}"))?;
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((code, v))
}

/// Kinds without a namespace (those the lab and its scenarios write).
const CLUSTER_SCOPED: &[&str] = &[
    "Node",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "Namespace",
    "ResourceSlice",
    "DeviceClass",
    "DeviceTaintRule",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "ClusterQueue",
    "ResourceFlavor",
    "AdmissionCheck",
    // Karpenter's (peer-figures).
    "NodePool",
    "NodeClaim",
    "KWOKNodeClass",
    "ProvisioningRequestConfig",
    "Topology",
];

/// Kinds whose status is written through the status subresource.
fn has_status(kind: &str) -> bool {
    !matches!(
        kind,
        "Namespace" | "ResourceSlice" | "DeviceClass" | "ConfigMap" | "Lease" | "ServiceAccount"
    )
}

fn namespace_of(kind: &str, object: &Value) -> String {
    if CLUSTER_SCOPED.contains(&kind) {
        String::new()
    } else {
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned()
    }
}

/// `Pod` → `pods`, `DeviceClass` → `deviceclasses`, `Policy` → `policies`.
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s') || lower.ends_with("ch") {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

fn group_prefix(api_version: &str) -> String {
    if api_version == "v1" {
        "/api/v1".into()
    } else {
        format!("/apis/{api_version}")
    }
}

/// A kind's collection: in `namespace` (`Some`), or across all (`None`).
fn collection_path(api_version: &str, kind: &str, namespace: Option<&str>) -> String {
    let prefix = group_prefix(api_version);
    match namespace {
        Some(ns) if !ns.is_empty() && !CLUSTER_SCOPED.contains(&kind) => {
            format!("{prefix}/namespaces/{ns}/{}", plural(kind))
        }
        _ => format!("{prefix}/{}", plural(kind)),
    }
}

fn object_path(api_version: &str, kind: &str, namespace: &str, name: &str) -> String {
    let ns = if CLUSTER_SCOPED.contains(&kind) {
        ""
    } else if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    format!("{}/{name}", collection_path(api_version, kind, Some(ns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_upstreams() {
        assert_eq!(
            object_path("v1", "Pod", "ml", "p"),
            "/api/v1/namespaces/ml/pods/p"
        );
        assert_eq!(object_path("v1", "Node", "", "n"), "/api/v1/nodes/n");
        assert_eq!(
            collection_path("resource.k8s.io/v1", "DeviceClass", Some("x")),
            "/apis/resource.k8s.io/v1/deviceclasses"
        );
        assert_eq!(
            object_path("autoscaling.x-k8s.io/v1", "ProvisioningRequest", "ml", "a"),
            "/apis/autoscaling.x-k8s.io/v1/namespaces/ml/provisioningrequests/a"
        );
        assert_eq!(plural("NetworkPolicy"), "networkpolicies");
        assert_eq!(
            collection_path("apps/v1", "DaemonSet", None),
            "/apis/apps/v1/daemonsets"
        );
    }
}
