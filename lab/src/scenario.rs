//! Lab scenario files (TOML; docs/lab.md): the lab's knobs, the fleet it
//! plays (a fleet file's tables under `[fleet]`), accordd's `[control]`
//! settings, and the workloads submitted over time as Kubernetes
//! manifests. Parsed strictly (unknown keys name file, line and column),
//! then validated as a whole.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The default scenario: a few racks of 8-GPU nodes, gangs with rack
/// topology, one reservation, MIG-sized jobs.
pub const DEFAULT: &str = include_str!("default-scenario.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub lab: LabSettings,
    /// A fleet file's tables (`[topology]`, `[policy]`, `[profiles.*]`,
    /// `[[racks]]`, `[[nodes]]`, `[[reservations]]`), as in config/fleet.toml:
    /// parsed as the fleet file is, so a mistake in them names the
    /// scenario's line and column.
    pub fleet: accord::fleet::FleetFile,
    /// accordd.toml's `[control]` keys except `mode` (set by `lab.mode`).
    #[serde(default)]
    pub control: toml::Table,
    #[serde(default)]
    pub submit: Vec<Submission>,
    /// Where relative `file` paths are read from.
    #[serde(skip)]
    pub base: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LabSettings {
    /// `act` (accordd powers nodes) or `observe` (it only plans).
    pub mode: accord_api::control::Mode,
    /// BMC On → the node's agent starts (firmware, POST, OS boot).
    pub boot_delay_ms: u64,
    /// Agent up → the Kubernetes Node registers Ready (kubelet, drivers).
    pub kubelet_delay_ms: u64,
    pub heartbeat_ms: u64,
    /// Nodes whose BMC accepts a power-on and never carries it out.
    pub broken: Vec<String>,
    /// The BMC inventory's power-on timeout (`[power] on_timeout_s`).
    pub power_on_timeout_s: u64,
    /// Give up (an error) when the scenario has not settled by then.
    pub max_s: u64,
    /// With `--until-idle`, also wait until every node is off again (the
    /// idle ones powered off), not only idle.
    pub until_off: bool,
}

impl Default for LabSettings {
    fn default() -> Self {
        LabSettings {
            mode: accord_api::control::Mode::Act,
            boot_delay_ms: 4000,
            kubelet_delay_ms: 1000,
            heartbeat_ms: 2000,
            broken: Vec::new(),
            power_on_timeout_s: 30,
            max_s: 600,
            until_off: false,
        }
    }
}

/// Workloads submitted at one moment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    /// Shown in the summary.
    pub name: String,
    /// Milliseconds after the lab starts; unset: when a test releases it
    /// ([`crate::Lab::release`]).
    #[serde(default)]
    pub at_ms: Option<u64>,
    /// The pods finish (and are deleted) this long after the last binds.
    #[serde(default = "default_run_ms")]
    pub run_ms: u64,
    /// Kubernetes manifests (Pods and PodGroups; there are no workload
    /// controllers in the lab), inline...
    pub manifests: Option<String>,
    /// ...or from a YAML file (relative to the scenario file).
    pub file: Option<PathBuf>,
}

fn default_run_ms() -> u64 {
    20_000
}

impl Scenario {
    /// Parses and validates a scenario; `file` names it in errors.
    pub fn parse(
        text: &str,
        file: &Path,
    ) -> Result<Scenario, accord::config_file::ConfigFileError> {
        let mut s: Scenario = accord::config_file::parse_valid(
            text,
            &file.display().to_string(),
            Scenario::validate,
        )?;
        s.base = file.parent().unwrap_or(Path::new(".")).to_owned();
        Ok(s)
    }

    /// Reads and parses a scenario file; errors name the file (and the
    /// line, column and key), as every Accord configuration file's do.
    pub fn load(file: &Path) -> Result<Scenario, accord::config_file::ConfigFileError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| accord::config_file::ConfigFileError::read(file, e))?;
        Scenario::parse(&text, file)
    }

    pub fn default_scenario() -> Scenario {
        Scenario::parse(DEFAULT, Path::new("<embedded default scenario>"))
            .expect("the embedded scenario is valid (tested)")
    }

    /// The fleet file accordd is given.
    pub fn fleet_toml(&self) -> String {
        toml::to_string(&self.fleet).expect("a fleet file serialises")
    }

    /// The fleet, resolved (profiles only: the lab's nodes are declared).
    pub fn resolve_fleet(&self) -> Result<accord::fleet::Fleet, accord::fleet::FleetError> {
        self.fleet.build("scenario [fleet]", &mut |p| {
            Err(format!(
                "{p}: the lab's nodes use profiles, not hardware files"
            ))
        })
    }

    /// A submission's manifests as JSON objects.
    pub fn objects(&self, s: &Submission) -> anyhow::Result<Vec<serde_json::Value>> {
        use anyhow::Context;
        use serde::Deserialize as _;
        let (text, at) = match (&s.manifests, &s.file) {
            (Some(t), _) => (t.clone(), format!("submit {}", s.name)),
            (None, Some(f)) => {
                let path = self.base.join(f);
                (
                    std::fs::read_to_string(&path)
                        .with_context(|| format!("{}: cannot read", path.display()))?,
                    path.display().to_string(),
                )
            }
            (None, None) => anyhow::bail!("submit {}: no manifests", s.name),
        };
        let mut out = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = serde_json::Value::deserialize(doc).with_context(|| format!("{at}: YAML"))?;
            if !v.is_null() {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Every problem, each naming its key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let fleet = match self.resolve_fleet() {
            Ok(f) => Some(f),
            // Each names its key within the fleet's tables.
            Err(accord::fleet::FleetError::Invalid { problems: p, .. }) => {
                problems.extend(p.into_iter().map(|p| format!("fleet.{p}")));
                None
            }
            Err(e) => {
                problems.push(format!("fleet: {}", accord::config_file::error_chain(&e)));
                None
            }
        };
        if let Some(f) = &fleet {
            for b in &self.lab.broken {
                if !f.nodes.iter().any(|n| &n.name == b) {
                    problems.push(format!("lab.broken: {b:?} is not a fleet node"));
                }
            }
            if f.nodes.is_empty() {
                problems.push("fleet: no [[nodes]]".to_owned());
            }
        }
        if self.control.contains_key("mode") {
            problems.push("control.mode: set lab.mode instead".to_owned());
        }
        for (i, s) in self.submit.iter().enumerate() {
            if s.manifests.is_some() == s.file.is_some() {
                problems.push(format!(
                    "submit[{i}] ({}): set exactly one of manifests or file",
                    s.name
                ));
            }
        }
        if self.lab.max_s == 0 {
            problems.push("lab.max_s: must be above 0".to_owned());
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// accordd is given the fleet the scenario declares: the fleet file
    /// the lab writes reads back as the same tables.
    #[test]
    fn the_fleet_file_written_reads_back_the_same() {
        let s = Scenario::default_scenario();
        let text = s.fleet_toml();
        let back: accord::fleet::FleetFile =
            accord::config_file::parse(&text, "fleet.toml").unwrap();
        assert_eq!(back, s.fleet, "{text}");
        let fleet = accord::fleet::Fleet::from_toml(&text, "fleet.toml", &mut |p| {
            Err(format!("{p}: no hardware files"))
        })
        .unwrap();
        assert_eq!(fleet.nodes.len(), s.resolve_fleet().unwrap().nodes.len());
    }

    /// A mistake in the fleet's tables names the scenario file, its line
    /// and column, and the key, like any configuration file.
    #[test]
    fn a_fleet_mistake_names_the_scenario_line_and_key() {
        let text = "[lab]\n[fleet.policy]\nidle_power_off_after = 5\n";
        let e = Scenario::parse(text, Path::new("s.toml")).unwrap_err();
        match &e {
            accord::config_file::ConfigFileError::Parse {
                file, line, key, ..
            } => {
                assert_eq!((file.as_str(), *line), ("s.toml", 3), "{e}");
                assert!(
                    key.as_deref().unwrap_or("").starts_with("fleet.policy"),
                    "{e}"
                );
            }
            other => panic!("not a located parse error: {other}"),
        }
    }

    /// A scenario file that cannot be read: the shared error, naming it.
    #[test]
    fn an_unreadable_scenario_names_the_file() {
        let e = Scenario::load(Path::new("/nonexistent/scenario.toml")).unwrap_err();
        assert!(
            matches!(e, accord::config_file::ConfigFileError::Read { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("/nonexistent/scenario.toml"), "{e}");
    }

    /// The fleet's own validation names the key under `fleet`.
    #[test]
    fn fleet_problems_name_their_key_under_fleet() {
        let text = "[[fleet.racks]]\nname = \"r1\"\nmax_concurrent_power_ons = 0\n\
                    [[fleet.nodes]]\nname = \"n1\"\nrack = \"r1\"\n";
        let e = Scenario::parse(text, Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fleet.racks.r1.max_concurrent_power_ons"), "{e}");
    }
}
