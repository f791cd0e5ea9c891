//! `accord-agent`: discovers the machine it runs on (hwloc and NVML) and
//! turns it into Accord's hardware model.
//!
//! Sources are live or recorded: an hwloc XML export stands in for live
//! hwloc, an NVML snapshot (or an `nvidia-smi -q -x` dump) for live NVML. A
//! replayed capture goes through the same code as a live host.

pub mod capture;
pub mod command;
pub mod config;
pub mod error;
pub mod hwloc;
pub mod merge;
pub mod mig;
pub mod nvml;
pub mod pod_resources;
pub mod run;
pub mod summary;
pub mod xml;

use std::path::Path;

use accord::hardware::NodeHardware;
use tracing::debug;

pub use error::DiscoveryError;
use error::Result;
use hwloc::HwlocInput;
use nvml::live::LiveNvml;

/// Both hwloc and nvidia-smi exports start with a DOCTYPE; the DTD itself
/// is never fetched or expanded.
pub(crate) fn xml_options() -> roxmltree::ParsingOptions {
    roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    }
}

/// Where each half of discovery comes from. `None` means live.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    pub hwloc_xml: Option<&'a Path>,
    pub nvml_snapshot: Option<&'a Path>,
    pub nvidia_smi_xml: Option<&'a Path>,
}

impl Sources<'_> {
    fn is_offline(&self) -> bool {
        self.hwloc_xml.is_some()
    }
}

/// Discovers the hardware from `sources`.
///
/// Live NVML is optional: when it is missing the model says so in
/// `discovery.notes` and holds what hwloc sees. With an offline hwloc source
/// and no NVML file, live NVML is not queried: the two halves would describe
/// different machines.
pub fn discover(sources: Sources<'_>) -> Result<NodeHardware> {
    let hwloc_input = match sources.hwloc_xml {
        Some(path) => HwlocInput::XmlFile(path),
        None => HwlocInput::Live,
    };
    let mut hw = hwloc::discover(hwloc_input)?;
    if let Some(path) = sources.nvml_snapshot {
        let snapshot = nvml::load_snapshot(path)?;
        merge::merge(&mut hw, &snapshot, path.display().to_string());
    } else if let Some(path) = sources.nvidia_smi_xml {
        let snapshot = nvml::nvidia_smi::import_file(path)?;
        merge::merge(&mut hw, &snapshot, path.display().to_string());
    } else if sources.is_offline() {
        hw.discovery
            .notes
            .push("NVML not consulted: the hwloc topology is a recording".to_owned());
    } else {
        match nvml::live::collect() {
            // What the driver says is held to the limits a snapshot file
            // is: past them accordd would refuse every report, so hwloc's
            // view is reported instead, with why.
            LiveNvml::Available(snapshot) => match nvml::check_snapshot(&snapshot) {
                Ok(()) => merge::merge(&mut hw, &snapshot, "live".to_owned()),
                Err(reason) => hw.discovery.notes.push(format!(
                    "NVML's answer is not plausible ({reason}); reporting what hwloc sees"
                )),
            },
            LiveNvml::Unavailable(reason) => {
                // Said once, by whoever shows the model (summary or log).
                debug!(%reason, "NVML not available; reporting what hwloc sees");
                hw.discovery
                    .notes
                    .push(format!("NVML not available: {reason}"));
            }
        }
    }
    if !sources.is_offline() {
        enrich_live(&mut hw);
    }
    Ok(hw)
}

/// Discovers a replayed machine whose NVML view is held in memory rather
/// than read from its file: the MIG twin's current state
/// ([`mig::replay::ReplayedGpus::snapshot`]), which starts as the recorded
/// snapshot `origin` names. The same hwloc reading and the same merge as a
/// snapshot file, so an unchanged twin discovers byte for byte as the file.
pub fn discover_replayed(
    hwloc_xml: &Path,
    snapshot: &nvml::NvmlSnapshot,
    origin: &Path,
) -> Result<NodeHardware> {
    let mut hw = hwloc::discover(HwlocInput::XmlFile(hwloc_xml))?;
    merge::merge(&mut hw, snapshot, origin.display().to_string());
    Ok(hw)
}

/// Facts hwloc does not carry but the live host shows in sysfs/procfs.
fn enrich_live(hw: &mut NodeHardware) {
    if hw.machine.hostname.is_none() {
        hw.machine.hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty());
    }
    for nic in &mut hw.nics {
        if nic.link_speed_mbps.is_some() {
            continue;
        }
        // `speed` is -1 or unreadable while a link is down: unknown, not 0.
        nic.link_speed_mbps = nic.interfaces.iter().find_map(|ifname| {
            std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
        });
    }
}
