//! One measurement for every arm: what the API shows (Pods, Nodes), and
//! which machines are powered (Accord's arm: the BMCs' power state, the
//! lab's record of it; a peer's: a Node object exists, as its kwok
//! provider's "instance" is the Node), folded tick by tick into the
//! figures the report compares.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::trace::{Job, GPUS_PER_NODE, JOB_LABEL, NAMESPACE, RACK_LABEL};

/// What one tick saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Seconds from the arm's start.
    pub t: f64,
    /// The machines powered now.
    pub powered: BTreeSet<String>,
    /// Each Node's rack label.
    pub racks: BTreeMap<String, String>,
    /// The trace's pods: (job, node it is bound to).
    pub pods: Vec<(String, Option<String>)>,
}

impl Seen {
    /// Reads the Nodes' racks and the trace's pods from listed objects.
    pub fn from_objects(
        t: f64,
        powered: BTreeSet<String>,
        nodes: &[Value],
        pods: &[Value],
    ) -> Seen {
        let racks = nodes
            .iter()
            .filter_map(|n| {
                let name = n["metadata"]["name"].as_str()?;
                let rack = n["metadata"]["labels"][RACK_LABEL].as_str()?;
                Some((name.to_owned(), rack.to_owned()))
            })
            .collect();
        let pods = pods
            .iter()
            .filter(|p| p["metadata"]["namespace"] == NAMESPACE)
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|p| {
                let job = p["metadata"]["labels"][JOB_LABEL].as_str()?;
                let node = p["spec"]["nodeName"].as_str().map(str::to_owned);
                Some((job.to_owned(), node))
            })
            .collect();
        Seen {
            t,
            powered,
            racks,
            pods,
        }
    }
}

/// One machine's time powered: was anything of the trace bound to it.
#[derive(Debug)]
struct Episode {
    used: bool,
}

/// The figures of one arm on one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub arm: String,
    pub trace: String,
    pub horizon_s: f64,
    /// Machines powered on (a peer: Nodes created).
    pub power_ons: u32,
    /// Of those, powered and shut again (or still on at the end) with no
    /// pod of the trace ever bound to it.
    pub never_used: u32,
    /// GPU-seconds of machines that were powered but empty, or held part of
    /// a gang whose other pods were pending.
    pub stranded_gpu_s: f64,
    /// Seconds from a gang's submission to all its pods bound.
    pub gang_bound_s: Vec<f64>,
    pub gang_p50_s: Option<f64>,
    /// None when more than 5 % of gangs never bound (p95 is "never").
    pub gang_p95_s: Option<f64>,
    pub gangs: u32,
    pub gangs_never_bound: u32,
    /// Gangs that fit one rack (and were asked to share one) bound across
    /// more than one.
    pub gangs_split: u32,
    /// Single pods never bound within the horizon.
    pub singles_never_bound: u32,
    /// A machine powered on within the idle time after one was shut: the
    /// same shape removed, then added again.
    pub churn: u32,
    pub powered_s: f64,
}

/// Folds ticks into figures.
#[derive(Debug)]
pub struct Measure {
    jobs: BTreeMap<String, Job>,
    idle_s: f64,
    last_t: Option<f64>,
    open: BTreeMap<String, Episode>,
    stops: Vec<f64>,
    power_ons: u32,
    never_used: u32,
    churn: u32,
    stranded_gpu_s: f64,
    powered_s: f64,
    /// The last tick's stranded GPUs and powered machines: an interval is
    /// charged as its start saw it.
    stranded_gpus_then: f64,
    powered_then: f64,
    bound: BTreeMap<String, (f64, BTreeSet<String>)>,
}

impl Measure {
    pub fn new(jobs: &[Job], idle_s: f64) -> Measure {
        Measure {
            jobs: jobs.iter().map(|j| (j.name.clone(), j.clone())).collect(),
            idle_s,
            last_t: None,
            open: BTreeMap::new(),
            stops: Vec::new(),
            power_ons: 0,
            never_used: 0,
            churn: 0,
            stranded_gpu_s: 0.0,
            powered_s: 0.0,
            stranded_gpus_then: 0.0,
            powered_then: 0.0,
            bound: BTreeMap::new(),
        }
    }

    pub fn tick(&mut self, seen: &Seen) {
        let t = seen.t;
        let dt = self.last_t.map_or(0.0, |last| (t - last).max(0.0));
        self.last_t = Some(t);
        self.stranded_gpu_s += self.stranded_gpus_then * dt;
        self.powered_s += self.powered_then * dt;
        // Machines shut since the last tick.
        let shut: Vec<String> = self
            .open
            .keys()
            .filter(|n| !seen.powered.contains(*n))
            .cloned()
            .collect();
        for n in shut {
            let e = self.open.remove(&n).expect("open episode");
            if !e.used {
                self.never_used += 1;
            }
            self.stops.push(t);
        }
        for n in &seen.powered {
            if !self.open.contains_key(n) {
                self.power_ons += 1;
                if self.stops.iter().any(|s| t - s <= self.idle_s) {
                    self.churn += 1;
                }
                self.open.insert(n.clone(), Episode { used: false });
            }
        }
        // What each job has bound, and where.
        let mut bound_of: BTreeMap<&str, (u32, BTreeSet<&str>)> = BTreeMap::new();
        let mut on_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (job, node) in &seen.pods {
            if let Some(node) = node {
                let b = bound_of.entry(job).or_default();
                b.0 += 1;
                b.1.insert(node);
                on_node.entry(node).or_default().push(job);
            }
        }
        let complete = |job: &str| -> bool {
            let pods = self.jobs.get(job).map_or(1, |j| j.pods);
            bound_of.get(job).is_some_and(|b| b.0 >= pods)
        };
        let mut stranded_gpus = 0.0;
        for n in &seen.powered {
            let jobs = on_node.get(n.as_str());
            if let (Some(e), Some(_)) = (self.open.get_mut(n), jobs) {
                e.used = true;
            }
            let stranded = match jobs {
                None => true,
                Some(jobs) => jobs.iter().any(|j| !complete(j)),
            };
            if stranded {
                stranded_gpus += f64::from(GPUS_PER_NODE);
            }
        }
        self.stranded_gpus_then = stranded_gpus;
        self.powered_then = seen.powered.len() as f64;
        for (job, (count, nodes)) in &bound_of {
            let Some(j) = self.jobs.get(*job) else {
                continue;
            };
            if *count >= j.pods && !self.bound.contains_key(*job) {
                let racks = nodes
                    .iter()
                    .map(|n| {
                        seen.racks
                            .get(*n)
                            .cloned()
                            .unwrap_or_else(|| format!("node {n}"))
                    })
                    .collect();
                self.bound
                    .insert((*job).to_owned(), ((t - j.at_s).max(0.0), racks));
            }
        }
    }

    /// The figures at the end of the horizon.
    pub fn figures(&self, arm: &str, trace: &str, horizon_s: f64) -> Figures {
        let never_used = self.never_used + self.open.values().filter(|e| !e.used).count() as u32;
        let gangs: Vec<&Job> = self.jobs.values().filter(|j| j.gang).collect();
        let mut gang_bound_s: Vec<f64> = gangs
            .iter()
            .filter_map(|j| self.bound.get(&j.name).map(|b| b.0))
            .collect();
        gang_bound_s.sort_by(f64::total_cmp);
        let gangs_never_bound = (gangs.len() - gang_bound_s.len()) as u32;
        let gangs_split = gangs
            .iter()
            .filter(|j| j.one_rack())
            .filter(|j| self.bound.get(&j.name).is_some_and(|b| b.1.len() > 1))
            .count() as u32;
        let singles_never_bound = self
            .jobs
            .values()
            .filter(|j| !j.gang && !self.bound.contains_key(&j.name))
            .count() as u32;
        Figures {
            arm: arm.to_owned(),
            trace: trace.to_owned(),
            horizon_s,
            power_ons: self.power_ons,
            never_used,
            stranded_gpu_s: self.stranded_gpu_s.round(),
            gang_p50_s: percentile(&gang_bound_s, gangs.len(), 0.50),
            gang_p95_s: percentile(&gang_bound_s, gangs.len(), 0.95),
            gang_bound_s,
            gangs: gangs.len() as u32,
            gangs_never_bound,
            gangs_split,
            singles_never_bound,
            churn: self.churn,
            powered_s: self.powered_s.round(),
        }
    }
}

/// The `q` quantile (nearest rank) of `total` values of which `bound` (in
/// order) are known and the rest never came: None when the rank falls
/// among those that never came.
pub fn percentile(bound: &[f64], total: usize, q: f64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as usize).clamp(1, total);
    bound.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, pods: u32, gang: bool) -> Job {
        Job {
            name: name.into(),
            at_s: 0.0,
            pods,
            gpus_per_pod: 8,
            gang,
            run_s: 10.0,
        }
    }

    fn seen(t: f64, powered: &[&str], pods: &[(&str, Option<&str>)]) -> Seen {
        Seen {
            t,
            powered: powered.iter().map(|s| s.to_string()).collect(),
            racks: [("a1", "r1"), ("a2", "r1"), ("b1", "r2")]
                .into_iter()
                .map(|(n, r)| (n.into(), r.into()))
                .collect(),
            pods: pods
                .iter()
                .map(|(j, n)| (j.to_string(), n.map(str::to_owned)))
                .collect(),
        }
    }

    #[test]
    fn empty_and_half_gang_machines_are_stranded_and_a_split_gang_is_counted() {
        let mut m = Measure::new(&[job("g", 2, true), job("s", 1, false)], 30.0);
        m.tick(&seen(0.0, &["a1", "b1"], &[("g", Some("a1")), ("g", None)]));
        // 10 s: a1 holds half a gang, b1 is empty: both stranded.
        m.tick(&seen(
            10.0,
            &["a1", "b1"],
            &[("g", Some("a1")), ("g", Some("b1"))],
        ));
        // The gang is whole (across r1 and r2); a2 comes up, never used.
        m.tick(&seen(
            20.0,
            &["a1", "b1", "a2"],
            &[("g", Some("a1")), ("g", Some("b1"))],
        ));
        m.tick(&seen(30.0, &["a1", "b1"], &[]));
        // a2 shut at 30, a2 back at 40: churn.
        m.tick(&seen(40.0, &["a1", "b1", "a2"], &[]));
        let f = m.figures("x", "t", 40.0);
        assert_eq!(f.power_ons, 4);
        assert_eq!(f.churn, 1);
        assert_eq!(f.never_used, 2, "both of a2's episodes");
        assert_eq!(f.gangs_split, 1);
        assert_eq!(f.gang_bound_s, vec![10.0]);
        assert_eq!(f.singles_never_bound, 1);
        // 0→10: a1 half a gang, b1 empty (16 GPUs × 10 s); 10→20: none;
        // 20→30: a2 (8 × 10); 30→40: a1, b1 empty (16 × 10).
        assert_eq!(f.stranded_gpu_s, 160.0 + 80.0 + 160.0);
        assert_eq!(f.powered_s, 20.0 + 20.0 + 30.0 + 20.0);
    }

    #[test]
    fn a_p95_among_gangs_that_never_bound_is_never() {
        assert_eq!(percentile(&[1.0, 2.0], 2, 0.95), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0], 3, 0.95), None);
        assert_eq!(percentile(&[1.0, 2.0], 3, 0.5), Some(2.0));
        assert_eq!(percentile(&[], 0, 0.5), None);
    }
}
