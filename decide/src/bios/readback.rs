//! A node's BIOS read back and judged: reads asked while it boots, what
//! differs from the staged profile named, a node whose profile did not take
//! failed, tainted and held.

use super::*;

impl Decider {
    /// Power-on results and BIOS reads: a staged node whose power-on went
    /// through is read back; a read all as wanted verifies its profile;
    /// one that is not, once the machine has booted, fails the node (a
    /// staged profile) or is said and left running (a checked one); a
    /// read that failed is tried again.
    pub(crate) fn absorb_bios(
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
            let booted = self
                .life
                .nodes
                .get(&node)
                .is_some_and(|l| has_booted(l.stage));
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
    pub(super) fn bios_unread(
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
    pub(super) fn bios_differs(&mut self, node: &str, profile: &str, differ: &str) {
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
    pub(super) fn release_bios_holds(&mut self, snap: &Snapshot) {
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
            let Some(life) = self.life.nodes.get_mut(&node) else {
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
    pub(super) fn bios_failed(
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
        if let Some(life) = self.life.nodes.get_mut(node) {
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
    pub(crate) fn bios_checks(
        &mut self,
        now: u64,
        metrics: &mut RoundMetrics,
        effects: &mut BiosEffects,
    ) {
        self.bios_resume_reads();
        for (node, s) in &mut self.bios.staging {
            let on = self.life.nodes.get(node).is_some_and(|l| is_on(l.stage));
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
    pub(super) fn bios_resume_reads(&mut self) {
        if self.settings.mode != Mode::Act {
            return;
        }
        let lives = &self.life.nodes;
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
}

/// The profile's attributes that do not read back as wanted (in name
/// order), with what was read (`None`: the BIOS has no such attribute).
pub(super) fn differences(seen: &BiosSeen) -> Vec<(&String, Option<&Value>)> {
    seen.wanted
        .iter()
        .filter(|(k, v)| seen.current.get(*k) != Some(*v))
        .map(|(k, _)| (k, seen.current.get(k)))
        .collect()
}

/// `ProcTurboMode is "Enabled", wanted "Disabled"; X is absent, wanted 1`:
/// at most [`NAMED_AT_MOST`] named in about [`LIST_CHARS`], names and
/// values cut at [`VALUE_CHARS`], then how many more.
pub(super) fn differences_text(differ: &[(&String, Option<&Value>)], seen: &BiosSeen) -> String {
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

pub(super) fn value_text(v: &Value) -> String {
    cut(&v.to_string())
}

pub(super) fn cut(s: &str) -> String {
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
