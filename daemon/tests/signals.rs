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

/// A minimal accordd.toml on a free port; returns it and the base URL.
fn config(dir: &Path) -> (PathBuf, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\ndir = \"{}\"\n\
         [agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        dir.join("store").display(),
        secret(dir, "agent-token", AGENT_TOKEN).display(),
        secret(dir, "admin-token", ADMIN_TOKEN).display(),
    );
    let file = dir.join("accordd.toml");
    std::fs::write(&file, text).unwrap();
    (file, format!("http://127.0.0.1:{port}"))
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
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.with_extension("stdout")).unwrap())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Polls `/v1/health` until it answers, or panics at the deadline.
async fn wait_serving(url: &str, child: &mut Guard, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = reqwest::Client::new();
    loop {
        if let Ok(r) = client.get(format!("{url}/v1/health")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!(
                "accordd exited ({status}) before serving:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "accordd did not answer {url}/v1/health within 30 s:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
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
            "accordd still running {within:?} after the signal:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
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
    let (file, url) = config(dir.path());
    let log = dir.path().join("accordd.log");
    let mut child = spawn(&file, &log);
    wait_serving(&url, &mut child, &log).await;
    let resp = reqwest::Client::new()
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
