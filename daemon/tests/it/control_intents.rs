//! Open intents retried once their BMC is readable (the twin): an intent
//! left open at start because its BMC could not be read is reconciled by
//! a later round's `retry_open` (verified or sent, then closed), never
//! while this process is carrying out an intent for the same node, and
//! the machine gets exactly one Reset in all.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord::plan::Action as PlanAction;
use accord_testkit::power::SimulatedPower;
use accordd::execute::{BiosSeen, Executor, PowerControl, PowerError};
use accordd::journal::{IntentAction as Action, IntentState};
use accordd::store::Store;
use tokio::sync::Semaphore;

/// The twin with BMCs that cannot be read for a while, and power-ons
/// that wait at a gate (an action in flight).
struct Bmcs {
    sim: SimulatedPower,
    unreadable: Mutex<BTreeSet<String>>,
    /// Nodes whose power-on waits for a permit of `gate`.
    gated: Mutex<BTreeSet<String>>,
    gate: Semaphore,
    /// Power-ons that reached the gate.
    at_gate: Mutex<u32>,
}

impl Bmcs {
    fn new(nodes: &[&str]) -> Bmcs {
        Bmcs {
            sim: SimulatedPower::with_nodes(nodes),
            unreadable: Mutex::default(),
            gated: Mutex::default(),
            gate: Semaphore::new(0),
            at_gate: Mutex::new(0),
        }
    }

    fn set_unreadable(&self, node: &str, unreadable: bool) {
        let mut u = self.unreadable.lock().unwrap();
        if unreadable {
            u.insert(node.to_owned());
        } else {
            u.remove(node);
        }
    }

    fn readable(&self, node: &str) -> Result<(), PowerError> {
        if self.unreadable.lock().unwrap().contains(node) {
            return Err(PowerError::Refused {
                node: node.to_owned(),
                reason: "BMC unreachable: connection refused".into(),
            });
        }
        Ok(())
    }
}

impl PowerControl for Bmcs {
    async fn is_on(&self, node: &str) -> Result<bool, PowerError> {
        self.readable(node)?;
        self.sim.is_on(node).await
    }
    async fn power_on(&self, node: &str) -> Result<(), PowerError> {
        self.readable(node)?;
        if self.gated.lock().unwrap().contains(node) {
            *self.at_gate.lock().unwrap() += 1;
            self.gate.acquire().await.expect("open").forget();
        }
        self.sim.power_on(node).await
    }
    async fn power_off(&self, node: &str, force: bool) -> Result<(), PowerError> {
        self.readable(node)?;
        self.sim.power_off(node, force).await
    }
    async fn verify(&self, node: &str, on: bool) -> Result<(), PowerError> {
        self.readable(node)?;
        self.sim.verify(node, on).await
    }
    async fn stage_bios(&self, node: &str, profile: &str) -> Result<(), PowerError> {
        self.sim.stage_bios(node, profile).await
    }
    async fn read_bios(&self, node: &str, profile: &str) -> Result<BiosSeen, PowerError> {
        self.sim.read_bios(node, profile).await
    }
}

fn readable(nodes: &[&str]) -> BTreeSet<String> {
    nodes.iter().map(|n| (*n).to_owned()).collect()
}

#[tokio::test]
async fn an_intent_whose_bmc_was_unreadable_at_start_is_closed_once_readable_with_one_reset() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let journal = store.journal().unwrap();
    let power = Arc::new(Bmcs::new(&["n1", "n2"]));
    // Before the crash: n1's Reset was sent (and lands); n2's power-on was
    // planned, never sent. Then both BMCs stop answering.
    let mut a = journal.record("n1", Action::PowerOn, vec![], 1).unwrap();
    journal.mark(&mut a, IntentState::Sent { at: 1 }).unwrap();
    power.sim.power_on("n1").await.unwrap();
    journal.record("n2", Action::PowerOn, vec![], 1).unwrap();
    power.set_unreadable("n1", true);
    power.set_unreadable("n2", true);

    // Start: neither can be read, both stay open, nothing is sent.
    let ex = Executor::new(store.journal().unwrap(), power.clone());
    assert!(ex.resume(5).await.unwrap().is_empty());
    assert_eq!(ex.journal().open_intents().unwrap().len(), 2);
    // A round with no reading of either touches neither.
    assert!(ex.retry_open(&readable(&[]), 6).await.unwrap().is_empty());
    assert_eq!(power.sim.resets(), ["n1 on"]);

    // n1's BMC answers again: its intent is verified (on already: closed),
    // not resent. n2's is still unreadable: left open.
    power.set_unreadable("n1", false);
    let done = ex.retry_open(&readable(&["n1"]), 10).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].node, "n1");
    assert!(done[0].result.is_ok());
    let open = ex.journal().open_intents().unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].node, "n2");
    // The poller may name a node whose BMC fails again on the read: it
    // stays open.
    assert!(ex
        .retry_open(&readable(&["n2"]), 11)
        .await
        .unwrap()
        .is_empty());

    // n2's answers: the planned power-on is sent, once, and closed.
    power.set_unreadable("n2", false);
    let done = ex.retry_open(&readable(&["n1", "n2"]), 20).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].node, "n2");
    assert!(done[0].result.is_ok());
    assert!(ex.journal().open_intents().unwrap().is_empty());
    // Later rounds find nothing open: exactly one Reset per machine.
    assert!(ex
        .retry_open(&readable(&["n1", "n2"]), 30)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(power.sim.resets(), ["n1 on", "n2 on"]);
    let all = ex.journal().all().unwrap();
    assert!(
        all.iter()
            .all(|i| matches!(i.state, IntentState::Done { .. })),
        "{all:?}"
    );
    assert_eq!(all[0].state, IntentState::Done { at: 10 });
}

#[tokio::test]
async fn an_intent_in_flight_in_this_process_is_not_reconciled_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let power = Arc::new(Bmcs::new(&["n1"]));
    power.gated.lock().unwrap().insert("n1".into());
    let ex = Arc::new(Executor::new(store.journal().unwrap(), power.clone()));
    // A round's power-on for n1, in flight: the Reset waits at the gate.
    let apply = {
        let ex = ex.clone();
        tokio::spawn(async move {
            ex.apply(
                &[PlanAction::PowerOn {
                    node: "n1".into(),
                    wave: 0,
                    for_workloads: vec!["ml/a".into()],
                }],
                1,
            )
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while *power.at_gate.lock().unwrap() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the power-on reaches the BMC within 10 s");
    // Its intent is open (sent) and n1's BMC is readable, but the
    // executor is working on it: the next rounds leave it alone.
    let open = ex.journal().open_intents().unwrap();
    assert_eq!(open.len(), 1);
    assert!(matches!(open[0].state, IntentState::Sent { .. }));
    assert!(ex.is_busy("n1"));
    for t in [2, 3] {
        let retried =
            tokio::time::timeout(Duration::from_secs(5), ex.retry_open(&readable(&["n1"]), t))
                .await
                .expect("a retry does not wait for the action in flight");
        assert!(retried.unwrap().is_empty());
    }
    power.gate.add_permits(1);
    let done = tokio::time::timeout(Duration::from_secs(10), apply)
        .await
        .expect("the power-on finishes within 10 s")
        .unwrap()
        .unwrap();
    assert!(done[0].result.is_ok());
    assert!(!ex.is_busy("n1"));
    assert!(ex.journal().open_intents().unwrap().is_empty());
    assert!(ex
        .retry_open(&readable(&["n1"]), 4)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(power.sim.resets(), ["n1 on"]);
}
