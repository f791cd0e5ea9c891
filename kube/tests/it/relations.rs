//! Pods' relations read as kube-scheduler v1.37.2 reads them: required pod
//! affinity and anti-affinity (matchLabelKeys merged into the selector),
//! DoNotSchedule spread (ScheduleAnyway only scores), host ports of
//! containers and sidecars, labels kept only where a selector reads them;
//! and the pods Accord leaves alone (another scheduler's, nominated ones).

use accord::demand::{InclusionPolicy, LabelOperator, PodAffinityTerm};
use accord::fleet::TopologyConfig;
use accord_kube::{translate, Manifests, Options, Translation};

fn run(yaml: &str, options: &Options) -> Translation {
    translate(&Manifests::parse(yaml, "test.yaml").unwrap(), options)
}

fn options() -> Options {
    Options::for_topology(&TopologyConfig::default())
}

const WORKERS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: { name: train, namespace: ml }
spec:
  replicas: 4
  selector: { matchLabels: { app: train } }
  template:
    metadata: { labels: { app: train, pod-template-hash: abc, unread: x } }
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: { matchLabels: { app: train } }
            matchLabelKeys: [pod-template-hash]
            topologyKey: kubernetes.io/hostname
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 1
            podAffinityTerm: { labelSelector: {}, topologyKey: zone }
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.accord.dev/rack
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: { matchLabels: { app: train } }
      - maxSkew: 1
        topologyKey: zone
        whenUnsatisfiable: ScheduleAnyway
        labelSelector: { matchLabels: { app: train } }
      initContainers:
      - name: sidecar
        restartPolicy: Always
        ports: [ { containerPort: 9000, hostPort: 9000, protocol: UDP } ]
      - name: init
        ports: [ { containerPort: 9100, hostPort: 9100 } ]
      containers:
      - name: w
        ports: [ { containerPort: 8080, hostPort: 8080 }, { containerPort: 80 } ]
        resources: { limits: { nvidia.com/gpu: "2" } }
"#;

#[test]
fn a_deployments_relations_are_read_as_the_scheduler_reads_them() {
    let t = run(WORKERS, &options());
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = &t.demand.workloads[0];
    assert_eq!(w.pod_sets.len(), 1);
    let pod = &w.pod_sets[0].pod;
    // Only the keys some selector reads.
    assert_eq!(
        pod.labels.keys().collect::<Vec<_>>(),
        ["app", "pod-template-hash"]
    );
    let r = &pod.relations;
    assert!(r.affinity.is_empty(), "preferred terms only score");
    let [PodAffinityTerm {
        selector: Some(sel),
        topology_key,
        ..
    }] = &r.anti_affinity[..]
    else {
        panic!("{r:?}")
    };
    assert_eq!(topology_key, "kubernetes.io/hostname");
    assert_eq!(sel.match_labels["app"], "train");
    let merged = &sel.match_expressions[0];
    assert_eq!(
        (merged.key.as_str(), merged.operator, &merged.values[..]),
        (
            "pod-template-hash",
            LabelOperator::In,
            &["abc".to_owned()][..]
        )
    );
    assert_eq!(r.spread.len(), 1, "ScheduleAnyway only scores");
    assert_eq!(r.spread[0].min_domains, 1);
    assert_eq!(r.spread[0].node_affinity_policy, InclusionPolicy::Honor);
    assert_eq!(r.spread[0].node_taints_policy, InclusionPolicy::Honor);
    let ports: Vec<(u16, &str)> = r
        .host_ports
        .iter()
        .map(|p| (p.port, p.protocol.as_str()))
        .collect();
    assert_eq!(
        ports,
        [(9000, "UDP"), (8080, "")],
        "sidecars' and containers' only"
    );
}

#[test]
fn a_bound_pods_anti_affinity_and_ports_are_kept() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: { name: guard, namespace: ml, labels: { app: guard } }
spec:
  nodeName: n1
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: { matchLabels: { app: train } }
        topologyKey: kubernetes.io/hostname
  containers:
  - name: c
    ports: [ { containerPort: 53, hostPort: 53, protocol: UDP } ]
"#;
    let t = run(yaml, &options());
    let b = &t.demand.bound[0];
    assert_eq!(b.relations.anti_affinity.len(), 1);
    assert_eq!(b.relations.host_ports[0].port, 53);
}

#[test]
fn pods_of_another_scheduler_and_nominated_pods_are_not_planned() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: { name: volcano-pod, namespace: ml }
spec:
  schedulerName: volcano
  containers: [ { name: c, resources: { limits: { nvidia.com/gpu: "8" } } } ]
---
apiVersion: v1
kind: Pod
metadata: { name: preemptor, namespace: ml }
spec:
  containers: [ { name: c, resources: { limits: { nvidia.com/gpu: "8" } } } ]
status:
  nominatedNodeName: n3
  conditions: [ { type: PodScheduled, status: "False", reason: Unschedulable } ]
---
apiVersion: v1
kind: Pod
metadata: { name: plain, namespace: ml }
spec:
  schedulerName: default-scheduler
  containers: [ { name: c, resources: { limits: { nvidia.com/gpu: "8" } } } ]
"#;
    let t = run(yaml, &options());
    let keys: Vec<String> = t.demand.workloads.iter().map(|w| w.key()).collect();
    assert_eq!(keys, ["ml/plain"]);
    let not: Vec<(&str, &str)> = t
        .not_planned
        .iter()
        .map(|c| (c.workload.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(not.len(), 2, "{not:?}");
    assert!(not
        .iter()
        .any(|(w, r)| *w == "ml/volcano-pod" && r.contains("\"volcano\"")));
    assert!(not
        .iter()
        .any(|(w, r)| *w == "ml/preemptor" && r.contains("nominated node n3")));
    // Listed, volcano's pods are planned.
    let mut o = options();
    o.schedulers.insert("volcano".into());
    let t = run(yaml, &o);
    assert_eq!(t.demand.workloads.len(), 2);
}

#[test]
fn pods_with_no_relations_keep_no_labels_and_stay_one_pod_set() {
    // Pods whose labels differ but which no selector reads are one shape.
    let yaml = r#"
apiVersion: batch/v1
kind: Job
metadata: { name: j, namespace: ml }
spec:
  parallelism: 2
  template:
    metadata: { labels: { app: j } }
    spec:
      containers: [ { name: c, resources: { limits: { nvidia.com/gpu: "1" } } } ]
"#;
    let t = run(yaml, &options());
    let pod = &t.demand.workloads[0].pod_sets[0].pod;
    assert!(pod.labels.is_empty() && pod.relations.is_empty());
    // Bad input names what was wrong.
    let bad = WORKERS.replace(
        "maxSkew: 1\n        topologyKey: topology",
        "maxSkew: 0\n        topologyKey: topology",
    );
    let t = run(&bad, &options());
    assert!(t.demand.workloads.is_empty());
    assert!(
        t.cannot_plan[0].reason.contains("maxSkew 0"),
        "{:?}",
        t.cannot_plan
    );
}

#[test]
fn daemonsets_are_read_with_the_tolerations_their_controller_adds() {
    let yaml = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: { name: agent, namespace: kube-system }
spec:
  selector: { matchLabels: { app: agent } }
  template:
    metadata: { labels: { app: agent } }
    spec:
      hostNetwork: true
      nodeSelector: { kubernetes.io/os: linux }
      containers: [ { name: a, resources: { requests: { cpu: 500m, memory: 1Gi } } } ]
---
apiVersion: v1
kind: Pod
metadata:
  name: agent-x
  namespace: kube-system
  ownerReferences: [ { apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u, controller: true } ]
spec:
  nodeName: n1
  containers: [ { name: a, resources: { requests: { cpu: 500m } } } ]
"#;
    let t = run(yaml, &options());
    assert!(t.invalid.is_empty(), "{:?}", t.invalid);
    let ds = &t.demand.daemon_sets[0];
    assert_eq!(ds.key(), "kube-system/agent");
    assert_eq!(ds.pod.requests["cpu"], "500m");
    assert_eq!(ds.pod.node_selector["kubernetes.io/os"], "linux");
    let tolerated: Vec<&str> = ds
        .pod
        .tolerations
        .iter()
        .filter_map(|t| t.key.as_deref())
        .collect();
    assert!(tolerated.contains(&"node.kubernetes.io/unschedulable"));
    assert!(tolerated.contains(&"node.kubernetes.io/network-unavailable"));
    let b = &t.demand.bound[0];
    assert!(b.node_agent);
    assert_eq!(b.daemon_set.as_deref(), Some("kube-system/agent"));
}

/// A pod with `terms` required anti-affinity terms, `ports` host ports and
/// a selector of `parts` requirements: values the API server accepts.
fn big_pod(terms: usize, ports: usize, parts: usize) -> String {
    let exprs: Vec<String> = (0..parts)
        .map(|i| format!("{{key: k{i}, operator: Exists}}"))
        .collect();
    let term = format!(
        "{{labelSelector: {{matchExpressions: [{}]}}, topologyKey: kubernetes.io/hostname}}",
        exprs.join(", ")
    );
    let ports: Vec<String> = (0..ports)
        .map(|i| format!("{{containerPort: {p}, hostPort: {p}}}", p = 1000 + i))
        .collect();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: big, namespace: ml }}
spec:
  affinity: {{ podAntiAffinity: {{ requiredDuringSchedulingIgnoredDuringExecution: [{}] }} }}
  containers: [ {{ name: c, ports: [{}] }} ]
"#,
        vec![term; terms].join(", "),
        ports.join(", ")
    )
}

#[test]
fn relation_counts_past_the_limits_are_refused_by_name_and_at_the_limits_planned() {
    let refused = |yaml: String| {
        let t = run(&yaml, &options());
        assert!(t.demand.workloads.is_empty(), "{}", t.render());
        t.cannot_plan
            .iter()
            .chain(&t.not_planned)
            .map(|c| c.reason.clone())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let at_limits = run(&big_pod(64, 1024, 256), &options());
    assert_eq!(
        at_limits.demand.workloads.len(),
        1,
        "{}",
        at_limits.render()
    );
    let pod = &at_limits.demand.workloads[0].pod_sets[0].pod;
    assert_eq!(pod.relations.anti_affinity.len(), 64);
    assert_eq!(pod.relations.host_ports.len(), 1024);
    let why = refused(big_pod(65, 1, 1));
    assert!(
        why.contains("65 required") && why.contains("(at most 64)"),
        "{why}"
    );
    let why = refused(big_pod(1, 1025, 1));
    assert!(why.contains("more than 1024 host ports"), "{why}");
    let why = refused(big_pod(1, 1, 257));
    assert!(why.contains("257 requirements (at most 256)"), "{why}");
}
