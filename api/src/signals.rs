//! How every long-running Accord program stops: at the first SIGTERM
//! (systemd's stop) or SIGINT (Ctrl-C), said once in the log.

use std::future::Future;

/// Installs the handlers now (so a signal that comes early is not lost)
/// and resolves at the first SIGTERM or SIGINT.
pub fn stop_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
    })
}
