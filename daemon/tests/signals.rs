//! The real accordd binary stops gracefully on SIGTERM and SIGINT: it
//! exits 0, what it acknowledged is stored, and its store is closed (the
//! directory opens again at once).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const AGENT_TOKEN: &str = "agent-secret-signals";
const ADMIN_TOKEN: &str = "admin-secret-signals";

fn secret(dir: &Path, name: &str, value: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, value).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// A minimal accordd.toml listening on port 0: accordd binds a free port
/// and logs it (see [`wait_serving`]).
fn config(dir: &Path) -> PathBuf {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndir = \"{}\"\n\
         [agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        dir.join("store").display(),
        secret(dir, "agent-token", AGENT_TOKEN).display(),
        secret(dir, "admin-token", ADMIN_TOKEN).display(),
    );
    let file = dir.join("accordd.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Killed on drop, so a failed assertion leaves no daemon behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(config: &Path, log: &Path) -> Guard {
    Guard(
        Command::new(env!("CARGO_BIN_EXE_accordd"))
            .arg("run")
            .arg("--config")
            .arg(config)
            .env("ACCORD_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.with_extension("stdout")).unwrap())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// The last lines of a log, for failure messages.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log)
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(40);
    format!(
        "--- {} (last {} lines) ---\n{}",
        log.display(),
        lines.len() - from,
        lines[from..].join("\n")
    )
}

/// The address in accordd's "accordd serving listen=ADDR" log line.
fn serving_address(log: &Path) -> Option<std::net::SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter(|l| l.contains("accordd serving"))
        .flat_map(str::split_whitespace)
        .find_map(|w| w.strip_prefix("listen=")?.parse().ok())
}

/// Waits until accordd logs the address it bound and 2xx answers
/// `/v1/health` there; returns its base URL. Panics at the deadline or when
/// accordd exits, with its exit status and log.
async fn wait_serving(child: &mut Guard, log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut last = "no \"accordd serving\" line in the log yet".to_owned();
    loop {
        if let Some(addr) = serving_address(log) {
            let url = format!("http://{addr}");
            match client.get(format!("{url}/v1/health")).send().await {
                Ok(r) if r.status().is_success() => return url,
                Ok(r) => last = format!("{url}/v1/health answered {}", r.status()),
                Err(e) => last = format!("{url}/v1/health: {e}"),
            }
        }
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("accordd exited ({status}) before serving:\n{}", tail(log));
        }
        assert!(
            Instant::now() < deadline,
            "accordd pid {} not serving /v1/health within 30 s (last: {last}):\n{}",
            child.0.id(),
            tail(log)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn send_signal(child: &Guard, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.0.id().to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} failed: {status}");
}

/// Waits for the process to exit, or panics at the deadline.
fn wait_exit(child: &mut Guard, within: Duration, log: &Path) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "accordd pid {} still running {within:?} after the signal:\n{}",
            child.0.id(),
            tail(log)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn report_body() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/dgx2.json");
    let hardware: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::to_vec(&serde_json::json!({ "agent_version": "test", "hardware": hardware }))
        .unwrap()
}

async fn stops_gracefully_on(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path());
    let log = dir.path().join("accordd.log");
    let mut child = spawn(&file, &log);
    let url = wait_serving(&mut child, &log).await;
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .post(format!("{url}/v1/nodes/dgx2-01/report"))
        .bearer_auth(AGENT_TOKEN)
        .header("content-type", "application/json")
        .body(report_body())
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{}",
        resp.text().await.unwrap()
    );

    send_signal(&child, signal);
    let status = wait_exit(&mut child, Duration::from_secs(30), &log);
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{signal}: {status}:\n{said}");
    assert!(said.contains("store closed"), "{said}");
    // Logs go to stderr; nothing on stdout.
    let stdout = std::fs::read_to_string(log.with_extension("stdout")).unwrap();
    assert!(stdout.is_empty(), "accordd wrote to stdout: {stdout}");

    // The store opens at once, with the acknowledged report in it.
    let store = accordd::store::Store::open(&dir.path().join("store")).unwrap();
    let node = store
        .node("dgx2-01")
        .unwrap()
        .expect("reported node stored");
    assert_eq!(node.hardware.gpus.len(), 16);
    store.close(accordd::store::CLOSE_WITHIN).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordd_stops_gracefully_on_sigterm() {
    stops_gracefully_on("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordd_stops_gracefully_on_sigint() {
    stops_gracefully_on("INT").await;
}
