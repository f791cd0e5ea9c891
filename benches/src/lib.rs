//! Workload generators shared by the benches and figure binaries.

use std::collections::BTreeMap;

use accord::demand::{
    Claim, Demand, DeviceRequest, ExactRequest, PodSet, PodSpec, TopologyMode, TopologyRequirement,
    Workload,
};
use accord::fleet::{Fleet, FleetFile, HardwareProfile, NodeConfig, PowerState, RackConfig};

/// xorshift: a seeded, dependency-free generator so inputs are identical
/// on every run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

fn h100() -> HardwareProfile {
    HardwareProfile {
        gpus: 8,
        gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
        gpu_memory_gib: 80,
        power_kw: 10.2,
        nics: 8,
        ..HardwareProfile::new("192", "2Ti")
    }
}

/// `racks` racks of `per_rack` 8-GPU nodes; about 60 % powered on.
pub fn fleet(racks: usize, per_rack: usize, seed: u64) -> Fleet {
    let mut rng = Rng::new(seed);
    let mut file = FleetFile::default();
    file.profiles.insert("h100".into(), h100());
    for r in 0..racks {
        file.racks.push(RackConfig {
            name: format!("r{r:04}"),
            site: Some("dc1".into()),
            row: Some(format!("row{:02}", r / 10)),
            block: None,
            levels: BTreeMap::new(),
            power_budget_kw: Some(450.0),
            max_concurrent_power_ons: Some(8),
        });
        for n in 0..per_rack {
            file.nodes.push(NodeConfig {
                rack: Some(format!("r{r:04}")),
                power: if rng.below(10) < 6 {
                    PowerState::On
                } else {
                    PowerState::Off
                },
                ..NodeConfig::new(&format!("r{r:04}-n{n:02}"), "h100")
            });
        }
    }
    file.build("bench", &mut |_| Err("no files".into()))
        .expect("generated fleet is valid")
}

/// `gangs` gangs of `pods_per_gang` pods; each pod claims 1, 2, 4 or 8
/// GPUs through DRA with a CEL selector; half the gangs require one rack, a
/// quarter prefer one.
pub fn demand(gangs: usize, pods_per_gang: u32, seed: u64) -> Demand {
    let mut rng = Rng::new(seed);
    let mut d = Demand::default();
    for g in 0..gangs {
        let gpus = [1u32, 2, 4, 8][rng.below(4) as usize];
        let topology = match rng.below(4) {
            0 | 1 => Some(TopologyMode::Required),
            2 => Some(TopologyMode::Preferred),
            _ => None,
        };
        d.workloads.push(Workload {
            name: format!("gang-{g:05}"),
            namespace: format!("team-{}", g % 7),
            labels: BTreeMap::new(),
            min_count: None,
            priority: (rng.below(3)) as i32,
            created: g as u64,
            topology: topology.map(|mode| TopologyRequirement {
                level: "rack".into(),
                mode,
            }),
            reservation: None,
            sources: Vec::new(),
            pod_sets: vec![PodSet {
                name: "worker".into(),
                count: pods_per_gang,
                pod: PodSpec {
                    requests: BTreeMap::from([
                        ("cpu".to_owned(), "8".to_owned()),
                        ("memory".to_owned(), "64Gi".to_owned()),
                    ]),
                    claims: vec![Claim {
                        name: "gpus".into(),
                        requests: vec![DeviceRequest {
                            name: "gpu".into(),
                            exactly: Some(ExactRequest {
                                name: None,
                                device_class: "gpu.nvidia.com".into(),
                                selectors: vec![
                                    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'".into(),
                                ],
                                count: gpus,
                                allocation_mode: Default::default(),
                                capacity: BTreeMap::new(),
                            }),
                            first_available: vec![],
                        }],
                        constraints: vec![],
                    }],
                    ..PodSpec::default()
                },
            }],
        });
    }
    d
}
