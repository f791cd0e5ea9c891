//! The work every arm of `peer-figures` is given: a seeded trace of jobs
//! (gangs of 2–4 nodes that must share a rack, gangs of 5–8 nodes that
//! cannot, single pods, a burst), on 3 racks of 4 nodes of 8 GPUs, and the
//! Kubernetes objects each job is submitted as. Every arm gets the same
//! objects, as a user would submit them; the Karpenter affinity arm adds a
//! required rack pod-affinity to the gang pods (its docs' way to keep a
//! group in one domain).

use serde_json::{json, Value};

/// The namespace the trace's work runs in.
pub const NAMESPACE: &str = "trace";
/// Racks, nodes per rack, GPUs per node: the shape every arm is given.
pub const RACKS: usize = 3;
pub const NODES_PER_RACK: usize = 4;
pub const GPUS_PER_NODE: u32 = 8;
/// The label every arm's Nodes carry their rack in (Accord publishes it;
/// the Karpenter NodePools put it in their templates).
pub const RACK_LABEL: &str = "topology.accord.dev/rack";
/// The label the trace's pods carry their job in.
pub const JOB_LABEL: &str = "peer-figures.accord.dev/job";
/// The GPU product label the pods select (the lab's Nodes and the NodePool
/// templates carry it).
pub const GPU_PRODUCT: &str = "NVIDIA-H100-80GB-HBM3";

/// One job of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    /// Seconds from the arm's start.
    pub at_s: f64,
    pub pods: u32,
    pub gpus_per_pod: u32,
    /// A gang (all or nothing: a PodGroup with `minCount = pods`).
    pub gang: bool,
    /// Seconds it runs once all its pods are bound.
    pub run_s: f64,
}

impl Job {
    /// A gang that fits one rack carries the rack constraint.
    pub fn one_rack(&self) -> bool {
        self.gang && self.pods as usize <= NODES_PER_RACK
    }
}

/// The two traces: `gang` (what the figures are read from) and `holdout`
/// (another seed and mix, never looked at while the bench was written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceName {
    Gang,
    Holdout,
}

impl TraceName {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceName::Gang => "gang",
            TraceName::Holdout => "holdout",
        }
    }
}

/// splitmix64: a seeded stream with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi].
    fn int(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }
    /// Uniform in [lo, hi).
    fn real(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }
}

/// The trace over `horizon_s`: arrivals within its first 60 %, runs of
/// 10–30 % of it, so what arrives can finish inside it.
pub fn trace(name: TraceName, horizon_s: f64) -> Vec<Job> {
    // (seed, small gangs, large gangs, singles, burst pods)
    let (seed, small, large, singles, burst) = match name {
        TraceName::Gang => (0x5eed_0001, 4, 2, 6, 4),
        TraceName::Holdout => (0x0004_01d0, 3, 1, 8, 6),
    };
    let mut rng = Rng(seed);
    let mut jobs = Vec::new();
    let run = |rng: &mut Rng| rng.real(0.10, 0.30) * horizon_s;
    for i in 0..small {
        let at_s = rng.real(0.0, 0.6) * horizon_s;
        jobs.push(Job {
            name: format!("gang-s{i}"),
            at_s,
            pods: rng.int(2, 4),
            gpus_per_pod: GPUS_PER_NODE,
            gang: true,
            run_s: run(&mut rng),
        });
    }
    for i in 0..large {
        let at_s = rng.real(0.0, 0.5) * horizon_s;
        jobs.push(Job {
            name: format!("gang-l{i}"),
            at_s,
            pods: rng.int(5, 8),
            gpus_per_pod: GPUS_PER_NODE,
            gang: true,
            run_s: run(&mut rng),
        });
    }
    for i in 0..singles {
        let at_s = rng.real(0.0, 0.6) * horizon_s;
        jobs.push(Job {
            name: format!("single-{i}"),
            at_s,
            pods: 1,
            gpus_per_pod: rng.int(1, 8),
            gang: false,
            run_s: run(&mut rng),
        });
    }
    let burst_at = rng.real(0.3, 0.5) * horizon_s;
    for i in 0..burst {
        jobs.push(Job {
            name: format!("burst-{i}"),
            at_s: burst_at,
            pods: 1,
            gpus_per_pod: GPUS_PER_NODE,
            gang: false,
            run_s: run(&mut rng),
        });
    }
    jobs.sort_by(|a, b| a.at_s.total_cmp(&b.at_s).then_with(|| a.name.cmp(&b.name)));
    jobs
}

/// The pod's name of `job`'s pod `i`.
pub fn pod_name(job: &Job, i: u32) -> String {
    if job.pods == 1 {
        job.name.clone()
    } else {
        format!("{}-{i}", job.name)
    }
}

/// What a user submits for `job`: a `scheduling.k8s.io/v1beta1` PodGroup
/// for a gang (the rack constraint where it fits a rack), and its pods;
/// with `rack_affinity`, gang pods that fit a rack also carry a required
/// pod affinity to their group on the rack label.
pub fn objects(job: &Job, rack_affinity: bool) -> Vec<Value> {
    let mut out = Vec::new();
    if job.gang {
        let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": job.pods}}});
        if job.one_rack() {
            spec["schedulingConstraints"] = json!({"topology": [{"key": RACK_LABEL}]});
        }
        out.push(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"namespace": NAMESPACE, "name": job.name},
            "spec": spec,
        }));
    }
    for i in 0..job.pods {
        let mut spec = json!({
            "nodeSelector": {"nvidia.com/gpu.product": GPU_PRODUCT},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "work", "image": "work",
                "resources": {"requests": {"cpu": "1", "memory": "64Gi"},
                              "limits": {"nvidia.com/gpu": job.gpus_per_pod.to_string()}}}],
        });
        if job.gang {
            spec["schedulingGroup"] = json!({"podGroupName": job.name});
        }
        if rack_affinity && job.one_rack() {
            spec["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {JOB_LABEL: job.name}},
                "topologyKey": RACK_LABEL}]}});
        }
        out.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": NAMESPACE, "name": pod_name(job, i),
                         "labels": {JOB_LABEL: job.name}},
            "spec": spec,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_is_the_same_for_a_seed_and_holds_every_kind_of_job() {
        let a = trace(TraceName::Gang, 300.0);
        assert_eq!(a, trace(TraceName::Gang, 300.0));
        assert_ne!(a, trace(TraceName::Holdout, 300.0));
        assert!(a.iter().any(|j| j.one_rack()));
        assert!(a.iter().any(|j| j.gang && j.pods >= 5));
        assert!(a.iter().any(|j| !j.gang));
        assert!(a.iter().all(|j| j.at_s >= 0.0 && j.at_s < 300.0));
        let objects = objects(&a.iter().find(|j| j.one_rack()).unwrap().clone(), true);
        assert_eq!(objects[0]["kind"], "PodGroup");
        assert!(objects[1]["spec"]["affinity"]["podAffinity"].is_object());
    }
}
