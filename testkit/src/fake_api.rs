//! An in-repo Kubernetes API server for tests and the local lab: real HTTP,
//! list and watch with the API server's semantics — a global
//! resourceVersion, `limit`/`continue` chunked lists, watches that replay
//! from a resourceVersion then stream (chunked JSON lines), bookmarks, and
//! `410 Gone` (an ERROR event with an Expired Status) for a watch from a
//! compacted version, after which clients re-list. It serves get, create,
//! replace, merge patch (also for `/status`) and delete, for the resources
//! Accord reads and writes. It is not a validating server: objects are
//! stored as given.

use std::collections::BTreeMap;
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
}

/// The resources Accord reads and writes.
pub fn default_resources() -> Vec<ResourceSpec> {
    let r = |prefix, plural, kind, namespaced| ResourceSpec {
        prefix,
        plural,
        kind,
        namespaced,
    };
    vec![
        r("/api/v1", "pods", "Pod", true),
        r("/api/v1", "nodes", "Node", false),
        r("/api/v1", "podtemplates", "PodTemplate", true),
        r("/api/v1", "events", "Event", true),
        r("/api/v1", "namespaces", "Namespace", false),
        r("/apis/events.k8s.io/v1", "events", "Event", true),
        r("/apis/batch/v1", "jobs", "Job", true),
        r("/apis/apps/v1", "deployments", "Deployment", true),
        r(
            "/apis/resource.k8s.io/v1",
            "resourceclaims",
            "ResourceClaim",
            true,
        ),
        r(
            "/apis/resource.k8s.io/v1",
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
            true,
        ),
        r(
            "/apis/resource.k8s.io/v1",
            "deviceclasses",
            "DeviceClass",
            false,
        ),
        r(
            "/apis/resource.k8s.io/v1",
            "resourceslices",
            "ResourceSlice",
            false,
        ),
        r(
            "/apis/scheduling.k8s.io/v1beta1",
            "podgroups",
            "PodGroup",
            true,
        ),
        r(
            "/apis/scheduling.k8s.io/v1beta1",
            "workloads",
            "Workload",
            true,
        ),
        r(
            "/apis/scheduling.x-k8s.io/v1alpha1",
            "podgroups",
            "PodGroup",
            true,
        ),
        r(
            "/apis/autoscaling.x-k8s.io/v1",
            "provisioningrequests",
            "ProvisioningRequest",
            true,
        ),
        r("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet", true),
    ]
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
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    objects: Vec<BTreeMap<(String, String), Value>>,
    log: Vec<(u64, usize, &'static str, Value)>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
    uid: u64,
}

#[derive(Debug)]
struct Shared {
    resources: Vec<ResourceSpec>,
    inner: Mutex<Inner>,
    events: broadcast::Sender<Event>,
    requests: Mutex<Vec<String>>,
    bookmark_every: Duration,
}

/// A running fake API server; stopped on drop.
#[derive(Debug)]
pub struct FakeApi {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
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

    pub async fn start_with(resources: Vec<ResourceSpec>, bookmark_every: Duration) -> FakeApi {
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
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeApi { url, shared, task }
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

    /// Forgets history up to now, as etcd compaction does, and ends every
    /// open watch: clients reconnect from their last resourceVersion, get
    /// 410 Gone and must list again.
    pub fn compact(&self) {
        {
            let mut inner = self.shared.inner.lock().expect("lock");
            inner.compacted = inner.rv + 1;
            inner.log.clear();
        }
        let _ = self.shared.events.send(Event::Close);
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.inner.lock().expect("lock").rv
    }

    /// Requests so far, as `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().expect("lock").clone()
    }
}

impl Shared {
    fn put(&self, r: usize, ns: String, name: String, mut object: Value) -> u64 {
        let mut inner = self.inner.lock().expect("lock");
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
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.requests.lock().expect("lock").push(format!(
        "{method} {}",
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("")
    ));
    let Some(t) = route(&shared, uri.path()) else {
        return reply(
            StatusCode::NOT_FOUND,
            status(
                404,
                "NotFound",
                format!("the server could not find {}", uri.path()),
            ),
        );
    };
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
        (Method::GET, Some(name)) => {
            let inner = shared.inner.lock().expect("lock");
            match inner.objects[t.resource].get(&(ns_key(&t), name.clone())) {
                Some(o) => reply(StatusCode::OK, o.clone()),
                None => not_found(spec.plural, name),
            }
        }
        (Method::POST, None) => {
            let Ok(mut object) = serde_json::from_slice::<Value>(&body) else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    status(400, "BadRequest", "not JSON".into()),
                );
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
            if shared.inner.lock().expect("lock").objects[t.resource]
                .contains_key(&(ns.clone(), name.clone()))
            {
                return reply(
                    StatusCode::CONFLICT,
                    status(
                        409,
                        "AlreadyExists",
                        format!("{} \"{name}\" already exists", spec.plural),
                    ),
                );
            }
            shared.put(t.resource, ns.clone(), name.clone(), object);
            let inner = shared.inner.lock().expect("lock");
            reply(
                StatusCode::CREATED,
                inner.objects[t.resource][&(ns, name)].clone(),
            )
        }
        (Method::PUT | Method::PATCH, Some(name)) => {
            let ns = ns_key(&t);
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    status(400, "BadRequest", "not JSON".into()),
                );
            };
            let current = shared.inner.lock().expect("lock").objects[t.resource]
                .get(&(ns.clone(), name.clone()))
                .cloned();
            let apply = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/apply-patch"));
            let mut object = match (current, apply) {
                (Some(o), _) => o,
                (None, true) => json!({"metadata": {"name": name}}),
                (None, false) => return not_found(spec.plural, name),
            };
            if method == Method::PUT {
                object = patch;
            } else if t.subresource.as_deref() == Some("status") {
                // A status patch changes only the status.
                if let Some(s) = patch.get("status") {
                    merge(&mut object["status"], s);
                }
            } else {
                merge(&mut object, &patch);
            }
            object["metadata"]["name"] = Value::from(name.clone());
            shared.put(t.resource, ns.clone(), name.clone(), object);
            let inner = shared.inner.lock().expect("lock");
            reply(
                StatusCode::OK,
                inner.objects[t.resource][&(ns, name.clone())].clone(),
            )
        }
        (Method::DELETE, Some(name)) => match shared.remove(t.resource, ns_key(&t), name.clone()) {
            Some(old) => reply(StatusCode::OK, old),
            None => not_found(spec.plural, name),
        },
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
        let inner = shared.inner.lock().expect("lock");
        if from != 0 && from < inner.compacted {
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
