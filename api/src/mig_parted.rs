//! The NVIDIA GPU Operator's MIG configurations, in mig-parted's file
//! format (`version: v1`, `mig-configs: NAME: [ {devices, mig-enabled,
//! mig-devices} ]`), as its mig-manager reads them from the ConfigMap
//! named in the ClusterPolicy. Accord names one configuration per node
//! layout it wants (`accord-<hash of the layout>`, a valid label value)
//! and sets it in the Node label `nvidia.com/mig.config`. Pure: accordd's
//! effect writes the file (`daemon/src/control/mig_parted.rs`).
//!
//! mig-parted takes counts per profile and chooses placements itself, so
//! the placements Accord planned are not passed on: the agent's report
//! after the change is what the planner counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The label mig-manager reads: the configuration to apply.
pub const CONFIG_LABEL: &str = "nvidia.com/mig.config";
/// The label mig-manager writes: `pending`, `rebooting`, `success`, `failed`.
pub const STATE_LABEL: &str = "nvidia.com/mig.config.state";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigPartedFile {
    pub version: String,
    #[serde(rename = "mig-configs")]
    pub mig_configs: BTreeMap<String, Vec<DeviceConfig>>,
}

impl Default for MigPartedFile {
    fn default() -> Self {
        MigPartedFile {
            version: "v1".to_owned(),
            mig_configs: BTreeMap::new(),
        }
    }
}

/// One entry of a configuration: these GPUs, MIG on or off, and the MIG
/// devices (profile → count) each of them gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceConfig {
    /// NVML indices (mig-parted also takes `all`; Accord always lists).
    pub devices: Vec<u32>,
    #[serde(rename = "mig-enabled")]
    pub mig_enabled: bool,
    #[serde(
        rename = "mig-devices",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub mig_devices: BTreeMap<String, u32>,
}

/// One GPU's wanted state: its NVML index and, with MIG on, its
/// instances (`PROFILE@START`; only the profiles count here).
pub fn device(index: u32, mig: Option<&[String]>) -> DeviceConfig {
    let mut mig_devices = BTreeMap::new();
    for entry in mig.unwrap_or_default() {
        let profile = entry.split_once('@').map_or(entry.as_str(), |(p, _)| p);
        *mig_devices.entry(profile.to_owned()).or_insert(0) += 1;
    }
    DeviceConfig {
        devices: vec![index],
        mig_enabled: mig.is_some(),
        mig_devices,
    }
}

/// The configuration's name: `accord-` and 16 hex digits of a stable hash
/// (FNV-1a) of its entries, so the same layout always has the same name.
pub fn config_name(entries: &[DeviceConfig]) -> String {
    let text = serde_json::to_string(entries).expect("configs serialize");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("accord-{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_label_values() {
        let layout = vec!["1g.10gb@0".to_owned(), "1g.10gb@1".to_owned()];
        let entries = vec![device(0, Some(&layout)), device(1, None)];
        let name = config_name(&entries);
        assert_eq!(name, config_name(&entries.clone()));
        assert_eq!(name.len(), 23);
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        assert_ne!(name, config_name(&[device(0, None)]));
        assert_eq!(entries[0].mig_devices["1g.10gb"], 2);
        assert!(!entries[1].mig_enabled);
    }
}
