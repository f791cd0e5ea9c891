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

mod bind;
mod commit;
mod domains;
mod evaluate;
mod filter;
mod fragmentation;
mod index;
pub mod mig;
mod relations;
mod render;

pub use filter::filter_nodes;
use index::{DomainStats, LevelIndex, PodsPer, Slots, StatsCache, TooSmall, UpIndex};
pub use render::render;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::demand::{builtin_classes, Demand, PodSpec, TopologyMode, Workload};
use crate::device::DeviceKind;
use crate::fit::volumes::{self, claim_choices, volumes_fit, VolumeContext};
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
    /// Its namespace, labels, anti-affinity and ports, shared by the
    /// replicas of a pod set; only when the round filters pod relations.
    facts: Option<Rc<crate::fit::relations::PodFacts>>,
}

/// Nodes that rejected a pod for one reason.
#[derive(Debug, Clone, Default)]
struct FailureGroup {
    nodes: usize,
    /// One example's detail.
    detail: String,
    /// The first [`NAMED_NODES`] of them (named when explaining).
    names: Vec<String>,
}

/// Nodes named per failure in an explanation; the rest are counted.
const NAMED_NODES: usize = 6;

/// Failure category (the plugin and its words) → the nodes it rejected.
type FailureCounts = BTreeMap<String, FailureGroup>;

/// A tentative placement of a gang.
#[derive(Default)]
struct Trial {
    uses: BTreeMap<usize, NodeUse>,
    power_ons: BTreeSet<usize>,
    pods: Vec<(String, usize, Vec<DeviceAllocation>)>,
    /// Pods that could not be placed, with per-node failures of the first.
    first_failure: Option<(String, FailureCounts)>,
    /// The placed pods' facts, where the round filters pod relations.
    placed: Vec<(usize, Rc<crate::fit::relations::PodFacts>)>,
    /// Waiting claims the placed pods bind or provision.
    claims: volumes::PlannedClaims,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Cost {
    power_ons: usize,
    cold_racks: usize,
    power_w: u64,
    reconfigs: usize,
    /// With `policy.prefer_fast_boot`: the slowest expected boot of the
    /// nodes powered on (0 otherwise, and in lower bounds).
    boot_s: u64,
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
    /// Per topology level asked for so far: its domains (`None`: no node
    /// has it). See [`Planner::level`].
    levels: BTreeMap<String, Option<std::rc::Rc<LevelIndex>>>,
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
    /// Pods by node for inter-pod affinity, spread and ports; `None` in a
    /// round where no pod has such relations.
    relations: Option<relations::Relations>,
    /// CSINode attach limits by node index (NodeVolumeLimits).
    csi_limits: BTreeMap<usize, BTreeMap<String, u32>>,
    /// Waiting claims the plan has bound or provisioned so far.
    claims: volumes::PlannedClaims,
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

/// The device classes (built in, then the demand's), their selectors
/// compiled. They are read only by the claims of the pods to place
/// (`Planner::pods`): a round with none compiles nothing.
fn device_classes(demand: &Demand, cel: &mut CelEngine) -> BTreeMap<String, Vec<usize>> {
    let mut classes = BTreeMap::new();
    let claims = (demand.workloads.iter())
        .flat_map(|w| &w.pod_sets)
        .any(|s| !s.pod.claims.is_empty());
    if !claims {
        return classes;
    }
    let mut declared = demand.device_classes.clone();
    declared.sort_by(|a, b| (&a.name, &a.selectors).cmp(&(&b.name, &b.selectors)));
    for class in builtin_classes().into_iter().chain(declared) {
        let ids: Vec<usize> = class.selectors.iter().map(|s| cel.id(s)).collect();
        classes.entry(class.name).or_insert(ids);
    }
    classes
}

/// Each node's rack, as an index into `rack_names` (sorted). Nodes in
/// name order sit mostly rack by rack: the last rack found is tried
/// before a search.
fn racks_of(nodes: &[Cow<'_, Node>], rack_names: &[String]) -> Vec<Option<usize>> {
    let mut last: Option<(&str, usize)> = None;
    nodes
        .iter()
        .map(|n| {
            let r = n.rack.as_deref()?;
            match last {
                Some((name, k)) if name == r => Some(k),
                _ => {
                    let k = rack_names.binary_search_by(|x| x.as_str().cmp(r)).ok()?;
                    last = Some((&rack_names[k], k));
                    Some(k)
                }
            }
        })
        .collect()
}

fn count_free_gpus(node: &Node, used: &NodeUse) -> usize {
    node.devices
        .iter()
        .zip(&used.devices)
        .filter(|(d, u)| d.kind == DeviceKind::Gpu && !u.exclusive && u.shares == 0)
        .count()
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
        let classes = device_classes(demand, &mut cel);
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
        let rack_of = racks_of(&nodes, &rack_names);
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
        // Cheapest first; with `prefer_fast_boot`, of equal draw the one
        // measured to boot fastest (never measured: last).
        let boot = |i: usize| {
            if policy.prefer_fast_boot {
                nodes[i].expected_boot_s.unwrap_or(u64::MAX)
            } else {
                0
            }
        };
        static_order.sort_by_key(|&i| ((nodes[i].power_kw * 1000.0) as u64, boot(i), i));
        let mut planner = Planner {
            planned_on: vec![false; nodes.len()],
            levels: BTreeMap::new(),
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
            relations: None,
            csi_limits: BTreeMap::new(),
            claims: volumes::PlannedClaims::new(),
        };
        planner.csi_limits = planner
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((i, demand.csi_limits.get(&n.name)?.clone())))
            .collect();
        planner.relations = relations::Relations::for_round(&planner.nodes, demand);
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

    /// The domains of topology `level` (built on first ask).
    fn level(&mut self, level: &str) -> Option<std::rc::Rc<LevelIndex>> {
        if let Some(index) = self.levels.get(level) {
            return index.clone();
        }
        let index =
            index::level_index(&self.nodes, &self.static_order, level).map(std::rc::Rc::new);
        self.levels.insert(level.to_owned(), index.clone());
        index
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
}
