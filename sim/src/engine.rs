//! The virtual-time loop: accordd's own decider (`accord_decide::Decider`)
//! in a stand-in world. Each round the world's state becomes a
//! [`Snapshot`] as accordd's *observe* would gather it, the decider
//! decides, and the world carries out the [`Decision`]: power actions
//! land on the BMCs after a drawn delay and the machines boot (agent up,
//! then Ready) after another; agents carry out MIG commands and report
//! the new layout; BIOS profiles read back as staged. Every rule (when
//! to power on or off, lifecycles, bookings, repairs, drift, BIOS,
//! commands) is the decider's; this file holds the world and the tally.
//! The stand-in scheduler binds a workload the decider shows Placed once
//! every node it was placed on is Ready and not repartitioning, and its
//! pods run for the job's run time.
//!
//! Rounds come every `round_s` while anything can change, and skip ahead
//! (to the next arrival, departure, boot step or idle timeout) when
//! nothing can: a quiet night costs nothing.

mod tally;
mod world;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use accord::demand::{BoundDevice, BoundPod, Demand, Workload};
use accord::fleet::{Fleet, Policy};
use accord::lifecycle::{Deadlines, Stage};
use accord::plan::WorkloadPlacement;
use accord_api::control::{Mode, WorkloadState};
use accord_decide::{Decider, Settings, Snapshot};

use crate::figures::{
    round3, AllocationPoint, Class, NodesByStage, PolicyFigures, Sample, Summary,
};
use crate::trace::{class, gpus, Trace};
use world::{Datacenter, Machine};

/// How long a Provisioned request's nodes stay booked, and an agent
/// command may take, in the simulated accordd (its defaults).
const BOOKING_S: u64 = 600;
const COMMAND_DEADLINE_S: u64 = 600;

/// How the stand-in world behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    /// accordd's round interval.
    pub round_s: u64,
    /// Power request → the BMC shows the new state: drawn uniformly.
    pub bmc_delay_s: [u64; 2],
    /// BMC On → the node is Ready (its agent is up at four fifths of it).
    pub boot_delay_s: [u64; 2],
    /// Shutdown requested → the BMC shows Off, besides the BMC delay.
    pub shutdown_s: u64,
    /// A MIG repartition by the agent, start to done.
    pub mig_s: u64,
}

impl Default for World {
    fn default() -> World {
        World {
            round_s: 10,
            // sushy-emulator's fake driver lands a change 1–11 s later.
            bmc_delay_s: [1, 11],
            // Firmware, POST and OS of a GPU server: 3–8 minutes.
            boot_delay_s: [180, 480],
            shutdown_s: 60,
            mig_s: 30,
        }
    }
}

/// A job that runs.
#[derive(Debug, Clone)]
struct Running {
    end: Option<u64>,
    nodes: Vec<usize>,
    gpus: f64,
}

struct Totals {
    summary: Summary,
    powered_gpu_s: f64,
    used_gpu_s: f64,
    energy_kws: f64,
}

/// One policy over the whole trace. `horizon_s` is when it stops. The
/// decider's logs are its own business here (a day is many rounds).
pub fn run(
    fleet: &Fleet,
    trace: &Trace,
    name: &str,
    policy: &Policy,
    seed: u64,
    world: &World,
    horizon_s: u64,
) -> PolicyFigures {
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
        run_quietly(fleet, trace, name, policy, seed, world, horizon_s)
    })
}

fn run_quietly(
    fleet: &Fleet,
    trace: &Trace,
    name: &str,
    policy: &Policy,
    seed: u64,
    world: &World,
    horizon_s: u64,
) -> PolicyFigures {
    let mut fleet = fleet.clone();
    fleet.policy = policy.clone();
    let mut dc = Datacenter::new(&fleet, seed);
    let settings = Settings {
        mode: Mode::Act,
        deadlines: Deadlines::default(),
        booking_s: BOOKING_S,
        command_deadline_s: COMMAND_DEADLINE_S,
        mig_manager: accord_decide::MigManager::default(),
    };
    let idle_after_s = fleet.policy.idle_power_off_after_s;
    let capacity: u64 = fleet.nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let mut decider = Decider::new(fleet, settings, 0);

    let jobs = &trace.jobs;
    let job_gpus: Vec<f64> = jobs.iter().map(|j| gpus(&j.workload)).collect();
    let job_class: Vec<Class> = jobs.iter().map(|j| class(&j.workload)).collect();
    let by_key: HashMap<String, usize> = jobs
        .iter()
        .enumerate()
        .map(|(k, j)| (j.workload.key(), k))
        .collect();

    let mut demand = Demand {
        device_classes: trace.device_classes.clone(),
        ..Demand::default()
    };
    // Pending jobs in arrival order, by index into `jobs`.
    let mut pending: Vec<usize> = Vec::new();
    let mut running: BTreeMap<usize, Running> = BTreeMap::new();
    // Departures: (end, job).
    let mut ends: BTreeSet<(u64, usize)> = BTreeSet::new();
    let mut started_after: Vec<Option<u64>> = vec![None; jobs.len()];
    let mut next_arrival = 0;
    let mut arrived_gpus = 0.0;
    let mut used_gpus = 0.0;

    let mut totals = Totals {
        summary: Summary {
            workloads: jobs.len() as u64,
            ..Summary::default()
        },
        powered_gpu_s: 0.0,
        used_gpu_s: 0.0,
        energy_kws: 0.0,
    };
    let mut rounds: Vec<Sample> = Vec::new();
    let mut allocation: Vec<AllocationPoint> = Vec::new();

    let mut t = 0;
    loop {
        dc.advance(t, world, &mut totals);
        // Departures, their pods removed in one pass.
        let mut departed: BTreeSet<(&str, &str)> = BTreeSet::new();
        while let Some(&(end, k)) = ends.first() {
            if end > t {
                break;
            }
            ends.pop_first();
            if let Some(r) = running.remove(&k) {
                for &i in &r.nodes {
                    dc.machines[i].pods = dc.machines[i].pods.saturating_sub(1);
                }
                used_gpus -= r.gpus;
                totals.used_gpu_s +=
                    r.gpus * end.saturating_sub(started_at(&started_after, jobs, k)) as f64;
                let w = &jobs[k].workload;
                departed.insert((w.namespace.as_str(), w.name.as_str()));
            }
        }
        if !departed.is_empty() {
            demand.bound.retain(|p| {
                let workload = p.name.split_once('/').map_or(p.name.as_str(), |(w, _)| w);
                !departed.contains(&(p.namespace.as_str(), workload))
            });
        }
        // Arrivals.
        let mut arrived = false;
        while next_arrival < jobs.len() && jobs[next_arrival].submit_s <= t {
            pending.push(next_arrival);
            demand.workloads.push(jobs[next_arrival].workload.clone());
            arrived_gpus += job_gpus[next_arrival];
            next_arrival += 1;
            arrived = true;
        }

        // Observe → decide, as accordd's loop does: at most a round's
        // worth of pending pods, the rest waiting for a later round.
        let deferred = defer_past_round_limit(
            &mut demand.workloads,
            u64::from(accord::demand::DEFAULT_MAX_PODS_PER_ROUND),
        );
        let snap = Snapshot {
            demand: std::mem::take(&mut demand),
            ..dc.snapshot(t)
        };
        let d = decider.decide(&snap);
        demand = dc.take_back(snap);
        demand.workloads.extend(deferred);

        // Evicted (a lent reserved node taken back): the job stops and
        // waits again, as a Job's pod is made anew by its controller.
        for k in evicted_jobs(&d, &by_key) {
            let Some(g) = stop(k, &mut running, &mut ends, &mut dc) else {
                continue;
            };
            used_gpus -= g;
            totals.used_gpu_s += g * t.saturating_sub(started_at(&started_after, jobs, k)) as f64;
            unbind(&jobs[k].workload, &mut demand.bound);
            (started_after[k], totals.summary.evictions) = (None, totals.summary.evictions + 1);
            pending.push(k);
            demand.workloads.push(jobs[k].workload.clone());
        }

        // The stand-in scheduler binds what the decider shows Placed on
        // nodes that are up.
        let placed: BTreeSet<&str> = d
            .status
            .workloads
            .iter()
            .filter(|w| w.state == WorkloadState::Placed)
            .map(|w| w.workload.as_str())
            .collect();
        let mut bound_now: BTreeSet<usize> = BTreeSet::new();
        for p in &d.status.placements {
            if !placed.contains(p.workload.as_str()) {
                continue;
            }
            let Some(&k) = by_key.get(&p.workload) else {
                continue;
            };
            let Some(nodes) = bindable(p, &dc, t) else {
                continue;
            };
            bind(p, &jobs[k].workload, &mut demand.bound);
            for &i in &nodes {
                dc.machines[i].pods += 1;
                dc.machines[i].used = true;
            }
            let end = jobs[k].run_s.map(|r| t.saturating_add(r));
            if let Some(e) = end {
                ends.insert((e, k));
            }
            used_gpus += job_gpus[k];
            started_after[k] = Some(t - jobs[k].submit_s);
            running.insert(
                k,
                Running {
                    end,
                    nodes,
                    gpus: job_gpus[k],
                },
            );
            bound_now.insert(k);
        }
        if !bound_now.is_empty() {
            pending.retain(|k| !bound_now.contains(k));
            demand
                .workloads
                .retain(|w| by_key.get(&w.key()).is_none_or(|k| !bound_now.contains(k)));
        }

        // Effects: what accordd's loop would carry out.
        dc.apply(&d, t, world, &mut totals);

        rounds.push(sample(t, &pending, &job_gpus, &decider, &dc, used_gpus));
        if arrived && capacity > 0 {
            allocation.push(AllocationPoint {
                arrived: round3(arrived_gpus / capacity as f64),
                allocated: round3(used_gpus.max(0.0) / capacity as f64),
            });
        }

        // When anything can change next.
        let mut next: Option<u64> = None;
        let mut soon = |x: u64| {
            if x > t {
                next = Some(next.map_or(x, |n: u64| n.min(x)));
            }
        };
        if let Some(j) = jobs.get(next_arrival) {
            soon(j.submit_s);
        }
        if let Some(&(end, _)) = ends.first() {
            soon(end);
        }
        for m in &dc.machines {
            if let Some((at, _)) = m.bmc_change {
                soon(at);
            }
            if m.bmc_on {
                soon(m.agent_up_at);
                soon(m.ready_at);
            }
            soon(m.mig_until);
        }
        for (_, life) in decider.lives().filter(|(_, l)| l.stage == Stage::Idle) {
            soon(life.since.saturating_add(idle_after_s));
        }
        // A decision that asked for anything, or anything on its way, is
        // looked at again next round.
        if !d.status.actions.is_empty()
            || !bound_now.is_empty()
            || !d.transitional.is_empty()
            || !d.bios.checks.is_empty()
            || dc.commands_open()
        {
            soon(t + world.round_s);
        }
        let Some(at) = next else { break };
        let at = at.div_ceil(world.round_s) * world.round_s;
        let at = at.max(t + world.round_s);
        if at > horizon_s {
            break;
        }
        t = at;
    }

    // The end: close what is still open at the horizon.
    let end = horizon_s.max(t);
    for m in &mut dc.machines {
        if m.bmc_on {
            close_on_interval(m, end, &mut totals);
            if m.powered_by_us && !m.used {
                totals.summary.unused_power_ons += 1;
            }
        }
    }
    for (&k, r) in &running {
        let stop = r.end.map_or(end, |e| e.min(end));
        totals.used_gpu_s +=
            r.gpus * stop.saturating_sub(started_at(&started_after, jobs, k)) as f64;
    }
    tally::finish(
        name,
        policy,
        totals,
        &started_after,
        &job_class,
        rounds,
        allocation,
        horizon_s,
    )
}

/// accordd plans at most `max` pending pods a round, workloads taken in
/// key order while they fit (kube/src/translate/mod.rs, `round_limit`);
/// the others are taken out of `workloads` and returned, to wait. Nothing
/// moves when all fit.
fn defer_past_round_limit(workloads: &mut Vec<Workload>, max: u64) -> Vec<Workload> {
    let total: u64 = workloads.iter().map(Workload::pod_count_u64).sum();
    if total <= max {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..workloads.len()).collect();
    order.sort_by_cached_key(|&i| workloads[i].key());
    let mut keep = vec![false; workloads.len()];
    let mut taken: u64 = 0;
    for i in order {
        let n = workloads[i].pod_count_u64();
        if taken.saturating_add(n) <= max {
            taken += n;
            keep[i] = true;
        }
    }
    let mut kept = Vec::with_capacity(workloads.len());
    let mut deferred = Vec::new();
    for (w, k) in std::mem::take(workloads).into_iter().zip(keep) {
        if k {
            kept.push(w);
        } else {
            deferred.push(w);
        }
    }
    *workloads = kept;
    deferred
}

/// What the round leaves (counted: the order of the nodes does not
/// matter).
fn sample(
    t: u64,
    pending: &[usize],
    job_gpus: &[f64],
    decider: &Decider,
    dc: &Datacenter,
    used_gpus: f64,
) -> Sample {
    let stages: Vec<Stage> = decider.lives().map(|(_, l)| l.stage).collect();
    let pending_gpus: f64 = pending.iter().map(|&k| job_gpus[k]).sum();
    Sample {
        t_s: t,
        pending_gpus: round3(pending_gpus),
        pending_workloads: pending.len() as u32,
        nodes: by_stage(&stages),
        gpus_powered: (dc.machines.iter().filter(|m| m.bmc_on))
            .map(|m| m.gpus)
            .sum(),
        gpus_used: round3(used_gpus.max(0.0)),
    }
}

/// The jobs a decision evicts a pod of (bound pods are named
/// `workload/pod`), each once.
fn evicted_jobs(d: &accord_decide::Decision, by_key: &HashMap<String, usize>) -> BTreeSet<usize> {
    d.evictions
        .iter()
        .filter_map(|e| {
            let workload = e.pod.split_once('/').map_or(e.pod.as_str(), |(w, _)| w);
            by_key.get(&format!("{}/{workload}", e.namespace)).copied()
        })
        .collect()
}

/// Job `k` stops running (its nodes freed, its end dropped); its GPUs.
fn stop(
    k: usize,
    running: &mut BTreeMap<usize, Running>,
    ends: &mut BTreeSet<(u64, usize)>,
    dc: &mut Datacenter,
) -> Option<f64> {
    let r = running.remove(&k)?;
    for &i in &r.nodes {
        dc.machines[i].pods = dc.machines[i].pods.saturating_sub(1);
    }
    if let Some(end) = r.end {
        ends.remove(&(end, k));
    }
    Some(r.gpus)
}

/// The pods of workload `w` leave the bound pods.
fn unbind(w: &Workload, bound: &mut Vec<BoundPod>) {
    bound.retain(|p| {
        let workload = p.name.split_once('/').map_or(p.name.as_str(), |(n, _)| n);
        !(p.namespace == w.namespace && workload == w.name)
    });
}

fn started_at(started_after: &[Option<u64>], jobs: &[crate::trace::Job], k: usize) -> u64 {
    jobs[k].submit_s + started_after[k].unwrap_or(0)
}

fn close_on_interval(m: &mut Machine, at: u64, totals: &mut Totals) {
    if let Some(since) = m.on_since.take() {
        let s = at.saturating_sub(since) as f64;
        totals.powered_gpu_s += s * m.gpus as f64;
        totals.energy_kws += s * m.power_kw;
    }
}

/// The nodes a placement's pods are on, when every one is Ready and none
/// is being repartitioned (the world's state, not the decider's).
fn bindable(p: &WorkloadPlacement, dc: &Datacenter, t: u64) -> Option<Vec<usize>> {
    let mut nodes = Vec::with_capacity(p.pods.len());
    for pod in &p.pods {
        let &i = dc.index.get(&pod.node)?;
        let m = &dc.machines[i];
        if !m.ready(t) || m.mig_until > t {
            return None;
        }
        nodes.push(i);
    }
    (!nodes.is_empty()).then_some(nodes)
}

/// The pods as the API server would hold them once bound: their requests
/// and the devices their claims were allocated.
///
/// `bound` stays sorted as the planner sorts it (node, namespace, name),
/// so its sort each round finds one run: 800 bound pods cost the
/// planner's sort some 8,000 string comparisons a round otherwise.
fn bind(p: &WorkloadPlacement, w: &Workload, bound: &mut Vec<BoundPod>) {
    for pod in &p.pods {
        let set = pod
            .pod
            .rsplit_once('-')
            .and_then(|(set, _)| w.pod_sets.iter().find(|s| s.name == set));
        let b = BoundPod {
            daemon_set: Default::default(),
            node_selector_keys: Vec::new(),
            csi_volumes: set.map(|s| s.pod.volumes.csi.clone()).unwrap_or_default(),
            node: pod.node.clone(),
            namespace: w.namespace.clone(),
            name: format!("{}/{}", w.name, pod.pod),
            labels: w.labels.clone(),
            requests: set.map(|s| s.pod.requests.clone()).unwrap_or_default(),
            devices: pod
                .devices
                .iter()
                .map(|d| BoundDevice {
                    name: d.device.to_string(),
                    capacity: d
                        .capacity
                        .iter()
                        .map(|(k, v)| (k.clone(), format!("{v}m")))
                        .collect(),
                })
                .collect(),
            node_agent: false,
            do_not_disrupt: false,
            device_ids: Vec::new(),
            relations: Default::default(),
        };
        let at = bound
            .binary_search_by(|x| {
                (&x.node, &x.namespace, &x.name).cmp(&(&b.node, &b.namespace, &b.name))
            })
            .unwrap_or_else(|i| i);
        bound.insert(at, b);
    }
}

fn by_stage(stages: &[Stage]) -> NodesByStage {
    let mut s = NodesByStage::default();
    for stage in stages {
        let slot = match stage {
            Stage::Off => &mut s.off,
            Stage::PoweringOn => &mut s.powering_on,
            Stage::Booting | Stage::AgentUp => &mut s.booting,
            Stage::Ready | Stage::Idle => &mut s.idle,
            Stage::InUse => &mut s.in_use,
            Stage::PoweringOff => &mut s.powering_off,
            Stage::Failed | Stage::Unhealthy => &mut s.failed,
        };
        *slot += 1;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, pods: u32) -> Workload {
        let mut w: Workload = serde_json::from_value(serde_json::json!({
            "namespace": "ml",
            "name": name,
            "pod_sets": [{"name": "w", "count": pods, "pod": {"requests": {}}}],
        }))
        .unwrap();
        w.created = 0;
        w
    }

    #[test]
    fn a_round_takes_its_limit_of_pods_in_key_order_and_the_rest_wait() {
        let mut all = vec![workload("c", 3), workload("a", 4), workload("b", 2)];
        assert!(defer_past_round_limit(&mut all, 9).is_empty(), "all fit");
        assert_eq!(all.len(), 3);
        let deferred = defer_past_round_limit(&mut all, 6);
        let keys = |v: &[Workload]| v.iter().map(|w| w.name.clone()).collect::<Vec<_>>();
        // a (4) fits, b (2) fits, c (3) would pass 6: it waits.
        assert_eq!(keys(&all), ["a", "b"]);
        assert_eq!(keys(&deferred), ["c"]);
    }
}
