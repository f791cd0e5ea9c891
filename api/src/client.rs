//! The one typed HTTP client for accordd's `/v1` API: the agent's reports
//! and heartbeats, accordctl's and the lab's status and node views. Async
//! (reqwest); the caller brings the runtime.

use std::time::Duration;

use accord::hardware::NodeHardware;
use serde::de::DeserializeOwned;

use crate::agent::{AgentReply, CommandOutcome, Heartbeat, Report};
use crate::control::ControlStatus;
use crate::nodes::NodeView;

/// Why a call to accordd did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{ca}: not a PEM certificate")]
    Certificate {
        ca: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
    /// The base URL does not parse or cannot carry a path.
    #[error("{base}: not an http(s) URL accordd can be reached at")]
    BadUrl { base: String },
    /// A node name that is not a Kubernetes node name: refused before any
    /// request.
    #[error(transparent)]
    NodeName(#[from] crate::names::NodeNameError),
    #[error("accordd unreachable at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// accordd answered with an error status; `reason` is its JSON
    /// `error` field (or the body).
    #[error("{url}: accordd answered {status}: {reason}")]
    Refused {
        url: String,
        status: reqwest::StatusCode,
        reason: String,
    },
    /// An answer larger than [`ClientOptions::max_answer_bytes`]: not
    /// read past the limit (an endless body cannot exhaust memory).
    #[error("{url}: the answer is larger than {limit} bytes; not read further")]
    TooLarge { url: String, limit: usize },
    /// A page of a listing that cannot be followed (its next page is not
    /// after it).
    #[error("{url}: not a page of the listing: {reason}")]
    BadPage { url: String, reason: String },
    #[error("{url}: the answer is not what this client expects")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// The HTTP status accordd answered with, if it answered.
    pub fn status(&self) -> Option<reqwest::StatusCode> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client for one accordd, with one bearer token (an agent's or the
/// admin's). It keeps each node's agent session (the answer to an
/// accepted report) and sends it with that node's reports and heartbeats
/// ([`crate::agent::SESSION_HEADER`]); clones share them.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    sessions: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, String>>>,
    max_answer_bytes: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// What a client is built from.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// A PEM CA certificate to trust (for an `https` URL), and where it
    /// came from (for errors).
    pub ca_pem: Option<(String, Vec<u8>)>,
    /// Per request.
    pub timeout: Duration,
    /// The largest answer read; larger ones are refused
    /// ([`ClientError::TooLarge`]). An error answer is read up to
    /// [`MAX_ERROR_BYTES`] and cut there.
    pub max_answer_bytes: usize,
}

/// The default [`ClientOptions::max_answer_bytes`]: far above any one
/// answer (a page of `/v1/nodes` is at most 200 records of
/// `store.max_node_bytes`), far below memory.
pub const MAX_ANSWER_BYTES: usize = 256 << 20;

/// How much of an error answer is read and shown.
pub const MAX_ERROR_BYTES: usize = 16 << 10;

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ca_pem: None,
            timeout: Duration::from_secs(30),
            max_answer_bytes: MAX_ANSWER_BYTES,
        }
    }
}

/// Reads `resp`'s body chunk by chunk, at most `limit` bytes: the bytes
/// read and whether the body went on past the limit (then the rest is
/// never read; dropping the response closes the connection). A declared
/// `Content-Length` over the limit is refused before any of it is read.
/// The one bounded read of every HTTP client of Accord's: accordd's
/// (accordctl, the agent, the lab) and the BMCs' (accord-redfish).
pub async fn read_bounded(
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Ok((Vec::new(), true));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A JSON answer decoded; `None` when it is empty.
fn decode<T: DeserializeOwned>(url: &str, bytes: &[u8]) -> Result<Option<T>, ClientError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    accord::json::from_slice(bytes)
        .map(Some)
        .map_err(|source| ClientError::Decode {
            url: url.to_owned(),
            source,
        })
}

impl Client {
    pub fn new(base: &str, token: &str, options: ClientOptions) -> Result<Client, ClientError> {
        // accordd never redirects: a 3xx (from whatever answers at the
        // URL) is refused as it is, and the bearer token goes nowhere else.
        let mut http = reqwest::Client::builder()
            .timeout(options.timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some((ca, pem)) = &options.ca_pem {
            let cert =
                reqwest::Certificate::from_pem(pem).map_err(|source| ClientError::Certificate {
                    ca: ca.clone(),
                    source,
                })?;
            http = http.add_root_certificate(cert);
        }
        Ok(Client {
            http: http.build().map_err(ClientError::Build)?,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            sessions: Default::default(),
            max_answer_bytes: options.max_answer_bytes,
        })
    }

    /// The session held for `node`'s agent, if any.
    fn session(&self, node: &str) -> Option<String> {
        let sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.get(node).cloned()
    }

    /// Keeps the session an accepted report was answered with.
    fn keep_session(&self, node: &str, reply: &AgentReply) {
        if let Some(session) = &reply.session {
            let mut sessions = self
                .sessions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.insert(node.to_owned(), session.clone());
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The URL of `segments` under the base: each segment percent-encoded
    /// as one path segment (a `/`, `?` or `%` in it cannot change the
    /// path); `.`, `..` and empty segments are refused, since a URL cannot
    /// carry them as segments.
    fn url(&self, segments: &[&str]) -> Result<reqwest::Url, ClientError> {
        let bad = || ClientError::BadUrl {
            base: self.base.clone(),
        };
        if let Some(s) = segments.iter().find(|s| matches!(**s, "" | "." | "..")) {
            return Err(ClientError::BadUrl {
                base: format!("{} with path segment {s:?}", self.base),
            });
        }
        let mut url = reqwest::Url::parse(&self.base).map_err(|_| bad())?;
        url.path_segments_mut()
            .map_err(|()| bad())?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &[&str],
        body: Option<Vec<u8>>,
    ) -> Result<Option<T>, ClientError> {
        self.call_as(method, path, body, None).await
    }

    /// `call`, with an agent session header when `session` is given.
    async fn call_as<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &[&str],
        body: Option<Vec<u8>>,
        session: Option<&str>,
    ) -> Result<Option<T>, ClientError> {
        let parsed = self.url(path)?;
        let url = parsed.to_string();
        let (_, bytes) = self.exchange(method, parsed, body, session).await?;
        decode(&url, &bytes)
    }

    /// One request to `parsed`: the answer's headers and body, read up to
    /// the bounds; an error status is [`ClientError::Refused`] with
    /// accordd's reason.
    async fn exchange(
        &self,
        method: reqwest::Method,
        parsed: reqwest::Url,
        body: Option<Vec<u8>>,
        session: Option<&str>,
    ) -> Result<(reqwest::header::HeaderMap, Vec<u8>), ClientError> {
        let url = parsed.to_string();
        let mut req = self.http.request(method, parsed).bearer_auth(&self.token);
        if let Some(session) = session {
            req = req.header(crate::agent::SESSION_HEADER, session);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|source| ClientError::Unreachable {
                url: url.clone(),
                source,
            })?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let limit = if status.is_success() {
            self.max_answer_bytes
        } else {
            MAX_ERROR_BYTES
        };
        let (bytes, cut) =
            read_bounded(resp, limit)
                .await
                .map_err(|source| ClientError::Unreachable {
                    url: url.clone(),
                    source,
                })?;
        if cut && status.is_success() {
            return Err(ClientError::TooLarge { url, limit });
        }
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let reason = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_else(|| text.into_owned());
            return Err(ClientError::Refused {
                url,
                status,
                reason,
            });
        }
        Ok((headers, bytes))
    }

    async fn expect<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &[&str],
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        self.expect_as(method, path, body, None).await
    }

    async fn expect_as<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &[&str],
        body: Option<Vec<u8>>,
        session: Option<&str>,
    ) -> Result<T, ClientError> {
        let url = self.url(path)?.to_string();
        match self.call_as(method, path, body, session).await? {
            Some(v) => Ok(v),
            None => Err(ClientError::Decode {
                url,
                source: serde::de::Error::custom("empty answer"),
            }),
        }
    }

    /// An agent's hardware report.
    pub async fn report(
        &self,
        node: &str,
        hardware: &NodeHardware,
        agent_version: &str,
    ) -> Result<AgentReply, ClientError> {
        self.report_outcome(node, hardware, agent_version, None)
            .await
    }

    /// An agent's hardware report, with the outcome of accordd's last
    /// command when there is one.
    pub async fn report_outcome(
        &self,
        node: &str,
        hardware: &NodeHardware,
        agent_version: &str,
        command: Option<&CommandOutcome>,
    ) -> Result<AgentReply, ClientError> {
        crate::names::validate_node_name(node)?;
        let body = serde_json::to_vec(&Report {
            agent_version: Some(agent_version.to_owned()),
            hardware: hardware.clone(),
            command: command.cloned(),
        })
        .expect("reports serialize");
        let session = self.session(node);
        let reply: AgentReply = self
            .expect_as(
                reqwest::Method::POST,
                &["v1", "nodes", node, "report"],
                Some(body),
                session.as_deref(),
            )
            .await?;
        self.keep_session(node, &reply);
        Ok(reply)
    }

    /// An agent's sign of life, with the node's session when this client
    /// holds one (a shared agent token needs it: refused with 403 until
    /// a report was accepted).
    pub async fn heartbeat(&self, node: &str, beat: &Heartbeat) -> Result<AgentReply, ClientError> {
        crate::names::validate_node_name(node)?;
        let body = serde_json::to_vec(beat).expect("heartbeats serialize");
        let session = self.session(node);
        self.expect_as(
            reqwest::Method::POST,
            &["v1", "nodes", node, "heartbeat"],
            Some(body),
            session.as_deref(),
        )
        .await
    }

    /// The control loop's last round.
    pub async fn status(&self) -> Result<ControlStatus, ClientError> {
        self.expect(reqwest::Method::GET, &["v1", "status"], None)
            .await
    }

    /// This replica and who leads (`[ha]`; 404 for a single replica).
    pub async fn replica(&self) -> Result<crate::control::ReplicaStatus, ClientError> {
        self.expect(reqwest::Method::GET, &["v1", "replica"], None)
            .await
    }

    /// Every node accordd holds, page by page ([`Client::nodes_page`]);
    /// at most [`ClientOptions::max_answer_bytes`] read over all pages
    /// ([`ClientError::TooLarge`] past it). A caller that can use each
    /// page as it comes (`accordctl nodes`) reads them with `nodes_page`.
    pub async fn nodes(&self) -> Result<Vec<NodeView>, ClientError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        let mut read = 0usize;
        loop {
            let (page, bytes, next) = self.nodes_page_sized(after.as_deref()).await?;
            read = read.saturating_add(bytes);
            if read > self.max_answer_bytes {
                return Err(ClientError::TooLarge {
                    url: self.url(&["v1", "nodes"])?.to_string(),
                    limit: self.max_answer_bytes,
                });
            }
            all.extend(page);
            match next {
                Some(n) => after = Some(n),
                None => return Ok(all),
            }
        }
    }

    /// One page of nodes by name, from the first after `after` on, and the
    /// name to ask after for the next page while there is one. A page that
    /// says there is more must hold nodes and end with the name it gives,
    /// after `after` (else [`ClientError::BadPage`]): every page moves on,
    /// so following them ends.
    pub async fn nodes_page(
        &self,
        after: Option<&str>,
    ) -> Result<(Vec<NodeView>, Option<String>), ClientError> {
        let (page, _, next) = self.nodes_page_sized(after).await?;
        Ok((page, next))
    }

    async fn nodes_page_sized(
        &self,
        after: Option<&str>,
    ) -> Result<(Vec<NodeView>, usize, Option<String>), ClientError> {
        let mut url = self.url(&["v1", "nodes"])?;
        if let Some(a) = after {
            crate::names::validate_node_name(a)?;
            url.query_pairs_mut().append_pair("after", a);
        }
        let (headers, bytes) = self
            .exchange(reqwest::Method::GET, url.clone(), None, None)
            .await?;
        let views: Vec<NodeView> = decode(url.as_str(), &bytes)?.unwrap_or_default();
        let bad = |reason: String| ClientError::BadPage {
            url: url.to_string(),
            reason,
        };
        let next = match headers.get(crate::nodes::NEXT_PAGE_HEADER) {
            None => None,
            Some(v) => {
                let n = v
                    .to_str()
                    .ok()
                    .filter(|n| crate::names::validate_node_name(n).is_ok())
                    .ok_or_else(|| bad("the next page is not named by a node name".into()))?;
                let last = views.last().map(|v| v.record.name.as_str());
                if last != Some(n) || after.is_some_and(|a| n <= a) {
                    return Err(bad(format!(
                        "the page of {} nodes names {n:?} as its last, not {:?}",
                        views.len(),
                        last.unwrap_or("")
                    )));
                }
                Some(n.to_owned())
            }
        };
        Ok((views, bytes.len(), next))
    }

    /// Forgets a node (`accordctl node forget`): accordd removes its
    /// record, identity, session and liveness.
    pub async fn forget(&self, name: &str) -> Result<(), ClientError> {
        crate::names::validate_node_name(name)?;
        self.call::<serde_json::Value>(reqwest::Method::DELETE, &["v1", "nodes", name], None)
            .await
            .map(|_| ())
    }

    pub async fn node(&self, name: &str) -> Result<NodeView, ClientError> {
        crate::names::validate_node_name(name)?;
        self.expect(reqwest::Method::GET, &["v1", "nodes", name], None)
            .await
    }

    /// Asks accordd to power a node on, off or cycle it (the control
    /// loop's checks, journaled); a refusal is `ClientError::Refused`
    /// naming the check.
    pub async fn power(
        &self,
        name: &str,
        request: &crate::control::AdminPowerRequest,
    ) -> Result<crate::control::AdminPowerAnswer, ClientError> {
        crate::names::validate_node_name(name)?;
        let body = serde_json::to_vec(request).expect("plain data");
        self.expect(
            reqwest::Method::POST,
            &["v1", "nodes", name, "power"],
            Some(body),
        )
        .await
    }

    /// Lets the node's next report carry a new machine identity.
    pub async fn allow_replacement(&self, name: &str) -> Result<(), ClientError> {
        crate::names::validate_node_name(name)?;
        self.call::<serde_json::Value>(
            reqwest::Method::POST,
            &["v1", "nodes", name, "replace"],
            None,
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> Client {
        Client::new(base, "t", ClientOptions::default()).expect("client")
    }

    #[test]
    fn path_segments_are_escaped_one_by_one() {
        let c = client("http://127.0.0.1:7070/");
        let url = c.url(&["v1", "nodes", "../nodes/x", "replace"]).unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:7070/v1/nodes/..%2Fnodes%2Fx/replace"
        );
        assert_eq!(url.path_segments().unwrap().count(), 4);
        let url = c.url(&["v1", "nodes", "a?b#c%0A d", "report"]).unwrap();
        assert_eq!(url.path_segments().unwrap().count(), 4, "{url}");
        assert!(url.query().is_none() && url.fragment().is_none(), "{url}");
        // A base with a path (behind a proxy) keeps it.
        let c = client("https://proxy.example/accord");
        assert_eq!(
            c.url(&["v1", "nodes"]).unwrap().as_str(),
            "https://proxy.example/accord/v1/nodes"
        );
    }

    #[test]
    fn dot_segments_and_bad_bases_are_refused() {
        let c = client("http://127.0.0.1:7070");
        for seg in ["..", ".", ""] {
            assert!(matches!(
                c.url(&["v1", "nodes", seg, "replace"]),
                Err(ClientError::BadUrl { .. })
            ));
        }
        assert!(matches!(
            client("not a url").url(&["v1"]),
            Err(ClientError::BadUrl { .. })
        ));
    }

    #[tokio::test]
    async fn invalid_node_names_are_refused_before_any_request() {
        // Nothing listens on port 9: a request would fail as Unreachable.
        let c = client("http://127.0.0.1:9");
        for name in ["../nodes/x", "..", "a/b", "X", "a\nb"] {
            assert!(matches!(
                c.allow_replacement(name).await,
                Err(ClientError::NodeName(_))
            ));
            assert!(matches!(c.node(name).await, Err(ClientError::NodeName(_))));
            assert!(matches!(
                c.heartbeat(name, &Heartbeat::default()).await,
                Err(ClientError::NodeName(_))
            ));
        }
    }

    /// A server that answers every connection with `head` then endless
    /// chunks of `x` until the client goes away; the bytes it sent.
    async fn endless(head: &'static str) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = sent.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    if conn.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                    while conn.write_all(chunk.as_bytes()).await.is_ok() {
                        counter.fetch_add(0x10000, Ordering::SeqCst);
                    }
                });
            }
        });
        (url, sent)
    }

    #[tokio::test]
    async fn endless_answers_and_error_answers_are_read_up_to_a_bound() {
        let limit = 1 << 20;
        let options = ClientOptions {
            max_answer_bytes: limit,
            ..Default::default()
        };
        let deadline = Duration::from_secs(30);
        let (url, sent) =
            endless("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
        let c = Client::new(&url, "t", options.clone()).unwrap();
        let err = tokio::time::timeout(deadline, c.status())
            .await
            .expect("an endless answer was read for 30 s: the read is not bounded")
            .unwrap_err();
        assert!(
            matches!(err, ClientError::TooLarge { limit: l, .. } if l == limit),
            "{err:?}"
        );
        let read = sent.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            read < 64 << 20,
            "{read} bytes were sent before the client stopped"
        );

        // An error answer: cut at MAX_ERROR_BYTES, shown as the reason.
        let (url, _) =
            endless("HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
        let c = Client::new(&url, "t", options.clone()).unwrap();
        let err = tokio::time::timeout(deadline, c.status())
            .await
            .expect("an endless error answer was read for 30 s")
            .unwrap_err();
        match err {
            ClientError::Refused { status, reason, .. } => {
                assert_eq!(status.as_u16(), 500);
                assert_eq!(reason.len(), MAX_ERROR_BYTES);
            }
            other => panic!("{other:?}"),
        }

        // A redirect is not followed (the bearer token stays home).
        let (elsewhere, sent) =
            endless("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nlocation: {elsewhere}/v1/status\r\ncontent-length: 0\r\n\r\n"
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        let c = Client::new(&url, "t", options).unwrap();
        let err = c.status().await.unwrap_err();
        assert_eq!(err.status().map(|s| s.as_u16()), Some(307), "{err:?}");
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// A server that answers every request with `answer`, whole.
    async fn answering(answer: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        url
    }

    /// A listing whose pages never end (empty pages that each name a next
    /// one) is refused at its first page, not followed for ever.
    #[tokio::test]
    async fn a_listing_whose_pages_do_not_move_on_is_refused() {
        for answer in [
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\naccord-next-after: zzz\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\naccord-next-after: ../x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
        ] {
            let url = answering(answer).await;
            let c = Client::new(&url, "t", ClientOptions::default()).unwrap();
            let err = tokio::time::timeout(Duration::from_secs(30), c.nodes())
                .await
                .expect("the listing was followed for 30 s")
                .unwrap_err();
            assert!(matches!(err, ClientError::BadPage { .. }), "{err:?}");
        }
        // The last page names no next one.
        let url = answering(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
        )
        .await;
        let c = Client::new(&url, "t", ClientOptions::default()).unwrap();
        assert!(c.nodes().await.unwrap().is_empty());
    }
}
