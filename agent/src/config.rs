//! agent.toml: where accordd is, how this node is discovered (live or from
//! recordings), heartbeat and backoff timings, MIG and the kubelet's
//! pod-resources socket; parsed strictly, every problem named by key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Sources;

#[derive(Debug, thiserror::Error)]
pub enum AgentConfigError {
    /// The file cannot be read, is not TOML of the right shape (file,
    /// line, column, key) or is invalid (every problem).
    #[error(transparent)]
    File(#[from] accord::config_file::ConfigFileError),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub daemon: DaemonSection,
    #[serde(default)]
    pub node: NodeSection,
    #[serde(default)]
    pub discovery: DiscoverySection,
    #[serde(default)]
    pub heartbeat: HeartbeatSection,
    #[serde(default)]
    pub backoff: BackoffSection,
    #[serde(default)]
    pub mig: MigSection,
    #[serde(default)]
    pub kubelet: KubeletSection,
}

/// The kubelet on this host (`[kubelet]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeletSection {
    /// The kubelet's pod-resources socket, read on every heartbeat for
    /// the device-plugin devices pods hold ([`crate::pod_resources`]).
    /// Default: [`crate::pod_resources::DEFAULT_SOCKET`]; `""` turns it
    /// off. No socket there (no kubelet on this host): nothing is said.
    #[serde(default = "default_pod_resources_socket")]
    pub pod_resources_socket: PathBuf,
}

impl Default for KubeletSection {
    fn default() -> Self {
        KubeletSection {
            pod_resources_socket: default_pod_resources_socket(),
        }
    }
}

fn default_pod_resources_socket() -> PathBuf {
    PathBuf::from(crate::pod_resources::DEFAULT_SOCKET)
}

/// MIG commands from accordd (`[mig]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSection {
    /// Reset a GPU when enabling MIG mode needs it (A100, A30); otherwise
    /// such a command is answered `reset_required` and changes no instance.
    #[serde(default)]
    pub allow_gpu_reset: bool,
}

/// accordd: one (`url`) or its replicas (`urls`), exactly one of the two;
/// the token and the CA apply to every URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSection {
    /// accordd's API, one daemon.
    pub url: Option<String>,
    /// accordd's replicas (high availability): each keeps its own copy of
    /// the hardware model, so the agent reports to every one of them,
    /// independently. At most [`MAX_DAEMON_URLS`].
    pub urls: Option<Vec<String>>,
    pub token_file: PathBuf,
    /// PEM CA certificate to trust for an https URL (a private CA);
    /// the system's roots are always trusted.
    pub ca_file: Option<PathBuf>,
}

/// The most accordd URLs (`daemon.urls`) an agent reports to.
pub const MAX_DAEMON_URLS: usize = 16;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// The Kubernetes node name; default: the hostname.
    pub name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySection {
    #[serde(default = "default_discovery_s")]
    pub interval_s: u64,
    /// Replay recorded hardware instead of this host (the local lab).
    pub hwloc_xml: Option<PathBuf>,
    pub nvml_snapshot: Option<PathBuf>,
    pub nvidia_smi_xml: Option<PathBuf>,
}

impl Default for DiscoverySection {
    fn default() -> Self {
        DiscoverySection {
            interval_s: default_discovery_s(),
            hwloc_xml: None,
            nvml_snapshot: None,
            nvidia_smi_xml: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatSection {
    #[serde(default = "default_heartbeat_ms")]
    pub interval_ms: u64,
}

impl Default for HeartbeatSection {
    fn default() -> Self {
        HeartbeatSection {
            interval_ms: default_heartbeat_ms(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackoffSection {
    #[serde(default = "default_initial_ms")]
    pub initial_ms: u64,
    #[serde(default = "default_max_ms")]
    pub max_ms: u64,
}

impl Default for BackoffSection {
    fn default() -> Self {
        BackoffSection {
            initial_ms: default_initial_ms(),
            max_ms: default_max_ms(),
        }
    }
}

fn default_discovery_s() -> u64 {
    300
}
fn default_heartbeat_ms() -> u64 {
    15_000
}
fn default_initial_ms() -> u64 {
    500
}
fn default_max_ms() -> u64 {
    60_000
}

impl AgentConfig {
    pub fn parse(text: &str, file: &Path) -> Result<AgentConfig, AgentConfigError> {
        Ok(accord::config_file::parse(
            text,
            &file.display().to_string(),
        )?)
    }

    pub fn load(file: &Path) -> Result<AgentConfig, AgentConfigError> {
        let text = accord_api::files::read_to_string(file, accord_api::files::limit::CONFIG)
            .map_err(|source| accord::config_file::ConfigFileError::read(file, source))?;
        Ok(accord::config_file::parse_valid(
            &text,
            &file.display().to_string(),
            AgentConfig::validate,
        )?)
    }

    /// Every problem, each naming its key.
    pub fn validate(&self) -> Vec<String> {
        use std::os::unix::fs::PermissionsExt;
        let mut problems = self.daemon_url_problems();
        match std::fs::metadata(&self.daemon.token_file) {
            Err(e) => problems.push(format!(
                "daemon.token_file: {}: {e}",
                self.daemon.token_file.display()
            )),
            Ok(m) => problems.extend(accord::config_file::secret_mode_problem(
                "daemon.token_file",
                &self.daemon.token_file,
                m.permissions().mode(),
                m.is_dir(),
            )),
        }
        if let Some(ca) = &self.daemon.ca_file {
            if let Err(e) = std::fs::metadata(ca) {
                problems.push(format!("daemon.ca_file: {}: {e}", ca.display()));
            }
        }
        if let Some(name) = &self.node.name {
            if let Err(e) = accord_api::validate_node_name(name) {
                problems.push(format!("node.name: {e}"));
            }
        }
        if self.discovery.interval_s == 0 {
            problems.push("discovery.interval_s: must be above 0".to_owned());
        }
        let socket = &self.kubelet.pod_resources_socket;
        if !socket.as_os_str().is_empty() && !socket.is_absolute() {
            problems.push(format!(
                "kubelet.pod_resources_socket: {}: not an absolute path (\"\" turns it off)",
                socket.display()
            ));
        }
        if self.heartbeat.interval_ms == 0 {
            problems.push("heartbeat.interval_ms: must be above 0".to_owned());
        }
        if self.backoff.initial_ms == 0 || self.backoff.max_ms < self.backoff.initial_ms {
            problems.push("backoff: need 0 < initial_ms <= max_ms".to_owned());
        }
        if self.discovery.hwloc_xml.is_none()
            && (self.discovery.nvml_snapshot.is_some() || self.discovery.nvidia_smi_xml.is_some())
        {
            problems.push(
                "discovery: a recorded NVML view needs the recorded topology (hwloc_xml) too"
                    .to_owned(),
            );
        }
        problems
    }

    /// The accordd URLs this agent reports to: `daemon.url`, or every
    /// one of `daemon.urls` (both, in a configuration that sets both;
    /// [`AgentConfig::validate`] refuses that).
    pub fn daemon_urls(&self) -> Vec<&str> {
        self.daemon
            .url
            .iter()
            .chain(self.daemon.urls.iter().flatten())
            .map(String::as_str)
            .collect()
    }

    /// What is wrong with `daemon.url` and `daemon.urls`, each problem
    /// naming its key (pure: no file is read).
    pub(crate) fn daemon_url_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        // What is wrong with one URL, said without echoing a secret: a
        // user name or password in it would be logged and shown wherever
        // the URL is (the agent's token goes in daemon.token_file).
        let url_problem = |u: &str| -> Option<String> {
            let parsed = reqwest::Url::parse(u)
                .ok()
                .filter(|p| matches!(p.scheme(), "http" | "https") && p.host_str().is_some());
            match parsed {
                None => Some(format!("{u:?} is not an http(s) URL")),
                Some(p) if !p.username().is_empty() || p.password().is_some() => Some(format!(
                    "{}://<redacted>@{}: a URL carries no credentials; the agent's token goes in daemon.token_file",
                    p.scheme(),
                    p.host_str().unwrap_or_default()
                )),
                Some(_) => None,
            }
        };
        match (&self.daemon.url, &self.daemon.urls) {
            (Some(_), Some(_)) => problems.push(
                "daemon.urls: set either daemon.url (one accordd) or daemon.urls (its replicas), not both"
                    .to_owned(),
            ),
            (None, None) => problems.push(
                "daemon.url: missing; set daemon.url (one accordd) or daemon.urls (its replicas)"
                    .to_owned(),
            ),
            _ => {}
        }
        if let Some(url) = &self.daemon.url {
            if let Some(p) = url_problem(url) {
                problems.push(format!("daemon.url: {p}"));
            }
        }
        if let Some(urls) = &self.daemon.urls {
            if urls.is_empty() {
                problems.push("daemon.urls: empty; list at least one accordd URL".to_owned());
            }
            if urls.len() > MAX_DAEMON_URLS {
                // Each entry is not checked then: a list of a million
                // would be a million problems.
                problems.push(format!(
                    "daemon.urls: {} URLs; at most {MAX_DAEMON_URLS}",
                    urls.len()
                ));
                return problems;
            }
            // The same daemon twice (spelt alike once parsed: the host in
            // any case, a default port, a trailing slash).
            let same = |u: &str| match reqwest::Url::parse(u) {
                Ok(p) => p.as_str().trim_end_matches('/').to_owned(),
                Err(_) => u.to_owned(),
            };
            let mut seen: Vec<String> = Vec::with_capacity(urls.len());
            for (i, url) in urls.iter().enumerate() {
                if let Some(p) = url_problem(url) {
                    problems.push(format!("daemon.urls[{i}]: {p}"));
                    continue;
                }
                let key = same(url);
                if let Some(first) = seen.iter().position(|k| *k == key) {
                    problems.push(format!(
                        "daemon.urls[{i}]: {url:?} repeats daemon.urls[{first}]; list each accordd once"
                    ));
                }
                seen.push(key);
            }
        }
        problems
    }

    pub(crate) fn sources(&self) -> Sources<'_> {
        Sources {
            hwloc_xml: self.discovery.hwloc_xml.as_deref(),
            nvml_snapshot: self.discovery.nvml_snapshot.as_deref(),
            nvidia_smi_xml: self.discovery.nvidia_smi_xml.as_deref(),
        }
    }
}
