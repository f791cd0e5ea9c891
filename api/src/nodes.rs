//! A node as accordd keeps it (`NodeRecord`, also the sled record's
//! shape) and as the admin API shows it (`NodeView`).

use accord::hardware::NodeHardware;
use serde::{Deserialize, Serialize};

/// What identifies the machine behind a node name: its serial if known,
/// else its GPU UUIDs. A report whose identity contradicts the stored one
/// is refused (a machine swapped under the same name must be declared).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineIdentity {
    pub serial: Option<String>,
    pub gpu_uuids: Vec<String>,
}

impl MachineIdentity {
    pub fn of(hw: &NodeHardware) -> MachineIdentity {
        let mut gpu_uuids: Vec<String> = hw.gpus.iter().filter_map(|g| g.uuid.clone()).collect();
        gpu_uuids.sort();
        MachineIdentity {
            serial: hw.machine.serial.clone(),
            gpu_uuids,
        }
    }

    /// Whether the two can be the same machine: equal where both know.
    pub fn compatible(&self, other: &MachineIdentity) -> bool {
        let serial_ok = match (&self.serial, &other.serial) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let gpus_ok = self.gpu_uuids.is_empty()
            || other.gpu_uuids.is_empty()
            || self.gpu_uuids == other.gpu_uuids;
        serial_ok && gpus_ok
    }
}

impl std::fmt::Display for MachineIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.serial {
            Some(s) => write!(f, "serial {s}")?,
            None => write!(f, "no serial")?,
        }
        write!(f, ", {} GPU UUIDs", self.gpu_uuids.len())?;
        if let Some(first) = self.gpu_uuids.first() {
            write!(f, " (first {first})")?;
        }
        Ok(())
    }
}

/// Everything the daemon keeps about one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub identity: MachineIdentity,
    pub hardware: NodeHardware,
    /// Raised each time the hardware model changes.
    pub generation: u64,
    /// Unix seconds of the last hardware report and of the last sign of life.
    pub reported_at: u64,
    pub last_seen: u64,
    pub agent_version: Option<String>,
    /// From the last heartbeat.
    #[serde(default)]
    pub uptime_s: Option<u64>,
    #[serde(default)]
    pub gpu_health: Option<String>,
    /// Set by `accordctl node replace`: the next report may carry a new
    /// machine identity.
    #[serde(default)]
    pub replacement_allowed: bool,
}

impl NodeRecord {
    /// Not heard from within `stale_after_s` of `now`.
    pub fn is_stale(&self, now: u64, stale_after_s: u64) -> bool {
        stale(self.last_seen, now, stale_after_s)
    }
}

/// Not heard from within `stale_after_s` of `now`, having last been heard
/// from at `last_seen`.
pub fn stale(last_seen: u64, now: u64, stale_after_s: u64) -> bool {
    now.saturating_sub(last_seen) > stale_after_s
}

/// What a report did to the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Registered,
    Changed,
    Unchanged,
}

/// One node as the admin API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeView {
    #[serde(flatten)]
    pub record: NodeRecord,
    /// From the fleet file, when accordd has one.
    #[serde(default)]
    pub rack: Option<String>,
    pub state: NodeState,
    /// From the control loop's last round (absent without `[control]`):
    /// which model the node is planned with...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::control::ModelSource>,
    /// ...and where its report and its declaration (or the scheduler's
    /// view) disagree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<accord::truth::Drift>,
    /// ...and its BIOS profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<crate::control::BiosStatus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    Fresh,
    Stale,
}
