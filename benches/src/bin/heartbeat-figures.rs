//! `heartbeat-figures`: accordd's agent API under 10,000 simulated agents.
//! Registers them (each report flushed to sled before its answer), then
//! heartbeats from 64 concurrent connections for 5 s, and prints reports/s,
//! heartbeats/s and the daemon's RSS. The daemon runs in a child process
//! (this binary with `--serve`), so the load generator's memory is apart.
//! Goals (issue 4): ≥ 20,000 heartbeats/s, < 150 MB RSS at 10,000 nodes.
//!
//! Like accordd, it uses the system allocator.
//!
//! `cargo run --release -p accord-benches --bin heartbeat-figures [NODES]`

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn secret(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    // The agents' token is "bench-token"; the admin's differs (accordd
    // refuses one token for both).
    let token = if name == "agent" {
        "bench-token"
    } else {
        "bench-admin-token"
    };
    std::fs::write(&p, token).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// `--serve DIR`: the daemon side, on a store in DIR; prints its URL.
async fn serve(dir: &std::path::Path) -> anyhow::Result<()> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndir = \"{}\"\n[agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        dir.join("store").display(),
        secret(dir, "agent").display(),
        secret(dir, "admin").display()
    );
    let file = dir.join("accordd.toml");
    std::fs::write(&file, text)?;
    let config = accordd::config::DaemonConfig::load(&file)?;
    let state = accordd::state(&config)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}", listener.local_addr()?);
    accordd::serve_on(
        listener,
        state,
        config.server.max_body_bytes,
        std::future::pending(),
    )
    .await
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve") {
        return serve(std::path::Path::new(&args[2])).await;
    }
    let nodes: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir()?;
    let mut daemon = std::process::Command::new(std::env::current_exe()?)
        .arg("--serve")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let pid = daemon.id();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(daemon.stdout.take().expect("piped")),
        &mut line,
    )?;
    let url = line.trim().to_owned();
    println!("daemon RSS at start {:.0} MB", rss_mb(pid));
    let model = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/models/x9drg-wholeio.json"),
    )?;
    // Each simulated machine has its own serial: with a shared token,
    // accordd refuses a report that identifies no machine.
    let mut hardware: serde_json::Value = serde_json::from_str(&model)?;
    let body_for = move |k: usize| -> Vec<u8> {
        hardware["machine"]["serial"] = serde_json::Value::from(format!("BENCH-{k:05}"));
        serde_json::to_vec(&serde_json::json!({"agent_version": "bench", "hardware": hardware}))
            .expect("a JSON value serialises")
    };
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new((0..nodes).map(body_for).collect());
    // Each node's session (the answer to its accepted report), which its
    // heartbeats carry.
    let sessions: Arc<Vec<std::sync::OnceLock<String>>> =
        Arc::new((0..nodes).map(|_| std::sync::OnceLock::new()).collect());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let workers = 64;

    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (client, url, bodies, sessions, next) = (
            client.clone(),
            url.clone(),
            bodies.clone(),
            sessions.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed) as usize;
                if k >= nodes {
                    break;
                }
                let r = client
                    .post(format!("{url}/v1/nodes/node-{k:05}/report"))
                    .bearer_auth("bench-token")
                    .header("content-type", "application/json")
                    .body(bodies[k].clone())
                    .send()
                    .await
                    .expect("report sent");
                assert!(r.status().is_success(), "report refused: {}", r.status());
                let reply: accord_api::agent::AgentReply = r.json().await.expect("report answer");
                let session = reply
                    .session
                    .expect("an accepted report is answered with a session");
                sessions[k].set(session).expect("each node registered once");
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let reg = start.elapsed().as_secs_f64();
    println!(
        "registered {nodes} nodes in {reg:.1} s ({:.0} reports/s, each flushed); daemon RSS {:.0} MB",
        nodes as f64 / reg,
        rss_mb(pid)
    );

    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (client, url, sessions, done) =
            (client.clone(), url.clone(), sessions.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = w;
            while Instant::now() < deadline {
                let r = client
                    .post(format!("{url}/v1/nodes/node-{:05}/heartbeat", k % nodes))
                    .bearer_auth("bench-token")
                    .header(
                        accord_api::agent::SESSION_HEADER,
                        sessions[k % nodes].get().expect("registered").as_str(),
                    )
                    .header("content-type", "application/json")
                    .body(r#"{"uptime_s":100,"gpu_health":"ok"}"#)
                    .send()
                    .await
                    .expect("heartbeat sent");
                assert!(r.status().is_success(), "heartbeat refused: {}", r.status());
                done.fetch_add(1, Ordering::Relaxed);
                k += workers;
            }
        }));
    }
    let hb_start = Instant::now();
    for t in tasks {
        t.await?;
    }
    let secs = hb_start.elapsed().as_secs_f64();
    println!(
        "heartbeats: {:.0}/s over {secs:.1} s from {workers} connections; daemon RSS {:.0} MB",
        done.load(Ordering::Relaxed) as f64 / secs,
        rss_mb(pid)
    );
    daemon.kill()?;
    daemon.wait()?;
    Ok(())
}
