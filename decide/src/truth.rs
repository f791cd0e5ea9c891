//! *Decide*'s part about what nodes are: agents' reports against the
//! fleet file's declarations (drift), the scheduler's view of each node
//! (kept while it is off), and the labels and taints Accord publishes.
//! Pure, like the rest of *decide*.

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{Taint, TaintEffect};
use accord::fleet::OnDrift;
use accord::hardware::NodeHardware;
use accord::truth::{Drift, DriftKind, Publication, SchedulerView, STARTING_TAINT_KEY};
use accord_api::control::ModelSource;
use tracing::{info, warn};

use super::{drift_text, node_ref, said, Decider, Event, Snapshot};
use crate::said::SaidKey;

/// The hardware as declared, reported and shown to the scheduler.
#[derive(Debug, Default)]
pub(super) struct Truth {
    /// Node → where its agent's report differs from its declaration.
    pub(super) declared_drift: BTreeMap<String, Vec<Drift>>,
    /// Node → where its model differs from the scheduler's view (last round).
    pub(super) scheduler_drift: BTreeMap<String, Vec<Drift>>,
    /// Node → the scheduler's view last seen (kept while the node is off).
    pub(super) views: BTreeMap<String, SchedulerView>,
    /// Node → the publication last sent, with the view it corrected and
    /// when: not sent again until one of them changes, or a write that
    /// did not land has had `REPUBLISH_S` to show.
    pub(super) published: BTreeMap<String, (Publication, SchedulerView, u64)>,
    /// The fleet as seen, kept between rounds (`seen`).
    pub(super) seen: super::seen::Seen,
}

impl Decider {
    /// Agents' new reports: each node is planned with its reported model
    /// from now on; where it differs from the declaration, that is said
    /// (log and a Warning event on the Node) once per difference.
    /// `repartitioned`: nodes whose MIG layout Accord changed (their
    /// latest command is done): their MIG mode and layout are Accord's
    /// doing, not drift from the declaration.
    pub(super) fn absorb_reports(
        &mut self,
        reports: &BTreeMap<String, NodeHardware>,
        repartitioned: &BTreeSet<String>,
        events: &mut Vec<Event>,
    ) {
        for (node, hw) in reports {
            self.truth.seen.model_changed(node);
            let Some(mut drift) = self.fleet.apply_report(node, hw) else {
                self.say_once(
                    SaidKey::new(said::UNKNOWN_NODE, node, ""),
                    format!("node {node}: its agent reports, but the fleet file does not declare it; not planned with"),
                );
                continue;
            };
            if repartitioned.contains(node) {
                drift.retain(|d| !matches!(d.what, DriftKind::MigMode | DriftKind::MigLayout));
            }
            if drift.is_empty() {
                if self.truth.declared_drift.remove(node).is_some() {
                    info!(node = %node, "the report agrees with the declaration again");
                }
                continue;
            }
            let text = drift_text(&drift);
            if self.truth.declared_drift.get(node) != Some(&drift) {
                let hold = self.fleet.policy.on_drift == OnDrift::Hold;
                warn!(node = %node, drift = %text, hold, "hardware drift: the agent's report differs from the fleet file's declaration");
                events.push(Event {
                    regarding: node_ref(node),
                    reason: "HardwareDrift",
                    action: "Compare",
                    note: if hold {
                        format!("{text}; left out of planning until an admin acts (policy.on_drift = \"hold\")")
                    } else {
                        format!("{text}; planned with what the agent reports")
                    },
                    warning: true,
                });
            }
            self.truth.declared_drift.insert(node.clone(), drift);
        }
    }

    /// The scheduler's view of registered nodes: kept (a node that goes
    /// away keeps its last view); the changed ones are returned for the
    /// store.
    pub(super) fn absorb_views(
        &mut self,
        views: &BTreeMap<String, SchedulerView>,
    ) -> Vec<(String, SchedulerView)> {
        let mut changed = Vec::new();
        for (node, v) in views {
            if !self.life.nodes.contains_key(node) {
                continue;
            }
            if self.truth.views.get(node) != Some(v) {
                self.truth.seen.changed(node);
                self.truth.views.insert(node.clone(), v.clone());
                changed.push((node.clone(), v.clone()));
            }
        }
        changed
    }

    /// Says once per node which GPUs the DRA driver partitions on
    /// allocation (dynamic MIG): their layout is the driver's.
    pub(super) fn say_driver_partitions(&mut self, seen: &accord::fleet::Fleet) {
        for n in &seen.nodes {
            let gpus: Vec<String> = n
                .gpus
                .iter()
                .filter(|g| g.driver_partitions)
                .map(|g| g.nvml_index.to_string())
                .collect();
            if gpus.is_empty() {
                continue;
            }
            let text = format!("GPU {}", gpus.join(", "));
            self.say_once(
                SaidKey::new(said::DRIVER_PARTITIONS, &n.name, text.clone()),
                format!("node {}: the NVIDIA DRA driver partitions {text} on allocation (dynamic MIG); Accord plans MIG requests on its counters and never repartitions them", n.name),
            );
        }
    }

    /// A Warning event on the Node when its model and the scheduler's
    /// view start to differ (once per difference).
    pub(super) fn scheduler_drift_events(
        &mut self,
        drift: &BTreeMap<String, Vec<Drift>>,
        events: &mut Vec<Event>,
    ) {
        for (node, d) in drift {
            if d.is_empty() {
                continue;
            }
            let text = drift_text(d);
            let key = SaidKey::new(said::SCHEDULER_DRIFT, node, text.clone());
            if self.truth.scheduler_drift.get(node) == Some(d) {
                // Still so: kept, not said again.
                self.said.hold(key);
                continue;
            }
            if self.say_once(
                key,
                format!("node {node}: the scheduler's view differs from the model: {text}; planned with the scheduler's"),
            ) {
                events.push(Event {
                    regarding: node_ref(node),
                    reason: "SchedulerDrift",
                    action: "Compare",
                    note: format!("{text}; Accord plans with what the scheduler sees"),
                    warning: true,
                });
            }
        }
    }

    /// What to publish on registered Nodes: Accord's keys where the Node
    /// shows other values, each sent once per (publication, view).
    pub(super) fn publications(&mut self, snap: &Snapshot) -> Vec<(String, Publication)> {
        let topology = &self.fleet.topology;
        let held = self.held_for_gangs(snap);
        let mut out = Vec::new();
        for (node, view) in &snap.views {
            let Some(mut want) = self
                .truth
                .seen
                .publication(&self.fleet, node, snap.now)
                .cloned()
            else {
                continue;
            };
            want.taints.extend(self.bios_taint(node));
            want.taints.extend(self.powering_off_taint_of(node, view));
            // A Node registered again is held until what it had before
            // Accord deleted it is back (`dark`).
            if held.contains(node) || self.restoring(node, snap) {
                want.taints.push(Taint {
                    key: STARTING_TAINT_KEY.to_owned(),
                    value: None,
                    effect: TaintEffect::NoSchedule,
                });
            }
            let labels_ok = want
                .labels
                .iter()
                .all(|(k, v)| view.labels.get(k) == Some(v))
                && view
                    .labels
                    .keys()
                    .filter(|k| accord::fleet::owns_label(topology, k))
                    .all(|k| want.labels.contains_key(k));
            let mut have_taints: Vec<_> = view
                .taints
                .iter()
                .filter(|t| accord::fleet::owns_taint(&t.key))
                .cloned()
                .collect();
            have_taints.sort();
            let mut want_taints = want.taints.clone();
            want_taints.sort();
            if labels_ok && have_taints == want_taints {
                continue;
            }
            if self.truth.published.get(node).is_some_and(|(p, v, at)| {
                p == &want && v == view && snap.now.saturating_sub(*at) < REPUBLISH_S
            }) {
                continue;
            }
            info!(node = %node, labels = want.labels.len(), taints = want.taints.len(), "publishing Accord's labels and taints on the Node");
            self.truth
                .published
                .insert(node.clone(), (want.clone(), view.clone(), snap.now));
            out.push((node.clone(), want));
        }
        out
    }

    /// Nodes powered on for a gang (a workload of minimum two or more)
    /// whose other nodes are not all up yet: kept behind the starting
    /// taint, so that the scheduler gives none of them to other work
    /// before the gang can start; lifted from all at once.
    fn held_for_gangs(&self, snap: &Snapshot) -> BTreeSet<String> {
        let gangs: BTreeSet<String> = snap
            .demand
            .workloads
            .iter()
            .filter(|w| w.min() > 1)
            .map(|w| w.key())
            .collect();
        self.latency
            .waiting_ready
            .iter()
            .filter(|(w, nodes)| nodes.len() > 1 && gangs.contains(*w))
            .flat_map(|(_, nodes)| nodes.iter().cloned())
            .collect()
    }

    pub(super) fn model_source(&self, node: &accord::fleet::Node) -> ModelSource {
        if self.fleet.policy.on_drift == OnDrift::Hold
            && self.truth.declared_drift.contains_key(&node.name)
        {
            ModelSource::Held
        } else if node.is_reported() {
            ModelSource::Reported
        } else {
            ModelSource::Declared
        }
    }
}

/// A publication the Node still does not show is sent again after this
/// long (a write that failed without the Node changing).
pub(super) const REPUBLISH_S: u64 = 30;
