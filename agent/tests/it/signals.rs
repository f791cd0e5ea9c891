//! The real accord-agent binary stops gracefully on SIGTERM and SIGINT:
//! after registering with an (in-process) accordd it exits 0, and writes
//! nothing but logs, all on stderr.

use std::path::Path;
use std::time::{Duration, Instant};

use accord_testkit::daemon::{command, nodes, secret};
use accord_testkit::process::Process;

const TOKEN: &str = "agent-token-for-signals";
const ADMIN_TOKEN: &str = "admin-token-for-signals";

/// Whether accordd at `url` lists `node`, or why it could not tell.
async fn registered(client: &reqwest::Client, url: &str, node: &str) -> Result<bool, String> {
    Ok(nodes(client, url, ADMIN_TOKEN)
        .await?
        .iter()
        .any(|n| n["name"] == node))
}

async fn stops_gracefully_on(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    // accordd's listener, bound here: no window for another process to
    // take the port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let token = secret(dir.path(), "token", TOKEN);
    let admin = secret(dir.path(), "admin-token", ADMIN_TOKEN);
    let daemon_toml = dir.path().join("accordd.toml");
    std::fs::write(
        &daemon_toml,
        format!(
            "[server]\nlisten = \"{addr}\"\n[store]\ndir = \"{}\"\n\
             [agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
            dir.path().join("store").display(),
            token.display(),
            admin.display()
        ),
    )
    .unwrap();
    let config = accordd::config::DaemonConfig::load(&daemon_toml).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut daemon = tokio::spawn(accordd::serve_with_listener(config, listener, async {
        let _ = stopped.await;
    }));

    let xml = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hwloc/nvidiaDGX2.xml");
    let agent_toml = dir.path().join("agent.toml");
    std::fs::write(
        &agent_toml,
        format!(
            "[daemon]\nurl = \"{url}\"\ntoken_file = \"{}\"\n[node]\nname = \"sig\"\n\
             [discovery]\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 50\n\
             [backoff]\ninitial_ms = 20\nmax_ms = 200\n",
            token.display(),
            xml.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("agent.log");
    let mut agent = Process::spawn(
        "accord-agent",
        &mut command(env!("CARGO_BIN_EXE_accord-agent"), &agent_toml),
        &log,
    );
    // Each request gives up after 2 s; the wait retries.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let has = registered(&client, &url, "sig").await;
        if has == Ok(true) {
            break;
        }
        agent.assert_running(&format!("node sig to register at {url}"));
        if daemon.is_finished() {
            let result = (&mut daemon).await;
            panic!(
                "accordd (in process) ended before the agent registered: {result:?}\n{}",
                agent.tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "node sig not registered at {url} within 30 s (last: {has:?}):\n{}",
            agent.tail()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Exit 0; logs go to stderr, nothing on stdout.
    let said = agent.stops_cleanly_on(signal, Duration::from_secs(30));
    assert!(said.contains("shutting down"), "{said}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), daemon)
        .await
        .expect("accordd (in process) still running 30 s after being told to stop")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_stops_gracefully_on_sigterm() {
    stops_gracefully_on("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_stops_gracefully_on_sigint() {
    stops_gracefully_on("INT").await;
}
