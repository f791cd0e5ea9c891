//! The lab's BMC network: accordd reaches the emulated BMCs through this
//! proxy, which logs every request it forwards (so a test can count what
//! accordd sent, apart from the lab's own polling) and plays broken
//! machines: a power-on Reset for a broken node is answered 204 and never
//! forwarded, so the emulator keeps that machine Off. It also serves each
//! system's Bios, which the emulator's fake driver lacks ([`crate::bios`]):
//! linked from the System document, its staged settings applied when a
//! power-on Reset goes through. In a chaos run it plays BMC faults
//! ([`crate::chaos::bmc`]) and notes, for each power Reset it forwards,
//! the machine's power state when it arrived (the emulator's, read just
//! before): what the duplicate-Reset count is made from.
//!
//! With several accordd replicas ([`crate::ha`]) each replica's inventory
//! points at a listener of its own ([`BmcProxy::listen_for`]): every
//! request logged, and every Reset that reaches a machine, names the
//! replica that sent it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use crate::chaos::bmc::{BmcFault, BmcFaultCounts, BmcFaults, Verdict};
use crate::chaos::safety::ResetReached;

/// One request accordd sent.
#[derive(Debug, Clone)]
pub struct Logged {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// Answered by the proxy itself (a broken node's dropped Reset).
    pub dropped: bool,
    /// A Reset that powers on (`On`, `ForceOn`, `PushPowerButton`).
    pub power_on: bool,
    /// The body of a PATCH (its first 4 KiB): what a BIOS staging sent.
    pub body: Option<String>,
    /// A Reset's `ResetType`.
    pub reset_type: Option<String>,
    /// A chaos fault that answered or held it (`503`, `hang`).
    pub fault: Option<&'static str>,
    /// The accordd replica that sent it (the listener it came in on:
    /// [`BmcProxy::listen_for`]); `None`: the main listener (one accordd).
    pub replica: Option<String>,
}

impl Logged {
    /// A request that changes something (anything but GET and HEAD): a
    /// Reset, a BIOS staging.
    pub fn is_write(&self) -> bool {
        self.method != "GET" && self.method != "HEAD"
    }
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    broken: BTreeSet<String>,
    log: Mutex<Vec<Logged>>,
    /// Each system's BIOS, served by the proxy itself.
    bios: Mutex<BTreeMap<String, crate::bios::MachineBios>>,
    /// BMC faults armed and fired (chaos runs).
    faults: Mutex<BmcFaults>,
    /// Power Resets that reached a machine (the emulator accepted them),
    /// with its power state when each arrived.
    resets: Mutex<Vec<ResetReached>>,
    /// The SessionService the BMCs offer (`lab.bmc_sessions`).
    sessions: Option<Mutex<Sessions>>,
}

/// A Redfish SessionService (DSP0266 "Session management"): a POST of
/// `UserName`/`Password` to the Sessions collection makes a session
/// (201, `X-Auth-Token`, `Location`); a request carries the token (or
/// basic auth); a DELETE of the session's URI ends it. Without valid
/// credentials every request but the service root is 401.
#[derive(Debug)]
pub struct Sessions {
    pub username: String,
    pub password: String,
    /// Token → session id, open now.
    open: BTreeMap<String, u64>,
    pub created: u64,
    pub deleted: u64,
    /// Session POSTs refused (wrong credentials).
    pub refused: u64,
}

pub const SESSIONS_PATH: &str = "/redfish/v1/SessionService/Sessions";

/// What a listener's requests are handled with: the proxy's state and
/// the replica the listener is for (`None`: the main listener).
#[derive(Clone)]
struct Via {
    shared: Arc<Shared>,
    replica: Option<Arc<str>>,
}

/// Serves the proxy on a free loopback port for `replica`: its base URL.
async fn serve(shared: Arc<Shared>, replica: Option<Arc<str>>) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .fallback(forward)
        .with_state(Via { shared, replica });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

#[derive(Clone)]
pub struct BmcProxy {
    pub url: String,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BmcProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BmcProxy").field("url", &self.url).finish()
    }
}

impl BmcProxy {
    /// Listens on a loopback port, forwarding to `upstream`; serves the
    /// Bios of the systems in `bios` itself.
    pub async fn start(
        upstream: &str,
        broken: BTreeSet<String>,
        bios: BTreeMap<String, crate::bios::MachineBios>,
        sessions: Option<(String, String)>,
    ) -> std::io::Result<BmcProxy> {
        let shared = Arc::new(Shared {
            sessions: sessions.map(|(username, password)| {
                Mutex::new(Sessions {
                    username,
                    password,
                    open: BTreeMap::new(),
                    created: 0,
                    deleted: 0,
                    refused: 0,
                })
            }),
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            broken,
            log: Mutex::new(Vec::new()),
            bios: Mutex::new(bios),
            faults: Mutex::new(BmcFaults::default()),
            resets: Mutex::new(Vec::new()),
        });
        let url = serve(shared.clone(), None).await?;
        Ok(BmcProxy { url, shared })
    }

    /// Another listener of the same proxy (the same machines, log and
    /// faults) for the accordd replica `replica`: its base URL. What comes
    /// in on it is logged (and each Reset reaching a machine noted) with
    /// `replica` ([`Logged::replica`], [`ResetReached::replica`]).
    pub async fn listen_for(&self, replica: &str) -> std::io::Result<String> {
        serve(self.shared.clone(), Some(Arc::from(replica))).await
    }

    /// The SessionService's counts: (created, deleted, open now, refused);
    /// `None` without `lab.bmc_sessions`.
    pub fn sessions(&self) -> Option<(u64, u64, usize, u64)> {
        self.shared.sessions.as_ref().map(|m| {
            let s = m.lock().expect("lock");
            (s.created, s.deleted, s.open.len(), s.refused)
        })
    }

    /// The BMCs' password changes (every BMC's, as an admin rotates them
    /// fleet-wide); open sessions end.
    pub fn rotate_password(&self, password: &str) {
        if let Some(m) = &self.shared.sessions {
            let mut s = m.lock().expect("lock");
            s.password = password.to_owned();
            s.open.clear();
        }
    }

    /// The requests that came in on `replica`'s listener.
    pub fn log_from(&self, replica: &str) -> Vec<Logged> {
        self.log()
            .into_iter()
            .filter(|l| l.replica.as_deref() == Some(replica))
            .collect()
    }

    /// Arms a BMC fault (chaos).
    pub fn arm(&self, fault: BmcFault) {
        self.shared.faults.lock().expect("lock").arm(fault);
    }

    /// Drops the faults armed that have not fired.
    pub fn disarm(&self) {
        self.shared.faults.lock().expect("lock").disarm();
    }

    /// The BMC faults that fired, by kind.
    pub fn fault_counts(&self) -> BmcFaultCounts {
        self.shared.faults.lock().expect("lock").counts()
    }

    /// Power Resets that reached a machine, in order, each with the
    /// machine's power state when it arrived.
    pub fn resets_reached(&self) -> Vec<ResetReached> {
        self.shared.resets.lock().expect("lock").clone()
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Logged> {
        self.shared.log.lock().expect("lock").clone()
    }

    /// Power-on Resets sent for `node` (dropped ones included).
    pub fn power_ons(&self, node: &str) -> Vec<Logged> {
        let path = reset_path(node);
        self.log()
            .into_iter()
            .filter(|l| l.power_on && l.path == path)
            .collect()
    }

    /// BIOS stagings sent for `node` (PATCHes of its Bios settings).
    pub fn bios_stagings(&self, node: &str) -> Vec<Logged> {
        let path = crate::bios::settings_path(node);
        self.log()
            .into_iter()
            .filter(|l| l.method == "PATCH" && l.path == path)
            .collect()
    }

    /// `node`'s current BIOS attributes, as its Bios resource shows them.
    pub fn bios_attributes(
        &self,
        node: &str,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        self.shared
            .bios
            .lock()
            .expect("lock")
            .get(node)
            .map(|b| b.current.clone())
    }
}

/// The system a Bios path is about, and whether it is the settings
/// object: `/redfish/v1/Systems/{node}/Bios[/Settings]`.
fn bios_target(path: &str) -> Option<(&str, bool)> {
    let rest = path
        .trim_end_matches('/')
        .strip_prefix("/redfish/v1/Systems/")?;
    let (node, tail) = rest.split_once('/')?;
    match tail {
        "Bios" => Some((node, false)),
        "Bios/Settings" => Some((node, true)),
        _ => None,
    }
}

/// The proxy's own answer to a Bios request; `None`: not a Bios path of
/// a system it serves one for.
fn bios_answer(
    s: &Shared,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Response> {
    let (node, settings) = bios_target(path)?;
    let mut all = s.bios.lock().expect("lock");
    let bios = all.get_mut(node)?;
    let answer = match (method.as_str(), settings) {
        ("GET", false) => bios.get_bios(node),
        ("GET", true) => bios.get_settings(node),
        ("PATCH", true) => {
            let if_match = headers
                .get(axum::http::header::IF_MATCH)
                .and_then(|v| v.to_str().ok());
            bios.patch_settings(if_match, body)
        }
        _ => {
            return Some(
                (
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{method} not allowed on {path}"),
                )
                    .into_response(),
            )
        }
    };
    let mut out = HeaderMap::new();
    if let Some(Ok(e)) = answer.etag.map(|e| axum::http::HeaderValue::from_str(&e)) {
        out.insert(axum::http::header::ETAG, e);
    }
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Some(match answer.body {
        Some(b) => (status, out, axum::Json(b)).into_response(),
        None => (status, out).into_response(),
    })
}

/// The system `path` names (`/redfish/v1/Systems/{node}`), if the proxy
/// serves its Bios.
fn system_of<'a>(s: &Shared, path: &'a str) -> Option<&'a str> {
    let node = path
        .trim_end_matches('/')
        .strip_prefix("/redfish/v1/Systems/")?;
    (!node.contains('/') && s.bios.lock().expect("lock").contains_key(node)).then_some(node)
}

/// The Redfish path of `node`'s Reset action.
pub fn reset_path(node: &str) -> String {
    format!("/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset")
}

/// The system a path is about: `/redfish/v1/Systems/{node}[/...]`.
fn node_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/redfish/v1/Systems/")?;
    let node = rest.split('/').next()?;
    (!node.is_empty()).then_some(node)
}

/// The emulator's power state of `node` now (the proxy's own read, not
/// logged as accordd's); `None`: unreadable.
async fn machine_on(s: &Shared, node: &str) -> Option<bool> {
    let r = s
        .http
        .get(format!("{}/redfish/v1/Systems/{node}", s.upstream))
        .timeout(std::time::Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = r.json().await.ok()?;
    Some(v["PowerState"].as_str()? == "On")
}

/// The SessionService's own answer (a session made or ended, a 401), or
/// `None` to go on.
fn session_answer(
    s: &Shared,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Response> {
    let book = s.sessions.as_ref()?;
    let mut book = book.lock().expect("lock");
    let path = path.trim_end_matches('/');
    if path == "/redfish/v1" {
        return None;
    }
    if *method == Method::POST && path == SESSIONS_PATH {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        if v["UserName"] != book.username.as_str() || v["Password"] != book.password.as_str() {
            book.refused += 1;
            return Some(StatusCode::UNAUTHORIZED.into_response());
        }
        book.created += 1;
        let id = book.created;
        let token = format!("lab-session-{id}-{:x}", std::process::id());
        book.open.insert(token.clone(), id);
        let mut h = HeaderMap::new();
        h.insert("X-Auth-Token", token.parse().expect("header value"));
        h.insert(
            "Location",
            format!("{SESSIONS_PATH}/{id}")
                .parse()
                .expect("header value"),
        );
        return Some(
            (
                StatusCode::CREATED,
                h,
                axum::Json(serde_json::json!({"Id": id.to_string(), "UserName": book.username})),
            )
                .into_response(),
        );
    }
    let token = headers.get("X-Auth-Token").and_then(|t| t.to_str().ok());
    let session = token.and_then(|t| book.open.get(t).copied());
    let basic = headers
        .get("authorization")
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| {
            use base64::Engine;
            let want = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", book.username, book.password));
            a == format!("Basic {want}")
        });
    if session.is_none() && !basic {
        return Some(StatusCode::UNAUTHORIZED.into_response());
    }
    if *method == Method::DELETE {
        if let Some(id) = path
            .strip_prefix(SESSIONS_PATH)
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|r| r.parse::<u64>().ok())
        {
            let before = book.open.len();
            book.open.retain(|_, v| *v != id);
            if book.open.len() == before {
                return Some(StatusCode::NOT_FOUND.into_response());
            }
            book.deleted += 1;
            return Some(StatusCode::NO_CONTENT.into_response());
        }
    }
    None
}

/// A 503 as a busy BMC answers it (a Redfish error body).
fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({"error": {
            "code": "Base.1.0.ServiceTemporarilyUnavailable",
            "message": "The service is temporarily unavailable (lab chaos: 503 burst)."
        }})),
    )
        .into_response()
}

async fn forward(
    State(via): State<Via>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let s = &via.shared;
    let replica = via.replica.as_deref().map(str::to_owned);
    let path = uri.path().to_owned();
    let text = String::from_utf8_lossy(&body);
    let is_reset = method == Method::POST && path.ends_with("/Actions/ComputerSystem.Reset");
    let reset_type = is_reset
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|v| v["ResetType"].as_str().map(str::to_owned));
    let power_on = is_reset
        && ["\"On\"", "\"ForceOn\"", "\"PushPowerButton\""]
            .iter()
            .any(|t| text.contains(t));
    let dropped = power_on && s.broken.iter().any(|b| path == reset_path(b));
    let node = node_of(&path).map(str::to_owned);
    let verdict = if dropped {
        Verdict::Forward
    } else {
        s.faults
            .lock()
            .expect("lock")
            .verdict(node.as_deref(), is_reset)
    };
    s.log.lock().expect("lock").push(Logged {
        at: Instant::now(),
        method: method.to_string(),
        path: path.clone(),
        dropped,
        power_on,
        body: (method == Method::PATCH).then(|| text.chars().take(4096).collect()),
        reset_type: reset_type.clone(),
        fault: match verdict {
            Verdict::Forward => None,
            Verdict::Unavailable => Some("503"),
            Verdict::Hang(_) => Some("hang"),
        },
        replica: replica.clone(),
    });
    if dropped {
        return StatusCode::NO_CONTENT.into_response();
    }
    if verdict == Verdict::Unavailable {
        return unavailable();
    }
    if let Some(answer) = session_answer(s, &method, &path, &headers, &body) {
        return answer;
    }
    // Carried through even when the sender goes away meanwhile (an
    // accordd killed with its Reset in flight): what reached the emulator
    // is noted, as a BMC carries out a request whose client is gone.
    let shared = s.clone();
    let answer = tokio::spawn(async move {
        answer(
            &shared, method, uri, headers, body, node, reset_type, replica,
        )
        .await
    })
    .await
    .unwrap_or_else(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("lab proxy: forwarding failed: {e}"),
        )
            .into_response()
    });
    if let Verdict::Hang(hold) = verdict {
        tokio::time::sleep(hold).await;
    }
    answer
}

/// The proxy's answer to a request it lets through: the Bios it serves,
/// else the emulator's (a Reset noted with the machine's power state
/// before it; a System document with its Bios link and, in a
/// wrong-power window, the stale power state).
#[allow(clippy::too_many_arguments)]
async fn answer(
    s: &Shared,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    node: Option<String>,
    reset_type: Option<String>,
    replica: Option<String>,
) -> Response {
    let path = uri.path().to_owned();
    if let Some(answer) = bios_answer(s, &method, &path, &headers, &body) {
        return answer;
    }
    // A Reset: the machine's power state as it arrives.
    let was_on = match (&reset_type, &node) {
        (Some(_), Some(n)) => machine_on(s, n).await,
        _ => None,
    };
    let system_doc = method == Method::GET
        && node
            .as_deref()
            .is_some_and(|n| path.trim_end_matches('/') == format!("/redfish/v1/Systems/{n}"));
    // The system whose power-on Reset this is, if any: its staged BIOS
    // settings apply once the emulator accepts the Reset.
    let resets = (reset_type
        .as_deref()
        .map(crate::chaos::safety::ResetDirection::of)
        == Some(crate::chaos::safety::ResetDirection::On))
    .then(|| {
        path.strip_prefix("/redfish/v1/Systems/")
            .and_then(|r| r.strip_suffix("/Actions/ComputerSystem.Reset"))
    })
    .flatten()
    .map(str::to_owned);
    // A System document the proxy serves a Bios for: linked to it.
    let system = (method == Method::GET)
        .then(|| system_of(s, &path))
        .flatten()
        .map(str::to_owned);
    let target = format!(
        "{}{}",
        s.upstream,
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut req = s.http.request(method, &target).body(body);
    for (k, v) in headers.iter() {
        if k != axum::http::header::HOST && k != axum::http::header::CONTENT_LENGTH {
            req = req.header(k, v);
        }
    }
    match req.send().await {
        Ok(r) => {
            let status = r.status();
            let mut out = HeaderMap::new();
            for (k, v) in r.headers() {
                if k != axum::http::header::CONTENT_LENGTH
                    && k != axum::http::header::TRANSFER_ENCODING
                {
                    out.insert(k.clone(), v.clone());
                }
            }
            let mut bytes = r.bytes().await.unwrap_or_default();
            if status.is_success() {
                if let (Some(rt), Some(n)) = (&reset_type, &node) {
                    let now = Instant::now();
                    s.resets.lock().expect("lock").push(ResetReached {
                        at: now,
                        node: n.clone(),
                        reset_type: rt.clone(),
                        machine_on: was_on,
                        replica,
                    });
                    s.faults.lock().expect("lock").reset_reached(n, was_on, now);
                }
                if let (true, Some(n)) = (system_doc, &node) {
                    bytes = with_power_state(s, bytes, n);
                }
                if let Some(node) = &resets {
                    if let Some(b) = s.bios.lock().expect("lock").get_mut(node) {
                        b.power_on();
                    }
                }
                if let Some(node) = &system {
                    bytes = with_bios_link(bytes, node);
                }
                if s.sessions.is_some() && path.trim_end_matches('/') == "/redfish/v1" {
                    bytes = with_sessions_link(bytes);
                }
            }
            (status, out, bytes).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("BMC unreachable: {e}")).into_response(),
    }
}

/// The service root with the SessionService the proxy plays linked, as
/// Redfish's `Links.Sessions`.
fn with_sessions_link(bytes: Bytes) -> Bytes {
    let Ok(serde_json::Value::Object(mut doc)) =
        serde_json::from_slice::<serde_json::Value>(&bytes)
    else {
        return bytes;
    };
    doc.insert(
        "Links".into(),
        serde_json::json!({"Sessions": {"@odata.id": SESSIONS_PATH}}),
    );
    doc.insert(
        "SessionService".into(),
        serde_json::json!({"@odata.id": "/redfish/v1/SessionService"}),
    );
    Bytes::from(serde_json::to_vec(&doc).unwrap_or_default())
}

/// A System document as a BMC in a wrong-power window answers it: the
/// power state it keeps reporting in place of the emulator's.
fn with_power_state(s: &Shared, bytes: Bytes, node: &str) -> Bytes {
    let Ok(serde_json::Value::Object(mut doc)) =
        serde_json::from_slice::<serde_json::Value>(&bytes)
    else {
        return bytes;
    };
    let actual = doc.get("PowerState").and_then(|p| p.as_str()) == Some("On");
    let kept = s
        .faults
        .lock()
        .expect("lock")
        .reported_power(node, actual, Instant::now());
    match kept {
        Some(on) if on != actual => {
            doc.insert(
                "PowerState".to_owned(),
                serde_json::Value::from(if on { "On" } else { "Off" }),
            );
            serde_json::to_vec(&doc).map(Bytes::from).unwrap_or(bytes)
        }
        _ => bytes,
    }
}

/// The emulator's System document with a link to the Bios the proxy
/// serves (the fake driver's has none); anything that is not a JSON
/// object is passed on as it came.
fn with_bios_link(bytes: Bytes, node: &str) -> Bytes {
    let Ok(serde_json::Value::Object(mut doc)) =
        serde_json::from_slice::<serde_json::Value>(&bytes)
    else {
        return bytes;
    };
    if doc.contains_key("Bios") {
        return bytes;
    }
    doc.insert(
        "Bios".to_owned(),
        serde_json::json!({"@odata.id": crate::bios::bios_path(node)}),
    );
    serde_json::to_vec(&doc).map(Bytes::from).unwrap_or(bytes)
}
