//! accordd as the integration tests run it, as a child process (the binary
//! the test names: this crate does not link accord-daemon) or talked to
//! over HTTP: its token files, `accordd run`, the wait until it serves,
//! and the nodes it lists.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::Process;

/// How long [`wait_serving`] waits for accordd to serve.
pub const SERVING_WITHIN: Duration = Duration::from_secs(30);

/// Writes `value` to `dir/name`, mode 600 (accordd and accord-agent refuse
/// token files others can read).
pub fn secret(dir: &Path, name: &str, value: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, value).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// `BIN run --config CONFIG`, logging at info (accordd logs the address it
/// bound) without colour, outside systemd (no `NOTIFY_SOCKET`). `bin` is the
/// test's `env!("CARGO_BIN_EXE_accordd")`, or `accord-agent`'s: the agent
/// runs the same way.
pub fn command(bin: impl AsRef<Path>, config: &Path) -> Command {
    let mut cmd = Command::new(bin.as_ref());
    cmd.args(["run", "--config"])
        .arg(config)
        .env("ACCORD_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("NOTIFY_SOCKET");
    cmd
}

/// [`command`] started as the [`Process`] "accordd", logging to `log`.
pub fn spawn(bin: impl AsRef<Path>, config: &Path, log: &Path) -> Process {
    Process::spawn("accordd", &mut command(bin, config), log)
}

/// The address in accordd's "accordd serving listen=ADDR" log line.
pub fn serving_address(log: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter(|l| l.contains("accordd serving"))
        .flat_map(str::split_whitespace)
        .find_map(|w| w.strip_prefix("listen=")?.parse().ok())
}

/// Waits (until `deadline`) for the address accordd (configured with
/// `listen = "127.0.0.1:0"`) logs once bound. Panics at the deadline or
/// when accordd exits, with its exit status and log.
pub async fn wait_address(accordd: &mut Process, deadline: Instant) -> SocketAddr {
    loop {
        if let Some(addr) = serving_address(accordd.log()) {
            return addr;
        }
        accordd.assert_running("its \"accordd serving\" log line");
        accordd.assert_before(
            deadline,
            format_args!("logged no \"accordd serving listen=...\" line within 30 s"),
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits (up to [`SERVING_WITHIN`]) until accordd answers `/v1/health` with
/// 2xx at the address it logged; returns its base URL. Panics at the
/// deadline or when accordd exits, with its exit status and log.
pub async fn wait_serving(accordd: &mut Process) -> String {
    let deadline = Instant::now() + SERVING_WITHIN;
    let url = format!("http://{}", wait_address(accordd, deadline).await);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    loop {
        let last = match client.get(format!("{url}/v1/health")).send().await {
            Ok(r) if r.status().is_success() => return url,
            Ok(r) => format!("answered {}", r.status()),
            Err(e) => e.to_string(),
        };
        accordd.assert_running(&format!("{url}/v1/health"));
        accordd.assert_before(
            deadline,
            format_args!("not serving {url}/v1/health within 30 s (last: {last})"),
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What accordd at `url` lists at `/v1/nodes` (asked with the admin
/// `token`), or why it could not be read.
pub async fn nodes(
    client: &reqwest::Client,
    url: &str,
    token: &str,
) -> Result<Vec<serde_json::Value>, String> {
    let resp = client
        .get(format!("{url}/v1/nodes"))
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    match serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))? {
        serde_json::Value::Array(nodes) => Ok(nodes),
        _ => Err(format!("not a list: {text}")),
    }
}
