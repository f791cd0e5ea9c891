//! One pod against every node: which nodes Accord's model of kube-scheduler's
//! filters admits it to, and why each other one is rejected (the
//! differential harness compares this with the scheduler's own plugins).

use super::*;

/// Per node (by name), `None` where the first pod of workload `key` fits,
/// else the first failing filter; no trial placed, nothing committed. The
/// workload's pods are built as the planner builds them (a bad pod set is
/// the error).
pub fn filter_nodes(
    fleet: &Fleet,
    demand: &Demand,
    policy: &Policy,
    now: u64,
    key: &str,
) -> Result<Vec<(String, Option<Failure>)>, String> {
    let w = demand
        .workloads
        .iter()
        .find(|w| w.key() == key)
        .ok_or_else(|| format!("no workload {key}"))?;
    let mut p = Planner::new(fleet, demand, policy, now);
    let pods = p.pods(w)?;
    let pod = pods.first().ok_or_else(|| format!("{key} has no pods"))?;
    if let Some(rel) = &mut p.relations {
        rel.new_trial();
    }
    let trial = Trial::default();
    let none = BTreeMap::new();
    Ok((0..p.nodes.len())
        .map(|i| {
            let fit = p.fit_one(pod, i, &trial, &none, &BTreeMap::new());
            (p.nodes[i].name.clone(), fit.err())
        })
        .collect())
}
