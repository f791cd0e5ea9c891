//! The soak harness, small: 50 nodes for 20 s against accordd (played by
//! the soak-figures binary, `--serve-accordd`: the code the accordd
//! binary's main runs). accordd survives the churn and stops cleanly;
//! agents report, workloads come and go. Memory is not judged here (a
//! 20 s run has no warm-up to speak of): `soak-figures` does that.

use std::time::Duration;

use accord_benches::soak::{self, Figures, Options, Sample, Stats};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_runs_and_accordd_survives() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::new(
        env!("CARGO_BIN_EXE_soak-figures").into(),
        50,
        Duration::from_secs(20),
        7,
    );
    o.accordd_prefix = vec!["--serve-accordd".into()];
    o.log = dir.path().join("accordd.log");
    let log = o.log.clone();
    let f = soak::run(o, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(f.samples.len() >= 10, "{} samples", f.samples.len());
    assert!(f.samples.iter().all(|s| s.rss_mib > 0.0));
    assert!(
        f.samples.iter().rev().find_map(|s| s.round).unwrap_or(0) > 0,
        "accordd ran no round:\n{}",
        said()
    );
    let s = &f.stats;
    assert!(Stats::get(&s.reports) > 0, "no report taken:\n{}", said());
    assert!(
        Stats::get(&s.report_errors) < Stats::get(&s.reports),
        "{:?}",
        s.errors
    );
    assert!(Stats::get(&s.workloads_created) > 0);
    assert!(Stats::get(&s.bmc_requests) > 0, "accordd read no BMC");
}

fn sample(at_s: f64, rss_mib: f64) -> Sample {
    Sample {
        at_s,
        rss_mib,
        round: Some(1),
        stages: Default::default(),
        workloads: 0,
        pending: 0,
        powered: 0,
    }
}

fn figures(rss: impl Fn(f64) -> f64) -> Figures {
    let mut o = Options::new("accordd".into(), 1, Duration::from_secs(600), 1);
    o.warmup = Duration::from_secs(120);
    Figures {
        options: o,
        samples: (0..=60)
            .map(|i| sample(f64::from(i) * 10.0, rss(f64::from(i) * 10.0)))
            .collect(),
        stats: Default::default(),
        rss_at_start_mib: 10.0,
        store_bytes: 0,
    }
}

#[test]
fn growth_after_warm_up_is_judged_by_its_trend() {
    // Warm-up growth is not judged; flat with noise afterwards is flat.
    let flat = figures(|t| {
        if t < 120.0 {
            50.0 + t
        } else {
            170.0 + (t / 10.0) % 3.0
        }
    });
    assert_eq!(flat.judged().len(), 49);
    assert!(flat.slope_mib_per_min().unwrap().abs() < 0.1);
    assert_eq!(flat.judged_range(), Some((170.0, 172.0)));
    assert_eq!(flat.flat(), Some(true));
    // 3 MiB a minute over 8 minutes: 24 MiB, over 16.
    let leak = figures(|t| 100.0 + t / 20.0);
    assert!((leak.slope_mib_per_min().unwrap() - 3.0).abs() < 1e-9);
    assert!((leak.trend_growth_mib().unwrap() - 24.0).abs() < 1e-9);
    assert_eq!(leak.flat(), Some(false));
    // Nothing after warm-up: nothing to judge.
    let short = Figures {
        samples: vec![sample(0.0, 1.0), sample(10.0, 2.0)],
        ..figures(|_| 0.0)
    };
    assert_eq!(short.flat(), None);
}
