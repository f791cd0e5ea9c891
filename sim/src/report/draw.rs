//! What every chart shares: the SVG canvas, fonts, grid, the policy
//! palette, the legend beside the plot and an axis with chosen ticks.

use std::ops::Range;

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::format::trim_number;
use crate::figures::Figures;

pub(super) type DrawError = Box<dyn std::error::Error>;
pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

pub(super) const FONT: &str = "sans-serif";
pub(super) const WIDTH: u32 = 1120;
pub(super) const LEGEND_WIDTH: u32 = 250;
pub(super) const TEXT: RGBColor = RGBColor(0x1D, 0x23, 0x2B);
pub(super) const MUTED: RGBColor = RGBColor(0x5A, 0x64, 0x70);
pub(super) const GRID_BOLD: RGBColor = RGBColor(0xD5, 0xDA, 0xE0);
pub(super) const GRID_LIGHT: RGBColor = RGBColor(0xEE, 0xF1, 0xF4);

/// Tableau 10: distinct, colour-blind tolerant, readable on white.
const POLICY_COLORS: [RGBColor; 10] = [
    RGBColor(0x4E, 0x79, 0xA7),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xE1, 0x57, 0x59),
    RGBColor(0x76, 0xB7, 0xB2),
    RGBColor(0x59, 0xA1, 0x4F),
    RGBColor(0xED, 0xC9, 0x48),
    RGBColor(0xB0, 0x7A, 0xA1),
    RGBColor(0xFF, 0x9D, 0xA7),
    RGBColor(0x9C, 0x75, 0x5F),
    RGBColor(0xBA, 0xB0, 0xAC),
];

/// The colour of the policy at `index` in `Figures::policies`, in every chart.
pub(super) fn policy_color(index: usize) -> RGBColor {
    POLICY_COLORS[index % POLICY_COLORS.len()]
}

pub(super) fn policy_color_hex(index: usize) -> String {
    let RGBColor(r, g, b) = policy_color(index);
    format!("#{r:02X}{g:02X}{b:02X}")
}

pub(super) fn title_style() -> TextStyle<'static> {
    (FONT, 22).into_font().style(FontStyle::Bold).color(&TEXT)
}

pub(super) fn label_style() -> TextStyle<'static> {
    (FONT, 15).into_font().color(&MUTED)
}

pub(super) fn axis_desc_style() -> TextStyle<'static> {
    (FONT, 16).into_font().color(&TEXT)
}

/// The look every chart's axes and grid share; y labels without a
/// trailing ".0" (plotters prints f64 ticks with one).
pub(super) fn house_style<'m, 'a, 'b, 'c, X: Ranged, Y: Ranged<ValueType = f64>>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, SVGBackend<'c>>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, SVGBackend<'c>> {
    mesh.label_style(label_style())
        .axis_desc_style(axis_desc_style())
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .max_light_lines(1)
        .y_label_formatter(&axis_label)
}

pub(super) fn axis_label(value: &f64) -> String {
    trim_number(*value)
}

/// Lets a chain of `&mut` builder calls go through a function.
pub(super) trait Apply: Sized {
    fn apply<R>(self, f: impl FnOnce(Self) -> R) -> R {
        f(self)
    }
}

impl<T> Apply for &mut T {}

/// Draws one SVG of `width`×`height` and returns its text.
pub(super) fn svg(
    width: u32,
    height: u32,
    draw: impl FnOnce(&Area) -> Result<(), DrawError>,
) -> Result<String, String> {
    let mut buffer = String::new();
    {
        let root = SVGBackend::with_string(&mut buffer, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|error| error.to_string())?;
        draw(&root).map_err(|error| error.to_string())?;
        root.present().map_err(|error| error.to_string())?;
    }
    Ok(buffer)
}

/// "Policy" legend entries: each policy's name in its colour.
pub(super) fn policy_entries(figures: &Figures) -> Vec<(String, RGBColor)> {
    figures
        .policies
        .iter()
        .enumerate()
        .map(|(index, policy)| (one_line(&policy.name), policy_color(index)))
        .collect()
}

#[derive(Clone, Copy)]
pub(super) enum Mark {
    Line,
    Block,
}

/// A legend drawn beside the plot (so it never hides data): a heading and
/// one row per entry, plus a smaller muted row for an entry's detail
/// (what follows a newline in its label). Long labels are cut; the table
/// names policies in full.
pub(super) fn draw_legend(
    area: &Area,
    heading: &str,
    entries: &[(String, RGBColor)],
    mark: Mark,
) -> Result<(), DrawError> {
    const TOP: i32 = 52;
    let lines: Vec<(&str, Option<&str>, RGBColor)> = entries
        .iter()
        .map(|(label, color)| match label.split_once('\n') {
            Some((name, detail)) => (name, Some(detail), *color),
            None => (label.as_str(), None, *color),
        })
        .collect();
    let row_count: usize = lines
        .iter()
        .map(|(_, detail, _)| 1 + usize::from(detail.is_some()))
        .sum();
    // Rows close up when many entries would run past the bottom.
    let (_, height) = area.dim_in_pixel();
    let room = i32::try_from(height)
        .unwrap_or(i32::MAX)
        .saturating_sub(TOP + 40);
    let rows = i32::try_from(row_count).unwrap_or(i32::MAX).max(1);
    let row_height = (room / rows).clamp(12, 24);
    let heading_style = (FONT, 17).into_font().style(FontStyle::Bold).color(&TEXT);
    area.draw(&Text::new(heading.to_owned(), (10, TOP), heading_style))?;
    let anchor = Pos::new(HPos::Left, VPos::Center);
    let name_style = (FONT, 16).into_font().color(&TEXT).pos(anchor);
    let detail_style = (FONT, 14).into_font().color(&MUTED).pos(anchor);
    let mut y = TOP + 30;
    for (name, detail, color) in lines {
        match mark {
            Mark::Line => area.draw(&PathElement::new(
                vec![(10, y), (36, y)],
                color.stroke_width(3),
            ))?,
            Mark::Block => {
                area.draw(&Rectangle::new([(14, y - 7), (30, y + 7)], color.filled()))?
            }
        }
        area.draw(&Text::new(cut(name, 26), (44, y), name_style.clone()))?;
        y = y.saturating_add(row_height);
        if let Some(detail) = detail {
            area.draw(&Text::new(
                cut(detail, 30),
                (44, y - 4),
                detail_style.clone(),
            ))?;
            y = y.saturating_add(row_height);
        }
    }
    Ok(())
}

/// `name` on one line: a newline in a legend label starts its detail row.
pub(super) fn one_line(name: &str) -> String {
    name.replace(['\n', '\r'], " ")
}

/// `text` cut to `max` characters with an ellipsis.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

pub(super) fn split_legend<'a>(root: &Area<'a>) -> (Area<'a>, Area<'a>) {
    let (width, _) = root.dim_in_pixel();
    root.split_horizontally(width.saturating_sub(LEGEND_WIDTH))
}

pub(super) fn note_style() -> TextStyle<'static> {
    (FONT, 17)
        .into_font()
        .color(&MUTED)
        .pos(Pos::new(HPos::Center, VPos::Center))
}

/// A linear f64 axis with ticks where we say (plotters' own
/// `WithKeyPoints` loses the f64 label formatter).
#[derive(Clone)]
pub(super) struct TickAxis {
    range: Range<f64>,
    ticks: Vec<f64>,
}

impl TickAxis {
    /// `range` must be non-empty and finite; callers build it that way.
    pub(super) fn new(range: Range<f64>, ticks: Vec<f64>) -> TickAxis {
        TickAxis { range, ticks }
    }
}

impl Ranged for TickAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        let fraction = (value - self.range.start) / span;
        // Keep far-off values near the plot instead of at i32::MAX.
        let fraction = if fraction.is_finite() {
            fraction.clamp(-1.0, 2.0)
        } else {
            0.0
        };
        (f64::from(limit.0) + fraction * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// An axis of named categories at 0, 1, 2, ….
pub(super) fn category_axis(count: usize) -> TickAxis {
    let centers: Vec<f64> = (0..count).map(|index| index as f64).collect();
    TickAxis::new(-0.5..(count.max(1) as f64 - 0.5), centers)
}

pub(super) fn category_name(names: &[String], value: f64) -> String {
    let index = value.round();
    if index >= 0.0 && (index as usize) < names.len() {
        names[index as usize].clone()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_repeat_after_the_palette() {
        assert_eq!(policy_color_hex(0), "#4E79A7");
        assert_eq!(policy_color_hex(10), policy_color_hex(0));
    }

    #[test]
    fn cut_keeps_short_text_and_marks_a_cut() {
        assert_eq!(cut("first-fit", 12), "first-fit");
        assert_eq!(cut("abcdefghij", 5), "abcd…");
        assert_eq!(one_line("a\nb"), "a b");
    }
}
