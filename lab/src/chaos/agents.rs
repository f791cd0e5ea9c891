//! The network between the machines' agents and accordd, in a chaos run:
//! the agents talk to accordd through this proxy, which forwards every
//! request as it came and notes each hardware report with accordd's
//! answer ([`ReportExchange`]), so the lab knows, on its own, which
//! reports accordd acknowledged. While accordd is down (killed), the
//! agents get 502, which they retry as they would a refused connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_api::agent::{AgentReply, Report};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::safety::ReportExchange;

struct Shared {
    upstream: String,
    http: reqwest::Client,
    reports: Mutex<Vec<ReportExchange>>,
}

/// The agents' way to accordd.
#[derive(Clone)]
pub struct AgentProxy {
    pub url: String,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AgentProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentProxy")
            .field("url", &self.url)
            .finish()
    }
}

impl AgentProxy {
    /// Listens on a loopback port, forwarding to accordd at `upstream`.
    pub async fn start(upstream: &str) -> std::io::Result<AgentProxy> {
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .map_err(std::io::Error::other)?,
            reports: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(AgentProxy { url, shared })
    }

    /// Every hardware report so far, in the order they were sent.
    pub fn reports(&self) -> Vec<ReportExchange> {
        self.shared.reports.lock().expect("lock").clone()
    }
}

/// The node a report path names: `/v1/nodes/{node}/report`.
fn report_node(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/nodes/")?
        .strip_suffix("/report")
        .filter(|n| !n.is_empty() && !n.contains('/'))
}

async fn forward(
    State(s): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A report the lab can read (the agents' own, so always): noted
    // before it is forwarded.
    let noted = (method == Method::POST)
        .then(|| report_node(uri.path()))
        .flatten()
        .and_then(|node| {
            let report: Report = serde_json::from_slice(&body).ok()?;
            let mut hardware = report.hardware;
            hardware.canonicalize();
            let mut all = s.reports.lock().expect("lock");
            all.push(ReportExchange {
                node: node.to_owned(),
                sent_at: Instant::now(),
                answered_at: None,
                acknowledged: false,
                hardware,
                generation: None,
            });
            Some(all.len() - 1)
        });
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
    let answer = match req.send().await {
        Ok(r) => {
            let status = r.status();
            let content_type = r.headers().get(axum::http::header::CONTENT_TYPE).cloned();
            match r.bytes().await {
                Ok(bytes) => Some((status, content_type, bytes)),
                Err(_) => None,
            }
        }
        Err(_) => None,
    };
    let Some((status, content_type, bytes)) = answer else {
        return (StatusCode::BAD_GATEWAY, "accordd unreachable").into_response();
    };
    if let Some(i) = noted {
        let reply: Option<AgentReply> = status
            .is_success()
            .then(|| serde_json::from_slice(&bytes).ok())
            .flatten();
        let mut all = s.reports.lock().expect("lock");
        let e = &mut all[i];
        e.answered_at = Some(Instant::now());
        e.acknowledged = status.is_success();
        e.generation = reply.map(|r| r.generation);
    }
    let mut out = HeaderMap::new();
    if let Some(ct) = content_type {
        out.insert(axum::http::header::CONTENT_TYPE, ct);
    }
    (status, out, bytes).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_paths_name_their_node() {
        assert_eq!(report_node("/v1/nodes/r1-n1/report"), Some("r1-n1"));
        assert_eq!(report_node("/v1/nodes/r1-n1/heartbeat"), None);
        assert_eq!(report_node("/v1/nodes//report"), None);
        assert_eq!(report_node("/v1/nodes/a/b/report"), None);
    }
}
