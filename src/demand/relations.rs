//! What ties a pod to other pods, as kube-scheduler reads it: its labels,
//! required inter-pod affinity and anti-affinity, `DoNotSchedule` topology
//! spread constraints and host ports (the InterPodAffinity,
//! PodTopologySpread and NodePorts plugins of v1.37.2). The matching rules
//! are in `crate::fit::relations`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `metav1.LabelSelectorOperator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: LabelOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

/// `metav1.LabelSelector`: `match_labels` and `match_expressions` ANDed;
/// an empty selector matches every pod. Where Kubernetes has a null
/// selector (matching nothing) the model has `None`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Selects by nothing (matches every pod).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// The label keys it reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.match_labels
            .keys()
            .map(String::as_str)
            .chain(self.match_expressions.iter().map(|r| r.key.as_str()))
    }
}

/// One required term of pod affinity or anti-affinity
/// (`v1.PodAffinityTerm`), its `matchLabelKeys` and `mismatchLabelKeys`
/// already merged into the selector (the API server does so when the pod
/// is created: pkg/registry/core/pod/strategy.go,
/// `applyMatchLabelKeysAndMismatchLabelKeys`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodAffinityTerm {
    /// `None`: the term matches no pod.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
    /// Namespaces the term looks in. With neither these nor a namespace
    /// selector: the pod's own namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces by their labels (`{}`: all namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
}

/// `v1.NodeInclusionPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum InclusionPolicy {
    Honor,
    Ignore,
}

fn honor() -> InclusionPolicy {
    InclusionPolicy::Honor
}

fn ignore() -> InclusionPolicy {
    InclusionPolicy::Ignore
}

fn one() -> u32 {
    1
}

/// A `whenUnsatisfiable: DoNotSchedule` topology spread constraint (those
/// with `ScheduleAnyway` only score, and the scheduler's default
/// constraints are all `ScheduleAnyway`: neither filters), its
/// `matchLabelKeys` merged into the selector as the API server does
/// (`applyMatchLabelKeys`, same file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpreadConstraint {
    pub max_skew: u32,
    pub topology_key: String,
    /// `None`: counts no pod.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
    /// Unset: 1.
    #[serde(default = "one")]
    pub min_domains: u32,
    /// Unset: Honor.
    #[serde(default = "honor")]
    pub node_affinity_policy: InclusionPolicy,
    /// Unset: Ignore.
    #[serde(default = "ignore")]
    pub node_taints_policy: InclusionPolicy,
}

/// A container port with a `hostPort` (of a container, or of a sidecar:
/// kube-scheduler's `util.GetHostPorts`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPort {
    /// `hostIP`; empty: every address (0.0.0.0).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    /// `TCP`, `UDP`, `SCTP`; empty: TCP.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    pub port: u16,
}

/// A pod's relations to other pods, as one value (a pod spec's or a bound
/// pod's).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodRelations {
    /// Required pod affinity: every term must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affinity: Vec<PodAffinityTerm>,
    /// Required pod anti-affinity: no term may match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anti_affinity: Vec<PodAffinityTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadConstraint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
}

impl PodRelations {
    pub fn is_empty(&self) -> bool {
        self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.spread.is_empty()
            && self.host_ports.is_empty()
    }

    /// Every label key its selectors read (a pod's labels matter to others
    /// only through such keys).
    pub fn selector_keys(&self) -> impl Iterator<Item = &str> {
        self.affinity
            .iter()
            .chain(&self.anti_affinity)
            .filter_map(|t| t.selector.as_ref())
            .chain(self.spread.iter().filter_map(|c| c.selector.as_ref()))
            .flat_map(LabelSelector::keys)
    }
}
