//! *Decide*'s part about BIOS profiles. A node the plan powers on with an
//! `ApplyBiosProfile` gets the profile staged with its power-on (by the
//! executor, within the power-on's wave); once the power-on is through
//! (the BMC shows On) its attributes are read back, and compared here:
//! all as wanted → the profile is applied (kept in the store: the planner
//! plans with it from then on, so it is not staged again); any not → the
//! node fails with every attribute that did not take, and is held Failed
//! while it runs with them (its demand is planned elsewhere; the
//! scheduler is kept off it by Accord's NoSchedule taint
//! [`BIOS_TAINT_KEY`], which a staged node carries until it is verified).
//! Pure, like the rest of *decide*: the read is the executor's, its result
//! comes in the snapshot.

use std::collections::BTreeMap;

use accord::demand::{Taint, TaintEffect};
use accord::fleet::Node;
use accord::lifecycle::{Stage, Transition};
use accord::truth::BIOS_TAINT_KEY;
use accord_api::control::{
    BiosRecord, BiosResult, BiosState, BiosStatus, Intent, IntentAction, Mode,
};
use serde_json::Value;
use tracing::{info, warn};

use super::{node_ref, Decider, Event, RoundMetrics, Snapshot};
use crate::execute::{BiosCheck, BiosSeen};

/// A read that has not come back after this long is asked again (its
/// task was lost).
const READ_AGAIN_S: u64 = 60;
/// Settings still staged while the machine boots are read again after
/// this long (BMCs are slow; POST takes minutes).
const PENDING_READ_EVERY_S: u64 = 10;
/// At most this many attributes are named in a reason...
const NAMED_AT_MOST: usize = 10;
/// ...in at most this many characters (an event's note is at most 1 KiB).
const LIST_CHARS: usize = 800;
/// A value longer than this is cut in a reason (BMC strings are not ours).
const VALUE_CHARS: usize = 64;

/// The taint's value while a staged profile is not yet read back.
pub const UNVERIFIED: &str = "unverified";
/// The taint's value on a node whose profile did not take.
pub const FAILED: &str = "failed";

/// What the loop knows of BIOS profiles between rounds.
#[derive(Debug, Default)]
pub(super) struct BiosBook {
    /// Node → its last outcome (the store's, then this run's).
    records: BTreeMap<String, BiosRecord>,
    /// Node → a profile staged with a power-on, not yet verified.
    staging: BTreeMap<String, Staging>,
    /// Nodes whose profile did not take: held Failed while they run
    /// (coming up does not make them usable).
    held: BTreeMap<String, Held>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    reason: String,
    /// Its BMC has shown it On since it was held: a reading of Off after
    /// that is the machine going off, not a reading from before its
    /// power-on landed.
    seen_on: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Staging {
    profile: String,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The power-on (staging, then the Reset) is under way.
    PowerOn,
    /// Staged and on: read it back this round.
    Read,
    /// A read is out since `at` (Unix seconds).
    Reading { at: u64 },
    /// Settings were still staged while it booted: read again at `at`.
    Wait { at: u64 },
}

/// What *effect* does for BIOS profiles this round.
#[derive(Debug, Clone, Default)]
pub struct BiosEffects {
    /// Read these nodes' BIOS back (the executor's `read_bios`).
    pub checks: Vec<BiosCheck>,
    /// Outcomes to keep in the store.
    pub records: Vec<(String, BiosRecord)>,
}

/// Result labels of `accord_bios_profiles_total`.
pub const STAGED: &str = "staged";
pub const VERIFIED: &str = "verified";
pub const FAILED_RESULT: &str = "failed";

impl Decider {
    /// BIOS outcomes kept from before a restart (the store's): verified
    /// profiles are planned with, not staged again; a node whose wanted
    /// profile did not take is held Failed again (in act mode) until its
    /// BMC shows it off.
    pub fn seed_bios(&mut self, records: BTreeMap<String, BiosRecord>) {
        self.bios.records = records
            .into_iter()
            .filter(|(n, _)| self.lives.contains_key(n))
            .collect();
        if self.settings.mode != Mode::Act {
            return;
        }
        let held: Vec<(String, String)> = self
            .bios
            .records
            .iter()
            .filter_map(|(node, rec)| match &rec.result {
                BiosResult::Failed { reason }
                    if self.fleet.node(node).and_then(|n| n.bios_profile.as_ref())
                        == Some(&rec.profile) =>
                {
                    Some((node.clone(), reason.clone()))
                }
                _ => None,
            })
            .collect();
        for (node, reason) in held {
            // The loop's first round has every BMC read: off then is off.
            self.bios.held.insert(
                node.clone(),
                Held {
                    reason: reason.clone(),
                    seen_on: true,
                },
            );
            if let Some(life) = self.lives.get_mut(&node) {
                let since = life.since;
                let t = life.fail(since, reason);
                self.note(&node, &t);
            }
        }
    }

    /// A power-on found open at start that staged a profile: its machine
    /// is verified once the resumed power-on is through.
    pub(super) fn resume_bios(&mut self, intent: &Intent) {
        if let (IntentAction::PowerOn, Some(profile)) = (&intent.action, &intent.bios_profile) {
            self.bios.held.remove(&intent.node);
            self.bios.staging.insert(
                intent.node.clone(),
                Staging {
                    profile: profile.clone(),
                    phase: Phase::PowerOn,
                },
            );
        }
    }

    /// The plan stages `profile` on `node` with its power-on (act mode).
    pub(super) fn stage_bios(&mut self, node: &str, profile: &str) {
        info!(
            node,
            profile, "BIOS profile staged with the power-on; verified once the machine is on"
        );
        self.bios.held.remove(node);
        self.bios.staging.insert(
            node.to_owned(),
            Staging {
                profile: profile.to_owned(),
                phase: Phase::PowerOn,
            },
        );
    }

    /// Power-on results and BIOS reads: a staged node whose power-on went
    /// through is read back; a read all as wanted verifies its profile,
    /// one that is not fails the node (still-pending attributes are read
    /// again while the machine has not booted).
    pub(super) fn absorb_bios(
        &mut self,
        snap: &Snapshot,
        events: &mut Vec<Event>,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        let now = snap.now;
        self.release_bios_holds(snap);
        for e in &snap.executed {
            let Some(s) = self.bios.staging.get_mut(&e.node) else {
                continue;
            };
            if s.phase != Phase::PowerOn {
                continue;
            }
            if e.result.is_ok() {
                s.phase = Phase::Read;
                *metrics.bios_profiles.entry(STAGED).or_default() += 1;
            } else {
                // The power-on failed (and failed the node): nothing to
                // verify.
                self.bios.staging.remove(&e.node);
            }
        }
        for r in &snap.bios_reads {
            let Some(s) = self.bios.staging.get(&r.node) else {
                continue;
            };
            if s.profile != r.profile || !matches!(s.phase, Phase::Reading { .. }) {
                continue;
            }
            let profile = s.profile.clone();
            let node = r.node.clone();
            let seen = match &r.result {
                Ok(seen) => seen,
                Err(e) => {
                    let reason = format!(
                        "BIOS profile {profile} could not be read back: {}",
                        accord::config_file::error_chain(e)
                    );
                    self.bios_failed(&node, &profile, reason, now, events, metrics, effects);
                    continue;
                }
            };
            let differ = differences(seen);
            if differ.is_empty() {
                info!(node = %node, profile = %profile, attributes = seen.wanted.len(), "BIOS profile verified");
                let rec = BiosRecord {
                    profile: profile.clone(),
                    at: now,
                    result: BiosResult::Verified,
                };
                self.bios.records.insert(node.clone(), rec.clone());
                effects.records.push((node.clone(), rec));
                self.bios.staging.remove(&node);
                self.bios.held.remove(&node);
                *metrics.bios_profiles.entry(VERIFIED).or_default() += 1;
                events.push(Event {
                    regarding: node_ref(&node),
                    reason: "BiosProfileApplied",
                    action: "VerifyBios",
                    note: format!(
                        "BIOS profile {profile} verified: its {} attributes read back as wanted",
                        seen.wanted.len()
                    ),
                    warning: false,
                });
                continue;
            }
            // Settings apply during POST: until the machine has booted
            // (its agent is up), attributes still staged as wanted may
            // yet take.
            let booting = self
                .lives
                .get(&node)
                .is_some_and(|l| matches!(l.stage, Stage::PoweringOn | Stage::Booting));
            let applying = differ
                .iter()
                .all(|(k, _)| seen.pending.get(*k) == seen.wanted.get(*k));
            if booting && applying {
                info!(node = %node, profile = %profile, pending = differ.len(), "BIOS settings still staged while the machine boots; reading again");
                self.bios.staging.get_mut(&node).expect("listed").phase = Phase::Wait {
                    at: now + PENDING_READ_EVERY_S,
                };
                continue;
            }
            let reason = format!(
                "BIOS profile {profile} did not take: {}",
                differences_text(&differ, seen)
            );
            self.bios_failed(&node, &profile, reason, now, events, metrics, effects);
        }
    }

    /// A held node whose BMC shows it off is let go: Off, usable again,
    /// its profile staged again at its next power-on.
    fn release_bios_holds(&mut self, snap: &Snapshot) {
        let mut off = Vec::new();
        for (node, h) in &mut self.bios.held {
            match snap.bmc.get(node) {
                Some(true) => h.seen_on = true,
                Some(false) if h.seen_on => off.push(node.clone()),
                _ => {}
            }
        }
        for node in off {
            self.bios.held.remove(&node);
            let Some(life) = self.lives.get_mut(&node) else {
                continue;
            };
            if life.stage != Stage::Failed {
                continue;
            }
            // The lifecycle has no step out of Failed for a machine that
            // is off (a failed power-on's stays failed): this one failed
            // for what it ran with, and runs no more.
            let t = Transition {
                from: Stage::Failed,
                to: Stage::Off,
                reason: "BMC shows Off: its BIOS profile is staged again at its next power-on"
                    .to_owned(),
            };
            life.stage = Stage::Off;
            life.since = snap.now;
            life.reason = Some(t.reason.clone());
            info!(node = %node, "BIOS hold released: the machine is off");
            self.note(&node, &[t]);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn bios_failed(
        &mut self,
        node: &str,
        profile: &str,
        reason: String,
        now: u64,
        events: &mut Vec<Event>,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        warn!(node, profile, reason = %reason, "BIOS profile failed; the node is marked Failed and its demand re-planned");
        self.bios.staging.remove(node);
        self.bios.held.insert(
            node.to_owned(),
            Held {
                reason: reason.clone(),
                seen_on: false,
            },
        );
        let rec = BiosRecord {
            profile: profile.to_owned(),
            at: now,
            result: BiosResult::Failed {
                reason: reason.clone(),
            },
        };
        self.bios.records.insert(node.to_owned(), rec.clone());
        effects.records.push((node.to_owned(), rec));
        *metrics.bios_profiles.entry(FAILED_RESULT).or_default() += 1;
        if let Some(life) = self.lives.get_mut(node) {
            let t = life.fail(now, reason.clone());
            self.note(node, &t);
        }
        events.push(Event {
            regarding: node_ref(node),
            reason: "BiosProfileFailed",
            action: "VerifyBios",
            note: reason,
            warning: true,
        });
    }

    /// The reads to make this round: staged nodes that are on, and reads
    /// lost for [`READ_AGAIN_S`]. A node is on once its power-on went
    /// through, or once its BMC shows it On (its lifecycle left
    /// PoweringOn): the staging came before its Reset, and the rest of its
    /// wave may take longer.
    pub(super) fn bios_checks(
        &mut self,
        now: u64,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        for (node, s) in &mut self.bios.staging {
            let on = self.lives.get(node).is_some_and(|l| {
                matches!(
                    l.stage,
                    Stage::Booting | Stage::AgentUp | Stage::Ready | Stage::InUse | Stage::Idle
                )
            });
            if s.phase == Phase::PowerOn && on {
                *metrics.bios_profiles.entry(STAGED).or_default() += 1;
                s.phase = Phase::Read;
            }
            let due = match s.phase {
                Phase::PowerOn => false,
                Phase::Read => true,
                Phase::Reading { at } => now.saturating_sub(at) > READ_AGAIN_S,
                Phase::Wait { at } => now >= at,
            };
            if due {
                s.phase = Phase::Reading { at: now };
                effects.checks.push(BiosCheck {
                    node: node.clone(),
                    profile: s.profile.clone(),
                });
            }
        }
    }

    /// A node whose profile did not take stays Failed while it runs.
    pub(super) fn bios_holds(&self, node: &str) -> bool {
        self.bios.held.contains_key(node)
    }

    /// The planner plans with the profile Accord verified (the store's),
    /// not with the fleet file's statement, once there is one.
    pub(super) fn bios_plan_with(&self, n: &mut Node) {
        if let Some(rec) = self.bios.records.get(&n.name) {
            n.bios_profile_applied = match rec.result {
                BiosResult::Verified => Some(rec.profile.clone()),
                // Whatever the machine has now, it is not known to be a
                // profile.
                BiosResult::Failed { .. } => None,
            };
        }
    }

    /// Accord's BIOS taint on the node's Kubernetes Node: `unverified`
    /// while a staged profile is not read back, `failed` while one that
    /// did not take holds it; none otherwise (a kubelet's registration
    /// taint is lifted).
    pub(super) fn bios_taint(&self, node: &str) -> Option<Taint> {
        let value = if self.bios.held.contains_key(node) {
            FAILED
        } else if self.bios.staging.contains_key(node) {
            UNVERIFIED
        } else {
            return None;
        };
        Some(Taint {
            key: BIOS_TAINT_KEY.to_owned(),
            value: Some(value.to_owned()),
            effect: TaintEffect::NoSchedule,
        })
    }

    /// The node's BIOS for the status: `None` when no profile is wanted
    /// nor known.
    pub(super) fn bios_status(&self, n: &Node) -> Option<BiosStatus> {
        let rec = self.bios.records.get(&n.name);
        let (applied, verified_at, reason) = match rec {
            Some(BiosRecord {
                profile,
                at,
                result: BiosResult::Verified,
            }) => (Some(profile.clone()), Some(*at), None),
            Some(BiosRecord {
                result: BiosResult::Failed { reason },
                ..
            }) => (None, None, Some(reason.clone())),
            None => (n.bios_profile_applied.clone(), None, None),
        };
        let wanted = n.bios_profile.clone();
        if wanted.is_none() && applied.is_none() && rec.is_none() {
            return None;
        }
        let failed_wanted = rec.is_some_and(|r| {
            matches!(r.result, BiosResult::Failed { .. }) && Some(&r.profile) == wanted.as_ref()
        });
        let state = if self.bios.staging.contains_key(&n.name) {
            BiosState::Staged
        } else if self.bios.held.contains_key(&n.name) || failed_wanted {
            BiosState::Failed
        } else if wanted.is_none() || wanted == applied {
            BiosState::Applied
        } else {
            BiosState::Pending
        };
        Some(BiosStatus {
            wanted,
            applied,
            state,
            verified_at,
            reason: self
                .bios
                .held
                .get(&n.name)
                .map(|h| h.reason.clone())
                .or(reason),
        })
    }
}

/// The profile's attributes that do not read back as wanted (in name
/// order), with what was read (`None`: the BIOS has no such attribute).
fn differences(seen: &BiosSeen) -> Vec<(&String, Option<&Value>)> {
    seen.wanted
        .iter()
        .filter(|(k, v)| seen.current.get(*k) != Some(*v))
        .map(|(k, _)| (k, seen.current.get(k)))
        .collect()
}

/// `ProcTurboMode is "Enabled", wanted "Disabled"; X is absent, wanted 1`:
/// at most [`NAMED_AT_MOST`] named in about [`LIST_CHARS`], names and
/// values cut at [`VALUE_CHARS`], then how many more.
fn differences_text(differ: &[(&String, Option<&Value>)], seen: &BiosSeen) -> String {
    let mut out = String::new();
    let mut named = 0;
    for (k, have) in differ {
        let want = seen.wanted.get(*k).map(value_text).unwrap_or_default();
        let still = if seen.pending.get(*k) == seen.wanted.get(*k) {
            " (still staged)"
        } else {
            ""
        };
        let part = match have {
            Some(v) => format!("{} is {}, wanted {want}{still}", cut(k), value_text(v)),
            None => format!("{} is absent, wanted {want}", cut(k)),
        };
        if named == NAMED_AT_MOST || (named > 0 && out.len() + 2 + part.len() > LIST_CHARS) {
            break;
        }
        if named > 0 {
            out.push_str("; ");
        }
        out.push_str(&part);
        named += 1;
    }
    if named < differ.len() {
        out.push_str(&format!("; and {} more", differ.len() - named));
    }
    out
}

fn value_text(v: &Value) -> String {
    cut(&v.to_string())
}

fn cut(s: &str) -> String {
    if s.chars().count() <= VALUE_CHARS {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(VALUE_CHARS).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;

    fn attrs(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn the_reason_names_every_attribute_that_did_not_take() {
        let seen = BiosSeen {
            wanted: attrs(&[
                ("ProcTurboMode", json!("Disabled")),
                ("SysProfile", json!("PerfOptimized")),
                ("NumaNodesPerSocket", json!(4)),
                ("Missing", json!("On")),
            ]),
            current: attrs(&[
                ("ProcTurboMode", json!("Enabled")),
                ("SysProfile", json!("PerfOptimized")),
                ("NumaNodesPerSocket", json!(1)),
            ]),
            pending: attrs(&[("NumaNodesPerSocket", json!(4))]),
        };
        let d = differences(&seen);
        assert_eq!(
            differences_text(&d, &seen),
            "Missing is absent, wanted \"On\"; NumaNodesPerSocket is 1, wanted 4 (still staged); \
             ProcTurboMode is \"Enabled\", wanted \"Disabled\""
        );
    }

    #[test]
    fn long_values_and_long_lists_are_cut() {
        let long = "x".repeat(500);
        let mut wanted = Map::new();
        let mut current = Map::new();
        for i in 0..15 {
            wanted.insert(format!("A{i:02}"), json!("on"));
            current.insert(format!("A{i:02}"), json!(long));
        }
        let seen = BiosSeen {
            wanted,
            current,
            pending: Map::new(),
        };
        let t = differences_text(&differences(&seen), &seen);
        assert!(t.starts_with("A00 is \"xxx"), "{t}");
        assert!(t.ends_with(" more"), "{t}");
        // With the longest profile name, still an event's note.
        assert!(t.len() <= LIST_CHARS + 20, "{}", t.len());
        let few = BiosSeen {
            wanted: seen.wanted.clone().into_iter().take(12).collect(),
            current: seen.current.clone(),
            pending: Map::new(),
        };
        let short = |v: &str| {
            let mut s = few.clone();
            for x in s.current.values_mut() {
                *x = json!(v);
            }
            s
        };
        let s = short("off");
        assert!(differences_text(&differences(&s), &s).ends_with("; and 2 more"));
    }
}
