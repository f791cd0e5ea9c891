//! The x axes that carry time: the run's clock (minutes, hours or days by
//! the horizon) and the time to running (linear in a readable unit, or
//! logarithmic when it spans orders of magnitude).

use crate::figures::{ClassCdf, Figures};

use super::format::{tick_duration, trim_number};

/// The x axis of the time series: hours or days by the horizon (minutes
/// for runs under two hours).
pub(super) struct TimeAxis {
    pub(super) seconds_per_unit: f64,
    pub(super) description: &'static str,
    pub(super) end: f64,
}

impl TimeAxis {
    pub(super) fn of(figures: &Figures) -> TimeAxis {
        let last_sample = figures
            .policies
            .iter()
            .flat_map(|policy| policy.series.iter().map(|sample| sample.t_s))
            .max()
            .unwrap_or(0);
        let horizon_s = figures.inputs.horizon_s.max(last_sample) as f64;
        let (seconds_per_unit, description) = if horizon_s > 3.0 * 86_400.0 {
            (86_400.0, "time since start (days)")
        } else if horizon_s >= 2.0 * 3600.0 {
            (3600.0, "time since start (hours)")
        } else {
            (60.0, "time since start (minutes)")
        };
        TimeAxis {
            seconds_per_unit,
            description,
            end: upper_bound((horizon_s / seconds_per_unit).min(PLOT_LIMIT), 1.0),
        }
    }

    pub(super) fn at(&self, t_s: u64) -> f64 {
        t_s as f64 / self.seconds_per_unit
    }

    /// Whether the sample at `t_s` lies on the axis (not past an end that
    /// was capped at the plot limit).
    pub(super) fn covers(&self, t_s: u64) -> bool {
        self.at(t_s) <= self.end
    }
}

/// The largest magnitude drawn. Beyond it a value is left out: plotters
/// loops for ever finding ticks on a range near f64::MAX, and no fleet
/// has a trillion of anything.
const PLOT_LIMIT: f64 = 1e12;

/// Whether `value` can be drawn: finite and not absurdly large.
pub(super) fn plottable(value: f64) -> bool {
    value.is_finite() && value.abs() <= PLOT_LIMIT
}

/// `max` if it is a positive number, else `fallback`: an axis end that
/// leaves a non-empty range.
pub(super) fn upper_bound(max: f64, fallback: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max
    } else {
        fallback
    }
}

pub(super) fn finite_max(values: impl Iterator<Item = f64>) -> f64 {
    values.filter(|value| plottable(*value)).fold(0.0, f64::max)
}

/// How the CDF's x axis shows seconds: a linear axis in s, min or h, or a
/// logarithmic one when the times span three orders of magnitude or more.
pub(super) struct DurationAxis {
    pub(super) log: bool,
    pub(super) seconds_per_unit: f64,
    pub(super) description: String,
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) ticks: Vec<f64>,
}

impl DurationAxis {
    pub(super) fn of(cdfs: &[&ClassCdf]) -> DurationAxis {
        let seconds = || {
            cdfs.iter()
                .flat_map(|cdf| cdf.points.iter().map(|point| point[0]))
                .filter(|s| plottable(*s) && *s >= 0.0)
        };
        let max = seconds().fold(0.0, f64::max);
        let min_positive = seconds().filter(|s| *s > 0.0).fold(f64::INFINITY, f64::min);
        if min_positive.is_finite() && max / min_positive >= 1000.0 {
            // Ticks at durations people read at a glance.
            const TICKS_S: [f64; 12] = [
                0.01,
                0.1,
                1.0,
                10.0,
                60.0,
                600.0,
                3600.0,
                36_000.0,
                86_400.0,
                864_000.0,
                8_640_000.0,
                86_400_000.0,
            ];
            let start = (min_positive / 1.5).log10();
            let end = (max * 1.5).log10();
            let ticks = TICKS_S
                .iter()
                .map(|tick| tick.log10())
                .filter(|tick| (start..=end).contains(tick))
                .collect();
            return DurationAxis {
                log: true,
                seconds_per_unit: 1.0,
                description: "time from submission to running (log scale)".to_owned(),
                start,
                end,
                ticks,
            };
        }
        let (seconds_per_unit, unit) = if max < 120.0 {
            (1.0, "s")
        } else if max < 2.0 * 3600.0 {
            (60.0, "min")
        } else if max < 72.0 * 3600.0 {
            (3600.0, "h")
        } else {
            (86_400.0, "days")
        };
        let end = upper_bound(max / seconds_per_unit * 1.05, 1.0);
        DurationAxis {
            log: false,
            seconds_per_unit,
            description: format!("time from submission to running ({unit})"),
            start: 0.0,
            end,
            ticks: linear_ticks(end),
        }
    }

    /// Where `seconds` lies on the axis (the axis's start for zero on a
    /// log axis: those workloads ran at once).
    pub(super) fn at(&self, seconds: f64) -> f64 {
        if self.log {
            if seconds > 0.0 {
                seconds.log10().max(self.start)
            } else {
                self.start
            }
        } else {
            seconds / self.seconds_per_unit
        }
    }

    pub(super) fn label(&self, value: f64) -> String {
        if self.log {
            tick_duration(10_f64.powf(value))
        } else {
            trim_number(value)
        }
    }
}

/// About eight ticks at 1, 2 or 5 × 10ⁿ from 0 to `end`.
pub(super) fn linear_ticks(end: f64) -> Vec<f64> {
    if !(end.is_finite() && end > 0.0) {
        return vec![0.0];
    }
    let rough = end / 8.0;
    let power = 10_f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|multiple| multiple * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power);
    (0..=10)
        .map(|index| index as f64 * step)
        .filter(|tick| *tick <= end)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::Class;

    #[test]
    fn linear_ticks_are_round_and_within_range() {
        assert_eq!(linear_ticks(10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(linear_ticks(f64::NAN), vec![0.0]);
        assert!(linear_ticks(0.37).iter().all(|tick| *tick <= 0.37));
    }

    #[test]
    fn log_axis_for_times_over_three_orders_of_magnitude() {
        let cdf = ClassCdf {
            class: Class::Single,
            started: 3,
            never_started: 0,
            points: vec![[0.0, 0.2], [2.0, 0.5], [7200.0, 1.0]],
        };
        let axis = DurationAxis::of(&[&cdf]);
        assert!(axis.log);
        let labels: Vec<String> = axis.ticks.iter().map(|tick| axis.label(*tick)).collect();
        assert_eq!(labels, ["10 s", "1 min", "10 min", "1 h"]);
        // Zero sits at the axis's start, not at minus infinity.
        assert_eq!(axis.at(0.0), axis.start);

        let short = ClassCdf {
            points: vec![[30.0, 0.5], [600.0, 1.0]],
            ..cdf
        };
        let axis = DurationAxis::of(&[&short]);
        assert!(!axis.log);
        assert_eq!(axis.seconds_per_unit, 60.0);
    }

    #[test]
    fn time_axis_unit_follows_the_horizon() {
        let figures = |horizon_s| Figures {
            seed: 0,
            inputs: crate::figures::Inputs {
                fleet: String::new(),
                trace: String::new(),
                nodes: 0,
                gpus: 0,
                workloads: 0,
                horizon_s,
                round_s: 30,
                bmc_delay_s: [0, 0],
                boot_delay_s: [0, 0],
            },
            policies: Vec::new(),
        };
        let week = TimeAxis::of(&figures(7 * 86_400));
        assert_eq!((week.seconds_per_unit, week.end), (86_400.0, 7.0));
        let two_days = TimeAxis::of(&figures(48 * 3600));
        assert_eq!((two_days.seconds_per_unit, two_days.end), (3600.0, 48.0));
        // Nothing simulated: still a non-empty axis.
        let none = TimeAxis::of(&figures(0));
        assert!(none.end > 0.0);
    }
}
