//! The report's charts: SVG strings drawn with plotters. Each policy keeps
//! its colour in every chart; every value is checked finite before it is
//! drawn (plotters maps NaN to a pixel without complaint), and every range
//! is made non-empty so no axis divides by zero.

use std::collections::BTreeSet;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{finite_max, plottable, upper_bound, DurationAxis, TimeAxis};
use super::draw::{
    axis_label, category_axis, category_name, cut, draw_legend, house_style, note_style, one_line,
    policy_color, policy_entries, split_legend, svg, title_style, Apply, DrawError, Mark, TickAxis,
    FONT, TEXT, WIDTH,
};
use super::format::compact;
use crate::figures::{Class, ClassCdf, Figures, NodesByStage};

/// Stages as stacked bottom to top: busy nodes at the bottom, then the rest
/// of the powered-up capacity, transitions and failures on top.
const STAGES: [(&str, RGBColor); 6] = [
    ("in use", RGBColor(0x21, 0x66, 0xAC)),
    ("idle", RGBColor(0x92, 0xC5, 0xDE)),
    ("booting", RGBColor(0xE0, 0x82, 0x14)),
    ("powering on", RGBColor(0xFD, 0xB8, 0x63)),
    ("powering off", RGBColor(0xB4, 0xB4, 0xB4)),
    ("failed", RGBColor(0xB2, 0x18, 0x2B)),
];

fn stage_counts(nodes: &NodesByStage) -> [u32; 6] {
    [
        nodes.in_use,
        nodes.idle,
        nodes.booting,
        nodes.powering_on,
        nodes.powering_off,
        nodes.failed,
    ]
}

/// Chart 1: pending GPUs over time, one line per policy.
pub(super) fn pending_gpus(figures: &Figures) -> Result<String, String> {
    let time = TimeAxis::of(figures);
    let y_end = upper_bound(
        finite_max(
            figures
                .policies
                .iter()
                .flat_map(|policy| policy.series.iter().map(|sample| sample.pending_gpus)),
        ) * 1.08,
        1.0,
    );
    svg(WIDTH, 420, |root| {
        let (plot, legend) = split_legend(root);
        let mut chart = ChartBuilder::on(&plot)
            .caption("Pending GPUs over time", title_style())
            .margin(12)
            .x_label_area_size(54)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..time.end, 0.0..y_end)?;
        chart
            .configure_mesh()
            .x_desc(time.description)
            .x_label_formatter(&axis_label)
            .y_desc("pending GPUs (GPUs)")
            .apply(house_style)
            .draw()?;
        if figures
            .policies
            .iter()
            .all(|policy| policy.series.is_empty())
        {
            chart.plotting_area().draw(&Text::new(
                "no samples",
                (time.end / 2.0, y_end / 2.0),
                note_style(),
            ))?;
        }
        for (index, policy) in figures.policies.iter().enumerate() {
            let points = policy
                .series
                .iter()
                .filter(|sample| plottable(sample.pending_gpus) && time.covers(sample.t_s))
                .map(|sample| (time.at(sample.t_s), sample.pending_gpus.clamp(0.0, y_end)));
            chart.draw_series(LineSeries::new(points, policy_color(index).stroke_width(2)))?;
        }
        draw_legend(&legend, "Policy", &policy_entries(figures), Mark::Line)
    })
}

/// Chart 2: nodes on by stage over time, one stacked panel per policy
/// (same scales in every panel).
pub(super) fn nodes_by_stage(figures: &Figures) -> Result<String, String> {
    const PANEL_HEIGHT: u32 = 270;
    let time = TimeAxis::of(figures);
    let policies = &figures.policies;
    let columns = if policies.len() > 1 { 2 } else { 1 };
    let rows = policies.len().div_ceil(columns).max(1);
    let y_end = upper_bound(
        finite_max(policies.iter().flat_map(|policy| {
            policy.series.iter().map(|sample| {
                stage_counts(&sample.nodes)
                    .iter()
                    .map(|&count| f64::from(count))
                    .sum::<f64>()
            })
        })) * 1.05,
        1.0,
    );
    let height = 50 + PANEL_HEIGHT.saturating_mul(u32::try_from(rows).unwrap_or(u32::MAX));
    svg(WIDTH, height, |root| {
        let (panels_area, legend) = split_legend(root);
        let panels_area = panels_area.titled("Nodes powered on, by stage", title_style())?;
        let panels = panels_area.split_evenly((rows, columns));
        for ((index, policy), panel) in policies.iter().enumerate().zip(panels.iter()) {
            let color = policy_color(index);
            let caption_style = (FONT, 18).into_font().style(FontStyle::Bold).color(&color);
            let mut chart = ChartBuilder::on(panel)
                .caption(cut(&policy.name, 60), caption_style)
                .margin(10)
                .x_label_area_size(44)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..time.end, 0.0..y_end)?;
            chart
                .configure_mesh()
                .x_desc(time.description)
                .x_label_formatter(&axis_label)
                .y_desc("nodes")
                .apply(house_style)
                .draw()?;
            if policy.series.is_empty() {
                chart.plotting_area().draw(&Text::new(
                    "no samples",
                    (time.end / 2.0, y_end / 2.0),
                    note_style(),
                ))?;
                continue;
            }
            let in_range: Vec<_> = policy
                .series
                .iter()
                .filter(|sample| time.covers(sample.t_s))
                .collect();
            let times: Vec<f64> = in_range.iter().map(|s| time.at(s.t_s)).collect();
            let counts: Vec<[u32; 6]> = in_range
                .iter()
                .map(|sample| stage_counts(&sample.nodes))
                .collect();
            let mut below = vec![0.0_f64; counts.len()];
            for (stage, (_, stage_color)) in STAGES.iter().enumerate() {
                let above: Vec<f64> = below
                    .iter()
                    .zip(&counts)
                    .map(|(base, count)| base + f64::from(count[stage]))
                    .collect();
                if counts.iter().any(|count| count[stage] > 0) {
                    // The band between the stages below and this one.
                    let outline: Vec<(f64, f64)> = times
                        .iter()
                        .copied()
                        .zip(above.iter().copied())
                        .chain(times.iter().copied().zip(below.iter().copied()).rev())
                        .collect();
                    chart.draw_series(std::iter::once(Polygon::new(
                        outline,
                        stage_color.filled(),
                    )))?;
                }
                below = above;
            }
        }
        // Top of the stack first, as the eye meets it.
        let entries: Vec<(String, RGBColor)> = STAGES
            .iter()
            .rev()
            .map(|(name, color)| ((*name).to_owned(), *color))
            .collect();
        draw_legend(&legend, "Stage", &entries, Mark::Block)
    })
}

/// Chart 3: GPU-hours powered, used and wasted (groups, one bar per
/// policy) and energy (one bar per policy), side by side.
pub(super) fn gpu_hours_and_energy(figures: &Figures) -> Result<String, String> {
    let policies = &figures.policies;
    let groups: [(&str, Vec<f64>); 3] = [
        (
            "powered",
            policies
                .iter()
                .map(|p| p.summary.gpu_hours_powered)
                .collect(),
        ),
        (
            "used",
            policies.iter().map(|p| p.summary.gpu_hours_used).collect(),
        ),
        (
            "wasted",
            policies
                .iter()
                .map(|p| p.summary.gpu_hours_wasted)
                .collect(),
        ),
    ];
    let energy: Vec<f64> = policies.iter().map(|p| p.summary.energy_kwh).collect();
    // Value labels fit above bars only when the bars are wide enough.
    let label_bars = policies.len() <= 4;
    svg(WIDTH, 440, |root| {
        let (charts_area, legend) = split_legend(root);
        let (hours_area, energy_area) = charts_area.split_horizontally(560);

        let group_names: Vec<String> = groups.iter().map(|(name, _)| (*name).to_owned()).collect();
        let all_hours = || groups.iter().flat_map(|(_, values)| values.iter().copied());
        let hours_range = value_range(all_hours());
        let mut chart = ChartBuilder::on(&hours_area)
            .caption("GPU-hours per policy", title_style())
            .margin(12)
            .x_label_area_size(54)
            .y_label_area_size(70)
            .build_cartesian_2d(category_axis(groups.len()), hours_range.0..hours_range.1)?;
        let group_label = |value: &f64| category_name(&group_names, *value);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&group_label)
            .x_desc("GPU-hours of the fleet")
            .y_desc("GPU-hours (GPU × h)")
            .apply(house_style)
            .draw()?;
        let bar_width = 0.8 / policies.len().max(1) as f64;
        for (group, (_, values)) in groups.iter().enumerate() {
            for (index, value) in values.iter().enumerate() {
                let left = group as f64 - 0.4 + index as f64 * bar_width;
                draw_bar(&mut chart, left, bar_width, *value, index, label_bars)?;
            }
        }

        let policy_names: Vec<String> = policies.iter().map(|p| cut(&p.name, 14)).collect();
        let energy_range = value_range(energy.iter().copied());
        let mut chart = ChartBuilder::on(&energy_area)
            .caption("Energy per policy", title_style())
            .margin(12)
            .x_label_area_size(54)
            .y_label_area_size(70)
            .build_cartesian_2d(
                category_axis(policies.len()),
                energy_range.0..energy_range.1,
            )?;
        let policy_label = |value: &f64| category_name(&policy_names, *value);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&policy_label)
            .x_desc("policy")
            .y_desc("energy (kWh)")
            .apply(house_style)
            .draw()?;
        for (index, value) in energy.iter().enumerate() {
            draw_bar(
                &mut chart,
                index as f64 - 0.35,
                0.7,
                *value,
                index,
                label_bars,
            )?;
        }
        draw_legend(&legend, "Policy", &policy_entries(figures), Mark::Block)
    })
}

/// A bar chart's value range: from 0 (or below, for negative values) to a
/// little above the largest value, with room for the value labels.
fn value_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|value| plottable(*value))
        .fold((0.0_f64, 0.0_f64), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    let high = if high > 0.0 { high * 1.12 } else { 0.0 };
    let low = if low < 0.0 { low * 1.12 } else { 0.0 };
    if high - low > 0.0 {
        (low, high)
    } else {
        (0.0, 1.0)
    }
}

type CategoryChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<TickAxis, RangedCoordf64>>;

fn draw_bar(
    chart: &mut CategoryChart,
    left: f64,
    width: f64,
    value: f64,
    policy_index: usize,
    with_label: bool,
) -> Result<(), DrawError> {
    if !plottable(value) {
        return Ok(());
    }
    let color = policy_color(policy_index);
    // A small gap between neighbouring bars.
    let right = left + width * 0.9;
    chart.draw_series(std::iter::once(Rectangle::new(
        [(left, 0.0), (right, value)],
        color.filled(),
    )))?;
    if with_label {
        let style = (FONT, 14)
            .into_font()
            .color(&TEXT)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        let offset = if value < 0.0 { 14 } else { -3 };
        chart.draw_series(std::iter::once(
            EmptyElement::at(((left + right) / 2.0, value))
                + Text::new(compact(value), (0, offset), style),
        ))?;
    }
    Ok(())
}

/// Workload classes that have any workload in any policy's run, in
/// `Class` order.
pub(super) fn classes_present(figures: &Figures) -> Vec<Class> {
    let classes: BTreeSet<Class> = figures
        .policies
        .iter()
        .flat_map(|policy| &policy.time_to_running)
        .filter(|cdf| cdf.started + cdf.never_started > 0 || !cdf.points.is_empty())
        .map(|cdf| cdf.class)
        .collect();
    classes.into_iter().collect()
}

pub(super) fn class_title(class: Class) -> &'static str {
    match class {
        Class::Gang => "gang",
        Class::Single => "single",
        Class::Mig => "MIG",
        Class::Shared => "shared GPU",
        Class::Cpu => "CPU only",
    }
}

pub(super) fn class_description(class: Class) -> &'static str {
    match class {
        Class::Gang => {
            "Workloads of several pods that must start together; the share of the class's started \
             workloads running within a given time of submission."
        }
        Class::Single => {
            "Workloads of one pod with whole GPUs; the share of the class's started workloads running \
             within a given time of submission."
        }
        Class::Mig => {
            "Workloads asking for MIG devices; the share of the class's started workloads running \
             within a given time of submission."
        }
        Class::Shared => {
            "Workloads asking for a share of a GPU; the share of the class's started workloads running \
             within a given time of submission."
        }
        Class::Cpu => {
            "Workloads with no GPU; the share of the class's started workloads running within a given \
             time of submission."
        }
    }
}

/// Chart 4: the CDF of submission → running for `class`, one line per policy.
pub(super) fn time_to_running(figures: &Figures, class: Class) -> Result<String, String> {
    let cdfs: Vec<Option<&ClassCdf>> = figures
        .policies
        .iter()
        .map(|policy| policy.time_to_running.iter().find(|cdf| cdf.class == class))
        .collect();
    let present: Vec<&ClassCdf> = cdfs.iter().flatten().copied().collect();
    let axis = DurationAxis::of(&present);
    let any_points = present.iter().any(|cdf| !cdf.points.is_empty());
    let entries: Vec<(String, RGBColor)> = figures
        .policies
        .iter()
        .zip(&cdfs)
        .enumerate()
        .map(|(index, (policy, cdf))| {
            let counts = match cdf {
                Some(cdf) => format!("{} ran, {} never", cdf.started, cdf.never_started),
                None => "none".to_owned(),
            };
            (
                format!("{}\n{counts}", one_line(&policy.name)),
                policy_color(index),
            )
        })
        .collect();
    let title = format!("Submission → running: {} workloads", class_title(class));
    svg(WIDTH, 420, |root| {
        let (plot, legend) = split_legend(root);
        let x_spec = TickAxis::new(axis.start..axis.end, axis.ticks.clone());
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, title_style())
            .margin(12)
            .x_label_area_size(54)
            .y_label_area_size(72)
            .build_cartesian_2d(x_spec, 0.0..CDF_TOP)?;
        let x_label = |value: &f64| axis.label(*value);
        chart
            .configure_mesh()
            .x_label_formatter(&x_label)
            .x_desc(axis.description.clone())
            .y_desc("started workloads of the class running (%)")
            .apply(house_style)
            .draw()?;
        if !any_points {
            chart.plotting_area().draw(&Text::new(
                "no workload of this class ran",
                ((axis.start + axis.end) / 2.0, 50.0),
                note_style(),
            ))?;
        }
        for (index, cdf) in cdfs.iter().enumerate() {
            let Some(cdf) = cdf else { continue };
            let steps = cdf_steps(cdf, &axis);
            chart.draw_series(LineSeries::new(steps, policy_color(index).stroke_width(2)))?;
        }
        draw_legend(&legend, "Policy", &entries, Mark::Line)
    })
}

/// A % axis's top: a little over 100 so a line at 100 % stays visible.
const CDF_TOP: f64 = 102.0;

/// The CDF as a step line in axis units: flat at 0 up to the first time,
/// up at each point, flat after the last point to the axis's end.
fn cdf_steps(cdf: &ClassCdf, axis: &DurationAxis) -> Vec<(f64, f64)> {
    let mut steps = Vec::with_capacity(cdf.points.len() * 2 + 2);
    let mut share = 0.0;
    for [seconds, point_share] in &cdf.points {
        if !(plottable(*seconds) && plottable(*point_share)) {
            continue;
        }
        let x = axis.at(seconds.max(0.0));
        steps.push((x, share));
        share = point_share.clamp(0.0, 1.0) * 100.0;
        steps.push((x, share));
    }
    if !steps.is_empty() {
        steps.push((axis.end, share));
    }
    steps
}

/// Chart 5: GPUs allocated against demand arrived, both in % of the
/// fleet's GPUs, one line per policy.
pub(super) fn allocation(figures: &Figures) -> Result<String, String> {
    let points = |index: usize| -> Vec<(f64, f64)> {
        figures.policies[index]
            .allocation
            .iter()
            .filter(|point| plottable(point.arrived * 100.0) && plottable(point.allocated * 100.0))
            .map(|point| {
                (
                    (point.arrived * 100.0).max(0.0),
                    (point.allocated * 100.0).max(0.0),
                )
            })
            .collect()
    };
    let all: Vec<Vec<(f64, f64)>> = (0..figures.policies.len()).map(points).collect();
    let x_end = upper_bound(finite_max(all.iter().flatten().map(|p| p.0)) * 1.03, 1.0);
    let y_end = (finite_max(all.iter().flatten().map(|p| p.1)) * 1.02).max(CDF_TOP);
    let no_gpus = figures.inputs.gpus == 0;
    svg(WIDTH, 440, |root| {
        let (plot, legend) = split_legend(root);
        let mut chart = ChartBuilder::on(&plot)
            .caption("GPU allocation against arrived demand", title_style())
            .margin(12)
            .x_label_area_size(54)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..x_end, 0.0..y_end)?;
        chart
            .configure_mesh()
            .x_desc("GPUs requested by work arrived so far (% of fleet GPUs)")
            .x_label_formatter(&axis_label)
            .y_desc("GPUs allocated (% of fleet GPUs)")
            .apply(house_style)
            .draw()?;
        if all.iter().all(Vec::is_empty) {
            let note = if no_gpus {
                "the fleet has no GPUs"
            } else {
                "no allocation points"
            };
            chart.plotting_area().draw(&Text::new(
                note,
                (x_end / 2.0, y_end / 2.0),
                note_style(),
            ))?;
        }
        for (index, line) in all.into_iter().enumerate() {
            chart.draw_series(LineSeries::new(line, policy_color(index).stroke_width(2)))?;
        }
        draw_legend(&legend, "Policy", &policy_entries(figures), Mark::Line)
    })
}
