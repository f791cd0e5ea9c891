//! The shared state (`accordd::ha::shared_state`) against the in-repo fake
//! API server: a takeover fences every node's `AccordNode`, after which
//! the deposed term's intent writes are refused (so its actions are never
//! sent); intents are written before and removed after their action; the
//! leader's write-behind; conflicting writers; an object written by
//! something else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord::lifecycle::{NodeLife, Stage};
use accord_api::control::{Intent, IntentAction, IntentState};
use accord_testkit::fake_api::{default_resources, FakeApi};
use accordd::ha::shared_state::{NodeShared, SharedState, SharedStateError};
use accordd::ha::{Fence, Leadership, Term};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

const NS: &str = "accord-system";

async fn fake() -> FakeApi {
    let resources = default_resources();
    assert!(
        resources.iter().any(|r| r.plural == "accordnodes"),
        "the fake API serves the AccordNode CRD"
    );
    FakeApi::start_with(resources, Duration::from_millis(500)).await
}

fn fence(holder: &str, transitions: i32) -> Fence {
    Fence {
        holder: holder.into(),
        transitions,
    }
}

/// A leader in `f`'s term for an hour, and the sender to end it.
fn leading(f: Fence) -> (Leadership, watch::Sender<Term>) {
    let (tx, rx) = watch::channel(Term::Leader {
        fence: f,
        valid_until: Instant::now() + Duration::from_secs(3600),
    });
    (Leadership::elected(rx), tx)
}

fn intent(id: u64, node: &str, state: IntentState) -> Intent {
    Intent {
        id,
        node: node.into(),
        action: IntentAction::PowerOn,
        created: 100,
        for_workloads: vec!["ml/train".into()],
        state,
        bios_profile: None,
        fence: None,
        requested_by: None,
    }
}

fn spec(fake: &FakeApi, node: &str) -> NodeShared {
    let o = fake
        .get("accord.dev/v1alpha1", "AccordNode", NS, node)
        .unwrap_or_else(|| panic!("AccordNode {node} exists"));
    serde_json::from_value(o["spec"].clone()).expect("an AccordNode spec")
}

fn nodes() -> Vec<String> {
    vec!["n1".into(), "n2".into()]
}

#[tokio::test]
async fn a_takeover_fences_every_node_and_the_deposed_term_writes_nothing() {
    let fake = fake().await;
    let (old_gate, _old_tx) = leading(fence("a", 1));
    let old = SharedState::new(fake.client(), NS, old_gate);
    // Term 1: objects made from the local store, an intent sent.
    let mut local = BTreeMap::new();
    local.insert(
        "n1".to_owned(),
        NodeShared {
            lifecycle: Some(NodeLife {
                stage: Stage::PoweringOn,
                since: 90,
                reason: None,
                unwell_since: None,
            }),
            ..NodeShared::default()
        },
    );
    let taken = old.take_over(&nodes(), &local).await.unwrap();
    assert_eq!(
        taken["n1"].lifecycle.as_ref().unwrap().stage,
        Stage::PoweringOn
    );
    assert_eq!(spec(&fake, "n2").fence, Some(fence("a", 1)));
    let written = old
        .before_action(&intent(7, "n1", IntentState::Sent { at: 100 }))
        .await
        .unwrap();
    assert_eq!(written, Some(fence("a", 1)));
    let n1 = spec(&fake, "n1");
    assert_eq!(n1.intents.len(), 1);
    assert_eq!(
        n1.intents[0].fence,
        Some(fence("a", 1)),
        "the intent names its term"
    );
    assert_eq!(n1.intents[0].state, IntentState::Sent { at: 100 });

    // Term 2 takes over: it finds the open intent and the lifecycle.
    let (new_gate, _new_tx) = leading(fence("b", 2));
    let new = SharedState::new(fake.client(), NS, new_gate);
    let taken = new.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    assert_eq!(taken["n1"].intents.len(), 1, "{taken:?}");
    assert_eq!(taken["n1"].lifecycle.as_ref().unwrap().since, 90);
    assert_eq!(spec(&fake, "n1").fence, Some(fence("b", 2)));
    assert_eq!(spec(&fake, "n2").fence, Some(fence("b", 2)));

    // The deposed term (its clock says it still leads: a paused process)
    // cannot write its next intent: its action is never sent.
    let writes_before = fake.requests().len();
    let refused = old
        .before_action(&intent(8, "n2", IntentState::Sent { at: 130 }))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, SharedStateError::Deposed { by, .. } if *by == fence("b", 2)),
        "{refused}"
    );
    // Its cached resourceVersion was stale: one write refused (409), then a
    // read showed the newer term. Nothing it wrote landed.
    let after: Vec<String> = fake.requests()[writes_before..].to_vec();
    assert!(
        after.iter().filter(|r| r.starts_with("PUT")).count() <= 1,
        "{after:?}"
    );
    assert!(spec(&fake, "n2").intents.is_empty());
    assert_eq!(spec(&fake, "n2").fence, Some(fence("b", 2)));
}

#[tokio::test]
async fn intents_are_written_before_and_removed_after_their_action() {
    let fake = fake().await;
    let (gate, _tx) = leading(fence("a", 3));
    let shared = SharedState::new(fake.client(), NS, gate);
    shared.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    let mut i = intent(1, "n1", IntentState::Sent { at: 5 });
    shared.before_action(&i).await.unwrap();
    assert_eq!(spec(&fake, "n1").intents.len(), 1);
    i.state = IntentState::Done { at: 9 };
    shared.after_action(&i).await;
    assert!(spec(&fake, "n1").intents.is_empty());
    // Still open after it (a verify that timed out): kept, as it is now.
    let mut j = intent(2, "n2", IntentState::Planned);
    shared.before_action(&j).await.unwrap();
    j.state = IntentState::Sent { at: 6 };
    shared.after_action(&j).await;
    assert_eq!(
        spec(&fake, "n2").intents[0].state,
        IntentState::Sent { at: 6 }
    );
}

#[tokio::test]
async fn the_write_behind_writes_only_what_changed() {
    let fake = fake().await;
    let (gate, _tx) = leading(fence("a", 1));
    let shared = SharedState::new(fake.client(), NS, gate);
    shared.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    let mut parts: BTreeMap<String, NodeShared> = nodes()
        .into_iter()
        .map(|n| (n, NodeShared::default()))
        .collect();
    parts
        .get_mut("n1")
        .unwrap()
        .bookings
        .insert("ml/pr".into(), 500);
    let before = fake.requests().len();
    shared.mirror(&parts).await;
    let puts = |from: usize| {
        fake.requests()[from..]
            .iter()
            .filter(|r| r.starts_with("PUT"))
            .count()
    };
    assert_eq!(puts(before), 1, "only n1 changed");
    assert_eq!(spec(&fake, "n1").bookings["ml/pr"], 500);
    let again = fake.requests().len();
    shared.mirror(&parts).await;
    assert_eq!(puts(again), 0, "nothing changed since");
}

#[tokio::test]
async fn another_writer_in_the_same_term_between_read_and_write_is_retried() {
    let fake = fake().await;
    let (gate, _tx) = leading(fence("a", 1));
    let shared = SharedState::new(fake.client(), NS, gate);
    shared.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    // Someone (an admin's kubectl edit) changes n1 behind our cache.
    let mut o = fake
        .get("accord.dev/v1alpha1", "AccordNode", NS, "n1")
        .unwrap();
    o["metadata"]["labels"] = json!({"edited": "yes"});
    o["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    fake.apply(o);
    shared
        .before_action(&intent(4, "n1", IntentState::Planned))
        .await
        .unwrap();
    assert_eq!(
        spec(&fake, "n1").intents.len(),
        1,
        "written after a re-read"
    );
}

#[tokio::test]
async fn no_write_without_a_valid_term() {
    let fake = fake().await;
    let (gate, tx) = leading(fence("a", 1));
    let shared = Arc::new(SharedState::new(fake.client(), NS, gate));
    shared.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    // The term ran out (not renewed in time).
    tx.send(Term::Leader {
        fence: fence("a", 1),
        valid_until: Instant::now(),
    })
    .unwrap();
    let before = fake.requests().len();
    let e = shared
        .before_action(&intent(5, "n1", IntentState::Planned))
        .await
        .unwrap_err();
    assert!(matches!(e, SharedStateError::NotLeading(_)), "{e}");
    assert_eq!(fake.requests().len(), before, "not even a read");
    tx.send(Term::Follower {
        leader: Some("b".into()),
    })
    .unwrap();
    let e = shared
        .take_over(&nodes(), &BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(e, SharedStateError::NotLeading(_)), "{e}");
}

#[tokio::test]
async fn an_object_that_is_not_accords_is_replaced_at_a_takeover() {
    let fake = fake().await;
    fake.apply(json!({
        "apiVersion": "accord.dev/v1alpha1",
        "kind": "AccordNode",
        "metadata": {"name": "n1", "namespace": NS},
        "spec": {"intents": "not a list", "fence": 12}
    }));
    let (gate, _tx) = leading(fence("a", 1));
    let shared = SharedState::new(fake.client(), NS, gate);
    let taken = shared.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    assert_eq!(taken["n1"], NodeShared::default());
    assert_eq!(spec(&fake, "n1").fence, Some(fence("a", 1)));
}

#[tokio::test]
async fn a_takeover_deletes_the_objects_of_nodes_gone_from_the_fleet() {
    let fake = fake().await;
    let (gate, _tx) = leading(fence("a", 1));
    let shared = SharedState::new(fake.client(), NS, gate);
    let three = vec!["n1".to_owned(), "n2".to_owned(), "n3".to_owned()];
    shared.take_over(&three, &BTreeMap::new()).await.unwrap();
    let (gate, _tx) = leading(fence("b", 2));
    let shared = SharedState::new(fake.client(), NS, gate);
    shared.take_over(&nodes(), &BTreeMap::new()).await.unwrap();
    let names: Vec<String> = fake
        .list("accord.dev/v1alpha1", "AccordNode")
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, nodes());
}
