//! The twin across an accordd restart: the lifecycles and bookings the
//! loop hands to its store are what a new decider starts from, so a
//! booked node stays on and a node powering on keeps its deadline.

use std::collections::BTreeMap;

use accord::demand::ObjectRef;
use accord::lifecycle::{Deadlines, NodeLife, Stage};
use accordd::control::decide::{Decider, Decision, Snapshot};
use accordd::control::provisioning::{ConditionSeen, ProvisioningClass, ProvisioningSeen};
use accordd::store::{Booking, Store};

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"

[policy]
idle_power_off_after_s = 60

[[racks]]
name = "r1"

[[nodes]]
name = "n1"
rack = "r1"
profile = "h100"

[[nodes]]
name = "n2"
rack = "r1"
profile = "h100"
"#;

use crate::support;
use support::twin::{decide_at, power_offs, T0};

fn decider() -> Decider {
    support::twin::decider(FLEET, Deadlines::default())
}

fn round(d: &mut Decider, world: &Snapshot, now: u64) -> Decision {
    decide_at(d, world, now)
}

#[test]
fn a_booked_node_stays_on_and_a_node_powering_on_keeps_its_deadline_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // Before the restart: n1 idle for long (past the idle timeout) but
    // booked for a Provisioned request; n2 powering on since T0 - 100
    // (the default deadline is 120 s).
    let mut world = Snapshot::default();
    world.bmc.insert("n1".into(), true);
    world.bmc.insert("n2".into(), false);
    world.kube_ready.insert("n1".into(), true);
    world.agents.insert("n1".into(), T0);
    world.agent_reports.insert("n1".into(), T0);
    let lives = BTreeMap::from([
        ("n1".to_owned(), NodeLife::new(Stage::Idle, T0 - 1000)),
        ("n2".to_owned(), NodeLife::new(Stage::PoweringOn, T0 - 100)),
    ]);
    store
        .put_lives(&lives.clone().into_iter().collect::<Vec<_>>())
        .unwrap();
    let bookings = BTreeMap::from([(
        "team/pr".to_owned(),
        Booking {
            nodes: ["n1".to_owned()].into(),
            until: T0 + 500,
        },
    )]);
    store.put_bookings(&bookings).unwrap();

    // Without what was kept, n1 is powered off once idle for the timeout,
    // though still booked...
    let mut fresh = decider();
    for t in [T0, T0 + 1, T0 + 30] {
        round(&mut fresh, &world, t);
    }
    let d = round(&mut fresh, &world, T0 + 92);
    assert_eq!(power_offs(&d), ["n1"], "{:?}", d.power);

    // ...with it, n1 stays on while booked, and n2 fails at its old
    // deadline, not 120 s after the restart.
    let mut resumed = decider();
    let (lives, _) = store.lives().unwrap();
    let (bookings, _) = store.bookings().unwrap();
    resumed.seed_state(lives, bookings);
    // The booking's request is still there: Provisioned (just now, as far
    // as its condition says), its pods not created yet.
    world.provisioning = vec![ProvisioningSeen {
        request: ObjectRef::new(
            "autoscaling.x-k8s.io/v1",
            "ProvisioningRequest",
            "team",
            "pr",
        ),
        class: ProvisioningClass::BestEffortAtomic,
        no_retry: false,
        conditions: vec![ConditionSeen {
            type_: "Provisioned".into(),
            status: true,
            reason: None,
            message: None,
            last_transition: None,
        }],
    }];
    for t in [T0, T0 + 10, T0 + 21] {
        let d = round(&mut resumed, &world, t);
        assert!(power_offs(&d).is_empty(), "{:?}", d.power);
    }
    assert_eq!(resumed.life("n2").unwrap().stage, Stage::Failed);
    assert_eq!(
        resumed.life("n2").unwrap().reason.as_deref(),
        Some("power-on not seen by the BMC within 120 s")
    );
    // The loop hands back what changed: n2's failure.
    let d = round(&mut resumed, &world, T0 + 22);
    assert!(d.lives_changed.is_empty(), "{:?}", d.lives_changed);
}
