//! BMC faults the lab's proxy plays ([`crate::proxy`]): 503 bursts (a
//! busy BMC refusing a few requests for one system), hangs past
//! accordd's Redfish timeout (the request forwarded, its answer held back:
//! the client cannot tell whether a Reset took), and a system that reports
//! the wrong power state for a while (once a Reset has changed the
//! machine's power state, its BMC keeps answering the state from before
//! for a few seconds, as a BMC with a stale power-state cache does).
//!
//! The chaos driver arms them ([`BmcFaults::arm`]); each fires on the
//! requests it matches and is counted only when it fires.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// One BMC fault, armed by the chaos driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BmcFault {
    /// The next `requests` requests for `node`'s system are answered 503
    /// Service Unavailable and not forwarded.
    Unavailable { node: String, requests: u32 },
    /// The next request that matches is forwarded, and its answer held
    /// back `hold` (past accordd's Redfish timeout).
    Hang { target: HangTarget, hold: Duration },
    /// The next power Reset that reaches any system: once the machine's
    /// power state has changed, for `secs` its document keeps reporting
    /// the state from before the Reset.
    WrongPower { secs: u64 },
}

/// Which request a hang holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HangTarget {
    /// The next power Reset, any system: accordd cannot tell whether it
    /// took.
    NextReset,
    /// The next request for this node's system (mostly reads).
    NextRequest(String),
}

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    /// Answer 503 and forward nothing.
    Unavailable,
    /// Forward it, then hold the answer back this long.
    Hang(Duration),
}

/// Faults that fired, by kind, and what they did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BmcFaultCounts {
    /// 503 bursts that answered at least one request.
    pub bursts: u32,
    /// Requests answered 503.
    pub answered_503: u32,
    /// Requests held past the timeout.
    pub hangs: u32,
    /// Wrong-power windows in which a document was answered with the
    /// wrong state.
    pub wrong_power_windows: u32,
    /// System documents answered with the wrong power state.
    pub wrong_power_answers: u32,
}

/// How long a wrong-power window taken by a Reset waits for the machine
/// to change (the emulator lands a change 1–11 s after the Reset).
const PENDING_AT_MOST: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Burst {
    node: String,
    left: u32,
    fired: bool,
}

/// The proxy's fault state: what is armed, the wrong-power windows open,
/// what fired.
#[derive(Debug, Default)]
pub struct BmcFaults {
    bursts: Vec<Burst>,
    hangs: Vec<(HangTarget, Duration)>,
    /// Wrong-power windows armed (each taken by the next Reset), in secs.
    wrong_power_armed: Vec<u64>,
    /// Taken by a Reset, waiting for the machine's state to change:
    /// node → (the state before the Reset, secs, when the Reset came).
    wrong_power_pending: BTreeMap<String, (bool, u64, Instant)>,
    /// Open windows: node → (until, the power state it keeps reporting).
    wrong_power: BTreeMap<String, (Instant, bool)>,
    counts: BmcFaultCounts,
}

impl BmcFaults {
    pub fn arm(&mut self, fault: BmcFault) {
        match fault {
            BmcFault::Unavailable { node, requests } => self.bursts.push(Burst {
                node,
                left: requests,
                fired: false,
            }),
            BmcFault::Hang { target, hold } => self.hangs.push((target, hold)),
            BmcFault::WrongPower { secs } => self.wrong_power_armed.push(secs),
        }
    }

    /// Drops whatever is armed and has not fired (the run is over).
    pub fn disarm(&mut self) {
        self.bursts.clear();
        self.hangs.clear();
        self.wrong_power_armed.clear();
        self.wrong_power_pending.clear();
    }

    pub fn counts(&self) -> BmcFaultCounts {
        self.counts.clone()
    }

    /// What to do with a request for `node`'s system (`None`: not a
    /// system's path); `reset`: it is a power Reset.
    pub fn verdict(&mut self, node: Option<&str>, reset: bool) -> Verdict {
        if let Some(node) = node {
            if let Some(b) = self.bursts.iter_mut().find(|b| b.node == node) {
                b.left = b.left.saturating_sub(1);
                if !b.fired {
                    b.fired = true;
                    self.counts.bursts += 1;
                }
                self.counts.answered_503 += 1;
                self.bursts.retain(|b| b.left > 0);
                return Verdict::Unavailable;
            }
        }
        let hang = self.hangs.iter().position(|(t, _)| match t {
            HangTarget::NextReset => reset,
            HangTarget::NextRequest(n) => node == Some(n.as_str()),
        });
        if let Some(i) = hang {
            let (_, hold) = self.hangs.remove(i);
            self.counts.hangs += 1;
            return Verdict::Hang(hold);
        }
        Verdict::Forward
    }

    /// A power Reset reached `node`'s machine, which was `was_on` before
    /// it: an armed wrong-power window is taken for it, to open when the
    /// machine's state changes.
    pub fn reset_reached(&mut self, node: &str, was_on: Option<bool>, now: Instant) {
        let Some(was_on) = was_on else { return };
        if self.wrong_power.contains_key(node)
            || self.wrong_power_pending.contains_key(node)
            || self.wrong_power_armed.is_empty()
        {
            return;
        }
        let secs = self.wrong_power_armed.remove(0);
        self.wrong_power_pending
            .insert(node.to_owned(), (was_on, secs, now));
    }

    /// The power state `node`'s document reports now, when a wrong-power
    /// window is open on it (`None`: the real one); `actual` is the
    /// emulator's. A window taken by a Reset opens the first time the
    /// machine shows the change.
    pub fn reported_power(&mut self, node: &str, actual: bool, now: Instant) -> Option<bool> {
        if let Some((kept, secs, since)) = self.wrong_power_pending.get(node).copied() {
            if actual != kept {
                self.wrong_power_pending.remove(node);
                self.wrong_power
                    .insert(node.to_owned(), (now + Duration::from_secs(secs), kept));
                self.counts.wrong_power_windows += 1;
            } else if now.duration_since(since) > PENDING_AT_MOST {
                // The Reset never took: nothing to be stale about.
                self.wrong_power_pending.remove(node);
            }
        }
        let (until, kept) = *self.wrong_power.get(node)?;
        if now >= until {
            self.wrong_power.remove(node);
            return None;
        }
        if kept != actual {
            self.counts.wrong_power_answers += 1;
        }
        Some(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_answers_its_nodes_requests_then_ends() {
        let mut f = BmcFaults::default();
        f.arm(BmcFault::Unavailable {
            node: "n1".into(),
            requests: 2,
        });
        assert_eq!(f.verdict(Some("n2"), false), Verdict::Forward);
        assert_eq!(f.verdict(None, false), Verdict::Forward);
        assert_eq!(f.verdict(Some("n1"), true), Verdict::Unavailable);
        assert_eq!(f.verdict(Some("n1"), false), Verdict::Unavailable);
        assert_eq!(f.verdict(Some("n1"), false), Verdict::Forward);
        let c = f.counts();
        assert_eq!((c.bursts, c.answered_503), (1, 2));
    }

    #[test]
    fn a_hang_holds_the_first_request_it_matches_once() {
        let mut f = BmcFaults::default();
        let hold = Duration::from_secs(5);
        f.arm(BmcFault::Hang {
            target: HangTarget::NextReset,
            hold,
        });
        assert_eq!(f.verdict(Some("n1"), false), Verdict::Forward);
        assert_eq!(f.verdict(Some("n1"), true), Verdict::Hang(hold));
        assert_eq!(f.verdict(Some("n1"), true), Verdict::Forward);
        f.arm(BmcFault::Hang {
            target: HangTarget::NextRequest("n2".into()),
            hold,
        });
        assert_eq!(f.verdict(Some("n1"), false), Verdict::Forward);
        assert_eq!(f.verdict(Some("n2"), false), Verdict::Hang(hold));
        assert_eq!(f.counts().hangs, 2);
    }

    #[test]
    fn a_wrong_power_window_keeps_the_state_before_the_reset() {
        let mut f = BmcFaults::default();
        let t0 = Instant::now();
        // Nothing armed: a Reset opens nothing.
        f.reset_reached("n1", Some(false), t0);
        assert_eq!(f.reported_power("n1", true, t0), None);
        f.arm(BmcFault::WrongPower { secs: 3 });
        f.reset_reached("n1", Some(false), t0);
        // Not changed yet: the real state, no window.
        assert_eq!(f.reported_power("n1", false, t0), None);
        assert_eq!(f.counts().wrong_power_windows, 0);
        // Changed 4 s after the Reset: the old state for 3 s from then.
        let t1 = t0 + Duration::from_secs(4);
        assert_eq!(f.reported_power("n1", true, t1), Some(false));
        assert_eq!(
            f.reported_power("n1", true, t1 + Duration::from_secs(2)),
            Some(false)
        );
        assert_eq!(
            f.reported_power("n1", true, t1 + Duration::from_secs(3)),
            None
        );
        let c = f.counts();
        assert_eq!((c.wrong_power_windows, c.wrong_power_answers), (1, 2));
        // A Reset that never takes opens nothing, and gives the window up.
        f.arm(BmcFault::WrongPower { secs: 3 });
        f.reset_reached("n2", Some(true), t0);
        assert_eq!(
            f.reported_power("n2", true, t0 + Duration::from_secs(61)),
            None
        );
        assert_eq!(
            f.reported_power("n2", false, t0 + Duration::from_secs(62)),
            None
        );
        assert_eq!(f.counts().wrong_power_windows, 1);
    }
}
