//! The BMC inventory (`bmcs.toml`): which BMC powers which node, with what
//! credentials and TLS trust, and the BIOS profiles admins roll out. Nodes
//! are written compactly as ranges (`gpu-[001-128]`), endpoints as
//! patterns (`https://{node}-bmc.mgmt`). Racks (budgets, concurrent
//! power-ons) stay in the fleet file. Parsed strictly (unknown keys name
//! file, line and column), then validated as a whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::client::{BmcSettings, BmcTarget, TlsMode};
pub use crate::login::read_credentials;

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The file cannot be read, is not TOML of the right shape (file,
    /// line, column, key) or is invalid (every problem).
    #[error(transparent)]
    File(#[from] accord::config_file::ConfigFileError),
    #[error("node {node}: no BMC in the inventory")]
    UnknownNode { node: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default)]
    pub retry: RetrySection,
    #[serde(default)]
    pub power: PowerSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default, rename = "bmc")]
    pub bmcs: Vec<BmcEntry>,
    #[serde(default)]
    pub bios_profiles: BTreeMap<String, BiosProfile>,
    /// The directory relative paths are read from (the file's own).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// TOML with `username` and `password`; must be mode 600.
    pub credentials_file: Option<PathBuf>,
    /// PEM bundle the BMCs' certificates are checked against.
    pub ca_file: Option<PathBuf>,
    pub insecure: bool,
    pub max_in_flight: usize,
    pub connect_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub sessions: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            credentials_file: None,
            ca_file: None,
            insecure: false,
            max_in_flight: 2,
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            sessions: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    pub attempts: u32,
    pub initial_ms: u64,
    pub max_ms: u64,
}

impl Default for RetrySection {
    fn default() -> Self {
        RetrySection {
            attempts: 4,
            initial_ms: 500,
            max_ms: 8_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PowerSection {
    pub poll_interval_ms: u64,
    pub on_timeout_s: u64,
    pub off_timeout_s: u64,
    pub resend_after_s: u64,
    pub graceful_timeout_s: u64,
    pub force_after_graceful: bool,
    pub task_timeout_s: u64,
}

impl Default for PowerSection {
    fn default() -> Self {
        PowerSection {
            poll_interval_ms: 2_000,
            on_timeout_s: 120,
            off_timeout_s: 120,
            resend_after_s: 60,
            graceful_timeout_s: 300,
            force_after_graceful: true,
            task_timeout_s: 600,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Requests in flight to all BMCs together.
    pub max_in_flight_total: usize,
    /// The largest answer read from a BMC, in bytes (every read: GETs,
    /// task monitors, session creation).
    pub max_response_bytes: usize,
    /// Failed logins per BMC at most, within `failed_login_window_s`
    /// (default 2 per 600 s: below common vendor lockout thresholds).
    pub max_failed_logins: u32,
    pub failed_login_window_s: u64,
    /// After a failed login, the next no sooner than this (doubled per
    /// failure within the window).
    pub login_backoff_s: u64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_in_flight_total: 64,
            max_response_bytes: crate::client::MAX_RESPONSE_BYTES,
            max_failed_logins: crate::client::DEFAULT_MAX_FAILED_LOGINS,
            failed_login_window_s: crate::client::DEFAULT_FAILED_LOGIN_WINDOW.as_secs(),
            login_backoff_s: crate::client::DEFAULT_LOGIN_BACKOFF.as_secs(),
        }
    }
}

/// `limits.max_response_bytes` bounds: a BMC's BIOS document needs tens
/// of KiB; a GiB read whole is what the limit is there to prevent.
const MAX_RESPONSE_BYTES_RANGE: std::ops::RangeInclusive<usize> = (64 << 10)..=(1 << 30);

/// One or many BMCs: `nodes` is a name, a range pattern, or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BmcEntry {
    pub nodes: NodeNames,
    /// URL pattern: `{node}` is the node name, `{n}` the number the range
    /// gave it (as written, zero padding included).
    pub endpoint: String,
    /// The system's Id (or path); a pattern like `endpoint`. Default: the
    /// BMC's only system.
    pub system: Option<String>,
    pub credentials_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub insecure: Option<bool>,
    pub max_in_flight: Option<usize>,
    pub request_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum NodeNames {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BiosProfile {
    #[serde(default)]
    pub description: String,
    /// BIOS attribute names and values, as the BMC's Bios resource names them.
    pub attributes: Map<String, Value>,
}

/// The most names one pattern may expand to: more than any fleet, few
/// enough that building them is cheap. Counted before anything is built,
/// so `n[0-99999]-[0-99999]` is refused without allocating 10^10 names.
pub const MAX_EXPANDED_NAMES: u64 = 100_000;

/// The most bytes all the names of one pattern may take, and the longest
/// pattern: a long prefix times many numbers is refused as surely as many
/// numbers are.
pub const MAX_EXPANDED_BYTES: u64 = 8 << 20;
const MAX_PATTERN_BYTES: usize = 1024;

/// One bracket group's numbers: `(low, high, width)` per part.
type Group = Vec<(u64, u64, usize)>;

/// Splits `pattern` into literal pieces and bracket groups (pieces has
/// one more entry than groups), checking the syntax and counting the
/// names before any is built.
fn parse_range(pattern: &str) -> Result<(Vec<&str>, Vec<Group>), String> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "{:?}…: {} bytes; a pattern has at most {MAX_PATTERN_BYTES}",
            pattern.chars().take(32).collect::<String>(),
            pattern.len()
        ));
    }
    let (mut pieces, mut groups) = (Vec::new(), Vec::new());
    let mut rest = pattern;
    let mut count: u64 = 1;
    // Each name is at most the literal text and 20 digits per group.
    let mut name_bytes: u64 = 0;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|i| open + i)
            .ok_or_else(|| format!("{pattern:?}: '[' without ']'"))?;
        if rest[..open].contains(']') {
            return Err(format!("{pattern:?}: ']' without '['"));
        }
        let mut group = Vec::new();
        let mut in_group: u64 = 0;
        for part in rest[open + 1..close].split(',') {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (lo, hi): (u64, u64) = match (a.parse(), b.parse()) {
                (Ok(lo), Ok(hi)) if lo <= hi => (lo, hi),
                _ => return Err(format!("{pattern:?}: {part:?} is not a range like 001-064")),
            };
            in_group = in_group.saturating_add((hi - lo).saturating_add(1));
            let width = if a.starts_with('0') { a.len() } else { 0 };
            group.push((lo, hi, width));
        }
        count = count.saturating_mul(in_group);
        if count > MAX_EXPANDED_NAMES {
            return Err(format!(
                "{pattern:?}: expands to more than {MAX_EXPANDED_NAMES} names"
            ));
        }
        name_bytes += open as u64 + 20;
        pieces.push(&rest[..open]);
        groups.push(group);
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(format!("{pattern:?}: ']' without '['"));
    }
    name_bytes += rest.len() as u64;
    if count.saturating_mul(name_bytes) > MAX_EXPANDED_BYTES {
        return Err(format!(
            "{pattern:?}: {count} names of up to {name_bytes} bytes, more than {MAX_EXPANDED_BYTES} bytes in all"
        ));
    }
    pieces.push(rest);
    Ok((pieces, groups))
}

/// Expands `gpu-[001-004,010]x` into gpu-001x … gpu-004x, gpu-010x, each
/// with the number as written (the first group's). Several bracket groups
/// multiply; the product is counted first and refused past
/// [`MAX_EXPANDED_NAMES`].
pub fn expand_range(pattern: &str) -> Result<Vec<(String, String)>, String> {
    let (pieces, groups) = parse_range(pattern)?;
    let mut out = vec![(pieces[0].to_owned(), String::new())];
    for (group, piece) in groups.iter().zip(&pieces[1..]) {
        let mut next = Vec::new();
        for (name, first) in &out {
            for &(lo, hi, width) in group {
                for n in lo..=hi {
                    let n = format!("{n:0width$}");
                    let first = if first.is_empty() {
                        n.clone()
                    } else {
                        first.clone()
                    };
                    next.push((format!("{name}{n}{piece}"), first));
                }
            }
        }
        out = next;
    }
    Ok(out)
}

fn fill(pattern: &str, node: &str, n: &str) -> String {
    pattern.replace("{node}", node).replace("{n}", n)
}

/// One node's resolved BMC entry (credentials not yet read).
#[derive(Debug, Clone)]
pub struct ResolvedBmc {
    pub node: String,
    pub endpoint: String,
    pub system: Option<String>,
    pub credentials_file: Option<PathBuf>,
    pub tls: TlsMode,
    pub max_in_flight: usize,
    pub request_timeout_ms: u64,
}

impl Inventory {
    pub fn load(file: &Path) -> Result<Inventory, InventoryError> {
        let text = accord_api::files::read_to_string(file, accord_api::files::limit::CONFIG)
            .map_err(|source| accord::config_file::ConfigFileError::read(file, source))?;
        let base_dir = file.parent().map(Path::to_owned).unwrap_or_default();
        let mut inv: Inventory = accord::config_file::parse(&text, &file.display().to_string())?;
        inv.base_dir = base_dir;
        let problems = inv.validate();
        if !problems.is_empty() {
            return Err(accord::config_file::ConfigFileError::Invalid {
                file: file.display().to_string(),
                problems,
            }
            .into());
        }
        Ok(inv)
    }

    fn path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.base_dir.join(p)
        }
    }

    /// Every node's BMC, by node name; the first problem found per entry.
    pub fn resolve(&self) -> Result<BTreeMap<String, ResolvedBmc>, Vec<String>> {
        let mut out = BTreeMap::new();
        let mut problems = Vec::new();
        for (i, e) in self.bmcs.iter().enumerate() {
            let key = format!("bmc[{i}]");
            let patterns = match &e.nodes {
                NodeNames::One(p) => vec![p.clone()],
                NodeNames::Many(ps) => ps.clone(),
            };
            for p in patterns {
                let names = match expand_range(&p) {
                    Ok(n) => n,
                    Err(reason) => {
                        problems.push(format!("{key}.nodes: {reason}"));
                        continue;
                    }
                };
                for (node, n) in names {
                    let insecure = e.insecure.unwrap_or(self.defaults.insecure);
                    let tls = if insecure {
                        TlsMode::Insecure
                    } else {
                        TlsMode::Verify {
                            ca_file: e
                                .ca_file
                                .as_ref()
                                .or(self.defaults.ca_file.as_ref())
                                .map(|p| self.path(p)),
                        }
                    };
                    let r = ResolvedBmc {
                        endpoint: fill(&e.endpoint, &node, &n),
                        system: e.system.as_deref().map(|s| fill(s, &node, &n)),
                        credentials_file: e
                            .credentials_file
                            .as_ref()
                            .or(self.defaults.credentials_file.as_ref())
                            .map(|p| self.path(p)),
                        tls,
                        max_in_flight: e.max_in_flight.unwrap_or(self.defaults.max_in_flight),
                        request_timeout_ms: e
                            .request_timeout_ms
                            .unwrap_or(self.defaults.request_timeout_ms),
                        node: node.clone(),
                    };
                    if out.insert(node.clone(), r).is_some() {
                        problems.push(format!("{key}.nodes: node {node} has a BMC already"));
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    /// Every problem, each naming its key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let resolved = match self.resolve() {
            Ok(r) => r,
            Err(p) => return p,
        };
        let mut checked_files = std::collections::BTreeSet::new();
        for r in resolved.values() {
            match Url::parse(&r.endpoint) {
                Ok(u) if !matches!(u.scheme(), "http" | "https") => problems.push(format!(
                    "node {}: endpoint {:?}: scheme must be https (or http)",
                    r.node, r.endpoint
                )),
                Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                    problems.push(format!(
                        "node {}: endpoint: no user or password in the URL; use credentials_file",
                        r.node
                    ))
                }
                Ok(u) if u.host_str().is_none() => problems.push(format!(
                    "node {}: endpoint {:?} has no host",
                    r.node, r.endpoint
                )),
                Ok(_) => {}
                Err(e) => problems.push(format!("node {}: endpoint {:?}: {e}", r.node, r.endpoint)),
            }
            if r.max_in_flight == 0 {
                problems.push(format!("node {}: max_in_flight must be at least 1", r.node));
            }
            if let Some(f) = &r.credentials_file {
                if checked_files.insert(f.clone()) {
                    if let Err(p) = read_credentials(f) {
                        problems.push(p);
                    }
                }
            }
            if let TlsMode::Verify { ca_file: Some(f) } = &r.tls {
                if checked_files.insert(f.clone()) {
                    if let Err(e) = std::fs::metadata(f) {
                        problems.push(format!("ca_file: {}: {e}", f.display()));
                    }
                }
            }
        }
        if self.retry.attempts == 0 {
            problems.push("retry.attempts: must be at least 1".to_owned());
        }
        if self.retry.initial_ms > self.retry.max_ms {
            problems.push("retry.initial_ms: above retry.max_ms".to_owned());
        }
        if self.power.poll_interval_ms == 0 {
            problems.push("power.poll_interval_ms: must be above 0".to_owned());
        }
        if self.limits.max_in_flight_total == 0 {
            problems.push("limits.max_in_flight_total: must be at least 1".to_owned());
        }
        if !MAX_RESPONSE_BYTES_RANGE.contains(&self.limits.max_response_bytes) {
            problems.push(format!(
                "limits.max_response_bytes: {} is outside {}..={} (64 KiB to 1 GiB)",
                self.limits.max_response_bytes,
                MAX_RESPONSE_BYTES_RANGE.start(),
                MAX_RESPONSE_BYTES_RANGE.end()
            ));
        }
        if !(1..=100).contains(&self.limits.max_failed_logins) {
            problems.push("limits.max_failed_logins: must be 1 to 100".to_owned());
        }
        if !(1..=86_400).contains(&self.limits.failed_login_window_s) {
            problems.push("limits.failed_login_window_s: must be 1 to 86400".to_owned());
        }
        if self.limits.login_backoff_s > self.limits.failed_login_window_s {
            problems.push("limits.login_backoff_s: above limits.failed_login_window_s".to_owned());
        }
        for (name, p) in &self.bios_profiles {
            if p.attributes.is_empty() {
                problems.push(format!("bios_profiles.{name}.attributes: empty"));
            }
        }
        problems
    }

    pub fn settings(&self, r: &ResolvedBmc) -> BmcSettings {
        BmcSettings {
            max_in_flight: r.max_in_flight,
            connect_timeout: Duration::from_millis(self.defaults.connect_timeout_ms),
            request_timeout: Duration::from_millis(r.request_timeout_ms),
            retry_attempts: self.retry.attempts,
            retry_initial: Duration::from_millis(self.retry.initial_ms),
            retry_max: Duration::from_millis(self.retry.max_ms),
            poll_interval: Duration::from_millis(self.power.poll_interval_ms),
            power_on_timeout: Duration::from_secs(self.power.on_timeout_s),
            power_off_timeout: Duration::from_secs(self.power.off_timeout_s),
            resend_after: Duration::from_secs(self.power.resend_after_s),
            graceful_timeout: Duration::from_secs(self.power.graceful_timeout_s),
            force_after_graceful: self.power.force_after_graceful,
            task_timeout: Duration::from_secs(self.power.task_timeout_s),
            sessions: self.defaults.sessions,
            max_response_bytes: self.limits.max_response_bytes,
            max_failed_logins: self.limits.max_failed_logins,
            failed_login_window: Duration::from_secs(self.limits.failed_login_window_s),
            login_backoff: Duration::from_secs(self.limits.login_backoff_s),
        }
    }

    /// The BMC target of `node`, credentials read.
    pub fn target(&self, node: &str) -> Result<BmcTarget, InventoryError> {
        let resolved = self.resolve().map_err(|problems| {
            InventoryError::File(accord::config_file::ConfigFileError::Invalid {
                file: "inventory".to_owned(),
                problems,
            })
        })?;
        let r = resolved
            .get(node)
            .ok_or_else(|| InventoryError::UnknownNode {
                node: node.to_owned(),
            })?;
        self.target_of(r)
    }

    pub fn target_of(&self, r: &ResolvedBmc) -> Result<BmcTarget, InventoryError> {
        let invalid = |problems| {
            InventoryError::File(accord::config_file::ConfigFileError::Invalid {
                file: "inventory".to_owned(),
                problems,
            })
        };
        let credentials = match &r.credentials_file {
            Some(f) => Some(read_credentials(f).map_err(|p| invalid(vec![p]))?),
            None => None,
        };
        let endpoint = Url::parse(&r.endpoint)
            .map_err(|e| invalid(vec![format!("node {}: endpoint: {e}", r.node)]))?;
        Ok(BmcTarget {
            name: r.node.clone(),
            endpoint,
            system: r.system.clone(),
            credentials,
            credentials_file: r.credentials_file.clone(),
            tls: r.tls.clone(),
            settings: self.settings(r),
        })
    }

    /// Nodes whose BMC certificate is not checked: said at start.
    pub fn insecure_nodes(&self) -> Vec<String> {
        self.resolve()
            .map(|r| {
                r.into_values()
                    .filter(|b| b.tls == TlsMode::Insecure)
                    .map(|b| b.node)
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_expand_with_padding_and_lists() {
        let names: Vec<String> = expand_range("gpu-[001-003,010]")
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["gpu-001", "gpu-002", "gpu-003", "gpu-010"]);
        let two = expand_range("r[1-2]n[08-09]").unwrap();
        assert_eq!(
            two,
            [
                ("r1n08".to_owned(), "1".to_owned()),
                ("r1n09".to_owned(), "1".to_owned()),
                ("r2n08".to_owned(), "2".to_owned()),
                ("r2n09".to_owned(), "2".to_owned())
            ]
        );
        assert!(expand_range("gpu-[5-1]").is_err());
        assert!(expand_range("gpu-1]").is_err());
        assert!(expand_range("gpu-[1]-2]").is_err());
        assert!(expand_range("gpu-[1-").is_err());
        assert_eq!(
            expand_range("solo").unwrap(),
            [("solo".to_owned(), String::new())]
        );
    }

    #[test]
    fn patterns_fill_endpoint_and_duplicates_are_refused() {
        let inv: Inventory = accord::config_file::parse(
            r#"
            [[bmc]]
            nodes = "gpu-[01-02]"
            endpoint = "https://10.0.1.{n}"
            system = "{node}"
            [[bmc]]
            nodes = ["gpu-02"]
            endpoint = "https://x"
            "#,
            "t.toml",
        )
        .unwrap();
        let problems = inv.resolve().unwrap_err();
        assert_eq!(problems, ["bmc[1].nodes: node gpu-02 has a BMC already"]);
        let inv: Inventory = accord::config_file::parse(
            r#"
            [[bmc]]
            nodes = "gpu-[01-02]"
            endpoint = "https://10.0.1.{n}"
            system = "{node}"
            "#,
            "t.toml",
        )
        .unwrap();
        let r = inv.resolve().unwrap();
        assert_eq!(r["gpu-02"].endpoint, "https://10.0.1.02");
        assert_eq!(r["gpu-02"].system.as_deref(), Some("gpu-02"));
        assert!(inv.validate().is_empty());
    }

    #[test]
    fn ranges_are_counted_before_they_are_built() {
        // 10^10 names: refused at once, nothing built (without the count
        // this allocates until the process aborts).
        let e = expand_range("n[0-99999]-[0-99999]").unwrap_err();
        assert!(e.contains("more than 100000 names"), "{e}");
        let e = expand_range("n[0-99999,0-99999]").unwrap_err();
        assert!(e.contains("more than 100000 names"), "{e}");
        assert!(expand_range("n[0-18446744073709551615]").is_err());
        assert_eq!(expand_range("n[1-1000]-[1-100]").unwrap().len(), 100_000);
        // A long prefix times many numbers: refused by the bytes.
        let long = format!("{}[0-99999]", "n".repeat(1000));
        assert!(expand_range(&long).unwrap_err().contains("bytes in all"));
        assert!(expand_range(&"n".repeat(2000))
            .unwrap_err()
            .contains("at most 1024"));
        let three = expand_range("r[1-3]").unwrap();
        assert_eq!(three[2], ("r3".to_owned(), "3".to_owned()));
    }

    #[test]
    fn the_response_size_limit_is_read_and_bounded() {
        let parse = |limits: &str| -> Inventory {
            accord::config_file::parse(
                &format!("[limits]\n{limits}\n[[bmc]]\nnodes = \"n1\"\nendpoint = \"https://b\"\n"),
                "t.toml",
            )
            .unwrap()
        };
        let inv = parse("");
        let r = &inv.resolve().unwrap()["n1"];
        assert_eq!(inv.settings(r).max_response_bytes, 16 << 20);
        let inv = parse("max_response_bytes = 1048576");
        assert!(inv.validate().is_empty());
        assert_eq!(inv.settings(r).max_response_bytes, 1 << 20);
        for bad in ["0", "65535", "1073741825"] {
            let p = parse(&format!("max_response_bytes = {bad}")).validate();
            assert_eq!(p.len(), 1, "{bad}: {p:?}");
            assert!(
                p[0].starts_with(&format!("limits.max_response_bytes: {bad} is outside")),
                "{p:?}"
            );
        }
    }

    #[test]
    fn credentials_in_urls_are_refused() {
        let inv: Inventory = accord::config_file::parse(
            "[[bmc]]\nnodes = \"n1\"\nendpoint = \"https://root:calvin@10.0.0.1\"\n",
            "t.toml",
        )
        .unwrap();
        let p = inv.validate();
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("no user or password in the URL"), "{p:?}");
        assert!(!p[0].contains("calvin"));
    }
}
