//! BIOS profiles in the control loop, as a twin (the style of
//! `control.rs`): rounds of `Decider::decide` on hand-made snapshots, the
//! executor on `SimulatedPower` (whose BIOS applies staged attributes at
//! the next power-on, or drops them on machines set so), and the BIOS
//! reads the decisions ask for fed to the next round. A profile is staged
//! with the power-on, read back and verified; one that does not take
//! fails its node with every attribute once it has booted, and the gang
//! moves; settings still staged while the machine boots (a slow POST), or
//! taken into a BIOS job by the BMC, are read again, and judged once it
//! has booted; a read that fails is tried again, and only failures in a
//! row fail the node; a profile verified before (the store's) is not
//! staged again; a staging survives a restart before its read-back; a
//! node up with its profile unverified and nothing staged is read, and
//! left running (tainted) when it differs; an unknown profile fails the
//! power-on before any Reset.

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
        counters: Default::default(),
    }
}

struct Twin {
    fleet: String,
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
        Twin::with_fleet(FLEET)
    }

    fn with_fleet(text: &str) -> Twin {
        let fleet = Fleet::from_toml(text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
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
            fleet: text.to_owned(),
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
        self.world.agent_reports.insert(node.into(), self.now + 1);
        self.world.kube_ready.insert(node.into(), true);
        self.world.views.insert(node.into(), view(node));
    }

    /// The machine boots and its kubelet registers the Node with the
    /// BIOS taint (`--register-with-taints`).
    fn comes_up_registered(&mut self, node: &str) {
        self.comes_up(node);
        self.world.views.insert(node.into(), registered(node));
    }

    /// accordd restarts: a new decider seeded as `run` seeds it (the
    /// store's BIOS records, the journal's open intents); the power
    /// results and BIOS reads not yet taken are lost.
    fn restart(&mut self) {
        let fleet =
            Fleet::from_toml(&self.fleet, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let mut decider = Decider::new(fleet, settings(), self.now);
        let (records, bad) = self.store.bios_records().unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        decider.seed_bios(records);
        let open = self.executor.journal().open_intents().unwrap();
        decider.resume_intents(&open, self.now);
        self.decider = decider;
        self.executed.clear();
        self.reads.clear();
    }
}

/// A Node as a kubelet registered with `accord.dev/bios=unverified`.
fn registered(node: &str) -> SchedulerView {
    let mut v = view(node);
    v.taints.push(accord::demand::Taint {
        key: BIOS_TAINT_KEY.into(),
        value: Some("unverified".into()),
        effect: TaintEffect::NoSchedule,
    });
    v
}

fn checked(d: &Decision) -> Vec<String> {
    let mut v: Vec<String> = d.bios.checks.iter().map(|c| c.node.clone()).collect();
    v.sort();
    v
}

/// `node`'s publication this round, if one was sent.
fn published(d: &Decision, node: &str) -> Option<accord::truth::Publication> {
    d.publish
        .iter()
        .find(|(n, _)| n == node)
        .map(|(_, p)| p.clone())
}

fn settings() -> Settings {
    Settings {
        mode: Mode::Act,
        deadlines: Deadlines::default(),
        booking_s: 300,
        command_deadline_s: 600,
        mig_manager: accord_decide::MigManager::default(),
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
    // The read: r1-n1's settings were dropped at the power-on. The
    // machine is still in POST, where settings may yet take: not judged.
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Booting);
    assert_eq!(bios_of(&d, "r1-n1").unwrap().state, BiosState::Staged);
    assert!(!d.metrics.bios_profiles.contains_key("failed"));
    assert_eq!(d.metrics.bios_profiles.get("verified"), Some(&1));
    // It boots with them dropped: they did not take (read again 10 s
    // after the last read).
    // Its Node, Ready meanwhile, is kept off by the `unverified` taint.
    t.comes_up("r1-n1");
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Ready);
    assert_eq!(bios_taint(&d, "r1-n1").as_deref(), Some("unverified"));
    assert_eq!(t.round(9).await.bios.checks.len(), 1);
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
    assert_eq!(bios_taint(&d, "r1-n1").as_deref(), Some("failed"));
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

    // r1-n1 runs all the same with its Node Ready: it stays Failed, and
    // Accord's taint keeps the scheduler off it; r1-n3, staged and not
    // yet read back, is tainted `unverified` meanwhile.
    t.comes_up("r1-n1");
    t.world.views.insert("r1-n3".into(), view("r1-n3"));
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
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

#[tokio::test]
async fn a_staging_survives_a_restart_before_its_read_back_and_keeps_its_taint() {
    let mut t = Twin::new();
    // Slow POSTs: r1-n1's settings apply when it ends; r1-n2's BIOS drops
    // them.
    t.power.bios_late.lock().unwrap().push("r1-n1".into());
    t.power
        .bios_never_applies
        .lock()
        .unwrap()
        .push("r1-n2".into());
    t.world.demand = gang(2);
    let d = t.round(0).await;
    assert_eq!(power_ons(&d), ["r1-n1", "r1-n2"]);
    // Kept with the power-on: a `staged` record in the store.
    let (records, _) = t.store.bios_records().unwrap();
    for n in ["r1-n1", "r1-n2"] {
        assert_eq!(records[n].result, BiosResult::Staged, "{n}");
        assert_eq!(records[n].profile, "gpu-perf");
    }
    // The power-ons are through, their intents closed, the reads asked...
    let d = t.round(1).await;
    assert_eq!(checked(&d), ["r1-n1", "r1-n2"]);
    assert!(t.executor.journal().open_intents().unwrap().is_empty());
    // ...and accordd restarts before their results come back.
    t.restart();

    // POST goes on: the stagings are resumed from the store and read
    // back; in POST, neither is judged.
    let d = t.round(5).await;
    assert_eq!(t.stage("r1-n1"), Stage::Booting);
    assert_eq!(checked(&d), ["r1-n1", "r1-n2"]);
    assert_eq!(bios_of(&d, "r1-n1").unwrap().state, BiosState::Staged);
    let d = t.round(1).await;
    assert!(d.metrics.bios_profiles.is_empty(), "{:?}", d.metrics);
    assert_eq!(bios_of(&d, "r1-n2").unwrap().state, BiosState::Staged);

    // They boot; their kubelets register the Nodes with the BIOS taint,
    // and Accord keeps it: neither is verified yet.
    t.power.finish_post("r1-n1");
    t.comes_up_registered("r1-n1");
    t.comes_up_registered("r1-n2");
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Ready);
    assert_eq!(t.stage("r1-n2"), Stage::Ready);
    for n in ["r1-n1", "r1-n2"] {
        assert_eq!(bios_taint(&d, n).as_deref(), Some("unverified"), "{n}");
    }

    // Read again 10 s after the last read: r1-n1's took; r1-n2's,
    // staged by Accord, did not: Failed, held, tainted `failed`.
    let d = t.round(9).await;
    assert_eq!(checked(&d), ["r1-n1", "r1-n2"]);
    let d = t.round(1).await;
    let b = bios_of(&d, "r1-n1").unwrap();
    assert_eq!(b.state, BiosState::Applied);
    assert!(b.verified_at.is_some());
    let p = published(&d, "r1-n1").expect("r1-n1's taint lifted");
    assert!(p.taints.iter().all(|t| t.key != BIOS_TAINT_KEY), "{p:?}");
    assert_eq!(t.stage("r1-n2"), Stage::Failed);
    assert_eq!(
        bios_of(&d, "r1-n2").unwrap().reason.as_deref(),
        Some(
            "BIOS profile gpu-perf did not take: ProcTurboMode is \"Enabled\", wanted \"Disabled\"; \
             SysProfile is \"Balanced\", wanted \"PerfOptimized\""
        )
    );
    assert_eq!(bios_taint(&d, "r1-n2").as_deref(), Some("failed"));
    let (records, _) = t.store.bios_records().unwrap();
    assert_eq!(records["r1-n1"].result, BiosResult::Verified);
    assert!(matches!(records["r1-n2"].result, BiosResult::Failed { .. }));
    // One staging each, the first power-on's (and r1-n3's, powered on
    // for the gang in r1-n2's place).
    assert_eq!(
        t.power.bios_staged(),
        ["r1-n1 gpu-perf", "r1-n2 gpu-perf", "r1-n3 gpu-perf"]
    );
    assert_eq!(power_ons(&d), ["r1-n3"]);
}

#[tokio::test]
async fn a_node_up_with_its_profile_unverified_and_nothing_staged_is_read_and_left_running_if_it_differs(
) {
    // r1-n2's admin says gpu-perf is applied; Accord has verified none.
    let fleet = FLEET.replacen(
        "name = \"r1-n2\"\nrack = \"r1\"\nprofile = \"h100\"\nbios_profile = \"gpu-perf\"\n",
        "name = \"r1-n2\"\nrack = \"r1\"\nprofile = \"h100\"\nbios_profile = \"gpu-perf\"\n\
         bios_profile_applied = \"gpu-perf\"\n",
        1,
    );
    assert_ne!(fleet, FLEET);
    let mut t = Twin::with_fleet(&fleet);
    // r1-n1 and r1-n2 were on at accordd's start (or powered on outside
    // Accord): r1-n1's BIOS has the profile, r1-n2's has not.
    t.power
        .bios
        .lock()
        .unwrap()
        .get_mut("r1-n1")
        .unwrap()
        .extend(attrs(
            json!({"ProcTurboMode": "Disabled", "SysProfile": "PerfOptimized"}),
        ));
    for n in ["r1-n1", "r1-n2"] {
        t.power.state.lock().unwrap().insert(n.into(), true);
        t.comes_up_registered(n);
    }
    // Up, and read; their Nodes keep the taint meanwhile.
    let d = t.round(0).await;
    assert_eq!(t.stage("r1-n1"), Stage::Ready);
    assert_eq!(t.stage("r1-n2"), Stage::Ready);
    assert_eq!(checked(&d), ["r1-n1", "r1-n2"]);
    for n in ["r1-n1", "r1-n2"] {
        assert_eq!(bios_taint(&d, n).as_deref(), Some("unverified"), "{n}");
    }
    let d = t.round(1).await;
    // r1-n1: verified, kept, its taint lifted.
    let b = bios_of(&d, "r1-n1").unwrap();
    assert_eq!((b.state, b.verified_at), (BiosState::Applied, Some(T0 + 1)));
    let p = published(&d, "r1-n1").expect("r1-n1's taint lifted");
    assert!(p.taints.iter().all(|t| t.key != BIOS_TAINT_KEY), "{p:?}");
    let (records, _) = t.store.bios_records().unwrap();
    assert_eq!(records["r1-n1"].result, BiosResult::Verified);
    // r1-n2: not Accord's staging failing. It runs on, not Failed, its
    // taint kept; the status says what differs and what happens next.
    assert!(matches!(t.stage("r1-n2"), Stage::Ready | Stage::Idle));
    assert!(!records.contains_key("r1-n2"), "{records:?}");
    assert!(!d.metrics.bios_profiles.contains_key("failed"));
    assert!(d.events.iter().all(|e| e.reason != "BiosProfileFailed"));
    let b = bios_of(&d, "r1-n2").unwrap();
    assert_eq!(b.state, BiosState::Pending);
    assert_eq!(b.applied, None, "the admin's word is not what was read");
    assert_eq!(
        b.reason.as_deref(),
        Some(
            "the running machine's BIOS is not profile gpu-perf (ProcTurboMode is \"Enabled\", \
             wanted \"Disabled\"; SysProfile is \"Balanced\", wanted \"PerfOptimized\"); \
             Accord stages it at its next power-on"
        )
    );
    assert!(published(&d, "r1-n2").is_none_or(|p| p
        .taints
        .iter()
        .any(|t| t.key == BIOS_TAINT_KEY && t.value.as_deref() == Some("unverified"))));

    // While it runs: not read again, never failed nor powered off, its
    // taint kept; a pod only it could take is not placed there (the
    // scheduler would not bind it), and nothing is powered on for it.
    let mut demand = gang(1);
    demand.workloads[0].pod_sets[0].pod.node_selector =
        [("kubernetes.io/hostname".to_owned(), "r1-n2".to_owned())].into();
    t.world.demand = demand;
    for _ in 0..4 {
        let d = t.round(30).await;
        assert!(d.bios.checks.is_empty(), "{:?}", d.bios.checks);
        assert!(d.power.is_empty(), "{:?}", d.power);
        assert!(matches!(t.stage("r1-n2"), Stage::Ready | Stage::Idle));
        assert_eq!(bios_of(&d, "r1-n2").unwrap().state, BiosState::Pending);
        assert!(published(&d, "r1-n2").is_none_or(|p| p
            .taints
            .iter()
            .any(|t| t.key == BIOS_TAINT_KEY && t.value.as_deref() == Some("unverified"))));
        let w = &d.status.workloads[0];
        assert_ne!(w.state, accord_api::control::WorkloadState::Placed, "{w:?}");
    }
    assert!(t.power.resets().is_empty(), "{:?}", t.power.resets());

    // Off (an admin's doing), its next power-on by Accord stages the
    // profile, the fleet's bios_profile_applied notwithstanding.
    t.power.state.lock().unwrap().insert("r1-n2".into(), false);
    t.world.agents.remove("r1-n2");
    t.world.kube_ready.insert("r1-n2".into(), false);
    let d = t.round(1).await;
    assert_eq!(power_ons(&d), ["r1-n2"], "{:?}", d.status.workloads);
    assert_eq!(t.stage("r1-n2"), Stage::PoweringOn);
    assert!(d
        .power
        .iter()
        .any(|a| matches!(a, Action::ApplyBiosProfile { node, profile } if node == "r1-n2" && profile == "gpu-perf")));
    assert_eq!(t.power.bios_staged(), ["r1-n2 gpu-perf"]);
}

#[tokio::test]
async fn a_read_error_is_tried_again_and_only_errors_in_a_row_fail_the_node() {
    let mut t = Twin::new();
    // r1-n1's BMC is busy for its first three BIOS reads; r1-n2's never
    // answers one.
    t.power
        .bios_read_errors
        .lock()
        .unwrap()
        .extend([("r1-n1".to_owned(), 3), ("r1-n2".to_owned(), u32::MAX)]);
    t.world.demand = gang(2);
    t.round(0).await;
    assert_eq!(checked(&t.round(1).await), ["r1-n1", "r1-n2"]);
    // One failed read fails nothing; the status says it.
    let d = t.round(1).await;
    for n in ["r1-n1", "r1-n2"] {
        assert_eq!(t.stage(n), Stage::Booting, "{n}");
        let b = bios_of(&d, n).unwrap();
        assert_eq!(b.state, BiosState::Staged);
        let reason = b.reason.unwrap();
        assert!(
            reason.contains("could not be read (1 time(s) in a row)")
                && reason.contains("503 Service Unavailable"),
            "{reason}"
        );
    }
    assert!(!d.metrics.bios_profiles.contains_key("failed"));
    // Read again, later each time (10, 20, 40, 80 s): r1-n1 answers its
    // fourth read and is verified; r1-n2 fails on its fifth failure in a
    // row, with the read error as the reason.
    let mut asked: Vec<u64> = vec![T0 + 1];
    let mut failed = None;
    for _ in 0..100 {
        let d = t.round(5).await;
        if d.bios.checks.iter().any(|c| c.node == "r1-n2") {
            asked.push(t.now);
        }
        if t.stage("r1-n2") == Stage::Failed {
            failed = Some(d);
            break;
        }
    }
    let d = failed.expect("r1-n2 failed for its reads");
    assert_eq!(t.power.bios_reads("r1-n2"), 5);
    let gaps: Vec<u64> = asked.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps.len(), 4, "{asked:?}");
    for (gap, at_least) in gaps.iter().zip([10, 20, 40, 80]) {
        assert!(*gap >= at_least, "{asked:?}");
    }
    let reason = d
        .status
        .nodes
        .iter()
        .find(|n| n.name == "r1-n2")
        .and_then(|n| n.reason.clone())
        .unwrap();
    assert_eq!(
        reason,
        "BIOS profile gpu-perf could not be read back (5 reads in a row failed): \
         node r1-n2: BMC busy: 503 Service Unavailable"
    );
    assert_eq!(t.power.bios_reads("r1-n1"), 4);
    let b = bios_of(&d, "r1-n1").unwrap();
    assert_eq!(b.state, BiosState::Applied);
    assert_eq!(b.reason, None);
    assert_eq!(t.stage("r1-n1"), Stage::Booting);
}

#[tokio::test]
async fn settings_a_bmc_takes_into_a_bios_job_are_not_judged_before_the_machine_has_booted() {
    let mut t = Twin::new();
    // r1-n1's BMC clears its settings object when the Reset schedules the
    // BIOS job (as iDRAC does); the job runs during POST.
    t.power
        .bios_job_at_reset
        .lock()
        .unwrap()
        .push("r1-n1".into());
    t.world.demand = gang(2);
    t.round(0).await;
    t.round(1).await;
    // Read in POST: the attributes are neither current nor staged; not
    // judged while the machine has not booted.
    let d = t.round(1).await;
    assert_eq!(t.stage("r1-n1"), Stage::Booting);
    assert!(!d.metrics.bios_profiles.contains_key("failed"));
    assert_eq!(bios_of(&d, "r1-n1").unwrap().state, BiosState::Staged);
    assert!(t.power.bios_pending.lock().unwrap().get("r1-n1").is_none());
    // POST ends, the job has applied them: verified at the next read.
    t.power.finish_post("r1-n1");
    assert_eq!(checked(&t.round(10).await), ["r1-n1"]);
    let d = t.round(1).await;
    assert_eq!(bios_of(&d, "r1-n1").unwrap().state, BiosState::Applied);
    assert_eq!(d.metrics.bios_profiles.get("verified"), Some(&1));
    assert_ne!(t.stage("r1-n1"), Stage::Failed);
}

#[tokio::test]
async fn a_running_node_whose_bios_cannot_be_read_is_left_tainted_never_failed() {
    let mut t = Twin::new();
    // r1-n3 was on at accordd's start; its BMC never answers a BIOS read.
    t.power
        .bios_read_errors
        .lock()
        .unwrap()
        .insert("r1-n3".into(), u32::MAX);
    t.power.state.lock().unwrap().insert("r1-n3".into(), true);
    t.comes_up_registered("r1-n3");
    let d = t.round(0).await;
    assert_eq!(checked(&d), ["r1-n3"]);
    // Read again, spaced out; five failures in a row are said, and it is
    // read seldom from then on: never failed for it, never powered off,
    // its taint kept.
    let mut last = d;
    while t.now < T0 + 250 {
        last = t.round(5).await;
        assert!(matches!(t.stage("r1-n3"), Stage::Ready | Stage::Idle));
        assert!(last.events.iter().all(|e| e.reason != "BiosProfileFailed"));
        assert!(last.power.is_empty(), "{:?}", last.power);
        assert!(published(&last, "r1-n3").is_none_or(|p| p
            .taints
            .iter()
            .any(|t| t.key == BIOS_TAINT_KEY && t.value.as_deref() == Some("unverified"))));
    }
    assert_eq!(t.power.bios_reads("r1-n3"), 5);
    let b = bios_of(&last, "r1-n3").unwrap();
    assert_eq!(b.state, BiosState::Pending);
    assert!(
        b.reason
            .as_deref()
            .is_some_and(|r| r.contains("could not be read (5 time(s) in a row)")),
        "{b:?}"
    );
    assert!(!t.store.bios_records().unwrap().0.contains_key("r1-n3"));
}
