//! Bounded, checked demand: counts from outside are checked before anything
//! is sized by them, workloads over the per-workload limit and pods past
//! the per-round limit get a "cannot plan" reason naming the object and the
//! limit, and quantity sums never wrap.

use std::path::Path;
use std::time::{Duration, Instant};

use accord::demand::{Demand, Limits};
use accord::fleet::{Fleet, TopologyConfig};
use accord_kube::{translate, Manifests, Options, Translation};

fn options() -> Options {
    Options::for_topology(&TopologyConfig::default())
}

fn run_with(text: &str, options: &Options) -> Translation {
    translate(&Manifests::parse(text, "t.yaml").unwrap(), options)
}

fn run(text: &str) -> Translation {
    run_with(text, &options())
}

/// The real ProvisioningRequest manifest (as Kueue writes one) with its
/// podSet count replaced.
fn provisioning_request(name: &str, count: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kubernetes/written/provisioning-request.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("name: job-1-prov") && text.contains("count: 6"));
    text.replace("name: job-1-prov", &format!("name: {name}"))
        .replace("count: 6", &format!("count: {count}"))
}

fn reasons(t: &Translation) -> Vec<(&str, &str)> {
    t.cannot_plan
        .iter()
        .map(|c| (c.workload.as_str(), c.reason.as_str()))
        .collect()
}

#[test]
fn a_provisioning_request_for_2147483647_pods_is_refused_at_once() {
    let text = provisioning_request("big", "2147483647");
    let start = Instant::now();
    let t = run(&text);
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    assert_eq!(
        reasons(&t),
        [(
            "team-b/big",
            "ProvisioningRequest team-b/big: podSet ppt-job-1-main count 2147483647 exceeds the limit of 50000 pods per workload"
        )]
    );
    assert_eq!(t.cannot_plan[0].sources[0].kind, "ProvisioningRequest");
    // No per-pod expansion anywhere: no workload, no pod set, and the
    // whole translation is a few hundred bytes.
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    let size = serde_json::to_vec(&t).unwrap().len();
    assert!(size < 4096, "{size} bytes");
    // And planning it costs nothing either.
    let fleet = gang_fleet();
    let plan = accord::plan::plan(&fleet, &t.demand, &fleet.policy, 100_000);
    assert!(plan.placements.is_empty() && plan.unsatisfied.is_empty());
}

#[test]
fn provisioning_request_counts_at_and_past_the_limit() {
    // Exactly the limit is accepted.
    let t = run(&provisioning_request("edge", "50000"));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = &t.demand.workloads[0];
    assert_eq!((w.pod_count(), w.min()), (50_000, 50_000));
    assert_eq!(w.pod_sets.len(), 1, "one set with a count, not one per pod");

    let t = run(&provisioning_request("over", "50001"));
    assert_eq!(
        reasons(&t),
        [(
            "team-b/over",
            "ProvisioningRequest team-b/over: podSet ppt-job-1-main count 50001 exceeds the limit of 50000 pods per workload"
        )]
    );

    let t = run(&provisioning_request("neg", "-1"));
    assert_eq!(
        reasons(&t),
        [(
            "team-b/neg",
            "ProvisioningRequest team-b/neg: podSet ppt-job-1-main count -1 is negative"
        )]
    );

    // Two podSets, each within the limit, together past it: the sum is
    // checked (it used to wrap in u32 with two counts of 2^31-1).
    let two = provisioning_request("two", "30000").replace(
        "  - podTemplateRef: {name: ppt-job-1-main}\n    count: 30000",
        "  - podTemplateRef: {name: ppt-job-1-main}\n    count: 30000\n  - podTemplateRef: {name: ppt-job-1-main}\n    count: 30000",
    );
    let t = run(&two);
    assert_eq!(
        reasons(&t),
        [(
            "team-b/two",
            "ProvisioningRequest team-b/two: 60000 pods in all exceed the limit of 50000 pods per workload"
        )]
    );
    let huge = two.replace("count: 30000", "count: 2147483647");
    let t = run(&huge);
    assert!(t.demand.workloads.is_empty());
    assert!(t.cannot_plan[0]
        .reason
        .contains("count 2147483647 exceeds the limit of 50000"));
}

fn deployment(name: &str, replicas: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{namespace: r, name: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1'}}}}}}]}}\n---\n"
    )
}

fn job(name: &str, parallelism: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{namespace: r, name: {name}}}\nspec:\n  parallelism: {parallelism}\n  template:\n    spec: {{restartPolicy: Never, containers: [{{name: c, image: i}}]}}\n---\n"
    )
}

#[test]
fn huge_or_negative_replicas_and_parallelism_are_refused() {
    let start = Instant::now();
    let t = run(&format!(
        "{}{}{}{}",
        deployment("d-huge", "2147483647"),
        deployment("d-neg", "-3"),
        job("j-huge", "2147483647"),
        job("j-neg", "-1"),
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert_eq!(
        reasons(&t),
        [
            (
                "r/d-huge",
                "Deployment r/d-huge: replicas 2147483647 exceeds the limit of 50000 pods per workload"
            ),
            ("r/d-neg", "Deployment r/d-neg: replicas -3 is negative"),
            (
                "r/j-huge",
                "Job r/j-huge: parallelism 2147483647 exceeds the limit of 50000 pods per workload"
            ),
            ("r/j-neg", "Job r/j-neg: parallelism -1 is negative"),
        ]
    );
    // At the limit: accepted.
    let t = run(&format!(
        "{}{}",
        deployment("d", "50000"),
        job("j", "50000")
    ));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    assert_eq!(t.demand.workloads.len(), 2);
}

#[test]
fn a_jobset_product_neither_overflows_nor_expands() {
    let text = "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {namespace: r, name: js}\nspec:\n  replicatedJobs:\n  - name: workers\n    replicas: 2147483647\n    template:\n      spec:\n        parallelism: 2147483647\n        template:\n          spec: {containers: [{name: c, image: i}]}\n";
    let t = run(text);
    assert!(t.demand.workloads.is_empty());
    assert_eq!(
        reasons(&t),
        [(
            "r/js",
            "JobSet r/js: replicatedJob workers replicas 2147483647 × parallelism 2147483647 = 4611686014132420609 exceeds the limit of 50000 pods per workload"
        )]
    );
}

#[test]
fn the_round_limit_refuses_pods_past_it_in_key_order() {
    let options = Options {
        limits: Limits {
            max_pods_per_workload: 10,
            max_pods_per_round: 25,
        },
        ..options()
    };
    let text = format!(
        "{}{}{}{}{}",
        deployment("d", "5"),
        deployment("c", "10"),
        deployment("a", "10"),
        deployment("b", "10"),
        deployment("e", "11"),
    );
    let t = run_with(&text, &options);
    let planned: Vec<(String, u32)> = t
        .demand
        .workloads
        .iter()
        .map(|w| (w.key(), w.pod_count()))
        .collect();
    // a + b = 20; c would make 30; d makes exactly 25: accepted.
    assert_eq!(
        planned,
        [("r/a".into(), 10), ("r/b".into(), 10), ("r/d".into(), 5)]
    );
    assert_eq!(
        reasons(&t),
        [
            (
                "r/e",
                "Deployment r/e: replicas 11 exceeds the limit of 10 pods per workload"
            ),
            (
                "r/c",
                "10 pods would take this round past the limit of 25 pending pods per round (20 taken by workloads before it in key order)"
            ),
        ]
    );
    assert_eq!(t.cannot_plan[1].sources[0].kind, "Deployment");
    assert!(t.demand.validate(&options.limits).is_empty());
}

#[test]
fn live_pods_count_against_the_workload_limit_too() {
    let options = Options {
        limits: Limits {
            max_pods_per_workload: 3,
            max_pods_per_round: 100,
        },
        ..options()
    };
    let pod = |i: usize| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{namespace: x, name: w-{i}, labels: {{scheduling.x-k8s.io/pod-group: g}}}}\nspec: {{containers: [{{name: c, image: i}}]}}\n---\n")
    };
    let group = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {namespace: x, name: g}\nspec: {minMember: 1}\n---\n";
    let three: String = (0..3).map(pod).collect();
    let t = run_with(&format!("{group}{three}"), &options);
    assert_eq!(t.demand.workloads[0].pod_count(), 3, "{}", t.render());
    let four: String = (0..4).map(pod).collect();
    let t = run_with(&format!("{group}{four}"), &options);
    assert_eq!(
        reasons(&t),
        [(
            "x/g",
            "PodGroup x/g: 4 pods in all exceed the limit of 3 pods per workload"
        )]
    );
}

fn pod_with(requests: &str, overhead: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{namespace: q, name: p}}\nspec:\n  overhead: {overhead}\n  containers:\n  - {{name: a, image: i, resources: {{requests: {requests}}}}}\n  - {{name: b, image: i, resources: {{requests: {requests}}}}}\n"
    )
}

#[test]
fn quantities_from_pods_are_checked() {
    // Each container fits in i64 milli-units; their sum does not.
    let t = run(&pod_with("{cpu: 9223372036854775807m}", "{}"));
    assert!(t.demand.workloads.is_empty());
    assert!(
        t.cannot_plan[0]
            .reason
            .contains("cpu: the pod's total is out of range"),
        "{}",
        t.render()
    );
    // 40 digits, an exponent far past the range: invalid quantities.
    for q in [
        "9999999999999999999999999999999999999999",
        "1e999999999999",
        "8Ei",
    ] {
        let t = run(&pod_with(&format!("{{memory: '{q}'}}"), "{}"));
        assert!(
            t.cannot_plan[0].reason.contains("invalid quantity"),
            "{q}: {}",
            t.render()
        );
    }
    // A negative overhead would make room that is not there.
    let t = run(&pod_with("{cpu: '1'}", "{cpu: '-2'}"));
    assert!(t.cannot_plan[0]
        .reason
        .contains("overhead cpu: negative quantity -2"));
    // And the largest sum that fits is fine.
    let t = run(&pod_with("{cpu: 4611686018427387903m}", "{cpu: 1m}"));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
}

fn gang_fleet() -> Fleet {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/gang-rack-mixed");
    let text = std::fs::read_to_string(dir.join("fleet.toml")).unwrap();
    Fleet::from_toml(&text, "fleet.toml", &mut |_| Err("none".into())).unwrap()
}

/// A gang of none would be "placed" with nothing provisioned: refused in
/// a demand file, and as a PodGroup's minCount (upstream's minimum is 1).
#[test]
fn a_gang_minimum_of_zero_is_refused() {
    let demand = r#"{"workloads": [{"name": "g", "namespace": "x", "min_count": 0,
        "pod_sets": [{"name": "w", "count": 2, "pod": {"requests": {"cpu": "1"}}}]}]}"#;
    let demand = Demand::from_json(demand, "demand.json").unwrap();
    assert_eq!(
        demand.validate(&Limits::default()),
        ["workload x/g: min_count 0; a gang needs at least 1"]
    );
}

#[test]
fn a_demand_file_cannot_make_the_planner_expand_2147483647_pods() {
    let demand = r#"{"workloads": [
        {"name": "big", "namespace": "x", "min_count": 2147483647,
         "pod_sets": [{"name": "w", "count": 2147483647, "pod": {"requests": {"cpu": "1"}}},
                      {"name": "v", "count": 2147483647, "pod": {"requests": {"cpu": "1"}}}]},
        {"name": "big", "namespace": "x", "min_count": 7,
         "pod_sets": [{"name": "w", "count": 3, "pod": {"requests": {"cpu": "-1"}}}]}
    ]}"#;
    let demand = Demand::from_json(demand, "demand.json").unwrap();
    assert_eq!(
        demand.validate(&Limits::default()),
        [
            "workload x/big: 4294967294 pods exceed the limit of 50000 pods per workload",
            "workload x/big: listed more than once",
            "workload x/big: min_count 7 is larger than its 3 pods",
            "workload x/big pod set w: cpu: negative quantity \"-1\"",
            "4294967297 pending pods in all exceed the limit of 100000 pods per round",
        ]
    );
    assert_eq!(demand.workloads[0].pod_count(), 4_294_967_294);
    let fleet = gang_fleet();
    let start = Instant::now();
    let plan = accord::plan::plan(&fleet, &demand, &fleet.policy, 100_000);
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(
        plan.unsatisfied.iter().any(|u| u
            .reason
            .contains("4294967294 pods exceed the limit of 1000000 pods per workload")),
        "{:?}",
        plan.unsatisfied
    );
}

#[test]
fn limits_validate_their_keys() {
    assert!(Limits::default().validate("limits.").is_empty());
    let bad = Limits {
        max_pods_per_workload: 2_000_000,
        max_pods_per_round: 10,
    };
    assert_eq!(
        bad.validate("limits."),
        [
            "limits.max_pods_per_workload: 2000000 is above the ceiling of 1000000",
            "limits.max_pods_per_round: 10 is below max_pods_per_workload (2000000)",
        ]
    );
}

/// `n` items made by `item`, as one YAML flow list.
fn flow_list(n: usize, item: impl Fn(usize) -> String) -> String {
    let items: Vec<String> = (0..n).map(item).collect();
    format!("[{}]", items.join(", "))
}

fn exact_request(i: usize) -> String {
    format!("{{name: r{i}, exactly: {{deviceClassName: gpu.nvidia.com}}}}")
}

/// A pending pod with these `resourceClaims`.
fn claiming_pod(name: &str, claims: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{namespace: d, name: {name}}}\nspec:\n  resourceClaims: {claims}\n  containers: [{{name: c, image: i}}]\n---\n"
    )
}

/// Translates `text` and says how long that took: past Kubernetes'
/// bounds, nothing is built per request, claim or subrequest, so it is
/// quick (a selector check per request took seconds for 10,000).
fn run_quickly(text: &str) -> Translation {
    let m = Manifests::parse(text, "t.yaml").unwrap();
    let start = Instant::now();
    let t = translate(&m, &options());
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "{took:?}");
    t
}

/// A ResourceClaim from manifests with 10,000 requests (each with a CEL
/// selector to check), 10,000 firstAvailable alternatives or a constraint
/// naming 10,000 requests: Kubernetes' bounds on a claim (the API server
/// refuses them), checked by the core's one check before any request is
/// built, make it a "cannot plan" reason naming the pod, the claim and
/// the count.
#[test]
fn a_claim_with_10000_requests_cannot_be_planned() {
    let selector =
        "selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com'].index == 1\"}}]";
    let requests = flow_list(10_000, |i| {
        format!("{{name: r{i}, exactly: {{deviceClassName: gpu.nvidia.com, {selector}}}}}")
    });
    let alternatives = flow_list(10_000, |i| {
        format!("{{name: a{i}, deviceClassName: gpu.nvidia.com}}")
    });
    let named = flow_list(10_000, |_| "r0".to_owned());
    let text = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{namespace: d, name: big}}\n\
         spec: {{devices: {{requests: {requests}}}}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{namespace: d, name: alts}}\n\
         spec: {{devices: {{requests: [{{name: any, firstAvailable: {alternatives}}}]}}}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{namespace: d, name: named}}\n\
         spec: {{devices: {{requests: [{r0}], constraints: [{{matchAttribute: gpu.nvidia.com/x, requests: {named}}}]}}}}\n---\n\
         {}{}{}",
        claiming_pod("p", "[{name: gpus, resourceClaimName: big}]"),
        claiming_pod("q", "[{name: gpus, resourceClaimName: alts}]"),
        claiming_pod("r", "[{name: gpus, resourceClaimName: named}]"),
        r0 = exact_request(0),
    );
    let t = run_quickly(&text);
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert_eq!(
        reasons(&t),
        [
            (
                "d/p",
                "Pod d/p: claim gpus (ResourceClaim d/big): 10000 requests (at most 32)"
            ),
            (
                "d/q",
                "Pod d/q: claim gpus (ResourceClaim d/alts): request any: 10000 firstAvailable alternatives (at most 8)"
            ),
            (
                "d/r",
                "Pod d/r: claim gpus (ResourceClaim d/named): constraint 0: 10000 requests named (at most 32)"
            ),
        ]
    );
    // At the bound: planned.
    let text = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{namespace: d, name: edge}}\n\
         spec: {{devices: {{requests: {}}}}}\n---\n{}",
        flow_list(32, exact_request),
        claiming_pod("p", "[{name: gpus, resourceClaimName: edge}]"),
    );
    let t = run_quickly(&text);
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    assert_eq!(
        t.demand.workloads[0].pod_sets[0].pod.claims[0]
            .requests
            .len(),
        32
    );
}

/// A ResourceClaimTemplate goes through the same check.
#[test]
fn a_claim_template_with_10000_requests_cannot_be_planned() {
    let text = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{namespace: d, name: big}}\n\
         spec: {{spec: {{devices: {{requests: {}}}}}}}\n---\n{}",
        flow_list(10_000, exact_request),
        claiming_pod("p", "[{name: gpus, resourceClaimTemplateName: big}]"),
    );
    let t = run_quickly(&text);
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert_eq!(
        reasons(&t),
        [(
            "d/p",
            "Pod d/p: claim gpus (ResourceClaimTemplate d/big): 10000 requests (at most 32)"
        )]
    );
}

/// A pod listing 10,000 resourceClaims cannot be planned (each would be
/// looked up, translated and matched against its PodGroup's); a bound one
/// still counts, its devices read from its first 32 claims.
#[test]
fn a_pod_with_10000_resource_claims_cannot_be_planned() {
    let template = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{namespace: d, name: one}}\n\
         spec: {{spec: {{devices: {{requests: [{}]}}}}}}\n---\n",
        exact_request(0)
    );
    let claims = flow_list(10_000, |i| {
        format!("{{name: c{i}, resourceClaimTemplateName: one}}")
    });
    let bound = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{namespace: d, name: b}}\nspec:\n  nodeName: n1\n  resourceClaims: {claims}\n  containers: [{{name: c, image: i}}]\n---\n"
    );
    let t = run_quickly(&format!("{template}{}{bound}", claiming_pod("p", &claims)));
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert_eq!(
        reasons(&t),
        [("d/p", "Pod d/p: 10000 resourceClaims (at most 32)")]
    );
    assert_eq!(t.demand.bound.len(), 1);
    // 32 at most: planned.
    let t = run_quickly(&format!(
        "{template}{}",
        claiming_pod(
            "p",
            &flow_list(32, |i| format!(
                "{{name: c{i}, resourceClaimTemplateName: one}}"
            ))
        )
    ));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    assert_eq!(t.demand.workloads[0].pod_sets[0].pod.claims.len(), 32);
}

/// A PodGroup with 10,000 resourceClaims (each of its pods' claims would
/// be matched against all of them) is past Kubernetes' bound of 4.
#[test]
fn a_pod_group_with_10000_resource_claims_cannot_be_planned() {
    let group = |n: usize| {
        format!(
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{namespace: d, name: g}}\n\
             spec:\n  schedulingPolicy: {{gang: {{minCount: 2}}}}\n  resourceClaims: {}\n---\n\
             apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{namespace: d, name: one}}\n\
             spec: {{spec: {{devices: {{requests: [{}]}}}}}}\n---\n",
            flow_list(n, |i| format!(
                "{{name: c{i}, resourceClaimTemplateName: one}}"
            )),
            exact_request(0)
        )
    };
    let pods: String = (0..2)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{namespace: d, name: w{i}}}\nspec:\n  schedulingGroup: {{podGroupName: g}}\n  resourceClaims: [{{name: c0, resourceClaimTemplateName: one}}]\n  containers: [{{name: c, image: i}}]\n---\n"
            )
        })
        .collect();
    let t = run_quickly(&format!("{}{pods}", group(10_000)));
    assert!(t.demand.workloads.is_empty(), "{}", t.render());
    assert_eq!(
        reasons(&t),
        [("d/g", "PodGroup d/g: 10000 resourceClaims (at most 4)")]
    );
    assert_eq!(t.cannot_plan[0].sources[0].kind, "PodGroup");
    // 4: planned, the shared claim carried once.
    let t = run_quickly(&format!("{}{pods}", group(4)));
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let w = &t.demand.workloads[0];
    let carried: usize = w
        .pod_sets
        .iter()
        .map(|s| s.count as usize * s.pod.claims.len())
        .sum();
    assert_eq!(carried, 1, "{:#?}", w.pod_sets);
}
