//! `translate-figures`: Kubernetes objects → demand for 20,000 pending pods
//! in 2,000 gangs (scheduling.k8s.io PodGroups of 10), each pod with a DRA
//! claim from its gang's ResourceClaimTemplate (8 GPUs by CEL selector plus
//! a NIC by firstAvailable, matchAttribute on the PCIe root), plus 5,000
//! bound pods. Prints the median time of `translate` over 10 runs, and of
//! reading the same objects from YAML once. Goal (issue 6): under 200 ms.
//!
//! `cargo run --release -p accord-benches --bin translate-figures [GANGS] [PODS_PER_GANG]`

use std::time::{Duration, Instant};

use accord::fleet::TopologyConfig;
use accord_kube::{translate, Manifests, Options};
use serde_json::{json, Value};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn objects(gangs: usize, per: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for g in 0..gangs {
        let ns = format!("team-{}", g % 50);
        let name = format!("gang-{g:05}");
        out.push(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"namespace": ns, "name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": per}},
                     "schedulingConstraints": {"topology": [{"key": "topology.accord.dev/rack"}]}}
        }));
        out.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": ns, "name": format!("{name}-gpus")},
            "spec": {"spec": {"devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8,
                        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}},
                    {"name": "nic", "firstAvailable": [
                        {"name": "ib", "deviceClassName": "rdma.accord.dev",
                         "selectors": [{"cel": {"expression": "device.attributes['rdma.accord.dev'].kind == 'infiniband'"}}]},
                        {"name": "any", "deviceClassName": "rdma.accord.dev"}]}
                ],
                "constraints": [{"requests": ["gpus", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
            }}}
        }));
        for p in 0..per {
            out.push(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": ns, "name": format!("{name}-{p}"), "labels": {"app": name}},
                "spec": {
                    "schedulingGroup": {"podGroupName": name},
                    "priority": (g % 3) as i32 * 100,
                    "containers": [{"name": "trainer", "image": "trainer",
                        "resources": {"requests": {"cpu": "32", "memory": "256Gi"}, "claims": [{"name": "gpus"}]}}],
                    "initContainers": [{"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "nodeSelector": {"pool": "training"},
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": format!("{name}-gpus")}]
                },
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            }));
        }
    }
    for b in 0..5_000 {
        out.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "running", "name": format!("job-{b}")},
            "spec": {"nodeName": format!("node-{:05}", b), "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "16"}, "limits": {"nvidia.com/gpu": "4"}}}]},
            "status": {"phase": "Running"}
        }));
    }
    out
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let gangs: usize = args.get(1).map_or(Ok(2_000), |a| a.parse())?;
    let per: usize = args.get(2).map_or(Ok(10), |a| a.parse())?;
    let values = objects(gangs, per);
    let yaml: String = values
        .iter()
        .map(|v| serde_yaml_ng::to_string(v).expect("plain data"))
        .collect::<Vec<_>>()
        .join("---\n");
    let start = Instant::now();
    let manifests = Manifests::parse(&yaml, "generated.yaml")?;
    let parse = start.elapsed();
    anyhow::ensure!(
        manifests.invalid.is_empty(),
        "{:?}",
        &manifests.invalid[..1]
    );
    let options = Options::for_topology(&TopologyConfig::default());
    let mut times: Vec<Duration> = Vec::new();
    let mut last = None;
    for _ in 0..10 {
        let start = Instant::now();
        let t = translate(&manifests, &options);
        times.push(start.elapsed());
        last = Some(t);
    }
    times.sort();
    let t = last.expect("ran");
    anyhow::ensure!(t.cannot_plan.is_empty(), "{:?}", t.cannot_plan.first());
    let pods: u32 = t.demand.workloads.iter().map(|w| w.pod_count()).sum();
    println!(
        "{} objects ({} MB of YAML): {} workloads, {pods} pending pods, {} bound",
        values.len(),
        yaml.len() / 1_000_000,
        t.demand.workloads.len(),
        t.demand.bound.len()
    );
    println!("YAML → objects once: {:.0} ms", parse.as_secs_f64() * 1e3);
    println!(
        "translate: median {:.1} ms, min {:.1} ms, max {:.1} ms over 10 runs (goal: under 200 ms)",
        times[5].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[9].as_secs_f64() * 1e3
    );
    Ok(())
}
