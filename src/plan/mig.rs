//! MIG reconfiguration proposals: repartition idle GPUs of running nodes so
//! that pending MIG requests fit without powering anything on. Layouts come
//! from the GPU's published profiles and placements, so they are valid for
//! that model.

use std::collections::{BTreeMap, BTreeSet};

use super::{Planner, PodItem};
use crate::device::{AttrValue, Device, DeviceKind, GPU_DRIVER, MEMORY};
use crate::fit::{fingerprint, DeviceUse, NodeUse};
use crate::fleet::Node;
use crate::hardware::{GpuInstance, MigMode, MigState};

/// A node as it would be after reconfiguring some of its GPUs.
pub(super) struct Override {
    pub node: Node,
    pub uses: NodeUse,
    pub prints: Vec<u64>,
    /// (GPU index, new layout `PROFILE@START`).
    pub gpus: Vec<(usize, Vec<String>)>,
}

/// One GPU that could be repartitioned, and how.
pub(super) struct Option_ {
    node: usize,
    gpu: usize,
    state: MigState,
}

fn idle(node: &Node, uses: &NodeUse, gpu: usize) -> bool {
    node.devices
        .iter()
        .zip(&uses.devices)
        .filter(|(d, _)| d.gpu == Some(gpu))
        .all(|(_, u)| !u.exclusive && u.shares == 0)
}

/// A full layout of `wanted` profiles (in order, as many as fit) on an
/// empty GPU with `base`'s published profiles.
fn layout(base: &MigState, wanted: &[String]) -> Option<MigState> {
    let mut state = MigState {
        capable: true,
        current_mode: MigMode::Enabled,
        pending_mode: MigMode::Enabled,
        profiles: base.profiles.clone(),
        gpu_instances: Vec::new(),
    };
    let mut id = 1;
    for profile in wanted {
        let p = base.profile(profile)?;
        while let Some(&placement) = state.free_placements(profile).ok()?.first() {
            state.gpu_instances.push(GpuInstance {
                id,
                profile: profile.clone(),
                profile_id: Some(p.id),
                placement: Some(placement),
                compute_instances: Vec::new(),
            });
            id += 1;
        }
    }
    (!state.gpu_instances.is_empty()).then_some(state)
}

/// Idle MIG-capable GPUs on running candidate nodes, in node then GPU order.
pub(super) fn options(p: &Planner<'_>, pods: &[PodItem<'_>], candidates: &[usize]) -> Vec<Option_> {
    let wanted: Vec<String> = pods
        .iter()
        .flat_map(|pod| pod.req.mig.keys().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for &i in candidates {
        if !p.up[i] {
            continue;
        }
        let node = &p.nodes[i];
        // A GPU the DRA driver partitions on allocation is its to lay out.
        for g in node
            .gpus
            .iter()
            .filter(|g| !g.withheld && !g.driver_partitions)
        {
            let Some(base) = g
                .mig
                .as_ref()
                .filter(|m| m.capable && !m.profiles.is_empty())
            else {
                continue;
            };
            if !idle(node, &p.uses[i], g.index) {
                continue;
            }
            if let Some(state) = layout(base, &wanted) {
                if !same_layout(&state, base) {
                    out.push(Option_ {
                        node: i,
                        gpu: g.index,
                        state,
                    });
                }
            }
        }
    }
    out
}

fn s(v: &str) -> AttrValue {
    AttrValue::String(v.to_owned())
}

/// Nodes as they would be with `chosen` applied.
pub(super) fn build(p: &Planner<'_>, chosen: &[Option_]) -> BTreeMap<usize, Override> {
    let mut out: BTreeMap<usize, Override> = BTreeMap::new();
    for opt in chosen {
        let o = out.entry(opt.node).or_insert_with(|| Override {
            node: p.nodes[opt.node].as_ref().clone(),
            uses: (*p.uses[opt.node]).clone(),
            prints: Vec::new(),
            gpus: Vec::new(),
        });
        let layout = relayout(&mut o.node, Some(&mut o.uses), opt.gpu, &opt.state);
        o.gpus.push((opt.gpu, layout));
    }
    for o in out.values_mut() {
        o.prints = o.node.devices.iter().map(fingerprint).collect();
    }
    out
}

/// Rebuilds GPU `gi`'s devices on `node` for `state`: the GPU's devices
/// (whole GPU, old instances) go, one device per instance of `state`
/// comes, with the attributes the GPU's devices shared (model, PCIe root,
/// NUMA...). `uses`, when given, is kept in step (new devices unused).
/// Returns the layout as `PROFILE@START`.
fn relayout(
    node: &mut Node,
    uses: Option<&mut NodeUse>,
    gi: usize,
    state: &MigState,
) -> Vec<String> {
    let template = node.devices.iter().find(|d| d.gpu == Some(gi)).cloned();
    let parent_uuid = template.as_ref().and_then(|d| {
        d.attr("gpu.nvidia.com/parentUUID")
            .or_else(|| d.attr("gpu.nvidia.com/uuid"))
            .cloned()
    });
    let mut devices: Vec<Device> = Vec::new();
    let mut kept_uses: Vec<DeviceUse> = Vec::new();
    for (k, d) in node.devices.iter().enumerate() {
        if d.gpu != Some(gi) {
            devices.push(d.clone());
            if let Some(u) = uses.as_deref() {
                kept_uses.push(u.devices.get(k).cloned().unwrap_or_default());
            }
        }
    }
    let mut layout = Vec::new();
    for inst in &state.gpu_instances {
        let mut attrs = template
            .as_ref()
            .map(|t| t.attributes.clone())
            .unwrap_or_default();
        attrs.retain(|k, _| {
            !matches!(
                k.as_str(),
                "gpu.nvidia.com/type"
                    | "gpu.nvidia.com/profile"
                    | "gpu.nvidia.com/uuid"
                    | "gpu.nvidia.com/parentUUID"
            )
        });
        attrs.insert("gpu.nvidia.com/type".into(), s("mig"));
        attrs.insert("gpu.nvidia.com/profile".into(), s(&inst.profile));
        if let Some(u) = &parent_uuid {
            attrs.insert("gpu.nvidia.com/parentUUID".into(), u.clone());
        }
        let mem = state
            .profile(&inst.profile)
            .map_or(0, |pr| pr.memory_mib.saturating_mul(1 << 20));
        devices.push(Device {
            name: format!("gpu-{gi}-mig-{}", inst.id).into(),
            driver: GPU_DRIVER.into(),
            kind: DeviceKind::Mig,
            attributes: attrs,
            capacity: BTreeMap::from([(MEMORY.to_owned(), crate::device::to_milli(mem))]),
            shared: None,
            gpu: Some(gi),
            consumes: BTreeMap::new(),
            taints: Vec::new(),
        });
        kept_uses.push(DeviceUse::default());
        let start = inst.placement.map_or(0, |pl| pl.start);
        layout.push(format!("{}@{start}", inst.profile));
    }
    node.devices = devices.into();
    if let Some(u) = uses {
        u.devices = kept_uses;
    }
    if let Some(g) = node.gpus.iter_mut().find(|g| g.index == gi) {
        g.mig = Some(std::sync::Arc::new(state.clone()));
    }
    layout
}

/// `node` as it will be once GPU `gpu` has the MIG layout `state` (a
/// repartition under way): its devices and fingerprints rebuilt, so the
/// planner counts the new instances as committed and does not propose the
/// same repartition again.
pub fn expect_layout(node: &mut Node, gpu: usize, state: &MigState) {
    relayout(node, None, gpu, state);
    node.device_prints = node.devices.iter().map(fingerprint).collect();
}

/// Whether two MIG states hold the same instances (profile and placement),
/// whatever their ids and compute instances.
pub fn same_layout(a: &MigState, b: &MigState) -> bool {
    let key = |m: &MigState| {
        let mut v: Vec<(String, Option<crate::hardware::MigPlacement>)> = m
            .gpu_instances
            .iter()
            .map(|g| (g.profile.clone(), g.placement))
            .collect();
        v.sort();
        v
    };
    a.current_mode == b.current_mode && key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::to_milli;
    use crate::hardware::{MigPlacement, MigProfile};

    const FLEET: &str = r#"
[profiles.h100]
gpus = 1
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "16"
memory = "64Gi"

[[nodes]]
name = "n1"
profile = "h100"
power = "on"
"#;

    #[test]
    fn a_mig_profile_memory_past_u64_bytes_saturates_not_wraps() {
        let mut fleet =
            crate::fleet::Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into()))
                .unwrap();
        let mut node = fleet.nodes.remove(0);
        // 2^44 MiB is 2^64 bytes: `<< 20` dropped every bit (0 bytes).
        let placement = MigPlacement { start: 0, size: 1 };
        let state = MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: vec![MigProfile {
                id: 19,
                name: "1g.huge".into(),
                slices: 1,
                memory_mib: 1 << 44,
                max_count: 7,
                sm_count: None,
                placements: vec![placement],
            }],
            gpu_instances: vec![GpuInstance {
                id: 1,
                profile: "1g.huge".into(),
                profile_id: Some(19),
                placement: Some(placement),
                compute_instances: Vec::new(),
            }],
        };
        expect_layout(&mut node, 0, &state);
        let mig = node
            .devices
            .iter()
            .find(|d| d.kind == DeviceKind::Mig)
            .expect("a MIG device");
        assert_eq!(mig.capacity[MEMORY], to_milli(u64::MAX));
    }
}
