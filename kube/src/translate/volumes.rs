//! A pod's volumes as kube-scheduler v1.37.2 reads them: PVCs, the PVs
//! they are bound to, StorageClasses and CSINodes resolved into
//! `accord::demand::PodVolumes` (pkg/scheduler/framework/plugins:
//! volumebinding, volumezone, volumerestrictions, nodevolumelimits; the
//! PV matching of component-helpers storage/volume/pv_helpers.go).

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{
    BoundVolume, CsiVolume, NodeSelectorRequirement, NodeSelectorTerm, PodVolumes,
    SelectorOperator, StaticVolume, VolumeBlock, WaitingClaim, ZoneLabel,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;

/// The PV controller's mark of a finished binding (`AnnBindCompleted`).
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set by the scheduler when it picks a node for a claim to provision
/// (`AnnSelectedNode`).
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The class of a claim that predates `spec.storageClassName`.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// A class that cannot provision (`volume.NotSupportedProvisioner`).
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// VolumeZone's labels (`topologyLabels`).
const ZONE_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];
/// In-tree provisioners CSI migration renames (csi-translation-lib): a
/// claim of theirs counts under the CSI driver only where the node has
/// migrated, which Accord does not read: not counted.
const IN_TREE: [&str; 7] = [
    "kubernetes.io/aws-ebs",
    "kubernetes.io/gce-pd",
    "kubernetes.io/azure-disk",
    "kubernetes.io/azure-file",
    "kubernetes.io/cinder",
    "kubernetes.io/vsphere-volume",
    "kubernetes.io/portworx-volume",
];

/// The storage objects of a snapshot, by key.
#[derive(Default)]
pub(super) struct Storage<'a> {
    pub claims: BTreeMap<(String, String), &'a core::PersistentVolumeClaim>,
    pub volumes: BTreeMap<String, &'a core::PersistentVolume>,
    pub classes: BTreeMap<String, &'a storage::StorageClass>,
    /// Claims some bound pod uses (VolumeRestrictions' ReadWriteOncePod).
    pub in_use: BTreeSet<(String, String)>,
}

fn meta_name(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

impl<'a> Storage<'a> {
    pub fn add_claim(&mut self, c: &'a core::PersistentVolumeClaim) {
        let ns = c
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        self.claims.insert((ns, meta_name(&c.metadata)), c);
    }
    pub fn add_volume(&mut self, v: &'a core::PersistentVolume) {
        self.volumes.insert(meta_name(&v.metadata), v);
    }
    pub fn add_class(&mut self, c: &'a storage::StorageClass) {
        self.classes.insert(meta_name(&c.metadata), c);
    }
    /// A bound, running pod's claims.
    pub fn add_user(&mut self, ns: &str, spec: &core::PodSpec) {
        for v in spec.volumes.iter().flatten() {
            if let Some(c) = &v.persistent_volume_claim {
                self.in_use.insert((ns.to_owned(), c.claim_name.clone()));
            }
        }
    }
}

/// A CSINode's attach limits, driver → count.
pub(super) fn csi_limits(n: &storage::CSINode) -> BTreeMap<String, u32> {
    n.spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
        })
        .collect()
}

/// The claim a volume names: a PVC's, or a generic ephemeral volume's
/// (`<pod>-<volume>`, where the pod has a name).
fn claim_name(pod: Option<&str>, v: &core::Volume) -> Option<(String, bool)> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some((c.claim_name.clone(), false));
    }
    v.ephemeral.as_ref()?;
    Some((format!("{}-{}", pod?, v.name), true))
}

fn class_of(c: &core::PersistentVolumeClaim) -> String {
    c.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .or_else(|| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(BETA_CLASS).cloned())
        })
        .unwrap_or_default()
}

fn block(plugin: &str, reason: String) -> Option<VolumeBlock> {
    Some(VolumeBlock {
        plugin: plugin.to_owned(),
        reason,
        at_filter: false,
    })
}

/// A pending pod's volumes (`pod`: its name, where it has one). What keeps
/// it off every node is found in the order the scheduler's PreFilters run
/// (VolumeRestrictions: a missing claim; VolumeBinding: a lost or deleted
/// claim, then an unbound `Immediate` one; VolumeZone: a missing PV), then
/// VolumeRestrictions' Filter (a ReadWriteOncePod claim in use).
pub(super) fn pod_volumes(
    ns: &str,
    pod: Option<&str>,
    spec: &core::PodSpec,
    s: &Storage<'_>,
) -> PodVolumes {
    let mut out = PodVolumes::default();
    // The claims, each once, with whether it is an ephemeral volume's.
    let mut claims: Vec<(String, Option<&core::PersistentVolumeClaim>, bool)> = Vec::new();
    for v in spec.volumes.iter().flatten() {
        let template = v
            .ephemeral
            .as_ref()
            .and_then(|e| e.volume_claim_template.as_ref());
        let Some((name, ephemeral)) = claim_name(pod, v) else {
            // An ephemeral volume of a pod not created yet: its claim is
            // made from the template when the pod is.
            if let Some(t) = template {
                template_claim(ns, &v.name, &t.spec, s, &mut out);
            }
            continue;
        };
        match s.claims.get(&(ns.to_owned(), name.clone())) {
            Some(c) => claims.push((name, Some(c), ephemeral)),
            None if ephemeral && template.is_some() => {
                if let Some(t) = template {
                    template_claim(ns, &name, &t.spec, s, &mut out);
                }
            }
            None => claims.push((name, None, ephemeral)),
        }
    }
    if let Some((name, ..)) = claims.iter().find(|(_, c, _)| c.is_none()) {
        out.blocked = block(
            "VolumeRestrictions",
            format!("persistentvolumeclaim \"{name}\" not found"),
        );
        return out;
    }
    let claims: Vec<(String, &core::PersistentVolumeClaim, bool)> = claims
        .into_iter()
        .filter_map(|(n, c, e)| Some((n, c?, e)))
        .collect();
    if let Some(why) = claims.iter().find_map(|(name, c, _)| claim_gone(c, name)) {
        out.blocked = Some(why);
        return out;
    }
    let mut missing_pv = None;
    for (name, c, _) in &claims {
        if let Some(csi) = csi_volume(ns, name, c, s) {
            out.csi.push(csi);
        }
        let spec = c.spec.clone().unwrap_or_default();
        let pv_name = spec.volume_name.clone().unwrap_or_default();
        let annotated = c
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED));
        if !pv_name.is_empty() && annotated {
            match s.volumes.get(&pv_name) {
                Some(pv) => out.bound.push(BoundVolume {
                    pv: pv_name,
                    node_affinity: pv_affinity(pv),
                    zones: zone_labels(pv),
                }),
                None => missing_pv = missing_pv.or(Some(pv_name)),
            }
            continue;
        }
        let class = class_of(c);
        if !(pv_name.is_empty() && waits_for_consumer(&class, s)) {
            out.blocked = block(
                "VolumeBinding",
                "pod has unbound immediate PersistentVolumeClaims".to_owned(),
            );
            return out;
        }
        out.waiting
            .push(waiting_claim(ns, name, c, &spec, &class, s));
    }
    if let Some(pv) = missing_pv {
        out.blocked = block("VolumeZone", format!("persistentvolume \"{pv}\" not found"));
        return out;
    }
    let taken = claims.iter().any(|(name, c, ephemeral)| {
        !ephemeral && read_write_once_pod(c) && s.in_use.contains(&(ns.to_owned(), name.clone()))
    });
    if taken {
        out.blocked = Some(VolumeBlock {
            plugin: "VolumeRestrictions".to_owned(),
            reason: "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod".to_owned(),
            at_filter: true,
        });
    }
    out
}

fn read_write_once_pod(c: &core::PersistentVolumeClaim) -> bool {
    c.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod"))
}

/// A claim lost or being deleted (volume_binding.go `podHasPVCs`).
fn claim_gone(c: &core::PersistentVolumeClaim, name: &str) -> Option<VolumeBlock> {
    if c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        let pv = c
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        return block(
            "VolumeBinding",
            format!(
                "persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume \"{pv}\""
            ),
        );
    }
    if c.metadata.deletion_timestamp.is_some() {
        return block(
            "VolumeBinding",
            format!("persistentvolumeclaim \"{name}\" is being deleted"),
        );
    }
    None
}

/// `volume.IsDelayBindingMode`: the class exists and binds on first
/// consumer.
fn waits_for_consumer(class: &str, s: &Storage<'_>) -> bool {
    !class.is_empty()
        && s.classes
            .get(class)
            .and_then(|c| c.volume_binding_mode.as_deref())
            == Some("WaitForFirstConsumer")
}

/// An ephemeral volume's claim, not created yet: it waits if its class
/// does (an `Immediate` class provisions it before the pod is placed, so
/// it asks nothing Accord can see).
fn template_claim(
    ns: &str,
    name: &str,
    spec: &core::PersistentVolumeClaimSpec,
    s: &Storage<'_>,
    out: &mut PodVolumes,
) {
    let class = spec.storage_class_name.clone().unwrap_or_default();
    if !waits_for_consumer(&class, s) {
        return;
    }
    let c = core::PersistentVolumeClaim {
        spec: Some(spec.clone()),
        ..Default::default()
    };
    out.waiting
        .push(waiting_claim(ns, name, &c, spec, &class, s));
}

fn storage_bytes(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<u128> {
    let Some(q) = q else {
        return Some(0);
    };
    let milli = accord::quantity::parse(&q.0).ok()?;
    u128::try_from(milli).ok().map(|m| m.div_ceil(1000))
}

fn waiting_claim(
    ns: &str,
    name: &str,
    c: &core::PersistentVolumeClaim,
    spec: &core::PersistentVolumeClaimSpec,
    class: &str,
    s: &Storage<'_>,
) -> WaitingClaim {
    let request = storage_bytes(
        spec.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    );
    let mut prebound = None;
    let mut candidates: Vec<(u128, StaticVolume)> = Vec::new();
    for (pv_name, pv) in &s.volumes {
        let Some(pvs) = pv.spec.as_ref() else {
            continue;
        };
        let Some(have) = request.and_then(|r| {
            let cap = storage_bytes(pvs.capacity.as_ref().and_then(|c| c.get("storage")))?;
            (cap >= r).then_some(cap)
        }) else {
            continue;
        };
        let mode = |m: &Option<String>| m.clone().unwrap_or_else(|| "Filesystem".into());
        if mode(&spec.volume_mode) != mode(&pvs.volume_mode)
            || spec.volume_attributes_class_name != pvs.volume_attributes_class_name
            || pv.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let volume = StaticVolume {
            pv: pv_name.clone(),
            node_affinity: pv_affinity(pv),
        };
        if let Some(r) = &pvs.claim_ref {
            let uid_ok = match (&r.uid, &c.metadata.uid) {
                (Some(a), Some(b)) => a == b,
                (Some(_), None) => false,
                _ => true,
            };
            if r.name.as_deref() == Some(name) && r.namespace.as_deref() == Some(ns) && uid_ok {
                prebound = Some(volume);
                break;
            }
            continue;
        }
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        let pv_class = pvs.storage_class_name.clone().unwrap_or_default();
        if phase != Some("Available")
            || pv_class != class
            || !selector_matches(spec.selector.as_ref(), pv.metadata.labels.as_ref())
            || !spec
                .access_modes
                .iter()
                .flatten()
                .all(|m| pvs.access_modes.iter().flatten().any(|h| h == m))
        {
            continue;
        }
        candidates.push((have, volume));
    }
    candidates.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.pv.cmp(&b.1.pv)));
    let provisioning = s.classes.get(class).and_then(|sc| {
        if sc.provisioner.is_empty() || sc.provisioner == NO_PROVISIONER {
            return None;
        }
        Some(
            sc.allowed_topologies
                .iter()
                .flatten()
                .map(|t| NodeSelectorTerm {
                    match_expressions: t
                        .match_label_expressions
                        .iter()
                        .flatten()
                        .map(|e| NodeSelectorRequirement {
                            key: e.key.clone(),
                            operator: SelectorOperator::In,
                            values: e.values.clone(),
                        })
                        .collect(),
                })
                .collect(),
        )
    });
    WaitingClaim {
        claim: format!("{ns}/{name}"),
        size: request.unwrap_or(u128::MAX),
        selected_node: c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE).cloned()),
        prebound,
        candidates: candidates.into_iter().map(|(_, v)| v).collect(),
        provisioning,
    }
}

/// A claim's selector on a PV's labels (`metav1.LabelSelectorAsSelector`);
/// none: every PV.
fn selector_matches(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(sel) = sel else {
        return true;
    };
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    sel.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && sel.match_expressions.iter().flatten().all(|e| {
            let have = labels.get(&e.key);
            let values = e.values.as_deref().unwrap_or_default();
            match e.operator.as_str() {
                "In" => have.is_some_and(|h| values.contains(h)),
                "NotIn" => have.is_none_or(|h| !values.contains(h)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// A PV's required node affinity as matched against a node's labels
/// alone (`CheckNodeAffinity` builds a Node of the labels only: a
/// `matchFields` requirement sees an empty name). `None`: any node.
fn pv_affinity(pv: &core::PersistentVolume) -> Option<Vec<NodeSelectorTerm>> {
    let required = pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?;
    let mut terms = Vec::new();
    for t in &required.node_selector_terms {
        let mut fields_hold = true;
        for f in t.match_fields.iter().flatten() {
            let values = f.values.as_deref().unwrap_or_default();
            fields_hold &= match f.operator.as_str() {
                "NotIn" => f.key == "metadata.name" && !values.iter().any(String::is_empty),
                _ => false,
            };
        }
        if !fields_hold {
            continue;
        }
        let mut exprs = Vec::new();
        let mut valid = true;
        for e in t.match_expressions.iter().flatten() {
            let Some(operator) = super::node_selector_operator(&e.operator) else {
                valid = false;
                break;
            };
            exprs.push(NodeSelectorRequirement {
                key: e.key.clone(),
                operator,
                values: e.values.clone().unwrap_or_default(),
            });
        }
        if !valid {
            continue;
        }
        if exprs.is_empty() && t.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            // Fields alone that hold: the term admits every node.
            return None;
        }
        terms.push(NodeSelectorTerm {
            match_expressions: exprs,
        });
    }
    Some(terms)
}

/// A PV's zone and region labels, `a__b` split (`LabelZonesToSet`; a value
/// with an empty part is ignored, as VolumeZone logs and skips it).
fn zone_labels(pv: &core::PersistentVolume) -> Vec<ZoneLabel> {
    let Some(labels) = &pv.metadata.labels else {
        return Vec::new();
    };
    ZONE_LABELS
        .iter()
        .filter_map(|k| {
            let v = labels.get(*k)?;
            let values: Vec<String> = v.split("__").map(|z| z.trim().to_owned()).collect();
            if values.iter().any(String::is_empty) {
                return None;
            }
            Some(ZoneLabel {
                key: (*k).to_owned(),
                values,
            })
        })
        .collect()
}

/// The CSI volume a claim attaches (csi.go `getCSIDriverInfo`): its PV's
/// CSI source, else what its class would provision (the claim's own name
/// as handle).
pub(super) fn csi_volume(
    ns: &str,
    name: &str,
    c: &core::PersistentVolumeClaim,
    s: &Storage<'_>,
) -> Option<CsiVolume> {
    let pv_name = c
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if let Some(pv) = (!pv_name.is_empty())
        .then(|| s.volumes.get(&pv_name))
        .flatten()
    {
        let csi = pv.spec.as_ref()?.csi.as_ref()?;
        return Some(CsiVolume {
            driver: csi.driver.clone(),
            handle: csi.volume_handle.clone(),
        });
    }
    let class = s.classes.get(&class_of(c))?;
    if class.provisioner.is_empty() || IN_TREE.contains(&class.provisioner.as_str()) {
        return None;
    }
    Some(CsiVolume {
        driver: class.provisioner.clone(),
        handle: format!("\u{1}claim:{ns}/{name}"),
    })
}

/// A bound pod's CSI volumes (claims that are gone are not counted, as
/// csi.go skips them for existing pods).
pub(super) fn bound_csi_volumes(
    ns: &str,
    pod: Option<&str>,
    spec: &core::PodSpec,
    s: &Storage<'_>,
) -> Vec<CsiVolume> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            let (name, _) = claim_name(pod, v)?;
            let c = s.claims.get(&(ns.to_owned(), name.clone()))?;
            csi_volume(ns, &name, c, s)
        })
        .collect()
}
