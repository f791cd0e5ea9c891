//! A fault-injecting Redfish proxy for tests: sits in front of a real peer
//! (sushy-emulator) and can delay answers, answer with given error
//! statuses instead of forwarding, swallow chosen Reset types (a BMC that
//! accepts a shutdown the OS ignores), add a SessionService (sushy-emulator
//! has none), and records what it saw and how many requests were in
//! flight at once. Also a plain TCP relay that counts the connections
//! made through it.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

#[derive(Debug, Default)]
pub struct Faults {
    /// Every answer waits this long first.
    pub delay: Duration,
    /// Statuses answered, one per request, instead of forwarding.
    pub fail_next: VecDeque<u16>,
    /// Requests whose path ends so are answered with this status, always.
    pub fail_path: Option<(String, u16)>,
    /// Reset types answered 204 without forwarding.
    pub swallow_resets: Vec<String>,
    /// The same, for the first such Reset only (a BMC that drops one).
    pub swallow_once: Vec<String>,
    /// Serve a SessionService checking these credentials; forward with them
    /// as basic auth.
    pub sessions: Option<(String, String)>,
    /// Answer Resets (after forwarding them) with 202 and a task monitor
    /// that says "running" this many times, then ends.
    pub reset_task_polls: Option<usize>,
    /// How the task ends: `Completed`, or `Exception` with a message.
    pub reset_task_fails: bool,
    /// Resets are forwarded (the machine takes them) and their answer
    /// then held this long: past the client's timeout, it cannot tell
    /// whether they took.
    pub hold_reset_answers: Duration,
}

#[derive(Debug, Default)]
pub struct Seen {
    /// `METHOD PATH BODY` per request.
    pub requests: Vec<String>,
    pub sessions_created: usize,
    pub sessions_deleted: usize,
}

#[derive(Debug)]
pub struct ProxyState {
    upstream: String,
    client: reqwest::Client,
    pub faults: Mutex<Faults>,
    pub seen: Mutex<Seen>,
    tokens: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub task_polls: AtomicUsize,
}

impl ProxyState {
    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().requests.clone()
    }
    pub fn count(&self, prefix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }
    /// Drops every session, as a BMC does when they time out.
    pub fn expire_sessions(&self) {
        self.tokens.lock().unwrap().clear();
    }
}

#[derive(Debug)]
pub struct Proxy {
    pub url: String,
    pub state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start_proxy(upstream: &str, faults: Faults) -> Proxy {
    let state = Arc::new(ProxyState {
        upstream: upstream.trim_end_matches('/').to_owned(),
        client: reqwest::Client::new(),
        faults: Mutex::new(faults),
        seen: Mutex::new(Seen::default()),
        tokens: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        task_polls: AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Proxy { url, state, task }
}

struct InFlight<'a>(&'a ProxyState);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(
    State(st): State<Arc<ProxyState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = st.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    st.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _guard = InFlight(&st);
    let path = uri.path().to_owned();
    let body_text = String::from_utf8_lossy(&body).to_string();
    st.seen
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {path} {body_text}").trim_end().to_owned());
    let hold = st.faults.lock().unwrap().hold_reset_answers;
    let (delay, fail, swallow, sessions, task) = {
        let mut f = st.faults.lock().unwrap();
        let fail = match &f.fail_path {
            Some((suffix, code)) if path.ends_with(suffix.as_str()) => Some(*code),
            _ => f.fail_next.pop_front(),
        };
        let task = f.reset_task_polls.map(|n| (n, f.reset_task_fails));
        (
            f.delay,
            fail,
            f.swallow_resets.clone(),
            f.sessions.clone(),
            task,
        )
    };
    if path == "/redfish/v1/TaskMonitors/1" {
        let polls = st.task_polls.fetch_add(1, Ordering::SeqCst);
        let (running, fails) = task.unwrap_or((0, false));
        if polls < running {
            return (
                StatusCode::ACCEPTED,
                axum::Json(serde_json::json!({"TaskState": "Running"})),
            )
                .into_response();
        }
        let body = if fails {
            serde_json::json!({"TaskState": "Exception", "Messages": [{"Message": "Power supply fault."}]})
        } else {
            serde_json::json!({"TaskState": "Completed"})
        };
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    tokio::time::sleep(delay).await;
    if let Some(code) = fail {
        let status = StatusCode::from_u16(code).unwrap();
        let body = serde_json::json!({"error": {"code": "Base.1.8.GeneralError", "message": "injected",
            "@Message.ExtendedInfo": [{"Message": format!("Injected failure {code}.")}]}});
        return (status, axum::Json(body)).into_response();
    }
    if method == Method::POST && path.ends_with("ComputerSystem.Reset") {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
            if let Some(t) = v.get("ResetType").and_then(|t| t.as_str()) {
                if swallow.iter().any(|s| s == t) {
                    return StatusCode::NO_CONTENT.into_response();
                }
                let mut f = st.faults.lock().unwrap();
                if let Some(i) = f.swallow_once.iter().position(|s| s == t) {
                    f.swallow_once.remove(i);
                    return StatusCode::NO_CONTENT.into_response();
                }
            }
        }
    }
    if let Some((user, password)) = &sessions {
        let sessions_path = "/redfish/v1/SessionService/Sessions";
        if method == Method::POST && path == sessions_path {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if v["UserName"] != user.as_str() || v["Password"] != password.as_str() {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            let mut seen = st.seen.lock().unwrap();
            seen.sessions_created += 1;
            let token = format!("token-{}", seen.sessions_created);
            st.tokens.lock().unwrap().push(token.clone());
            let mut h = HeaderMap::new();
            h.insert("X-Auth-Token", token.parse().unwrap());
            h.insert(
                "Location",
                format!("{sessions_path}/{}", seen.sessions_created)
                    .parse()
                    .unwrap(),
            );
            return (
                StatusCode::CREATED,
                h,
                axum::Json(serde_json::json!({"Id": "1"})),
            )
                .into_response();
        }
        if path.trim_end_matches('/') != "/redfish/v1" {
            let token = headers.get("X-Auth-Token").and_then(|t| t.to_str().ok());
            let valid = token.is_some_and(|t| st.tokens.lock().unwrap().iter().any(|x| x == t));
            if !valid {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            if method == Method::DELETE && path.starts_with(sessions_path) {
                st.seen.lock().unwrap().sessions_deleted += 1;
                st.tokens
                    .lock()
                    .unwrap()
                    .retain(|x| Some(x.as_str()) != token);
                return StatusCode::NO_CONTENT.into_response();
            }
        }
    }
    let url = format!(
        "{}{}",
        st.upstream,
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut rb = st
        .client
        .request(
            reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
            url,
        )
        .body(body.to_vec());
    if let Some(ct) = headers.get("content-type") {
        rb = rb.header("content-type", ct.to_str().unwrap_or("application/json"));
    }
    if let Some((user, password)) = &sessions {
        rb = rb.basic_auth(user, Some(password));
    } else if let Some(a) = headers.get("authorization") {
        rb = rb.header("authorization", a.to_str().unwrap_or(""));
    }
    match rb.send().await {
        Ok(resp)
            if task.is_some()
                && method == Method::POST
                && path.ends_with("ComputerSystem.Reset") =>
        {
            let _ = resp.bytes().await;
            (
                StatusCode::ACCEPTED,
                [("location", "/redfish/v1/TaskMonitors/1")],
            )
                .into_response()
        }
        Ok(resp) => {
            let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
            let bytes = resp.bytes().await.unwrap_or_default();
            if method == Method::POST && path.ends_with("ComputerSystem.Reset") {
                tokio::time::sleep(hold).await;
            }
            let mut body: Vec<u8> = bytes.to_vec();
            if sessions.is_some() && path.trim_end_matches('/') == "/redfish/v1" {
                // Advertise the sessions this proxy adds.
                if let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                    v["Links"] = serde_json::json!({"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}});
                    body = serde_json::to_vec(&v).unwrap();
                }
            }
            (status, [("content-type", "application/json")], body).into_response()
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// A TCP relay to a port on 127.0.0.1 that counts the connections made
/// through it (one per attempt for a client that never reuses a failed
/// connection, as after a TLS handshake error). Stops on drop.
#[derive(Debug)]
pub struct Relay {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Connections accepted so far. Counted before a byte is relayed, so
    /// a client that got an answer has been counted.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the stop.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

pub fn start_relay(upstream_port: u16) -> Relay {
    use std::net::{Shutdown, TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (a, s) = (accepted.clone(), stop.clone());
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            if s.load(Ordering::SeqCst) {
                return;
            }
            let Ok(inbound) = inbound else { continue };
            a.fetch_add(1, Ordering::SeqCst);
            let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                continue;
            };
            // One thread per direction; when either ends, both sockets are
            // shut so the other ends too.
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                }
            };
            let (Ok(i2), Ok(o2)) = (inbound.try_clone(), outbound.try_clone()) else {
                continue;
            };
            std::thread::spawn(pipe(inbound, outbound));
            std::thread::spawn(pipe(o2, i2));
        }
    });
    Relay {
        port,
        accepted,
        stop,
    }
}

/// Settings for tests: fast polls, short retries.
pub fn fast_settings() -> accord_redfish::BmcSettings {
    accord_redfish::BmcSettings {
        max_in_flight: 2,
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        retry_attempts: 3,
        retry_initial: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        poll_interval: Duration::from_millis(250),
        power_on_timeout: Duration::from_secs(20),
        resend_after: Duration::from_secs(15),
        power_off_timeout: Duration::from_secs(20),
        graceful_timeout: Duration::from_secs(20),
        force_after_graceful: true,
        task_timeout: Duration::from_secs(20),
        sessions: true,
        max_response_bytes: accord_redfish::client::MAX_RESPONSE_BYTES,
        ..Default::default()
    }
}

pub fn target(
    name: &str,
    url: &str,
    system: Option<&str>,
    creds: Option<(&str, &str)>,
) -> accord_redfish::BmcTarget {
    accord_redfish::BmcTarget {
        name: name.to_owned(),
        endpoint: url.parse().unwrap(),
        system: system.map(str::to_owned),
        credentials: creds.map(|(u, p)| accord_redfish::Credentials {
            username: u.to_owned(),
            password: accord_redfish::Secret::new(p),
        }),
        credentials_file: None,
        tls: accord_redfish::TlsMode::Verify { ca_file: None },
        settings: fast_settings(),
    }
}

pub fn fake(ids: &[&str]) -> Vec<accord_testkit::sushy::FakeSystem> {
    ids.iter()
        .map(|id| accord_testkit::sushy::FakeSystem {
            id: (*id).to_owned(),
            power_on: false,
        })
        .collect()
}
