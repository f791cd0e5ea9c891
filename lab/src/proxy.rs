//! The lab's BMC network: accordd reaches the emulated BMCs through this
//! proxy, which logs every request it forwards (so a test can count what
//! accordd sent, apart from the lab's own polling) and plays broken
//! machines: a power-on Reset for a broken node is answered 204 and never
//! forwarded, so the emulator keeps that machine Off.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

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
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    broken: BTreeSet<String>,
    log: Mutex<Vec<Logged>>,
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
    /// Listens on a loopback port, forwarding to `upstream`.
    pub async fn start(upstream: &str, broken: BTreeSet<String>) -> std::io::Result<BmcProxy> {
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            broken,
            log: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(BmcProxy { url, shared })
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
}

/// The Redfish path of `node`'s Reset action.
pub(crate) fn reset_path(node: &str) -> String {
    format!("/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset")
}

async fn forward(
    State(s): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let text = String::from_utf8_lossy(&body);
    let power_on = method == Method::POST
        && path.ends_with("/Actions/ComputerSystem.Reset")
        && ["\"On\"", "\"ForceOn\"", "\"PushPowerButton\""]
            .iter()
            .any(|t| text.contains(t));
    let dropped = power_on && s.broken.iter().any(|b| path == reset_path(b));
    s.log.lock().expect("lock").push(Logged {
        at: Instant::now(),
        method: method.to_string(),
        path: path.clone(),
        dropped,
        power_on,
    });
    if dropped {
        return StatusCode::NO_CONTENT.into_response();
    }
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
            let bytes = r.bytes().await.unwrap_or_default();
            (status, out, bytes).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("BMC unreachable: {e}")).into_response(),
    }
}
