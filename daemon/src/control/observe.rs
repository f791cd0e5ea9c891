//! *Observe*: one [`Snapshot`] of the world for a round. The Kubernetes
//! stores are copied once and translated as the live watcher does (only
//! pods the scheduler marked Unschedulable are pending); agents count by
//! liveness only (no hardware decoded per round); BMC readings, finished
//! power actions and open intents come from the loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord::demand::ObjectRef;
use accord::hardware::NodeHardware;
use accord::truth::SchedulerView;
use accord_api::control::KindWatch;
use accord_kube::manifests::{CapacityBuffer, Object, ProvisioningRequest};
use accord_kube::translate::buffer::{buffer_workload_name, resolve, BufferIndex};
use accord_kube::translate::{Options, ACCORD_STRICT, BEST_EFFORT_ATOMIC, CHECK_CAPACITY};
use accord_kube::watch::DemandWatch;
use tracing::warn;

use super::decide::{CannotPlanSeen, Snapshot};
use super::provisioning::{Condition, ConditionSeen, ProvisioningClass, ProvisioningSeen};
use crate::execute::Executed;
use crate::journal::Intent;
use crate::shared::Shared;
use accord_decide::buffers::{self, BufferSeen, BufferStatus, Resolved, Unresolved};

/// What observe reads from.
pub struct Observer {
    pub watch: DemandWatch,
    pub options: Options,
    pub shared: Arc<Shared>,
    pub stale_after_s: u64,
    /// Every stored model has been read once (the first round); later
    /// rounds read only those the API says changed.
    pub models_loaded: bool,
    /// ResourceSlice problems already said (each is said once).
    pub slice_problems: std::collections::BTreeSet<String>,
    /// What the translation could not read (a kind not modelled, pods
    /// naming a group API the cluster does not serve), said once each.
    pub unsupported_said: std::collections::BTreeSet<String>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Observer {
    pub fn snapshot(
        &mut self,
        mono: Duration,
        bmc: &BTreeMap<String, bool>,
        executed: Vec<Executed>,
        open_intents: Vec<Intent>,
    ) -> Snapshot {
        let now = (self.shared.now)();
        // The Nodes are copied and converted once: readiness and the
        // scheduler's views both come from them.
        let nodes = self.watch.nodes();
        let (mut snap, unsupported) = kube_snapshot(&self.watch, &self.options, &nodes);
        for u in unsupported {
            if self.unsupported_said.insert(u.clone()) {
                warn!(what = %u, "not planned as the cluster would read it");
            }
        }
        snap.now = now;
        snap.mono = mono;
        match self.shared.store.agents_seen() {
            Ok(seen) => {
                // Heard from (a report or a heartbeat) within the stale
                // time; and when each last reported (only a report makes
                // an agent up after a power-on; 0: before the store kept
                // it, which counts for no power-on).
                for (node, a) in seen {
                    snap.agent_reports.insert(node.clone(), a.last_report);
                    if !crate::store::stale(a.last_seen, now, self.stale_after_s) {
                        snap.agents.insert(node, a.last_seen);
                    }
                }
            }
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot read agents from the store");
            }
        }
        self.assigned_devices(&mut snap.demand.bound, now);
        snap.bmc = bmc.clone();
        snap.executed = executed;
        snap.open_intents = open_intents;
        // Commands before models: the API flags a model as changed before
        // it closes the command the report answers, so a command seen
        // closed here always comes with the model that closed it.
        match self.shared.store.commands() {
            Ok(c) => snap.commands = c,
            Err(e) => {
                warn!(error = %accord::config_file::error_chain(&e), "cannot read agent commands from the store; no command is decided on this round");
                snap.commands_unreadable = true;
            }
        }
        snap.mig_configs_written = self
            .shared
            .mig_configs_written
            .lock()
            .map(|w| w.clone())
            .unwrap_or_default();
        snap.reports = self.changed_models();
        snap.views = self.scheduler_views(nodes);
        snap.watches = self
            .watch
            .watches()
            .into_iter()
            .map(|w| KindWatch {
                kind: w.kind,
                api_version: w.api_version,
                note: w.note,
            })
            .collect();
        snap
    }

    /// Hardware models stored since the last round: all of them the first
    /// time, then only the nodes whose report changed something.
    fn changed_models(&mut self) -> BTreeMap<String, NodeHardware> {
        let changed = self.shared.take_models_changed();
        let store = &self.shared.store;
        let records = if self.models_loaded {
            changed
                .iter()
                .filter_map(|name| match store.node(name) {
                    Ok(r) => r,
                    Err(e) => {
                        warn!(node = %name, error = %accord::config_file::error_chain(&e), "cannot read the node's model from the store; trying again next round");
                        self.shared
                            .models_changed
                            .lock()
                            .expect("lock")
                            .insert(name.clone());
                        None
                    }
                })
                .collect()
        } else {
            match store.nodes() {
                Ok(all) => {
                    self.models_loaded = true;
                    all
                }
                Err(e) => {
                    warn!(error = %accord::config_file::error_chain(&e), "cannot read the stored models; planning with the declarations until the store can be read");
                    // Read them all again next round.
                    Vec::new()
                }
            }
        };
        records.into_iter().map(|r| (r.name, r.hardware)).collect()
    }
}

impl Observer {
    /// Gives each bound pod the device-plugin devices its node's agent last
    /// said the kubelet assigned it ([`fill_device_ids`]).
    fn assigned_devices(&self, bound: &mut [accord::demand::BoundPod], now: u64) {
        let all = self
            .shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        fill_device_ids(bound, &all, now, self.stale_after_s);
    }

    /// The scheduler's view of each registered node: its Node, and the
    /// devices its ResourceSlices publish (when any do). A slice that
    /// cannot be read is said once and left out.
    fn scheduler_views(
        &mut self,
        nodes: Vec<accord_kube::cluster::ClusterNode>,
    ) -> BTreeMap<String, SchedulerView> {
        let (mut devices, problems) = self.watch.devices();
        for p in problems {
            if self.slice_problems.insert(p.clone()) {
                warn!(problem = %p, "a ResourceSlice is not planned with");
            }
        }
        nodes
            .into_iter()
            .map(|n| {
                let d = devices.remove(&n.name);
                (n.name.clone(), accord_kube::cluster::scheduler_view(&n, d))
            })
            .collect()
    }
}

/// Gives each bound pod the device-plugin devices its node's agent said
/// the kubelet assigned it, from heartbeats within the stale time; a pod
/// the agent does not list (not admitted yet, or an agent that does not
/// read the kubelet) keeps none, and the planner takes the node's first
/// free GPUs for it.
fn fill_device_ids(
    bound: &mut [accord::demand::BoundPod],
    assigned: &BTreeMap<String, crate::shared::Assigned>,
    now: u64,
    stale_after_s: u64,
) {
    let mut by_pod: BTreeMap<(&str, &str, &str), &[String]> = BTreeMap::new();
    for (node, a) in assigned {
        if crate::store::stale(a.at, now, stale_after_s) {
            continue;
        }
        for p in &a.pods {
            by_pod.insert((node, &p.namespace, &p.name), &p.ids);
        }
    }
    for b in bound.iter_mut() {
        let key = (b.node.as_str(), b.namespace.as_str(), b.name.as_str());
        if let Some(ids) = by_pod.get(&key) {
            b.device_ids = ids.to_vec();
        }
    }
}

/// What the translation could not plan, or left alone, as the decider
/// reads it.
fn seen(c: accord_kube::CannotPlan) -> CannotPlanSeen {
    CannotPlanSeen {
        workload: c.workload,
        sources: c.sources,
        reason: c.reason,
    }
}

/// The Kubernetes part of a snapshot, and what the translation could
/// not read.
fn kube_snapshot(
    watch: &DemandWatch,
    options: &Options,
    nodes: &[accord_kube::cluster::ClusterNode],
) -> (Snapshot, Vec<String>) {
    let manifests = watch.manifests();
    // Pods naming a PodGroup the cluster does not serve are planned pod
    // by pod, as the scheduler places them, not refused for a group that
    // cannot exist.
    let options = Options {
        pod_groups_served: watch.pod_groups_served(),
        ..options.clone()
    };
    let translation = accord_kube::watch::translate_live(&manifests, &options);
    let mut pods_per_node: BTreeMap<String, u32> = BTreeMap::new();
    for b in &translation.demand.bound {
        *pods_per_node.entry(b.node.clone()).or_default() += 1;
    }
    // A cordon is not a fault (decide keeps cordoned nodes as they are).
    let kube_ready = nodes.iter().map(|n| (n.name.clone(), n.ready)).collect();
    let cordoned = nodes
        .iter()
        .filter(|n| n.unschedulable)
        .map(|n| n.name.clone())
        .collect();
    let do_not_disrupt = nodes
        .iter()
        .filter(|n| n.do_not_disrupt)
        .map(|n| n.name.clone())
        .collect();
    let node_objects = nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                accord_decide::dark::NodeObject {
                    uid: n.uid.clone(),
                    resource_version: n.resource_version.clone(),
                    annotations: n.annotations.clone(),
                },
            )
        })
        .collect();
    // Pending pod → its workload, from the sources the translation names
    // for each workload: the grouping is the translation's.
    let mut pod_workload = BTreeMap::new();
    let sourced = translation
        .demand
        .workloads
        .iter()
        .map(|w| (w.key(), &w.sources))
        .chain(
            translation
                .cannot_plan
                .iter()
                .map(|c| (c.workload.clone(), &c.sources)),
        );
    for (workload, sources) in sourced {
        for pod in sources.iter().filter(|s| s.kind == "Pod") {
            pod_workload.insert(pod.key(), workload.clone());
        }
    }
    let mut scheduler = BTreeMap::new();
    let mut provisioning = Vec::new();
    let mut buffers = Vec::new();
    let buffer_index = BufferIndex::of(&manifests);
    for o in &manifests.objects {
        if let Object::ProvisioningRequest(pr) = o {
            provisioning.push(provisioning_seen(pr));
            continue;
        }
        if let Object::CapacityBuffer(cb) = o {
            buffers.push(buffer_seen(cb, &buffer_index, &options));
            continue;
        }
        let Object::Pod(p) = o else {
            continue;
        };
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            continue;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(c) = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        {
            let reason = c.reason.clone().unwrap_or_default();
            let msg = c.message.clone().unwrap_or_default();
            scheduler.insert(format!("{ns}/{name}"), format!("{reason}: {msg}"));
        }
    }
    let snapshot = Snapshot {
        not_planned: translation.not_planned.into_iter().map(seen).collect(),
        cannot_plan: translation.cannot_plan.into_iter().map(seen).collect(),
        demand: translation.demand,
        kube_ready,
        cordoned,
        do_not_disrupt,
        node_objects,
        pods_per_node,
        pod_workload,
        scheduler,
        provisioning,
        buffers,
        ..Snapshot::default()
    };
    (snapshot, translation.unsupported)
}

/// A ProvisioningRequest as plain data for *decide*.
fn provisioning_seen(pr: &ProvisioningRequest) -> ProvisioningSeen {
    let ns = pr.metadata.namespace.as_deref().unwrap_or("default");
    let name = pr.metadata.name.as_deref().unwrap_or("");
    let class = match pr.spec.provisioning_class_name.as_str() {
        CHECK_CAPACITY => ProvisioningClass::CheckCapacity,
        BEST_EFFORT_ATOMIC => ProvisioningClass::BestEffortAtomic,
        ACCORD_STRICT => ProvisioningClass::AccordStrict,
        other => ProvisioningClass::Other(other.to_owned()),
    };
    ProvisioningSeen {
        request: ObjectRef::new(pr.api_version(), "ProvisioningRequest", ns, name),
        class,
        no_retry: pr.no_retry(),
        conditions: pr
            .status
            .conditions
            .iter()
            .map(|c| ConditionSeen {
                type_: c.type_.clone(),
                status: c.status == "True",
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition: c
                    .last_transition_time
                    .as_deref()
                    .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                    .map(|t| t.as_second().max(0) as u64),
            })
            .collect(),
    }
}

/// A CapacityBuffer as plain data for *decide*: what it resolves to and
/// what its status shows.
fn buffer_seen(cb: &CapacityBuffer, index: &BufferIndex, options: &Options) -> BufferSeen {
    let ns = cb.metadata.namespace.as_deref().unwrap_or("default");
    let name = cb.metadata.name.as_deref().unwrap_or("");
    let resolved = match resolve(cb, index, options) {
        Ok(r) => Ok(Resolved {
            pod_template: r.pod_template,
            replicas: r.replicas,
        }),
        Err(u) => Err(Unresolved {
            reason: u.reason.to_owned(),
            message: u.message,
        }),
    };
    let st = &cb.status;
    BufferSeen {
        buffer: ObjectRef::new(cb.api_version(), "CapacityBuffer", ns, name),
        strategy: cb
            .spec
            .provisioning_strategy
            .clone()
            .unwrap_or_else(|| buffers::ACTIVE.to_owned()),
        resolved,
        workload: format!("{ns}/{}", buffer_workload_name(name)),
        shown: BufferStatus {
            replicas: st.replicas.and_then(|r| u32::try_from(r).ok()),
            pod_template: st.pod_template_ref.as_ref().map(|r| r.name.clone()),
            pod_template_generation: st.pod_template_generation,
            strategy: st.provisioning_strategy.clone(),
            // Accord's two, in the order it writes them (another's are
            // left as they are).
            conditions: ["ReadyForProvisioning", "Provisioning"]
                .iter()
                .filter_map(|t| st.conditions.iter().find(|c| c.type_ == *t))
                .map(|c| Condition {
                    type_: c.type_.clone(),
                    status: c.status == "True",
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                })
                .collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord::demand::BoundPod;
    use accord_api::agent::PodDevices;

    fn bound(node: &str, name: &str) -> BoundPod {
        BoundPod {
            daemon_set: Default::default(),
            node_selector_keys: Vec::new(),
            csi_volumes: Vec::new(),
            node: node.into(),
            namespace: "ml".into(),
            name: name.into(),
            labels: Default::default(),
            requests: Default::default(),
            devices: Vec::new(),
            node_agent: false,
            do_not_disrupt: false,
            device_ids: Vec::new(),
            relations: Default::default(),
        }
    }

    #[test]
    fn pods_get_the_ids_their_own_nodes_fresh_heartbeat_lists() {
        let said = |at: u64, name: &str, id: &str| crate::shared::Assigned {
            at,
            pods: vec![PodDevices {
                namespace: "ml".into(),
                name: name.into(),
                ids: vec![id.into()],
            }],
        };
        let mut assigned = BTreeMap::new();
        assigned.insert("n1".to_owned(), said(1_000, "a", "GPU-1"));
        // n2's agent listed "b" too, but b runs on n3 (another node's
        // word is not taken); n3's last heartbeat is stale.
        assigned.insert("n2".to_owned(), said(1_000, "b", "GPU-2"));
        assigned.insert("n3".to_owned(), said(800, "b", "GPU-3"));
        let mut pods = vec![bound("n1", "a"), bound("n3", "b"), bound("n1", "c")];
        fill_device_ids(&mut pods, &assigned, 1_010, 120);
        assert_eq!(pods[0].device_ids, ["GPU-1"]);
        assert!(pods[1].device_ids.is_empty(), "{:?}", pods[1]);
        assert!(pods[2].device_ids.is_empty());
    }
}
