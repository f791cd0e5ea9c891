//! Pod-to-pod rules end to end on the real 1.37 control plane: workers that
//! each require their own machine (required pod anti-affinity on
//! `kubernetes.io/hostname`) and pods spread over racks (`maxSkew: 1`,
//! DoNotSchedule) are powered on exactly where kube-scheduler then binds
//! them: every pod bound, no machine powered on and left unused. And a
//! DaemonSet whose pods take half a machine's CPU: the nodes powered on
//! for two pods that fit one machine only without it are two, at once.
//! And a pod whose claim is bound to a local PV on a dark machine: that
//! machine is powered on, and the pod bound there.
//!
//! The workers ask 2 GPUs each, not 8: an 8-GPU worker fills a machine
//! whatever its anti-affinity says, so only smaller ones show that Accord
//! reads the rule.
//!
//! Plain pods, not a PodGroup: on v1.37.2 a scheduling.k8s.io/v1beta1 gang
//! without topology constraints that does not fit yet gets
//! `PodScheduled=False` with reason `SchedulerError` ("error in
//! \"DynamicResources\" PodGroupPostFilter plugins: not found":
//! dynamicresources.go `PodGroupPostFilter` reads a cycle state its
//! PreFilter never wrote for pods without claims), not `Unschedulable`, so
//! neither Accord nor the peers (which read only `Unschedulable`) plan it.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use accord_lab::Scenario;

const HEAD: &str = r#"
[lab]
kube_version = "1.37"
kubelet_starting_taint = true
boot_delay_ms = 500
kubelet_delay_ms = 500
heartbeat_ms = 1000
max_s = 400
cluster_manifests = """
{apiVersion: apps/v1, kind: DaemonSet, metadata: {namespace: kube-system, name: rack3-agent}, spec: {selector: {matchLabels: {app: rack3-agent}}, template: {metadata: {labels: {app: rack3-agent}}, spec: {nodeSelector: {topology.accord.dev/rack: r3}, tolerations: [{operator: Exists}], containers: [{name: a, image: a, resources: {requests: {cpu: "2"}}}]}}}}
---
{apiVersion: v1, kind: PersistentVolume, metadata: {name: local-r2-n3}, spec: {capacity: {storage: 100Gi}, accessModes: [ReadWriteOnce], storageClassName: "", local: {path: /mnt/nvme0}, claimRef: {namespace: ml, name: db}, nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [r2-n3]}]}]}}}}
"""
[control]
tick_ms = 1000
transition_poll_ms = 1000
[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "4"
memory = "1500Gi"
"#;

/// `pods` pods named `NAME-i`, each asking `gpus` GPUs, labelled
/// `app: NAME`, with `constraint` (YAML flow) in their spec.
fn pods(name: &str, pods: usize, gpus: u32, constraint: &str) -> String {
    (0..pods)
        .map(|i| {
            format!(
                "{{apiVersion: v1, kind: Pod, metadata: {{namespace: ml, name: {name}-{i}, labels: {{app: {name}}}}}, \
                 spec: {{{constraint}, \
                 containers: [{{name: t, image: t, resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}}}]}}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The claim the PV above is pre-bound to; the PV controller completes
/// the binding (the bind-completed mark kube-scheduler waits for).
const DB_CLAIM: &str =
    "{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {namespace: ml, name: db}, \
     spec: {accessModes: [ReadWriteOnce], storageClassName: \"\", volumeName: local-r2-n3, \
     resources: {requests: {storage: 100Gi}}}}\n";
const DB_VOLUME: &str = "volumes: [{name: data, persistentVolumeClaim: {claimName: db}}]";

fn scenario() -> Scenario {
    let mut s = HEAD.to_owned();
    for r in 1..=3 {
        s.push_str(&format!("[[fleet.racks]]\nname = \"r{r}\"\n"));
    }
    for r in 1..=3 {
        for n in 1..=3 {
            s.push_str(&format!(
                "[[fleet.nodes]]\nname = \"r{r}-n{n}\"\nrack = \"r{r}\"\nprofile = \"h100\"\n"
            ));
        }
    }
    let apart = "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                 [{labelSelector: {matchLabels: {app: train}}, topologyKey: kubernetes.io/hostname}]}}";
    let spread = "topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.accord.dev/rack, \
                  whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]";
    let r3 = "nodeSelector: {topology.accord.dev/rack: r3}";
    let cpu = |m: String| m.replace("nvidia.com/gpu: \"0\"", "cpu: 1500m");
    for (name, manifests) in [
        ("batch", cpu(pods("batch", 2, 0, r3))),
        ("train", pods("train", 4, 2, apart)),
        ("web", pods("web", 6, 4, spread)),
        (
            "db",
            format!("{DB_CLAIM}---\n{}", pods("db", 1, 1, DB_VOLUME)),
        ),
    ] {
        s.push_str(&format!(
            "[[submit]]\nname = \"{name}\"\nrun_ms = 600000\nmanifests = \"\"\"\n{manifests}\"\"\"\n"
        ));
    }
    Scenario::parse(&s, Path::new("relations-1.37.toml")).unwrap()
}

fn rack(node: &str) -> &str {
    node.split('-').next().unwrap_or(node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_affinity_spread_and_daemonset_pods_power_on_exactly_what_kube_scheduler_uses() {
    let _slot = support::lab::shared_world().await;
    let lab = support::lab::start("upstream-1.37-relations", scenario()).await;

    // Four 2-GPU workers, one per machine: four machines, not one.
    lab.release("train").unwrap();
    support::lab::bound(&lab, "train", Duration::from_secs(180)).await;
    let train = support::lab::nodes_of(&lab, "ml/train-");
    assert_eq!(train.len(), 4, "one worker per node: {train:?}");
    assert_eq!(
        lab.nodes_powered_on(),
        train,
        "powered on: exactly the workers' nodes"
    );

    // Six 4-GPU pods over the racks, at most one apart. Only r1 and r2 have
    // Nodes (r3's machines never registered: no domain to the scheduler),
    // r1's three nodes hold one each and r2-n1 one: Accord powers on one
    // more node in r2, and the scheduler binds three and three.
    lab.release("web").unwrap();
    support::lab::bound(&lab, "web", Duration::from_secs(180)).await;
    let pods = lab.bound_pods();
    let mut per_rack: BTreeMap<&str, usize> = BTreeMap::new();
    for (pod, node) in &pods {
        if pod.starts_with("ml/web-") {
            *per_rack.entry(rack(node)).or_default() += 1;
        }
    }
    assert_eq!(
        per_rack,
        BTreeMap::from([("r1", 3), ("r2", 3)]),
        "spread over the racks that have Nodes"
    );
    let used: BTreeSet<String> = pods
        .iter()
        .filter(|(p, _)| p.starts_with("ml/train-") || p.starts_with("ml/web-"))
        .map(|(_, n)| n.clone())
        .collect();
    let powered = lab.nodes_powered_on();
    assert_eq!(
        powered.len(),
        5,
        "four for the workers, one more for web: {powered:?}"
    );
    assert_eq!(
        powered, used,
        "every node Accord powered on is used, and nothing runs elsewhere"
    );

    // A pod whose claim is bound to the local PV on dark r2-n3: r2-n3 is
    // powered on for it, and the scheduler binds it there.
    assert!(
        !lab.nodes_powered_on().contains("r2-n3"),
        "r2-n3 still dark"
    );
    lab.release("db").unwrap();
    support::lab::bound(&lab, "db", Duration::from_secs(180)).await;
    let db = support::lab::nodes_of(&lab, "ml/db-");
    assert_eq!(db, BTreeSet::from(["r2-n3".to_owned()]), "where the PV is");
    let pods = lab.bound_pods();
    let used: BTreeSet<String> = pods
        .iter()
        .filter(|(p, _)| p.starts_with("ml/"))
        .map(|(_, n)| n.clone())
        .collect();
    assert_eq!(
        lab.nodes_powered_on(),
        used,
        "the local-PV node among the powered, each of them used"
    );

    // Two 1.5-CPU pods for r3, whose 4-CPU machines each run the
    // DaemonSet's 2-CPU pod once up: one pod per machine, so two machines
    // powered on in one round (not counting the agent, one machine would
    // be planned for both, and the second found short only after the first
    // came up).
    lab.release("batch").unwrap();
    let first = lab
        .wait_status("a power-on in r3", Duration::from_secs(90), |s| {
            s.actions.iter().any(|a| {
                matches!(a, accord::plan::Action::PowerOn { node, .. } if node.starts_with("r3-"))
            })
        })
        .await
        .unwrap();
    let r3_on: BTreeSet<&str> = first
        .actions
        .iter()
        .filter_map(|a| match a {
            accord::plan::Action::PowerOn { node, .. } if node.starts_with("r3-") => {
                Some(node.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(r3_on.len(), 2, "both in the first plan for r3: {r3_on:?}");
    support::lab::bound(&lab, "batch", Duration::from_secs(180)).await;
}
