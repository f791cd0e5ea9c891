//! Kueue Workloads as demand. A job Kueue has not admitted has no pods
//! (it stays suspended), and Kueue's topology-aware scheduling only sees
//! Ready, schedulable Nodes (kueue pkg/cache/scheduler/tas_nodes_cache.go):
//! a TAS workload waits for capacity nobody brings. Accord plans a pending
//! Workload whose ClusterQueue has the quota for it; one Kueue holds for
//! quota, a deactivated one, or one whose queue is stopped, is said (not
//! planned): powering a rack for it would leave the rack unused.
//!
//! What it follows of Kueue (v0.17, the version the lab pins): a Workload
//! holding quota (`QuotaReserved`) is past this point: admitted, its pods
//! are the demand; waiting on admission checks, its ProvisioningRequest
//! is. The flavor is the first of the ClusterQueue's resource group, in
//! order, with free quota for the whole workload (Kueue assigns flavors
//! per pod set, pkg/scheduler/flavorassigner; one flavor per resource
//! group is the approximation); free is nominal minus reserved
//! (`status.flavorsReservation`), plus what the cohort's other queues
//! could lend within `borrowingLimit`. The flavor's `nodeLabels` and
//! `tolerations` go to the pods as Kueue's TAS and admission put them;
//! a TAS flavor's nodes must carry every level's label
//! (pkg/util/tas/node.go `NodeMatchesFlavor`), so each is an `Exists`
//! requirement of the pods' node affinity.

use super::*;
use crate::manifests::{
    KueueClusterQueue, KueueLocalQueue, KueueResourceFlavor, KueueTopology, KueueWorkload,
    KUEUE_V1BETA2,
};

/// A Kueue Workload Accord plans: its pod sets as Kueue would create
/// their pods on the flavor it chose.
pub(super) struct KueuePlan {
    pub namespace: String,
    pub name: String,
    pub sources: Vec<ObjectRef>,
    pub priority: Option<i32>,
    pub created: u64,
    /// (pod set name, template metadata, pod spec, count).
    pub sets: Vec<(String, ObjectMeta, core::PodSpec, u32)>,
}

const HOSTNAME: &str = "kubernetes.io/hostname";

struct KueueIndex<'a> {
    local_queues: BTreeMap<(String, String), &'a KueueLocalQueue>,
    cluster_queues: BTreeMap<String, &'a KueueClusterQueue>,
    flavors: BTreeMap<String, &'a KueueResourceFlavor>,
    topologies: BTreeMap<String, &'a KueueTopology>,
}

/// The Kueue Workloads of `m` Accord plans; the others said in
/// `out.not_planned`. Also: the Jobs and JobSets those Workloads stand
/// for (their templates are not demand again), and each Topology level
/// with no Accord meaning, said once in `out.unsupported`.
pub(super) fn plans(
    m: &Manifests,
    options: &Options,
    out: &mut Translation,
    owned: &mut std::collections::BTreeSet<(&'static str, String, String)>,
) -> Vec<KueuePlan> {
    let mut index = KueueIndex {
        local_queues: BTreeMap::new(),
        cluster_queues: BTreeMap::new(),
        flavors: BTreeMap::new(),
        topologies: BTreeMap::new(),
    };
    for o in &m.objects {
        match o {
            Object::KueueLocalQueue(q) => {
                index
                    .local_queues
                    .insert((ns_of(&q.metadata), name_of(&q.metadata)), q);
            }
            Object::KueueClusterQueue(q) => {
                index.cluster_queues.insert(name_of(&q.metadata), q);
            }
            Object::KueueResourceFlavor(f) => {
                index.flavors.insert(name_of(&f.metadata), f);
            }
            Object::KueueTopology(t) => {
                index.topologies.insert(name_of(&t.metadata), t);
            }
            _ => {}
        }
    }
    for (name, t) in &index.topologies {
        for level in &t.spec.levels {
            // Every Node has its hostname (the kubelet's label; Accord's
            // model too): the lowest level Kueue recommends.
            if level.node_label != HOSTNAME
                && !options.topology_keys.contains_key(&level.node_label)
            {
                let said = format!(
                    "Kueue Topology {name}: level {} has no Accord meaning (not a label Accord \
                     puts on nodes): workloads that ask for it cannot be planned, and nodes \
                     without it are not in Kueue's topology",
                    level.node_label
                );
                if !out.unsupported.contains(&said) {
                    out.unsupported.push(said);
                }
            }
        }
    }
    let mut plans = Vec::new();
    for o in &m.objects {
        let Object::KueueWorkload(w) = o else {
            continue;
        };
        let (ns, name) = (ns_of(&w.metadata), name_of(&w.metadata));
        let source = ObjectRef::new(KUEUE_V1BETA2, "Workload", &ns, &name);
        // The Workload speaks for its Job or JobSet from here on.
        if let Some(owner) = owner(&w.metadata) {
            owned.insert(owner);
        }
        // Finished; or its pods (admitted) or its ProvisioningRequest
        // (admission checks pending) are the demand.
        if w.condition("Finished").is_some()
            || w.condition("QuotaReserved").is_some()
            || w.condition("Admitted").is_some()
        {
            continue;
        }
        match plan(w, &ns, &name, &source, &index) {
            Ok(p) => plans.push(p),
            Err(reason) => {
                let kueue_says = w
                    .status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "QuotaReserved" && c.status == "False")
                    .map(|c| c.message.trim())
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(" (Kueue: {m})"))
                    .unwrap_or_default();
                out.not_planned.push(CannotPlan {
                    workload: format!("{ns}/{name}"),
                    sources: vec![source],
                    reason: format!("Kueue Workload: {reason}{kueue_says}"),
                });
            }
        }
    }
    plans
}

/// The Job or JobSet a Workload stands for (its controller owner).
fn owner(meta: &ObjectMeta) -> Option<(&'static str, String, String)> {
    let o = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let kind = match o.kind.as_str() {
        "Job" => "Job",
        "JobSet" => "JobSet",
        _ => return None,
    };
    Some((kind, ns_of(meta), o.name.clone()))
}

/// A pending Workload as Kueue would admit it, or why Kueue holds it.
fn plan(
    w: &KueueWorkload,
    ns: &str,
    name: &str,
    source: &ObjectRef,
    index: &KueueIndex,
) -> Result<KueuePlan, String> {
    if w.spec.active == Some(false) {
        return Err("deactivated (spec.active: false): Kueue admits none of it".to_owned());
    }
    let queue = &w.spec.queue_name;
    let lq = index
        .local_queues
        .get(&(ns.to_owned(), queue.clone()))
        .ok_or_else(|| format!("LocalQueue {ns}/{queue} not found: Kueue cannot admit it"))?;
    if let Some(p) = lq.spec.stop_policy.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "LocalQueue {ns}/{queue} is stopped (stopPolicy {p})"
        ));
    }
    let cq_name = &lq.spec.cluster_queue;
    let cq = index.cluster_queues.get(cq_name).ok_or_else(|| {
        format!(
            "ClusterQueue {cq_name} (of LocalQueue {ns}/{queue}) not found: Kueue cannot admit it"
        )
    })?;
    if let Some(p) = cq.spec.stop_policy.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "ClusterQueue {cq_name} is stopped (stopPolicy {p})"
        ));
    }
    // Kueue admits nothing through an inactive ClusterQueue (a flavor or
    // an admission check missing, …): its condition says why.
    if let Some(c) = cq
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Active" && c.status == "False")
    {
        return Err(format!(
            "ClusterQueue {cq_name} is inactive ({}: {})",
            c.reason, c.message
        ));
    }
    if w.spec.pod_sets.is_empty() {
        return Err("no pod sets".to_owned());
    }
    let need = total_requests(w)?;
    let mut sources = vec![
        source.clone(),
        ObjectRef::new(KUEUE_V1BETA2, "LocalQueue", ns, queue),
        ObjectRef::new(KUEUE_V1BETA2, "ClusterQueue", "", cq_name),
    ];
    let chosen = choose_flavors(cq, &need, index)?;
    sources.extend(
        chosen
            .iter()
            .map(|f| ObjectRef::new(KUEUE_V1BETA2, "ResourceFlavor", "", &name_of(&f.metadata))),
    );
    // Admission checks on a chosen flavor: Kueue reserves the quota
    // first (a TAS request delayed), then the checks (a ProvisioningRequest)
    // ask for the capacity: that is the demand, not this Workload.
    let checks = admission_checks(cq, &chosen);
    if !checks.is_empty() {
        return Err(format!(
            "waits for Kueue to reserve quota in ClusterQueue {cq_name}; its admission checks \
             ({}) then ask for the capacity",
            checks.join(", ")
        ));
    }
    // The levels every TAS flavor's nodes must carry.
    let mut levels: Vec<String> = Vec::new();
    for f in &chosen {
        if let Some(t) = &f.spec.topology_name {
            let topology = index.topologies.get(t).ok_or_else(|| {
                format!(
                    "Topology {t} (of ResourceFlavor {}) not found",
                    name_of(&f.metadata)
                )
            })?;
            levels.extend(topology.spec.levels.iter().map(|l| l.node_label.clone()));
        }
    }
    let sets = pod_sets(w, &chosen, &levels)?;
    Ok(KueuePlan {
        namespace: ns.to_owned(),
        name: name.to_owned(),
        sources,
        priority: w.spec.priority,
        created: created(&w.metadata),
        sets,
    })
}

/// A workload's requests, resource by resource, all pod sets together
/// (each pod's as kube-scheduler and Kueue count them).
fn total_requests(w: &KueueWorkload) -> Result<BTreeMap<String, Milli>, String> {
    let mut need: BTreeMap<String, Milli> = BTreeMap::new();
    for ps in &w.spec.pod_sets {
        if ps.count < 0 {
            return Err(format!(
                "pod set {}: count {} is negative",
                ps.name, ps.count
            ));
        }
        let spec = ps
            .template
            .spec
            .as_ref()
            .ok_or_else(|| format!("pod set {}: its template has no spec", ps.name))?;
        for (r, q) in
            pod::effective_requests(spec).map_err(|e| format!("pod set {}: {e}", ps.name))?
        {
            let per_pod =
                quantity::parse(&q).map_err(|e| format!("pod set {}: {r}: {e}", ps.name))?;
            let total = per_pod
                .checked_mul(i64::from(ps.count))
                .and_then(|t| t.checked_add(need.get(&r).copied().unwrap_or(0)))
                .ok_or_else(|| format!("pod set {}: {r}: the total is out of range", ps.name))?;
            need.insert(r, total);
        }
    }
    Ok(need)
}

/// The flavor of each resource group the workload asks of: the first, in
/// the ClusterQueue's order, with free quota for all of it; else why
/// Kueue's quota holds it.
fn choose_flavors<'a>(
    cq: &KueueClusterQueue,
    need: &BTreeMap<String, Milli>,
    index: &KueueIndex<'a>,
) -> Result<Vec<&'a KueueResourceFlavor>, String> {
    let cq_name = name_of(&cq.metadata);
    let mut chosen: Vec<&KueueResourceFlavor> = Vec::new();
    for r in need.keys() {
        if !cq
            .spec
            .resource_groups
            .iter()
            .any(|g| g.covered_resources.contains(r))
        {
            return Err(format!(
                "held by quota: ClusterQueue {cq_name} covers no {r} (no resource group has it)"
            ));
        }
    }
    for group in &cq.spec.resource_groups {
        let asked: Vec<&String> = need
            .keys()
            .filter(|r| group.covered_resources.contains(r))
            .collect();
        if asked.is_empty() {
            continue;
        }
        let mut tried = Vec::new();
        let mut found = None;
        for f in &group.flavors {
            let mut short = Vec::new();
            for r in &asked {
                let free = free_quota(cq, &f.name, r, index);
                if free < need[*r] {
                    short.push(format!(
                        "{r}: {} requested, {} free",
                        quantity::Display(need[*r]),
                        quantity::Display(free.max(0))
                    ));
                }
            }
            if short.is_empty() {
                found = Some(&f.name);
                break;
            }
            tried.push(format!("flavor {}: {}", f.name, short.join(", ")));
        }
        let Some(flavor) = found else {
            return Err(format!(
                "held by quota: ClusterQueue {cq_name} has no flavor with the quota for it ({})",
                tried.join("; ")
            ));
        };
        let rf = index.flavors.get(flavor).ok_or_else(|| {
            format!("ResourceFlavor {flavor} (of ClusterQueue {cq_name}) not found")
        })?;
        chosen.push(rf);
    }
    Ok(chosen)
}

/// The workload's pod sets as Kueue creates their pods on `flavors`:
/// their topology request as Kueue's TAS annotation, the flavors' node
/// labels and tolerations, every Topology level's label required.
fn pod_sets(
    w: &KueueWorkload,
    flavors: &[&KueueResourceFlavor],
    levels: &[String],
) -> Result<Vec<(String, ObjectMeta, core::PodSpec, u32)>, String> {
    let mut sets = Vec::new();
    for ps in &w.spec.pod_sets {
        let mut meta = ps.template.metadata.clone().unwrap_or_default();
        let mut spec = ps.template.spec.clone().unwrap_or_default();
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.remove(KUEUE_REQUIRED);
        annotations.remove(KUEUE_PREFERRED);
        if let Some(t) = &ps.topology_request {
            if t.required.is_some() || t.preferred.is_some() {
                if levels.is_empty() {
                    return Err(format!(
                        "pod set {} asks for a topology, and no flavor it has quota in has one \
                         (ResourceFlavor topologyName): Kueue cannot admit it",
                        ps.name
                    ));
                }
                for key in t.required.iter().chain(&t.preferred) {
                    if !levels.contains(key) {
                        return Err(format!(
                            "pod set {}: topology level {key} is not a level of its flavor's Topology ({})",
                            ps.name,
                            levels.join(", ")
                        ));
                    }
                }
            }
            if let Some(k) = &t.required {
                annotations.insert(KUEUE_REQUIRED.to_owned(), k.clone());
            } else if let Some(k) = &t.preferred {
                annotations.insert(KUEUE_PREFERRED.to_owned(), k.clone());
            }
        }
        for f in flavors {
            let selector = spec.node_selector.get_or_insert_with(Default::default);
            for (k, v) in &f.spec.node_labels {
                selector.insert(k.clone(), v.clone());
            }
            spec.tolerations
                .get_or_insert_with(Vec::new)
                .extend(f.spec.tolerations.iter().cloned());
        }
        require_labels(&mut spec, levels);
        // Within `Options::limits` once its pods are counted (`workload`).
        sets.push((ps.name.clone(), meta, spec, ps.count.max(0) as u32));
    }
    Ok(sets)
}

/// The admission checks that apply to a workload on `flavors`: v1beta1's
/// `admissionChecks`, and v1beta2's `admissionChecksStrategy` rules (a rule
/// with `onFlavors` only where one of them is chosen).
fn admission_checks(cq: &KueueClusterQueue, flavors: &[&KueueResourceFlavor]) -> Vec<String> {
    let mut out = cq.spec.admission_checks.clone();
    let rules = cq
        .spec
        .admission_checks_strategy
        .as_ref()
        .and_then(|s| s.get("admissionChecks"))
        .and_then(serde_json::Value::as_array);
    for rule in rules.into_iter().flatten() {
        let Some(name) = rule.get("name").and_then(serde_json::Value::as_str) else {
            continue;
        };
        let on: Vec<&str> = rule
            .get("onFlavors")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        if on.is_empty()
            || flavors
                .iter()
                .any(|f| on.contains(&name_of(&f.metadata).as_str()))
        {
            out.push(name.to_owned());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every key in `keys` as an `Exists` requirement of each of the pod's
/// required node affinity terms (one term if it had none).
fn require_labels(spec: &mut core::PodSpec, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let exists: Vec<core::NodeSelectorRequirement> = keys
        .iter()
        .map(|k| core::NodeSelectorRequirement {
            key: k.clone(),
            operator: "Exists".to_owned(),
            values: None,
        })
        .collect();
    let required = spec
        .affinity
        .get_or_insert_with(Default::default)
        .node_affinity
        .get_or_insert_with(Default::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Default::default);
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(core::NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .extend(exists.iter().cloned());
    }
}

/// Quota of `resource` in `flavor` the ClusterQueue can still reserve:
/// its nominal quota less what is reserved, plus what the other queues
/// of its cohort leave unused and may lend (within its `borrowingLimit`).
fn free_quota(cq: &KueueClusterQueue, flavor: &str, resource: &str, index: &KueueIndex) -> Milli {
    let (nominal, borrowing, _) = quota(cq, flavor, resource);
    let own = nominal.saturating_sub(reserved(cq, flavor, resource));
    let Some(cohort) = cq.spec.cohort_name.as_deref().filter(|c| !c.is_empty()) else {
        return own;
    };
    let mut lendable: Milli = 0;
    for other in index.cluster_queues.values() {
        if std::ptr::eq(*other, cq) || other.spec.cohort_name.as_deref() != Some(cohort) {
            continue;
        }
        let (n, _, lending) = quota(other, flavor, resource);
        let unused = n.saturating_sub(reserved(other, flavor, resource)).max(0);
        lendable = lendable.saturating_add(unused.min(lending.unwrap_or(Milli::MAX)));
    }
    own.saturating_add(lendable.min(borrowing.unwrap_or(Milli::MAX)))
}

/// (nominal, borrowing limit, lending limit) of one resource in one flavor.
fn quota(
    cq: &KueueClusterQueue,
    flavor: &str,
    resource: &str,
) -> (Milli, Option<Milli>, Option<Milli>) {
    let parse = |q: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.as_ref().and_then(|q| quantity::parse(&q.0).ok())
    };
    cq.spec
        .resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .filter(|f| f.name == flavor)
        .flat_map(|f| &f.resources)
        .find(|r| r.name == resource)
        .map(|r| {
            (
                parse(&r.nominal_quota).unwrap_or(0),
                parse(&r.borrowing_limit),
                parse(&r.lending_limit),
            )
        })
        .unwrap_or((0, Some(0), Some(0)))
}

fn reserved(cq: &KueueClusterQueue, flavor: &str, resource: &str) -> Milli {
    cq.status
        .flavors_reservation
        .iter()
        .filter(|f| f.name == flavor)
        .flat_map(|f| &f.resources)
        .filter(|r| r.name == resource)
        .filter_map(|r| r.total.as_ref().and_then(|q| quantity::parse(&q.0).ok()))
        .fold(0, Milli::saturating_add)
}

/// The units of a planned Workload, one gang of all its pods.
pub(super) fn units<'a>(p: &'a KueuePlan, groups: &mut BTreeMap<GroupKey, Group<'a>>) {
    let g = groups
        .entry(GroupKey::KueueWorkload(p.namespace.clone(), p.name.clone()))
        .or_default();
    g.sources.extend(p.sources.iter().cloned());
    g.owner_priority = p.priority;
    let mut all: u64 = 0;
    for (set, meta, spec, count) in &p.sets {
        all = all.saturating_add(u64::from(*count));
        g.units.push(Unit {
            namespace: p.namespace.clone(),
            set_name: set.clone(),
            meta: Some(meta),
            spec,
            count: *count,
            created: p.created,
            source: p.sources[0].clone(),
        });
    }
    // Kueue admits a workload whole.
    g.owner_min = Some(all);
}
