//! Kubernetes objects → the planner's [`Demand`], the way kube-scheduler
//! sees them: effective requests (max of init containers vs. the sum of
//! containers, sidecars counted, plus overhead; limits stand in for missing
//! requests as the API server defaults them), node selector, required node
//! affinity, tolerations, priority, DRA claims (exactly / firstAvailable,
//! count / All, CEL selectors, matchAttribute, capacity), and gangs from
//! scheduling.k8s.io/v1beta1 PodGroups, the coscheduling plugin, Kueue pod groups,
//! Kueue-managed Jobs and JobSets, and ProvisioningRequests; CapacityBuffers'
//! placeholder pods. Pure: objects
//! in, demand and reasons out. Anything that cannot be planned becomes a
//! per-workload "cannot plan: reason"; it never stops the rest.

pub mod buffer;
mod claim;
mod group;
mod kueue;
mod pod;
mod provisioning;
mod relations;
mod render;
mod volumes;

use std::collections::BTreeMap;

use accord::demand::{sources_text, Limits, ObjectRef};
use accord::demand::{
    AllocationMode, BoundDevice, BoundPod, Claim, Constraint, Demand, DeviceClass, DeviceRequest,
    ExactRequest, NodeSelectorRequirement, NodeSelectorTerm, PodSet, PodSpec, SelectorOperator,
    TaintEffect, Toleration, TolerationOperator, TopologyMode, TopologyRequirement, Workload,
};
use accord::quantity::{self, Milli};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as dra;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::manifests::{Manifests, Object};
use claim::{device_class, CelCache};
use group::{owner_group, owner_of, workload};
use pod::pod_unit;
use provisioning::provisioning_request;

pub const KUEUE_QUEUE: &str = "kueue.x-k8s.io/queue-name";
pub const KUEUE_POD_GROUP: &str = "kueue.x-k8s.io/pod-group-name";
pub const KUEUE_POD_GROUP_COUNT: &str = "kueue.x-k8s.io/pod-group-total-count";
pub const KUEUE_REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
pub const KUEUE_PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
pub const COSCHED_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Volcano's pod annotations naming its PodGroup (volcano.sh/apis
/// pkg/apis/scheduling/v1beta1/labels.go: `KubeGroupNameAnnotationKey`,
/// which its scheduler reads, pkg/scheduler/api/job_info.go `getJobID`;
/// then `VolcanoGroupNameAnnotationKey`).
pub const VOLCANO_POD_GROUP: [&str; 2] = [
    "scheduling.k8s.io/group-name",
    "scheduling.volcano.sh/group-name",
];
/// KAI's pod annotation naming its PodGroup (KAI-Scheduler
/// pkg/common/constants/constants.go `PodGroupAnnotationForPod`).
pub const KAI_POD_GROUP: &str = "pod-group-name";
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
pub const BEST_EFFORT_ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
/// Accord's own ProvisioningRequest class: all or nothing, held until used.
pub const ACCORD_STRICT: &str = "strict-atomic.accord.dev";

/// The most `spec.resourceClaims` of a pod Accord reads. Kubernetes'
/// pod validation (`validatePodResourceClaims`, pkg/apis/core/validation)
/// checks their names but, as far as could be found, sets no count; 32 is
/// a claim's own bound on its requests (`DeviceRequestsMaxSize`), far above
/// any real pod. A pending pod past it cannot be planned; a bound one
/// holds the devices of all its claims (the scheduler allocated them).
pub const MAX_POD_CLAIMS: usize = 32;

/// The most `spec.resourceClaims` of a PodGroup: Kubernetes' own bound
/// (`MaxPodGroupResourceClaims`, pkg/apis/scheduling/types.go: 4).
pub const MAX_POD_GROUP_CLAIMS: usize = 4;

/// How objects are read.
#[derive(Debug, Clone)]
pub struct Options {
    /// Node label key → Accord topology level, for topology constraints.
    pub topology_keys: BTreeMap<String, String>,
    /// Count unbound pods without a status as pending (manifests). A live
    /// reader leaves this off: only pods the scheduler marked
    /// Unschedulable are.
    pub pending_without_status: bool,
    /// Pods per workload and per round (defaults: 50,000 and 100,000). A
    /// workload over either is a "cannot plan" reason, refused before it
    /// becomes pod sets.
    pub limits: Limits,
    /// Whether the cluster serves `scheduling.k8s.io` PodGroups: where it
    /// does not, a pod's `spec.schedulingGroup` names nothing the scheduler
    /// can read, and the pod is planned on its own (said once).
    pub pod_groups_served: bool,
    /// The schedulers whose pods Accord plans (`spec.schedulerName`):
    /// it models kube-scheduler's default profile, so by default
    /// `default-scheduler` only. Another scheduler's pending pods are
    /// left to it (said once each).
    pub schedulers: std::collections::BTreeSet<String>,
}

/// kube-scheduler's default profile name (and a pod's default
/// `spec.schedulerName`).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

impl Options {
    /// The keys Accord labels nodes with: `<prefix><level>` and the
    /// fleet's `also_label` keys (and `kubernetes.io/hostname` for a
    /// `hostname` level).
    pub fn for_topology(topology: &accord::fleet::TopologyConfig) -> Options {
        let mut keys = BTreeMap::new();
        for l in &topology.levels {
            keys.insert(format!("{}{l}", topology.label_prefix), l.clone());
            for k in topology.also_label.get(l).into_iter().flatten() {
                keys.insert(k.clone(), l.clone());
            }
            if l == "hostname" {
                keys.insert("kubernetes.io/hostname".to_owned(), l.clone());
            }
        }
        Options {
            topology_keys: keys,
            pending_without_status: true,
            limits: Limits::default(),
            pod_groups_served: true,
            schedulers: [DEFAULT_SCHEDULER.to_owned()].into(),
        }
    }
}

/// A workload that cannot be planned, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CannotPlan {
    pub workload: String,
    pub sources: Vec<ObjectRef>,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
pub struct Translation {
    pub demand: Demand,
    pub cannot_plan: Vec<CannotPlan>,
    /// `apiVersion kind` not modelled, once each.
    pub unsupported: Vec<String>,
    pub invalid: Vec<String>,
    pub ignored: BTreeMap<String, usize>,
    /// Pods neither pending nor bound (finished, or not yet tried by the
    /// scheduler).
    pub skipped_pods: usize,
    /// Pending pods that consume a ProvisioningRequest's capacity (Kueue
    /// stamps them once it is Provisioned): the request is their demand.
    pub consuming_pods: usize,
    /// Pending pods Accord leaves alone, and why: another scheduler's, or
    /// nominated to a node where kube-scheduler preempts for them.
    pub not_planned: Vec<CannotPlan>,
}

/// What a workload was built from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKey {
    SchedPodGroup(String, String),
    Cosched(String, String),
    Kueue(String, String),
    /// A Kueue `Workload` not admitted yet (`kueue`).
    KueueWorkload(String, String),
    /// A Volcano PodGroup (`scheduling.volcano.sh`).
    Volcano(String, String),
    /// An NVIDIA KAI PodGroup (`scheduling.run.ai`).
    Kai(String, String),
    Owner(&'static str, String, String),
    Single(String, String),
}

impl GroupKey {
    fn name(&self) -> (&str, &str) {
        match self {
            GroupKey::SchedPodGroup(ns, n)
            | GroupKey::Cosched(ns, n)
            | GroupKey::Kueue(ns, n)
            | GroupKey::KueueWorkload(ns, n)
            | GroupKey::Volcano(ns, n)
            | GroupKey::Kai(ns, n)
            | GroupKey::Owner(_, ns, n)
            | GroupKey::Single(ns, n) => (ns, n),
        }
    }
}

/// Pods of one shape from one source.
struct Unit<'a> {
    namespace: String,
    set_name: String,
    meta: Option<&'a ObjectMeta>,
    spec: &'a core::PodSpec,
    count: u32,
    created: u64,
    source: ObjectRef,
}

#[derive(Default)]
struct Group<'a> {
    units: Vec<Unit<'a>>,
    /// Gang minimum the owner implies (Kueue-managed Job: all pods); a
    /// sum of outside counts, so wide.
    owner_min: Option<u64>,
    owner_priority: Option<i32>,
    errors: Vec<String>,
    sources: Vec<ObjectRef>,
}

struct Index<'a> {
    claims: BTreeMap<(String, String), &'a dra::ResourceClaim>,
    templates: BTreeMap<(String, String), &'a dra::ResourceClaimTemplate>,
    pod_templates: BTreeMap<(String, String), &'a core::PodTemplate>,
    sched_groups: BTreeMap<(String, String), &'a k8s_openapi::api::scheduling::v1beta1::PodGroup>,
    cosched_groups: BTreeMap<(String, String), &'a crate::manifests::CoschedPodGroup>,
    volcano_groups: BTreeMap<(String, String), &'a crate::manifests::VolcanoPodGroup>,
    kai_groups: BTreeMap<(String, String), &'a crate::manifests::KaiPodGroup>,
    /// CEL check results by expression: a thousand pods share a handful
    /// of selectors. Only looked up, never iterated.
    cel: CelCache,
    /// Allocated claims whose devices a bound pod already holds: a claim
    /// shared by several pods holds its devices once.
    held_claims: std::cell::RefCell<std::collections::BTreeSet<(String, String)>>,
    /// ProvisioningRequests by (namespace, name): pods that consume one
    /// are its pods, not new demand.
    provisioning: std::collections::BTreeSet<(String, String)>,
    /// Extended resource name → the DeviceClass that maps it
    /// (`spec.extendedResourceName`, GA in 1.37).
    extended: BTreeMap<String, String>,
    /// [`Options::pod_groups_served`].
    pod_groups_served: bool,
    /// Label keys some pod's affinity, anti-affinity or spread selector
    /// reads: a pending pod keeps only these labels (others cannot change
    /// where any pod goes, and pods whose other labels differ stay one
    /// pod set).
    selector_keys: std::collections::BTreeSet<String>,
    /// PVCs, PVs, StorageClasses, and the claims bound pods use.
    storage: volumes::Storage<'a>,
}

fn ns_of(meta: &ObjectMeta) -> String {
    meta.namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned())
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name
        .clone()
        .or_else(|| {
            meta.generate_name
                .clone()
                .map(|g| g.trim_end_matches('-').to_owned())
        })
        .unwrap_or_else(|| "unnamed".to_owned())
}

fn created(meta: &ObjectMeta) -> u64 {
    meta.creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second().max(0) as u64)
        .unwrap_or(0)
}

fn label<'a>(meta: Option<&'a ObjectMeta>, key: &str) -> Option<&'a str> {
    meta?.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(meta: Option<&'a ObjectMeta>, key: &str) -> Option<&'a str> {
    meta?.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Said once when pods name a `scheduling.k8s.io` PodGroup the cluster
/// does not serve.
pub const POD_GROUPS_NOT_SERVED: &str = "spec.schedulingGroup: the cluster serves no \
     scheduling.k8s.io PodGroups (v1beta1, v1alpha3, v1alpha2; turned off by default): \
     such pods are planned pod by pod, as the scheduler places them";

/// Translates everything in `m`.
pub fn translate(m: &Manifests, options: &Options) -> Translation {
    let mut out = Translation {
        unsupported: m.unsupported.clone(),
        invalid: m.invalid.clone(),
        ignored: m.ignored.clone(),
        ..Default::default()
    };
    let mut index = Index {
        claims: BTreeMap::new(),
        templates: BTreeMap::new(),
        pod_templates: BTreeMap::new(),
        sched_groups: BTreeMap::new(),
        cosched_groups: BTreeMap::new(),
        volcano_groups: BTreeMap::new(),
        kai_groups: BTreeMap::new(),
        cel: Default::default(),
        held_claims: Default::default(),
        provisioning: Default::default(),
        extended: BTreeMap::new(),
        pod_groups_served: options.pod_groups_served,
        selector_keys: Default::default(),
        storage: Default::default(),
    };
    for o in &m.objects {
        fn template(t: &core::PodTemplateSpec) -> Option<&core::PodSpec> {
            t.spec.as_ref()
        }
        let specs: Vec<&core::PodSpec> = match o {
            Object::Pod(p) => p.spec.iter().collect(),
            Object::PodTemplate(t) => t.template.as_ref().and_then(template).into_iter().collect(),
            Object::Job(j) => j
                .spec
                .as_ref()
                .and_then(|s| template(&s.template))
                .into_iter()
                .collect(),
            Object::Deployment(d) => template(&d.spec.template).into_iter().collect(),
            Object::JobSet(js) => js
                .spec
                .replicated_jobs
                .iter()
                .filter_map(|rj| rj.template.spec.template.spec.as_ref())
                .collect(),
            _ => Vec::new(),
        };
        for spec in specs {
            relations::selector_keys(spec, &mut index.selector_keys);
        }
        match o {
            // Namespace selectors of pod affinity terms read their labels.
            Object::Namespace(n) => {
                out.demand.namespace_labels.insert(
                    name_of(&n.metadata),
                    n.metadata.labels.clone().unwrap_or_default(),
                );
            }
            Object::PersistentVolumeClaim(c) => index.storage.add_claim(c),
            Object::PersistentVolume(v) => index.storage.add_volume(v),
            Object::StorageClass(c) => index.storage.add_class(c),
            Object::CSINode(n) => {
                let limits = volumes::csi_limits(n);
                if !limits.is_empty() {
                    out.demand.csi_limits.insert(name_of(&n.metadata), limits);
                }
            }
            Object::Pod(p) => {
                let running = !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                );
                if let Some(spec) = p.spec.as_ref().filter(|s| s.node_name.is_some() && running) {
                    index.storage.add_user(&ns_of(&p.metadata), spec);
                }
            }
            Object::ResourceClaim(c) => {
                index
                    .claims
                    .insert((ns_of(&c.metadata), name_of(&c.metadata)), c);
            }
            Object::ResourceClaimTemplate(t) => {
                index
                    .templates
                    .insert((ns_of(&t.metadata), name_of(&t.metadata)), t);
            }
            Object::PodTemplate(t) => {
                index
                    .pod_templates
                    .insert((ns_of(&t.metadata), name_of(&t.metadata)), t);
            }
            Object::PodGroup(g) => {
                index
                    .sched_groups
                    .insert((ns_of(&g.metadata), name_of(&g.metadata)), g);
            }
            Object::CoschedPodGroup(g) => {
                index
                    .cosched_groups
                    .insert((ns_of(&g.metadata), name_of(&g.metadata)), g);
            }
            Object::VolcanoPodGroup(g) => {
                index
                    .volcano_groups
                    .insert((ns_of(&g.metadata), name_of(&g.metadata)), g);
            }
            Object::KaiPodGroup(g) => {
                index
                    .kai_groups
                    .insert((ns_of(&g.metadata), name_of(&g.metadata)), g);
            }
            Object::ProvisioningRequest(pr) => {
                index
                    .provisioning
                    .insert((ns_of(&pr.metadata), name_of(&pr.metadata)));
            }
            Object::DeviceClass(c) => {
                if let Some(r) = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.extended_resource_name.clone())
                {
                    index.extended.insert(r, name_of(&c.metadata));
                }
                out.demand
                    .device_classes
                    .push(device_class(c, &mut out.cannot_plan))
            }
            _ => {}
        }
    }
    // Owners whose pods exist: their pods are the demand, not their
    // templates (a live cluster shows both the Job and its pods).
    let mut owned: std::collections::BTreeSet<(&'static str, String, String)> = Default::default();
    for o in &m.objects {
        if let Object::Pod(p) = o {
            if let Some(GroupKey::Owner(kind, ns, name)) = owner_of(&p.metadata) {
                if kind == "ReplicaSet" {
                    // owner-of-owner: Deployment `web` owns ReplicaSet `web-<hash>`.
                    if let Some((d, _)) = name.rsplit_once('-') {
                        owned.insert(("Deployment", ns.clone(), d.to_owned()));
                    }
                }
                owned.insert((kind, ns, name));
            }
        }
    }
    // Kueue Workloads not admitted yet: planned with their flavor's node
    // labels, in place of the Jobs they stand for.
    let kueue_plans = kueue::plans(m, options, &mut out, &mut owned);
    let synthesize = |kind: &'static str, ns: &str, name: &str| {
        options.pending_without_status && !owned.contains(&(kind, ns.to_owned(), name.to_owned()))
    };
    if !options.pod_groups_served
        && m.objects.iter().any(|o| {
            matches!(o, Object::Pod(p) if p.spec.as_ref().is_some_and(|s| s.scheduling_group.is_some()))
        })
    {
        out.unsupported.push(POD_GROUPS_NOT_SERVED.to_owned());
    }
    let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
    for p in &kueue_plans {
        kueue::units(p, &mut groups);
    }
    let buffer_index = buffer::BufferIndex::of(m);
    for o in &m.objects {
        match o {
            Object::Pod(p) => pod_unit(p, options, &index, &mut groups, &mut out),
            Object::Job(j) => {
                let Some(spec) = &j.spec else { continue };
                let (ns, name) = (ns_of(&j.metadata), name_of(&j.metadata));
                let source = ObjectRef::new("batch/v1", "Job", &ns, &name);
                let parallelism = i64::from(spec.parallelism.unwrap_or(1));
                let kueue = label(Some(&j.metadata), KUEUE_QUEUE).is_some();
                let key = owner_group(&spec.template, "Job", &ns, &name, &index);
                let g = groups.entry(key).or_default();
                if parallelism < 0 {
                    g.sources.push(source.clone());
                    g.errors
                        .push(format!("{source}: parallelism {parallelism} is negative"));
                    continue;
                }
                if kueue {
                    // Kueue admits a Job's pods all together.
                    g.owner_min = Some(g.owner_min.unwrap_or(0).saturating_add(parallelism as u64));
                }
                if !synthesize("Job", &ns, &name) {
                    continue;
                }
                let count = match within_limit(&source, "parallelism", parallelism, options) {
                    Ok(c) => c,
                    Err(e) => {
                        g.sources.push(source.clone());
                        g.errors.push(e);
                        continue;
                    }
                };
                g.units.push(Unit {
                    namespace: ns.clone(),
                    set_name: name.clone(),
                    meta: spec.template.metadata.as_ref(),
                    spec: match &spec.template.spec {
                        Some(s) => s,
                        None => continue,
                    },
                    count,
                    created: created(&j.metadata),
                    source,
                });
            }
            Object::Deployment(d) => {
                let spec = &d.spec;
                let (ns, name) = (ns_of(&d.metadata), name_of(&d.metadata));
                let source = ObjectRef::new("apps/v1", "Deployment", &ns, &name);
                let key = owner_group(&spec.template, "Deployment", &ns, &name, &index);
                let Some(pod) = &spec.template.spec else {
                    continue;
                };
                let g = groups.entry(key).or_default();
                let replicas = i64::from(spec.replicas.unwrap_or(1));
                let count = match within_limit(&source, "replicas", replicas, options) {
                    Ok(c) => c,
                    Err(e) => {
                        g.sources.push(source);
                        g.errors.push(e);
                        continue;
                    }
                };
                g.units.push(Unit {
                    namespace: ns.clone(),
                    set_name: name.clone(),
                    meta: spec.template.metadata.as_ref(),
                    spec: pod,
                    count,
                    created: created(&d.metadata),
                    source,
                });
            }
            Object::JobSet(js) => {
                let (ns, name) = (ns_of(&js.metadata), name_of(&js.metadata));
                let kueue = label(Some(&js.metadata), KUEUE_QUEUE).is_some();
                let key = GroupKey::Owner("JobSet", ns.clone(), name.clone());
                let source = ObjectRef::new("jobset.x-k8s.io/v1alpha2", "JobSet", &ns, &name);
                let g = groups.entry(key).or_default();
                for rj in &js.spec.replicated_jobs {
                    let jspec = &rj.template.spec;
                    let Some(pod) = &jspec.template.spec else {
                        continue;
                    };
                    let replicas = i64::from(rj.replicas);
                    let parallelism = i64::from(jspec.parallelism.unwrap_or(1));
                    if replicas < 0 || parallelism < 0 {
                        g.sources.push(source.clone());
                        g.errors.push(format!(
                            "{source}: replicatedJob {}: replicas {replicas} or parallelism {parallelism} is negative",
                            rj.name
                        ));
                        continue;
                    }
                    // Two i32s: their product fits in an i64.
                    let pods = replicas * parallelism;
                    if kueue {
                        g.owner_min = Some(g.owner_min.unwrap_or(0).saturating_add(pods as u64));
                    }
                    if !synthesize("JobSet", &ns, &name) {
                        continue;
                    }
                    let what = format!(
                        "replicatedJob {} replicas {replicas} × parallelism {parallelism} =",
                        rj.name
                    );
                    let count = match within_limit(&source, &what, pods, options) {
                        Ok(c) => c,
                        Err(e) => {
                            g.sources.push(source.clone());
                            g.errors.push(e);
                            continue;
                        }
                    };
                    g.units.push(Unit {
                        namespace: ns.clone(),
                        set_name: rj.name.clone(),
                        meta: jspec.template.metadata.as_ref(),
                        spec: pod,
                        count,
                        created: created(&js.metadata),
                        source: source.clone(),
                    });
                }
            }
            Object::ProvisioningRequest(pr) => {
                provisioning_request(pr, options, &index, &mut groups);
            }
            Object::CapacityBuffer(cb) => {
                buffer::capacity_buffer(cb, options, &buffer_index, &mut groups);
            }
            Object::DaemonSet(ds) => pod::daemon_set(ds, &index, &mut out),
            _ => {}
        }
    }
    for (key, group) in groups {
        // An owner with nothing pending (a live Job whose pods run, a
        // suspended one a Kueue Workload stands for): nothing to say.
        if group.units.is_empty() && group.errors.is_empty() {
            continue;
        }
        match workload(&key, group, options, &index) {
            Ok(w) => out.demand.workloads.push(w),
            Err(c) => out.cannot_plan.push(c),
        }
    }
    out.demand.workloads.sort_by_key(|w| w.key());
    round_limit(&mut out, &options.limits);
    out.demand
        .device_classes
        .sort_by(|a, b| a.name.cmp(&b.name));
    out.demand.daemon_sets.sort_by_key(|d| d.key());
    out.demand
        .bound
        .sort_by(|a, b| (&a.node, &a.namespace, &a.name).cmp(&(&b.node, &b.namespace, &b.name)));
    out
}

/// An outside count of pods, checked before anything is sized by it:
/// not negative and within the per-workload limit.
fn within_limit(source: &ObjectRef, what: &str, n: i64, options: &Options) -> Result<u32, String> {
    let limit = options.limits.per_workload();
    if n < 0 {
        return Err(format!("{source}: {what} {n} is negative"));
    }
    if n > i64::from(limit) {
        return Err(format!(
            "{source}: {what} {n} exceeds the limit of {limit} pods per workload"
        ));
    }
    // Within a u32 limit.
    Ok(n as u32)
}

/// The per-round limit: workloads in key order are planned while their
/// pods stay within it; the rest get a "cannot plan" reason.
fn round_limit(out: &mut Translation, limits: &Limits) {
    let max = u64::from(limits.max_pods_per_round);
    let mut taken: u64 = 0;
    let mut kept = Vec::with_capacity(out.demand.workloads.len());
    for w in std::mem::take(&mut out.demand.workloads) {
        let n = w.pod_count_u64();
        if taken.saturating_add(n) <= max {
            taken += n;
            kept.push(w);
        } else {
            out.cannot_plan.push(CannotPlan {
                workload: w.key(),
                reason: format!(
                    "{n} pods would take this round past the limit of {max} pending pods per round ({taken} taken by workloads before it in key order)"
                ),
                sources: w.sources,
            });
        }
    }
    out.demand.workloads = kept;
}

/// `v1.NodeSelectorOperator`.
fn node_selector_operator(op: &str) -> Option<SelectorOperator> {
    Some(match op {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt,
        "Lt" => SelectorOperator::Lt,
        _ => return None,
    })
}
