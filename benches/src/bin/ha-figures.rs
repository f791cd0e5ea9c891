//! `ha-figures`: what a takeover costs in the API server for a large
//! fleet. Against the in-repo fake API (in process, so the figures are
//! accordd's side: requests, encoding, the per-node compare-and-swap), a
//! first term fences N nodes' `AccordNode` objects (creating them), writes
//! an open power intent on every node, then a second term takes them all
//! over (one list, N fenced writes, 16 at a time). Prints each phase's
//! time and request count. The takeover's share of "within the lease plus
//! one round".
//!
//! `cargo run --release -p accord-benches --bin ha-figures [NODES]`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use accord_api::control::{Intent, IntentAction, IntentState};
use accord_testkit::fake_api::{default_resources, FakeApi};
use accordd::ha::shared_state::SharedState;
use accordd::ha::{Fence, Leadership, Term};
use tokio::sync::watch;

fn term(holder: &str, transitions: i32) -> (Leadership, watch::Sender<Term>) {
    let (tx, rx) = watch::channel(Term::Leader {
        fence: Fence {
            holder: holder.into(),
            transitions,
        },
        valid_until: tokio::time::Instant::now() + Duration::from_secs(3600),
    });
    (Leadership::elected(rx), tx)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("NODES: a number"))
        .unwrap_or(1000);
    let fake = FakeApi::start_with(default_resources(), Duration::from_secs(5)).await;
    let nodes: Vec<String> = (0..n).map(|i| format!("gpu-{i:04}")).collect();
    let (first, _t1) = term("accordd-a", 1);
    let a = SharedState::new(fake.client(), "accord-system", first);
    let t = Instant::now();
    a.take_over(&nodes, &BTreeMap::new())
        .await
        .expect("first term");
    let created = (t.elapsed(), fake.requests().len());
    let t = Instant::now();
    for (i, node) in nodes.iter().enumerate() {
        let intent = Intent {
            id: i as u64 + 1,
            node: node.clone(),
            action: IntentAction::PowerOn,
            created: 1,
            for_workloads: vec!["ml/train".into()],
            state: IntentState::Sent { at: 1 },
            bios_profile: None,
            fence: None,
            requested_by: None,
        };
        a.before_action(&intent).await.expect("intent written");
    }
    let intents = t.elapsed();
    let before = fake.requests().len();
    let (second, _t2) = term("accordd-b", 2);
    let b = SharedState::new(fake.client(), "accord-system", second);
    let t = Instant::now();
    let taken = b
        .take_over(&nodes, &BTreeMap::new())
        .await
        .expect("takeover");
    let takeover = (t.elapsed(), fake.requests().len() - before);
    assert_eq!(taken.values().map(|s| s.intents.len()).sum::<usize>(), n);
    println!("nodes: {n}");
    println!(
        "first term, objects created and fenced: {:.0} ms ({} requests)",
        created.0.as_secs_f64() * 1000.0,
        created.1
    );
    println!(
        "an intent written before its action: {:.2} ms each (sequential)",
        intents.as_secs_f64() * 1000.0 / n as f64
    );
    println!(
        "takeover by a second term (list, fence every node, read their intents): {:.0} ms ({} requests)",
        takeover.0.as_secs_f64() * 1000.0,
        takeover.1
    );
}
