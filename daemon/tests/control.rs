//! Control-loop pieces: the batching window (with paused time) and rounds
//! that hold capacity for a gang while its nodes boot, in observe and act
//! modes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use accord::fleet::Fleet;
use accord::lifecycle::{Deadlines, Observation, Stage};
use accordd::control::{round, Batcher, Mode};
use accordd::execute::{Executor, SimulatedPower};
use accordd::store::Store;

#[tokio::test(start_paused = true)]
async fn bursts_become_one_round_within_the_window() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let b = Batcher::default();
    // Three changes 400 ms apart: one batch, 1 s after the last.
    let sender = tokio::spawn(async move {
        for i in 0..3 {
            tx.send(i).await.unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Then a steady stream every 500 ms: cut at 10 s.
        for i in 10..40 {
            tx.send(i).await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let start = tokio::time::Instant::now();
    let first = b.next(&mut rx).await.unwrap();
    assert_eq!(first, [0, 1, 2]);
    // The third came at 0.8 s; the window closed 1 s later.
    assert_eq!(start.elapsed(), Duration::from_millis(1800));
    let t = tokio::time::Instant::now();
    let second = b.next(&mut rx).await.unwrap();
    // The stream began 2.4 s later; it is cut 10 s after its first item.
    assert_eq!(t.elapsed(), Duration::from_millis(12_400));
    assert!((20..=21).contains(&second.len()), "{}", second.len());
    sender.abort();
}

#[tokio::test]
async fn a_booting_gang_holds_its_nodes_and_observe_sends_nothing() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/gang-rack-mixed");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let fleet = Fleet::from_toml(&read("fleet.toml"), "fleet.toml", &mut |_| {
        Err("none".into())
    })
    .unwrap();
    let demand = accord::demand::Demand::from_json(&read("demand.json"), "demand.json").unwrap();
    let names: Vec<&str> = fleet.nodes.iter().map(|n| n.name.as_str()).collect();
    let power = Arc::new(SimulatedPower::with_nodes(&names));
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let ex = Executor::new(store.journal().unwrap(), power.clone());
    let mut lives = BTreeMap::new();
    let now = 100_000;

    // Observe: the plan is made and explained; no BMC is touched.
    let r = round(&fleet, &mut lives, &demand, Mode::Observe, &ex, now)
        .await
        .unwrap();
    assert_eq!(
        r.plan
            .actions
            .iter()
            .filter(|a| matches!(a, accord::plan::Action::PowerOn { .. }))
            .count(),
        3
    );
    assert!(power.resets().is_empty() && r.executed.is_empty());

    // Act: three nodes powered on.
    let r = round(&fleet, &mut lives, &demand, Mode::Act, &ex, now)
        .await
        .unwrap();
    assert_eq!(r.executed.len(), 3);
    assert_eq!(power.resets().len(), 3);
    // Their BMCs show On; agents are not up yet: Booting.
    for (name, life) in lives.iter_mut() {
        life.observe(
            &Observation {
                bmc_on: Some(true),
                ..Default::default()
            },
            now + 30,
            &Deadlines::default(),
        );
        assert_eq!(life.stage, Stage::Booting, "{name}");
    }
    // The next round while they boot: nothing more is powered on for the
    // same pods.
    let r = round(&fleet, &mut lives, &demand, Mode::Act, &ex, now + 40)
        .await
        .unwrap();
    let more: Vec<_> = r
        .plan
        .actions
        .iter()
        .filter(|a| matches!(a, accord::plan::Action::PowerOn { .. }))
        .collect();
    assert!(more.is_empty(), "{more:?}");
    assert_eq!(power.resets().len(), 3);

    // One of them never boots: Failed after the deadline, and the next
    // round re-plans the gang without it (rack r1 no longer holds four
    // nodes, so it moves to the dark rack r2, all four together).
    let failed = lives.keys().next().unwrap().clone();
    lives.get_mut(&failed).unwrap().observe(
        &Observation {
            bmc_on: Some(true),
            ..Default::default()
        },
        now + 30 + 901,
        &Deadlines::default(),
    );
    assert_eq!(lives[&failed].stage, Stage::Failed);
    let r = round(&fleet, &mut lives, &demand, Mode::Act, &ex, now + 1000)
        .await
        .unwrap();
    let replacement: Vec<&str> = r
        .plan
        .actions
        .iter()
        .filter_map(|a| match a {
            accord::plan::Action::PowerOn { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert!(!replacement.is_empty(), "{:?}", r.plan.actions);
    assert!(!replacement.contains(&failed.as_str()));
    assert!(
        replacement.iter().all(|n| n.starts_with("r2-")),
        "{replacement:?}"
    );
}
