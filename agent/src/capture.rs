//! `accord-agent capture DIR`: records this host's hwloc topology and NVML
//! view so it can be replayed elsewhere (`discover --hwloc-xml --nvml-snapshot`).

use std::path::{Path, PathBuf};

use crate::error::{DiscoveryError, Result};
use crate::nvml::live::LiveNvml;
use crate::{discover, hwloc, nvml, Sources};

pub const TOPOLOGY_FILE: &str = "topology.xml";
pub const NVML_FILE: &str = "nvml.json";
pub const MODEL_FILE: &str = "model.json";

/// What a capture wrote.
#[derive(Debug)]
pub struct Capture {
    pub files: Vec<PathBuf>,
    /// Why no NVML snapshot was written, if none was.
    pub nvml_missing: Option<String>,
}

/// Replaced, never written through: capture runs as root, and a symlink
/// planted in DIR must not make it overwrite the symlink's target.
fn write(path: PathBuf, contents: &str) -> Result<PathBuf> {
    accord_api::files::write_replacing(&path, contents.as_bytes()).map_err(|source| {
        DiscoveryError::Write {
            path: path.clone(),
            source,
        }
    })?;
    Ok(path)
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_default();
    s.push('\n');
    s
}

pub fn capture(dir: &Path) -> Result<Capture> {
    std::fs::create_dir_all(dir).map_err(|source| DiscoveryError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let mut files = vec![write(dir.join(TOPOLOGY_FILE), &hwloc::export_live_xml()?)?];
    let nvml_missing = match nvml::live::collect() {
        LiveNvml::Available(snapshot) => {
            files.push(write(dir.join(NVML_FILE), &to_json(&snapshot))?);
            None
        }
        LiveNvml::Unavailable(reason) => Some(reason),
    };
    // The model as the replay will see it, so the two can be compared.
    let topology = dir.join(TOPOLOGY_FILE);
    let snapshot = dir.join(NVML_FILE);
    let model = discover(Sources {
        hwloc_xml: Some(&topology),
        nvml_snapshot: nvml_missing.is_none().then_some(snapshot.as_path()),
        nvidia_smi_xml: None,
    })?;
    files.push(write(dir.join(MODEL_FILE), &to_json(&model))?);
    Ok(Capture {
        files,
        nvml_missing,
    })
}
