//! The trade-off chart: each policy's wait (p50, p95) against what it
//! powered (GPU-hours, kWh), and the front of the policies no other beats
//! on both p95 and power.

use plotters::prelude::*;

use super::axes::{finite_max, plottable, upper_bound};
use super::draw::{
    axis_label, draw_legend, house_style, note_style, policy_color, policy_entries, split_legend,
    svg, title_style, Apply, DrawError, Mark, WIDTH,
};
use crate::figures::Figures;

/// One policy's point: (power, p50, p95), where it ran anything.
type Point = (usize, f64, f64, f64);

pub(super) fn trade_off(figures: &Figures) -> Result<String, String> {
    let by = |power: fn(&crate::figures::Summary) -> f64| -> Vec<Point> {
        figures
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let s = &p.summary;
                let (p50, p95) = (s.p50_time_to_running_s?, s.p95_time_to_running_s?);
                let x = power(s);
                (plottable(x) && plottable(p50) && plottable(p95)).then_some((i, x, p50, p95))
            })
            .collect()
    };
    let gpu_hours = by(|s| s.gpu_hours_powered);
    let energy = by(|s| s.energy_kwh);
    let y_end = upper_bound(finite_max(gpu_hours.iter().map(|p| p.3)) * 1.1, 1.0);
    svg(WIDTH, 460, |root| {
        let (plot, legend) = split_legend(root);
        let (title, panels) = plot.split_vertically(40);
        title.titled("The trade-off: waiting against power", title_style())?;
        let (left, right) = panels.split_horizontally(panels.dim_in_pixel().0 / 2);
        panel(&left, &gpu_hours, "GPU-hours powered", y_end)?;
        panel(&right, &energy, "energy (kWh)", y_end)?;
        draw_legend(&legend, "Policy", &policy_entries(figures), Mark::Block)
    })
}

fn panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    points: &[Point],
    x_desc: &str,
    y_end: f64,
) -> Result<(), DrawError> {
    let x_max = finite_max(points.iter().map(|p| p.1));
    let x_min = points.iter().map(|p| p.1).fold(x_max, f64::min);
    let pad = ((x_max - x_min) * 0.15).max(x_max * 0.05).max(1.0);
    let (x_start, x_end) = ((x_min - pad).max(0.0), x_max + pad);
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(54)
        .y_label_area_size(72)
        .build_cartesian_2d(x_start..x_end, 0.0..y_end)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .x_label_formatter(&axis_label)
        .y_desc("submission → running (s)")
        .apply(house_style)
        .draw()?;
    if points.is_empty() {
        chart.plotting_area().draw(&Text::new(
            "no policy ran a workload",
            ((x_start + x_end) / 2.0, y_end / 2.0),
            note_style(),
        ))?;
        return Ok(());
    }
    chart.draw_series(LineSeries::new(
        front(points),
        ShapeStyle::from(&RGBColor(0x5A, 0x64, 0x70)).stroke_width(1),
    ))?;
    for &(i, x, p50, p95) in points {
        let colour = policy_color(i);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, p50.min(y_end)), (x, p95.min(y_end))],
            colour.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Circle::new(
            (x, p95.min(y_end)),
            6,
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(Circle::new(
            (x, p50.min(y_end)),
            6,
            colour.stroke_width(2),
        )))?;
    }
    Ok(())
}

/// The points no other beats on both power and p95 (lower is better on
/// each), by power: the Pareto front.
fn front(points: &[Point]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<(f64, f64)> = points.iter().map(|p| (p.1, p.3)).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (x, y) in sorted {
        if out.last().is_none_or(|&(_, best)| y < best) {
            out.push((x, y));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_keeps_what_nothing_beats_on_both() {
        // b is beaten by a (less power, less wait); c waits least.
        let points = [
            (0, 100.0, 10.0, 400.0),
            (1, 150.0, 10.0, 450.0),
            (2, 300.0, 10.0, 200.0),
            (3, 200.0, 10.0, 300.0),
        ];
        assert_eq!(
            front(&points),
            [(100.0, 400.0), (200.0, 300.0), (300.0, 200.0)]
        );
    }
}
