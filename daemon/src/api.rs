//! The HTTP API (`/v1/...`): agents report hardware and heartbeat; admins
//! list and inspect nodes. Every route but `/v1/health` needs a bearer
//! token, compared in constant time; a refused request stores nothing.
//! Node names in paths must be Kubernetes node names (400 otherwise);
//! reports must be plausible and finite ([`limits`], 422 otherwise);
//! connections that make no progress are closed ([`timeout`]), and
//! requests have deadlines for their headers and body ([`server`]).

pub mod limits;
pub mod server;
pub mod timeout;

use std::collections::BTreeMap;
use std::sync::Arc;

use accord::hardware::SCHEMA_VERSION;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use subtle::ConstantTimeEq;

use crate::shared::Shared;
use crate::store::{Beat, IdentityRule, NodeRecord, ReportOutcome, StoreError};
pub use server::{serve, Deadlines};
pub use timeout::{IdleTimeout, IDLE_TIMEOUT};

/// How agents prove who they are.
#[derive(Clone)]
pub enum AgentTokens {
    /// One token for every node.
    Shared(String),
    /// One token per node name.
    PerNode(BTreeMap<String, String>),
}

// Secrets never reach logs: only how many tokens there are.
impl std::fmt::Debug for AgentTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentTokens::Shared(_) => f.write_str("Shared(<redacted>)"),
            AgentTokens::PerNode(m) => write!(f, "PerNode({} nodes)", m.len()),
        }
    }
}

impl AgentTokens {
    /// Reads the token file, or every file in the token directory. A
    /// token must not be empty, and under a directory no two nodes may
    /// share one (either node could report as the other).
    pub fn load(
        file: Option<&std::path::Path>,
        dir: Option<&std::path::Path>,
    ) -> std::io::Result<Self> {
        use accord_api::files::{limit, read_to_string};
        let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        let token = |path: &std::path::Path| -> std::io::Result<String> {
            let t = read_to_string(path, limit::SECRET)
                .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
            let t = t.trim().to_owned();
            if t.is_empty() {
                return Err(invalid(format!("{}: empty token", path.display())));
            }
            Ok(t)
        };
        if let Some(f) = file {
            return Ok(AgentTokens::Shared(token(f)?));
        }
        let mut tokens = BTreeMap::new();
        let mut holders: BTreeMap<String, String> = BTreeMap::new();
        if let Some(d) = dir {
            for entry in std::fs::read_dir(d)? {
                let entry = entry?;
                if entry.file_type()?.is_file() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let t = token(&entry.path())?;
                    if let Some(other) = holders.insert(t.clone(), name.clone()) {
                        return Err(invalid(format!(
                            "{}: nodes {other} and {name} have the same token",
                            d.display()
                        )));
                    }
                    tokens.insert(name, t);
                }
            }
        }
        Ok(AgentTokens::PerNode(tokens))
    }

    /// Whether `token` is one of the agents' (the admin token must not be).
    pub fn contains(&self, token: &str) -> bool {
        match self {
            AgentTokens::Shared(t) => t == token,
            AgentTokens::PerNode(m) => m.values().any(|t| t == token),
        }
    }

    /// How reports' machine identities are checked: a shared token names
    /// no node, so the machine must prove it.
    fn identity_rule(&self) -> IdentityRule {
        match self {
            AgentTokens::Shared(_) => IdentityRule::Bound,
            AgentTokens::PerNode(_) => IdentityRule::Lenient,
        }
    }

    fn expected(&self, node: &str) -> Option<&str> {
        match self {
            AgentTokens::Shared(t) => Some(t),
            AgentTokens::PerNode(m) => m.get(node).map(String::as_str),
        }
    }
}

pub struct ApiState {
    /// The store, metrics and status shared with the control loop.
    pub shared: Arc<Shared>,
    /// Node name → rack, from the fleet file.
    pub racks: BTreeMap<String, String>,
    /// The fleet file's node names, when accordd has one: the only names
    /// a report may register (a shared token's holder could otherwise
    /// register names without end).
    pub enrolled: Option<std::collections::BTreeSet<String>>,
    pub agent_tokens: AgentTokens,
    pub admin_token: String,
    pub stale_after_s: u64,
    /// Reports read, compare and write a record: one at a time. Taken
    /// before going to a blocking thread, so writes queue here and not as
    /// parked threads (each would hold its own allocator heap).
    pub writes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("shared", &self.shared)
            .field("agent_tokens", &self.agent_tokens)
            .field("stale_after_s", &self.stale_after_s)
            .finish_non_exhaustive()
    }
}

pub use crate::shared::unix_now;

/// An error answer: status and a reason in a JSON body.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::IdentityMismatch { .. } => {
                tracing::warn!(error = %e, "report refused");
                ApiError(StatusCode::CONFLICT, e.to_string())
            }
            StoreError::Full { .. } => {
                tracing::warn!(error = %e, "report refused");
                ApiError(StatusCode::INSUFFICIENT_STORAGE, e.to_string())
            }
            StoreError::NoIdentity { .. } => {
                tracing::warn!(error = %e, "report refused");
                ApiError(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("report refused: {e}"),
                )
            }
            _ => {
                tracing::error!(error = %accord::config_file::error_chain(&e), "store failure");
                ApiError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "store failure; see accordd log".into(),
                )
            }
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

fn check(given: Option<&str>, expected: Option<&str>) -> Result<(), ApiError> {
    let ok = match (given, expected) {
        (Some(g), Some(e)) => bool::from(g.as_bytes().ct_eq(e.as_bytes())),
        _ => false,
    };
    if ok {
        Ok(())
    } else if given.is_none() {
        Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "missing bearer token".into(),
        ))
    } else {
        Err(ApiError(StatusCode::UNAUTHORIZED, "wrong token".into()))
    }
}

pub use accord_api::agent::{AgentReply, Heartbeat, Report};
pub use accord_api::nodes::{NodeState, NodeView};

/// A node name from the path, checked before anything else is done with
/// it (a token looked up, a log line written, the store read).
fn node_name(node: &str) -> Result<(), ApiError> {
    accord_api::validate_node_name(node)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))
}

/// The agent session a request carries ([`accord_api::agent::SESSION_HEADER`]).
fn session(headers: &HeaderMap) -> Option<String> {
    headers
        .get(accord_api::agent::SESSION_HEADER)?
        .to_str()
        .ok()
        .map(str::to_owned)
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    accord::json::from_slice(body)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("worker failed: {e}"),
        )
    })?
}

/// Whether a report may register `node`: with a fleet file, only its
/// names (404 otherwise, nothing stored).
fn enrolled(st: &ApiState, node: &str) -> Result<(), ApiError> {
    match &st.enrolled {
        Some(names) if !names.contains(node) => {
            tracing::warn!(node = %node, "report refused: not a node of the fleet file");
            Err(ApiError(
                StatusCode::NOT_FOUND,
                format!(
                    "node {node} is not in the fleet file; accordd registers only the fleet's \
                     nodes (add it there, then restart accordd)"
                ),
            ))
        }
        _ => Ok(()),
    }
}

async fn report(
    State(st): State<Arc<ApiState>>,
    Path(node): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<AgentReply>, ApiError> {
    node_name(&node)?;
    check(bearer(&headers), st.agent_tokens.expected(&node))?;
    let metrics = st.shared.metrics.clone();
    let report: Report = parse_json(&body)?;
    if report.hardware.schema_version > SCHEMA_VERSION {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "hardware schema_version {} is newer than this accordd ({SCHEMA_VERSION}); upgrade accordd first",
                report.hardware.schema_version
            ),
        ));
    }
    limits::check_report(&report).map_err(|reason| {
        tracing::warn!(node = %node, %reason, "report refused");
        ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("report refused: {reason}"),
        )
    })?;
    enrolled(&st, &node)?;
    let rule = st.agent_tokens.identity_rule();
    let given = session(&headers);
    let _guard = st.writes.lock().await;
    let store_side = st.clone();
    let reply = blocking(move || {
        let st = store_side;
        let now = (st.shared.now)();
        let accepted = st.shared.store.report_as(
            &node,
            report.hardware,
            report.agent_version,
            now,
            rule,
            given.as_deref(),
        )?;
        let (outcome, record) = (accepted.outcome, accepted.record);
        let new_session = given.as_deref() != Some(accepted.session.as_str());
        tracing::info!(node = %node, generation = record.generation, ?outcome, new_session, "report stored");
        // The model is flagged before the command it answers is closed:
        // the loop reads commands, then the flagged models, so a command
        // it sees closed comes with this model.
        if outcome != ReportOutcome::Unchanged || report.command.is_some() {
            st.shared
                .models_changed
                .lock()
                .expect("lock")
                .insert(node.clone());
        }
        if let Some(c) = &report.command {
            let closed = st.shared.store.command_outcome(&node, c, now)?;
            tracing::info!(node = %node, command = c.generation, result = %c.result.describe(), closed, "command outcome");
        }
        let command = command_for_agent(&st, &node, now)?;
        Ok(AgentReply {
            node,
            generation: record.generation,
            session: Some(accepted.session),
            outcome: Some(outcome),
            command,
        })
    })
    .await?;
    metrics.agent_reports.inc();
    st.shared.agent_reported.notify_one();
    Ok(Json(reply))
}

/// The command to hand `node`'s agent: only a replica that may act now
/// hands one over (a follower's or a deposed leader's store may hold one
/// the leader has since closed).
fn command_for_agent(
    st: &ApiState,
    node: &str,
    now: u64,
) -> Result<Option<accord_api::agent::AgentCommand>, crate::store::StoreError> {
    let leadership = st.shared.leadership();
    if leadership.may_act().is_err() {
        return Ok(None);
    }
    if !leadership.is_ha() {
        return st.shared.store.command_for_agent(node, now);
    }
    // With replicas, a command is an intent too: handed over once the
    // shared state holds it under this term (written before its action).
    st.shared.store.command_for_agent_where(node, now, |rec| {
        st.shared.command_fenced(node, rec.generation)
    })
}

async fn heartbeat(
    State(st): State<Arc<ApiState>>,
    Path(node): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<AgentReply>, ApiError> {
    node_name(&node)?;
    check(bearer(&headers), st.agent_tokens.expected(&node))?;
    let metrics = st.shared.metrics.clone();
    let beat: Heartbeat = if body.is_empty() {
        Heartbeat::default()
    } else {
        parse_json(&body)?
    };
    limits::check_heartbeat(&beat).map_err(|reason| {
        tracing::warn!(node = %node, %reason, "heartbeat refused");
        ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("heartbeat refused: {reason}"),
        )
    })?;
    let assigned = beat.assigned;
    // No lock and no flush: a heartbeat overwrites one small record.
    let liveness = crate::store::Liveness {
        last_seen: (st.shared.now)(),
        agent_version: beat.agent_version,
        uptime_s: beat.uptime_s,
        gpu_health: beat.gpu_health,
        last_report: 0,
    };
    let now = liveness.last_seen;
    // A shared token names no node: the heartbeat proves itself with the
    // session the node's last accepted report was answered with.
    let need_session = st.agent_tokens.identity_rule() == IdentityRule::Bound;
    let given = session(&headers);
    let beat = st
        .shared
        .store
        .heartbeat_as(&node, liveness, given.as_deref(), need_session)?;
    let reply = match beat {
        Beat::Recorded(generation) => {
            // Only once the heartbeat is the node's: one entry per
            // registered node.
            let mut all = st.shared.assigned.lock().unwrap_or_else(|e| e.into_inner());
            match assigned {
                Some(pods) => {
                    all.insert(node.clone(), crate::shared::Assigned { at: now, pods });
                }
                None => {
                    all.remove(&node);
                }
            }
            drop(all);
            AgentReply {
                command: command_for_agent(&st, &node, now)?,
                node,
                generation,
                session: None,
                outcome: None,
            }
        }
        Beat::NotRegistered => {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("node {node} is not registered; report its hardware first"),
            ))
        }
        Beat::NoSession => {
            tracing::warn!(node = %node, session_sent = given.is_some(), "heartbeat refused: not the node's agent session");
            return Err(ApiError(
                StatusCode::FORBIDDEN,
                format!(
                    "heartbeat refused: node {node}: {}; with a shared agent token a heartbeat proves \
                     its machine by the session the node's last accepted report was answered with: \
                     report the hardware first (an agent that sends no session is older than this \
                     accordd: upgrade it, or run per-node agent tokens)",
                    if given.is_some() {
                        "its agent session is not the node's current one"
                    } else {
                        "it carries no agent session"
                    }
                ),
            ));
        }
    };
    metrics.agent_heartbeats.inc();
    Ok(Json(reply))
}

fn view(st: &ApiState, record: NodeRecord) -> NodeView {
    let state = if record.is_stale((st.shared.now)(), st.stale_after_s) {
        NodeState::Stale
    } else {
        NodeState::Fresh
    };
    // What the control loop's last round made of it.
    let (model, drift, bios) = st
        .shared
        .control
        .read()
        .expect("lock")
        .as_ref()
        // The status lists nodes sorted by name (the fleet's order).
        .and_then(|c| {
            c.nodes
                .binary_search_by(|n| n.name.as_str().cmp(&record.name))
                .ok()
                .map(|i| &c.nodes[i])
        })
        .map(|n| (Some(n.model), n.drift.clone(), n.bios.clone()))
        .unwrap_or_default();
    NodeView {
        rack: st.racks.get(&record.name).cloned(),
        record,
        state,
        model,
        drift,
        bios,
    }
}

/// `GET /v1/nodes?after=NAME&limit=N`: a page of nodes by name.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    after: Option<String>,
    limit: Option<usize>,
}

/// Nodes a page holds unless asked for fewer, and at most: a page of
/// 1 MiB records (`store.max_node_bytes`) stays within what a client reads.
pub const NODES_PAGE: usize = 100;
pub const NODES_PAGE_MAX: usize = 200;

/// A page of nodes by name; the header [`accord_api::nodes::NEXT_PAGE_HEADER`]
/// names the node to ask after for the next page, while there is one.
async fn list_nodes(
    State(st): State<Arc<ApiState>>,
    query: Result<axum::extract::Query<Page>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check(bearer(&headers), Some(&st.admin_token))?;
    let axum::extract::Query(page) =
        query.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    if let Some(after) = &page.after {
        node_name(after)?;
    }
    let limit = match page.limit {
        None => NODES_PAGE,
        Some(n) if (1..=NODES_PAGE_MAX).contains(&n) => n,
        Some(n) => {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                format!("limit {n}: between 1 and {NODES_PAGE_MAX}"),
            ))
        }
    };
    let store_side = st.clone();
    let (records, next) = blocking(move || {
        Ok(store_side
            .shared
            .store
            .nodes_page(page.after.as_deref(), limit)?)
    })
    .await?;
    let views: Vec<NodeView> = records.into_iter().map(|r| view(&st, r)).collect();
    let mut answer = Json(views).into_response();
    if let Some(next) = next {
        let value =
            axum::http::HeaderValue::from_str(&next).expect("node names are valid header values");
        answer
            .headers_mut()
            .insert(accord_api::nodes::NEXT_PAGE_HEADER, value);
    }
    Ok(answer)
}

async fn get_node(
    State(st): State<Arc<ApiState>>,
    Path(node): Path<String>,
    headers: HeaderMap,
) -> Result<Json<NodeView>, ApiError> {
    check(bearer(&headers), Some(&st.admin_token))?;
    node_name(&node)?;
    match st.shared.store.node(&node)? {
        Some(r) => Ok(Json(view(&st, r))),
        None => Err(ApiError(StatusCode::NOT_FOUND, format!("no node {node}"))),
    }
}

async fn replace_node(
    State(st): State<Arc<ApiState>>,
    Path(node): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    check(bearer(&headers), Some(&st.admin_token))?;
    node_name(&node)?;
    let _guard = st.writes.lock().await;
    let store_side = st.clone();
    let found = blocking(move || Ok(store_side.shared.store.allow_replacement(&node)?)).await?;
    if found {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError(StatusCode::NOT_FOUND, "no such node".into()))
    }
}

/// `accordctl node forget NAME`: the node's record, identity, session,
/// liveness and scheduler view removed. Not for a node of the fleet file
/// (its agent would register it again; remove it there first).
async fn forget_node(
    State(st): State<Arc<ApiState>>,
    Path(node): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    check(bearer(&headers), Some(&st.admin_token))?;
    node_name(&node)?;
    if st
        .enrolled
        .as_ref()
        .is_some_and(|names| names.contains(&node))
    {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!(
                "node {node} is in the fleet file: its agent would register it again; remove it \
                 from the fleet file and restart accordd first (`accordctl node replace {node}` \
                 for a new machine under the name)"
            ),
        ));
    }
    let _guard = st.writes.lock().await;
    let store_side = st.clone();
    let name = node.clone();
    let found = blocking(move || Ok(store_side.shared.store.forget(&name)?)).await?;
    if found {
        st.shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&node);
        tracing::info!(node = %node, "node forgotten");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError(StatusCode::NOT_FOUND, format!("no node {node}")))
    }
}

pub use accord_api::control::ADMIN_ANSWER_WITHIN;

/// An admin's power request (`accordctl power`): handed to the control
/// loop, which checks it as its own actions and journals what it sends.
async fn power_node(
    State(st): State<Arc<ApiState>>,
    Path(node): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<accord_api::control::AdminPowerAnswer>, ApiError> {
    use crate::shared::{AdminCall, RefusalKind};
    check(bearer(&headers), Some(&st.admin_token))?;
    node_name(&node)?;
    let request: accord_api::control::AdminPowerRequest = parse_json(&body)?;
    let Some(door) = st.shared.admin_power.get() else {
        return Err(ApiError(
            StatusCode::CONFLICT,
            "accordd runs without [control]: it powers nothing itself (`accordctl power --direct` talks to the BMCs)".into(),
        ));
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let call = AdminCall {
        node: node.clone(),
        request,
        reply,
    };
    if door.try_send(call).is_err() {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many power requests wait for the control loop; ask again shortly".into(),
        ));
    }
    match tokio::time::timeout(ADMIN_ANSWER_WITHIN, answer).await {
        Ok(Ok(Ok(a))) => Ok(Json(a)),
        Ok(Ok(Err(refused))) => Err(ApiError(
            match refused.kind {
                RefusalKind::UnknownNode => StatusCode::NOT_FOUND,
                RefusalKind::Check => StatusCode::CONFLICT,
                RefusalKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            },
            refused.reason,
        )),
        Ok(Err(_)) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the control loop stopped before it answered".into(),
        )),
        Err(_) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the control loop did not answer within {} s (it waits for its first lists and BMC reads at start); ask again",
                ADMIN_ANSWER_WITHIN.as_secs()
            ),
        )),
    }
}

/// Prometheus text exposition; no token (it holds no secrets, and
/// scrapers rarely carry one).
async fn metrics(State(state): State<Arc<ApiState>>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.shared.metrics.encode(),
    )
}

/// The control loop's last round, for `accordctl status` and `explain`.
async fn control_status(
    State(st): State<Arc<ApiState>>,
    headers: HeaderMap,
) -> Result<Json<accord_api::control::ControlStatus>, ApiError> {
    check(bearer(&headers), Some(&st.admin_token))?;
    let replica = st.shared.replica();
    match (st.shared.control.read().expect("lock").clone(), replica) {
        (Some(mut s), replica) => {
            s.replica = replica;
            Ok(Json(s))
        }
        (None, Some(r)) if !r.leading => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "replica {} follows and has run no round; the leader is {} (ask it)",
                r.identity,
                r.leader.as_deref().unwrap_or("not known yet")
            ),
        )),
        (None, _) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "no control round yet (accordd runs without [control], or is starting)".into(),
        )),
    }
}

/// This replica and who leads (`[ha]`); 404 for a single replica.
async fn replica_status(
    State(st): State<Arc<ApiState>>,
    headers: HeaderMap,
) -> Result<Json<accord_api::control::ReplicaStatus>, ApiError> {
    check(bearer(&headers), Some(&st.admin_token))?;
    st.shared.replica().map(Json).ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "accordd runs as a single replica ([ha] is off)".into(),
        )
    })
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

pub fn router(state: Arc<ApiState>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(control_status))
        .route("/v1/replica", get(replica_status))
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/nodes/{name}", get(get_node).delete(forget_node))
        .route("/v1/nodes/{name}/report", post(report))
        .route("/v1/nodes/{name}/heartbeat", post(heartbeat))
        .route("/v1/nodes/{name}/replace", post(replace_node))
        .route("/v1/nodes/{name}/power", post(power_node))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}
