//! How long capacity takes: per hardware profile, the boots the decider
//! saw (power-on asked → BMC On → agent report → Kubernetes Node Ready,
//! each measured from the power-on), and from them the time a node on its
//! way up still needs, for the status, `explain`, ProvisioningRequest
//! messages and the metrics.
//!
//! The decider keeps the latest [`KEPT`] boots per profile; a restart
//! starts again (until the first boot, no time is predicted: said so).

use std::collections::{BTreeMap, VecDeque};

use accord::lifecycle::Stage;
use accord_api::control::BootTimeStatus;

/// Boots kept per profile.
const KEPT: usize = 64;

/// Seconds from the power-on to each step, per boot.
#[derive(Debug, Default, Clone)]
struct Boots {
    bmc_on: VecDeque<u64>,
    agent_up: VecDeque<u64>,
    ready: VecDeque<u64>,
}

/// The boots seen, per profile (`""`: nodes with none), and power-on →
/// Ready per rack (racks of one profile may boot at different speeds:
/// another BMC, another network). The medians [`BootTimes::expected`]
/// answers are kept as boots come (it is asked for every node the fleet
/// as seen works out, boots come a few a round at most).
#[derive(Debug, Default)]
pub(crate) struct BootTimes {
    per_profile: BTreeMap<String, Boots>,
    per_rack: BTreeMap<String, VecDeque<u64>>,
    profile_median: BTreeMap<String, u64>,
    /// Racks with [`RACK_BOOTS`] measured.
    rack_median: BTreeMap<String, u64>,
}

/// Boots of a rack measured before its own median stands for it.
const RACK_BOOTS: usize = 3;

fn push(v: &mut VecDeque<u64>, s: u64) {
    v.push_back(s);
    if v.len() > KEPT {
        v.pop_front();
    }
}

/// The nearest-rank percentile of `v`.
fn percentile(v: &VecDeque<u64>, percent: usize) -> Option<u64> {
    let mut sorted: Vec<u64> = v.iter().copied().collect();
    sorted.sort_unstable();
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

impl BootTimes {
    /// A node of `profile` in `rack` powered on at `powered_at` reached
    /// `to` at `now`.
    pub(crate) fn reached(
        &mut self,
        profile: &str,
        rack: Option<&str>,
        to: Stage,
        powered_at: u64,
        now: u64,
    ) {
        let s = now.saturating_sub(powered_at);
        if let (Some(rack), Stage::Ready) = (rack, to) {
            let v = self.per_rack.entry(rack.to_owned()).or_default();
            push(v, s);
            if v.len() >= RACK_BOOTS {
                if let Some(m) = percentile(v, 50) {
                    self.rack_median.insert(rack.to_owned(), m);
                }
            }
        }
        let b = self.per_profile.entry(profile.to_owned()).or_default();
        match to {
            Stage::Booting => push(&mut b.bmc_on, s),
            Stage::AgentUp => push(&mut b.agent_up, s),
            Stage::Ready => {
                push(&mut b.ready, s);
                if let Some(m) = percentile(&b.ready, 50) {
                    self.profile_median.insert(profile.to_owned(), m);
                }
            }
            _ => {}
        }
    }

    /// The median power-on → Ready of `profile`, and how many boots.
    #[cfg(test)]
    pub(crate) fn median_ready(&self, profile: &str) -> Option<(u64, usize)> {
        let b = self.per_profile.get(profile)?;
        Some((percentile(&b.ready, 50)?, b.ready.len()))
    }

    /// Seconds a node of `profile` powered on `elapsed` seconds ago still
    /// needs to be Ready: the median boot less what has passed; past the
    /// median, the 90th percentile's; past that, 0 (any moment). None
    /// before any boot of the profile was seen.
    pub(crate) fn remaining(&self, profile: &str, elapsed: u64) -> Option<u64> {
        let b = self.per_profile.get(profile)?;
        let median = percentile(&b.ready, 50)?;
        let p90 = percentile(&b.ready, 90).unwrap_or(median);
        Some(if elapsed < median {
            median - elapsed
        } else {
            p90.saturating_sub(elapsed)
        })
    }

    /// The power-on → Ready expected of a node: its rack's median once
    /// [`RACK_BOOTS`] were measured there, else its profile's.
    pub(crate) fn expected(&self, profile: &str, rack: Option<&str>) -> Option<u64> {
        rack.and_then(|r| self.rack_median.get(r))
            .or_else(|| self.profile_median.get(profile))
            .copied()
    }

    /// Per profile, for the status and the metrics.
    pub(crate) fn status(&self) -> Vec<BootTimeStatus> {
        self.per_profile
            .iter()
            .filter(|(_, b)| !b.ready.is_empty())
            .map(|(profile, b)| BootTimeStatus {
                profile: profile.clone(),
                boots: b.ready.len() as u64,
                bmc_on_median_s: percentile(&b.bmc_on, 50),
                agent_up_median_s: percentile(&b.agent_up, 50),
                ready_median_s: percentile(&b.ready, 50).unwrap_or(0),
                ready_p90_s: percentile(&b.ready, 90).unwrap_or(0),
            })
            .collect()
    }
}

/// Unix seconds as RFC 3339 UTC (`2026-12-06T03:10:00Z`), for messages
/// (Howard Hinnant's days-to-civil; no clock is read).
pub(crate) fn utc(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_read_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_527_800), "2026-12-06T03:30:00Z");
    }

    #[test]
    fn the_time_left_is_the_median_less_what_passed_then_the_tail() {
        let mut t = BootTimes::default();
        assert_eq!(t.remaining("h100", 0), None, "no boot seen");
        for (i, s) in [300u64, 200, 400, 250, 600, 350, 320, 280, 310, 900]
            .into_iter()
            .enumerate()
        {
            let at = i as u64 * 10_000;
            t.reached("h100", None, Stage::Booting, at, at + 10);
            t.reached("h100", None, Stage::Ready, at, at + s);
        }
        // Sorted: 200 250 280 300 310 320 350 400 600 900.
        assert_eq!(t.median_ready("h100"), Some((310, 10)));
        assert_eq!(t.remaining("h100", 0), Some(310));
        assert_eq!(t.remaining("h100", 100), Some(210));
        // Past the median: the 90th percentile's time left.
        assert_eq!(t.remaining("h100", 400), Some(200));
        assert_eq!(t.remaining("h100", 1000), Some(0));
        assert_eq!(t.remaining("l40s", 0), None);
        let s = t.status();
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].boots, s[0].bmc_on_median_s, s[0].ready_median_s),
            (10, Some(10), 310)
        );
    }

    #[test]
    fn only_the_latest_boots_are_kept() {
        let mut t = BootTimes::default();
        for _ in 0..KEPT {
            t.reached("p", None, Stage::Ready, 0, 1000);
        }
        for _ in 0..KEPT {
            t.reached("p", None, Stage::Ready, 0, 10);
        }
        assert_eq!(t.median_ready("p"), Some((10, KEPT)));
    }

    #[test]
    fn a_rack_stands_for_itself_once_measured_enough() {
        let mut t = BootTimes::default();
        for s in [300, 320, 310] {
            t.reached("p", Some("slow"), Stage::Ready, 0, s);
        }
        t.reached("p", Some("fast"), Stage::Ready, 0, 100);
        t.reached("p", Some("fast"), Stage::Ready, 0, 110);
        // Two boots in "fast": the profile's median (of all four) stands.
        assert_eq!(t.expected("p", Some("fast")), Some(300));
        t.reached("p", Some("fast"), Stage::Ready, 0, 120);
        assert_eq!(t.expected("p", Some("fast")), Some(110));
        assert_eq!(t.expected("p", Some("slow")), Some(310));
        assert_eq!(t.expected("p", Some("new")), Some(120), "the profile's six");
        assert_eq!(t.expected("q", None), None);
    }
}
