//! What each workload's round came to: placed, waiting, cannot place; how
//! long it waited; ProvisioningRequest conditions; the status accordd shows.

use super::*;

/// How long workloads wait.
#[derive(Debug, Default)]
pub(super) struct Latency {
    /// Workload → when it was first seen pending (monotonic).
    pub(super) pending_since: BTreeMap<String, Duration>,
    /// Workload → nodes powered on for it, until they are Ready.
    pub(super) waiting_ready: BTreeMap<String, BTreeSet<String>>,
}

impl Decider {
    pub(super) fn workload_status(
        &self,
        plan: &Plan,
        demand: &Demand,
        mono: Duration,
    ) -> Vec<WorkloadStatus> {
        let mut powering: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (node, w) in power_ons_for(plan) {
            powering.entry(w).or_default().push(node.to_owned());
        }
        demand
            .workloads
            .iter()
            .map(|w| {
                let key = w.key();
                let placed = plan.placements.iter().find(|p| p.workload == key);
                let unsat = plan.unsatisfied.iter().find(|u| u.workload == key);
                let mut nodes: Vec<String> = placed
                    .map(|p| p.pods.iter().map(|p| p.node.clone()).collect())
                    .unwrap_or_default();
                nodes.sort();
                nodes.dedup();
                let powering_on = powering.get(key.as_str()).cloned().unwrap_or_default();
                let state = match (placed, unsat) {
                    (_, Some(_)) => WorkloadState::CannotPlace,
                    (Some(_), None) if !powering_on.is_empty() => WorkloadState::PoweringOn,
                    _ => WorkloadState::Placed,
                };
                let capacity_in_s = match state {
                    WorkloadState::CannotPlace => None,
                    _ => self.capacity_in_s(&nodes, &powering_on),
                };
                WorkloadStatus {
                    sources: w.sources.clone(),
                    pods: w.pod_count(),
                    min: w.min(),
                    state,
                    capacity_in_s,
                    nodes,
                    powering_on,
                    domain: placed.and_then(|p| p.domain.clone()),
                    reason: unsat.map(|u| u.reason.clone()),
                    approximation: w.approximation.clone(),
                    pending_s: self
                        .latency
                        .pending_since
                        .get(&key)
                        .map(|t| mono.saturating_sub(*t).as_secs_f64())
                        .unwrap_or(0.0),
                    workload: key,
                }
            })
            .collect()
    }

    /// Seconds until every node of `nodes` is expected Ready: 0 when they
    /// are up; the slowest one's time left when some boot (this round's
    /// `powering_on` just starting); none when a booting node's profile
    /// has no boot measured yet.
    pub(super) fn capacity_in_s(&self, nodes: &[String], powering_on: &[String]) -> Option<u64> {
        let mut worst = 0;
        for n in nodes {
            let elapsed = if powering_on.contains(n) {
                0
            } else {
                match self.life.nodes.get(n).map(|l| l.stage) {
                    Some(Stage::PoweringOn | Stage::Booting | Stage::AgentUp) => self
                        .life
                        .booted_at
                        .get(n)
                        .map_or(0, |at| self.clock.now.saturating_sub(*at)),
                    _ => continue,
                }
            };
            let profile = self
                .fleet
                .node(n)
                .and_then(|x| x.profile.as_deref())
                .unwrap_or("");
            worst = worst.max(self.life.boot_times.remaining(profile, elapsed)?);
        }
        Some(worst)
    }

    /// pending → power-on issued, → nodes Ready, → pods bound.
    pub(super) fn track_latency(
        &mut self,
        plan: &Plan,
        workloads: &[WorkloadStatus],
        mono: Duration,
        metrics: &mut RoundMetrics,
    ) {
        let pending: BTreeSet<&str> = workloads.iter().map(|w| w.workload.as_str()).collect();
        // Bound: gone from the pending demand.
        let gone: Vec<String> = self
            .latency
            .pending_since
            .keys()
            .filter(|k| !pending.contains(k.as_str()))
            .cloned()
            .collect();
        for k in gone {
            let since = self.latency.pending_since.remove(&k).expect("listed");
            let s = mono.saturating_sub(since).as_secs_f64();
            metrics.pending_to_bound.push(s);
            info!(workload = %k, seconds = format!("{s:.1}"), "workload no longer pending (pods bound)");
        }
        for w in workloads {
            self.latency
                .pending_since
                .entry(w.workload.clone())
                .or_insert(mono);
        }
        // Now exactly the workloads pending this round.
        metrics.oldest_pending_seconds = self
            .latency
            .pending_since
            .values()
            .map(|since| mono.saturating_sub(*since).as_secs_f64())
            .fold(0.0, f64::max);
        if self.settings.mode == Mode::Act {
            for (node, w) in power_ons_for(plan) {
                if !self.latency.waiting_ready.contains_key(w) {
                    if let Some(since) = self.latency.pending_since.get(w) {
                        metrics
                            .pending_to_power_on
                            .push(mono.saturating_sub(*since).as_secs_f64());
                    }
                }
                self.latency
                    .waiting_ready
                    .entry(w.to_owned())
                    .or_default()
                    .insert(node.to_owned());
            }
        }
        // A workload no longer pending (bound or gone), or one a node of
        // which failed (its demand is planned again: new power-ons wait
        // afresh), waits no more.
        let lives = &self.life.nodes;
        let pending_since = &self.latency.pending_since;
        self.latency.waiting_ready.retain(|w, nodes| {
            pending_since.contains_key(w)
                && nodes.iter().all(|n| {
                    lives
                        .get(n)
                        .is_some_and(|l| !matches!(l.stage, Stage::Failed | Stage::Unhealthy))
                })
        });
        let ready: Vec<String> = self
            .latency
            .waiting_ready
            .iter()
            .filter(|(_, nodes)| nodes.iter().all(|n| lives.get(n).is_some_and(is_up)))
            .map(|(w, _)| w.clone())
            .collect();
        for w in ready {
            self.latency.waiting_ready.remove(&w);
            if let Some(since) = self.latency.pending_since.get(&w) {
                metrics
                    .pending_to_ready
                    .push(mono.saturating_sub(*since).as_secs_f64());
            }
        }
    }

    /// ProvisioningRequest conditions that changed; books the capacity of
    /// those it marks Provisioned and lets old bookings go. A booking is
    /// taken when the condition is decided and never extended: should the
    /// write keep failing (so the request never shows Provisioned and the
    /// condition is decided again each round), the nodes are still let go
    /// when the first booking ends.
    pub(super) fn provision(
        &mut self,
        snap: &Snapshot,
        workloads: &[WorkloadStatus],
    ) -> Vec<ConditionWrite> {
        let present: BTreeSet<String> = snap.provisioning.iter().map(|p| p.request.key()).collect();
        self.bookings.booked.retain(|k, _| present.contains(k));
        let mut out = Vec::new();
        for pr in &snap.provisioning {
            let key = pr.request.key();
            let w = workloads.iter().find(|w| w.workload == key);
            let nodes_up = w.is_some_and(|w| {
                !w.nodes.is_empty()
                    && w.nodes
                        .iter()
                        .all(|n| self.life.nodes.get(n).is_some_and(is_up))
            });
            let booking_expired = match self.bookings.booked.get(&key) {
                Some((_, until)) => *until <= snap.now,
                // After a restart the bookings are gone: a request
                // Provisioned longer ago than the booking time expires.
                None => pr
                    .provisioned_at()
                    .is_some_and(|at| snap.now.saturating_sub(at) > self.settings.booking_s),
            };
            let seen = provisioning::Seen {
                pr,
                workload: w,
                cannot_plan: snap
                    .cannot_plan
                    .iter()
                    .find(|c| c.workload == key)
                    .map(|c| c.reason.as_str()),
                nodes_up,
                fits_now: w.map(|w| w.state == WorkloadState::Placed && w.reason.is_none()),
                booking_expired,
                // An instant, or "any moment": a countdown would change
                // the message, and so write it, every round.
                expected_ready: w
                    .filter(|w| {
                        w.nodes.iter().any(|n| {
                            w.powering_on.contains(n)
                                || self.life.nodes.get(n).is_some_and(|l| {
                                    matches!(
                                        l.stage,
                                        Stage::PoweringOn | Stage::Booting | Stage::AgentUp
                                    )
                                })
                        })
                    })
                    .and_then(|w| w.capacity_in_s)
                    .map(|s| match s {
                        0 => provisioning::ExpectedReady::Overdue,
                        s => provisioning::ExpectedReady::By(snap.now.saturating_add(s)),
                    }),
            };
            for c in provisioning::conditions(&seen) {
                info!(request = %key, condition = %c.type_, status = c.status, reason = %c.reason, message = %c.message, "ProvisioningRequest condition");
                if c.type_ == "Provisioned" && c.status {
                    let nodes = w
                        .map(|w| w.nodes.iter().cloned().collect())
                        .unwrap_or_default();
                    self.bookings
                        .booked
                        .entry(key.clone())
                        .or_insert((nodes, snap.now + self.settings.booking_s));
                }
                if c.type_ == "BookingExpired" {
                    self.bookings.booked.remove(&key);
                }
                out.push(ConditionWrite {
                    request: pr.request.clone(),
                    condition: c,
                });
            }
        }
        out
    }

    /// A workload that cannot be placed: said once per reason, and a
    /// Warning event on the object it came from (`kubectl describe`).
    pub(super) fn cannot_place_events(
        &mut self,
        workloads: &[WorkloadStatus],
        events: &mut Vec<Event>,
    ) {
        for w in workloads {
            if w.state != WorkloadState::CannotPlace {
                continue;
            }
            let reason = w.reason.clone().unwrap_or_default();
            let first = self.say_once(
                SaidKey::new(said::CANNOT_PLACE, &w.workload, reason.clone()),
                format!("workload {}: cannot place: {reason}", w.workload),
            );
            // Only an object the API server serves can carry an event.
            let target = w.sources.iter().find(|s| !s.api_version.is_empty());
            if let (true, Some(regarding)) = (first, target) {
                events.push(Event {
                    regarding: regarding.clone(),
                    reason: "CannotPlace",
                    action: "Plan",
                    note: format!("Accord cannot place it: {reason}; nothing is powered on for it"),
                    warning: true,
                });
            }
        }
    }

    /// Pending pods left to another scheduler or to preemption: said once
    /// each, while it holds.
    pub(super) fn say_not_planned(&mut self, snap: &Snapshot) {
        for c in &snap.not_planned {
            self.say_once(
                SaidKey::new(said::NOT_PLANNED, &c.workload, c.reason.clone()),
                format!(
                    "{} {}: not planned: {}",
                    c.sources.first().map_or("pod", |s| s.kind.as_str()),
                    c.workload,
                    c.reason
                ),
            );
        }
    }

    pub(super) fn status(
        &self,
        snap: &Snapshot,
        plan: &Plan,
        workloads: Vec<WorkloadStatus>,
        planner_seconds: f64,
    ) -> ControlStatus {
        ControlStatus {
            mode: self.settings.mode,
            round: self.clock.round,
            at: snap.now,
            planner_ms: planner_seconds * 1000.0,
            nodes: self.node_statuses(snap),
            workloads,
            cannot_plan: snap
                .cannot_plan
                .iter()
                .chain(&snap.not_planned)
                .map(|c| CannotPlan {
                    workload: c.workload.clone(),
                    reason: c.reason.clone(),
                })
                .collect(),
            actions: plan.actions.clone(),
            placements: plan.placements.clone(),
            unsatisfied: plan.unsatisfied.clone(),
            pods: snap
                .pod_workload
                .clone()
                .into_iter()
                .chain(
                    // Pods left to another scheduler or to preemption (a
                    // Kueue Workload held is no pod).
                    snap.not_planned
                        .iter()
                        .filter(|c| c.sources.first().is_none_or(|s| s.kind == "Pod"))
                        .map(|c| (c.workload.clone(), c.workload.clone())),
                )
                .collect(),
            scheduler: snap.scheduler.clone(),
            open_intents: snap.open_intents.clone(),
            recent: self.life.recent.clone(),
            watches: snap.watches.clone(),
            would_write: self.said.would_write.clone(),
            commands: self.commands.latest(),
            replica: None,
            warm: (self.fleet.policy.warm == accord::fleet::Warm::Predictive).then_some(
                accord_api::control::WarmStatus {
                    expected_arrivals: self.warmth.round.expected,
                    lookahead_s: self.fleet.policy.warm_lookahead_s,
                    placeholders: self.warmth.round.placeholders,
                    held_gpus: self.warmth.round.held_gpus,
                    spent_gpu_hours: self.warmth.round.spent_gpu_hours,
                    budget_gpu_hours: self.fleet.policy.warm_budget_gpu_hours_per_day,
                },
            ),
            boot_times: self.life.boot_times.status(),
        }
    }

    /// Each node's entry in the status, in the fleet's (name) order: the
    /// maps of every node are walked beside it, not searched.
    fn node_statuses(&self, snap: &Snapshot) -> Vec<NodeStatus> {
        use crate::in_order::in_order;
        let (mut lives, mut pods) = (in_order(&self.life.nodes), in_order(&snap.pods_per_node));
        let mut bmc = in_order(&snap.bmc);
        let mut out = Vec::with_capacity(self.fleet.nodes.len());
        for n in &self.fleet.nodes {
            let Some(life) = lives.get(&n.name) else {
                continue;
            };
            out.push(NodeStatus {
                name: n.name.clone(),
                rack: n.rack.clone(),
                stage: life.stage,
                since: life.since,
                reason: self
                    .drain_reason(&n.name)
                    .or_else(|| life.reason.clone())
                    .map(|r| match self.dark_reason(&n.name, snap) {
                        Some(d) => format!("{r}; {d}"),
                        None => r,
                    }),
                pods: pods.get(&n.name).copied().unwrap_or(0),
                gpus: n.gpus.len() as u32,
                bmc_on: bmc.get(&n.name).copied(),
                model: self.model_source(n),
                drift: self
                    .truth
                    .declared_drift
                    .get(&n.name)
                    .into_iter()
                    .chain(self.truth.scheduler_drift.get(&n.name))
                    .flatten()
                    .cloned()
                    .collect(),
                bios: self.bios_status(n),
            });
        }
        out
    }
}

fn is_up(l: &NodeLife) -> bool {
    matches!(l.stage, Stage::Ready | Stage::InUse | Stage::Idle)
}

/// (node, workload) for every power-on in the plan.
fn power_ons_for(plan: &Plan) -> impl Iterator<Item = (&str, &str)> {
    plan.actions.iter().flat_map(|a| match a {
        Action::PowerOn {
            node,
            for_workloads,
            ..
        } => for_workloads
            .iter()
            .map(|w| (node.as_str(), w.as_str()))
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}
