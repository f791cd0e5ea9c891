//! The lab on the upstream control plane (etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler built by
//! `scripts/controlplane`): a permission taken from accordd failing the
//! lab, power-offs a pod cancels, claims, gangs on 1.36 and 1.37 (the
//! default scenario: `big/default_scenario.rs`). Every wait has a
//! condition, a deadline and says what it waited for.

use crate::support;
use support::lab::kubectl;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord_lab::{Lab, Scenario};

/// A small fleet: one node off, a gang of one released by the test.
const FLEET: &str = r#"
[lab]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 180
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[submit]]
name = "one"
manifests = '''
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: one}, spec: {containers: [{name: c, image: c, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
'''
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_taken_from_accordd_fails_the_lab() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(FLEET, Path::new("forbidden.toml")).unwrap();
    let lab = support::lab::start("upstream-forbidden", s).await;
    // The admin takes accordd's cluster-wide permissions away; the pod
    // then needs a node powered on and published (Node writes).
    kubectl(&lab, &["delete", "clusterrolebinding", "accordd"]);
    lab.release("one").unwrap();
    // Never true: the wait ends on accordd's first refusal (or its
    // deadline, and then the assertions below say so).
    let e = lab
        .wait_lab(
            "the lab to fail on accordd's refusal",
            Duration::from_secs(150),
            |_| false,
        )
        .await
        .unwrap_err();
    let text = format!("{e:#}");
    assert!(text.contains("403"), "{text}");
    assert!(
        text.contains("system:serviceaccount:accord-system:accordd"),
        "{text}"
    );
}

/// One node, a DaemonSet on it, a pod that runs 2 s, an idle time of 2 s
/// and a long settle time: the window in which the test binds a pod to the
/// node while Accord waits to power it off.
const POWER_OFF: &str = r#"
[lab]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 300
cluster_manifests = """
{apiVersion: apps/v1, kind: DaemonSet, metadata: {namespace: kube-system, name: cni-node}, spec: {selector: {matchLabels: {app: cni-node}}, template: {metadata: {labels: {app: cni-node}}, spec: {tolerations: [{operator: Exists}], containers: [{name: cni, image: cni-stand-in, resources: {requests: {cpu: 10m, memory: 32Mi}}}]}}}}
"""
[control]
tick_ms = 1000
transition_poll_ms = 1000
power_off_settle_s = 600
[fleet.policy]
idle_power_off_after_s = 2
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[submit]]
name = "job"
run_ms = 2000
manifests = '''
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: job}, spec: {containers: [{name: c, image: c, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
'''
"#;

fn node_taints(lab: &Lab, node: &str) -> Vec<String> {
    lab.api
        .get("v1", "Node", "", node)
        .and_then(|n| n["spec"]["taints"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t["key"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_while_a_node_waits_to_power_off_cancels_it_and_is_not_killed() {
    use accord::truth::POWERING_OFF_TAINT_KEY;
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(POWER_OFF, Path::new("power-off.toml")).unwrap();
    let lab = support::lab::start("upstream-power-off", s).await;
    lab.release("job").unwrap();
    support::lab::bound(&lab, "job", Duration::from_secs(150)).await;
    // The job ran and finished; only the DaemonSet's pod is left: the
    // node is tainted for its power-off, which waits.
    lab.wait_lab(
        "r1-n1 tainted accord.dev/powering-off after the job",
        Duration::from_secs(120),
        |lab| {
            node_taints(lab, "r1-n1")
                .iter()
                .any(|k| k == POWERING_OFF_TAINT_KEY)
        },
    )
    .await
    .unwrap();
    // A pod bound straight to the node (no scheduler: a NoSchedule taint
    // does not keep it off), as an admin's or an operator's may be.
    lab.api.apply(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "slipped-in"},
        "spec": {"nodeName": "r1-n1", "containers": [{"name": "c", "image": "c",
            "resources": {"requests": {"cpu": "1"}}}]}
    }));
    lab.wait_lab(
        "the powering-off taint lifted from r1-n1 and the pod running",
        Duration::from_secs(90),
        |lab| {
            !node_taints(lab, "r1-n1")
                .iter()
                .any(|k| k == POWERING_OFF_TAINT_KEY)
                && lab
                    .api
                    .get("v1", "Pod", "ml", "slipped-in")
                    .is_some_and(|p| p["status"]["phase"] == "Running")
        },
    )
    .await
    .unwrap();
    let st = lab
        .wait_status(
            "r1-n1 InUse in accordd's status",
            Duration::from_secs(60),
            |s| {
                s.nodes
                    .iter()
                    .any(|n| n.name == "r1-n1" && n.stage == accord::lifecycle::Stage::InUse)
            },
        )
        .await
        .unwrap();
    support::lab::rounds_after(&lab, &st, 3).await;
    let offs: Vec<_> = lab
        .proxy
        .log()
        .into_iter()
        .filter(|l| {
            l.method == "POST" && !l.power_on && l.path == accord_lab::proxy::reset_path("r1-n1")
        })
        .collect();
    assert!(offs.is_empty(), "r1-n1 was powered off: {offs:?}");
    assert!(lab.nodes_on().contains("r1-n1"));
    let events = lab.api.list("events.k8s.io/v1", "Event");
    let cancelled: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["reason"] == "PowerOffCancelled" && e["regarding"]["name"] == "r1-n1")
        .collect();
    assert_eq!(cancelled.len(), 1, "{events:#?}");
    let note = cancelled[0]["note"].as_str().unwrap_or("");
    assert!(note.contains("1 work pod(s) bound"), "{note}");
}

/// Two nodes, NVIDIA's DRA DeviceClass, a pod whose claim holds 6 of a
/// node's 8 GPUs, then one whose claim asks for 4.
const HELD_DEVICES: &str = r#"
[lab]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 300
cluster_manifests = """
{apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu.nvidia.com}, spec: {selectors: [{cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}
"""
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
[[submit]]
name = "holder"
run_ms = 600000
manifests = '''
{apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {namespace: ml, name: six}, spec: {spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com, count: 6}}]}}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: holder}, spec: {resourceClaims: [{name: gpus, resourceClaimTemplateName: six}], containers: [{name: c, image: c, resources: {claims: [{name: gpus}]}}]}}
'''
[[submit]]
name = "second"
run_ms = 600000
manifests = '''
{apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {namespace: ml, name: four}, spec: {spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com, count: 4}}]}}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: second}, spec: {resourceClaims: [{name: gpus, resourceClaimTemplateName: four}], containers: [{name: c, image: c, resources: {claims: [{name: gpus}]}}]}}
'''
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_claim_is_not_planned_on_gpus_a_running_claim_holds() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(HELD_DEVICES, Path::new("held.toml")).unwrap();
    let lab = support::lab::start("upstream-held-devices", s).await;
    lab.release("holder").unwrap();
    support::lab::bound(&lab, "holder", Duration::from_secs(150)).await;
    let first = support::lab::nodes_of(&lab, "ml/holder");
    assert_eq!(first.len(), 1, "{first:?}");
    // The real scheduler allocated 6 of its GPUs to the holder's claim:
    // 2 are left there. The second claim (4) needs the other node, which
    // Accord powers on; planned on the held GPUs, it would stay Pending.
    lab.release("second").unwrap();
    support::lab::bound(&lab, "second", Duration::from_secs(150)).await;
    let second = support::lab::nodes_of(&lab, "ml/second");
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(first.is_disjoint(&second), "{first:?} {second:?}");
    let claims = lab.api.list("resource.k8s.io/v1", "ResourceClaim");
    let allocated: usize = claims
        .iter()
        .map(|c| {
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .sum();
    assert_eq!(allocated, 10, "{claims:#?}");
    assert_eq!(lab.nodes_powered_on().len(), 2);
}

/// Kubernetes 1.36 with its gang API turned on as an admin turns it on
/// (the `GenericWorkload` gate, `scheduling.k8s.io/v1alpha2`): a
/// v1alpha2 PodGroup of 4 whose pods name it in `spec.schedulingGroup`,
/// on a fleet of two racks (4 nodes and 2).
const GANG_ON_1_36: &str = r#"
[lab]
kube_version = "1.36"
feature_gates = ["GenericWorkload=true"]
runtime_config = ["scheduling.k8s.io/v1alpha2=true"]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 300
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.racks]]
name = "r2"
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
name = "r2-n1"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n2"
rack = "r2"
profile = "h100"
[[submit]]
name = "train"
run_ms = 600000
manifests = '''
{apiVersion: scheduling.k8s.io/v1alpha2, kind: PodGroup, metadata: {namespace: ml, name: train}, spec: {schedulingPolicy: {gang: {minCount: 4}}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-0}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {requests: {cpu: "1"}, limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-1}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {requests: {cpu: "1"}, limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-2}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {requests: {cpu: "1"}, limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-3}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {requests: {cpu: "1"}, limits: {nvidia.com/gpu: "8"}}}]}}
'''
"#;

/// The real kube-apiserver, kube-scheduler and kube-controller-manager
/// v1.36.3, gang API on: Accord reads the v1alpha2 PodGroup, plans its 4
/// pods as one gang and powers on exactly 4 nodes; the real scheduler
/// binds all 4 pods there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_of_4_on_upstream_1_36_powers_on_4_nodes_and_binds() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(GANG_ON_1_36, Path::new("gang-1.36.toml")).unwrap();
    let lab = support::lab::start("upstream-1.36-gang", s).await;
    lab.release("train").unwrap();
    support::lab::bound(&lab, "train", Duration::from_secs(180)).await;
    let nodes = support::lab::nodes_of(&lab, "ml/train-");
    assert_eq!(nodes.len(), 4, "one pod a node: {nodes:?}");
    assert_eq!(
        lab.nodes_powered_on(),
        nodes,
        "exactly the gang's nodes were powered on"
    );
    // One gang, planned once: one power-on per node.
    let resets: Vec<_> = lab
        .proxy
        .log()
        .into_iter()
        .filter(|l| l.method == "POST" && l.power_on)
        .collect();
    assert_eq!(resets.len(), 4, "{resets:?}");
}

/// Two nodes and NVIDIA's DRA DeviceClass; a claim of 1 GPU, then (after
/// a DeviceTaintRule taints that node's GPUs) one of 4 that does not
/// tolerate the taint and one of 5 that does.
const TAINTED_DEVICES: &str = r#"
[lab]
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 300
cluster_manifests = """
{apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: gpu.nvidia.com}, spec: {selectors: [{cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}
"""
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
[[submit]]
name = "holder"
run_ms = 600000
manifests = '''
{apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {namespace: ml, name: one}, spec: {spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com, count: 1}}]}}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: holder}, spec: {resourceClaims: [{name: gpus, resourceClaimTemplateName: one}], containers: [{name: c, image: c, resources: {claims: [{name: gpus}]}}]}}
'''
[[submit]]
name = "plain"
run_ms = 600000
manifests = '''
{apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {namespace: ml, name: four}, spec: {spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com, count: 4}}]}}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: plain}, spec: {resourceClaims: [{name: gpus, resourceClaimTemplateName: four}], containers: [{name: c, image: c, resources: {claims: [{name: gpus}]}}]}}
'''
[[submit]]
name = "tolerant"
run_ms = 600000
manifests = '''
{apiVersion: resource.k8s.io/v1, kind: ResourceClaimTemplate, metadata: {namespace: ml, name: five-tolerant}, spec: {spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com, count: 5, tolerations: [{key: example.com/maintenance, operator: Exists, effect: NoSchedule}]}}]}}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: tolerant}, spec: {resourceClaims: [{name: gpus, resourceClaimTemplateName: five-tolerant}], containers: [{name: c, image: c, resources: {claims: [{name: gpus}]}}]}}
'''
"#;

/// The real 1.37 control plane with a `resource.k8s.io/v1` DeviceTaintRule
/// on the GPUs of the node the first claim runs on: a claim that does not
/// tolerate the taint is planned on the other node, which Accord powers
/// on (7 untouched GPUs would otherwise have been enough), and the real
/// scheduler binds it there; a claim that tolerates it is planned on the
/// tainted GPUs, the only ones left, and bound there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_taint_rule_moves_claims_that_do_not_tolerate_it() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(TAINTED_DEVICES, Path::new("tainted.toml")).unwrap();
    let lab = support::lab::start("upstream-device-taints", s).await;
    lab.release("holder").unwrap();
    support::lab::bound(&lab, "holder", Duration::from_secs(150)).await;
    let held = support::lab::nodes_of(&lab, "ml/holder");
    let [tainted] = held.iter().collect::<Vec<_>>()[..] else {
        panic!("the holder on one node: {held:?}");
    };
    lab.api.apply(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": tainted},
                 "taint": {"key": "example.com/maintenance", "value": "true",
                           "effect": "NoSchedule"}}
    }));
    lab.release("plain").unwrap();
    support::lab::bound(&lab, "plain", Duration::from_secs(150)).await;
    let plain = support::lab::nodes_of(&lab, "ml/plain");
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert!(
        !plain.contains(tainted),
        "planned on the tainted GPUs: {plain:?}"
    );
    lab.release("tolerant").unwrap();
    support::lab::bound(&lab, "tolerant", Duration::from_secs(150)).await;
    let tolerant = support::lab::nodes_of(&lab, "ml/tolerant");
    assert_eq!(tolerant, held, "the tolerant claim on the tainted node");
    assert_eq!(lab.nodes_powered_on().len(), 2);
}

/// The same gang on 1.36 with the gang API off (its default): the
/// apiserver drops `spec.schedulingGroup` from the pods, so they are four
/// pods of their own, each planned and powered on for by itself.
/// (Half on, the `GenericWorkload` gate without the v1alpha2 API, is no
/// cluster: kube-apiserver v1.36.3 never turns ready, its `informer-sync`
/// check failing, so pods cannot keep the field where the API is not.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gang_api_1_36_pods_are_planned_one_by_one() {
    let _slot = support::lab::shared_world().await;
    let off = GANG_ON_1_36
        .replace("feature_gates = [\"GenericWorkload=true\"]\n", "")
        .replace("runtime_config = [\"scheduling.k8s.io/v1alpha2=true\"]\n", "")
        .replace(
            "{apiVersion: scheduling.k8s.io/v1alpha2, kind: PodGroup, metadata: {namespace: ml, name: train}, spec: {schedulingPolicy: {gang: {minCount: 4}}}}\n---\n",
            "",
        );
    let s = Scenario::parse(&off, Path::new("pods-1.36.toml")).unwrap();
    let lab = support::lab::start("upstream-1.36-pods", s).await;
    lab.release("train").unwrap();
    support::lab::bound(&lab, "train", Duration::from_secs(180)).await;
    let pod = lab.api.get("v1", "Pod", "ml", "train-0").unwrap();
    assert!(
        pod["spec"]["schedulingGroup"].is_null(),
        "the gate is off: the apiserver drops the field: {pod}"
    );
    assert_eq!(lab.nodes_powered_on().len(), 4);
    let log = std::fs::read_to_string(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("lab-upstream-1.36-pods.accordd.log"),
    )
    .unwrap();
    let planned: BTreeSet<&str> = log
        .lines()
        .filter(|l| l.contains("powering on"))
        .filter_map(|l| l.split("workloads=").nth(1))
        .collect();
    assert_eq!(
        planned,
        BTreeSet::from(["ml/train-0", "ml/train-1", "ml/train-2", "ml/train-3"]),
        "each pod its own workload"
    );
}

/// Two racks, r1 of two nodes and r2 of three; a rack-constrained gang of
/// three 8-GPU pods (KEP-5732's `schedulingConstraints.topology`) fits
/// only in r2. The kubelets register with Accord's starting taint.
const RACK_GANG_ON_1_37: &str = r#"
[lab]
kube_version = "1.37"
runtime_config = ["scheduling.k8s.io/v1beta1=true"]
feature_gates = ["GenericWorkload=true", "TopologyAwareWorkloadScheduling=true"]
kubelet_starting_taint = true
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 300
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
[[fleet.racks]]
name = "r1"
[[fleet.racks]]
name = "r2"
[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r2-n1"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n2"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n3"
rack = "r2"
profile = "h100"
[[submit]]
name = "train"
run_ms = 600000
manifests = """
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {namespace: ml, name: train}
spec:
  schedulingPolicy: {gang: {minCount: 3}}
  schedulingConstraints:
    topology: [{key: topology.accord.dev/rack}]
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-0}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-1}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: train-2}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: "8"}}}]}}
"""
"#;

/// The real 1.37 control plane: Accord powers on exactly the one rack that
/// holds the gang, its labels are on the Nodes before any pod binds (each
/// Node registered with Accord's starting taint, lifted in the patch that
/// labels it), and the real scheduler binds the gang in that rack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_gang_on_upstream_1_37_powers_on_one_rack_labelled_before_it_binds() {
    let _slot = support::lab::shared_world().await;
    let s = Scenario::parse(RACK_GANG_ON_1_37, Path::new("rack-gang-1.37.toml")).unwrap();
    let lab = support::lab::start("upstream-1.37-rack-gang", s).await;
    lab.release("train").unwrap();
    support::lab::bound(&lab, "train", Duration::from_secs(180)).await;
    let nodes = support::lab::nodes_of(&lab, "ml/train-");
    let r2: BTreeSet<String> = ["r2-n1", "r2-n2", "r2-n3"].map(String::from).into();
    assert_eq!(nodes, r2, "bound by kube-scheduler in r2");
    assert_eq!(lab.nodes_powered_on(), r2, "powered on: exactly r2");
    assert!(
        lab.pods_bound_before_labels().is_empty(),
        "{:?}",
        lab.pods_bound_before_labels()
    );
    for n in &r2 {
        let node = lab.api.get("v1", "Node", "", n).unwrap();
        assert_eq!(
            node["metadata"]["labels"]["topology.accord.dev/rack"], "r2",
            "{node}"
        );
        let starting = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == accord::truth::STARTING_TAINT_KEY);
        assert!(!starting, "{n}: the starting taint was lifted: {node}");
    }
}
