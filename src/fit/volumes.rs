//! The volume filters of kube-scheduler v1.37.2's default profile, on the
//! model of `crate::demand::volumes`, in the profile's order:
//! VolumeRestrictions and NodeVolumeLimits, then VolumeBinding and
//! VolumeZone. Each failure is the plugin's name and its own words.

use std::collections::{BTreeMap, BTreeSet};

use super::{terms_match, Failure};
use crate::demand::{CsiVolume, PodVolumes, StaticVolume};
use crate::fleet::Node;

/// framework/plugins/nodevolumelimits/csi.go `ErrReasonMaxVolumeCountExceeded`.
pub const MAX_VOLUME_COUNT: &str = "NodeVolumeLimits: node(s) exceed max volume count";
/// volumebinding/binder.go `ErrReasonNodeConflict`.
pub const NODE_CONFLICT: &str =
    "VolumeBinding: node(s) didn't match PersistentVolume's node affinity";
/// volumebinding/binder.go `ErrReasonBindConflict`.
pub const BIND_CONFLICT: &str =
    "VolumeBinding: node(s) didn't find available persistent volumes to bind";
/// volumezone/volume_zone.go `ErrReasonConflict`.
pub const ZONE_CONFLICT: &str = "VolumeZone: node(s) had no available volume zone";

/// VolumeZone's labels (`topologyLabels`), and the GA key a beta one is
/// also looked up as (`translateToGALabel`).
const ZONE_KEYS: [(&str, &str); 4] = [
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    ("topology.kubernetes.io/zone", "topology.kubernetes.io/zone"),
    (
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
];

/// A PV's required node affinity on a node's labels
/// (component-helpers storage/volume `CheckNodeAffinity`).
fn pv_admits(affinity: Option<&Vec<crate::demand::NodeSelectorTerm>>, node: &Node) -> bool {
    affinity.is_none_or(|terms| terms_match(terms, &node.labels))
}

/// Where the plan put a waiting claim: the PV it binds, or the node its
/// volume is provisioned for (later pods using the claim go there, as the
/// scheduler's `selected-node` annotation sends them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedClaim {
    Volume(String),
    Node(String),
}

/// Claim (`namespace/name`) → where the plan put it.
pub type PlannedClaims = BTreeMap<String, PlannedClaim>;

/// What the node and the plan so far hold that a pod's volumes contend
/// for.
#[derive(Debug, Clone, Copy)]
pub struct VolumeContext<'a> {
    /// Claims placed by the plan's committed workloads and by the trial.
    pub planned: [&'a PlannedClaims; 2],
    /// CSI volumes attached to the node (its pods' and pods placed there).
    pub attached: &'a BTreeSet<CsiVolume>,
    /// The node's CSINode limits, driver → volumes.
    pub limits: Option<&'a BTreeMap<String, u32>>,
}

impl VolumeContext<'_> {
    fn planned(&self, claim: &str) -> Option<&PlannedClaim> {
        self.planned.iter().find_map(|m| m.get(claim))
    }

    fn taken(&self, pv: &str) -> bool {
        self.planned
            .iter()
            .flat_map(|m| m.values())
            .any(|p| matches!(p, PlannedClaim::Volume(v) if v == pv))
    }
}

/// A blocked pod; the attach limit; bound PVs' node affinity; waiting
/// claims bound to available PVs or provisioned where their class may;
/// bound PVs' zones.
pub fn volumes_fit(v: &PodVolumes, node: &Node, cx: VolumeContext<'_>) -> Result<(), Failure> {
    if let Some(b) = &v.blocked {
        return Err(Failure::new(
            format!("{}: {}", b.plugin, b.reason),
            String::new(),
        ));
    }
    attach_limit_fit(&v.csi, cx.attached, cx.limits)?;
    // binder.go FindPodVolumes: bound claims, then waiting ones.
    for b in &v.bound {
        if !pv_admits(b.node_affinity.as_ref(), node) {
            return Err(Failure::new(NODE_CONFLICT, format!("PV {}", b.pv)));
        }
    }
    if let Err(claim) = claim_choices(v, node, cx) {
        return Err(Failure::new(BIND_CONFLICT, format!("claim {claim}")));
    }
    zones_fit(v, node)
}

/// Where the pod's waiting claims go on `node`, or the first that cannot:
/// claims smallest first (`findMatchingVolumes` sorts by size), each
/// taking the smallest available PV its node admits and no other claim
/// holds (`FindMatchingVolume`), the rest provisioned
/// (`checkVolumeProvisions`: the class provisions, and its
/// allowedTopologies admit the node). A claim the plan already placed
/// stays where it is.
pub fn claim_choices<'a>(
    v: &'a PodVolumes,
    node: &Node,
    cx: VolumeContext<'_>,
) -> Result<Vec<(String, PlannedClaim)>, &'a str> {
    let mut order: Vec<_> = v.waiting.iter().collect();
    order.sort_by_key(|c| c.size);
    let mut chosen: Vec<(String, PlannedClaim)> = Vec::new();
    for c in order {
        let here = PlannedClaim::Node(node.name.clone());
        match cx.planned(&c.claim) {
            Some(PlannedClaim::Node(n)) if *n == node.name => continue,
            Some(PlannedClaim::Node(_)) => return Err(&c.claim),
            Some(PlannedClaim::Volume(pv)) => {
                let admits = c
                    .prebound
                    .iter()
                    .chain(&c.candidates)
                    .find(|s| s.pv == *pv)
                    .is_some_and(|s| pv_admits(s.node_affinity.as_ref(), node));
                if admits {
                    continue;
                }
                return Err(&c.claim);
            }
            None => {}
        }
        if let Some(sel) = &c.selected_node {
            if *sel != node.name {
                return Err(&c.claim);
            }
        } else {
            let free = |pv: &&StaticVolume| {
                !cx.taken(&pv.pv)
                    && !chosen
                        .iter()
                        .any(|(_, p)| matches!(p, PlannedClaim::Volume(x) if *x == pv.pv))
                    && pv_admits(pv.node_affinity.as_ref(), node)
            };
            let found = match &c.prebound {
                Some(pv) => Some(pv).filter(free),
                None => c.candidates.iter().find(free),
            };
            if let Some(pv) = found {
                chosen.push((c.claim.clone(), PlannedClaim::Volume(pv.pv.clone())));
                continue;
            }
        }
        let provisions = c
            .provisioning
            .as_ref()
            .is_some_and(|topo| topo.is_empty() || terms_match(topo, &node.labels));
        if !provisions {
            return Err(&c.claim);
        }
        chosen.push((c.claim.clone(), here));
    }
    Ok(chosen)
}

/// VolumeZone's Filter: a node with none of the zone labels passes; else
/// each bound PV's zone label must list the node's value of that key (or
/// of its GA key).
fn zones_fit(v: &PodVolumes, node: &Node) -> Result<(), Failure> {
    if !ZONE_KEYS.iter().any(|(k, _)| node.labels.contains_key(*k)) {
        return Ok(());
    }
    for b in &v.bound {
        for z in &b.zones {
            let ga = ZONE_KEYS
                .iter()
                .find(|(k, _)| *k == z.key)
                .map_or(z.key.as_str(), |(_, ga)| ga);
            let have = node.labels.get(&z.key).or_else(|| node.labels.get(ga));
            if !have.is_some_and(|h| z.values.contains(h)) {
                return Err(Failure::new(
                    ZONE_CONFLICT,
                    format!("PV {} is in {}={}", b.pv, z.key, z.values.join("__")),
                ));
            }
        }
    }
    Ok(())
}

/// NodeVolumeLimits (csi.go `Filter`): the pod's CSI volumes not yet
/// attached to the node, per driver, with those attached, within the
/// node's CSINode limit for that driver (a driver without one: no limit).
pub fn attach_limit_fit(
    pod: &[CsiVolume],
    attached: &BTreeSet<CsiVolume>,
    limits: Option<&BTreeMap<String, u32>>,
) -> Result<(), Failure> {
    let Some(limits) = limits.filter(|l| !l.is_empty()) else {
        return Ok(());
    };
    let new: BTreeSet<&CsiVolume> = pod.iter().filter(|v| !attached.contains(*v)).collect();
    for (driver, limit) in limits {
        let adding = new.iter().filter(|v| v.driver == *driver).count();
        if adding == 0 {
            continue;
        }
        let have = attached.iter().filter(|v| v.driver == *driver).count();
        if have + adding > *limit as usize {
            return Err(Failure::new(
                MAX_VOLUME_COUNT,
                format!("{driver}: {have} attached, {adding} more, limit {limit}"),
            ));
        }
    }
    Ok(())
}
