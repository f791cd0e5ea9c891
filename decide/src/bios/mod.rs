//! *Decide*'s part about BIOS profiles. A node the plan powers on with an
//! `ApplyBiosProfile` gets the profile staged with its power-on (by the
//! executor, within the power-on's wave, which also keeps a `staged`
//! record in the store); once the power-on is through (the BMC shows On)
//! its attributes are read back, and compared here: all as wanted → the
//! profile is applied (kept in the store: the planner plans with it from
//! then on, so it is not staged again). Not as wanted is judged only once
//! the machine has booted (its agent is up: POST is over; a BMC may clear
//! its pending settings when it schedules the BIOS job, as Dell iDRAC
//! does, long before they apply): then the node fails with every
//! attribute that did not take, and is held Failed while it runs with
//! them (its demand is planned elsewhere). A read that fails is tried
//! again, spaced out; only [`READ_ERRORS_AT_MOST`] in a row (or failing
//! for the lifecycle's boot deadline) fail the node.
//!
//! A staging outlives its power-on's intent: after a restart it is
//! resumed from the store's `staged` record once the machine is on. A
//! node that is up with its wanted profile not verified and nothing
//! staged by Accord (on at accordd's start, powered on outside Accord)
//! is read too: as wanted → verified; not → said once (log, status) and
//! left alone, running (not Accord's staging that failed): the profile is
//! staged at its next power-on by Accord.
//!
//! The scheduler is kept off every node whose wanted profile is not
//! verified by Accord's NoSchedule taint [`BIOS_TAINT_KEY`]: `failed`
//! while held, `unverified` otherwise. Pure, like the rest of *decide*:
//! the reads are the executor's, their results come in the snapshot.

mod readback;

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
use crate::results::BiosCheck;
use accord::hardware::BiosSeen;

/// A read that has not come back after this long is asked again (its
/// task was lost).
const READ_AGAIN_S: u64 = 60;
/// A profile not (yet) read as wanted while the machine is in POST is
/// read again after this long (BMCs are slow; POST takes minutes).
const PENDING_READ_EVERY_S: u64 = 10;
/// A read that failed is tried again after this long, doubled for each
/// further failure in a row up to [`READ_RETRY_MAX_S`] (BMCs are often
/// busy during POST)...
const READ_RETRY_S: u64 = 10;
const READ_RETRY_MAX_S: u64 = 120;
/// ...and this many failures in a row (or failures for the lifecycle's
/// boot deadline, `boot_to_agent_s`) fail a staged profile's node.
pub const READ_ERRORS_AT_MOST: u32 = 5;
/// A running machine's BIOS (nothing staged by Accord) that cannot be
/// read that often is read again this seldom.
const READ_SLOWLY_S: u64 = 300;
/// At most this many attributes are named in a reason...
const NAMED_AT_MOST: usize = 10;
/// ...in at most this many characters (an event's note is at most 1 KiB).
const LIST_CHARS: usize = 800;
/// A value longer than this is cut in a reason (BMC strings are not ours).
const VALUE_CHARS: usize = 64;

/// The taint's value while a node's wanted profile is not verified.
pub const UNVERIFIED: &str = "unverified";
/// The taint's value on a node whose profile did not take.
pub const FAILED: &str = "failed";

/// What the loop knows of BIOS profiles between rounds.
#[derive(Debug, Default)]
pub(super) struct BiosBook {
    /// Node → its last record (the store's, then this run's): staged,
    /// verified or failed.
    records: BTreeMap<String, BiosRecord>,
    /// Node → a profile being read back: staged with a power-on (now or
    /// before a restart), or checked on a machine that came up without.
    staging: BTreeMap<String, Staging>,
    /// Nodes whose profile did not take: held Failed while they run
    /// (coming up does not make them usable).
    held: BTreeMap<String, Held>,
    /// Nodes whose running machine's BIOS was read not to be their wanted
    /// profile, which Accord did not stage: left running (tainted), the
    /// profile staged at their next power-on by Accord (until then, read
    /// again only if they come up again outside Accord).
    differs: BTreeMap<String, Differs>,
    /// The round's time (for what is staged between rounds).
    now: u64,
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
struct Differs {
    profile: String,
    reason: String,
    /// The machine has been off since the read: read again when it comes
    /// up (not powered on by Accord).
    been_off: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Staging {
    profile: String,
    phase: Phase,
    /// Accord staged it (with a power-on: this run's, or one before a
    /// restart): not as wanted once the machine has booted, it did not
    /// take. Otherwise the machine came up with nothing staged by Accord:
    /// its BIOS is only checked.
    staged: bool,
    /// Reads in a row that failed, since when, and the last one's error.
    errors: u32,
    erring_since: u64,
    error: Option<String>,
    /// A checked BIOS that failed to read too often: read seldom, the
    /// node left tainted meanwhile.
    unreadable: bool,
}

impl Staging {
    fn new(profile: &str, phase: Phase, staged: bool) -> Staging {
        Staging {
            profile: profile.to_owned(),
            phase,
            staged,
            errors: 0,
            erring_since: 0,
            error: None,
            unreadable: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The power-on (staging, then the Reset) is under way.
    PowerOn,
    /// Staged and on: read it back this round.
    Read,
    /// A read is out since `at` (Unix seconds).
    Reading { at: u64 },
    /// Read again at `at`: not as wanted yet while the machine is in
    /// POST, or the last read failed.
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

/// The machine is on (its BMC showed it: the lifecycle left PoweringOn).
fn is_on(stage: Stage) -> bool {
    matches!(
        stage,
        Stage::Booting
            | Stage::AgentUp
            | Stage::Ready
            | Stage::InUse
            | Stage::Idle
            | Stage::Unhealthy
    )
}

/// The machine has booted: its agent came up, so POST is over and staged
/// settings have applied, or never will.
fn has_booted(stage: Stage) -> bool {
    matches!(
        stage,
        Stage::AgentUp | Stage::Ready | Stage::InUse | Stage::Idle | Stage::Unhealthy
    )
}

/// How long after the `errors`-th failed read in a row to read again.
fn retry_after(errors: u32) -> u64 {
    let doublings = errors.saturating_sub(1).min(8);
    (READ_RETRY_S << doublings).min(READ_RETRY_MAX_S)
}

impl Decider {
    /// BIOS records kept from before a restart (the store's): verified
    /// profiles are planned with, not staged again; a staged one not yet
    /// read back is read back once its machine is on (`bios_checks`); a
    /// node whose wanted profile did not take is held Failed again (in
    /// act mode) until its BMC shows it off.
    pub fn seed_bios(&mut self, records: BTreeMap<String, BiosRecord>) {
        self.bios.records = records
            .into_iter()
            .filter(|(n, _)| self.life.nodes.contains_key(n))
            .collect();
        if self.settings.mode != Mode::Act {
            return;
        }
        let held: Vec<(String, String)> = self
            .bios
            .records
            .iter()
            .filter_map(|(node, rec)| match &rec.result {
                BiosResult::Failed { reason } if self.bios_wanted(node) == Some(&rec.profile) => {
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
            if let Some(life) = self.life.nodes.get_mut(&node) {
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
            self.bios.differs.remove(&intent.node);
            self.bios.staging.insert(
                intent.node.clone(),
                Staging::new(profile, Phase::PowerOn, true),
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
        self.bios.differs.remove(node);
        self.bios
            .staging
            .insert(node.to_owned(), Staging::new(profile, Phase::PowerOn, true));
        // As the executor keeps it in the store with the power-on.
        self.bios.records.insert(
            node.to_owned(),
            BiosRecord {
                profile: profile.to_owned(),
                at: self.bios.now,
                result: BiosResult::Staged,
            },
        );
    }

    /// The fleet's wanted profile for `node`.
    fn bios_wanted(&self, node: &str) -> Option<&String> {
        self.fleet.node(node).and_then(|n| n.bios_profile.as_ref())
    }

    /// Whether Accord has verified `profile` on `node` (its store says so).
    fn bios_verified(&self, node: &str, profile: &str) -> bool {
        self.bios
            .records
            .get(node)
            .is_some_and(|r| r.result == BiosResult::Verified && r.profile == profile)
    }

    /// A node whose profile did not take stays Failed while it runs.
    pub(super) fn bios_holds(&self, node: &str) -> bool {
        self.bios.held.contains_key(node)
    }

    /// The planner plans with the profile Accord verified (the store's),
    /// not with the fleet file's statement, once there is one; a staged
    /// profile not read back, or one a running machine's BIOS was read
    /// not to have, is not applied (it is staged at the next power-on).
    /// Whether any BIOS state is kept for the node, or a profile is
    /// wanted on it (the fleet as seen is then worked out every round).
    pub(super) fn bios_touches(&self, node: &str) -> bool {
        let b = &self.bios;
        // (The caller has the node's wanted profile at hand.)
        if b.records.is_empty() && b.staging.is_empty() && b.held.is_empty() && b.differs.is_empty()
        {
            return false;
        }
        self.bios_wanted(node).is_some()
            || self.bios.records.contains_key(node)
            || self.bios.staging.contains_key(node)
            || self.bios.held.contains_key(node)
            || self.bios.differs.contains_key(node)
    }

    pub(super) fn bios_plan_with(&self, n: &mut Node) {
        if let Some(rec) = self.bios.records.get(&n.name) {
            n.bios_profile_applied = match rec.result {
                BiosResult::Verified => Some(rec.profile.clone()),
                // Whatever the machine has now, it is not known to be a
                // profile.
                BiosResult::Failed { .. } | BiosResult::Staged => None,
            };
        }
        if let Some(d) = self.bios.differs.get(&n.name) {
            if n.bios_profile_applied.as_ref() == Some(&d.profile) {
                n.bios_profile_applied = None;
            }
        }
        // The planner sees Nodes with Accord's taints as it will publish
        // them, and its BIOS taint is lifted once a staging is verified.
        // Not so on a running machine left unverified (its BIOS is not
        // the profile, or cannot be read): the taint stays until its next
        // power-on, and pods that do not tolerate it will not go there.
        if self.settings.mode == Mode::Act && self.bios_left_unverified(&n.name) {
            n.taints.retain(|t| t.key != BIOS_TAINT_KEY);
            n.taints.extend(self.bios_taint(&n.name));
        }
    }

    /// A running machine left tainted `unverified` until its next
    /// power-on: read not to have its wanted profile, or (nothing staged
    /// by Accord) its BIOS could not be read [`READ_ERRORS_AT_MOST`]
    /// times in a row (or for the boot deadline).
    fn bios_left_unverified(&self, node: &str) -> bool {
        let on = self.life.nodes.get(node).is_some_and(|l| is_on(l.stage));
        let staging = self.bios.staging.get(node);
        let differs = self
            .bios
            .differs
            .get(node)
            .is_some_and(|d| Some(&d.profile) == self.bios_wanted(node));
        let unreadable = staging.is_some_and(|s| s.unreadable);
        on && !staging.is_some_and(|s| s.staged) && (differs || unreadable)
    }

    /// Accord's BIOS taint on the node's Kubernetes Node: `failed` while
    /// one that did not take holds it; `unverified` while its wanted
    /// profile (the fleet's) is not the one verified (the store's),
    /// staged or not, on or off; none otherwise (a kubelet's registration
    /// taint is lifted).
    pub(super) fn bios_taint(&self, node: &str) -> Option<Taint> {
        let unverified = self.bios.staging.contains_key(node)
            || self
                .bios_wanted(node)
                .is_some_and(|p| !self.bios_verified(node, p));
        let value = if self.bios.held.contains_key(node) {
            FAILED
        } else if unverified {
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
            Some(BiosRecord {
                result: BiosResult::Staged,
                ..
            }) => (None, None, None),
            None => (n.bios_profile_applied.clone(), None, None),
        };
        // Read not to be it: whatever the fleet file says.
        let applied = applied.filter(|a| {
            self.bios
                .differs
                .get(&n.name)
                .is_none_or(|d| &d.profile != a)
        });
        let wanted = n.bios_profile.clone();
        if wanted.is_none() && applied.is_none() && rec.is_none() {
            return None;
        }
        let failed_wanted = rec.is_some_and(|r| {
            matches!(r.result, BiosResult::Failed { .. }) && Some(&r.profile) == wanted.as_ref()
        });
        let differs = self
            .bios
            .differs
            .get(&n.name)
            .filter(|d| Some(&d.profile) == wanted.as_ref());
        let staging = self.bios.staging.get(&n.name);
        let state = if staging.is_some_and(|s| s.staged) {
            BiosState::Staged
        } else if self.bios.held.contains_key(&n.name) {
            BiosState::Failed
        } else if differs.is_some() {
            BiosState::Pending
        } else if failed_wanted {
            BiosState::Failed
        } else if wanted.is_none() || wanted == applied {
            BiosState::Applied
        } else {
            BiosState::Pending
        };
        let unread = staging.and_then(|s| {
            s.error.as_ref().map(|e| {
                format!(
                    "its BIOS could not be read ({} time(s) in a row): {e}",
                    s.errors
                )
            })
        });
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
                .or(unread)
                .or_else(|| differs.map(|d| d.reason.clone()))
                .or(reason),
        })
    }
}
