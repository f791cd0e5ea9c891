//! Building the planner's fleet from a valid file: profiles resolved into
//! hardware models, and a model installed on a node as the planner's devices.

use super::schema::{
    DEFAULT_GPUS_PER_PCIE_ROOT, DEFAULT_NUMA_NODES, MAX_GPUS, MAX_NICS, MAX_NUMA_NODES,
};
use super::validate::{empty_mig, model_layout_problem};
use super::*;
use crate::truth::PcieStated;

impl FleetFile {
    /// Validates, then resolves profiles, racks and reservations into the
    /// planner's fleet.
    pub fn build(
        &self,
        file: &str,
        load_hardware: &mut HardwareLoader<'_>,
    ) -> Result<Fleet, FleetError> {
        let problems = self.validate();
        if !problems.is_empty() {
            return Err(FleetError::Invalid {
                file: file.to_owned(),
                problems,
            });
        }
        self.resolve(file, load_hardware)
    }

    pub(super) fn resolve(
        &self,
        file: &str,
        load_hardware: &mut HardwareLoader<'_>,
    ) -> Result<Fleet, FleetError> {
        let racks: BTreeMap<String, Rack> = self
            .racks
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    Rack {
                        name: r.name.clone(),
                        // Checked; unchecked, a budget that is not a
                        // number powers nothing on (NaN would pass every
                        // comparison with it).
                        power_budget_kw: r
                            .power_budget_kw
                            .map(|kw| if kw.is_nan() { 0.0 } else { kw }),
                        max_concurrent_power_ons: r.max_concurrent_power_ons,
                    },
                )
            })
            .collect();
        // One declared model per (profile or file, MIG layout), and one
        // device list per (model, sharing, dynamic MIG): 40,000 nodes of a
        // few profiles hold a few copies, not 40,000.
        type ModelKey = (bool, String, Option<Vec<String>>);
        let mut models: BTreeMap<ModelKey, Arc<NodeHardware>> = BTreeMap::new();
        type DeviceKey = (usize, Option<(Option<Milli>, Option<Milli>)>, bool);
        let mut device_lists: BTreeMap<DeviceKey, Installed> = BTreeMap::new();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for cfg in &self.nodes {
            let (hw, stated, cpu, memory, pods, power_kw) = match (&cfg.profile, &cfg.hardware) {
                (Some(p), _) => {
                    let prof = &self.profiles[p];
                    let layout = cfg
                        .mig_layout
                        .clone()
                        .unwrap_or_else(|| prof.mig_layout.clone());
                    let key = (false, p.clone(), prof.mig_enabled.then_some(layout));
                    let hw = match models.get(&key) {
                        Some(hw) => hw.clone(),
                        None => {
                            let layout = key.2.as_deref().unwrap_or_default();
                            let hw = Arc::new(hardware_from_profile(prof, layout));
                            models.insert(key, hw.clone());
                            hw
                        }
                    };
                    (
                        hw,
                        Stated::profile(prof, self.dynamic_mig(cfg)),
                        allocatable(&prof.cpu).unwrap_or(0),
                        allocatable(&prof.memory).unwrap_or(0),
                        prof.pods.clamp(0, limits::PODS),
                        prof.power_kw,
                    )
                }
                (None, Some(path)) => {
                    let key = (true, path.clone(), cfg.mig_layout.clone());
                    let hw = match models.get(&key) {
                        Some(hw) => hw.clone(),
                        None => {
                            let mut hw =
                                load_hardware(path).map_err(|reason| FleetError::Hardware {
                                    file: file.to_owned(),
                                    node: cfg.name.clone(),
                                    path: path.clone(),
                                    reason,
                                })?;
                            for (i, g) in hw.gpus.iter().enumerate() {
                                if let Some(e) =
                                    g.mig.as_ref().and_then(|m| m.check_instances().err())
                                {
                                    return Err(FleetError::Hardware {
                                        file: file.to_owned(),
                                        node: cfg.name.clone(),
                                        path: path.clone(),
                                        reason: format!("gpus[{i}].mig: {e}"),
                                    });
                                }
                            }
                            if let Some(layout) = &cfg.mig_layout {
                                let key = format!("nodes.{}.mig_layout", cfg.name);
                                if let Some(problem) = model_layout_problem(&key, &hw, layout) {
                                    return Err(FleetError::Invalid {
                                        file: file.to_owned(),
                                        problems: vec![problem],
                                    });
                                }
                                apply_layout(&mut hw, layout);
                            }
                            let hw = Arc::new(hw);
                            models.insert(key, hw.clone());
                            hw
                        }
                    };
                    let cpu = i64::from(hw.machine.threads) * 1000;
                    let mem = crate::device::to_milli(hw.machine.memory_bytes / 100 * 95);
                    (hw, Stated::model(self.dynamic_mig(cfg)), cpu, mem, 110, 0.0)
                }
                (None, None) => unreachable!("validated"),
            };
            let dynamic = self.dynamic_mig(cfg);
            let sharing = cfg.gpu_sharing;
            let dkey = (
                Arc::as_ptr(&hw) as usize,
                sharing.map(|s| (s.min_compute_milli, s.step_compute_milli)),
                dynamic,
            );
            let m = device_lists
                .entry(dkey)
                .or_insert_with(|| installed(&hw, sharing, dynamic))
                .clone();
            nodes.push(self.resolve_node(cfg, hw, stated, m, cpu, memory, pods, power_kw));
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let reservations = self
            .reservations
            .iter()
            .map(|r| {
                let mut members = r.nodes.clone();
                if let (Some(count), Some(profile)) = (r.count, &r.profile) {
                    members = nodes
                        .iter()
                        .filter(|n| n.profile.as_deref() == Some(profile.as_str()))
                        .take(count as usize)
                        .map(|n| n.name.clone())
                        .collect();
                }
                members.sort();
                Reservation {
                    name: r.name.clone(),
                    owner: r.owner.clone(),
                    nodes: members,
                    start: r.start,
                    end: r.end,
                    lendable: r.lendable,
                    min_powered_on: r.min_powered_on,
                }
            })
            .collect();
        Ok(Fleet {
            topology: self.topology.clone(),
            policy: self.policy.clone(),
            racks,
            nodes,
            reservations,
        })
    }

    /// The node's `mig_dynamic`, else its profile's.
    pub(super) fn dynamic_mig(&self, cfg: &NodeConfig) -> bool {
        cfg.mig_dynamic.unwrap_or_else(|| {
            cfg.profile
                .as_ref()
                .and_then(|p| self.profiles.get(p))
                .is_some_and(|p| p.mig_dynamic)
        })
    }

    /// The node's profile's `mig_via`, else the policy's.
    pub(super) fn mig_via(&self, cfg: &NodeConfig) -> MigVia {
        cfg.profile
            .as_ref()
            .and_then(|p| self.profiles.get(p))
            .and_then(|p| p.mig_via)
            .unwrap_or(self.policy.mig_via)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn resolve_node(
        &self,
        cfg: &NodeConfig,
        hw: Arc<NodeHardware>,
        stated: Stated,
        m: Installed,
        cpu: Milli,
        memory: Milli,
        pods: i64,
        power_kw: f64,
    ) -> Node {
        let mut domains = BTreeMap::new();
        if let Some(rack) = cfg
            .rack
            .as_ref()
            .and_then(|r| self.racks.iter().find(|x| &x.name == r))
        {
            for (level, v) in [
                ("site", &rack.site),
                ("row", &rack.row),
                ("block", &rack.block),
            ] {
                if let Some(v) = v {
                    domains.insert(level.to_owned(), v.clone());
                }
            }
            domains.insert("rack".to_owned(), rack.name.clone());
            domains.extend(rack.levels.clone());
        }
        domains.extend(cfg.levels.clone());
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/hostname".to_owned(), cfg.name.clone());
        for (level, v) in domains
            .iter()
            .filter(|(l, _)| self.topology.levels.contains(l))
        {
            labels.insert(format!("{}{level}", self.topology.label_prefix), v.clone());
            for key in self.topology.also_label.get(level).into_iter().flatten() {
                labels.insert(key.clone(), v.clone());
            }
        }
        for (key, value) in model_labels(&hw) {
            labels.insert(key.to_owned(), value);
        }
        labels.extend(cfg.labels.clone());
        let extended = cfg
            .extended
            .iter()
            .map(|(k, v)| (k.clone(), allocatable(v).unwrap_or(0)))
            .collect();
        let allocatable = Resources {
            cpu: cfg.cpu.as_deref().and_then(allocatable).unwrap_or(cpu),
            memory: cfg
                .memory
                .as_deref()
                .and_then(allocatable)
                .unwrap_or(memory),
            pods,
            extended,
        };
        let source = NodeSource {
            declared: hw,
            stated,
            reported: false,
            sharing: cfg.gpu_sharing,
            dynamic_mig: self.dynamic_mig(cfg),
            pinned_labels: cfg
                .labels
                .iter()
                .filter(|(k, _)| MODEL_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            allocatable: allocatable.clone(),
            devices: m.devices.clone(),
            prints: m.prints.clone(),
            counters: m.counters.clone(),
        };
        Node {
            name: cfg.name.clone(),
            rack: cfg.rack.clone(),
            profile: cfg.profile.clone(),
            domains,
            labels,
            taints: cfg.taints.clone(),
            power: cfg.power,
            schedulable: cfg.schedulable,
            failed: cfg.failed.clone(),
            idle_since: cfg.idle_since,
            allocatable,
            power_kw: power_draw(cfg.power_kw.unwrap_or(power_kw)),
            bios_profile: cfg.bios_profile.clone(),
            bios_profile_applied: cfg.bios_profile_applied.clone(),
            expected_boot_s: None,
            gpus: m.gpus,
            devices: m.devices,
            counters: m.counters,
            device_prints: m.prints,
            source: Some(Arc::new(source)),
            viewed: false,
            node_deleted: false,
            mig_via: self.mig_via(cfg),
        }
    }
}

/// Labels the model implies (rebuilt when a report replaces the model).
pub(super) const MODEL_LABELS: [&str; 2] = ["nvidia.com/gpu.product", "nvidia.com/gpu.count"];

pub(super) fn model_labels(hw: &NodeHardware) -> Vec<(&'static str, String)> {
    match hw.gpus.first().and_then(|g| g.model.as_deref()) {
        Some(model) => vec![
            (MODEL_LABELS[0], model.replace(' ', "-")),
            (MODEL_LABELS[1], hw.gpus.len().to_string()),
        ],
        None => Vec::new(),
    }
}

/// A model's devices as the planner holds them (shareable).
#[derive(Clone)]
pub(super) struct Installed {
    pub(super) gpus: Vec<PlannerGpu>,
    pub(super) devices: Arc<[Device]>,
    pub(super) prints: Arc<[u64]>,
    pub(super) counters: CounterSets,
}

pub(super) fn installed(hw: &NodeHardware, sharing: Option<Sharing>, dynamic: bool) -> Installed {
    let NodeDevices {
        gpus,
        devices,
        counters,
    } = devices_from_hardware(hw, sharing, dynamic);
    Installed {
        gpus,
        prints: devices.iter().map(crate::device::fingerprint).collect(),
        devices: devices.into(),
        counters,
    }
}

impl Node {
    /// Plans the node with `hw` from now on: GPUs, devices, counters and
    /// the model-implied labels come from it; declared settings stay.
    pub(super) fn install(&mut self, source: NodeSource, hw: &NodeHardware) {
        let m = installed(hw, source.sharing, source.dynamic_mig);
        self.install_devices(source, m, hw);
    }

    pub(super) fn install_devices(
        &mut self,
        mut source: NodeSource,
        m: Installed,
        hw: &NodeHardware,
    ) {
        for key in MODEL_LABELS {
            if !source.pinned_labels.contains_key(key) {
                self.labels.remove(key);
            }
        }
        for (key, value) in model_labels(hw) {
            if !source.pinned_labels.contains_key(key) {
                self.labels.insert(key.to_owned(), value);
            }
        }
        self.gpus = m.gpus;
        self.devices = m.devices.clone();
        self.device_prints = m.prints.clone();
        self.counters = m.counters.clone();
        self.viewed = false;
        source.devices = m.devices;
        source.prints = m.prints;
        source.counters = m.counters;
        self.source = Some(Arc::new(source));
    }

    /// The source record, or one made up from the node as it is (nothing
    /// declared that reports could be compared with).
    pub(super) fn source_or_default(&self) -> NodeSource {
        match &self.source {
            Some(s) => NodeSource::clone(s),
            None => NodeSource {
                declared: Arc::new(NodeHardware::empty()),
                stated: Stated::default(),
                reported: false,
                sharing: None,
                dynamic_mig: false,
                pinned_labels: BTreeMap::new(),
                allocatable: self.allocatable.clone(),
                devices: self.devices.clone(),
                prints: self.device_prints.clone(),
                counters: self.counters.clone(),
            },
        }
    }
}

/// `"3g.40gb@4"` → (profile, start).
pub fn parse_layout_entry(entry: &str) -> Option<(&str, u32)> {
    let (profile, start) = entry.split_once('@')?;
    Some((profile, start.parse().ok()?))
}

/// A declared allocatable amount: a quantity, not negative (`validate`
/// refuses others; unchecked, they count as not given).
pub(super) fn allocatable(q: &str) -> Option<Milli> {
    quantity::parse(q).ok().filter(|v| *v >= 0)
}

/// A declared power draw as the planner sums it: checked by `validate`;
/// unchecked, one that is not a number or past the limit counts as the
/// limit (never as free), a negative one as none.
pub(super) fn power_draw(kw: f64) -> f64 {
    if kw.is_nan() {
        limits::NODE_POWER_KW
    } else {
        kw.clamp(0.0, limits::NODE_POWER_KW)
    }
}

/// Applies a MIG layout to every MIG-capable GPU (mode on, these
/// instances). The layout was checked (`validate`, `resolve`); one that
/// does not fit a GPU (possible only unchecked) leaves it without
/// instances rather than with made-up or overlapping ones.
pub(super) fn apply_layout(hw: &mut NodeHardware, layout: &[String]) {
    for gpu in &mut hw.gpus {
        let Some(profiles) = gpu.model.as_deref().and_then(catalog::profiles_for_model) else {
            continue;
        };
        let empty = empty_mig(profiles);
        gpu.mig = Some(empty.with_layout(layout).unwrap_or(empty));
    }
}

/// A synthetic hardware model for a declared profile: GPUs and NICs spread
/// over PCIe roots and NUMA nodes the way HGX boards are built. Counts are
/// clamped to the [`max`] limits `validate` holds them to: nothing here
/// allocates or overflows by an unchecked number.
pub fn hardware_from_profile(p: &HardwareProfile, mig_layout: &[String]) -> NodeHardware {
    let mut hw = NodeHardware::empty();
    hw.machine.memory_bytes =
        u64::try_from(quantity::parse(&p.memory).unwrap_or(0).max(0) / 1000).unwrap_or(0);
    let gpus = p.gpus.min(MAX_GPUS);
    let per_root = p
        .gpus_per_pcie_root
        .unwrap_or(DEFAULT_GPUS_PER_PCIE_ROOT)
        .clamp(1, limits::GPUS_PER_PCIE_ROOT);
    let roots = gpus.div_ceil(per_root).max(1);
    let numa = p
        .numa_nodes
        .unwrap_or(DEFAULT_NUMA_NODES)
        .clamp(1, MAX_NUMA_NODES);
    // Both at most 64: no overflow.
    let root_numa = |r: u32| (r * numa / roots).min(numa - 1);
    for id in 0..numa {
        hw.numa_nodes.push(NumaNode {
            id,
            cpuset: String::new(),
            cpus: 0,
            memory_bytes: hw.machine.memory_bytes / u64::from(numa),
        });
    }
    let memory_bytes = p.gpu_memory_gib.min(limits::GPU_MEMORY_GIB) << 30;
    for i in 0..gpus {
        let r = i / per_root;
        let (domain, bus) = root_bus(r);
        hw.gpus.push(Gpu {
            index: i,
            uuid: None,
            pci_bus_id: PciBusId::new(domain, bus, (i % per_root) as u8, 0),
            vendor: Some("NVIDIA Corporation".into()),
            model: p.gpu_model.clone(),
            memory_bytes: Some(memory_bytes),
            architecture: None,
            compute_capability: None,
            numa_node: Some(root_numa(r)),
            pcie_root: Some(root_name(r)),
            pcie_switch: None,
            serial: None,
            os_devices: Vec::new(),
            fabric: None,
            mig: None,
            sources: vec![Source::Hwloc],
        });
    }
    for k in 0..p.nics.unwrap_or(0).min(MAX_NICS) {
        let r = k % roots;
        let (domain, bus) = root_bus(r);
        hw.nics.push(Nic {
            name: format!("ib{k}"),
            kind: NicKind::Infiniband,
            pci_bus_id: Some(PciBusId::new(domain, bus, 0x1f, 0)),
            vendor: None,
            model: None,
            numa_node: Some(root_numa(r)),
            pcie_root: Some(root_name(r)),
            pcie_switch: None,
            interfaces: vec![format!("ib{k}")],
            rdma_devices: vec![format!("mlx5_{k}")],
            link_speed_mbps: None,
            address: None,
        });
    }
    if p.mig_enabled {
        apply_layout(&mut hw, mig_layout);
    }
    hw
}

/// The PCI domain and bus of synthetic PCIe root `r`: buses 0x10, 0x20, ...
/// 0xf0 of domain 0, then the same of domain 1, and so on (a bus number is
/// one byte: 64 roots must not wrap onto each other).
pub(super) fn root_bus(r: u32) -> (u32, u8) {
    let bus = 0x10 + (r % 15) * 0x10;
    (r / 15, u8::try_from(bus).unwrap_or(0xf0))
}

/// Synthetic PCIe root `r`'s name, as hwloc spells a host bridge.
pub(super) fn root_name(r: u32) -> String {
    let (domain, bus) = root_bus(r);
    format!("pci{domain:04x}:{bus:02x}")
}

impl Stated {
    /// What a profile states: GPU count always; model, memory (when > 0),
    /// NUMA nodes, GPUs per PCIe root and NICs when set; MIG mode and
    /// layout unless MIG is dynamic.
    pub fn profile(p: &HardwareProfile, mig_dynamic: bool) -> Stated {
        Stated {
            gpu_count: true,
            gpu_model: p.gpu_model.is_some(),
            gpu_memory: p.gpu_memory_gib > 0,
            mig: !mig_dynamic,
            numa_nodes: p.numa_nodes.is_some(),
            pcie: p.gpus_per_pcie_root.map(PcieStated::GpusPerRoot),
            nics: p.nics.is_some(),
            nvlink: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_states_only_its_set_keys() {
        let p = HardwareProfile::new("1", "1Gi");
        let s = Stated::profile(&p, false);
        assert_eq!(
            s,
            Stated {
                gpu_count: true,
                mig: true,
                ..Stated::default()
            }
        );
        assert!(!Stated::profile(&p, true).mig);
        let p = HardwareProfile {
            gpu_model: Some("X".into()),
            gpu_memory_gib: 1,
            nics: Some(0),
            gpus_per_pcie_root: Some(2),
            numa_nodes: Some(1),
            ..p
        };
        let s = Stated::profile(&p, false);
        assert!(s.gpu_model && s.gpu_memory && s.nics && s.numa_nodes && !s.nvlink);
        assert_eq!(s.pcie, Some(PcieStated::GpusPerRoot(2)));
        assert_eq!(Stated::model(false).pcie, Some(PcieStated::Roots));
    }
}
