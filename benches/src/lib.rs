//! Workload generators shared by the benches and figure binaries.

pub mod fitdiff;
pub mod peers;
pub mod soak;

use std::collections::BTreeMap;

use accord::demand::{
    Claim, Demand, DeviceRequest, ExactRequest, PodSet, PodSpec, TopologyMode, TopologyRequirement,
    Workload,
};
use accord::fleet::{
    hardware_from_profile, Fleet, FleetFile, HardwareProfile, NodeConfig, PowerState, RackConfig,
};
use accord::hardware::{
    mig::catalog, ComputeInstance, GpuInstance, MigMode, MigPlacement, MigState, NodeHardware,
};

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
        nics: Some(8),
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

/// [`fleet`], each node planned with its own agent report ([`report`],
/// installed with `Fleet::apply_report`) rather than the shared profile.
pub fn fleet_reported(racks: usize, per_rack: usize, seed: u64) -> Fleet {
    let mut fleet = fleet(racks, per_rack, seed);
    let names: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    for (k, name) in names.iter().enumerate() {
        let hw = report(k as u64, seed);
        fleet
            .apply_report(name, &hw)
            .expect("the node is in the fleet");
    }
    fleet
}

/// The agent's report of the `k`-th machine of a generated fleet: the h100
/// profile's model with the machine's own identity (GPU UUIDs and serials,
/// machine serial) and MIG-capable GPUs as NVML shows them (mode disabled,
/// every profile published), and the variations of a real fleet: about 1
/// machine in 50 has lost a GPU (7 left), about 1 in 25 runs MIG on its
/// last GPU (7 x 1g.10gb, or 2 x 3g.40gb).
pub fn report(k: u64, seed: u64) -> NodeHardware {
    let mut rng = Rng::new(seed ^ k.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut hw = hardware_from_profile(&h100(), &[]);
    hw.machine.serial = Some(format!("SN{k:08}"));
    let variant = rng.below(100);
    if variant < 2 {
        hw.gpus.pop();
    }
    let profiles = catalog::profiles_for_model("NVIDIA H100 80GB HBM3").expect("in the catalog");
    let last = hw.gpus.len() - 1;
    for (i, g) in hw.gpus.iter_mut().enumerate() {
        g.uuid = Some(format!(
            "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            k,
            i,
            seed & 0xffff,
            rng.below(0x1_0000),
            rng.next_u64() & 0xffff_ffff_ffff
        ));
        g.serial = Some(format!("{:013}", k * 16 + i as u64));
        let mut mig = MigState {
            capable: true,
            current_mode: MigMode::Disabled,
            pending_mode: MigMode::Disabled,
            profiles: profiles.clone(),
            gpu_instances: Vec::new(),
        };
        if (2..6).contains(&variant) && i == last {
            mig.current_mode = MigMode::Enabled;
            mig.pending_mode = MigMode::Enabled;
            let layout: &[(&str, u32, u32)] = if variant < 4 {
                &[
                    ("1g.10gb", 0, 1),
                    ("1g.10gb", 1, 1),
                    ("1g.10gb", 2, 1),
                    ("1g.10gb", 3, 1),
                    ("1g.10gb", 4, 1),
                    ("1g.10gb", 5, 1),
                    ("1g.10gb", 6, 1),
                ]
            } else {
                &[("3g.40gb", 0, 4), ("3g.40gb", 4, 4)]
            };
            for (id, &(profile, start, size)) in layout.iter().enumerate() {
                mig.gpu_instances.push(GpuInstance {
                    id: id as u32 + 1,
                    profile: profile.into(),
                    profile_id: profiles.iter().find(|p| p.name == profile).map(|p| p.id),
                    placement: Some(MigPlacement { start, size }),
                    compute_instances: vec![ComputeInstance {
                        id: 0,
                        uuid: Some(format!("MIG-{k:08x}-{i:02x}-{id:02x}")),
                        sm_count: None,
                        memory_mib: None,
                    }],
                });
            }
        }
        g.mig = Some(mig);
    }
    hw
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
            approximation: None,
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
                                tolerations: Vec::new(),
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
