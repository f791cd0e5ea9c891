//! The twin for MIG repartitions: `decide` on hand-made snapshots, with
//! the agent commands' records as the store would hold them after each
//! round's effect. In flight → no second command and no power-on; done →
//! the capacity counts once the report shows it; refused (busy) → the
//! next plan leaves that GPU alone; deadline passed → the node fails.

use std::time::Duration;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::hardware::{MigMode, MigState, NodeHardware};
use accord::lifecycle::{Deadlines, Stage};
use accord::plan::Action;
use accord_api::agent::{BusyGpu, CommandAction, CommandRecord, CommandResult, CommandState};
use accord_api::control::{Mode, WorkloadState};
use accordd::control::decide::{Decider, Decision, Settings, Snapshot};

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"

[[racks]]
name = "r1"

[[nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"

[[nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
"#;

const T0: u64 = 100_000;
const DEADLINE_S: u64 = 120;
const H100: &str = "NVIDIA H100 80GB HBM3";

/// r1-n1's model as its agent reports it: 8 H100s, MIG capable, MIG off.
fn reported() -> NodeHardware {
    let profile = accord::fleet::HardwareProfile {
        gpus: 8,
        gpu_model: Some(H100.into()),
        gpu_memory_gib: 80,
        ..accord::fleet::HardwareProfile::new("192", "2Ti")
    };
    let mut hw = accord::fleet::hardware_from_profile(&profile, &[]);
    for (i, g) in hw.gpus.iter_mut().enumerate() {
        g.uuid = Some(format!("GPU-0000000{i}"));
        g.sources = vec![accord::hardware::Source::Nvml];
        g.mig = Some(MigState {
            capable: true,
            current_mode: MigMode::Disabled,
            pending_mode: MigMode::Disabled,
            profiles: accord::hardware::mig::catalog::profiles_for_model(H100).unwrap(),
            gpu_instances: Vec::new(),
        });
    }
    hw
}

/// `hw` with GPU `gpu` (NVML index) partitioned as `layout`.
fn with_layout(mut hw: NodeHardware, gpu: u32, layout: &[String]) -> NodeHardware {
    let g = hw.gpus.iter_mut().find(|g| g.index == gpu).unwrap();
    let mut state = g.mig.as_ref().unwrap().with_layout(layout).unwrap();
    for (k, gi) in state.gpu_instances.iter_mut().enumerate() {
        gi.compute_instances = vec![accord::hardware::ComputeInstance {
            id: 0,
            uuid: Some(format!("MIG-{gpu}-{k}")),
            sm_count: None,
            memory_mib: None,
        }];
    }
    g.mig = Some(state);
    hw
}

fn mig_pods(count: u32) -> Demand {
    Demand::from_json(
        &serde_json::json!({"workloads": [{"name": "infer", "namespace": "ml",
            "pod_sets": [{"name": "w", "count": count,
                "pod": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-1g.10gb": "1"}}}]}]})
        .to_string(),
        "demand.json",
    )
    .unwrap()
}

struct Twin {
    decider: Decider,
    world: Snapshot,
    now: u64,
}

impl Twin {
    /// r1-n1 is on and Ready, its agent has reported; r1-n2 is off.
    fn new() -> Twin {
        let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let settings = Settings {
            mode: Mode::Act,
            deadlines: Deadlines::default(),
            booking_s: 300,
            command_deadline_s: DEADLINE_S,
            mig_manager: MIG_MANAGER,
        };
        let mut world = Snapshot::default();
        world.bmc.insert("r1-n1".into(), true);
        world.bmc.insert("r1-n2".into(), false);
        world.agents.insert("r1-n1".into(), T0 + 1);
        world.agent_reports.insert("r1-n1".into(), T0 + 1);
        world.kube_ready.insert("r1-n1".into(), true);
        world.reports.insert("r1-n1".into(), reported());
        let mut t = Twin {
            decider: Decider::new(fleet, settings, T0),
            world,
            now: T0,
        };
        t.round(1);
        t.round(1);
        assert!(
            matches!(t.stage("r1-n1"), Stage::Idle | Stage::Ready),
            "{:?}",
            t.stage("r1-n1")
        );
        t
    }

    /// [`Twin::new`] with `policy.mig_via = "gpu-operator"`.
    fn gpu_operator() -> Twin {
        let text = FLEET.replace(
            "[[racks]]",
            "[policy]\nmig_via = \"gpu-operator\"\n\n[[racks]]",
        );
        let fleet = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        let mut t = Twin::new();
        t.decider = Decider::new(
            fleet,
            Settings {
                mode: Mode::Act,
                deadlines: Deadlines::default(),
                booking_s: 300,
                command_deadline_s: DEADLINE_S,
                mig_manager: MIG_MANAGER,
            },
            t.now,
        );
        t.world.reports.insert("r1-n1".into(), reported());
        t.round(1);
        t.round(1);
        t
    }

    /// Decide `after_s` after the last round, then play the store: new
    /// commands journaled (numbered), closes applied.
    fn round(&mut self, after_s: u64) -> Decision {
        self.now += after_s;
        // r1-n1's agent heartbeats all along.
        self.world.agents.insert("r1-n1".into(), self.now);
        let mut snap = self.world.clone();
        snap.now = self.now;
        snap.mono = Duration::from_secs(self.now - T0);
        let d = self.decider.decide(&snap);
        // Reports are absorbed once.
        self.world.reports.clear();
        for rec in &d.commands.open {
            let last = self
                .world
                .commands
                .iter()
                .find(|c| c.node == rec.node)
                .map_or(0, |c| c.generation);
            self.world.commands.retain(|c| c.node != rec.node);
            let mut rec = rec.clone();
            rec.generation = last + 1;
            self.world.commands.push(rec);
        }
        for (node, generation, result) in &d.commands.close {
            self.close(node, *generation, result.clone());
        }
        // The writer put the configurations in mig-manager's ConfigMap.
        for (name, _) in &d.commands.mig_configs {
            self.world.mig_configs_written.insert(name.clone());
        }
        d
    }

    /// Rounds a second apart until accordd sets `nvidia.com/mig.config` on
    /// `node`; the value and how many rounds it took.
    fn until_labelled(&mut self, node: &str) -> (String, u64) {
        for i in 1..=60 {
            let d = self.round(1);
            if let Some((_, _, v)) = d
                .commands
                .labels
                .iter()
                .find(|(n, k, _)| n == node && k == "nvidia.com/mig.config")
            {
                return (v.clone(), i);
            }
        }
        panic!("{node} was never labelled");
    }

    /// The Node's labels as mig-manager leaves them.
    fn mig_manager_shows(&mut self, node: &str, config: &str, state: &str) {
        let view = self.world.views.entry(node.to_owned()).or_default();
        view.labels
            .insert("nvidia.com/mig.config".into(), config.to_owned());
        view.labels
            .insert("nvidia.com/mig.config.state".into(), state.to_owned());
    }

    fn close(&mut self, node: &str, generation: u64, result: CommandResult) {
        for c in &mut self.world.commands {
            if c.node == node && c.generation == generation && c.is_open() {
                c.state = CommandState::Closed {
                    at: self.now,
                    result: result.clone(),
                };
            }
        }
    }

    fn command(&self, node: &str) -> CommandRecord {
        self.world
            .commands
            .iter()
            .find(|c| c.node == node)
            .cloned()
            .unwrap()
    }

    fn stage(&self, node: &str) -> Stage {
        self.decider.life(node).unwrap().stage
    }
}

/// The layout an agent command gives its first GPU.
fn first_layout(rec: &CommandRecord) -> Vec<String> {
    match &rec.action {
        CommandAction::ApplyMig { gpus } => gpus[0].layout.clone(),
        CommandAction::Rediscover => panic!("not an agent repartition: {rec:?}"),
    }
}

fn power_ons(d: &Decision) -> usize {
    d.power
        .iter()
        .filter(|a| matches!(a, Action::PowerOn { .. }))
        .count()
}

fn targets(rec: &CommandRecord) -> Vec<(u32, usize)> {
    match &rec.action {
        CommandAction::ApplyMig { gpus } => {
            gpus.iter().map(|g| (g.index, g.layout.len())).collect()
        }
        CommandAction::Rediscover => Vec::new(),
    }
}

#[test]
fn an_idle_gpu_is_repartitioned_once_and_its_capacity_counts_when_the_report_shows_it() {
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    let d = t.round(1);
    assert_eq!(power_ons(&d), 0, "{:?}", d.status.actions);
    assert_eq!(d.commands.open.len(), 1, "{:?}", d.status.actions);
    let rec = t.command("r1-n1");
    assert_eq!(rec.generation, 1);
    // GPU 0 becomes seven 1g.10gb instances, through the agent.
    assert_eq!(targets(&rec), [(0, 7)]);
    assert_eq!(rec.deadline, rec.opened_at + DEADLINE_S);
    assert!(rec.deliver);
    assert_eq!(d.status.workloads[0].state, WorkloadState::Repartitioning);
    assert!(d.events.iter().any(|e| e.reason == "MigRepartitioning"));
    assert_eq!(d.metrics.commands, [("mig_agent", "issued")]);

    // In flight: no second command, nothing powered on, still waiting.
    t.world.commands[0].state = CommandState::Sent { at: t.now };
    for _ in 0..3 {
        let d = t.round(5);
        assert!(d.commands.open.is_empty(), "{:?}", d.commands.open);
        assert_eq!(power_ons(&d), 0);
        assert!(
            !d.status
                .actions
                .iter()
                .any(|a| matches!(a, Action::ReconfigureMig { .. })),
            "the same repartition proposed again: {:?}",
            d.status.actions
        );
        assert_eq!(d.status.workloads[0].state, WorkloadState::Repartitioning);
    }

    // Done: the report shows the layout; the pods fit where they are.
    let layout = first_layout(&rec);
    t.world
        .reports
        .insert("r1-n1".into(), with_layout(reported(), 0, &layout));
    t.close("r1-n1", 1, CommandResult::Done);
    let d = t.round(5);
    assert_eq!(d.metrics.commands, [("mig_agent", "done")]);
    assert!(d.events.iter().any(|e| e.reason == "MigRepartitioned"));
    assert_eq!(d.status.workloads[0].state, WorkloadState::Placed);
    assert!(d.commands.open.is_empty());
    // Accord's own repartition is not drift from the declaration.
    let n = d.status.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert!(n.drift.is_empty(), "{:?}", n.drift);
    assert!(
        d.events.iter().all(|e| e.reason != "HardwareDrift"),
        "{:?}",
        d.events
    );
    assert_eq!(power_ons(&d), 0);
    // And later rounds do not propose it again.
    let d = t.round(5);
    assert!(
        d.commands.open.is_empty() && d.status.actions.is_empty(),
        "{:?}",
        d.status.actions
    );
}

#[test]
fn a_done_that_the_report_does_not_show_is_not_capacity() {
    let mut t = Twin::new();
    t.world.demand = mig_pods(2);
    t.round(1);
    // The agent says done, but its report still shows MIG off.
    t.world.reports.insert("r1-n1".into(), reported());
    t.close("r1-n1", 1, CommandResult::Done);
    let d = t.round(5);
    assert_eq!(d.metrics.commands.first(), Some(&("mig_agent", "failed")));
    assert!(d
        .events
        .iter()
        .any(|e| e.reason == "MigRepartitionRefused" && e.note.contains("does not show")));
    // GPU 0 is left alone: the next command is for another GPU.
    let rec = t.command("r1-n1");
    assert_eq!(rec.generation, 2, "{:?}", d.commands);
    assert_eq!(targets(&rec)[0].0, 1);
}

#[test]
fn a_busy_gpu_is_never_repartitioned_the_demand_is_planned_again() {
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    t.round(1);
    assert_eq!(targets(&t.command("r1-n1")), [(0, 7)]);
    // The agent refuses: a process uses GPU 0.
    t.close(
        "r1-n1",
        1,
        CommandResult::Busy {
            gpus: vec![BusyGpu {
                index: 0,
                pids: vec![4242],
            }],
        },
    );
    let d = t.round(5);
    assert_eq!(d.metrics.commands[0], ("mig_agent", "busy"));
    let refused = d
        .events
        .iter()
        .find(|e| e.reason == "MigRepartitionRefused")
        .unwrap();
    assert!(
        refused.warning && refused.note.contains("4242"),
        "{}",
        refused.note
    );
    // Planned again in the same round: GPU 1, never GPU 0.
    let rec = t.command("r1-n1");
    assert_eq!(rec.generation, 2);
    assert_eq!(targets(&rec), [(1, 7)]);
    assert_eq!(power_ons(&d), 0);
}

#[test]
fn a_command_past_its_deadline_fails_the_node_and_its_demand_is_planned_again() {
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    t.round(1);
    t.world.commands[0].state = CommandState::Sent { at: t.now };
    let d = t.round(DEADLINE_S - 1);
    assert!(d.commands.close.is_empty());
    assert_ne!(t.stage("r1-n1"), Stage::Failed);
    let d = t.round(1);
    assert_eq!(d.commands.close.len(), 1, "{:?}", d.commands);
    assert!(matches!(
        &d.commands.close[0].2,
        CommandResult::Failed { reason } if reason.contains("did not complete within 120 s")
    ));
    assert_eq!(t.stage("r1-n1"), Stage::Failed);
    let why = t.decider.life("r1-n1").unwrap().reason.clone().unwrap();
    assert!(why.contains("MIG repartition"), "{why}");
    assert!(d
        .events
        .iter()
        .any(|e| e.reason == "MigRepartitionTimedOut" && e.warning));
    assert_eq!(d.metrics.commands[0], ("mig_agent", "timeout"));
    // Planned again: not on the failed node.
    assert!(d.commands.open.is_empty());
    assert_ne!(d.status.workloads[0].state, WorkloadState::Repartitioning);
    // Its agent still heartbeats: the node stays failed, and nothing is
    // sent to it again...
    for _ in 0..3 {
        let d = t.round(5);
        assert_eq!(t.stage("r1-n1"), Stage::Failed);
        assert!(d.commands.open.is_empty(), "{:?}", d.commands.open);
    }
    // ...until its agent reports again.
    t.world.reports.insert("r1-n1".into(), reported());
    t.round(5);
    t.round(1);
    assert!(
        matches!(t.stage("r1-n1"), Stage::Ready | Stage::Idle),
        "{:?}",
        t.stage("r1-n1")
    );
}

#[test]
fn after_a_restart_commands_closed_before_it_are_not_acted_on_again() {
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    t.round(1);
    let layout = first_layout(&t.command("r1-n1"));
    t.world
        .reports
        .insert("r1-n1".into(), with_layout(reported(), 0, &layout));
    t.close("r1-n1", 1, CommandResult::Done);
    let d = t.round(5);
    assert_eq!(d.metrics.commands, [("mig_agent", "done")]);
    // accordd restarts: a new decider, the store as it was.
    let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    t.decider = Decider::new(
        fleet,
        Settings {
            mode: Mode::Act,
            deadlines: Deadlines::default(),
            booking_s: 300,
            command_deadline_s: DEADLINE_S,
            mig_manager: MIG_MANAGER,
        },
        t.now,
    );
    t.world
        .reports
        .insert("r1-n1".into(), with_layout(reported(), 0, &layout));
    t.world.demand = Demand::default();
    for _ in 0..3 {
        let d = t.round(5);
        assert!(d.metrics.commands.is_empty(), "{:?}", d.metrics.commands);
        assert!(
            d.events.iter().all(|e| !e.reason.starts_with("Mig")),
            "{:?}",
            d.events
        );
    }
}

/// The handshake the twins play: 10 s of volume sync, three labels.
const MIG_MANAGER: accord_decide::MigManager = accord_decide::MigManager {
    sync_s: 10,
    label_tries: 3,
};

#[test]
fn gpu_operator_mode_sets_the_label_once_mig_manager_can_read_it_and_hands_the_agent_a_rediscovery_on_success(
) {
    let mut t = Twin::gpu_operator();
    t.world.demand = mig_pods(3);
    let d = t.round(1);
    let rec = t.command("r1-n1");
    assert_eq!(rec.action, CommandAction::Rediscover);
    assert!(!rec.deliver);
    let name = rec.mig_config.clone().unwrap();
    // The configuration goes into the ConfigMap under its three names (one
    // per label try), and no label names it yet: mig-manager reads the
    // ConfigMap through a volume the kubelet has not synced.
    let names: Vec<&str> = d
        .commands
        .mig_configs
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        names,
        [name.clone(), format!("{name}-r1"), format!("{name}-r2")]
    );
    assert!(d.commands.labels.is_empty(), "{:?}", d.commands.labels);
    // GPU 0 gets seven 1g.10gb; the other seven stay as they are (off).
    let entries = &d.commands.mig_configs[0].1;
    assert_eq!(entries.len(), 8);
    assert_eq!(entries[0].mig_devices["1g.10gb"], 7);
    assert!(entries[1..].iter().all(|e| !e.mig_enabled));
    assert!(d.commands.mig_configs.iter().all(|(_, e)| e == entries));
    // Seen written one round later; the label follows sync_s after that.
    let (label, rounds) = t.until_labelled("r1-n1");
    assert_eq!(label, name);
    assert_eq!(rounds, 1 + MIG_MANAGER.sync_s, "labelled too early or late");
    // mig-manager works on it, then says success: the agent is asked to
    // rediscover.
    t.mig_manager_shows("r1-n1", &name, "pending");
    let d = t.round(5);
    assert!(d.commands.release.is_empty() && d.commands.labels.is_empty());
    t.mig_manager_shows("r1-n1", &name, "success");
    let d = t.round(5);
    assert_eq!(d.commands.release, [("r1-n1".to_owned(), 1)]);
}

/// Configurations the ConfigMap does not show are written again every
/// round, and no label is set meanwhile (a write that failed).
#[test]
fn no_label_names_a_configuration_the_configmap_does_not_hold() {
    let mut t = Twin::gpu_operator();
    t.world.demand = mig_pods(3);
    t.round(1);
    for _ in 0..30 {
        // The writer fails: nothing is held.
        t.world.mig_configs_written.clear();
        let mut snap_now = t.round(1);
        assert!(snap_now.commands.labels.is_empty());
        assert_eq!(std::mem::take(&mut snap_now.commands.mig_configs).len(), 3);
    }
}

/// mig-manager says `failed`: the label moves to another name of the same
/// configuration (mig-manager acts only on a change of the label), and
/// after the last name the command is closed with the reason.
#[test]
fn a_failed_repartition_moves_the_label_so_mig_manager_acts_again() {
    let mut t = Twin::gpu_operator();
    t.world.demand = mig_pods(3);
    t.round(1);
    let name = t.command("r1-n1").mig_config.unwrap();
    let (label, _) = t.until_labelled("r1-n1");
    assert_eq!(label, name);
    // Failed at once (the configuration not in its file yet), no pending.
    t.mig_manager_shows("r1-n1", &name, "failed");
    let d = t.round(1);
    assert!(
        d.commands.labels.is_empty(),
        "a failed state is taken only once fresh"
    );
    let d = t.round(5);
    assert_eq!(
        d.commands.labels,
        [(
            "r1-n1".to_owned(),
            "nvidia.com/mig.config".to_owned(),
            format!("{name}-r1")
        )]
    );
    assert!(d.commands.close.is_empty(), "{:?}", d.commands.close);
    assert!(
        d.events.iter().any(|e| e.reason == "MigRepartitionRetried"
            && e.warning
            && e.note.contains("failed")
            && e.note.contains(&format!("{name}-r1"))),
        "{:?}",
        d.events
    );
    assert_eq!(d.metrics.commands, [("mig_gpu_operator", "retried")]);
    // mig-manager acts on the new label: pending, then success.
    t.mig_manager_shows("r1-n1", &format!("{name}-r1"), "pending");
    let d = t.round(1);
    assert!(d.commands.release.is_empty() && d.commands.labels.is_empty());
    t.mig_manager_shows("r1-n1", &format!("{name}-r1"), "success");
    let d = t.round(1);
    assert_eq!(d.commands.release, [("r1-n1".to_owned(), 1)]);

    // Another command that fails under all three names is closed.
    let mut t = Twin::gpu_operator();
    t.world.demand = mig_pods(3);
    t.round(1);
    let name = t.command("r1-n1").mig_config.unwrap();
    t.until_labelled("r1-n1");
    let mut shown = name.clone();
    let mut closed = None;
    for _ in 0..10 {
        t.mig_manager_shows("r1-n1", &shown, "failed");
        let d = t.round(6);
        if let Some((_, _, v)) = d.commands.labels.first() {
            shown = v.clone();
        }
        if let Some(c) = d.commands.close.first() {
            closed = Some(c.clone());
            break;
        }
    }
    assert_eq!(shown, format!("{name}-r2"));
    let (node, generation, result) = closed.expect("closed after the third label");
    assert_eq!((node.as_str(), generation), ("r1-n1", 1));
    let CommandResult::Failed { reason } = result else {
        panic!("{result:?}");
    };
    assert!(
        reason.contains("after 3 labels") && reason.contains("nvidia-mig-manager"),
        "{reason}"
    );
}

/// A repartition back to a layout the Node's label names already (a
/// reboot lost it): the label starts at the configuration's next name, or
/// mig-manager would never see a change.
#[test]
fn a_configuration_the_node_already_names_is_labelled_under_another_name() {
    let mut t = Twin::gpu_operator();
    t.world.demand = mig_pods(3);
    t.round(1);
    let name = t.command("r1-n1").mig_config.unwrap();
    // The Node shows that name already (from before the reboot).
    t.mig_manager_shows("r1-n1", &name, "success");
    let (label, _) = t.until_labelled("r1-n1");
    assert_eq!(label, format!("{name}-r1"));
}

#[test]
fn a_leftover_mig_manager_state_is_not_taken_for_the_new_configurations() {
    let mut t = Twin::gpu_operator();
    t.world.demand = mig_pods(3);
    t.round(1);
    let name = t.command("r1-n1").mig_config.unwrap();
    t.until_labelled("r1-n1");
    // The Node shows the new label, and still `success` from an earlier
    // configuration: not taken at once...
    let mut view = accord::truth::SchedulerView::default();
    view.labels.insert("nvidia.com/mig.config".into(), name);
    view.labels
        .insert("nvidia.com/mig.config.state".into(), "success".into());
    t.world.views.insert("r1-n1".into(), view);
    let d = t.round(1);
    assert!(d.commands.release.is_empty(), "{:?}", d.commands.release);
    let d = t.round(2);
    assert!(d.commands.release.is_empty(), "{:?}", d.commands.release);
    // ...only once it has had time to be replaced.
    let d = t.round(3);
    assert_eq!(d.commands.release, [("r1-n1".to_owned(), 1)]);
}

/// A pod holding device-plugin GPUs 0 and 2 (as the node's agent read the
/// kubelet's assignments; GPU 2 as a shared replica, `UUID::N`): those two
/// are held, so the repartition goes to GPU 1. Without the assignments
/// the planner takes the first free GPUs (0 and 1) and would repartition
/// GPU 2 under the running pod.
#[test]
fn the_gpus_the_kubelet_assigned_a_running_pod_are_never_repartitioned() {
    let bound = |ids: &[&str]| accord::demand::BoundPod {
        daemon_set: Default::default(),
        node_selector_keys: Vec::new(),
        csi_volumes: Vec::new(),
        node: "r1-n1".into(),
        namespace: "ml".into(),
        name: "train-0".into(),
        labels: Default::default(),
        requests: [("nvidia.com/gpu".to_owned(), "2".to_owned())].into(),
        devices: Vec::new(),
        node_agent: false,
        do_not_disrupt: false,
        device_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        relations: Default::default(),
    };
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    t.world
        .demand
        .bound
        .push(bound(&["GPU-00000000", "GPU-00000002::1"]));
    let d = t.round(1);
    assert_eq!(d.commands.open.len(), 1, "{:?}", d.status.actions);
    assert_eq!(targets(&t.command("r1-n1")), [(1, 7)]);

    // Without the agent's word: the first free ones, as before (the
    // assertion above fails without the assignments read).
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    t.world.demand.bound.push(bound(&[]));
    t.round(1);
    assert_eq!(targets(&t.command("r1-n1")), [(2, 7)]);
}

/// A finished repartition is capacity for the plan at once, but its
/// workloads are Placed only once the Node shows the new devices (the
/// device plugin republished): until then the pods could not bind, and
/// a ProvisioningRequest must not say Provisioned.
#[test]
fn a_repartition_is_placed_only_once_the_node_shows_its_devices() {
    let view = |pairs: &[(&str, &str)]| accord::truth::SchedulerView {
        allocatable: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    };
    let mut t = Twin::new();
    t.world
        .views
        .insert("r1-n1".into(), view(&[("nvidia.com/gpu", "8")]));
    t.round(1);
    t.world.demand = mig_pods(3);
    t.round(1);
    let rec = t.command("r1-n1");
    let layout = first_layout(&rec);
    t.world
        .reports
        .insert("r1-n1".into(), with_layout(reported(), 0, &layout));
    t.close("r1-n1", 1, CommandResult::Done);
    // Done, but the Node still advertises 8 whole GPUs and no MIG device.
    for _ in 0..3 {
        let d = t.round(5);
        assert!(d.commands.open.is_empty(), "{:?}", d.commands.open);
        assert_eq!(power_ons(&d), 0);
        assert_eq!(d.status.workloads[0].state, WorkloadState::Repartitioning);
    }
    // The device plugin republished.
    t.world.views.insert(
        "r1-n1".into(),
        view(&[("nvidia.com/gpu", "7"), ("nvidia.com/mig-1g.10gb", "7")]),
    );
    let d = t.round(5);
    assert_eq!(d.status.workloads[0].state, WorkloadState::Placed);
    assert!(d.commands.open.is_empty());
}

/// Through the agent on a node the GPU Operator serves, as mig-manager
/// does it: the operands' deploy labels are paused (`false` stays
/// `false`), the agent is handed the command only once the device
/// plugin's pod is gone, and after the repartition the paused labels are
/// set back to `true`, so the device plugin and GFD start again and
/// publish the new devices.
#[test]
fn the_gpu_operators_operands_are_paused_around_an_agent_repartition() {
    const PLUGIN: &str = "nvidia.com/gpu.deploy.device-plugin";
    const GFD: &str = "nvidia.com/gpu.deploy.gpu-feature-discovery";
    const DCGM: &str = "nvidia.com/gpu.deploy.dcgm";
    const PAUSED: &str = "paused-for-mig-change";
    let plugin_pod = accord::demand::BoundPod {
        daemon_set: Default::default(),
        node_selector_keys: Vec::new(),
        csi_volumes: Vec::new(),
        node: "r1-n1".into(),
        namespace: "gpu-operator".into(),
        name: "nvidia-device-plugin-daemonset-x1".into(),
        labels: [(
            "app".to_owned(),
            "nvidia-device-plugin-daemonset".to_owned(),
        )]
        .into(),
        requests: Default::default(),
        devices: Vec::new(),
        node_agent: true,
        do_not_disrupt: false,
        device_ids: Vec::new(),
        relations: Default::default(),
    };
    let labels_of = |d: &Decision| -> Vec<(String, String)> {
        d.commands
            .labels
            .iter()
            .filter(|(n, _, _)| n == "r1-n1")
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut t = Twin::new();
    let mut view = accord::truth::SchedulerView::default();
    for (k, v) in [(PLUGIN, "true"), (GFD, "true"), (DCGM, "false")] {
        view.labels.insert(k.into(), v.into());
    }
    t.world.views.insert("r1-n1".into(), view.clone());
    t.world.demand = mig_pods(3);
    t.world.demand.bound.push(plugin_pod);
    let d = t.round(1);
    let rec = t.command("r1-n1");
    assert!(
        !rec.deliver,
        "handed to the agent before its operands are paused"
    );
    let mut paused = labels_of(&d);
    paused.sort();
    assert_eq!(
        paused,
        [
            (PLUGIN.to_owned(), PAUSED.to_owned()),
            (GFD.to_owned(), PAUSED.to_owned())
        ]
    );
    // The Node shows them paused; the device plugin's pod still runs.
    view.labels.insert(PLUGIN.into(), PAUSED.into());
    view.labels.insert(GFD.into(), PAUSED.into());
    t.world.views.insert("r1-n1".into(), view.clone());
    let d = t.round(2);
    assert!(
        d.commands.release.is_empty(),
        "released while the device plugin runs"
    );
    assert!(labels_of(&d).is_empty(), "{:?}", labels_of(&d));
    // Its pod is gone: the agent may have the command.
    t.world.demand.bound.clear();
    let d = t.round(2);
    assert_eq!(d.commands.release, [("r1-n1".to_owned(), 1)]);
    t.world.commands[0].deliver = true;
    // Done: the paused labels are set back to true, dcgm stays false.
    let layout = first_layout(&rec);
    t.world
        .reports
        .insert("r1-n1".into(), with_layout(reported(), 0, &layout));
    t.close("r1-n1", 1, CommandResult::Done);
    let d = t.round(2);
    let mut restored = labels_of(&d);
    restored.sort();
    assert_eq!(
        restored,
        [
            (PLUGIN.to_owned(), "true".to_owned()),
            (GFD.to_owned(), "true".to_owned())
        ]
    );
    // Said again only after RELABEL_S while the Node does not show it.
    assert!(labels_of(&t.round(2)).is_empty());
    assert_eq!(labels_of(&t.round(30)).len(), 2);
}

/// The DRA driver publishes r1-n1's GPUs with dynamic MIG (NVIDIA's
/// `DynamicMIG` gate: every MIG placement a device drawing on its GPU's
/// shared counters, `cmd/gpu-kubelet-plugin/partitions.go`; played here by
/// Accord's own publication of such a GPU, which follows it), though the
/// fleet file does not declare `mig_dynamic`: claims for MIG partitions
/// are placed on the driver's counters, and no MIG request (claim or
/// device-plugin resource) ever repartitions those GPUs.
#[test]
fn with_dynamic_mig_partitions_are_planned_on_the_drivers_counters_and_never_repartitioned() {
    let mut t = Twin::new();
    let published = accord::device::devices_from_hardware(&reported(), None, true);
    assert!(published.gpus.iter().all(|g| g.driver_partitions));
    let view = t.world.views.entry("r1-n1".into()).or_default();
    // Its partitions but the 1g.10gb ones (what the driver offers is its
    // choice): a repartition could make those; Accord must not.
    view.devices = Some(
        published
            .devices
            .iter()
            .filter(|d| d.mig_profile() != Some("1g.10gb"))
            .cloned()
            .collect(),
    );
    view.counters = published.counters.clone();
    // Three 3g.40gb partitions by claim, and pods asking for 1g.10gb.
    t.world.demand = Demand::from_json(
        &serde_json::json!({"workloads": [
            {"name": "halves", "namespace": "ml", "pod_sets": [{"name": "p", "count": 3,
                "pod": {"requests": {"cpu": "1"}, "claims": [{"name": "mig", "requests": [
                    {"name": "mig", "exactly": {"device_class": "mig.nvidia.com",
                        "selectors": ["device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"]}}]}]}}]},
            {"name": "infer", "namespace": "ml", "pod_sets": [{"name": "w", "count": 3,
                "pod": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-1g.10gb": "1"}}}]}
        ]})
        .to_string(),
        "demand.json",
    )
    .unwrap();
    let mut said = Vec::new();
    for _ in 0..5 {
        let d = t.round(1);
        said.extend(
            d.said
                .added
                .iter()
                .filter(|k| k.kind == "driver_partitions")
                .cloned(),
        );
        assert!(d.commands.open.is_empty(), "{:?}", d.commands.open);
        assert!(
            !d.status
                .actions
                .iter()
                .any(|a| matches!(a, Action::ReconfigureMig { .. })),
            "{:?}",
            d.status.actions
        );
        let halves = d
            .status
            .workloads
            .iter()
            .find(|w| w.workload == "ml/halves")
            .unwrap();
        assert_eq!(halves.state, WorkloadState::Placed, "{halves:?}");
        assert_eq!(halves.nodes, ["r1-n1"], "{halves:?}");
    }
    assert!(t.world.commands.is_empty(), "{:?}", t.world.commands);
    // Said once, naming the node and its GPUs.
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].object, "r1-n1");
    assert_eq!(said[0].what, "GPU 0, 1, 2, 3, 4, 5, 6, 7");
}

/// A running pod that asked for `nvidia.com/gpu: 1` where a DeviceClass
/// maps that resource to DRA (`extendedResourceName`): kube-scheduler made
/// it a claim, named only in the pod's `status.extendedResourceClaimStatus`
/// (the pod and claim as kubernetes v1.37's
/// `extendeddynamicresources.go` writes them), allocated GPU 1. That GPU
/// is held, and only it: the repartition takes GPU 0. Read as a device
/// plugin's GPU instead, the pod would be guessed on GPU 0 and GPU 1
/// repartitioned under it.
#[test]
fn a_gpu_held_through_a_dra_backed_extended_resource_is_never_repartitioned() {
    let manifests = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  namespace: ml
  name: train-0-extended-resources-x7k2p
  annotations: {resource.kubernetes.io/extended-resource-claim: "true"}
spec:
  devices:
    requests:
    - name: container-0-request-0
      exactly: {deviceClassName: gpu.nvidia.com, allocationMode: ExactCount, count: 1}
status:
  allocation:
    devices:
      results:
      - {request: container-0-request-0, driver: gpu.nvidia.com, pool: r1-n1, device: gpu-1}
---
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: train-0, uid: u1}
spec:
  nodeName: r1-n1
  containers:
  - name: c
    image: x
    resources: {limits: {nvidia.com/gpu: 1}, requests: {cpu: 1, memory: 1Gi}}
status:
  phase: Running
  extendedResourceClaimStatus:
    resourceClaimName: train-0-extended-resources-x7k2p
    requestMappings:
    - {containerName: c, resourceName: nvidia.com/gpu, requestName: container-0-request-0}
"#;
    let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let options = accord_kube::Options::for_topology(&fleet.topology);
    let m = accord_kube::Manifests::parse(manifests, "world.yaml").unwrap();
    let translated = accord_kube::translate(&m, &options);
    let bound = &translated.demand.bound;
    assert_eq!(bound.len(), 1, "{translated:?}");
    assert_eq!(bound[0].devices.len(), 1, "{:?}", bound[0]);
    assert_eq!(bound[0].devices[0].name, "gpu-1");
    // The claim serves the resource: no device-plugin GPU besides it.
    assert!(
        !bound[0].requests.contains_key("nvidia.com/gpu"),
        "{:?}",
        bound[0].requests
    );
    let mut t = Twin::new();
    t.world.demand = mig_pods(3);
    t.world.demand.bound = bound.clone();
    for _ in 0..3 {
        t.round(1);
    }
    assert_eq!(targets(&t.command("r1-n1")), [(0, 7)]);
}
