//! The Grafana dashboard (deploy/grafana-dashboard.json) and the Prometheus
//! alerting rules (deploy/prometheus-rules.yaml, and the same rules as a
//! PrometheusRule in deploy/prometheus-rules-operator.yaml) ask only for
//! metrics accordd exports: the registry is built as accordd builds it
//! (`Metrics::new`), encoded as `/metrics` serves it (OpenMetrics text), and
//! every metric name in every PromQL expression of both files must be one of
//! its names (a counter `x` is `x_total`, a histogram `x` is `x_bucket`,
//! `x_sum`, `x_count`). Also: the files parse, the dashboard is importable
//! as is (a `${datasource}` variable, no datasource uid of its own), every
//! alert has `for`, a severity, a summary, a description and a runbook
//! section that exists in docs/operations.md, and the dashboard shows every
//! metric accordd exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use accordd::metrics::{Metrics, RoundMetrics};
use serde_json::Value;

const DASHBOARD: &str = "deploy/grafana-dashboard.json";
const RULES: &str = "deploy/prometheus-rules.yaml";
const RULES_OPERATOR: &str = "deploy/prometheus-rules-operator.yaml";
const RUNBOOK: &str = "docs/operations.md";

/// Metrics that are not accordd's but the rules may read.
const OTHERS: &[&str] = &["up"];

/// The alerts the operations guide promises.
const REQUIRED_ALERTS: &[&str] = &[
    "AccorddDown",
    "AccordNoLeader",
    "AccordBmcErrors",
    "AccordNodesFailed",
    "AccordNodesUnhealthy",
    "AccordWorkloadPendingTooLong",
    "AccordNodeDrift",
];

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Family name → its type, from the `# TYPE` lines (written for a family
/// with no series yet too).
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| {
            let mut it = rest.split_whitespace();
            let name = it.next().expect("a name").to_owned();
            let ty = it.next().expect("a type").to_owned();
            (name, ty)
        })
        .collect()
}

/// The names a family's samples carry, by its type.
fn sample_names(family: &str, ty: &str) -> Vec<String> {
    let suffixes: &[&str] = match ty {
        "counter" => &["_total"],
        "gauge" | "unknown" | "stateset" => &[""],
        "histogram" => &["_bucket", "_sum", "_count"],
        "gaugehistogram" => &["_bucket", "_gsum", "_gcount"],
        "summary" => &["", "_sum", "_count"],
        "info" => &["_info"],
        other => panic!("{family}: type {other} unknown to this test"),
    };
    suffixes.iter().map(|s| format!("{family}{s}")).collect()
}

/// The names `daemon/src/metrics.rs` registers (`.register("name", ...)`),
/// with the registry's prefix.
fn registered() -> BTreeSet<String> {
    let src = read("daemon/src/metrics.rs");
    src.split(".register(")
        .skip(1)
        .map(|rest| {
            let name = rest.split('"').nth(1).expect("a name literal");
            format!("accord_{name}")
        })
        .collect()
}

/// Every metric name accordd exports → its family, with the families.
fn exported() -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let m = Metrics::new();
    // prometheus-client (0.26) writes nothing for a label family with no
    // series yet, not even its `# TYPE`: give each one a series, through
    // the loop's own entry point.
    m.record_round(&RoundMetrics {
        planner_seconds: 0.01,
        nodes_by_stage: [("ready".to_owned(), 1)].into(),
        pending_by_reason: [("capacity", 1)].into(),
        power_results: vec![("n1".to_owned(), false)],
        drift: [(("n1".to_owned(), "declaration"), 1)].into(),
        bios_profiles: [("verified", 1)].into(),
        commands: vec![("mig_agent", "issued")],
        time_to_capacity_seconds: 120.0,
        boot_ready_seconds: [("h100".to_owned(), (300.0, 420.0))].into(),
        ..RoundMetrics::default()
    });
    let text = m.encode();
    let families = families(&text);
    assert!(!families.is_empty(), "no # TYPE lines in:\n{text}");
    let helped: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let mut names = BTreeMap::new();
    for (family, ty) in &families {
        assert!(helped.contains(family.as_str()), "{family} has no # HELP");
        for n in sample_names(family, ty) {
            names.insert(n, family.clone());
        }
    }
    // The expansion agrees with the encoder: every sample it wrote has one
    // of these names.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        assert!(
            names.contains_key(name),
            "the encoder wrote {name}, not among {:?}",
            names.keys()
        );
    }
    // Every metric metrics.rs registers is among them: one missing is a
    // family with no series here (give it one above).
    let registered = registered();
    assert!(registered.len() >= 16, "{registered:?}");
    for n in &registered {
        assert!(
            families.contains_key(n),
            "{n} is registered but not encoded: give it a series in exported()\n{text}"
        );
    }
    assert_eq!(
        registered,
        families.keys().cloned().collect::<BTreeSet<_>>(),
        "families encoded but not registered by metrics.rs"
    );
    (names, families)
}

/// PromQL words that are not metric names when not followed by `(`.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
    "limit_ratio",
];

/// Words followed by a list of label names in parentheses.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Index just past the string literal that starts at `i` (`"`, `'` with
/// backslash escapes, or a raw `` ` `` string).
fn skip_string(c: &[char], i: usize) -> Result<usize, String> {
    let quote = c[i];
    let mut j = i + 1;
    while j < c.len() {
        if c[j] == '\\' && quote != '`' {
            j += 2;
            continue;
        }
        if c[j] == quote {
            return Ok(j + 1);
        }
        j += 1;
    }
    Err(format!("unterminated string from {i}"))
}

/// Index just past the bracket that closes the one at `i` (strings inside
/// skipped); also returns what is between them.
fn skip_bracket(c: &[char], i: usize, close: char) -> Result<(usize, String), String> {
    let open = c[i];
    let mut depth = 0;
    let mut j = i;
    while j < c.len() {
        match c[j] {
            '"' | '\'' | '`' => {
                j = skip_string(c, j)?;
                continue;
            }
            x if x == open => depth += 1,
            x if x == close => {
                depth -= 1;
                if depth == 0 {
                    return Ok((j + 1, c[i + 1..j].iter().collect()));
                }
            }
            _ => {}
        }
        j += 1;
    }
    Err(format!("unclosed {open:?} from {i}"))
}

fn is_ident_start(x: char) -> bool {
    x.is_ascii_alphabetic() || x == '_' || x == ':'
}

fn is_ident(x: char) -> bool {
    x.is_ascii_alphanumeric() || x == '_' || x == ':'
}

/// The metric names a PromQL expression reads: its bare identifiers that
/// are neither functions (followed by `(`), nor aggregations or keywords,
/// nor label names (`by (...)`, `on (...)`, ...), nor inside label
/// matchers (`{...}`), strings, ranges (`[...]`), numbers, durations or
/// Grafana variables (`$__rate_interval`, `${x}`).
fn metric_names(expr: &str) -> Result<Vec<String>, String> {
    let c: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let x = c[i];
        if x.is_whitespace() {
            i += 1;
        } else if x == '#' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if matches!(x, '"' | '\'' | '`') {
            i = skip_string(&c, i)?;
        } else if x == '{' {
            let (j, inner) = skip_bracket(&c, i, '}')?;
            if inner.contains("__name__") {
                return Err("a metric named by __name__: name it outside the braces".into());
            }
            i = j;
        } else if x == '[' {
            i = skip_bracket(&c, i, ']')?.0;
        } else if x == '$' {
            i += 1;
            if i < c.len() && c[i] == '{' {
                i = skip_bracket(&c, i, '}')?.0;
            } else {
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
            }
        } else if x.is_ascii_digit() || (x == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // Numbers and durations: 0.99, 1e3, 0x1f, 5m, 1h30m.
            while i < c.len() && (is_ident(c[i]) || c[i] == '.') {
                i += 1;
            }
        } else if is_ident_start(x) {
            let start = i;
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let mut k = i;
            while k < c.len() && c[k].is_whitespace() {
                k += 1;
            }
            let call = c.get(k) == Some(&'(');
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                if call {
                    i = skip_bracket(&c, k, ')')?.0;
                }
            } else if call || KEYWORDS.contains(&lower.as_str()) {
                // A function or an aggregation, or an operator.
            } else {
                out.push(word);
            }
        } else {
            i += 1;
        }
    }
    Ok(out)
}

/// A Grafana variable query: `label_values(SELECTOR, label)` reads
/// SELECTOR (`label_values(label)` reads no metric); anything else is
/// PromQL.
fn variable_query_expr(query: &str) -> String {
    let q = query.trim();
    if let Some(inner) = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return match inner.rfind(',') {
            Some(comma) => inner[..comma].to_owned(),
            None => String::new(),
        };
    }
    for f in ["query_result(", "metrics("] {
        if let Some(inner) = q.strip_prefix(f).and_then(|r| r.strip_suffix(')')) {
            return if f == "metrics(" {
                String::new()
            } else {
                inner.to_owned()
            };
        }
    }
    q.to_owned()
}

/// Problems with the metric names in `expr`, said as `where`.
fn check_expr(
    file: &str,
    at: &str,
    expr: &str,
    exported: &BTreeMap<String, String>,
    used: &mut BTreeSet<String>,
) -> Vec<String> {
    let names = match metric_names(expr) {
        Ok(n) => n,
        Err(e) => return vec![format!("{file}: {at}: cannot read `{expr}`: {e}")],
    };
    let mut problems = Vec::new();
    if names.is_empty() {
        problems.push(format!("{file}: {at}: `{expr}` reads no metric"));
    }
    for n in names {
        if let Some(family) = exported.get(&n) {
            used.insert(family.clone());
        } else if n.starts_with("accord_") {
            problems.push(format!(
                "{file}: {at}: {n} is not a metric accordd exports (expr `{expr}`)"
            ));
        } else if !OTHERS.contains(&n.as_str()) {
            problems.push(format!(
                "{file}: {at}: {n} is neither accordd's nor one of {OTHERS:?} (expr `{expr}`)"
            ));
        }
    }
    problems
}

/// Every `expr` in the dashboard JSON, with the panel it is in.
fn dashboard_exprs(v: &Value, panel: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            let here = match (m.get("type"), m.get("title")) {
                (Some(Value::String(t)), Some(Value::String(title))) => {
                    format!("panel {title:?} ({t})")
                }
                _ => panel.to_owned(),
            };
            for (k, child) in m {
                match (k.as_str(), child) {
                    ("expr", Value::String(e)) => out.push((here.clone(), e.clone())),
                    _ => dashboard_exprs(child, &here, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, panel, out)),
        _ => {}
    }
}

/// Every panel, rows' nested panels included.
fn all_panels(panels: &[Value]) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in panels {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(all_panels(inner));
        }
    }
    out
}

/// Problems with datasource references: each must be the `${datasource}`
/// variable, never a uid of one Grafana's.
fn datasource_refs(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{path}.{k}");
                if k == "datasource" {
                    let uid = match child {
                        Value::String(s) => Some(s.as_str()),
                        Value::Object(o) => o.get("uid").and_then(Value::as_str),
                        Value::Null => None,
                        _ => Some("?"),
                    };
                    if !matches!(uid, Some("${datasource}") | Some("$datasource")) {
                        out.push(format!(
                            "{DASHBOARD}: {p}: datasource {child} is not the ${{datasource}} variable"
                        ));
                    }
                }
                datasource_refs(child, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                datasource_refs(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_dashboard_reads_only_what_accordd_exports_and_shows_all_of_it() {
    let (exported, families) = exported();
    let text = read(DASHBOARD);
    let dash: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    let mut problems = Vec::new();

    // Importable as is: no inputs to map, one Prometheus data-source
    // variable that every query goes through.
    let schema = dash["schemaVersion"].as_u64().unwrap_or(0);
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    assert!(dash["id"].is_null(), "a dashboard id is Grafana's to give");
    assert!(dash["title"].is_string() && dash["uid"].is_string());
    assert!(dash.get("__inputs").is_none() && !text.contains("${DS_"));
    let vars = dash["templating"]["list"].as_array().expect("templating");
    let ds = &vars[0];
    assert_eq!(ds["name"], "datasource", "the first variable");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    datasource_refs(&dash, "$", &mut problems);

    // Panels: unique ids, a place, queries through the variable.
    let panels = all_panels(dash["panels"].as_array().expect("panels"));
    let mut ids = BTreeSet::new();
    for p in &panels {
        let title = p["title"].as_str().unwrap_or("?");
        if !ids.insert(p["id"].as_u64().expect("a panel id")) {
            problems.push(format!("{DASHBOARD}: panel {title:?}: id used twice"));
        }
        for k in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][k].is_u64(), "panel {title:?}: gridPos.{k}");
        }
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if targets.is_empty() {
            problems.push(format!("{DASHBOARD}: panel {title:?}: no query"));
        }
        for t in targets {
            if t["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
                problems.push(format!(
                    "{DASHBOARD}: panel {title:?}: a target without expr"
                ));
            }
        }
    }
    // Nested rows' panels count too.
    assert!(
        panels.len() > dash["panels"].as_array().unwrap().len(),
        "the collapsed row's panels are checked"
    );

    let mut used = BTreeSet::new();
    let mut exprs = Vec::new();
    dashboard_exprs(&dash["panels"], "", &mut exprs);
    dashboard_exprs(&dash["annotations"], "annotations", &mut exprs);
    let targets: usize = panels
        .iter()
        .map(|p| p["targets"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(exprs.len(), targets, "every target's expr is found");
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let name = v["name"].as_str().unwrap_or("?");
        for q in [&v["query"], &v["query"]["query"], &v["definition"]] {
            if let Some(q) = q.as_str().filter(|q| !q.is_empty()) {
                exprs.push((format!("variable ${name}"), variable_query_expr(q)));
            }
        }
    }
    for (at, expr) in &exprs {
        problems.extend(check_expr(DASHBOARD, at, expr, &exported, &mut used));
    }
    for family in families.keys() {
        if !used.contains(family) {
            problems.push(format!(
                "{DASHBOARD}: accordd exports {family} ({}), no panel shows it",
                families[family]
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// GitHub's anchors of a Markdown file's headings (code blocks skipped).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.insert(slug);
    }
    out
}

fn yaml(rel: &str) -> Value {
    serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn is_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

#[test]
fn the_alerts_read_only_what_accordd_exports_and_say_what_to_do() {
    let (exported, _) = exported();
    let rules = yaml(RULES);
    let runbook = anchors(&read(RUNBOOK));
    let mut problems = Vec::new();
    let mut alerts = BTreeSet::new();
    let mut used = BTreeSet::new();
    let groups = rules["groups"].as_array().expect("groups:");
    assert!(!groups.is_empty());
    for g in groups {
        let group = g["name"].as_str().expect("a group name");
        for r in g["rules"].as_array().expect("rules:") {
            let Some(name) = r["alert"].as_str().or(r["record"].as_str()) else {
                problems.push(format!(
                    "{RULES}: group {group}: a rule without alert or record"
                ));
                continue;
            };
            let at = format!("alert {name}");
            let expr = r["expr"].as_str().unwrap_or_default();
            problems.extend(check_expr(RULES, &at, expr, &exported, &mut used));
            if r["record"].is_string() {
                continue;
            }
            if !alerts.insert(name.to_owned()) {
                problems.push(format!("{RULES}: {at}: named twice"));
            }
            if !r["for"].as_str().is_some_and(is_duration) {
                problems.push(format!("{RULES}: {at}: no `for:` duration"));
            }
            if !matches!(
                r["labels"]["severity"].as_str(),
                Some("critical" | "warning" | "info")
            ) {
                problems.push(format!(
                    "{RULES}: {at}: labels.severity not critical, warning or info"
                ));
            }
            for a in ["summary", "description"] {
                if r["annotations"][a]
                    .as_str()
                    .is_none_or(|s| s.trim().is_empty())
                {
                    problems.push(format!("{RULES}: {at}: no annotations.{a}"));
                }
            }
            match r["annotations"]["runbook_url"]
                .as_str()
                .and_then(|u| u.strip_prefix(&format!("{RUNBOOK}#")))
            {
                Some(anchor) if runbook.contains(anchor) => {}
                Some(anchor) => problems.push(format!(
                    "{RULES}: {at}: runbook {RUNBOOK}#{anchor}: no such section"
                )),
                None => problems.push(format!(
                    "{RULES}: {at}: annotations.runbook_url is not {RUNBOOK}#SECTION"
                )),
            }
        }
    }
    for a in REQUIRED_ALERTS {
        if !alerts.contains(*a) {
            problems.push(format!("{RULES}: no alert {a}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));

    // The PrometheusRule carries the same rules.
    let op = yaml(RULES_OPERATOR);
    assert_eq!(op["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(op["kind"], "PrometheusRule");
    assert!(op["metadata"]["name"].is_string());
    assert!(
        op["spec"] == rules,
        "{RULES_OPERATOR}'s spec differs from {RULES}: edit both"
    );
}

#[test]
fn metric_names_skip_what_is_not_a_metric() {
    let names = |e: &str| metric_names(e).unwrap();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (job, le) (rate(accord_planner_duration_seconds_bucket{job=~"$job", x="accord_no"}[$__rate_interval] offset 5m)))"#
        ),
        ["accord_planner_duration_seconds_bucket"]
    );
    assert_eq!(
        names(
            "sum without (node) (accord_node_drift) and on (instance) group_left (pod) (accord_ha_leading == bool 1) # accord_comment"
        ),
        ["accord_node_drift", "accord_ha_leading"]
    );
    assert_eq!(
        names("count_values(\"v\", accord_nodes) or absent(up{job='a\\'}'}) / ${x}"),
        ["accord_nodes", "up"]
    );
    assert_eq!(
        names("topk(3, max_over_time(accord_nodes[1h:5m])) > 1e3"),
        ["accord_nodes"]
    );
    assert!(metric_names(r#"{__name__="accord_nodes"}"#).is_err());
    assert_eq!(
        variable_query_expr("label_values(accord_ha_leading{x=\"a,b\"}, job)"),
        "accord_ha_leading{x=\"a,b\"}"
    );
    assert_eq!(variable_query_expr("label_values(job)"), "");
    let (exported, _) = exported();
    let mut used = BTreeSet::new();
    // The family's own name of a counter is not exported; `_total` is.
    assert_eq!(
        check_expr("f", "p", "rate(accord_actions[5m])", &exported, &mut used).len(),
        1
    );
    assert!(check_expr(
        "f",
        "p",
        "rate(accord_actions_total[5m])",
        &exported,
        &mut used
    )
    .is_empty());
    assert_eq!(
        check_expr(
            "f",
            "p",
            "accord_planner_duration_seconds",
            &exported,
            &mut used
        )
        .len(),
        1
    );
    assert!(is_duration("1h30m") && is_duration("5m") && !is_duration("5") && !is_duration("m"));
}
