//! Fit: would kube-scheduler (with its DRA plugin) put this pod on this
//! node? Node fit follows kube-scheduler's NodeResourcesFit, TaintToleration
//! and NodeAffinity plugins; device fit follows DRA structured parameters.

mod cel_env;
mod cel_library;
mod cel_limits;
mod cel_parse;
mod cel_regex;
mod cel_url;
mod devices;
pub mod relations;
pub mod volumes;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::demand::{
    NodeSelectorRequirement, NodeSelectorTerm, PodSpec, SelectorOperator, TaintEffect, Toleration,
    TolerationOperator,
};
use crate::fleet::Node;
use crate::quantity::{self, Milli};

pub use crate::device::fingerprint;
pub use cel_env::check as check_selector;
pub use cel_env::CelEngine;
pub(crate) use cel_env::FnvMap;
pub use cel_limits::{MAX_SELECTOR_BYTES, MAX_SELECTOR_COST};
pub use devices::{
    allocate_compiled, allocate_devices, compile_devices, DeviceAllocation, DeviceContext,
    DeviceUse, PodDevices, MAX_CONSTRAINT_COMBINATIONS,
};

pub use crate::device::{GPU_RESOURCE, MIG_RESOURCE_PREFIX};

/// Why a pod does not fit a node. `category` groups nodes in explanations
/// ("12 nodes: insufficient nvidia.com/gpu"); `detail` is one example.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Failure {
    pub category: String,
    pub detail: String,
}

impl Failure {
    pub fn new(category: impl Into<String>, detail: impl Into<String>) -> Self {
        Failure {
            category: category.into(),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.category)
        } else {
            write!(f, "{} ({})", self.category, self.detail)
        }
    }
}

/// A pod's requests, parsed once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodRequest {
    pub cpu: Milli,
    pub memory: Milli,
    /// Extended resources other than GPUs and MIG devices.
    pub extended: BTreeMap<String, Milli>,
    /// Whole GPUs through the device-plugin resource `nvidia.com/gpu`.
    pub gpus: u32,
    /// MIG devices by profile through `nvidia.com/mig-<profile>`.
    pub mig: BTreeMap<String, u32>,
}

impl PodRequest {
    pub fn parse(spec: &PodSpec) -> Result<PodRequest, String> {
        Self::parse_requests(&spec.requests)
    }

    /// [`PodRequest::parse`] of a pod's `requests` alone (a bound pod's).
    pub fn parse_requests(requests: &BTreeMap<String, String>) -> Result<PodRequest, String> {
        let mut r = PodRequest::default();
        for (name, q) in requests {
            let v = quantity::parse(q).map_err(|e| format!("requests.{name}: {e}"))?;
            match name.as_str() {
                "cpu" => r.cpu = v,
                "memory" => r.memory = v,
                GPU_RESOURCE => r.gpus = whole(name, v)?,
                n if n.starts_with(MIG_RESOURCE_PREFIX) => {
                    r.mig
                        .insert(n[MIG_RESOURCE_PREFIX.len()..].to_owned(), whole(name, v)?);
                }
                _ => {
                    r.extended.insert(name.clone(), v);
                }
            }
        }
        Ok(r)
    }
}

fn whole(name: &str, v: Milli) -> Result<u32, String> {
    if v % 1000 != 0 || v < 0 {
        return Err(format!("requests.{name}: must be a whole number"));
    }
    u32::try_from(v / 1000).map_err(|_| format!("requests.{name}: too large"))
}

/// What is already taken on a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeUse {
    pub cpu: Milli,
    pub memory: Milli,
    pub pods: i64,
    /// Of `pods`, those that run because the node does (DaemonSet and
    /// mirror pods): they take resources, but make no work.
    pub node_agents: i64,
    pub extended: BTreeMap<String, Milli>,
    pub devices: Vec<DeviceUse>,
    /// CSI volumes attached (NodeVolumeLimits counts them per driver).
    pub csi: std::collections::BTreeSet<crate::demand::CsiVolume>,
}

impl NodeUse {
    pub fn new(node: &Node) -> NodeUse {
        NodeUse {
            devices: vec![DeviceUse::default(); node.devices.len()],
            ..NodeUse::default()
        }
    }

    /// No pod but node agents: nothing keeps the node busy.
    pub fn runs_no_work(&self) -> bool {
        self.pods <= self.node_agents
    }

    /// A pod's CSI volumes, attached once however many pods use them.
    pub fn attach(&mut self, volumes: &[crate::demand::CsiVolume]) {
        self.csi.extend(volumes.iter().cloned());
    }

    /// Saturating: requests come from outside, and a full node is the
    /// safe reading of a sum past `i64`.
    pub fn add(&mut self, req: &PodRequest) {
        self.cpu = self.cpu.saturating_add(req.cpu);
        self.memory = self.memory.saturating_add(req.memory);
        self.pods = self.pods.saturating_add(1);
        for (k, v) in &req.extended {
            let e = self.extended.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }
}

fn tolerates(
    tolerations: &[Toleration],
    key: &str,
    value: Option<&str>,
    effect: TaintEffect,
) -> bool {
    tolerations.iter().any(|t| {
        let key_ok = match &t.key {
            None => t.operator == TolerationOperator::Exists,
            Some(k) => k == key,
        };
        let value_ok = match t.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => t.value.as_deref().unwrap_or("") == value.unwrap_or(""),
        };
        key_ok && value_ok && t.effect.is_none_or(|e| e == effect)
    })
}

fn requirement_holds(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let v = labels.get(&r.key);
    let num = |s: &str| s.parse::<i64>().ok();
    match r.operator {
        SelectorOperator::In => v.is_some_and(|v| r.values.contains(v)),
        SelectorOperator::NotIn => v.is_none_or(|v| !r.values.contains(v)),
        SelectorOperator::Exists => v.is_some(),
        SelectorOperator::DoesNotExist => v.is_none(),
        SelectorOperator::Gt | SelectorOperator::Lt => {
            let (Some(have), Some(want)) = (
                v.and_then(|v| num(v)),
                r.values.first().and_then(|w| num(w)),
            ) else {
                return false;
            };
            if r.operator == SelectorOperator::Gt {
                have > want
            } else {
                have < want
            }
        }
    }
}

/// taint_toleration.go `ErrReasonNotMatch`, as the plugin words it.
pub const UNTOLERATED_TAINT: &str = "TaintToleration: node(s) had untolerated taint(s)";
/// node_affinity.go `ErrReasonPod`.
pub const NODE_AFFINITY: &str = "NodeAffinity: node(s) didn't match Pod's node affinity/selector";

/// Taints, node selector, required node affinity: what does not depend on
/// what else runs on the node.
pub fn static_fit(spec: &PodSpec, node: &Node) -> Result<(), Failure> {
    taints_fit(spec, node)?;
    node_affinity_fit(spec, node)
}

/// TaintToleration: every NoSchedule and NoExecute taint tolerated.
pub fn taints_fit(spec: &PodSpec, node: &Node) -> Result<(), Failure> {
    for t in &node.taints {
        if t.effect == TaintEffect::PreferNoSchedule {
            continue;
        }
        if !tolerates(&spec.tolerations, &t.key, t.value.as_deref(), t.effect) {
            let shown = match &t.value {
                Some(v) => format!("{}={v}:{:?}", t.key, t.effect),
                None => format!("{}:{:?}", t.key, t.effect),
            };
            return Err(Failure::new(UNTOLERATED_TAINT, shown));
        }
    }
    Ok(())
}

/// NodeAffinity: the node selector and required node affinity
/// (`nodeaffinity.GetRequiredNodeAffinity`).
pub fn node_affinity_fit(spec: &PodSpec, node: &Node) -> Result<(), Failure> {
    for (k, v) in &spec.node_selector {
        if node.labels.get(k) != Some(v) {
            return Err(Failure::new(
                NODE_AFFINITY,
                format!(
                    "nodeSelector {k}={v}, node has {k}={}",
                    node.labels.get(k).map_or("<unset>", String::as_str)
                ),
            ));
        }
    }
    if !spec.affinity.is_empty() && !terms_match(&spec.affinity, &node.labels) {
        return Err(Failure::new(NODE_AFFINITY, "required node affinity"));
    }
    Ok(())
}

/// Whether any term holds for `labels` (component-helpers
/// `MatchNodeSelectorTerms`). A term without expressions selects no node
/// (`nodeSelectorTerm.match`: "nil or empty term selects no objects").
pub fn terms_match(terms: &[NodeSelectorTerm], labels: &BTreeMap<String, String>) -> bool {
    terms.iter().any(|term| {
        !term.match_expressions.is_empty()
            && term
                .match_expressions
                .iter()
                .all(|r| requirement_holds(r, labels))
    })
}

/// CPU, memory, pod count and extended resources (GPUs and MIG devices are
/// checked as devices).
pub fn resource_fit(req: &PodRequest, node: &Node, used: &NodeUse) -> Result<(), Failure> {
    let a = &node.allocatable;
    let check = |name: &str, want: Milli, used: Milli, have: Milli| {
        if want > 0 && used.saturating_add(want) > have {
            Err(Failure::new(
                format!("NodeResourcesFit: Insufficient {name}"),
                format!(
                    "{} requested, {} free",
                    quantity::Display(want),
                    quantity::Display(have.saturating_sub(used).max(0))
                ),
            ))
        } else {
            Ok(())
        }
    };
    if used.pods.saturating_add(1) > a.pods {
        return Err(Failure::new(
            "NodeResourcesFit: Too many pods",
            format!("{} pods allowed", a.pods),
        ));
    }
    check("cpu", req.cpu, used.cpu, a.cpu)?;
    check("memory", req.memory, used.memory, a.memory)?;
    for (k, v) in &req.extended {
        let have = a.extended.get(k).copied().unwrap_or(0);
        let u = used.extended.get(k).copied().unwrap_or(0);
        check(k, *v, u, have)?;
    }
    Ok(())
}
