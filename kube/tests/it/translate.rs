//! Translation of real manifests (tests/fixtures/kubernetes: NVIDIA DRA
//! driver examples, Kueue samples, the coscheduling and ProvisioningRequest
//! CRDs' objects) into the planner's demand, with assertions on the result.

use std::path::Path;

use accord::demand::{AllocationMode, TopologyMode, Workload};
use accord::fleet::TopologyConfig;
use accord_kube::{translate, Manifests, Options, Translation};

pub(crate) fn read(files: &[&str]) -> Manifests {
    let mut all = Manifests::default();
    for f in files {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/kubernetes")
            .join(f);
        let text = std::fs::read_to_string(&path).unwrap();
        all.extend(Manifests::parse(&text, f).unwrap_or_else(|e| panic!("{e}")));
    }
    all
}

fn run(files: &[&str]) -> Translation {
    translate(
        &read(files),
        &Options::for_topology(&TopologyConfig::default()),
    )
}

pub(crate) fn workload<'a>(t: &'a Translation, key: &str) -> &'a Workload {
    t.demand
        .workloads
        .iter()
        .find(|w| w.key() == key)
        .unwrap_or_else(|| panic!("no {key}: {}", t.render()))
}

#[test]
fn nvidia_dra_examples() {
    // Two pods, each its own claim from one template: one GPU each.
    let t = run(&["dra/k8s-dra-driver-gpu/gpu-test1.yaml"]);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    for pod in ["gpu-test1/pod1", "gpu-test1/pod2"] {
        let w = workload(&t, pod);
        let claim = &w.pod_sets[0].pod.claims[0];
        let req = claim.requests[0].exactly.as_ref().unwrap();
        assert_eq!(
            (req.device_class.as_str(), req.count),
            ("gpu.nvidia.com", 1)
        );
        assert_eq!(
            w.pod_sets[0].pod.tolerations[0].key.as_deref(),
            Some("nvidia.com/gpu")
        );
    }
    // The Namespace is read for its labels (namespace selectors).
    assert!(!t.ignored.contains_key("Namespace"));
    assert!(t.demand.namespace_labels.contains_key("gpu-test1"));

    // A Deployment of 4 replicas, each with four MIG devices on one GPU.
    let t = run(&["dra/k8s-dra-driver-gpu/gpu-test4.yaml"]);
    let w = workload(&t, "gpu-test4/pod");
    assert_eq!((w.pod_count(), w.min()), (4, 1), "replicas are not a gang");
    let claim = &w.pod_sets[0].pod.claims[0];
    let profiles: Vec<&str> = claim
        .requests
        .iter()
        .map(|r| r.exactly.as_ref().unwrap().selectors[0].as_str())
        .collect();
    assert_eq!(profiles.len(), 4);
    assert!(profiles[3].contains("'3g.20gb'"));
    assert_eq!(
        claim.constraints[0].match_attribute,
        "gpu.nvidia.com/parentUUID"
    );
    assert!(
        claim.constraints[0].requests.is_empty(),
        "empty list = every request"
    );

    // MIG by capacity with the quantity library (isGreaterThan).
    let t = run(&["dra/k8s-dra-driver-gpu/gpu-simple-mig.yaml"]);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let sel = &workload(&t, "default/pod-mig1g").pod_sets[0].pod.claims[0].requests[0]
        .exactly
        .as_ref()
        .unwrap()
        .selectors[0];
    assert!(sel.contains("isGreaterThan(quantity(\"10Gi\"))"), "{sel}");

    // The legacy v1alpha2 claims: said once, not crashed on.
    let t = run(&["dra/k8s-dra-driver-gpu/sharing-demo-claims.yaml"]);
    assert_eq!(t.unsupported, ["resource.k8s.io/v1alpha2 ResourceClaim"]);
}

#[test]
fn device_classes_and_capacity_requests() {
    // kubernetes/website's DeviceClass is v1beta2 (same shape as v1).
    let t = run(&[
        "dra/k8s-website/deviceclass.yaml",
        "dra/k8s-website/resourceclaimtemplate.yaml",
    ]);
    assert!(t.invalid.is_empty(), "{:?}", t.invalid);
    assert_eq!(t.demand.device_classes.len(), 1);
    assert_eq!(t.demand.device_classes[0].name, "example-device-class");
    assert!(!t.demand.device_classes[0].selectors.is_empty());

    let t = run(&["kueue/dra/sample-dra-capacity-job.yaml"]);
    let w = workload(&t, "default/sample-dra-capacity-job");
    let req = w.pod_sets[0].pod.claims[0].requests[0]
        .exactly
        .as_ref()
        .unwrap();
    assert_eq!(req.capacity["gpu.example.com/memory"], "4Gi");
    assert_eq!(req.allocation_mode, AllocationMode::ExactCount);
    assert_eq!(w.pod_sets[0].pod.requests["cpu"], "1");
    assert_eq!(w.pod_sets[0].pod.requests["memory"], "200Mi");
}

#[test]
fn kueue_groups_jobs_and_topology() {
    // Plain pods in a Kueue pod group: one gang of the total count.
    let t = run(&["kueue/pods-kueue/kueue-pod-group.yaml"]);
    let w = workload(&t, "default/sample-group");
    assert_eq!((w.pod_count(), w.min()), (2, 2));
    assert_eq!(w.sources[0].kind, "KueuePodGroup");
    assert_eq!(w.sources[0].key(), "default/sample-group");
    assert!(
        w.sources[0].api_version.is_empty(),
        "a label, not an object"
    );

    // A Kueue-managed Job is admitted whole: a gang of its parallelism.
    let t = run(&["kueue/tas/sample-job-unconstrained.yaml"]);
    let w = workload(&t, "default/tas-sample-unconstrained");
    assert_eq!((w.pod_count(), w.min()), (6, 6));
    assert_eq!(w.topology, None);

    // TAS annotations name the Topology's label keys: unknown to Accord
    // until the fleet labels nodes with them too (also_label).
    let files = [
        "kueue/tas/sample-job-required.yaml",
        "kueue/tas/sample-job-preferred.yaml",
        "kueue/jobs/sample-jobset-tas-required.yaml",
    ];
    let t = run(&files);
    assert_eq!(t.cannot_plan.len(), 3, "{}", t.render());
    assert!(t.cannot_plan[0]
        .reason
        .contains("cloud.provider.com/topology-"));
    let mut topology = TopologyConfig::default();
    topology.also_label.insert(
        "rack".into(),
        vec!["cloud.provider.com/topology-rack".into()],
    );
    topology.also_label.insert(
        "block".into(),
        vec!["cloud.provider.com/topology-block".into()],
    );
    let t = translate(&read(&files), &Options::for_topology(&topology));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let req = workload(&t, "default/tas-sample-required");
    assert_eq!((req.pod_count(), req.min()), (10, 10));
    let topo = req.topology.as_ref().unwrap();
    assert_eq!(
        (topo.level.as_str(), topo.mode),
        ("rack", TopologyMode::Required)
    );
    let pref = workload(&t, "default/tas-sample-preferred")
        .topology
        .clone()
        .unwrap();
    assert_eq!(
        (pref.level.as_str(), pref.mode),
        ("block", TopologyMode::Preferred)
    );
    let js = workload(&t, "default/jobset-tas-required");
    assert_eq!(js.topology.as_ref().unwrap().level, "rack");
    assert!(js
        .sources
        .iter()
        .any(|s| s.to_string() == "JobSet default/jobset-tas-required"
            && s.api_version == "jobset.x-k8s.io/v1alpha2"));
}

#[test]
fn scheduling_podgroup_with_dra_sidecars_and_overhead() {
    let t = run(&["written/sched-podgroup.yaml"]);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = workload(&t, "ml/train-a");
    assert_eq!((w.pod_count(), w.min(), w.priority), (4, 4, 100));
    let topo = w.topology.as_ref().unwrap();
    assert_eq!(
        (topo.level.as_str(), topo.mode),
        ("rack", TopologyMode::Required)
    );
    assert_eq!(w.pod_sets.len(), 1);
    assert_eq!(w.pod_sets[0].name, "train-a");
    let pod = &w.pod_sets[0].pod;
    // max(init 40, containers 32 + sidecar 1) + overhead 250m.
    assert_eq!(pod.requests["cpu"], "40250m");
    // max(8Gi, 256Gi + 1Gi) + 120Mi.
    assert_eq!(pod.requests["memory"], "263288Mi");
    assert_eq!(pod.node_selector["pool"], "training");
    let claim = &pod.claims[0];
    let gpus = claim.requests[0].exactly.as_ref().unwrap();
    assert_eq!(gpus.count, 8);
    let nic = &claim.requests[1].first_available;
    assert_eq!(nic.len(), 2);
    assert_eq!(nic[0].name.as_deref(), Some("ib"));
    assert_eq!(claim.constraints[0].requests, ["gpus", "nic"]);
    // The running notebook is bound (its GPU limit stands in as request);
    // the finished pod is neither.
    assert_eq!(t.demand.bound.len(), 1);
    assert_eq!(t.demand.bound[0].node, "gpu-001");
    assert_eq!(t.demand.bound[0].requests["nvidia.com/gpu"], "1");
    assert_eq!(t.skipped_pods, 1);
}

#[test]
fn coscheduling_and_provisioning_requests() {
    let t = run(&["written/cosched-podgroup.yaml"]);
    let w = workload(&t, "hpc/mpi-job");
    assert_eq!((w.pod_count(), w.min()), (3, 3));
    let sets: Vec<(&str, u32)> = w
        .pod_sets
        .iter()
        .map(|s| (s.name.as_str(), s.count))
        .collect();
    assert_eq!(sets, [("mpi-job-launcher", 1), ("mpi-job-worker", 2)]);
    assert_eq!(w.pod_sets[1].pod.requests["nvidia.com/gpu"], "4");

    let t = run(&["written/provisioning-request.yaml"]);
    let w = workload(&t, "team-b/job-1-prov");
    assert_eq!((w.pod_count(), w.min()), (6, 6));
    assert_eq!(
        w.sources[0],
        accord::demand::ObjectRef::new(
            "autoscaling.x-k8s.io/v1",
            "ProvisioningRequest",
            "team-b",
            "job-1-prov"
        )
    );
    assert_eq!(w.pod_sets[0].pod.requests["nvidia.com/gpu"], "8");

    // v1beta1 has v1's shape: read as such, and named at its version (so
    // conditions are written back at it).
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kubernetes/written/provisioning-request.yaml");
    let v1 = std::fs::read_to_string(path).unwrap();
    let beta = v1.replace(
        "apiVersion: autoscaling.x-k8s.io/v1\n",
        "apiVersion: autoscaling.x-k8s.io/v1beta1\n",
    );
    let options = Options::for_topology(&TopologyConfig::default());
    let t = translate(&Manifests::parse(&beta, "beta").unwrap(), &options);
    assert!(t.unsupported.is_empty(), "{:?}", t.unsupported);
    let w = workload(&t, "team-b/job-1-prov");
    assert_eq!((w.pod_count(), w.min()), (6, 6));
    assert_eq!(w.sources[0].api_version, "autoscaling.x-k8s.io/v1beta1");

    // Once Provisioned, Kueue creates the pods with the consume
    // annotations: they run on the booked capacity, not new demand. A pod
    // naming a request that does not exist is planned as any pod.
    let provisioned = format!(
        "{v1}status:\n  conditions:\n  - {{type: Provisioned, status: \"True\", reason: CapacityIsProvisioned}}\n"
    );
    let pod = |name: &str, key: &str, pr: &str| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  namespace: team-b\n  name: {name}\n  annotations: {{{key}/consume-provisioning-request: {pr}, {key}/provisioning-class-name: best-effort-atomic-scale-up.autoscaling.x-k8s.io}}\nspec: {{containers: [{{name: main, image: t, resources: {{requests: {{nvidia.com/gpu: \"8\"}}}}}}]}}\n"
        )
    };
    let text = format!(
        "{provisioned}{}{}{}",
        pod("job-1-a", "autoscaling.x-k8s.io", "job-1-prov"),
        pod("job-1-b", "cluster-autoscaler.kubernetes.io", "job-1-prov"),
        pod("stray", "autoscaling.x-k8s.io", "no-such-request"),
    );
    let t = translate(&Manifests::parse(&text, "kueue").unwrap(), &options);
    assert_eq!(t.consuming_pods, 2, "{}", t.render());
    let keys: Vec<String> = t.demand.workloads.iter().map(|w| w.key()).collect();
    assert_eq!(keys, ["team-b/stray"], "{}", t.render());
}

#[test]
fn malformed_objects_cannot_be_planned_and_stop_nothing() {
    let t = run(&["written/broken.yaml"]);
    let reasons: Vec<(&str, &str)> = t
        .cannot_plan
        .iter()
        .map(|c| (c.workload.as_str(), c.reason.as_str()))
        .collect();
    let expect = [
        ("bad/pod-cel-misplaced", "a selector without `cel`"),
        (
            "bad/pod-missing-template",
            "ResourceClaimTemplate bad/missing-template not found",
        ),
        ("bad/pod-negative-count", "negative count -2"),
        ("bad/pod-unknown-function", "unknown function `fuzzyMatch`"),
    ];
    assert_eq!(reasons.len(), expect.len(), "{}", t.render());
    for ((w, r), (ew, er)) in reasons.iter().zip(expect) {
        assert_eq!(*w, ew);
        assert!(r.contains(er), "{w}: {r}");
    }
    // The good pod is still there.
    assert_eq!(workload(&t, "bad/fine").pod_count(), 1);
}

#[test]
fn a_gang_missing_pods_or_its_group_waits_with_a_reason() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {namespace: x, name: a, labels: {scheduling.x-k8s.io/pod-group: g}}\nspec: {containers: [{name: c, image: i}]}\n";
    let t = translate(
        &Manifests::parse(text, "t").unwrap(),
        &Options::for_topology(&TopologyConfig::default()),
    );
    assert_eq!(
        t.cannot_plan[0].reason,
        "PodGroup x/g (scheduling.x-k8s.io) not found"
    );
    let with_group = format!(
        "{text}---\napiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {{namespace: x, name: g}}\nspec: {{minMember: 3}}\n"
    );
    let t = translate(
        &Manifests::parse(&with_group, "t").unwrap(),
        &Options::for_topology(&TopologyConfig::default()),
    );
    assert_eq!(
        t.cannot_plan[0].reason,
        "gang needs 3 pods, 1 exist (waiting for the rest)"
    );
    // Bad YAML: the file, line and column.
    let err = Manifests::parse("a: [1,\n", "bad.yaml")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("bad.yaml:"), "{err}");
}

#[test]
fn translation_is_deterministic() {
    let files = [
        "written/sched-podgroup.yaml",
        "dra/k8s-dra-driver-gpu/gpu-test4.yaml",
        "kueue/pods-kueue/kueue-pod-group.yaml",
    ];
    let a = serde_json::to_string(&run(&files).demand).unwrap();
    let mut reversed = files;
    reversed.reverse();
    let b = serde_json::to_string(&run(&reversed).demand).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_controllers_pods_are_its_demand_not_its_template_twice() {
    // As a live cluster shows a Kueue Job: the Job and its 3 pods, 2 of
    // them still pending, 1 running.
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {namespace: ml, name: j, uid: u1, labels: {kueue.x-k8s.io/queue-name: q}}\nspec:\n  parallelism: 3\n  template:\n    spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: \"8\"}}}]}\n";
    let pod = |name: &str, pending: bool| {
        let status = if pending {
            "status: {conditions: [{type: PodScheduled, status: \"False\", reason: Unschedulable}]}"
        } else {
            "status: {phase: Running}"
        };
        let node = if pending { "" } else { "  nodeName: gpu-009\n" };
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{namespace: ml, name: {name}, ownerReferences: [{{apiVersion: batch/v1, kind: Job, name: j, uid: u1, controller: true}}]}}\nspec:\n{node}  containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: \"8\"}}}}}}]\n{status}\n"
        )
    };
    let text = format!(
        "{job}{}{}{}",
        pod("j-a", true),
        pod("j-b", true),
        pod("j-c", false)
    );
    let m = Manifests::parse(&text, "live").unwrap();
    let mut live = Options::for_topology(&TopologyConfig::default());
    live.pending_without_status = false;
    let t = translate(&m, &live);
    assert_eq!(t.demand.workloads.len(), 1, "{}", t.render());
    let w = &t.demand.workloads[0];
    assert_eq!((w.key().as_str(), w.pod_count(), w.min()), ("ml/j", 2, 2));
    assert_eq!(t.demand.bound.len(), 1);
    // In manifests the same: the pods exist, so the template adds nothing.
    let t = translate(&m, &Options::for_topology(&TopologyConfig::default()));
    assert_eq!(t.demand.workloads[0].pod_count(), 2);
    // A live Job with no pending pods is no demand.
    let t = translate(
        &Manifests::parse(&format!("{job}{}", pod("j-c", false)), "live").unwrap(),
        &live,
    );
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
}

#[test]
fn a_statefulset_under_kueue_with_annotations_only_is_one_gang() {
    // Kueue ≥ 0.18's StatefulSet integration stamps the group's name and
    // total count on the pods as annotations, no label: four pending
    // replicas are one gang of four, not four single pods of a StatefulSet.
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {namespace: ml, name: serve, uid: s1, labels: {kueue.x-k8s.io/queue-name: q}}\nspec:\n  replicas: 4\n  selector: {matchLabels: {app: serve}}\n  template:\n    metadata: {labels: {app: serve}}\n    spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: \"8\"}}}]}\n";
    let pod = |i: u32, group_as: &str| {
        let group = "kueue.x-k8s.io/pod-group-name: serve-group, kueue.x-k8s.io/pod-group-total-count: \"4\"";
        let (labels, annotations) = match group_as {
            "labels" => (format!(", {group}"), String::new()),
            _ => (String::new(), format!("\n  annotations: {{{group}}}")),
        };
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  namespace: ml\n  name: serve-{i}\n  labels: {{app: serve, kueue.x-k8s.io/queue-name: q{labels}}}{annotations}\n  ownerReferences: [{{apiVersion: apps/v1, kind: StatefulSet, name: serve, uid: s1, controller: true}}]\nspec:\n  containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: \"8\"}}}}}}]\nstatus: {{conditions: [{{type: PodScheduled, status: \"False\", reason: Unschedulable}}]}}\n"
        )
    };
    let mut live = Options::for_topology(&TopologyConfig::default());
    live.pending_without_status = false;
    for group_as in ["annotations", "labels"] {
        let text = format!(
            "{sts}{}",
            (0..4).map(|i| pod(i, group_as)).collect::<String>()
        );
        let t = translate(&Manifests::parse(&text, "live").unwrap(), &live);
        assert_eq!(t.demand.workloads.len(), 1, "{group_as}: {}", t.render());
        let w = &t.demand.workloads[0];
        assert_eq!(
            (w.key().as_str(), w.pod_count(), w.min()),
            ("ml/serve-group", 4, 4),
            "{group_as}"
        );
        assert_eq!(w.sources[0].kind, "KueuePodGroup");
    }
    // The annotation wins over a stale label, as Kueue reads it.
    let text = format!(
        "{sts}{}",
        (0..2)
            .map(|i| pod(i, "annotations").replace(
                "labels: {app: serve,",
                "labels: {kueue.x-k8s.io/pod-group-name: old, kueue.x-k8s.io/pod-group-total-count: \"9\", app: serve,"
            ))
            .collect::<String>()
    );
    let t = translate(&Manifests::parse(&text, "live").unwrap(), &live);
    assert!(
        t.cannot_plan.iter().all(|c| !c.workload.contains("old")),
        "{}",
        t.render()
    );
    assert_eq!(t.cannot_plan.len(), 1, "{}", t.render());
    assert!(
        t.cannot_plan[0]
            .reason
            .contains("gang needs 4 pods, 2 exist"),
        "{}",
        t.render()
    );
}

/// One pod with a claim template and its class, at `api_version`, in that
/// version's shape (v1beta1: flat requests; v1beta2 and v1: `exactly`).
fn dra_manifests(api_version: &str) -> String {
    let request = if api_version.ends_with("v1beta1") {
        "      - name: gpus\n        deviceClassName: gpu.example.com\n        count: 2\n        \
         selectors: [{cel: {expression: \"device.attributes['gpu.example.com'].model == 'H100'\"}}]\n      \
         - name: any\n        firstAvailable: [{name: big, deviceClassName: gpu.example.com}]\n"
    } else {
        "      - name: gpus\n        exactly:\n          deviceClassName: gpu.example.com\n          count: 2\n          \
         selectors: [{cel: {expression: \"device.attributes['gpu.example.com'].model == 'H100'\"}}]\n      \
         - name: any\n        firstAvailable: [{name: big, deviceClassName: gpu.example.com}]\n"
    };
    format!(
        "apiVersion: {api_version}\nkind: DeviceClass\nmetadata: {{name: gpu.example.com}}\n\
         spec:\n  selectors: [{{cel: {{expression: \"device.driver == 'gpu.example.com'\"}}}}]\n---\n\
         apiVersion: {api_version}\nkind: ResourceClaimTemplate\nmetadata: {{namespace: ml, name: two}}\n\
         spec:\n  spec:\n    devices:\n      requests:\n{request}---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{namespace: ml, name: p}}\nspec:\n  \
         resourceClaims: [{{name: gpus, resourceClaimTemplateName: two}}]\n  \
         containers: [{{name: c, image: i, resources: {{claims: [{{name: gpus}}]}}}}]\n"
    )
}

#[test]
fn dra_beta_versions_read_as_v1() {
    let options = Options::for_topology(&TopologyConfig::default());
    let run = |v: &str| {
        let m = Manifests::parse(&dra_manifests(v), v).unwrap();
        translate(&m, &options)
    };
    let v1 = run("resource.k8s.io/v1");
    assert!(
        v1.cannot_plan.is_empty() && v1.invalid.is_empty(),
        "{}",
        v1.render()
    );
    assert_eq!(v1.demand.workloads.len(), 1);
    for beta in ["resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"] {
        let t = run(beta);
        assert!(t.unsupported.is_empty(), "{beta}: {:?}", t.unsupported);
        assert_eq!(t.demand, v1.demand, "{beta} reads as v1");
    }
    let claim = &v1.demand.workloads[0].pod_sets[0].pod.claims[0];
    let exact = claim.requests[0].exactly.as_ref().unwrap();
    assert_eq!(
        (exact.device_class.as_str(), exact.count),
        ("gpu.example.com", 2)
    );
    assert_eq!(
        claim.requests[1].first_available[0].device_class,
        "gpu.example.com"
    );
}

#[test]
fn dra_beta_conversion_never_panics_on_odd_shapes() {
    use serde_json::json;
    for odd in [
        json!({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "spec": 3}),
        json!({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
               "spec": {"devices": {"requests": [1, "x", null, {"name": "r"}]}}}),
        json!({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate",
               "spec": {"spec": []}}),
        json!({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
               "spec": {"devices": [{"basic": "x"}, 4, {"name": "d", "basic": {"name": "other"}}]}}),
        json!({"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass"}),
        json!("resource.k8s.io/v1beta1"),
        json!(["resource.k8s.io/v1beta1"]),
    ] {
        let out = accord_kube::manifests::dra_as_v1(odd.clone());
        if odd.is_object() {
            assert_eq!(out["apiVersion"], "resource.k8s.io/v1", "{odd}");
        } else {
            assert_eq!(out, odd);
        }
        let mut m = Manifests::default();
        m.add(odd, "odd");
    }
    // The device's own name wins over one inside `basic`.
    let s = accord_kube::manifests::dra_as_v1(json!({"apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice", "spec": {"devices": [{"name": "d", "basic": {"name": "other"}}]}}));
    assert_eq!(s["spec"]["devices"][0], json!({"name": "d"}));
}

/// Pods that run because their node does (cluster-autoscaler's
/// `IsDaemonSetPod`, `IsMirrorPod`) are node agents; the do-not-disrupt
/// opt-outs of Karpenter and cluster-autoscaler are read.
#[test]
fn bound_daemonset_and_mirror_pods_are_node_agents_and_opt_outs_are_read() {
    let pod = |name: &str, meta: &str| {
        format!(
            "---\n{{apiVersion: v1, kind: Pod, metadata: {{namespace: kube-system, name: {name}{meta}}}, \
             spec: {{nodeName: n1, containers: [{{name: c, image: c}}]}}, status: {{phase: Running}}}}\n"
        )
    };
    let owned = |kind: &str| {
        format!(", ownerReferences: [{{apiVersion: v1, kind: {kind}, name: x, uid: u, controller: true}}]")
    };
    let text = [
        pod("work", ""),
        pod("ds", &owned("DaemonSet")),
        pod(
            "not-controller",
            ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: x, uid: u}]",
        ),
        pod(
            "mirror",
            ", annotations: {kubernetes.io/config.mirror: abc}",
        ),
        pod("static", &owned("Node")),
        pod(
            "says-ds",
            ", annotations: {cluster-autoscaler.kubernetes.io/daemonset-pod: \"true\"}",
        ),
        pod(
            "ds-keep",
            &format!(
                "{}, annotations: {{karpenter.sh/do-not-disrupt: \"true\"}}",
                owned("DaemonSet")
            ),
        ),
        pod(
            "ds-unsafe",
            &format!(
                "{}, annotations: {{cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\"}}",
                owned("DaemonSet")
            ),
        ),
        pod("rs", &owned("ReplicaSet")),
    ]
    .concat();
    let t = translate(
        &Manifests::parse(&text, "live").unwrap(),
        &Options::for_topology(&TopologyConfig::default()),
    );
    let flags: Vec<(&str, bool, bool)> = t
        .demand
        .bound
        .iter()
        .map(|b| (b.name.as_str(), b.node_agent, b.do_not_disrupt))
        .collect();
    let mut want = vec![
        ("work", false, false),
        ("ds", true, false),
        ("not-controller", false, false),
        ("mirror", true, false),
        ("static", true, false),
        ("says-ds", true, false),
        ("ds-keep", true, true),
        ("ds-unsafe", true, true),
        ("rs", false, false),
    ];
    let mut got = flags.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let busy: Vec<&str> = t
        .demand
        .bound
        .iter()
        .filter(|b| b.keeps_node_busy())
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(busy.len(), 5, "{busy:?}");
}

#[test]
fn bound_pods_hold_the_devices_of_their_allocated_claims_each_claim_once() {
    // Two pods share claim `shared` (gpu-0 whole, a share of gpu-1); one
    // holds its template's claim through resourceClaimStatuses (gpu-2,
    // and gpu-3 with admin access: held by nobody); one's claim is not
    // allocated yet.
    let text = r#"
{apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {namespace: ml, name: shared},
 spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com}}]}},
 status: {allocation: {devices: {results: [
   {request: g, driver: gpu.nvidia.com, pool: n1, device: gpu-0},
   {request: g, driver: gpu.nvidia.com, pool: n1, device: gpu-1, consumedCapacity: {memory: 10Gi}}]}}}}
---
{apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {namespace: ml, name: made-x7},
 spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com}}]}},
 status: {allocation: {devices: {results: [
   {request: g, driver: gpu.nvidia.com, pool: n1, device: gpu-2},
   {request: g, driver: gpu.nvidia.com, pool: n1, device: gpu-3, adminAccess: true}]}}}}
---
{apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {namespace: ml, name: waiting},
 spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: a},
 spec: {nodeName: n1, containers: [{name: c, image: c}], resourceClaims: [{name: gpu, resourceClaimName: shared}]},
 status: {phase: Running}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: b},
 spec: {nodeName: n1, containers: [{name: c, image: c}], resourceClaims: [{name: gpu, resourceClaimName: shared}]},
 status: {phase: Running}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: c},
 spec: {nodeName: n1, containers: [{name: c, image: c}], resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]},
 status: {phase: Running, resourceClaimStatuses: [{name: gpu, resourceClaimName: made-x7}]}}
---
{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: d},
 spec: {nodeName: n1, containers: [{name: c, image: c}], resourceClaims: [{name: gpu, resourceClaimName: waiting}]},
 status: {phase: Pending}}
"#;
    let t = translate(
        &Manifests::parse(text, "live").unwrap(),
        &Options::for_topology(&TopologyConfig::default()),
    );
    let held: Vec<(String, Vec<(String, String)>)> = {
        let mut v: Vec<_> = t
            .demand
            .bound
            .iter()
            .flat_map(|b| {
                b.devices.iter().map(|d| {
                    (
                        format!("{}:{}", b.name, d.name),
                        d.capacity.clone().into_iter().collect(),
                    )
                })
            })
            .collect();
        v.sort();
        v
    };
    let want = |pod: &str| {
        vec![
            (format!("{pod}:gpu-0"), vec![]),
            (
                format!("{pod}:gpu-1"),
                vec![("gpu.nvidia.com/memory".to_owned(), "10Gi".to_owned())],
            ),
            ("c:gpu-2".to_owned(), vec![]),
        ]
    };
    // `shared` is held once, by whichever of a and b comes first.
    assert!(held == want("a") || held == want("b"), "{held:?}");
    assert_eq!(t.demand.bound.len(), 4, "{}", t.render());
}

/// A node's DRA devices as NVIDIA's driver publishes them: GPUs with a
/// `driverVersion` version attribute.
fn nvidia_gpus(node: &str, driver_version: &str) -> accord_kube::cluster::Published {
    let gpu = |i: u32| {
        serde_json::json!({"name": format!("gpu-{i}"), "attributes": {
            "type": {"string": "gpu"}, "driverVersion": {"version": driver_version}}})
    };
    let slice: k8s_openapi::api::resource::v1::ResourceSlice =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-gpus")},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [gpu(0), gpu(1)]}
        }))
        .unwrap();
    let (mut published, problems) = accord_kube::cluster::published(vec![slice], &[]);
    assert!(problems.is_empty(), "{problems:?}");
    published.remove(node).unwrap()
}

#[test]
fn nvidias_published_device_classes_and_semver_selector_select_as_upstream() {
    // The chart's DeviceClasses and the driver's e2e claim with
    // `driverVersion.compareTo(semver("580.0.0")) >= 0`, as shipped.
    let t = run(&[
        "dra/k8s-dra-driver-gpu/chart/deviceclasses.yaml",
        "dra/k8s-dra-driver-gpu/chart/e2e-driver-version.yaml",
    ]);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = workload(&t, "gpu-test/test-gpu-driver-version");
    let pod = &w.pod_sets[0].pod;
    assert!(pod.claims[0].requests[0]
        .exactly
        .as_ref()
        .unwrap()
        .selectors[0]
        .contains("semver(\"580.0.0\")"));
    // Selected where the driver is 580.105.4, not where it is 575.57.8.
    let on = |version: &str| crate::cluster::allocate_on("n1", nvidia_gpus("n1", version), pod);
    assert_eq!(on("580.105.4").unwrap(), ["gpu-0"]);
    let err = on("575.57.8").unwrap_err();
    assert!(err.contains("devices unavailable"), "{err}");
}

#[test]
fn an_extended_resource_a_device_class_maps_is_a_device_request() {
    // NVIDIA's chart maps nvidia.com/gpu to its gpu.nvidia.com class
    // (`extendedResourceName`, GA in 1.37): a pod asking 2 nvidia.com/gpu
    // asks DRA for 2 devices of that class, taints and all.
    let pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {namespace: ml, name: p}\nspec:\n  containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: \"2\"}}}]\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kubernetes/dra/k8s-dra-driver-gpu/chart/deviceclasses.yaml");
    let classes = std::fs::read_to_string(path).unwrap();
    let options = Options::for_topology(&TopologyConfig::default());
    let t = translate(
        &Manifests::parse(&format!("{classes}{pod}"), "t").unwrap(),
        &options,
    );
    let spec = &t.demand.workloads[0].pod_sets[0].pod;
    assert!(!spec.requests.contains_key("nvidia.com/gpu"), "{spec:?}");
    let e = spec.claims[0].requests[0].exactly.as_ref().unwrap();
    assert_eq!((e.device_class.as_str(), e.count), ("gpu.nvidia.com", 2));
    let mut published = nvidia_gpus("n1", "580.105.4");
    assert_eq!(
        crate::cluster::allocate_on("n1", published.clone(), spec).unwrap(),
        ["gpu-0", "gpu-1"]
    );
    published.devices[1]
        .taints
        .push(accord::device::DeviceTaint {
            key: "gpu.nvidia.com/unhealthy".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        });
    assert!(crate::cluster::allocate_on("n1", published, spec).is_err());
    // Without the mapping it stays a device-plugin resource.
    let t = translate(&Manifests::parse(pod, "t").unwrap(), &options);
    assert_eq!(
        t.demand.workloads[0].pod_sets[0].pod.requests["nvidia.com/gpu"],
        "2"
    );
}

#[test]
fn pods_naming_a_pod_group_the_cluster_does_not_serve_are_planned_one_by_one() {
    // 1.36 with its v1alpha2 PodGroup, read as v1beta1: one gang of 4.
    let group = "apiVersion: scheduling.k8s.io/v1alpha2\nkind: PodGroup\nmetadata: {namespace: ml, name: train}\nspec:\n  disruptionMode: Pod\n  schedulingPolicy: {gang: {minCount: 4}}\n";
    let pods: String = (0..4)
        .map(|i| format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{namespace: ml, name: w{i}}}\nspec:\n  schedulingGroup: {{podGroupName: train}}\n  containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: \"8\"}}}}}}]\n"))
        .collect();
    let m = Manifests::parse(&format!("{group}{pods}"), "t").unwrap();
    let mut options = Options::for_topology(&TopologyConfig::default());
    let t = translate(&m, &options);
    assert!(t.unsupported.is_empty(), "{:?}", t.unsupported);
    assert_eq!(t.demand.workloads.len(), 1, "{}", t.render());
    assert_eq!(
        (
            t.demand.workloads[0].pod_count(),
            t.demand.workloads[0].min()
        ),
        (4, 4)
    );
    // Where no PodGroup version is served: pod by pod, said once.
    options.pod_groups_served = false;
    let t = translate(&Manifests::parse(&pods, "t").unwrap(), &options);
    assert_eq!(t.demand.workloads.len(), 4, "{}", t.render());
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    assert_eq!(
        t.unsupported,
        [accord_kube::translate::POD_GROUPS_NOT_SERVED],
        "said once"
    );
}

#[test]
fn a_pod_groups_own_claims_are_planned_once_for_the_group() {
    // PodGroup resourceClaims (beta in 1.37): pods whose claim matches the
    // group's exactly share its one allocation; a pod's own claim stays
    // its own.
    let text = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: ml, name: one-gpu}
spec: {spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.nvidia.com, count: 1}}]}}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {namespace: ml, name: train}
spec:
  schedulingPolicy: {gang: {minCount: 4}}
  resourceClaims: [{name: shared, resourceClaimTemplateName: one-gpu}]
"#;
    let pods: String = (0..4)
        .map(|i| format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{namespace: ml, name: w{i}}}\nspec:\n  schedulingGroup: {{podGroupName: train}}\n  resourceClaims: [{{name: shared, resourceClaimTemplateName: one-gpu}}, {{name: own, resourceClaimTemplateName: one-gpu}}]\n  containers: [{{name: c, image: i}}]\n"))
        .collect();
    let t = translate(
        &Manifests::parse(&format!("{text}{pods}"), "t").unwrap(),
        &Options::for_topology(&TopologyConfig::default()),
    );
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = workload(&t, "ml/train");
    assert_eq!((w.pod_count(), w.min()), (4, 4));
    let claims = |name: &str| -> u32 {
        w.pod_sets
            .iter()
            .map(|s| s.count * s.pod.claims.iter().filter(|c| c.name == name).count() as u32)
            .sum()
    };
    assert_eq!(claims("shared"), 1, "{:#?}", w.pod_sets);
    assert_eq!(claims("own"), 4);
}

/// Kubernetes 1.35's gangs in manifests: a `scheduling.k8s.io/v1alpha1`
/// Workload's gang pod group, its pods naming it in `spec.workloadRef`;
/// with replica keys, each replica is a gang of its own with the group's
/// minimum.
#[test]
fn a_1_35_workloads_pod_groups_are_gangs_per_replica() {
    let workload = "apiVersion: scheduling.k8s.io/v1alpha1\nkind: Workload\nmetadata: {namespace: ml, name: train}\nspec:\n  podGroups: [{name: workers, policy: {gang: {minCount: 2}}}]\n";
    let pod = |i: u32, key: &str| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{namespace: ml, name: w-{key}-{i}}}\nspec:\n  workloadRef: {{name: train, podGroup: workers, podGroupReplicaKey: {key}}}\n  containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: \"8\"}}}}}}]\n"
        )
    };
    let text = format!(
        "{workload}{}{}{}{}",
        pod(0, "a"),
        pod(1, "a"),
        pod(0, "b"),
        pod(1, "b")
    );
    let m = Manifests::parse(&text, "gangs-1.35.yaml").unwrap();
    let t = translate(&m, &Options::for_topology(&TopologyConfig::default()));
    let gangs: Vec<(String, u32, u32)> = t
        .demand
        .workloads
        .iter()
        .map(|w| (w.key(), w.pod_count(), w.min()))
        .collect();
    assert_eq!(
        gangs,
        [
            ("ml/train/workers/a".to_owned(), 2, 2),
            ("ml/train/workers/b".to_owned(), 2, 2)
        ],
        "{}",
        t.render()
    );
    assert_eq!(t.demand.workloads[0].sources[0].kind, "Workload");
    assert_eq!(t.demand.workloads[0].sources[0].name, "train");
}

/// CapacityBuffers resolve as the upstream buffer controller does: the
/// larger of `replicas` and `percentage` of the scalable's, capped by
/// `limits`; one that does not resolve is no demand, and says why.
#[test]
fn capacity_buffers_become_placeholders_of_their_template() {
    use accord_kube::translate::buffer::{resolve, BufferIndex};
    let text = r#"
{apiVersion: v1, kind: PodTemplate, metadata: {namespace: ml, name: node, generation: 3}, template: {spec: {containers: [{name: c, image: c, resources: {limits: {nvidia.com/gpu: "8"}}}]}}}
---
{apiVersion: apps/v1, kind: Deployment, metadata: {namespace: ml, name: serve}, spec: {replicas: 3, selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: c, resources: {limits: {nvidia.com/gpu: "1"}}}]}}}}
---
{apiVersion: autoscaling.x-k8s.io/v1beta1, kind: CapacityBuffer, metadata: {namespace: ml, name: capped}, spec: {podTemplateRef: {name: node}, replicas: 5, limits: {nvidia.com/gpu: "20"}}}
---
{apiVersion: autoscaling.x-k8s.io/v1alpha1, kind: CapacityBuffer, metadata: {namespace: ml, name: share}, spec: {scalableRef: {apiGroup: apps, kind: Deployment, name: serve}, percentage: 50}}
---
{apiVersion: autoscaling.x-k8s.io/v1beta1, kind: CapacityBuffer, metadata: {namespace: ml, name: lost}, spec: {podTemplateRef: {name: gone}, replicas: 1}}
---
{apiVersion: autoscaling.x-k8s.io/v1beta1, kind: CapacityBuffer, metadata: {namespace: ml, name: huge}, spec: {podTemplateRef: {name: node}, replicas: 9000000000}}
"#;
    let m = Manifests::parse(text, "buffers.yaml").unwrap();
    let options = Options::for_topology(&TopologyConfig::default());
    let t = translate(&m, &options);
    // 5 wanted, 20 GPUs hold 2 pods of 8.
    let capped = workload(&t, "ml/CapacityBuffer.capped");
    assert_eq!(capped.pod_count(), 2);
    assert_eq!(capped.sources[0].kind, "CapacityBuffer");
    // 50 % of 3 replicas, rounded up.
    assert_eq!(workload(&t, "ml/CapacityBuffer.share").pod_count(), 2);
    assert!(
        !t.demand
            .workloads
            .iter()
            .any(|w| w.name.ends_with(".lost") || w.name.ends_with(".huge")),
        "{}",
        t.render()
    );
    let index = BufferIndex::of(&m);
    type Resolved = Result<(u32, Option<(String, Option<i64>)>), &'static str>;
    let status: Vec<(String, Resolved)> = m
        .objects
        .iter()
        .filter_map(|o| match o {
            accord_kube::manifests::Object::CapacityBuffer(cb) => Some((
                cb.metadata.name.clone().unwrap(),
                resolve(cb, &index, &options)
                    .map(|r| (r.replicas, r.pod_template))
                    .map_err(|u| u.reason),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        status,
        [
            ("capped".into(), Ok((2, Some(("node".into(), Some(3)))))),
            ("share".into(), Ok((2, None))),
            ("lost".into(), Err("PodTemplateNotFound")),
            ("huge".into(), Err("ResolutionFailed")),
        ]
    );
}
