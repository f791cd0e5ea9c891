//! The supply side as the cluster shows it: Nodes (labels, taints,
//! allocatable, Ready) mapped to Accord nodes by name, and the devices DRA
//! drivers publish in ResourceSlices, in Accord's device model. Pure.

use std::collections::BTreeMap;
use std::sync::Arc;

use accord::demand::{Taint, TaintEffect};
use accord::device::{AttrValue, Device, DeviceKind, RequestPolicy};
use accord::quantity;
use accord::truth::SchedulerView;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde::Serialize;

/// What the DRA drivers publish for one node: its devices and the counter
/// sets of their pools (`sharedCounters`, partitionable devices).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Published {
    pub devices: Vec<Device>,
    pub counters: accord::device::CounterSets,
}

/// The counter sets a slice publishes (`spec.sharedCounters`): set →
/// counter → total. Since 1.35 they sit in slices of their own, in the
/// same pool as the devices that draw on them.
pub fn slice_counters(slice: &ResourceSlice) -> Result<accord::device::CounterSets, String> {
    let mut out = accord::device::CounterSets::new();
    for set in slice.spec.shared_counters.iter().flatten() {
        let mut counters = BTreeMap::new();
        for (name, c) in &set.counters {
            counters.insert(
                name.clone(),
                quantity::parse(&c.value.0)
                    .map_err(|e| format!("counter set {}: counter {name}: {e}", set.name))?,
            );
        }
        out.insert(set.name.clone(), counters);
    }
    Ok(out)
}

/// A Kubernetes Node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ClusterNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: BTreeMap<String, String>,
    /// The `Ready` condition is True.
    pub ready: bool,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// Annotated `accord.dev/do-not-disrupt: "true"` by an admin.
    pub do_not_disrupt: bool,
    /// `metadata.uid` and `.resourceVersion`: a delete is made only of
    /// the Node seen (preconditions).
    pub uid: String,
    pub resource_version: String,
    /// The annotations kept when Accord deletes the Node of a dark
    /// machine ([`accord::truth::keeps_annotation`]); no others.
    pub annotations: BTreeMap<String, String>,
}

/// The taint kube-scheduler's NodeUnschedulable filter treats a cordon as
/// (`pkg/scheduler/framework/plugins/nodeunschedulable`): the node
/// lifecycle controller puts it on a cordoned Node, but a moment later.
pub const UNSCHEDULABLE_TAINT: &str = accord::truth::UNSCHEDULABLE_TAINT_KEY;

/// The node as kube-scheduler sees it, with the devices DRA drivers
/// publish for it (`None`: none published, or the cluster serves no DRA).
pub fn scheduler_view(node: &ClusterNode, published: Option<Published>) -> SchedulerView {
    let (devices, counters) = match published {
        Some(p) => (Some(p.devices), p.counters),
        None => (None, Default::default()),
    };
    let mut taints = node.taints.clone();
    // A cordon is a NoSchedule taint to the scheduler from the moment it
    // is set: only pods that tolerate it (node agents) go there.
    if node.unschedulable && !taints.iter().any(|t| t.key == UNSCHEDULABLE_TAINT) {
        taints.push(Taint {
            key: UNSCHEDULABLE_TAINT.to_owned(),
            value: None,
            effect: TaintEffect::NoSchedule,
        });
    }
    SchedulerView {
        labels: node.labels.clone(),
        taints,
        allocatable: node.allocatable.clone(),
        devices,
        counters,
    }
}

pub fn cluster_node(n: &Node) -> ClusterNode {
    let spec = n.spec.as_ref();
    let status = n.status.as_ref();
    ClusterNode {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let effect = match t.effect.as_str() {
                    "NoSchedule" => TaintEffect::NoSchedule,
                    "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                    "NoExecute" => TaintEffect::NoExecute,
                    _ => return None,
                };
                Some(Taint {
                    key: t.key.clone(),
                    value: t.value.clone().filter(|v| !v.is_empty()),
                    effect,
                })
            })
            .collect(),
        allocatable: status
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| a.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect())
            .unwrap_or_default(),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        do_not_disrupt: n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DO_NOT_DISRUPT))
            .is_some_and(|v| v == "true"),
        uid: n.metadata.uid.clone().unwrap_or_default(),
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
        annotations: n
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| accord::truth::keeps_annotation(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

pub use accord::truth::DO_NOT_DISRUPT;

/// The node a slice's devices are on and the devices, in Accord's model.
/// Unqualified attribute and capacity names belong to the driver's domain
/// (`index` of `gpu.example.com` is `gpu.example.com/index`), as in DRA's
/// CEL environment. `None` for the node: the slice is not node-local
/// (`allNodes`, a node selector), which Accord does not plan with yet.
pub fn slice_devices(slice: &ResourceSlice) -> Result<(Option<String>, Vec<Device>), String> {
    let spec = &slice.spec;
    let driver = &spec.driver;
    let qualify = |name: &str| {
        if name.contains('/') {
            name.to_owned()
        } else {
            format!("{driver}/{name}")
        }
    };
    let mut out = Vec::new();
    for d in spec.devices.iter().flatten() {
        let mut attributes = BTreeMap::new();
        for (k, a) in d.attributes.iter().flatten() {
            let v = if let Some(b) = a.bool {
                AttrValue::Bool(b)
            } else if let Some(i) = a.int {
                AttrValue::Int(i)
            } else if let Some(s) = a.string.clone() {
                AttrValue::String(s)
            } else if let Some(v) = a.version.clone() {
                // A semver in DRA's CEL environment (`driverVersion`).
                AttrValue::Version { version: v }
            } else {
                continue;
            };
            attributes.insert(qualify(k), v);
        }
        let mut capacity = BTreeMap::new();
        let mut policies = BTreeMap::new();
        for (k, c) in d.capacity.iter().flatten() {
            let v = quantity::parse(&c.value.0)
                .map_err(|e| format!("device {}: capacity {k}: {e}", d.name))?;
            capacity.insert(qualify(k), v);
            if let Some(p) = &c.request_policy {
                let q = |x: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
                    x.as_ref().and_then(|q| quantity::parse(&q.0).ok())
                };
                policies.insert(
                    qualify(k),
                    RequestPolicy {
                        default: q(&p.default),
                        min: p.valid_range.as_ref().and_then(|r| q(&Some(r.min.clone()))),
                        step: p.valid_range.as_ref().and_then(|r| q(&r.step)),
                    },
                );
            }
        }
        let mut consumes = BTreeMap::new();
        for c in d.consumes_counters.iter().flatten() {
            let mut counters = BTreeMap::new();
            for (name, counter) in &c.counters {
                counters.insert(
                    name.clone(),
                    quantity::parse(&counter.value.0)
                        .map_err(|e| format!("device {}: counter {name}: {e}", d.name))?,
                );
            }
            consumes.insert(c.counter_set.clone(), counters);
        }
        let kind = match attributes.get(&qualify("type")) {
            Some(AttrValue::String(t)) if t == "mig" => DeviceKind::Mig,
            Some(AttrValue::String(t)) if t == "nic" => DeviceKind::Nic,
            _ if driver.contains("rdma") => DeviceKind::Nic,
            _ => DeviceKind::Gpu,
        };
        out.push(Device {
            name: Arc::from(d.name.as_str()),
            driver: driver.clone(),
            kind,
            attributes,
            capacity,
            shared: d
                .allow_multiple_allocations
                .unwrap_or(false)
                .then_some(policies),
            gpu: None,
            consumes,
            taints: d
                .taints
                .iter()
                .flatten()
                .map(|t| accord::device::DeviceTaint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone(),
                })
                .collect(),
        });
    }
    Ok((spec.node_name.clone(), out))
}

/// The slices that describe each pool now: a driver republishing a pool
/// (a restart, an upgrade) writes a new generation before deleting the
/// old one, so only each (driver, pool)'s highest generation counts, and
/// only once all of its `resourceSliceCount` slices are there (as the
/// scheduler's allocator does). Pools left out are named in the second
/// list. Keeps the input's order.
pub fn current_pools(slices: Vec<ResourceSlice>) -> (Vec<ResourceSlice>, Vec<String>) {
    // (driver, pool) → (highest generation, its slice count, slices seen at it)
    let mut pools: BTreeMap<(String, String), (i64, i64, i64)> = BTreeMap::new();
    for s in &slices {
        let key = (s.spec.driver.clone(), s.spec.pool.name.clone());
        let g = s.spec.pool.generation;
        let count = s.spec.pool.resource_slice_count;
        let e = pools.entry(key).or_insert((g, count, 0));
        if g > e.0 {
            *e = (g, count, 0);
        }
        if g == e.0 {
            e.2 += 1;
        }
    }
    let mut problems = Vec::new();
    for ((driver, pool), (g, count, seen)) in &pools {
        if seen < count {
            problems.push(format!(
                "ResourceSlice pool {pool} of {driver}: generation {g} has {seen} of {count} slices; not planned with until complete"
            ));
        }
    }
    let kept = slices
        .into_iter()
        .filter(|s| {
            let key = (s.spec.driver.clone(), s.spec.pool.name.clone());
            pools
                .get(&key)
                .is_some_and(|(g, count, seen)| s.spec.pool.generation == *g && seen >= count)
        })
        .collect();
    (kept, problems)
}

/// A DeviceTaintRule as Accord applies it: the taint, on the devices its
/// selector names (each of driver, pool, device matching when set).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaintRule {
    pub name: String,
    pub driver: Option<String>,
    pub pool: Option<String>,
    pub device: Option<String>,
    pub taint: accord::device::DeviceTaint,
}

/// Reads a DeviceTaintRule at any served version (v1, v1beta2,
/// v1alpha3: `spec.deviceSelector` and `spec.taint` have the same shape).
/// A rule that selects by device class or CEL (v1alpha3 only) is not
/// applied, and said.
pub fn taint_rule(v: &serde_json::Value) -> Result<TaintRule, String> {
    let name = v["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let spec = &v["spec"];
    let sel = &spec["deviceSelector"];
    for unsupported in ["deviceClassName", "selectors"] {
        if !sel[unsupported].is_null() {
            return Err(format!(
                "DeviceTaintRule {name}: selects by {unsupported}, which Accord does not apply (name a driver, pool or device)"
            ));
        }
    }
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let taint = &spec["taint"];
    let (Some(key), Some(effect)) = (text(&taint["key"]), text(&taint["effect"])) else {
        return Err(format!(
            "DeviceTaintRule {name}: spec.taint needs a key and an effect"
        ));
    };
    Ok(TaintRule {
        driver: text(&sel["driver"]),
        pool: text(&sel["pool"]),
        device: text(&sel["device"]),
        taint: accord::device::DeviceTaint {
            key,
            value: text(&taint["value"]).unwrap_or_default(),
            effect,
        },
        name,
    })
}

/// Adds to `devices` (read from `slice`) the taints of the rules that
/// select them, as the scheduler's allocator does.
pub fn apply_taint_rules(slice: &ResourceSlice, devices: &mut [Device], rules: &[TaintRule]) {
    let spec = &slice.spec;
    for r in rules {
        if r.driver.as_deref().is_some_and(|d| d != spec.driver)
            || r.pool.as_deref().is_some_and(|p| p != spec.pool.name)
        {
            continue;
        }
        for d in devices.iter_mut() {
            if r.device.as_deref().is_some_and(|n| n != &*d.name) {
                continue;
            }
            if !d.taints.contains(&r.taint) {
                d.taints.push(r.taint.clone());
            }
        }
    }
}

/// What the current generation of each pool publishes, per node: each
/// node-local slice's devices (with the DeviceTaintRules that select
/// them) and the counter sets of the pools they come from. A device that
/// draws on a counter set its pool does not publish is said (the
/// allocator would not allocate it; nor does Accord's fit).
pub fn published(
    slices: Vec<ResourceSlice>,
    rules: &[TaintRule],
) -> (BTreeMap<String, Published>, Vec<String>) {
    let (slices, mut problems) = current_pools(slices);
    let mut pool_counters: BTreeMap<(String, String), accord::device::CounterSets> =
        BTreeMap::new();
    for s in &slices {
        let name = s.metadata.name.clone().unwrap_or_default();
        match slice_counters(s) {
            Ok(c) if !c.is_empty() => pool_counters
                .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
                .or_default()
                .extend(c),
            Ok(_) => {}
            Err(e) => problems.push(format!("ResourceSlice {name}: {e}")),
        }
    }
    let mut out: BTreeMap<String, Published> = BTreeMap::new();
    for s in slices {
        let name = s.metadata.name.clone().unwrap_or_default();
        if s.spec.devices.as_ref().is_none_or(|d| d.is_empty()) {
            // A counters-only slice (or an empty one): nothing to place.
            continue;
        }
        match slice_devices(&s) {
            Ok((Some(node), mut devices)) => {
                apply_taint_rules(&s, &mut devices, rules);
                let key = (s.spec.driver.clone(), s.spec.pool.name.clone());
                let counters = pool_counters.get(&key);
                for d in &devices {
                    for set in d.consumes.keys() {
                        if !counters.is_some_and(|c| c.contains_key(set)) {
                            problems.push(format!(
                                "ResourceSlice {name}: device {} draws on counter set {set}, which pool {} of {} does not publish; not allocatable",
                                d.name, key.1, key.0
                            ));
                        }
                    }
                }
                let p = out.entry(node).or_default();
                p.devices.extend(devices);
                if let Some(c) = counters {
                    p.counters.extend(c.clone());
                }
            }
            Ok((None, _)) => problems.push(format!(
                "ResourceSlice {name}: not node-local; not planned with"
            )),
            Err(e) => problems.push(format!("ResourceSlice {name}: {e}")),
        }
    }
    (out, problems)
}
