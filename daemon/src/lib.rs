//! accordd's pieces: configuration, the sled store and the HTTP API. The
//! binaries (`accordd`, `accordctl`) are thin wrappers over these.

pub mod api;
pub mod config;
pub mod store;
pub mod tls;

use std::sync::Arc;

use anyhow::Context;

use crate::api::{AgentTokens, ApiState};
use crate::config::DaemonConfig;
use crate::store::Store;

/// Opens the store and reads the secrets named in a validated `config`.
pub fn state(config: &DaemonConfig) -> anyhow::Result<Arc<ApiState>> {
    let store = Store::open(&config.store.dir)?;
    let agent_tokens = AgentTokens::load(
        config.agents.token_file.as_deref(),
        config.agents.token_dir.as_deref(),
    )
    .context("agents: cannot read tokens")?;
    let admin_token = std::fs::read_to_string(&config.admin.token_file)
        .with_context(|| format!("admin.token_file: {}", config.admin.token_file.display()))?
        .trim()
        .to_owned();
    Ok(Arc::new(ApiState {
        store,
        agent_tokens,
        admin_token,
        stale_after_s: config.agents.stale_after_s,
        writes: tokio::sync::Mutex::new(()),
        now: api::unix_now,
    }))
}

/// Binds the listener, then serves until `shutdown` resolves. The
/// configuration is checked, the store opened and the TLS files read
/// before anything is bound.
pub async fn serve(
    config: DaemonConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = state(&config)?;
    let tls = match (&config.server.tls_cert, &config.server.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(config.listen_addr())
        .await
        .with_context(|| format!("server.listen: cannot bind {}", config.server.listen))?;
    if let Err(e) = notify_ready() {
        tracing::warn!(error = %e, "cannot tell systemd the daemon is ready");
    }
    let max_body = config.server.max_body_bytes;
    match tls {
        Some(acceptor) => {
            let listener = tls::TlsListener::new(listener, acceptor)?;
            tracing::info!(listen = %config.server.listen, "accordd serving over TLS");
            axum::serve(listener, api::router(state, max_body))
                .with_graceful_shutdown(shutdown)
                .await
                .context("HTTP server failed")
        }
        None => serve_on(listener, state, max_body, shutdown).await,
    }
}

/// Serves the API (plain HTTP) on a bound listener until `shutdown`
/// resolves.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: Arc<ApiState>,
    max_body_bytes: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    tracing::info!(listen = %listener.local_addr()?, "accordd serving");
    axum::serve(listener, api::router(state, max_body_bytes))
        .with_graceful_shutdown(shutdown)
        .await
        .context("HTTP server failed")
}

/// Tells systemd (`Type=notify`) that the daemon is ready: called once the
/// configuration is valid, the store open and the listener bound. A no-op
/// outside systemd (no `NOTIFY_SOCKET`).
pub fn notify_ready() -> std::io::Result<()> {
    sd_notify::notify(false, &[sd_notify::NotifyState::Ready])
}
