//! A BMC that is not one: an endpoint answering HTML, `null`, invalid
//! JSON, an array or a number where the service root should be is refused
//! with what came back (content type, first bytes escaped); answers over
//! the size limit (100 MB, streamed) are refused after the limit without
//! the rest being read or held, on every read path: GETs, the service
//! root, task monitors and session creation. A redirect to another host
//! is never followed with credentials.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accord_redfish::client::MAX_RESPONSE_BYTES;
use accord_redfish::probe::probe;
use accord_redfish::{Bmc, HttpPool, RedfishError};
use axum::body::{Body, Bytes};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use support::target;

/// What the stub streams: 100 MB, in 64 KiB chunks made as they are sent.
const HUGE: u64 = 100_000_000;
const CHUNK: usize = 64 << 10;

/// A good enough service root whose links stay under the BMC's prefix.
const ROOT: &str = r#"{"@odata.id": "/redfish/v1", "RedfishVersion": "1.6.0",
    "Systems": {"@odata.id": "/redfish/v1/Systems"},
    "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}"#;

/// Counts what the stub's 100 MB streams produced, and whether the
/// stream was dropped (the connection closed) before its end.
#[derive(Debug, Default)]
struct Streamed {
    bytes: AtomicU64,
    dropped: AtomicBool,
    finished: AtomicBool,
}

struct OnDrop(Arc<Streamed>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

impl Streamed {
    /// 100 MB, made chunk by chunk as hyper asks for them.
    fn body(self: &Arc<Self>) -> Body {
        let guard = OnDrop(self.clone());
        let chunk = Bytes::from(vec![b' '; CHUNK]);
        let stream = futures::stream::unfold((0u64, guard), move |(sent, guard)| {
            let chunk = chunk.clone();
            async move {
                if sent >= HUGE {
                    guard.0.finished.store(true, Ordering::SeqCst);
                    return None;
                }
                guard.0.bytes.fetch_add(CHUNK as u64, Ordering::SeqCst);
                Some((Ok::<_, std::io::Error>(chunk), (sent + CHUNK as u64, guard)))
            }
        });
        Body::from_stream(stream)
    }

    /// Waits, with a deadline, until the stream was dropped before its end.
    async fn wait_dropped(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.dropped.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the stub's 100 MB stream was still being sent 10 s after the refusal \
                 ({} bytes so far)",
                self.bytes.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!self.finished.load(Ordering::SeqCst), "read to its end");
    }
}

struct Stub {
    url: String,
    streamed: Arc<Streamed>,
    /// Requests answered so far.
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(content_type: &'static str, body: impl Into<Body>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        body.into(),
    )
        .into_response()
}

/// One server, many "BMCs": `http://ADDR/<kind>` is a BMC whose answers
/// are of that kind.
async fn start_stub() -> Stub {
    let streamed = Arc::new(Streamed::default());
    let s = streamed.clone();
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let s = s.clone();
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            let path = uri.path();
            let (kind, rest) = path[1..].split_once('/').unwrap_or((&path[1..], ""));
            let json = "application/json";
            match (kind, &method, rest) {
                ("html", _, _) => answer(
                    "text/html; charset=utf-8",
                    "<!DOCTYPE html>\n<html><head><title>Web Console Login</title></head></html>",
                ),
                ("null", _, _) => answer(json, "null"),
                ("invalid", _, _) => answer(json, r#"{"RedfishVersion": "1.6.0", "Systems": "#),
                ("array", _, _) => answer(json, r#"[{"@odata.id": "/redfish/v1"}]"#),
                ("number", _, _) => answer(json, "42"),
                ("empty", _, _) => answer(json, ""),
                ("object", _, _) => answer(json, r#"{"status": "ok"}"#),
                // 3 MB of empty objects: a million values.
                ("values", _, _) => answer(json, format!("[{}{{}}]", "{},".repeat(1_000_000))),
                // Two `Systems` links: which one a reader takes is its own.
                ("twice", _, _) => answer(
                    json,
                    r#"{"RedfishVersion": "1.6.0", "Systems": {"@odata.id": "/redfish/v1/Systems"}, "Systems": {"@odata.id": "/elsewhere"}}"#,
                ),
                ("control", _, _) => answer(
                    "text/plain; charset=\u{e9}",
                    "\x1b[31mred\x1b[0m\nforged line",
                ),
                ("bigroot", _, _) => answer(json, s.body()),
                // Says it is 100 MB before sending any of it.
                ("declared", _, "redfish/v1/Systems") => (
                    StatusCode::OK,
                    [
                        (header::CONTENT_TYPE, json.to_owned()),
                        (header::CONTENT_LENGTH, HUGE.to_string()),
                    ],
                    s.body(),
                )
                    .into_response(),
                ("manychassis", &Method::GET, "redfish/v1") => answer(json, CHASSIS_ROOT),
                (_, &Method::GET, "redfish/v1") => answer(json, ROOT),
                ("many", &Method::GET, "redfish/v1/Systems") => answer(json, many("Systems")),
                ("ten", &Method::GET, "redfish/v1/Systems") => {
                    answer(json, collection("Systems", 10))
                }
                ("manychassis" | "manylinks", &Method::GET, "redfish/v1/Systems") => {
                    answer(json, collection("Systems", 1))
                }
                ("manychassis", &Method::GET, "redfish/v1/Chassis") => {
                    answer(json, many("Chassis"))
                }
                ("manychassis", &Method::GET, "redfish/v1/Systems/0") => answer(json, RESETTABLE),
                ("manylinks", &Method::GET, "redfish/v1/Systems/0") => {
                    let links = String::from_utf8(member_list("Chassis", MANY)).unwrap();
                    let system = RESETTABLE.replacen(
                        r#""Id": "0","#,
                        &format!(r#""Id": "0", "Links": {{"Chassis": {links}}},"#),
                        1,
                    );
                    answer(json, system)
                }
                // Systems without a Reset action: an unbounded walk would
                // read every one of them.
                ("many" | "ten", &Method::GET, rest) if rest.starts_with("redfish/v1/Systems/") => {
                    answer(json, r#"{"Id": "x", "PowerState": "Off"}"#)
                }
                ("big", &Method::GET, "redfish/v1/Systems") => answer(json, s.body()),
                ("task", &Method::POST, _) => (
                    StatusCode::ACCEPTED,
                    [(header::LOCATION, "/redfish/v1/TaskMonitors/1")],
                )
                    .into_response(),
                ("task", &Method::GET, "redfish/v1/TaskMonitors/1") => answer(json, s.body()),
                ("session", &Method::POST, "redfish/v1/SessionService/Sessions") => (
                    StatusCode::CREATED,
                    [
                        ("x-auth-token", "t"),
                        ("location", "/redfish/v1/SessionService/Sessions/1"),
                    ],
                    s.body(),
                )
                    .into_response(),
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Stub {
        url,
        streamed,
        requests,
        task,
    }
}

/// How many members the long collections have.
const MANY: usize = 100_000;

/// A service root that also links to a Chassis collection.
const CHASSIS_ROOT: &str = r#"{"@odata.id": "/redfish/v1", "RedfishVersion": "1.6.0",
    "Systems": {"@odata.id": "/redfish/v1/Systems"},
    "Chassis": {"@odata.id": "/redfish/v1/Chassis"}}"#;

/// A system Accord can power.
const RESETTABLE: &str = r##"{"Id": "0", "PowerState": "Off", "Actions": {"#ComputerSystem.Reset":
    {"target": "/redfish/v1/Systems/0/Actions/ComputerSystem.Reset"}}}"##;

/// `[{"@odata.id": "/redfish/v1/<of>/<i>"}, …]`, `n` links, written as
/// text (as JSON values 100,000 of them would take 70 MB).
fn member_list(of: &str, n: usize) -> Vec<u8> {
    use std::io::Write;
    let mut out = b"[".to_vec();
    for i in 0..n {
        let comma = if i + 1 < n { "," } else { "" };
        write!(out, r#"{{"@odata.id":"/redfish/v1/{of}/{i}"}}{comma}"#).unwrap();
    }
    out.push(b']');
    out
}

/// A collection of `n` members, `/redfish/v1/<of>/<i>`.
fn collection(of: &str, n: usize) -> Bytes {
    let mut out =
        format!(r#"{{"@odata.id":"/redfish/v1/{of}","Members@odata.count":{n},"Members":"#)
            .into_bytes();
    out.extend(member_list(of, n));
    out.push(b'}');
    out.into()
}

/// [`collection`] of [`MANY`], made once for all the stubs.
fn many(of: &'static str) -> Bytes {
    static MADE: std::sync::Mutex<Vec<(&str, Bytes)>> = std::sync::Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap();
    if let Some((_, b)) = made.iter().find(|(o, _)| *o == of) {
        return b.clone();
    }
    let b = collection(of, MANY);
    made.push((of, b.clone()));
    b
}

fn bmc(stub: &Stub, kind: &str, pool: &HttpPool) -> Bmc {
    Bmc::new(
        target(kind, &format!("{}/{kind}", stub.url), None, None),
        pool,
    )
    .unwrap()
}

/// Held by the tests that measure the process's peak memory or raise it
/// far (VmHWM is the whole process's): one at a time.
static MEMORY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Lowers VmHWM to what is resident now (Linux 4.0 and later), so a peak
/// another test made is not counted; where refused, it stays.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident memory (VmHWM), in MiB.
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anything_but_a_service_root_is_refused_with_what_came_back() {
    let stub = start_stub().await;
    let pool = HttpPool::new(8);
    for (kind, says) in [
        (
            "html",
            r#"not JSON (expected value at line 1 column 1); Content-Type text/html; charset=utf-8, 74 bytes: "<!DOCTYPE html>\n<html><head><title>Web Console Login</title></he…""#,
        ),
        (
            "null",
            r#"JSON null, not an object; Content-Type application/json, 4 bytes: "null""#,
        ),
        (
            "invalid",
            r#"not JSON (EOF while parsing a value at line 1 column 39); Content-Type application/json, 39 bytes: "{\"RedfishVersion\": \"1.6.0\", \"Systems\": ""#,
        ),
        (
            "array",
            r#"JSON array, not an object; Content-Type application/json, 30 bytes"#,
        ),
        (
            "number",
            "JSON number, not an object; Content-Type application/json, 2 bytes: \"42\"",
        ),
        (
            "empty",
            "no document; Content-Type application/json, empty body",
        ),
        ("object", "a JSON object without RedfishVersion"),
        ("twice", "not JSON (an object names the key"),
        ("values", "not JSON (more values than this reader takes"),
        (
            "control",
            r#"Content-Type text/plain; charset=\xc3\xa9, 24 bytes: "\x1b[31mred\x1b[0m\nforged line""#,
        ),
    ] {
        let b = bmc(&stub, kind, &pool);
        let err = b.root().await.unwrap_err();
        let text = err.to_string();
        let url = format!("{}/{kind}/redfish/v1", stub.url);
        match &err {
            RedfishError::NotRedfish {
                bmc,
                url: u,
                expected: "service root",
                ..
            } => {
                assert_eq!(bmc, kind);
                assert_eq!(u, &url);
            }
            other => panic!("{kind}: {other:?}"),
        }
        assert_eq!(err.kind(), "not_redfish");
        assert!(
            text.starts_with(&format!(
                "BMC {kind}: GET {url}: not a Redfish service root: "
            )),
            "{kind}: {text}"
        );
        assert!(text.contains(says), "{kind}: {text}\nlacks {says}");
        assert!(
            !text.chars().any(|c| c.is_control()),
            "{kind}: control characters reach the message: {text:?}"
        );
        // The probe fails the same way (accordctl exits 1 with it).
        let err = probe(&b).await.unwrap_err();
        assert_eq!(err.kind(), "not_redfish", "{kind}: {err}");
    }
    // The same stub's good root, for contrast.
    let good = bmc(&stub, "good", &pool);
    good.root().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_answer_is_refused_after_the_limit_without_reading_the_rest() {
    let _alone = MEMORY.lock().await;
    reset_peak_rss();
    let stub = start_stub().await;
    let pool = HttpPool::new(8);
    let b = bmc(&stub, "big", &pool);
    b.root().await.unwrap();
    let start = Instant::now();
    let err = b.get("/redfish/v1/Systems").await.unwrap_err();
    let took = start.elapsed();
    let url = format!("{}/big/redfish/v1/Systems", stub.url);
    match &err {
        RedfishError::TooLarge {
            bmc,
            method: "GET",
            url: u,
            limit,
            declared: None,
        } => {
            assert_eq!(bmc, "big");
            assert_eq!(u, &url);
            assert_eq!(*limit, MAX_RESPONSE_BYTES);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "BMC big: GET {url}: answer larger than the 16777216-byte limit \
             (limits.max_response_bytes)"
        )
    );
    assert!(!err.is_transient(), "never retried");
    stub.streamed.wait_dropped().await;
    let sent = stub.streamed.bytes.load(Ordering::SeqCst);
    let peak = peak_rss_mib();
    eprintln!(
        "100 MB answer refused after {took:?}; the stub produced {:.1} MiB of it; \
         peak RSS of this test process {peak} MiB",
        sent as f64 / (1 << 20) as f64
    );
    assert!(
        sent < 3 * MAX_RESPONSE_BYTES as u64,
        "{sent} bytes produced: the answer was read on past the limit"
    );
    // 16 MiB at most per answer; the three tests of this file may run at once.
    assert!(
        peak < 80,
        "peak RSS {peak} MiB: the answer was held in memory"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_path_is_bounded() {
    let stub = start_stub().await;
    let pool = HttpPool::new(8);

    // A Content-Length over the limit: refused before any of it is read.
    let b = bmc(&stub, "declared", &pool);
    b.root().await.unwrap();
    let err = b.get("/redfish/v1/Systems").await.unwrap_err();
    assert!(
        matches!(
            err,
            RedfishError::TooLarge {
                declared: Some(HUGE),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("(Content-Length 100000000)"),
        "{err}"
    );

    // The service root itself.
    let err = bmc(&stub, "bigroot", &pool).root().await.unwrap_err();
    assert!(
        matches!(&err, RedfishError::TooLarge { url, .. } if url.ends_with("/bigroot/redfish/v1")),
        "{err:?}"
    );

    // A task monitor, with a lower configured limit.
    let mut t = target("task", &format!("{}/task", stub.url), None, None);
    t.settings.max_response_bytes = 64 << 10;
    let b = Bmc::new(t, &pool).unwrap();
    let err = b
        .change(
            Method::POST,
            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
            &serde_json::json!({"ResetType": "On"}),
            None,
        )
        .await
        .unwrap_err();
    match &err {
        RedfishError::TooLarge { url, limit, .. } => {
            assert!(url.ends_with("/task/redfish/v1/TaskMonitors/1"), "{url}");
            assert_eq!(*limit, 64 << 10);
        }
        other => panic!("{other:?}"),
    }

    // Session creation: the answer to the credentials is bounded too, and
    // its refusal is an error, not a fall-back to basic auth.
    let b = Bmc::new(
        target(
            "session",
            &format!("{}/session", stub.url),
            None,
            Some(("admin", "pw")),
        ),
        &pool,
    )
    .unwrap();
    let err = b.get("/redfish/v1/Systems").await.unwrap_err();
    assert!(
        matches!(&err, RedfishError::TooLarge { method: "POST", url, .. }
            if url.ends_with("/session/redfish/v1/SessionService/Sessions")),
        "{err:?}"
    );
}

/// A BMC whose session login answers 307 to another host: the user name
/// and password (in the POST body) and Basic auth are never sent there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_follow_a_redirect_to_another_host() {
    let stolen = Arc::new(AtomicU64::new(0));
    let s = stolen.clone();
    let thief = axum::Router::new().fallback(move || {
        let s = s.clone();
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            answer("application/json", ROOT)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let thief_url = format!("http://{}", listener.local_addr().unwrap());
    let thief_task = tokio::spawn(async move {
        let _ = axum::serve(listener, thief).await;
    });
    let elsewhere = thief_url.clone();
    let bmc_app = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let elsewhere = elsewhere.clone();
        async move {
            match (&method, uri.path()) {
                (&Method::GET, "/redfish/v1") => answer("application/json", ROOT),
                _ => (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, format!("{elsewhere}{}", uri.path()))],
                )
                    .into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bmc_url = format!("http://{}", listener.local_addr().unwrap());
    let bmc_task = tokio::spawn(async move {
        let _ = axum::serve(listener, bmc_app).await;
    });
    let pool = HttpPool::new(8);
    let b = Bmc::new(
        target("redirecting", &bmc_url, None, Some(("admin", "pw"))),
        &pool,
    )
    .unwrap();
    let err = b.get("/redfish/v1/Systems").await.unwrap_err();
    assert!(err.to_string().contains("307"), "{err}");
    assert_eq!(
        stolen.load(Ordering::SeqCst),
        0,
        "a request (with the BMC's credentials) reached the other host"
    );
    thief_task.abort();
    bmc_task.abort();
}

/// Waits at most 10 s: a client walking 100,000 members takes far longer.
async fn quickly<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: still walking after 10 s"))
}

/// A Systems collection of 100,000 members is refused as soon as it is
/// read: no member is read, and the error names the BMC, the collection
/// and the count, and says what to do. A Chassis collection of 100,000
/// is refused the same way; 100,000 `Links.Chassis` of a system are read
/// 64 at most; a list of systems in an error shows a few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_of_100000_members_are_refused_unwalked() {
    use accord_redfish::model::MAX_MEMBERS;
    // Parsed, 100,000 members take some 70 MB (the answer is within the
    // size limit): not while another test measures the peak.
    let _alone = MEMORY.lock().await;
    let stub = start_stub().await;
    let pool = HttpPool::new(8);
    let b = bmc(&stub, "many", &pool);
    let url = format!("{}/many/redfish/v1/Systems", stub.url);
    let start = Instant::now();
    let err = quickly("system_path", b.system_path()).await.unwrap_err();
    match &err {
        RedfishError::TooManyMembers {
            bmc,
            url: u,
            count: MANY,
            limit: MAX_MEMBERS,
            ..
        } => {
            assert_eq!(bmc, "many");
            assert_eq!(u, &url);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "BMC many: GET {url}: 100000 members, more than the 64 Accord reads; \
             set `system` in the inventory to the Id or path of the system to manage"
        )
    );
    assert_eq!(err.kind(), "too_many_members");
    assert!(!err.is_transient());
    // The service root and the collection, nothing else.
    assert_eq!(stub.requests.load(Ordering::SeqCst), 2);
    // The probe refuses it the same way, reading no member either.
    let err = quickly("probe", probe(&b)).await.unwrap_err();
    assert_eq!(err.kind(), "too_many_members", "{err}");
    assert_eq!(stub.requests.load(Ordering::SeqCst), 3);
    eprintln!(
        "100,000 systems refused after {:?}; peak RSS {} MiB",
        start.elapsed(),
        peak_rss_mib()
    );
    // With `system` set, the collection is not even read.
    let named = Bmc::new(
        target("many", &format!("{}/many", stub.url), Some("7"), None),
        &pool,
    )
    .unwrap();
    assert_eq!(named.system_path().await.unwrap(), "/redfish/v1/Systems/7");
    assert_eq!(stub.requests.load(Ordering::SeqCst), 4);

    // Ten systems, none with a Reset action: each read, a few named.
    let err = quickly("ten", bmc(&stub, "ten", &pool).system_path())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "BMC ten: system /redfish/v1/Systems: 10 systems (/redfish/v1/Systems/0, \
             /redfish/v1/Systems/1, /redfish/v1/Systems/2, /redfish/v1/Systems/3 and 6 more), \
             0 with a Reset action; set `system` in the inventory to choose one"
        )
    );

    // Chassis power: a Chassis collection of 100,000 is refused.
    let before = stub.requests.load(Ordering::SeqCst);
    let b = bmc(&stub, "manychassis", &pool);
    let err = quickly("chassis", b.power_watts()).await.unwrap_err();
    match &err {
        RedfishError::TooManyMembers {
            url, count: MANY, ..
        } => {
            assert_eq!(url, &format!("{}/manychassis/redfish/v1/Chassis", stub.url));
        }
        other => panic!("{other:?}"),
    }
    // Root, Systems, the system, Chassis.
    assert_eq!(stub.requests.load(Ordering::SeqCst) - before, 4);

    // 100,000 Links.Chassis: the first 64 are tried (each 404), no more.
    let before = stub.requests.load(Ordering::SeqCst);
    let b = bmc(&stub, "manylinks", &pool);
    assert_eq!(quickly("links", b.power_watts()).await.unwrap(), None);
    let made = stub.requests.load(Ordering::SeqCst) - before;
    assert_eq!(made, 3 + MAX_MEMBERS as u64, "{made} requests");
}
