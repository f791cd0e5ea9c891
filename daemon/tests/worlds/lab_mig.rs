//! End to end in the lab, with the real accordd: MIG demand is met by
//! repartitioning an idle GPU of a node that is on, through its agent or
//! through the GPU Operator's mig-manager (the lab plays both on the
//! machine's replayed NVML), and the scheduler sees the new devices
//! because the lab's kubelet and device plugin republish them from the
//! machine's new state. Nothing is powered on for it.

use std::path::Path;
use std::time::Duration;

use accord::hardware::MigMode;
use accord_api::agent::{CommandAction, CommandResult, CommandState};
use accord_api::control::ControlStatus;
use accord_lab::Lab;

use crate::support;
use support::lab::*;

/// r1-n1 is on (it ran something earlier), replaying 8 x H100 with MIG
/// off; r1-n2 is dark.
const FLEET: &str = r#"
[fleet.policy]
idle_power_off_after_s = 600

[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
power_kw = 10.2

[[fleet.racks]]
name = "r1"

[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
power = "on"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
"#;

/// `n` pods asking for one `1g.10gb` MIG device each: no GPU has one.
fn mig_pods(name: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "---\n{{apiVersion: v1, kind: Pod, metadata: {{namespace: ml, name: {name}-{i}}}, spec: {{containers: [{{name: c, image: c, resources: {{requests: {{cpu: 100m, memory: 1Gi}}, limits: {{nvidia.com/mig-1g.10gb: \"1\"}}}}}}]}}}}\n"
            )
        })
        .collect()
}

/// Starts the lab and waits until accordd plans r1-n1 with its agent's
/// report (so the demand, released next, meets the machine as it is).
async fn start_mig(test: &str, settings: &str, fleet: &str) -> Lab {
    start_mig_with(test, settings, fleet, &[]).await
}

/// [`start_mig`] with accordd's `[control]` keys `control` besides the
/// tests' own.
async fn start_mig_with(
    test: &str,
    settings: &str,
    fleet: &str,
    control: &[(&str, toml::Value)],
) -> Lab {
    let mut s = scenario(settings, fleet, &[("infer", mig_pods("infer", 3), 600_000)]);
    for (k, v) in control {
        s.control.insert((*k).to_owned(), v.clone());
    }
    start_and_release(test, s, "infer").await
}

/// Starts the lab of scenario `s` and waits until accordd plans r1-n1 with
/// its agent's report, then releases submission `name` (so the demand
/// meets the machine as it is).
async fn start_and_release(test: &str, s: accord_lab::Scenario, name: &str) -> Lab {
    let lab = start(test, s).await;
    lab.wait_status(
        "r1-n1 up and planned with its agent's report",
        Duration::from_secs(60),
        |s| {
            s.nodes.iter().any(|n| {
                n.name == "r1-n1"
                    && n.model == accord_api::control::ModelSource::Reported
                    && matches!(
                        n.stage,
                        accord::lifecycle::Stage::Idle | accord::lifecycle::Stage::Ready
                    )
            })
        },
    )
    .await
    .unwrap();
    lab.release(name).unwrap();
    lab
}

/// The Node's allocatable `nvidia.com/mig-1g.10gb`.
fn mig_allocatable(lab: &Lab, node: &str) -> String {
    lab.api.get("v1", "Node", "", node).unwrap()["status"]["allocatable"]["nvidia.com/mig-1g.10gb"]
        .as_str()
        .unwrap_or("0")
        .to_owned()
}

/// What must hold once the pods are bound, whoever repartitioned: bound on
/// r1-n1, nothing powered on, one repartition, never proposed again.
async fn bound_on_the_repartitioned_node(lab: &Lab, kind: &str) -> ControlStatus {
    bound(lab, "infer", Duration::from_secs(120)).await;
    assert_eq!(nodes_of(lab, "ml/infer-"), set(&["r1-n1"]));
    assert!(
        lab.nodes_powered_on().is_empty(),
        "{:?}",
        lab.nodes_powered_on()
    );
    assert!(
        lab.proxy.log().iter().all(|l| !l.power_on),
        "a power-on Reset was sent"
    );
    assert_eq!(lab.emulator_resets("r1-n2"), 0);
    // The scheduler saw the new devices: the kubelet stand-in republished
    // them from the machine's new state.
    assert_eq!(mig_allocatable(lab, "r1-n1"), "7");
    // The pods can bind before accordd's next round absorbs the outcome
    // (and, with the GPU Operator, before the agent's rediscovery).
    let st = lab
        .wait_status(
            "r1-n1's command done in accordd's status",
            Duration::from_secs(60),
            |s| {
                s.commands.iter().any(|c| {
                    c.node == "r1-n1"
                        && matches!(
                            &c.state,
                            CommandState::Closed {
                                result: CommandResult::Done,
                                ..
                            }
                        )
                })
            },
        )
        .await
        .unwrap();
    // Accord does not propose the same repartition again: a few rounds
    // later the command is still the first, and no action is planned.
    let st = rounds_after(lab, &st, 4).await;
    assert_eq!(st.commands.len(), 1, "{:?}", st.commands);
    let c = &st.commands[0];
    assert_eq!((c.node.as_str(), c.generation), ("r1-n1", 1), "{c:?}");
    assert!(
        matches!(
            &c.state,
            CommandState::Closed {
                result: CommandResult::Done,
                ..
            }
        ),
        "{c:?}"
    );
    assert!(st.actions.is_empty(), "{:?}", st.actions);
    let m = metrics(lab).await;
    for result in ["issued", "done"] {
        let line = format!("accord_actions_total{{kind=\"{kind}\",result=\"{result}\"}} 1");
        assert!(m.contains(&line), "no `{line}` in\n{m}");
    }
    let events = lab.api.list("events.k8s.io/v1", "Event");
    for reason in ["MigRepartitioning", "MigRepartitioned"] {
        assert!(
            events
                .iter()
                .any(|e| e["reason"] == reason && e["regarding"]["name"] == "r1-n1"),
            "no {reason} event: {events:#?}"
        );
    }
    st
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gpu_is_repartitioned_through_the_agent_and_the_pods_bind_to_its_instances() {
    let _slot = shared_world().await;
    let lab = start_mig("mig_through_the_agent", QUICK, FLEET).await;
    let st = bound_on_the_repartitioned_node(&lab, "mig_agent").await;
    let c = &st.commands[0];
    let CommandAction::ApplyMig { gpus } = &c.action else {
        panic!("{c:?}");
    };
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].layout.len(), 7, "{gpus:?}");
    // The machine itself: that GPU is partitioned, once.
    let machine = lab.machine_gpus("r1-n1").expect("r1-n1 is on");
    assert_eq!(machine.repartitions(), 1);
    let snap = machine.snapshot();
    let gpu = snap
        .devices
        .iter()
        .find(|d| d.index == gpus[0].index)
        .unwrap();
    let mig = gpu.mig.as_ref().unwrap();
    assert_eq!(mig.current_mode, MigMode::Enabled);
    assert_eq!(mig.layout().unwrap(), gpus[0].layout);
    let summary = lab.summary(None);
    assert_eq!(
        summary.mig_repartitions.get("agent"),
        Some(&1),
        "{}",
        summary.render()
    );
    assert!(
        summary.render().contains("MIG repartitions"),
        "{}",
        summary.render()
    );
}

/// The fleet with `policy.mig_via = "gpu-operator"`.
fn operator_fleet() -> String {
    FLEET.replace(
        "idle_power_off_after_s = 600",
        "idle_power_off_after_s = 600\nmig_via = \"gpu-operator\"",
    )
}

/// GPU Operator v26 with its defaults plus accordd's ConfigMap named in
/// the ClusterPolicy (`spec.migManager.config.name`), and a mig-manager
/// that reads it through a volume 2 s behind the API and acts only when
/// the label changes (`lab/src/mig_manager.rs`). Its first reconfiguration
/// fails: accordd moves the label to another name of the same
/// configuration, mig-manager acts again, and the pods bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gpu_operator_the_label_follows_the_synced_configmap_and_a_failure_is_retried_under_a_new_label(
) {
    let _slot = shared_world().await;
    let settings = format!("{QUICK}\n[lab.gpu_operator]\nfail_first = 1\n");
    let lab = start_mig("mig_through_the_gpu_operator", &settings, &operator_fleet()).await;
    let st = bound_on_the_repartitioned_node(&lab, "mig_gpu_operator").await;
    let c = &st.commands[0];
    assert_eq!(c.action, CommandAction::Rediscover);
    let name = c.mig_config.clone().expect("a mig-parted configuration");
    // The second label, after mig-manager's failure under the first.
    let node = lab.api.get("v1", "Node", "", "r1-n1").unwrap();
    let labels = &node["metadata"]["labels"];
    assert_eq!(
        labels["nvidia.com/mig.config"],
        format!("{name}-r1").as_str(),
        "{labels}"
    );
    assert_eq!(labels["nvidia.com/mig.config.state"], "success", "{labels}");
    let events = lab.api.list("events.k8s.io/v1", "Event");
    assert!(
        events.iter().any(|e| e["reason"] == "MigRepartitionRetried"
            && e["type"] == "Warning"
            && e["regarding"]["name"] == "r1-n1"),
        "{events:#?}"
    );
    // Why, as mig-manager's log says it.
    assert!(
        events.iter().any(|e| e["reason"] == "MigManagerFailed"
            && e["regarding"]["name"] == "r1-n1"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains(&name) && n.contains("the lab's injected failure"))),
        "{events:#?}"
    );
    let m = metrics(&lab).await;
    assert!(
        m.contains("accord_actions_total{kind=\"mig_gpu_operator\",result=\"retried\"} 1"),
        "{m}"
    );
    // accordd's own ConfigMap (the one the ClusterPolicy names), created
    // by it with NVIDIA's stock configurations and every name of its own.
    let cm = lab
        .api
        .get(
            "v1",
            "ConfigMap",
            "gpu-operator",
            "accord-mig-parted-config",
        )
        .expect("accordd's ConfigMap");
    let file = cm["data"]["config.yaml"].as_str().unwrap_or_default();
    for n in [name.clone(), format!("{name}-r1"), "all-disabled".into()] {
        assert!(file.contains(&format!("{n}:")), "no {n} in {file}");
    }
    // The operator's own ConfigMap is not touched.
    let requests = lab
        .api
        .fake()
        .expect("these tests run on the fake API")
        .requests();
    assert!(
        !requests
            .iter()
            .any(|r| !r.starts_with("GET") && r.contains("default-mig-parted-config")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("PATCH /api/v1/nodes/r1-n1")),
        "{requests:?}"
    );
    let summary = lab.summary(None);
    assert_eq!(
        summary.mig_repartitions.get("gpu-operator"),
        Some(&1),
        "{}",
        summary.render()
    );
    assert_eq!(
        summary.mig_repartitions.get("agent"),
        None,
        "{}",
        summary.render()
    );
}

/// The same world with accordd's old handshake (the ConfigMap and the
/// label in one pass, one label per command): mig-manager reads the label
/// before its volume holds the configuration and fails, and nothing is
/// repartitioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gpu_operator_a_label_set_with_the_configmap_write_fails() {
    let _slot = shared_world().await;
    let settings = format!("{QUICK}\n[lab.gpu_operator]\nvolume_sync_ms = 15000\n");
    let lab = start_mig_with(
        "mig_gpu_operator_single_pass",
        &settings,
        &operator_fleet(),
        &[
            ("mig_config_sync_s", toml::Value::from(0)),
            ("mig_label_tries", toml::Value::from(1)),
        ],
    )
    .await;
    let st = lab
        .wait_status(
            "r1-n1's first command closed",
            Duration::from_secs(90),
            |s| {
                s.commands
                    .iter()
                    .any(|c| c.node == "r1-n1" && c.generation == 1 && !c.is_open())
            },
        )
        .await
        .unwrap();
    let c = st.commands.iter().find(|c| c.node == "r1-n1").unwrap();
    let CommandState::Closed {
        result: CommandResult::Failed { reason },
        ..
    } = &c.state
    else {
        panic!("{c:?}");
    };
    assert!(
        reason.contains("nvidia.com/mig.config.state=failed"),
        "{reason}"
    );
    let machine = lab.machine_gpus("r1-n1").expect("r1-n1 is on");
    assert_eq!(machine.repartitions(), 0);
    // Why: its volume did not hold the configuration yet (the event is
    // written by accordd's writer after the round that closed it).
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = lab.api.list("events.k8s.io/v1", "Event");
        if events.iter().any(|e| {
            e["reason"] == "MigManagerFailed"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("(its volume): missing"))
        }) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no MigManagerFailed event: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_gpu_is_never_repartitioned_the_agent_refuses_and_accordd_plans_again() {
    let _slot = shared_world().await;
    // A process Kubernetes does not know uses r1-n1's GPU 0, the one the
    // planner would take first.
    let settings = format!("{QUICK}\n[lab.machines.r1-n1]\nbusy_gpus = [0]\n");
    let lab = start_mig("mig_busy_gpu", &settings, FLEET).await;
    bound(&lab, "infer", Duration::from_secs(120)).await;
    assert_eq!(nodes_of(&lab, "ml/infer-"), set(&["r1-n1"]));
    assert!(lab.nodes_powered_on().is_empty());
    // The pods can bind before accordd's next round absorbs the outcome.
    let st = lab
        .wait_status(
            "r1-n1's second command done in accordd's status",
            Duration::from_secs(30),
            |s| {
                s.commands.iter().any(|c| {
                    c.generation == 2
                        && matches!(
                            &c.state,
                            CommandState::Closed {
                                result: CommandResult::Done,
                                ..
                            }
                        )
                })
            },
        )
        .await
        .unwrap();
    let c = &st.commands[0];
    assert_eq!(c.generation, 2, "{c:?}");
    let CommandAction::ApplyMig { gpus } = &c.action else {
        panic!("{c:?}");
    };
    assert!(gpus.iter().all(|g| g.index != 0), "{gpus:?}");
    // GPU 0 was never touched.
    let machine = lab.machine_gpus("r1-n1").expect("r1-n1 is on");
    let snap = machine.snapshot();
    let gpu0 = snap.devices.iter().find(|d| d.index == 0).unwrap();
    assert_eq!(gpu0.mig.as_ref().unwrap().current_mode, MigMode::Disabled);
    assert!(gpu0.mig.as_ref().unwrap().gpu_instances.is_empty());
    assert_eq!(machine.repartitions(), 1);
    let events = lab.api.list("events.k8s.io/v1", "Event");
    assert!(
        events.iter().any(|e| e["reason"] == "MigRepartitionRefused"
            && e["type"] == "Warning"
            && e["note"].as_str().is_some_and(|n| n.contains("in use"))),
        "{events:#?}"
    );
    let m = metrics(&lab).await;
    assert!(
        m.contains("accord_actions_total{kind=\"mig_agent\",result=\"busy\"} 1"),
        "{m}"
    );
}

/// The slice's MIG devices on `node` now (the DRA driver's).
fn slice_mig_devices(lab: &Lab, node: &str) -> usize {
    lab.api
        .list("resource.k8s.io/v1", "ResourceSlice")
        .into_iter()
        .filter(|o| o["spec"]["nodeName"] == node)
        .flat_map(|o| o["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .filter(|d| d["name"].as_str().is_some_and(|n| n.contains("-mig-")))
        .count()
}

/// Through the agent on a machine the GPU Operator serves (the lab's
/// stand-ins: the device plugin, the DRA driver's kubelet plugin and a
/// third party's GPU client each run while their Node label
/// `nvidia.com/gpu.deploy.*` is `true`, and publish what they enumerated
/// only when they start, the DRA driver 3 s after; the operator's
/// validator pods), for a ProvisioningRequest of three MIG pods: accordd
/// pauses the three labels, hands the agent the repartition once their
/// pods are gone, deletes the CUDA and plugin validators before and the
/// operator's validator after, and sets the labels back to `true`. The
/// request is Provisioned only once the restarted DRA driver's slice shows
/// the new devices, not when the device plugin already does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_gpu_operator_node_its_operands_are_paused_around_the_agents_repartition_and_its_slices_show_it_first(
) {
    let _slot = shared_world().await;
    let settings = format!("{QUICK}\n[lab.machines.r1-n1]\ngpu_operator_operands = true\n");
    let request = "{apiVersion: v1, kind: PodTemplate, metadata: {namespace: ml, name: infer-main}, template: {spec: {containers: [{name: c, image: c, resources: {requests: {cpu: 100m, memory: 1Gi}, limits: {nvidia.com/mig-1g.10gb: \"1\"}}}]}}}\n---\n\
        {apiVersion: autoscaling.x-k8s.io/v1, kind: ProvisioningRequest, metadata: {namespace: ml, name: infer}, \
        spec: {provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io, podSets: [{podTemplateRef: {name: infer-main}, count: 3}]}}\n";
    let lab = start_and_release(
        "mig_agent_operator_operands",
        scenario(&settings, FLEET, &[("infer", request.to_owned(), 600_000)]),
        "infer",
    )
    .await;
    // Until Provisioned: never before the DRA driver's slice shows the
    // new devices, and seen waiting while the device plugin shows them
    // and the slice does not yet.
    let end = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut waited_for_the_slice = false;
    loop {
        assert!(
            tokio::time::Instant::now() < end,
            "never Provisioned: {}",
            lab.daemon_report()
        );
        let provisioned = super::lab::condition(&lab, "ml", "infer", "Provisioned")
            .is_some_and(|(status, _)| status == "True");
        let shown = slice_mig_devices(&lab, "r1-n1");
        if provisioned {
            assert_eq!(
                shown, 7,
                "Provisioned before the DRA driver's slice shows the new devices"
            );
            break;
        }
        if shown == 0 && mig_allocatable(&lab, "r1-n1") == "7" {
            waited_for_the_slice = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        waited_for_the_slice,
        "the device plugin never showed the devices before the slice did"
    );
    assert!(
        lab.nodes_powered_on().is_empty(),
        "{:?}",
        lab.nodes_powered_on()
    );
    assert_eq!(
        lab.machine_gpus("r1-n1")
            .expect("r1-n1 is on")
            .repartitions(),
        1
    );
    for app in [
        accord_lab::DEVICE_PLUGIN_APP,
        accord_lab::DRA_DRIVER_APP,
        accord_lab::CLIENT_APP,
    ] {
        let seen = lab.operand("r1-n1", app);
        assert_eq!(
            (seen.starts, seen.stops, seen.changed_under_it),
            (2, 1, 0),
            "{app}: started at the boot and after the repartition, stopped once before it, and the GPUs never changed under it"
        );
    }
    let node = lab.api.get("v1", "Node", "", "r1-n1").unwrap();
    for label in ["device-plugin", "dra-driver", "client"] {
        assert_eq!(
            node["metadata"]["labels"][format!("nvidia.com/gpu.deploy.{label}")],
            "true",
            "{}",
            node["metadata"]["labels"]
        );
    }
    // accordd paused them, then set them going again (its own writes),
    // and deleted the validators as mig-manager does.
    let requests = lab
        .api
        .fake()
        .expect("these tests run on the fake API")
        .requests();
    let patches = requests
        .iter()
        .filter(|r| r.starts_with("PATCH /api/v1/nodes/r1-n1"))
        .count();
    assert!(patches >= 2, "{patches} Node patches");
    for v in ["nvidia-cuda-validator", "nvidia-operator-validator"] {
        let path = format!("DELETE /api/v1/namespaces/gpu-operator/pods/{v}-r1-n1");
        assert!(
            requests.iter().any(|r| r.starts_with(&path)),
            "no {path} in {requests:?}"
        );
    }
}

/// r1-n1's DRA driver runs with dynamic MIG (the lab's stand-in publishes
/// each GPU's MIG placements as devices drawing on its shared counters, as
/// NVIDIA's `partitions.go` does), and the fleet file does not say so:
/// pods claiming `3g.40gb` partitions are planned on those counters on
/// r1-n1, Accord says the driver partitions those GPUs, and it never
/// repartitions one nor powers anything on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_dynamic_mig_dra_driver_partitions_are_planned_on_its_counters_and_nothing_is_repartitioned(
) {
    let _slot = shared_world().await;
    let settings = format!("{QUICK}\n[lab.machines.r1-n1]\ndra_dynamic_mig = true\n");
    let claims: String = (0..3)
        .map(|i| {
            format!(
                "---\n{{apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {{namespace: ml, name: half-{i}}}, spec: {{devices: {{requests: [{{name: mig, exactly: {{deviceClassName: mig.nvidia.com, selectors: [{{cel: {{expression: \"device.attributes['gpu.nvidia.com'].profile == '3g.40gb'\"}}}}]}}}}]}}}}}}\n\
                 ---\n{{apiVersion: v1, kind: Pod, metadata: {{namespace: ml, name: half-{i}}}, spec: {{resourceClaims: [{{name: mig, resourceClaimName: half-{i}}}], containers: [{{name: c, image: c, resources: {{requests: {{cpu: 100m, memory: 1Gi}}, claims: [{{name: mig}}]}}}}]}}}}\n"
            )
        })
        .collect();
    let lab = start_and_release(
        "mig_dynamic_dra_driver",
        scenario(&settings, FLEET, &[("halves", claims, 600_000)]),
        "halves",
    )
    .await;
    let st = lab
        .wait_status("the three claims planned", Duration::from_secs(60), |s| {
            (0..3).all(|i| {
                s.workloads.iter().any(|w| {
                    w.workload == format!("ml/half-{i}")
                        && w.state == accord_api::control::WorkloadState::Placed
                        && w.nodes == ["r1-n1"]
                })
            })
        })
        .await
        .unwrap();
    let st = rounds_after(&lab, &st, 3).await;
    assert!(st.commands.is_empty(), "{:?}", st.commands);
    assert!(
        !st.actions
            .iter()
            .any(|a| matches!(a, accord::plan::Action::ReconfigureMig { .. })),
        "{:?}",
        st.actions
    );
    assert!(
        lab.nodes_powered_on().is_empty(),
        "{:?}",
        lab.nodes_powered_on()
    );
    assert_eq!(
        lab.machine_gpus("r1-n1")
            .expect("r1-n1 is on")
            .repartitions(),
        0
    );
    // The slices as NVIDIA's driver publishes them: counters apart.
    let slices = lab.api.list("resource.k8s.io/v1", "ResourceSlice");
    assert!(
        slices.iter().any(|s| s["spec"]["sharedCounters"]
            .as_array()
            .is_some_and(|c| c.len() == 8)),
        "{slices:#?}"
    );
    let log = std::fs::read_to_string(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("lab-mig_dynamic_dra_driver.accordd.log"),
    )
    .unwrap();
    assert!(
        log.contains(
            "node r1-n1: the NVIDIA DRA driver partitions GPU 0, 1, 2, 3, 4, 5, 6, 7 on allocation"
        ),
        "{log}"
    );
}
