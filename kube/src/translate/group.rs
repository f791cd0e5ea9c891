//! Gangs: which pods belong together (owner, PodGroup, Kueue, coscheduling,
//! JobSet) and the workload a group becomes, with its topology.

use super::pod::{marked_group, pod_spec};
use super::*;
use crate::workload_ref::{FROM_WORKLOAD, WORKLOAD_V1ALPHA1};

/// The group a template's pods belong to: a named gang, else its owner.
pub(super) fn owner_group(
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
pub(super) fn owner_of(meta: &ObjectMeta) -> Option<GroupKey> {
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

/// The PodGroup `ns/g`; for a replica of one of a 1.35 Workload's groups
/// (`W/G/KEY`), that group (`workload_ref`): the policy holds per replica.
fn sched_group<'a>(
    index: &'a Index,
    ns: &str,
    g: &str,
) -> Option<&'a k8s_openapi::api::scheduling::v1beta1::PodGroup> {
    let get = |name: &str| {
        index
            .sched_groups
            .get(&(ns.to_owned(), name.to_owned()))
            .copied()
    };
    get(g).or_else(|| crate::workload_ref::replica_of(g).and_then(get))
}

pub(super) fn workload(
    key: &GroupKey,
    group: Group,
    options: &Options,
    index: &Index,
) -> Result<Workload, CannotPlan> {
    let (ns, name) = key.name();
    let mut sources: Vec<ObjectRef> = match key {
        // 1.35: the group is one of a Workload's (`workload_ref`).
        GroupKey::SchedPodGroup(ns, g) => match sched_group(index, ns, g)
            .and_then(|pg| pg.metadata.annotations.as_ref()?.get(FROM_WORKLOAD))
        {
            Some(w) => vec![ObjectRef::new(WORKLOAD_V1ALPHA1, "Workload", ns, w)],
            None => vec![ObjectRef::new(
                "scheduling.k8s.io/v1beta1",
                "PodGroup",
                ns,
                g,
            )],
        },
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
        GroupKey::Volcano(..) | GroupKey::Kai(..) => other_scheduler_sources(key, index),
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
    let mut approximation = None;
    let mut priority = group.owner_priority;
    match key {
        GroupKey::SchedPodGroup(ns, g) => {
            let pg = sched_group(index, ns, g)
                .ok_or_else(|| fail(format!("PodGroup {ns}/{g} (scheduling.k8s.io) not found")))?;
            let spec = &pg.spec;
            if let Some(gang) = &spec.scheduling_policy.gang {
                // k8s.io/api scheduling/v1beta1/types.go: `+k8s:minimum=1`.
                if gang.min_count < 1 {
                    return Err(fail(format!(
                        "PodGroup {ns}/{g}: minCount {} (at least 1)",
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
            if m < 1 {
                return Err(fail(format!(
                    "PodGroup {ns}/{g}: minMember {m} (at least 1)"
                )));
            }
            min_count = Some(m as u32);
        }
        GroupKey::Kueue(ns, g) => {
            let total = group
                .units
                .iter()
                .find_map(|u| {
                    annotation(u.meta, KUEUE_POD_GROUP_COUNT)
                        .or_else(|| label(u.meta, KUEUE_POD_GROUP_COUNT))
                })
                .ok_or_else(|| {
                    fail(format!(
                        "Kueue pod group {ns}/{g}: no {KUEUE_POD_GROUP_COUNT} annotation or label"
                    ))
                })?;
            let total: u32 = total.parse().map_err(|_| {
                fail(format!(
                    "Kueue pod group {ns}/{g}: {KUEUE_POD_GROUP_COUNT} {total:?} is not a count"
                ))
            })?;
            min_count = Some(total);
        }
        GroupKey::Volcano(..) | GroupKey::Kai(..) => {
            let gang = other_scheduler_gang(key, index, options).map_err(&fail)?;
            min_count = Some(gang.min);
            topology = gang.topology;
            approximation = Some(gang.approximation);
        }
        GroupKey::Owner(..) | GroupKey::Single(..) | GroupKey::KueueWorkload(..) => {
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
    // A PodGroup's own claims are allocated once for the group: the pods'
    // matching claims share them. One pod carries each (its devices are
    // counted once), the others none.
    let group_claims: &[k8s_openapi::api::scheduling::v1beta1::PodGroupResourceClaim] = match key {
        GroupKey::SchedPodGroup(ns, g) => index
            .sched_groups
            .get(&(ns.clone(), g.clone()))
            .and_then(|pg| pg.spec.resource_claims.as_deref())
            .unwrap_or_default(),
        _ => &[],
    };
    // Each pod's claims are matched against the group's: both bounded
    // (pods' in `pod_spec`) before any is.
    if group_claims.len() > MAX_POD_GROUP_CLAIMS {
        let (ns, g) = key.name();
        return Err(fail(format!(
            "PodGroup {ns}/{g}: {} resourceClaims (at most {MAX_POD_GROUP_CLAIMS})",
            group_claims.len()
        )));
    }
    let mut carried: std::collections::BTreeSet<String> = Default::default();
    // Pod sets: units of the same translated shape merge.
    let mut pod_sets: Vec<PodSet> = Vec::new();
    let mut created_at = u64::MAX;
    for u in &group.units {
        created_at = created_at.min(u.created);
        let pod = pod_spec(&u.namespace, u.meta, u.spec, index)
            .map_err(|e| fail(format!("{}: {e}", u.source)))?;
        let pieces = share_group_claims(pod, u, group_claims, &mut carried);
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
        for (pod, count) in pieces {
            // Units of the same translated shape merge (a gang has a handful of
            // shapes: comparing beats hashing a serialization).
            match pod_sets.iter().position(|s| s.pod == pod) {
                Some(i) => pod_sets[i].count = pod_sets[i].count.saturating_add(count),
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
                        count,
                        pod,
                    });
                }
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
        approximation,
    })
}

/// Volcano's PodGroup API (and its Queue's), KAI's PodGroup and Queue.
const VOLCANO_API: &str = "scheduling.volcano.sh/v1beta1";
const KAI_API: &str = "scheduling.run.ai/v2alpha2";
const KAI_QUEUE_API: &str = "scheduling.run.ai/v2";

/// A Volcano or KAI PodGroup's object and its queue, the workload's first sources.
fn other_scheduler_sources(key: &GroupKey, index: &Index) -> Vec<ObjectRef> {
    let (api, queue_api, ns, g, queue) = match key {
        GroupKey::Volcano(ns, g) => (
            VOLCANO_API,
            VOLCANO_API,
            ns,
            g,
            index
                .volcano_groups
                .get(&(ns.clone(), g.clone()))
                .and_then(|pg| pg.spec.queue.as_deref()),
        ),
        GroupKey::Kai(ns, g) => (
            KAI_API,
            KAI_QUEUE_API,
            ns,
            g,
            index
                .kai_groups
                .get(&(ns.clone(), g.clone()))
                .and_then(|pg| pg.spec.queue.as_deref()),
        ),
        _ => return Vec::new(),
    };
    let mut s = vec![ObjectRef::new(api, "PodGroup", ns, g)];
    if let Some(q) = queue {
        s.push(ObjectRef::new(queue_api, "Queue", "", q));
    }
    s
}

/// What another scheduler's PodGroup says of its gang.
struct OtherGang {
    min: u32,
    topology: Option<TopologyRequirement>,
    approximation: String,
}

/// A Volcano PodGroup's gang (`minMember`), or a KAI one's (`minMember`,
/// else its leaf subgroups' minimums together; its topology constraint).
fn other_scheduler_gang(
    key: &GroupKey,
    index: &Index,
    options: &Options,
) -> Result<OtherGang, String> {
    match key {
        GroupKey::Volcano(ns, g) => {
            let pg = index.volcano_groups.get(&(ns.clone(), g.clone())).ok_or_else(|| {
                format!("PodGroup {ns}/{g} (scheduling.volcano.sh) not found: Volcano waits for it too")
            })?;
            Ok(OtherGang {
                min: gang_minimum(pg.spec.min_member, None, "minMember", ns, g)?,
                topology: None,
                approximation: approximation_of("Volcano", pg.spec.min_resources.as_ref()),
            })
        }
        GroupKey::Kai(ns, g) => {
            let pg = index
                .kai_groups
                .get(&(ns.clone(), g.clone()))
                .ok_or_else(|| {
                    format!("PodGroup {ns}/{g} (scheduling.run.ai) not found: KAI waits for it too")
                })?;
            let leaves: Option<i64> = (!pg.spec.sub_groups.is_empty()).then(|| {
                let parents: std::collections::BTreeSet<&str> = pg
                    .spec
                    .sub_groups
                    .iter()
                    .filter_map(|s| s.parent.as_deref())
                    .collect();
                pg.spec
                    .sub_groups
                    .iter()
                    .filter(|s| !parents.contains(s.name.as_str()))
                    .map(|s| i64::from(s.min_member.unwrap_or(0).max(0)))
                    .sum()
            });
            let min = gang_minimum(pg.spec.min_member, leaves, "minMember", ns, g)?;
            let topology = match &pg.spec.topology_constraint {
                Some(t) => match (&t.required_topology_level, &t.preferred_topology_level) {
                    (Some(k), _) => Some(level_for(k, TopologyMode::Required, options)?),
                    (None, Some(k)) => Some(level_for(k, TopologyMode::Preferred, options)?),
                    (None, None) => None,
                },
                None => None,
            };
            Ok(OtherGang {
                min,
                topology,
                approximation: approximation_of("KAI", None),
            })
        }
        _ => Err("not another scheduler's PodGroup".to_owned()),
    }
}

/// A gang's minimum from another scheduler's PodGroup: its own `minMember`
/// (0 or absent: its subgroups' leaves, else 1, a gang of one);
/// negative is refused as their validation refuses it.
fn gang_minimum(
    own: Option<i32>,
    leaves: Option<i64>,
    field: &str,
    ns: &str,
    g: &str,
) -> Result<u32, String> {
    match own {
        Some(m) if m < 0 => Err(format!("PodGroup {ns}/{g}: {field} {m} is negative")),
        Some(m) if m > 0 => Ok(m as u32),
        _ => Ok(leaves
            .filter(|l| *l > 0)
            .map_or(1, |l| l.min(i64::from(u32::MAX)) as u32)),
    }
}

/// What Accord's plan of another scheduler's gang leaves out.
fn approximation_of(
    scheduler: &str,
    min_resources: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
) -> String {
    let min = min_resources
        .filter(|r| !r.is_empty())
        .map(|r| {
            format!(
                "; its minResources ({}) are its queue's admission, not modelled",
                r.iter()
                    .map(|(k, v)| format!("{k}={}", v.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .unwrap_or_default();
    format!(
        "{scheduler} places this gang; Accord plans it with kube-scheduler's filters, an \
         approximation of {scheduler}'s scheduler (its queues' capacity, ordering and \
         scoring are not modelled){min}"
    )
}

/// A unit's pods as (pod, count) pieces once its PodGroup's claims are
/// shared: a pod claim that matches a group claim exactly (same name, same
/// ResourceClaim or template) is the group's; the first pod that has it
/// carries it, every other pod drops it.
fn share_group_claims(
    pod: PodSpec,
    u: &Unit,
    group_claims: &[k8s_openapi::api::scheduling::v1beta1::PodGroupResourceClaim],
    carried: &mut std::collections::BTreeSet<String>,
) -> Vec<(PodSpec, u32)> {
    let shared: Vec<&str> = u
        .spec
        .resource_claims
        .iter()
        .flatten()
        .filter(|rc| {
            group_claims.iter().any(|g| {
                g.name == rc.name
                    && g.resource_claim_name == rc.resource_claim_name
                    && g.resource_claim_template_name == rc.resource_claim_template_name
            })
        })
        .map(|rc| rc.name.as_str())
        .collect();
    if shared.is_empty() || u.count == 0 {
        return vec![(pod, u.count)];
    }
    let mut rest = pod.clone();
    rest.claims.retain(|c| !shared.contains(&c.name.as_str()));
    let new: Vec<&str> = shared
        .iter()
        .copied()
        .filter(|n| !carried.contains(*n))
        .collect();
    if new.is_empty() {
        return vec![(rest, u.count)];
    }
    let mut carrier = pod;
    carrier
        .claims
        .retain(|c| !shared.contains(&c.name.as_str()) || new.contains(&c.name.as_str()));
    carried.extend(new.iter().map(|n| (*n).to_owned()));
    vec![(carrier, 1), (rest, u.count - 1)]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
}

pub(super) fn level_for(
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
