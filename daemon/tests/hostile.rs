//! Hostile input for everything accordd and accordctl read from outside:
//! agent reports (as the API takes them), accordd.toml, the fleet file,
//! demand files, CEL selectors, bmcs.toml, Redfish answers, Kubernetes
//! manifests, Nodes and ResourceSlices, lab scenarios, AccordNode objects
//! (the shared state with replicas), heartbeats, node ranges, MIG
//! instance lists, what reaches a terminal, machine identity proofs.
//! Each parser runs a small seeded count
//! of cases mutated from the recorded fixtures
//! (`accord_testkit::hostile`): no panic, no hang (the harness deadline, 10 s a case), no case
//! over 256 MiB of heap. A failure names the parser, seed and case;
//! `ACCORD_HOSTILE_SEED` and `ACCORD_HOSTILE_SCALE` change the seed and
//! scale the counts; `fuzz-figures` (benches) runs large counts.

#[path = "hostile/targets.rs"]
mod targets;

use accord_testkit::hostile::{
    assert_corpus_accepted, assert_survives, counting, CountingAlloc, Limits, Target,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The seed CI runs (any other replays with `ACCORD_HOSTILE_SEED`).
const SEED: u64 = 16;

fn check(target: Target, cases: u64) {
    assert!(counting(), "CountingAlloc is installed");
    assert_corpus_accepted(&target);
    assert_survives(&target, SEED, cases, &Limits::default());
}

#[test]
fn agent_reports() {
    check(targets::report(), 150);
}

#[test]
fn accordd_toml() {
    check(targets::daemon_config(), 150);
}

#[test]
fn fleet_files() {
    check(targets::fleet(), 100);
}

#[test]
fn demand_files() {
    check(targets::demand(), 150);
}

#[test]
fn cel_selectors() {
    check(targets::cel(), 200);
}

#[test]
fn bmc_inventory() {
    check(targets::inventory(), 150);
}

#[test]
fn redfish_answers() {
    check(targets::redfish(), 300);
}

#[test]
fn kubernetes_manifests() {
    check(targets::manifests(), 100);
}

#[test]
fn nodes_and_resource_slices() {
    check(targets::cluster(), 200);
}

#[test]
fn lab_scenarios() {
    check(targets::scenario(), 100);
}

#[test]
fn accord_node_objects() {
    check(targets::accord_node(), 150);
}

#[test]
fn heartbeats() {
    check(targets::heartbeat(), 150);
}

#[test]
fn node_ranges() {
    check(targets::node_ranges(), 200);
}

#[test]
fn mig_instance_lists() {
    check(targets::mig_instances(), 150);
}

#[test]
fn terminal_output() {
    check(targets::terminal_output(), 200);
}

#[test]
fn identity_proofs() {
    check(targets::identity_proofs(), 100);
}
