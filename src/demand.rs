//! Demand: pending workloads (gangs of pod sets) and what is already bound,
//! in the shape Kubernetes gives them. File form: JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod relations;
pub use relations::{
    HostPort, InclusionPolicy, LabelOperator, LabelRequirement, LabelSelector, PodAffinityTerm,
    PodRelations, SpreadConstraint,
};
mod daemon_sets;
pub use daemon_sets::DaemonSetPods;
mod volumes;
pub use volumes::{
    BoundVolume, CsiVolume, PodVolumes, StaticVolume, VolumeBlock, WaitingClaim, ZoneLabel,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toleration {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: TolerationOperator,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

/// One term of required node affinity: all expressions must hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AllocationMode {
    #[default]
    ExactCount,
    All,
}

/// `exactly` of a DRA device request, or one `firstAvailable` alternative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactRequest {
    /// Alternative name inside `first_available`.
    #[serde(default)]
    pub name: Option<String>,
    pub device_class: String,
    /// CEL expressions over `device`; all must be true.
    #[serde(default)]
    pub selectors: Vec<String>,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub allocation_mode: AllocationMode,
    /// Consumable-capacity requests (`gpu.nvidia.com/memory: 10Gi`).
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
    /// Device taints this request tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<crate::device::DeviceToleration>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRequest {
    pub name: String,
    #[serde(default)]
    pub exactly: Option<ExactRequest>,
    #[serde(default)]
    pub first_available: Vec<ExactRequest>,
}

/// All listed requests' devices must carry equal values of the attribute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constraint {
    /// Empty: all requests of the claim.
    #[serde(default)]
    pub requests: Vec<String>,
    pub match_attribute: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub name: String,
    pub requests: Vec<DeviceRequest>,
    #[serde(default)]
    pub constraints: Vec<Constraint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSpec {
    /// Effective requests (kube-scheduler's max(init, sum) + overhead, as
    /// the Kubernetes reader computes them); quantities.
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: any term may match.
    #[serde(default)]
    pub affinity: Vec<NodeSelectorTerm>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub claims: Vec<Claim>,
    /// The pod's labels that some pod's selector reads (others' affinity,
    /// anti-affinity and spread count the pod by them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Inter-pod affinity, anti-affinity, spread, host ports.
    #[serde(default, skip_serializing_if = "PodRelations::is_empty")]
    pub relations: PodRelations,
    /// What its volumes ask of a node.
    #[serde(default, skip_serializing_if = "PodVolumes::is_empty")]
    pub volumes: PodVolumes,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSet {
    pub name: String,
    #[serde(default = "one")]
    pub count: u32,
    pub pod: PodSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyMode {
    Required,
    Preferred,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyRequirement {
    /// A fleet topology level (`rack`, `block`, ...).
    pub level: String,
    pub mode: TopologyMode,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    pub namespace: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Gang minimum; default: every pod.
    #[serde(default)]
    pub min_count: Option<u32>,
    #[serde(default)]
    pub priority: i32,
    /// Creation time (seconds); older first among equal priorities.
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub topology: Option<TopologyRequirement>,
    /// Name of a reservation the workload wants to draw from.
    #[serde(default)]
    pub reservation: Option<String>,
    /// The objects it came from, first the one that defines it (its
    /// PodGroup, Job, ProvisioningRequest), then its pods: for
    /// explanations and for events on them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ObjectRef>,
    pub pod_sets: Vec<PodSet>,
    /// Where the plan approximates the scheduler that will place it
    /// (another scheduler's gang planned with kube-scheduler's filters):
    /// said in its explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approximation: Option<String>,
}

/// A Kubernetes object by kind, namespace and name, kept typed from the
/// translation to the event written about it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `group/version` (`v1` for the core group). Empty when the source is
    /// not an object the API server serves (a Kueue pod group is a label),
    /// so nothing can be written about it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
}

impl ObjectRef {
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            api_version: api_version.to_owned(),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            // Cluster-scoped (a ClusterQueue, a Volcano Queue).
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Sources as one line (`PodGroup ml/train, Pod ml/train-0`), for text.
pub fn sources_text(sources: &[ObjectRef]) -> String {
    sources
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Workload {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Pods in all sets; saturates at `u32::MAX` (a sum past it is
    /// refused by [`Demand::validate`] and by the planner's
    /// [`MAX_PODS_PER_WORKLOAD_CEILING`] check).
    pub fn pod_count(&self) -> u32 {
        self.pod_sets
            .iter()
            .fold(0u32, |n, s| n.saturating_add(s.count))
    }

    /// Pods in all sets, exactly (no `u32` overflow).
    pub fn pod_count_u64(&self) -> u64 {
        self.pod_sets.iter().map(|s| u64::from(s.count)).sum()
    }

    pub fn min(&self) -> u32 {
        self.min_count
            .unwrap_or_else(|| self.pod_count())
            .min(self.pod_count())
    }
}

/// No configuration may raise the per-workload limit above this; the
/// planner refuses a workload with more pods before it expands it into
/// per-pod entries, whatever produced the demand (a demand file included).
pub const MAX_PODS_PER_WORKLOAD_CEILING: u32 = 1_000_000;

/// Bounds on the demand one round plans. Defaults fit a 100,000-pod round:
/// up to 50,000 pods in one workload, 100,000 pending pods in all. A
/// workload over `max_pods_per_workload` is refused before it is expanded
/// into pods; workloads are admitted in key order (`namespace/name`) while
/// the round's total stays within `max_pods_per_round`, the rest refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_pods_per_workload: u32,
    pub max_pods_per_round: u32,
}

pub const DEFAULT_MAX_PODS_PER_WORKLOAD: u32 = 50_000;
pub const DEFAULT_MAX_PODS_PER_ROUND: u32 = 100_000;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_pods_per_workload: DEFAULT_MAX_PODS_PER_WORKLOAD,
            max_pods_per_round: DEFAULT_MAX_PODS_PER_ROUND,
        }
    }
}

impl Limits {
    /// Problems with the limits themselves, each naming its key.
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if self.max_pods_per_workload == 0 {
            problems.push(format!("{prefix}max_pods_per_workload: must be at least 1"));
        }
        if self.max_pods_per_workload > MAX_PODS_PER_WORKLOAD_CEILING {
            problems.push(format!(
                "{prefix}max_pods_per_workload: {} is above the ceiling of {MAX_PODS_PER_WORKLOAD_CEILING}",
                self.max_pods_per_workload
            ));
        }
        if self.max_pods_per_round < self.max_pods_per_workload {
            problems.push(format!(
                "{prefix}max_pods_per_round: {} is below max_pods_per_workload ({})",
                self.max_pods_per_round, self.max_pods_per_workload
            ));
        }
        problems
    }

    /// The per-workload limit in force: never above the ceiling.
    pub fn per_workload(&self) -> u32 {
        self.max_pods_per_workload
            .min(MAX_PODS_PER_WORKLOAD_CEILING)
    }
}

/// A device a bound pod holds: whole, or a share of its capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundDevice {
    pub name: String,
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundPod {
    pub node: String,
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
    #[serde(default)]
    pub devices: Vec<BoundDevice>,
    /// It runs because the node does (a DaemonSet's pod, a mirror pod):
    /// it takes the node's resources but is no work of the node's, so it
    /// neither keeps the node on nor blocks its repair (as
    /// cluster-autoscaler's drain rules treat such pods).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_agent: bool,
    /// Its owner asked that its node not be disrupted
    /// (`karpenter.sh/do-not-disrupt: "true"`,
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`): it
    /// keeps the node busy even as a node agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub do_not_disrupt: bool,
    /// The device-plugin devices the kubelet assigned it, as its node's
    /// agent reads them from the kubelet's pod-resources API: GPU and MIG
    /// UUIDs (`GPU-…`, `MIG-…`; a time-sliced replica's `::N` suffix is
    /// the same GPU). Empty when the agent does not say: its device-plugin
    /// GPUs are then taken as the first free ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_ids: Vec<String>,
    /// The DaemonSet (`namespace/name`) whose pod it is, where its
    /// controller is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set: Option<String>,
    /// A DaemonSet's pod: the keys of its `nodeSelector` (the Node labels
    /// that start and stop it there, as the GPU Operator's
    /// `nvidia.com/gpu.deploy.*`). Empty for other pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selector_keys: Vec<String>,
    /// Its required anti-affinity and host ports: what keeps other pods
    /// off its node or topology domain.
    #[serde(default, skip_serializing_if = "PodRelations::is_empty")]
    pub relations: PodRelations,
    /// Its CSI volumes, which its node's attach limit counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub csi_volumes: Vec<CsiVolume>,
}

impl BoundPod {
    /// Whether it makes its node busy: work, or a pod that must not be
    /// disrupted.
    pub fn keeps_node_busy(&self) -> bool {
        !self.node_agent || self.do_not_disrupt
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceClass {
    pub name: String,
    #[serde(default)]
    pub selectors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Demand {
    /// Device classes besides the built-in `gpu.nvidia.com`,
    /// `mig.nvidia.com` and `rdma.accord.dev`.
    #[serde(default)]
    pub device_classes: Vec<DeviceClass>,
    #[serde(default, deserialize_with = "at_most_max_workloads")]
    pub workloads: Vec<Workload>,
    #[serde(default)]
    pub bound: Vec<BoundPod>,
    /// DaemonSets: each runs a pod on every node its template admits, a
    /// freshly booted node too, before any workload: planned nodes count
    /// the pods they will run but do not run yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemon_sets: Vec<DaemonSetPods>,
    /// Namespaces' labels, for the namespace selectors of pod affinity
    /// terms. A namespace not listed has the one label the API server
    /// gives every namespace, `kubernetes.io/metadata.name`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// CSINodes' attach limits: node → CSI driver → volumes at most
    /// (`spec.drivers[].allocatable.count`; NodeVolumeLimits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub csi_limits: BTreeMap<String, BTreeMap<String, u32>>,
}

/// Workloads (or a trace's jobs) in one file at most: counted while the
/// file is read, so a hostile file is refused before it is built.
pub const MAX_WORKLOADS_IN_FILE: usize = 2_000_000;

fn at_most_max_workloads<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<Workload>, D::Error> {
    at_most(d, MAX_WORKLOADS_IN_FILE)
}

/// A JSON list of at most `max` elements, refused at the first past it
/// (nothing beyond it is built).
pub fn at_most<'de, D, T>(d: D, max: usize) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Bounded<T>(usize, std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Bounded<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {} entries", self.0)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(v) = seq.next_element()? {
                if out.len() == self.0 {
                    return Err(serde::de::Error::custom(format!(
                        "more than {} entries; refused while reading",
                        self.0
                    )));
                }
                out.push(v);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Bounded(max, std::marker::PhantomData))
}

#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct DemandError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Demand {
    pub fn from_json(text: &str, file: &str) -> Result<Demand, DemandError> {
        crate::json::from_str(text).map_err(|e| DemandError {
            file: file.to_owned(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    }
}

impl Demand {
    /// Every problem with the numbers and keys of a demand (a file, or a
    /// translation's output), one line each naming the workload or pod:
    /// unique workload keys, `min_count` ≤ the workload's pods, at least
    /// one pod, the per-workload and per-round limits, and quantities that
    /// parse and are not negative. Counts are unsigned by type.
    pub fn validate(&self, limits: &Limits) -> Vec<String> {
        let mut problems = Vec::new();
        let mut keys = std::collections::BTreeSet::new();
        let mut round: u64 = 0;
        let check_requests =
            |what: &str, requests: &BTreeMap<String, String>, problems: &mut Vec<String>| {
                for (k, q) in requests {
                    match crate::quantity::parse(q) {
                        Ok(v) if v < 0 => {
                            problems.push(format!("{what}: {k}: negative quantity {q:?}"))
                        }
                        Ok(_) => {}
                        Err(e) => problems.push(format!("{what}: {k}: {e}")),
                    }
                }
            };
        for w in &self.workloads {
            let key = w.key();
            if !keys.insert(key.clone()) {
                problems.push(format!("workload {key}: listed more than once"));
            }
            let pods = w.pod_count_u64();
            if pods == 0 {
                problems.push(format!("workload {key}: no pods"));
            }
            if pods > u64::from(limits.per_workload()) {
                problems.push(format!(
                    "workload {key}: {pods} pods exceed the limit of {} pods per workload",
                    limits.per_workload()
                ));
            }
            if let Some(m) = w.min_count {
                if m == 0 {
                    // A gang of none would be "placed" with nothing
                    // provisioned (upstream's PodGroup minCount is at
                    // least 1).
                    problems.push(format!(
                        "workload {key}: min_count 0; a gang needs at least 1"
                    ));
                } else if u64::from(m) > pods {
                    problems.push(format!(
                        "workload {key}: min_count {m} is larger than its {pods} pods"
                    ));
                }
            }
            round = round.saturating_add(pods);
            for s in &w.pod_sets {
                let what = format!("workload {key} pod set {}", s.name);
                check_requests(&what, &s.pod.requests, &mut problems);
                check_claims(&what, &s.pod.claims, &mut problems);
            }
        }
        if round > u64::from(limits.max_pods_per_round) {
            problems.push(format!(
                "{round} pending pods in all exceed the limit of {} pods per round",
                limits.max_pods_per_round
            ));
        }
        for b in &self.bound {
            check_requests(
                &format!("bound pod {}/{}", b.namespace, b.name),
                &b.requests,
                &mut problems,
            );
        }
        problems
    }
}

/// Kubernetes' own bounds on a ResourceClaim, resource.k8s.io/v1, as the
/// API server validates them (k8s.io/kubernetes `pkg/apis/resource/types.go`:
/// `DeviceRequestsMaxSize` (= `AllocationResultsMaxSize`, 32; also the
/// requests one constraint names), `DeviceConstraintsMaxSize`,
/// `DeviceConfigMaxSize`, `FirstAvailableDeviceRequestMaxSize`,
/// `DeviceSelectorsMaxSize`, `DeviceTolerationsMaxLength`). A claim past
/// them is refused by [`check_claim_bounds`]: in a demand file
/// ([`Demand::validate`]) and in accord-kube's translation, before anything
/// is built per request.
pub const MAX_CLAIM_REQUESTS: usize = 32;
pub const MAX_CLAIM_CONSTRAINTS: usize = 32;
pub const MAX_CLAIM_CONFIG: usize = 32;
pub const MAX_FIRST_AVAILABLE: usize = 8;
pub const MAX_REQUEST_SELECTORS: usize = 32;
pub const MAX_REQUEST_TOLERATIONS: usize = 16;

/// A claim's lists, as Kubernetes bounds them, read by index and length
/// only: the demand's [`Claim`] is one, accord-kube's view of a
/// `ResourceClaimSpec` another, so [`check_claim_bounds`] is the one check
/// of both, made before anything is built from the lists.
pub trait ClaimLists {
    /// How many requests.
    fn requests(&self) -> usize;
    /// Request `i`'s name.
    fn request_name(&self, i: usize) -> &str;
    /// How many `firstAvailable` subrequests request `i` has.
    fn first_available(&self, i: usize) -> usize;
    /// How many selectors and tolerations request `i`'s `exactly` (`sub`
    /// `None`) or its subrequest `sub` has; (0, 0) where there is none.
    fn device_lists(&self, i: usize, sub: Option<usize>) -> (usize, usize);
    /// How many constraints.
    fn constraints(&self) -> usize;
    /// How many requests constraint `i` names.
    fn constraint_requests(&self, i: usize) -> usize;
    /// How many `config` entries (a demand file has none).
    fn config(&self) -> usize {
        0
    }
}

/// Kubernetes' bounds on one claim (see [`MAX_CLAIM_REQUESTS`]): what is
/// past them, one problem per list. A list's length is read before any of
/// its items, and a list past its bound is not read into, so the work and
/// the problems are bounded by the limits, never by the lists.
pub fn check_claim_bounds(c: &impl ClaimLists) -> Vec<String> {
    let mut problems = Vec::new();
    let requests = c.requests();
    if requests > MAX_CLAIM_REQUESTS {
        problems.push(format!(
            "{requests} requests (at most {MAX_CLAIM_REQUESTS})"
        ));
    } else {
        for i in 0..requests {
            let name = c.request_name(i);
            let subs = c.first_available(i);
            if subs > MAX_FIRST_AVAILABLE {
                problems.push(format!(
                    "request {name}: {subs} firstAvailable alternatives (at most {MAX_FIRST_AVAILABLE})"
                ));
                continue;
            }
            for sub in std::iter::once(None).chain((0..subs).map(Some)) {
                let (selectors, tolerations) = c.device_lists(i, sub);
                if selectors > MAX_REQUEST_SELECTORS {
                    problems.push(format!(
                        "request {name}: {selectors} selectors (at most {MAX_REQUEST_SELECTORS})"
                    ));
                }
                if tolerations > MAX_REQUEST_TOLERATIONS {
                    problems.push(format!(
                        "request {name}: {tolerations} tolerations (at most {MAX_REQUEST_TOLERATIONS})"
                    ));
                }
            }
        }
    }
    let constraints = c.constraints();
    if constraints > MAX_CLAIM_CONSTRAINTS {
        problems.push(format!(
            "{constraints} constraints (at most {MAX_CLAIM_CONSTRAINTS})"
        ));
    } else {
        for i in 0..constraints {
            let n = c.constraint_requests(i);
            if n > MAX_CLAIM_REQUESTS {
                problems.push(format!(
                    "constraint {i}: {n} requests named (at most {MAX_CLAIM_REQUESTS})"
                ));
            }
        }
    }
    let config = c.config();
    if config > MAX_CLAIM_CONFIG {
        problems.push(format!(
            "{config} config entries (at most {MAX_CLAIM_CONFIG})"
        ));
    }
    problems
}

impl ClaimLists for Claim {
    fn requests(&self) -> usize {
        self.requests.len()
    }
    fn request_name(&self, i: usize) -> &str {
        &self.requests[i].name
    }
    fn first_available(&self, i: usize) -> usize {
        self.requests[i].first_available.len()
    }
    fn device_lists(&self, i: usize, sub: Option<usize>) -> (usize, usize) {
        let r = &self.requests[i];
        match sub {
            None => r.exactly.as_ref(),
            Some(j) => r.first_available.get(j),
        }
        .map_or((0, 0), |e| (e.selectors.len(), e.tolerations.len()))
    }
    fn constraints(&self) -> usize {
        self.constraints.len()
    }
    fn constraint_requests(&self, i: usize) -> usize {
        self.constraints[i].requests.len()
    }
}

fn check_claims(what: &str, claims: &[Claim], problems: &mut Vec<String>) {
    for c in claims {
        let at = format!("{what} claim {}", c.name);
        problems.extend(
            check_claim_bounds(c)
                .into_iter()
                .map(|p| format!("{at}: {p}")),
        );
    }
}

/// The built-in device classes, as CEL selectors.
pub fn builtin_classes() -> Vec<DeviceClass> {
    vec![
        DeviceClass {
            name: "gpu.nvidia.com".into(),
            selectors: vec!["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'".into()],
        },
        DeviceClass {
            name: "mig.nvidia.com".into(),
            selectors: vec!["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'".into()],
        },
        DeviceClass {
            name: "rdma.accord.dev".into(),
            selectors: vec!["device.driver == 'rdma.accord.dev'".into()],
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(selectors: usize) -> ExactRequest {
        ExactRequest {
            name: None,
            device_class: "gpu.nvidia.com".into(),
            selectors: vec!["true".into(); selectors],
            count: 1,
            allocation_mode: AllocationMode::default(),
            capacity: BTreeMap::new(),
            tolerations: Vec::new(),
        }
    }

    fn request(name: &str, exactly: Option<ExactRequest>, alts: usize) -> DeviceRequest {
        DeviceRequest {
            name: name.into(),
            exactly,
            first_available: vec![exact(0); alts],
        }
    }

    #[test]
    fn claims_past_kubernetes_bounds_are_named_list_by_list() {
        let within = Claim {
            name: "c".into(),
            requests: vec![request("r", Some(exact(MAX_REQUEST_SELECTORS)), 0); MAX_CLAIM_REQUESTS],
            constraints: vec![
                Constraint {
                    requests: vec!["r".into(); MAX_CLAIM_REQUESTS],
                    match_attribute: "a".into(),
                };
                MAX_CLAIM_CONSTRAINTS
            ],
        };
        assert!(check_claim_bounds(&within).is_empty());
        let huge = Claim {
            name: "c".into(),
            requests: vec![request("r", None, 0); 10_000],
            constraints: vec![Constraint {
                requests: vec!["r".into(); 10_000],
                match_attribute: "a".into(),
            }],
        };
        assert_eq!(
            check_claim_bounds(&huge),
            [
                "10000 requests (at most 32)",
                "constraint 0: 10000 requests named (at most 32)"
            ]
        );
        let deep = Claim {
            name: "c".into(),
            requests: vec![
                request("alts", None, 10_000),
                request("sel", Some(exact(10_000)), 0),
            ],
            constraints: Vec::new(),
        };
        assert_eq!(
            check_claim_bounds(&deep),
            [
                "request alts: 10000 firstAvailable alternatives (at most 8)",
                "request sel: 10000 selectors (at most 32)"
            ]
        );
    }
}
