//! Accord's fit agrees with kube-scheduler v1.37.2's own filter plugins
//! (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
//! NodeResourcesFit, VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
//! VolumeZone, PodTopologySpread, InterPodAffinity) on which nodes
//! admit each pending pod, over seeded random clusters
//! (benches/src/fitdiff.rs; `fit-figures` runs 20,000 of them).

use std::collections::BTreeMap;

use accord_benches::fitdiff::{compare, Harness, Tally};
use accord_testkit::control_plane::Binaries;

#[test]
fn accords_fit_admits_exactly_the_nodes_kube_schedulers_filters_admit() {
    let binary = Binaries::for_minor(37)
        .and_then(|b| b.path("fit-harness"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut harness = Harness::start(&binary).unwrap();
    let mut tally = Tally::default();
    let mut disagreements = Vec::new();
    for seed in 1..=300 {
        disagreements.extend(compare(&mut harness, seed, &mut tally).unwrap());
    }
    assert!(
        disagreements.is_empty(),
        "{} pods on which Accord and kube-scheduler admit different nodes; first: {:#?}",
        disagreements.len(),
        disagreements.first()
    );
    // The cases reach every filter modelled: each rejected some node.
    for plugin in [
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeZone",
        // Each way VolumeBinding rejects that the cases build.
        "VolumeBinding: node(s) didn't match PersistentVolume's node affinity",
        "VolumeBinding: node(s) didn't find available persistent volumes to bind",
        "VolumeBinding: pod has unbound immediate PersistentVolumeClaims",
        "VolumeRestrictions: node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod",
    ] {
        assert!(
            tally.rejections.get(plugin).copied().unwrap_or(0) > 0,
            "{plugin} rejected no node in 300 cases: {:?}",
            tally.rejections
        );
    }
}

#[test]
fn a_disagreement_is_found_when_the_fit_ignores_a_filter() {
    // The comparison can fail: a case where a pending pod's anti-affinity
    // rejects a node, judged against answers with that rejection dropped.
    let binary = Binaries::for_minor(37)
        .and_then(|b| b.path("fit-harness"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut harness = Harness::start(&binary).unwrap();
    let seed = (1..2000)
        .find(|&s| {
            let c = accord_benches::fitdiff::case(s);
            harness.ask(&c).unwrap().values().any(|nodes| {
                nodes.values().any(|w| {
                    w.starts_with("InterPodAffinity: node(s) didn't match pod anti-affinity")
                })
            })
        })
        .expect("a case with anti-affinity rejections");
    let c = accord_benches::fitdiff::case(seed);
    let theirs = harness.ask(&c).unwrap();
    let mut ours = accord_benches::fitdiff::accord(&c).unwrap();
    assert_eq!(
        admitted(&theirs),
        admitted(&ours),
        "seed {seed} agrees before the change"
    );
    // Accord without anti-affinity: admit what only anti-affinity rejected.
    for (pod, nodes) in &theirs {
        for (node, why) in nodes {
            if why.starts_with("InterPodAffinity") {
                ours.get_mut(pod)
                    .unwrap()
                    .insert(node.clone(), String::new());
            }
        }
    }
    assert_ne!(admitted(&theirs), admitted(&ours));
}

fn admitted(a: &accord_benches::fitdiff::Answers) -> BTreeMap<String, Vec<String>> {
    a.iter()
        .map(|(p, nodes)| {
            (
                p.clone(),
                nodes
                    .iter()
                    .filter(|(_, w)| w.is_empty())
                    .map(|(n, _)| n.clone())
                    .collect(),
            )
        })
        .collect()
}
