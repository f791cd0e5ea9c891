//! Fleets and workloads shared by the lab's end-to-end tests and the
//! `lab-figures` bench.

/// A fleet of three racks of H100 nodes, all dark: r1 with three nodes,
/// r2 with four, r3 with two. A 4 x 8-GPU gang that must share a rack fits
/// only r2. Every machine replays the lab's default recording (8 x H100,
/// MIG off: `recordings::DEFAULT_BUILTIN`), which the profile declares as
/// it is (4 hardware threads, 1.5 TiB, GPUs under two PCIe roots).
pub const FLEET: &str = r#"
[fleet.policy]
idle_power_off_after_s = 600

[fleet.profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpus_per_pcie_root = 4
cpu = "4"
memory = "1500Gi"
power_kw = 10.2

[[fleet.racks]]
name = "r1"
[[fleet.racks]]
name = "r2"
[[fleet.racks]]
name = "r3"

[[fleet.nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r1-n3"
rack = "r1"
profile = "h100"
[[fleet.nodes]]
name = "r2-n1"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n2"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n3"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r2-n4"
rack = "r2"
profile = "h100"
[[fleet.nodes]]
name = "r3-n1"
rack = "r3"
profile = "h100"
[[fleet.nodes]]
name = "r3-n2"
rack = "r3"
profile = "h100"
"#;

/// A gang of `pods` pods of 8 H100s each (and one CPU: the recorded
/// machines have four) that must share a rack.
pub fn gang(name: &str, pods: usize) -> String {
    let mut y = format!(
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\n\
         metadata: {{namespace: ml, name: {name}}}\n\
         spec:\n  schedulingPolicy: {{gang: {{minCount: {pods}}}}}\n  \
         schedulingConstraints:\n    topology: [{{key: topology.accord.dev/rack}}]\n"
    );
    for i in 0..pods {
        y.push_str(&format!(
            "---\n{{apiVersion: v1, kind: Pod, metadata: {{namespace: ml, name: {name}-{i}}}, \
             spec: {{schedulingGroup: {{podGroupName: {name}}}, \
             nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}, \
             containers: [{{name: t, image: t, resources: {{requests: {{cpu: \"1\", memory: 64Gi}}, \
             limits: {{nvidia.com/gpu: \"8\"}}}}}}]}}}}\n"
        ));
    }
    y
}
