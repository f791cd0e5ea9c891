//! The Lease elector (`accordd::ha::lease`) against the in-repo fake API
//! server, in real time with short durations. Every wait has a condition,
//! a deadline, and says what it waited for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_testkit::fake_api::{default_resources, FakeApi, ResourceSpec};
use accordd::config::HaConfig;
use accordd::ha::lease::Elector;
use accordd::ha::{Fence, Leadership, NotLeading, Term};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

const NS: &str = "accord-system";
const NAME: &str = "accordd";
const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/accord-system/leases";

async fn fake() -> FakeApi {
    let mut resources = default_resources();
    if !resources.iter().any(|r| r.plural == "leases") {
        resources.push(ResourceSpec {
            prefix: "/apis/coordination.k8s.io/v1",
            plural: "leases",
            kind: "Lease",
            namespaced: true,
        });
    }
    FakeApi::start_with(resources, Duration::from_millis(500)).await
}

/// `identity`'s configuration: lease, renew deadline, retry period (s).
fn config(identity: &str, (lease, renew, retry): (u64, u64, u64)) -> HaConfig {
    HaConfig {
        enabled: true,
        identity: Some(identity.to_owned()),
        namespace: NS.to_owned(),
        lease_name: NAME.to_owned(),
        lease_duration_s: lease,
        renew_deadline_s: renew,
        retry_period_s: retry,
    }
}

const SHORT: (u64, u64, u64) = (3, 2, 1);

fn start(
    client: kube::Client,
    identity: &str,
    timing: (u64, u64, u64),
) -> (Leadership, tokio::task::JoinHandle<()>) {
    Elector::new(client, &config(identity, timing)).spawn(std::future::pending())
}

/// Polls `check` every 20 ms until it gives a value; panics naming `what`
/// after `within`.
async fn wait_for<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn leading(l: &Leadership) -> Option<(Fence, Instant)> {
    match l.term() {
        Some(Term::Leader { fence, valid_until }) => Some((fence, valid_until)),
        _ => None,
    }
}

fn lease(fake: &FakeApi) -> Option<Lease> {
    let v = fake.get("coordination.k8s.io/v1", "Lease", NS, NAME)?;
    Some(serde_json::from_value(v).expect("a Lease"))
}

fn holder(fake: &FakeApi) -> Option<String> {
    lease(fake)?.spec?.holder_identity
}

/// Microseconds since the epoch of a Lease time.
fn micros(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>) -> i64 {
    t.as_ref().expect("a time").0.as_microsecond()
}

/// Writes (create, replace, patch, delete) to the Lease the fake received.
fn lease_writes(fake: &FakeApi) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            let (method, path) = r.split_once(' ').unwrap_or(("", ""));
            matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") && path.starts_with(LEASE_PATH)
        })
        .count()
}

#[tokio::test]
async fn takes_a_missing_lease_and_keeps_renewing() {
    let fake = fake().await;
    let (a, _task) = start(fake.client(), "a", SHORT);
    let (fence, first_valid) = wait_for("a to lead", Duration::from_secs(10), || leading(&a)).await;
    assert_eq!(
        fence,
        Fence {
            holder: "a".into(),
            transitions: 0
        }
    );
    assert_eq!(a.may_act(), Ok(Some(fence.clone())));
    let spec = lease(&fake).unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(
        (spec.lease_transitions, spec.lease_duration_seconds),
        (Some(0), Some(3))
    );
    let mut renewed = micros(&spec.renew_time);
    for n in 1..=2 {
        renewed = wait_for(
            &format!("renewal {n} of a's lease"),
            Duration::from_secs(10),
            || {
                let t = micros(&lease(&fake)?.spec?.renew_time);
                (t > renewed).then_some(t)
            },
        )
        .await;
    }
    let (again, valid) = wait_for("a to lead after renewing", Duration::from_secs(5), || {
        leading(&a)
    })
    .await;
    assert_eq!(again, fence, "renewals keep the term");
    assert!(valid > first_valid, "a renewal extends the term");
    assert_eq!(
        lease(&fake).unwrap().spec.unwrap().lease_transitions,
        Some(0)
    );
}

#[tokio::test]
async fn the_other_takes_over_a_lease_no_longer_renewed() {
    let fake = fake().await;
    let (a, task_a) = start(fake.client(), "a", SHORT);
    let (b, task_b) = start(fake.client(), "b", SHORT);
    let one = |a: &Leadership, b: &Leadership| match (leading(a), leading(b)) {
        (Some(_), Some(_)) => panic!("a and b lead at once"),
        (Some((f, _)), None) | (None, Some((f, _))) => Some(f),
        (None, None) => None,
    };
    let fence = wait_for("a or b to lead", Duration::from_secs(10), || one(&a, &b)).await;
    // Exactly one leads, and the other follows it, for a few periods.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(2500) {
        assert_eq!(
            one(&a, &b).as_ref(),
            Some(&fence),
            "the leader stays the only one"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (leader_task, other, other_id) = if fence.holder == "a" {
        (task_a, &b, "b")
    } else {
        (task_b, &a, "a")
    };
    wait_for(
        "the other to follow the leader",
        Duration::from_secs(5),
        || {
            (other.term()
                == Some(Term::Follower {
                    leader: Some(fence.holder.clone()),
                }))
            .then_some(())
        },
    )
    .await;
    // The leader stops renewing (no release).
    leader_task.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let last = lease(&fake).unwrap().spec.unwrap();
    let (next, _) = wait_for(
        "the other to take the lease over",
        Duration::from_secs(20),
        || leading(other),
    )
    .await;
    assert_eq!(
        next,
        Fence {
            holder: other_id.into(),
            transitions: fence.transitions + 1
        }
    );
    let taken = lease(&fake).unwrap().spec.unwrap();
    assert_eq!(taken.holder_identity.as_deref(), Some(other_id));
    assert_eq!(taken.lease_transitions, Some(fence.transitions + 1));
    // Taken only after the old renewal went unchanged for a lease duration.
    let waited = micros(&taken.acquire_time) - micros(&last.renew_time);
    assert!(
        waited >= 3_000_000,
        "taken {waited} µs after the last renewal, before the lease duration"
    );
}

#[tokio::test]
async fn graceful_shutdown_releases_so_the_other_takes_over_fast() {
    let fake = fake().await;
    // A long lease: without a release, b would wait 10 s.
    let timing = (10, 5, 1);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (a, task_a) = Elector::new(fake.client(), &config("a", timing)).spawn(async move {
        let _ = stopped.await;
    });
    wait_for("a to lead", Duration::from_secs(10), || leading(&a)).await;
    let (b, _task_b) = start(fake.client(), "b", timing);
    wait_for("b to follow a", Duration::from_secs(10), || {
        (b.term()
            == Some(Term::Follower {
                leader: Some("a".into()),
            }))
        .then_some(())
    })
    .await;
    let stopping = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(6), task_a)
        .await
        .expect("a's elector ends within its release bound")
        .expect("a's elector ends cleanly");
    assert_eq!(a.term(), Some(Term::Follower { leader: None }));
    assert!(a.may_act().is_err());
    let (fence, _) = wait_for(
        "b to take the released lease",
        Duration::from_secs(15),
        || leading(&b),
    )
    .await;
    let after = stopping.elapsed();
    assert_eq!(
        fence,
        Fence {
            holder: "b".into(),
            transitions: 1
        }
    );
    assert!(
        after < Duration::from_secs(5),
        "b took {after:?}: the lease was not released (lease 10 s)"
    );
    assert_eq!(holder(&fake).as_deref(), Some("b"));
}

/// A TCP relay to `upstream` that keeps what clients sent, so one
/// replica's requests can be told from another's.
async fn relay(upstream: String) -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let log = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                continue;
            };
            let (mut server_read, mut server_write) = server.into_split();
            let n = {
                let mut all = log.lock().unwrap();
                all.push(Vec::new());
                all.len() - 1
            };
            let log = log.clone();
            tokio::spawn(async move {
                let (mut client_read, mut client_write) = client.split();
                let up = async {
                    let mut buf = vec![0u8; 16384];
                    while let Ok(k @ 1..) = client_read.read(&mut buf).await {
                        log.lock().unwrap()[n].extend_from_slice(&buf[..k]);
                        if server_write.write_all(&buf[..k]).await.is_err() {
                            break;
                        }
                    }
                };
                let down = tokio::io::copy(&mut server_read, &mut client_write);
                tokio::select! { _ = up => {}, _ = down => {} }
            });
        }
    });
    (url, sent)
}

/// Requests `method` made to the Lease through the relay.
fn relayed(sent: &Mutex<Vec<Vec<u8>>>, method: &str) -> usize {
    let needle = format!("{method} {LEASE_PATH}");
    let sent = sent.lock().unwrap();
    sent.iter()
        .map(|c| String::from_utf8_lossy(c).matches(&needle).count())
        .sum()
}

#[tokio::test]
async fn a_resumed_leader_follows_without_writing() {
    let fake = fake().await;
    let timing = (6, 4, 1);
    let (a, task_a) = start(fake.client(), "a", timing);
    wait_for("a to lead", Duration::from_secs(10), || leading(&a)).await;
    // a is paused: its elector never runs again. b takes the lease.
    task_a.abort();
    let (b, _task_b) = start(fake.client(), "b", timing);
    let (fence_b, _) = wait_for("b to take a's lease", Duration::from_secs(20), || {
        leading(&b)
    })
    .await;
    assert_eq!(
        fence_b,
        Fence {
            holder: "b".into(),
            transitions: 1
        }
    );
    // a resumes (a new elector as "a"), its requests through a relay.
    let (url, sent) = relay(fake.url.trim_start_matches("http://").to_owned()).await;
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let writes_before = lease_writes(&fake);
    let (a2, _task_a2) = start(client, "a", timing);
    wait_for("resumed a to follow b", Duration::from_secs(10), || {
        (a2.term()
            == Some(Term::Follower {
                leader: Some("b".into()),
            }))
        .then_some(())
    })
    .await;
    // Several more rounds: a keeps following and never writes.
    let reads = relayed(&sent, "GET");
    wait_for(
        "resumed a to read the lease twice more",
        Duration::from_secs(10),
        || (relayed(&sent, "GET") >= reads + 2).then_some(()),
    )
    .await;
    assert_eq!(
        a2.term(),
        Some(Term::Follower {
            leader: Some("b".into())
        })
    );
    assert!(a2.may_act().is_err());
    for method in ["PUT", "POST", "PATCH", "DELETE"] {
        assert_eq!(
            relayed(&sent, method),
            0,
            "resumed a sent a {method} to the lease"
        );
    }
    // Every write the fake saw since is b's renewal.
    assert!(lease_writes(&fake) >= writes_before);
    let spec = lease(&fake).unwrap().spec.unwrap();
    assert_eq!(
        (spec.holder_identity.as_deref(), spec.lease_transitions),
        (Some("b"), Some(1))
    );
    assert!(leading(&b).is_some(), "b still leads");
}

#[tokio::test]
async fn a_frozen_leader_may_not_act_past_its_renew_deadline() {
    let fake = fake().await;
    let (a, task_a) = start(fake.client(), "a", SHORT);
    let (_, first) = wait_for("a to lead", Duration::from_secs(10), || leading(&a)).await;
    // Freeze it just after a renewal.
    let (fence, valid_until) = wait_for("a to renew", Duration::from_secs(10), || {
        leading(&a).filter(|(_, v)| *v > first)
    })
    .await;
    task_a.abort();
    assert!(
        valid_until <= Instant::now() + Duration::from_secs(2),
        "a term lasts at most the renew deadline"
    );
    let acted = a.may_act();
    if Instant::now() < valid_until {
        assert_eq!(acted, Ok(Some(fence.clone())));
    }
    tokio::time::sleep_until(valid_until).await;
    // The elector never ran again: its last word still says leader...
    assert!(matches!(a.term(), Some(Term::Leader { .. })));
    // ...but the gate checks the clock.
    assert_eq!(a.may_act(), Err(NotLeading { leader: None }));
}

#[tokio::test]
async fn odd_lease_contents_do_not_stop_the_election() {
    let fake = fake().await;
    // No holder, negative transitions and duration: free to take.
    fake.apply(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"holderIdentity": "", "leaseTransitions": -7, "leaseDurationSeconds": -5}
    }));
    let (a, _task) = start(fake.client(), "a", SHORT);
    let (fence, _) = wait_for("a to take an unheld lease", Duration::from_secs(10), || {
        leading(&a)
    })
    .await;
    assert_eq!(
        fence,
        Fence {
            holder: "a".into(),
            transitions: 1
        }
    );
    // Wiped (no spec): taken again, past the fence already used.
    fake.apply(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS}
    }));
    let (fence, _) = wait_for(
        "a to take a lease without a spec",
        Duration::from_secs(10),
        || leading(&a).filter(|(f, _)| f.transitions != 1),
    )
    .await;
    assert_eq!(
        fence,
        Fence {
            holder: "a".into(),
            transitions: 2
        }
    );
    assert_eq!(holder(&fake).as_deref(), Some("a"));
    // A stranger's with a negative duration: followed for a full lease
    // duration (ours), then taken.
    let seen = Instant::now();
    fake.apply(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"holderIdentity": "x", "leaseTransitions": 4, "leaseDurationSeconds": -5}
    }));
    wait_for("a to follow x", Duration::from_secs(10), || {
        (a.term()
            == Some(Term::Follower {
                leader: Some("x".into()),
            }))
        .then_some(())
    })
    .await;
    let (fence, _) = wait_for(
        "a to take x's expired lease",
        Duration::from_secs(15),
        || leading(&a),
    )
    .await;
    assert_eq!(
        fence,
        Fence {
            holder: "a".into(),
            transitions: 5
        }
    );
    assert!(
        seen.elapsed() >= Duration::from_secs(3),
        "taken before our lease duration"
    );
}

/// The lab once saw a killed leader, started again just after another
/// replica took the Lease, take it straight back. A replica that starts
/// and finds the Lease held waits a full lease duration, whatever the
/// Lease's history.
#[tokio::test]
async fn a_restarted_replica_does_not_take_a_lease_just_taken() {
    let fake = fake().await;
    let (b, b_task) = start(fake.client(), "b", SHORT);
    wait_for("b to lead", Duration::from_secs(10), || leading(&b)).await;
    let (a, _a_task) = start(fake.client(), "a", SHORT);
    b_task.abort();
    wait_for("a to take over", Duration::from_secs(15), || {
        leading(&a).filter(|(f, _)| f.transitions == 1)
    })
    .await;
    let (b2, _b2_task) = start(fake.client(), "b", SHORT);
    let watch_until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < watch_until {
        assert_eq!(holder(&fake).as_deref(), Some("a"), "the Lease stays a's");
        assert!(leading(&b2).is_none(), "b does not lead: {:?}", b2.term());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
