//! `accordd.toml`: parsed strictly (unknown keys are errors), then
//! validated as a whole so `accordd check-config` reports every problem at
//! once. Secrets are read from files, which must not be readable by others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read, is not TOML of the right shape (file,
    /// line, column, key) or is invalid (every problem).
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
    /// The control loop: with this section accordd plans (and in `act`
    /// mode acts) on Kubernetes demand.
    pub control: Option<ControlConfig>,
    /// How accordd reaches the Kubernetes API.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// Bounds on the demand one round plans (pods per workload, per round).
    #[serde(default)]
    pub limits: accord::demand::Limits,
    /// High availability: replicas elected on a Kubernetes Lease, shared
    /// state in the API server (off by default: one replica, sled).
    #[serde(default)]
    pub ha: HaConfig,
}

/// `[ha]`: two or more accordd replicas on one `coordination.k8s.io/v1`
/// Lease. Only the holder acts; the others keep their watches, BMC reads
/// and hardware models warm. The defaults are cluster-autoscaler's and
/// Karpenter's (15 s lease, 10 s renew deadline, 2 s retry).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaConfig {
    pub enabled: bool,
    /// This replica's name in the Lease (`holderIdentity`) and on every
    /// intent it writes; unset: the host name. Unique per replica.
    pub identity: Option<String>,
    /// The namespace of the Lease and of the `AccordNode` objects.
    pub namespace: String,
    pub lease_name: String,
    /// A leader not heard from for this long is replaced.
    pub lease_duration_s: u64,
    /// A leader that has not renewed for this long stops acting (below
    /// `lease_duration_s`: it stops before anyone else may start).
    pub renew_deadline_s: u64,
    /// How often the Lease is renewed or tried.
    pub retry_period_s: u64,
}

impl Default for HaConfig {
    fn default() -> Self {
        HaConfig {
            enabled: false,
            identity: None,
            namespace: "accord-system".to_owned(),
            lease_name: "accordd".to_owned(),
            lease_duration_s: 15,
            renew_deadline_s: 10,
            retry_period_s: 2,
        }
    }
}

impl HaConfig {
    /// Every problem, by key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.enabled {
            return problems;
        }
        if let Some(id) = &self.identity {
            if let Err(e) = accord_api::validate_node_name(id) {
                problems.push(format!("ha.identity: {e}"));
            }
        }
        for (key, value) in [
            ("namespace", &self.namespace),
            ("lease_name", &self.lease_name),
        ] {
            if let Err(e) = accord_api::validate_node_name(value) {
                problems.push(format!("ha.{key}: {e}"));
            }
        }
        if self.namespace.contains('.') {
            problems.push(format!(
                "ha.namespace: {:?} is not a namespace name (an RFC 1123 label, no dots)",
                self.namespace
            ));
        }
        if !(1..=3600).contains(&self.retry_period_s) {
            problems.push("ha.retry_period_s: must be 1 to 3600".to_owned());
        }
        if self.lease_duration_s > 3600 {
            problems.push("ha.lease_duration_s: at most 3600".to_owned());
        }
        if !(self.retry_period_s < self.renew_deadline_s
            && self.renew_deadline_s < self.lease_duration_s)
        {
            problems.push(format!(
                "ha: need retry_period_s < renew_deadline_s < lease_duration_s (have {} < {} < {})",
                self.retry_period_s, self.renew_deadline_s, self.lease_duration_s
            ));
        }
        problems
    }

    /// This replica's identity: `identity`, else the host name.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "accordd".to_owned())
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    /// `observe`: plan, explain, log, expose, act on nothing and send
    /// nothing to any BMC (where admins start). `act`: execute.
    pub mode: accord_api::control::Mode,
    /// A round starts this long after the last change...
    #[serde(default = "default_batch_idle_ms")]
    pub batch_idle_ms: u64,
    /// ...or this long after the first, whichever is sooner.
    #[serde(default = "default_batch_max_ms")]
    pub batch_max_ms: u64,
    /// How often every BMC's power state is read (act mode); nodes on
    /// their way up or down are read every `transition_poll_ms`.
    #[serde(default = "default_bmc_poll_ms")]
    pub bmc_poll_ms: u64,
    #[serde(default = "default_transition_poll_ms")]
    pub transition_poll_ms: u64,
    /// A round runs at least this often (deadlines, idle timers).
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// How long each lifecycle step may take before the node is Failed.
    #[serde(default)]
    pub deadlines: accord::lifecycle::Deadlines,
    /// A Provisioned ProvisioningRequest's nodes are held (not powered
    /// off) this long for its pods, then BookingExpired (cluster-autoscaler's
    /// default: 10 minutes).
    #[serde(default = "default_booking_s")]
    pub provisioning_booking_s: u64,
    /// How long a MIG repartition (an agent command, or the GPU Operator's
    /// mig-manager) may take before its node is Failed and its demand
    /// planned again.
    #[serde(default = "default_mig_deadline_s")]
    pub mig_deadline_s: u64,
    /// `gpu-operator` MIG mode: mig-manager's ConfigMap
    /// (`NAMESPACE/NAME`, the one the ClusterPolicy's
    /// `spec.migManager.config.name` names), key `config.yaml`: accordd
    /// adds the configurations it names there.
    #[serde(default = "default_mig_parted_configmap")]
    pub mig_parted_configmap: String,
    /// `gpu-operator` MIG mode: how long after the ConfigMap holds a
    /// configuration accordd sets the Node label naming it (mig-manager
    /// reads the ConfigMap through a volume the kubelet syncs: up to its
    /// `syncFrequency`, 1 minute by default, plus the cache's delay).
    #[serde(default = "default_mig_config_sync_s")]
    pub mig_config_sync_s: u64,
    /// `gpu-operator` MIG mode: labels tried per repartition; after
    /// mig-manager's `failed`, the label moves to another name of the
    /// same configuration (it acts only when the label changes).
    #[serde(default = "default_mig_label_tries")]
    pub mig_label_tries: u32,
    /// Before v0.2: a local mig-parted file. Accepted and ignored (said at
    /// start): accordd writes the ConfigMap.
    #[serde(default)]
    pub mig_parted_config: Option<std::path::PathBuf>,
    /// Power-cycling Unhealthy nodes (off by default).
    #[serde(default)]
    pub repair: RepairConfig,
    /// A power-off is sent only once the Node shows the
    /// `accord.dev/powering-off` taint, this long after it first does, and
    /// the node is still idle (a pod that came meanwhile cancels it).
    #[serde(default = "default_power_off_settle_s")]
    pub power_off_settle_s: u64,
}

fn default_power_off_settle_s() -> u64 {
    crate::control::decide::DEFAULT_POWER_OFF_SETTLE_S
}

/// `[control.repair]`: an Unhealthy node with no pods is power-cycled, at
/// most `max_cycles_per_node` times, while less than
/// `max_unhealthy_percent` of the fleet is Unhealthy.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepairConfig {
    pub enabled: bool,
    pub max_cycles_per_node: u32,
    pub max_unhealthy_percent: u32,
}

impl Default for RepairConfig {
    fn default() -> Self {
        let d = crate::control::decide::Repair::default();
        RepairConfig {
            enabled: d.enabled,
            max_cycles_per_node: d.max_cycles_per_node,
            max_unhealthy_percent: d.max_unhealthy_percent,
        }
    }
}

impl From<RepairConfig> for crate::control::decide::Repair {
    fn from(c: RepairConfig) -> Self {
        crate::control::decide::Repair {
            enabled: c.enabled,
            max_cycles_per_node: c.max_cycles_per_node,
            max_unhealthy_percent: c.max_unhealthy_percent,
        }
    }
}

fn default_booking_s() -> u64 {
    600
}

fn default_mig_deadline_s() -> u64 {
    600
}

fn default_mig_parted_configmap() -> String {
    "gpu-operator/accord-mig-parted-config".to_owned()
}

fn default_mig_config_sync_s() -> u64 {
    accord_decide::MigManager::default().sync_s
}

fn default_mig_label_tries() -> u32 {
    accord_decide::MigManager::default().label_tries
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// API server URL reached without credentials (the local lab's fake
    /// API, or `kubectl proxy`). Unset: `kubeconfig`, else the in-cluster
    /// service account, else `$KUBECONFIG` / `~/.kube/config`, as kubectl
    /// finds them.
    pub url: Option<String>,
    /// A kubeconfig file: what the packaged unit uses (its `$HOME` is the
    /// store, so kubectl's `~/.kube/config` is not the admin's). It holds
    /// credentials: readable by accordd's user only, as its other secret
    /// files.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its `current-context`).
    pub context: Option<String>,
    /// The schedulers (`spec.schedulerName`) whose pending pods accordd
    /// plans; empty or unset: `default-scheduler`. Accord plans as
    /// kube-scheduler's default profile filters: list a second profile of
    /// kube-scheduler here only if it filters the same way.
    #[serde(default)]
    pub schedulers: Vec<String>,
}

/// At most this many `kubernetes.schedulers`.
pub const MAX_SCHEDULERS: usize = 16;

impl KubernetesConfig {
    /// The schedulers planned for (`default-scheduler` where none is listed).
    pub fn schedulers(&self) -> std::collections::BTreeSet<String> {
        if self.schedulers.is_empty() {
            [accord_kube::translate::DEFAULT_SCHEDULER.to_owned()].into()
        } else {
            self.schedulers.iter().cloned().collect()
        }
    }

    fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.schedulers.len() > MAX_SCHEDULERS {
            problems.push(format!(
                "kubernetes.schedulers: {} names (at most {MAX_SCHEDULERS})",
                self.schedulers.len()
            ));
            return problems;
        }
        for s in &self.schedulers {
            if let Err(e) = accord_api::validate_node_name(s) {
                problems.push(format!("kubernetes.schedulers: {e}"));
            }
        }
        problems
    }
}

fn default_batch_idle_ms() -> u64 {
    1000
}
fn default_batch_max_ms() -> u64 {
    10_000
}
fn default_bmc_poll_ms() -> u64 {
    30_000
}
fn default_transition_poll_ms() -> u64 {
    2000
}
fn default_tick_ms() -> u64 {
    5000
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
    /// Bounds on what reports may make the store hold
    /// ([`crate::store::StoreLimits`]; its defaults).
    #[serde(default = "default_max_nodes")]
    pub max_nodes: usize,
    #[serde(default = "default_max_node_bytes")]
    pub max_node_bytes: u64,
    #[serde(default = "default_max_store_bytes")]
    pub max_bytes: u64,
}

impl StoreConfig {
    pub fn limits(&self) -> crate::store::StoreLimits {
        crate::store::StoreLimits {
            max_nodes: self.max_nodes,
            max_node_bytes: self.max_node_bytes,
            max_bytes: self.max_bytes,
        }
    }
}

fn default_max_nodes() -> usize {
    crate::store::StoreLimits::default().max_nodes
}

fn default_max_node_bytes() -> u64 {
    crate::store::StoreLimits::default().max_node_bytes
}

fn default_max_store_bytes() -> u64 {
    crate::store::StoreLimits::default().max_bytes
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

pub use accord_api::admin_files::check_secret;

impl DaemonConfig {
    pub fn parse(text: &str, file: &Path) -> Result<DaemonConfig, ConfigError> {
        Ok(accord::config_file::parse(
            text,
            &file.display().to_string(),
        )?)
    }

    /// Reads, parses and validates `file`.
    pub fn load(file: &Path) -> Result<DaemonConfig, ConfigError> {
        let text = accord_api::files::read_to_string(file, accord_api::files::limit::CONFIG)
            .map_err(|source| accord::config_file::ConfigFileError::read(file, source))?;
        Ok(accord::config_file::parse_valid(
            &text,
            &file.display().to_string(),
            DaemonConfig::validate,
        )?)
    }

    /// Every problem, each naming its key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = self.kubernetes.validate();
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
        if self.store.max_nodes == 0 {
            problems.push("store.max_nodes: must be above 0".to_owned());
        }
        if self.store.max_node_bytes < 4096 {
            problems.push("store.max_node_bytes: below 4096 no node's record fits".to_owned());
        }
        if self.store.max_bytes < self.store.max_node_bytes {
            problems.push(format!(
                "store.max_bytes: {} is below store.max_node_bytes ({})",
                self.store.max_bytes, self.store.max_node_bytes
            ));
        }
        let k = &self.kubernetes;
        if k.url.is_some() && (k.kubeconfig.is_some() || k.context.is_some()) {
            problems.push(
                "kubernetes: set url (no credentials) or kubeconfig and context, not both"
                    .to_owned(),
            );
        }
        if let Some(path) = &k.kubeconfig {
            problems.extend(check_secret("kubernetes.kubeconfig", path));
        }
        if k.context.as_deref().is_some_and(|c| c.trim().is_empty()) {
            problems.push("kubernetes.context: empty".to_owned());
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
        if let Some(c) = &self.control {
            if self.fleet.is_none() {
                problems.push(
                    "control: needs [fleet] file (the machines the loop plans with)".to_owned(),
                );
            }
            if c.mode == accord_api::control::Mode::Act && self.redfish.is_none() {
                problems.push(
                    "control.mode: \"act\" needs [redfish] inventory (how nodes are powered)"
                        .to_owned(),
                );
            }
            if c.batch_idle_ms == 0 || c.batch_max_ms < c.batch_idle_ms {
                problems.push(
                    "control: batch_idle_ms must be above 0 and batch_max_ms at least batch_idle_ms"
                        .to_owned(),
                );
            }
            for (key, v) in [
                ("bmc_poll_ms", c.bmc_poll_ms),
                ("transition_poll_ms", c.transition_poll_ms),
                ("tick_ms", c.tick_ms),
            ] {
                if v < 100 {
                    problems.push(format!("control.{key}: below 100 ms"));
                }
            }
            if c.repair.max_unhealthy_percent > 100 {
                problems.push("control.repair.max_unhealthy_percent: above 100".to_owned());
            }
            if c.repair.enabled && c.repair.max_cycles_per_node == 0 {
                problems.push(
                    "control.repair.max_cycles_per_node: 0 with repair enabled (nothing would be repaired)"
                        .to_owned(),
                );
            }
            if c.deadlines.unhealthy_after_s == 0 {
                problems.push("control.deadlines.unhealthy_after_s: must be above 0".to_owned());
            }
            if c.mig_deadline_s == 0 || c.mig_deadline_s > 86_400 {
                problems.push("control.mig_deadline_s: must be 1 to 86400".to_owned());
            }
            if c.power_off_settle_s > 3600 {
                problems.push("control.power_off_settle_s: above 3600".to_owned());
            }
            if c.mig_config_sync_s >= c.mig_deadline_s {
                problems.push(format!(
                    "control.mig_config_sync_s: {} is not below control.mig_deadline_s ({}): every repartition through the GPU Operator would time out",
                    c.mig_config_sync_s, c.mig_deadline_s
                ));
            }
            if !(1..=10).contains(&c.mig_label_tries) {
                problems.push("control.mig_label_tries: must be 1 to 10".to_owned());
            }
            if let Err(e) = crate::control::mig_parted::ConfigMapRef::parse(&c.mig_parted_configmap)
            {
                problems.push(format!("control.mig_parted_configmap: {e}"));
            }
            if let (Some(f), Some(r)) = (&self.fleet, &self.redfish) {
                if let (Ok(fleet), Ok(inv)) = (
                    crate::load_fleet(&f.file),
                    accord_redfish::Inventory::load(&r.inventory),
                ) {
                    if let Ok(resolved) = inv.resolve() {
                        let missing: Vec<String> = fleet
                            .nodes
                            .iter()
                            .filter(|n| !resolved.contains_key(&n.name))
                            .map(|n| n.name.clone())
                            .collect();
                        if c.mode == accord_api::control::Mode::Act && !missing.is_empty() {
                            problems.push(format!(
                                "redfish.inventory: no BMC for fleet node(s) {}",
                                crate::summarize(&missing)
                            ));
                        }
                    }
                }
            }
        }
        problems.extend(self.limits.validate("limits."));
        problems.extend(self.ha.validate());
        if self.ha.enabled && self.control.is_none() {
            problems.push(
                "ha.enabled: needs [control] (replicas elect a leader to run the loop)".to_owned(),
            );
        }
        if let Some(u) = &self.kubernetes.url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                problems.push(format!("kubernetes.url: {u:?} is not an http(s) URL"));
            }
        }
        problems
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.server.listen.parse().expect("validated")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_parse_and_validate_by_key() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/accordd.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let config = DaemonConfig::parse(&text, &file).unwrap();
        assert_eq!(config.limits, accord::demand::Limits::default());
        assert_eq!(config.limits.max_pods_per_workload, 50_000);
        assert_eq!(config.limits.max_pods_per_round, 100_000);

        let without = text.replace("[limits]", "[unused_limits_header_removed]");
        let without: String = without
            .lines()
            .filter(|l| {
                !l.starts_with("[unused_limits_header_removed]") && !l.starts_with("max_pods_")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let config = DaemonConfig::parse(&without, &file).unwrap();
        assert_eq!(config.limits, accord::demand::Limits::default(), "optional");

        let bad = text.replace("max_pods_per_workload = 50000", "max_pods_per_workload = 0");
        let problems = DaemonConfig::parse(&bad, &file).unwrap().validate();
        assert!(
            problems
                .iter()
                .any(|p| p == "limits.max_pods_per_workload: must be at least 1"),
            "{problems:?}"
        );
        let negative = text.replace("max_pods_per_round = 100000", "max_pods_per_round = -1");
        let err = DaemonConfig::parse(&negative, &file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("limits.max_pods_per_round"), "{err}");
    }
}
