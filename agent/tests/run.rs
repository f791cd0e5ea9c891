//! `accord-agent run` against a real accordd (in process, on a temporary
//! store): the agent starts before the daemon, keeps retrying, registers
//! once the daemon is up, and registers again with a daemon that lost it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_agent::run::{AgentConfig, Backoff};

const TOKEN: &str = "agent-token-for-tests";

fn secret(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, TOKEN).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/hwloc")
        .join(name)
}

/// A daemon on `port` with its store in `store`, until the sender fires.
async fn daemon(
    dir: &Path,
    store: &str,
    port: u16,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\ndir = \"{}\"\n[agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        dir.join(store).display(),
        secret(dir, "agent-token").display(),
        secret(dir, "admin-token").display()
    );
    let file = dir.join(format!("{store}.toml"));
    std::fs::write(&file, text).unwrap();
    let config = accordd::config::DaemonConfig::load(&file).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(accordd::serve(config, async {
        let _ = stopped.await;
    }));
    (stop, task)
}

async fn listed(port: u16) -> Vec<(String, usize, u64)> {
    let resp = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/v1/nodes"))
        .bearer_auth(TOKEN)
        .send()
        .await;
    let Ok(resp) = resp else { return Vec::new() };
    let v: serde_json::Value = resp.json().await.unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    (
                        n["name"].as_str().unwrap_or_default().to_owned(),
                        n["hardware"]["gpus"].as_array().map_or(0, Vec::len),
                        n["generation"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_for(port: u16, want: &[(String, usize, u64)]) {
    for _ in 0..200 {
        if listed(port).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("daemon never listed {want:?}; has {:?}", listed(port).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_outlives_daemon_outages_and_registers() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let agent_toml = format!(
        r#"
[daemon]
url = "http://127.0.0.1:{port}"
token_file = "{}"
[node]
name = "dgx2-lab"
[discovery]
interval_s = 3600
hwloc_xml = "{}"
[heartbeat]
interval_ms = 100
[backoff]
initial_ms = 20
max_ms = 200
"#,
        secret(dir.path(), "agent-token").display(),
        fixture("nvidiaDGX2.xml").display()
    );
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, agent_toml).unwrap();
    let config = AgentConfig::load(&file).unwrap();
    let (stop_agent, agent_stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(accord_agent::run::run(config, async {
        let _ = agent_stopped.await;
    }));

    // The daemon comes up late: the agent has been retrying.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !agent.is_finished(),
        "the agent gave up while accordd was down"
    );
    let (stop, task) = daemon(dir.path(), "store-a", port).await;
    let node = vec![("dgx2-lab".to_owned(), 16, 1)];
    wait_for(port, &node).await;

    // accordd restarts with an empty store: heartbeats get 404, the agent
    // reports again.
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (stop, task) = daemon(dir.path(), "store-b", port).await;
    wait_for(port, &node).await;

    stop_agent.send(()).unwrap();
    agent.await.unwrap().unwrap();
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[test]
fn backoff_grows_to_its_cap_with_jitter_below_the_ceiling() {
    let mut b = Backoff::new(100, 1_000, 7);
    let mut ceilings = Vec::new();
    for _ in 0..6 {
        let ceiling = b.ceiling();
        let wait = b.next_wait();
        assert!(wait <= ceiling, "{wait:?} above {ceiling:?}");
        ceilings.push(ceiling.as_millis());
    }
    assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
    b.reset();
    assert_eq!(b.ceiling().as_millis(), 100);
}

#[test]
fn agent_config_problems_are_all_listed() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("open-token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        format!(
            "[daemon]\nurl = \"accordd:7480\"\ntoken_file = \"{}\"\n[discovery]\nnvml_snapshot = \"x.json\"\n",
            token.display()
        ),
    )
    .unwrap();
    let err = AgentConfig::load(&file).unwrap_err().to_string();
    assert!(err.contains("3 problem(s)"), "{err}");
    assert!(err.contains("daemon.url"), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    assert!(err.contains("hwloc_xml"), "{err}");
    std::fs::write(
        &file,
        "[daemon]\nurl = \"http://a:1\"\ntoken_file = \"t\"\nretries = 3\n",
    )
    .unwrap();
    let err = AgentConfig::load(&file).unwrap_err().to_string();
    assert!(
        err.contains("agent.toml:4:1") && err.contains("retries"),
        "{err}"
    );
}

/// The reference config/agent.toml parses, and validates but for the token
/// file it names (it lives on the host, not here).
#[test]
fn reference_agent_toml_parses() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/agent.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let config = AgentConfig::parse(&text, &file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.heartbeat.interval_ms, 15_000);
    let problems = config.validate();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("daemon.token_file"), "{problems:?}");
}

/// Three agents replaying three recorded machines register with one
/// daemon, each under its own name, with its own GPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_replaying_recorded_machines_register() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (stop, task) = daemon(dir.path(), "store", port).await;
    let token = secret(dir.path(), "agent-token");
    let mut agents = Vec::new();
    for (name, xml) in [
        ("dgx2", "nvidiaDGX2.xml"),
        ("e5-2650", "24em64t-2n6c2t-pci.xml"),
        ("x9drg", "32em64t-2n8c2t-pci-wholeio.xml"),
    ] {
        let text = format!(
            "[daemon]\nurl = \"http://127.0.0.1:{port}\"\ntoken_file = \"{}\"\n[node]\nname = \"{name}\"\n[discovery]\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
            token.display(),
            fixture(xml).display()
        );
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let config = AgentConfig::load(&file).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        agents.push((
            tx,
            tokio::spawn(accord_agent::run::run(config, async {
                let _ = rx.await;
            })),
        ));
    }
    // What each replayed machine holds, by the same discovery.
    let gpus = |xml: &str| {
        let path = fixture(xml);
        accord_agent::discover(accord_agent::Sources {
            hwloc_xml: Some(&path),
            ..Default::default()
        })
        .unwrap()
        .gpus
        .len()
    };
    let want = vec![
        ("dgx2".to_owned(), gpus("nvidiaDGX2.xml"), 1),
        ("e5-2650".to_owned(), gpus("24em64t-2n6c2t-pci.xml"), 1),
        (
            "x9drg".to_owned(),
            gpus("32em64t-2n8c2t-pci-wholeio.xml"),
            1,
        ),
    ];
    assert_eq!(want[0].1, 16, "the DGX-2 export has 16 GPUs");
    wait_for(port, &want).await;
    for (tx, task) in agents {
        tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// With tls_cert and tls_key, accordd speaks only TLS: an agent trusting
/// the CA registers over https; plain HTTP to the same port gets nowhere.
/// (tests/fixtures/tls: a throwaway test CA and a localhost certificate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_register_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tls");
    let cert = tls.join("cert.pem");
    let ca = tls.join("ca.pem");
    // Keys must be private; git does not keep the mode.
    let key = dir.path().join("key.pem");
    std::fs::copy(tls.join("key.pem"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n[store]\ndir = \"{}\"\n[agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        cert.display(),
        key.display(),
        dir.path().join("store").display(),
        secret(dir.path(), "agent-token").display(),
        secret(dir.path(), "admin-token").display()
    );
    let file = dir.path().join("accordd.toml");
    std::fs::write(&file, text).unwrap();
    let config = accordd::config::DaemonConfig::load(&file).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(accordd::serve(config, async {
        let _ = stopped.await;
    }));

    let agent_toml = format!(
        "[daemon]\nurl = \"https://localhost:{port}\"\ntoken_file = \"{}\"\nca_file = \"{}\"\n[node]\nname = \"tls-node\"\n[discovery]\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
        secret(dir.path(), "agent-token").display(),
        ca.display(),
        fixture("32em64t-2n8c2t-pci-wholeio.xml").display()
    );
    let afile = dir.path().join("agent.toml");
    std::fs::write(&afile, agent_toml).unwrap();
    let (stop_agent, agent_stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(accord_agent::run::run(
        AgentConfig::load(&afile).unwrap(),
        async {
            let _ = agent_stopped.await;
        },
    ));
    let pem = std::fs::read(&ca).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let mut names = Vec::new();
    for _ in 0..200 {
        if let Ok(r) = client
            .get(format!("https://localhost:{port}/v1/nodes"))
            .bearer_auth(TOKEN)
            .send()
            .await
        {
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            names = v
                .as_array()
                .map(|a| a.iter().map(|n| n["name"].to_string()).collect())
                .unwrap_or_default();
            if !names.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(names, ["\"tls-node\""]);
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/v1/health")).await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    stop_agent.send(()).unwrap();
    agent.await.unwrap().unwrap();
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();
}

/// SIGHUP makes the agent discover again at once (the interval is an
/// hour): a changed machine is reported as a new generation. Heartbeats
/// carry a GPU health line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rediscovers_and_heartbeats_carry_gpu_health() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (stop, task) = daemon(dir.path(), "store", port).await;
    let topology = dir.path().join("topology.xml");
    std::fs::copy(fixture("24em64t-2n6c2t-pci.xml"), &topology).unwrap();
    let text = format!(
        "[daemon]\nurl = \"http://127.0.0.1:{port}\"\ntoken_file = \"{}\"\n[node]\nname = \"hup\"\n[discovery]\ninterval_s = 3600\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
        secret(dir.path(), "agent-token").display(),
        topology.display()
    );
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, text).unwrap();
    let (stop_agent, agent_stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(accord_agent::run::run(
        AgentConfig::load(&file).unwrap(),
        async {
            let _ = agent_stopped.await;
        },
    ));
    let gpus = |xml: &Path| {
        accord_agent::discover(accord_agent::Sources {
            hwloc_xml: Some(xml),
            ..Default::default()
        })
        .unwrap()
        .gpus
        .len()
    };
    wait_for(port, &[("hup".to_owned(), gpus(&topology), 1)]).await;
    let mut health = String::new();
    for _ in 0..100 {
        let v: serde_json::Value = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/v1/nodes/hup"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        health = v["gpu_health"].as_str().unwrap_or_default().to_owned();
        if !health.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health, format!("ok: {} GPUs", gpus(&topology)));

    // The machine "changes"; only SIGHUP can make the agent notice now.
    std::fs::copy(fixture("32em64t-2n8c2t-pci-wholeio.xml"), &topology).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for(port, &[("hup".to_owned(), gpus(&topology), 2)]).await;

    stop_agent.send(()).unwrap();
    agent.await.unwrap().unwrap();
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
