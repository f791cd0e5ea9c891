//! The figures of one policy's run, from what its loop recorded: the
//! summary, time to running per class (CDFs), and the series resampled.

use std::collections::BTreeMap;

use accord::fleet::Policy;

use super::Totals;
use crate::figures::{
    round3, AllocationPoint, Class, ClassCdf, PolicyFigures, Sample, MAX_POINTS, MAX_SAMPLES,
};

#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    name: &str,
    policy: &Policy,
    totals: Totals,
    started_after: &[Option<u64>],
    classes: &[Class],
    rounds: Vec<Sample>,
    allocation: Vec<AllocationPoint>,
    horizon_s: u64,
) -> PolicyFigures {
    let mut summary = totals.summary;
    let mut all: Vec<u64> = started_after.iter().flatten().copied().collect();
    all.sort_unstable();
    summary.started = all.len() as u64;
    summary.never_started = summary.workloads - summary.started;
    if !all.is_empty() {
        summary.mean_time_to_running_s =
            Some(round3(all.iter().sum::<u64>() as f64 / all.len() as f64));
        summary.p50_time_to_running_s = Some(nearest_rank(&all, 50) as f64);
        summary.p95_time_to_running_s = Some(nearest_rank(&all, 95) as f64);
    }
    summary.gpu_hours_powered = round3(totals.powered_gpu_s / 3600.0);
    summary.gpu_hours_used = round3(totals.used_gpu_s / 3600.0);
    summary.gpu_hours_wasted =
        round3(((totals.powered_gpu_s - totals.used_gpu_s) / 3600.0).max(0.0));
    summary.energy_kwh = round3(totals.energy_kws / 3600.0);

    let mut per_class: BTreeMap<Class, (Vec<u64>, u64)> = BTreeMap::new();
    for (k, c) in classes.iter().enumerate() {
        let e = per_class.entry(*c).or_default();
        match started_after[k] {
            Some(s) => e.0.push(s),
            None => e.1 += 1,
        }
    }
    let time_to_running = per_class
        .into_iter()
        .map(|(class, (mut times, never))| {
            times.sort_unstable();
            ClassCdf {
                class,
                started: times.len() as u64,
                never_started: never,
                points: cdf(&times),
            }
        })
        .collect();
    PolicyFigures {
        name: name.to_owned(),
        policy: policy.clone(),
        summary,
        series: resample(&rounds, horizon_s),
        time_to_running,
        allocation: thin(allocation, MAX_POINTS),
    }
}

fn nearest_rank(sorted: &[u64], percent: usize) -> u64 {
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// `[seconds, share]` at most [`MAX_POINTS`] steps of the empirical CDF.
fn cdf(sorted: &[u64]) -> Vec<[f64; 2]> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(MAX_POINTS).max(1);
    let mut out: Vec<[f64; 2]> = (0..n)
        .step_by(step)
        .map(|i| [sorted[i] as f64, round3((i + 1) as f64 / n as f64)])
        .collect();
    if !(n - 1).is_multiple_of(step) {
        out.push([sorted[n - 1] as f64, 1.0]);
    }
    out
}

/// Every `n`th point, so at most `max` (the last kept).
fn thin<T: Clone>(v: Vec<T>, max: usize) -> Vec<T> {
    if v.len() <= max {
        return v;
    }
    let step = v.len().div_ceil(max);
    let last = v.last().cloned();
    let mut out: Vec<T> = v.into_iter().step_by(step).collect();
    if let Some(l) = last {
        if out.len() < max {
            out.push(l);
        } else if let Some(x) = out.last_mut() {
            *x = l;
        }
    }
    out
}

/// The state after the last round at or before each of at most
/// [`MAX_SAMPLES`] evenly spaced times.
fn resample(rounds: &[Sample], horizon_s: u64) -> Vec<Sample> {
    if rounds.is_empty() {
        return Vec::new();
    }
    let step = horizon_s.div_ceil(MAX_SAMPLES as u64 - 1).max(1);
    let mut out = Vec::new();
    let mut r = 0;
    let mut at = 0;
    while at <= horizon_s {
        while r + 1 < rounds.len() && rounds[r + 1].t_s <= at {
            r += 1;
        }
        let mut s = rounds[r].clone();
        s.t_s = at;
        out.push(s);
        at += step;
    }
    out
}
