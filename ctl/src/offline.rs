//! What works on files alone: manifests translated, and `simulate`.

use super::*;

/// Reads manifests from every file and translates them together (claims
/// in one file may serve pods in another).
pub(super) fn translate_files(
    files: &[PathBuf],
    topology: &accord::fleet::TopologyConfig,
) -> anyhow::Result<accord_kube::Translation> {
    let mut all = accord_kube::Manifests::default();
    for f in files {
        all.extend(accord_kube::Manifests::parse(
            &read(f)?,
            &f.display().to_string(),
        )?);
    }
    let options = accord_kube::Options::for_topology(topology);
    Ok(accord_kube::translate(&all, &options))
}

pub(super) fn simulate(args: &crate::simulate::SimulateArgs, json: bool) -> anyhow::Result<()> {
    let done = crate::simulate::run(args)?;
    let f = &done.figures;
    if json {
        let summary = serde_json::json!({
            "report": done.report,
            "figures": done.json,
            "elapsed_s": (done.elapsed_s * 1000.0).round() / 1000.0,
            "nodes": f.inputs.nodes,
            "workloads": f.inputs.workloads,
            "policies": f.policies.iter().map(|p| serde_json::json!({
                "name": p.name,
                "summary": p.summary,
            })).collect::<Vec<_>>(),
        });
        accord_api::terminal::print_json(&summary)?;
        return Ok(());
    }
    accord_api::sayln!(
        "simulated {} workloads on {} nodes ({} GPUs), {:.1} h of virtual time, {} polic{} in {:.1} s",
        f.inputs.workloads,
        f.inputs.nodes,
        f.inputs.gpus,
        f.inputs.horizon_s as f64 / 3600.0,
        f.policies.len(),
        if f.policies.len() == 1 { "y" } else { "ies" },
        done.elapsed_s
    );
    accord_api::sayln!(
        "{:<16} {:>9} {:>7} {:>7} {:>8} {:>9} {:>8} {:>8} {:>13} {:>12} {:>10}",
        "POLICY",
        "POWER-ONS",
        "CYCLES",
        "UNUSED",
        "STARTED",
        "MEAN(s)",
        "P50(s)",
        "P95(s)",
        "POWERED GPU-H",
        "WASTED GPU-H",
        "kWh"
    );
    for p in &f.policies {
        let s = &p.summary;
        let secs = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.0}"));
        accord_api::sayln!(
            "{:<16} {:>9} {:>7} {:>7} {:>8} {:>9} {:>8} {:>8} {:>13.1} {:>12.1} {:>10.1}",
            p.name,
            s.power_ons,
            s.power_cycles,
            s.unused_power_ons,
            format!("{}/{}", s.started, s.workloads),
            secs(s.mean_time_to_running_s),
            secs(s.p50_time_to_running_s),
            secs(s.p95_time_to_running_s),
            s.gpu_hours_powered,
            s.gpu_hours_wasted,
            s.energy_kwh
        );
    }
    for p in f.policies.iter().filter(|p| p.summary.evictions > 0) {
        accord_api::sayln!(
            "{}: {} running workloads evicted from lent reserved nodes for their owners, started again",
            p.name,
            p.summary.evictions
        );
    }
    accord_api::sayln!("report: {}", done.report.display());
    accord_api::sayln!("figures: {}", done.json.display());
    Ok(())
}
