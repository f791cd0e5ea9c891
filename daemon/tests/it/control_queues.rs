//! The twin for demand from queues in front of the scheduler: a Kueue
//! Workload with quota and a required rack, every machine dark, powers
//! exactly one rack; over its ClusterQueue's quota, nothing, and the
//! status says Kueue's quota holds it; a Volcano gang that no rack can
//! hold whole powers nothing, where the same pods one by one would power
//! a partial rack. Demand comes from manifests through accord-kube's
//! translation, as accordd's observer makes it.

use accord::fleet::Fleet;
use accord::lifecycle::Deadlines;
use accord_kube::{Manifests, Options};
use accordd::control::decide::{CannotPlanSeen, Snapshot};

use crate::support;
use support::twin::{decide_at, decider, power_ons, T0};

/// `racks` racks of `per_rack` dark 8-GPU machines, labelled for Kueue's
/// TAS sample flavor, Accord's rack and block levels also under the
/// sample Topology's keys.
fn fleet(racks: usize, per_rack: usize) -> String {
    let mut s = String::from(
        "[topology]\nalso_label = { rack = [\"cloud.provider.com/topology-rack\"], \
         block = [\"cloud.provider.com/topology-block\"] }\n\
         [policy]\nidle_power_off_after_s = 600\n\
         [profiles.h100]\ngpus = 8\ngpu_model = \"NVIDIA H100 80GB HBM3\"\ncpu = \"192\"\nmemory = \"2Ti\"\n",
    );
    for r in 0..racks {
        s.push_str(&format!("[[racks]]\nname = \"r{r}\"\nblock = \"b0\"\n"));
        for n in 0..per_rack {
            s.push_str(&format!(
                "[[nodes]]\nname = \"r{r}-n{n}\"\nrack = \"r{r}\"\nprofile = \"h100\"\n\
                 labels = {{ \"cloud.provider.com/node-group\" = \"tas-group\" }}\n"
            ));
        }
    }
    s
}

/// Kueue's TAS GPU sample queues with `gpus` of quota, and a pending
/// Workload of `pods` × 8 GPUs requiring one rack.
fn kueue(gpus: u32, pods: u32) -> String {
    let queues = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/kubernetes/kueue/tas/sample-gpu-queues.yaml"),
    )
    .unwrap()
    .replace("nominalQuota: 16", &format!("nominalQuota: {gpus}"));
    format!(
        "{queues}\n---\n\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: job-train-1a2b3, namespace: default}}
spec:
  queueName: tas-user-queue
  podSets:
  - name: main
    count: {pods}
    topologyRequest: {{required: cloud.provider.com/topology-rack}}
    template:
      spec:
        containers:
        - name: c
          image: x
          resources: {{limits: {{nvidia.com/gpu: 8}}, requests: {{cpu: 1, memory: 1Gi}}}}
"
    )
}

/// A snapshot of `manifests` over the dark `fleet`, translated as accordd does.
fn world(fleet_text: &str, manifests: &str, schedulers: &[&str]) -> Snapshot {
    let fleet = Fleet::from_toml(fleet_text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let mut options = Options::for_topology(&fleet.topology);
    options
        .schedulers
        .extend(schedulers.iter().map(|s| (*s).to_owned()));
    let m = Manifests::parse(manifests, "world.yaml").unwrap();
    let t = accord_kube::translate(&m, &options);
    let seen = |c: &accord_kube::CannotPlan| CannotPlanSeen {
        workload: c.workload.clone(),
        sources: c.sources.clone(),
        reason: c.reason.clone(),
    };
    let mut snap = Snapshot {
        demand: t.demand.clone(),
        cannot_plan: t.cannot_plan.iter().map(seen).collect(),
        not_planned: t.not_planned.iter().map(seen).collect(),
        ..Default::default()
    };
    for n in &fleet.nodes {
        snap.bmc.insert(n.name.clone(), false);
    }
    snap
}

fn racks_of(nodes: &[String]) -> std::collections::BTreeSet<String> {
    nodes
        .iter()
        .map(|n| n.split('-').next().unwrap().to_owned())
        .collect()
}

#[test]
fn a_kueue_tas_workload_with_quota_powers_exactly_one_dark_rack() {
    let text = fleet(3, 4);
    let mut d = decider(&text, Deadlines::default());
    let w = world(&text, &kueue(32, 3), &[]);
    assert!(
        w.cannot_plan.is_empty() && w.not_planned.is_empty(),
        "{:?}",
        w.cannot_plan
    );
    let on = power_ons(&decide_at(&mut d, &w, T0));
    assert_eq!(on.len(), 3, "{on:?}");
    assert_eq!(racks_of(&on).len(), 1, "one rack: {on:?}");
    // Rounds later, still booting: nothing more.
    let again = power_ons(&decide_at(&mut d, &w, T0 + 30));
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_kueue_workload_over_its_quota_powers_nothing_and_says_why() {
    let text = fleet(3, 4);
    let mut d = decider(&text, Deadlines::default());
    // The sample's 16 GPUs of quota; 24 asked.
    let w = world(&text, &kueue(16, 3), &[]);
    let decision = decide_at(&mut d, &w, T0);
    assert!(power_ons(&decision).is_empty());
    let status = decision.status;
    let held = status
        .cannot_plan
        .iter()
        .find(|c| c.workload == "default/job-train-1a2b3")
        .expect("said in the status");
    assert!(held.reason.contains("held by quota"), "{}", held.reason);
    assert!(
        held.reason
            .contains("nvidia.com/gpu: 24 requested, 16 free"),
        "{}",
        held.reason
    );
}

fn volcano_gang(pods: u32, with_group: bool) -> String {
    let mut docs = Vec::new();
    if with_group {
        docs.push(format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\n\
             metadata: {{name: train, namespace: ml}}\nspec: {{minMember: {pods}, queue: gpu}}\n"
        ));
    }
    let annotation = if with_group {
        "  annotations: {scheduling.k8s.io/group-name: train}\n"
    } else {
        ""
    };
    for i in 0..pods {
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train-{i}\n  namespace: ml\n\
             {annotation}spec:\n  schedulerName: volcano\n  containers:\n  - name: c\n    image: x\n    \
             resources: {{limits: {{nvidia.com/gpu: 8}}}}\n"
        ));
    }
    docs.join("---\n")
}

#[test]
fn a_volcano_gang_no_rack_holds_whole_powers_nothing() {
    // One rack of 3 machines; a gang of 4 × 8 GPUs.
    let text = fleet(1, 3);
    let mut d = decider(&text, Deadlines::default());
    let w = world(&text, &volcano_gang(4, true), &["volcano"]);
    assert_eq!(w.demand.workloads.len(), 1);
    assert_eq!(w.demand.workloads[0].min(), 4);
    let decision = decide_at(&mut d, &w, T0);
    assert!(
        power_ons(&decision).is_empty(),
        "a partial rack for an all-or-nothing job"
    );
    let status = &decision.status.workloads[0];
    assert!(status
        .approximation
        .as_deref()
        .is_some_and(|a| a.contains("Volcano")));

    // The same pods outside a PodGroup are planned one by one: three
    // machines would come up for three of them.
    let mut d = decider(&text, Deadlines::default());
    let w = world(&text, &volcano_gang(4, false), &["volcano"]);
    assert_eq!(w.demand.workloads.len(), 4);
    assert_eq!(power_ons(&decide_at(&mut d, &w, T0)).len(), 3);
}
