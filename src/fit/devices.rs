//! Device fit with DRA structured-parameters semantics: concrete devices for
//! each request, device classes and CEL selectors, `firstAvailable`,
//! `allocationMode: All`, `matchAttribute` constraints, consumable capacity
//! on shareable devices, MIG devices by profile. Whole GPUs and MIG devices
//! asked for as extended resources (`nvidia.com/gpu`,
//! `nvidia.com/mig-1g.10gb`) draw from the same devices, so nothing is
//! counted twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{CelEngine, Failure, PodRequest};
use crate::demand::{AllocationMode, Claim, ExactRequest, PodSpec};
use crate::device::{AttrValue, Device, DeviceKind, NUMA_NODE, PCIE_ROOT};
use crate::fleet::Node;
use crate::quantity::{self, Milli};

/// How much of a device is taken.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceUse {
    /// Allocated whole to one consumer.
    pub exclusive: bool,
    /// Number of shared allocations.
    pub shares: u32,
    /// Capacity drawn by shared allocations.
    pub consumed: BTreeMap<String, Milli>,
}

impl DeviceUse {
    /// Nothing holds the device, whole or in part.
    pub fn is_free(&self) -> bool {
        !self.exclusive && self.shares == 0
    }
}

/// One device allocated to one request of one claim.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceAllocation {
    // Shared strings: a plan holds tens of thousands of these, and trial
    // fits make and drop many more; cloning them must not allocate.
    pub claim: Arc<str>,
    pub request: Arc<str>,
    pub device: Arc<str>,
    /// Capacity drawn from a shared device (milli-units); empty when whole.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Milli>,
}

/// What device fit needs besides the pod and the node.
#[derive(Debug)]
pub struct DeviceContext<'a> {
    pub cel: &'a mut CelEngine,
    /// Device class name → compiled selector ids.
    pub classes: &'a BTreeMap<String, Vec<usize>>,
    /// Per device of this node: CEL fingerprint.
    pub prints: &'a [u64],
    /// Unique id of this node, for node-specific CEL caching.
    pub node_key: u64,
}

enum Filter {
    Kind(DeviceKind),
    MigProfile(String),
    Cel { class: String, exprs: Vec<usize> },
}

struct Alt {
    /// The allocation's request name: `request` or `request/subrequest`.
    request_name: Arc<str>,
    filter: Filter,
    count: u32,
    all: bool,
    capacity: BTreeMap<String, Milli>,
    /// Device taints tolerated (DRA requests only).
    tolerations: Vec<crate::device::DeviceToleration>,
}

struct Req {
    name: Arc<str>,
    alts: Vec<Alt>,
}

struct ClaimPlan {
    name: Arc<str>,
    reqs: Vec<Req>,
    /// (request indices, attribute)
    constraints: Vec<(Vec<usize>, String)>,
    /// Extra constraints tried in order (locality preferences), the last
    /// being none.
    preferences: Vec<Vec<(Vec<usize>, String)>>,
}

/// A pod's device requests, compiled once and allocated on many nodes.
pub struct PodDevices {
    plans: Vec<ClaimPlan>,
}

impl std::fmt::Debug for PodDevices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodDevices")
            .field("claims", &self.plans.len())
            .finish()
    }
}

impl PodDevices {
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

/// Compiles a pod's device requests (classes, CEL, constraints).
pub fn compile_devices(
    spec: &PodSpec,
    req: &PodRequest,
    cel: &mut CelEngine,
    classes: &BTreeMap<String, Vec<usize>>,
) -> Result<PodDevices, Failure> {
    let mut plans = claim_plans(spec, req, cel, classes)?;
    for plan in &mut plans {
        // Inside a node, prefer devices under one PCIe root, then one NUMA
        // node, for claims with several requests (GPU + NIC).
        let all: Vec<usize> = (0..plan.reqs.len()).collect();
        plan.preferences = if plan.reqs.len() > 1 {
            vec![
                vec![(all.clone(), PCIE_ROOT.to_owned())],
                vec![(all, NUMA_NODE.to_owned())],
                vec![],
            ]
        } else {
            vec![vec![]]
        };
    }
    Ok(PodDevices { plans })
}

fn compile_alt(
    request: &str,
    e: &ExactRequest,
    cel: &mut CelEngine,
    classes: &BTreeMap<String, Vec<usize>>,
) -> Result<Alt, Failure> {
    let mut exprs = classes
        .get(&e.device_class)
        .ok_or_else(|| Failure::new(format!("unknown device class {}", e.device_class), ""))?
        .clone();
    exprs.extend(e.selectors.iter().map(|s| cel.id(s)));
    let mut capacity = BTreeMap::new();
    for (k, q) in &e.capacity {
        let v = quantity::parse(q)
            .map_err(|err| Failure::new("invalid capacity request", err.to_string()))?;
        capacity.insert(k.clone(), v);
    }
    Ok(Alt {
        request_name: match &e.name {
            Some(sub) => format!("{request}/{sub}").into(),
            None => request.into(),
        },
        filter: Filter::Cel {
            class: e.device_class.clone(),
            exprs,
        },
        count: e.count,
        all: e.allocation_mode == AllocationMode::All,
        capacity,
        tolerations: e.tolerations.clone(),
    })
}

fn claim_plans(
    spec: &PodSpec,
    req: &PodRequest,
    cel: &mut CelEngine,
    classes: &BTreeMap<String, Vec<usize>>,
) -> Result<Vec<ClaimPlan>, Failure> {
    let mut plans = Vec::new();
    let mut implicit = Vec::new();
    if req.gpus > 0 {
        implicit.push(Req {
            name: super::GPU_RESOURCE.into(),
            alts: vec![Alt {
                request_name: super::GPU_RESOURCE.into(),
                filter: Filter::Kind(DeviceKind::Gpu),
                count: req.gpus,
                all: false,
                capacity: BTreeMap::new(),
                tolerations: Vec::new(),
            }],
        });
    }
    for (profile, n) in &req.mig {
        let name: Arc<str> = format!("{}{profile}", super::MIG_RESOURCE_PREFIX).into();
        implicit.push(Req {
            name: name.clone(),
            alts: vec![Alt {
                request_name: name,
                filter: Filter::MigProfile(profile.clone()),
                count: *n,
                all: false,
                capacity: BTreeMap::new(),
                tolerations: Vec::new(),
            }],
        });
    }
    if !implicit.is_empty() {
        plans.push(ClaimPlan {
            name: "extended-resources".into(),
            reqs: implicit,
            constraints: Vec::new(),
            preferences: Vec::new(),
        });
    }
    for claim in &spec.claims {
        plans.push(claim_plan(claim, cel, classes)?);
    }
    Ok(plans)
}

fn claim_plan(
    claim: &Claim,
    cel: &mut CelEngine,
    classes: &BTreeMap<String, Vec<usize>>,
) -> Result<ClaimPlan, Failure> {
    let mut reqs = Vec::new();
    for r in &claim.requests {
        let mut alts = Vec::new();
        if let Some(e) = &r.exactly {
            alts.push(compile_alt(&r.name, e, cel, classes)?);
        }
        for e in &r.first_available {
            alts.push(compile_alt(&r.name, e, cel, classes)?);
        }
        if alts.is_empty() {
            return Err(Failure::new(
                format!(
                    "claim {} request {} has neither exactly nor firstAvailable",
                    claim.name, r.name
                ),
                "",
            ));
        }
        reqs.push(Req {
            name: r.name.as_str().into(),
            alts,
        });
    }
    let mut constraints = Vec::new();
    for c in &claim.constraints {
        let idx: Vec<usize> = if c.requests.is_empty() {
            (0..reqs.len()).collect()
        } else {
            c.requests
                .iter()
                .map(|n| {
                    reqs.iter().position(|r| *r.name == **n).ok_or_else(|| {
                        Failure::new(
                            format!("claim {}: constraint names unknown request {n}", claim.name),
                            "",
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        };
        constraints.push((idx, c.match_attribute.clone()));
    }
    Ok(ClaimPlan {
        name: claim.name.as_str().into(),
        reqs,
        constraints,
        preferences: Vec::new(),
    })
}

struct Attempt<'n> {
    node: &'n Node,
    uses: Vec<DeviceUse>,
    /// Previous use of each device changed, to roll back a failed try.
    undo: Vec<(usize, DeviceUse)>,
    out: Vec<DeviceAllocation>,
    /// First reason something was not available, for explanations.
    why: Option<String>,
}

fn attr_value<'d>(device: &'d Device, name: &str) -> Option<&'d AttrValue> {
    device.attributes.get(name).or_else(|| {
        // Unqualified names belong to the device's driver domain.
        if name.contains('/') {
            None
        } else {
            device.attributes.get(&format!("{}/{name}", device.driver))
        }
    })
}

impl Attempt<'_> {
    fn passes(&mut self, alt: &Alt, di: usize, ctx: &mut DeviceContext<'_>) -> bool {
        let device = &self.node.devices[di];
        match &alt.filter {
            Filter::Kind(k) => device.kind == *k,
            Filter::MigProfile(p) => {
                device.kind == DeviceKind::Mig && device.mig_profile() == Some(p)
            }
            Filter::Cel { exprs, .. } => {
                for &id in exprs {
                    let unique = (ctx.node_key << 20) | di as u64;
                    match ctx.cel.matches(id, device, unique, ctx.prints[di]) {
                        Ok(true) => {}
                        Ok(false) => return false,
                        Err(e) => {
                            self.why.get_or_insert(e);
                            return false;
                        }
                    }
                }
                true
            }
        }
    }

    /// The capacity this allocation would draw, if the device can take it.
    /// Whether the node's shared counters can pay for device `di`: the
    /// devices in use draw on them too (partitionable devices).
    fn counters_allow(&self, di: usize) -> bool {
        let want = &self.node.devices[di].consumes;
        want.iter().all(|(set, counters)| {
            let Some(capacity) = self.node.counters.get(set) else {
                return false;
            };
            counters.iter().all(|(counter, amount)| {
                let used: Milli = self
                    .node
                    .devices
                    .iter()
                    .zip(&self.uses)
                    .filter(|(_, u)| u.exclusive || u.shares > 0)
                    .filter_map(|(d, _)| d.consumes.get(set)?.get(counter))
                    .fold(0, |a: Milli, b| a.saturating_add(*b));
                used.saturating_add(*amount) <= capacity.get(counter).copied().unwrap_or(0)
            })
        })
    }

    fn take(&self, alt: &Alt, di: usize) -> Option<BTreeMap<String, Milli>> {
        let device = &self.node.devices[di];
        let used = &self.uses[di];
        if used.exclusive {
            return None;
        }
        if !device.consumes.is_empty() && !self.counters_allow(di) {
            return None;
        }
        match &device.shared {
            Some(policies) => {
                let mut draw = BTreeMap::new();
                for (key, policy) in policies {
                    let Some(amount) = policy.consumed(alt.capacity.get(key).copied()) else {
                        continue;
                    };
                    let have = device.capacity.get(key).copied().unwrap_or(0);
                    let u = used.consumed.get(key).copied().unwrap_or(0);
                    if u.saturating_add(amount) > have {
                        return None;
                    }
                    draw.insert(key.clone(), amount);
                }
                if alt.capacity.keys().any(|k| !policies.contains_key(k)) {
                    return None;
                }
                Some(draw)
            }
            None => {
                if used.shares > 0 {
                    return None;
                }
                let fits = alt
                    .capacity
                    .iter()
                    .all(|(k, v)| device.capacity.get(k).is_some_and(|have| v <= have));
                fits.then(BTreeMap::new)
            }
        }
    }

    /// Undoes the commits made since `undo` and `out` had these lengths.
    fn roll_back(&mut self, undo: usize, out: usize) {
        while self.undo.len() > undo {
            let (di, before) = self.undo.pop().expect("undo entry");
            self.uses[di] = before;
        }
        self.out.truncate(out);
    }

    fn commit(
        &mut self,
        claim: &Arc<str>,
        req: &Arc<str>,
        di: usize,
        draw: BTreeMap<String, Milli>,
    ) {
        self.undo.push((di, self.uses[di].clone()));
        let use_ = &mut self.uses[di];
        if self.node.devices[di].shared.is_some() {
            use_.shares += 1;
            for (k, v) in &draw {
                let c = use_.consumed.entry(k.clone()).or_insert(0);
                *c = c.saturating_add(*v);
            }
        } else {
            use_.exclusive = true;
        }
        self.out.push(DeviceAllocation {
            claim: claim.clone(),
            request: req.clone(),
            device: self.node.devices[di].name.clone(),
            capacity: draw,
        });
    }

    /// Allocates one request under `pins` (attribute → required value).
    fn request(
        &mut self,
        claim: &Arc<str>,
        req: &Req,
        pins: &[(&str, &AttrValue)],
        ctx: &mut DeviceContext<'_>,
    ) -> bool {
        'alts: for alt in &req.alts {
            let mut candidates: Vec<(usize, BTreeMap<String, Milli>)> =
                Vec::with_capacity(self.node.devices.len());
            let mut matching = 0;
            let mask = match &alt.filter {
                Filter::Cel { exprs, .. } => ctx.cel.mask(exprs, &self.node.devices, ctx.prints),
                _ => None,
            };
            for di in 0..self.node.devices.len() {
                let device = &self.node.devices[di];
                if let Some(m) = mask {
                    if m & (1 << di) == 0 {
                        continue;
                    }
                }
                if !pins.iter().all(|(a, v)| attr_value(device, a) == Some(*v)) {
                    continue;
                }
                // A tainted device is not allocated to a request that does
                // not tolerate it (the allocator's allTaintsTolerated).
                if !crate::device::taints_tolerated(device, &alt.tolerations) {
                    continue;
                }
                if mask.is_none() && !self.passes(alt, di, ctx) {
                    continue;
                }
                matching += 1;
                if let Some(draw) = self.take(alt, di) {
                    candidates.push((di, draw));
                }
            }
            let need = if alt.all {
                if matching == 0 || candidates.len() < matching {
                    continue 'alts;
                }
                matching
            } else {
                alt.count as usize
            };
            if candidates.len() < need {
                continue;
            }
            // Shared devices: best fit (fullest device that still fits)
            // keeps whole GPUs free for whole-GPU requests.
            candidates.sort_by_key(|(di, _)| {
                let d = &self.node.devices[*di];
                let free: Milli = match &d.shared {
                    Some(_) => d
                        .capacity
                        .iter()
                        .map(|(k, have)| {
                            have - self.uses[*di].consumed.get(k).copied().unwrap_or(0)
                        })
                        .sum(),
                    None => 0,
                };
                (free, *di)
            });
            // Partitions of one device draw on the same counters: each is
            // checked against what this request already took.
            let (saved_undo, saved_len) = (self.undo.len(), self.out.len());
            let mut taken = 0;
            for (di, draw) in candidates {
                if taken == need {
                    break;
                }
                if !self.node.devices[di].consumes.is_empty() && !self.counters_allow(di) {
                    continue;
                }
                self.commit(claim, &alt.request_name, di, draw);
                taken += 1;
            }
            if taken < need {
                self.roll_back(saved_undo, saved_len);
                continue;
            }
            return true;
        }
        false
    }

    /// Allocates a whole claim, trying each combination of constraint
    /// values (at most [`MAX_CONSTRAINT_COMBINATIONS`]). Returns false with
    /// `self` unchanged on failure.
    fn claim(
        &mut self,
        plan: &ClaimPlan,
        extra: &[(Vec<usize>, String)],
        ctx: &mut DeviceContext<'_>,
    ) -> bool {
        // The same constraint twice pins nothing more: once is enough (a
        // claim repeating one 10,000 times made 2^10,000 combinations).
        let mut seen = BTreeSet::new();
        let constraints: Vec<&(Vec<usize>, String)> = plan
            .constraints
            .iter()
            .chain(extra)
            .filter(|c| seen.insert(*c))
            .collect();
        let node = self.node;
        let values: Vec<Vec<&AttrValue>> = constraints
            .iter()
            .map(|(_, attr)| {
                let set: BTreeSet<&AttrValue> = node
                    .devices
                    .iter()
                    .filter_map(|d| attr_value(d, attr))
                    .collect();
                set.into_iter().collect()
            })
            .collect();
        if values.iter().any(Vec::is_empty) {
            return false;
        }
        let mut choice = vec![0usize; constraints.len()];
        let mut tried = 0usize;
        loop {
            // Combinations multiply with each constraint: past the budget
            // the claim does not fit this node, in bounded time.
            tried += 1;
            if tried > MAX_CONSTRAINT_COMBINATIONS {
                return false;
            }
            let saved_undo = self.undo.len();
            let saved_len = self.out.len();
            let mut ok = true;
            for (ri, req) in plan.reqs.iter().enumerate() {
                let pins: Vec<(&str, &AttrValue)> = constraints
                    .iter()
                    .enumerate()
                    .filter(|(_, (reqs, _))| reqs.contains(&ri))
                    .map(|(ci, (_, attr))| (attr.as_str(), values[ci][choice[ci]]))
                    .collect();
                if !self.request(&plan.name, req, &pins, ctx) {
                    ok = false;
                    break;
                }
            }
            if ok {
                return true;
            }
            self.roll_back(saved_undo, saved_len);
            // next combination
            let mut i = 0;
            loop {
                if i == choice.len() {
                    return false;
                }
                choice[i] += 1;
                if choice[i] < values[i].len() {
                    break;
                }
                choice[i] = 0;
                i += 1;
            }
        }
    }
}

/// Combinations of `matchAttribute` values tried for one claim on one node
/// before it is taken not to fit there: four constraints over eight values
/// each (a node's PCIe roots), far more than real claims use (Kubernetes
/// allows 32 constraints, whose combinations grow as a power).
pub const MAX_CONSTRAINT_COMBINATIONS: usize = 4096;

/// Allocates every device the pod needs on `node`, given what is in use.
/// Returns the allocations and the node's device use after them.
pub fn allocate_devices(
    spec: &PodSpec,
    req: &PodRequest,
    node: &Node,
    uses: &[DeviceUse],
    ctx: &mut DeviceContext<'_>,
) -> Result<(Vec<DeviceAllocation>, Vec<DeviceUse>), Failure> {
    if req.gpus == 0 && req.mig.is_empty() && spec.claims.is_empty() {
        return Ok((Vec::new(), uses.to_vec()));
    }
    let compiled = compile_devices(spec, req, ctx.cel, ctx.classes)?;
    allocate_compiled(&compiled, node, uses, ctx)
}

/// [`allocate_devices`] for requests compiled with [`compile_devices`].
pub fn allocate_compiled(
    compiled: &PodDevices,
    node: &Node,
    uses: &[DeviceUse],
    ctx: &mut DeviceContext<'_>,
) -> Result<(Vec<DeviceAllocation>, Vec<DeviceUse>), Failure> {
    if compiled.plans.is_empty() {
        return Ok((Vec::new(), uses.to_vec()));
    }
    let mut attempt = Attempt {
        node,
        uses: uses.to_vec(),
        undo: Vec::with_capacity(8),
        out: Vec::with_capacity(8),
        why: None,
    };
    for plan in &compiled.plans {
        if !plan
            .preferences
            .iter()
            .any(|extra| attempt.claim(plan, extra, ctx))
        {
            return Err(explain_claim(plan, &attempt, ctx));
        }
    }
    Ok((attempt.out, attempt.uses))
}

fn explain_claim(plan: &ClaimPlan, attempt: &Attempt<'_>, ctx: &mut DeviceContext<'_>) -> Failure {
    let category = if &*plan.name == "extended-resources" {
        let names: Vec<&str> = plan.reqs.iter().map(|r| &*r.name).collect();
        format!("insufficient {}", names.join(", "))
    } else if plan.constraints.is_empty() {
        format!("claim {}: devices unavailable", plan.name)
    } else {
        let attrs: Vec<&str> = plan.constraints.iter().map(|(_, a)| a.as_str()).collect();
        format!(
            "claim {}: no devices with matching {}",
            plan.name,
            attrs.join(", ")
        )
    };
    let mut detail: Vec<String> = plan
        .reqs
        .iter()
        .map(|r| {
            let alt = &r.alts[0];
            let what = match &alt.filter {
                Filter::Kind(_) => "GPU".to_owned(),
                Filter::MigProfile(p) => format!("MIG {p}"),
                Filter::Cel { class, .. } => class.clone(),
            };
            // The devices of the kind the request asks for (a CEL
            // request: those its selectors took, cached by the attempt;
            // any where they are not cached per node).
            let mask = match &alt.filter {
                Filter::Cel { exprs, .. } => ctx.cel.mask(exprs, &attempt.node.devices, ctx.prints),
                _ => None,
            };
            let of_kind = |di: usize, d: &crate::device::Device| match &alt.filter {
                Filter::Kind(k) => d.kind == *k,
                Filter::MigProfile(p) => d.mig_profile() == Some(p),
                Filter::Cel { .. } => mask.is_none_or(|m| m & (1 << di) != 0),
            };
            let free = attempt
                .node
                .devices
                .iter()
                .enumerate()
                .filter(|(di, d)| {
                    of_kind(*di, d)
                        && !attempt.uses[*di].exclusive
                        && (d.consumes.is_empty() || attempt.counters_allow(*di))
                        && crate::device::taints_tolerated(d, &alt.tolerations)
                })
                .count();
            // Only those the request could have had: a tainted NIC is no
            // reason a GPU request waits.
            let tainted = attempt
                .node
                .devices
                .iter()
                .enumerate()
                .filter(|(di, d)| {
                    of_kind(*di, d) && !crate::device::taints_tolerated(d, &alt.tolerations)
                })
                .count();
            let tainted = if tainted > 0 {
                format!(" ({tainted} device(s) tainted, not tolerated)")
            } else {
                String::new()
            };
            if matches!(alt.filter, Filter::Cel { .. }) {
                format!("{}: {} × {what}{tainted}", r.name, alt.count)
            } else {
                format!("{}: {} requested, {free} free{tainted}", r.name, alt.count)
            }
        })
        .collect();
    if let Some(why) = &attempt.why {
        detail.push(why.clone());
    }
    Failure::new(category, detail.join("; "))
}
