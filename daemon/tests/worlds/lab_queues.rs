//! Kueue topology-aware workloads on dark racks, on the real 1.37 control
//! plane with real Kueue (the lab's pinned v0.17): a Kueue `Topology`
//! whose rack level is Accord's rack label, a ResourceFlavor naming it,
//! and every machine dark. A job of 3 × 8 GPUs requiring one rack, in a
//! ClusterQueue without an admission check and submitted as a user does
//! (Kueue's webhook, registered in the lab, suspends it), has no pods
//! (Kueue's TAS sees no Ready Node): Accord plans its Workload, powers
//! exactly one rack, Kueue admits the job once the Nodes are Ready, and
//! kube-scheduler binds its pods there. The same job behind a
//! ProvisioningRequest admission check gets another rack through the
//! request, Provisioned only once that rack is Ready. A job over its
//! ClusterQueue's quota powers nothing, and `accordctl explain` says
//! Kueue's quota holds it.

use crate::support;
use support::lab::{kubectl, nodes_of};

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord_lab::Scenario;
use serde_json::Value;

/// A ClusterQueue `name` of `gpus` GPUs on the TAS flavor, with its
/// LocalQueue in `ml`, and `checks` as its admission checks.
fn queue(name: &str, gpus: u32, checks: &str) -> String {
    format!(
        "{{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {{name: {name}}}, spec: {{namespaceSelector: {{}}, \
         resourceGroups: [{{coveredResources: [cpu, memory, nvidia.com/gpu], flavors: [{{name: tas, resources: \
         [{{name: cpu, nominalQuota: \"48\"}}, {{name: memory, nominalQuota: 1Ti}}, {{name: nvidia.com/gpu, nominalQuota: \"{gpus}\"}}]}}]}}]{checks}}}}}\n---\n\
         {{apiVersion: kueue.x-k8s.io/v1beta2, kind: LocalQueue, metadata: {{namespace: ml, name: {name}}}, spec: {{clusterQueue: {name}}}}}\n"
    )
}

/// A Job of `pods` × 8 GPUs on LocalQueue `queue`, its pods required in
/// one rack (Kueue's TAS annotation, Accord's rack label), submitted as a
/// user does: not suspended (Kueue's webhook suspends it).
fn job(name: &str, queue: &str, pods: u32) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  namespace: ml\n  name: {name}\n  \
         labels: {{kueue.x-k8s.io/queue-name: {queue}}}\nspec:\n  \
         parallelism: {pods}\n  completions: {pods}\n  template:\n    metadata:\n      \
         annotations: {{kueue.x-k8s.io/podset-required-topology: topology.accord.dev/rack}}\n    \
         spec:\n      restartPolicy: Never\n      containers:\n      - name: t\n        image: t\n        \
         resources: {{requests: {{cpu: \"1\", memory: 1Gi, nvidia.com/gpu: \"8\"}}, limits: {{nvidia.com/gpu: \"8\"}}}}\n"
    )
}

fn scenario() -> Scenario {
    let mut admin = String::from(
        "{apiVersion: kueue.x-k8s.io/v1beta2, kind: Topology, metadata: {name: racks}, spec: {levels: \
         [{nodeLabel: topology.accord.dev/rack}, {nodeLabel: kubernetes.io/hostname}]}}\n---\n\
         {apiVersion: kueue.x-k8s.io/v1beta2, kind: ResourceFlavor, metadata: {name: tas}, spec: {nodeLabels: {nvidia.com/gpu.count: \"8\"}, topologyName: racks}}\n---\n\
         {apiVersion: kueue.x-k8s.io/v1beta2, kind: ProvisioningRequestConfig, metadata: {name: accord}, spec: \
         {provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io, managedResources: [nvidia.com/gpu]}}\n---\n\
         {apiVersion: kueue.x-k8s.io/v1beta2, kind: AdmissionCheck, metadata: {name: accord-capacity}, spec: \
         {controllerName: kueue.x-k8s.io/provisioning-request, parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: accord}}}\n---\n",
    );
    admin.push_str(&queue("plain", 24, ""));
    admin.push_str("---\n");
    // Twice the job: Kueue v0.17.0's second pass for a delayed topology
    // request counts the workload's own reservation against it again
    // ("insufficient unused quota ... 24 more needed" with 24 of 24
    // reserved by it; kubernetes-sigs/kueue#9048).
    admin.push_str(&queue(
        "checked",
        48,
        ", admissionChecksStrategy: {admissionChecks: [{name: accord-capacity}]}",
    ));
    admin.push_str("---\n");
    admin.push_str(&queue("small", 8, ""));
    let mut s = format!(
        r#"
[lab]
kube_version = "1.37"
kueue = true
kubelet_starting_taint = true
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 600
cluster_manifests = """
{admin}"""
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.policy]
idle_power_off_after_s = 60
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "16"
memory = "1500Gi"
"#
    );
    for r in 1..=3 {
        s.push_str(&format!("[[fleet.racks]]\nname = \"r{r}\"\n"));
        for n in 1..=3 {
            s.push_str(&format!(
                "[[fleet.nodes]]\nname = \"r{r}-n{n}\"\nrack = \"r{r}\"\nprofile = \"h100\"\n"
            ));
        }
    }
    for (name, queue, pods, placeable) in [
        ("plain", "plain", 3, true),
        ("checked", "checked", 3, true),
        ("over", "small", 2, false),
    ] {
        s.push_str(&format!(
            "[[submit]]\nname = \"{name}\"\nrun_ms = 600000\nplaceable = {placeable}\n\
             manifests = \"\"\"\n{}\"\"\"\n",
            job(name, queue, pods)
        ));
    }
    Scenario::parse(&s, Path::new("queues-1.37.toml")).unwrap()
}

/// Waits until every pod of `name` is bound; past `within`, fails with
/// what Kueue and the cluster say (its Workloads, events, log lines).
async fn bound_or_say_why(lab: &accord_lab::Lab, name: &str, within: Duration) {
    let end = std::time::Instant::now() + within;
    while lab.submission_times(name).1.is_none() {
        if std::time::Instant::now() > end || lab.daemon_exited().is_some() {
            let log = std::fs::read_to_string(lab.dir.path().join("kueue").join("kueue.log"))
                .unwrap_or_default();
            let kueue: Vec<&str> = log.lines().filter(|l| l.contains(name)).collect();
            panic!(
                "{name} not bound within {within:?}\nWorkloads:\n{}\nevents:\n{}\nKueue's log on it:\n{}\n{}",
                kubectl(lab, &["-n", "ml", "get", "workloads", "-o", "yaml"]),
                kubectl(lab, &["-n", "ml", "get", "events"]),
                kueue[kueue.len().saturating_sub(20)..].join("\n"),
                lab.daemon_report()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn racks(nodes: &BTreeSet<String>) -> BTreeSet<String> {
    nodes.iter().map(|n| n[..2].to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_tas_jobs_on_dark_racks_get_one_rack_each_and_quota_holds_the_rest() {
    let _slot = support::lab::shared_world().await;
    let lab = support::lab::start("upstream-1.37-queues", scenario()).await;
    assert!(lab.nodes_on().is_empty(), "every machine starts dark");
    for name in ["plain", "checked", "over"] {
        lab.release(name).unwrap();
    }
    bound_or_say_why(&lab, "plain", Duration::from_secs(300)).await;
    bound_or_say_why(&lab, "checked", Duration::from_secs(300)).await;

    // One rack each, three machines: Kueue's TAS admitted each job in one
    // rack and kube-scheduler bound its pods there.
    let plain = nodes_of(&lab, "ml/plain-");
    let checked = nodes_of(&lab, "ml/checked-");
    assert_eq!(plain.len(), 3, "{plain:?}");
    assert_eq!(checked.len(), 3, "{checked:?}");
    assert_eq!(racks(&plain).len(), 1, "{plain:?}");
    assert_eq!(racks(&checked).len(), 1, "{checked:?}");
    assert_ne!(racks(&plain), racks(&checked));
    // Exactly those two racks were powered on; the third, and nothing for
    // the job over its quota.
    let on = lab.nodes_on();
    let used: BTreeSet<String> = plain.union(&checked).cloned().collect();
    assert_eq!(on, used, "powered on: {on:?}");

    // The plain job was admitted without a ProvisioningRequest; the
    // checked one through one Accord said Provisioned.
    let requests: Value = serde_json::from_str(&kubectl(
        &lab,
        &["-n", "ml", "get", "provisioningrequests", "-o", "json"],
    ))
    .unwrap();
    let items = requests["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{requests}");
    assert!(
        items[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .contains("checked"),
        "{requests}"
    );
    assert!(
        items[0]["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Provisioned" && c["status"] == "True"),
        "{requests}"
    );

    // The job over its quota: no pod, nothing powered, and Accord says
    // Kueue's quota holds it.
    let st = lab.status().await.expect("accordd's status");
    let held = st
        .cannot_plan
        .iter()
        .find(|c| c.workload.starts_with("ml/job-over-"))
        .unwrap_or_else(|| panic!("the over-quota Workload is said: {:?}", st.cannot_plan));
    let explained = accord_api::text::render_explain(&st, &held.workload).unwrap();
    println!(
        "lab figures: accordctl explain {} on upstream 1.37 with Kueue:\n{explained}",
        held.workload
    );
    assert!(explained.contains("held by quota"), "{explained}");
    assert!(
        explained.contains("ClusterQueue small")
            && explained.contains("nvidia.com/gpu: 16 requested, 8 free"),
        "{explained}"
    );
    assert!(nodes_of(&lab, "ml/over-").is_empty());
    // Submitted unsuspended, as a user does: Kueue's mutating webhook,
    // registered in the lab, suspended it.
    assert_eq!(
        kubectl(
            &lab,
            &[
                "-n",
                "ml",
                "get",
                "job",
                "over",
                "-o",
                "jsonpath={.spec.suspend}"
            ]
        ),
        "true"
    );
    let plain_status = st
        .workloads
        .iter()
        .find(|w| w.workload.starts_with("ml/job-plain-"));
    assert!(
        plain_status.is_none(),
        "admitted: its pods are the demand now"
    );
}
