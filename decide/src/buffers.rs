//! CapacityBuffers (`autoscaling.x-k8s.io`, SIG Autoscaling's API, served
//! by cluster-autoscaler and Karpenter): spare capacity an app team asks
//! for as placeholder pods of a template, planned after all real demand
//! and never bound.
//!
//! - `buffer.x-k8s.io/active-capacity` (the default): the nodes the
//!   placeholders take are powered on and kept Ready; real work takes them
//!   first, and the placeholders then take (and power on) others: refilled.
//!   A node held for a buffer counts its idle time from the last round it
//!   was held, so a deleted buffer's nodes go dark after the idle time.
//! - `accord.dev/standby-capacity`: the placeholders are planned on nodes
//!   kept off, each made ready first (powered on once to stage and verify
//!   its BIOS profile and refresh its agent's report, then off again), so
//!   its boot is the shortest the hardware allows.
//! - Any other strategy is another provisioner's: left alone.
//!
//! Accord is both the buffer controller and the autoscaler here, so it
//! writes the status the two write upstream (Karpenter v1.14's
//! `pkg/controllers/capacitybuffer/controller.go` and
//! `pkg/controllers/provisioning/buffers.go`): `replicas`,
//! `podTemplateRef`, `podTemplateGeneration`, `provisioningStrategy`, and
//! the conditions `ReadyForProvisioning` (reasons `Resolved`,
//! `PodTemplateNotFound`, `ScalableRefNotFound`, `ResolutionFailed`) and
//! `Provisioning` (`FitsExistingCapacity`, `RequiresNewCapacity`,
//! `BufferEmpty`, `NotReadyForProvisioning`).

use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{Demand, ObjectRef, Workload};
use accord::fleet::{Fleet, Node};
use accord::lifecycle::Stage;
use accord::plan::{Action, Plan};

use crate::provisioning::Condition;

/// Upstream's default strategy: capacity powered on and Ready.
pub const ACTIVE: &str = "buffer.x-k8s.io/active-capacity";
/// Accord's: capacity kept off.
pub const STANDBY: &str = "accord.dev/standby-capacity";

/// Placeholders come after all real work, and before warm ones (which
/// have `i32::MIN`).
const PRIORITY: i32 = i32::MIN + 1;

/// What a buffer resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Its PodTemplate and that template's generation (none for a
    /// `scalableRef`).
    pub pod_template: Option<(String, Option<i64>)>,
    /// Placeholder pods wanted: the larger of `replicas` and `percentage`
    /// of the scalable's, capped by `limits`.
    pub replicas: u32,
}

/// Why a buffer does not resolve: `ReadyForProvisioning=False`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    pub reason: String,
    pub message: String,
}

/// A buffer's status as written (and as read back): the core's one type.
pub use accord::conditions::BufferStatus;

/// A CapacityBuffer as the round sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferSeen {
    /// At the version it was read at (written back at the same).
    pub buffer: ObjectRef,
    /// `spec.provisioningStrategy` (upstream's default when unset).
    pub strategy: String,
    pub resolved: Result<Resolved, Unresolved>,
    /// The key of its placeholders' workload in the demand.
    pub workload: String,
    /// What its status shows now.
    pub shown: BufferStatus,
}

impl BufferSeen {
    fn served(&self) -> bool {
        self.strategy == ACTIVE || self.strategy == STANDBY
    }
}

/// A buffer status to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferStatusWrite {
    pub buffer: ObjectRef,
    pub status: BufferStatus,
}

/// Where one round's placeholders of a buffer went.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Placed {
    on_up: u32,
    on_booting: u32,
    on_off: u32,
    /// Why the rest were not placed.
    unplaced: Option<String>,
}

/// What the decider keeps between rounds for buffers.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    /// Node → the last round an active buffer held it (its idle time
    /// counts from then).
    held: BTreeMap<String, u64>,
    /// This round's placeholder workloads → (buffer key, standby).
    placeholders: BTreeMap<String, (String, bool)>,
    placed: BTreeMap<String, Placed>,
    /// Node → the standby buffer it is being made ready for: powered on
    /// to stage and verify its BIOS profile and refresh its agent's
    /// report, then off; kept until it is Off again.
    preparing: BTreeMap<String, String>,
}

impl Buffers {
    /// Takes the buffers' workloads out of `demand` and returns those of
    /// the buffers Accord serves, as placeholders: the active ones' to
    /// plan after it, and the standby ones' (planned apart, on nodes kept
    /// off: [`Buffers::plan_standby`]).
    pub(crate) fn split(
        &mut self,
        seen: &[BufferSeen],
        demand: &mut std::borrow::Cow<'_, Demand>,
    ) -> (Vec<Workload>, Vec<Workload>) {
        self.placeholders.clear();
        self.placed.clear();
        let is_buffer = |w: &Workload| {
            w.sources
                .first()
                .is_some_and(|s| s.kind == "CapacityBuffer")
        };
        if !demand.workloads.iter().any(is_buffer) {
            return (Vec::new(), Vec::new());
        }
        let demand = demand.to_mut();
        let served: BTreeMap<&str, &BufferSeen> = seen
            .iter()
            .filter(|b| b.served() && b.resolved.is_ok())
            .map(|b| (b.workload.as_str(), b))
            .collect();
        let (buffers, rest): (Vec<Workload>, Vec<Workload>) = std::mem::take(&mut demand.workloads)
            .into_iter()
            .partition(is_buffer);
        demand.workloads = rest;
        let (mut active, mut standby) = (Vec::new(), Vec::new());
        for mut w in buffers {
            let key = w.key();
            let Some(b) = served.get(key.as_str()) else {
                continue;
            };
            w.priority = PRIORITY;
            // Each placeholder stands alone: a buffer is no gang.
            w.min_count = Some(1);
            self.placeholders
                .insert(key, (b.buffer.key(), b.strategy == STANDBY));
            if b.strategy == STANDBY {
                standby.push(w);
            } else {
                active.push(w);
            }
        }
        (active, standby)
    }

    /// Whether `workload` is one of this round's standby placeholders.
    pub(crate) fn is_standby(&self, workload: &str) -> bool {
        self.placeholders.get(workload).is_some_and(|(_, s)| *s)
    }

    /// Whether `workload` is one of this round's placeholders.
    pub(crate) fn is_placeholder(&self, workload: &str) -> bool {
        self.placeholders.contains_key(workload)
    }

    /// Takes the active buffers' placeholders out of `plan` but for their
    /// power-ons, notes where they went and which nodes they hold.
    /// `stage` is a node's lifecycle stage.
    pub(crate) fn settle(
        &mut self,
        plan: &mut Plan,
        stage: impl Fn(&str) -> Option<Stage>,
        now: u64,
    ) {
        if self.placeholders.is_empty() {
            return;
        }
        let powering: BTreeSet<String> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::PowerOn { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect();
        for p in &plan.placements {
            if !self.placeholders.contains_key(&p.workload) {
                continue;
            }
            let placed = self.placed.entry(p.workload.clone()).or_default();
            for pod in &p.pods {
                let stage = stage(&pod.node);
                if matches!(stage, Some(Stage::Ready | Stage::InUse | Stage::Idle)) {
                    placed.on_up += 1;
                } else if powering.contains(&pod.node)
                    || matches!(
                        stage,
                        Some(Stage::PoweringOn | Stage::Booting | Stage::AgentUp)
                    )
                {
                    placed.on_booting += 1;
                } else {
                    placed.on_off += 1;
                }
                self.held.insert(pod.node.clone(), now);
            }
        }
        for u in &plan.unsatisfied {
            if self.placeholders.contains_key(&u.workload) {
                self.placed.entry(u.workload.clone()).or_default().unplaced =
                    Some(u.reason.clone());
            }
        }
        let placeholders = &self.placeholders;
        plan.actions.retain(|a| match a {
            // A placeholder is not worth disturbing a GPU for.
            Action::ReconfigureMig { for_workloads, .. } => {
                !for_workloads.iter().all(|w| placeholders.contains_key(w))
            }
            _ => true,
        });
        plan.placements
            .retain(|p| !placeholders.contains_key(&p.workload));
        plan.unsatisfied
            .retain(|u| !placeholders.contains_key(&u.workload));
    }

    /// Standby buffers' placeholders: planned first on nodes kept off and
    /// ready for them (BIOS profile verified, agent report within
    /// `policy.standby_refresh_s`) or being made so; the rest on other
    /// dark nodes, which are powered on to be made ready (their profile
    /// staged with the power-on and verified after, their agent reporting)
    /// and powered off again once they are. Nothing else is powered on
    /// for them, and nodes the plan uses for real work are left to it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_standby(
        &mut self,
        standby: Vec<Workload>,
        base: &Demand,
        seen: &Fleet,
        plan: &mut Plan,
        stage: impl Fn(&str) -> Option<Stage>,
        reported: &BTreeMap<String, u64>,
        now: u64,
    ) {
        self.preparing
            .retain(|n, _| !matches!(stage(n), None | Some(Stage::Off | Stage::Failed)));
        let refresh = seen.policy.standby_refresh_s;
        let ready = |n: &Node| {
            (n.bios_profile.is_none() || n.bios_profile_applied == n.bios_profile)
                && reported
                    .get(&n.name)
                    .is_some_and(|&t| t.saturating_add(refresh) >= now)
        };
        let used: BTreeSet<String> = plan
            .placements
            .iter()
            .flat_map(|p| p.pods.iter().map(|pod| pod.node.clone()))
            .chain(plan.actions.iter().filter_map(|a| match a {
                Action::PowerOn { node, .. } => Some(node.clone()),
                _ => None,
            }))
            .collect();
        let kept_off = |n: &Node| stage(&n.name) == Some(Stage::Off) && n.failed.is_none();
        // First: nodes ready and off, or being made ready.
        let preparing = &self.preparing;
        // No standby buffer: no plan to make (a copy of the fleet and a
        // planner run every round otherwise).
        let first = (!standby.is_empty()).then(|| {
            plan_on(seen, base, &standby, now, |n| {
                !used.contains(&n.name)
                    && ((kept_off(n) && ready(n)) || preparing.contains_key(&n.name))
            })
            .0
        });
        let mut chosen: BTreeSet<String> = BTreeSet::new();
        let mut short = Vec::new();
        for (w, first) in standby.iter().zip(first.iter().cycle()) {
            let key = w.key();
            let nodes = nodes_of(first, &key);
            let placed = self.placed.entry(key.clone()).or_default();
            for n in &nodes {
                if self.preparing.contains_key(n) {
                    placed.on_booting += 1;
                } else {
                    placed.on_off += 1;
                }
            }
            let missing = w.pod_count().saturating_sub(nodes.len() as u32);
            chosen.extend(nodes);
            if missing > 0 {
                let mut rest = w.clone();
                rest.pod_sets.truncate(1);
                if let Some(set) = rest.pod_sets.first_mut() {
                    set.count = missing;
                }
                short.push(rest);
            }
        }
        // Then: other dark nodes, powered on to be made ready.
        if !short.is_empty() {
            let preparing = &self.preparing;
            let (second, unplaced) = plan_on(seen, base, &short, now, |n| {
                !used.contains(&n.name)
                    && !chosen.contains(&n.name)
                    && kept_off(n)
                    && !ready(n)
                    && !preparing.contains_key(&n.name)
            });
            for w in &short {
                let key = w.key();
                let placed = self.placed.entry(key.clone()).or_default();
                placed.on_booting += nodes_of(&second, &key).len() as u32;
                placed.unplaced = unplaced.get(&key).cloned();
            }
            for a in second.actions {
                match &a {
                    Action::PowerOn {
                        node,
                        for_workloads,
                        ..
                    } => {
                        let buffer = for_workloads
                            .first()
                            .and_then(|w| self.placeholders.get(w))
                            .map(|(b, _)| b.clone())
                            .unwrap_or_default();
                        self.preparing.insert(node.clone(), buffer);
                        plan.actions.push(a);
                    }
                    Action::ApplyBiosProfile { .. } => plan.actions.push(a),
                    _ => {}
                }
            }
        }
        // A node made ready is powered off (unless real work took it); one
        // not ready yet is not powered off for being idle.
        let mut offs = Vec::new();
        for (node, buffer) in &self.preparing {
            let Some(n) = seen.node(node) else {
                continue;
            };
            if !ready(n) {
                plan.actions
                    .retain(|a| !matches!(a, Action::PowerOff { node: m, .. } if m == node));
                continue;
            }
            let planned_off = plan
                .actions
                .iter()
                .any(|a| matches!(a, Action::PowerOff { node: m, .. } if m == node));
            if stage(node) == Some(Stage::Idle) && !used.contains(node) && !planned_off {
                offs.push(Action::PowerOff {
                    node: node.clone(),
                    reason: format!(
                        "ready as standby capacity for CapacityBuffer {buffer} (BIOS profile \
                         verified, agent report fresh): kept off until work needs it"
                    ),
                });
            }
        }
        plan.actions.extend(offs);
    }

    /// When a node last held an active buffer's placeholders.
    pub(crate) fn held_at(&self, node: &str) -> Option<u64> {
        if self.held.is_empty() {
            return None;
        }
        self.held.get(node).copied()
    }

    /// The statuses that differ from what the buffers show now.
    pub(crate) fn statuses(&self, seen: &[BufferSeen]) -> Vec<BufferStatusWrite> {
        seen.iter()
            .filter(|b| b.served())
            .filter_map(|b| {
                let status = self.status(b);
                (status != b.shown).then(|| BufferStatusWrite {
                    buffer: b.buffer.clone(),
                    status,
                })
            })
            .collect()
    }

    fn status(&self, b: &BufferSeen) -> BufferStatus {
        let mut s = BufferStatus {
            strategy: Some(b.strategy.clone()),
            ..BufferStatus::default()
        };
        let r = match &b.resolved {
            Ok(r) => r,
            Err(u) => {
                s.conditions = vec![
                    cond("ReadyForProvisioning", false, &u.reason, u.message.clone()),
                    cond(
                        "Provisioning",
                        false,
                        "NotReadyForProvisioning",
                        "Buffer is not ReadyForProvisioning".to_owned(),
                    ),
                ];
                return s;
            }
        };
        s.replicas = Some(r.replicas);
        if let Some((name, generation)) = &r.pod_template {
            s.pod_template = Some(name.clone());
            s.pod_template_generation = *generation;
        }
        let ready = cond(
            "ReadyForProvisioning",
            true,
            "Resolved",
            "Pod template resolved successfully".to_owned(),
        );
        let provisioning = if r.replicas == 0 {
            cond(
                "Provisioning",
                false,
                "BufferEmpty",
                "Buffer has zero desired replicas".to_owned(),
            )
        } else {
            let placed = self.placed.get(&b.workload).cloned().unwrap_or_default();
            provisioning(r.replicas, &placed, b.strategy == STANDBY)
        };
        s.conditions = vec![ready, provisioning];
        s
    }
}

/// A plan of `workloads` alone on the nodes of `seen` that `eligible`
/// keeps (the others are left out), with `base`'s bound pods and device
/// classes; and why each workload not wholly placed was not.
fn plan_on(
    seen: &Fleet,
    base: &Demand,
    workloads: &[Workload],
    now: u64,
    eligible: impl Fn(&Node) -> bool,
) -> (Plan, BTreeMap<String, String>) {
    let mut fleet = seen.clone();
    for n in &mut fleet.nodes {
        if !eligible(n) && n.failed.is_none() {
            n.failed = Some("not standby capacity".to_owned());
        }
    }
    fleet.policy.reconfigure_mig = false;
    let demand = Demand {
        workloads: workloads.to_vec(),
        ..base.clone()
    };
    let plan = accord::plan::plan(&fleet, &demand, &fleet.policy, now);
    let unplaced = plan
        .unsatisfied
        .iter()
        .map(|u| (u.workload.clone(), u.reason.clone()))
        .collect();
    (plan, unplaced)
}

/// The nodes `plan` puts `workload`'s pods on.
fn nodes_of(plan: &Plan, workload: &str) -> Vec<String> {
    plan.placements
        .iter()
        .filter(|p| p.workload == workload)
        .flat_map(|p| p.pods.iter().map(|pod| pod.node.clone()))
        .collect()
}

/// The `Provisioning` condition of a buffer of `n` placeholders placed so.
fn provisioning(n: u32, p: &Placed, standby: bool) -> Condition {
    let placed = p.on_up + p.on_booting + p.on_off;
    let short = n.saturating_sub(placed);
    let why = match (&p.unplaced, short) {
        (Some(reason), s) if s > 0 => format!("; {s} cannot be placed: {reason}"),
        (_, s) if s > 0 => format!("; {s} cannot be placed"),
        _ => String::new(),
    };
    if standby {
        if p.on_off == n {
            return cond(
                "Provisioning",
                true,
                "FitsStandbyCapacity",
                format!(
                    "All {n} placeholder pods fit on nodes kept off, their BIOS profile \
                     verified and their agent's report fresh"
                ),
            );
        }
        return cond(
            "Provisioning",
            false,
            "RequiresNewCapacity",
            format!(
                "{}/{n} placeholder pods fit on nodes kept off and ready, {} on nodes being made \
                 ready (powered on to stage and verify their BIOS profile and refresh their \
                 agent's report, then off){why}",
                p.on_off, p.on_booting
            ),
        );
    }
    if p.on_up == n {
        return cond(
            "Provisioning",
            true,
            "FitsExistingCapacity",
            format!("All {n} placeholder pods fit on nodes that are up"),
        );
    }
    cond(
        "Provisioning",
        false,
        "RequiresNewCapacity",
        format!(
            "{}/{n} placeholder pods fit on nodes that are up, {} wait for nodes powering on{why}",
            p.on_up,
            p.on_booting + p.on_off
        ),
    )
}

fn cond(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(strategy: &str, replicas: u32) -> BufferSeen {
        BufferSeen {
            buffer: ObjectRef::new(
                "autoscaling.x-k8s.io/v1beta1",
                "CapacityBuffer",
                "ml",
                "spare",
            ),
            strategy: strategy.to_owned(),
            resolved: Ok(Resolved {
                pod_template: Some(("gpu".to_owned(), Some(1))),
                replicas,
            }),
            workload: "ml/CapacityBuffer.spare".to_owned(),
            shown: BufferStatus::default(),
        }
    }

    #[test]
    fn the_status_says_where_the_placeholders_are() {
        let mut b = Buffers::default();
        let s = seen(ACTIVE, 2);
        b.placeholders
            .insert(s.workload.clone(), (s.buffer.key(), false));
        b.placed.insert(
            s.workload.clone(),
            Placed {
                on_up: 1,
                on_booting: 1,
                ..Placed::default()
            },
        );
        let w = b.statuses(std::slice::from_ref(&s));
        assert_eq!(w.len(), 1);
        let st = &w[0].status;
        assert_eq!(
            (
                st.replicas,
                st.pod_template.as_deref(),
                st.pod_template_generation
            ),
            (Some(2), Some("gpu"), Some(1))
        );
        assert_eq!(st.conditions[0].reason, "Resolved");
        assert_eq!(
            (st.conditions[1].status, st.conditions[1].reason.as_str()),
            (false, "RequiresNewCapacity")
        );
        assert!(st.conditions[1].message.starts_with("1/2 "), "{st:?}");
        // Both up: True, and nothing written once the buffer shows it.
        b.placed.get_mut(&s.workload).unwrap().on_up = 2;
        b.placed.get_mut(&s.workload).unwrap().on_booting = 0;
        let st = b.statuses(std::slice::from_ref(&s)).remove(0).status;
        assert_eq!(st.conditions[1].reason, "FitsExistingCapacity");
        let shown = BufferSeen { shown: st, ..s };
        assert!(b.statuses(&[shown]).is_empty());
    }

    #[test]
    fn an_unresolved_or_foreign_buffer() {
        let b = Buffers::default();
        let mut s = seen(ACTIVE, 2);
        s.resolved = Err(Unresolved {
            reason: "PodTemplateNotFound".into(),
            message: "PodTemplate ml/gpu not found".into(),
        });
        let st = b.statuses(std::slice::from_ref(&s)).remove(0).status;
        assert_eq!(st.replicas, None);
        assert_eq!(
            (st.conditions[0].status, st.conditions[0].reason.as_str()),
            (false, "PodTemplateNotFound")
        );
        assert_eq!(st.conditions[1].reason, "NotReadyForProvisioning");
        // Another provisioner's strategy: no status written.
        assert!(b.statuses(&[seen("example.com/other", 2)]).is_empty());
        // Zero replicas: empty.
        let st = b.statuses(&[seen(ACTIVE, 0)]).remove(0).status;
        assert_eq!(st.conditions[1].reason, "BufferEmpty");
    }
}
