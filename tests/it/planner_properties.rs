//! Planner properties over generated fleets and demands: gang atomicity,
//! reservation isolation, no busy node powered off, determinism under
//! shuffled inputs, and every placement passing fit.

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{
    BoundDevice, BoundPod, Demand, PodSet, PodSpec, Taint, TaintEffect, Toleration,
    TolerationOperator, TopologyMode, TopologyRequirement, Workload,
};
use accord::fit::{resource_fit, static_fit, NodeUse, PodRequest};
use accord::fleet::{
    Fleet, FleetFile, HardwareProfile, NodeConfig, Owner, PowerState, RackConfig, ReservationConfig,
};
use accord::plan::{plan, Action, Plan};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct NodeGen {
    rack: usize,
    gpus: u32,
    power: PowerState,
    tainted: bool,
    idle_for: Option<u64>,
    reserved: bool,
}

#[derive(Debug, Clone)]
struct WorkGen {
    team_a: bool,
    pods: u32,
    min: u32,
    gpus: u32,
    topology: Option<TopologyMode>,
    tolerates: bool,
}

const NOW: u64 = 1_000_000;

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (
        0usize..3,
        prop::sample::select(vec![0u32, 2, 4, 8]),
        prop::sample::select(vec![
            PowerState::On,
            PowerState::Off,
            PowerState::PoweringOn,
        ]),
        prop::bool::weighted(0.2),
        prop::option::of(0u64..5000),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(rack, gpus, power, tainted, idle_for, reserved)| NodeGen {
            rack,
            gpus,
            power,
            tainted,
            idle_for,
            reserved,
        })
}

fn work_gen() -> impl Strategy<Value = WorkGen> {
    (
        any::<bool>(),
        1u32..4,
        prop::sample::select(vec![0u32, 1, 2, 4, 8]),
        prop::option::of(prop::sample::select(vec![
            TopologyMode::Required,
            TopologyMode::Preferred,
        ])),
        any::<bool>(),
    )
        .prop_flat_map(|(team_a, pods, gpus, topology, tolerates)| {
            (1..=pods).prop_map(move |min| WorkGen {
                team_a,
                pods,
                min,
                gpus,
                topology,
                tolerates,
            })
        })
}

fn build(
    nodes: &[NodeGen],
    budgets: &[Option<f64>],
    lendable: bool,
    works: &[WorkGen],
    busy: &[(usize, u32)],
) -> (Fleet, Demand) {
    let mut file = FleetFile::default();
    for (gpus, name) in [(0u32, "p0"), (2, "p2"), (4, "p4"), (8, "p8")] {
        file.profiles.insert(
            name.into(),
            HardwareProfile {
                gpus,
                gpu_model: (gpus > 0).then(|| "NVIDIA H100 80GB HBM3".to_owned()),
                gpu_memory_gib: 80,
                power_kw: 2.0 + f64::from(gpus),
                ..HardwareProfile::new("64", "512Gi")
            },
        );
    }
    for (r, budget) in budgets.iter().enumerate() {
        file.racks.push(RackConfig {
            name: format!("r{r}"),
            site: None,
            row: None,
            block: None,
            levels: BTreeMap::new(),
            power_budget_kw: *budget,
            max_concurrent_power_ons: Some(2),
        });
    }
    let mut reserved = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let name = format!("n{i}");
        if n.reserved {
            reserved.push(name.clone());
        }
        file.nodes.push(NodeConfig {
            rack: Some(format!("r{}", n.rack % budgets.len())),
            power: n.power,
            idle_since: n.idle_for.map(|d| NOW - d),
            taints: if n.tainted {
                vec![Taint {
                    key: "dedicated".into(),
                    value: Some("x".into()),
                    effect: TaintEffect::NoSchedule,
                }]
            } else {
                vec![]
            },
            ..NodeConfig::new(&name, &format!("p{}", n.gpus))
        });
    }
    if !reserved.is_empty() {
        file.reservations.push(ReservationConfig {
            name: "team-a".into(),
            owner: Owner {
                namespace: Some("team-a".into()),
                selector: BTreeMap::new(),
            },
            nodes: reserved,
            count: None,
            profile: None,
            start: None,
            end: None,
            lendable,
            min_powered_on: 1,
        });
    }
    let fleet = file
        .build("generated", &mut |_| Err("no files".into()))
        .unwrap();
    let mut demand = Demand::default();
    for (k, w) in works.iter().enumerate() {
        let mut requests = BTreeMap::from([("cpu".to_owned(), "4".to_owned())]);
        if w.gpus > 0 {
            requests.insert("nvidia.com/gpu".into(), w.gpus.to_string());
        }
        demand.workloads.push(Workload {
            name: format!("w{k}"),
            namespace: if w.team_a { "team-a" } else { "team-b" }.into(),
            labels: BTreeMap::new(),
            min_count: Some(w.min),
            priority: 0,
            created: k as u64,
            topology: w.topology.map(|mode| TopologyRequirement {
                level: "rack".into(),
                mode,
            }),
            reservation: None,
            approximation: None,
            sources: Vec::new(),
            pod_sets: vec![PodSet {
                name: "p".into(),
                count: w.pods,
                pod: PodSpec {
                    requests,
                    tolerations: if w.tolerates {
                        vec![Toleration {
                            key: Some("dedicated".into()),
                            operator: TolerationOperator::Exists,
                            value: None,
                            effect: None,
                        }]
                    } else {
                        vec![]
                    },
                    ..PodSpec::default()
                },
            }],
        });
    }
    for (j, &(node, gpus)) in busy.iter().enumerate() {
        let Some(n) = nodes.get(node % nodes.len().max(1)) else {
            continue;
        };
        if n.power == PowerState::Off {
            continue;
        }
        let take = gpus.min(n.gpus);
        demand.bound.push(BoundPod {
            daemon_set: Default::default(),
            node_selector_keys: Vec::new(),
            csi_volumes: Vec::new(),
            node: format!("n{}", node % nodes.len()),
            namespace: "old".into(),
            name: format!("b{j}"),
            labels: BTreeMap::new(),
            requests: BTreeMap::from([("cpu".to_owned(), "2".to_owned())]),
            devices: (0..take)
                .map(|g| BoundDevice {
                    name: format!("gpu-{g}"),
                    capacity: BTreeMap::new(),
                })
                .collect(),
            node_agent: false,
            do_not_disrupt: false,
            device_ids: Vec::new(),
            relations: Default::default(),
        });
    }
    // Two bound pods may claim the same GPU; keep the first.
    let mut seen = BTreeSet::new();
    for b in &mut demand.bound {
        b.devices
            .retain(|d| seen.insert((b.node.clone(), d.name.clone())));
    }
    (fleet, demand)
}

prop_compose! {
    fn scenario()(
        nodes in prop::collection::vec(node_gen(), 1..8),
        budgets in prop::collection::vec(prop::option::of(prop::sample::select(vec![8.0f64, 15.0, 40.0])), 1..4),
        lendable in any::<bool>(),
        works in prop::collection::vec(work_gen(), 1..5),
        busy in prop::collection::vec((0usize..8, 1u32..9), 0..4),
    ) -> (Fleet, Demand) {
        build(&nodes, &budgets, lendable, &works, &busy)
    }
}

fn busy_nodes(demand: &Demand, p: &Plan) -> BTreeSet<String> {
    demand
        .bound
        .iter()
        .map(|b| b.node.clone())
        .chain(
            p.placements
                .iter()
                .flat_map(|w| w.pods.iter().map(|pod| pod.node.clone())),
        )
        .collect()
}

/// Replays the plan's placements over the fleet and checks each with fit.
fn check_fit(fleet: &Fleet, demand: &Demand, p: &Plan) -> Result<(), String> {
    let mut uses: BTreeMap<&str, NodeUse> = fleet
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), NodeUse::new(n)))
        .collect();
    let mut taken: BTreeSet<(String, String)> = BTreeSet::new();
    for b in &demand.bound {
        let spec = PodSpec {
            requests: b.requests.clone(),
            ..PodSpec::default()
        };
        uses.get_mut(b.node.as_str())
            .unwrap()
            .add(&PodRequest::parse(&spec).unwrap());
        for d in &b.devices {
            taken.insert((b.node.clone(), d.name.clone()));
        }
    }
    for wp in &p.placements {
        let w = demand
            .workloads
            .iter()
            .find(|w| w.key() == wp.workload)
            .unwrap();
        let spec = &w.pod_sets[0].pod;
        let req = PodRequest::parse(spec).unwrap();
        for pod in &wp.pods {
            let node = fleet.nodes.iter().find(|n| n.name == pod.node).unwrap();
            static_fit(spec, node).map_err(|f| format!("{}: {f}", pod.node))?;
            let u = uses.get_mut(node.name.as_str()).unwrap();
            resource_fit(&req, node, u).map_err(|f| format!("{}: {f}", pod.node))?;
            u.add(&req);
            if pod.devices.len() != req.gpus as usize {
                return Err(format!(
                    "{} got {} GPUs, asked {}",
                    pod.pod,
                    pod.devices.len(),
                    req.gpus
                ));
            }
            for d in &pod.devices {
                if !node.devices.iter().any(|x| x.name == d.device) {
                    return Err(format!("{} has no device {}", node.name, d.device));
                }
                if !taken.insert((node.name.clone(), d.device.to_string())) {
                    return Err(format!("{} {} allocated twice", node.name, d.device));
                }
            }
        }
    }
    Ok(())
}

/// Every run explores the same cases, so a rare counterexample fails every
/// run (or none), never now and then in CI. `PROPTEST_RNG_SEED=<u64>`
/// explores others; a failure found so is kept in proptest-regressions/
/// and replayed first by every later run.
const SEED: u64 = 0x6163_636f_7264; // "accord"

fn config() -> ProptestConfig {
    // The default reads the PROPTEST_* variables.
    let base = ProptestConfig::default();
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        base.rng_seed
    } else {
        proptest::test_runner::RngSeed::Fixed(SEED)
    };
    ProptestConfig {
        cases: 96,
        rng_seed,
        ..base
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn gangs_are_atomic((fleet, demand) in scenario()) {
        let p = plan(&fleet, &demand, &fleet.policy, NOW);
        let placed: BTreeSet<&str> = p.placements.iter().map(|w| w.workload.as_str()).collect();
        for wp in &p.placements {
            let w = demand.workloads.iter().find(|w| w.key() == wp.workload).unwrap();
            prop_assert!(wp.pods.len() as u32 >= w.min(), "{} placed {} < min {}", wp.workload, wp.pods.len(), w.min());
        }
        for u in &p.unsatisfied {
            prop_assert!(!placed.contains(u.workload.as_str()));
        }
        // Every power-on serves a placed pod.
        let hosting: BTreeSet<&str> = p.placements.iter().flat_map(|w| w.pods.iter().map(|x| x.node.as_str())).collect();
        for a in &p.actions {
            if let Action::PowerOn { node, .. } = a {
                prop_assert!(hosting.contains(node.as_str()), "{node} powered on for nothing");
            }
        }
    }

    #[test]
    fn reservations_are_isolated((fleet, demand) in scenario()) {
        let p = plan(&fleet, &demand, &fleet.policy, NOW);
        for r in &fleet.reservations {
            for wp in &p.placements {
                let w = demand.workloads.iter().find(|w| w.key() == wp.workload).unwrap();
                if r.owns(&w.namespace, &w.labels) {
                    continue;
                }
                for pod in &wp.pods {
                    if r.nodes.contains(&pod.node) {
                        prop_assert!(r.lendable && pod.reclaimable, "{} on reserved {}", wp.workload, pod.node);
                    }
                }
            }
        }
    }

    #[test]
    fn busy_nodes_are_never_powered_off((fleet, demand) in scenario()) {
        let p = plan(&fleet, &demand, &fleet.policy, NOW);
        let busy = busy_nodes(&demand, &p);
        for a in &p.actions {
            if let Action::PowerOff { node, .. } = a {
                prop_assert!(!busy.contains(node), "busy {node} powered off");
            }
        }
    }

    #[test]
    fn plans_do_not_depend_on_input_order((fleet, demand) in scenario(), seed in any::<u64>()) {
        let p = serde_json::to_string(&plan(&fleet, &demand, &fleet.policy, NOW)).unwrap();
        let mut f2 = fleet.clone();
        let mut d2 = demand.clone();
        // A deterministic shuffle from the seed.
        let mut x = seed | 1;
        let mut next = move |n: usize| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; (x % n.max(1) as u64) as usize };
        for i in (1..f2.nodes.len()).rev() { let j = next(i + 1); f2.nodes.swap(i, j); }
        for i in (1..d2.workloads.len()).rev() { let j = next(i + 1); d2.workloads.swap(i, j); }
        for i in (1..d2.bound.len()).rev() { let j = next(i + 1); d2.bound.swap(i, j); }
        for i in (1..f2.reservations.len()).rev() { let j = next(i + 1); f2.reservations.swap(i, j); }
        let q = serde_json::to_string(&plan(&f2, &d2, &f2.policy, NOW)).unwrap();
        prop_assert_eq!(p, q);
    }

    #[test]
    fn every_placement_passes_fit((fleet, demand) in scenario()) {
        let p = plan(&fleet, &demand, &fleet.policy, NOW);
        prop_assert!(check_fit(&fleet, &demand, &p).is_ok(), "{:?}", check_fit(&fleet, &demand, &p));
    }
}
