//! `accordd.toml`: parsed strictly (unknown keys are errors), then
//! validated as a whole so `accordd check-config` reports every problem at
//! once. Secrets are read from files, which must not be readable by others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    File(#[from] accord::config_file::ConfigFileError),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub agents: AgentsConfig,
    pub admin: AdminConfig,
    /// The fleet file (racks, profiles, reservations; config/fleet.toml).
    pub fleet: Option<FleetConfig>,
    /// The BMC inventory (config/bmcs.toml).
    pub redfish: Option<RedfishConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedfishConfig {
    pub inventory: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    pub file: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the HTTP API listens on.
    pub listen: String,
    /// Largest request body accepted, bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// PEM certificate chain and private key: with both, the API speaks
    /// TLS only.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// sled directory (systemd's `StateDirectory`).
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// One token shared by all agents.
    pub token_file: Option<PathBuf>,
    /// One token per node: a file named after the node.
    pub token_dir: Option<PathBuf>,
    /// A node not heard from for this long is shown stale (never deleted).
    #[serde(default = "default_stale")]
    pub stale_after_s: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Token for the admin API and `accordctl`.
    pub token_file: PathBuf,
}

fn default_max_body() -> usize {
    4 << 20
}

fn default_stale() -> u64 {
    120
}

/// Problems with a secret file: unreadable, empty, or open to others.
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
    match std::fs::read_to_string(path) {
        Ok(t) if t.trim().is_empty() => Some(format!("{key}: {} is empty", path.display())),
        Ok(_) => None,
        Err(e) => Some(format!("{key}: {}: {e}", path.display())),
    }
}

impl DaemonConfig {
    pub fn parse(text: &str, file: &Path) -> Result<DaemonConfig, ConfigError> {
        Ok(accord::config_file::parse(
            text,
            &file.display().to_string(),
        )?)
    }

    /// Reads, parses and validates `file`.
    pub fn load(file: &Path) -> Result<DaemonConfig, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
            file: file.to_owned(),
            source,
        })?;
        Ok(accord::config_file::parse_valid(
            &text,
            &file.display().to_string(),
            DaemonConfig::validate,
        )?)
    }

    /// Every problem, each naming its key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.server.listen.parse::<SocketAddr>().is_err() {
            problems.push(format!(
                "server.listen: {:?} is not an address like 127.0.0.1:7480",
                self.server.listen
            ));
        }
        if self.server.max_body_bytes < 1024 {
            problems.push("server.max_body_bytes: below 1024 no report fits".to_owned());
        }
        match (&self.server.tls_cert, &self.server.tls_key) {
            (Some(cert), Some(key)) => {
                if let Err(e) = std::fs::metadata(cert) {
                    problems.push(format!("server.tls_cert: {}: {e}", cert.display()));
                }
                problems.extend(check_secret("server.tls_key", key));
            }
            (None, None) => {}
            _ => problems.push("server: set both tls_cert and tls_key, or neither".to_owned()),
        }
        if self.store.dir.as_os_str().is_empty() {
            problems.push("store.dir: empty".to_owned());
        }
        match (&self.agents.token_file, &self.agents.token_dir) {
            (None, None) => problems
                .push("agents: set token_file (shared) or token_dir (one per node)".to_owned()),
            (Some(_), Some(_)) => {
                problems.push("agents: set token_file or token_dir, not both".to_owned())
            }
            (Some(f), None) => problems.extend(check_secret("agents.token_file", f)),
            (None, Some(d)) => problems.extend(check_secret("agents.token_dir", d)),
        }
        if self.agents.stale_after_s == 0 {
            problems.push("agents.stale_after_s: must be above 0".to_owned());
        }
        problems.extend(check_secret("admin.token_file", &self.admin.token_file));
        if let Some(f) = &self.fleet {
            if let Err(e) = crate::load_fleet(&f.file) {
                problems.push(format!("fleet.file: {e:#}"));
            }
        }
        if let Some(r) = &self.redfish {
            if let Err(e) = accord_redfish::Inventory::load(&r.inventory) {
                problems.push(format!(
                    "redfish.inventory: {}",
                    accord::config_file::error_chain(&e)
                ));
            }
        }
        problems
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.server.listen.parse().expect("validated")
    }
}
