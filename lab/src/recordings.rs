//! The recorded hardware the lab's machines replay: an hwloc XML export
//! and, optionally, an NVML snapshot (what `accord-agent capture` writes).
//! Each machine's agent replays its recording, and the lab's kubelet,
//! device plugin and DRA driver stand-ins ([`crate::kubelet`]) publish
//! what that recording shows, so a machine can differ from what the fleet
//! file declares, as real ones do.
//!
//! Built-in recordings are embedded ([`crate::builtins`]).
//!
//! Each fleet node's recording, discovered once: [`resolve_recordings`];
//! what every machine publishes when up: [`published_objects`]
//! (`accord-lab --print-nodes`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use accord::fleet::Fleet;
use anyhow::Context;
use serde_json::Value;

pub use crate::builtins::{builtin, builtin_names, Builtin, BUILTINS, DEFAULT_BUILTIN};
use crate::kubelet;
use crate::scenario::{RecordingSpec, Scenario};

/// A recording on disk, ready for an agent's `[discovery]` and for the
/// lab's stand-ins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Recording {
    /// The built-in's name, or the hwloc file's path.
    pub name: String,
    pub hwloc_xml: PathBuf,
    /// `None`: the machine has no NVML (no driver): the agent reports what
    /// hwloc sees, and no GPU reaches Kubernetes.
    pub nvml_snapshot: Option<PathBuf>,
}

impl Recording {
    /// Writes the built-in `b` under `dir` (`<dir>/<name>/topology.xml`
    /// and `nvml.json`), once.
    pub fn write_builtin(b: &Builtin, dir: &Path) -> anyhow::Result<Recording> {
        let d = dir.join(b.name);
        let hwloc_xml = d.join(accord_agent::capture::TOPOLOGY_FILE);
        let nvml = d.join(accord_agent::capture::NVML_FILE);
        if !hwloc_xml.exists() {
            std::fs::create_dir_all(&d)
                .with_context(|| format!("{}: cannot create", d.display()))?;
            std::fs::write(&hwloc_xml, b.hwloc_xml)
                .with_context(|| format!("{}: cannot write", hwloc_xml.display()))?;
            std::fs::write(&nvml, b.nvml_snapshot)
                .with_context(|| format!("{}: cannot write", nvml.display()))?;
        }
        Ok(Recording {
            name: b.name.to_owned(),
            hwloc_xml,
            nvml_snapshot: Some(nvml),
        })
    }

    /// The recording a (validated) spec names: built-ins are written under
    /// `dir`, files are relative to `base` (the scenario's directory).
    pub fn resolve(spec: &RecordingSpec, base: &Path, dir: &Path) -> anyhow::Result<Recording> {
        if let Some(name) = &spec.builtin {
            let b = builtin(name).with_context(|| {
                format!(
                    "no built-in recording {name:?} (there are: {})",
                    builtin_names()
                )
            })?;
            return Recording::write_builtin(b, dir);
        }
        if let Some(capture) = &spec.capture {
            // What `accord-agent capture DIR` writes; nvml.json only where
            // NVML was there.
            let d = base.join(capture);
            let hwloc_xml = d.join(accord_agent::capture::TOPOLOGY_FILE);
            if !hwloc_xml.is_file() {
                anyhow::bail!(
                    "capture {}: no {} (a directory `accord-agent capture DIR` wrote)",
                    d.display(),
                    accord_agent::capture::TOPOLOGY_FILE
                );
            }
            let nvml = d.join(accord_agent::capture::NVML_FILE);
            return Ok(Recording {
                name: d.display().to_string(),
                hwloc_xml,
                nvml_snapshot: nvml.is_file().then_some(nvml),
            });
        }
        let Some(hwloc) = &spec.hwloc_xml else {
            anyhow::bail!("no recording named (builtin, capture or hwloc_xml)");
        };
        let hwloc_xml = base.join(hwloc);
        Ok(Recording {
            name: hwloc_xml.display().to_string(),
            hwloc_xml,
            nvml_snapshot: spec.nvml_snapshot.as_ref().map(|n| base.join(n)),
        })
    }

    /// What the machine's agent sees: the recording discovered with
    /// accord-agent's own library (the agent's code path for a replay),
    /// and the NVML snapshot's driver-wide facts.
    pub fn discover(&self) -> anyhow::Result<crate::kubelet::Machine> {
        let snapshot = self.load_snapshot()?;
        self.machine_with(snapshot.as_ref())
    }

    /// The recorded NVML snapshot; `None` for a machine without NVML.
    pub fn load_snapshot(&self) -> anyhow::Result<Option<accord_agent::nvml::NvmlSnapshot>> {
        match &self.nvml_snapshot {
            Some(p) => Ok(Some(
                accord_agent::nvml::load_snapshot(p)
                    .with_context(|| format!("recording {}", self.name))?,
            )),
            None => Ok(None),
        }
    }

    /// What the machine's software sees with NVML showing `snapshot` (the
    /// recorded one, or the machine's GPUs as they are now after MIG
    /// commands: [`accord_agent::mig::replay::ReplayedGpus::snapshot`]):
    /// the recorded topology and `snapshot` through the agent's own merge,
    /// as its agent discovers them.
    pub fn machine_with(
        &self,
        snapshot: Option<&accord_agent::nvml::NvmlSnapshot>,
    ) -> anyhow::Result<crate::kubelet::Machine> {
        let hw = match snapshot {
            Some(s) => accord_agent::discover_replayed(
                &self.hwloc_xml,
                s,
                self.nvml_snapshot
                    .as_deref()
                    .unwrap_or(Path::new("replayed")),
            ),
            None => accord_agent::discover(accord_agent::Sources {
                hwloc_xml: Some(&self.hwloc_xml),
                nvml_snapshot: None,
                nvidia_smi_xml: None,
            }),
        }
        .with_context(|| format!("recording {}", self.name))?;
        Ok(crate::kubelet::Machine {
            hw,
            driver_version: snapshot.and_then(|s| s.driver_version.clone()),
            cuda_driver_version: snapshot.and_then(|s| s.cuda_driver_version),
        })
    }
}

/// The recording one machine replays, and what its agent sees in it.
#[derive(Debug, Clone)]
pub struct MachineRecording {
    pub recording: Recording,
    /// Where it was named (`lab.machines.r1-n1.recording`,
    /// `lab.recordings.hgx-h100`, the default).
    pub from: String,
    /// GPUs NVML shows in it.
    pub gpus: usize,
    /// `7 x NVIDIA H100 80GB HBM3, MIG off`.
    pub describe: String,
}

/// Each fleet node's recording (built-ins written under `dir`), each
/// discovered once with the agent's library: a recording that does not
/// discover is an error naming the node, the key and the file.
pub fn resolve_recordings(
    scenario: &Scenario,
    fleet: &Fleet,
    dir: &Path,
) -> anyhow::Result<BTreeMap<String, MachineRecording>> {
    let mut seen: BTreeMap<Recording, (usize, String)> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for n in &fleet.nodes {
        let (spec, from) = scenario.recording_of(&n.name);
        let recording = Recording::resolve(&spec, &scenario.base, dir)
            .with_context(|| format!("machine {} ({from})", n.name))?;
        let (gpus, describe) = match seen.get(&recording) {
            Some(v) => v.clone(),
            None => {
                let m = recording
                    .discover()
                    .with_context(|| format!("machine {} ({from})", n.name))?;
                let v = (m.gpus().len(), m.describe());
                seen.insert(recording.clone(), v.clone());
                v
            }
        };
        out.insert(
            n.name.clone(),
            MachineRecording {
                recording,
                from,
                gpus,
                describe,
            },
        );
    }
    Ok(out)
}

/// What every machine of `scenario` publishes when it is up (its Node and,
/// where the Kubernetes version serves DRA, its ResourceSlice), built
/// from its recording by the lab's stand-ins: `accord-lab --print-nodes`.
pub fn published_objects(scenario: &Scenario) -> anyhow::Result<Vec<Value>> {
    let fleet = scenario.resolve_fleet().context("the scenario's fleet")?;
    let version = scenario.kube_version().map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let mut out = Vec::new();
    for (name, m) in resolve_recordings(scenario, &fleet, dir.path())? {
        let machine = m.recording.discover()?;
        out.push(kubelet::node_object(&name, &machine));
        if let Some(api) = version.dra_api_version() {
            out.extend(kubelet::resource_slice(&name, &machine, api));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the default scenario's machines publish when up: each its own
    /// recording, whatever the fleet file declares (r1-n1 is declared with
    /// 8 GPUs and has 7); ResourceSlices only where DRA is served.
    #[test]
    fn the_default_scenarios_machines_publish_their_recordings() {
        let mut s = Scenario::default_scenario();
        let objects = published_objects(&s).unwrap();
        let node = |name: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == "Node" && o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no Node {name}"))
        };
        let gpu = |name: &str, r: &str| node(name)["status"]["allocatable"][r].clone();
        assert_eq!(gpu("r1-n1", "nvidia.com/gpu"), "7");
        assert_eq!(gpu("r1-n2", "nvidia.com/gpu"), "8");
        assert_eq!(gpu("r3-n1", "nvidia.com/gpu"), "0");
        assert_eq!(gpu("r3-n1", "nvidia.com/mig-1g.10gb"), "56");
        assert_eq!(gpu("r3-n2", "cpu"), "4");
        assert_eq!(node("r3-n2")["spec"], serde_json::json!({}));
        let slices: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "ResourceSlice")
            .collect();
        assert_eq!(slices.len(), 11);
        assert!(slices
            .iter()
            .all(|s| s["apiVersion"] == "resource.k8s.io/v1"));

        s.lab.kube_version = Some("1.31".into());
        let objects = published_objects(&s).unwrap();
        assert!(objects.iter().all(|o| o["kind"] == "Node"));
        s.lab.kube_version = Some("1.32".into());
        let objects = published_objects(&s).unwrap();
        assert!(objects
            .iter()
            .filter(|o| o["kind"] == "ResourceSlice")
            .all(|s| s["apiVersion"] == "resource.k8s.io/v1beta1"
                && s["spec"]["devices"][0]["basic"].is_object()));
    }
}
