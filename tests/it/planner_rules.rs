//! Smaller planner rules, on inline fleets: preferred topology, reservation
//! windows and counted reservations, priorities.

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::plan::{plan, Action, Plan};

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.0

[[racks]]
name = "r1"

[[racks]]
name = "r2"

[[nodes]]
name = "r1-a"
rack = "r1"
profile = "h100"
power = "on"

[[nodes]]
name = "r1-b"
rack = "r1"
profile = "h100"
power = "on"

[[nodes]]
name = "r2-a"
rack = "r2"
profile = "h100"
power = "on"
"#;

fn run(extra: &str, demand: &str, now: u64) -> Plan {
    let text = format!("{FLEET}\n{extra}");
    let fleet = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let demand = Demand::from_json(demand, "demand.json").unwrap();
    plan(&fleet, &demand, &fleet.policy, now)
}

fn gang(name: &str, ns: &str, pods: u32, topology: Option<&str>, priority: i32) -> String {
    let topo = topology
        .map(|m| format!(r#", "topology": {{ "level": "rack", "mode": "{m}" }}"#))
        .unwrap_or_default();
    format!(
        r#"{{ "name": "{name}", "namespace": "{ns}", "priority": {priority}{topo},
             "pod_sets": [ {{ "name": "w", "count": {pods}, "pod": {{ "requests": {{ "nvidia.com/gpu": "8" }} }} }} ] }}"#
    )
}

fn demand(workloads: &[String]) -> String {
    format!(r#"{{ "workloads": [ {} ] }}"#, workloads.join(","))
}

#[test]
fn preferred_topology_spans_racks_only_when_it_must() {
    // Two pods fit in r1: one rack.
    let p = run(
        "",
        &demand(&[gang("two", "ml", 2, Some("preferred"), 0)]),
        0,
    );
    assert_eq!(p.placements[0].domain.as_deref(), Some("rack=r1"));
    // Three pods: no rack holds them; preferred spreads, required refuses.
    let p = run(
        "",
        &demand(&[gang("three", "ml", 3, Some("preferred"), 0)]),
        0,
    );
    assert_eq!(p.placements[0].pods.len(), 3);
    assert_eq!(p.placements[0].domain, None);
    let p = run(
        "",
        &demand(&[gang("three", "ml", 3, Some("required"), 0)]),
        0,
    );
    assert!(p.placements.is_empty());
    assert!(p.unsatisfied[0].reason.contains("in one rack"));
}

#[test]
fn reservations_apply_only_inside_their_window() {
    let res = r#"
[[reservations]]
name = "night"
owner = { namespace = "batch" }
nodes = ["r1-a", "r1-b", "r2-a"]
start = 1000
end = 2000
"#;
    let d = demand(&[gang("job", "ml", 1, None, 0)]);
    assert!(
        run(res, &d, 1500).placements.is_empty(),
        "inside the window"
    );
    assert_eq!(run(res, &d, 2500).placements.len(), 1, "after the window");
    assert_eq!(run(res, &d, 500).placements.len(), 1, "before the window");
}

#[test]
fn counted_reservations_take_n_nodes_of_the_profile() {
    let res = r#"
[[reservations]]
name = "two-h100"
owner = { namespace = "research" }
count = 2
profile = "h100"
"#;
    // The first two by name (r1-a, r1-b) are reserved; others get r2-a only.
    let p = run(res, &demand(&[gang("job", "ml", 2, None, 0)]), 0);
    assert!(p.placements.is_empty());
    assert!(
        p.unsatisfied[0]
            .reason
            .contains("2 nodes reserved for two-h100"),
        "{}",
        p.unsatisfied[0].reason
    );
}

#[test]
fn higher_priority_gangs_are_placed_first() {
    let d = demand(&[
        gang("low", "ml", 2, None, 0),
        gang("high", "ml", 2, None, 10),
    ]);
    let p = run("", &d, 0);
    assert_eq!(p.placements[0].workload, "ml/high");
    assert_eq!(p.unsatisfied[0].workload, "ml/low");
    assert!(!p
        .actions
        .iter()
        .any(|a| matches!(a, Action::PowerOn { .. })));
}

#[test]
fn a_domain_whose_free_gpus_are_split_too_small_is_explained() {
    // r1 has 8 free GPUs in all, 4 on each node: no 8-GPU pod fits there,
    // though the GPU count alone would allow one.
    let bound = r#""bound": [
        { "node": "r1-a", "namespace": "old", "name": "a", "requests": { "nvidia.com/gpu": "4" } },
        { "node": "r1-b", "namespace": "old", "name": "b", "requests": { "nvidia.com/gpu": "4" } },
        { "node": "r2-a", "namespace": "old", "name": "c", "requests": { "nvidia.com/gpu": "8" } } ]"#;
    let with_bound = |w: String| format!(r#"{{ "workloads": [ {w} ], {bound} }}"#);
    let p = run(
        "",
        &with_bound(gang("big", "ml", 1, Some("required"), 0)),
        0,
    );
    assert!(
        p.placements.is_empty(),
        "{}",
        serde_json::to_string_pretty(&p).unwrap()
    );
    let reason = &p.unsatisfied[0].reason;
    assert!(
        reason.contains("0 pods of 8 GPUs fit on nodes' free GPUs, gang needs 1"),
        "{reason}"
    );
    // Two 4-GPU pods do fit in r1, one per node.
    let four = r#"{ "name": "four", "namespace": "ml", "topology": { "level": "rack", "mode": "required" },
        "pod_sets": [ { "name": "w", "count": 2, "pod": { "requests": { "nvidia.com/gpu": "4" } } } ] }"#;
    let p = run("", &with_bound(four.to_owned()), 0);
    assert_eq!(p.placements.len(), 1, "{:?}", p.unsatisfied);
    assert_eq!(p.placements[0].domain.as_deref(), Some("rack=r1"));
    // Preferred topology: all racks together cannot hold it either.
    let p = run(
        "",
        &with_bound(gang("big", "ml", 1, Some("preferred"), 0)),
        0,
    );
    assert!(p.placements.is_empty());
    assert!(
        p.unsatisfied[0].reason.contains("pods of 8 GPUs"),
        "{}",
        p.unsatisfied[0].reason
    );
}

/// Warm spares: per rack and per profile; a node kept for its rack counts
/// for its profile too; the rest of the idle nodes are powered off.
#[test]
fn warm_spares_per_rack_and_per_profile() {
    let offs = |policy: &str| -> Vec<String> {
        let text = format!(
            "{FLEET}\n[[nodes]]\nname = \"r2-b\"\nrack = \"r2\"\nprofile = \"h100\"\npower = \"on\"\n\
             [policy]\nidle_power_off_after_s = 60\n{policy}"
        );
        let mut fleet = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
        for n in &mut fleet.nodes {
            n.idle_since = Some(0);
        }
        let p = plan(&fleet, &Demand::default(), &fleet.policy, 1000);
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::PowerOff { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(offs(""), ["r1-a", "r1-b", "r2-a", "r2-b"]);
    assert_eq!(offs("warm_spares_per_rack = 1"), ["r1-b", "r2-b"]);
    assert_eq!(offs("warm_spares_per_profile = { h100 = 3 }"), ["r2-b"]);
    // Two kept for the racks already count toward the profile's three.
    assert_eq!(
        offs("warm_spares_per_rack = 1\nwarm_spares_per_profile = { h100 = 3 }"),
        ["r2-b"]
    );
    // A profile that does not exist is a validation error naming the key.
    let text = format!("{FLEET}\n[policy]\nwarm_spares_per_profile = {{ other = 2 }}\n");
    let e = Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("policy.warm_spares_per_profile.other: no such profile"),
        "{e}"
    );
}

#[test]
fn a_gang_mixing_cpu_and_gpu_pods_with_a_topology_is_placed() {
    // The smallest pod takes no GPU: domain bounds must not divide by it.
    for mode in ["required", "preferred"] {
        let d = format!(
            r#"{{ "workloads": [ {{ "name": "mixed", "namespace": "ml",
                 "topology": {{ "level": "rack", "mode": "{mode}" }},
                 "pod_sets": [
                   {{ "name": "launcher", "count": 1, "pod": {{ "requests": {{ "cpu": "1" }} }} }},
                   {{ "name": "w", "count": 2, "pod": {{ "requests": {{ "nvidia.com/gpu": "8" }} }} }} ] }} ] }}"#
        );
        let p = run("", &d, 0);
        assert_eq!(p.placements.len(), 1, "{mode}: {p:?}");
        assert_eq!(p.placements[0].pods.len(), 3, "{mode}");
        assert_eq!(p.placements[0].domain.as_deref(), Some("rack=r1"), "{mode}");
    }
}

#[test]
fn of_equal_racks_the_faster_to_boot_wins_with_prefer_fast_boot() {
    // Two dark racks of two nodes each, equal in draw: a gang of two that
    // must share a rack goes to the first (r1) unless r2 was measured to
    // boot faster and the policy prefers that.
    let text = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
cpu = "192"
memory = "2Ti"
power_kw = 10.0

[[racks]]
name = "r1"
[[racks]]
name = "r2"

[[nodes]]
name = "r1-a"
rack = "r1"
profile = "h100"
[[nodes]]
name = "r1-b"
rack = "r1"
profile = "h100"
[[nodes]]
name = "r2-a"
rack = "r2"
profile = "h100"
[[nodes]]
name = "r2-b"
rack = "r2"
profile = "h100"
"#;
    let mut fleet = Fleet::from_toml(text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    for n in &mut fleet.nodes {
        n.expected_boot_s = Some(if n.rack.as_deref() == Some("r2") {
            200
        } else {
            420
        });
    }
    let gangs = Demand::from_json(
        &demand(&[gang("two", "ml", 2, Some("required"), 0)]),
        "d.json",
    )
    .unwrap();
    let singles = Demand::from_json(&demand(&[gang("one", "ml", 1, None, 0)]), "d.json").unwrap();
    let domain = |p: &Plan| p.placements[0].domain.clone();
    let node = |p: &Plan| p.placements[0].pods[0].node.clone();
    let mut policy = fleet.policy.clone();
    assert_eq!(
        domain(&plan(&fleet, &gangs, &policy, 0)).as_deref(),
        Some("rack=r1")
    );
    assert_eq!(node(&plan(&fleet, &singles, &policy, 0)), "r1-a");
    policy.prefer_fast_boot = true;
    assert_eq!(
        domain(&plan(&fleet, &gangs, &policy, 0)).as_deref(),
        Some("rack=r2")
    );
    assert_eq!(node(&plan(&fleet, &singles, &policy, 0)), "r2-a");
    // Cost first: with r1-a already up, the gang that fits beside it in r1
    // powers one node, not two, however fast r2 boots.
    fleet.nodes[0].power = accord::fleet::PowerState::On;
    assert_eq!(
        domain(&plan(&fleet, &gangs, &policy, 0)).as_deref(),
        Some("rack=r1")
    );
}

/// Nodes that do not run a DaemonSet's pod yet (dark, booting) will run it
/// before any workload: its requests are taken first, as NodeResourcesFit
/// will find them there; a node already running it is not charged twice,
/// and a node its template does not admit not at all.
#[test]
fn daemonset_pods_a_fresh_node_will_run_are_counted_before_the_workload() {
    let fleet_text = r#"
[profiles.cpu8]
gpus = 0
cpu = "8"
memory = "64Gi"
[[nodes]]
name = "a"
profile = "cpu8"
[[nodes]]
name = "b"
profile = "cpu8"
[[nodes]]
name = "c"
profile = "cpu8"
labels = { pool = "other" }
"#;
    let fleet = Fleet::from_toml(fleet_text, "fleet.toml", &mut |_| Err("none".into())).unwrap();
    let plan_with = |daemon_sets: serde_json::Value, bound: serde_json::Value| {
        let d = serde_json::json!({
            "workloads": [{ "name": "job", "namespace": "ml", "pod_sets": [
                { "name": "w", "count": 2, "pod": { "requests": { "cpu": "3" },
                  "node_selector": {} } } ] }],
            "daemon_sets": daemon_sets,
            "bound": bound,
        });
        let demand = Demand::from_json(&d.to_string(), "demand.json").unwrap();
        plan(&fleet, &demand, &fleet.policy, 0)
    };
    let powered = |p: &Plan| {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::PowerOn { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Without the agent: both 3-CPU pods fit one 8-CPU node.
    let p = plan_with(serde_json::json!([]), serde_json::json!([]));
    assert_eq!(powered(&p), ["a"], "{p:?}");
    // An agent of 3 CPUs on every node of pool != other: 3 + 3 + 3 > 8.
    let agent = serde_json::json!([{ "namespace": "kube-system", "name": "agent",
        "pod": { "requests": { "cpu": "3" },
          "affinity": [ { "match_expressions": [ { "key": "pool", "operator": "DoesNotExist" } ] } ] } }]);
    let p = plan_with(agent.clone(), serde_json::json!([]));
    assert_eq!(powered(&p), ["a", "b"], "{p:?}");
    // On c (not admitted) nothing is charged: with a and b taken, it holds both.
    let busy = |n: &str| {
        serde_json::json!({ "node": n, "namespace": "x", "name": format!("big-{n}"),
        "requests": { "cpu": "7" } })
    };
    let p = plan_with(agent.clone(), serde_json::json!([busy("a"), busy("b")]));
    assert_eq!(powered(&p), ["c"], "{p:?}");
    // Its pod already bound on a: not charged twice (3 + 3 fits beside it
    // only if a is charged once: 3 agent + 3 + ... one pod there).
    let running = serde_json::json!([{ "node": "a", "namespace": "kube-system", "name": "agent-a",
        "requests": { "cpu": "3" }, "node_agent": true, "daemon_set": "kube-system/agent" }]);
    let p = plan_with(agent, running);
    let on_a = p.placements[0]
        .pods
        .iter()
        .filter(|x| x.node == "a")
        .count();
    assert_eq!(on_a, 1, "a: 3 agent + 3, the second pod elsewhere: {p:?}");
}
