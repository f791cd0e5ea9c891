//! Claims built to blow up the device search: `matchAttribute`
//! combinations multiply with each constraint, so a claim repeating one
//! constraint 10,000 times (found by the hostile-input tests: a demand
//! file that never finished planning) or carrying many distinct ones that
//! never fit must still be planned in bounded time. Repeats are folded,
//! the search stops after `MAX_CONSTRAINT_COMBINATIONS`, and a demand file
//! past Kubernetes' own bounds on a claim is refused naming them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use accord::demand::{Constraint, Demand, Limits};
use accord::fleet::Fleet;
use accord::hardware::NodeHardware;
use accord::plan::plan;

fn scenario() -> (Fleet, Demand) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/gpu-nic-pcie-root");
    let text = std::fs::read_to_string(dir.join("fleet.toml")).unwrap();
    let mut loader = |rel: &str| -> Result<NodeHardware, String> {
        let t = std::fs::read_to_string(dir.join(rel)).map_err(|e| e.to_string())?;
        serde_json::from_str(&t).map_err(|e| e.to_string())
    };
    let fleet = Fleet::from_toml(&text, "fleet.toml", &mut loader).unwrap();
    let demand = Demand::from_json(
        &std::fs::read_to_string(dir.join("demand.json")).unwrap(),
        "d",
    )
    .unwrap();
    (fleet, demand)
}

fn constraints(d: &mut Demand) -> &mut Vec<Constraint> {
    &mut d.workloads[0].pod_sets[0].pod.claims[0].constraints
}

#[test]
fn a_constraint_repeated_10000_times_plans_as_one() {
    let (fleet, demand) = scenario();
    let once = serde_json::to_value(plan(&fleet, &demand, &fleet.policy, 100_000)).unwrap();
    let mut repeated = demand.clone();
    let c = constraints(&mut repeated)[0].clone();
    constraints(&mut repeated).extend(std::iter::repeat_n(c, 10_000));
    let started = Instant::now();
    let p = plan(&fleet, &repeated, &fleet.policy, 100_000);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(serde_json::to_value(p).unwrap(), once);
    // A demand file says so before planning.
    let problems = repeated.validate(&Limits::default());
    assert!(
        problems
            .iter()
            .any(|p| p.contains("claim gpu-nic: 10001 constraints (at most 32)")),
        "{problems:?}"
    );
}

#[test]
fn many_distinct_constraints_that_never_fit_end_in_bounded_time() {
    let (fleet, mut demand) = scenario();
    // Distinct constraints (the request lists differ), each over the
    // PCIe roots of a node, and more GPUs than any one root has: no
    // combination fits, so an unbounded search would try them all
    // (roots^20).
    let attr = "resource.kubernetes.io/pcieRoot".to_owned();
    *constraints(&mut demand) = (1..=20)
        .map(|k| Constraint {
            requests: vec!["gpu".to_owned(); k],
            match_attribute: attr.clone(),
        })
        .collect();
    let claim = &mut demand.workloads[0].pod_sets[0].pod.claims[0];
    claim.requests[0].exactly.as_mut().unwrap().count = 16;
    let started = Instant::now();
    let p = plan(&fleet, &demand, &fleet.policy, 100_000);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let text = serde_json::to_string(&p).unwrap();
    assert!(text.contains("rdma-job"), "{text}");
}
