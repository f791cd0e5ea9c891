//! Demand over time: what the simulation replays. A trace is a list of
//! jobs, each a core [`Workload`] with a submission time and a run time.
//! Read from Accord's trace JSON, from Accord's demand JSON (workloads'
//! `created` as submission times), or from an Alibaba openb pod list
//! ([`crate::openb`]); the embedded default is a small synthetic day of
//! gangs, single pods, MIG and shared-GPU pods ([`default_trace`]).

use std::collections::BTreeMap;

use accord::demand::{
    Claim, Demand, DeviceClass, DeviceRequest, ExactRequest, PodSet, PodSpec, TopologyMode,
    TopologyRequirement, Workload,
};
use serde::{Deserialize, Serialize};

use crate::figures::Class;
use crate::rng::SplitMix;

/// Jobs in one trace at most: counted while the file is read, so a
/// hostile file is refused before its jobs are built.
pub const MAX_JOBS: usize = accord::demand::MAX_WORKLOADS_IN_FILE;
/// Submission and run times at most (100 years): sums never overflow.
pub const MAX_TIME_S: u64 = 100 * 365 * 86_400;

/// One unit of demand: submitted at `submit_s`, runs `run_s` once every
/// pod is bound (`None`: until the end).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub submit_s: u64,
    #[serde(default)]
    pub run_s: Option<u64>,
    pub workload: Workload,
}

/// Accord's trace JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// Device classes besides the built-in ones (as in demand JSON).
    #[serde(default)]
    pub device_classes: Vec<DeviceClass>,
    #[serde(deserialize_with = "at_most_max_jobs")]
    pub jobs: Vec<Job>,
}

fn at_most_max_jobs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Job>, D::Error> {
    accord::demand::at_most(d, MAX_JOBS)
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{file}:{line}:{column}: not a trace or demand JSON")]
    Json {
        file: String,
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{file}: job {index} ({workload}): {what}")]
    Job {
        file: String,
        index: usize,
        workload: String,
        what: String,
    },
    #[error("{file}: {count} jobs, more than the limit of {MAX_JOBS}")]
    TooMany { file: String, count: usize },
    #[error("{file}: no jobs")]
    Empty { file: String },
    #[error("{file}: invalid workloads:\n  {}", problems.join("\n  "))]
    Invalid { file: String, problems: Vec<String> },
    #[error(transparent)]
    Openb(#[from] crate::openb::OpenbError),
}

impl Trace {
    /// Parses Accord's trace JSON (`{"jobs": [...]}`) or demand JSON
    /// (`{"workloads": [...]}`: each workload's `created` its submission
    /// time, running until the end) and checks it.
    pub fn from_json(text: &str, file: &str) -> Result<Trace, TraceError> {
        // The trace shape first, for its located error; then the demand
        // shape (both deny unknown keys, so neither passes for the other).
        let trace = match accord::json::from_str::<Trace>(text) {
            Ok(t) => t,
            Err(trace_err) => match accord::json::from_str::<Demand>(text) {
                Ok(d) => Trace {
                    device_classes: d.device_classes,
                    jobs: d
                        .workloads
                        .into_iter()
                        .map(|w| Job {
                            submit_s: w.created,
                            run_s: None,
                            workload: w,
                        })
                        .collect(),
                },
                Err(_) => {
                    return Err(TraceError::Json {
                        file: file.to_owned(),
                        line: trace_err.line(),
                        column: trace_err.column(),
                        source: trace_err,
                    })
                }
            },
        };
        trace.checked(file)
    }

    /// The Alibaba openb pod list: each pod a one-pod job submitted at its
    /// creation time, running until its deletion (from when it starts; a
    /// pod never deleted runs until the end).
    pub fn from_openb(text: &str, file: &str) -> Result<Trace, TraceError> {
        let pods = crate::openb::parse_pods(text, file)?;
        let jobs = pods
            .iter()
            .map(|p| {
                let start = p.scheduled_s.unwrap_or(p.creation_s).max(p.creation_s);
                Job {
                    submit_s: p.creation_s,
                    run_s: p.deletion_s.map(|d| d.saturating_sub(start).max(1)),
                    workload: crate::openb::workload(p, &p.name, "openb", p.creation_s),
                }
            })
            .collect();
        Trace {
            device_classes: Vec::new(),
            jobs,
        }
        .checked(file)
    }

    /// Bounds, unique names, and jobs sorted by submission (then name) so
    /// the replay does not depend on the file's order.
    fn checked(mut self, file: &str) -> Result<Trace, TraceError> {
        if self.jobs.len() > MAX_JOBS {
            return Err(TraceError::TooMany {
                file: file.to_owned(),
                count: self.jobs.len(),
            });
        }
        if self.jobs.is_empty() {
            return Err(TraceError::Empty {
                file: file.to_owned(),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        let times: Vec<(u64, Option<u64>)> =
            self.jobs.iter().map(|j| (j.submit_s, j.run_s)).collect();
        for (index, j) in self.jobs.iter().enumerate() {
            let bad = |what: String| TraceError::Job {
                file: file.to_owned(),
                index,
                workload: j.workload.key(),
                what,
            };
            if j.submit_s > MAX_TIME_S {
                return Err(bad(format!(
                    "submit_s {} is past the limit of {MAX_TIME_S}",
                    j.submit_s
                )));
            }
            if let Some(r) = j.run_s {
                if r == 0 || r > MAX_TIME_S {
                    return Err(bad(format!("run_s {r} is not within 1..={MAX_TIME_S}")));
                }
            }
            if j.workload.pod_count_u64() == 0 {
                return Err(bad("no pods".into()));
            }
            if j.workload.pod_count_u64() > u64::from(accord::demand::MAX_PODS_PER_WORKLOAD_CEILING)
            {
                return Err(bad(format!(
                    "{} pods, more than the limit of {}",
                    j.workload.pod_count_u64(),
                    accord::demand::MAX_PODS_PER_WORKLOAD_CEILING
                )));
            }
            if !seen.insert(j.workload.key()) {
                return Err(bad("a second job of this name".into()));
            }
        }
        for j in &mut self.jobs {
            j.workload.created = j.submit_s;
        }
        // Every number and key, as a demand file is checked: what the
        // planner gets is what a translation would let through.
        let demand = Demand {
            daemon_sets: Default::default(),
            namespace_labels: Default::default(),
            csi_limits: Default::default(),
            device_classes: std::mem::take(&mut self.device_classes),
            workloads: std::mem::take(&mut self.jobs)
                .into_iter()
                .map(|j| j.workload)
                .collect(),
            bound: Vec::new(),
        };
        // The per-round limit is accordd's per round (the engine applies
        // it round by round), not a limit on the whole trace.
        let limits = accord::demand::Limits {
            max_pods_per_round: u32::MAX,
            ..Default::default()
        };
        let problems = demand.validate(&limits);
        if !problems.is_empty() {
            return Err(TraceError::Invalid {
                file: file.to_owned(),
                problems: problems.into_iter().take(20).collect(),
            });
        }
        self.device_classes = demand.device_classes;
        self.jobs = demand
            .workloads
            .into_iter()
            .zip(times)
            .map(|(workload, (submit_s, run_s))| Job {
                submit_s,
                run_s,
                workload,
            })
            .collect();
        self.jobs.sort_by(|a, b| {
            (a.submit_s, &a.workload.namespace, &a.workload.name).cmp(&(
                b.submit_s,
                &b.workload.namespace,
                &b.workload.name,
            ))
        });
        Ok(self)
    }
}

/// The class a workload's time to running is reported under.
pub fn class(w: &Workload) -> Class {
    let mut mig = false;
    let mut shared = false;
    let mut gpu = false;
    for set in &w.pod_sets {
        for k in set.pod.requests.keys() {
            if k.starts_with("nvidia.com/mig-") {
                mig = true;
            } else if k == "nvidia.com/gpu" {
                gpu = true;
            }
        }
        for r in requests(&set.pod) {
            match r.device_class.as_str() {
                "mig.nvidia.com" => mig = true,
                _ if !r.capacity.is_empty() => shared = true,
                _ => gpu = true,
            }
        }
    }
    if mig {
        Class::Mig
    } else if shared {
        Class::Shared
    } else if w.pod_count_u64() > 1 {
        Class::Gang
    } else if gpu {
        Class::Single
    } else {
        Class::Cpu
    }
}

/// The first alternative of every device request of a pod.
fn requests(pod: &PodSpec) -> impl Iterator<Item = &ExactRequest> {
    pod.claims
        .iter()
        .flat_map(|c| &c.requests)
        .filter_map(|r| r.exactly.as_ref().or(r.first_available.first()))
}

/// GPUs a workload asks for, shares and MIG instances as fractions of a
/// GPU (a MIG profile `Ng.*` as N sevenths, the compute slices of an
/// A100/H100).
pub fn gpus(w: &Workload) -> f64 {
    let mut total = 0.0;
    for set in &w.pod_sets {
        let mut per_pod = 0.0;
        for (k, v) in &set.pod.requests {
            let n = accord::quantity::parse(v).unwrap_or(0).max(0) as f64 / 1000.0;
            if k == "nvidia.com/gpu" {
                per_pod += n;
            } else if let Some(profile) = k.strip_prefix("nvidia.com/mig-") {
                per_pod += n * mig_fraction(profile);
            }
        }
        for r in requests(&set.pod) {
            let count = f64::from(r.count);
            per_pod += match r.device_class.as_str() {
                "mig.nvidia.com" => {
                    count * mig_profile_in(&r.selectors).map_or(1.0 / 7.0, mig_fraction)
                }
                _ => match r.capacity.get("gpu.nvidia.com/compute") {
                    Some(q) => {
                        count
                            * (accord::quantity::parse(q).unwrap_or(1000).clamp(0, 1000) as f64
                                / 1000.0)
                    }
                    None => count,
                },
            };
        }
        total += per_pod * f64::from(set.count);
    }
    total
}

fn mig_fraction(profile: &str) -> f64 {
    profile
        .split_once('g')
        .and_then(|(n, _)| n.parse::<u32>().ok())
        .map_or(1.0 / 7.0, |n| f64::from(n.min(7)) / 7.0)
}

/// A MIG profile named in a selector (`... == "1g.10gb"`).
fn mig_profile_in(selectors: &[String]) -> Option<&str> {
    selectors.iter().find_map(|s| {
        let (_, rest) = s.split_once('"')?;
        let (value, _) = rest.split_once('"')?;
        value.contains("g.").then_some(value)
    })
}

/// The embedded default trace: one day on the embedded default fleet
/// (`default-fleet.toml`) from a fixed seed: rack-local gangs of 8-GPU
/// pods, single pods of 1–8 GPUs, MIG 1g.10gb pods and shared L40S
/// pods, busier in working hours.
pub fn default_trace() -> Trace {
    let mut rng = SplitMix::new(20_261_202);
    let mut jobs = Vec::new();
    let day = 86_400;
    let mut t = 0;
    let mut k = 0;
    while t < day {
        // Working hours (08:00–18:00) three times as busy.
        let hour = t / 3600;
        let mean_gap = if (8..18).contains(&hour) { 240 } else { 720 };
        t += rng.range(mean_gap / 4, mean_gap * 7 / 4);
        if t >= day {
            break;
        }
        let pick = rng.below(100);
        let (workload, run_s) = if pick < 22 {
            let pods = [2, 2, 3, 4][rng.below(4) as usize];
            (gang(k, pods), rng.range(1800, 4 * 3600))
        } else if pick < 55 {
            let g = [1, 1, 2, 4, 8][rng.below(5) as usize];
            (single(k, g), rng.range(600, 3 * 3600))
        } else if pick < 78 {
            (mig(k), rng.range(900, 2 * 3600))
        } else {
            (
                shared(k, [250, 300, 500][rng.below(3) as usize]),
                rng.range(600, 2 * 3600),
            )
        };
        jobs.push(Job {
            submit_s: t,
            run_s: Some(run_s),
            workload,
        });
        k += 1;
    }
    Trace {
        device_classes: Vec::new(),
        jobs,
    }
    .checked("embedded default trace")
    .unwrap_or_default()
}

fn base(name: String, namespace: &str, sets: Vec<PodSet>) -> Workload {
    Workload {
        name,
        namespace: namespace.to_owned(),
        labels: BTreeMap::new(),
        min_count: None,
        priority: 0,
        created: 0,
        topology: None,
        reservation: None,
        approximation: None,
        sources: Vec::new(),
        pod_sets: sets,
    }
}

fn pod(requests: &[(&str, String)]) -> PodSpec {
    PodSpec {
        requests: requests
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        ..PodSpec::default()
    }
}

fn gang(k: usize, pods: u32) -> Workload {
    let mut w = base(
        format!("train-{k:04}"),
        "training",
        vec![PodSet {
            name: "worker".into(),
            count: pods,
            pod: pod(&[
                ("cpu", "48".into()),
                ("memory", "256Gi".into()),
                ("nvidia.com/gpu", "8".into()),
            ]),
        }],
    );
    w.topology = Some(TopologyRequirement {
        level: "rack".into(),
        mode: TopologyMode::Required,
    });
    w
}

fn single(k: usize, gpus: u32) -> Workload {
    base(
        format!("job-{k:04}"),
        "batch",
        vec![PodSet {
            name: "main".into(),
            count: 1,
            pod: pod(&[
                ("cpu", format!("{}", 6 * gpus)),
                ("memory", format!("{}Gi", 32 * gpus)),
                ("nvidia.com/gpu", gpus.to_string()),
            ]),
        }],
    )
}

fn mig(k: usize) -> Workload {
    base(
        format!("notebook-{k:04}"),
        "notebooks",
        vec![PodSet {
            name: "nb".into(),
            count: 1,
            pod: pod(&[("cpu", "2".into()), ("nvidia.com/mig-1g.10gb", "1".into())]),
        }],
    )
}

fn shared(k: usize, milli: u32) -> Workload {
    let mut capacity = BTreeMap::new();
    capacity.insert("gpu.nvidia.com/compute".to_owned(), format!("{milli}m"));
    let mut p = pod(&[("cpu", "4".into()), ("memory", "16Gi".into())]);
    p.claims.push(Claim {
        name: "gpu".into(),
        requests: vec![DeviceRequest {
            name: "gpu".into(),
            exactly: Some(ExactRequest {
                name: None,
                device_class: "gpu.nvidia.com".into(),
                selectors: vec![],
                count: 1,
                allocation_mode: Default::default(),
                capacity,
                tolerations: Vec::new(),
            }),
            first_available: vec![],
        }],
        constraints: vec![],
    });
    base(
        format!("infer-{k:04}"),
        "inference",
        vec![PodSet {
            name: "server".into(),
            count: 1,
            pod: p,
        }],
    )
}
