//! The real accord-agent binary stops gracefully on SIGTERM and SIGINT:
//! after registering with an (in-process) accordd it exits 0, and writes
//! nothing but logs, all on stderr.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "agent-token-for-signals";

fn secret(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, TOKEN).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// Killed on drop, so a failed assertion leaves no agent behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether accordd at `url` lists `node`, or why it could not tell.
async fn registered(url: &str, node: &str) -> Result<bool, String> {
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
        .get(format!("{url}/v1/nodes"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    Ok(v.as_array()
        .is_some_and(|a| a.iter().any(|n| n["name"] == node)))
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

fn wait_exit(child: &mut Guard, within: Duration, log: &Path) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "accord-agent pid {} still running {within:?} after the signal:\n{}",
            child.0.id(),
            tail(log)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

async fn stops_gracefully_on(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    // accordd's listener, bound here: no window for another process to
    // take the port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let token = secret(dir.path(), "token");
    let daemon_toml = dir.path().join("accordd.toml");
    std::fs::write(
        &daemon_toml,
        format!(
            "[server]\nlisten = \"{addr}\"\n[store]\ndir = \"{}\"\n\
             [agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
            dir.path().join("store").display(),
            token.display(),
            token.display()
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
    let out = dir.path().join("agent.stdout");
    let mut agent = Guard(
        Command::new(env!("CARGO_BIN_EXE_accord-agent"))
            .arg("run")
            .arg("--config")
            .arg(&agent_toml)
            .env("ACCORD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let has = registered(&url, "sig").await;
        if has == Ok(true) {
            break;
        }
        if let Some(status) = agent.0.try_wait().unwrap() {
            panic!(
                "accord-agent exited ({status}) before registering:\n{}",
                tail(&log)
            );
        }
        if daemon.is_finished() {
            let result = (&mut daemon).await;
            panic!(
                "accordd (in process) ended before the agent registered: {result:?}\n{}",
                tail(&log)
            );
        }
        assert!(
            Instant::now() < deadline,
            "node sig not registered at {url} within 30 s (last: {has:?}):\n{}",
            tail(&log)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let kill = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(agent.0.id().to_string())
        .status()
        .unwrap();
    assert!(kill.success(), "kill -{signal}: {kill}");
    let status = wait_exit(&mut agent, Duration::from_secs(30), &log);
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{signal}: {status}:\n{said}");
    assert!(said.contains("shutting down"), "{said}");
    let stdout = std::fs::read_to_string(&out).unwrap();
    assert!(stdout.is_empty(), "accord-agent wrote to stdout: {stdout}");

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
