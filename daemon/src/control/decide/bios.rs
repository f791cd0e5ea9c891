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

    /// Power-on results and BIOS reads: a staged node whose power-on went
    /// through is read back; a read all as wanted verifies its profile;
    /// one that is not, once the machine has booted, fails the node (a
    /// staged profile) or is said and left running (a checked one); a
    /// read that failed is tried again.
    pub(super) fn absorb_bios(
        &mut self,
        snap: &Snapshot,
        events: &mut Vec<Event>,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        let now = snap.now;
        self.bios.now = now;
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
            let staged = s.staged;
            let node = r.node.clone();
            let seen = match &r.result {
                Ok(seen) => seen,
                Err(e) => {
                    let error = accord::config_file::error_chain(e);
                    self.bios_unread(&node, &profile, error, now, events, metrics, effects);
                    continue;
                }
            };
            {
                let s = self.bios.staging.get_mut(&node).expect("listed");
                s.errors = 0;
                s.error = None;
                s.unreadable = false;
            }
            let differ = differences(seen);
            if differ.is_empty() {
                info!(node = %node, profile = %profile, attributes = seen.wanted.len(), staged, "BIOS profile verified");
                let rec = BiosRecord {
                    profile: profile.clone(),
                    at: now,
                    result: BiosResult::Verified,
                };
                self.bios.records.insert(node.clone(), rec.clone());
                effects.records.push((node.clone(), rec));
                self.bios.staging.remove(&node);
                self.bios.held.remove(&node);
                self.bios.differs.remove(&node);
                *metrics.bios_profiles.entry(VERIFIED).or_default() += 1;
                events.push(Event {
                    regarding: node_ref(&node),
                    reason: "BiosProfileApplied",
                    action: "VerifyBios",
                    note: if staged {
                        format!(
                            "BIOS profile {profile} verified: its {} attributes read back as wanted",
                            seen.wanted.len()
                        )
                    } else {
                        format!(
                            "BIOS profile {profile} verified on the running machine: its {} attributes read as wanted",
                            seen.wanted.len()
                        )
                    },
                    warning: false,
                });
                continue;
            }
            if !staged {
                self.bios_differs(&node, &profile, &differences_text(&differ, seen));
                continue;
            }
            // Settings apply during POST, and a BMC may show them neither
            // current nor pending meanwhile (iDRAC clears the settings
            // object when it schedules the BIOS job): until the machine
            // has booted (its agent is up) they may yet take.
            let booted = self.lives.get(&node).is_some_and(|l| has_booted(l.stage));
            if !booted {
                info!(node = %node, profile = %profile, differ = differ.len(), "BIOS profile not read back as wanted yet while the machine is in POST; reading again");
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

    /// A read that failed: tried again, spaced out. A staged profile's
    /// node fails after [`READ_ERRORS_AT_MOST`] in a row, or once reads
    /// have failed for the boot deadline; a checked one is said once and
    /// read again seldom (the node keeps its `unverified` taint).
    #[allow(clippy::too_many_arguments)]
    fn bios_unread(
        &mut self,
        node: &str,
        profile: &str,
        error: String,
        now: u64,
        events: &mut Vec<Event>,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        let deadline = self.settings.deadlines.boot_to_agent_s;
        let s = self.bios.staging.get_mut(node).expect("listed");
        s.errors += 1;
        if s.errors == 1 {
            s.erring_since = now;
        }
        s.error = Some(error.clone());
        let errors = s.errors;
        let over = errors >= READ_ERRORS_AT_MOST || now.saturating_sub(s.erring_since) >= deadline;
        if !over {
            let after = retry_after(errors);
            s.phase = Phase::Wait { at: now + after };
            info!(node, profile, errors, error = %error, retry_s = after, "BIOS read failed; reading again");
            return;
        }
        if s.staged {
            let reason = format!(
                "BIOS profile {profile} could not be read back ({errors} reads in a row failed): {error}"
            );
            self.bios_failed(node, profile, reason, now, events, metrics, effects);
            return;
        }
        s.phase = Phase::Wait {
            at: now + READ_SLOWLY_S,
        };
        if !std::mem::replace(&mut s.unreadable, true) {
            warn!(node, profile, errors, error = %error, every_s = READ_SLOWLY_S, "the running machine's BIOS cannot be read; it stays tainted unverified and is read again now and then");
        }
    }

    /// A running machine whose BIOS is not its wanted profile, which
    /// Accord did not stage: said once, left running with its
    /// `unverified` taint; the profile is staged at its next power-on.
    fn bios_differs(&mut self, node: &str, profile: &str, differ: &str) {
        self.bios.staging.remove(node);
        let reason = format!(
            "the running machine's BIOS is not profile {profile} ({differ}); Accord stages it at its next power-on"
        );
        warn!(node, profile, reason = %reason, "BIOS profile not applied on a running node (not staged by Accord); it stays tainted unverified");
        self.bios.differs.insert(
            node.to_owned(),
            Differs {
                profile: profile.to_owned(),
                reason,
                been_off: false,
            },
        );
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

    /// The reads to make this round: staged nodes that are on, reads due
    /// again, reads lost for [`READ_AGAIN_S`], and nodes to verify that
    /// no power-on of this run staged. A node is on once its power-on
    /// went through, or once its BMC shows it On (its lifecycle left
    /// PoweringOn): the staging came before its Reset, and the rest of its
    /// wave may take longer.
    pub(super) fn bios_checks(
        &mut self,
        now: u64,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        self.bios_resume_reads();
        for (node, s) in &mut self.bios.staging {
            let on = self.lives.get(node).is_some_and(|l| is_on(l.stage));
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

    /// Readings no power-on of this run asked for (act mode). A machine
    /// seen off lets its reading go (a staging stays in the store and is
    /// read back once it is on again; a BIOS read not to be the profile
    /// is read again if it comes up outside Accord). A machine whose
    /// wanted profile is not verified is read: once on, when a staging of
    /// Accord's is in the store (a restart before its read-back); once
    /// booted otherwise (on at accordd's start, powered on outside
    /// Accord).
    fn bios_resume_reads(&mut self) {
        if self.settings.mode != Mode::Act {
            return;
        }
        let lives = &self.lives;
        let off = |n: &String| lives.get(n).is_none_or(|l| l.stage == Stage::Off);
        self.bios.staging.retain(|n, _| !off(n));
        let mut start = Vec::new();
        for n in &self.fleet.nodes {
            let Some(profile) = &n.bios_profile else {
                continue;
            };
            let Some(stage) = lives.get(&n.name).map(|l| l.stage) else {
                continue;
            };
            if stage == Stage::Off
                || self.bios.staging.contains_key(&n.name)
                || self.bios.held.contains_key(&n.name)
                || self.bios_verified(&n.name, profile)
                || self
                    .bios
                    .differs
                    .get(&n.name)
                    .is_some_and(|d| &d.profile == profile && !d.been_off)
            {
                continue;
            }
            let staged = self
                .bios
                .records
                .get(&n.name)
                .is_some_and(|r| r.result == BiosResult::Staged && &r.profile == profile);
            if (staged && is_on(stage)) || has_booted(stage) {
                start.push((n.name.clone(), profile.clone(), staged));
            }
        }
        for (n, d) in &mut self.bios.differs {
            d.been_off |= off(n);
        }
        for (node, profile, staged) in start {
            if staged {
                info!(node = %node, profile = %profile, "BIOS profile staged by Accord and not read back (before a restart, or the machine was off since): reading it back");
            } else {
                info!(node = %node, profile = %profile, "node up with its BIOS profile not verified and nothing staged by Accord: reading its BIOS");
            }
            self.bios
                .staging
                .insert(node, Staging::new(&profile, Phase::Read, staged));
        }
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
        let on = self.lives.get(node).is_some_and(|l| is_on(l.stage));
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
