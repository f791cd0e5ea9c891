//! A pod's relations to other pods, as kube-scheduler v1.37.2 reads them:
//! required pod affinity and anti-affinity, `DoNotSchedule` topology
//! spread constraints, host ports; and the label keys any selector reads.
//! `matchLabelKeys` and `mismatchLabelKeys` are merged into the selector
//! as the API server does when it creates the pod
//! (pkg/registry/core/pod/strategy.go, `applyLabelKeysToLabelSelector`):
//! a pod from the API server has them merged already, and merging twice
//! adds a requirement that holds wherever the first does.

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{
    HostPort, InclusionPolicy, LabelOperator, LabelRequirement, LabelSelector, PodAffinityTerm,
    PodRelations, SpreadConstraint,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

/// The most required affinity or anti-affinity terms, spread constraints
/// or host ports of one pod Accord plans with; past them the pod cannot
/// be planned (no real pod comes near; each is weighed per node and pod).
pub const MAX_RELATION_TERMS: usize = 64;
pub const MAX_HOST_PORTS: usize = 1024;
/// The most requirements and values of one selector.
pub const MAX_SELECTOR_PARTS: usize = 256;

fn selector(
    s: &meta::LabelSelector,
    merge: &[(&[String], LabelOperator)],
    labels: &BTreeMap<String, String>,
) -> Result<LabelSelector, String> {
    let match_labels = s.match_labels.clone().unwrap_or_default();
    let exprs = s.match_expressions.as_deref().unwrap_or_default();
    if match_labels.len() + exprs.len() > MAX_SELECTOR_PARTS {
        return Err(format!(
            "a label selector of {} requirements (at most {MAX_SELECTOR_PARTS})",
            match_labels.len() + exprs.len()
        ));
    }
    let mut match_expressions = Vec::with_capacity(exprs.len());
    for e in exprs {
        let operator = match e.operator.as_str() {
            "In" => LabelOperator::In,
            "NotIn" => LabelOperator::NotIn,
            "Exists" => LabelOperator::Exists,
            "DoesNotExist" => LabelOperator::DoesNotExist,
            other => return Err(format!("label selector operator {other:?}")),
        };
        let values = e.values.clone().unwrap_or_default();
        if values.len() > MAX_SELECTOR_PARTS {
            return Err(format!(
                "label selector key {}: {} values (at most {MAX_SELECTOR_PARTS})",
                e.key,
                values.len()
            ));
        }
        match_expressions.push(LabelRequirement {
            key: e.key.clone(),
            operator,
            values,
        });
    }
    for (keys, operator) in merge {
        for k in keys.iter() {
            if let Some(v) = labels.get(k) {
                match_expressions.push(LabelRequirement {
                    key: k.clone(),
                    operator: *operator,
                    values: vec![v.clone()],
                });
            }
        }
    }
    Ok(LabelSelector {
        match_labels,
        match_expressions,
    })
}

fn terms(
    what: &str,
    raw: &[core::PodAffinityTerm],
    labels: &BTreeMap<String, String>,
) -> Result<Vec<PodAffinityTerm>, String> {
    if raw.len() > MAX_RELATION_TERMS {
        return Err(format!(
            "{} required {what} terms (at most {MAX_RELATION_TERMS})",
            raw.len()
        ));
    }
    raw.iter()
        .map(|t| {
            let match_keys = t.match_label_keys.as_deref().unwrap_or_default();
            let mismatch_keys = t.mismatch_label_keys.as_deref().unwrap_or_default();
            let merge = [
                (match_keys, LabelOperator::In),
                (mismatch_keys, LabelOperator::NotIn),
            ];
            let namespaces = t.namespaces.clone().unwrap_or_default();
            if namespaces.len() > MAX_SELECTOR_PARTS {
                return Err(format!(
                    "{what} term: {} namespaces (at most {MAX_SELECTOR_PARTS})",
                    namespaces.len()
                ));
            }
            Ok(PodAffinityTerm {
                selector: t
                    .label_selector
                    .as_ref()
                    .map(|s| selector(s, &merge, labels))
                    .transpose()
                    .map_err(|e| format!("{what} term: {e}"))?,
                namespaces,
                namespace_selector: t
                    .namespace_selector
                    .as_ref()
                    .map(|s| selector(s, &[], labels))
                    .transpose()
                    .map_err(|e| format!("{what} term namespaceSelector: {e}"))?,
                topology_key: t.topology_key.clone(),
            })
        })
        .collect()
}

fn policy(
    what: &str,
    p: Option<&str>,
    default: InclusionPolicy,
) -> Result<InclusionPolicy, String> {
    match p {
        None => Ok(default),
        Some("Honor") => Ok(InclusionPolicy::Honor),
        Some("Ignore") => Ok(InclusionPolicy::Ignore),
        Some(other) => Err(format!("topology spread {what} {other:?}")),
    }
}

fn spread(
    raw: &[core::TopologySpreadConstraint],
    labels: &BTreeMap<String, String>,
) -> Result<Vec<SpreadConstraint>, String> {
    if raw.len() > MAX_RELATION_TERMS {
        return Err(format!(
            "{} topology spread constraints (at most {MAX_RELATION_TERMS})",
            raw.len()
        ));
    }
    let mut out = Vec::new();
    // `ScheduleAnyway` only scores (filterTopologySpreadConstraints keeps
    // the DoNotSchedule ones for Filter).
    for c in raw
        .iter()
        .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
    {
        let max_skew = u32::try_from(c.max_skew)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| format!("topology spread maxSkew {} (must be above 0)", c.max_skew))?;
        let min_domains = match c.min_domains {
            None => 1,
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("topology spread minDomains {n} (must be above 0)"))?,
        };
        let keys = c.match_label_keys.as_deref().unwrap_or_default();
        out.push(SpreadConstraint {
            max_skew,
            topology_key: c.topology_key.clone(),
            selector: c
                .label_selector
                .as_ref()
                .map(|s| selector(s, &[(keys, LabelOperator::In)], labels))
                .transpose()
                .map_err(|e| format!("topology spread: {e}"))?,
            min_domains,
            node_affinity_policy: policy(
                "nodeAffinityPolicy",
                c.node_affinity_policy.as_deref(),
                InclusionPolicy::Honor,
            )?,
            node_taints_policy: policy(
                "nodeTaintsPolicy",
                c.node_taints_policy.as_deref(),
                InclusionPolicy::Ignore,
            )?,
        });
    }
    Ok(out)
}

/// The host ports of the containers and sidecars (`util.GetHostPorts`).
fn host_ports(spec: &core::PodSpec) -> Result<Vec<HostPort>, String> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut out = Vec::new();
    for c in sidecars.chain(&spec.containers) {
        for p in c.ports.iter().flatten() {
            let Some(port) = p.host_port.filter(|&p| p > 0) else {
                continue;
            };
            if out.len() == MAX_HOST_PORTS {
                return Err(format!("more than {MAX_HOST_PORTS} host ports"));
            }
            out.push(HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_default(),
                port: u16::try_from(port)
                    .map_err(|_| format!("container {}: hostPort {port}", c.name))?,
            });
        }
    }
    Ok(out)
}

/// A pod's relations; `labels` are its own (for `matchLabelKeys`).
pub(super) fn relations(
    spec: &core::PodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<PodRelations, String> {
    let affinity = spec.affinity.as_ref();
    fn required(t: Option<&Vec<core::PodAffinityTerm>>) -> &[core::PodAffinityTerm] {
        t.map_or(&[][..], Vec::as_slice)
    }
    Ok(PodRelations {
        affinity: terms(
            "pod affinity",
            required(
                affinity
                    .and_then(|a| a.pod_affinity.as_ref())
                    .and_then(|a| {
                        a.required_during_scheduling_ignored_during_execution
                            .as_ref()
                    }),
            ),
            labels,
        )?,
        anti_affinity: terms(
            "pod anti-affinity",
            required(
                affinity
                    .and_then(|a| a.pod_anti_affinity.as_ref())
                    .and_then(|a| {
                        a.required_during_scheduling_ignored_during_execution
                            .as_ref()
                    }),
            ),
            labels,
        )?,
        spread: spread(
            spec.topology_spread_constraints
                .as_deref()
                .unwrap_or_default(),
            labels,
        )?,
        host_ports: host_ports(spec)?,
    })
}

/// What of a bound pod keeps others away: its required anti-affinity and
/// host ports (its affinity and spread were for its own placement).
pub(super) fn bound_relations(
    spec: &core::PodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<PodRelations, String> {
    let all = relations(spec, labels)?;
    Ok(PodRelations {
        anti_affinity: all.anti_affinity,
        host_ports: all.host_ports,
        ..PodRelations::default()
    })
}

/// The label keys the selectors of `spec`'s pod read.
pub(super) fn selector_keys(spec: &core::PodSpec, out: &mut BTreeSet<String>) {
    let mut add_selector = |s: Option<&meta::LabelSelector>| {
        let Some(s) = s else { return };
        out.extend(s.match_labels.iter().flatten().map(|(k, _)| k.clone()));
        out.extend(s.match_expressions.iter().flatten().map(|e| e.key.clone()));
    };
    let affinity = spec.affinity.as_ref();
    let terms = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .into_iter()
        .flat_map(|a| {
            a.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
        })
        .chain(
            affinity
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .into_iter()
                .flat_map(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                }),
        );
    let mut label_keys: Vec<String> = Vec::new();
    for t in terms {
        add_selector(t.label_selector.as_ref());
        label_keys.extend(t.match_label_keys.iter().flatten().cloned());
        label_keys.extend(t.mismatch_label_keys.iter().flatten().cloned());
    }
    for c in spec.topology_spread_constraints.iter().flatten() {
        add_selector(c.label_selector.as_ref());
        label_keys.extend(c.match_label_keys.iter().flatten().cloned());
    }
    out.extend(label_keys);
}
