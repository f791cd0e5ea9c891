//! The in-memory power twin: the [`PowerControl`] that accordd's executor
//! drives, over machines that change state the moment they are told (or
//! never, for the ones set to fail), with a log of every Reset sent. For
//! the executor and control-loop
//! tests that need no BMC at all. Its BIOS is a map of attributes per
//! machine: staged attributes apply at the next power-on, except on
//! machines set to drop them, to apply them late (a slow POST, with or
//! without the settings object cleared meanwhile), or whose BIOS reads
//! fail for a while (a BMC busy during POST).

use std::collections::BTreeMap;
use std::sync::Mutex;

use accord_redfish::power::{unknown_bios_profile, BiosSeen, PowerControl, PowerError};
use serde_json::{Map, Value};

/// Machines by node name: on or off.
#[derive(Debug, Default)]
pub struct SimulatedPower {
    pub state: Mutex<BTreeMap<String, bool>>,
    /// Nodes whose power-on never lands.
    pub broken: Mutex<Vec<String>>,
    /// `node on|off` per Reset sent.
    pub resets: Mutex<Vec<String>>,
    /// BIOS profiles (the inventory's): name → attributes.
    pub bios_profiles: Mutex<BTreeMap<String, Map<String, Value>>>,
    /// Each machine's current BIOS attributes.
    pub bios: Mutex<BTreeMap<String, Map<String, Value>>>,
    /// Attributes staged per machine: current after its next power-on.
    pub bios_pending: Mutex<BTreeMap<String, Map<String, Value>>>,
    /// Machines whose staged attributes are dropped at the power-on.
    pub bios_never_applies: Mutex<Vec<String>>,
    /// Machines whose staged attributes stay staged after the power-on
    /// until [`SimulatedPower::finish_post`] (a slow POST).
    pub bios_late: Mutex<Vec<String>>,
    /// `node profile` per staging that sent something.
    pub bios_staged: Mutex<Vec<String>>,
    /// Machines whose BMC clears the settings object at the power-on (it
    /// schedules a BIOS job, as Dell iDRAC does): staged attributes are
    /// then neither current nor pending until
    /// [`SimulatedPower::finish_post`] applies them.
    pub bios_job_at_reset: Mutex<Vec<String>>,
    /// Attributes in a scheduled BIOS job, per machine (not readable).
    pub bios_jobs: Mutex<BTreeMap<String, Map<String, Value>>>,
    /// Per machine, how many of its next BIOS reads fail (the BMC busy).
    pub bios_read_errors: Mutex<BTreeMap<String, u32>>,
    /// BIOS reads asked of each machine (failed ones too).
    pub bios_reads: Mutex<BTreeMap<String, u32>>,
}

impl SimulatedPower {
    /// `nodes`, all off.
    pub fn with_nodes(nodes: &[&str]) -> SimulatedPower {
        let s = SimulatedPower::default();
        for n in nodes {
            s.state.lock().expect("lock").insert((*n).to_owned(), false);
        }
        s
    }

    /// Every Reset sent so far, as `node on|off`.
    pub fn resets(&self) -> Vec<String> {
        self.resets.lock().expect("lock").clone()
    }

    fn set(&self, node: &str, on: bool) -> Result<(), PowerError> {
        let mut state = self.state.lock().expect("lock");
        let s = state.get_mut(node).ok_or_else(|| unknown(node))?;
        if *s == on {
            return Ok(());
        }
        self.resets
            .lock()
            .expect("lock")
            .push(format!("{node} {}", if on { "on" } else { "off" }));
        if on && self.broken.lock().expect("lock").iter().any(|b| b == node) {
            return Err(PowerError::Refused {
                node: node.to_owned(),
                reason: "power state still Off after the timeout".into(),
            });
        }
        *s = on;
        let late = self
            .bios_late
            .lock()
            .expect("lock")
            .iter()
            .any(|n| n == node);
        let job = self
            .bios_job_at_reset
            .lock()
            .expect("lock")
            .iter()
            .any(|n| n == node);
        if on && job {
            // The BMC takes the settings into a job run during POST.
            if let Some(pending) = self.bios_pending.lock().expect("lock").remove(node) {
                self.bios_jobs
                    .lock()
                    .expect("lock")
                    .entry(node.to_owned())
                    .or_default()
                    .extend(pending);
            }
        } else if on && !late {
            // Staged settings apply during POST (or are dropped).
            let pending = self
                .bios_pending
                .lock()
                .expect("lock")
                .remove(node)
                .unwrap_or_default();
            if !self
                .bios_never_applies
                .lock()
                .expect("lock")
                .iter()
                .any(|n| n == node)
            {
                self.bios
                    .lock()
                    .expect("lock")
                    .entry(node.to_owned())
                    .or_default()
                    .extend(pending);
            }
        }
        Ok(())
    }

    /// A slow POST ends: `node`'s staged attributes (and its BIOS job's)
    /// apply.
    pub fn finish_post(&self, node: &str) {
        let mut pending = self
            .bios_jobs
            .lock()
            .expect("lock")
            .remove(node)
            .unwrap_or_default();
        pending.extend(
            self.bios_pending
                .lock()
                .expect("lock")
                .remove(node)
                .unwrap_or_default(),
        );
        self.bios
            .lock()
            .expect("lock")
            .entry(node.to_owned())
            .or_default()
            .extend(pending);
    }

    /// BIOS reads asked of `node` so far.
    pub fn bios_reads(&self, node: &str) -> u32 {
        self.bios_reads
            .lock()
            .expect("lock")
            .get(node)
            .copied()
            .unwrap_or(0)
    }

    /// Every staging that sent something, as `node profile`.
    pub fn bios_staged(&self) -> Vec<String> {
        self.bios_staged.lock().expect("lock").clone()
    }

    fn profile(&self, node: &str, profile: &str) -> Result<Map<String, Value>, PowerError> {
        let profiles = self.bios_profiles.lock().expect("lock");
        profiles
            .get(profile)
            .cloned()
            .ok_or_else(|| unknown_bios_profile(node, profile, profiles.keys()))
    }
}

fn unknown(node: &str) -> PowerError {
    PowerError::Refused {
        node: node.to_owned(),
        reason: "unknown to the simulation".into(),
    }
}

impl PowerControl for SimulatedPower {
    async fn is_on(&self, node: &str) -> Result<bool, PowerError> {
        self.state
            .lock()
            .expect("lock")
            .get(node)
            .copied()
            .ok_or_else(|| unknown(node))
    }
    async fn power_on(&self, node: &str) -> Result<(), PowerError> {
        self.set(node, true)
    }
    async fn power_off(&self, node: &str, _force: bool) -> Result<(), PowerError> {
        self.set(node, false)
    }
    async fn verify(&self, node: &str, on: bool) -> Result<(), PowerError> {
        // The twin's changes land at once: an earlier Reset has landed.
        if self.is_on(node).await? == on {
            Ok(())
        } else {
            self.set(node, on)
        }
    }
    async fn stage_bios(&self, node: &str, profile: &str) -> Result<(), PowerError> {
        let wanted = self.profile(node, profile)?;
        self.is_on(node).await?;
        let current = self
            .bios
            .lock()
            .expect("lock")
            .get(node)
            .cloned()
            .unwrap_or_default();
        let mut pending = self.bios_pending.lock().expect("lock");
        let staged = pending.entry(node.to_owned()).or_default();
        let mut sent = false;
        for (k, v) in wanted {
            if current.get(&k) != Some(&v) && staged.get(&k) != Some(&v) {
                staged.insert(k, v);
                sent = true;
            }
        }
        if sent {
            self.bios_staged
                .lock()
                .expect("lock")
                .push(format!("{node} {profile}"));
        }
        Ok(())
    }
    async fn read_bios(&self, node: &str, profile: &str) -> Result<BiosSeen, PowerError> {
        let wanted = self.profile(node, profile)?;
        self.is_on(node).await?;
        *self
            .bios_reads
            .lock()
            .expect("lock")
            .entry(node.to_owned())
            .or_default() += 1;
        if let Some(n) = self.bios_read_errors.lock().expect("lock").get_mut(node) {
            if *n > 0 {
                *n -= 1;
                return Err(PowerError::Refused {
                    node: node.to_owned(),
                    reason: "BMC busy: 503 Service Unavailable".into(),
                });
            }
        }
        let get = |m: &Mutex<BTreeMap<String, Map<String, Value>>>| {
            m.lock()
                .expect("lock")
                .get(node)
                .cloned()
                .unwrap_or_default()
        };
        Ok(BiosSeen {
            wanted,
            current: get(&self.bios),
            pending: get(&self.bios_pending),
        })
    }
}
