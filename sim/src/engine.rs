//! The virtual-time loop: Accord's control loop reduced to its decisions,
//! with a stand-in world around it.
//!
//! Each round, as accordd's loop does: the machines' state is observed and
//! fed to each node's [`NodeLife`]; the fleet is given the lifecycles'
//! view (nodes on their way up count as powering on, idle ones carry
//! `idle_since`); [`accord::plan::plan`] plans; wave-0 power-ons are sent,
//! power-offs only for Idle nodes with no pods, MIG repartitions carried
//! out. The world: a power-on lands on the BMC after a drawn delay, the
//! node boots (agent up, then Ready) after another; the stand-in scheduler
//! binds a placed workload once every node it was placed on is up, and
//! the pods run for the job's run time.
//!
//! Rounds come every `round_s` while anything can change, and skip ahead
//! (to the next arrival, departure, boot step or idle timeout) when
//! nothing can: a quiet night costs nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use accord::demand::{BoundDevice, BoundPod, Demand, Workload};
use accord::fleet::{Fleet, Policy, PowerState};
use accord::lifecycle::{Deadlines, NodeLife, Observation, Stage};
use accord::plan::{Action, WorkloadPlacement};

use crate::figures::{
    round3, AllocationPoint, Class, ClassCdf, NodesByStage, PolicyFigures, Sample, Summary,
    MAX_POINTS, MAX_SAMPLES,
};
use crate::rng::SplitMix;
use crate::trace::{class, gpus, Trace};

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

/// The machine behind one node, as the world keeps it.
#[derive(Debug, Clone)]
struct Machine {
    bmc_on: bool,
    /// A power change on its way: (lands at, on?).
    bmc_change: Option<(u64, bool)>,
    agent_up_at: u64,
    ready_at: u64,
    pods: u32,
    /// Powered on by the simulation (not on from the start).
    powered_by_us: bool,
    /// Ran a pod since its last power-on.
    used: bool,
    /// Was ever powered off by the simulation (so a power-on is a cycle).
    was_off: bool,
    /// BMC On since (for powered hours and energy).
    on_since: Option<u64>,
    /// A MIG repartition runs until then: nothing binds on the node.
    mig_until: u64,
    gpus: u64,
    power_kw: f64,
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

/// One policy over the whole trace. `horizon_s` is when it stops.
pub fn run(
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
    let deadlines = Deadlines::default();
    let mut rng = SplitMix::new(seed);
    let index: HashMap<String, usize> = fleet
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let capacity: u64 = fleet.nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let mut machines: Vec<Machine> = fleet
        .nodes
        .iter()
        .map(|n| {
            let on = n.power == PowerState::On;
            Machine {
                bmc_on: on,
                bmc_change: None,
                agent_up_at: 0,
                ready_at: 0,
                pods: 0,
                powered_by_us: false,
                used: false,
                was_off: false,
                on_since: on.then_some(0),
                mig_until: 0,
                gpus: n.gpus.len() as u64,
                power_kw: n.power_kw,
            }
        })
        .collect();
    let mut lives: Vec<NodeLife> = machines
        .iter()
        .map(|m| NodeLife::new(if m.bmc_on { Stage::Idle } else { Stage::Off }, 0))
        .collect();

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
            power_ons: 0,
            power_offs: 0,
            power_cycles: 0,
            unused_power_ons: 0,
            mig_reconfigurations: 0,
            workloads: jobs.len() as u64,
            started: 0,
            never_started: 0,
            mean_time_to_running_s: None,
            p95_time_to_running_s: None,
            gpu_hours_powered: 0.0,
            gpu_hours_used: 0.0,
            gpu_hours_wasted: 0.0,
            energy_kwh: 0.0,
        },
        powered_gpu_s: 0.0,
        used_gpu_s: 0.0,
        energy_kws: 0.0,
    };
    let mut rounds: Vec<Sample> = Vec::new();
    let mut allocation: Vec<AllocationPoint> = Vec::new();

    let mut t = 0;
    loop {
        // The world moves to `t`: BMCs land their changes.
        for m in &mut machines {
            if let Some((at, on)) = m.bmc_change {
                if at <= t {
                    m.bmc_change = None;
                    if on && !m.bmc_on {
                        m.on_since = Some(at);
                    }
                    if !on && m.bmc_on {
                        close_on_interval(m, at, &mut totals);
                    }
                    m.bmc_on = on;
                    if on {
                        let boot = rng.range(world.boot_delay_s[0], world.boot_delay_s[1]);
                        m.agent_up_at = at + boot * 4 / 5;
                        m.ready_at = at + boot;
                    }
                }
            }
        }
        // Departures, their pods removed in one pass.
        let mut departed: BTreeSet<(&str, &str)> = BTreeSet::new();
        while let Some(&(end, k)) = ends.first() {
            if end > t {
                break;
            }
            ends.pop_first();
            if let Some(r) = running.remove(&k) {
                for &i in &r.nodes {
                    machines[i].pods = machines[i].pods.saturating_sub(1);
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
        // Observe: each node's lifecycle, as accordd's loop does.
        for (i, m) in machines.iter().enumerate() {
            // A dark machine with nothing on its way has nothing to show.
            if lives[i].stage == Stage::Off && !m.bmc_on && m.bmc_change.is_none() {
                continue;
            }
            let obs = Observation {
                bmc_on: Some(m.bmc_on),
                agent_up: m.bmc_on && t >= m.agent_up_at,
                kube_ready: m.bmc_on && t >= m.ready_at,
                pods: m.pods,
                agent_alive: m.bmc_on && t >= m.agent_up_at,
                cordoned: false,
            };
            lives[i].observe(&obs, t, &deadlines);
        }
        // The fleet as the lifecycles show it.
        for (n, life) in fleet.nodes.iter_mut().zip(&lives) {
            let (power, failed) = life.planner_power();
            n.power = power;
            n.failed = failed.then(|| life.reason.clone().unwrap_or_else(|| "failed".into()));
            n.idle_since = (life.stage == Stage::Idle).then_some(life.since);
        }
        let plan = accord::plan::plan(&fleet, &demand, &fleet.policy, t);

        // The stand-in scheduler binds what landed on nodes that are up.
        let mut bound_now: BTreeSet<usize> = BTreeSet::new();
        for p in &plan.placements {
            let Some(&k) = by_key.get(&p.workload) else {
                continue;
            };
            let Some(nodes) = bindable(p, &index, &lives, &machines, t) else {
                continue;
            };
            bind(p, &jobs[k].workload, &mut demand.bound);
            for &i in &nodes {
                machines[i].pods += 1;
                machines[i].used = true;
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

        // Effects: what accordd's loop sends.
        let later = plan.later_waves();
        for a in &plan.actions {
            let Some(&i) = index.get(a.node()) else {
                continue;
            };
            match a {
                Action::PowerOn { node, .. } if !later.contains(node.as_str()) => {
                    if !matches!(lives[i].stage, Stage::Off) || machines[i].bmc_change.is_some() {
                        continue;
                    }
                    lives[i].power_on_requested(t);
                    let m = &mut machines[i];
                    let delay = rng.range(world.bmc_delay_s[0], world.bmc_delay_s[1]);
                    m.bmc_change = Some((t + delay, true));
                    totals.summary.power_ons += 1;
                    if m.was_off {
                        totals.summary.power_cycles += 1;
                    }
                    m.powered_by_us = true;
                    m.used = false;
                }
                Action::ApplyBiosProfile { profile, .. } => {
                    fleet.nodes[i].bios_profile_applied = Some(profile.clone());
                }
                Action::PowerOff { .. } => {
                    let m = &mut machines[i];
                    if lives[i].stage != Stage::Idle || m.pods > 0 || m.bmc_change.is_some() {
                        continue;
                    }
                    lives[i].power_off_requested(t);
                    let delay = rng.range(world.bmc_delay_s[0], world.bmc_delay_s[1]);
                    m.bmc_change = Some((t + delay + world.shutdown_s, false));
                    totals.summary.power_offs += 1;
                    if m.powered_by_us && !m.used {
                        totals.summary.unused_power_ons += 1;
                    }
                    m.was_off = true;
                }
                Action::ReconfigureMig { gpu, layout, .. } => {
                    let node = &mut fleet.nodes[i];
                    let state = node
                        .gpus
                        .iter()
                        .find(|g| g.index == *gpu)
                        .and_then(|g| g.mig.as_ref())
                        .and_then(|m| m.with_layout(layout).ok());
                    if let Some(state) = state {
                        accord::plan::mig::expect_layout(node, *gpu, &state);
                        machines[i].mig_until = t + world.mig_s;
                        totals.summary.mig_reconfigurations += 1;
                    }
                }
                Action::PowerOn { .. } => {}
            }
        }

        // What the round leaves.
        let pending_gpus: f64 = pending.iter().map(|&k| job_gpus[k]).sum();
        rounds.push(Sample {
            t_s: t,
            pending_gpus: round3(pending_gpus),
            pending_workloads: pending.len() as u32,
            nodes: by_stage(&lives),
            gpus_powered: machines.iter().filter(|m| m.bmc_on).map(|m| m.gpus).sum(),
            gpus_used: round3(used_gpus.max(0.0)),
        });
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
        for (m, life) in machines.iter().zip(&lives) {
            if let Some((at, _)) = m.bmc_change {
                soon(at);
            }
            if m.bmc_on {
                soon(m.agent_up_at);
                soon(m.ready_at);
            }
            soon(m.mig_until);
            if life.stage == Stage::Idle {
                soon(
                    life.since
                        .saturating_add(fleet.policy.idle_power_off_after_s),
                );
            }
        }
        // A plan that asked for anything is looked at again next round.
        if !plan.actions.is_empty() || !bound_now.is_empty() {
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
    for m in &mut machines {
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
    finish(
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

/// The nodes a placement's pods are on, when every one is up and none is
/// being repartitioned.
fn bindable(
    p: &WorkloadPlacement,
    index: &HashMap<String, usize>,
    lives: &[NodeLife],
    machines: &[Machine],
    t: u64,
) -> Option<Vec<usize>> {
    let mut nodes = Vec::with_capacity(p.pods.len());
    for pod in &p.pods {
        let &i = index.get(&pod.node)?;
        if !matches!(lives[i].stage, Stage::Ready | Stage::Idle | Stage::InUse)
            || machines[i].mig_until > t
        {
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
        };
        let at = bound
            .binary_search_by(|x| {
                (&x.node, &x.namespace, &x.name).cmp(&(&b.node, &b.namespace, &b.name))
            })
            .unwrap_or_else(|i| i);
        bound.insert(at, b);
    }
}

fn by_stage(lives: &[NodeLife]) -> NodesByStage {
    let mut s = NodesByStage::default();
    for l in lives {
        let slot = match l.stage {
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

#[allow(clippy::too_many_arguments)]
fn finish(
    name: &str,
    policy: &Policy,
    totals: Totals,
    started_after: &[Option<u64>],
    classes: &[Class],
    rounds: Vec<Sample>,
    allocation: Vec<AllocationPoint>,
    horizon_s: u64,
) -> PolicyFigures {
    let mut summary = totals.summary;
    let mut all: Vec<u64> = started_after.iter().flatten().copied().collect();
    all.sort_unstable();
    summary.started = all.len() as u64;
    summary.never_started = summary.workloads - summary.started;
    if !all.is_empty() {
        summary.mean_time_to_running_s =
            Some(round3(all.iter().sum::<u64>() as f64 / all.len() as f64));
        summary.p95_time_to_running_s = Some(nearest_rank(&all, 95) as f64);
    }
    summary.gpu_hours_powered = round3(totals.powered_gpu_s / 3600.0);
    summary.gpu_hours_used = round3(totals.used_gpu_s / 3600.0);
    summary.gpu_hours_wasted =
        round3(((totals.powered_gpu_s - totals.used_gpu_s) / 3600.0).max(0.0));
    summary.energy_kwh = round3(totals.energy_kws / 3600.0);

    let mut per_class: BTreeMap<Class, (Vec<u64>, u64)> = BTreeMap::new();
    for (k, c) in classes.iter().enumerate() {
        let e = per_class.entry(*c).or_default();
        match started_after[k] {
            Some(s) => e.0.push(s),
            None => e.1 += 1,
        }
    }
    let time_to_running = per_class
        .into_iter()
        .map(|(class, (mut times, never))| {
            times.sort_unstable();
            ClassCdf {
                class,
                started: times.len() as u64,
                never_started: never,
                points: cdf(&times),
            }
        })
        .collect();
    PolicyFigures {
        name: name.to_owned(),
        policy: policy.clone(),
        summary,
        series: resample(&rounds, horizon_s),
        time_to_running,
        allocation: thin(allocation, MAX_POINTS),
    }
}

fn nearest_rank(sorted: &[u64], percent: usize) -> u64 {
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// `[seconds, share]` at most [`MAX_POINTS`] steps of the empirical CDF.
fn cdf(sorted: &[u64]) -> Vec<[f64; 2]> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(MAX_POINTS).max(1);
    let mut out: Vec<[f64; 2]> = (0..n)
        .step_by(step)
        .map(|i| [sorted[i] as f64, round3((i + 1) as f64 / n as f64)])
        .collect();
    if !(n - 1).is_multiple_of(step) {
        out.push([sorted[n - 1] as f64, 1.0]);
    }
    out
}

/// Every `n`th point, so at most `max` (the last kept).
fn thin<T: Clone>(v: Vec<T>, max: usize) -> Vec<T> {
    if v.len() <= max {
        return v;
    }
    let step = v.len().div_ceil(max);
    let last = v.last().cloned();
    let mut out: Vec<T> = v.into_iter().step_by(step).collect();
    if let Some(l) = last {
        if out.len() < max {
            out.push(l);
        } else if let Some(x) = out.last_mut() {
            *x = l;
        }
    }
    out
}

/// The state after the last round at or before each of at most
/// [`MAX_SAMPLES`] evenly spaced times.
fn resample(rounds: &[Sample], horizon_s: u64) -> Vec<Sample> {
    if rounds.is_empty() {
        return Vec::new();
    }
    let step = horizon_s.div_ceil(MAX_SAMPLES as u64 - 1).max(1);
    let mut out = Vec::new();
    let mut r = 0;
    let mut at = 0;
    while at <= horizon_s {
        while r + 1 < rounds.len() && rounds[r + 1].t_s <= at {
            r += 1;
        }
        let mut s = rounds[r].clone();
        s.t_s = at;
        out.push(s);
        at += step;
    }
    out
}
