//! Kubernetes objects → the planner's [`Demand`], the way kube-scheduler
//! sees them: effective requests (max of init containers vs. the sum of
//! containers, sidecars counted, plus overhead; limits stand in for missing
//! requests as the API server defaults them), node selector, required node
//! affinity, tolerations, priority, DRA claims (exactly / firstAvailable,
//! count / All, CEL selectors, matchAttribute, capacity), and gangs from
//! scheduling.k8s.io/v1beta1 PodGroups, the coscheduling plugin, Kueue pod groups,
//! Kueue-managed Jobs and JobSets, and ProvisioningRequests. Pure: objects
//! in, demand and reasons out. Anything that cannot be planned becomes a
//! per-workload "cannot plan: reason"; it never stops the rest.

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

pub const KUEUE_QUEUE: &str = "kueue.x-k8s.io/queue-name";
pub const KUEUE_POD_GROUP: &str = "kueue.x-k8s.io/pod-group-name";
pub const KUEUE_POD_GROUP_COUNT: &str = "kueue.x-k8s.io/pod-group-total-count";
pub const KUEUE_REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
pub const KUEUE_PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
pub const COSCHED_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
pub const BEST_EFFORT_ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
/// Accord's own ProvisioningRequest class: all or nothing, held until used.
pub const ACCORD_STRICT: &str = "strict-atomic.accord.dev";

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
}

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
}

/// What a workload was built from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKey {
    SchedPodGroup(String, String),
    Cosched(String, String),
    Kueue(String, String),
    Owner(&'static str, String, String),
    Single(String, String),
}

impl GroupKey {
    fn name(&self) -> (&str, &str) {
        match self {
            GroupKey::SchedPodGroup(ns, n)
            | GroupKey::Cosched(ns, n)
            | GroupKey::Kueue(ns, n)
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
    /// CEL check results by expression: a thousand pods share a handful
    /// of selectors. Only looked up, never iterated.
    cel: CelCache,
    /// Allocated claims whose devices a bound pod already holds: a claim
    /// shared by several pods holds its devices once.
    held_claims: std::cell::RefCell<std::collections::BTreeSet<(String, String)>>,
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
        cel: Default::default(),
        held_claims: Default::default(),
    };
    for o in &m.objects {
        match o {
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
            Object::DeviceClass(c) => out
                .demand
                .device_classes
                .push(device_class(c, &mut out.cannot_plan)),
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
    let synthesize = |kind: &'static str, ns: &str, name: &str| {
        options.pending_without_status && !owned.contains(&(kind, ns.to_owned(), name.to_owned()))
    };
    let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
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
            _ => {}
        }
    }
    for (key, group) in groups {
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

/// The group a template's pods belong to: a named gang, else its owner.
fn owner_group(
    t: &core::PodTemplateSpec,
    kind: &'static str,
    ns: &str,
    name: &str,
    index: &Index,
) -> GroupKey {
    marked_group(t.metadata.as_ref(), t.spec.as_ref(), ns, index)
        .unwrap_or_else(|| GroupKey::Owner(kind, ns.to_owned(), name.to_owned()))
}

/// The workload a controller-made pod belongs to: its JobSet (by label),
/// its Job, or its ReplicaSet.
fn owner_of(meta: &ObjectMeta) -> Option<GroupKey> {
    let ns = ns_of(meta);
    if let Some(js) = label(Some(meta), JOBSET_NAME) {
        return Some(GroupKey::Owner("JobSet", ns, js.to_owned()));
    }
    let owner = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let kind = match owner.kind.as_str() {
        "Job" => "Job",
        "ReplicaSet" => "ReplicaSet",
        "StatefulSet" => "StatefulSet",
        _ => return None,
    };
    Some(GroupKey::Owner(kind, ns, owner.name.clone()))
}

fn marked_group(
    meta: Option<&ObjectMeta>,
    spec: Option<&core::PodSpec>,
    ns: &str,
    _index: &Index,
) -> Option<GroupKey> {
    if let Some(g) = spec
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.clone())
    {
        return Some(GroupKey::SchedPodGroup(ns.to_owned(), g));
    }
    if let Some(g) = label(meta, COSCHED_POD_GROUP) {
        return Some(GroupKey::Cosched(ns.to_owned(), g.to_owned()));
    }
    if let Some(g) = label(meta, KUEUE_POD_GROUP) {
        return Some(GroupKey::Kueue(ns.to_owned(), g.to_owned()));
    }
    None
}

/// A pod that runs because its node does, as cluster-autoscaler tells
/// them (utils/pod/pod.go `IsDaemonSetPod`, `IsMirrorPod`): its controller
/// is a DaemonSet, or it says it is one
/// (`cluster-autoscaler.kubernetes.io/daemonset-pod: "true"`), or it is
/// the kubelet's mirror of a static pod (`kubernetes.io/config.mirror`;
/// its owner is the Node).
fn is_node_agent(meta: &ObjectMeta) -> bool {
    let annotations = meta.annotations.as_ref();
    let annotation = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let controller_kind = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.as_str());
    matches!(controller_kind, Some("DaemonSet" | "Node"))
        || annotation(DAEMONSET_POD) == Some("true")
        || annotation(MIRROR_POD).is_some()
}

/// The opt-outs Karpenter and cluster-autoscaler honour on a pod: its
/// node is not to be disrupted while it runs.
fn asks_not_to_be_disrupted(meta: &ObjectMeta) -> bool {
    let annotation = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    annotation(KARPENTER_DO_NOT_DISRUPT) == Some("true")
        || annotation(SAFE_TO_EVICT) == Some("false")
}

const DAEMONSET_POD: &str = "cluster-autoscaler.kubernetes.io/daemonset-pod";
const MIRROR_POD: &str = "kubernetes.io/config.mirror";
const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

fn pod_unit<'a>(
    p: &'a core::Pod,
    options: &Options,
    index: &Index,
    groups: &mut BTreeMap<GroupKey, Group<'a>>,
    out: &mut Translation,
) {
    let Some(spec) = &p.spec else {
        out.skipped_pods += 1;
        return;
    };
    let (ns, name) = (ns_of(&p.metadata), name_of(&p.metadata));
    if let Some(node) = &spec.node_name {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            out.skipped_pods += 1;
            return;
        }
        match effective_requests(spec) {
            Ok(requests) => out.demand.bound.push(BoundPod {
                node: node.clone(),
                devices: held_devices(p, &ns, index),
                namespace: ns,
                name,
                labels: p.metadata.labels.clone().unwrap_or_default(),
                requests,
                node_agent: is_node_agent(&p.metadata),
                do_not_disrupt: asks_not_to_be_disrupted(&p.metadata),
                // The node's agent says (accordd fills them in observe).
                device_ids: Vec::new(),
            }),
            Err(reason) => out.invalid.push(format!("bound pod {ns}/{name}: {reason}")),
        }
        return;
    }
    if !is_pending(p, options) {
        out.skipped_pods += 1;
        return;
    }
    let key = marked_group(Some(&p.metadata), Some(spec), &ns, index)
        .or_else(|| owner_of(&p.metadata))
        .unwrap_or_else(|| GroupKey::Single(ns.clone(), name.clone()));
    let set_name = p
        .metadata
        .generate_name
        .clone()
        .map(|g| g.trim_end_matches('-').to_owned())
        .or_else(|| p.metadata.name.clone())
        .unwrap_or_else(|| "pod".to_owned());
    groups.entry(key).or_default().units.push(Unit {
        namespace: ns.clone(),
        set_name,
        meta: Some(&p.metadata),
        spec,
        count: 1,
        created: created(&p.metadata),
        source: ObjectRef::new("v1", "Pod", &ns, &name),
    });
}

/// Pending: the scheduler said Unschedulable (PodScheduled=False), or —
/// for manifests — nothing says anything yet.
fn is_pending(p: &core::Pod, options: &Options) -> bool {
    let status = p.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed" | "Running")
    ) {
        return false;
    }
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    match scheduled {
        Some(c) => c.status == "False" && c.reason.as_deref() == Some("Unschedulable"),
        None => options.pending_without_status,
    }
}

fn provisioning_request<'a>(
    pr: &'a crate::manifests::ProvisioningRequest,
    options: &Options,
    index: &Index<'a>,
    groups: &mut BTreeMap<GroupKey, Group<'a>>,
) {
    // Provisioned (its capacity is booked), failed or expired: the
    // request is no longer demand.
    if pr.settled() {
        return;
    }
    let (ns, name) = (ns_of(&pr.metadata), name_of(&pr.metadata));
    let source = ObjectRef::new("autoscaling.x-k8s.io/v1", "ProvisioningRequest", &ns, &name);
    let g = groups
        .entry(GroupKey::Owner(
            "ProvisioningRequest",
            ns.clone(),
            name.clone(),
        ))
        .or_default();
    g.sources.push(source.clone());
    let class = pr.spec.provisioning_class_name.as_str();
    if !matches!(class, CHECK_CAPACITY | BEST_EFFORT_ATOMIC | ACCORD_STRICT) {
        g.errors.push(format!(
            "ProvisioningRequest class {class} is not one Accord provisions ({CHECK_CAPACITY}, {BEST_EFFORT_ATOMIC}, {ACCORD_STRICT})"
        ));
    }
    let mut total = 0u64;
    for ps in &pr.spec.pod_sets {
        // Checked first: nothing below is sized by it.
        let what = format!("podSet {} count", ps.pod_template_ref.name);
        let count = match within_limit(&source, &what, i64::from(ps.count), options) {
            Ok(c) => c,
            Err(e) => {
                g.errors.push(e);
                continue;
            }
        };
        let Some(t) = index
            .pod_templates
            .get(&(ns.clone(), ps.pod_template_ref.name.clone()))
        else {
            g.errors.push(format!(
                "PodTemplate {ns}/{} not found",
                ps.pod_template_ref.name
            ));
            continue;
        };
        let Some(tpl) = t.template.as_ref() else {
            g.errors.push(format!(
                "PodTemplate {ns}/{} has no template",
                ps.pod_template_ref.name
            ));
            continue;
        };
        let Some(spec) = tpl.spec.as_ref() else {
            continue;
        };
        total += u64::from(count);
        g.units.push(Unit {
            namespace: ns.clone(),
            set_name: ps.pod_template_ref.name.clone(),
            meta: tpl.metadata.as_ref(),
            spec,
            count,
            created: created(&pr.metadata),
            source: source.clone(),
        });
    }
    // Every class Accord serves is all-or-nothing for its pod sets.
    g.owner_min = Some(total);
}

fn workload(
    key: &GroupKey,
    group: Group,
    options: &Options,
    index: &Index,
) -> Result<Workload, CannotPlan> {
    let (ns, name) = key.name();
    let mut sources: Vec<ObjectRef> = match key {
        GroupKey::SchedPodGroup(ns, g) => {
            vec![ObjectRef::new(
                "scheduling.k8s.io/v1beta1",
                "PodGroup",
                ns,
                g,
            )]
        }
        GroupKey::Cosched(ns, g) => {
            vec![ObjectRef::new(
                "scheduling.x-k8s.io/v1alpha1",
                "PodGroup",
                ns,
                g,
            )]
        }
        // A Kueue pod group is a label on its pods, not an object.
        GroupKey::Kueue(ns, g) => vec![ObjectRef::new("", "KueuePodGroup", ns, g)],
        _ => Vec::new(),
    };
    for s in &group.sources {
        if !sources.contains(s) {
            sources.push(s.clone());
        }
    }
    for u in &group.units {
        if !sources.contains(&u.source) {
            sources.push(u.source.clone());
        }
    }
    let fail = |reason: String| CannotPlan {
        workload: format!("{ns}/{name}"),
        sources: sources.clone(),
        reason,
    };
    if let Some(e) = group.errors.first() {
        return Err(fail(e.clone()));
    }
    let present: u64 = group.units.iter().map(|u| u64::from(u.count)).sum();
    if present == 0 {
        return Err(fail("no pods".to_owned()));
    }
    let limit = options.limits.per_workload();
    if present > u64::from(limit) {
        let what = match sources.first() {
            Some(s) => s.to_string(),
            None => format!("workload {ns}/{name}"),
        };
        return Err(fail(format!(
            "{what}: {present} pods in all exceed the limit of {limit} pods per workload"
        )));
    }
    // Within a u32 limit from here on.
    let present = present as u32;
    let min_count;
    let mut topology = None;
    let mut priority = group.owner_priority;
    match key {
        GroupKey::SchedPodGroup(ns, g) => {
            let pg = index
                .sched_groups
                .get(&(ns.clone(), g.clone()))
                .ok_or_else(|| fail(format!("PodGroup {ns}/{g} (scheduling.k8s.io) not found")))?;
            let spec = &pg.spec;
            if let Some(gang) = &spec.scheduling_policy.gang {
                if gang.min_count < 0 {
                    return Err(fail(format!(
                        "PodGroup {ns}/{g}: negative minCount {}",
                        gang.min_count
                    )));
                }
                min_count = Some(gang.min_count as u32);
            } else {
                min_count = Some(1);
            }
            if let Some(t) = spec
                .scheduling_constraints
                .as_ref()
                .and_then(|c| c.topology.as_ref())
                .and_then(|t| t.first())
            {
                topology = Some(level_for(&t.key, TopologyMode::Required, options).map_err(&fail)?);
            }
            priority = priority.or(spec.priority);
        }
        GroupKey::Cosched(ns, g) => {
            let pg = index
                .cosched_groups
                .get(&(ns.clone(), g.clone()))
                .ok_or_else(|| {
                    fail(format!("PodGroup {ns}/{g} (scheduling.x-k8s.io) not found"))
                })?;
            let m = pg.spec.min_member.unwrap_or(1);
            if m < 0 {
                return Err(fail(format!("PodGroup {ns}/{g}: negative minMember {m}")));
            }
            min_count = Some(m as u32);
        }
        GroupKey::Kueue(ns, g) => {
            let total = group
                .units
                .iter()
                .find_map(|u| annotation(u.meta, KUEUE_POD_GROUP_COUNT))
                .ok_or_else(|| {
                    fail(format!(
                        "Kueue pod group {ns}/{g}: no {KUEUE_POD_GROUP_COUNT} annotation"
                    ))
                })?;
            let total: u32 = total.parse().map_err(|_| {
                fail(format!(
                    "Kueue pod group {ns}/{g}: {KUEUE_POD_GROUP_COUNT} {total:?} is not a count"
                ))
            })?;
            min_count = Some(total);
        }
        GroupKey::Owner(..) | GroupKey::Single(..) => {
            // A Kueue-admitted Job's pods go together; those already
            // running are bound, so the gang is what is still pending.
            min_count = Some(group.owner_min.unwrap_or(1).min(u64::from(present)) as u32);
        }
    }
    let min: u32 = min_count.unwrap_or(present);
    if min > present {
        return Err(fail(format!(
            "gang needs {min} pods, {present} exist (waiting for the rest)"
        )));
    }
    // Pod sets: units of the same translated shape merge.
    let mut pod_sets: Vec<PodSet> = Vec::new();
    let mut created_at = u64::MAX;
    for u in &group.units {
        created_at = created_at.min(u.created);
        let pod = pod_spec(&u.namespace, u.spec, index)
            .map_err(|e| fail(format!("{}: {e}", u.source)))?;
        priority = Some(
            priority
                .unwrap_or(i32::MIN)
                .max(u.spec.priority.unwrap_or(0)),
        );
        for (ann, mode) in [
            (KUEUE_REQUIRED, TopologyMode::Required),
            (KUEUE_PREFERRED, TopologyMode::Preferred),
        ] {
            if let Some(k) = annotation(u.meta, ann) {
                let t = level_for(k, mode, options).map_err(&fail)?;
                match &topology {
                    Some(existing) if existing != &t => {
                        return Err(fail(format!(
                            "pod sets ask for different topology ({} {:?} and {} {:?}); Accord plans one per workload",
                            existing.level, existing.mode, t.level, t.mode
                        )))
                    }
                    _ => topology = Some(t),
                }
            }
        }
        // Units of the same translated shape merge (a gang has a handful of
        // shapes: comparing beats hashing a serialization).
        match pod_sets.iter().position(|s| s.pod == pod) {
            Some(i) => pod_sets[i].count = pod_sets[i].count.saturating_add(u.count),
            None => {
                // `worker-3` → `worker`: pods of one shape share a set.
                let trimmed = u.set_name.trim_end_matches(|c: char| c.is_ascii_digit());
                let mut set_name = match trimmed.strip_suffix('-') {
                    Some(base) if trimmed.len() < u.set_name.len() && !base.is_empty() => {
                        base.to_owned()
                    }
                    _ => u.set_name.clone(),
                };
                if pod_sets.iter().any(|s| s.name == set_name) {
                    set_name = format!("{set_name}-{}", pod_sets.len());
                }
                pod_sets.push(PodSet {
                    name: set_name,
                    count: u.count,
                    pod,
                });
            }
        }
    }
    let first_meta = group.units.first().and_then(|u| u.meta);
    Ok(Workload {
        name: name.to_owned(),
        namespace: ns.to_owned(),
        labels: first_meta
            .and_then(|m| m.labels.clone())
            .unwrap_or_default(),
        min_count: Some(min),
        priority: priority.unwrap_or(0),
        created: if created_at == u64::MAX {
            0
        } else {
            created_at
        },
        topology,
        reservation: None,
        sources,
        pod_sets,
    })
}

fn level_for(
    key: &str,
    mode: TopologyMode,
    options: &Options,
) -> Result<TopologyRequirement, String> {
    match options.topology_keys.get(key) {
        Some(level) => Ok(TopologyRequirement {
            level: level.clone(),
            mode,
        }),
        None => Err(format!(
            "topology key {key} is not a label Accord puts on nodes (known: {})",
            options
                .topology_keys
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// kube-scheduler's effective requests: per resource, the larger of the
/// sum of containers (plus restartable init containers, i.e. sidecars) and
/// the largest init container (plus the sidecars started before it), plus
/// the pod overhead. A container's limit stands in for a missing request.
pub fn effective_requests(spec: &core::PodSpec) -> Result<BTreeMap<String, String>, String> {
    let mut sum: BTreeMap<String, Milli> = BTreeMap::new();
    let mut sidecars: BTreeMap<String, Milli> = BTreeMap::new();
    let mut init_max: BTreeMap<String, Milli> = BTreeMap::new();
    // Quantities from outside: every sum is checked.
    let add = |to: &mut Milli, k: &str, v: Milli| -> Result<(), String> {
        *to = to
            .checked_add(v)
            .ok_or_else(|| format!("{k}: the pod's total is out of range"))?;
        Ok(())
    };
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            for (k, v) in r {
                add(sidecars.entry(k.clone()).or_default(), &k, v)?;
            }
        } else {
            for (k, v) in r {
                let mut with_sidecars = v;
                add(
                    &mut with_sidecars,
                    &k,
                    sidecars.get(&k).copied().unwrap_or(0),
                )?;
                let e = init_max.entry(k).or_default();
                *e = (*e).max(with_sidecars);
            }
        }
    }
    for c in &spec.containers {
        for (k, v) in container_requests(c)? {
            add(sum.entry(k.clone()).or_default(), &k, v)?;
        }
    }
    for (k, v) in &sidecars {
        add(sum.entry(k.clone()).or_default(), k, *v)?;
    }
    for (k, v) in init_max {
        let e = sum.entry(k).or_default();
        *e = (*e).max(v);
    }
    for (k, q) in spec.overhead.iter().flatten() {
        let v = quantity::parse(&q.0).map_err(|e| format!("overhead {k}: {e}"))?;
        if v < 0 {
            return Err(format!("overhead {k}: negative quantity {}", q.0));
        }
        add(sum.entry(k.clone()).or_default(), k, v)?;
    }
    Ok(sum
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| (k, quantity::Display(v).to_string()))
        .collect())
}

fn container_requests(c: &core::Container) -> Result<BTreeMap<String, Milli>, String> {
    let mut raw: BTreeMap<String, String> = BTreeMap::new();
    let Some(res) = &c.resources else {
        return Ok(BTreeMap::new());
    };
    for (k, q) in res.limits.iter().flatten() {
        raw.insert(k.clone(), q.0.clone());
    }
    for (k, q) in res.requests.iter().flatten() {
        raw.insert(k.clone(), q.0.clone());
    }
    raw.into_iter()
        .map(|(k, q)| {
            let v = quantity::parse(&q).map_err(|e| format!("container {}: {k}: {e}", c.name))?;
            if v < 0 {
                return Err(format!("container {}: {k}: negative quantity {q}", c.name));
            }
            Ok((k, v))
        })
        .collect()
}

fn pod_spec(ns: &str, spec: &core::PodSpec, index: &Index) -> Result<PodSpec, String> {
    let mut pod = PodSpec {
        requests: effective_requests(spec)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Some(terms) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    {
        for t in &terms.node_selector_terms {
            if t.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
                return Err("node affinity matchFields is not supported".to_owned());
            }
            let mut exprs = Vec::new();
            for e in t.match_expressions.iter().flatten() {
                let operator = match e.operator.as_str() {
                    "In" => SelectorOperator::In,
                    "NotIn" => SelectorOperator::NotIn,
                    "Exists" => SelectorOperator::Exists,
                    "DoesNotExist" => SelectorOperator::DoesNotExist,
                    "Gt" => SelectorOperator::Gt,
                    "Lt" => SelectorOperator::Lt,
                    other => return Err(format!("node affinity operator {other:?}")),
                };
                exprs.push(NodeSelectorRequirement {
                    key: e.key.clone(),
                    operator,
                    values: e.values.clone().unwrap_or_default(),
                });
            }
            pod.affinity.push(NodeSelectorTerm {
                match_expressions: exprs,
            });
        }
    }
    for t in spec.tolerations.iter().flatten() {
        pod.tolerations.push(Toleration {
            key: t.key.clone().filter(|k| !k.is_empty()),
            operator: match t.operator.as_deref() {
                Some("Exists") => TolerationOperator::Exists,
                None | Some("Equal") => TolerationOperator::Equal,
                Some(other) => return Err(format!("toleration operator {other:?}")),
            },
            value: t.value.clone().filter(|v| !v.is_empty()),
            effect: match t.effect.as_deref() {
                None | Some("") => None,
                Some("NoSchedule") => Some(TaintEffect::NoSchedule),
                Some("PreferNoSchedule") => Some(TaintEffect::PreferNoSchedule),
                Some("NoExecute") => Some(TaintEffect::NoExecute),
                Some(other) => return Err(format!("toleration effect {other:?}")),
            },
        });
    }
    for rc in spec.resource_claims.iter().flatten() {
        let claim_spec = match (&rc.resource_claim_name, &rc.resource_claim_template_name) {
            (Some(n), None) => index
                .claims
                .get(&(ns.to_owned(), n.clone()))
                .ok_or_else(|| format!("ResourceClaim {ns}/{n} not found"))?
                .spec
                .as_ref()
                .ok_or_else(|| format!("ResourceClaim {ns}/{n} has no spec"))?,
            (None, Some(t)) => index
                .templates
                .get(&(ns.to_owned(), t.clone()))
                .ok_or_else(|| format!("ResourceClaimTemplate {ns}/{t} not found"))?
                .spec
                .as_ref()
                .and_then(|s| s.spec.as_ref())
                .ok_or_else(|| format!("ResourceClaimTemplate {ns}/{t} has no spec"))?,
            _ => {
                return Err(format!(
                    "resourceClaims {}: set exactly one of resourceClaimName and resourceClaimTemplateName",
                    rc.name
                ))
            }
        };
        pod.claims.push(
            claim(&rc.name, claim_spec, &index.cel)
                .map_err(|e| format!("claim {}: {e}", rc.name))?,
        );
    }
    Ok(pod)
}

/// The DRA devices a bound pod holds: the allocation results of its
/// ResourceClaims (by name, or made from a template: the name in the pod's
/// `status.resourceClaimStatuses`), as kube-scheduler wrote them; each
/// claim once however many pods share it. A result with admin access
/// holds nothing (the device stays allocatable, as the scheduler's
/// allocator treats it); consumed capacity is a share of a device that
/// allows multiple allocations. A claim not found or not allocated holds
/// nothing yet.
fn held_devices(p: &core::Pod, ns: &str, index: &Index) -> Vec<BoundDevice> {
    let mut out = Vec::new();
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    for rc in p
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
    {
        let name = rc.resource_claim_name.clone().or_else(|| {
            statuses
                .into_iter()
                .flatten()
                .find(|s| s.name == rc.name)
                .and_then(|s| s.resource_claim_name.clone())
        });
        let Some(name) = name else { continue };
        let key = (ns.to_owned(), name);
        let Some(claim) = index.claims.get(&key) else {
            continue;
        };
        let Some(results) = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
        else {
            continue;
        };
        if !index.held_claims.borrow_mut().insert(key) {
            continue;
        }
        for r in results.iter().filter(|r| r.admin_access != Some(true)) {
            let capacity = r
                .consumed_capacity
                .iter()
                .flatten()
                .map(|(k, q)| {
                    let k = if k.contains('/') {
                        k.clone()
                    } else {
                        format!("{}/{k}", r.driver)
                    };
                    (k, q.0.clone())
                })
                .collect();
            out.push(BoundDevice {
                name: r.device.clone(),
                capacity,
            });
        }
    }
    out
}

type CelCache = std::cell::RefCell<std::collections::HashMap<String, Result<(), String>>>;

fn selectors(
    s: Option<&Vec<dra::DeviceSelector>>,
    cache: &CelCache,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for sel in s.into_iter().flatten() {
        let Some(cel) = &sel.cel else {
            return Err("a selector without `cel` (the expression belongs under selectors[].cel.expression)".to_owned());
        };
        let known = cache.borrow().get(&cel.expression).cloned();
        let checked = match known {
            Some(c) => c,
            None => {
                let c = accord::fit::check_selector(&cel.expression);
                cache.borrow_mut().insert(cel.expression.clone(), c.clone());
                c
            }
        };
        checked.map_err(|e| format!("CEL {:?}: {e}", cel.expression))?;
        out.push(cel.expression.clone());
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn exact(
    name: Option<String>,
    class: &str,
    sel: Option<&Vec<dra::DeviceSelector>>,
    mode: Option<&str>,
    count: Option<i64>,
    capacity: Option<&dra::CapacityRequirements>,
    admin_access: Option<bool>,
    tolerations: bool,
    cache: &CelCache,
) -> Result<ExactRequest, String> {
    if admin_access == Some(true) {
        return Err("adminAccess is not supported".to_owned());
    }
    if tolerations {
        return Err("device tolerations are not supported".to_owned());
    }
    let allocation_mode = match mode {
        None | Some("ExactCount") => AllocationMode::ExactCount,
        Some("All") => AllocationMode::All,
        Some(other) => return Err(format!("allocationMode {other:?}")),
    };
    let count = match count {
        None => 1,
        Some(c) if c < 0 => return Err(format!("negative count {c}")),
        Some(c) if c == 0 && allocation_mode == AllocationMode::ExactCount => {
            return Err("count 0".to_owned())
        }
        Some(c) => u32::try_from(c).map_err(|_| format!("count {c} too large"))?,
    };
    Ok(ExactRequest {
        name,
        device_class: class.to_owned(),
        selectors: selectors(sel, cache)?,
        count,
        allocation_mode,
        capacity: capacity
            .and_then(|c| c.requests.as_ref())
            .map(|r| r.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect())
            .unwrap_or_default(),
    })
}

fn claim(name: &str, spec: &dra::ResourceClaimSpec, cache: &CelCache) -> Result<Claim, String> {
    let Some(devices) = &spec.devices else {
        return Ok(Claim {
            name: name.to_owned(),
            requests: Vec::new(),
            constraints: Vec::new(),
        });
    };
    let mut requests = Vec::new();
    for r in devices.requests.iter().flatten() {
        let req = match (&r.exactly, &r.first_available) {
            (Some(e), None) => DeviceRequest {
                name: r.name.clone(),
                exactly: Some(
                    exact(
                        None,
                        &e.device_class_name,
                        e.selectors.as_ref(),
                        e.allocation_mode.as_deref(),
                        e.count,
                        e.capacity.as_ref(),
                        e.admin_access,
                        e.tolerations.as_ref().is_some_and(|t| !t.is_empty()),
                        cache,
                    )
                    .map_err(|e| format!("request {}: {e}", r.name))?,
                ),
                first_available: Vec::new(),
            },
            (None, Some(alts)) => DeviceRequest {
                name: r.name.clone(),
                exactly: None,
                first_available: alts
                    .iter()
                    .map(|s| {
                        exact(
                            Some(s.name.clone()),
                            &s.device_class_name,
                            s.selectors.as_ref(),
                            s.allocation_mode.as_deref(),
                            s.count,
                            s.capacity.as_ref(),
                            None,
                            s.tolerations.as_ref().is_some_and(|t| !t.is_empty()),
                            cache,
                        )
                        .map_err(|e| format!("request {}/{}: {e}", r.name, s.name))
                    })
                    .collect::<Result<_, _>>()?,
            },
            _ => {
                return Err(format!(
                    "request {}: set exactly one of `exactly` and `firstAvailable`",
                    r.name
                ))
            }
        };
        requests.push(req);
    }
    let mut constraints = Vec::new();
    for c in devices.constraints.iter().flatten() {
        if c.distinct_attribute.is_some() {
            return Err("distinctAttribute constraints are not supported".to_owned());
        }
        let Some(attr) = &c.match_attribute else {
            continue;
        };
        constraints.push(Constraint {
            // An empty list means every request.
            requests: c.requests.clone().unwrap_or_default(),
            match_attribute: attr.clone(),
        });
    }
    Ok(Claim {
        name: name.to_owned(),
        requests,
        constraints,
    })
}

fn device_class(c: &dra::DeviceClass, cannot: &mut Vec<CannotPlan>) -> DeviceClass {
    let name = name_of(&c.metadata);
    let sel = match selectors(
        c.spec.as_ref().and_then(|s| s.selectors.as_ref()),
        &CelCache::default(),
    ) {
        Ok(s) => s,
        Err(e) => {
            cannot.push(CannotPlan {
                workload: format!("DeviceClass {name}"),
                sources: vec![ObjectRef::new(
                    "resource.k8s.io/v1",
                    "DeviceClass",
                    "",
                    &name,
                )],
                reason: e,
            });
            Vec::new()
        }
    };
    DeviceClass {
        name,
        selectors: sel,
    }
}

impl Translation {
    /// What Accord understood, for people: `accordctl demand`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let d = &self.demand;
        out.push_str(&format!(
            "{} workload(s), {} pod(s) pending; {} bound pod(s); {} device class(es)\n",
            d.workloads.len(),
            d.workloads.iter().map(|w| w.pod_count_u64()).sum::<u64>(),
            d.bound.len(),
            d.device_classes.len()
        ));
        for w in &d.workloads {
            out.push_str(&format!(
                "\nworkload {}  ({} pods, gang minimum {}, priority {})\n",
                w.key(),
                w.pod_count(),
                w.min(),
                w.priority
            ));
            if !w.sources.is_empty() {
                out.push_str(&format!("  from: {}\n", sources_text(&w.sources)));
            }
            if let Some(t) = &w.topology {
                out.push_str(&format!(
                    "  topology: {} {}\n",
                    match t.mode {
                        TopologyMode::Required => "all in one",
                        TopologyMode::Preferred => "preferably in one",
                    },
                    t.level
                ));
            }
            for s in &w.pod_sets {
                let req: Vec<String> = s
                    .pod
                    .requests
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                out.push_str(&format!(
                    "  pod set {} × {}: {}\n",
                    s.name,
                    s.count,
                    if req.is_empty() {
                        "no requests".to_owned()
                    } else {
                        req.join(" ")
                    }
                ));
                if !s.pod.node_selector.is_empty() {
                    let sel: Vec<String> = s
                        .pod
                        .node_selector
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    out.push_str(&format!("    node selector: {}\n", sel.join(", ")));
                }
                if !s.pod.affinity.is_empty() {
                    out.push_str(&format!(
                        "    required node affinity: {} term(s)\n",
                        s.pod.affinity.len()
                    ));
                }
                if !s.pod.tolerations.is_empty() {
                    let t: Vec<String> = s
                        .pod
                        .tolerations
                        .iter()
                        .map(|t| t.key.clone().unwrap_or_else(|| "*".to_owned()))
                        .collect();
                    out.push_str(&format!("    tolerates: {}\n", t.join(", ")));
                }
                for c in &s.pod.claims {
                    for r in &c.requests {
                        let alts: Vec<&ExactRequest> =
                            r.exactly.iter().chain(&r.first_available).collect();
                        let text: Vec<String> = alts
                            .iter()
                            .map(|e| {
                                let n = match e.allocation_mode {
                                    AllocationMode::All => "all".to_owned(),
                                    AllocationMode::ExactCount => e.count.to_string(),
                                };
                                let mut t = format!("{n} × {}", e.device_class);
                                for sel in &e.selectors {
                                    t.push_str(&format!(" where {sel}"));
                                }
                                for (k, v) in &e.capacity {
                                    t.push_str(&format!(" with {k}={v}"));
                                }
                                t
                            })
                            .collect();
                        out.push_str(&format!(
                            "    claim {} request {}: {}\n",
                            c.name,
                            r.name,
                            text.join(" | else ")
                        ));
                    }
                    for k in &c.constraints {
                        let on = if k.requests.is_empty() {
                            "all requests".to_owned()
                        } else {
                            k.requests.join(", ")
                        };
                        out.push_str(&format!(
                            "    claim {}: same {} for {on}\n",
                            c.name, k.match_attribute
                        ));
                    }
                }
            }
        }
        for c in &self.cannot_plan {
            out.push_str(&format!("\ncannot plan {}: {}\n", c.workload, c.reason));
            if !c.sources.is_empty() {
                out.push_str(&format!("  from: {}\n", sources_text(&c.sources)));
            }
        }
        if !self.unsupported.is_empty() {
            out.push_str(&format!(
                "\nunsupported (not read): {}\n",
                self.unsupported.join("; ")
            ));
        }
        for i in &self.invalid {
            out.push_str(&format!("\ninvalid: {i}\n"));
        }
        if !self.ignored.is_empty() {
            let ig: Vec<String> = self
                .ignored
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect();
            out.push_str(&format!("\nignored kinds: {}\n", ig.join(", ")));
        }
        if self.skipped_pods > 0 {
            out.push_str(&format!(
                "\n{} pod(s) neither pending nor bound: skipped\n",
                self.skipped_pods
            ));
        }
        out
    }
}
