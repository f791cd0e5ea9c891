//! The HTTP side of one BMC: authentication (X-Auth-Token sessions, reused,
//! re-created on 401, deleted on close; basic auth when the BMC has no
//! session service; failed logins bounded and credentials re-read when
//! their file changes: [`crate::login`]), a per-BMC limit on requests in flight and a shared
//! global one, retries with capped backoff on 5xx, timeouts and connection
//! errors (never on 4xx), and Task monitors followed to completion. Every
//! answer is read through one bounded reader: past
//! [`BmcSettings::max_response_bytes`] it is refused, not read further.

mod session;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::backoff::Backoff;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE, ETAG, IF_MATCH, LOCATION};
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Value};
use tokio::sync::{OnceCell, Semaphore};
use tracing::{debug, info, warn};

use crate::error::{RedfishError, Secret};
use crate::login::{Credentials, LoginPolicy, Logins};
use crate::model::{self, ServiceRoot};

/// How a BMC is talked to: limits, timeouts, retries, verification.
#[derive(Debug, Clone)]
pub struct BmcSettings {
    /// Requests in flight to this BMC at once (iDRAC answers 503 beyond a
    /// handful).
    pub max_in_flight: usize,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Attempts per request, the first included.
    pub retry_attempts: u32,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Between reads while waiting for a power state or a task.
    pub poll_interval: Duration,
    /// How long a power-on may take to show `On`.
    pub power_on_timeout: Duration,
    /// With no change this long after a Reset (On or ForceOff), send it
    /// once more; zero: never.
    pub resend_after: Duration,
    /// How long a forced power-off may take to show `Off`.
    pub power_off_timeout: Duration,
    /// How long the OS gets to shut down before ForceOff.
    pub graceful_timeout: Duration,
    /// After a graceful shutdown times out: ForceOff (true) or fail.
    pub force_after_graceful: bool,
    pub task_timeout: Duration,
    /// Use SessionService sessions when the BMC offers them.
    pub sessions: bool,
    /// The largest answer read from this BMC, in bytes; a larger one is a
    /// [`RedfishError::TooLarge`] and the rest of it is never read.
    pub max_response_bytes: usize,
    /// At most this many failed logins within `failed_login_window`
    /// (`crate::login`); then none until the oldest leaves the window.
    pub max_failed_logins: u32,
    pub failed_login_window: Duration,
    /// After a failed login the next waits this long, doubled per failure
    /// within the window.
    pub login_backoff: Duration,
}

/// The default bound on failed logins: 2 per 10 minutes per BMC, the
/// second no sooner than 30 s after the first. Vendor lockouts commonly
/// trip at 3 to 5 failures within minutes: this stays below them.
pub const DEFAULT_MAX_FAILED_LOGINS: u32 = 2;
pub const DEFAULT_FAILED_LOGIN_WINDOW: Duration = Duration::from_secs(600);
pub const DEFAULT_LOGIN_BACKOFF: Duration = Duration::from_secs(30);

/// JSON values (objects, arrays, numbers, strings) in one answer at most:
/// the largest recorded vendor answers (Dell, HPE, Supermicro, HGX, DMTF
/// mockups) hold under 600, a BIOS of a few thousand
/// attributes some thousands; 250,000 values take at most some 150 MB in
/// memory, whatever 16 MiB of text they came as.
pub const MAX_VALUES: usize = 250_000;

/// [`BmcSettings::max_response_bytes`] unless the inventory says
/// otherwise: far above any Redfish document (a BIOS attribute registry
/// is a few MiB), far below what would hurt accordd.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

impl Default for BmcSettings {
    fn default() -> Self {
        BmcSettings {
            max_in_flight: 2,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            retry_attempts: 4,
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(8),
            poll_interval: Duration::from_secs(2),
            power_on_timeout: Duration::from_secs(120),
            resend_after: Duration::from_secs(60),
            power_off_timeout: Duration::from_secs(120),
            graceful_timeout: Duration::from_secs(300),
            force_after_graceful: true,
            task_timeout: Duration::from_secs(600),
            sessions: true,
            max_response_bytes: MAX_RESPONSE_BYTES,
            max_failed_logins: DEFAULT_MAX_FAILED_LOGINS,
            failed_login_window: DEFAULT_FAILED_LOGIN_WINDOW,
            login_backoff: DEFAULT_LOGIN_BACKOFF,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TlsMode {
    /// Verify against this PEM bundle, or the public web roots without one.
    Verify { ca_file: Option<PathBuf> },
    /// Accept any certificate (warned about at start).
    Insecure,
}

/// One BMC as the inventory describes it.
#[derive(Debug, Clone)]
pub struct BmcTarget {
    /// The node the BMC belongs to (names it in logs and errors).
    pub name: String,
    /// `https://host[:port]`; paths are Redfish's (`/redfish/v1/...`).
    pub endpoint: Url,
    /// The system's Id or path; `None`: the only system (or the only one
    /// with a Reset action) in the Systems collection.
    pub system: Option<String>,
    pub credentials: Option<Credentials>,
    /// Where `credentials` were read from: read again when it changes.
    pub credentials_file: Option<PathBuf>,
    pub tls: TlsMode,
    pub settings: BmcSettings,
}

/// Shared by all BMCs: HTTP clients (one per TLS setting, so a thousand
/// BMCs do not build a thousand root stores) and the global limit on
/// requests in flight.
#[derive(Debug)]
pub struct HttpPool {
    clients: Mutex<HashMap<(TlsMode, Duration), reqwest::Client>>,
    global: Arc<Semaphore>,
    write_gate: Option<WriteGate>,
}

/// Asked before every request that changes something on a BMC (any
/// method but GET; sessions are not changes): `Err(why)` and the request
/// is not sent (`RedfishError::Refused`). accordd's replicas: only the
/// leader, within its term, acts.
#[derive(Clone)]
pub struct WriteGate(Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl WriteGate {
    pub fn new(gate: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> WriteGate {
        WriteGate(Arc::new(gate))
    }

    fn check(&self) -> Result<(), String> {
        (self.0)()
    }
}

impl std::fmt::Debug for WriteGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteGate")
    }
}

impl HttpPool {
    pub fn new(max_in_flight_total: usize) -> HttpPool {
        HttpPool {
            clients: Mutex::new(HashMap::new()),
            global: Arc::new(Semaphore::new(max_in_flight_total.max(1))),
            write_gate: None,
        }
    }

    /// Every BMC made from this pool asks `gate` before each change.
    pub fn with_write_gate(mut self, gate: WriteGate) -> HttpPool {
        self.write_gate = Some(gate);
        self
    }

    fn client(&self, tls: &TlsMode, connect: Duration) -> Result<reqwest::Client, String> {
        let key = (tls.clone(), connect);
        if let Some(c) = self.clients.lock().expect("pool lock").get(&key) {
            return Ok(c.clone());
        }
        let mut b = reqwest::Client::builder()
            .connect_timeout(connect)
            .redirect(same_origin_redirects())
            .pool_idle_timeout(Duration::from_secs(30));
        match tls {
            TlsMode::Insecure => b = b.danger_accept_invalid_certs(true),
            TlsMode::Verify {
                ca_file: Some(path),
            } => {
                let pem = accord_api::files::read(path, accord_api::files::limit::CONFIG)
                    .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                if certs.is_empty() {
                    return Err(format!(
                        "ca_file {}: no PEM certificate in it",
                        path.display()
                    ));
                }
                b = b.tls_built_in_root_certs(false);
                for c in certs {
                    b = b.add_root_certificate(c);
                }
            }
            TlsMode::Verify { ca_file: None } => {}
        }
        let client = b.build().map_err(|e| format!("HTTP client: {e}"))?;
        self.clients
            .lock()
            .expect("pool lock")
            .insert(key, client.clone());
        Ok(client)
    }
}

/// Redirects are followed (three at most) only to the same scheme, host
/// and port: a BMC's answer cannot send its session login (the user name
/// and password in the body of a 307) or a Basic-auth request anywhere
/// else. A redirect elsewhere is not followed; its 3xx is the answer.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else {
            return attempt.stop();
        };
        let to = attempt.url();
        let same = to.scheme() == first.scheme()
            && to.host_str() == first.host_str()
            && to.port_or_known_default() == first.port_or_known_default();
        if !same {
            attempt.stop()
        } else if attempt.previous().len() > 3 {
            attempt.error("more than 3 redirects")
        } else {
            attempt.follow()
        }
    })
}

#[derive(Debug)]
enum Auth {
    Unknown,
    Basic,
    Session {
        token: Secret,
        location: Option<String>,
    },
}

/// A BMC's answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub etag: Option<String>,
    pub location: Option<String>,
    /// The JSON body; `Null` when empty or not JSON.
    pub body: Value,
    /// What the body was (content type, size, first bytes, whether it was
    /// JSON), for errors that must say what came back.
    pub raw: RawBody,
    /// `X-Auth-Token`, when a session was created.
    pub token: Option<Secret>,
}

/// What an answer's body was, without keeping it: its `Content-Type`, its
/// size, its first bytes and why it is not JSON, when it is not. Its
/// `Display` escapes everything that came from the BMC (no control
/// characters reach a terminal or a log line).
#[derive(Debug, Clone, Default)]
pub struct RawBody {
    pub content_type: Option<String>,
    pub len: usize,
    /// The first [`RawBody::HEAD`] bytes, escaped.
    pub head: String,
    /// The JSON parser's error (a position, never the input), when the
    /// body is not empty and not JSON.
    pub json_error: Option<String>,
}

impl RawBody {
    /// How many bytes of the body are kept to show.
    pub const HEAD: usize = 64;

    fn new(content_type: Option<&[u8]>, bytes: &[u8], json_error: Option<String>) -> RawBody {
        let escape = |b: &[u8], max: usize| {
            let mut s = b[..b.len().min(max)].escape_ascii().to_string();
            if b.len() > max {
                s.push('…');
            }
            s
        };
        RawBody {
            content_type: content_type.map(|c| escape(c, 100)),
            len: bytes.len(),
            head: escape(bytes, Self::HEAD),
            json_error,
        }
    }
}

impl std::fmt::Display for RawBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.content_type {
            Some(c) => write!(f, "Content-Type {c}")?,
            None => f.write_str("no Content-Type")?,
        }
        if self.len == 0 {
            f.write_str(", empty body")
        } else {
            write!(f, ", {} bytes: \"{}\"", self.len, self.head)
        }
    }
}

/// One BMC. Cheap to share (`Arc`); every method may run concurrently,
/// within `max_in_flight`.
#[derive(Debug)]
pub struct Bmc {
    pub(crate) target: BmcTarget,
    http: reqwest::Client,
    limit: Semaphore,
    global: Arc<Semaphore>,
    auth: tokio::sync::Mutex<Auth>,
    logins: Mutex<Logins>,
    root: OnceCell<ServiceRoot>,
    pub(crate) system_path: OnceCell<String>,
    seed: u64,
    write_gate: Option<WriteGate>,
}

impl Bmc {
    pub fn new(target: BmcTarget, pool: &HttpPool) -> Result<Bmc, RedfishError> {
        let http = pool
            .client(&target.tls, target.settings.connect_timeout)
            .map_err(|reason| RedfishError::Decode {
                bmc: target.name.clone(),
                url: target.endpoint.to_string(),
                reason,
            })?;
        let seed = target.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        Ok(Bmc {
            limit: Semaphore::new(target.settings.max_in_flight.max(1)),
            global: pool.global.clone(),
            http,
            auth: tokio::sync::Mutex::new(Auth::Unknown),
            logins: Mutex::new(Logins::new(
                target.credentials.clone(),
                target.credentials_file.clone(),
            )),
            root: OnceCell::new(),
            system_path: OnceCell::new(),
            seed,
            write_gate: pool.write_gate.clone(),
            target,
        })
    }

    pub fn name(&self) -> &str {
        &self.target.name
    }

    pub fn settings(&self) -> &BmcSettings {
        &self.target.settings
    }

    pub(crate) fn url(&self, path: &str) -> String {
        let base = self.target.endpoint.as_str().trim_end_matches('/');
        format!("{base}{path}")
    }

    /// The service root, read once (unauthenticated, as Redfish allows).
    pub async fn root(&self) -> Result<&ServiceRoot, RedfishError> {
        self.root
            .get_or_try_init(|| async {
                let path = "/redfish/v1";
                let reply = self
                    .request_as(Method::GET, path, None, None, AuthUse::None)
                    .await?;
                let not_root = |what: String| RedfishError::NotRedfish {
                    bmc: self.target.name.clone(),
                    url: self.url(path),
                    expected: "service root",
                    found: format!("{what}; {}", reply.raw),
                };
                if let Some(e) = &reply.raw.json_error {
                    return Err(not_root(format!("not JSON ({e})")));
                }
                if reply.raw.len == 0 {
                    return Err(not_root("no document".to_owned()));
                }
                model::check_root(&reply.body).map_err(not_root)?;
                Ok(model::parse_root(&reply.body))
            })
            .await
    }

    pub async fn get(&self, path: &str) -> Result<Reply, RedfishError> {
        self.request(Method::GET, path, None, None).await
    }

    /// A request with authentication, retries and the concurrency limits.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> Result<Reply, RedfishError> {
        self.request_as(method, path, body, if_match, AuthUse::Credentials)
            .await
    }

    async fn request_as(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
        auth_use: AuthUse,
    ) -> Result<Reply, RedfishError> {
        let s = &self.target.settings;
        let mut backoff = Backoff::new(
            s.retry_initial.as_millis() as u64,
            s.retry_max.as_millis() as u64,
            self.seed ^ path.len() as u64,
        );
        let mut attempt = 0u32;
        let mut renewed = false;
        loop {
            attempt += 1;
            // Asked before each attempt: a retry after a pause is a new
            // send.
            if method != Method::GET {
                if let Some(gate) = &self.write_gate {
                    if let Err(reason) = gate.check() {
                        return Err(RedfishError::Refused {
                            bmc: self.target.name.clone(),
                            method: method_name(&method),
                            url: self.url(path),
                            reason,
                        });
                    }
                }
            }
            let header = match auth_use {
                AuthUse::None => AuthHeader::None,
                AuthUse::Credentials => self.auth_header().await?,
            };
            let session = matches!(header, AuthHeader::Token(_));
            let basic = matches!(header, AuthHeader::Basic(_));
            match self.attempt(&method, path, body, if_match, &header).await {
                Ok(reply) => {
                    if basic {
                        self.logins().succeeded();
                    }
                    return Ok(reply);
                }
                // Every basic-auth request is a login.
                Err(e @ RedfishError::Unauthorized { .. }) if basic => {
                    self.login_failed();
                    return Err(e);
                }
                Err(RedfishError::Unauthorized { .. }) if session && !renewed => {
                    // The session expired or was dropped by the BMC: make a
                    // new one once, without counting an attempt.
                    debug!(bmc = %self.target.name, "session refused; creating a new one");
                    self.forget_session().await;
                    renewed = true;
                    attempt -= 1;
                }
                // A POST (a Reset, an action) that may have reached the
                // BMC is not sent again: the caller reads what it did.
                Err(mut e)
                    if e.is_transient()
                        && attempt < s.retry_attempts
                        && !(method == Method::POST && e.may_have_reached()) =>
                {
                    let wait = backoff.next_wait();
                    warn!(bmc = %self.target.name, method = %method, path, attempt,
                          wait_ms = wait.as_millis() as u64, error = %e, "BMC request failed; retrying");
                    e.set_attempts(attempt);
                    tokio::time::sleep(wait).await;
                }
                Err(mut e) => {
                    e.set_attempts(attempt);
                    return Err(e);
                }
            }
        }
    }

    async fn attempt(
        &self,
        method: &Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
        header: &AuthHeader,
    ) -> Result<Reply, RedfishError> {
        let _global = self.global.acquire().await.expect("never closed");
        let _local = self.limit.acquire().await.expect("never closed");
        let url = self.url(path);
        let mut rb = self
            .http
            .request(method.clone(), &url)
            .timeout(self.target.settings.request_timeout)
            .header(ACCEPT, "application/json");
        match header {
            AuthHeader::None => {}
            AuthHeader::Token(t) => rb = rb.header("X-Auth-Token", t.expose()),
            AuthHeader::Basic(c) => rb = rb.basic_auth(&c.username, Some(c.password.expose())),
        }
        if let Some(b) = body {
            rb = rb.json(b);
        }
        if let Some(tag) = if_match {
            rb = rb.header(IF_MATCH, tag);
        }
        let method_name = method_name(method);
        let resp = rb
            .send()
            .await
            .map_err(|e| self.transport_error(method_name, &url, e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = self.read_body(resp, method_name, &url).await?;
        let (body, json_error) = if bytes.is_empty() {
            (Value::Null, None)
        } else {
            // Strictly: a key named twice in one object (a PowerState,
            // an ETag) is refused, not read as whichever came last (no
            // recorded vendor mockup has one), and at most MAX_VALUES
            // values (16 MiB of `[{},…]` would take gigabytes as values).
            match accord::json::value_within(&bytes, MAX_VALUES) {
                Ok(v) => (v, None),
                Err(e) => (Value::Null, Some(e.to_string())),
            }
        };
        let raw = RawBody::new(
            headers.get(CONTENT_TYPE).map(|v| v.as_bytes()),
            &bytes,
            json_error,
        );
        drop(bytes);
        if status == StatusCode::UNAUTHORIZED {
            return Err(RedfishError::Unauthorized {
                bmc: self.target.name.clone(),
                url,
            });
        }
        if !status.is_success() {
            return Err(RedfishError::Status {
                bmc: self.target.name.clone(),
                method: method_name,
                url,
                status: status.as_u16(),
                message: model::error_message(&body),
                attempts: 1,
            });
        }
        Ok(Reply {
            status: status.as_u16(),
            etag: header_str(&headers, ETAG),
            location: header_str(&headers, LOCATION),
            token: header_str(
                &headers,
                reqwest::header::HeaderName::from_static("x-auth-token"),
            )
            .map(Secret::new),
            body,
            raw,
        })
    }

    /// The body, read chunk by chunk up to `max_response_bytes`: refused
    /// at once when its `Content-Length` is larger, else as soon as the
    /// bytes read pass the limit. The rest is never read (the connection
    /// is dropped with the response), so memory stays within the limit.
    async fn read_body(
        &self,
        resp: reqwest::Response,
        method: &'static str,
        url: &str,
    ) -> Result<Vec<u8>, RedfishError> {
        let limit = self.target.settings.max_response_bytes;
        let declared = resp.content_length();
        let too_large = |read: usize| {
            debug!(bmc = %self.target.name, url, limit, declared, read,
                   "answer over the size limit; not read further");
            RedfishError::TooLarge {
                bmc: self.target.name.clone(),
                method,
                url: url.to_owned(),
                limit,
                declared,
            }
        };
        // The one bounded read of every client of ours (accord_api).
        let (body, over) = accord_api::client::read_bounded(resp, limit)
            .await
            .map_err(|e| self.transport_error(method, url, e))?;
        if over {
            return Err(too_large(body.len()));
        }
        Ok(body)
    }

    fn transport_error(&self, method: &'static str, url: &str, e: reqwest::Error) -> RedfishError {
        let bmc = self.target.name.clone();
        if e.is_timeout() {
            return RedfishError::Timeout {
                bmc,
                method,
                url: url.to_owned(),
                after_ms: self.target.settings.request_timeout.as_millis() as u64,
                attempts: 1,
            };
        }
        if is_certificate_error(&e) {
            return RedfishError::UntrustedCertificate {
                bmc,
                url: url.to_owned(),
                source: e,
            };
        }
        RedfishError::Connect {
            bmc,
            method,
            url: url.to_owned(),
            attempts: 1,
            source: e,
        }
    }

    /// Follows a Task monitor (202 + Location) until the task ends.
    pub async fn follow_task(&self, location: &str) -> Result<Reply, RedfishError> {
        let path = model::normalize_path(location, &mut Vec::new(), "task");
        let s = &self.target.settings;
        let deadline = tokio::time::Instant::now() + s.task_timeout;
        loop {
            let reply = self.get(&path).await?;
            let state = model::task_state(&reply.body).map(str::to_owned);
            match (reply.status, state.as_deref()) {
                (_, Some("Completed")) => return Ok(reply),
                (_, Some(st @ ("Exception" | "Killed" | "Cancelled" | "Interrupted"))) => {
                    let message = reply
                        .body
                        .get("Messages")
                        .and_then(Value::as_array)
                        .and_then(|m| m.iter().find_map(|x| x.get("Message")?.as_str()))
                        .map(str::to_owned);
                    return Err(RedfishError::TaskFailed {
                        bmc: self.target.name.clone(),
                        url: self.url(&path),
                        state: st.to_owned(),
                        message,
                    });
                }
                (202, _) | (_, Some(_)) => {}
                // A monitor that answers 200/204 without a Task body is done.
                _ => return Ok(reply),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RedfishError::TaskTimeout {
                    bmc: self.target.name.clone(),
                    url: self.url(&path),
                    waited_s: s.task_timeout.as_secs(),
                });
            }
            tokio::time::sleep(s.poll_interval).await;
        }
    }

    /// A POST or PATCH whose 202 is followed to the task's end.
    pub async fn change(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        if_match: Option<&str>,
    ) -> Result<Reply, RedfishError> {
        let reply = self.request(method, path, Some(body), if_match).await?;
        if reply.status == 202 {
            if let Some(loc) = reply.location.clone() {
                return self.follow_task(&loc).await;
            }
        }
        Ok(reply)
    }
}

#[derive(Debug, Clone, Copy)]
enum AuthUse {
    None,
    Credentials,
}

#[derive(Debug)]
enum AuthHeader {
    None,
    Token(Secret),
    Basic(Credentials),
}

fn header_str(h: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn method_name(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        _ => "request",
    }
}

fn is_certificate_error(e: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        let text = s.to_string();
        if text.contains("certificate") || text.contains("UnknownIssuer") {
            return true;
        }
        source = s.source();
    }
    false
}
