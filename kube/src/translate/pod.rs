//! One pod as kube-scheduler sees it: pending or bound, its effective
//! requests and spec, the devices it holds, and whether it makes a node busy.

use super::claim::claim;
use super::*;

/// A pod that runs because its node does, as cluster-autoscaler tells
/// them (utils/pod/pod.go `IsDaemonSetPod`, `IsMirrorPod`): its controller
/// is a DaemonSet, or it says it is one
/// (`cluster-autoscaler.kubernetes.io/daemonset-pod: "true"`), or it is
/// the kubelet's mirror of a static pod (`kubernetes.io/config.mirror`;
/// its owner is the Node).
pub(super) fn is_node_agent(meta: &ObjectMeta) -> bool {
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

/// The name of the object of `kind` that controls it.
fn controller<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.name.as_str())
}

/// The tolerations the DaemonSet controller gives every daemon pod
/// (pkg/controller/daemon/util/daemonset_util.go,
/// `AddOrUpdateDaemonPodTolerations`): not-ready and unreachable
/// (NoExecute), disk, memory and PID pressure and unschedulable
/// (NoSchedule), network-unavailable for host-network pods.
fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let exists = |key: &str, effect| Toleration {
        key: Some(key.to_owned()),
        operator: TolerationOperator::Exists,
        value: None,
        effect: Some(effect),
    };
    let mut t = vec![
        exists("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
        exists("node.kubernetes.io/unreachable", TaintEffect::NoExecute),
        exists("node.kubernetes.io/disk-pressure", TaintEffect::NoSchedule),
        exists(
            "node.kubernetes.io/memory-pressure",
            TaintEffect::NoSchedule,
        ),
        exists("node.kubernetes.io/pid-pressure", TaintEffect::NoSchedule),
        exists("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule),
    ];
    if host_network {
        t.push(exists(
            "node.kubernetes.io/network-unavailable",
            TaintEffect::NoSchedule,
        ));
    }
    t
}

/// A DaemonSet: the pods it will run on nodes that do not run them yet.
pub(super) fn daemon_set(
    ds: &k8s_openapi::api::apps::v1::DaemonSet,
    index: &Index,
    out: &mut Translation,
) {
    let (ns, name) = (ns_of(&ds.metadata), name_of(&ds.metadata));
    let template = &ds.spec.template;
    let Some(spec) = &template.spec else { return };
    match pod_spec(&ns, template.metadata.as_ref(), spec, index) {
        Ok(mut pod) => {
            pod.tolerations
                .extend(daemon_tolerations(spec.host_network == Some(true)));
            out.demand.daemon_sets.push(accord::demand::DaemonSetPods {
                namespace: ns,
                name,
                pod,
            });
        }
        Err(e) => out.invalid.push(format!(
            "DaemonSet {ns}/{name}: {e}; its pods are not counted on nodes that do not run them yet"
        )),
    }
}

/// The opt-outs Karpenter and cluster-autoscaler honour on a pod: its
/// node is not to be disrupted while it runs.
pub(super) fn asks_not_to_be_disrupted(meta: &ObjectMeta) -> bool {
    let annotation = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    annotation(KARPENTER_DO_NOT_DISRUPT) == Some("true")
        || annotation(SAFE_TO_EVICT) == Some("false")
}

pub(super) const DAEMONSET_POD: &str = "cluster-autoscaler.kubernetes.io/daemonset-pod";

pub(super) const MIRROR_POD: &str = "kubernetes.io/config.mirror";

pub(super) const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

pub(super) const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// The annotations naming the ProvisioningRequest whose capacity a pod
/// consumes, as cluster-autoscaler reads them (the second is the
/// deprecated key older Kueue versions write).
pub(super) const CONSUME_PROVISIONING_REQUEST: [&str; 2] = [
    "autoscaling.x-k8s.io/consume-provisioning-request",
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request",
];

pub(super) fn marked_group(
    meta: Option<&ObjectMeta>,
    spec: Option<&core::PodSpec>,
    ns: &str,
    index: &Index,
) -> Option<GroupKey> {
    if let Some(g) = spec
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.clone())
    {
        // Not served: the scheduler cannot gang it either (see
        // `translate`, which says so once).
        if index.pod_groups_served {
            return Some(GroupKey::SchedPodGroup(ns.to_owned(), g));
        }
    }
    if let Some(g) = label(meta, COSCHED_POD_GROUP) {
        return Some(GroupKey::Cosched(ns.to_owned(), g.to_owned()));
    }
    // Kueue ≥ 0.18 writes the group's name as an annotation (its pod,
    // StatefulSet and LeaderWorkerSet integrations), older ones as a label;
    // the annotation wins, as Kueue reads it.
    if let Some(g) = annotation(meta, KUEUE_POD_GROUP).or_else(|| label(meta, KUEUE_POD_GROUP)) {
        return Some(GroupKey::Kueue(ns.to_owned(), g.to_owned()));
    }
    // Volcano's and KAI's gangs: pods of their scheduler (which the
    // configuration lists, else they are not planned at all), or whose
    // PodGroup is there to read. A default-scheduler pod that merely
    // carries the annotation is planned as kube-scheduler places it.
    let another_scheduler = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .is_some_and(|s| !s.is_empty() && s != DEFAULT_SCHEDULER);
    let key = |g: &str| (ns.to_owned(), g.to_owned());
    if let Some(g) = VOLCANO_POD_GROUP.iter().find_map(|k| annotation(meta, k)) {
        if another_scheduler || index.volcano_groups.contains_key(&key(g)) {
            return Some(GroupKey::Volcano(ns.to_owned(), g.to_owned()));
        }
    }
    if let Some(g) = annotation(meta, KAI_POD_GROUP) {
        if another_scheduler || index.kai_groups.contains_key(&key(g)) {
            return Some(GroupKey::Kai(ns.to_owned(), g.to_owned()));
        }
    }
    None
}

pub(super) fn pod_unit<'a>(
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
                requests: without_dra_backed(requests, p),
                namespace: ns,
                name,
                labels: p.metadata.labels.clone().unwrap_or_default(),
                node_agent: is_node_agent(&p.metadata),
                daemon_set: controller(&p.metadata, "DaemonSet")
                    .map(|ds| format!("{}/{ds}", ns_of(&p.metadata))),
                node_selector_keys: if controller(&p.metadata, "DaemonSet").is_some() {
                    spec.node_selector.iter().flatten().map(|(k, _)| k.clone()).collect()
                } else {
                    Vec::new()
                },
                do_not_disrupt: asks_not_to_be_disrupted(&p.metadata),
                // The node's agent says (accordd fills them in observe).
                device_ids: Vec::new(),
                csi_volumes: super::volumes::bound_csi_volumes(
                    &ns_of(&p.metadata),
                    p.metadata.name.as_deref(),
                    spec,
                    &index.storage,
                ),
                relations: match super::relations::bound_relations(
                    spec,
                    p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        out.invalid.push(format!(
                            "bound pod {}/{}: {e}; its anti-affinity and host ports are not counted",
                            ns_of(&p.metadata),
                            name_of(&p.metadata)
                        ));
                        Default::default()
                    }
                },
            }),
            Err(reason) => out.invalid.push(format!("bound pod {ns}/{name}: {reason}")),
        }
        return;
    }
    if !is_pending(p, options) {
        out.skipped_pods += 1;
        return;
    }
    if let Some(reason) = not_for_accord(p, spec, options) {
        out.not_planned.push(CannotPlan {
            workload: format!("{ns}/{name}"),
            sources: vec![ObjectRef::new("v1", "Pod", &ns, &name)],
            reason,
        });
        return;
    }
    // A pod Kueue admitted through a ProvisioningRequest runs on the
    // capacity that request booked: the request was the demand. One
    // naming a request that does not exist is planned as any pod.
    if CONSUME_PROVISIONING_REQUEST
        .iter()
        .filter_map(|k| annotation(Some(&p.metadata), k))
        .any(|pr| index.provisioning.contains(&(ns.clone(), pr.to_owned())))
    {
        out.consuming_pods += 1;
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

/// Why a pending pod is not Accord's to plan: it is another scheduler's
/// (Accord plans as kube-scheduler's default profile does), or
/// kube-scheduler nominated a node for it (`status.nominatedNodeName`): it
/// preempted lower-priority pods there and binds the pod once they are
/// gone (pkg/scheduler/framework/preemption), so powering a machine on for
/// it would leave the machine unused.
fn not_for_accord(p: &core::Pod, spec: &core::PodSpec, options: &Options) -> Option<String> {
    let scheduler = spec
        .scheduler_name
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(super::DEFAULT_SCHEDULER);
    if !options.schedulers.contains(scheduler) {
        return Some(format!(
            "spec.schedulerName {scheduler:?} is not a scheduler Accord plans for \
             (kubernetes.schedulers); left to that scheduler"
        ));
    }
    let nominated = p
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())?;
    Some(format!(
        "kube-scheduler nominated node {nominated} for it (status.nominatedNodeName): \
         it preempts there, nothing is powered on for it"
    ))
}

/// Pending: the scheduler said Unschedulable (PodScheduled=False), or —
/// for manifests — nothing says anything yet.
pub(super) fn is_pending(p: &core::Pod, options: &Options) -> bool {
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

pub(super) fn container_requests(c: &core::Container) -> Result<BTreeMap<String, Milli>, String> {
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

pub(super) fn pod_spec(
    ns: &str,
    meta: Option<&ObjectMeta>,
    spec: &core::PodSpec,
    index: &Index,
) -> Result<PodSpec, String> {
    let no_labels = BTreeMap::new();
    let labels = meta.and_then(|m| m.labels.as_ref()).unwrap_or(&no_labels);
    let mut pod = PodSpec {
        requests: effective_requests(spec)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        labels: labels
            .iter()
            .filter(|(k, _)| index.selector_keys.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        relations: super::relations::relations(spec, labels)?,
        volumes: super::volumes::pod_volumes(
            ns,
            meta.and_then(|m| m.name.as_deref()),
            spec,
            &index.storage,
        ),
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
                let operator = node_selector_operator(&e.operator)
                    .ok_or_else(|| format!("node affinity operator {:?}", e.operator))?;
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
    let claims = spec.resource_claims.as_deref().unwrap_or_default();
    if claims.len() > MAX_POD_CLAIMS {
        return Err(format!(
            "{} resourceClaims (at most {MAX_POD_CLAIMS})",
            claims.len()
        ));
    }
    for rc in claims {
        let (claim_spec, what) = match (&rc.resource_claim_name, &rc.resource_claim_template_name)
        {
            (Some(n), None) => (
                index
                    .claims
                    .get(&(ns.to_owned(), n.clone()))
                    .ok_or_else(|| format!("ResourceClaim {ns}/{n} not found"))?
                    .spec
                    .as_ref()
                    .ok_or_else(|| format!("ResourceClaim {ns}/{n} has no spec"))?,
                format!("ResourceClaim {ns}/{n}"),
            ),
            (None, Some(t)) => (
                index
                    .templates
                    .get(&(ns.to_owned(), t.clone()))
                    .ok_or_else(|| format!("ResourceClaimTemplate {ns}/{t} not found"))?
                    .spec
                    .as_ref()
                    .and_then(|s| s.spec.as_ref())
                    .ok_or_else(|| format!("ResourceClaimTemplate {ns}/{t} has no spec"))?,
                format!("ResourceClaimTemplate {ns}/{t}"),
            ),
            _ => {
                return Err(format!(
                    "resourceClaims {}: set exactly one of resourceClaimName and resourceClaimTemplateName",
                    rc.name
                ))
            }
        };
        pod.claims.push(
            claim(&rc.name, claim_spec, &index.cel)
                .map_err(|e| format!("claim {} ({what}): {e}", rc.name))?,
        );
    }
    extended_as_claims(&mut pod, index)?;
    Ok(pod)
}

/// An extended resource a DeviceClass maps (`extendedResourceName`, as
/// NVIDIA's chart maps `nvidia.com/gpu` to `gpu.nvidia.com`) is asked of
/// DRA: a request for that many devices of the class, as the scheduler's
/// DynamicResources plugin makes one (KEP-5004). Simplification: Accord
/// takes the mapping for every node, also those whose device plugin
/// advertises the resource.
fn extended_as_claims(pod: &mut PodSpec, index: &Index) -> Result<(), String> {
    let mapped: Vec<(String, String)> = pod
        .requests
        .keys()
        .filter_map(|r| Some((r.clone(), index.extended.get(r)?.clone())))
        .collect();
    for (resource, class) in mapped {
        let quantity = pod.requests.remove(&resource).unwrap_or_default();
        let count: u32 = quantity.parse().map_err(|_| {
            format!("{resource} {quantity:?}: a device count (DeviceClass {class} maps it)")
        })?;
        if count == 0 {
            continue;
        }
        pod.claims.push(accord::demand::Claim {
            name: format!("extended-resource:{resource}"),
            requests: vec![accord::demand::DeviceRequest {
                name: resource.clone(),
                exactly: Some(accord::demand::ExactRequest {
                    name: None,
                    device_class: class,
                    selectors: Vec::new(),
                    count,
                    allocation_mode: Default::default(),
                    capacity: Default::default(),
                    tolerations: Vec::new(),
                }),
                first_available: Vec::new(),
            }],
            constraints: Vec::new(),
        });
    }
    Ok(())
}

/// A bound pod's `requests` without the extended resources a DRA claim
/// serves (its `status.extendedResourceClaimStatus.requestMappings`): the
/// claim's devices are what it holds ([`held_devices`]), not a device
/// plugin's.
fn without_dra_backed(
    mut requests: BTreeMap<String, String>,
    p: &core::Pod,
) -> BTreeMap<String, String> {
    if let Some(e) = p
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
    {
        for m in &e.request_mappings {
            requests.remove(&m.resource_name);
        }
    }
    requests
}

/// The DRA devices a bound pod holds: the allocation results of its
/// ResourceClaims (by name, or made from a template: the name in the pod's
/// `status.resourceClaimStatuses`), as kube-scheduler wrote them; each
/// claim once however many pods share it. A result with admin access
/// holds nothing (the device stays allocatable, as the scheduler's
/// allocator treats it); consumed capacity is a share of a device that
/// allows multiple allocations. A claim not found or not allocated holds
/// nothing yet.
///
/// A pod whose extended resource (`nvidia.com/gpu`) a DeviceClass maps to
/// DRA (`extendedResourceName`, the `DRAExtendedResource` gate) holds the
/// devices of the claim kube-scheduler made for it, named only in
/// `status.extendedResourceClaimStatus` (kubernetes v1.37
/// `pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go`,
/// `patchPodExtendedResourceClaimStatus`, called at binding): read like the others, so the GPU it holds is known, not
/// guessed.
pub(super) fn held_devices(p: &core::Pod, ns: &str, index: &Index) -> Vec<BoundDevice> {
    let mut out = Vec::new();
    // Every claim of a pod the scheduler bound holds its devices, however
    // many: the statuses are indexed once, so reading them is linear in
    // the pod (which the API server bounds).
    let statuses: std::collections::BTreeMap<&str, &str> = p
        .status
        .iter()
        .flat_map(|s| s.resource_claim_statuses.iter().flatten())
        .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
        .collect();
    let extended = p
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .map(|e| e.resource_claim_name.clone());
    let names = p
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter_map(|rc| {
            rc.resource_claim_name
                .clone()
                .or_else(|| statuses.get(rc.name.as_str()).map(|n| (*n).to_owned()))
        })
        .chain(extended);
    for name in names {
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
