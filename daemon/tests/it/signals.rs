//! The real accordd binary stops gracefully on SIGTERM and SIGINT: it
//! exits 0, what it acknowledged is stored, and its store is closed (the
//! directory opens again at once).

use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_testkit::daemon::{secret, spawn, wait_serving};

const AGENT_TOKEN: &str = "agent-secret-signals";
const ADMIN_TOKEN: &str = "admin-secret-signals";

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
    let mut child = spawn(env!("CARGO_BIN_EXE_accordd"), &file, &log);
    let url = wait_serving(&mut child).await;
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

    // Exit 0; logs go to stderr, nothing on stdout.
    let said = child.stops_cleanly_on(signal, Duration::from_secs(30));
    assert!(said.contains("store closed"), "{said}");

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

/// `systemctl reload` (SIGHUP) never stops accordd: it goes on serving
/// (with a control loop it reads the BMC credentials files again), and a
/// SIGTERM then stops it as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordd_goes_on_after_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path());
    let log = dir.path().join("accordd.log");
    let mut child = spawn(env!("CARGO_BIN_EXE_accordd"), &file, &log);
    let url = wait_serving(&mut child).await;
    child.signal("HUP");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Answers after the signal was delivered (a request the process took
    // after it): still serving.
    for _ in 0..3 {
        let r = client.get(format!("{url}/v1/health")).send().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    child.assert_running("after SIGHUP");
    let said = child.stops_cleanly_on("TERM", Duration::from_secs(30));
    assert!(said.contains("store closed"), "{said}");
}
