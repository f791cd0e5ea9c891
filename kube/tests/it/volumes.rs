//! Pods' volumes read as kube-scheduler v1.37.2's volume filters read
//! them: a claim bound to a PV (the PV controller's bind-completed mark)
//! carries the PV's node affinity and zone labels; a claim that waits for
//! its consumer lists the available PVs it could bind and where its class
//! provisions; a missing claim, an unbound Immediate one and a
//! ReadWriteOncePod claim another pod uses block the pod; CSINodes give
//! attach limits, bound pods their attached volumes. Odd values upstream
//! accepts (a huge storage request, matchFields in a PV's affinity) are
//! read without a panic.

use accord::demand::{CsiVolume, PodVolumes, SelectorOperator};
use accord::fleet::TopologyConfig;
use accord_kube::{translate, Manifests, Options, Translation};

fn run(yaml: &str) -> Translation {
    translate(
        &Manifests::parse(yaml, "test.yaml").unwrap(),
        &Options::for_topology(&TopologyConfig::default()),
    )
}

const STORAGE: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: { name: local }
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: { name: zoned }
provisioner: disk.csi.example
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [ { key: topology.kubernetes.io/zone, values: [z1, z2] } ]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: { name: fast }
provisioner: disk.csi.example
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolume
metadata: { name: pv-db, labels: { topology.kubernetes.io/zone: z1__z2 } }
spec:
  capacity: { storage: 100Gi }
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: { path: /mnt/a }
  claimRef: { namespace: ml, name: db }
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [ { key: kubernetes.io/hostname, operator: In, values: [gpu-07] } ]
status: { phase: Bound }
---
apiVersion: v1
kind: PersistentVolume
metadata: { name: pv-big }
spec:
  capacity: { storage: 500Gi }
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: { path: /mnt/b }
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [ { key: kubernetes.io/hostname, operator: In, values: [gpu-02] } ]
status: { phase: Available }
---
apiVersion: v1
kind: PersistentVolume
metadata: { name: pv-small }
spec:
  capacity: { storage: 60Gi }
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: { path: /mnt/c }
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchFields: [ { key: metadata.name, operator: In, values: [gpu-03] } ]
      - matchExpressions: [ { key: kubernetes.io/hostname, operator: In, values: [gpu-03] } ]
status: { phase: Available }
---
apiVersion: v1
kind: PersistentVolume
metadata: { name: pv-released }
spec:
  capacity: { storage: 60Gi }
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: { path: /mnt/d }
status: { phase: Released }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: { name: db, namespace: ml, annotations: { pv.kubernetes.io/bind-completed: "yes" } }
spec: { accessModes: [ReadWriteOnce], storageClassName: local, volumeName: pv-db,
  resources: { requests: { storage: 100Gi } } }
status: { phase: Bound }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: { name: scratch, namespace: ml }
spec: { accessModes: [ReadWriteOnce], storageClassName: local,
  resources: { requests: { storage: 50Gi } } }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: { name: cache, namespace: ml }
spec: { accessModes: [ReadWriteOnce], storageClassName: zoned,
  resources: { requests: { storage: 1Gi } } }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: { name: now, namespace: ml }
spec: { accessModes: [ReadWriteOnce], storageClassName: fast,
  resources: { requests: { storage: 1Gi } } }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: { name: solo, namespace: ml }
spec: { accessModes: [ReadWriteOncePod], storageClassName: zoned,
  resources: { requests: { storage: 1Gi } } }
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: { name: huge, namespace: ml }
spec: { accessModes: [ReadWriteOnce], storageClassName: local,
  resources: { requests: { storage: 999999999999999999999999Ei } } }
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: { name: gpu-01 }
spec:
  drivers:
  - { name: disk.csi.example, nodeID: gpu-01, allocatable: { count: 3 } }
  - { name: other.csi.example, nodeID: gpu-01 }
"#;

fn pending(claims: &[&str]) -> String {
    let volumes: Vec<String> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{{ name: v{i}, persistentVolumeClaim: {{ claimName: {c} }} }}"))
        .collect();
    format!(
        r#"
---
apiVersion: v1
kind: Pod
metadata: {{ name: p, namespace: ml }}
spec:
  volumes: [ {} ]
  containers: [ {{ name: c, resources: {{ requests: {{ cpu: "1" }} }} }} ]
"#,
        volumes.join(", ")
    )
}

fn volumes_of(yaml: &str) -> PodVolumes {
    let t = run(yaml);
    assert!(
        t.cannot_plan.is_empty() && t.invalid.is_empty(),
        "{}",
        t.render()
    );
    t.demand.workloads[0].pod_sets[0].pod.volumes.clone()
}

#[test]
fn a_bound_claim_carries_its_pvs_node_affinity_and_zones() {
    let v = volumes_of(&format!("{STORAGE}{}", pending(&["db"])));
    assert_eq!(v.bound.len(), 1);
    let b = &v.bound[0];
    assert_eq!(b.pv, "pv-db");
    let terms = b.node_affinity.as_ref().expect("affinity");
    assert_eq!(terms[0].match_expressions[0].values, ["gpu-07"]);
    assert_eq!(terms[0].match_expressions[0].operator, SelectorOperator::In);
    assert_eq!(b.zones[0].key, "topology.kubernetes.io/zone");
    assert_eq!(b.zones[0].values, ["z1", "z2"]);
    assert!(v.blocked.is_none() && v.waiting.is_empty());
}

#[test]
fn a_waiting_claim_lists_the_pvs_it_could_bind_smallest_first_and_where_its_class_provisions() {
    let v = volumes_of(&format!("{STORAGE}{}", pending(&["scratch", "cache"])));
    let scratch = v.waiting.iter().find(|c| c.claim == "ml/scratch").unwrap();
    // Released and too-small PVs are not candidates; the matchFields term
    // sees an empty node name (CheckNodeAffinity) and is dropped.
    let names: Vec<&str> = scratch.candidates.iter().map(|c| c.pv.as_str()).collect();
    assert_eq!(names, ["pv-small", "pv-big"]);
    let small = scratch.candidates[0].node_affinity.as_ref().unwrap();
    assert_eq!(small.len(), 1);
    assert_eq!(small[0].match_expressions[0].values, ["gpu-03"]);
    assert_eq!(
        scratch.provisioning, None,
        "no-provisioner cannot provision"
    );
    assert_eq!(scratch.size, 50 << 30);
    let cache = v.waiting.iter().find(|c| c.claim == "ml/cache").unwrap();
    let topo = cache.provisioning.as_ref().expect("provisions");
    assert_eq!(topo[0].match_expressions[0].values, ["z1", "z2"]);
    // Unbound claims count under their class's provisioner, whatever it
    // is (csi.go getCSIDriverInfoFromSC): a limit applies only where a
    // CSINode names that driver.
    assert_eq!(
        v.csi,
        [
            CsiVolume {
                driver: "kubernetes.io/no-provisioner".into(),
                handle: "\u{1}claim:ml/scratch".into()
            },
            CsiVolume {
                driver: "disk.csi.example".into(),
                handle: "\u{1}claim:ml/cache".into()
            }
        ]
    );
}

#[test]
fn missing_immediate_and_taken_claims_block_the_pod_in_the_plugins_words() {
    let blocked = |yaml: String| volumes_of(&yaml).blocked.expect("blocked");
    let b = blocked(format!("{STORAGE}{}", pending(&["gone"])));
    assert_eq!(b.plugin, "VolumeRestrictions");
    assert_eq!(b.reason, "persistentvolumeclaim \"gone\" not found");
    let b = blocked(format!("{STORAGE}{}", pending(&["now"])));
    assert_eq!(
        (b.plugin.as_str(), b.reason.as_str()),
        (
            "VolumeBinding",
            "pod has unbound immediate PersistentVolumeClaims"
        )
    );
    // A ReadWriteOncePod claim another (bound) pod uses.
    let user = r#"
---
apiVersion: v1
kind: Pod
metadata: { name: holder, namespace: ml }
spec:
  nodeName: gpu-01
  volumes: [ { name: v, persistentVolumeClaim: { claimName: solo } } ]
  containers: [ { name: c } ]
"#;
    let b = blocked(format!("{STORAGE}{user}{}", pending(&["solo"])));
    assert_eq!(b.plugin, "VolumeRestrictions");
    assert!(b.reason.contains("ReadWriteOncePod"), "{}", b.reason);
    // Unused, it only waits.
    assert!(volumes_of(&format!("{STORAGE}{}", pending(&["solo"])))
        .blocked
        .is_none());
}

#[test]
fn csinode_limits_and_bound_pods_volumes_are_read() {
    let user = r#"
---
apiVersion: v1
kind: Pod
metadata: { name: holder, namespace: ml }
spec:
  nodeName: gpu-01
  volumes: [ { name: v, persistentVolumeClaim: { claimName: cache } } ]
  containers: [ { name: c } ]
"#;
    let t = run(&format!("{STORAGE}{user}{}", pending(&["db"])));
    let limits = &t.demand.csi_limits["gpu-01"];
    // A driver without allocatable.count has no limit.
    assert_eq!(limits.len(), 1);
    assert_eq!(limits["disk.csi.example"], 3);
    let holder = t.demand.bound.iter().find(|b| b.name == "holder").unwrap();
    assert_eq!(holder.csi_volumes.len(), 1);
}

#[test]
fn a_storage_request_past_any_pv_matches_none_and_sorts_last() {
    let v = volumes_of(&format!("{STORAGE}{}", pending(&["huge"])));
    let c = &v.waiting[0];
    assert!(c.candidates.is_empty());
    assert_eq!(c.size, u128::MAX);
}
