//! The pod-to-pod filters in a plan: which pods stand on which node (those
//! bound, those this plan placed, and those of the gang being tried, as
//! kube-scheduler's cache holds assumed pods), and the InterPodAffinity,
//! PodTopologySpread and NodePorts judgements over them (the rules are in
//! `crate::fit::relations`). Spread domains are the nodes that will be
//! Nodes when the pod binds: registered ones (a dark machine whose Node
//! Accord deleted is not one; with `policy.dark_nodes = "keep"` it stays
//! a NotReady Node, and is), and those up or powered on by the plan.
//!
//! Off unless some pod of the round has relations: a round without them
//! pays nothing.

use std::cell::RefCell;

use super::*;
use crate::demand::{InclusionPolicy, PodRelations};
use crate::fit::relations::{
    maybe_matches, namespace_labels, ports_fit, selector_matches, spread_allows, term_matches,
    PodFacts, AFFINITY_NOT_MATCHED, ANTI_AFFINITY_NOT_MATCHED, EXISTING_ANTI_AFFINITY,
    SPREAD_LABEL_MISSING,
};
use crate::fit::{node_affinity_fit, taints_fit};

/// Per constraint of one pod: matching pods per eligible domain, and the
/// least of them.
type SpreadCounts = Vec<BTreeMap<String, u64>>;

/// (the pod set's spec, [`Relations::epoch`], the trial's pods placed).
type SpreadKey = (*const PodSpec, u64, usize);

pub(super) struct Relations {
    /// Per node: the pods on it.
    on_node: Vec<Vec<Rc<PodFacts>>>,
    /// Nodes with a pod that has required anti-affinity.
    with_anti: BTreeSet<usize>,
    /// Per topology key some term or constraint names: value → nodes.
    domains: BTreeMap<String, BTreeMap<String, Vec<usize>>>,
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Per node: Kubernetes has a Node for it (its scheduler view was
    /// seen), and Accord has not deleted it (`Node::node_deleted`). A
    /// machine never registered, or dark with its Node deleted, is no
    /// topology domain to the scheduler until it is powered on; one that
    /// went dark by itself stays a NotReady Node, and counts. A plan from
    /// files alone (no node ever seen) takes every node for a registered
    /// one.
    registered: Vec<bool>,
    /// Bumped on every commit and every new trial: spread counts cached
    /// under it (with the trial's pod count) are current.
    epoch: u64,
    spread_cache: RefCell<BTreeMap<SpreadKey, Rc<SpreadCounts>>>,
}

fn names_keys(r: &PodRelations) -> impl Iterator<Item = &str> {
    r.affinity
        .iter()
        .chain(&r.anti_affinity)
        .map(|t| t.topology_key.as_str())
        .chain(r.spread.iter().map(|c| c.topology_key.as_str()))
}

impl Relations {
    /// `None` when no pending pod has relations and no bound pod has
    /// anti-affinity: nothing to filter.
    pub(super) fn for_round(nodes: &[Cow<'_, Node>], demand: &Demand) -> Option<Relations> {
        let pending = demand
            .workloads
            .iter()
            .flat_map(|w| &w.pod_sets)
            .map(|s| &s.pod.relations);
        let bound = demand.bound.iter().map(|b| &b.relations);
        let wanted = pending.clone().any(|r| !r.is_empty())
            || bound.clone().any(|r| !r.anti_affinity.is_empty());
        if !wanted {
            return None;
        }
        let keys: BTreeSet<&str> = pending.chain(bound).flat_map(names_keys).collect();
        let mut domains: BTreeMap<String, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
        for key in keys {
            let by_value = domains.entry(key.to_owned()).or_default();
            for (i, n) in nodes.iter().enumerate() {
                if let Some(v) = n.labels.get(key) {
                    by_value.entry(v.clone()).or_default().push(i);
                }
            }
        }
        let seen = nodes.iter().any(|n| n.viewed);
        Some(Relations {
            registered: nodes
                .iter()
                .map(|n| (n.viewed && !n.node_deleted) || !seen)
                .collect(),
            on_node: vec![Vec::new(); nodes.len()],
            with_anti: BTreeSet::new(),
            domains,
            namespace_labels: demand.namespace_labels.clone(),
            epoch: 0,
            spread_cache: RefCell::new(BTreeMap::new()),
        })
    }

    /// A pod now stands on node `i` (bound, or committed by the plan).
    pub(super) fn add(&mut self, i: usize, pod: Rc<PodFacts>) {
        if !pod.anti_affinity.is_empty() {
            self.with_anti.insert(i);
        }
        self.on_node[i].push(pod);
        self.epoch += 1;
        self.spread_cache.borrow_mut().clear();
    }

    /// A new trial begins: what was cached for another is stale.
    pub(super) fn new_trial(&mut self) {
        self.epoch += 1;
        self.spread_cache.borrow_mut().clear();
    }

    fn nodes_in(&self, key: &str, value: &str) -> &[usize] {
        self.domains
            .get(key)
            .and_then(|d| d.get(value))
            .map_or(&[], Vec::as_slice)
    }
}

/// A bound pod as the filters see it.
pub(super) fn bound_facts(pod: &crate::demand::BoundPod) -> PodFacts {
    PodFacts {
        namespace: pod.namespace.clone(),
        labels: pod.labels.clone(),
        anti_affinity: pod.relations.anti_affinity.clone(),
        host_ports: pod.relations.host_ports.clone(),
    }
}

impl Planner<'_> {
    /// The pods on node `m` now: on it, and this trial's.
    fn pods_on<'a>(
        rel: &'a Relations,
        t: &'a Trial,
        m: usize,
    ) -> impl Iterator<Item = &'a PodFacts> + Clone {
        rel.on_node[m].iter().map(|p| &**p).chain(
            t.placed
                .iter()
                .filter(move |(n, _)| *n == m)
                .map(|(_, p)| &**p),
        )
    }

    /// InterPodAffinity, PodTopologySpread and NodePorts for `pod` on node
    /// `i`, with the trial's pods placed.
    /// NodePorts (before NodeResourcesFit in the default profile).
    pub(super) fn host_ports_fit(
        &self,
        pod: &PodItem<'_>,
        i: usize,
        t: &Trial,
    ) -> Result<(), Failure> {
        let (Some(rel), Some(_)) = (&self.relations, &pod.facts) else {
            return Ok(());
        };
        ports_fit(&pod.spec.relations.host_ports, Self::pods_on(rel, t, i))
    }

    pub(super) fn relations_fit(
        &self,
        pod: &PodItem<'_>,
        node: &Node,
        t: &Trial,
    ) -> Result<(), Failure> {
        let (Some(rel), Some(me)) = (&self.relations, &pod.facts) else {
            return Ok(());
        };
        let r = &pod.spec.relations;
        let ns_labels = |ns: &str| namespace_labels(&rel.namespace_labels, ns);
        // PodTopologySpread runs before InterPodAffinity in the default
        // profile: its verdict is the one the scheduler gives.
        if !r.spread.is_empty() {
            let counts = self.spread_counts(rel, t, pod, me);
            for (c, counts) in r.spread.iter().zip(counts.iter()) {
                let Some(v) = node.labels.get(&c.topology_key) else {
                    return Err(Failure::new(
                        SPREAD_LABEL_MISSING,
                        format!("no {}", c.topology_key),
                    ));
                };
                let counts: BTreeMap<&str, u64> =
                    counts.iter().map(|(k, n)| (k.as_str(), *n)).collect();
                spread_allows(
                    c,
                    &counts,
                    v,
                    maybe_matches(c.selector.as_ref(), &me.labels),
                )?;
            }
        }
        if !r.affinity.is_empty() {
            self.affinity_fit(rel, t, me, r, node)?;
        }
        for term in &r.anti_affinity {
            let Some(v) = node.labels.get(&term.topology_key) else {
                continue;
            };
            let hit = rel.nodes_in(&term.topology_key, v).iter().any(|&m| {
                Self::pods_on(rel, t, m)
                    .any(|p| term_matches(term, &me.namespace, p, &ns_labels(&p.namespace)))
            });
            if hit {
                return Err(Failure::new(
                    ANTI_AFFINITY_NOT_MATCHED,
                    format!("a pod it avoids is in {}={v}", term.topology_key),
                ));
            }
        }
        let mine = ns_labels(&me.namespace);
        let trial_anti = t
            .placed
            .iter()
            .filter(|(_, p)| !p.anti_affinity.is_empty())
            .map(|(m, _)| *m);
        let mut seen = BTreeSet::new();
        for m in rel.with_anti.iter().copied().chain(trial_anti) {
            if !seen.insert(m) {
                continue;
            }
            for p in Self::pods_on(rel, t, m) {
                for term in &p.anti_affinity {
                    let (Some(theirs), Some(here)) = (
                        self.nodes[m].labels.get(&term.topology_key),
                        node.labels.get(&term.topology_key),
                    ) else {
                        continue;
                    };
                    if theirs == here && term_matches(term, &p.namespace, me, &mine) {
                        return Err(Failure::new(
                            EXISTING_ANTI_AFFINITY,
                            format!(
                                "pod {}/… on {} avoids it in {}={here}",
                                p.namespace, self.nodes[m].name, term.topology_key
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Required pod affinity (`nodeTopologyMatchesAffinity`): the node has
    /// every term's key, and in each term's domain stands a pod matching
    /// all terms; or no such pod stands anywhere and the pod matches its
    /// own terms (the first of a series).
    fn affinity_fit(
        &self,
        rel: &Relations,
        t: &Trial,
        me: &PodFacts,
        r: &PodRelations,
        node: &Node,
    ) -> Result<(), Failure> {
        let ns_labels = |ns: &str| namespace_labels(&rel.namespace_labels, ns);
        let matching = |p: &PodFacts| {
            crate::fit::relations::matches_all_terms(
                &r.affinity,
                &me.namespace,
                p,
                &ns_labels(&p.namespace),
            )
        };
        let mut pods_exist = true;
        for term in &r.affinity {
            let Some(v) = node.labels.get(&term.topology_key) else {
                return Err(Failure::new(
                    AFFINITY_NOT_MATCHED,
                    format!("no {}", term.topology_key),
                ));
            };
            let here = rel
                .nodes_in(&term.topology_key, v)
                .iter()
                .any(|&m| Self::pods_on(rel, t, m).any(matching));
            pods_exist &= here;
        }
        if pods_exist {
            return Ok(());
        }
        // Counted only on nodes with a term's key (`update`).
        let anywhere = (0..self.nodes.len()).any(|m| {
            r.affinity
                .iter()
                .any(|term| self.nodes[m].labels.contains_key(&term.topology_key))
                && Self::pods_on(rel, t, m).any(matching)
        });
        if !anywhere && matching(me) {
            return Ok(());
        }
        Err(Failure::new(
            AFFINITY_NOT_MATCHED,
            "no pod it needs in the node's domain".to_owned(),
        ))
    }

    /// PodTopologySpread's PreFilter for `pod`: per constraint, matching
    /// pods of its namespace per domain over the nodes that have every
    /// constraint's key and pass the constraint's inclusion policies.
    fn spread_counts(
        &self,
        rel: &Relations,
        t: &Trial,
        pod: &PodItem<'_>,
        me: &PodFacts,
    ) -> Rc<SpreadCounts> {
        let key = (pod.spec as *const PodSpec, rel.epoch, t.placed.len());
        if let Some(c) = rel.spread_cache.borrow().get(&key) {
            return c.clone();
        }
        let spread = &pod.spec.relations.spread;
        let mut out: SpreadCounts = vec![BTreeMap::new(); spread.len()];
        for (m, node) in self.nodes.iter().enumerate() {
            // A Node when the pod binds: registered, up, or powered on by
            // this plan or trial.
            if !(rel.registered[m] || self.up[m] || t.power_ons.contains(&m)) {
                continue;
            }
            if !spread
                .iter()
                .all(|c| node.labels.contains_key(&c.topology_key))
            {
                continue;
            }
            for (c, counts) in spread.iter().zip(out.iter_mut()) {
                if c.node_affinity_policy == InclusionPolicy::Honor
                    && node_affinity_fit(pod.spec, node).is_err()
                {
                    continue;
                }
                if c.node_taints_policy == InclusionPolicy::Honor
                    && taints_fit(pod.spec, node).is_err()
                {
                    continue;
                }
                // `countPodsMatchSelector`: an empty selector counts none.
                let n = match c.selector.as_ref().filter(|s| !s.is_empty()) {
                    Some(s) => Self::pods_on(rel, t, m)
                        .filter(|p| p.namespace == me.namespace && selector_matches(s, &p.labels))
                        .count() as u64,
                    None => 0,
                };
                *counts
                    .entry(node.labels[&c.topology_key].clone())
                    .or_insert(0) += n;
            }
        }
        let out = Rc::new(out);
        rel.spread_cache.borrow_mut().insert(key, out.clone());
        out
    }
}
