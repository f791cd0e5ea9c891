//! Time to capacity in the lab: accordd measures its boots (power-on to
//! Node Ready, per profile) and predicts from them; the lab measures the
//! same boots from its side (the Reset on the BMC proxy's log to the Node
//! its kubelet stand-in registered), and the two must agree.

use std::time::Duration;

use accord_api::text::render_explain;

use super::lab::wait_condition;
use crate::support;
use support::lab::*;

/// Boots slow enough that whole-second rounds are a small error: 8 s to
/// the agent, 2 s more to the Node, after the emulated BMC's own 1–11 s.
const SLOW_BOOT: &str =
    "boot_delay_ms = 8000\nkubelet_delay_ms = 2000\nheartbeat_ms = 1000\nmax_s = 300";

/// Eleven dark 8-GPU nodes in one rack, all allowed to boot at once.
fn fleet() -> String {
    let mut f = String::from(
        "[fleet.policy]\nidle_power_off_after_s = 600\n\n\
         [fleet.profiles.h100]\ngpus = 8\ngpu_model = \"NVIDIA H100 80GB HBM3\"\n\
         gpus_per_pcie_root = 4\ncpu = \"4\"\nmemory = \"1500Gi\"\npower_kw = 10.2\n\n\
         [[fleet.racks]]\nname = \"r1\"\nmax_concurrent_power_ons = 16\n",
    );
    for i in 1..=11 {
        f.push_str(&format!(
            "[[fleet.nodes]]\nname = \"r1-n{i}\"\nrack = \"r1\"\nprofile = \"h100\"\n"
        ));
    }
    f
}

fn single(name: &str) -> String {
    format!(
        "{{apiVersion: v1, kind: Pod, metadata: {{namespace: ml, name: {name}}}, \
         spec: {{nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}, \
         containers: [{{name: t, image: t, resources: {{requests: {{cpu: \"1\", memory: 64Gi}}, \
         limits: {{nvidia.com/gpu: \"8\"}}}}}}]}}}}\n"
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_predicted_time_to_capacity_is_the_boots_measured() {
    let _slot = shared_world().await;
    let ten: String = (0..10)
        .map(|i| single(&format!("one-{i}")))
        .collect::<Vec<_>>()
        .join("---\n");
    let request = "{apiVersion: v1, kind: PodTemplate, metadata: {namespace: team-b, name: more-main}, \
         template: {spec: {nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, \
         containers: [{name: main, image: t, resources: {requests: {cpu: \"1\", memory: 64Gi, \
         nvidia.com/gpu: \"8\"}}}]}}}\n---\n\
         {apiVersion: autoscaling.x-k8s.io/v1, kind: ProvisioningRequest, metadata: {namespace: team-b, name: more}, \
         spec: {provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io, \
         podSets: [{podTemplateRef: {name: more-main}, count: 1}]}}\n"
        .to_owned();
    let lab = start(
        "the_predicted_time_to_capacity_is_the_boots_measured",
        scenario(
            SLOW_BOOT,
            &fleet(),
            &[("ten", ten, 600_000), ("more", request, 600_000)],
        ),
    )
    .await;

    // Ten pods of a whole node each: ten power-ons, ten boots.
    lab.release("ten").unwrap();
    bound(&lab, "ten", Duration::from_secs(180)).await;
    let st = lab
        .wait_status("ten h100 boots measured", Duration::from_secs(30), |s| {
            s.boot_times
                .iter()
                .any(|b| b.profile == "h100" && b.boots >= 10)
        })
        .await
        .unwrap();
    let measured: Vec<f64> = lab.boots_measured().into_iter().map(|(_, s)| s).collect();
    assert_eq!(measured.len(), 10, "{measured:?}");
    let measured = median(measured);
    let boots = st.boot_times.iter().find(|b| b.profile == "h100").unwrap();
    let predicted = boots.ready_median_s as f64;
    println!(
        "lab figures: boot (Reset to Node Ready) median measured by the lab {measured:.1} s, \
         by accordd {predicted} s (p90 {} s, BMC On {:?} s, agent {:?} s)",
        boots.ready_p90_s, boots.bmc_on_median_s, boots.agent_up_median_s
    );
    assert!(
        (predicted - measured).abs() <= 0.2 * measured,
        "accordd's median boot {predicted} s, the lab's {measured:.1} s: {boots:?}"
    );

    // One more node, asked for by a ProvisioningRequest: its message and
    // `explain` say when the capacity is expected.
    lab.release("more").unwrap();
    let st = lab
        .wait_status(
            "team-b/more placed on a node on its way up, with a time to capacity",
            Duration::from_secs(60),
            |s| {
                s.workloads
                    .iter()
                    .any(|w| w.workload == "team-b/more" && w.capacity_in_s.is_some_and(|c| c > 0))
            },
        )
        .await
        .unwrap();
    let w = st
        .workloads
        .iter()
        .find(|w| w.workload == "team-b/more")
        .unwrap();
    let explained = render_explain(&st, "team-b/more").unwrap();
    assert!(
        explained.contains(&format!(
            "predicted time to capacity: {} s",
            w.capacity_in_s.unwrap()
        )),
        "{explained}"
    );
    assert!(
        w.capacity_in_s.unwrap() <= boots.ready_p90_s,
        "{w:?} {boots:?}"
    );
    wait_condition(
        &lab,
        "team-b",
        "more",
        "Provisioned",
        ("False", "Provisioning"),
    )
    .await;
    let pr = lab
        .api
        .get(
            "autoscaling.x-k8s.io/v1",
            "ProvisioningRequest",
            "team-b",
            "more",
        )
        .unwrap();
    let message = pr["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Provisioned"))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("; expected Ready "),
        "Provisioned=False message: {message:?}"
    );
    wait_condition(
        &lab,
        "team-b",
        "more",
        "Provisioned",
        ("True", "CapacityIsProvisioned"),
    )
    .await;
}
