//! Errors of discovery. Each names the file or source it is about, so the
//! one-line message an admin sees says what to fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{path}: cannot read file")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not well-formed XML (line {line}, column {column}): {reason}")]
    MalformedXml {
        path: PathBuf,
        line: u32,
        column: u32,
        reason: String,
    },
    /// Refused before parsing: nested too deep, or a DTD internal subset.
    #[error("{path}: {problem}")]
    XmlShape {
        path: PathBuf,
        problem: crate::xml::XmlShapeError,
    },
    #[error("{path}: not an hwloc XML topology (root element is <{root}>, expected <topology>)")]
    NotHwlocXml { path: PathBuf, root: String },
    #[error(
        "{path}: unsupported hwloc XML version {version} (this agent reads hwloc 2.x exports)"
    )]
    UnsupportedHwlocVersion { path: PathBuf, version: String },
    #[error("{path}: hwloc rejected the topology: {reason}")]
    HwlocRejected { path: PathBuf, reason: String },
    #[error("hwloc live discovery failed: {reason}")]
    HwlocLive { reason: String },
    #[error("{path}: invalid NVML snapshot: {reason}")]
    BadSnapshot { path: PathBuf, reason: String },
    #[error("{path}: unsupported NVML snapshot version {version} (this agent reads version {supported})")]
    UnsupportedSnapshotVersion {
        path: PathBuf,
        version: u32,
        supported: u32,
    },
    #[error("{path}: invalid nvidia-smi XML: {reason}")]
    BadNvidiaSmi { path: PathBuf, reason: String },
    #[error("NVML query failed: {what}")]
    Nvml {
        what: String,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    #[error("{path}: cannot write")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = DiscoveryError> = std::result::Result<T, E>;

pub(crate) fn read_file(path: &std::path::Path) -> Result<String> {
    accord_api::files::read_to_string(path, accord_api::files::limit::MODEL).map_err(|source| {
        DiscoveryError::Read {
            path: path.to_owned(),
            source,
        }
    })
}
