//! Capacity ahead of demand (`policy.warm = "predictive"`): from the
//! arrivals the decider has seen, placeholders for the work likely to come
//! within `warm_lookahead_s`, planned after all real demand and never
//! bound, so the capacity they take is powered on ahead and kept.
//!
//! How many: the arrival rate is the larger of the last hour's and the
//! same hour's on earlier days (up to a week), so a morning ramp is warmed
//! before it comes and a burst is followed at once; the count kept is the
//! `warm_coverage_percent` percentile of a Poisson count with that rate
//! over the lookahead. Their shapes: the latest arrivals' (a gang's pods,
//! topology and all), so the mix follows the mix seen. Bounded: the
//! GPU-seconds of nodes held for placeholders alone (no real work planned
//! or running there) are counted per hour, and nothing is held once the
//! last 24 hours spent `warm_budget_gpu_hours_per_day`.
//!
//! The history lives with the decider (accordd's process); a restart
//! starts it again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use accord::demand::{Demand, Workload};
use accord::fleet::{Fleet, Policy, Warm};
use accord::plan::{Action, Plan};

/// Placeholders live in a namespace Kubernetes cannot have (a namespace is
/// a DNS label), so no real workload's key is ever one of theirs.
pub const NAMESPACE: &str = "(warm)";

/// Shapes kept (the least recently seen goes first).
const SHAPES_KEPT: usize = 64;
/// Arrival times kept per shape.
const ARRIVALS_KEPT: usize = 2048;
/// Placeholders at most in one round.
const MAX_PLACEHOLDERS: u64 = 64;
/// The recent rate's window.
const RECENT_S: u64 = 4 * 3600;
/// Days of arrivals kept for the time-of-day rate, and the window around
/// the same time on each.
const DAYS: u64 = 7;
const TIME_OF_DAY_WINDOW_S: u64 = 3600;

/// One shape of work (pod sets, gang minimum, topology, reservation) and
/// when it arrived.
#[derive(Debug)]
struct Shape {
    /// The first arrival of the shape: its name names the placeholder, so
    /// the placeholder stays the same object round after round.
    template: Workload,
    arrivals: VecDeque<u64>,
}

/// What the decider keeps between rounds for warm capacity.
#[derive(Debug, Default)]
pub(crate) struct Warmth {
    /// The workloads pending last round (a key not among them is an arrival).
    pending: BTreeSet<String>,
    /// Shape (its canonical JSON) → its history.
    shapes: BTreeMap<String, Shape>,
    /// When anything was first seen: time before it is unknown, not quiet.
    first_seen: Option<u64>,
    /// Absolute hour (Unix s / 3600) → GPU-seconds held for placeholders
    /// alone.
    spent: BTreeMap<u64, f64>,
    /// GPUs held for placeholders alone after the last round, and when.
    held: Option<(u64, u64)>,
    /// This round's warm capacity, for the status.
    pub(crate) round: WarmRound,
    /// This round's placeholders' keys.
    placeholders: BTreeSet<String>,
    /// Node → when it was powered on for placeholders: kept from the idle
    /// power-off for [`HOLD_LOOKAHEADS`] lookaheads after, so a prediction
    /// that moves by a round does not power a machine off that it just
    /// powered on.
    warmed: BTreeMap<String, u64>,
}

/// How many lookaheads a node powered on for placeholders is kept: one for
/// its boot, one for the work to come.
const HOLD_LOOKAHEADS: u64 = 2;

/// This round's warm capacity, for the status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WarmRound {
    /// Arrivals expected within the lookahead.
    pub expected: f64,
    /// Placeholders planned.
    pub placeholders: u64,
    /// GPUs of nodes held for them alone.
    pub held_gpus: u64,
    /// GPU-hours held in the last 24 hours, of the budget.
    pub spent_gpu_hours: f64,
}

impl Warmth {
    /// Notes this round's arrivals and returns the placeholders to plan
    /// after `demand` (none unless the policy is predictive and within
    /// its budget): per shape seen, the `warm_coverage_percent` percentile
    /// of its arrivals expected within the lookahead.
    pub(crate) fn placeholders(
        &mut self,
        policy: &Policy,
        demand: &Demand,
        now: u64,
    ) -> (Vec<Workload>, WarmRound) {
        self.account(now);
        self.placeholders.clear();
        if policy.warm == Warm::Off {
            // Nothing learned while off: no cost to fleets that keep none
            // warm (a round of 20,000 pending pods would copy every key).
            *self = Warmth {
                spent: std::mem::take(&mut self.spent),
                warmed: std::mem::take(&mut self.warmed),
                ..Warmth::default()
            };
            return (Vec::new(), WarmRound::default());
        }
        self.observe(demand, now);
        let mut round = WarmRound {
            spent_gpu_hours: self.spent_last_day(now) / 3600.0,
            ..WarmRound::default()
        };
        if round.spent_gpu_hours >= f64::from(policy.warm_budget_gpu_hours_per_day) {
            return (Vec::new(), round);
        }
        let lookahead = policy.warm_lookahead_s;
        let mut out = Vec::new();
        for shape in self.shapes.values() {
            let expected = self.rate(shape, now, lookahead) * lookahead as f64;
            round.expected += expected;
            let room = MAX_PLACEHOLDERS.saturating_sub(out.len() as u64);
            for i in 0..poisson_quantile(expected, policy.warm_coverage_percent).min(room) {
                let t = &shape.template;
                let mut w = t.clone();
                w.name = format!("{i}-like-{}.{}", t.namespace, t.name);
                w.namespace = NAMESPACE.to_owned();
                w.priority = i32::MIN;
                w.created = now;
                w.sources = Vec::new();
                out.push(w);
            }
        }
        self.placeholders = out.iter().map(Workload::key).collect();
        round.placeholders = out.len() as u64;
        (out, round)
    }

    /// Whether `workload` (a key) is one of this round's placeholders.
    pub(crate) fn is_placeholder(&self, workload: &str) -> bool {
        self.placeholders.contains(workload)
    }

    /// Takes the placeholders out of `plan` but for their power-ons (what
    /// warming is), and counts the GPUs of nodes held for them alone:
    /// placed on, or powered on for, and nothing real planned or busy
    /// there. Their MIG repartitions are dropped: a guess is not worth
    /// disturbing a GPU for.
    pub(crate) fn settle(
        &mut self,
        plan: &mut Plan,
        fleet: &Fleet,
        busy: &BTreeMap<String, u32>,
        now: u64,
        lookahead_s: u64,
        round: &mut WarmRound,
    ) {
        let hold_s = HOLD_LOOKAHEADS.saturating_mul(lookahead_s);
        self.warmed.retain(|_, at| at.saturating_add(hold_s) > now);
        let warmed = &self.warmed;
        plan.actions.retain(|a| match a {
            Action::PowerOff { node, .. } => !warmed.contains_key(node),
            _ => true,
        });
        // This round's power-ons for placeholders alone (warming), and the
        // others (real work).
        let mut warming: Vec<&str> = Vec::new();
        let mut real_nodes: BTreeSet<&str> = BTreeSet::new();
        for a in &plan.actions {
            if let Action::PowerOn {
                node,
                for_workloads,
                ..
            } = a
            {
                if for_all_placeholders(for_workloads, &self.placeholders) {
                    warming.push(node);
                } else {
                    real_nodes.insert(node);
                }
            }
        }
        let mut warm_nodes: BTreeSet<&str> = warmed.keys().map(String::as_str).collect();
        warm_nodes.extend(&warming);
        for p in &plan.placements {
            let set = if self.is_placeholder(&p.workload) {
                &mut warm_nodes
            } else {
                &mut real_nodes
            };
            set.extend(p.pods.iter().map(|pod| pod.node.as_str()));
        }
        let held: u64 = fleet
            .nodes
            .iter()
            .filter(|n| {
                warm_nodes.contains(n.name.as_str())
                    && !real_nodes.contains(n.name.as_str())
                    && busy.get(&n.name).copied().unwrap_or(0) == 0
            })
            .map(|n| n.gpus.len() as u64)
            .sum();
        round.held_gpus = held;
        self.held = Some((held, now));
        for node in warming {
            self.warmed.insert(node.to_owned(), now);
        }
        let placeholders = &self.placeholders;
        plan.placements
            .retain(|p| !placeholders.contains(&p.workload));
        plan.unsatisfied
            .retain(|u| !placeholders.contains(&u.workload));
        plan.actions.retain(|a| match a {
            Action::ReconfigureMig { for_workloads, .. } => {
                !for_workloads.iter().all(|w| placeholders.contains(w))
            }
            _ => true,
        });
    }

    /// Charges the GPUs held since the last round to the hours they were
    /// held in.
    fn account(&mut self, now: u64) {
        if let Some((gpus, since)) = self.held.take() {
            let mut t = since;
            while gpus > 0 && t < now {
                let hour = t / 3600;
                let end = ((hour + 1) * 3600).min(now);
                *self.spent.entry(hour).or_insert(0.0) += (gpus * (end - t)) as f64;
                t = end;
            }
        }
        let oldest = (now / 3600).saturating_sub(24);
        self.spent = self.spent.split_off(&oldest);
    }

    /// GPU-seconds held in the last 24 hours (whole hours, this one too).
    fn spent_last_day(&self, now: u64) -> f64 {
        let from = (now / 3600).saturating_sub(23);
        self.spent.range(from..).map(|(_, s)| s).sum()
    }

    /// New keys in `demand` are arrivals: their time counted under their
    /// shape.
    fn observe(&mut self, demand: &Demand, now: u64) {
        self.first_seen.get_or_insert(now);
        let mut pending = BTreeSet::new();
        for w in &demand.workloads {
            let key = w.key();
            if !self.pending.contains(&key) {
                let shape = self.shapes.entry(shape_of(w)).or_insert_with(|| Shape {
                    template: w.clone(),
                    arrivals: VecDeque::new(),
                });
                shape.arrivals.push_back(now);
                if shape.arrivals.len() > ARRIVALS_KEPT {
                    shape.arrivals.pop_front();
                }
            }
            pending.insert(key);
        }
        self.pending = pending;
        let oldest = now.saturating_sub(DAYS * 86_400 + TIME_OF_DAY_WINDOW_S);
        for shape in self.shapes.values_mut() {
            while shape.arrivals.front().is_some_and(|&t| t < oldest) {
                shape.arrivals.pop_front();
            }
        }
        self.shapes.retain(|_, s| !s.arrivals.is_empty());
        while self.shapes.len() > SHAPES_KEPT {
            let stalest = self
                .shapes
                .iter()
                .min_by_key(|(k, s)| (s.arrivals.back().copied(), (*k).clone()))
                .map(|(k, _)| k.clone());
            if let Some(k) = stalest {
                self.shapes.remove(&k);
            }
        }
    }

    /// A shape's arrivals per second: the larger of the last
    /// [`RECENT_S`]' and this time of day's (around `lookahead_s` from
    /// now, on the days seen).
    fn rate(&self, shape: &Shape, now: u64, lookahead_s: u64) -> f64 {
        let Some(first) = self.first_seen else {
            return 0.0;
        };
        let recent = shape
            .arrivals
            .iter()
            .rev()
            .take_while(|&&t| t.saturating_add(RECENT_S) > now)
            .count();
        let seen_s = now
            .saturating_sub(first)
            .clamp(lookahead_s.clamp(1, RECENT_S), RECENT_S);
        let recent = recent as f64 / seen_s as f64;
        let ahead = now.saturating_add(lookahead_s);
        let half = TIME_OF_DAY_WINDOW_S / 2;
        let (mut count, mut days) = (0usize, 0u64);
        for d in 1..=DAYS {
            let Some(centre) = ahead.checked_sub(d * 86_400) else {
                break;
            };
            let (from, to) = (centre.saturating_sub(half), centre + half);
            if from < first {
                break;
            }
            // Arrivals are pushed in time order: two binary searches.
            let a = &shape.arrivals;
            count += a.partition_point(|&t| t < to) - a.partition_point(|&t| t < from);
            days += 1;
        }
        let time_of_day = if days == 0 {
            0.0
        } else {
            count as f64 / days as f64 / TIME_OF_DAY_WINDOW_S as f64
        };
        recent.max(time_of_day)
    }
}

/// A power-on for placeholders only (not a repair's, which is for none).
fn for_all_placeholders(for_workloads: &[String], placeholders: &BTreeSet<String>) -> bool {
    !for_workloads.is_empty() && for_workloads.iter().all(|w| placeholders.contains(w))
}

/// What makes two workloads the same work for capacity: their pod sets,
/// gang minimum, topology and reservation (not their names or labels).
fn shape_of(w: &Workload) -> String {
    serde_json::json!([w.pod_sets, w.min_count, w.topology, w.reservation]).to_string()
}

/// The smallest n with P(X ≤ n) ≥ `percent` % for X ~ Poisson(`mean`);
/// 0 for no arrivals expected.
fn poisson_quantile(mean: f64, percent: u32) -> u64 {
    if !mean.is_finite() || mean <= 0.0 {
        return 0;
    }
    let target = f64::from(percent.clamp(1, 99)) / 100.0;
    let mut p = (-mean).exp();
    let mut cdf = p;
    let mut n = 0;
    while cdf < target && n < MAX_PLACEHOLDERS {
        n += 1;
        p *= mean / n as f64;
        cdf += p;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poisson_percentile_is_the_smallest_count_that_covers_it() {
        assert_eq!(poisson_quantile(0.0, 90), 0);
        // P(0) = e^-0.1 = 0.905.
        assert_eq!(poisson_quantile(0.1, 90), 0);
        // Mean 2: P(≤3) = 0.857, P(≤4) = 0.947.
        assert_eq!(poisson_quantile(2.0, 90), 4);
        assert_eq!(poisson_quantile(2.0, 80), 3);
        assert_eq!(poisson_quantile(f64::NAN, 90), 0);
        assert_eq!(poisson_quantile(1e9, 99), MAX_PLACEHOLDERS);
    }

    fn demand(names: &[&str]) -> Demand {
        let w: Vec<_> = names
            .iter()
            .map(|n| {
                // "big…" names are 4-node gangs, the others 2-node ones.
                let count = if n.starts_with("big") { 4 } else { 2 };
                serde_json::json!({"name": n, "namespace": "ml", "pod_sets": [{"name": "w",
                    "count": count, "pod": {"requests": {"nvidia.com/gpu": "8"}}}]})
            })
            .collect();
        Demand::from_json(&serde_json::json!({ "workloads": w }).to_string(), "d.json").unwrap()
    }

    fn predictive() -> Policy {
        Policy {
            warm: Warm::Predictive,
            warm_lookahead_s: 600,
            warm_budget_gpu_hours_per_day: 10,
            ..Policy::default()
        }
    }

    fn names(prefix: &str, n: u64) -> Vec<String> {
        (0..n).map(|k| format!("{prefix}{k}")).collect()
    }

    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn placeholders_follow_each_shapes_arrival_rate() {
        let mut w = Warmth::default();
        let policy = predictive();
        let (none, _) = w.placeholders(&policy, &Demand::default(), 0);
        assert!(none.is_empty(), "nothing seen, nothing predicted");
        // Six small gangs in the first ten minutes (rate 1/100 s: 6
        // expected in the lookahead, Poisson(6)'s 90th percentile is 9)
        // and one big one (1/600 s: 1 expected, percentile 2).
        for i in 1..=6u64 {
            let mut all = names("j", i);
            if i == 6 {
                all.push("big0".into());
            }
            w.placeholders(&policy, &demand(&refs(&all)), i * 100 - 100);
        }
        let mut all = names("j", 6);
        all.push("big0".into());
        let (p, round) = w.placeholders(&policy, &demand(&refs(&all)), 600);
        assert!((round.expected - 7.0).abs() < 1e-9, "{round:?}");
        let keys: Vec<String> = p.iter().map(Workload::key).collect();
        let small = keys.iter().filter(|k| k.ends_with("-like-ml.j0")).count();
        let big = keys.iter().filter(|k| k.ends_with("-like-ml.big0")).count();
        assert_eq!((small, big, keys.len()), (9, 2, 11), "{keys:?}");
        assert!(keys.contains(&"(warm)/0-like-ml.big0".to_owned()));
        assert!(p.iter().all(|w| w.priority == i32::MIN));
        assert!(p
            .iter()
            .all(|w| w.pod_sets[0].count == if w.name.contains("big") { 4 } else { 2 }));
        // The same work still pending is no new arrival; after the recent
        // window, quiet (and no earlier day known): nothing.
        let (p, round) = w.placeholders(&policy, &demand(&refs(&all)), 600 + RECENT_S);
        assert_eq!((p.len(), round.expected), (0, 0.0));
    }

    #[test]
    fn the_same_time_on_earlier_days_warms_before_the_work_comes() {
        let mut w = Warmth::default();
        let policy = predictive();
        // Day 0: five arrivals at 09:00–09:08, then quiet.
        let nine = 9 * 3600;
        w.placeholders(&policy, &Demand::default(), 0);
        for i in 1..=5u64 {
            w.placeholders(
                &policy,
                &demand(&refs(&names("j", i))),
                nine + i * 120 - 120,
            );
        }
        w.placeholders(&policy, &Demand::default(), nine + 3600);
        // Day 1, 08:55: nothing recent, but around 09:05 came 5 an hour:
        // 0.83 expected, Poisson's 90th percentile 2.
        let (p, round) = w.placeholders(&policy, &Demand::default(), 86_400 + nine - 300);
        assert!(
            (round.expected - 5.0 / 3600.0 * 600.0).abs() < 1e-9,
            "{round:?}"
        );
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn nothing_is_held_once_the_day_spent_its_budget() {
        let mut w = Warmth::default();
        let policy = predictive();
        w.placeholders(&policy, &demand(&["j0"]), 0);
        // 16 GPUs held for an hour: 16 GPU-hours, past the budget of 10.
        w.held = Some((16, 0));
        let (p, round) = w.placeholders(&policy, &demand(&["j0", "j1"]), 3600);
        assert!(p.is_empty(), "{round:?}");
        assert!((round.spent_gpu_hours - 16.0).abs() < 1e-9);
        // A day later the hour has left the window: j1's time of day warms
        // again (one an hour then: Poisson(1/6)'s 90th percentile is 1).
        let (p, round) = w.placeholders(&policy, &demand(&["j0", "j1"]), 3600 + 86_400);
        assert_eq!(round.spent_gpu_hours, 0.0);
        assert_eq!(p.len(), 1, "{round:?}");
    }
}
