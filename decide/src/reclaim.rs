//! Reclaim: lent reserved capacity taken back for its owner.
//!
//! An idle lendable reservation's nodes join the shared pool
//! (`src/plan/bind.rs`, the placements marked `reclaimable`). When a
//! workload its owner owns is pending and the round's plan powers nodes
//! on for it or cannot place it, while it would fit the reserved nodes
//! but for the pods borrowing them, those borrowers are evicted: through the Eviction API
//! (accordd), so their PodDisruptionBudgets and grace periods hold. The
//! round then plans the owner onto its reserved nodes, where it waits for
//! them to leave, instead of powering unreserved nodes on.
//!
//! Never evicted: node agents (DaemonSet and mirror pods), pods whose
//! owner asked that they not be disrupted (`karpenter.sh/do-not-disrupt`,
//! `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`), the
//! owner's own pods. Workloads placed for CapacityBuffers or warm capacity
//! never reclaim (they are guesses, not the owner's work).
//!
//! The book keeps the pods asked to leave: while still bound they are
//! planned as gone (they are leaving), and asked again every
//! [`ASK_AGAIN_S`] (a budget's 429 is a wait, not an error); once no
//! longer bound, forgotten.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use accord::demand::{BoundPod, Demand, ObjectRef};
use accord::fleet::{Fleet, Reservation};
use accord::plan::{Action, Plan};

use super::{Decider, Event};

/// A pod asked to leave and still bound is asked again after this long.
pub(super) const ASK_AGAIN_S: u64 = 30;

/// A pod to evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub namespace: String,
    pub pod: String,
    /// The node it is bound to (an eviction sent for a pod since bound
    /// elsewhere is not this one's).
    pub node: String,
    /// Why, for logs and `explain`.
    pub reason: String,
}

/// The pods asked to leave, by (namespace, name): their node, why, and
/// when they were last asked.
#[derive(Debug, Default)]
pub(super) struct Reclaim {
    asked: BTreeMap<(String, String), Asked>,
}

#[derive(Debug, Clone)]
struct Asked {
    node: String,
    reason: String,
    at: u64,
}

impl Reclaim {
    /// The pods asked to leave that are still bound where they were are
    /// taken out of the demand to plan (they are leaving); the others are
    /// forgotten.
    pub(super) fn leaving(&mut self, demand: &mut Cow<'_, Demand>) {
        if self.asked.is_empty() {
            return;
        }
        let bound: BTreeSet<(&str, &str, &str)> = demand
            .bound
            .iter()
            .map(|p| (p.namespace.as_str(), p.name.as_str(), p.node.as_str()))
            .collect();
        self.asked
            .retain(|(ns, name), a| bound.contains(&(ns, name, &a.node)));
        if self.asked.is_empty() {
            return;
        }
        let asked: BTreeSet<(&str, &str)> = (self.asked.keys())
            .map(|(ns, name)| (ns.as_str(), name.as_str()))
            .collect();
        demand
            .to_mut()
            .bound
            .retain(|p| !asked.contains(&(p.namespace.as_str(), p.name.as_str())));
    }

    /// The evictions to send now: the new ones, and those asked
    /// [`ASK_AGAIN_S`] ago or more (the time of asking renewed).
    fn due(&mut self, new: Vec<Eviction>, now: u64) -> Vec<Eviction> {
        let mut out = Vec::new();
        for ((namespace, pod), a) in &mut self.asked {
            if now.saturating_sub(a.at) >= ASK_AGAIN_S {
                a.at = now;
                out.push(Eviction {
                    namespace: namespace.clone(),
                    pod: pod.clone(),
                    node: a.node.clone(),
                    reason: a.reason.clone(),
                });
            }
        }
        for e in new {
            self.asked.insert(
                (e.namespace.clone(), e.pod.clone()),
                Asked {
                    node: e.node.clone(),
                    reason: e.reason.clone(),
                    at: now,
                },
            );
            out.push(e);
        }
        out
    }
}

/// A pod on `r`'s nodes that may be asked to leave for its owner.
fn borrower(r: &Reservation, nodes: &BTreeSet<&str>, p: &BoundPod) -> bool {
    nodes.contains(p.node.as_str())
        && !p.node_agent
        && !p.do_not_disrupt
        && !r.owns(&p.namespace, &p.labels)
}

impl Decider {
    /// After the round's first plan: per lendable reservation, the owner's
    /// workloads (the first `real` of the demand) it leaves waiting, and
    /// the borrowers whose leaving would let them in. The demand loses the
    /// pods newly asked to leave (the round plans again when any are).
    pub(super) fn reclaim_round(
        &mut self,
        seen: &Fleet,
        demand: &mut Cow<'_, Demand>,
        real: usize,
        plan: &Plan,
        now: u64,
    ) -> Reclaimed {
        let mut new = Vec::new();
        for r in seen
            .reservations
            .iter()
            .filter(|r| r.lendable && r.active(now))
        {
            new.extend(borrowers_to_evict(seen, demand, real, plan, r, now));
        }
        let events = new
            .iter()
            .map(|e| Event {
                regarding: ObjectRef::new("v1", "Pod", &e.namespace, &e.pod),
                reason: "ReservationReclaimed",
                action: "Evict",
                note: format!("{} (on {})", e.reason, e.node),
                warning: true,
            })
            .collect();
        let replan = !new.is_empty();
        if replan {
            let leaving: BTreeSet<(&str, &str)> = new
                .iter()
                .map(|e| (e.namespace.as_str(), e.pod.as_str()))
                .collect();
            demand
                .to_mut()
                .bound
                .retain(|p| !leaving.contains(&(p.namespace.as_str(), p.name.as_str())));
        }
        Reclaimed {
            evictions: self.reclaim.due(new, now),
            events,
            replan,
        }
    }
}

/// What a round's reclaim comes to.
pub(super) struct Reclaimed {
    /// Due now: the new ones and those asked again.
    pub evictions: Vec<Eviction>,
    /// Said once on each pod newly asked to leave.
    pub events: Vec<Event>,
    /// The demand changed: the round plans again.
    pub replan: bool,
}

/// The borrowers of `r` to evict for its owner's waiting workloads: those
/// on the nodes the owner's workloads take in a plan without the
/// borrowers, where that plan places them within `r`.
fn borrowers_to_evict(
    seen: &Fleet,
    demand: &Demand,
    real: usize,
    plan: &Plan,
    r: &Reservation,
    now: u64,
) -> Vec<Eviction> {
    // Placed without powering anything on for it (within `r` or on
    // capacity that is up): nothing to take back.
    let placed_on_what_is_up = |workload: &str| {
        plan.placements.iter().any(|pl| pl.workload == workload)
            && !plan.actions.iter().any(|a| match a {
                Action::PowerOn { for_workloads, .. } => {
                    for_workloads.iter().any(|w| w == workload)
                }
                _ => false,
            })
    };
    let waiting: BTreeSet<String> = demand.workloads[..real.min(demand.workloads.len())]
        .iter()
        .filter(|w| r.owns(&w.namespace, &w.labels))
        .map(|w| w.key())
        .filter(|k| !placed_on_what_is_up(k))
        .collect();
    if waiting.is_empty() {
        return Vec::new();
    }
    let nodes: BTreeSet<&str> = r.nodes.iter().map(String::as_str).collect();
    if !demand.bound.iter().any(|p| borrower(r, &nodes, p)) {
        return Vec::new();
    }
    let mut without = demand.clone();
    without.bound.retain(|p| !borrower(r, &nodes, p));
    let what_if = accord::plan::plan(seen, &without, &seen.policy, now);
    // Node → the owner's workload that would take it.
    let mut taken: BTreeMap<&str, &str> = BTreeMap::new();
    for pl in &what_if.placements {
        if waiting.contains(&pl.workload) && pl.reservation.as_deref() == Some(&r.name) {
            for pod in &pl.pods {
                taken
                    .entry(pod.node.as_str())
                    .or_insert(pl.workload.as_str());
            }
        }
    }
    demand
        .bound
        .iter()
        .filter(|p| borrower(r, &nodes, p))
        .filter_map(|p| {
            let w = taken.get(p.node.as_str())?;
            Some(Eviction {
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                node: p.node.clone(),
                reason: format!(
                    "reservation {} takes back its lent node {} for its owner's workload {w}",
                    r.name, p.node
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use accord::demand::Demand;
    use accord::fleet::Fleet;
    use accord::lifecycle::{Deadlines, Stage};
    use accord::plan::Action;
    use accord_api::control::Mode;

    use crate::{Decider, Decision, MigManager, Settings, Snapshot};

    /// Two 8-GPU nodes reserved (lendable) for namespace `team`, one not;
    /// n1 and n2 up, n3 off.
    const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"

[[racks]]
name = "r1"

[[nodes]]
name = "n1"
rack = "r1"
profile = "h100"

[[nodes]]
name = "n2"
rack = "r1"
profile = "h100"

[[nodes]]
name = "n3"
rack = "r1"
profile = "h100"

[[reservations]]
name = "team"
owner = { namespace = "team" }
nodes = ["n1", "n2"]
lendable = true
"#;

    const T0: u64 = 100_000;

    struct World {
        d: Decider,
        snap: Snapshot,
        t: u64,
    }

    impl World {
        fn new(mode: Mode) -> World {
            let fleet = Fleet::from_toml(FLEET, "fleet.toml", &mut |_| Err("none".into()))
                .expect("the test fleet is valid");
            let settings = Settings {
                mode,
                deadlines: Deadlines::default(),
                booking_s: 600,
                command_deadline_s: 600,
                mig_manager: MigManager::default(),
            };
            let mut w = World {
                d: Decider::new(fleet, settings, T0),
                snap: Snapshot::default(),
                t: T0,
            };
            w.snap.bmc = [("n1", true), ("n2", true), ("n3", false)]
                .map(|(n, on)| (n.to_owned(), on))
                .into();
            for _ in 0..3 {
                w.round();
            }
            for n in ["n1", "n2"] {
                let stage = w.d.life(n).map(|l| l.stage);
                assert!(
                    matches!(stage, Some(Stage::Idle | Stage::InUse)),
                    "{n} is up: {stage:?}"
                );
            }
            w
        }

        fn round(&mut self) -> Decision {
            self.t += 10;
            self.snap.now = self.t;
            self.snap.mono = Duration::from_secs(self.t - T0);
            for n in ["n1", "n2"] {
                self.snap.kube_ready.insert(n.into(), true);
                self.snap.agents.insert(n.into(), self.t);
                self.snap.agent_reports.insert(n.into(), self.t);
            }
            self.d.decide(&self.snap)
        }

        /// Workloads pending (name, namespace, pods of 8 GPUs) and pods
        /// bound (namespace, name, node, extra JSON).
        fn demand(&mut self, pending: &[(&str, &str, u32)], bound: &[(&str, &str, &str, &str)]) {
            let workloads: Vec<serde_json::Value> = pending
                .iter()
                .map(|(name, ns, count)| {
                    serde_json::json!({"name": name, "namespace": ns, "pod_sets": [{"name": "p",
                        "count": count, "pod": {"requests": {"nvidia.com/gpu": "8"}}}]})
                })
                .collect();
            let bound: Vec<serde_json::Value> = bound
                .iter()
                .map(|(ns, name, node, extra)| {
                    let mut p = serde_json::json!({"namespace": ns, "name": name, "node": node,
                        "requests": {"nvidia.com/gpu": "8"}});
                    if !extra.is_empty() {
                        let extra: serde_json::Value = serde_json::from_str(extra).expect("JSON");
                        for (k, v) in extra.as_object().expect("an object") {
                            p[k] = v.clone();
                        }
                    }
                    p
                })
                .collect();
            let text = serde_json::json!({"workloads": workloads, "bound": bound}).to_string();
            self.snap.demand = Demand::from_json(&text, "demand.json").expect("valid demand");
            self.snap.pods_per_node.clear();
            for p in &self.snap.demand.bound {
                *self.snap.pods_per_node.entry(p.node.clone()).or_insert(0) += 1;
            }
        }
    }

    fn evicted(d: &Decision) -> Vec<String> {
        d.evictions
            .iter()
            .map(|e| format!("{}/{} on {}", e.namespace, e.pod, e.node))
            .collect()
    }

    fn powered_on(d: &Decision) -> Vec<&str> {
        d.power
            .iter()
            .filter(|a| matches!(a, Action::PowerOn { .. }))
            .map(Action::node)
            .collect()
    }

    #[test]
    fn the_owners_gang_takes_its_lent_node_back_instead_of_powering_one_on() {
        let mut w = World::new(Mode::Act);
        w.demand(&[], &[("other", "borrower", "n1", "")]);
        assert!(
            evicted(&w.round()).is_empty(),
            "no owner waits: the borrower stays"
        );
        w.demand(&[("gang", "team", 2)], &[("other", "borrower", "n1", "")]);
        let d = w.round();
        assert_eq!(evicted(&d), ["other/borrower on n1"]);
        assert!(powered_on(&d).is_empty(), "n3 stays off: {:?}", d.power);
        let gang = d
            .status
            .placements
            .iter()
            .find(|p| p.workload == "team/gang");
        let gang = gang.expect("the gang is placed, on its reserved nodes");
        assert_eq!(gang.reservation.as_deref(), Some("team"));
        let mut nodes: Vec<&str> = gang.pods.iter().map(|p| p.node.as_str()).collect();
        nodes.sort_unstable();
        assert_eq!(nodes, ["n1", "n2"]);
        let said = d.events.iter().find(|e| e.reason == "ReservationReclaimed");
        let said = said.expect("the eviction is said on the pod");
        assert_eq!(said.regarding.name, "borrower");
        assert!(said.note.contains("team/gang"), "{}", said.note);

        // Still bound (its grace period): planned as leaving, not asked
        // again until ASK_AGAIN_S, then asked again; gone: forgotten.
        let d = w.round();
        assert!(evicted(&d).is_empty(), "asked {:?}", d.evictions);
        assert!(powered_on(&d).is_empty());
        assert!(d.events.iter().all(|e| e.reason != "ReservationReclaimed"));
        for _ in 0..super::ASK_AGAIN_S / 10 - 2 {
            assert!(evicted(&w.round()).is_empty());
        }
        assert_eq!(evicted(&w.round()), ["other/borrower on n1"]);
        w.demand(&[("gang", "team", 2)], &[]);
        let d = w.round();
        assert!(evicted(&d).is_empty() && powered_on(&d).is_empty());
        assert!(w.d.reclaim.asked.is_empty(), "{:?}", w.d.reclaim.asked);
    }

    #[test]
    fn free_reserved_capacity_node_agents_and_do_not_disrupt_are_left_alone() {
        let mut w = World::new(Mode::Act);
        // One pod of the owner fits n2 as it is.
        w.demand(&[("one", "team", 1)], &[("other", "borrower", "n1", "")]);
        let d = w.round();
        assert!(
            evicted(&d).is_empty() && powered_on(&d).is_empty(),
            "{:?}",
            d.power
        );
        // The gang needs n1, but its borrower asked not to be disrupted:
        // n3 is powered on instead.
        let keep = r#"{"do_not_disrupt": true}"#;
        w.demand(&[("gang", "team", 2)], &[("other", "borrower", "n1", keep)]);
        let d = w.round();
        assert!(evicted(&d).is_empty());
        assert_eq!(powered_on(&d), ["n3"]);
    }

    #[test]
    fn observe_mode_evicts_nothing_and_says_what_it_would() {
        let mut w = World::new(Mode::Observe);
        w.demand(&[("gang", "team", 2)], &[("other", "borrower", "n1", "")]);
        let d = w.round();
        assert!(d.evictions.is_empty() && d.events.is_empty());
        let status = serde_json::to_string(&d.status).expect("the status serializes");
        assert!(status.contains("ReservationReclaimed"), "{status}");
    }
}
