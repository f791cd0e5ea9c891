//! CapacityBuffers on the upstream control plane (v1.37, the CRD from
//! `deploy/`): an active buffer keeps its nodes powered on and Ready, work
//! that comes takes them at once and the buffer is refilled, a deleted
//! buffer's nodes go dark after the idle time; a standby buffer's node is
//! made ready (BIOS profile staged and verified, agent report fresh) and
//! kept off. Every wait has a deadline and says what it waited for.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord_lab::{Lab, Scenario};
use serde_json::Value;

use crate::support;

const CB: &str = "autoscaling.x-k8s.io/v1beta1";

/// Five dark 8-GPU nodes in one rack; 20 s idle time.
const BUFFERS: &str = r#"
[lab]
kube_version = "1.37"
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 400
[lab.bios_profiles.gpu-perf]
description = "steady clocks: turbo off, performance profile"
attributes = { ProcTurboMode = "Disabled", SysProfile = "PerfOptimized" }
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.policy]
idle_power_off_after_s = 20
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
max_concurrent_power_ons = 8
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n3"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n4"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n5"
rack = "r1"
profile = "h100"
bios_profile = "gpu-perf"
[[submit]]
name = "buffer"
run_ms = 600000
manifests = '''
{apiVersion: v1, kind: PodTemplate, metadata: {namespace: ml, name: whole-node}, template: {spec: {nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, containers: [{name: c, image: c, resources: {requests: {cpu: "1", memory: 64Gi}, limits: {nvidia.com/gpu: "8"}}}]}}}
---
{apiVersion: autoscaling.x-k8s.io/v1beta1, kind: CapacityBuffer, metadata: {namespace: ml, name: spare}, spec: {podTemplateRef: {name: whole-node}, replicas: 2}}
'''
[[submit]]
name = "job"
run_ms = 600000
manifests = '''
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: job-0}, spec: {nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, containers: [{name: c, image: c, resources: {requests: {cpu: "1", memory: 64Gi}, limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: job-1}, spec: {nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, containers: [{name: c, image: c, resources: {requests: {cpu: "1", memory: 64Gi}, limits: {nvidia.com/gpu: "8"}}}]}}
'''
[[submit]]
name = "standby"
run_ms = 600000
manifests = '''
{apiVersion: autoscaling.x-k8s.io/v1beta1, kind: CapacityBuffer, metadata: {namespace: ml, name: standby}, spec: {podTemplateRef: {name: whole-node}, replicas: 1, provisioningStrategy: accord.dev/standby-capacity}}
'''
"#;

/// A buffer's condition `type_` as (status, reason), if it has one.
fn condition(buffer: &Value, type_: &str) -> Option<(String, String)> {
    let c = buffer["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
    ))
}

/// Waits until `check` holds of buffer `ml/name` and the nodes on.
async fn wait_buffer(
    lab: &Lab,
    name: &str,
    what: &str,
    within: Duration,
    check: impl Fn(&Value, &BTreeSet<String>) -> bool,
) -> (Value, BTreeSet<String>) {
    let end = tokio::time::Instant::now() + within;
    loop {
        let buffer = lab
            .api
            .get(CB, "CapacityBuffer", "ml", name)
            .unwrap_or(Value::Null);
        let on = lab.nodes_on();
        if check(&buffer, &on) {
            return (buffer, on);
        }
        if lab.daemon_exited().is_some() {
            panic!("waiting for {what}: {}", lab.daemon_report());
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: not within {within:?}; nodes on {on:?}; buffer status {}; {}",
            buffer["status"],
            lab.daemon_report()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn fits(buffer: &Value) -> bool {
    condition(buffer, "Provisioning") == Some(("True".into(), "FitsExistingCapacity".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_buffer_keeps_nodes_ready_is_refilled_and_lets_them_go() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(BUFFERS, Path::new("buffers.toml")).unwrap();
    let lab = support::lab::start("upstream-buffers", s).await;

    // A buffer of 2 whole-node pods: 2 nodes powered on and Ready, and
    // its status as the upstream controller and autoscaler write it.
    lab.release("buffer").unwrap();
    let (buffer, held) = wait_buffer(
        &lab,
        "spare",
        "ml/spare Provisioning=True FitsExistingCapacity with 2 nodes on",
        Duration::from_secs(120),
        |b, on| fits(b) && on.len() == 2,
    )
    .await;
    let st = &buffer["status"];
    assert_eq!(st["replicas"], 2, "{st}");
    assert_eq!(st["podTemplateRef"]["name"], "whole-node", "{st}");
    assert_eq!(
        st["provisioningStrategy"], "buffer.x-k8s.io/active-capacity",
        "{st}"
    );
    assert_eq!(
        condition(&buffer, "ReadyForProvisioning"),
        Some(("True".into(), "Resolved".into()))
    );
    // Kept: not powered off past the idle time (20 s), the buffer unused.
    let st0 = support::lab::current_status(&lab).await;
    let later = lab
        .wait_status(
            "25 s of control rounds with the buffer held",
            Duration::from_secs(60),
            |s| s.at >= st0.at + 25,
        )
        .await
        .unwrap();
    assert_eq!(lab.nodes_on(), held, "round {}", later.round);

    // Work that comes takes the buffer's nodes at once (no boot).
    lab.release("job").unwrap();
    let waited = support::lab::bound(&lab, "job", Duration::from_secs(60)).await;
    let job_nodes = support::lab::nodes_of(&lab, "ml/job-");
    println!("lab figures: the job bound {waited:.1} s after it was submitted, on {job_nodes:?}");
    assert_eq!(job_nodes, held, "the job took the buffer's nodes");
    assert!(
        waited < 15.0,
        "bound {waited:.1} s after submission: longer than any wait for a running node"
    );

    // Refilled: two more nodes powered on for the buffer.
    let (_, on) = wait_buffer(
        &lab,
        "spare",
        "ml/spare refilled: Provisioning=True again with 4 nodes on",
        Duration::from_secs(120),
        |b, on| fits(b) && on.len() == 4,
    )
    .await;
    let refill: BTreeSet<String> = on.difference(&held).cloned().collect();
    assert_eq!(refill.len(), 2, "{on:?}");

    // A standby buffer of one: the dark node r1-n5 is made ready (powered
    // on with its BIOS profile staged, verified once up, its agent
    // reporting) and powered off again; then kept off.
    assert!(!lab.nodes_powered_on().contains("r1-n5"));
    lab.release("standby").unwrap();
    let (standby, _) = wait_buffer(
        &lab,
        "standby",
        "ml/standby Provisioning=True FitsStandbyCapacity (r1-n5 ready and off)",
        Duration::from_secs(180),
        |b, on| {
            condition(b, "Provisioning") == Some(("True".into(), "FitsStandbyCapacity".into()))
                && !on.contains("r1-n5")
        },
    )
    .await;
    assert_eq!(standby["status"]["replicas"], 1);
    assert!(lab.nodes_powered_on().contains("r1-n5"), "made ready once");
    let st = support::lab::current_status(&lab).await;
    let n5 = st.nodes.iter().find(|n| n.name == "r1-n5").unwrap();
    let bios = n5.bios.as_ref().expect("r1-n5's BIOS state");
    assert!(bios.verified_at.is_some(), "{bios:?}");
    let st = support::lab::rounds_after(&lab, &st, 5).await;
    assert_eq!(
        lab.nodes_on(),
        on,
        "kept off while ready (round {})",
        st.round
    );
    assert_eq!(
        lab.emulator_resets("r1-n5"),
        2,
        "one power-on, one power-off"
    );

    // Deleted: the refill nodes go dark after the idle time; the job's
    // nodes stay on.
    let deleted = tokio::time::Instant::now();
    assert!(lab.api.delete(CB, "CapacityBuffer", "ml", "spare"));
    assert!(lab.api.delete(CB, "CapacityBuffer", "ml", "standby"));
    let (_, on) = wait_buffer(
        &lab,
        "spare",
        "the buffer's nodes powered off after its deletion",
        Duration::from_secs(150),
        |_, on| on == &held,
    )
    .await;
    let dark_after = deleted.elapsed().as_secs_f64();
    println!("lab figures: the buffer's nodes were off {dark_after:.1} s after it was deleted");
    assert_eq!(on, job_nodes);
    assert!(
        dark_after >= 15.0,
        "off {dark_after:.1} s after the deletion: before the idle time (20 s)"
    );
}
