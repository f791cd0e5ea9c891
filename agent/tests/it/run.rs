//! `accord-agent run` against a real accordd (in process, on a temporary
//! store): the agent starts before the daemon, keeps retrying, registers
//! once the daemon is up, and registers again with a daemon that lost it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accord_agent::config::AgentConfig;
use accord_agent::run::Backoff;
use accord_testkit::daemon::{command, nodes, secret};
use accord_testkit::process::Process;

const TOKEN: &str = "agent-token-for-tests";
/// The admin's (accordd refuses an admin token an agent also holds).
const ADMIN_TOKEN: &str = "admin-token-for-tests";

/// How long any wait here waits for its condition.
const WAIT: Duration = Duration::from_secs(30);

type Task = tokio::task::JoinHandle<anyhow::Result<()>>;

/// (name, GPU count, generation) of a node accordd lists.
type Node = (String, usize, u64);

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/hwloc")
        .join(name)
}

/// The nodes the agents here run as.
const NODES: [&str; 7] = [
    "dgx2-lab", "dgx2", "e5-2650", "x9drg", "tls-node", "hup", "replicas",
];

/// The token files of a test's daemons and agents (`TOKEN-<node>` each,
/// `ADMIN_TOKEN` the admin's).
struct Secrets {
    /// accordd's per-node agent tokens (the way to run; the recordings
    /// replayed here have no serial and most no GPU UUIDs, which a shared
    /// token would need to bind a node name to its machine).
    agent_dir: PathBuf,
    admin: PathBuf,
}

impl Secrets {
    /// Writes them, mode 600 (the directory 700). Each secret is written
    /// once, before anything reads it: a reader between the truncation
    /// and the write of a rewrite would see an empty token.
    fn write(dir: &Path) -> Secrets {
        let agent_dir = dir.join("agent-tokens");
        std::fs::create_dir(&agent_dir).unwrap();
        std::fs::set_permissions(&agent_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // One token per node: accordd refuses two nodes sharing one.
        for node in NODES {
            secret(&agent_dir, node, &format!("{TOKEN}-{node}"));
        }
        Secrets {
            agent_dir,
            admin: secret(dir, "admin-token", ADMIN_TOKEN),
        }
    }
}

/// An accordd serving in process on a listener the test bound.
struct Daemon {
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: Task,
}

impl Daemon {
    /// Stops it and waits (up to [`WAIT`]) for its store to be closed.
    async fn stop(self) {
        let _ = self.stop.send(());
        stopped(&format!("accordd at {}", self.url), self.task).await;
    }
}

/// accordd with its store in `dir/store`, serving on `listener` (with TLS
/// given `(cert, key)`) until stopped.
fn daemon(
    dir: &Path,
    store: &str,
    listener: tokio::net::TcpListener,
    secrets: &Secrets,
    tls: Option<(&Path, &Path)>,
) -> Daemon {
    let addr = listener.local_addr().unwrap();
    let tls_lines = match tls {
        Some((cert, key)) => format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
            cert.display(),
            key.display()
        ),
        None => String::new(),
    };
    let text = format!(
        "[server]\nlisten = \"{addr}\"\n{tls_lines}[store]\ndir = \"{}\"\n[agents]\ntoken_dir = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        dir.join(store).display(),
        secrets.agent_dir.display(),
        secrets.admin.display()
    );
    let file = dir.join(format!("{store}.toml"));
    std::fs::write(&file, text).unwrap();
    let config = accordd::config::DaemonConfig::load(&file).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(accordd::serve_with_listener(config, listener, async {
        let _ = stopped.await;
    }));
    let scheme = if tls.is_some() { "https" } else { "http" };
    Daemon {
        url: format!("{scheme}://{addr}"),
        stop,
        task,
    }
}

/// Waits (up to [`WAIT`]) for a task that was told to stop; panics if it
/// failed or is still running.
async fn stopped(name: &str, task: Task) {
    match tokio::time::timeout(WAIT, task).await {
        Ok(result) => result
            .unwrap()
            .unwrap_or_else(|e| panic!("{name} failed: {e:#}")),
        Err(_) => panic!("{name} still running 30 s after being told to stop"),
    }
}

/// Starts an agent in process, until the sender fires.
fn agent(file: &Path) -> (tokio::sync::oneshot::Sender<()>, Task) {
    let config = AgentConfig::load(file).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(accord_agent::run::run(config, async {
        let _ = stopped.await;
    }));
    (stop, task)
}

/// A listener on a free port of 127.0.0.1, bound by the test: its address
/// is known before anything serves, and no one else can take the port.
async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Every request here gives up after 2 s; the waits retry.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// What must keep running while a test waits.
enum Watched<'a> {
    /// An in-process daemon or agent, by name.
    Task(&'a str, &'a mut Task),
    /// A child process (killed on drop), with its log.
    Child(&'a mut Process),
}

/// Panics, saying how it ended, if one of `watched` has ended.
async fn still_running(watched: &mut [Watched<'_>], waiting_for: &str) {
    for w in watched.iter_mut() {
        match w {
            Watched::Task(name, task) => {
                if task.is_finished() {
                    let result = (&mut **task).await;
                    panic!("{name} ended while waiting for {waiting_for}: {result:?}");
                }
            }
            Watched::Child(child) => child.assert_running(waiting_for),
        }
    }
}

/// What `url/v1/nodes` lists, or why it could not be read.
async fn listed(client: &reqwest::Client, url: &str) -> Result<Vec<Node>, String> {
    Ok(nodes(client, url, ADMIN_TOKEN)
        .await?
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default().to_owned(),
                n["hardware"]["gpus"].as_array().map_or(0, Vec::len),
                n["generation"].as_u64().unwrap_or(0),
            )
        })
        .collect())
}

/// Waits (up to [`WAIT`]) until `url` lists exactly `want`, panicking
/// when one of `watched` ends first.
async fn wait_for(client: &reqwest::Client, url: &str, want: &[Node], watched: &mut [Watched<'_>]) {
    let what = format!("{url}/v1/nodes to list {want:?}");
    let deadline = Instant::now() + WAIT;
    loop {
        let has = listed(client, url).await;
        if has.as_ref().is_ok_and(|h| h.as_slice() == want) {
            return;
        }
        still_running(watched, &what).await;
        assert!(
            Instant::now() < deadline,
            "waited 30 s for {what}; last: {has:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// How many GPUs discovery finds in an hwloc export.
fn gpus(xml: &Path) -> usize {
    accord_agent::discover(accord_agent::Sources {
        hwloc_xml: Some(xml),
        ..Default::default()
    })
    .unwrap()
    .gpus
    .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_outlives_daemon_outages_and_registers() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = Secrets::write(dir.path());
    // accordd's port, bound before the agent starts. A second handle on the
    // same socket serves the restarted accordd: the port is never free for
    // another process to take.
    let listener = listener().await.into_std().unwrap();
    let for_restart = listener.try_clone().unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let agent_toml = format!(
        r#"
[daemon]
url = "{url}"
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
        secrets.agent_dir.join("dgx2-lab").display(),
        fixture("nvidiaDGX2.xml").display()
    );
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, agent_toml).unwrap();
    let (stop_agent, mut agent) = agent(&file);

    // accordd is down: every connection is accepted and dropped at once.
    // The agent keeps trying.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut attempts = 0;
    while attempts < 3 {
        tokio::select! {
            accepted = listener.accept() => {
                drop(accepted.unwrap());
                attempts += 1;
            }
            result = &mut agent => panic!(
                "the agent gave up while accordd was down, after {attempts} attempts: {result:?}"
            ),
            _ = tokio::time::sleep_until(deadline) => panic!(
                "with accordd down, the agent connected {attempts} times in 30 s; want 3"
            ),
        }
    }
    // The daemon comes up late.
    let mut a = daemon(dir.path(), "store-a", listener, &secrets, None);
    let node = vec![("dgx2-lab".to_owned(), 16, 1)];
    wait_for(
        &client(),
        &url,
        &node,
        &mut [
            Watched::Task("accordd (store-a)", &mut a.task),
            Watched::Task("the agent", &mut agent),
        ],
    )
    .await;

    // accordd restarts with an empty store: heartbeats get 404, the agent
    // reports again.
    a.stop().await;
    let for_restart = tokio::net::TcpListener::from_std(for_restart).unwrap();
    let mut b = daemon(dir.path(), "store-b", for_restart, &secrets, None);
    wait_for(
        &client(),
        &url,
        &node,
        &mut [
            Watched::Task("accordd (store-b)", &mut b.task),
            Watched::Task("the agent", &mut agent),
        ],
    )
    .await;

    let _ = stop_agent.send(());
    stopped("the agent", agent).await;
    b.stop().await;
}

/// `url/v1/nodes/{node}` (the node's record: `generation`, `reported_at`,
/// `last_seen`, ...), or why it could not be read.
async fn record(
    client: &reqwest::Client,
    url: &str,
    node: &str,
) -> Result<serde_json::Value, String> {
    let r = client
        .get(format!("{url}/v1/nodes/{node}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("HTTP {}", r.status()));
    }
    r.json().await.map_err(|e| e.to_string())
}

/// accordd's replicas: one agent reports to two accordd (each its own
/// store), independently. Replica A goes down (its port still bound, so
/// the agent's requests to it hang rather than fail), loses its store and
/// comes back on the same address: it gets the node again from a new
/// report, while replica B got heartbeats all along and no report (it
/// never lost the node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reports_to_every_replica_independently() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = Secrets::write(dir.path());
    let xml = fixture("32em64t-2n8c2t-pci-wholeio.xml");
    // Replica A's port, bound by the test; a second handle on the socket
    // serves the restarted replica (no one else can take the port).
    let listener_a = listener().await.into_std().unwrap();
    let for_restart = listener_a.try_clone().unwrap();
    let listener_a = tokio::net::TcpListener::from_std(listener_a).unwrap();
    let mut a = daemon(dir.path(), "store-a", listener_a, &secrets, None);
    let mut b = daemon(dir.path(), "store-b", listener().await, &secrets, None);
    let (url_a, url_b) = (a.url.clone(), b.url.clone());
    let text = format!(
        "[daemon]\nurls = [\"{url_a}\", \"{url_b}\"]\ntoken_file = \"{}\"\n[node]\nname = \"replicas\"\n[discovery]\ninterval_s = 3600\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
        secrets.agent_dir.join("replicas").display(),
        xml.display()
    );
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, text).unwrap();
    let (stop_agent, mut agent) = agent(&file);
    let client = client();
    let node = vec![("replicas".to_owned(), gpus(&xml), 1)];
    for url in [&url_a, &url_b] {
        wait_for(
            &client,
            url,
            &node,
            &mut [
                Watched::Task("accordd A", &mut a.task),
                Watched::Task("accordd B", &mut b.task),
                Watched::Task("the agent", &mut agent),
            ],
        )
        .await;
    }
    let before = record(&client, &url_b, "replicas").await.unwrap();
    let reported_b = before["reported_at"].as_u64().unwrap();

    // Replica A stops and its store is deleted; its port stays bound, so
    // the agent's requests to it wait (up to its 30 s timeout).
    a.stop().await;
    std::fs::remove_dir_all(dir.path().join("store-a")).unwrap();
    // Meanwhile B keeps getting heartbeats: its last_seen (Unix seconds)
    // moves on by 2 s.
    let seen = record(&client, &url_b, "replicas").await.unwrap()["last_seen"]
        .as_u64()
        .unwrap();
    let what = format!("accordd B's last_seen to pass {} while A is down", seen + 1);
    let deadline = Instant::now() + WAIT;
    loop {
        let got = record(&client, &url_b, "replicas").await;
        if got
            .as_ref()
            .is_ok_and(|r| r["last_seen"].as_u64().is_some_and(|s| s >= seen + 2))
        {
            break;
        }
        still_running(
            &mut [
                Watched::Task("accordd B", &mut b.task),
                Watched::Task("the agent", &mut agent),
            ],
            &what,
        )
        .await;
        assert!(
            Instant::now() < deadline,
            "waited 30 s for {what} (heartbeats every 100 ms); last: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A comes back on the same address with a new, empty store: the agent
    // reports to it again.
    let for_restart = tokio::net::TcpListener::from_std(for_restart).unwrap();
    let mut a = daemon(dir.path(), "store-a", for_restart, &secrets, None);
    wait_for(
        &client,
        &url_a,
        &node,
        &mut [
            Watched::Task("accordd A (new store)", &mut a.task),
            Watched::Task("accordd B", &mut b.task),
            Watched::Task("the agent", &mut agent),
        ],
    )
    .await;
    // B still has the node as first reported: no report since, only
    // heartbeats.
    let after = record(&client, &url_b, "replicas").await.unwrap();
    assert_eq!(after["generation"].as_u64(), Some(1), "{after}");
    assert_eq!(
        after["reported_at"].as_u64(),
        Some(reported_b),
        "accordd B was reported to again: {after}"
    );
    assert!(after["last_seen"].as_u64().unwrap() >= seen + 2, "{after}");

    let _ = stop_agent.send(());
    stopped("the agent", agent).await;
    a.stop().await;
    b.stop().await;
}

/// `daemon.url` or `daemon.urls`, exactly one; each problem with the URLs
/// named by its key (an entry by its index).
#[test]
fn daemon_urls_problems_are_named_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret(dir.path(), "agent-token", TOKEN);
    let file = dir.path().join("agent.toml");
    let problems = |daemon: &str| {
        let text = format!("[daemon]\n{daemon}\ntoken_file = \"{}\"\n", token.display());
        let config = AgentConfig::parse(&text, &file).unwrap_or_else(|e| panic!("{e}"));
        (config.validate(), config)
    };

    let (p, config) = problems("url = \"http://a:7480\"");
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(config.daemon_urls(), ["http://a:7480"]);
    let (p, config) = problems("urls = [\"http://a:7480\", \"https://b:7480\"]");
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(config.daemon_urls(), ["http://a:7480", "https://b:7480"]);

    let (p, _) = problems("url = \"http://a:7480\"\nurls = [\"http://b:7480\"]");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("daemon.urls: ") && p[0].contains("not both"),
        "{p:?}"
    );
    let (p, _) = problems("");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("daemon.url: missing") && p[0].contains("daemon.urls"),
        "{p:?}"
    );
    let (p, _) = problems("urls = []");
    assert_eq!(p, ["daemon.urls: empty; list at least one accordd URL"]);
    let (p, _) = problems("urls = [\"http://a:7480\", \"accordd:7480\"]");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("daemon.urls[1]: \"accordd:7480\" is not an http(s) URL"),
        "{p:?}"
    );
    // A secret in the URL's userinfo: refused, and not echoed.
    let (p, _) = problems("url = \"https://agent:s3cret@a:7480\"");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("daemon.url: https://<redacted>@a: a URL carries no credentials")
            && !p[0].contains("s3cret"),
        "{p:?}"
    );
    // The same accordd, however spelt (the host's case, a trailing slash).
    let (p, _) = problems("urls = [\"http://a:7480\", \"http://b:7480\", \"http://A:7480/\"]");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("daemon.urls[2]: ") && p[0].contains("repeats daemon.urls[0]"),
        "{p:?}"
    );
    let many = (0..17)
        .map(|i| format!("\"http://a{i}:7480\""))
        .collect::<Vec<_>>()
        .join(", ");
    let (p, _) = problems(&format!("urls = [{many}]"));
    assert_eq!(p, ["daemon.urls: 17 URLs; at most 16"]);

    // Every problem at once, through load (as `check-config` does).
    std::fs::write(
        &file,
        format!(
            "[daemon]\nurl = \"a\"\nurls = [\"ftp://b\"]\ntoken_file = \"{}\"\n",
            token.display()
        ),
    )
    .unwrap();
    let err = AgentConfig::load(&file).unwrap_err().to_string();
    assert!(err.contains("3 problem(s)"), "{err}");
    for key in ["daemon.urls: ", "daemon.url: ", "daemon.urls[0]: "] {
        assert!(err.contains(key), "{key}: {err}");
    }
    // Typed: a list of strings.
    std::fs::write(
        &file,
        format!(
            "[daemon]\nurls = \"http://a:7480\"\ntoken_file = \"{}\"\n",
            token.display()
        ),
    )
    .unwrap();
    let err = AgentConfig::load(&file).unwrap_err().to_string();
    assert!(err.contains("daemon.urls"), "{err}");
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
    assert!(!config.mig.allow_gpu_reset);
    let problems = config.validate();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("daemon.token_file"), "{problems:?}");
    // Strictly typed: a reset is allowed by `true` only.
    let bad = text.replace("allow_gpu_reset = false", "allow_gpu_reset = \"yes\"");
    let err = AgentConfig::parse(&bad, &file).unwrap_err().to_string();
    assert!(err.contains("mig.allow_gpu_reset"), "{err}");
}

/// Three agents replaying three recorded machines register with one
/// daemon, each under its own name, with its own GPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_replaying_recorded_machines_register() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = Secrets::write(dir.path());
    let mut d = daemon(dir.path(), "store", listener().await, &secrets, None);
    let mut agents = Vec::new();
    for (name, xml) in [
        ("dgx2", "nvidiaDGX2.xml"),
        ("e5-2650", "24em64t-2n6c2t-pci.xml"),
        ("x9drg", "32em64t-2n8c2t-pci-wholeio.xml"),
    ] {
        let text = format!(
            "[daemon]\nurl = \"{}\"\ntoken_file = \"{}\"\n[node]\nname = \"{name}\"\n[discovery]\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
            d.url,
            secrets.agent_dir.join(name).display(),
            fixture(xml).display()
        );
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let (stop, task) = agent(&file);
        agents.push((format!("agent {name}"), stop, task));
    }
    // What each replayed machine holds, by the same discovery.
    let want = vec![
        ("dgx2".to_owned(), gpus(&fixture("nvidiaDGX2.xml")), 1),
        (
            "e5-2650".to_owned(),
            gpus(&fixture("24em64t-2n6c2t-pci.xml")),
            1,
        ),
        (
            "x9drg".to_owned(),
            gpus(&fixture("32em64t-2n8c2t-pci-wholeio.xml")),
            1,
        ),
    ];
    assert_eq!(want[0].1, 16, "the DGX-2 export has 16 GPUs");
    let mut watched = vec![Watched::Task("accordd", &mut d.task)];
    for (name, _, task) in agents.iter_mut() {
        watched.push(Watched::Task(name, task));
    }
    wait_for(&client(), &d.url, &want, &mut watched).await;
    drop(watched);
    for (name, stop, task) in agents {
        let _ = stop.send(());
        stopped(&name, task).await;
    }
    d.stop().await;
}

/// With tls_cert and tls_key, accordd speaks only TLS: an agent trusting
/// the CA registers over https; plain HTTP to the same port gets nowhere.
/// (tests/fixtures/tls: a throwaway test CA and a localhost certificate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_register_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = Secrets::write(dir.path());
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tls");
    let cert = tls.join("cert.pem");
    let ca = tls.join("ca.pem");
    // Keys must be private; git does not keep the mode.
    let key = dir.path().join("key.pem");
    std::fs::copy(tls.join("key.pem"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let listener = listener().await;
    let port = listener.local_addr().unwrap().port();
    let mut d = daemon(dir.path(), "store", listener, &secrets, Some((&cert, &key)));

    // The certificate names localhost.
    let url = format!("https://localhost:{port}");
    let xml = fixture("32em64t-2n8c2t-pci-wholeio.xml");
    let agent_toml = format!(
        "[daemon]\nurl = \"{url}\"\ntoken_file = \"{}\"\nca_file = \"{}\"\n[node]\nname = \"tls-node\"\n[discovery]\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
        secrets.agent_dir.join("tls-node").display(),
        ca.display(),
        xml.display()
    );
    let afile = dir.path().join("agent.toml");
    std::fs::write(&afile, agent_toml).unwrap();
    let (stop_agent, mut agent) = agent(&afile);
    let pem = std::fs::read(&ca).unwrap();
    let tls_client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    wait_for(
        &tls_client,
        &url,
        &[("tls-node".to_owned(), gpus(&xml), 1)],
        &mut [
            Watched::Task("accordd (TLS)", &mut d.task),
            Watched::Task("the agent", &mut agent),
        ],
    )
    .await;
    let plain = client()
        .get(format!("http://127.0.0.1:{port}/v1/health"))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    let _ = stop_agent.send(());
    stopped("the agent", agent).await;
    d.stop().await;
}

/// SIGHUP makes the agent discover again at once (the interval is an
/// hour): a changed machine is reported as a new generation. Heartbeats
/// carry a GPU health line. The agent is the real binary, so the signal
/// reaches it alone, not the agents of the other tests in this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rediscovers_and_heartbeats_carry_gpu_health() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = Secrets::write(dir.path());
    let mut d = daemon(dir.path(), "store", listener().await, &secrets, None);
    let topology = dir.path().join("topology.xml");
    std::fs::copy(fixture("24em64t-2n6c2t-pci.xml"), &topology).unwrap();
    let text = format!(
        "[daemon]\nurl = \"{}\"\ntoken_file = \"{}\"\n[node]\nname = \"hup\"\n[discovery]\ninterval_s = 3600\nhwloc_xml = \"{}\"\n[heartbeat]\ninterval_ms = 100\n[backoff]\ninitial_ms = 20\nmax_ms = 200\n",
        d.url,
        secrets.agent_dir.join("hup").display(),
        topology.display()
    );
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, text).unwrap();
    let log = dir.path().join("agent.log");
    let mut agent = Process::spawn(
        "accord-agent",
        &mut command(env!("CARGO_BIN_EXE_accord-agent"), &file),
        &log,
    );
    let client = client();
    let before = gpus(&topology);
    // Registered: its SIGHUP handler is installed (before its first report).
    wait_for(
        &client,
        &d.url,
        &[("hup".to_owned(), before, 1)],
        &mut [
            Watched::Task("accordd", &mut d.task),
            Watched::Child(&mut agent),
        ],
    )
    .await;
    let deadline = Instant::now() + WAIT;
    let health = loop {
        let got = match client
            .get(format!("{}/v1/nodes/hup", d.url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
        {
            Ok(r) => r
                .json::<serde_json::Value>()
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Some(h) = got.as_ref().ok().and_then(|v| v["gpu_health"].as_str()) {
            if !h.is_empty() {
                break h.to_owned();
            }
        }
        still_running(
            &mut [
                Watched::Task("accordd", &mut d.task),
                Watched::Child(&mut agent),
            ],
            "a heartbeat's gpu_health",
        )
        .await;
        assert!(
            Instant::now() < deadline,
            "no gpu_health for node hup within 30 s (heartbeats every 100 ms); last: {got:?}\n{}",
            agent.tail()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(health, format!("ok: {before} GPUs"));

    // The machine "changes"; only SIGHUP can make the agent notice now.
    std::fs::copy(fixture("32em64t-2n8c2t-pci-wholeio.xml"), &topology).unwrap();
    let after = gpus(&topology);
    assert_ne!(before, after, "the two exports must differ");
    agent.signal("HUP");
    wait_for(
        &client,
        &d.url,
        &[("hup".to_owned(), after, 2)],
        &mut [
            Watched::Task("accordd", &mut d.task),
            Watched::Child(&mut agent),
        ],
    )
    .await;

    drop(agent);
    d.stop().await;
}
