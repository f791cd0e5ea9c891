//! The pod-to-pod filters of kube-scheduler v1.37.2's default profile,
//! over a node and the pods on it or in its topology domain:
//! InterPodAffinity (pkg/scheduler/framework/plugins/interpodaffinity/
//! filtering.go), PodTopologySpread (podtopologyspread/filtering.go,
//! common.go) and NodePorts (nodeports/node_ports.go). Pure matching
//! rules; which pods stand where is the planner's (`crate::plan`).

use std::collections::BTreeMap;

use crate::demand::{
    HostPort, LabelOperator, LabelSelector, PodAffinityTerm, PodSpec, SpreadConstraint,
};
use crate::fit::Failure;

/// The plugins' own names and messages, so `explain` reads as
/// `kubectl describe pod` does.
pub const AFFINITY_NOT_MATCHED: &str = "InterPodAffinity: node(s) didn't match pod affinity rules";
pub const ANTI_AFFINITY_NOT_MATCHED: &str =
    "InterPodAffinity: node(s) didn't match pod anti-affinity rules";
pub const EXISTING_ANTI_AFFINITY: &str =
    "InterPodAffinity: node(s) didn't satisfy existing pods anti-affinity rules";
pub const SPREAD_NOT_MATCHED: &str =
    "PodTopologySpread: node(s) didn't match pod topology spread constraints";
pub const SPREAD_LABEL_MISSING: &str =
    "PodTopologySpread: node(s) didn't match pod topology spread constraints (missing required label)";
pub const PORTS_TAKEN: &str =
    "NodePorts: node(s) didn't have free ports for the requested pod ports";

/// The label the API server gives every namespace (its name).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A pod as the filters see it: where it lives, its labels, and what it
/// asks of others.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFacts {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub anti_affinity: Vec<PodAffinityTerm>,
    pub host_ports: Vec<HostPort>,
}

impl PodFacts {
    /// A pending pod of `spec` in `namespace`.
    pub fn pending(namespace: &str, spec: &PodSpec) -> PodFacts {
        PodFacts {
            namespace: namespace.to_owned(),
            labels: spec.labels.clone(),
            anti_affinity: spec.relations.anti_affinity.clone(),
            host_ports: spec.relations.host_ports.clone(),
        }
    }
}

/// `labels.Selector.Matches` of `metav1.LabelSelectorAsSelector`: every
/// `matchLabels` pair and every expression holds (an empty selector
/// matches everything).
pub fn selector_matches(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().all(|r| {
            let v = labels.get(&r.key);
            match r.operator {
                LabelOperator::In => v.is_some_and(|v| r.values.contains(v)),
                LabelOperator::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                LabelOperator::Exists => v.is_some(),
                LabelOperator::DoesNotExist => v.is_none(),
            }
        })
}

/// A nullable selector: `None` matches nothing.
pub fn maybe_matches(s: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    s.is_some_and(|s| selector_matches(s, labels))
}

/// The labels of namespace `ns` (`kubernetes.io/metadata.name` where the
/// demand does not list it).
pub fn namespace_labels<'a>(
    known: &'a BTreeMap<String, BTreeMap<String, String>>,
    ns: &str,
) -> std::borrow::Cow<'a, BTreeMap<String, String>> {
    match known.get(ns) {
        Some(l) => std::borrow::Cow::Borrowed(l),
        None => std::borrow::Cow::Owned(BTreeMap::from([(
            NAMESPACE_NAME_LABEL.to_owned(),
            ns.to_owned(),
        )])),
    }
}

/// `AffinityTerm.Matches`: does the term of a pod in namespace `owner_ns`
/// select `pod` (whose namespace has labels `pod_ns_labels`)? With no
/// namespaces and no namespace selector the term looks in its own pod's
/// namespace (framework `newAffinityTerm`).
pub fn term_matches(
    term: &PodAffinityTerm,
    owner_ns: &str,
    pod: &PodFacts,
    pod_ns_labels: &BTreeMap<String, String>,
) -> bool {
    let in_namespace = if term.namespaces.is_empty() && term.namespace_selector.is_none() {
        pod.namespace == owner_ns
    } else {
        term.namespaces.contains(&pod.namespace)
            || maybe_matches(term.namespace_selector.as_ref(), pod_ns_labels)
    };
    in_namespace && maybe_matches(term.selector.as_ref(), &pod.labels)
}

/// `podMatchesAllAffinityTerms`: the terms are not empty and all select
/// `pod`.
pub fn matches_all_terms(
    terms: &[PodAffinityTerm],
    owner_ns: &str,
    pod: &PodFacts,
    pod_ns_labels: &BTreeMap<String, String>,
) -> bool {
    !terms.is_empty()
        && terms
            .iter()
            .all(|t| term_matches(t, owner_ns, pod, pod_ns_labels))
}

fn sanitized(p: &HostPort) -> (&str, &str, u16) {
    let ip = if p.ip.is_empty() { "0.0.0.0" } else { &p.ip };
    let protocol = if p.protocol.is_empty() {
        "TCP"
    } else {
        &p.protocol
    };
    (ip, protocol, p.port)
}

/// `HostPortInfo.CheckConflict`: `want` clashes with a port in use on the
/// node (same protocol and port, and the same address or either on
/// 0.0.0.0). Port 0 asks for none.
pub fn port_conflicts<'a>(want: &HostPort, in_use: impl IntoIterator<Item = &'a HostPort>) -> bool {
    if want.port == 0 {
        return false;
    }
    let (ip, protocol, port) = sanitized(want);
    in_use.into_iter().any(|u| {
        let (uip, uprotocol, uport) = sanitized(u);
        uport == port && uprotocol == protocol && (ip == "0.0.0.0" || uip == "0.0.0.0" || uip == ip)
    })
}

/// NodePorts' Filter for one node: any of the pod's host ports in use there.
pub fn ports_fit<'a>(
    want: &[HostPort],
    on_node: impl Iterator<Item = &'a PodFacts> + Clone,
) -> Result<(), Failure> {
    for w in want {
        if port_conflicts(w, on_node.clone().flat_map(|p| &p.host_ports)) {
            return Err(Failure::new(
                PORTS_TAKEN,
                format!(
                    "{}/{} {} in use",
                    if w.protocol.is_empty() {
                        "TCP"
                    } else {
                        &w.protocol
                    },
                    w.port,
                    if w.ip.is_empty() { "0.0.0.0" } else { &w.ip }
                ),
            ));
        }
    }
    Ok(())
}

/// PodTopologySpread's judgement for one constraint, given the matching
/// pods per eligible domain: `matchNum + selfMatch - globalMin <= maxSkew`,
/// the minimum taken as 0 while fewer than `minDomains` domains are
/// eligible (`preFilterState.minMatchNum`).
pub fn spread_allows(
    c: &SpreadConstraint,
    counts: &BTreeMap<&str, u64>,
    node_value: &str,
    self_match: bool,
) -> Result<(), Failure> {
    let min = if (counts.len() as u64) < u64::from(c.min_domains) {
        0
    } else {
        counts.values().copied().min().unwrap_or(0)
    };
    let here = counts.get(node_value).copied().unwrap_or(0);
    let skew = (here + u64::from(self_match)).saturating_sub(min);
    if skew > u64::from(c.max_skew) {
        return Err(Failure::new(
            SPREAD_NOT_MATCHED,
            format!(
                "{}={node_value}: {here} matching pods, the least-used domain {min}, maxSkew {}",
                c.topology_key, c.max_skew
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::LabelRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pod(ns: &str, l: &[(&str, &str)]) -> PodFacts {
        PodFacts {
            namespace: ns.into(),
            labels: labels(l),
            ..PodFacts::default()
        }
    }

    fn app_term(app: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            selector: Some(LabelSelector {
                match_labels: labels(&[("app", app)]),
                match_expressions: Vec::new(),
            }),
            namespaces: Vec::new(),
            namespace_selector: None,
            topology_key: "kubernetes.io/hostname".into(),
        }
    }

    #[test]
    fn selectors_follow_label_selector_semantics() {
        let l = labels(&[("app", "web"), ("tier", "1")]);
        assert!(selector_matches(&LabelSelector::default(), &l));
        assert!(!maybe_matches(None, &l));
        let expr = |operator, values: &[&str]| LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelRequirement {
                key: "tier".into(),
                operator,
                values: values.iter().map(|v| (*v).to_owned()).collect(),
            }],
        };
        assert!(selector_matches(&expr(LabelOperator::In, &["1", "2"]), &l));
        assert!(!selector_matches(&expr(LabelOperator::NotIn, &["1"]), &l));
        assert!(selector_matches(
            &expr(LabelOperator::NotIn, &["1"]),
            &labels(&[])
        ));
        assert!(selector_matches(&expr(LabelOperator::Exists, &[]), &l));
        assert!(!selector_matches(
            &expr(LabelOperator::DoesNotExist, &[]),
            &l
        ));
    }

    #[test]
    fn a_term_looks_in_its_own_namespace_unless_told_otherwise() {
        let t = app_term("web");
        let ns = |n: &str| labels(&[(NAMESPACE_NAME_LABEL, n)]);
        assert!(term_matches(
            &t,
            "a",
            &pod("a", &[("app", "web")]),
            &ns("a")
        ));
        assert!(!term_matches(
            &t,
            "a",
            &pod("b", &[("app", "web")]),
            &ns("b")
        ));
        let listed = PodAffinityTerm {
            namespaces: vec!["b".into()],
            ..t.clone()
        };
        assert!(term_matches(
            &listed,
            "a",
            &pod("b", &[("app", "web")]),
            &ns("b")
        ));
        assert!(!term_matches(
            &listed,
            "a",
            &pod("a", &[("app", "web")]),
            &ns("a")
        ));
        let all = PodAffinityTerm {
            namespace_selector: Some(LabelSelector::default()),
            ..t
        };
        assert!(term_matches(
            &all,
            "a",
            &pod("z", &[("app", "web")]),
            &ns("z")
        ));
        assert!(!term_matches(
            &all,
            "a",
            &pod("z", &[("app", "db")]),
            &ns("z")
        ));
    }

    #[test]
    fn host_ports_clash_on_the_same_protocol_and_address_or_any_address() {
        let p = |ip: &str, protocol: &str, port| HostPort {
            ip: ip.into(),
            protocol: protocol.into(),
            port,
        };
        let used = [p("10.0.0.1", "", 80)];
        assert!(port_conflicts(&p("", "TCP", 80), &used));
        assert!(port_conflicts(&p("10.0.0.1", "TCP", 80), &used));
        assert!(!port_conflicts(&p("10.0.0.2", "TCP", 80), &used));
        assert!(!port_conflicts(&p("", "UDP", 80), &used));
        assert!(!port_conflicts(&p("", "TCP", 0), &used));
        assert!(port_conflicts(&p("10.0.0.2", "TCP", 80), &[p("", "", 80)]));
    }

    #[test]
    fn spread_counts_skew_against_the_least_used_domain() {
        let c = SpreadConstraint {
            max_skew: 1,
            topology_key: "rack".into(),
            selector: Some(LabelSelector::default()),
            min_domains: 1,
            node_affinity_policy: crate::demand::InclusionPolicy::Honor,
            node_taints_policy: crate::demand::InclusionPolicy::Ignore,
        };
        let counts = BTreeMap::from([("r1", 1), ("r2", 0)]);
        assert!(spread_allows(&c, &counts, "r2", true).is_ok());
        assert!(spread_allows(&c, &counts, "r1", true).is_err());
        assert!(spread_allows(&c, &counts, "r1", false).is_ok());
        // Fewer domains than minDomains: the minimum is 0.
        let few = SpreadConstraint {
            min_domains: 3,
            ..c.clone()
        };
        let even = BTreeMap::from([("r1", 1), ("r2", 1)]);
        assert!(spread_allows(&c, &even, "r1", true).is_ok());
        assert!(spread_allows(&few, &even, "r1", true).is_err());
    }
}
