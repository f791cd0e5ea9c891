//! accordd's pieces: configuration, the sled store, the HTTP API, the
//! control loop. The binaries (`accordd`, `accordctl`) are thin wrappers
//! over these; the local lab is its own crate (accord-lab).

pub mod api;
pub mod config;
pub mod control;
pub mod execute;
pub mod ha;
pub mod journal;
pub mod metrics;
pub mod shared;
pub mod store;
pub mod store_error;
pub mod tls;

use std::sync::Arc;

use std::path::Path;

use accord::fleet::Fleet;
use anyhow::Context;

use crate::api::{AgentTokens, ApiState};
use crate::config::DaemonConfig;
use crate::store::Store;

/// Loads a fleet file; hardware-model paths are relative to it
/// ([`accord_api::admin_files::load_fleet`], which accordctl reads too).
pub fn load_fleet(path: &Path) -> anyhow::Result<Fleet> {
    Ok(accord_api::admin_files::load_fleet(path)?)
}

/// The first few names and how many more.
pub(crate) fn summarize(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
    match names.len() {
        n if n > 5 => format!("{} and {} more", shown.join(", "), n - 5),
        _ => shown.join(", "),
    }
}

/// Opens the store and reads the secrets named in a validated `config`.
pub fn state(config: &DaemonConfig) -> anyhow::Result<Arc<ApiState>> {
    let store = Store::open_with(&config.store.dir, config.store.limits())?;
    let agent_tokens = AgentTokens::load(
        config.agents.token_file.as_deref(),
        config.agents.token_dir.as_deref(),
    )
    .context("agents: cannot read tokens")?;
    let admin_token = accord_api::files::read_to_string(
        &config.admin.token_file,
        accord_api::files::limit::SECRET,
    )
    .with_context(|| format!("admin.token_file: {}", config.admin.token_file.display()))?
    .trim()
    .to_owned();
    if admin_token.is_empty() {
        anyhow::bail!(
            "admin.token_file: {}: empty token",
            config.admin.token_file.display()
        );
    }
    if agent_tokens.contains(&admin_token) {
        anyhow::bail!(
            "admin.token_file: {}: the admin token is also an agent's token \
             (an agent could act as the admin)",
            config.admin.token_file.display()
        );
    }
    // Where each node stands (its rack), from the fleet file when set.
    let (racks, enrolled) = match &config.fleet {
        Some(f) => {
            let nodes = load_fleet(&f.file)?.nodes;
            let enrolled = nodes.iter().map(|n| n.name.clone()).collect();
            let racks = nodes
                .into_iter()
                .filter_map(|n| Some((n.name, n.rack?)))
                .collect();
            (racks, Some(enrolled))
        }
        None => Default::default(),
    };
    if let Some(r) = &config.redfish {
        let inventory = accord_redfish::Inventory::load(&r.inventory)?;
        let insecure = inventory.insecure_nodes();
        if !insecure.is_empty() {
            tracing::warn!(
                count = insecure.len(),
                nodes = %summarize(&insecure),
                "BMC certificates NOT verified for these nodes (insecure = true in the inventory)"
            );
        }
    }
    Ok(Arc::new(ApiState {
        shared: Arc::new(shared::Shared::new(store)),
        racks,
        enrolled,
        agent_tokens,
        admin_token,
        stale_after_s: config.agents.stale_after_s,
        writes: tokio::sync::Mutex::new(()),
    }))
}

/// Binds the listener, then serves until `shutdown` resolves; then lets
/// the requests and the control loop's round in flight finish and closes
/// the store ([`close_store`]) before returning. The configuration is
/// checked, the store opened and the TLS files read before anything is
/// bound.
pub async fn serve(
    config: DaemonConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_maybe_bound(config, None, shutdown).await
}

/// [`serve`] on a listener the caller has bound (`server.listen` is not
/// used): tests bind `127.0.0.1:0` and know the address before anything
/// serves, with no window for another process to take the port.
pub async fn serve_with_listener(
    config: DaemonConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_maybe_bound(config, Some(listener), shutdown).await
}

/// [`serve`]'s body: binds `server.listen` unless given a listener.
async fn serve_maybe_bound(
    config: DaemonConfig,
    bound: Option<tokio::net::TcpListener>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = state(&config)?;
    // SIGHUP (`systemctl reload`) must never stop accordd: once tokio
    // listens for it, its default action (terminate) is gone for good.
    // The control loop listens again to re-read BMC credentials.
    drop(tokio::signal::unix::signal(
        tokio::signal::unix::SignalKind::hangup(),
    ));
    // Kept to close the store once the server and the loop have stopped.
    let shared = state.shared.clone();
    // With replicas: the elector runs first, and every action asks it.
    let (stop_elector, elector_stops) = tokio::sync::oneshot::channel::<()>();
    let elector = match config.ha.enabled {
        true => {
            let client = control::run::kube_client(&config).await?;
            let elector = ha::lease::Elector::new(client, &config.ha);
            let identity = elector.identity().to_owned();
            tracing::info!(identity = %identity, namespace = %config.ha.namespace, lease = %config.ha.lease_name, "high availability: electing a leader on the Lease");
            let (leadership, task) = elector.spawn(async {
                let _ = elector_stops.await;
            });
            let _ = shared.leadership.set(leadership);
            let _ = shared.identity.set(identity);
            Some(task)
        }
        false => None,
    };
    // The control loop is built (fleet, inventory, Kubernetes client)
    // before the port is bound, so a bad setup fails the start.
    let controller = match &config.control {
        Some(_) => Some(control::Controller::new(&config, state.shared.clone()).await?),
        None => None,
    };
    let (stop_loop, loop_stopped) = tokio::sync::oneshot::channel::<()>();
    let tls = match (&config.server.tls_cert, &config.server.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
        _ => None,
    };
    let listener = match bound {
        Some(l) => l,
        None => tokio::net::TcpListener::bind(config.listen_addr())
            .await
            .with_context(|| format!("server.listen: cannot bind {}", config.server.listen))?,
    };
    if let Err(e) = notify_ready() {
        tracing::warn!(error = %e, "cannot tell systemd the daemon is ready");
    }
    let control_task = controller.map(|c| {
        tokio::spawn(c.run(async {
            let _ = loop_stopped.await;
        }))
    });
    let shutdown = async move {
        shutdown.await;
        let _ = stop_loop.send(());
    };
    let max_body = config.server.max_body_bytes;
    match tls {
        Some(acceptor) => {
            let listener = tls::TlsListener::new(listener, acceptor)?;
            tracing::info!(listen = %config.server.listen, "accordd serving over TLS");
            api::serve(
                listener,
                api::router(state, max_body),
                api::Deadlines::default(),
                shutdown,
            )
            .await
            .context("HTTP server failed")
        }
        None => serve_on(listener, state, max_body, shutdown).await,
    }?;
    if let Some(t) = control_task {
        let _ = t.await;
    }
    // The loop has stopped acting: the Lease is given up (released), so
    // another replica takes over at once rather than after the lease.
    let _ = stop_elector.send(());
    if let Some(t) = elector {
        let _ = t.await;
    }
    tracing::info!("server and control loop stopped; closing the store");
    close_store(shared, STORE_CLOSE_WITHIN).await?;
    tracing::info!("store closed");
    Ok(())
}

/// How long a stopping accordd waits for its last holders of the store
/// (connections finishing, power actions in flight) and for the store to
/// close; systemd's default stop timeout is 90 s.
pub const STORE_CLOSE_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Closes the store in `shared` once everything else has let go of it:
/// waits, up to `within` in all, until this is the last handle on
/// `shared` (the HTTP server's connections and the control loop hold
/// clones), then [`Store::close`] (which waits for the journal's holders
/// and sled's threads). Afterwards the store directory can be opened again
/// at once. The error says what was still held.
pub async fn close_store(
    shared: Arc<shared::Shared>,
    within: std::time::Duration,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let dir = shared.store.dir().to_owned();
    let mut shared = shared;
    let shared = loop {
        match Arc::try_unwrap(shared) {
            Ok(s) => break s,
            Err(back) if started.elapsed() < within => {
                shared = back;
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(back) => anyhow::bail!(
                "store {}: still in use {:?} after shutdown ({} other holders of the \
                 daemon's shared state: connections or control-loop tasks)",
                dir.display(),
                started.elapsed(),
                Arc::strong_count(&back) - 1
            ),
        }
    };
    let left = within.saturating_sub(started.elapsed());
    tokio::task::spawn_blocking(move || shared.store.close(left))
        .await
        .context("closing the store")??;
    Ok(())
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
    // Deadlines: idle connections, request headers, request bodies.
    api::serve(
        listener,
        api::router(state, max_body_bytes),
        api::Deadlines::default(),
        shutdown,
    )
    .await
    .context("HTTP server failed")
}

/// Tells systemd (`Type=notify`) that the daemon is ready: called once the
/// configuration is valid, the store open and the listener bound. A no-op
/// outside systemd (no `NOTIFY_SOCKET`).
pub fn notify_ready() -> std::io::Result<()> {
    sd_notify::notify(false, &[sd_notify::NotifyState::Ready])
}
