//! `peer-figures`' report: the figures as JSON, a table (Markdown, for the
//! README and the note), and an HTML page with the table and a bar chart
//! per metric, in the simulate report's plain style (no script, inline
//! SVG).

use std::fmt::Write as _;

use serde::Serialize;

use super::measure::Figures;

/// What the report says beside the figures.
#[derive(Debug, Serialize)]
pub struct Report {
    pub command: String,
    pub settings: serde_json::Value,
    /// Peers the module proxy did not serve: the exact modules and
    /// versions tried.
    pub not_served: Vec<String>,
    /// What favours Accord, or a peer, by construction.
    pub caveats: Vec<String>,
    pub figures: Vec<Figures>,
}

fn seconds(v: Option<f64>) -> String {
    v.map_or_else(|| "never".to_owned(), |s| format!("{s:.0} s"))
}

/// The rows of the comparison: (metric, how to read it, value of an arm).
type Metric = (
    &'static str,
    &'static str,
    fn(&Figures) -> (String, Option<f64>),
);

const METRICS: [Metric; 10] = [
    ("machines powered on", "Nodes created, for a peer", |f| {
        (f.power_ons.to_string(), Some(f64::from(f.power_ons)))
    }),
    ("never used", "powered, no trace pod ever bound", |f| {
        (f.never_used.to_string(), Some(f64::from(f.never_used)))
    }),
    (
        "stranded GPU-s",
        "empty, or holding part of a pending gang",
        |f| (format!("{:.0}", f.stranded_gpu_s), Some(f.stranded_gpu_s)),
    ),
    ("gang p50 to bound", "submission to all pods bound", |f| {
        (seconds(f.gang_p50_s), f.gang_p50_s)
    }),
    ("gang p95 to bound", "never: >5 % never bound", |f| {
        (seconds(f.gang_p95_s), f.gang_p95_s)
    }),
    ("gangs never bound", "within the horizon", |f| {
        (
            format!("{} of {}", f.gangs_never_bound, f.gangs),
            Some(f64::from(f.gangs_never_bound)),
        )
    }),
    (
        "gangs split across racks",
        "of those that fit one rack",
        |f| (f.gangs_split.to_string(), Some(f64::from(f.gangs_split))),
    ),
    ("singles never bound", "within the horizon", |f| {
        (
            f.singles_never_bound.to_string(),
            Some(f64::from(f.singles_never_bound)),
        )
    }),
    (
        "scale-down churn",
        "a machine up within the idle time after one shut",
        |f| (f.churn.to_string(), Some(f64::from(f.churn))),
    ),
    ("machine-powered s", "summed over machines", |f| {
        (format!("{:.0}", f.powered_s), Some(f.powered_s))
    }),
];

fn traces(r: &Report) -> Vec<String> {
    let mut t: Vec<String> = r.figures.iter().map(|f| f.trace.clone()).collect();
    t.dedup();
    t
}

/// A Markdown table per trace: a row per metric, a column per arm.
pub fn markdown(r: &Report) -> String {
    let mut out = String::new();
    for trace in traces(r) {
        let arms: Vec<&Figures> = r.figures.iter().filter(|f| f.trace == trace).collect();
        let _ = writeln!(out, "Trace `{trace}`:\n");
        let _ = write!(out, "| metric |");
        for a in &arms {
            let _ = write!(out, " {} |", a.arm);
        }
        let _ = write!(out, "\n|---|");
        for _ in &arms {
            let _ = write!(out, "---|");
        }
        out.push('\n');
        for (name, _, value) in METRICS {
            let _ = write!(out, "| {name} |");
            for a in &arms {
                let _ = write!(out, " {} |", value(a).0);
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The HTML page: settings, the tables, a bar chart per metric per trace,
/// what was not served, the caveats.
pub fn html(r: &Report) -> String {
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Accord beside its peers</title>\
         <style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
         table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}\
         th:first-child,td:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:12px}\
         .chart{border:1px solid #eee;padding:6px}code{background:#f4f4f4}</style></head><body>",
    );
    let _ = write!(
        h,
        "<h1>Accord beside cluster-autoscaler and Karpenter</h1><p>Made by <code>{}</code>. Settings: <code>{}</code></p>",
        escape(&r.command),
        escape(&r.settings.to_string())
    );
    for trace in traces(r) {
        let arms: Vec<&Figures> = r.figures.iter().filter(|f| f.trace == trace).collect();
        let _ = write!(
            h,
            "<h2>Trace <code>{}</code></h2><table><tr><th>metric</th>",
            escape(&trace)
        );
        for a in &arms {
            let _ = write!(h, "<th>{}</th>", escape(&a.arm));
        }
        h.push_str("<th>how it is read</th></tr>");
        for (name, how, value) in METRICS {
            let _ = write!(h, "<tr><td>{name}</td>");
            for a in &arms {
                let _ = write!(h, "<td>{}</td>", escape(&value(a).0));
            }
            let _ = write!(h, "<td>{how}</td></tr>");
        }
        h.push_str("</table><div class=\"charts\">");
        for (name, _, value) in METRICS {
            h.push_str(&bar_chart(name, &arms, value));
        }
        h.push_str("</div>");
    }
    h.push_str("<h2>Not run</h2><ul>");
    for n in &r.not_served {
        let _ = write!(h, "<li>{}</li>", escape(n));
    }
    h.push_str("</ul><h2>What favours whom by construction</h2><ul>");
    for c in &r.caveats {
        let _ = write!(h, "<li>{}</li>", escape(c));
    }
    h.push_str("</ul></body></html>\n");
    h
}

fn bar_chart(
    name: &str,
    arms: &[&Figures],
    value: fn(&Figures) -> (String, Option<f64>),
) -> String {
    const W: f64 = 240.0;
    let max = arms
        .iter()
        .filter_map(|a| value(a).1)
        .fold(0.0f64, f64::max)
        .max(1.0);
    let height = 26 + 22 * arms.len();
    let mut s = format!(
        "<div class=\"chart\"><svg width=\"380\" height=\"{height}\" role=\"img\" aria-label=\"{name}\">\
         <text x=\"0\" y=\"14\" font-size=\"13\" font-weight=\"bold\">{name}</text>"
    );
    for (i, a) in arms.iter().enumerate() {
        let y = 24 + 22 * i;
        let (text, v) = value(a);
        let w = v.map_or(W, |v| v / max * W);
        let fill = if v.is_none() {
            "#d55"
        } else if a.arm == "accord" {
            "#2a7"
        } else {
            "#69c"
        };
        let _ = write!(
            s,
            "<text x=\"0\" y=\"{}\" font-size=\"12\">{}</text><rect x=\"120\" y=\"{y}\" width=\"{w:.1}\" height=\"16\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{}\" font-size=\"11\">{}</text>",
            y + 12,
            escape(&a.arm),
            (124.0 + w).min(330.0),
            y + 12,
            escape(&text)
        );
    }
    s.push_str("</svg></div>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::measure::{Measure, Seen};
    use crate::peers::trace::{trace, TraceName};

    fn report() -> Report {
        let jobs = trace(TraceName::Gang, 300.0);
        let mut m = Measure::new(&jobs, 30.0);
        m.tick(&Seen::default());
        Report {
            command: "peer-figures --out <dir>".into(),
            settings: serde_json::json!({"boot_s": 20}),
            not_served: vec!["cluster-autoscaler: 403".into()],
            caveats: vec!["a <b> caveat".into()],
            figures: vec![
                m.figures("accord", "gang", 300.0),
                m.figures("karpenter", "gang", 300.0),
            ],
        }
    }

    #[test]
    fn the_table_has_a_column_per_arm_and_the_page_escapes_what_it_quotes() {
        let r = report();
        let md = markdown(&r);
        assert!(md.contains("| metric | accord | karpenter |"), "{md}");
        assert!(md.contains("| gang p95 to bound | never | never |"), "{md}");
        let page = html(&r);
        assert!(page.contains("peer-figures --out &lt;dir&gt;"));
        assert!(page.contains("a &lt;b&gt; caveat"));
        assert!(!page.contains("<dir>"));
        assert_eq!(page.matches("<svg").count(), METRICS.len());
    }
}
