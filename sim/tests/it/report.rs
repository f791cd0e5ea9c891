//! The HTML report from hand-built figures. The tests sit in module `report`
//! so `cargo test -p accord-sim report` selects them.
//!
//! `ACCORD_REPORT_DIR=/tmp/accord-report cargo test -p accord-sim --test it report`
//! also writes the sample page to that directory's `report.html`, for
//! `scripts/check-report` and a look in a browser.

use accord::fleet::Policy;
use accord_sim::figures::{
    AllocationPoint, Class, ClassCdf, Figures, Inputs, NodesByStage, PolicyFigures, Sample, Summary,
};
use accord_sim::report::render_html;

fn inputs() -> Inputs {
    Inputs {
        fleet: "fleet.toml".to_owned(),
        trace: "trace-2d.jsonl".to_owned(),
        nodes: 40,
        gpus: 320,
        workloads: 600,
        horizon_s: 48 * 3600,
        round_s: 30,
        bmc_delay_s: [20, 60],
        boot_delay_s: [180, 420],
    }
}

fn summary(scale: f64) -> Summary {
    Summary {
        power_ons: (40.0 * scale) as u64,
        power_offs: (36.0 * scale) as u64,
        power_cycles: (12.0 * scale) as u64,
        unused_power_ons: (3.0 * scale) as u64,
        mig_reconfigurations: 7,
        workloads: 600,
        started: 590,
        never_started: 10,
        mean_time_to_running_s: Some(750.0 * scale),
        p50_time_to_running_s: Some(3000.0 * scale),
        p95_time_to_running_s: Some(5400.0 * scale),
        gpu_hours_powered: 9876.54 * scale,
        gpu_hours_used: 6543.21,
        gpu_hours_wasted: 9876.54 * scale - 6543.21,
        energy_kwh: 31_234.5 * scale,
        evictions: 2,
    }
}

/// A day-and-a-half wave of demand; `lag` delays the policy's response.
fn series(lag: f64, spares: u32) -> Vec<Sample> {
    (0..=192)
        .map(|step| {
            let t_s = step * 900;
            let hours = t_s as f64 / 3600.0;
            let demand = 160.0 + 120.0 * (hours / 36.0 * std::f64::consts::TAU).sin();
            let burst = if (10.0..13.0).contains(&hours) {
                90.0
            } else {
                0.0
            };
            let pending = (burst + 25.0 * (hours * 1.3).sin().max(0.0)) * lag;
            let in_use = ((demand / 8.0).round() as u32).min(36);
            let idle = spares + (step % 5 == 0) as u32;
            let booting = ((pending / 16.0) as u32).min(4);
            let powering_on = ((pending / 24.0) as u32).min(3);
            let failed = (step > 120 && step < 140) as u32;
            Sample {
                t_s,
                pending_gpus: (pending * 1000.0).round() / 1000.0,
                pending_workloads: (pending / 4.0) as u32,
                nodes: NodesByStage {
                    off: 40 - (in_use + idle + booting + powering_on + failed).min(40),
                    powering_on,
                    booting,
                    idle,
                    in_use,
                    powering_off: (step % 11 == 0) as u32,
                    failed,
                },
                gpus_powered: u64::from(in_use + idle) * 8,
                gpus_used: demand,
            }
        })
        .collect()
}

/// A CDF through `scale` × (10 s … a few hours).
fn cdf(class: Class, scale: f64, started: u64, never_started: u64) -> ClassCdf {
    let points = (1..=40)
        .map(|index| {
            let seconds = 10.0 * scale * 1.2_f64.powi(index);
            [(seconds * 1000.0).round() / 1000.0, f64::from(index) / 40.0]
        })
        .collect();
    ClassCdf {
        class,
        started,
        never_started,
        points,
    }
}

fn allocation(efficiency: f64) -> Vec<AllocationPoint> {
    (0..60)
        .map(|index| {
            let arrived = f64::from(index) * 0.02;
            AllocationPoint {
                arrived,
                allocated: (arrived * efficiency).min(0.5 + 0.4 * efficiency),
            }
        })
        .collect()
}

fn policy(name: &str, scale: f64, spares: u32) -> PolicyFigures {
    PolicyFigures {
        name: name.to_owned(),
        policy: Policy {
            warm_spares_per_rack: spares,
            ..Policy::default()
        },
        summary: summary(scale),
        series: series(scale, spares),
        time_to_running: vec![
            cdf(Class::Gang, scale, 120, 4),
            cdf(Class::Single, scale * 0.5, 470, 6),
        ],
        allocation: allocation(0.95 / scale),
    }
}

fn sample_figures() -> Figures {
    Figures {
        seed: 42,
        inputs: inputs(),
        policies: vec![policy("first-fit", 1.0, 0), policy("fgd+spares", 1.25, 2)],
    }
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// No NaN or infinity anywhere (coordinates, opacities, labels).
fn assert_no_nan(html: &str) {
    for bad in ["NaN", "inf\"", "=\"inf", "-inf", "infinity"] {
        assert!(!html.contains(bad), "the page contains {bad:?}");
    }
}

#[test]
fn one_svg_per_chart_and_both_policies() {
    let html = render_html(&sample_figures());
    // Pending, stages, GPU-hours/energy, a CDF per class (2), the trade-off,
    // allocation.
    assert_eq!(count(&html, "<svg"), 7);
    assert_eq!(count(&html, "</svg>"), 7);
    assert!(html.contains("first-fit"));
    assert!(html.contains("fgd+spares"));
    assert!(html.contains("Submission → running: gang workloads"));
    assert!(html.contains("Submission → running: single workloads"));
    assert!(!html.contains("Submission → running: MIG"));
    assert!(!html.contains("<script"));
    assert_no_nan(&html);
}

#[test]
fn table_rows_hold_the_summary() {
    let html = render_html(&sample_figures());
    let first = row_of(&html, "first-fit");
    for cell in [
        "<td>40</td>",
        "<td>12</td>",
        "<td>3</td>",
        "<td>7</td>",
        "<td>590 / 600</td>",
        "<td>10</td>",
        "<td>12.5 min</td>",
        "<td>90.0 min</td>",
        "<td>9876.5</td>",
        "<td>6543.2</td>",
        "<td>3333.3</td>",
        "<td>31234.5</td>",
    ] {
        assert!(first.contains(cell), "{cell} missing from {first}");
    }
    let second = row_of(&html, "fgd+spares");
    assert!(second.contains("<td>50</td>"), "{second}");
    assert!(second.contains("<td>39043.1</td>"), "{second}");
}

/// The summary table's row for `policy`.
fn row_of<'a>(html: &'a str, policy: &str) -> &'a str {
    let table = &html[html
        .find("<table class=\"summary\">")
        .expect("summary table")..];
    let start = table
        .find(&format!("{policy}</td>"))
        .expect("a row for the policy");
    let row = &table[..start];
    let row_start = row.rfind("<tr>").expect("row start");
    let end = table[start..].find("</tr>").expect("row end") + start;
    &table[row_start..end]
}

#[test]
fn policy_settings_and_inputs_are_in_the_header() {
    let html = render_html(&sample_figures());
    assert!(html.contains("warm_spares_per_rack = 2"));
    assert!(html.contains("trace-2d.jsonl"));
    assert!(html.contains("<td>320</td>"));
    assert!(html.contains("2.0 d (172800 s)") || html.contains("48.0 h (172800 s)"));
    assert!(html.contains("20–60 s"));
    assert!(html.contains("180–420 s"));
}

#[test]
fn same_figures_same_bytes() {
    assert_eq!(
        render_html(&sample_figures()),
        render_html(&sample_figures())
    );
}

#[test]
fn empty_figures_render() {
    let mut figures = sample_figures();
    figures.policies.clear();
    figures.inputs.gpus = 0;
    figures.inputs.horizon_s = 0;
    let html = render_html(&figures);
    assert!(html.contains("No policy was simulated"));
    assert_eq!(count(&html, "<svg"), 0);
    assert!(html.ends_with("</html>\n"));
}

#[test]
fn policies_without_data_render_without_nan() {
    let mut figures = sample_figures();
    figures.inputs.gpus = 0;
    figures.inputs.nodes = 0;
    figures.inputs.horizon_s = 0;
    for policy in &mut figures.policies {
        policy.series.clear();
        policy.time_to_running.clear();
        policy.allocation.clear();
        policy.summary = Summary {
            power_ons: 0,
            power_offs: 0,
            power_cycles: 0,
            unused_power_ons: 0,
            mig_reconfigurations: 0,
            workloads: 0,
            started: 0,
            never_started: 0,
            mean_time_to_running_s: None,
            p50_time_to_running_s: None,
            p95_time_to_running_s: None,
            gpu_hours_powered: 0.0,
            gpu_hours_used: 0.0,
            gpu_hours_wasted: 0.0,
            energy_kwh: 0.0,
            evictions: 0,
        };
    }
    let html = render_html(&figures);
    // No class present: pending, stages, bars, trade-off, allocation.
    assert_eq!(count(&html, "<svg"), 5);
    assert!(html.contains("no samples"));
    assert!(html.contains("the fleet has no GPUs"));
    assert!(html.contains("No workload class has any workload"));
    assert!(!html.contains("could not be drawn"));
    assert_no_nan(&html);
}

#[test]
fn a_class_that_never_ran_still_gets_its_chart() {
    let mut figures = sample_figures();
    for policy in &mut figures.policies {
        policy.time_to_running.push(ClassCdf {
            class: Class::Mig,
            started: 0,
            never_started: 5,
            points: Vec::new(),
        });
    }
    let html = render_html(&figures);
    assert_eq!(count(&html, "<svg"), 8);
    assert!(html.contains("no workload of this class ran"));
    assert_no_nan(&html);
}

#[test]
fn non_finite_values_are_not_drawn() {
    let mut figures = sample_figures();
    let first = &mut figures.policies[0];
    first.series[3].pending_gpus = f64::NAN;
    first.series[4].pending_gpus = f64::INFINITY;
    first.summary.energy_kwh = f64::NAN;
    first.summary.gpu_hours_used = f64::NEG_INFINITY;
    first.summary.mean_time_to_running_s = Some(f64::NAN);
    first.time_to_running[0].points[2] = [f64::NAN, 0.5];
    first.allocation[1].allocated = f64::INFINITY;
    let html = render_html(&figures);
    assert_eq!(count(&html, "<svg"), 7);
    assert!(!html.contains("could not be drawn"));
    assert_no_nan(&html);
}

#[test]
fn extreme_values_render_without_panic() {
    let mut figures = sample_figures();
    figures.inputs.horizon_s = u64::MAX;
    let first = &mut figures.policies[0];
    first.series[0].t_s = u64::MAX;
    first.series[1].pending_gpus = 1e308;
    first.series[2].pending_gpus = -1e308;
    first.series[3].nodes.booting = u32::MAX;
    first.series[3].nodes.powering_on = u32::MAX;
    first.summary.gpu_hours_powered = 1e308;
    first.summary.gpu_hours_used = -1e308;
    first.summary.energy_kwh = 1e300;
    first.summary.power_ons = u64::MAX;
    first.time_to_running[0].points = vec![[1e308, 2.0], [-1.0, -1.0], [1e-300, 0.5]];
    first.allocation[0] = AllocationPoint {
        arrived: 1e308,
        allocated: -1e308,
    };
    let html = render_html(&figures);
    assert_eq!(count(&html, "<svg"), 7);
    assert!(!html.contains("could not be drawn"));
    assert!(html.contains(&u64::MAX.to_string()));
    assert_no_nan(&html);
}

#[test]
fn strings_from_the_input_are_escaped() {
    let mut figures = sample_figures();
    figures.policies[0].name = "<script>alert(1)</script>".to_owned();
    figures.inputs.fleet = "a&b\"<c>.toml".to_owned();
    figures.inputs.trace = "<img src=x onerror=alert(1)>".to_owned();
    let html = render_html(&figures);
    assert!(!html.contains("<script"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("a&amp;b&quot;&lt;c&gt;.toml"));
}

#[test]
fn report_page_written_for_the_check_script() {
    let Ok(dir) = std::env::var("ACCORD_REPORT_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create the report directory");
    std::fs::write(dir.join("report.html"), render_html(&sample_figures()))
        .expect("write report.html");
}
