//! A rogue accordd (anything answering at the configured URL): what it
//! says reaches the admin's terminal only escaped. Its strings carry an
//! OSC 52 clipboard write, a screen clear, a C1 CSI and a bidi override;
//! `accordctl nodes`, `node`, `status`, `explain` and an error answer
//! show them as `\u{…}` text, never as the bytes; with `--json` as JSON
//! escapes (`\u009b`), which read back as the same strings.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{json, Value};

/// Every string accordd could send, made hostile.
const HOSTILE: &str = "x\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{1b}[2J\u{9b}31m\u{202e}y";

/// Bytes that must never reach a terminal: ESC, BEL, and the C1 CSI (as
/// UTF-8, `c2 9b`), the bidi override (`e2 80 ae`).
fn raw_controls(out: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for (what, bytes) in [
        ("ESC", &b"\x1b"[..]),
        ("BEL", &b"\x07"[..]),
        ("C1 CSI", &b"\xc2\x9b"[..]),
        ("RLO", &b"\xe2\x80\xae"[..]),
    ] {
        if out.windows(bytes.len()).any(|w| w == bytes) {
            found.push(what.to_owned());
        }
    }
    found
}

fn node_view() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/h100-8gpu-mig.json");
    let mut hardware: Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for gpu in hardware["gpus"].as_array_mut().unwrap() {
        gpu["model"] = HOSTILE.into();
    }
    json!({
        "name": "h100-01",
        "identity": {"serial": HOSTILE, "gpu_uuids": []},
        "hardware": hardware,
        "generation": 1,
        "reported_at": 0,
        "last_seen": 0,
        "agent_version": HOSTILE,
        "gpu_health": HOSTILE,
        "rack": HOSTILE,
        "state": "fresh",
    })
}

fn status() -> Value {
    json!({
        "mode": "observe", "round": 1, "at": 0, "planner_ms": 0.0,
        "nodes": [], "workloads": [], "actions": [], "open_intents": [],
        "cannot_plan": [
            {"workload": HOSTILE, "reason": HOSTILE},
            {"workload": "team/job", "reason": HOSTILE},
        ],
        "pods": {"team/job-0": "team/job"}, "scheduler": {HOSTILE: HOSTILE},
        "recent": [HOSTILE],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_rogue_accordd_says_reaches_the_terminal_escaped() {
    let app = axum::Router::new()
        .route(
            "/v1/nodes",
            axum::routing::get(|| async { axum::Json(json!([node_view()])) }),
        )
        .route(
            "/v1/nodes/h100-01",
            axum::routing::get(|| async { axum::Json(node_view()) }),
        )
        .route(
            "/v1/status",
            axum::routing::get(|| async { axum::Json(status()) }),
        )
        .fallback(|| async {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"error": HOSTILE})),
            )
                .into_response()
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let dir = tempfile::tempdir().unwrap();
    let token = accord_testkit::daemon::secret(dir.path(), "admin-token", "t");
    for args in [
        &["nodes"][..],
        &["node", "h100-01"],
        &["status"],
        &["explain", "team/job-0"],
        &["node", "gone"],
        &["nodes", "--json"],
        &["node", "h100-01", "--json"],
        &["status", "--json"],
    ] {
        let json = args.contains(&"--json");
        let shown_args = args.join(" ");
        let (url, token) = (url.clone(), token.clone());
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let out = tokio::task::spawn_blocking(move || {
            accord_testkit::process::output_within(
                Command::new(crate::support::accordctl_bin())
                    .args(&args)
                    .args(["--url", &url, "--token-file"])
                    .arg(&token),
                Duration::from_secs(60),
            )
        })
        .await
        .unwrap();
        let shown = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
        let text = String::from_utf8_lossy(&shown);
        // As text a person reads, or as JSON escapes (which read back as
        // the same string).
        let escaped = if json {
            "\\u001b]52;c;"
        } else {
            "\\u{1b}]52;c;"
        };
        assert!(
            text.contains(escaped),
            "{shown_args}: the hostile text is shown, escaped: {text}"
        );
        if json {
            let value: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
            assert!(value.to_string().contains("\u{9b}31m\u{202e}y"), "{value}");
        }
        assert_eq!(raw_controls(&shown), Vec::<String>::new(), "{text}");
    }
    server.abort();
}
