//! The files an admin points both accordd and accordctl at, read the one
//! way: the fleet file (and the hardware models it names), a demand file,
//! and a secret's file (its mode checked before it is read).

use std::path::{Path, PathBuf};

use accord::demand::{Demand, DemandError, Limits};
use accord::fleet::{Fleet, FleetError};
use accord::hardware::{NodeHardware, SCHEMA_VERSION};

use crate::files::{limit, read_to_string};

#[derive(Debug, thiserror::Error)]
pub enum AdminFileError {
    #[error("{}: cannot read file: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Demand(#[from] DemandError),
    #[error("{file}: invalid demand:\n  {}", problems.join("\n  "))]
    InvalidDemand { file: String, problems: Vec<String> },
}

/// Loads a fleet file; hardware-model paths are relative to it.
pub fn load_fleet(path: &Path) -> Result<Fleet, AdminFileError> {
    let text = read_to_string(path, limit::CONFIG).map_err(|source| AdminFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
    let mut loader = |rel: &str| -> Result<NodeHardware, String> {
        let file = dir.join(rel);
        let text = read_to_string(&file, limit::MODEL).map_err(|e| format!("cannot read: {e}"))?;
        let hw: NodeHardware = accord::json::from_str(&text).map_err(|e| e.to_string())?;
        if hw.schema_version > SCHEMA_VERSION {
            return Err(format!(
                "schema_version {} is newer than this program's ({SCHEMA_VERSION})",
                hw.schema_version
            ));
        }
        Ok(hw)
    };
    Ok(Fleet::from_toml(
        &text,
        &path.display().to_string(),
        &mut loader,
    )?)
}

/// A demand file (`accordctl plan --demand FILE.json`): parsed, then every
/// number and key checked (`Demand::validate` with the default limits), so
/// what the planner gets is what a translation would let through.
pub fn parse_demand(text: &str, file: &str) -> Result<Demand, AdminFileError> {
    let demand = Demand::from_json(text, file)?;
    let problems = demand.validate(&Limits::default());
    if !problems.is_empty() {
        return Err(AdminFileError::InvalidDemand {
            file: file.to_owned(),
            problems,
        });
    }
    Ok(demand)
}

/// What is wrong with the secret (a token or password file, or a
/// directory of them) at `path` named by `key`: readable by others, not
/// there, unreadable or empty; `None` when it is fine.
pub fn check_secret(key: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(format!("{key}: {}: {e}", path.display())),
    };
    let mode = meta.permissions().mode();
    if let Some(p) = accord::config_file::secret_mode_problem(key, path, mode, meta.is_dir()) {
        return Some(p);
    }
    if meta.is_dir() {
        return None;
    }
    match read_to_string(path, limit::SECRET) {
        Ok(t) if t.trim().is_empty() => Some(format!("{key}: {} is empty", path.display())),
        Ok(_) => None,
        Err(e) => Some(format!("{key}: {}: {e}", path.display())),
    }
}

/// Seconds since the Unix epoch by the wall clock (0 before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
