//! Planning from Kubernetes objects gives the same actions as planning from
//! the native demand file they describe.

use std::path::Path;

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord_kube::{translate, Manifests, Options};

#[test]
fn manifests_plan_like_the_native_demand() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/gang-rack-mixed");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let fleet = Fleet::from_toml(&read("fleet.toml"), "fleet.toml", &mut |_| {
        Err("none".into())
    })
    .unwrap();
    let native = Demand::from_json(&read("demand.json"), "demand.json").unwrap();
    let manifests = Manifests::parse(&read("manifests.yaml"), "manifests.yaml").unwrap();
    let t = translate(&manifests, &Options::for_topology(&fleet.topology));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let now = 100_000;
    let from_native = accord::plan::plan(&fleet, &native, &fleet.policy, now);
    let from_k8s = accord::plan::plan(&fleet, &t.demand, &fleet.policy, now);
    assert_eq!(
        serde_json::to_value(&from_k8s.actions).unwrap(),
        serde_json::to_value(&from_native.actions).unwrap()
    );
    assert!(!from_k8s.actions.is_empty());
    let placed: Vec<&str> = from_k8s.placements[0]
        .pods
        .iter()
        .map(|p| p.node.as_str())
        .collect();
    assert!(placed.iter().all(|n| n.starts_with("r1-")), "{placed:?}");
    assert!(
        !placed.contains(&"r1-n1"),
        "r1-n1's GPUs are taken by the bound pod"
    );
}
