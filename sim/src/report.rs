//! The HTML report of a simulation: one self-contained page (inline CSS,
//! inline SVG charts drawn with plotters, no script, nothing fetched) that
//! compares the policies of one [`Figures`]. Every string from the input
//! is escaped; the same figures give the same bytes.

mod axes;
mod charts;
mod draw;
mod format;
mod front;

use std::fmt::Write as _;

use crate::figures::{Figures, Inputs, PolicyFigures};
use format::{duration, escape, number, range_s};

/// The whole report page for `figures`.
pub fn render_html(figures: &Figures) -> String {
    let mut page = String::with_capacity(256 * 1024);
    page.push_str(concat!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        "<title>Accord what-if simulation</title>\n<style>\n",
    ));
    page.push_str(CSS);
    page.push_str("</style>\n</head>\n<body>\n<main>\n");
    page.push_str("<h1>Accord what-if simulation</h1>\n");
    push_inputs(&mut page, figures);
    push_policies(&mut page, &figures.policies);
    push_summary_table(&mut page, &figures.policies);
    push_charts(&mut page, figures);
    page.push_str("</main>\n</body>\n</html>\n");
    page
}

const CSS: &str = "\
body{margin:0;background:#f6f7f9;color:#1d232b;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px;background:#fff}
h1{font-size:24px;margin:0 0 12px}
h2{font-size:18px;margin:32px 0 8px;padding-bottom:4px;border-bottom:1px solid #d8dde3}
p.note{color:#5a6470;margin:4px 0 8px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:4px 8px;border-bottom:1px solid #e3e7ec;text-align:right;vertical-align:top}
td{white-space:nowrap}
th{background:#eef1f4;font-weight:600}
th:first-child,td:first-child{text-align:left}
table.inputs th{text-align:left;width:12em}
table.inputs td{text-align:left}
table.summary{font-size:13px;width:100%}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.settings{display:flex;flex-wrap:wrap;gap:12px}
.settings div{flex:1 1 300px;min-width:0}
pre{margin:4px 0 0;padding:8px;background:#f3f5f7;border:1px solid #e3e7ec;border-radius:4px;font-size:12px;overflow-x:auto}
figure{margin:12px 0 20px}
figure svg{display:block;max-width:100%;height:auto}
p.empty{padding:16px;background:#f3f5f7;color:#5a6470;border-radius:4px}
";

fn push_inputs(page: &mut String, figures: &Figures) {
    let Inputs {
        fleet,
        trace,
        nodes,
        gpus,
        workloads,
        horizon_s,
        round_s,
        bmc_delay_s,
        boot_delay_s,
    } = &figures.inputs;
    let rows: [(&str, String); 10] = [
        ("Fleet", escape(fleet)),
        ("Trace", escape(trace)),
        ("Nodes", nodes.to_string()),
        ("GPUs", gpus.to_string()),
        ("Workloads", workloads.to_string()),
        (
            "Horizon",
            format!("{} ({horizon_s} s)", duration(*horizon_s as f64)),
        ),
        ("Seed", figures.seed.to_string()),
        ("Control round", format!("{round_s} s")),
        ("Power-on → BMC On", range_s(*bmc_delay_s)),
        ("BMC On → node Ready", range_s(*boot_delay_s)),
    ];
    page.push_str("<h2>Inputs</h2>\n<table class=\"inputs\">\n");
    for (label, value) in rows {
        let _ = writeln!(page, "<tr><th>{label}</th><td>{value}</td></tr>");
    }
    page.push_str("</table>\n");
    page.push_str(
        "<p class=\"note\">Delays are drawn uniformly from the ranges with the seed; \
         every policy sees the same trace and the same draws.</p>\n",
    );
}

fn push_policies(page: &mut String, policies: &[PolicyFigures]) {
    page.push_str("<h2>Policies</h2>\n");
    if policies.is_empty() {
        page.push_str("<p class=\"empty\">No policy was simulated.</p>\n");
        return;
    }
    page.push_str("<div class=\"settings\">\n");
    for (index, policy) in policies.iter().enumerate() {
        // TOML reads like the fleet file's [policy]; JSON if TOML can't say it.
        let settings = toml::to_string(&policy.policy)
            .or_else(|_| serde_json::to_string_pretty(&policy.policy))
            .unwrap_or_else(|error| format!("(settings could not be written: {error})"));
        let _ = writeln!(
            page,
            "<div><strong>{swatch}{name}</strong><pre>{settings}</pre></div>",
            swatch = swatch(index),
            name = escape(&policy.name),
            settings = escape(settings.trim_end()),
        );
    }
    page.push_str("</div>\n");
}

fn swatch(policy_index: usize) -> String {
    format!(
        "<span class=\"swatch\" style=\"background:{}\"></span>",
        draw::policy_color_hex(policy_index)
    )
}

fn push_summary_table(page: &mut String, policies: &[PolicyFigures]) {
    page.push_str("<h2>Summary</h2>\n");
    if policies.is_empty() {
        page.push_str("<p class=\"empty\">No policy was simulated: nothing to summarise.</p>\n");
        return;
    }
    page.push_str(concat!(
        "<table class=\"summary\">\n<thead><tr><th>Policy</th>",
        "<th>Power-ons</th><th>Power cycles</th><th>Unused power-ons</th>",
        "<th>MIG reconfig&shy;urations</th><th>Started</th><th>Never started</th>",
        "<th>Mean to running</th><th>p50 to running</th><th>p95 to running</th>",
        "<th>GPU-h powered</th><th>GPU-h used</th><th>GPU-h wasted</th>",
        "<th>Energy kWh</th></tr></thead>\n<tbody>\n",
    ));
    for (index, policy) in policies.iter().enumerate() {
        let s = &policy.summary;
        let cells = [
            s.power_ons.to_string(),
            s.power_cycles.to_string(),
            s.unused_power_ons.to_string(),
            s.mig_reconfigurations.to_string(),
            format!("{} / {}", s.started, s.workloads),
            s.never_started.to_string(),
            s.mean_time_to_running_s
                .map_or_else(|| "—".to_owned(), duration),
            s.p50_time_to_running_s
                .map_or_else(|| "—".to_owned(), duration),
            s.p95_time_to_running_s
                .map_or_else(|| "—".to_owned(), duration),
            number(s.gpu_hours_powered, 1),
            number(s.gpu_hours_used, 1),
            number(s.gpu_hours_wasted, 1),
            number(s.energy_kwh, 1),
        ];
        let _ = write!(
            page,
            "<tr><td>{}{}</td>",
            swatch(index),
            escape(&policy.name)
        );
        for cell in cells {
            let _ = write!(page, "<td>{cell}</td>");
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</tbody>\n</table>\n");
    page.push_str(
        "<p class=\"note\">Power cycles: a node powered off and on again. Unused power-on: \
         the node ran no pod before it went off again or the run ended. Started counts \
         workloads that ran, of those in the trace. Wasted = powered − used.</p>\n",
    );
}

fn push_charts(page: &mut String, figures: &Figures) {
    if figures.policies.is_empty() {
        page.push_str(
            "<h2>Charts</h2>\n<p class=\"empty\">No policy was simulated: nothing to draw.</p>\n",
        );
        return;
    }
    push_chart(
        page,
        "Pending GPUs over time",
        "GPUs requested by workloads that have arrived and are not running yet.",
        charts::pending_gpus(figures),
    );
    push_chart(
        page,
        "Nodes powered on, by stage",
        "Nodes in each lifecycle stage, stacked; nodes that are off are not drawn.",
        charts::nodes_by_stage(figures),
    );
    push_chart(
        page,
        "GPU-hours and energy",
        "GPU-hours of nodes drawing power against GPU-hours allocated to pods, and the \
         energy the powered nodes drew.",
        charts::gpu_hours_and_energy(figures),
    );
    let classes = charts::classes_present(figures);
    if classes.is_empty() {
        page.push_str(
            "<h2>Time from submission to running</h2>\n\
             <p class=\"empty\">No workload class has any workload: no CDF to draw.</p>\n",
        );
    }
    for class in classes {
        push_chart(
            page,
            &format!(
                "Time from submission to running: {}",
                charts::class_title(class)
            ),
            charts::class_description(class),
            charts::time_to_running(figures, class),
        );
    }
    push_chart(
        page,
        "The trade-off: waiting against power",
        "Each policy's median (hollow) and 95th-percentile (filled) time from submission \
         to running, against the GPU-hours it kept powered (left) and the energy it drew \
         (right). The line joins the policies no other beats on both p95 and power: the \
         front; a policy above it pays more for the same wait.",
        front::trade_off(figures),
    );
    push_chart(
        page,
        "GPU allocation against arrived demand",
        "GPUs allocated to running pods against the GPUs requested by all work arrived so \
         far, both as a share of the fleet's GPUs (the form of Fig. 9a in Weng et al., \
         USENIX ATC '23).",
        charts::allocation(figures),
    );
}

fn push_chart(page: &mut String, title: &str, note: &str, svg: Result<String, String>) {
    let _ = writeln!(
        page,
        "<h2>{}</h2>\n<p class=\"note\">{}</p>",
        escape(title),
        escape(note)
    );
    match svg {
        Ok(svg) => {
            page.push_str("<figure>\n");
            page.push_str(&svg);
            page.push_str("\n</figure>\n");
        }
        Err(error) => {
            let _ = writeln!(
                page,
                "<p class=\"empty\">The chart could not be drawn: {}</p>",
                escape(&error)
            );
        }
    }
}
