//! The planner: `plan(&Fleet, &Demand, &Policy, now) -> Plan`.
//!
//! Deterministic by construction: every input collection is put in a
//! canonical order first, ties break on names, maps are `BTreeMap`s (the CEL
//! cache is a `HashMap` that is only looked up), and the only clock is `now`.
//!
//! For each workload, by priority then age: try pools of nodes from most to
//! least preferred (the owner's reservation, then the shared fleet), each in
//! three steps: nodes that are up, then up nodes after a MIG
//! reconfiguration, then nodes that must be powered on. Inside a step, a
//! required topology tries each domain at its level and keeps the cheapest
//! that holds the whole gang; gangs are placed whole (at least `min_count`
//! pods) or not at all.

mod fragmentation;
pub mod mig;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::demand::{builtin_classes, Demand, PodSpec, TopologyMode, Workload};
use crate::device::DeviceKind;
use crate::fit::FnvMap;
use crate::fit::{
    allocate_compiled, compile_devices, fingerprint, resource_fit, static_fit, CelEngine,
    DeviceAllocation, DeviceContext, Failure, NodeUse, PodDevices, PodRequest,
};
use crate::fleet::{Fleet, Node, Placement, Policy, PowerState, Reservation};
use crate::quantity::{self, Milli};

/// What the planner proposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub placements: Vec<WorkloadPlacement>,
    pub unsatisfied: Vec<Unsatisfied>,
    /// Input problems that did not stop planning (a bound pod on an unknown
    /// node, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Power the node on. Waves respect the rack's concurrent power-on
    /// limit: wave k starts when wave k-1 has come up.
    PowerOn {
        node: String,
        wave: u32,
        for_workloads: Vec<String>,
    },
    /// Apply the node's BIOS profile (through Redfish settings) before it
    /// boots.
    ApplyBiosProfile {
        node: String,
        profile: String,
    },
    /// Repartition an idle GPU of a running node.
    ReconfigureMig {
        node: String,
        gpu: usize,
        /// The new layout, `PROFILE@START` per instance.
        layout: Vec<String>,
        for_workloads: Vec<String>,
    },
    PowerOff {
        node: String,
        reason: String,
    },
}

impl Action {
    pub fn node(&self) -> &str {
        match self {
            Action::PowerOn { node, .. }
            | Action::ApplyBiosProfile { node, .. }
            | Action::ReconfigureMig { node, .. }
            | Action::PowerOff { node, .. } => node,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodPlacement {
    /// `<pod set>-<replica>`.
    pub pod: String,
    pub node: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceAllocation>,
    /// On a lent reservation: the owner may take it back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reclaimable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadPlacement {
    /// `namespace/name`.
    pub workload: String,
    /// `level=value` when the workload has a topology requirement and fits
    /// in one domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The reservation it draws from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    pub pods: Vec<PodPlacement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unsatisfied {
    pub workload: String,
    /// The objects it came from (its workload's sources), for events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<crate::demand::ObjectRef>,
    pub reason: String,
}

impl Plan {
    /// Nodes whose power-on waits for an earlier wave of its rack (a wave
    /// after the first): the control loop sends only wave 0 and plans the
    /// rest again once those nodes are up or have failed.
    pub fn later_waves(&self) -> std::collections::BTreeSet<&str> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::PowerOn { node, wave, .. } if *wave > 0 => Some(node.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Plans one round. `policy` overrides the fleet file's `[policy]`.
pub fn plan(fleet: &Fleet, demand: &Demand, policy: &Policy, now: u64) -> Plan {
    Planner::new(fleet, demand, policy, now).run(demand)
}

/// One pod to place.
struct PodItem<'d> {
    name: String,
    spec: &'d PodSpec,
    req: PodRequest,
    /// Device requests, compiled once per pod set.
    devices: std::rc::Rc<PodDevices>,
    /// Lower bound of whole GPUs it needs, for quick rejection.
    whole_gpus: usize,
}

/// Failure category → (nodes, one example detail).
type FailureCounts = BTreeMap<String, (usize, String)>;

/// A tentative placement of a gang.
#[derive(Default)]
struct Trial {
    uses: BTreeMap<usize, NodeUse>,
    power_ons: BTreeSet<usize>,
    pods: Vec<(String, usize, Vec<DeviceAllocation>)>,
    /// Pods that could not be placed, with per-node failures of the first.
    first_failure: Option<(String, FailureCounts)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Cost {
    power_ons: usize,
    cold_racks: usize,
    power_w: u64,
    reconfigs: usize,
}

/// Identifies a pool's membership: (its reservation, or the reservations
/// the workload owns for the shared pool).
type PoolKey = (Option<usize>, Vec<usize>);

struct Pool {
    key: PoolKey,
    /// Membership by node index.
    member: Vec<bool>,
    reservation: Option<usize>,
    reclaimable: BTreeSet<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Up,
    Reconfigure,
    PowerOn,
}

struct Planner<'f> {
    /// Borrowed from the fleet; owned once a MIG reconfiguration changes one.
    nodes: Vec<Cow<'f, Node>>,
    policy: Policy,
    reservations: Vec<Reservation>,
    now: u64,
    /// What is in use on each node. Shared until written: most nodes of a
    /// large fleet stay empty, and one empty use per device count serves
    /// them all.
    uses: Vec<Rc<NodeUse>>,
    /// Up now, or planned to be powered on this round.
    up: Vec<bool>,
    planned_on: Vec<bool>,
    prints: Vec<Cow<'f, [u64]>>,
    cel: CelEngine,
    classes: BTreeMap<String, Vec<usize>>,
    /// Active reservation each node belongs to.
    reserved_by: Vec<Option<usize>>,
    /// Reservations whose owners have nothing bound or pending on them.
    idle_reservations: BTreeSet<usize>,
    /// Per topology level: its domains and their nodes.
    levels: BTreeMap<String, std::rc::Rc<LevelIndex>>,
    /// Per node: index into `rack_names`.
    rack_of: Vec<Option<usize>>,
    rack_names: Vec<String>,
    rack_budget_kw: Vec<Option<f64>>,
    rack_limit: Vec<Option<u32>>,
    /// Power of the rack's nodes that are up or planned up.
    rack_up_kw: Vec<f64>,
    rack_up_nodes: Vec<u32>,
    /// Nodes powering on now or planned to.
    rack_in_flight: Vec<u32>,
    /// Whole GPUs free per node (kept current on commit).
    free_gpus: Vec<usize>,
    /// Free whole GPUs of all nodes that are up (or planned up), by node:
    /// a bound that fails a gang's first step without trying.
    up_slots: Slots,
    up_free: usize,
    /// Build failure explanations. Off, a failed step says nothing (a
    /// later step usually succeeds); a workload that fails every step is
    /// tried again with explanations for its message.
    explain: bool,
    /// Reused buffer for node orders built per gang.
    order_buf: Vec<usize>,
    /// Node indices by ascending power draw, then name.
    static_order: Vec<usize>,
    /// Pools by (owned reservations, hinted reservation).
    #[allow(clippy::type_complexity)]
    pool_cache:
        BTreeMap<(Vec<usize>, Option<String>), std::rc::Rc<(Vec<Pool>, BTreeMap<String, usize>)>>,
    /// Per pool: its usable nodes in preference order.
    candidate_cache: BTreeMap<PoolKey, (std::rc::Rc<Vec<usize>>, UpIndex)>,
    /// Per pool and level: those nodes by domain.
    domain_cache: BTreeMap<(PoolKey, String), std::rc::Rc<Vec<Vec<usize>>>>,
    /// Per pool and level: domain capacity, updated from `touched`.
    stats_cache: BTreeMap<(PoolKey, String), StatsCache>,
    /// Nodes whose power or free GPUs changed, in order.
    touched: Vec<usize>,
    /// Power draw per node (W).
    power_w: Vec<u64>,
    /// Pending pod shapes, for fragmentation-aware placement.
    mix: fragmentation::Mix,
    actions: Vec<Action>,
    power_offs: Vec<Action>,
    notes: Vec<String>,
}

/// The shapes of all pending pods, weighted by count.
fn demand_mix(demand: &Demand) -> fragmentation::Mix {
    let mut counts: BTreeMap<fragmentation::Shape, u64> = BTreeMap::new();
    for w in &demand.workloads {
        for set in &w.pod_sets {
            let Ok(req) = PodRequest::parse(&set.pod) else {
                continue;
            };
            let mut whole = req.gpus;
            let mut share = 0;
            for e in set
                .pod
                .claims
                .iter()
                .flat_map(|c| &c.requests)
                .filter_map(|r| r.exactly.as_ref())
            {
                if e.device_class != "gpu.nvidia.com" {
                    continue;
                }
                match e.capacity.get(crate::device::COMPUTE) {
                    Some(q) => share = quantity::parse(q).unwrap_or(0),
                    None => whole = whole.saturating_add(e.count),
                }
            }
            // Pods without GPUs cannot use free GPU capacity, so they do not
            // define its fragmentation (as in FGD). CPU is kept exact:
            // coarser steps measured worse on the Alibaba trace; memory is
            // rounded to 8 GiB, which is its scale in practice.
            if whole == 0 && share == 0 {
                continue;
            }
            let shape = fragmentation::Shape {
                cpu: req.cpu,
                memory: req.memory / (8_000 << 30) * (8_000 << 30),
                whole,
                share,
            };
            *counts.entry(shape).or_insert(0) += u64::from(set.count);
        }
    }
    fragmentation::Mix::new(&counts)
}

/// The NVIDIA device (whole GPU or MIG instance) a device-plugin device ID
/// names. NVIDIA's device plugin registers each device under its NVML UUID,
/// `GPU-…` or `MIG-…` whatever its `deviceIDStrategy` (that only changes
/// what the container is told), and a time-sliced or MPS replica as
/// `UUID::N` (k8s-device-plugin internal/rm/devices.go: `BuildDevice`,
/// `NewAnnotatedID`); the kubelet reports those IDs as registered.
fn plugin_device(node: &Node, id: &str) -> Option<usize> {
    let uuid = id.split_once("::").map_or(id, |(u, _)| u);
    if uuid.is_empty() {
        return None;
    }
    node.devices.iter().position(|d| {
        d.driver == crate::device::GPU_DRIVER
            && matches!(d.kind, DeviceKind::Gpu | DeviceKind::Mig)
            && matches!(d.attr("gpu.nvidia.com/uuid"), Some(crate::device::AttrValue::String(u)) if u == uuid)
    })
}

fn count_free_gpus(node: &Node, used: &NodeUse) -> usize {
    node.devices
        .iter()
        .zip(&used.devices)
        .filter(|(d, u)| d.kind == DeviceKind::Gpu && !u.exclusive && u.shares == 0)
        .count()
}

/// Where the up nodes sit in a cached candidate list, so first fit over
/// 10,000 nodes skips the off ones and the prefix already full.
#[derive(Debug, Default)]
struct UpIndex {
    /// Node → position in the list (`u32::MAX`: not in it).
    pos: Vec<u32>,
    /// Bit per position: the node there is up (a bit set, so a power-on
    /// is O(1) and a scan skips 64 positions at a time, up or off).
    up: Vec<u64>,
    /// Positions in the list.
    len: usize,
    /// Up nodes before this position have no whole GPU free (monotone:
    /// no departures within a plan).
    full: usize,
}

impl UpIndex {
    fn new(nodes: usize, len: usize) -> UpIndex {
        UpIndex {
            pos: vec![u32::MAX; nodes],
            up: vec![0; len.div_ceil(64)],
            len,
            full: 0,
        }
    }

    fn set_up(&mut self, p: usize) {
        self.up[p / 64] |= 1 << (p % 64);
    }

    /// The first position at or after `from` whose node is up (`up`) or
    /// not.
    fn next(&self, from: usize, up: bool) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        let word = |w: usize| if up { self.up[w] } else { !self.up[w] };
        let mut w = from / 64;
        let mut bits = word(w) & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                let p = w * 64 + bits.trailing_zeros() as usize;
                return (p < self.len).then_some(p);
            }
            w += 1;
            if w >= self.up.len() {
                return None;
            }
            bits = word(w);
        }
    }

    /// Moves `full` past up nodes with no whole GPU free.
    fn advance_full(&mut self, is_full: impl Fn(usize) -> bool) {
        loop {
            match self.next(self.full, true) {
                Some(q) if is_full(q) => self.full = q + 1,
                Some(q) => {
                    self.full = q;
                    return;
                }
                None => {
                    self.full = self.len;
                    return;
                }
            }
        }
    }
}

/// Whole-GPU capacity of one domain's candidate nodes.
#[derive(Debug, Clone, Copy, Default)]
struct DomainStats {
    up_free: usize,
    up_count: usize,
    all_free: usize,
    all_count: usize,
    /// Most GPUs an off node offers.
    off_max: usize,
    /// Least power an off node draws (W).
    off_min_w: u64,
    /// Up nodes, and all nodes, by free whole GPUs (see [`Slots`]).
    up_slots: Slots,
    all_slots: Slots,
}

/// Nodes counted by free whole GPUs, to bound how many pods of `g` GPUs a
/// domain can take without trying: a domain with 100 free GPUs spread as
/// 4 per node takes no 8-GPU pod. Fixed-size, so the stats stay `Copy`.
#[derive(Debug, Clone, Copy, Default)]
struct Slots {
    /// Nodes with exactly `k` free GPUs, for `k` below [`Slots::BIG`].
    by_free: [u32; Slots::BIG],
    /// Free GPUs summed over nodes with `BIG` or more.
    big_free: usize,
}

impl Slots {
    const BIG: usize = 16;

    fn add(&mut self, free: usize) {
        if free < Self::BIG {
            self.by_free[free] += 1;
        } else {
            self.big_free += free;
        }
    }

    /// At least as many pods of `g` whole GPUs as fit (exact below `BIG`);
    /// unbounded for pods of no GPU.
    #[cfg(test)]
    fn pods_of(&self, g: usize) -> usize {
        self.pods_by(&PodsPer::new(g))
    }

    /// [`Slots::pods_of`] with the divisions done once per gang.
    fn pods_by(&self, per: &PodsPer) -> usize {
        if per.g == 0 {
            return usize::MAX;
        }
        let small: u32 = self
            .by_free
            .iter()
            .zip(&per.quotient)
            .map(|(n, q)| n * q)
            .sum();
        small as usize + self.big_free / per.g
    }

    fn remove(&mut self, free: usize) {
        if free < Self::BIG {
            self.by_free[free] -= 1;
        } else {
            self.big_free -= free;
        }
    }
}

/// Pods of `g` GPUs a node with `k` free GPUs holds, for `k` below
/// [`Slots::BIG`].
struct PodsPer {
    g: usize,
    quotient: [u32; Slots::BIG],
}

impl PodsPer {
    fn new(g: usize) -> PodsPer {
        let mut quotient = [0; Slots::BIG];
        for (k, q) in quotient.iter_mut().enumerate() {
            *q = k.checked_div(g).unwrap_or(0) as u32;
        }
        PodsPer { g, quotient }
    }
}

/// Why a domain cannot take a gang, known without trying it.
enum TooSmall {
    /// Free GPUs in all.
    Gpus(usize),
    /// (pods of this many GPUs that fit, GPUs per pod)
    Pods(usize, usize),
}

/// Per-domain stats kept current from the log of touched nodes.
struct StatsCache {
    seen: usize,
    /// Shared with the evaluation reading them (no copy per gang).
    stats: Rc<Vec<DomainStats>>,
}

/// The domains of one topology level.
struct LevelIndex {
    /// Domain values, sorted; a domain's id is its position.
    names: Vec<String>,
    /// Each domain's nodes, in the planner's static preference order.
    members: Vec<Vec<usize>>,
    /// Each node's domain.
    of_node: Vec<Option<usize>>,
}

fn level_index(
    nodes: &[Cow<'_, Node>],
    static_order: &[usize],
) -> BTreeMap<String, std::rc::Rc<LevelIndex>> {
    // Hashed while collecting (tens of thousands of lookups), sorted once
    // after: the ids follow the sorted names, never the hash order.
    let mut values: BTreeMap<&str, FnvMap<&str, ()>> = BTreeMap::new();
    for n in nodes {
        for (level, v) in &n.domains {
            values.entry(level).or_default().insert(v, ());
        }
    }
    values
        .into_iter()
        .map(|(level, seen)| {
            let mut names: Vec<&str> = seen.keys().copied().collect();
            names.sort_unstable();
            let id: FnvMap<&str, usize> = names.iter().enumerate().map(|(d, v)| (*v, d)).collect();
            let mut members = vec![Vec::new(); names.len()];
            let mut of_node = vec![None; nodes.len()];
            for &i in static_order {
                if let Some(&d) = nodes[i].domains.get(level).and_then(|v| id.get(v.as_str())) {
                    members[d].push(i);
                    of_node[i] = Some(d);
                }
            }
            (
                level.to_owned(),
                std::rc::Rc::new(LevelIndex {
                    names: names.into_iter().map(str::to_owned).collect(),
                    members,
                    of_node,
                }),
            )
        })
        .collect()
}

impl<'f> Planner<'f> {
    fn new(fleet: &'f Fleet, demand: &Demand, policy: &Policy, now: u64) -> Self {
        let mut nodes: Vec<Cow<'f, Node>> = fleet.nodes.iter().map(Cow::Borrowed).collect();
        // Fleets are usually built sorted; checking is cheaper than sorting.
        if !nodes.is_sorted_by(|a, b| a.name <= b.name) {
            nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        }
        let mut reservations = fleet.reservations.clone();
        reservations.sort_by(|a, b| a.name.cmp(&b.name));
        let mut reserved_by = vec![None; nodes.len()];
        for (ri, r) in reservations.iter().enumerate() {
            if !r.active(now) {
                continue;
            }
            for n in &r.nodes {
                if let Ok(i) = nodes.binary_search_by(|x| x.name.as_str().cmp(n.as_str())) {
                    reserved_by[i].get_or_insert(ri);
                }
            }
        }
        let mut cel = CelEngine::default();
        let mut classes = BTreeMap::new();
        let mut declared = demand.device_classes.clone();
        declared.sort_by(|a, b| (&a.name, &a.selectors).cmp(&(&b.name, &b.selectors)));
        for class in builtin_classes().into_iter().chain(declared) {
            let ids: Vec<usize> = class.selectors.iter().map(|s| cel.id(s)).collect();
            classes.entry(class.name).or_insert(ids);
        }
        let prints = nodes
            .iter()
            .map(|n| match n {
                Cow::Borrowed(b) if b.device_prints.len() == b.devices.len() => {
                    Cow::Borrowed(&b.device_prints[..])
                }
                _ => Cow::Owned(n.devices.iter().map(fingerprint).collect()),
            })
            .collect();
        let mut empty: BTreeMap<usize, Rc<NodeUse>> = BTreeMap::new();
        let uses = nodes
            .iter()
            .map(|n| {
                empty
                    .entry(n.devices.len())
                    .or_insert_with(|| Rc::new(NodeUse::new(n)))
                    .clone()
            })
            .collect();
        let up = nodes.iter().map(|n| n.is_up()).collect();
        let rack_names: Vec<String> = fleet.racks.keys().cloned().collect();
        let rack_of: Vec<Option<usize>> = nodes
            .iter()
            .map(|n| {
                n.rack
                    .as_ref()
                    .and_then(|r| rack_names.binary_search(r).ok())
            })
            .collect();
        let mut rack_up_kw = vec![0.0; rack_names.len()];
        let mut rack_up_nodes = vec![0; rack_names.len()];
        let mut rack_in_flight = vec![0; rack_names.len()];
        for (i, n) in nodes.iter().enumerate() {
            if let Some(r) = rack_of[i] {
                if n.is_up() {
                    rack_up_kw[r] += n.power_kw;
                    rack_up_nodes[r] += 1;
                }
                if n.power == PowerState::PoweringOn {
                    rack_in_flight[r] += 1;
                }
            }
        }
        let mut static_order: Vec<usize> = (0..nodes.len()).collect();
        static_order.sort_by_key(|&i| ((nodes[i].power_kw * 1000.0) as u64, i));
        let mut planner = Planner {
            planned_on: vec![false; nodes.len()],
            levels: level_index(&nodes, &static_order),
            rack_budget_kw: rack_names
                .iter()
                .map(|r| fleet.racks[r].power_budget_kw)
                .collect(),
            rack_limit: rack_names
                .iter()
                .map(|r| fleet.racks[r].max_concurrent_power_ons)
                .collect(),
            rack_of,
            rack_names,
            rack_up_kw,
            rack_up_nodes,
            rack_in_flight,
            free_gpus: Vec::new(),
            up_slots: Slots::default(),
            up_free: 0,
            explain: false,
            order_buf: Vec::new(),
            static_order,
            candidate_cache: BTreeMap::new(),
            pool_cache: BTreeMap::new(),
            stats_cache: BTreeMap::new(),
            touched: Vec::new(),
            power_w: nodes.iter().map(|n| (n.power_kw * 1000.0) as u64).collect(),
            mix: demand_mix(demand),
            domain_cache: BTreeMap::new(),
            nodes,
            policy: policy.clone(),
            reservations,
            now,
            uses,
            up,
            prints,
            cel,
            classes,
            reserved_by,
            idle_reservations: BTreeSet::new(),
            actions: Vec::new(),
            power_offs: Vec::new(),
            notes: Vec::new(),
        };
        planner.bind(demand);
        planner.free_gpus = (0..planner.nodes.len())
            .map(|i| count_free_gpus(&planner.nodes[i], &planner.uses[i]))
            .collect();
        for i in 0..planner.nodes.len() {
            if planner.up[i] {
                planner.up_slots.add(planner.free_gpus[i]);
                planner.up_free += planner.free_gpus[i];
            }
        }
        planner
    }

    /// Node `i`'s free whole GPUs changed (its use or devices did).
    fn refresh_free(&mut self, i: usize) {
        let f = count_free_gpus(&self.nodes[i], &self.uses[i]);
        if self.up[i] {
            self.up_slots.remove(self.free_gpus[i]);
            self.up_slots.add(f);
            self.up_free = self.up_free - self.free_gpus[i] + f;
        }
        self.free_gpus[i] = f;
    }

    /// Accounts for pods already bound to nodes.
    /// Position of the node named `name` (nodes are sorted by name).
    fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes
            .binary_search_by(|x| x.name.as_str().cmp(name))
            .ok()
    }

    fn bind(&mut self, demand: &Demand) {
        let mut bound: Vec<&crate::demand::BoundPod> = demand.bound.iter().collect();
        bound.sort_by(|a, b| {
            (&a.node, &a.namespace, &a.name).cmp(&(&b.node, &b.namespace, &b.name))
        });
        let mut owner_busy = BTreeSet::new();
        for pod in bound {
            let Some(i) = self.node_index(&pod.node) else {
                self.notes.push(format!(
                    "bound pod {}/{} is on unknown node {}",
                    pod.namespace, pod.name, pod.node
                ));
                continue;
            };
            let spec = PodSpec {
                requests: pod.requests.clone(),
                ..PodSpec::default()
            };
            // GPUs and MIG devices the pod holds through the device plugin;
            // those it names are marked below, the rest after that.
            let mut unnamed: Vec<(Option<String>, u32)> = Vec::new();
            match PodRequest::parse(&spec) {
                Ok(mut req) => {
                    unnamed.push((None, req.gpus));
                    unnamed.extend(req.mig.iter().map(|(p, n)| (Some(p.clone()), *n)));
                    req.gpus = 0;
                    req.mig.clear();
                    let use_ = Rc::make_mut(&mut self.uses[i]);
                    use_.add(&req);
                    if !pod.keeps_node_busy() {
                        use_.node_agents = use_.node_agents.saturating_add(1);
                    }
                }
                Err(e) => self
                    .notes
                    .push(format!("bound pod {}/{}: {e}", pod.namespace, pod.name)),
            }
            for dev in &pod.devices {
                let Some(di) = self.nodes[i]
                    .devices
                    .iter()
                    .position(|d| *d.name == *dev.name)
                else {
                    self.notes.push(format!(
                        "bound pod {}/{} holds unknown device {} on {}",
                        pod.namespace, pod.name, dev.name, pod.node
                    ));
                    continue;
                };
                let device = &self.nodes[i].devices[di];
                let profile = match device.kind {
                    DeviceKind::Mig => device.mig_profile().map(str::to_owned),
                    _ => None,
                };
                if dev.capacity.is_empty()
                    && matches!(device.kind, DeviceKind::Gpu | DeviceKind::Mig)
                {
                    if let Some(n) = unnamed.iter_mut().find(|(p, _)| *p == profile) {
                        n.1 = n.1.saturating_sub(1);
                    }
                }
                let use_ = &mut Rc::make_mut(&mut self.uses[i]).devices[di];
                if dev.capacity.is_empty() {
                    use_.exclusive = true;
                } else {
                    use_.shares += 1;
                    for (k, q) in &dev.capacity {
                        // Checked: a negative share frees nothing.
                        let v = quantity::parse(q).unwrap_or(0).max(0);
                        let c = use_.consumed.entry(k.clone()).or_insert(0);
                        *c = c.saturating_add(v);
                    }
                }
            }
            // The ones the kubelet assigned, where the node's agent says.
            for id in &pod.device_ids {
                let Some(di) = plugin_device(&self.nodes[i], id) else {
                    self.notes.push(format!(
                        "bound pod {}/{} holds device-plugin device {id} that {} does not have",
                        pod.namespace, pod.name, pod.node
                    ));
                    continue;
                };
                let device = &self.nodes[i].devices[di];
                let profile = match device.kind {
                    DeviceKind::Mig => device.mig_profile().map(str::to_owned),
                    _ => None,
                };
                if let Some(n) = unnamed.iter_mut().find(|(p, _)| *p == profile) {
                    n.1 = n.1.saturating_sub(1);
                }
                Rc::make_mut(&mut self.uses[i]).devices[di].exclusive = true;
            }
            // The device plugin chose which ones; not knowing, take the
            // first free ones, so the count at least is right.
            for (profile, mut n) in unnamed {
                for di in 0..self.nodes[i].devices.len() {
                    if n == 0 {
                        break;
                    }
                    let d = &self.nodes[i].devices[di];
                    let fits = match &profile {
                        None => d.kind == DeviceKind::Gpu,
                        Some(p) => d.kind == DeviceKind::Mig && d.mig_profile() == Some(p.as_str()),
                    };
                    if fits && self.uses[i].devices[di].is_free() {
                        Rc::make_mut(&mut self.uses[i]).devices[di].exclusive = true;
                        n -= 1;
                    }
                }
                if n > 0 {
                    self.notes.push(format!(
                        "bound pod {}/{} holds {n} more {} than {} has free",
                        pod.namespace,
                        pod.name,
                        profile
                            .as_deref()
                            .map_or("GPUs".to_owned(), |p| format!("MIG {p} devices")),
                        pod.node
                    ));
                }
            }
            if let Some(ri) = self.reserved_by[i] {
                if self.reservations[ri].owns(&pod.namespace, &pod.labels) {
                    owner_busy.insert(ri);
                }
            }
        }
        for w in &demand.workloads {
            for (ri, r) in self.reservations.iter().enumerate() {
                if r.active(self.now) && r.owns(&w.namespace, &w.labels) {
                    owner_busy.insert(ri);
                }
            }
        }
        for (ri, r) in self.reservations.iter().enumerate() {
            if r.lendable && r.active(self.now) && !owner_busy.contains(&ri) {
                self.idle_reservations.insert(ri);
            }
        }
    }

    fn run(mut self, demand: &Demand) -> Plan {
        let mut workloads: Vec<&Workload> = demand.workloads.iter().collect();
        workloads.sort_by(|a, b| {
            (
                std::cmp::Reverse(a.priority),
                a.created,
                &a.namespace,
                &a.name,
            )
                .cmp(&(
                    std::cmp::Reverse(b.priority),
                    b.created,
                    &b.namespace,
                    &b.name,
                ))
        });
        let mut placements = Vec::new();
        let mut unsatisfied = Vec::new();
        for w in workloads {
            match self.place_workload(w) {
                Ok(p) => placements.push(p),
                Err(reason) => unsatisfied.push(Unsatisfied {
                    workload: w.key(),
                    sources: w.sources.clone(),
                    reason,
                }),
            }
        }
        self.scale_down();
        let mut actions = self.actions;
        actions.extend(self.power_offs);
        Plan {
            actions,
            placements,
            unsatisfied,
            notes: self.notes,
        }
    }

    fn pods<'d>(&mut self, w: &'d Workload) -> Result<Vec<PodItem<'d>>, String> {
        // Checked before anything is sized by it, whatever made the demand
        // (the Kubernetes reader refuses earlier, at its configured limit).
        let total = w.pod_count_u64();
        let ceiling = crate::demand::MAX_PODS_PER_WORKLOAD_CEILING;
        if total > u64::from(ceiling) {
            return Err(format!(
                "{total} pods exceed the limit of {ceiling} pods per workload"
            ));
        }
        let mut pods = Vec::with_capacity(total as usize);
        for set in &w.pod_sets {
            let req =
                PodRequest::parse(&set.pod).map_err(|e| format!("pod set {}: {e}", set.name))?;
            let devices = compile_devices(&set.pod, &req, &mut self.cel, &self.classes)
                .map_err(|f| format!("pod set {}: {f}", set.name))?;
            let devices = std::rc::Rc::new(devices);
            let claim_gpus: u32 = set
                .pod
                .claims
                .iter()
                .flat_map(|c| &c.requests)
                .filter_map(|r| r.exactly.as_ref())
                .filter(|e| e.device_class == "gpu.nvidia.com" && e.capacity.is_empty())
                .fold(0u32, |n, e| n.saturating_add(e.count));
            for i in 0..set.count {
                pods.push(PodItem {
                    name: format!("{}-{i}", set.name),
                    spec: &set.pod,
                    req: req.clone(),
                    devices: devices.clone(),
                    whole_gpus: req.gpus.saturating_add(claim_gpus) as usize,
                });
            }
        }
        Ok(pods)
    }

    /// The workload's node pools, shared by all workloads that own the same
    /// reservations (and hint the same one).
    fn pools(&mut self, w: &Workload) -> std::rc::Rc<(Vec<Pool>, BTreeMap<String, usize>)> {
        let owned: Vec<usize> = (0..self.reservations.len())
            .filter(|&ri| {
                let r = &self.reservations[ri];
                r.active(self.now) && r.owns(&w.namespace, &w.labels)
            })
            .collect();
        let key = (owned.clone(), w.reservation.clone());
        if let Some(p) = self.pool_cache.get(&key) {
            return p.clone();
        }
        let built = std::rc::Rc::new(self.build_pools(w, owned));
        self.pool_cache.insert(key, built.clone());
        built
    }

    fn build_pools(
        &self,
        w: &Workload,
        mut owned: Vec<usize>,
    ) -> (Vec<Pool>, BTreeMap<String, usize>) {
        let mut pools = Vec::new();
        // The hinted reservation first.
        owned.sort_by_key(|&ri| {
            (
                w.reservation.as_deref() != Some(self.reservations[ri].name.as_str()),
                ri,
            )
        });
        for &ri in &owned {
            pools.push(Pool {
                key: (Some(ri), Vec::new()),
                member: (0..self.nodes.len())
                    .map(|i| self.reserved_by[i] == Some(ri))
                    .collect(),
                reservation: Some(ri),
                reclaimable: BTreeSet::new(),
            });
        }
        let mut excluded: BTreeMap<String, usize> = BTreeMap::new();
        let mut owned_sorted = owned.clone();
        owned_sorted.sort_unstable();
        let mut shared = Pool {
            key: (None, owned_sorted),
            member: vec![false; self.nodes.len()],
            reservation: None,
            reclaimable: BTreeSet::new(),
        };
        for i in 0..self.nodes.len() {
            match self.reserved_by[i] {
                None => shared.member[i] = true,
                Some(ri) if self.reservations[ri].owns(&w.namespace, &w.labels) => {
                    shared.member[i] = true;
                }
                Some(ri) if self.idle_reservations.contains(&ri) => {
                    shared.member[i] = true;
                    shared.reclaimable.insert(i);
                }
                Some(ri) => {
                    *excluded
                        .entry(format!("reserved for {}", self.reservations[ri].name))
                        .or_insert(0) += 1;
                }
            }
        }
        pools.push(shared);
        (pools, excluded)
    }

    fn place_workload(&mut self, w: &Workload) -> Result<WorkloadPlacement, String> {
        let pods = self.pods(w)?;
        if pods.is_empty() {
            return Err("workload has no pods".into());
        }
        if let Some(t) = &w.topology {
            if !self.levels.contains_key(&t.level) {
                return Err(format!(
                    "topology level {:?} is not configured on any node",
                    t.level
                ));
            }
        }
        let shared = self.pools(w);
        let (pools, excluded) = (&shared.0, &shared.1);
        let steps: &[Step] = if self.policy.reconfigure_mig {
            &[Step::Up, Step::Reconfigure, Step::PowerOn]
        } else {
            &[Step::Up, Step::PowerOn]
        };
        let mut last_failure = String::new();
        let mut last_tried = None;
        for (pi, pool) in pools.iter().enumerate() {
            for &step in steps {
                if step == Step::Reconfigure && pods.iter().all(|p| p.req.mig.is_empty()) {
                    continue;
                }
                match self.try_pool(w, &pods, pool, step) {
                    Ok(placement) => return Ok(placement),
                    Err(why) => {
                        last_failure = why;
                        last_tried = Some((pi, step));
                    }
                }
            }
        }
        // Failed everywhere: the last try again, explaining (nothing was
        // committed in between, so it fails the same way).
        if let (Some((pi, step)), false) = (last_tried, self.explain) {
            self.explain = true;
            let again = self.try_pool(w, &pods, &pools[pi], step);
            self.explain = false;
            match again {
                Ok(placement) => return Ok(placement),
                Err(why) => last_failure = why,
            }
        }
        let mut reason = last_failure;
        if !excluded.is_empty() {
            let parts: Vec<String> = excluded
                .iter()
                .map(|(k, n)| format!("{n} nodes {k}"))
                .collect();
            reason.push_str(&format!("; not considered: {}", parts.join(", ")));
        }
        Err(reason)
    }

    /// Candidate nodes of a pool for a step, in preference order: nodes that
    /// are up, then off nodes in racks that already have power, then cold
    /// racks; cheaper power first inside each group; lent nodes last.
    /// The pool's usable nodes in preference order (cheaper power first,
    /// lent nodes last). Whether a node is up is checked by the trial, so
    /// the list stays valid as nodes are planned up.
    fn candidates(&mut self, pool: &Pool) -> std::rc::Rc<Vec<usize>> {
        if let Some((c, _)) = self.candidate_cache.get(&pool.key) {
            return c.clone();
        }
        let mut c: Vec<usize> = self
            .static_order
            .iter()
            .copied()
            .filter(|&i| pool.member[i] && self.nodes[i].usable())
            .collect();
        if !pool.reclaimable.is_empty() {
            c.sort_by_key(|i| pool.reclaimable.contains(i));
        }
        let mut index = UpIndex::new(self.nodes.len(), c.len());
        for (p, &i) in c.iter().enumerate() {
            index.pos[i] = p as u32;
            if self.up[i] {
                index.set_up(p);
            }
        }
        let c = std::rc::Rc::new(c);
        self.candidate_cache
            .insert(pool.key.clone(), (c.clone(), index));
        c
    }

    fn compute_stats(&self, members: &[usize]) -> DomainStats {
        let mut st = DomainStats {
            off_min_w: u64::MAX,
            ..DomainStats::default()
        };
        for &i in members {
            let f = self.free_gpus[i];
            st.all_count += 1;
            st.all_free += f;
            st.all_slots.add(f);
            if self.up[i] {
                st.up_count += 1;
                st.up_free += f;
                st.up_slots.add(f);
            } else {
                st.off_max = st.off_max.max(f);
                st.off_min_w = st.off_min_w.min(self.power_w[i]);
            }
        }
        if st.off_min_w == u64::MAX {
            st.off_min_w = 0;
        }
        st
    }

    /// Capacity per domain, recomputing only domains whose nodes changed.
    fn domain_stats(
        &mut self,
        pool: &Pool,
        level: &str,
        index: &LevelIndex,
        lists: &[Vec<usize>],
    ) -> Rc<Vec<DomainStats>> {
        let key = (pool.key.clone(), level.to_owned());
        let mut cache = match self.stats_cache.remove(&key) {
            Some(c) => c,
            None => StatsCache {
                seen: self.touched.len(),
                stats: Rc::new(lists.iter().map(|m| self.compute_stats(m)).collect()),
            },
        };
        if cache.seen < self.touched.len() {
            let mut dirty: BTreeSet<usize> = BTreeSet::new();
            for &i in &self.touched[cache.seen..] {
                if let Some(d) = index.of_node[i] {
                    dirty.insert(d);
                }
            }
            // The previous evaluation's handle is gone: no copy.
            let stats = Rc::make_mut(&mut cache.stats);
            for d in dirty {
                stats[d] = self.compute_stats(&lists[d]);
            }
            cache.seen = self.touched.len();
        }
        let out = cache.stats.clone();
        self.stats_cache.insert(key, cache);
        out
    }

    /// [`Self::candidates`] split by domain at `level`.
    fn domain_members(
        &mut self,
        pool: &Pool,
        level: &str,
        index: &LevelIndex,
    ) -> std::rc::Rc<Vec<Vec<usize>>> {
        let key = (pool.key.clone(), level.to_owned());
        if let Some(c) = self.domain_cache.get(&key) {
            return c.clone();
        }
        let lists: Vec<Vec<usize>> = index
            .members
            .iter()
            .map(|m| {
                let mut v: Vec<usize> = m
                    .iter()
                    .copied()
                    .filter(|&i| pool.member[i] && self.nodes[i].usable())
                    .collect();
                if !pool.reclaimable.is_empty() {
                    v.sort_by_key(|i| pool.reclaimable.contains(i));
                }
                v
            })
            .collect();
        let c = std::rc::Rc::new(lists);
        self.domain_cache.insert(key, c.clone());
        c
    }

    fn try_pool(
        &mut self,
        w: &Workload,
        pods: &[PodItem<'_>],
        pool: &Pool,
        step: Step,
    ) -> Result<WorkloadPlacement, String> {
        if step != Step::Reconfigure {
            let (domain, trial) = self.evaluate(w, pods, pool, step, &BTreeMap::new())?;
            return Ok(self.commit(w, pool, domain, trial, BTreeMap::new()));
        }
        // Reconfigure as few idle GPUs as it takes: one more each round.
        let candidates = self.candidates(pool);
        let options = mig::options(self, pods, &candidates);
        if options.is_empty() {
            return Err(
                "no idle MIG-capable GPU on a running node can take the requested profiles".into(),
            );
        }
        let mut last = String::new();
        for k in 1..=options.len() {
            let overrides = mig::build(self, &options[..k]);
            match self.evaluate(w, pods, pool, step, &overrides) {
                Ok((domain, trial)) => return Ok(self.commit(w, pool, domain, trial, overrides)),
                Err(why) => last = why,
            }
        }
        Err(last)
    }

    /// Places the gang over the pool's candidates for `step`, honouring its
    /// topology.
    fn evaluate(
        &mut self,
        w: &Workload,
        pods: &[PodItem<'_>],
        pool: &Pool,
        step: Step,
        overrides: &BTreeMap<usize, mig::Override>,
    ) -> Result<(Option<String>, Trial), String> {
        let min = w.min() as usize;
        let no_nodes = || match step {
            Step::PowerOn => "no usable nodes".to_owned(),
            _ => "no usable nodes are up".to_owned(),
        };
        let need_gpus: usize = pods.iter().take(min).map(|p| p.whole_gpus).sum();
        // The smallest whole-GPU pod: no node with fewer free GPUs takes
        // any pod of the gang.
        let least_gpus = pods.iter().map(|p| p.whole_gpus).min().unwrap_or(0);
        let per = PodsPer::new(least_gpus);
        // Not all the nodes that are up together hold the gang: this step
        // fails (said only when explaining, by the full evaluation).
        if !self.explain
            && step == Step::Up
            && need_gpus > 0
            && overrides.is_empty()
            && (self.up_free < need_gpus || self.up_slots.pods_by(&per) < min)
        {
            return Err(no_nodes());
        }
        let Some(topology) = &w.topology else {
            let candidates = self.candidates(pool);
            if !candidates
                .iter()
                .any(|&i| self.up[i] || step == Step::PowerOn)
            {
                return Err(no_nodes());
            }
            let mut index = self
                .candidate_cache
                .remove(&pool.key)
                .map(|(_, idx)| idx)
                .unwrap_or_default();
            let trial = self.trial_indexed(
                pods,
                &candidates,
                overrides,
                step == Step::PowerOn,
                Some(&mut index),
            );
            self.candidate_cache
                .insert(pool.key.clone(), (candidates.clone(), index));
            return if trial.pods.len() >= min {
                Ok((None, trial))
            } else {
                Err(self.explain_flat(w, pods, &trial))
            };
        };
        let level = topology.level.as_str();
        let Some(index) = self.levels.get(level).cloned() else {
            return Err(format!("no usable node has a {level}"));
        };
        let names = &index.names;
        let lists = self.domain_members(pool, level, &index);
        let mut best: Option<(Cost, String, Trial)> = None;
        let mut partial: Vec<(usize, String, Trial)> = Vec::new();
        // Lower bound of power-ons per domain (whole GPUs missing on its up
        // nodes over the most an off node offers): try likely-cheap domains
        // first and stop once no remaining domain can beat the best.
        let mut order: Vec<(Cost, usize)> = Vec::with_capacity(names.len());
        let mut domains_seen = 0;
        // (domain, nodes, why) of domains too small for the gang.
        let mut too_small: Vec<(usize, usize, TooSmall)> = Vec::new();
        let stats = self.domain_stats(pool, level, &index, &lists);
        for (d, st) in stats.iter().enumerate() {
            let (count, total, slots) = if step == Step::PowerOn {
                (st.all_count, st.all_free, &st.all_slots)
            } else {
                (st.up_count, st.up_free, &st.up_slots)
            };
            if count == 0 {
                continue;
            }
            domains_seen += 1;
            if need_gpus > 0 && overrides.is_empty() {
                if total < need_gpus {
                    if self.explain {
                        too_small.push((d, count, TooSmall::Gpus(total)));
                    }
                    continue;
                }
                let fit = slots.pods_by(&per);
                if fit < min {
                    if self.explain {
                        too_small.push((d, count, TooSmall::Pods(fit, least_gpus)));
                    }
                    continue;
                }
            }
            let deficit = need_gpus.saturating_sub(st.up_free);
            let lb = if deficit == 0 || !overrides.is_empty() {
                0
            } else {
                deficit.div_ceil(st.off_max.max(1))
            };
            let bound = Cost {
                power_ons: lb,
                cold_racks: usize::from(lb > 0 && st.up_count == 0),
                power_w: lb as u64 * st.off_min_w,
                reconfigs: 0,
            };
            order.push((bound, d));
        }
        // Usually the first domain or two settle it: a heap, not a sort
        // of every domain.
        let mut order: std::collections::BinaryHeap<std::cmp::Reverse<(Cost, usize)>> =
            order.into_iter().map(std::cmp::Reverse).collect();
        while let Some(std::cmp::Reverse((bound, d))) = order.pop() {
            // Sorted by a lower bound of the cost: nothing later can beat
            // the best found.
            if best.as_ref().is_some_and(|(c, _, _)| *c <= bound) {
                break;
            }
            let value = names[d].as_str();
            let trial = self.trial(pods, &lists[d], overrides, step == Step::PowerOn);
            if trial.pods.len() >= min {
                let cost = self.cost(&trial, overrides);
                if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                    let free = cost.power_ons == 0 && cost.reconfigs == 0;
                    best = Some((cost, value.to_string(), trial));
                    if free {
                        break;
                    }
                }
            } else if self.explain {
                partial.push((trial.pods.len(), value.to_string(), trial));
            }
        }
        if let Some((_, value, trial)) = best {
            return Ok((Some(format!("{level}={value}")), trial));
        }
        if domains_seen == 0 {
            return Err(no_nodes());
        }
        if !self.explain && topology.mode == TopologyMode::Required {
            return Err(String::new());
        }
        if best.is_none() {
            // Only the best domain is explained (most pods, then first by
            // name): of those too small, the first by name.
            let first = too_small
                .into_iter()
                .min_by(|a, b| names[a.0].cmp(&names[b.0]));
            if let Some((d, count, small)) = first {
                let detail = match small {
                    TooSmall::Gpus(total) => format!("{total} GPUs free, gang needs {need_gpus}"),
                    TooSmall::Pods(fit, g) => {
                        format!("{fit} pods of {g} GPUs fit on nodes' free GPUs, gang needs {min}")
                    }
                };
                let why = BTreeMap::from([("insufficient GPUs".to_owned(), (count, detail))]);
                partial.push((
                    0,
                    names[d].clone(),
                    Trial {
                        first_failure: Some((String::new(), why)),
                        ..Trial::default()
                    },
                ));
            }
        }
        if topology.mode == TopologyMode::Required {
            return Err(self.explain_domains(w, level, domains_seen, partial));
        }
        // Preferred: span as few domains as possible, fullest domains first.
        let candidates = self.candidates(pool);
        if need_gpus > 0 && overrides.is_empty() {
            // Not even all domains together (and nodes outside any) have
            // room for the gang: say so without trying.
            let slots = |st: &DomainStats| {
                if step == Step::PowerOn {
                    st.all_slots.pods_by(&per)
                } else {
                    st.up_slots.pods_by(&per)
                }
            };
            let mut fit: usize = stats.iter().map(slots).fold(0, usize::saturating_add);
            if fit < min {
                fit += candidates
                    .iter()
                    .filter(|&&i| index.of_node[i].is_none())
                    .filter(|&&i| self.up[i] || step == Step::PowerOn)
                    .map(|&i| self.free_gpus[i] / least_gpus)
                    .sum::<usize>();
            }
            if fit < min {
                let where_ = if step == Step::PowerOn {
                    "usable"
                } else {
                    "up"
                };
                return Err(format!(
                    "{} needs {min} pods of {least_gpus} GPUs; the {where_} nodes' free GPUs hold {fit}",
                    w.key()
                ));
            }
        }
        // Without explanations, domains (and nodes outside any) whose free
        // GPUs hold no pod of the gang are left out: first fit would pass
        // over each of their nodes for every pod.
        let skip_full = !self.explain && least_gpus > 0 && overrides.is_empty();
        let holds = |st: &DomainStats| {
            !skip_full
                || if step == Step::PowerOn {
                    st.all_slots.pods_by(&per) > 0
                } else {
                    st.up_slots.pods_by(&per) > 0
                }
        };
        let mut ordered: Vec<(usize, usize)> = (0..names.len())
            .filter(|&d| !lists[d].is_empty() && holds(&stats[d]))
            .map(|d| (stats[d].all_free, d))
            .collect();
        ordered.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut order = std::mem::take(&mut self.order_buf);
        order.clear();
        order.extend(ordered.iter().flat_map(|&(_, d)| lists[d].iter().copied()));
        order.extend(candidates.iter().copied().filter(|&i| {
            index.of_node[i].is_none()
                && (!skip_full
                    || ((self.up[i] || step == Step::PowerOn) && self.free_gpus[i] >= least_gpus))
        }));
        let trial = self.trial(pods, &order, overrides, step == Step::PowerOn);
        self.order_buf = order;
        if trial.pods.len() >= min {
            Ok((None, trial))
        } else {
            Err(self.explain_flat(w, pods, &trial))
        }
    }

    /// Places the pods first-fit over `order`: nodes already up (or already
    /// chosen for power-on in this trial) before nodes that would need it.
    /// Once a replica of a pod set fits nowhere, its identical siblings are
    /// not tried again.
    fn trial(
        &mut self,
        pods: &[PodItem<'_>],
        order: &[usize],
        overrides: &BTreeMap<usize, mig::Override>,
        allow_off: bool,
    ) -> Trial {
        self.trial_indexed(pods, order, overrides, allow_off, None)
    }

    /// [`Self::trial`], with an index of the up nodes in `order` when the
    /// list is long.
    fn trial_indexed(
        &mut self,
        pods: &[PodItem<'_>],
        order: &[usize],
        overrides: &BTreeMap<usize, mig::Override>,
        allow_off: bool,
        mut up_index: Option<&mut UpIndex>,
    ) -> Trial {
        let mut t = Trial::default();
        let mut rack_kw: BTreeMap<usize, f64> = BTreeMap::new();
        let mut hopeless: Vec<*const PodSpec> = Vec::new();
        // First fit: a node an identical earlier replica skipped cannot fit
        // this one either, so each pass resumes where the last replica of
        // the same pod set was placed.
        let mut cursors: Vec<(*const PodSpec, [usize; 3])> = Vec::new();
        let passes = if allow_off { 3 } else { 1 };
        for pod in pods {
            let spec_ptr = pod.spec as *const PodSpec;
            if hopeless.contains(&spec_ptr) {
                continue;
            }
            let ci = match cursors.iter().position(|(p, _)| *p == spec_ptr) {
                Some(ci) => ci,
                None => {
                    cursors.push((spec_ptr, [0; 3]));
                    cursors.len() - 1
                }
            };
            let mut failures: FailureCounts = BTreeMap::new();
            let mut gpu_short = 0usize;
            let mut placed = None;
            if self.policy.placement == Placement::LeastFragmentation && overrides.is_empty() {
                placed = self.least_fragmentation(pod, order, &t, &rack_kw);
            }
            let resumed = cursors[ci].1 != [0; 3];
            // A second scan from the start only explains a failure fully.
            for full in [false, true] {
                if placed.is_some() || (full && (!resumed || !self.explain)) {
                    break;
                }
                if full {
                    failures.clear();
                    gpu_short = 0;
                }
                'passes: for pass in 0..passes {
                    let start = if full { 0 } else { cursors[ci].1[pass] };
                    // Over an indexed list, pass 0 visits only up nodes past
                    // the full prefix, passes 1 and 2 only nodes that are off.
                    let gpu_pod = pod.whole_gpus > 0 && overrides.is_empty();
                    let mut from = start;
                    if let (Some(idx), 0) = (up_index.as_deref_mut(), pass) {
                        if gpu_pod {
                            idx.advance_full(|q| self.free_gpus[order[q]] == 0);
                            from = from.max(idx.full);
                        }
                    }
                    let idx = up_index.as_deref();
                    let mut next = from;
                    loop {
                        let pos = match idx {
                            Some(idx) => match idx.next(next, pass == 0) {
                                Some(p) => p,
                                None => break,
                            },
                            None if next < order.len() => next,
                            None => break,
                        };
                        next = pos + 1;
                        let i = order[pos];
                        // Pass 0: nodes up now; 1: off in racks with power;
                        // 2: off in cold racks.
                        let node_pass = if self.up[i] {
                            0
                        } else if self.rack_of[i].is_some_and(|r| self.rack_up_nodes[r] > 0) {
                            1
                        } else {
                            2
                        };
                        if node_pass != pass {
                            continue;
                        }
                        // The common "no" first, without building a message.
                        if pod.whole_gpus > self.free_gpus[i]
                            && pod.req.mig.is_empty()
                            && overrides.is_empty()
                        {
                            gpu_short += 1;
                            continue;
                        }
                        match self.fit_one(pod, i, &t, overrides, &rack_kw) {
                            Ok(found) if !full => {
                                cursors[ci].1[pass] = pos;
                                placed = Some((i, found));
                                break 'passes;
                            }
                            Ok(_) => {}
                            Err(f) => {
                                let e = failures.entry(f.category).or_insert((0, f.detail));
                                e.0 += 1;
                            }
                        }
                    }
                    if !full {
                        cursors[ci].1[pass] = order.len();
                    }
                }
            }
            match placed {
                Some((i, (allocs, use_))) => {
                    if !self.up[i] && t.power_ons.insert(i) {
                        if let Some(r) = self.rack_of[i] {
                            *rack_kw.entry(r).or_insert(0.0) += self.nodes[i].power_kw;
                        }
                    }
                    t.uses.insert(i, use_);
                    t.pods.push((pod.name.clone(), i, allocs));
                }
                None => {
                    if gpu_short > 0 {
                        let e = failures
                            .entry("insufficient GPUs".to_owned())
                            .or_insert((0, format!("{} requested", pod.whole_gpus)));
                        e.0 += gpu_short;
                    }
                    hopeless.push(pod.spec);
                    if t.first_failure.is_none() {
                        t.first_failure = Some((pod.name.clone(), failures));
                    }
                }
            }
        }
        t
    }

    /// Among nodes that are up, the one where the pod fits with the least
    /// growth of GPU fragmentation for the pending mix.
    #[allow(clippy::type_complexity)]
    fn least_fragmentation(
        &mut self,
        pod: &PodItem<'_>,
        order: &[usize],
        t: &Trial,
        rack_kw: &BTreeMap<usize, f64>,
    ) -> Option<(usize, (Vec<DeviceAllocation>, NodeUse))> {
        let no_overrides = BTreeMap::new();
        // (score, free GPU capacity when the pod takes no GPU, node, fit)
        let mut best: Option<(u32, Milli, usize, (Vec<DeviceAllocation>, NodeUse))> = None;
        for &i in order {
            if !self.up[i] || pod.whole_gpus > self.free_gpus[i] {
                continue;
            }
            let Ok(found) = self.fit_one(pod, i, t, &no_overrides, rack_kw) else {
                continue;
            };
            let node = &self.nodes[i];
            let before_use = t.uses.get(&i).unwrap_or(&*self.uses[i]);
            let free_before = fragmentation::free(node, before_use);
            let free_after = fragmentation::free(node, &found.1);
            let growth = fragmentation::fragmentation(&free_after, &self.mix)
                - fragmentation::fragmentation(&free_before, &self.mix);
            let score = fragmentation::score(growth);
            // Equal scores go to the earlier node in preference order, as
            // first fit would: packing the same nodes keeps others whole.
            // A pod that takes no GPU goes, among equals, where the fewest
            // GPUs are free: there its CPU and memory strand the least.
            let gpu_free = if free_after.same_gpus(&free_before) {
                free_after.gpu_total()
            } else {
                0
            };
            let better = match &best {
                None => true,
                Some((s, f, _, _)) => score > *s || (score == *s && gpu_free < *f),
            };
            if better {
                best = Some((score, gpu_free, i, found));
            }
        }
        best.map(|(_, _, i, found)| (i, found))
    }

    fn fit_one(
        &mut self,
        pod: &PodItem<'_>,
        i: usize,
        t: &Trial,
        overrides: &BTreeMap<usize, mig::Override>,
        rack_kw: &BTreeMap<usize, f64>,
    ) -> Result<(Vec<DeviceAllocation>, NodeUse), Failure> {
        let (node, prints) = match overrides.get(&i) {
            Some(o) => (&o.node, o.prints.as_slice()),
            None => (&*self.nodes[i], &*self.prints[i]),
        };
        if pod.whole_gpus > 0 && pod.req.mig.is_empty() && !overrides.contains_key(&i) {
            let free = match t.uses.get(&i) {
                Some(u) => count_free_gpus(node, u),
                None => self.free_gpus[i],
            };
            if free < pod.whole_gpus {
                return Err(Failure::new(
                    "insufficient GPUs",
                    format!("{} requested, {free} free", pod.whole_gpus),
                ));
            }
        }
        static_fit(pod.spec, node)?;
        let used = t
            .uses
            .get(&i)
            .or_else(|| overrides.get(&i).map(|o| &o.uses))
            .unwrap_or(&*self.uses[i]);
        resource_fit(&pod.req, node, used)?;
        if !self.up[i] && !t.power_ons.contains(&i) {
            self.power_budget_ok(i, rack_kw)?;
        }
        let mut ctx = DeviceContext {
            cel: &mut self.cel,
            classes: &self.classes,
            prints,
            node_key: i as u64,
        };
        let (allocs, devices) = allocate_compiled(&pod.devices, node, &used.devices, &mut ctx)?;
        let mut next = NodeUse {
            cpu: used.cpu,
            memory: used.memory,
            pods: used.pods,
            node_agents: used.node_agents,
            extended: used.extended.clone(),
            devices,
        };
        next.add(&pod.req);
        Ok((allocs, next))
    }

    /// Whether powering node `i` on stays within its rack's power budget,
    /// counting nodes already up, those planned up, and this trial's.
    fn power_budget_ok(&self, i: usize, rack_kw: &BTreeMap<usize, f64>) -> Result<(), Failure> {
        let Some(r) = self.rack_of[i] else {
            return Ok(());
        };
        let Some(budget) = self.rack_budget_kw[r] else {
            return Ok(());
        };
        let committed = self.rack_up_kw[r] + rack_kw.get(&r).copied().unwrap_or(0.0);
        let need = self.nodes[i].power_kw;
        if committed + need > budget + 1e-9 {
            return Err(Failure::new(
                format!("rack {} power budget", self.rack_names[r]),
                format!("{committed:.1} of {budget:.1} kW committed, node needs {need:.1} kW"),
            ));
        }
        Ok(())
    }

    fn cost(&self, t: &Trial, overrides: &BTreeMap<usize, mig::Override>) -> Cost {
        let cold: BTreeSet<usize> = t
            .power_ons
            .iter()
            .filter_map(|&i| self.rack_of[i])
            .filter(|&r| self.rack_up_nodes[r] == 0)
            .collect();
        Cost {
            power_ons: t.power_ons.len(),
            cold_racks: cold.len(),
            power_w: t
                .power_ons
                .iter()
                .map(|&i| (self.nodes[i].power_kw * 1000.0) as u64)
                .sum(),
            reconfigs: overrides.values().map(|o| o.gpus.len()).sum(),
        }
    }

    fn commit(
        &mut self,
        w: &Workload,
        pool: &Pool,
        domain: Option<String>,
        trial: Trial,
        overrides: BTreeMap<usize, mig::Override>,
    ) -> WorkloadPlacement {
        let key = w.key();
        // MIG reconfigurations first: the pods land on the new instances.
        for (i, o) in overrides {
            for (gpu, layout) in &o.gpus {
                self.actions.push(Action::ReconfigureMig {
                    node: self.nodes[i].name.clone(),
                    gpu: *gpu,
                    layout: layout.clone(),
                    for_workloads: vec![key.clone()],
                });
            }
            self.nodes[i] = Cow::Owned(o.node);
            self.prints[i] = Cow::Owned(o.prints);
            self.uses[i] = Rc::new(o.uses);
            self.refresh_free(i);
            self.touched.push(i);
        }
        for &i in &trial.power_ons {
            let node = &self.nodes[i];
            if let Some(profile) = &node.bios_profile {
                if node.bios_profile_applied.as_ref() != Some(profile) {
                    self.actions.push(Action::ApplyBiosProfile {
                        node: node.name.clone(),
                        profile: profile.clone(),
                    });
                }
            }
            let wave = self.wave(i);
            self.actions.push(Action::PowerOn {
                node: node.name.clone(),
                wave,
                for_workloads: vec![key.clone()],
            });
            self.planned_on[i] = true;
            self.up[i] = true;
            self.up_slots.add(self.free_gpus[i]);
            self.up_free += self.free_gpus[i];
            self.touched.push(i);
            for (_, idx) in self.candidate_cache.values_mut() {
                let p = idx.pos[i];
                if p != u32::MAX {
                    idx.set_up(p as usize);
                    idx.full = idx.full.min(p as usize);
                }
            }
            if let Some(r) = self.rack_of[i] {
                self.rack_up_kw[r] += self.nodes[i].power_kw;
                self.rack_up_nodes[r] += 1;
                self.rack_in_flight[r] += 1;
            }
        }
        for (i, u) in trial.uses {
            // For reconfigured nodes this use already refers to the new devices.
            self.uses[i] = Rc::new(u);
            self.refresh_free(i);
            self.touched.push(i);
        }
        WorkloadPlacement {
            workload: key,
            domain,
            reservation: pool
                .reservation
                .map(|ri| self.reservations[ri].name.clone()),
            pods: trial
                .pods
                .into_iter()
                .map(|(pod, i, devices)| PodPlacement {
                    pod,
                    node: self.nodes[i].name.clone(),
                    devices,
                    reclaimable: pool.reclaimable.contains(&i),
                })
                .collect(),
        }
    }

    /// The power-on wave for node `i`: its rack's concurrent power-on limit
    /// counts nodes already powering on and those planned before it.
    fn wave(&self, i: usize) -> u32 {
        let Some(r) = self.rack_of[i] else {
            return 0;
        };
        match self.rack_limit[r] {
            Some(limit) => self.rack_in_flight[r] / limit.max(1),
            None => 0,
        }
    }

    fn summarize(failures: &FailureCounts) -> String {
        let mut v: Vec<(&String, &(usize, String))> = failures.iter().collect();
        v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(cat, (n, detail))| {
                if detail.is_empty() {
                    format!("{n} nodes: {cat}")
                } else {
                    format!("{n} nodes: {cat} ({detail})")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn explain_flat(&self, w: &Workload, pods: &[PodItem<'_>], t: &Trial) -> String {
        let mut s = format!(
            "{} of {} pods fit, gang needs {}",
            t.pods.len(),
            pods.len(),
            w.min()
        );
        if let Some((pod, failures)) = &t.first_failure {
            s.push_str(&format!(
                "; {pod} fits no node: {}",
                Self::summarize(failures)
            ));
        }
        s
    }

    fn explain_domains(
        &self,
        w: &Workload,
        level: &str,
        domains: usize,
        mut partial: Vec<(usize, String, Trial)>,
    ) -> String {
        if domains == 0 {
            return format!("no usable node has a {level}");
        }
        partial.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut s = format!(
            "gang needs {} pods in one {level}; none of {} {level}s holds it",
            w.min(),
            domains
        );
        if let Some((n, value, t)) = partial.first() {
            s.push_str(&format!(
                "; best {level} {value}: {n} of {} pods fit",
                w.min()
            ));
            if let Some((pod, failures)) = &t.first_failure {
                if pod.is_empty() {
                    s.push_str(&format!(" ({})", Self::summarize(failures)));
                } else {
                    s.push_str(&format!(" ({pod}: {})", Self::summarize(failures)));
                }
            }
        }
        s
    }

    /// Idle nodes past the idle time, not held by a reservation minimum or a
    /// warm-spare setting, and never one with workloads (node agents,
    /// DaemonSet and mirror pods, are none).
    fn scale_down(&mut self) {
        let idle = |p: &Self, i: usize| {
            p.nodes[i].power == PowerState::On && !p.planned_on[i] && p.uses[i].runs_no_work()
        };
        let mut spares: BTreeMap<String, u32> = BTreeMap::new();
        let mut profile_spares: BTreeMap<String, u32> = BTreeMap::new();
        let mut kept_for_reservation: BTreeMap<usize, u32> = BTreeMap::new();
        for (ri, r) in self.reservations.iter().enumerate() {
            if r.active(self.now) {
                let up = (0..self.nodes.len())
                    .filter(|&i| self.reserved_by[i] == Some(ri) && self.up[i])
                    .count() as u32;
                kept_for_reservation.insert(ri, up);
            }
        }
        for i in 0..self.nodes.len() {
            if !idle(self, i) {
                continue;
            }
            let rack = self.nodes[i].rack.clone().unwrap_or_default();
            let profile = self.nodes[i].profile.clone().unwrap_or_default();
            let rack_kept = spares.get(&rack).copied().unwrap_or(0);
            let profile_kept = profile_spares.get(&profile).copied().unwrap_or(0);
            let profile_wants = self
                .policy
                .warm_spares_per_profile
                .get(&profile)
                .copied()
                .unwrap_or(0);
            if rack_kept < self.policy.warm_spares_per_rack || profile_kept < profile_wants {
                *spares.entry(rack).or_insert(0) += 1;
                *profile_spares.entry(profile).or_insert(0) += 1;
                continue;
            }
            let Some(since) = self.nodes[i].idle_since else {
                continue;
            };
            let idle_for = self.now.saturating_sub(since);
            if idle_for < self.policy.idle_power_off_after_s {
                continue;
            }
            if let Some(ri) = self.reserved_by[i] {
                let up = kept_for_reservation.entry(ri).or_insert(0);
                if *up <= self.reservations[ri].min_powered_on {
                    continue;
                }
                *up -= 1;
            }
            self.power_offs.push(Action::PowerOff {
                node: self.nodes[i].name.clone(),
                reason: format!(
                    "idle for {idle_for} s (threshold {} s)",
                    self.policy.idle_power_off_after_s
                ),
            });
        }
    }
}

/// The human-readable form of a plan (`accordctl plan`).
pub fn render(plan: &Plan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "Actions ({})", plan.actions.len());
    for a in &plan.actions {
        let _ = match a {
            Action::PowerOn {
                node,
                wave,
                for_workloads,
            } => writeln!(
                s,
                "  power on   {node} (wave {wave}) for {}",
                for_workloads.join(", ")
            ),
            Action::ApplyBiosProfile { node, profile } => {
                writeln!(s, "  bios       {node}: apply profile {profile}")
            }
            Action::ReconfigureMig {
                node,
                gpu,
                layout,
                for_workloads,
            } => writeln!(
                s,
                "  mig        {node} gpu {gpu} -> [{}] for {}",
                layout.join(", "),
                for_workloads.join(", ")
            ),
            Action::PowerOff { node, reason } => writeln!(s, "  power off  {node}: {reason}"),
        };
    }
    let _ = writeln!(s, "Placements ({})", plan.placements.len());
    for p in &plan.placements {
        let mut head = format!("  {}", p.workload);
        if let Some(d) = &p.domain {
            head.push_str(&format!(" in {d}"));
        }
        if let Some(r) = &p.reservation {
            head.push_str(&format!(" (reservation {r})"));
        }
        let _ = writeln!(s, "{head}");
        for pod in &p.pods {
            let devices: Vec<String> = pod
                .devices
                .iter()
                .map(|d| {
                    if d.capacity.is_empty() {
                        d.device.to_string()
                    } else {
                        let caps: Vec<String> = d
                            .capacity
                            .iter()
                            .map(|(k, v)| format!("{k}={}", quantity::Display(*v)))
                            .collect();
                        format!("{}[{}]", d.device, caps.join(","))
                    }
                })
                .collect();
            let _ = writeln!(
                s,
                "    {} -> {}{}{}",
                pod.pod,
                pod.node,
                if devices.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", devices.join(", "))
                },
                if pod.reclaimable {
                    " (reclaimable)"
                } else {
                    ""
                }
            );
        }
    }
    let _ = writeln!(s, "Unsatisfied ({})", plan.unsatisfied.len());
    for u in &plan.unsatisfied {
        match u.sources.first() {
            Some(src) => writeln!(s, "  {} ({src}): {}", u.workload, u.reason),
            None => writeln!(s, "  {}: {}", u.workload, u.reason),
        }
        .ok();
    }
    for n in &plan.notes {
        let _ = writeln!(s, "Note: {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{Slots, UpIndex};

    #[test]
    fn slots_count_pods_that_fit_whole_on_each_node() {
        let mut s = Slots::default();
        for free in [8, 4, 4, 3, 0] {
            s.add(free);
        }
        assert_eq!(s.pods_of(8), 1);
        assert_eq!(s.pods_of(4), 4);
        assert_eq!(s.pods_of(3), 5);
        assert_eq!(s.pods_of(1), 19);
        // Nodes with many GPUs are summed: an upper bound, never less
        // (16 and 17 free take 2 + 2 pods of 8; the bound says 33 / 8 = 4).
        s.add(16);
        s.add(17);
        assert_eq!(s.pods_of(8), 1 + 4);
        assert_eq!(s.pods_of(16), 2);
        // Pods of no GPU are not bounded; removing undoes adding.
        assert_eq!(s.pods_of(0), usize::MAX);
        s.remove(17);
        s.remove(8);
        assert_eq!(s.pods_of(8), 2);
    }

    #[test]
    fn up_index_finds_the_next_up_or_off_position() {
        let mut idx = UpIndex::new(200, 130);
        for p in [3, 64, 129] {
            idx.set_up(p);
        }
        let walk = |up: bool| {
            let mut out = Vec::new();
            let mut from = 0;
            while let Some(p) = idx.next(from, up) {
                out.push(p);
                from = p + 1;
            }
            out
        };
        assert_eq!(walk(true), [3, 64, 129]);
        let off = walk(false);
        assert_eq!(off.len(), 127);
        assert!(off.iter().all(|p| ![3, 64, 129].contains(p) && *p < 130));
        assert_eq!(idx.next(130, false), None);
        // `full` moves past up positions with nothing free, and stops at
        // the first that has some.
        idx.advance_full(|p| p < 64);
        assert_eq!(idx.full, 64);
        idx.advance_full(|_| true);
        assert_eq!(idx.full, 130);
    }
}
