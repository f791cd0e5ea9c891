//! The DRA driver's ResourceSlices with NVIDIA's dynamic MIG: MIG
//! placements as partitionable devices (KEP-4815) on per-GPU shared
//! counters.

use serde_json::{json, Map, Value};

use super::{
    binary_quantity, brand, resource_slice, shape, slice_name, Machine, SliceShape, DRA_DRIVER,
};

/// The DRA driver's slices for `node`: with `dynamic_mig` (NVIDIA's
/// `DynamicMIG` feature gate) and `resource.k8s.io/v1`, as its
/// `cmd/gpu-kubelet-plugin/partitions.go` publishes a MIG-capable GPU:
/// one counter set per GPU, `gpu-<index>-counter-set`, with a counter per
/// capacity (the largest profile's; the lab's recordings carry
/// `multiprocessors` and `memory`) and `memory-slice-<i>` (1 each); the
/// whole GPU `gpu-<index>` drawing all of them; every placement of every
/// profile a device `gpu-<index>-mig-<profile without dots>-<profile
/// id>-<start>` (`type=mig`, `parentUUID`, `profile`, the parent's
/// product attributes) drawing its capacities and its memory slices. From
/// 1.35 the counters go in a slice of their own (`driver.go`,
/// `publishResources`). Without: [`resource_slice`].
pub fn resource_slices(
    node: &str,
    m: &Machine,
    api_version: &str,
    dynamic_mig: bool,
) -> Vec<Value> {
    let Some(mut slice) = resource_slice(node, m, api_version) else {
        return Vec::new();
    };
    if !dynamic_mig || shape(api_version) != SliceShape::Flat {
        return vec![slice];
    }
    let s = |v: &str| json!({"string": v});
    let mut devices: Vec<Value> = Vec::new();
    let mut counter_sets = Vec::new();
    for g in m.gpus() {
        let Some(mig) = g
            .mig
            .as_ref()
            .filter(|st| st.capable && !st.profiles.is_empty())
        else {
            continue;
        };
        let set = format!("gpu-{}-counter-set", g.index);
        let slices = mig
            .profiles
            .iter()
            .flat_map(|p| p.placements.iter().map(|pl| pl.start + pl.size))
            .max()
            .unwrap_or(0);
        let max_sm = mig
            .profiles
            .iter()
            .filter_map(|p| p.sm_count)
            .max()
            .unwrap_or(0);
        let max_mem = mig.profiles.iter().map(|p| p.memory_mib).max().unwrap_or(0) << 20;
        let counters = |sm: u32, mem: u64, start: u32, size: u32| {
            let mut c = Map::new();
            c.insert("multiprocessors".into(), json!({"value": sm.to_string()}));
            c.insert("memory".into(), json!({"value": binary_quantity(mem)}));
            for i in start..start + size {
                c.insert(format!("memory-slice-{i}"), json!({"value": "1"}));
            }
            Value::Object(c)
        };
        counter_sets.push(json!({"name": set, "counters": counters(max_sm, max_mem, 0, slices)}));
        // The whole GPU draws everything (the static slice's `gpu-<index>`,
        // whose MIG mode the driver now owns).
        let mut whole = slice["spec"]["devices"]
            .as_array()
            .and_then(|d| {
                d.iter()
                    .find(|d| d["name"] == format!("gpu-{}", g.index))
                    .cloned()
            })
            .unwrap_or_else(
                || json!({"name": format!("gpu-{}", g.index), "attributes": {"type": s("gpu")}}),
            );
        whole["consumesCounters"] =
            json!([{"counterSet": set, "counters": counters(max_sm, max_mem, 0, slices)}]);
        devices.push(whole);
        for p in &mig.profiles {
            let mut a = Map::new();
            a.insert("type".into(), s("mig"));
            a.insert("profile".into(), s(&p.name));
            if let Some(uuid) = &g.uuid {
                a.insert("parentUUID".into(), s(uuid));
            }
            if let Some(model) = &g.model {
                a.insert("productName".into(), s(model));
                a.insert("brand".into(), s(brand(model)));
            }
            a.insert("pcieBusID".into(), s(&g.pci_bus_id.to_string()));
            let sm = p.sm_count.unwrap_or(0);
            let mem = p.memory_mib << 20;
            for pl in &p.placements {
                devices.push(json!({
                    "name": format!("gpu-{}-mig-{}-{}-{}", g.index, p.name.replace('.', ""), p.id, pl.start),
                    "attributes": a,
                    "capacity": {"multiprocessors": {"value": sm.to_string()}, "memory": {"value": binary_quantity(mem)}},
                    "consumesCounters": [{"counterSet": set, "counters": counters(sm, mem, pl.start, pl.size)}],
                }));
            }
        }
    }
    if counter_sets.is_empty() {
        return vec![slice];
    }
    // Whole GPUs not MIG-capable stay as they were.
    let partitioned: Vec<String> = devices
        .iter()
        .filter_map(|d| d["name"].as_str().map(str::to_owned))
        .collect();
    for d in slice["spec"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let name = d["name"].as_str().unwrap_or_default().to_owned();
        let gpu_of = |n: &str| n.split('-').nth(1).map(str::to_owned);
        if !partitioned.iter().any(|p| gpu_of(p) == gpu_of(&name)) {
            devices.push(d);
        }
    }
    slice["spec"]["devices"] = Value::Array(devices);
    slice["spec"]["pool"]["resourceSliceCount"] = json!(2);
    let counters = json!({
        "apiVersion": api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-counters", slice_name(node))},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": counter_sets,
        },
    });
    vec![counters, slice]
}
