//! Demand from the queues GPU clusters run in front of the scheduler:
//! Kueue Workloads not admitted yet (its own TAS samples, with the
//! Workload its Job integration makes), Volcano's and KAI's PodGroups
//! (their own published samples, and the pods their controllers make).

use accord::demand::TopologyMode;
use accord::fleet::TopologyConfig;
use accord_kube::{translate, Manifests, Options, Translation};

use crate::translate::{read, workload};

/// Accord's levels labelled with the keys Kueue's samples use.
fn kueue_topology() -> TopologyConfig {
    let mut topology = TopologyConfig::default();
    topology.also_label.insert(
        "rack".into(),
        vec!["cloud.provider.com/topology-rack".into()],
    );
    topology.also_label.insert(
        "block".into(),
        vec!["cloud.provider.com/topology-block".into()],
    );
    topology
}

fn run_with(files: &[&str], topology: &TopologyConfig, schedulers: &[&str]) -> Translation {
    let mut options = Options::for_topology(topology);
    options
        .schedulers
        .extend(schedulers.iter().map(|s| (*s).to_owned()));
    translate(&read(files), &options)
}

const TAS_QUEUES: &str = "kueue/tas/sample-queues.yaml";
const TAS_JOB: &str = "kueue/tas/sample-job-required.yaml";
const TAS_WORKLOAD: &str = "written/kueue-workload-tas-required.yaml";

#[test]
fn a_pending_kueue_workload_with_quota_is_one_gang_on_its_flavor_and_topology() {
    let t = run_with(&[TAS_QUEUES, TAS_JOB, TAS_WORKLOAD], &kueue_topology(), &[]);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    assert!(t.not_planned.is_empty(), "{:?}", t.not_planned);
    // The Workload, not the suspended Job it stands for.
    assert_eq!(t.demand.workloads.len(), 1, "{}", t.render());
    let w = workload(&t, "default/job-tas-sample-required-3c0b8");
    assert_eq!((w.pod_count(), w.min()), (10, 10));
    let topo = w.topology.as_ref().unwrap();
    assert_eq!(
        (topo.level.as_str(), topo.mode),
        ("rack", TopologyMode::Required)
    );
    let kinds: Vec<String> = w.sources.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        kinds,
        [
            "Workload default/job-tas-sample-required-3c0b8",
            "LocalQueue default/tas-user-queue",
            "ClusterQueue tas-cluster-queue",
            "ResourceFlavor tas-flavor"
        ]
    );
    let pod = &w.pod_sets[0].pod;
    // The flavor's node labels, and every level of its Topology required
    // of the node (Kueue's NodeMatchesFlavor).
    assert_eq!(
        pod.node_selector["cloud.provider.com/node-group"],
        "tas-group"
    );
    let keys: Vec<&str> = pod.affinity[0]
        .match_expressions
        .iter()
        .map(|e| e.key.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "cloud.provider.com/topology-block",
            "cloud.provider.com/topology-rack",
            "kubernetes.io/hostname"
        ]
    );
    assert_eq!(pod.requests["cpu"], "1");
}

/// Kueue's TAS sample queues and the pending Workload, the ClusterQueue
/// changed by `edit`, translated.
fn with_cluster_queue(
    edit: &dyn Fn(&mut accord_kube::manifests::KueueClusterQueue),
) -> Translation {
    let mut m = read(&[TAS_QUEUES, TAS_WORKLOAD]);
    for o in &mut m.objects {
        if let accord_kube::manifests::Object::KueueClusterQueue(cq) = o {
            edit(cq);
        }
    }
    translate(&m, &Options::for_topology(&kueue_topology()))
}

#[test]
fn a_kueue_workload_over_its_quota_is_held_by_kueue_not_planned() {
    // 10 pods × 1 CPU against a quota of 100 CPUs of which 95 are reserved.
    let t = with_cluster_queue(&|cq| {
        cq.status.flavors_reservation = serde_json::from_value(serde_json::json!([
            {"name": "tas-flavor", "resources": [{"name": "cpu", "total": "95"}]}
        ]))
        .unwrap();
    });
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert_eq!(t.not_planned.len(), 1);
    let reason = &t.not_planned[0].reason;
    assert!(reason.contains("held by quota"), "{reason}");
    assert!(
        reason.contains("ClusterQueue tas-cluster-queue"),
        "{reason}"
    );
    assert!(reason.contains("cpu: 10 requested, 5 free"), "{reason}");
    // What Kueue itself said, quoted.
    assert!(
        reason.contains("(Kueue: couldn't assign flavors"),
        "{reason}"
    );
}

#[test]
fn deactivated_admitted_and_unqueued_kueue_workloads_are_not_demand() {
    let base = read(&[TAS_QUEUES, TAS_WORKLOAD]);
    let with = |edit: &dyn Fn(&mut accord_kube::manifests::KueueWorkload)| {
        let mut m = Manifests {
            objects: base.objects.clone(),
            ..Default::default()
        };
        for o in &mut m.objects {
            if let accord_kube::manifests::Object::KueueWorkload(w) = o {
                edit(w);
            }
        }
        translate(&m, &Options::for_topology(&kueue_topology()))
    };
    let t = with(&|w| w.spec.active = Some(false));
    assert!(t.demand.workloads.is_empty());
    assert!(
        t.not_planned[0].reason.contains("deactivated"),
        "{:?}",
        t.not_planned
    );
    let t = with(&|w| w.spec.queue_name = "nowhere".into());
    assert!(t.not_planned[0]
        .reason
        .contains("LocalQueue default/nowhere not found"));
    // An inactive ClusterQueue admits nothing.
    let t = with_cluster_queue(&|cq| {
        cq.status.conditions = serde_json::from_value(serde_json::json!([{
            "type": "Active", "status": "False", "reason": "FlavorNotFound",
            "message": "Can't admit new workloads: references missing ResourceFlavor(s): tas-flavor.",
            "lastTransitionTime": "2026-12-07T10:00:00Z"
        }]))
        .unwrap();
    });
    assert!(t.demand.workloads.is_empty());
    assert!(
        t.not_planned[0]
            .reason
            .contains("ClusterQueue tas-cluster-queue is inactive (FlavorNotFound"),
        "{:?}",
        t.not_planned
    );
    // Holding quota: its pods (or its ProvisioningRequest) are the demand.
    let t = with(&|w| {
        w.status.conditions[0].status = "True".into();
        w.status.conditions[0].reason = "QuotaReserved".into();
    });
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert!(t.not_planned.is_empty());
}

#[test]
fn kueue_topology_levels_accord_does_not_label_are_said_and_block_planning() {
    // Accord's default levels: no cloud.provider.com/* label on nodes.
    let t = run_with(&[TAS_QUEUES, TAS_WORKLOAD], &TopologyConfig::default(), &[]);
    let said: Vec<&String> = t
        .unsupported
        .iter()
        .filter(|u| u.starts_with("Kueue Topology default"))
        .collect();
    assert_eq!(said.len(), 2, "{:?}", t.unsupported);
    assert!(said[0].contains("cloud.provider.com/topology-block has no Accord meaning"));
    // kubernetes.io/hostname is every Node's own.
    assert!(!said.iter().any(|s| s.contains("kubernetes.io/hostname")));
    assert_eq!(t.cannot_plan.len(), 1, "{}", t.render());
    assert!(t.cannot_plan[0]
        .reason
        .contains("cloud.provider.com/topology-rack is not a label Accord puts on nodes"));
}

#[test]
fn volcanos_job_is_a_gang_of_its_min_available() {
    // Volcano's own example (a batch.volcano.sh Job) is not read; the
    // PodGroup and pods its controller makes are, for the scheduler the
    // configuration lists.
    let files = ["volcano/job.yaml", "written/volcano-test-job.yaml"];
    let t = run_with(&files, &TopologyConfig::default(), &[]);
    assert!(t.demand.workloads.is_empty());
    assert_eq!(t.not_planned.len(), 6, "volcano's pods are left to it");
    assert!(t.not_planned[0].reason.contains("\"volcano\""));

    let t = run_with(&files, &TopologyConfig::default(), &["volcano"]);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = workload(&t, "default/test-job-6a1d6c43-7f2e-4a59-9d0b-3c1b1f0e2a11");
    assert_eq!((w.pod_count(), w.min()), (6, 3));
    assert_eq!(w.sources[0].kind, "PodGroup");
    assert_eq!(w.sources[0].api_version, "scheduling.volcano.sh/v1beta1");
    assert_eq!(w.sources[1].to_string(), "Queue default");
    let note = w.approximation.as_deref().unwrap();
    assert!(
        note.contains("approximation of Volcano's scheduler"),
        "{note}"
    );
    assert!(note.contains("minResources (count/pods=3, cpu=3"), "{note}");

    // Volcano's PodGroup sample alone: a gang of one waiting for pods.
    let t = run_with(
        &["volcano/podgroup.yaml"],
        &TopologyConfig::default(),
        &["volcano"],
    );
    assert!(
        t.demand.workloads.is_empty() && t.invalid.is_empty(),
        "{}",
        t.render()
    );
}

#[test]
fn kais_pod_groups_are_gangs_of_their_minimum() {
    // The scheduling-shards page's pod and the PodGroup KAI makes for it.
    let t = run_with(
        &["kai/scheduling-shards.yaml"],
        &TopologyConfig::default(),
        &["kai-scheduler"],
    );
    assert!(
        t.cannot_plan.is_empty() && t.invalid.is_empty(),
        "{}",
        t.render()
    );
    assert_eq!(t.demand.workloads.len(), 1, "{}", t.render());
    let w = &t.demand.workloads[0];
    assert_eq!((w.pod_count(), w.min()), (1, 1));
    assert_eq!(w.pod_sets[0].pod.requests["nvidia.com/gpu"], "1");

    // sample1: subgroups of 2 and 3 pods; the page shows one pod of each.
    let t = run_with(
        &["kai/multilevel-sample1.yaml"],
        &TopologyConfig::default(),
        &[],
    );
    assert!(t.demand.workloads.is_empty());
    assert!(
        t.cannot_plan[0]
            .reason
            .contains("gang needs 5 pods, 2 exist"),
        "{}",
        t.render()
    );
    let t = run_with(
        &[
            "kai/multilevel-sample1.yaml",
            "written/kai-sample1-rest.yaml",
        ],
        &TopologyConfig::default(),
        &[],
    );
    let w = workload(&t, "default/sample1");
    assert_eq!((w.pod_count(), w.min()), (5, 5));
    assert_eq!(w.sources[0].api_version, "scheduling.run.ai/v2alpha2");
    assert_eq!(w.sources[1].to_string(), "Queue test");
    assert!(w.approximation.as_deref().unwrap().contains("KAI"));

    // KAI's batch Job sample: the podgrouper gives each pod its own group
    // of one (plugins/defaultgrouper MinAvailable 1): planned pod by pod.
    let t = run_with(
        &["kai/batch-job.yaml"],
        &TopologyConfig::default(),
        &["kai-scheduler"],
    );
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
}

#[test]
fn a_default_scheduler_pod_carrying_volcanos_annotation_is_planned_as_itself() {
    let text = r#"
apiVersion: v1
kind: Pod
metadata:
  name: lone
  namespace: default
  annotations:
    scheduling.k8s.io/group-name: nowhere
spec:
  containers:
  - name: c
    image: x
    resources:
      requests:
        cpu: "1"
"#;
    let m = Manifests::parse(text, "lone.yaml").unwrap();
    let t = translate(&m, &Options::for_topology(&TopologyConfig::default()));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    assert_eq!(workload(&t, "default/lone").min(), 1);
}

#[test]
fn a_kueue_workload_behind_an_admission_check_is_left_to_its_provisioning_request() {
    let t = with_cluster_queue(&|cq| {
        cq.spec.admission_checks_strategy = Some(serde_json::json!({
            "admissionChecks": [{"name": "accord-capacity"}]
        }));
    });
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert!(
        t.not_planned[0]
            .reason
            .contains("admission checks (accord-capacity)"),
        "{:?}",
        t.not_planned
    );
}
