//! Hostile input for everything the agent reads: hwloc XML, NVML
//! snapshots, `nvidia-smi -q -x` XML and agent.toml. Each parser runs a
//! small seeded count of cases mutated from the recorded fixtures
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
fn hwloc_xml() {
    // libhwloc is slow on the larger exports: fewer cases.
    check(targets::hwloc_xml(), 40);
}

#[test]
fn nvml_snapshots() {
    check(targets::nvml_snapshot(), 200);
}

#[test]
fn nvidia_smi_xml() {
    check(targets::nvidia_smi_xml(), 200);
}

#[test]
fn agent_toml() {
    check(targets::agent_config(), 150);
}

/// Found here: an hwloc XML whose object's cpuset is not within its
/// complete cpuset is loaded by libhwloc, and hwlocality's debug-build
/// `hwloc_topology_check` then aborted the whole process (a C assert).
/// Such a capture must be an error or a model, never an abort, in every
/// build (the workspace turns hwlocality's debug assertions off).
#[test]
fn an_inconsistent_cpuset_is_no_abort() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topology.xml");
    let fixture = std::fs::read_to_string(
        targets::repo().join("tests/fixtures/hwloc/16amd64-4distances.xml"),
    )
    .unwrap();
    let bad = fixture.replacen(
        r#"<object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003""#,
        r#"<object type="Package" os_index="0" cpuset="0x000000ff" complete_cpuset="0x00000003""#,
        1,
    );
    assert_ne!(bad, fixture);
    std::fs::write(&path, bad).unwrap();
    // Either answer is fine; reaching the next line is the test.
    let r = accord_agent::hwloc::discover(accord_agent::hwloc::HwlocInput::XmlFile(&path));
    println!("{:?}", r.map(|hw| hw.gpus.len()).map_err(|e| e.to_string()));
}

/// Found here: libhwloc 2.9 crashes (SIGSEGV in `hwloc_topology_load`) on
/// an object with a cpuset and no complete cpuset, or a nodeset and no
/// complete nodeset. Refused before libhwloc sees it, naming the object.
#[test]
fn a_set_without_its_complete_set_is_refused_before_libhwloc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topology.xml");
    let fixture = std::fs::read_to_string(
        targets::repo().join("tests/fixtures/hwloc/32em64t-2n8c2t-pci-wholeio.xml"),
    )
    .unwrap();
    for (from, to, what) in [
        (
            r#"<object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002""#,
            r#"<object type="PU" os_index="1" cpuset="0x00000002""#,
            "<object type=\"PU\"> has a cpuset but no complete_cpuset",
        ),
        (
            r#"complete_nodeset="0x00000003" allowed_nodeset="0x00000003""#,
            r#"allowed_nodeset="0x00000003""#,
            "<object type=\"Machine\"> has a nodeset but no complete_nodeset",
        ),
    ] {
        let bad = fixture.replacen(from, to, 1);
        assert_ne!(bad, fixture, "{from}");
        std::fs::write(&path, bad).unwrap();
        let e = accord_agent::hwloc::discover(accord_agent::hwloc::HwlocInput::XmlFile(&path))
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
    }
}

/// Found here: a Bridge with no `bridge_type` (libhwloc takes it as a
/// host bridge on both sides) made hwlocality panic (`unreachable!`) when
/// discovery asked for its downstream bus. Refused, naming the object.
#[test]
fn a_bridge_without_a_pci_downstream_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topology.xml");
    let fixture = std::fs::read_to_string(
        targets::repo().join("tests/fixtures/hwloc/32em64t-2n8c2t-pci-wholeio.xml"),
    )
    .unwrap();
    for (to, shown) in [("", "\"(none)\""), (r#"bridge_type="0-0""#, "\"0-0\"")] {
        let bad = fixture.replacen(r#"bridge_type="0-1""#, to, 1);
        assert_ne!(bad, fixture);
        std::fs::write(&path, bad).unwrap();
        let e = accord_agent::hwloc::discover(accord_agent::hwloc::HwlocInput::XmlFile(&path))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "<object type=\"Bridge\"> with bridge_type {shown}"
            )),
            "{e}"
        );
    }
}
