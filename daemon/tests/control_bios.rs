//! BIOS profiles in the control loop, as a twin (the style of
//! `control.rs`): rounds of `Decider::decide` on hand-made snapshots, the
//! executor on `SimulatedPower` (whose BIOS applies staged attributes at
//! the next power-on, or drops them on machines set so), and the BIOS
//! reads the decisions ask for fed to the next round. A profile is staged
//! with the power-on, read back and verified; one that does not take
//! fails its node with every attribute, and the gang moves; settings
//! still staged while the machine boots (a slow POST) are read again, and
//! fail once it has booted; a profile verified before (the store's) is
//! not staged again; an unknown one fails the power-on before any Reset.

use std::sync::Arc;
use std::time::Duration;

use accord::demand::{Demand, ObjectRef, TaintEffect};
use accord::fleet::Fleet;
use accord::lifecycle::{Deadlines, Stage};
use accord::plan::Action;
use accord::truth::{SchedulerView, BIOS_TAINT_KEY};
use accord_api::control::{BiosResult, BiosState, BiosStatus, Mode};
use accord_testkit::power::SimulatedPower;
use accordd::control::decide::{Decider, Decision, Settings, Snapshot};
use accordd::execute::{BiosRead, Executed, Executor};
use accordd::store::Store;
use serde_json::{json, Map, Value};

/// One rack of three dark 8-GPU nodes that want BIOS profile `gpu-perf`,
/// and r2-n1 that wants one the inventory does not define.
const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.2

[[racks]]
name = "r1"

[[racks]]
name = "r2"

[[nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
bios_profile = "gpu-perf"

[[nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
bios_profile = "gpu-perf"

[[nodes]]
name = "r1-n3"
rack = "r1"
profile = "h100"
bios_profile = "gpu-perf"

[[nodes]]
name = "r2-n1"
rack = "r2"
profile = "h100"
bios_profile = "no-such-profile"
"#;

const NODES: [&str; 4] = ["r1-n1", "r1-n2", "r1-n3", "r2-n1"];
const T0: u64 = 100_000;

fn attrs(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// A gang of `pods` 8-GPU pods that must share a rack.
fn gang(pods: u32) -> Demand {
    let mut d = Demand::from_json(
        &json!({
            "workloads": [{
                "name": "train",
                "namespace": "ml",
                "topology": {"level": "rack", "mode": "required"},
                "pod_sets": [{"name": "w", "count": pods,
                    "pod": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}}}]
            }]
        })
        .to_string(),
        "demand.json",
    )
    .unwrap();
    d.workloads[0].sources = vec![ObjectRef::new(
        "scheduling.k8s.io/v1beta1",
        "PodGroup",
        "ml",
        "train",
    )];
    d
}

fn view(node: &str) -> SchedulerView {
    SchedulerView {
        labels: [("kubernetes.io/hostname".to_owned(), node.to_owned())].into(),
        taints: Vec::new(),
        allocatable: [
            ("cpu".to_owned(), "192".to_owned()),
            ("memory".to_owned(), "2Ti".to_owned()),
            ("pods".to_owned(), "110".to_owned()),
            ("nvidia.com/gpu".to_owned(), "8".to_owned()),
        ]
        .into(),
        devices: None,
    }
}

struct Twin {
    decider: Decider,
    power: Arc<SimulatedPower>,
    executor: Executor<SimulatedPower>,
    store: Store,
    world: Snapshot,
    executed: Vec<Executed>,
    reads: Vec<BiosRead>,
    now: u64,
    _dir: tempfile::TempDir,
}

impl Twin {
    fn new() -> Twin {
        let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let power = Arc::new(SimulatedPower::with_nodes(&NODES));
        power.bios_profiles.lock().unwrap().insert(
            "gpu-perf".into(),
            attrs(json!({"ProcTurboMode": "Disabled", "SysProfile": "PerfOptimized"})),
        );
        for n in NODES {
            power.bios.lock().unwrap().insert(
                n.into(),
                attrs(json!({"ProcTurboMode": "Enabled", "SysProfile": "Balanced", "BootMode": "Uefi"})),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let executor = Executor::new(store.journal().unwrap(), power.clone());
        let decider = Decider::new(fleet, settings(), T0);
        Twin {
            decider,
            power,
            executor,
            store,
            world: Snapshot::default(),
            executed: Vec::new(),
            reads: Vec::new(),
            now: T0,
            _dir: dir,
        }
    }

    /// Observe → decide → effect (power actions, BIOS reads, the BIOS
    /// outcomes kept in the store), `after_s` after the last round.
    async fn round(&mut self, after_s: u64) -> Decision {
        self.now += after_s;
        let mut snap = self.world.clone();
        snap.now = self.now;
        snap.mono = Duration::from_secs(self.now - T0);
        snap.bmc = self.power.state.lock().unwrap().clone();
        snap.executed = std::mem::take(&mut self.executed);
        snap.bios_reads = std::mem::take(&mut self.reads);
        snap.open_intents = self.executor.journal().open_intents().unwrap();
        let d = self.decider.decide(&snap);
        self.executed = self.executor.apply(&d.power, self.now).await.unwrap();
        self.reads = self.executor.read_bios(&d.bios.checks).await;
        for (node, rec) in &d.bios.records {
            self.store.put_bios_record(node, rec).unwrap();
        }
        d
    }

    fn stage(&self, node: &str) -> Stage {
        self.decider.life(node).unwrap().stage
    }

    fn comes_up(&mut self, node: &str) {
        self.world.agents.insert(node.into(), self.now + 1);
        self.world.kube_ready.insert(node.into(), true);
        self.world.views.insert(node.into(), view(node));
    }
}

fn settings() -> Settings {
    Settings {
        mode: Mode::Act,
        deadlines: Deadlines::default(),
        booking_s: 300,
        command_deadline_s: 600,
    }
}

fn power_ons(d: &Decision) -> Vec<String> {
    let mut v: Vec<String> = d
        .power
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn bios_of(d: &Decision, node: &str) -> Option<BiosStatus> {
    d.status
        .nodes
        .iter()
        .find(|n| n.name == node)
        .and_then(|n| n.bios.clone())
}

fn bios_taint(d: &Decision, node: &str) -> Option<String> {
    d.publish
        .iter()
        .find(|(n, _)| n == node)
        .and_then(|(_, p)| p.taints.iter().find(|t| t.key == BIOS_TAINT_KEY))
        .map(|t| {
            assert_eq!(t.effect, TaintEffect::NoSchedule);
            t.value.clone().unwrap_or_default()
        })
}

#[tokio::test]
async fn a_profile_is_staged_with_the_power_on_verified_and_not_staged_again() {
    let mut t = Twin::new();
    t.world.demand = gang(2);
    let d = t.round(0).await;
    assert_eq!(power_ons(&d), ["r1-n1", "r1-n2"]);
    // Each node's profile comes right before its power-on, and goes into
    // the power-on's intent.
    for n in ["r1-n1", "r1-n2"] {
        let bios = d.power.iter().position(|a| matches!(a, Action::ApplyBiosProfile { node, profile } if node == n && profile == "gpu-perf"));
        let on = d
            .power
            .iter()
            .position(|a| matches!(a, Action::PowerOn { node, .. } if node == n));
        assert!(bios.is_some() && bios < on, "{:?}", d.power);
        assert_eq!(bios_of(&d, n).unwrap().state, BiosState::Staged);
    }
    // r1-n3 is not powered on: its profile waits for its power-on.
    assert_eq!(bios_of(&d, "r1-n3").unwrap().state, BiosState::Pending);
    let intents = t.executor.journal().all().unwrap();
    assert!(intents
        .iter()
        .all(|i| i.bios_profile.as_deref() == Some("gpu-perf")));
    // Staged before the Reset; applied by it.
    assert_eq!(t.power.bios_staged(), ["r1-n1 gpu-perf", "r1-n2 gpu-perf"]);
    assert_eq!(
        t.power.bios.lock().unwrap()["r1-n1"]["ProcTurboMode"],
        "Disabled"
    );

    // The power-ons went through: read back.
    let d = t.round(1).await;
    assert_eq!(d.metrics.bios_profiles.get("staged"), Some(&2));
    let mut checked: Vec<&str> = d.bios.checks.iter().map(|c| c.node.as_str()).collect();
    checked.sort();
    assert_eq!(checked, ["r1-n1", "r1-n2"]);
    // The reads: verified, kept, shown.
    let d = t.round(1).await;
    assert_eq!(d.metrics.bios_profiles.get("verified"), Some(&2));
    assert!(d.bios.checks.is_empty());
    let applied = bios_of(&d, "r1-n1").unwrap();
    assert_eq!(applied.state, BiosState::Applied);
    assert_eq!(applied.applied.as_deref(), Some("gpu-perf"));
    assert_eq!(applied.verified_at, Some(T0 + 2));
    assert!(d
        .events
        .iter()
        .any(|e| e.reason == "BiosProfileApplied" && !e.warning));
    assert_eq!(t.stage("r1-n1"), Stage::Booting);

    // A restart: a new decider seeded from the store. The gang's nodes
    // were powered off meanwhile; powering them on again stages nothing.
    let (records, bad) = t.store.bios_records().unwrap();
    assert!(bad.is_empty());
    assert_eq!(records["r1-n1"].result, BiosResult::Verified);
    let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let mut again = Decider::new(fleet, settings(), t.now);
    again.seed_bios(records);
    for n in NODES {
        t.power.state.lock().unwrap().insert(n.into(), false);
    }
    t.decider = again;
    t.world.demand = gang(2);
    let d = t.round(5).await;
    assert_eq!(power_ons(&d), ["r1-n1", "r1-n2"]);
    assert!(
        !d.power
            .iter()
            .any(|a| matches!(a, Action::ApplyBiosProfile { .. })),
        "{:?}",
        d.power
    );
    assert_eq!(bios_of(&d, "r1-n1").unwrap().state, BiosState::Applied);
    // Two stagings in all: the first power-on's.
    assert_eq!(t.power.bios_staged().len(), 2);
}

#[tokio::test]
async fn a_profile_that_does_not_take_fails_the_node_and_the_gang_moves() {
    let mut t = Twin::new();
    t.power
        .bios_never_applies
        .lock()
        .unwrap()
        .push("r1-n1".into());
    t.world.demand = gang(2);
    let d = t.round(0).await;
    assert_eq!(power_ons(&d), ["r1-n1", "r1-n2"]);
    t.round(1).await;
    // The read: r1-n1's settings were dropped at the power-on.
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
    let reason = d
        .status
        .nodes
        .iter()
        .find(|n| n.name == "r1-n1")
        .and_then(|n| n.reason.clone())
        .unwrap();
    assert_eq!(
        reason,
        "BIOS profile gpu-perf did not take: ProcTurboMode is \"Enabled\", wanted \"Disabled\"; \
         SysProfile is \"Balanced\", wanted \"PerfOptimized\""
    );
    let event = d
        .events
        .iter()
        .find(|e| e.reason == "BiosProfileFailed")
        .expect("a BiosProfileFailed event");
    assert!(event.warning);
    assert_eq!(event.regarding.kind, "Node");
    assert_eq!(event.regarding.name, "r1-n1");
    assert_eq!(event.note, reason);
    assert_eq!(d.metrics.bios_profiles.get("failed"), Some(&1));
    assert_eq!(d.metrics.bios_profiles.get("verified"), Some(&1));
    let failed = bios_of(&d, "r1-n1").unwrap();
    assert_eq!(failed.state, BiosState::Failed);
    assert_eq!(failed.reason.as_deref(), Some(reason.as_str()));
    // The gang, which needs one rack, takes r1-n3 (staged too) with r1-n2.
    assert_eq!(power_ons(&d), ["r1-n3"]);
    assert!(d
        .power
        .iter()
        .any(|a| matches!(a, Action::ApplyBiosProfile { node, .. } if node == "r1-n3")));
    let (records, _) = t.store.bios_records().unwrap();
    assert!(matches!(records["r1-n1"].result, BiosResult::Failed { .. }));

    // r1-n1 boots all the same and its Node turns Ready: it stays Failed,
    // and Accord taints it so the scheduler keeps off it; r1-n3, staged
    // and not yet read back, is tainted `unverified` meanwhile.
    t.comes_up("r1-n1");
    t.world.views.insert("r1-n3".into(), view("r1-n3"));
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
    assert_eq!(bios_taint(&d, "r1-n1").as_deref(), Some("failed"));
    assert_eq!(bios_taint(&d, "r1-n3").as_deref(), Some("unverified"));
    for _ in 0..3 {
        t.round(5).await;
        assert_eq!(t.stage("r1-n1"), Stage::Failed);
    }
    // r1-n3 was verified: its Node shows the `unverified` taint still
    // (as a kubelet registered with it), and Accord takes it away.
    let mut tainted = view("r1-n3");
    tainted.taints.push(accord::demand::Taint {
        key: BIOS_TAINT_KEY.into(),
        value: Some("unverified".into()),
        effect: TaintEffect::NoSchedule,
    });
    t.world.views.insert("r1-n3".into(), tainted);
    let d = t.round(5).await;
    assert_eq!(bios_of(&d, "r1-n3").unwrap().state, BiosState::Applied);
    let (_, p) = d
        .publish
        .iter()
        .find(|(n, _)| n == "r1-n3")
        .expect("r1-n3's taint taken away");
    assert!(p.taints.iter().all(|t| t.key != BIOS_TAINT_KEY), "{p:?}");
    // Never powered on again.
    assert_eq!(
        t.power.resets().iter().filter(|r| *r == "r1-n1 on").count(),
        1
    );

    // Restarted, accordd holds it Failed again from its store while it
    // runs with what it has...
    t.world.demand = Demand::default();
    let (records, _) = t.store.bios_records().unwrap();
    let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let mut again = Decider::new(fleet, settings(), t.now);
    again.seed_bios(records);
    assert_eq!(again.life("r1-n1").unwrap().stage, Stage::Failed);
    t.decider = again;
    let d = t.round(5).await;
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
    assert_eq!(bios_taint(&d, "r1-n1").as_deref(), Some("failed"));
    // ...and lets it go once it is off (an admin's doing): its profile is
    // staged again at its next power-on.
    t.power.state.lock().unwrap().insert("r1-n1".into(), false);
    let d = t.round(5).await;
    assert_eq!(t.stage("r1-n1"), Stage::Off);
    let b = bios_of(&d, "r1-n1").unwrap();
    assert_eq!(b.state, BiosState::Failed, "the last attempt's: {b:?}");
    assert!(b.reason.unwrap().contains("did not take"));
}

#[tokio::test]
async fn settings_still_staged_while_booting_are_read_again_and_fail_once_booted() {
    let mut t = Twin::new();
    // Both machines' POST applies staged settings late (or never, for
    // r1-n1).
    t.power
        .bios_late
        .lock()
        .unwrap()
        .extend(["r1-n1".to_owned(), "r1-n2".to_owned()]);
    t.world.demand = gang(2);
    t.round(0).await;
    t.round(1).await;
    // Read back while booting: still staged, not failed; read again 10 s
    // later, not before.
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Booting);
    assert_eq!(t.stage("r1-n2"), Stage::Booting);
    assert!(!d.metrics.bios_profiles.contains_key("failed"));
    assert_eq!(bios_of(&d, "r1-n2").unwrap().state, BiosState::Staged);
    assert!(t.round(5).await.bios.checks.is_empty());
    t.power.finish_post("r1-n2");
    let d = t.round(5).await;
    assert_eq!(d.bios.checks.len(), 2, "{:?}", d.bios.checks);
    let d = t.round(1).await;
    assert_eq!(bios_of(&d, "r1-n2").unwrap().state, BiosState::Applied);
    assert_eq!(t.stage("r1-n1"), Stage::Booting);
    // r1-n1 boots with them still staged: they did not take.
    t.comes_up("r1-n1");
    t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Ready);
    let d = t.round(10).await;
    assert_eq!(d.bios.checks.len(), 1);
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
    let b = bios_of(&d, "r1-n1").unwrap();
    assert_eq!(
        b.reason.as_deref(),
        Some(
            "BIOS profile gpu-perf did not take: ProcTurboMode is \"Enabled\", wanted \"Disabled\" \
             (still staged); SysProfile is \"Balanced\", wanted \"PerfOptimized\" (still staged)"
        )
    );
}

#[tokio::test]
async fn a_profile_the_inventory_does_not_define_fails_the_power_on_before_any_reset() {
    let mut t = Twin::new();
    // A pod only r2-n1 can take (by its Node's hostname label).
    let mut demand = gang(1);
    demand.workloads[0].pod_sets[0].pod.node_selector =
        [("kubernetes.io/hostname".to_owned(), "r2-n1".to_owned())].into();
    t.world.views.insert("r2-n1".into(), view("r2-n1"));
    t.world.demand = demand;
    let d = t.round(0).await;
    assert_eq!(power_ons(&d), ["r2-n1"], "{:?}", d.status.workloads);
    let d = t.round(1).await;
    assert_eq!(t.stage("r2-n1"), Stage::Failed);
    let reason = d
        .status
        .nodes
        .iter()
        .find(|n| n.name == "r2-n1")
        .and_then(|n| n.reason.clone())
        .unwrap();
    assert!(
        reason.contains(
            "BIOS profile \"no-such-profile\" is not in the BMC inventory (its [bios_profiles]: gpu-perf)"
        ),
        "{reason}"
    );
    assert!(t.power.resets().is_empty(), "{:?}", t.power.resets());
}
