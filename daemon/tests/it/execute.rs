//! The executor: plans' power actions through the journal, idempotent and
//! resumable, against the in-memory BMC twin and against sushy-emulator.

use std::sync::Arc;

use accord::plan::Action as PlanAction;
use accord_testkit::power::SimulatedPower;
use accordd::execute::{Executor, Requested};
use accordd::journal::{IntentAction as Action, IntentState};
use accordd::store::Store;

fn on(node: &str, wave: u32) -> PlanAction {
    PlanAction::PowerOn {
        node: node.into(),
        wave,
        for_workloads: vec!["ml/train-a".into()],
    }
}

#[tokio::test]
async fn power_ons_are_journaled_and_never_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let power = Arc::new(SimulatedPower::with_nodes(&["n1", "n2", "n3"]));
    power.broken.lock().unwrap().push("n3".into());
    let ex = Executor::new(store.journal().unwrap(), power.clone());
    let done = ex
        .apply(&[on("n1", 0), on("n2", 1), on("n3", 1)], 100)
        .await
        .unwrap();
    assert_eq!(done.len(), 3);
    assert!(done[0].result.is_ok() && done[1].result.is_ok());
    assert!(done[2]
        .result
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("still Off"));
    // The same plan again (a second round before the pods bind): the
    // machines are on, nothing is sent again.
    ex.apply(&[on("n1", 0), on("n2", 1)], 110).await.unwrap();
    assert_eq!(power.resets(), ["n1 on", "n2 on", "n3 on"]);
    let all = store.journal().unwrap().all().unwrap();
    assert_eq!(all.len(), 5);
    assert!(
        matches!(&all[2].state, IntentState::Failed { reason, .. } if reason.contains("still Off"))
    );
    assert!(store.journal().unwrap().open_intents().unwrap().is_empty());
}

#[tokio::test]
async fn an_admins_actions_are_journaled_as_theirs_and_a_forced_off_as_forced() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let power = Arc::new(SimulatedPower::with_nodes(&["n1", "n2", "n3"]));
    let ex = Executor::new(store.journal().unwrap(), power.clone());
    ex.apply(&[on("n2", 0), on("n3", 0)], 1).await.unwrap();
    let off = |node: &str| PlanAction::PowerOff {
        node: node.into(),
        reason: "asked by an admin".into(),
    };
    let requested = std::collections::BTreeMap::from([
        ("n1".to_owned(), Requested { forced: false }),
        ("n2".to_owned(), Requested { forced: true }),
    ]);
    let done = ex
        .apply_requested(&[on("n1", 0), off("n2"), off("n3")], &requested, 2)
        .await
        .unwrap();
    assert!(done.iter().all(|d| d.result.is_ok()), "{done:?}");
    let all = store.journal().unwrap().all().unwrap();
    let of = |node: &str| all.iter().rev().find(|i| i.node == node).unwrap().clone();
    assert_eq!(of("n1").requested_by.as_deref(), Some("admin"));
    assert_eq!(of("n1").action, Action::PowerOn);
    assert_eq!(of("n1").for_workloads, ["ml/train-a"], "the plan's, kept");
    assert_eq!(of("n2").requested_by.as_deref(), Some("admin, forced"));
    assert_eq!(of("n2").action, Action::PowerOff { force: true });
    // The plan's own power-off: neither.
    assert_eq!(of("n3").requested_by, None);
    assert_eq!(of("n3").action, Action::PowerOff { force: false });
}

#[tokio::test]
async fn resume_verifies_sent_intents_and_sends_planned_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let journal = store.journal().unwrap();
    // Before a crash: n1's Reset was sent and has landed; n2's was sent
    // and not yet; n3's was planned but never sent.
    let mut a = journal.record("n1", Action::PowerOn, vec![], 1).unwrap();
    journal.mark(&mut a, IntentState::Sent { at: 1 }).unwrap();
    let mut b = journal.record("n2", Action::PowerOn, vec![], 1).unwrap();
    journal.mark(&mut b, IntentState::Sent { at: 1 }).unwrap();
    journal.record("n3", Action::PowerOn, vec![], 1).unwrap();
    let power = Arc::new(SimulatedPower::with_nodes(&["n1", "n2", "n3"]));
    power.state.lock().unwrap().insert("n1".into(), true);
    let ex = Executor::new(store.journal().unwrap(), power.clone());
    let resumed = ex.resume(5).await.unwrap();
    assert_eq!(resumed.len(), 3);
    assert!(resumed.iter().all(|r| r.result.is_ok()));
    // n1: nothing sent (already on). n2: verified (the twin lands the
    // pending change). n3: sent.
    assert_eq!(power.resets(), ["n2 on", "n3 on"]);
    assert!(store.journal().unwrap().open_intents().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_sushy_emulator_through_the_inventory() {
    use accord_testkit::sushy::{start_emulator, EmulatorOptions, FakeSystem};
    let emu = start_emulator(
        &[
            FakeSystem {
                id: "n1".into(),
                power_on: false,
            },
            FakeSystem {
                id: "n2".into(),
                power_on: false,
            },
        ],
        &EmulatorOptions::default(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("bmcs.toml");
    std::fs::write(
        &inv,
        format!(
            "[power]\npoll_interval_ms = 250\n[[bmc]]\nnodes = \"n[1-2]\"\nendpoint = \"{}\"\nsystem = \"{{node}}\"\n",
            emu.url()
        ),
    )
    .unwrap();
    let inventory = accord_redfish::Inventory::load(&inv).unwrap();
    let power = Arc::new(accordd::execute::RedfishPower::new(&inventory).unwrap());
    let store = Store::open(&dir.path().join("store")).unwrap();
    let ex = Executor::new(store.journal().unwrap(), power);
    let done = ex.apply(&[on("n1", 0), on("n2", 0)], 1).await.unwrap();
    assert!(done.iter().all(|d| d.result.is_ok()), "{done:?}");
    ex.apply(&[on("n1", 0)], 2).await.unwrap();
    assert_eq!(
        emu.count("POST /redfish/v1/Systems/n1/Actions"),
        1,
        "no second Reset"
    );
    assert_eq!(emu.count("POST /redfish/v1/Systems/n2/Actions"), 1);
}
