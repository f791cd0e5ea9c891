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

/// A Kubernetes Node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

/// The taint kube-scheduler's NodeUnschedulable filter treats a cordon as
/// (`pkg/scheduler/framework/plugins/nodeunschedulable`): the node
/// lifecycle controller puts it on a cordoned Node, but a moment later.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// The node as kube-scheduler sees it, with the devices DRA drivers
/// publish for it (`None`: none published, or the cluster serves no DRA).
pub fn scheduler_view(node: &ClusterNode, devices: Option<Vec<Device>>) -> SchedulerView {
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
            } else if let Some(s) = a.string.clone().or_else(|| a.version.clone()) {
                AttrValue::String(s)
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
