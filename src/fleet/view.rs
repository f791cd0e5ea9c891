//! The Kubernetes side of a node: the scheduler's view applied to it (its
//! labels, taints, allocatable and devices replace the model's, and where
//! they differ that is drift), and what Accord publishes on it and owns.

use super::*;
use crate::device::{
    fingerprint, AttrValue, Device, DeviceKind, GPU_DRIVER, GPU_RESOURCE, MIG_RESOURCE_PREFIX,
    NIC_DRIVER, PCI_BUS_ID,
};
use crate::truth::{
    is_readiness_taint, label_value, owns_taint, DriftKind, Publication, SchedulerView,
    GPU_COUNT_LABEL, GPU_MODEL_LABEL, KUBERNETES_SET_LABELS, RESERVATION_KEY,
};

/// Allocatable keys that are not extended resources (or that fit treats
/// as devices).
pub(super) fn not_extended(key: &str) -> bool {
    matches!(
        key,
        "cpu" | "memory" | "pods" | "ephemeral-storage" | GPU_RESOURCE
    ) || key.starts_with("hugepages-")
        || key.starts_with(MIG_RESOURCE_PREFIX)
}

/// A whole-number count (`"8"`); `None` for anything else.
pub(super) fn count(q: &str) -> Option<usize> {
    quantity::parse(q)
        .ok()
        .filter(|m| *m >= 0 && m % 1000 == 0)
        .and_then(|m| usize::try_from(m / 1000).ok())
}

pub(super) fn str_attr<'d>(d: &'d Device, name: &str) -> Option<&'d str> {
    match d.attr(name) {
        Some(AttrValue::String(s)) => Some(s),
        _ => None,
    }
}

/// A device as the drift comparison counts it: (kind, product name, MIG
/// profile or NIC kind). `None`: not compared (another driver's device,
/// or a NIC when the view has none).
pub(super) fn device_class(d: &Device, nics: bool) -> Option<(DeviceKind, String)> {
    let name = |attr: &str| str_attr(d, attr).unwrap_or("unknown").to_owned();
    match d.kind {
        DeviceKind::Gpu if d.driver == GPU_DRIVER => {
            Some((d.kind, name("gpu.nvidia.com/productName")))
        }
        DeviceKind::Mig if d.driver == GPU_DRIVER => Some((d.kind, name("gpu.nvidia.com/profile"))),
        DeviceKind::Nic if nics => Some((d.kind, name("rdma.accord.dev/kind"))),
        _ => None,
    }
}

pub(super) fn devices_text(summary: &BTreeMap<(DeviceKind, String), usize>) -> String {
    if summary.is_empty() {
        return "none".into();
    }
    summary
        .iter()
        .map(|((kind, name), n)| {
            let kind = match kind {
                DeviceKind::Gpu => "GPU",
                DeviceKind::Mig => "MIG",
                DeviceKind::Nic => "NIC",
            };
            format!("{kind} {name} x{n}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The model's devices against the DRA driver's, as multisets of
/// (kind, product name or MIG profile); NICs only when the view has some
/// (no RDMA driver publishing is not a difference).
pub(super) fn device_drift(model: &[Device], view: &[Device]) -> Option<Drift> {
    let nics = view.iter().any(|d| d.kind == DeviceKind::Nic);
    let summary = |ds: &[Device]| {
        let mut out: BTreeMap<(DeviceKind, String), usize> = BTreeMap::new();
        for c in ds.iter().filter_map(|d| device_class(d, nics)) {
            *out.entry(c).or_insert(0) += 1;
        }
        out
    };
    let (m, v) = (summary(model), summary(view));
    (m != v).then(|| Drift {
        what: DriftKind::SchedulerDevices,
        declared: devices_text(&m),
        reported: devices_text(&v),
    })
}

impl Node {
    /// Plans the node as kube-scheduler sees it (`view`: its Kubernetes
    /// Node, up now or last seen) and returns where that differs from the
    /// node's model.
    ///
    /// - labels and taints are the Node's, less the readiness taints
    ///   ([`READINESS_TAINTS`]: Accord's lifecycle models power and boot);
    /// - when the Node shows any allocatable: cpu, memory and pods from it
    ///   (each falling back to the declared value when absent or not a
    ///   quantity), and extended resources are exactly its other keys
    ///   (not ephemeral-storage, hugepages-*, `nvidia.com/gpu`,
    ///   `nvidia.com/mig-*`: fit counts those as devices);
    /// - with `view.devices` (the DRA drivers' ResourceSlices), each
    ///   driver's devices there replace the model's devices of that
    ///   driver (see `use_view_devices` for drivers the model lacks),
    ///   each GPU device tied to its physical GPU by UUID (parent UUID
    ///   for MIG) or PCI bus id; over the replaced drivers, a difference
    ///   from the model's devices (kind and product name or MIG profile,
    ///   as multisets) is a [`DriftKind::SchedulerDevices`] drift;
    /// - `nvidia.com/gpu` and each `nvidia.com/mig-<profile>` the Node
    ///   advertises are compared with the model's whole GPUs (those not in
    ///   MIG mode) and MIG instances of that profile
    ///   ([`DriftKind::SchedulerResource`]); where it advertises fewer,
    ///   the excess devices are dropped (highest GPU index first), so fit
    ///   never allocates more than the scheduler offers. A key the Node
    ///   does not advertise constrains nothing; nor does anything while
    ///   all of them add up to 0 on a node the model gives GPUs (the
    ///   device plugin has not registered yet, as right after a boot).
    ///
    /// A GPU that lost devices this way, or that the view's devices cannot
    /// be tied to, is `withheld`: the planner does not repartition it
    /// (simplification: without knowing why the scheduler offers less, its
    /// MIG layout is left alone). Partitionable (dynamic MIG) devices are
    /// not capped by `nvidia.com/mig-*`. The counter sets the view
    /// carries (`sharedCounters` of the devices' pools) replace the
    /// model's of the same name; none is guessed.
    ///
    /// Applying a view again starts from the model, not from the earlier
    /// view.
    pub fn apply_scheduler_view(&mut self, view: &SchedulerView) -> Vec<Drift> {
        if self.viewed {
            if let Some(s) = &self.source {
                self.devices = s.devices.clone();
                self.device_prints = s.prints.clone();
                self.counters = s.counters.clone();
            }
            for g in &mut self.gpus {
                g.withheld = false;
            }
        }
        self.viewed = true;
        self.labels = view.labels.clone();
        self.taints = view
            .taints
            .iter()
            .filter(|t| !is_readiness_taint(&t.key))
            .cloned()
            .collect();
        if !view.allocatable.is_empty() {
            let declared = self
                .source
                .as_ref()
                .map_or(&self.allocatable, |s| &s.allocatable)
                .clone();
            let get = |k: &str| {
                view.allocatable
                    .get(k)
                    .and_then(|q| quantity::parse(q).ok())
            };
            self.allocatable.cpu = get("cpu").unwrap_or(declared.cpu);
            self.allocatable.memory = get("memory").unwrap_or(declared.memory);
            self.allocatable.pods = get("pods").map_or(declared.pods, |m| m / 1000);
            self.allocatable.extended = view
                .allocatable
                .iter()
                .filter(|(k, _)| !not_extended(k))
                .filter_map(|(k, q)| Some((k.clone(), quantity::parse(q).ok()?)))
                .collect();
        }
        let mut drift = Vec::new();
        if let Some(devices) = &view.devices {
            drift.extend(self.use_view_devices(devices));
        }
        // The counter sets the drivers publish for the node's pools; a
        // device drawing on a set neither they nor the model have is not
        // allocatable (fit finds no capacity), as for the allocator.
        for (set, counters) in &view.counters {
            self.counters.insert(set.clone(), counters.clone());
        }
        drift.extend(self.apply_device_plugin(&view.allocatable));
        crate::device::mark_driver_partitions(&mut self.gpus, &self.devices);
        drift.sort_by_key(|d| d.what);
        drift
    }

    /// Replaces the model's devices with the view's, driver by driver, tied
    /// to the model's GPUs; returns how the replaced drivers' devices
    /// differ.
    ///
    /// Only drivers that appear in the view are replaced: the model's
    /// devices of other drivers stay (a node can publish, say,
    /// `compute-domain.nvidia.com` channels or dranet NICs in node-local
    /// slices while its GPUs come from the device plugin). A view driver
    /// the model has no devices of is taken only when it is one whose
    /// devices' kind Accord knows ([`GPU_DRIVER`], [`NIC_DRIVER`]); any
    /// other driver's devices are left out of planning, since the kube
    /// side cannot tell what they are and would count them as GPUs.
    fn use_view_devices(&mut self, view: &[Device]) -> Option<Drift> {
        let model_drivers: BTreeSet<&str> =
            self.devices.iter().map(|d| d.driver.as_str()).collect();
        let replaced: BTreeSet<String> = view
            .iter()
            .map(|d| d.driver.as_str())
            .filter(|d| model_drivers.contains(d) || matches!(*d, GPU_DRIVER | NIC_DRIVER))
            .map(str::to_owned)
            .collect();
        if replaced.is_empty() {
            return None;
        }
        let kept_model: Vec<(Device, u64)> = self
            .devices
            .iter()
            .zip(self.device_prints.iter())
            .filter(|(d, _)| !replaced.contains(&d.driver))
            .map(|(d, p)| (d.clone(), *p))
            .collect();
        let replaced_model: Vec<Device> = self
            .devices
            .iter()
            .filter(|d| replaced.contains(&d.driver))
            .cloned()
            .collect();
        let view: Vec<Device> = view
            .iter()
            .filter(|d| replaced.contains(&d.driver))
            .cloned()
            .collect();
        let drift = device_drift(&replaced_model, &view);
        // The model's GPU identities: UUID and PCI bus id → GPU.
        let mut by_uuid: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_bus: BTreeMap<String, usize> = BTreeMap::new();
        for d in self.devices.iter() {
            let Some(g) = d.gpu else { continue };
            let uuid = match d.kind {
                DeviceKind::Gpu => str_attr(d, "gpu.nvidia.com/uuid"),
                DeviceKind::Mig => str_attr(d, "gpu.nvidia.com/parentUUID"),
                DeviceKind::Nic => None,
            };
            if let Some(u) = uuid {
                by_uuid.insert(u.to_owned(), g);
            }
            if let Some(b) = str_attr(d, PCI_BUS_ID) {
                by_bus.insert(b.to_owned(), g);
            }
        }
        let mut devices: Vec<Device> = view;
        let mut tied: BTreeSet<usize> = BTreeSet::new();
        let mut untied = false;
        for d in &mut devices {
            if d.driver != GPU_DRIVER || d.kind == DeviceKind::Nic {
                continue;
            }
            let uuid = match d.kind {
                DeviceKind::Mig => str_attr(d, "gpu.nvidia.com/parentUUID"),
                _ => str_attr(d, "gpu.nvidia.com/uuid"),
            };
            let found = uuid
                .and_then(|u| by_uuid.get(u))
                .or_else(|| str_attr(d, PCI_BUS_ID).and_then(|b| by_bus.get(b)))
                .copied()
                .or(d.gpu);
            match found {
                Some(g) => {
                    d.gpu = Some(g);
                    tied.insert(g);
                }
                None => untied = true,
            }
        }
        if replaced.contains(GPU_DRIVER) {
            for g in &mut self.gpus {
                if untied || !tied.contains(&g.index) {
                    g.withheld = true;
                }
            }
        }
        let mut prints: Vec<u64> = devices.iter().map(fingerprint).collect();
        for (d, p) in kept_model {
            devices.push(d);
            prints.push(p);
        }
        self.device_prints = prints.into();
        self.devices = devices.into();
        drift
    }

    /// Compares and caps device-plugin resources (see
    /// [`Node::apply_scheduler_view`]).
    fn apply_device_plugin(&mut self, allocatable: &BTreeMap<String, String>) -> Vec<Drift> {
        let mut drift = Vec::new();
        let on = |g: &crate::device::PlannerGpu| {
            g.mig
                .as_ref()
                .is_some_and(|m| m.current_mode == MigMode::Enabled)
        };
        let whole = self.gpus.iter().filter(|g| !on(g)).count();
        let mut mig: BTreeMap<String, usize> = BTreeMap::new();
        for g in self.gpus.iter().filter(|g| on(g)) {
            for i in g.mig.iter().flat_map(|m| &m.gpu_instances) {
                *mig.entry(i.profile.clone()).or_insert(0) += 1;
            }
        }
        // Right after a boot the Node can be Ready before the device plugin
        // has registered: it then advertises nothing, or zeros. Nothing at
        // all advertised while the model has GPUs is read as not
        // advertised yet (no cap, no drift), not as a node without GPUs.
        let total = allocatable
            .iter()
            .filter(|(k, _)| k.as_str() == GPU_RESOURCE || k.starts_with(MIG_RESOURCE_PREFIX))
            .filter_map(|(_, q)| count(q))
            .fold(0usize, usize::saturating_add);
        if total == 0 && !self.gpus.is_empty() {
            return drift;
        }
        let mut resource = |name: &str, model: usize, shown: usize| {
            if model != shown {
                drift.push(Drift {
                    what: DriftKind::SchedulerResource,
                    declared: format!("{name}={model}"),
                    reported: format!("{name}={shown}"),
                });
            }
        };
        if let Some(n) = allocatable.get(GPU_RESOURCE).and_then(|q| count(q)) {
            resource(GPU_RESOURCE, whole, n);
            self.cap(n, |d| d.kind == DeviceKind::Gpu);
        }
        for (key, q) in allocatable {
            let Some(profile) = key.strip_prefix(MIG_RESOURCE_PREFIX) else {
                continue;
            };
            let Some(n) = count(q) else { continue };
            resource(key, mig.get(profile).copied().unwrap_or(0), n);
            self.cap(n, |d| {
                d.kind == DeviceKind::Mig
                    && d.consumes.is_empty()
                    && d.mig_profile() == Some(profile)
            });
        }
        drift
    }

    /// Keeps at most `n` of the NVIDIA devices `matching`, dropping those
    /// on the highest GPU indices first; their GPUs are withheld.
    fn cap(&mut self, n: usize, matching: impl Fn(&Device) -> bool) {
        let mut found: Vec<(usize, usize)> = self
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.driver == GPU_DRIVER && matching(d))
            .map(|(i, d)| (d.gpu.unwrap_or(usize::MAX), i))
            .collect();
        if found.len() <= n {
            return;
        }
        found.sort_unstable();
        let drop: BTreeSet<usize> = found[n..].iter().map(|&(_, i)| i).collect();
        for &(g, _) in &found[n..] {
            if let Some(pg) = self.gpus.iter_mut().find(|pg| pg.index == g) {
                pg.withheld = true;
            }
        }
        let keep = |i: &usize| !drop.contains(i);
        self.devices = (0..self.devices.len())
            .filter(keep)
            .map(|i| self.devices[i].clone())
            .collect();
        self.device_prints = (0..self.device_prints.len())
            .filter(keep)
            .map(|i| self.device_prints[i])
            .collect();
    }

    /// Sets the labels and taints Accord owns to `p`'s (owned labels `p`
    /// lacks are removed), leaving everyone else's alone: the node as
    /// kube-scheduler will see it once Accord has written `p`.
    pub fn apply_publication(&mut self, p: &Publication, topology: &TopologyConfig) {
        self.labels
            .retain(|k, _| !owns_label(topology, k) || p.labels.contains_key(k));
        // Only what differs is written: a node already labelled (by the
        // scheduler's view, or an earlier round) costs no allocation.
        for (k, v) in &p.labels {
            if self.labels.get(k) != Some(v) {
                self.labels.insert(k.clone(), v.clone());
            }
        }
        self.taints.retain(|t| !owns_taint(&t.key));
        self.taints.extend(p.taints.iter().cloned());
    }
}

/// Whether Accord owns the Node label `key`: exactly the topology labels
/// (`<label_prefix><level>` for each of `topology.levels`, and every
/// `also_label` key), [`GPU_MODEL_LABEL`], [`GPU_COUNT_LABEL`] and
/// [`RESERVATION_KEY`]. Owned keys are set to what Accord publishes and
/// removed when it publishes none; other keys under `label_prefix` are
/// not Accord's (the prefix may be shared, e.g. `topology.kubernetes.io/`
/// with the cloud provider's zone and region). Keys Kubernetes sets
/// ([`KUBERNETES_SET_LABELS`]) are never owned.
pub fn owns_label(topology: &TopologyConfig, key: &str) -> bool {
    if KUBERNETES_SET_LABELS.contains(&key) {
        return false;
    }
    matches!(key, GPU_MODEL_LABEL | GPU_COUNT_LABEL | RESERVATION_KEY)
        || key
            .strip_prefix(topology.label_prefix.as_str())
            .is_some_and(|level| topology.levels.iter().any(|l| l == level))
        || topology.also_label.values().flatten().any(|k| k == key)
}

impl Fleet {
    /// What Accord publishes on node `name`'s Kubernetes Node at `now`:
    /// its topology labels (`<label_prefix><level>` and the level's
    /// `also_label` keys, for the levels of `topology.levels`: the keys
    /// Accord owns), its GPU model and count (from the model it is
    /// planned with), and for a node of a non-lendable reservation active
    /// at `now`, the reservation's label and `NoSchedule` taint (the first
    /// such reservation by name). `None` when there is no such node.
    pub fn publication(&self, name: &str, now: u64) -> Option<Publication> {
        let node = self.node(name)?;
        let mut p = Publication::default();
        for (level, value) in &node.domains {
            if !self.topology.levels.contains(level) {
                continue;
            }
            let value = label_value(value);
            if value.is_empty() {
                continue;
            }
            p.labels.insert(
                format!("{}{level}", self.topology.label_prefix),
                value.clone(),
            );
            for key in self.topology.also_label.get(level).into_iter().flatten() {
                p.labels.insert(key.clone(), value.clone());
            }
        }
        if let Some(g) = node.gpus.first() {
            let model = label_value(&g.model);
            if !model.is_empty() {
                p.labels.insert(GPU_MODEL_LABEL.to_owned(), model);
            }
            p.labels
                .insert(GPU_COUNT_LABEL.to_owned(), node.gpus.len().to_string());
        }
        let reservation = self
            .reservations
            .iter()
            .filter(|r| {
                !r.lendable
                    && r.active(now)
                    && r.nodes.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
            })
            .min_by(|a, b| a.name.cmp(&b.name));
        if let Some(r) = reservation {
            let value = label_value(&r.name);
            p.labels.insert(RESERVATION_KEY.to_owned(), value.clone());
            p.taints.push(Taint {
                key: RESERVATION_KEY.to_owned(),
                value: Some(value),
                effect: TaintEffect::NoSchedule,
            });
        }
        Some(p)
    }
}
