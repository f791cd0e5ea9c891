//! The executor with replicas (the twin's BMCs, the fake API): each
//! power intent reaches the API server, as sent and under the leader's
//! term, before its Reset; once another replica has taken over, the
//! deposed leader's power-on is refused before anything reaches the BMC.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord::plan::Action as PlanAction;
use accord_testkit::fake_api::{default_resources, FakeApi};
use accord_testkit::power::SimulatedPower;
use accordd::execute::{Executor, PowerError};
use accordd::ha::shared_state::{NodeShared, SharedState};
use accordd::ha::{Fence, Leadership, Term};
use accordd::store::Store;
use tokio::sync::watch;
use tokio::time::Instant;

const NS: &str = "accord-system";

fn term(holder: &str, transitions: i32) -> (Leadership, watch::Sender<Term>) {
    let (tx, rx) = watch::channel(Term::Leader {
        fence: Fence {
            holder: holder.into(),
            transitions,
        },
        valid_until: Instant::now() + Duration::from_secs(3600),
    });
    (Leadership::elected(rx), tx)
}

fn power_on(node: &str) -> PlanAction {
    PlanAction::PowerOn {
        node: node.into(),
        wave: 0,
        for_workloads: vec!["ml/train".into()],
    }
}

fn spec(fake: &FakeApi, node: &str) -> NodeShared {
    let o = fake
        .get("accord.dev/v1alpha1", "AccordNode", NS, node)
        .unwrap();
    serde_json::from_value(o["spec"].clone()).unwrap()
}

#[tokio::test]
async fn a_deposed_leader_sends_no_reset_and_the_new_one_sends_one() {
    let fake = FakeApi::start_with(default_resources(), Duration::from_millis(500)).await;
    let nodes = vec!["n1".to_owned(), "n2".to_owned()];
    let power = Arc::new(SimulatedPower::with_nodes(&["n1", "n2"]));

    // Replica a leads in term 1 and powers n1 on.
    let dir_a = tempfile::tempdir().unwrap();
    let store_a = Store::open(dir_a.path()).unwrap();
    let (gate_a, _tx_a) = term("a", 1);
    let shared_a = Arc::new(SharedState::new(fake.client(), NS, gate_a));
    shared_a.take_over(&nodes, &BTreeMap::new()).await.unwrap();
    let ex_a = Executor::new(store_a.journal().unwrap(), power.clone())
        .with_shared_state(shared_a.clone());
    let done = ex_a.apply(&[power_on("n1")], 10).await.unwrap();
    assert!(done[0].result.is_ok(), "{:?}", done[0].result);
    assert_eq!(power.resets(), vec!["n1 on".to_owned()]);
    // Reached: closed, and gone from the shared state.
    assert!(spec(&fake, "n1").intents.is_empty());

    // Replica b takes over in term 2 (a was paused: its clock still says
    // it leads).
    let dir_b = tempfile::tempdir().unwrap();
    let store_b = Store::open(dir_b.path()).unwrap();
    let (gate_b, _tx_b) = term("b", 2);
    let shared_b = Arc::new(SharedState::new(fake.client(), NS, gate_b));
    shared_b.take_over(&nodes, &BTreeMap::new()).await.unwrap();

    // a's power-on of n2 is refused at its intent's write: no Reset.
    let done = ex_a.apply(&[power_on("n2")], 20).await.unwrap();
    match done[0]
        .result
        .as_ref()
        .map_err(|e| e.downcast_ref::<PowerError>())
    {
        Err(Some(PowerError::NotSent { node, .. })) => assert_eq!(node, "n2"),
        other => panic!("a deposed leader's power-on: {other:?}"),
    }
    assert_eq!(
        power.resets(),
        vec!["n1 on".to_owned()],
        "nothing reached n2's BMC"
    );
    // Its intent stays open in a's journal (the next takeover closes it),
    // and never reached the shared state.
    assert_eq!(store_a.journal().unwrap().open_intents().unwrap().len(), 1);
    assert!(spec(&fake, "n2").intents.is_empty());

    // b powers n2 on: one Reset, its intent written under term 2 first.
    let ex_b = Executor::new(store_b.journal().unwrap(), power.clone()).with_shared_state(shared_b);
    let done = ex_b.apply(&[power_on("n2")], 30).await.unwrap();
    assert!(done[0].result.is_ok(), "{:?}", done[0].result);
    assert_eq!(power.resets(), vec!["n1 on".to_owned(), "n2 on".to_owned()]);
    let puts: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("PUT") && r.contains("/accordnodes/n2"))
        .collect();
    assert!(
        puts.len() >= 2,
        "written before and after the Reset: {puts:?}"
    );
    assert_eq!(
        spec(&fake, "n2").fence,
        Some(Fence {
            holder: "b".into(),
            transitions: 2
        })
    );
}
