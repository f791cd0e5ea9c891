//! accordd's agent and admin API against a real sled store on a temporary
//! directory, fed with the recorded hardware models in tests/fixtures.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accord_testkit::daemon::{self, secret, wait_address, wait_serving};
use accord_testkit::process::{self, tail, Process};
use accordd::api::ApiState;
use accordd::config::DaemonConfig;
use serde_json::Value;

const AGENT_TOKEN: &str = "agent-secret-1";
const ADMIN_TOKEN: &str = "admin-secret-1";
const MAX_BODY: usize = 256 * 1024;

/// A recorded model. The recordings have no machine serial (exports made
/// without DMI access); x9drg has no GPU UUIDs either, and with the shared
/// agent token these tests run with a report must identify its machine:
/// each gets a serial of its own.
fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    if v["machine"]["serial"].is_null() {
        v["machine"]["serial"] = format!("SN-{name}").into();
    }
    v
}

/// A recorded model as it is, without a serial added.
fn recorded(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn config(dir: &Path, listen: &str) -> (PathBuf, String) {
    let agent = secret(dir, "agent-token", AGENT_TOKEN);
    let admin = secret(dir, "admin-token", ADMIN_TOKEN);
    let text = format!(
        r#"
[server]
listen = "{listen}"
max_body_bytes = {MAX_BODY}

[store]
dir = "{}"

[agents]
token_file = "{}"
stale_after_s = 120

[admin]
token_file = "{}"
"#,
        dir.join("store").display(),
        agent.display(),
        admin.display()
    );
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.0

[[racks]]
name = "r07"

[[nodes]]
name = "dgx2-01"
rack = "r07"
profile = "h100"
"#
        .to_owned()
            // The fleet names every node these tests register: accordd
            // registers no other.
            + &["h100-01", "x9drg-01", "new-01", "cpu-01", "cpu-02", "gpu-01", "gpu-02", "gpu-03"]
                .map(|n| format!("\n[[nodes]]\nname = \"{n}\"\nprofile = \"h100\"\n"))
                .concat(),
    )
    .unwrap();
    let text = format!("{text}\n[fleet]\nfile = \"{}\"\n", fleet.display());
    let file = dir.join("accordd.toml");
    std::fs::write(&file, &text).unwrap();
    (file, text)
}

/// Runs a command to its end, with its output, as `Command::output` does;
/// panics, with what it wrote, when it is still running after 60 s.
fn output_within(cmd: &mut Command) -> Output {
    process::output_within(cmd, Duration::from_secs(60))
}

/// A daemon serving on an ephemeral port until stopped (which closes its
/// store) or dropped.
struct Daemon {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    shared: Arc<accordd::shared::Shared>,
}

impl Daemon {
    async fn start(dir: &Path) -> Daemon {
        let (file, _) = config(dir, "127.0.0.1:0");
        Daemon::start_with(&file).await
    }

    /// accordd on the configuration file `file`.
    async fn start_with(file: &Path) -> Daemon {
        let config = DaemonConfig::load(file).unwrap();
        let state: Arc<ApiState> = accordd::state(&config).unwrap();
        let shared = state.shared.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(accordd::serve_on(listener, state, MAX_BODY, async {
            let _ = stopped.await;
        }));
        Daemon {
            url,
            stop: Some(stop),
            task,
            shared,
        }
    }

    /// Stops serving and closes the store: its directory can be opened
    /// again at once.
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("accordd (in process) still serving 30 s after being told to stop")
            .unwrap()
            .unwrap();
        accordd::close_store(self.shared, accordd::store::CLOSE_WITHIN)
            .await
            .unwrap();
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> (u16, Value) {
        self.send_as(method, path, token, body, None).await
    }

    /// `send`, with an agent session header when one is given.
    async fn send_as(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
        session: Option<&str>,
    ) -> (u16, Value) {
        let mut req = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
            .request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(s) = session {
            req = req.header(accord_api::agent::SESSION_HEADER, s);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn report(&self, node: &str, token: Option<&str>, body: Vec<u8>) -> (u16, Value) {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/nodes/{node}/report"),
            token,
            Some(body),
        )
        .await
    }

    async fn heartbeat(&self, node: &str, session: Option<&str>) -> (u16, Value) {
        self.send_as(
            reqwest::Method::POST,
            &format!("/v1/nodes/{node}/heartbeat"),
            Some(AGENT_TOKEN),
            Some(br#"{"uptime_s": 5, "gpu_health": "ok"}"#.to_vec()),
            session,
        )
        .await
    }

    async fn report_as(&self, node: &str, hardware: &Value, session: Option<&str>) -> (u16, Value) {
        self.send_as(
            reqwest::Method::POST,
            &format!("/v1/nodes/{node}/report"),
            Some(AGENT_TOKEN),
            Some(report_body(hardware)),
            session,
        )
        .await
    }

    async fn nodes(&self) -> Value {
        let (status, v) = self
            .send(reqwest::Method::GET, "/v1/nodes", Some(ADMIN_TOKEN), None)
            .await;
        assert_eq!(status, 200, "{v}");
        v
    }
}

fn report_body(hardware: &Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "agent_version": "test", "hardware": hardware }))
        .unwrap()
}

/// (name, GPU count, generation) of every node.
fn summary(nodes: &Value) -> Vec<(String, usize, u64)> {
    nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                n["hardware"]["gpus"].as_array().unwrap().len(),
                n["generation"].as_u64().unwrap(),
            )
        })
        .collect()
}

const FIXTURES: [(&str, &str); 3] = [
    ("dgx2-01", "dgx2.json"),
    ("h100-01", "h100-8gpu-mig.json"),
    ("x9drg-01", "x9drg-wholeio.json"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_register_and_the_store_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    for (node, file) in FIXTURES {
        let (status, v) = d
            .report(node, Some(AGENT_TOKEN), report_body(&fixture(file)))
            .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["outcome"], "registered");
        assert_eq!(v["generation"], 1);
    }
    let expected = vec![
        ("dgx2-01".to_owned(), 16, 1),
        ("h100-01".to_owned(), 8, 1),
        ("x9drg-01".to_owned(), 4, 1),
    ];
    assert_eq!(summary(&d.nodes().await), expected);
    // The same report again changes nothing; a heartbeat is accepted.
    let (status, v) = d
        .report(
            "h100-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("h100-8gpu-mig.json")),
        )
        .await;
    assert_eq!((status, v["outcome"].as_str()), (200, Some("unchanged")));
    let session = v["session"].as_str().unwrap().to_owned();
    let (status, v) = d
        .send_as(
            reqwest::Method::POST,
            "/v1/nodes/h100-01/heartbeat",
            Some(AGENT_TOKEN),
            Some(br#"{"uptime_s": 5, "gpu_health": "ok"}"#.to_vec()),
            Some(&session),
        )
        .await;
    assert_eq!((status, v["generation"].as_u64()), (200, Some(1)), "{v}");
    // The kubelet's device assignments: taken when plausible; refused
    // whole (422, naming the field) otherwise, and not counted.
    let assigned = |pods: Value| {
        serde_json::to_vec(&serde_json::json!({"uptime_s": 6, "assigned": pods})).unwrap()
    };
    let beat = |body: Vec<u8>| {
        let session = session.clone();
        let d = &d;
        async move {
            d.send_as(
                reqwest::Method::POST,
                "/v1/nodes/h100-01/heartbeat",
                Some(AGENT_TOKEN),
                Some(body),
                Some(&session),
            )
            .await
        }
    };
    let good =
        serde_json::json!([{"namespace": "ml", "name": "train-0", "ids": ["GPU-1", "MIG-2::3"]}]);
    assert_eq!(beat(assigned(good)).await.0, 200);
    let many_ids: Vec<String> = (0..1025).map(|i| format!("GPU-{i}")).collect();
    for (pods, field) in [
        (
            serde_json::json!([{"namespace": "ML", "name": "p", "ids": ["GPU-1"]}]),
            "assigned[0].namespace",
        ),
        (
            serde_json::json!([{"namespace": "ml", "name": "a/b", "ids": ["GPU-1"]}]),
            "assigned[0].name",
        ),
        (
            serde_json::json!([{"namespace": "ml", "name": "p", "ids": ["GPU 1"]}]),
            "assigned[0].ids[0]",
        ),
        (
            serde_json::json!([{"namespace": "ml", "name": "p", "ids": ["\u{1b}[31m"]}]),
            "assigned[0].ids[0]",
        ),
        (
            serde_json::json!([{"namespace": "ml", "name": "p", "ids": ["x".repeat(129)]}]),
            "assigned[0].ids[0]",
        ),
        (
            serde_json::json!([{"namespace": "ml", "name": "p", "ids": many_ids}]),
            "assigned[0].ids",
        ),
    ] {
        let (status, v) = beat(assigned(pods)).await;
        assert_eq!(status, 422, "{v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(field),
            "{field}: {v}"
        );
    }
    // A heartbeat's strings are held to the report's limits: a version
    // is short and printable, the GPU health short and without controls.
    for (body, field) in [
        (
            serde_json::json!({"agent_version": "1".repeat(4000)}),
            "agent_version",
        ),
        (
            serde_json::json!({"agent_version": "1.0\nforged"}),
            "agent_version",
        ),
        (
            serde_json::json!({"gpu_health": "x".repeat(300)}),
            "gpu_health",
        ),
        (
            serde_json::json!({"gpu_health": "ok\u{1b}]52;c;eA==\u{7}"}),
            "gpu_health",
        ),
    ] {
        let (status, v) = beat(serde_json::to_vec(&body).unwrap()).await;
        assert_eq!(status, 422, "{field}: {v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(field),
            "{field}: {v}"
        );
    }
    // Prometheus: accepted reports and heartbeats are counted.
    let metrics = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("{}/metrics", d.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("accord_agent_reports_total 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("accord_agent_heartbeats_total 2"),
        "{metrics}"
    );
    assert!(metrics.contains("# TYPE accord_planner_duration_seconds histogram"));
    // A single replica leads; it never took a term over nor stepped down.
    for line in [
        "accord_ha_leading 1\n",
        "accord_ha_leader_changes_total 0\n",
        "accord_ha_step_downs_total 0\n",
    ] {
        assert!(metrics.contains(line), "{line:?} in {metrics}");
    }
    // A name outside the fleet file registers nothing.
    let (status, v) = d
        .report(
            "ghost-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("dgx2.json")),
        )
        .await;
    assert_eq!(status, 404, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not in the fleet file"),
        "{v}"
    );
    // Heartbeats for unknown nodes are refused, not stored.
    let (status, _) = d
        .send(
            reqwest::Method::POST,
            "/v1/nodes/ghost/heartbeat",
            Some(AGENT_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 404);

    // accordctl reads the same list.
    let admin = dir.path().join("admin-token");
    let out = output_within(
        Command::new(crate::support::accordctl_bin())
            .args(["nodes", "--json", "--url", &d.url, "--token-file"])
            .arg(&admin),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary(&listed), expected);
    // The rack comes from the fleet file accordd is configured with.
    assert_eq!(listed[0]["rack"], "r07");
    assert_eq!(listed[1]["rack"], Value::Null);
    let table = output_within(
        Command::new(crate::support::accordctl_bin())
            .args(["nodes", "--url", &d.url, "--token-file"])
            .arg(&admin),
    );
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.lines().nth(1).unwrap().contains("r07"), "{table}");
    assert!(
        table.contains("16× Tesla V100-SXM3-32GB") || table.contains("16×"),
        "{table}"
    );

    d.stop().await;
    let d = Daemon::start(dir.path()).await;
    assert_eq!(summary(&d.nodes().await), expected, "after a restart");
    d.stop().await;
}

/// (what, token, body, expected status, expected words in the reason)
type BadCase = (
    &'static str,
    Option<&'static str>,
    Vec<u8>,
    u16,
    &'static str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_reason_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    let (status, _) = d
        .report(
            "x9drg-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("x9drg-wholeio.json")),
        )
        .await;
    assert_eq!(status, 200);
    let before = d.nodes().await;

    let mut newer = fixture("dgx2.json");
    newer["schema_version"] = 99.into();
    let mut oversized = fixture("dgx2.json");
    oversized["machine"]["product"] = "x".repeat(MAX_BODY).into();
    let cases: Vec<BadCase> = vec![
        (
            "malformed JSON",
            Some(AGENT_TOKEN),
            b"{ not json".to_vec(),
            400,
            "invalid JSON",
        ),
        (
            "unknown field",
            Some(AGENT_TOKEN),
            br#"{"hardware": {}, "extra": 1}"#.to_vec(),
            400,
            "invalid JSON",
        ),
        (
            "newer schema",
            Some(AGENT_TOKEN),
            report_body(&newer),
            422,
            "newer than this accordd",
        ),
        (
            "oversized body",
            Some(AGENT_TOKEN),
            report_body(&oversized),
            413,
            "",
        ),
        (
            "missing token",
            None,
            report_body(&fixture("dgx2.json")),
            401,
            "missing bearer token",
        ),
        (
            "wrong token",
            Some("nope"),
            report_body(&fixture("dgx2.json")),
            401,
            "wrong token",
        ),
        (
            "admin token is not an agent token",
            Some(ADMIN_TOKEN),
            report_body(&fixture("dgx2.json")),
            401,
            "wrong token",
        ),
    ];
    for (what, token, body, want, reason) in cases {
        let (status, v) = d.report("dgx2-01", token, body).await;
        assert_eq!(status, want, "{what}: {v}");
        if !reason.is_empty() {
            let got = v["error"].as_str().unwrap_or_default();
            assert!(got.contains(reason), "{what}: {got}");
        }
        assert_eq!(d.nodes().await, before, "{what}: the store changed");
    }
    // The admin API wants the admin token.
    let (status, _) = d
        .send(reqwest::Method::GET, "/v1/nodes", Some(AGENT_TOKEN), None)
        .await;
    assert_eq!(status, 401);
    let (status, v) = d.send(reqwest::Method::GET, "/v1/health", None, None).await;
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    // Power requests: the admin's token, a node name, a strict body; this
    // accordd runs no control loop, so it powers nothing and says so.
    let on = br#"{"action": "on"}"#;
    for (what, token, node, body, want, reason) in [
        (
            "agent token",
            Some(AGENT_TOKEN),
            "dgx2-01",
            &on[..],
            401,
            "wrong token",
        ),
        (
            "no token",
            None,
            "dgx2-01",
            &on[..],
            401,
            "missing bearer token",
        ),
        (
            "bad name",
            Some(ADMIN_TOKEN),
            "Not_A_Node",
            &on[..],
            400,
            "node name",
        ),
        (
            "unknown action",
            Some(ADMIN_TOKEN),
            "dgx2-01",
            br#"{"action": "explode"}"#,
            400,
            "invalid JSON",
        ),
        (
            "unknown field",
            Some(ADMIN_TOKEN),
            "dgx2-01",
            br#"{"action": "on", "pxe": true}"#,
            400,
            "invalid JSON",
        ),
        (
            "no control loop",
            Some(ADMIN_TOKEN),
            "dgx2-01",
            &on[..],
            409,
            "runs without [control]",
        ),
    ] {
        let path = format!("/v1/nodes/{node}/power");
        let (status, v) = d
            .send(reqwest::Method::POST, &path, token, Some(body.to_vec()))
            .await;
        assert_eq!(status, want, "{what}: {v}");
        let got = v["error"].as_str().unwrap_or_default();
        assert!(got.contains(reason), "{what}: {got}");
    }
    assert_eq!(d.nodes().await, before, "power requests changed the store");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_machine_under_a_known_name_must_be_declared() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    let (status, _) = d
        .report(
            "gpu-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("dgx2.json")),
        )
        .await;
    assert_eq!(status, 200);
    // Other GPU UUIDs: another machine.
    let (status, v) = d
        .report(
            "gpu-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("h100-8gpu-mig.json")),
        )
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("accordctl node replace gpu-01"));
    assert_eq!(
        summary(&d.nodes().await),
        vec![("gpu-01".to_owned(), 16, 1)]
    );
    // Declared, it is accepted as a change.
    let (status, _) = d
        .send(
            reqwest::Method::POST,
            "/v1/nodes/gpu-01/replace",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, v) = d
        .report(
            "gpu-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("h100-8gpu-mig.json")),
        )
        .await;
    assert_eq!(
        (status, v["outcome"].as_str()),
        (200, Some("changed")),
        "{v}"
    );
    assert_eq!(summary(&d.nodes().await), vec![("gpu-01".to_owned(), 8, 2)]);
    d.stop().await;
}

#[test]
fn the_daemon_refuses_secrets_others_can_read_and_lists_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = config(dir.path(), "not-an-address");
    std::fs::set_permissions(
        dir.path().join("admin-token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_accordd"))
            .arg("check-config")
            .arg(&file),
    );
    // EX_CONFIG, as `accordd --help` says.
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("2 problem(s)"), "{err}");
    assert!(err.contains("server.listen"), "{err}");
    assert!(
        err.contains("admin.token_file") && err.contains("chmod 600"),
        "{err}"
    );
    // An unknown key names its line.
    std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:1\"\nport = 3\n").unwrap();
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_accordd"))
            .arg("check-config")
            .arg(&file),
    );
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("accordd.toml:3:1") && err.contains("port"),
        "{err}"
    );
}

/// Secrets and configuration that cannot be what they should: an empty
/// token, one token for two nodes, the admin's token given to the agents,
/// a FIFO or a device where a file should be (refused at once, not a hang
/// or an endless read).
#[test]
fn tokens_and_files_that_cannot_be_right_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = config(dir.path(), "127.0.0.1:0");
    let config = DaemonConfig::load(&file).unwrap();
    secret(dir.path(), "agent-token", ADMIN_TOKEN);
    let err = format!("{:#}", accordd::state(&config).unwrap_err());
    assert!(err.contains("also an agent's token"), "{err}");
    secret(dir.path(), "agent-token", " \n");
    let err = format!("{:#}", accordd::state(&config).unwrap_err());
    assert!(err.contains("empty token"), "{err}");

    let tokens = dir.path().join("tokens");
    std::fs::create_dir(&tokens).unwrap();
    secret(&tokens, "gpu-01", "same");
    secret(&tokens, "gpu-02", "same");
    let err = accordd::api::AgentTokens::load(None, Some(&tokens)).unwrap_err();
    assert!(err.to_string().contains("have the same token"), "{err}");

    let fifo = dir.path().join("accordd.toml.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let out = output_within(
            Command::new(env!("CARGO_BIN_EXE_accordd"))
                .arg("check-config")
                .arg(path),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
}

/// A configuration that is missing is a configuration error (78); a good
/// one with a store another process holds is not (1).
#[test]
fn accordd_exit_codes_tell_a_bad_configuration_from_other_failures() {
    let dir = tempfile::tempdir().unwrap();
    let run = |file: &Path| {
        output_within(
            Command::new(env!("CARGO_BIN_EXE_accordd"))
                .arg("run")
                .arg("--config")
                .arg(file)
                .env("ACCORD_LOG", "warn"),
        )
    };
    let out = run(&dir.path().join("missing.toml"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("missing.toml: cannot read"), "{err}");
    assert!(out.stdout.is_empty());

    let (file, _) = config(dir.path(), "127.0.0.1:0");
    let store = accordd::store::Store::open(&dir.path().join("store")).unwrap();
    let out = run(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot open"), "{err}");
    store.close(accordd::store::CLOSE_WITHIN).unwrap();
}

#[test]
fn a_store_from_a_newer_accordd_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let within = accordd::store::CLOSE_WITHIN;
    accordd::store::Store::open(dir.path())
        .unwrap()
        .close(within)
        .unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        let meta = db.open_tree("meta").unwrap();
        meta.insert("schema", &99u32.to_le_bytes()).unwrap();
        db.flush().unwrap();
    }
    // sled lets go of the directory when its last thread is done.
    accordd::store::wait_released(dir.path(), within).unwrap();
    let err = accordd::store::Store::open(dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("schema 99, newer than this accordd"), "{err}");
}

/// `accordd run --config FILE`, its logs (at info: the bound address is
/// logged) in `log`; with `notify`, as systemd would run it. Killed on
/// drop, with no handle on the test's output: a failing assertion must not
/// leave a daemon holding the test harness's pipes.
fn spawn_accordd(config: &Path, log: &Path, notify: Option<&Path>) -> Process {
    let mut cmd = daemon::command(env!("CARGO_BIN_EXE_accordd"), config);
    if let Some(socket) = notify {
        cmd.env("NOTIFY_SOCKET", socket);
    }
    Process::spawn("accordd", &mut cmd, log)
}

/// Reports streamed to a separate accordd process, killed with SIGKILL
/// mid-stream: every report it acknowledged is there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_reports_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let (file, text) = config(dir.path(), "127.0.0.1:0");
    // No fleet file: the streams register names of their own (with one,
    // accordd registers only the fleet's).
    let no_fleet = text.split("\n[fleet]").next().unwrap();
    std::fs::write(&file, no_fleet).unwrap();
    // Each run logs to its own file: the first run's log survives the second.
    let first_log = dir.path().join("accordd-1.log");
    let mut child = spawn_accordd(&file, &first_log, None);
    let pid = child.id();
    let url = wait_serving(&mut child).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let body = report_body(&fixture("x9drg-wholeio.json"));
    // Three streams, so reports are in flight when the kill lands; each
    // stops at its first report not acknowledged and says why.
    let (acks, mut acked_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut streams = Vec::new();
    for s in 0..3 {
        let (client, url, body, acks) = (client.clone(), url.clone(), body.clone(), acks.clone());
        streams.push(tokio::spawn(async move {
            let mut k = 0u64;
            loop {
                let node = format!("s{s}-n{k:05}");
                k += 1;
                let sent = client
                    .post(format!("{url}/v1/nodes/{node}/report"))
                    .bearer_auth(AGENT_TOKEN)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().is_success() => {
                        let _ = acks.send(node);
                    }
                    Ok(r) => return format!("{node}: {}", r.status()),
                    Err(e) => return format!("{node}: {e}"),
                }
            }
        }));
    }
    drop(acks);
    let mut acked = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while acked.len() < 30 {
        match tokio::time::timeout_at(deadline, acked_rx.recv()).await {
            Ok(Some(node)) => acked.push(node),
            Ok(None) => {
                let mut why = Vec::new();
                for s in streams {
                    why.push(s.await.unwrap());
                }
                panic!(
                    "every report stream stopped after {} acknowledgements, before the kill: \
                     {why:?}\n{}",
                    acked.len(),
                    tail(&first_log)
                );
            }
            Err(_) => panic!(
                "only {} reports acknowledged by accordd pid {pid} within 30 s:\n{}",
                acked.len(),
                tail(&first_log)
            ),
        }
    }
    // Kill while reports are in flight. Child::kill is SIGKILL.
    child.kill();
    // Reports acknowledged until the streams end count as well.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, acked_rx.recv()).await {
            Ok(Some(node)) => acked.push(node),
            Ok(None) => break,
            Err(_) => panic!(
                "accordd pid {pid} still acknowledging reports 30 s after kill -9 \
                 ({} acknowledged):\n{}",
                acked.len(),
                tail(&first_log)
            ),
        }
    }
    let status = child.wait();
    assert_eq!(
        status.signal(),
        Some(9),
        "accordd pid {pid} ended ({status}), not by the kill:\n{}",
        tail(&first_log)
    );

    let second_log = dir.path().join("accordd-2.log");
    let mut child = spawn_accordd(&file, &second_log, None);
    let url = wait_serving(&mut child).await;
    let resp = client
        .get(format!("{url}/v1/nodes"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status.as_u16(), 200, "{text}");
    let listed: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    let lost: Vec<&String> = acked
        .iter()
        .filter(|n| !names.contains(&n.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged ({} in all) but lost after kill -9: {lost:?}\n{}",
        acked.len(),
        tail(&second_log)
    );
}

/// Under systemd (`Type=notify`), accordd says READY=1 once its listener is
/// bound: the API answers as soon as the message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordd_tells_systemd_when_it_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = config(dir.path(), "127.0.0.1:0");
    let notify = dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    // Short reads, so the wait notices accordd exiting.
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let log = dir.path().join("accordd.log");
    let mut child = spawn_accordd(&file, &log, Some(&notify));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 64];
    let n = loop {
        match socket.recv(&mut buf) {
            Ok(n) => break n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("{}: {e}", notify.display()),
        }
        child.assert_running(&format!("READY=1 on {}", notify.display()));
        child.assert_before(
            deadline,
            format_args!("sent no READY=1 to {} within 30 s", notify.display()),
        );
    };
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "READY=1");
    // The listener is bound: the first request is answered (accordd logs
    // the address it bound right after READY=1).
    let addr = wait_address(&mut child, deadline).await;
    let health = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://{addr}/v1/health"))
        .send()
        .await;
    match health {
        Ok(r) => assert!(r.status().is_success(), "{}:\n{}", r.status(), tail(&log)),
        Err(e) => panic!("http://{addr}/v1/health after READY=1: {e}\n{}", tail(&log)),
    }
}

/// Node names are Kubernetes node names at every endpoint that takes one:
/// anything else (a path in disguise, a newline that would forge a log
/// line, an escape sequence, 10k characters, capitals) gets 400 with a
/// reason naming the problem, and the store is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_names_that_are_not_kubernetes_node_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    let (status, _) = d
        .report(
            "x9drg-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("x9drg-wholeio.json")),
        )
        .await;
    assert_eq!(status, 200);
    let before = d.nodes().await;
    let long = "a".repeat(10_000);
    // (as sent in the path, part of the reason)
    let names: [(&str, &str); 7] = [
        ("..%2Fnodes%2Fx9drg-01", "'/'"),
        ("x9drg-01%0AINFO%20forged", "'\\n'"),
        ("x%1B%5B31mred", "'\\u{1b}'"),
        ("X9DRG-01", "'X'"),
        ("-x9drg", "must start and end"),
        ("a..b", "empty label"),
        (&long, "10000 characters"),
    ];
    for (name, reason) in names {
        let agent_paths = [
            (reqwest::Method::POST, format!("/v1/nodes/{name}/report")),
            (reqwest::Method::POST, format!("/v1/nodes/{name}/heartbeat")),
        ];
        for (method, path) in agent_paths {
            let (status, v) = d
                .send(
                    method,
                    &path,
                    Some(AGENT_TOKEN),
                    Some(report_body(&fixture("x9drg-wholeio.json"))),
                )
                .await;
            assert_eq!(status, 400, "{path}: {v}");
            let got = v["error"].as_str().unwrap_or_default();
            assert!(got.contains(reason), "{path}: {got}");
            assert!(got.len() < 300, "{path}: the name is cut: {got}");
        }
        let admin_paths = [
            (reqwest::Method::GET, format!("/v1/nodes/{name}")),
            (reqwest::Method::POST, format!("/v1/nodes/{name}/replace")),
        ];
        for (method, path) in admin_paths {
            let (status, v) = d.send(method, &path, Some(ADMIN_TOKEN), None).await;
            assert_eq!(status, 400, "{path}: {v}");
            assert!(v["error"].as_str().unwrap_or_default().contains(reason));
        }
        assert_eq!(d.nodes().await, before, "{name}: the store changed");
    }

    // accordctl refuses such a name before any request (exit 2, clap's
    // usage error), so `node replace '../nodes/X'` never acts on X.
    let admin = dir.path().join("admin-token");
    for args in [
        vec!["node", "replace", "../nodes/x9drg-01"],
        vec!["node", "../nodes/x9drg-01"],
        vec!["node", "replace", "x9drg-01\nforged"],
    ] {
        let out = output_within(
            Command::new(crate::support::accordctl_bin())
                .args(&args)
                .args(["--url", &d.url, "--token-file"])
                .arg(&admin),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("not allowed"), "{args:?}: {err}");
    }
    let after = d.nodes().await;
    assert_eq!(after, before);
    assert_eq!(after[0]["replacement_allowed"], false);
    // The good name still works through accordctl.
    let out = output_within(
        Command::new(crate::support::accordctl_bin())
            .args([
                "node",
                "replace",
                "x9drg-01",
                "--url",
                &d.url,
                "--token-file",
            ])
            .arg(&admin),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.nodes().await[0]["replacement_allowed"], true);
    d.stop().await;
}

/// Reports past the plausibility limits, and reports with a number that
/// is not finite (an f32 fed 1e39 parses as infinity), are refused with
/// 422 and a reason naming the field; nothing is stored (not even as
/// null), so an identical re-report cannot bump the generation either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implausible_and_non_finite_reports_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    let (status, _) = d
        .report(
            "dgx2-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("dgx2.json")),
        )
        .await;
    assert_eq!(status, 200);
    let before = d.nodes().await;

    let base = fixture("dgx2.json");
    let mut many_gpus = base.clone();
    let gpu = many_gpus["gpus"][0].clone();
    many_gpus["gpus"] = Value::Array(vec![gpu; 65]);
    let mut many_numa = base.clone();
    let numa = many_numa["numa_nodes"][0].clone();
    many_numa["numa_nodes"] = Value::Array(vec![numa; 65]);
    let mut threads = base.clone();
    threads["machine"]["threads"] = 4_000_000_000u32.into();
    let mut mig = fixture("h100-8gpu-mig.json");
    let gi = mig["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|g| g["mig"]["gpu_instances"].as_array()?.first().cloned())
        .expect("a MIG instance in the h100 fixture");
    mig["gpus"][0]["mig"]["gpu_instances"] = Value::Array(vec![gi; 8]);
    let mut overflow = base.clone();
    overflow["pcie"]["devices"][0]["link_gbps"] = serde_json::from_str("1e39").unwrap();
    let mut long_string = base.clone();
    long_string["machine"]["product"] = "x".repeat(5000).into();

    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "65 GPUs",
            many_gpus,
            "hardware.gpus: 65 entries; at most 64",
        ),
        (
            "65 NUMA nodes",
            many_numa,
            "hardware.numa_nodes: 65 entries; at most 64",
        ),
        (
            "4e9 threads",
            threads,
            "hardware.machine.threads: 4000000000; at most 262144",
        ),
        (
            "8 MIG instances on one GPU",
            mig,
            "hardware.gpus[0].mig.gpu_instances: 8 entries; at most 7",
        ),
        (
            "1e39 in an f32",
            overflow,
            "hardware.pcie.devices[0].link_gbps: not a finite number",
        ),
        (
            "5000-byte string",
            long_string,
            "hardware.machine.product: string of 5000 bytes",
        ),
    ];
    for (what, hardware, reason) in cases {
        for _ in 0..2 {
            let (status, v) = d
                .report("dgx2-01", Some(AGENT_TOKEN), report_body(&hardware))
                .await;
            assert_eq!(status, 422, "{what}: {v}");
            let got = v["error"].as_str().unwrap_or_default();
            assert!(got.contains(reason), "{what}: {got}");
            assert_eq!(d.nodes().await, before, "{what}: the store changed");
        }
        // Not under a new name either.
        let (status, _) = d
            .report("new-01", Some(AGENT_TOKEN), report_body(&hardware))
            .await;
        assert_eq!(status, 422, "{what}");
        assert_eq!(d.nodes().await, before, "{what}: a node was registered");
    }
    // The largest finite f32 is fine.
    let mut big = base.clone();
    big["pcie"]["devices"][0]["link_gbps"] = serde_json::from_str("3.4e38").unwrap();
    let (status, v) = d
        .report("dgx2-01", Some(AGENT_TOKEN), report_body(&big))
        .await;
    assert_eq!(status, 200, "{v}");
    d.stop().await;
}

/// The session an accepted report was answered with.
fn session_of(reply: &Value) -> String {
    let s = reply["session"].as_str().unwrap_or_default().to_owned();
    assert_eq!(s.len(), 64, "a 32-byte hex session: {reply}");
    s
}

/// With the shared agent token, the first report binds a node name to its
/// machine (serial, GPU UUIDs); later reports must prove that machine and
/// heartbeats must carry the session the last accepted report was
/// answered with; a report with no identity is refused; `accordctl node
/// replace` rebinds. Every refusal leaves the store as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_shared_token_a_node_name_is_bound_to_its_machine() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    // No serial, no GPU UUIDs: nothing to bind.
    let (status, v) = d
        .report_as("cpu-01", &recorded("x9drg-wholeio.json"), None)
        .await;
    assert_eq!(status, 422, "{v}");
    let reason = v["error"].as_str().unwrap();
    assert!(reason.contains("no machine identity"), "{reason}");
    assert!(reason.contains("per-node agent token"), "{reason}");
    assert_eq!(d.nodes().await, Value::Array(vec![]));

    let dgx2 = fixture("dgx2.json");
    let (status, v) = d.report_as("gpu-01", &dgx2, None).await;
    assert_eq!(
        (status, v["outcome"].as_str()),
        (200, Some("registered")),
        "{v}"
    );
    let first = session_of(&v);
    let bound = d.nodes().await;

    // Heartbeats: without the session, or with another, refused.
    let (status, v) = d.heartbeat("gpu-01", None).await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("carries no agent session"),
        "{v}"
    );
    let (status, v) = d.heartbeat("gpu-01", Some(&"0".repeat(64))).await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not the node's current one"),
        "{v}"
    );
    assert_eq!(
        d.nodes().await,
        bound,
        "a refused heartbeat changed the store"
    );
    let (status, v) = d.heartbeat("gpu-01", Some(&first)).await;
    assert_eq!((status, v["generation"].as_u64()), (200, Some(1)), "{v}");
    let bound = d.nodes().await;

    // Reports claiming gpu-01 that do not prove its machine.
    let mut anonymous = dgx2.clone();
    anonymous["machine"]["serial"] = Value::Null;
    for g in anonymous["gpus"].as_array_mut().unwrap() {
        g["uuid"] = Value::Null;
    }
    let mut other_serial = dgx2.clone();
    other_serial["machine"]["serial"] = "SN-other".into();
    let mut other_gpus = fixture("h100-8gpu-mig.json");
    other_gpus["machine"]["serial"] = Value::Null;
    let cases = [
        (
            "no serial, no GPU UUIDs",
            anonymous,
            422,
            "no machine identity",
        ),
        (
            "another serial",
            other_serial,
            409,
            "contradicts the stored",
        ),
        (
            "other GPU UUIDs, no serial",
            other_gpus,
            409,
            "contradicts the stored",
        ),
    ];
    for (what, hw, want, words) in cases {
        for session in [None, Some(first.as_str())] {
            let (status, v) = d.report_as("gpu-01", &hw, session).await;
            assert_eq!(status, want, "{what}: {v}");
            let got = v["error"].as_str().unwrap_or_default();
            assert!(got.contains(words), "{what}: {got}");
            assert_eq!(d.nodes().await, bound, "{what}: the store changed");
        }
    }
    // The heartbeats' session still holds.
    assert_eq!(d.heartbeat("gpu-01", Some(&first)).await.0, 200);

    // The same machine with its session: the session goes on.
    let (status, v) = d.report_as("gpu-01", &dgx2, Some(&first)).await;
    assert_eq!((status, session_of(&v)), (200, first.clone()), "{v}");
    // A report that omits the bound serial: the GPU UUIDs (which tenants
    // read from their pods) do not stand in for it.
    let mut no_serial = dgx2.clone();
    no_serial["machine"]["serial"] = Value::Null;
    let before = d.nodes().await;
    let (status, v) = d.report_as("gpu-01", &no_serial, Some(&first)).await;
    assert_eq!(status, 409, "a bound serial is required: {v}");
    assert_eq!(d.nodes().await, before, "the store changed");
    // The agent restarted (no session): a new one, the old one done with.
    let (status, v) = d.report_as("gpu-01", &dgx2, None).await;
    assert_eq!(status, 200, "{v}");
    let second = session_of(&v);
    assert_ne!(second, first);
    assert_eq!(d.heartbeat("gpu-01", Some(&first)).await.0, 403);
    assert_eq!(d.heartbeat("gpu-01", Some(&second)).await.0, 200);
    let mut gpus_moved = dgx2.clone();
    gpus_moved["machine"]["serial"] = "SN-other".into();
    assert_eq!(
        d.report_as("gpu-01", &gpus_moved, Some(&second)).await.0,
        409
    );

    // Bound by GPU UUIDs alone (no serial): a report sharing half of them
    // is the same machine (GPUs replaced), but the binding keeps its
    // GPUs, so a second report sharing half of the first's cannot walk the
    // name to a third machine. Placeholder UUIDs prove nothing.
    let mut a = fixture("h100-8gpu-mig.json");
    a["machine"]["serial"] = Value::Null;
    let uuid = |prefix: &str, i: usize| format!("GPU-{prefix}{i:07}-0000-4000-a100-d6cc78506ee0");
    let with_uuids = |hw: &Value, uuids: Vec<String>| {
        let mut hw = hw.clone();
        for (g, u) in hw["gpus"].as_array_mut().unwrap().iter_mut().zip(uuids) {
            g["uuid"] = u.into();
        }
        hw
    };
    let a = with_uuids(&a, (0..8).map(|i| uuid("a", i)).collect());
    assert_eq!(d.report_as("gpu-02", &a, None).await.0, 200);
    let half = with_uuids(
        &a,
        (0..8)
            .map(|i| uuid(if i < 4 { "a" } else { "b" }, i))
            .collect(),
    );
    assert_eq!(
        d.report_as("gpu-02", &half, None).await.0,
        200,
        "half in common"
    );
    let walked = with_uuids(
        &a,
        (0..8)
            .map(|i| uuid(if i < 4 { "c" } else { "b" }, i))
            .collect(),
    );
    let (status, v) = d.report_as("gpu-02", &walked, None).await;
    assert_eq!(status, 409, "the binding was walked: {v}");
    let placeholders = with_uuids(&a, vec!["N/A".to_owned(); 8]);
    let (status, v) = d.report_as("gpu-03", &placeholders, None).await;
    assert_eq!(status, 422, "placeholder UUIDs bound a name: {v}");

    // The machine is replaced: the admin says so; the old agent's session
    // is done with, the new machine binds the name and gets its own.
    let (status, _) = d
        .send(
            reqwest::Method::POST,
            "/v1/nodes/gpu-01/replace",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(d.heartbeat("gpu-01", Some(&second)).await.0, 403);
    let h100 = fixture("h100-8gpu-mig.json");
    let (status, v) = d.report_as("gpu-01", &h100, None).await;
    assert_eq!(
        (status, v["outcome"].as_str()),
        (200, Some("changed")),
        "{v}"
    );
    let third = session_of(&v);
    assert_eq!(d.heartbeat("gpu-01", Some(&third)).await.0, 200);
    assert_eq!(
        d.report_as("gpu-01", &dgx2, None).await.0,
        409,
        "bound to the new machine"
    );
    // Generations: registered, the new machine.
    let listed = summary(&d.nodes().await);
    assert_eq!(listed[0], ("gpu-01".to_owned(), 8, 2));
    // The session is the agent's secret: no admin view shows it.
    let listed = d.nodes().await.to_string();
    for s in [&first, &second, &third] {
        assert!(!listed.contains(s.as_str()), "{listed}");
    }
    d.stop().await;
}

/// With per-node agent tokens the token names the node: a machine without
/// a serial or GPU UUIDs registers, and heartbeats need no session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_per_node_tokens_the_token_names_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let (file, text) = config(dir.path(), "127.0.0.1:0");
    let tokens = dir.path().join("agent-tokens");
    std::fs::create_dir(&tokens).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o700)).unwrap();
    secret(&tokens, "cpu-01", AGENT_TOKEN);
    let shared_line = format!(
        "token_file = \"{}\"",
        dir.path().join("agent-token").display()
    );
    assert!(text.contains(&shared_line));
    let text = text.replace(
        &shared_line,
        &format!("token_dir = \"{}\"", tokens.display()),
    );
    std::fs::write(&file, text).unwrap();
    let d = Daemon::start_with(&file).await;
    let cpu = recorded("x9drg-wholeio.json");
    let (status, v) = d.report_as("cpu-01", &cpu, None).await;
    assert_eq!(
        (status, v["outcome"].as_str()),
        (200, Some("registered")),
        "{v}"
    );
    let (status, v) = d.heartbeat("cpu-01", None).await;
    assert_eq!((status, v["generation"].as_u64()), (200, Some(1)), "{v}");
    // Another node's token is not this one's.
    let (status, _) = d.report_as("cpu-02", &cpu, None).await;
    assert_eq!(status, 401);
    d.stop().await;
}

/// With replicas an agent command is handed over only by a replica that
/// leads now, and only once the shared state holds it under its term;
/// `/v1/replica` says which replica this is and who leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_hands_a_command_over_only_leading_and_once_it_is_fenced() {
    use accord::fleet::MigVia;
    use accord_api::agent::{CommandAction, CommandRecord, CommandState, MigTarget};
    use accordd::ha::{Fence, Leadership, Term};

    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    let (tx, rx) = tokio::sync::watch::channel(Term::Leader {
        fence: Fence {
            holder: "accordd-a".into(),
            transitions: 3,
        },
        valid_until: tokio::time::Instant::now() + Duration::from_secs(3600),
    });
    d.shared.leadership.set(Leadership::elected(rx)).unwrap();
    d.shared.identity.set("accordd-a".into()).unwrap();
    let (status, v) = d
        .report(
            "h100-01",
            Some(AGENT_TOKEN),
            report_body(&fixture("h100-8gpu-mig.json")),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let session = v["session"].as_str().unwrap().to_owned();
    let rec = d
        .shared
        .store
        .open_command(CommandRecord {
            node: "h100-01".into(),
            generation: 0,
            action: CommandAction::ApplyMig {
                gpus: vec![MigTarget {
                    index: 0,
                    uuid: None,
                    layout: vec!["1g.10gb@0".into()],
                }],
            },
            via: MigVia::Agent,
            targets: Vec::new(),
            mig_config: None,
            deliver: true,
            for_workloads: vec!["ml/a".into()],
            opened_at: 10,
            deadline: u64::MAX,
            state: CommandState::Open,
        })
        .unwrap();
    // Journaled here, not yet in the shared state: not handed over.
    let (status, v) = d.heartbeat("h100-01", Some(&session)).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["command"].is_null(), "{v}");
    // In the shared state under this term: handed over.
    let node = "h100-01".to_owned();
    d.shared
        .set_fenced_commands([(&node, Some(rec.generation))], false);
    let (_, v) = d.heartbeat("h100-01", Some(&session)).await;
    assert_eq!(v["command"]["generation"], rec.generation, "{v}");
    let (status, v) = d
        .send(reqwest::Method::GET, "/v1/replica", Some(ADMIN_TOKEN), None)
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["identity"].as_str(),
            v["leading"].as_bool(),
            v["transitions"].as_i64()
        ),
        (Some("accordd-a"), Some(true), Some(3))
    );
    // Deposed: nothing handed over, whatever the store holds.
    tx.send(Term::Follower {
        leader: Some("accordd-b".into()),
    })
    .unwrap();
    let (_, v) = d.heartbeat("h100-01", Some(&session)).await;
    assert!(v["command"].is_null(), "{v}");
    let (_, v) = d
        .send(reqwest::Method::GET, "/v1/replica", Some(ADMIN_TOKEN), None)
        .await;
    assert_eq!(
        (v["leading"].as_bool(), v["leader"].as_str()),
        (Some(false), Some("accordd-b"))
    );
    d.stop().await;
}

/// The x9drg recording with a serial of `node`'s own.
fn machine_of(node: &str) -> Value {
    let mut v = recorded("x9drg-wholeio.json");
    v["machine"]["serial"] = format!("SN-{node}").into();
    v
}

/// Without a fleet file a shared token's holder can name any node, so the
/// store bounds what reports may add (`[store] max_nodes`, here 3; a 4th
/// name is 507 with nothing stored, after a restart too); the admin lists
/// the nodes page by page (`accordctl nodes` follows the pages) and
/// forgets one (`accordctl node forget`), which makes room; a node of the
/// fleet file cannot be forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_holds_what_its_bounds_allow_and_the_admin_can_forget_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let (_, text) = config(dir.path(), "127.0.0.1:0");
    let fleetless = text
        .split("\n[fleet]")
        .next()
        .unwrap()
        .replace("[store]\n", "[store]\nmax_nodes = 3\n");
    let file = dir.path().join("fleetless.toml");
    std::fs::write(&file, &fleetless).unwrap();
    let d = Daemon::start_with(&file).await;
    for n in ["rogue-01", "rogue-02", "rogue-03"] {
        let (status, v) = d.report_as(n, &machine_of(n), None).await;
        assert_eq!(status, 200, "{n}: {v}");
    }
    let before = d.nodes().await;
    let (status, v) = d.report_as("rogue-04", &machine_of("rogue-04"), None).await;
    assert_eq!(status, 507, "{v}");
    let reason = v["error"].as_str().unwrap();
    assert!(reason.contains("store.max_nodes"), "{reason}");
    assert!(reason.contains("accordctl node forget"), "{reason}");
    assert_eq!(
        d.nodes().await,
        before,
        "a refused report changed the store"
    );

    // Pages: two, then one; the header names where the next page starts.
    let page = reqwest::Client::new()
        .get(format!("{}/v1/nodes?limit=2", d.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let next = page.headers()[accord_api::nodes::NEXT_PAGE_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(next, "rogue-02");
    assert_eq!(
        page.json::<Value>()
            .await
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let (status, rest) = d
        .send(
            reqwest::Method::GET,
            &format!("/v1/nodes?limit=2&after={next}"),
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest[0]["name"], "rogue-03");
    for bad in ["limit=0", "limit=100000", "after=..%2Fx", "page=2"] {
        let (status, v) = d
            .send(
                reqwest::Method::GET,
                &format!("/v1/nodes?{bad}"),
                Some(ADMIN_TOKEN),
                None,
            )
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
    }

    // accordctl follows the pages, and forgets.
    let admin = dir.path().join("admin-token");
    let accordctl = |args: &[&str]| {
        output_within(
            Command::new(crate::support::accordctl_bin())
                .args(args)
                .args(["--url", &d.url, "--token-file"])
                .arg(&admin),
        )
    };
    let out = accordctl(&["nodes", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3);
    let out = accordctl(&["node", "forget", "rogue-03"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rogue-03: forgotten"));
    let out = accordctl(&["node", "forget", "rogue-03"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{out:?}"
    );
    assert_eq!(d.nodes().await.as_array().unwrap().len(), 2);
    // The forgotten node's agent is answered as never registered.
    let (status, _) = d.heartbeat("rogue-03", None).await;
    assert_eq!(status, 404);
    let (status, v) = d.report_as("rogue-04", &machine_of("rogue-04"), None).await;
    assert_eq!(status, 200, "{v}");

    // What the store holds is counted again at start.
    d.stop().await;
    let d = Daemon::start_with(&file).await;
    let (status, v) = d.report_as("rogue-05", &machine_of("rogue-05"), None).await;
    assert_eq!(status, 507, "after a restart: {v}");
    d.stop().await;

    // A node of the fleet file is not forgotten: its agent would register
    // it again.
    let d = Daemon::start(dir.path()).await;
    let (status, v) = d
        .send(
            reqwest::Method::DELETE,
            "/v1/nodes/gpu-01",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("fleet file"), "{v}");
    let (status, _) = d
        .send(
            reqwest::Method::DELETE,
            "/v1/nodes/rogue-01",
            Some(AGENT_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, 401, "an agent's token forgets nothing");
    d.stop().await;
}

/// A report's MIG instances are checked against NVIDIA's profile tables:
/// two instances on the same slices (or seven 7g.80gb on one GPU) would
/// be planned as capacity the GPU does not have: 422, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_instances_a_gpu_cannot_hold_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path()).await;
    let good = fixture("h100-8gpu-mig.json");
    let (status, v) = d.report_as("h100-01", &good, None).await;
    assert_eq!(status, 200, "{v}");
    let before = d.nodes().await;
    let at = good["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .position(|g| {
            g["mig"]["gpu_instances"]
                .as_array()
                .is_some_and(|i| !i.is_empty())
        })
        .unwrap();
    let mut overlapping = good.clone();
    let instance = overlapping["gpus"][at]["mig"]["gpu_instances"][0].clone();
    let mut twin = instance.clone();
    twin["id"] = (instance["id"].as_u64().unwrap() + 100).into();
    overlapping["gpus"][at]["mig"]["gpu_instances"] = Value::Array(vec![instance, twin]);
    let (status, v) = d.report_as("h100-01", &overlapping, None).await;
    assert_eq!(status, 422, "{v}");
    let reason = v["error"].as_str().unwrap();
    assert!(
        reason.contains(&format!("hardware.gpus[{at}].mig")),
        "{reason}"
    );
    assert_eq!(
        d.nodes().await,
        before,
        "a refused report changed the store"
    );
    d.stop().await;
}
