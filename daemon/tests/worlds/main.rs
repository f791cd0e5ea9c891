//! accordd in whole worlds, one binary: the lab (its control plane,
//! kubelets, BMCs and agents) and the upstream control plane. Each test
//! holds a slot of `support::lab` for its whole world: three worlds share
//! CI's two cores (`scripts/test` runs this binary with three test
//! threads), but for those whose timing must hold, which have them alone.

mod support;

/// Every world, under one name: `scripts/test` runs the rest of the
/// workspace with `--skip worlds::` and then this binary alone with three
/// test threads (one build: the same packages selected both times). In it,
/// first (libtest takes tests in name order) the worlds that run alone,
/// then the longest shared ones.
#[path = "."]
mod worlds {
    mod alone;
    mod big;
    mod lab;
    mod lab_bios;
    mod lab_capacity;
    mod lab_chaos;
    mod lab_health;
    mod lab_mig;
    mod lab_queues;
    mod lab_reclaim;
    mod lab_relations;
    mod lab_truth;
    mod lab_upstream;
    mod real_control_plane;
}
