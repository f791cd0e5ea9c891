//! What a machine's node-side Kubernetes software publishes, built from
//! its recording only: the kubelet (the Node, its capacity), NVIDIA's
//! device plugin with the "mixed" MIG strategy and GPU Feature Discovery
//! (`nvidia.com/*` resources and labels), and NVIDIA's DRA driver
//! (k8s-dra-driver-gpu, driver `gpu.nvidia.com`: one ResourceSlice).
//!
//! Written from those components' documented behaviour and source, from
//! the hardware model the machine's own agent discovers in its recording
//! (accord-agent's library), and independently of Accord: nothing here
//! reads the fleet file, its profiles, or the planner's device model, so
//! where a machine differs from its declaration the cluster shows the
//! machine, as a real one would, and the end-to-end tests can catch
//! Accord disagreeing with it. Topology and reservation labels and taints
//! are not here: accordd publishes those.

use std::collections::BTreeMap;

use accord::hardware::{Gpu, MigMode, NodeHardware, Source};
use serde_json::{json, Map, Value};

mod partitions;
pub use partitions::resource_slices;

/// The DRA driver's name (k8s-dra-driver-gpu).
pub const DRA_DRIVER: &str = "gpu.nvidia.com";

/// What the node's software reads on one machine: the hardware model the
/// agent discovers in the recording, and the NVML snapshot's driver-wide
/// facts (which the model does not carry).
#[derive(Debug, Clone)]
pub struct Machine {
    pub hw: NodeHardware,
    /// NVML's driver version (`535.54.03`).
    pub driver_version: Option<String>,
    /// NVML's CUDA driver version (`12020` = 12.2).
    pub cuda_driver_version: Option<i32>,
}

impl Machine {
    /// The GPUs NVML shows: what the device plugin, GFD and the DRA driver
    /// enumerate. A GPU only hwloc sees (no driver on it) reaches none of
    /// them.
    pub fn gpus(&self) -> Vec<&Gpu> {
        self.hw
            .gpus
            .iter()
            .filter(|g| g.sources.contains(&Source::Nvml))
            .collect()
    }

    /// One line for the narration: `8 x NVIDIA H100 80GB HBM3, MIG off`.
    pub fn describe(&self) -> String {
        let gpus = self.gpus();
        let Some(first) = gpus.first() else {
            return if self.hw.gpus.is_empty() {
                "no GPUs".to_owned()
            } else {
                format!("{} GPUs without NVML", self.hw.gpus.len())
            };
        };
        let mig = gpus.iter().filter(|g| mig_enabled(g)).count();
        let mig = match mig {
            0 => "MIG off".to_owned(),
            n if n == gpus.len() => "MIG on".to_owned(),
            n => format!("MIG on {n} of {}", gpus.len()),
        };
        format!(
            "{} x {}, {mig}",
            gpus.len(),
            first.model.as_deref().unwrap_or("GPU")
        )
    }
}

fn mig_enabled(g: &Gpu) -> bool {
    g.mig
        .as_ref()
        .is_some_and(|m| m.current_mode == MigMode::Enabled)
}

/// GFD's spelling of a product name in a label value (spaces to `-`),
/// kept to what a label value allows.
fn label_value(s: &str) -> String {
    let v: String = s
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    v.chars().take(63).collect()
}

/// The device plugin's resource name of a MIG profile (mixed strategy):
/// `nvidia.com/mig-1g.10gb`; `+me` becomes `.me`.
fn mig_resource(profile: &str) -> String {
    format!("nvidia.com/mig-{}", profile.replace('+', "."))
}

/// Every MIG device (compute instance) on the machine's MIG-enabled GPUs:
/// (profile name, GPU, GPU instance, compute instance).
type MigDevice<'a> = (
    &'a str,
    &'a Gpu,
    &'a accord::hardware::GpuInstance,
    &'a accord::hardware::ComputeInstance,
);

fn mig_devices<'a>(gpus: &[&'a Gpu]) -> Vec<MigDevice<'a>> {
    let mut out = Vec::new();
    for g in gpus {
        let Some(mig) = g.mig.as_ref().filter(|_| mig_enabled(g)) else {
            continue;
        };
        for gi in &mig.gpu_instances {
            for ci in &gi.compute_instances {
                out.push((gi.profile.as_str(), *g, gi, ci));
            }
        }
    }
    out
}

/// The Kubernetes Node the machine's kubelet registers (Ready), with the
/// device plugin's resources and GPU Feature Discovery's labels.
///
/// - labels: `kubernetes.io/hostname`; with NVML GPUs, GFD's
///   `nvidia.com/gpu.product` (the first GPU's product name, spaces to
///   `-`), `gpu.count`, `gpu.memory` (MiB), `gpu.family`,
///   `gpu.compute.major/minor`, `gpu.machine`, `mig.strategy=mixed`,
///   `mig.capable`, and per MIG profile present `mig-<profile>.count`,
///   `.memory`, `.multiprocessors`;
/// - capacity = allocatable: `cpu` the recording's hardware threads,
///   `memory` its bytes, `pods` 110, `nvidia.com/gpu` the GPUs with MIG
///   disabled (0 when all are MIG), `nvidia.com/mig-<profile>` one per
///   MIG device (the device plugin's mixed strategy);
/// - no taints, no topology or reservation labels (accordd's to publish).
pub fn node_object(name: &str, m: &Machine) -> Value {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".to_owned(), name.to_owned());
    let mut alloc = BTreeMap::new();
    alloc.insert("cpu".to_owned(), m.hw.machine.threads.to_string());
    alloc.insert("memory".to_owned(), m.hw.machine.memory_bytes.to_string());
    alloc.insert("pods".to_owned(), "110".to_owned());
    let gpus = m.gpus();
    if let Some(first) = gpus.first() {
        let mut gfd = |k: &str, v: String| {
            labels.insert(format!("nvidia.com/{k}"), v);
        };
        if let Some(model) = &first.model {
            gfd("gpu.product", label_value(model));
        }
        gfd("gpu.count", gpus.len().to_string());
        if let Some(bytes) = first.memory_bytes {
            gfd("gpu.memory", (bytes >> 20).to_string());
        }
        if let Some(arch) = &first.architecture {
            gfd("gpu.family", label_value(&arch.to_lowercase()));
        }
        if let Some((major, minor)) = first
            .compute_capability
            .as_deref()
            .and_then(|c| c.split_once('.'))
        {
            gfd("gpu.compute.major", major.to_owned());
            gfd("gpu.compute.minor", minor.to_owned());
        }
        if let Some(product) = &m.hw.machine.product {
            gfd("gpu.machine", label_value(product));
        }
        gfd("mig.strategy", "mixed".to_owned());
        let capable = gpus
            .iter()
            .any(|g| g.mig.as_ref().is_some_and(|s| s.capable));
        gfd("mig.capable", capable.to_string());
        let whole = gpus.iter().filter(|g| !mig_enabled(g)).count();
        alloc.insert("nvidia.com/gpu".to_owned(), whole.to_string());
        let mut per_profile: BTreeMap<&str, (usize, &Gpu)> = BTreeMap::new();
        for (profile, g, _, _) in mig_devices(&gpus) {
            per_profile.entry(profile).or_insert((0, g)).0 += 1;
        }
        for (profile, (count, g)) in per_profile {
            let key = format!("nvidia.com/mig-{}", profile.replace('+', "."));
            labels.insert(format!("{key}.count"), count.to_string());
            if let Some(p) = g.mig.as_ref().and_then(|s| s.profile(profile)) {
                labels.insert(format!("{key}.memory"), p.memory_mib.to_string());
                if let Some(sm) = p.sm_count {
                    labels.insert(format!("{key}.multiprocessors"), sm.to_string());
                }
            }
            alloc.insert(mig_resource(profile), count.to_string());
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
        },
    })
}

/// NVIDIA's brand as go-nvlib names NVML's brand type. The recordings do
/// not carry it; it follows the product name (data-centre GPUs named
/// `NVIDIA ...` are NVML_BRAND_NVIDIA).
fn brand(model: &str) -> &'static str {
    for (prefix, brand) in [
        ("NVIDIA RTX", "NvidiaRTX"),
        ("Quadro RTX", "QuadroRTX"),
        ("GeForce RTX", "GeForceRTX"),
        ("TITAN RTX", "TitanRTX"),
        ("NVIDIA", "Nvidia"),
        ("Tesla", "Tesla"),
        ("Quadro", "Quadro"),
        ("GeForce", "GeForce"),
        ("TITAN", "Titan"),
    ] {
        if model.starts_with(prefix) {
            return brand;
        }
    }
    "Unknown"
}

/// A version as the DRA driver publishes it (Masterminds semver, which
/// drops leading zeros and fills in missing parts): `535.54.03` →
/// `535.54.3`, `9.0` → `9.0.0`.
fn semver(v: &str) -> String {
    let parts: Vec<Option<u64>> = v.split('.').map(|p| p.parse().ok()).collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(Option::is_none) {
        return v.to_owned();
    }
    let mut n: Vec<u64> = parts.into_iter().flatten().collect();
    n.resize(3, 0);
    format!("{}.{}.{}", n[0], n[1], n[2])
}

/// A byte count as Kubernetes writes a BinarySI quantity: the largest
/// binary suffix that divides it (`81559Mi`).
pub fn binary_quantity(bytes: u64) -> String {
    for (shift, suffix) in [
        (60, "Ei"),
        (50, "Pi"),
        (40, "Ti"),
        (30, "Gi"),
        (20, "Mi"),
        (10, "Ki"),
    ] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// How a served `resource.k8s.io` version spells a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SliceShape {
    /// v1alpha3: `basic: {attributes, capacity: {name: quantity}}`.
    Alpha3,
    /// v1beta1: `basic: {attributes, capacity: {name: {value}}}`.
    Beta1,
    /// v1beta2 and v1: `attributes`, `capacity: {name: {value}}` on the
    /// device itself.
    Flat,
}

fn shape(api_version: &str) -> SliceShape {
    match api_version.rsplit('/').next().unwrap_or("") {
        "v1alpha3" => SliceShape::Alpha3,
        "v1beta1" => SliceShape::Beta1,
        _ => SliceShape::Flat,
    }
}

fn device(
    shape: SliceShape,
    name: String,
    attributes: Map<String, Value>,
    capacity: BTreeMap<String, String>,
) -> Value {
    let capacity: Map<String, Value> = capacity
        .into_iter()
        .map(|(k, q)| {
            let v = match shape {
                SliceShape::Alpha3 => json!(q),
                SliceShape::Beta1 | SliceShape::Flat => json!({"value": q}),
            };
            (k, v)
        })
        .collect();
    match shape {
        SliceShape::Alpha3 | SliceShape::Beta1 => json!({
            "name": name,
            "basic": {"attributes": attributes, "capacity": capacity},
        }),
        SliceShape::Flat => json!({
            "name": name,
            "attributes": attributes,
            "capacity": capacity,
        }),
    }
}

/// The ResourceSlice NVIDIA's DRA driver publishes for the machine, at
/// `api_version` (`resource.k8s.io/v1`, `v1beta2`, `v1beta1`,
/// `v1alpha3`: the spelling follows it); `None` when NVML shows no GPU.
///
/// One pool named after the node, one slice. Devices as the driver's
/// `deviceinfo.go` makes them: a GPU with MIG disabled is `gpu-<index>`
/// (attributes `type=gpu`, `uuid`, `productName`, `brand`,
/// `architecture`, `cudaComputeCapability`, `driverVersion`,
/// `cudaDriverVersion` (versions), `pcieBusID`,
/// `resource.kubernetes.io/pcieRoot`; capacity `memory`); a MIG-enabled
/// GPU publishes its MIG devices instead, one per existing instance,
/// `gpu-<index>-mig-<profile id>-<start>-<size>` (`type=mig`, `uuid`,
/// `parentUUID`, `profile`, the parent's product attributes and bus id;
/// capacity `multiprocessors`, `memory`, `memorySlice<i>`).
pub fn resource_slice(node: &str, m: &Machine, api_version: &str) -> Option<Value> {
    let gpus = m.gpus();
    if gpus.is_empty() {
        return None;
    }
    let shape = shape(api_version);
    let s = |v: &str| json!({"string": v});
    let ver = |v: &str| json!({"version": semver(v)});
    let cuda = m
        .cuda_driver_version
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    // What a GPU and its MIG devices share.
    let common = |g: &Gpu| {
        let mut a = Map::new();
        if let Some(model) = &g.model {
            a.insert("productName".into(), s(model));
            a.insert("brand".into(), s(brand(model)));
        }
        if let Some(arch) = &g.architecture {
            a.insert("architecture".into(), s(arch));
        }
        if let Some(cc) = &g.compute_capability {
            a.insert("cudaComputeCapability".into(), ver(cc));
        }
        if let Some(d) = &m.driver_version {
            a.insert("driverVersion".into(), ver(d));
        }
        if let Some(c) = &cuda {
            a.insert("cudaDriverVersion".into(), ver(c));
        }
        a.insert("pcieBusID".into(), s(&g.pci_bus_id.to_string()));
        if let Some(root) = &g.pcie_root {
            a.insert("resource.kubernetes.io/pcieRoot".into(), s(root));
        }
        a
    };
    let mut devices = Vec::new();
    for g in &gpus {
        if mig_enabled(g) {
            continue;
        }
        let mut a = common(g);
        a.insert("type".into(), s("gpu"));
        if let Some(uuid) = &g.uuid {
            a.insert("uuid".into(), s(uuid));
        }
        let mut capacity = BTreeMap::new();
        if let Some(bytes) = g.memory_bytes {
            capacity.insert("memory".to_owned(), binary_quantity(bytes));
        }
        devices.push(device(shape, format!("gpu-{}", g.index), a, capacity));
    }
    for (profile, g, gi, ci) in mig_devices(&gpus) {
        let (Some(id), Some(placement)) = (gi.profile_id, gi.placement) else {
            continue;
        };
        let mut a = common(g);
        a.insert("type".into(), s("mig"));
        a.insert("profile".into(), s(profile));
        if let Some(uuid) = &ci.uuid {
            a.insert("uuid".into(), s(uuid));
        }
        if let Some(uuid) = &g.uuid {
            a.insert("parentUUID".into(), s(uuid));
        }
        let p = g.mig.as_ref().and_then(|st| st.profile(profile));
        let mut capacity = BTreeMap::new();
        if let Some(sm) = p.and_then(|p| p.sm_count).or(ci.sm_count) {
            capacity.insert("multiprocessors".to_owned(), sm.to_string());
        }
        if let Some(mib) = p.map(|p| p.memory_mib).or(ci.memory_mib) {
            capacity.insert("memory".to_owned(), binary_quantity(mib << 20));
        }
        for i in placement.start..placement.start + placement.size {
            capacity.insert(format!("memorySlice{i}"), "1".to_owned());
        }
        devices.push(device(
            shape,
            format!(
                "gpu-{}-mig-{id}-{}-{}",
                g.index, placement.start, placement.size
            ),
            a,
            capacity,
        ));
    }
    Some(json!({
        "apiVersion": api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node)},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))
}

/// Whether the device plugin or GFD writes `key` (a label or a resource):
/// what they publish again when the machine's GPUs change.
fn nvidia_published(key: &str) -> bool {
    // `nvidia.com/mig.config` and `.config.state` are the GPU Operator's
    // mig-manager's (and the admin's), `nvidia.com/gpu.deploy.*` its node
    // labeller's (and mig-manager's), not the device plugin's.
    key.starts_with("nvidia.com/")
        && !key.starts_with("nvidia.com/mig.config")
        && !key.starts_with("nvidia.com/gpu.deploy.")
}

/// The stored Node `node` (others' labels and taints on it) after the
/// device plugin and GFD publish `fresh` (a [`node_object`] of the machine
/// as it is now, after a MIG repartition): `nvidia.com/gpu` and
/// `nvidia.com/mig-*` capacity and allocatable and GFD's `nvidia.com/`
/// labels are `fresh`'s, those of profiles gone are removed; nothing else
/// changes.
pub fn republish_node(node: &mut Value, fresh: &Value) {
    let merge = |stored: &mut Value, fresh: &Value| {
        if !stored.is_object() {
            *stored = json!({});
        }
        if let Some(m) = stored.as_object_mut() {
            m.retain(|k, _| !nvidia_published(k));
            for (k, v) in fresh.as_object().into_iter().flatten() {
                if nvidia_published(k) {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
    };
    merge(
        &mut node["metadata"]["labels"],
        &fresh["metadata"]["labels"],
    );
    merge(
        &mut node["status"]["capacity"],
        &fresh["status"]["capacity"],
    );
    merge(
        &mut node["status"]["allocatable"],
        &fresh["status"]["allocatable"],
    );
}

/// The stored slice after the DRA driver publishes `fresh` (a
/// [`resource_slice`] of the machine as it is now): `fresh`'s devices in
/// the pool's next generation, as the driver's publisher replaces a pool
/// whose devices changed.
pub fn republish_slice(slice: &mut Value, fresh: &Value) {
    let generation = slice["spec"]["pool"]["generation"].as_u64().unwrap_or(0) + 1;
    slice["spec"] = fresh["spec"].clone();
    slice["spec"]["pool"]["generation"] = json!(generation);
}

/// The name of a node's slice (the real driver's is generated:
/// `<node>-gpu.nvidia.com-<random>`).
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRA_DRIVER}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recordings::{Recording, BUILTINS};

    fn machine(name: &str) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let b = crate::recordings::builtin(name).unwrap();
        Recording::write_builtin(b, dir.path())
            .unwrap()
            .discover()
            .unwrap()
    }

    fn alloc(node: &Value, key: &str) -> Option<String> {
        node["status"]["allocatable"][key]
            .as_str()
            .map(str::to_owned)
    }

    /// Each built-in recording, as the node's software publishes it.
    #[test]
    fn nodes_show_each_builtin_recording() {
        let m = machine("h100-8gpu");
        let n = node_object("a", &m);
        assert_eq!(alloc(&n, "nvidia.com/gpu").as_deref(), Some("8"));
        assert_eq!(alloc(&n, "cpu").as_deref(), Some("4"));
        assert_eq!(alloc(&n, "memory").as_deref(), Some("1621972275200"));
        assert_eq!(alloc(&n, "pods").as_deref(), Some("110"));
        assert!(alloc(&n, "nvidia.com/mig-1g.10gb").is_none());
        let l = &n["metadata"]["labels"];
        assert_eq!(l["kubernetes.io/hostname"], "a");
        assert_eq!(l["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(l["nvidia.com/gpu.count"], "8");
        assert_eq!(l["nvidia.com/gpu.memory"], "81559");
        assert_eq!(l["nvidia.com/mig.strategy"], "mixed");
        assert_eq!(l["nvidia.com/gpu.family"], "hopper");
        assert_eq!(n["spec"], json!({}), "no taints: accordd's to set");
        assert!(
            l.as_object()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("topology.") && !k.starts_with("accord.dev/")),
            "{l}"
        );
        assert_eq!(m.describe(), "8 x NVIDIA H100 80GB HBM3, MIG off");

        let n = node_object("b", &machine("h100-7gpu"));
        assert_eq!(alloc(&n, "nvidia.com/gpu").as_deref(), Some("7"));
        assert_eq!(n["metadata"]["labels"]["nvidia.com/gpu.count"], "7");

        let n = node_object("c", &machine("h100-8gpu-mig-1g"));
        assert_eq!(alloc(&n, "nvidia.com/gpu").as_deref(), Some("0"));
        assert_eq!(alloc(&n, "nvidia.com/mig-1g.10gb").as_deref(), Some("56"));
        assert_eq!(
            n["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"],
            "56"
        );
        assert_eq!(n["metadata"]["labels"]["nvidia.com/gpu.count"], "8");

        // Mixed: 4 disabled + 1 disabled now (enabled pending) whole; 7 + 1
        // 1g.10gb, one 2g.20gb, one 3g.40gb; the enabled GPU without
        // instances publishes nothing.
        let n = node_object("d", &machine("h100-8gpu-mixed-mig"));
        assert_eq!(alloc(&n, "nvidia.com/gpu").as_deref(), Some("5"));
        assert_eq!(alloc(&n, "nvidia.com/mig-1g.10gb").as_deref(), Some("8"));
        assert_eq!(alloc(&n, "nvidia.com/mig-2g.20gb").as_deref(), Some("1"));
        assert_eq!(alloc(&n, "nvidia.com/mig-3g.40gb").as_deref(), Some("1"));
    }

    /// The DRA driver's slice: device names, attributes and capacity as
    /// k8s-dra-driver-gpu spells them, per served API version.
    #[test]
    fn resource_slices_follow_the_dra_driver() {
        let m = machine("h100-8gpu");
        let s = resource_slice("n1", &m, "resource.k8s.io/v1").unwrap();
        assert_eq!(s["spec"]["driver"], "gpu.nvidia.com");
        assert_eq!(s["spec"]["nodeName"], "n1");
        assert_eq!(s["spec"]["pool"]["name"], "n1");
        let devices = s["spec"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 8);
        let d = &devices[0];
        assert_eq!(d["name"], "gpu-0");
        let a = &d["attributes"];
        assert_eq!(a["type"], json!({"string": "gpu"}));
        assert_eq!(a["productName"], json!({"string": "NVIDIA H100 80GB HBM3"}));
        assert_eq!(a["brand"], json!({"string": "Nvidia"}));
        assert_eq!(a["architecture"], json!({"string": "Hopper"}));
        assert_eq!(a["cudaComputeCapability"], json!({"version": "9.0.0"}));
        assert_eq!(a["driverVersion"], json!({"version": "535.54.3"}));
        assert_eq!(a["cudaDriverVersion"], json!({"version": "12.2.0"}));
        assert_eq!(a["pcieBusID"], json!({"string": "0000:34:00.0"}));
        assert_eq!(
            a["resource.kubernetes.io/pcieRoot"],
            json!({"string": "pci0000:2b"})
        );
        assert!(a["uuid"]["string"].as_str().unwrap().starts_with("GPU-"));
        assert_eq!(d["capacity"]["memory"], json!({"value": "81559Mi"}));

        let s = resource_slice("n1", &m, "resource.k8s.io/v1beta1").unwrap();
        let d = &s["spec"]["devices"][0];
        assert_eq!(d["basic"]["attributes"]["type"], json!({"string": "gpu"}));
        assert_eq!(
            d["basic"]["capacity"]["memory"],
            json!({"value": "81559Mi"})
        );
        let s = resource_slice("n1", &m, "resource.k8s.io/v1alpha3").unwrap();
        assert_eq!(
            s["spec"]["devices"][0]["basic"]["capacity"]["memory"],
            "81559Mi"
        );

        let s = resource_slice("n1", &machine("h100-7gpu"), "resource.k8s.io/v1").unwrap();
        assert_eq!(s["spec"]["devices"].as_array().unwrap().len(), 7);

        let s = resource_slice("n1", &machine("h100-8gpu-mig-1g"), "resource.k8s.io/v1").unwrap();
        let devices = s["spec"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 56);
        let d = &devices[0];
        assert_eq!(d["name"], "gpu-0-mig-19-0-1");
        assert_eq!(d["attributes"]["type"], json!({"string": "mig"}));
        assert_eq!(d["attributes"]["profile"], json!({"string": "1g.10gb"}));
        assert!(d["attributes"]["parentUUID"]["string"]
            .as_str()
            .unwrap()
            .starts_with("GPU-"));
        assert!(d["attributes"]["uuid"]["string"]
            .as_str()
            .unwrap()
            .starts_with("MIG-"));
        assert_eq!(d["capacity"]["memory"], json!({"value": "9984Mi"}));
        assert_eq!(d["capacity"]["multiprocessors"], json!({"value": "16"}));
        assert_eq!(d["capacity"]["memorySlice0"], json!({"value": "1"}));
        assert!(devices
            .iter()
            .all(|d| d["attributes"]["type"]["string"] == "mig"));
    }

    /// Every built-in recording discovers, and the stand-ins publish a
    /// Node and a slice for it.
    #[test]
    fn every_builtin_is_published() {
        for b in BUILTINS {
            let m = machine(b.name);
            assert!(!m.gpus().is_empty(), "{}", b.name);
            assert!(m.hw.discovery.disagreements.is_empty(), "{}", b.name);
            node_object("n", &m);
            resource_slice("n", &m, "resource.k8s.io/v1").unwrap();
        }
    }

    /// After a repartition the device plugin, GFD and the DRA driver
    /// publish the machine's new MIG devices; others' labels stay.
    #[test]
    fn a_repartition_is_published_again() {
        use accord_agent::mig::replay::ReplayedGpus;
        use accord_api::agent::{CommandResult, MigTarget};
        let dir = tempfile::tempdir().unwrap();
        let rec =
            Recording::write_builtin(crate::recordings::builtin("h100-8gpu").unwrap(), dir.path())
                .unwrap();
        let gpus = ReplayedGpus::new(rec.load_snapshot().unwrap().unwrap());
        let now = |g: &ReplayedGpus| rec.machine_with(Some(&g.snapshot())).unwrap();
        let mut stored = node_object("n", &now(&gpus));
        stored["metadata"]["labels"]["accord.dev/rack"] = json!("r1");
        stored["metadata"]["labels"]["nvidia.com/mig.config"] = json!("accord-1");
        let mut slice = resource_slice("n", &now(&gpus), "resource.k8s.io/v1").unwrap();

        let apply = |layout: &[&str]| {
            let t = MigTarget {
                index: 0,
                uuid: None,
                layout: layout.iter().map(|s| (*s).to_owned()).collect(),
            };
            assert_eq!(gpus.apply(&[t], &Default::default()), CommandResult::Done);
        };
        let sevens: Vec<String> = (0..7).map(|i| format!("1g.10gb@{i}")).collect();
        apply(&sevens.iter().map(String::as_str).collect::<Vec<_>>());
        let m = now(&gpus);
        republish_node(&mut stored, &node_object("n", &m));
        republish_slice(
            &mut slice,
            &resource_slice("n", &m, "resource.k8s.io/v1").unwrap(),
        );
        assert_eq!(alloc(&stored, "nvidia.com/gpu").as_deref(), Some("7"));
        assert_eq!(
            alloc(&stored, "nvidia.com/mig-1g.10gb").as_deref(),
            Some("7")
        );
        let l = &stored["metadata"]["labels"];
        assert_eq!(l["nvidia.com/mig-1g.10gb.count"], "7");
        assert_eq!(l["accord.dev/rack"], "r1");
        assert_eq!(l["nvidia.com/mig.config"], "accord-1");
        assert_eq!(slice["spec"]["pool"]["generation"], 2);
        let devices = slice["spec"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 14);
        assert_eq!(devices[7]["name"], "gpu-0-mig-19-0-1");

        // Again, to one whole instance: the 1g profile is gone everywhere.
        apply(&["7g.80gb@0"]);
        let m = now(&gpus);
        republish_node(&mut stored, &node_object("n", &m));
        republish_slice(
            &mut slice,
            &resource_slice("n", &m, "resource.k8s.io/v1").unwrap(),
        );
        assert_eq!(alloc(&stored, "nvidia.com/mig-1g.10gb"), None);
        assert_eq!(
            stored["status"]["capacity"]["nvidia.com/mig-1g.10gb"],
            Value::Null
        );
        assert_eq!(
            stored["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"],
            Value::Null
        );
        assert_eq!(
            alloc(&stored, "nvidia.com/mig-7g.80gb").as_deref(),
            Some("1")
        );
        assert_eq!(slice["spec"]["pool"]["generation"], 3);
        assert_eq!(slice["spec"]["devices"].as_array().unwrap().len(), 8);
    }

    #[test]
    fn quantities_and_versions_as_kubernetes_and_the_driver_spell_them() {
        assert_eq!(binary_quantity(85_520_809_984), "81559Mi");
        assert_eq!(binary_quantity(80 << 30), "80Gi");
        assert_eq!(binary_quantity(1000), "1000");
        assert_eq!(semver("535.54.03"), "535.54.3");
        assert_eq!(semver("9.0"), "9.0.0");
        assert_eq!(semver("beta"), "beta");
    }
}
