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

/// Serials firmware ships unset (the same on every board of a maker):
/// they identify no machine. Compared without case, spaces, dots or
/// hyphens; [`placeholder_serial`] adds shape rules for the rest.
const PLACEHOLDER_SERIALS: &[&str] = &[
    "tobefilledbyoem",
    "tobefilled",
    "defaultstring",
    "default",
    "systemserialnumber",
    "chassisserialnumber",
    "baseboardserialnumber",
    "serialnumber",
    "serial",
    "notspecified",
    "notapplicable",
    "notavailable",
    "notpresent",
    "notsettable",
    "none",
    "na",
    "n/a",
    "[n/a]",
    "unknown",
    "undefined",
    "invalid",
    "empty",
    "null",
    "oem",
    "type1sku0",
    "0123456789",
    "1234567890",
    "123456789",
    "12345678",
    "1234567",
    "123456",
    "abcdefghij",
    "abcdefg",
];

/// Whether `s` is a placeholder: listed, or shaped like one (one
/// character repeated, like `00000000`, `FFFFFFFF` or `XXXXXXX`; text
/// that says it is a serial or unset).
fn placeholder_serial(s: &str) -> bool {
    let folded: String = s
        .chars()
        .filter(|c| !matches!(c, ' ' | '.' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    let mut chars = folded.chars();
    let repeated = chars.next().is_none_or(|first| chars.all(|c| c == first));
    repeated
        || PLACEHOLDER_SERIALS.contains(&folded.as_str())
        || ["serialnumber", "filledby", "notspecified"]
            .iter()
            .any(|w| folded.contains(w))
}

/// Whether a GPU UUID identifies a GPU: not empty, no spaces or controls,
/// not a placeholder NVML or a BMC prints for an unknown one (`N/A`,
/// `[N/A]`, `Unknown`), not all zeros.
pub fn real_gpu_uuid(uuid: &str) -> bool {
    let u = uuid.trim();
    let body = u.strip_prefix("GPU-").unwrap_or(u);
    let lower = body.to_ascii_lowercase();
    !body.is_empty()
        && u.chars().all(|c| c.is_ascii_graphic())
        && !matches!(
            lower.as_str(),
            "n/a"
                | "[n/a]"
                | "na"
                | "none"
                | "unknown"
                | "null"
                | "undefined"
                | "not supported"
                | "[not supported]"
                | "not available"
        )
        && !body.chars().all(|c| c == '0' || c == '-')
}

/// A serial that identifies a machine: not empty, not a placeholder.
fn real_serial(serial: Option<&str>) -> Option<&str> {
    let s = serial?.trim();
    (!placeholder_serial(s)).then_some(s)
}

impl MachineIdentity {
    /// The machine's serial (a placeholder one counts as none) and its GPU
    /// UUIDs, sorted.
    pub fn of(hw: &NodeHardware) -> MachineIdentity {
        let mut gpu_uuids: Vec<String> = hw
            .gpus
            .iter()
            .filter_map(|g| g.uuid.as_deref())
            .filter(|u| real_gpu_uuid(u))
            .map(|u| u.trim().to_owned())
            .collect();
        gpu_uuids.sort();
        gpu_uuids.dedup();
        MachineIdentity {
            serial: real_serial(hw.machine.serial.as_deref()).map(str::to_owned),
            gpu_uuids,
        }
    }

    /// Neither a serial nor a GPU UUID: nothing tells this machine from
    /// another.
    pub fn is_empty(&self) -> bool {
        real_serial(self.serial.as_deref()).is_none() && self.gpu_uuids.is_empty()
    }

    /// Whether a report's identity (`self`) proves it comes from the
    /// machine `bound` names. A bound serial must be reported, and decides
    /// (a GPU that fell off the bus or was replaced is the same machine,
    /// and accordd must hear about it); GPU UUIDs, which tenants can read
    /// from their pods, never stand in for it. Without a bound serial the
    /// GPUs decide: at least half of the larger set in common. Nothing
    /// known in common proves nothing. An empty `bound` (a record from
    /// before identities were bound) binds to anything.
    pub fn proves(&self, bound: &MachineIdentity) -> bool {
        if bound.is_empty() {
            return true;
        }
        if let Some(b) = real_serial(bound.serial.as_deref()) {
            return real_serial(self.serial.as_deref()) == Some(b);
        }
        !self.gpu_uuids.is_empty() && !bound.gpu_uuids.is_empty() && self.mostly_same_gpus(bound)
    }

    /// At least half of the larger GPU set is in both.
    fn mostly_same_gpus(&self, other: &MachineIdentity) -> bool {
        let common = self
            .gpu_uuids
            .iter()
            .filter(|u| other.gpu_uuids.contains(u))
            .count();
        let larger = self.gpu_uuids.len().max(other.gpu_uuids.len());
        common * 2 >= larger && common > 0
    }

    /// Whether the two can be the same machine (per-node tokens: the token
    /// names the node; this only catches a machine swapped under its
    /// name): the serials equal where both know one, else the GPUs mostly
    /// the same where both know them.
    pub fn compatible(&self, other: &MachineIdentity) -> bool {
        if let (Some(a), Some(b)) = (
            real_serial(self.serial.as_deref()),
            real_serial(other.serial.as_deref()),
        ) {
            return a == b;
        }
        self.gpu_uuids.is_empty() || other.gpu_uuids.is_empty() || self.mostly_same_gpus(other)
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

/// The header of a `GET /v1/nodes` page that is not the last: the node
/// name to ask after (`?after=NAME`) for the next page.
pub const NEXT_PAGE_HEADER: &str = "accord-next-after";

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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(serial: Option<&str>, gpus: &[&str]) -> MachineIdentity {
        MachineIdentity {
            serial: serial.map(str::to_owned),
            gpu_uuids: gpus.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn an_identity_proves_a_binding_only_by_a_part_both_know() {
        let bound = id(Some("SN1"), &["GPU-a", "GPU-b"]);
        assert!(id(Some("SN1"), &["GPU-a", "GPU-b"]).proves(&bound));
        // A bound serial is required: the GPUs (their UUIDs readable from
        // a tenant's pod) do not stand in for it.
        assert!(!id(None, &["GPU-a", "GPU-b"]).proves(&bound));
        assert!(id(Some("SN1"), &[]).proves(&bound));
        // The defect: nothing known used to match anything.
        assert!(!id(None, &[]).proves(&bound));
        assert!(!id(Some("To Be Filled By O.E.M."), &[]).proves(&bound));
        assert!(!id(Some("SN2"), &["GPU-a", "GPU-b"]).proves(&bound));
        // A GPU that fell off the bus, or was replaced: the serial says it
        // is the same machine, and the report must reach accordd.
        assert!(id(Some("SN1"), &["GPU-a"]).proves(&bound));
        assert!(id(Some("SN1"), &["GPU-a", "GPU-c"]).proves(&bound));
        // Without a bound serial the GPUs decide: half of them in common.
        let bound = id(None, &["GPU-a", "GPU-b"]);
        assert!(id(None, &["GPU-a"]).proves(&bound));
        assert!(!id(None, &["GPU-c", "GPU-d"]).proves(&bound));
        let eight = id(None, &["G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8"]);
        assert!(id(None, &["G1", "G2", "G3", "G4", "G5", "G6", "G7"]).proves(&eight));
        assert!(!id(None, &["G1", "G2", "G3", "X4", "X5", "X6", "X7", "X8"]).proves(&eight));
        // A serial-only machine and a GPU-only report share no part.
        assert!(!id(None, &["GPU-a"]).proves(&id(Some("SN1"), &[])));
        // A record bound to nothing (older store) is bound now.
        assert!(id(Some("SN1"), &[]).proves(&id(None, &[])));
    }

    #[test]
    fn placeholder_serials_identify_nothing() {
        for s in [
            "",
            "  ",
            "Default string",
            "0123456789",
            "00000000",
            "Not Specified",
            "FFFFFFFF",
            "XXXXXXXXXX",
            "Chassis Serial Number",
            "To be filled by O.E.M",
            "Default-String",
            "SerialNumber",
            "Type1Sku0",
            "N/A",
            "Unknown",
        ] {
            assert!(id(Some(s), &[]).is_empty(), "{s:?}");
        }
        assert!(!id(Some("CN7475123A0042"), &[]).is_empty());
        assert!(!id(None, &["GPU-a"]).is_empty());
    }

    #[test]
    fn placeholder_gpu_uuids_identify_nothing() {
        for u in [
            "",
            "  ",
            "N/A",
            "[N/A]",
            "GPU-N/A",
            "Unknown",
            "GPU-00000000-0000-0000-0000-000000000000",
            "GPU a",
        ] {
            assert!(!real_gpu_uuid(u), "{u:?}");
        }
        assert!(real_gpu_uuid("GPU-00005a17-0000-4000-a100-d6cc78506ee0"));
    }
}
