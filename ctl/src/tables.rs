//! The text tables of `accordctl nodes` and `node`.

use accord_api::control::ModelSource;

/// "12s ago", "5m ago", "3h ago", "2d ago".
pub(super) fn age(now: u64, then: u64) -> String {
    let s = now.saturating_sub(then);
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}m ago", s / 60),
        7200..=172_799 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

/// A node's BIOS profile in `accordctl nodes`: `gpu-perf` (applied and
/// verified by Accord), `gpu-perf (declared)` (the fleet file says so),
/// `gpu-perf staged`, `gpu-perf pending`, `gpu-perf FAILED`; `-` for none.
pub(super) fn bios_cell(b: Option<&accord_api::control::BiosStatus>) -> String {
    use accord_api::control::BiosState;
    let Some(b) = b else {
        return "-".to_owned();
    };
    let wanted = b.wanted.as_deref().or(b.applied.as_deref()).unwrap_or("-");
    match b.state {
        BiosState::Applied if b.verified_at.is_some() => wanted.to_owned(),
        BiosState::Applied => format!("{wanted} (declared)"),
        BiosState::Staged => format!("{wanted} staged"),
        BiosState::Pending => format!("{wanted} pending"),
        BiosState::Failed => format!("{wanted} FAILED"),
    }
}

pub(super) fn nodes_table(nodes: &[accord_api::nodes::NodeView], now: u64) -> String {
    render_rows(nodes.iter().map(|n| node_row(n, now)).collect())
}

/// A row of the nodes table per node: what a listing keeps of a page.
pub(super) type NodeRow = [String; 9];

/// The table of `rows`, under its header, columns as wide as their cells.
pub(super) fn render_rows(nodes: Vec<NodeRow>) -> String {
    let mut rows = vec![[
        "NAME",
        "RACK",
        "GPUS",
        "MIG",
        "LAST SEEN",
        "STATE",
        "PLANNED WITH",
        "BIOS",
        "DRIFT",
    ]
    .map(str::to_owned)];
    rows.extend(nodes);
    let widths: Vec<usize> = (0..9)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One node's row.
pub(super) fn node_row(n: &accord_api::nodes::NodeView, now: u64) -> NodeRow {
    {
        let hw = &n.record.hardware;
        let mut models: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for g in &hw.gpus {
            *models
                .entry(g.model.as_deref().unwrap_or("unknown"))
                .or_insert(0) += 1;
        }
        let gpus = if models.is_empty() {
            "-".to_owned()
        } else {
            models
                .iter()
                .map(|(m, c)| format!("{c}× {m}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mig: usize = hw
            .gpus
            .iter()
            .filter_map(|g| g.mig.as_ref())
            .map(|m| m.gpu_instances.len())
            .sum();
        [
            n.record.name.clone(),
            n.rack.clone().unwrap_or_else(|| "-".to_owned()),
            gpus,
            if mig == 0 {
                "-".to_owned()
            } else {
                format!("{mig} instances")
            },
            age(now, n.record.last_seen),
            format!("{:?}", n.state).to_lowercase(),
            match n.model {
                Some(ModelSource::Reported) => "report",
                Some(ModelSource::Declared) => "declaration",
                Some(ModelSource::Held) => "held (drift)",
                None => "-",
            }
            .to_owned(),
            bios_cell(n.bios.as_ref()),
            if n.drift.is_empty() {
                "-".to_owned()
            } else {
                n.drift
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        ]
    }
}
