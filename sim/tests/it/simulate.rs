//! The simulation end to end on the embedded default, and its inputs as
//! outside input.

use accord::fleet::{Placement, Policy};
use accord_sim::figures::Class;
use accord_sim::{default_fleet, policy_from_toml, simulate, trace, Input, Trace, World};

fn input(policies: Vec<(String, Policy)>, seed: u64) -> Input {
    Input {
        fleet: default_fleet(),
        fleet_source: "embedded default fleet".into(),
        trace: trace::default_trace(),
        trace_source: "embedded default trace".into(),
        policies,
        seed,
        world: World::default(),
    }
}

fn two() -> Vec<(String, Policy)> {
    let fleet = default_fleet();
    let eager = policy_from_toml(
        "idle_power_off_after_s = 120\n",
        "eager.toml",
        &fleet.policy,
        &fleet,
    )
    .unwrap();
    let spares = policy_from_toml(
        "idle_power_off_after_s = 3600\nwarm_spares_per_rack = 1\nplacement = \"least_fragmentation\"\n",
        "spares.toml",
        &fleet.policy,
        &fleet,
    )
    .unwrap();
    vec![("eager".into(), eager), ("spares".into(), spares)]
}

#[test]
fn the_default_trace_has_every_gpu_class() {
    let t = trace::default_trace();
    assert!(t.jobs.len() > 100, "{} jobs", t.jobs.len());
    for c in [Class::Gang, Class::Single, Class::Mig, Class::Shared] {
        assert!(
            t.jobs.iter().any(|j| trace::class(&j.workload) == c),
            "no {c:?} job"
        );
    }
    assert!(t.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
}

#[test]
fn the_same_seed_gives_byte_identical_figures_and_another_seed_other_delays() {
    let a = serde_json::to_string(&simulate(&input(two(), 7))).unwrap();
    let b = serde_json::to_string(&simulate(&input(two(), 7))).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&simulate(&input(two(), 8))).unwrap();
    assert_ne!(a, c, "the seed draws the boot and BMC delays");
}

#[test]
fn two_policies_on_the_default_run_the_day_and_differ_where_they_should() {
    let f = simulate(&input(two(), 1));
    assert_eq!(f.policies.len(), 2);
    assert_eq!(f.inputs.nodes, 40);
    for p in &f.policies {
        let s = &p.summary;
        assert!(s.power_ons > 0, "{}: nothing powered on", p.name);
        assert!(
            s.started * 10 >= s.workloads * 9,
            "{}: started {} of {}",
            p.name,
            s.started,
            s.workloads
        );
        assert!(s.gpu_hours_used > 0.0);
        assert!(
            s.gpu_hours_used <= s.gpu_hours_powered,
            "{}: used more than powered",
            p.name
        );
        assert!(s.energy_kwh > 0.0);
        assert!(
            s.mig_reconfigurations > 0,
            "{}: MIG notebooks need a repartition",
            p.name
        );
        // Everything starts dark: a gang waits at least a BMC delay and a
        // boot before it runs (the scheduler binds only on Ready nodes).
        let gang = p
            .time_to_running
            .iter()
            .find(|c| c.class == Class::Gang)
            .unwrap();
        let first = gang.points.first().unwrap()[0];
        assert!(first >= 0.0);
        let min_cold = (World::default().bmc_delay_s[0] + World::default().boot_delay_s[0]) as f64;
        assert!(
            p.time_to_running
                .iter()
                .flat_map(|c| &c.points)
                .any(|pt| pt[0] >= min_cold),
            "{}: no workload waited for a boot",
            p.name
        );
        assert!(!p.series.is_empty() && p.series.len() <= accord_sim::figures::MAX_SAMPLES);
        assert!(p
            .series
            .iter()
            .all(|s| s.gpus_used <= s.gpus_powered as f64 + 1e-9));
    }
    let (eager, spares) = (&f.policies[0].summary, &f.policies[1].summary);
    // A longer idle timeout and warm spares: fewer power-ons, more powered
    // GPU-hours.
    assert!(
        spares.power_ons < eager.power_ons,
        "{spares:?} vs {eager:?}"
    );
    assert!(spares.gpu_hours_powered > eager.gpu_hours_powered);
    assert_eq!(
        f.policies[1].policy.placement,
        Placement::LeastFragmentation
    );
}

#[test]
fn a_policy_file_overrides_only_its_keys_and_is_checked() {
    let fleet = default_fleet();
    let mut base = fleet.policy.clone();
    base.warm_spares_per_rack = 2;
    let p = policy_from_toml("idle_power_off_after_s = 60\n", "p.toml", &base, &fleet).unwrap();
    assert_eq!(p.idle_power_off_after_s, 60);
    assert_eq!(
        p.warm_spares_per_rack, 2,
        "a key the file leaves out keeps the fleet's value"
    );
    let e = policy_from_toml("idle_power_of_after_s = 60\n", "p.toml", &base, &fleet).unwrap_err();
    let text = format!("{:#}", anyhow_chain(&e));
    assert!(text.contains("p.toml:1:1"), "{text}");
    let e = policy_from_toml(
        "warm_spares_per_profile = { nope = 1 }\n",
        "p.toml",
        &base,
        &fleet,
    )
    .unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    assert!(accord_sim::check_policy_names(&["a", "a"]).is_err());
    assert!(accord_sim::check_policy_names(&["<b>"]).is_err());
}

fn anyhow_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[test]
fn trace_files_are_checked_as_outside_input() {
    let e = Trace::from_json("{\"jobs\": [ {\"submit_s\": -1 } ]}", "t.json").unwrap_err();
    assert!(e.to_string().starts_with("t.json:1:"), "{e}");
    let job = |name: &str, run: &str| {
        format!(
            r#"{{"submit_s": 5, "run_s": {run}, "workload": {{"name": "{name}", "namespace": "n", "pod_sets": [{{"name": "p", "pod": {{"requests": {{"nvidia.com/gpu": "1"}}}}}}]}}}}"#
        )
    };
    let ok = format!("{{\"jobs\": [{}]}}", job("a", "60"));
    assert_eq!(Trace::from_json(&ok, "t.json").unwrap().jobs.len(), 1);
    for (bad, says) in [
        (format!("{{\"jobs\": [{}]}}", job("a", "0")), "run_s 0"),
        (
            format!("{{\"jobs\": [{}, {}]}}", job("a", "6"), job("a", "7")),
            "second job",
        ),
        ("{\"jobs\": []}".to_owned(), "no jobs"),
        (
            format!(
                "{{\"jobs\": [{}]}}",
                job("a", "60").replace("\"1\"", "\"-3\"")
            ),
            "invalid",
        ),
    ] {
        let e = Trace::from_json(&bad, "t.json").unwrap_err();
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    // A demand file: each workload's `created` is its submission time.
    let demand = r#"{"workloads": [{"name": "w", "namespace": "n", "created": 30, "pod_sets": [{"name": "p", "pod": {"requests": {"nvidia.com/gpu": "2"}}}]}]}"#;
    let t = Trace::from_json(demand, "d.json").unwrap();
    assert_eq!((t.jobs[0].submit_s, t.jobs[0].run_s), (30, None));
    assert!((trace::gpus(&t.jobs[0].workload) - 2.0).abs() < 1e-9);
}

/// accordd's per-round pod limit (100,000) holds per round: a trace with
/// more pods than that in all, arriving over time, is a trace, not a
/// refusal; a key named twice in one object is refused where it is.
#[test]
fn a_trace_is_bounded_per_round_not_in_all() {
    let job = |i: usize| {
        format!(
            r#"{{"submit_s": {i}, "run_s": 60, "workload": {{"name": "j{i}", "namespace": "n", "pod_sets": [{{"name": "p", "pod": {{"requests": {{"nvidia.com/gpu": "1"}}}}}}]}}}}"#
        )
    };
    let pods = accord::demand::Limits::default().max_pods_per_round as usize + 1;
    let text = format!(
        "{{\"jobs\": [{}]}}",
        (0..pods).map(job).collect::<Vec<_>>().join(",")
    );
    assert_eq!(Trace::from_json(&text, "t.json").unwrap().jobs.len(), pods);
    let twice = format!(
        "{{\"jobs\": [{}]}}",
        job(1).replace(r#""run_s": 60"#, r#""run_s": 60, "run_s": 61"#)
    );
    let e = Trace::from_json(&twice, "t.json").unwrap_err();
    assert!(e.to_string().starts_with("t.json:1:"), "{e}");
    assert!(
        anyhow_chain(&e).contains("\"run_s\" twice"),
        "{}",
        anyhow_chain(&e)
    );
}

/// The three example policies of `config/`, as `accordctl simulate
/// --policy NAME=FILE` reads them.
fn examples() -> Vec<(String, Policy)> {
    let fleet = default_fleet();
    [
        (
            "power-saver",
            include_str!("../../../config/policy-power-saver.toml"),
        ),
        (
            "warm-spares",
            include_str!("../../../config/policy-warm-spares.toml"),
        ),
        (
            "predictive",
            include_str!("../../../config/policy-predictive.toml"),
        ),
    ]
    .into_iter()
    .map(|(name, text)| {
        let p = policy_from_toml(text, name, &fleet.policy, &fleet).unwrap();
        (name.to_owned(), p)
    })
    .collect()
}

#[test]
fn predictive_warming_waits_less_than_power_saver_and_powers_less_than_warm_spares() {
    let f = simulate(&input(examples(), 1));
    let by = |name: &str| {
        f.policies
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.summary.clone())
            .unwrap()
    };
    let (saver, spares, predictive) = (by("power-saver"), by("warm-spares"), by("predictive"));
    let p95 = |s: &accord_sim::figures::Summary| s.p95_time_to_running_s.unwrap();
    assert!(
        p95(&predictive) < p95(&saver),
        "p95 wait: predictive {} s, power-saver {} s",
        p95(&predictive),
        p95(&saver)
    );
    assert!(
        predictive.gpu_hours_powered < spares.gpu_hours_powered,
        "powered: predictive {} GPU-h, warm-spares {} GPU-h",
        predictive.gpu_hours_powered,
        spares.gpu_hours_powered
    );
    assert_eq!(predictive.never_started, 0);
}

#[test]
fn a_predictive_policy_needs_a_budget() {
    let fleet = default_fleet();
    let e =
        policy_from_toml("warm = \"predictive\"\n", "p.toml", &fleet.policy, &fleet).unwrap_err();
    assert!(
        anyhow_chain(&e).contains("warm_budget_gpu_hours_per_day"),
        "{}",
        anyhow_chain(&e)
    );
    let e = policy_from_toml(
        "warm = \"predictive\"\nwarm_budget_gpu_hours_per_day = 10\nwarm_coverage_percent = 100\n",
        "p.toml",
        &fleet.policy,
        &fleet,
    )
    .unwrap_err();
    assert!(
        anyhow_chain(&e).contains("warm_coverage_percent"),
        "{}",
        anyhow_chain(&e)
    );
}
