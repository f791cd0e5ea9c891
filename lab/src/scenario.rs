//! Lab scenario files (TOML; docs/lab.md): the lab's knobs, the fleet it
//! plays (a fleet file's tables under `[fleet]`), accordd's `[control]`
//! settings, and the workloads submitted over time as Kubernetes
//! manifests. Parsed strictly (unknown keys name file, line and column),
//! then validated as a whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use accord_testkit::fake_api::KubeVersion;
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
    /// The lab's Kubernetes: `upstream` (etcd, kube-apiserver,
    /// kube-controller-manager and kube-scheduler built from upstream,
    /// `scripts/controlplane`) or `fake` (the in-repo fake API and the
    /// lab's binder: fast tests, and the runs that break or count what
    /// accordd sends it). Unset: `fake` for a chaos run or several
    /// replicas, else `upstream` ([`Scenario::kubernetes`]).
    /// `--kubernetes` overrides it.
    pub kubernetes: Option<KubernetesKind>,
    /// The Kubernetes version the lab runs (`"1.37"`); default: the
    /// newest pinned. `--kube-version` overrides it.
    pub kube_version: Option<String>,
    /// What the cluster's admin installed before the scenario starts
    /// (upstream only): DaemonSets, DeviceClasses, queues, as YAML
    /// manifests applied with kubectl; their namespaces are made.
    pub cluster_manifests: Option<String>,
    /// Run Kueue's manager (upstream only; built by `scripts/kueue`):
    /// its CRDs are installed before `cluster_manifests`, which hold the
    /// admin's queues, flavors and admission checks. Jobs are
    /// submissions (submitted suspended: [`crate::kueue`] says why).
    pub kueue: bool,
    /// `--runtime-config` entries of the lab's Kubernetes, as an admin
    /// passes them (`scheduling.k8s.io/v1beta1=true`): APIs beyond the
    /// version's defaults. An entry the chosen version cannot serve is
    /// left out and said (as a skipped submission is). `--runtime-config`
    /// overrides it.
    pub runtime_config: Vec<String>,
    /// `--feature-gates` entries (`GenericWorkload=true`) for the real
    /// control plane's components. `--feature-gates` overrides it.
    pub feature_gates: Vec<String>,
    /// Per fleet profile: the recording its machines replay. A machine
    /// whose profile has none (and that names none itself) replays
    /// [`crate::builtins::DEFAULT_BUILTIN`].
    pub recordings: BTreeMap<String, RecordingSpec>,
    /// Per fleet node: what differs for that machine.
    pub machines: BTreeMap<String, MachineSettings>,
    /// BIOS profiles, written into accordd's BMC inventory
    /// (`[bios_profiles.NAME]`); every fleet node's `bios_profile` must
    /// be one of them.
    pub bios_profiles: BTreeMap<String, crate::bios::BiosProfileSpec>,
    /// Every machine's BIOS attributes at the start (default:
    /// [`crate::bios::default_attributes`]).
    pub bios: Option<serde_json::Map<String, serde_json::Value>>,
    /// Kubernetes' taint-based eviction: a pod bound to a Node tainted
    /// `node.kubernetes.io/unreachable` this long is evicted, and its
    /// controller makes it again, unbound (Kubernetes: 300 s, the pods'
    /// default toleration). Unset: never (the lab's runs are shorter).
    pub evict_after_ms: Option<u64>,
    /// The BMCs ask for credentials and offer Redfish sessions (the lab's
    /// proxy plays a SessionService, as iDRAC and iLO do): accordd gets a
    /// credentials file in its inventory. Off: the BMCs ask for none.
    pub bmc_sessions: bool,
    /// Each machine's kubelet registers its Node with Accord's starting
    /// taint (`--register-with-taints=accord.dev/starting=:NoSchedule`,
    /// as docs/operations.md advises): no pod binds before accordd has
    /// published its labels and lifted it.
    pub kubelet_starting_taint: bool,
    /// A chaos run: faults injected on a seeded schedule
    /// ([`crate::chaos`]); `--chaos SEED` sets or overrides it.
    pub chaos: Option<crate::chaos::ChaosOptions>,
    /// accordd's high availability (`[lab.ha]`): how many replicas the lab
    /// runs, their Lease timings and a fault for the leader ([`crate::ha`]).
    /// The default, one replica, is the lab without HA.
    pub ha: crate::ha::HaSettings,
    /// The GPU Operator as the lab plays it (`[lab.gpu_operator]`, with
    /// `policy.mig_via = "gpu-operator"`): its ClusterPolicy and
    /// mig-manager ([`crate::mig_manager`]).
    pub gpu_operator: GpuOperatorSettings,
}

/// `[lab.gpu_operator]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuOperatorSettings {
    /// The custom ConfigMap the ClusterPolicy names in
    /// `spec.migManager.config.name` (accordd's `[control]
    /// mig_parted_configmap` by default); `""`: none, operator v26's
    /// defaults (mig-manager generates its configurations from the
    /// hardware).
    pub mig_config: String,
    /// How far behind the API mig-manager's ConfigMap volume is (the
    /// kubelet syncs it); accordd's `mig_config_sync_s` defaults to twice
    /// this in the lab.
    pub volume_sync_ms: u64,
    /// mig-manager fails (state `failed`) its first this many
    /// reconfigurations, as when mig-parted cannot apply one.
    pub fail_first: u32,
    /// How long the DRA driver's kubelet plugin takes from its pod's start
    /// to its ResourceSlice (`lab.machines.*.gpu_operator_operands`): it
    /// registers with the kubelet and enumerates the GPUs first.
    pub dra_driver_start_ms: u64,
}

impl Default for GpuOperatorSettings {
    fn default() -> Self {
        GpuOperatorSettings {
            mig_config: "accord-mig-parted-config".to_owned(),
            volume_sync_ms: 2_000,
            fail_first: 0,
            dra_driver_start_ms: 3_000,
        }
    }
}

/// Recorded hardware: exactly one of `builtin` (an embedded recording),
/// `capture` (a directory `accord-agent capture` wrote: `topology.xml`
/// and, where NVML was there, `nvml.json`) or `hwloc_xml` (with an
/// optional `nvml_snapshot`). Paths are relative to the scenario file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingSpec {
    pub builtin: Option<String>,
    pub capture: Option<PathBuf>,
    pub hwloc_xml: Option<PathBuf>,
    pub nvml_snapshot: Option<PathBuf>,
}

impl RecordingSpec {
    pub fn builtin(name: &str) -> RecordingSpec {
        RecordingSpec {
            builtin: Some(name.to_owned()),
            ..Default::default()
        }
    }

    /// Its problems, each naming `key` (`lab.machines.r1-n1.recording`).
    fn problems(&self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        let forms = [
            self.builtin.is_some(),
            self.capture.is_some(),
            self.hwloc_xml.is_some(),
        ];
        if forms.iter().filter(|f| **f).count() != 1 {
            out.push(format!(
                "{key}: set exactly one of builtin, capture or hwloc_xml"
            ));
        }
        if self.nvml_snapshot.is_some() && self.hwloc_xml.is_none() {
            out.push(format!(
                "{key}.nvml_snapshot: only with hwloc_xml (a capture has its own nvml.json)"
            ));
        }
        if let Some(b) = &self.builtin {
            if crate::builtins::builtin(b).is_none() {
                out.push(format!(
                    "{key}.builtin: no built-in recording {b:?} (there are: {})",
                    crate::builtins::builtin_names()
                ));
            }
        }
        out
    }
}

/// One machine's settings (`[lab.machines.NODE]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSettings {
    /// The recording it replays, whatever its profile's.
    pub recording: Option<RecordingSpec>,
    /// BIOS attributes at the start, over `[lab] bios`.
    #[serde(default)]
    pub bios: Option<serde_json::Map<String, serde_json::Value>>,
    /// Its BIOS drops staged settings at the power-on: they never apply.
    #[serde(default)]
    pub bios_never_applies: bool,
    /// GPUs (NVML indexes) in use by a process Kubernetes does not know,
    /// from each boot: its agent refuses to repartition them.
    #[serde(default)]
    pub busy_gpus: Vec<u32>,
    /// An admin cordons its Node (`kubectl cordon`) when it first
    /// registers: maintenance, not a fault.
    #[serde(default)]
    pub cordoned: bool,
    /// An admin labels, taints and annotates its Node (`kubectl label`,
    /// `taint`, `annotate`) when it first registers: what Accord must put
    /// back if it deletes the Node while the machine is dark. Taints as
    /// `key=value:Effect` (or `key:Effect`).
    #[serde(default)]
    pub admin_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub admin_taints: Vec<String>,
    #[serde(default)]
    pub admin_annotations: BTreeMap<String, String>,
    /// The GPU Operator runs its operands there (`gpus.rs`,
    /// `operator_operands`): the device plugin, the DRA driver's kubelet
    /// plugin and a third party's GPU client, each a DaemonSet pod that
    /// runs while its Node label (`nvidia.com/gpu.deploy.device-plugin`,
    /// `.dra-driver`, `.client`) is `true` and publishes what it
    /// enumerated only when it starts, as NVIDIA's do; and the operator's
    /// validator pods.
    #[serde(default)]
    pub gpu_operator_operands: bool,
    /// Its DRA driver runs with NVIDIA's `DynamicMIG` feature gate: it
    /// publishes every MIG placement as a device drawing on its GPU's
    /// shared counters (`kubelet::resource_slices`) and creates instances
    /// at allocation, so nobody repartitions its GPUs.
    #[serde(default)]
    pub dra_dynamic_mig: bool,
}

/// Which Kubernetes the lab runs (`lab.kubernetes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KubernetesKind {
    Upstream,
    Fake,
}

impl std::str::FromStr for KubernetesKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "upstream" => Ok(KubernetesKind::Upstream),
            "fake" => Ok(KubernetesKind::Fake),
            other => Err(format!("{other:?}: expected upstream or fake")),
        }
    }
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
            kubernetes: None,
            kube_version: None,
            cluster_manifests: None,
            kueue: false,
            runtime_config: Vec::new(),
            feature_gates: Vec::new(),
            recordings: BTreeMap::new(),
            machines: BTreeMap::new(),
            bios_profiles: BTreeMap::new(),
            bios: None,
            evict_after_ms: None,
            bmc_sessions: false,
            kubelet_starting_taint: false,
            chaos: None,
            ha: crate::ha::HaSettings::default(),
            gpu_operator: GpuOperatorSettings::default(),
        }
    }
}

/// Workloads submitted at one moment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    /// Shown in the summary.
    pub name: String,
    /// Milliseconds after the lab starts (or, with `after`, after that
    /// submission's pods are all bound); unset: when a test releases it
    /// ([`crate::Lab::release`]), or at once with `after`.
    #[serde(default)]
    pub at_ms: Option<u64>,
    /// Another submission's name: this one waits until all of that one's
    /// pods are bound (a team that submits once the cluster is busy). When
    /// that one is skipped (its API not served), `at_ms` counts from the
    /// start.
    #[serde(default)]
    pub after: Option<String>,
    /// The pods finish (and are deleted) this long after the last binds.
    #[serde(default = "default_run_ms")]
    pub run_ms: u64,
    /// Kubernetes manifests (Pods and PodGroups; there are no workload
    /// controllers in the lab), inline...
    pub manifests: Option<String>,
    /// ...or from a YAML file (relative to the scenario file).
    pub file: Option<PathBuf>,
    /// The scenario's author says it can be placed (default true): in a
    /// chaos run, a placeable submission that never binds is counted.
    #[serde(default = "placeable_by_default")]
    pub placeable: bool,
}

fn placeable_by_default() -> bool {
    true
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

    /// The `lab.runtime_config` entries Kubernetes `version` can serve,
    /// and a line for each it cannot (left out: an admin of that version
    /// could not turn it on either).
    pub fn runtime_config_for(&self, version: KubeVersion) -> (Vec<String>, Vec<String>) {
        let mut kept = Vec::new();
        let mut left_out = Vec::new();
        for entry in &self.lab.runtime_config {
            match accord_testkit::fake_api::resources_with(version, true, &[entry]) {
                Ok(_) => kept.push(entry.clone()),
                Err(e) => left_out.push(format!("lab.runtime_config: {e}; left out")),
            }
        }
        (kept, left_out)
    }

    /// The Kubernetes the lab runs: `lab.kubernetes`, else the fake API
    /// for a chaos run or several replicas (their faults and counts are
    /// the fake's), else the upstream control plane.
    pub fn kubernetes(&self) -> KubernetesKind {
        match self.lab.kubernetes {
            Some(k) => k,
            None if self.lab.chaos.is_some() || self.lab.ha.replicas > 1 => KubernetesKind::Fake,
            None => KubernetesKind::Upstream,
        }
    }

    /// The Kubernetes version the lab runs.
    pub fn kube_version(&self) -> Result<KubeVersion, String> {
        match &self.lab.kube_version {
            Some(v) => KubeVersion::parse(v),
            None => Ok(KubeVersion::NEWEST),
        }
    }

    /// The recording fleet node `node` replays, and where that was said:
    /// its own `[lab.machines.NODE] recording`, else its profile's
    /// `[lab.recordings]` entry, else the default built-in.
    pub fn recording_of(&self, node: &str) -> (RecordingSpec, String) {
        if let Some(r) = self
            .lab
            .machines
            .get(node)
            .and_then(|m| m.recording.as_ref())
        {
            return (r.clone(), format!("lab.machines.{node}.recording"));
        }
        let profile = self
            .fleet
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.profile.as_deref());
        if let Some((p, r)) = profile.and_then(|p| Some((p, self.lab.recordings.get(p)?))) {
            return (r.clone(), format!("lab.recordings.{p}"));
        }
        (
            RecordingSpec::builtin(crate::builtins::DEFAULT_BUILTIN),
            "the default recording".to_owned(),
        )
    }

    /// Removes the submissions that apply anything Kubernetes `version`
    /// does not serve; returns why each was removed.
    pub fn skip_unserved(&mut self, version: KubeVersion) -> Vec<String> {
        let (_, mut problems) = self.runtime_config_for(version);
        problems.extend(self.unserved(version));
        problems.extend(self.without_controllers());
        let skipped: Vec<String> = self
            .submit
            .iter()
            .filter(|s| {
                let prefix = format!("submission {}:", s.name);
                problems.iter().any(|p| p.starts_with(&prefix))
            })
            .map(|s| s.name.clone())
            .collect();
        self.submit.retain(|s| !skipped.contains(&s.name));
        problems
    }

    /// What the submissions apply that Kubernetes `version` does not serve
    /// (the fake API server serves what such a cluster does, with the
    /// x-k8s.io CRDs installed): scheduling.k8s.io/v1beta1 PodGroups before
    /// 1.37, resource.k8s.io at a version it does not serve. Each names the
    /// submission, the object and the version. Reads `file` submissions.
    pub fn unserved(&self, version: KubeVersion) -> Vec<String> {
        let (runtime_config, _) = self.runtime_config_for(version);
        let served: Vec<(String, &str)> =
            accord_testkit::fake_api::resources_with(version, true, &runtime_config)
                .unwrap_or_else(|_| accord_testkit::fake_api::resources_for(version, true))
                .into_iter()
                .map(|r| {
                    let api = r
                        .prefix
                        .strip_prefix("/apis/")
                        .or_else(|| r.prefix.strip_prefix("/api/"))
                        .unwrap_or(r.prefix);
                    (api.to_owned(), r.kind)
                })
                .collect();
        let mut out = Vec::new();
        for s in &self.submit {
            let objects = match self.objects(s) {
                Ok(o) => o,
                Err(e) => {
                    out.push(format!("submission {}: {e:#}", s.name));
                    continue;
                }
            };
            for o in objects {
                let api = o["apiVersion"].as_str().unwrap_or("");
                let kind = o["kind"].as_str().unwrap_or("");
                if served.iter().any(|(a, k)| a == api && *k == kind) {
                    continue;
                }
                let what = format!(
                    "{kind} {}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or("default"),
                    o["metadata"]["name"].as_str().unwrap_or("")
                );
                let hint = if api == "scheduling.k8s.io/v1beta1" {
                    KubeVersion::ALL
                        .into_iter()
                        .find(|v| v.can_serve_pod_group_v1beta1())
                        .map(|v| {
                            format!(
                                " (served from Kubernetes {v} with lab.runtime_config \
                                 [\"scheduling.k8s.io/v1beta1=true\"])"
                            )
                        })
                        .unwrap_or_default()
                } else if api.starts_with("resource.k8s.io/") {
                    match version.dra_api_version() {
                        Some(v) => format!(" (it serves DRA as {v})"),
                        None => " (it serves no DRA version by default)".to_owned(),
                    }
                } else {
                    String::new()
                };
                out.push(format!(
                    "submission {}: {what} is {api}, which Kubernetes {version} does not serve{hint}",
                    s.name
                ));
            }
        }
        out
    }

    /// On the fake API nothing runs a Job (no job controller, no Kueue):
    /// a submission with one is skipped, said.
    fn without_controllers(&self) -> Vec<String> {
        if self.kubernetes() != KubernetesKind::Fake {
            return Vec::new();
        }
        let mut out = Vec::new();
        for s in &self.submit {
            let Ok(objects) = self.objects(s) else {
                continue;
            };
            if let Some(job) = objects.iter().find(|o| o["kind"] == "Job") {
                out.push(format!(
                    "submission {}: Job {}/{} needs a job controller (and Kueue), which the \
                     fake API does not run (lab.kubernetes = \"upstream\")",
                    s.name,
                    job["metadata"]["namespace"].as_str().unwrap_or("default"),
                    job["metadata"]["name"].as_str().unwrap_or("")
                ));
            }
        }
        out
    }

    /// A submission's manifests as JSON objects.
    pub fn objects(&self, s: &Submission) -> anyhow::Result<Vec<serde_json::Value>> {
        use anyhow::Context;
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
        parse_manifests(&text, &at)
    }

    /// `[lab.ha]`'s problems (checked again after the command line's
    /// `--replicas`, `--kill-leader-at`, `--pause-leader-at` are applied).
    pub fn ha_problems(&self) -> Vec<String> {
        let mut problems = self.lab.ha.problems("lab.ha");
        if self.kubernetes() == KubernetesKind::Upstream {
            // Both count and break what accordd sends the fake API.
            if self.lab.ha.replicas > 1 {
                problems.push(
                    "lab.ha: several replicas run on the fake API (lab.kubernetes = \"fake\"), \
                     which tells their writes apart"
                        .to_owned(),
                );
            }
            if self.lab.chaos.is_some() {
                problems.push(
                    "lab.chaos: its API faults are the fake API's (lab.kubernetes = \"fake\")"
                        .to_owned(),
                );
            }
        } else if self.lab.kubernetes.is_some() {
            if self.lab.cluster_manifests.is_some() {
                problems.push(
                    "lab.cluster_manifests: applied to the upstream control plane only \
                     (lab.kubernetes = \"upstream\")"
                        .to_owned(),
                );
            }
            if self.lab.kueue {
                problems.push(
                    "lab.kueue: Kueue runs on the upstream control plane only \
                     (lab.kubernetes = \"upstream\")"
                        .to_owned(),
                );
            }
        }
        if self.lab.ha.replicas > 1 && self.lab.chaos.is_some() {
            problems
                .push("lab.chaos: a chaos run has one accordd (lab.ha.replicas = 1)".to_owned());
        }
        problems
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
            for node in self.lab.machines.keys() {
                if !f.nodes.iter().any(|n| &n.name == node) {
                    problems.push(format!("lab.machines.{node}: not a fleet node"));
                }
            }
        }
        problems.extend(crate::bios::problems(self));
        if self.lab.kubelet_starting_taint && self.lab.mode == accord_api::control::Mode::Observe {
            problems.push(
                "lab.kubelet_starting_taint: in observe mode accordd writes nothing, so no \
                 Node's starting taint would ever be lifted"
                    .to_owned(),
            );
        }
        for profile in self.lab.recordings.keys() {
            if !self.fleet.profiles.contains_key(profile) {
                problems.push(format!(
                    "lab.recordings.{profile}: no profile {profile:?} in [fleet.profiles]"
                ));
            }
        }
        for (profile, r) in &self.lab.recordings {
            problems.extend(r.problems(&format!("lab.recordings.{profile}")));
        }
        for (node, m) in &self.lab.machines {
            if let Some(r) = &m.recording {
                problems.extend(r.problems(&format!("lab.machines.{node}.recording")));
            }
            // Whether the recording has these GPUs is known once it is
            // read (the lab says so at the boot).
            let mut seen = std::collections::BTreeSet::new();
            for g in &m.busy_gpus {
                if *g >= 64 || !seen.insert(*g) {
                    problems.push(format!(
                        "lab.machines.{node}.busy_gpus: {g} is not a GPU index below 64 named once"
                    ));
                }
            }
        }
        if let Err(e) = self.kube_version() {
            problems.push(format!("lab.kube_version: {e}"));
        }
        for (key, entries) in [
            ("lab.runtime_config", &self.lab.runtime_config),
            ("lab.feature_gates", &self.lab.feature_gates),
        ] {
            for e in entries {
                if let Err(why) = check_flag_entry(e, key == "lab.runtime_config") {
                    problems.push(format!("{key}: {e:?}: {why}"));
                }
            }
        }
        if let Some(text) = &self.lab.cluster_manifests {
            match parse_manifests(text, "lab.cluster_manifests") {
                Ok(objects) => {
                    for (i, o) in objects.iter().enumerate() {
                        if !o["apiVersion"].is_string()
                            || !o["kind"].is_string()
                            || !o["metadata"]["name"].is_string()
                        {
                            problems.push(format!(
                                "lab.cluster_manifests: document {}: needs apiVersion, kind and metadata.name",
                                i + 1
                            ));
                        }
                    }
                }
                Err(e) => problems.push(format!("{e:#}")),
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
            if let Some(after) = &s.after {
                if *after == s.name || !self.submit.iter().any(|o| o.name == *after) {
                    problems.push(format!(
                        "submit[{i}] ({}).after: {after:?} is not another submission's name",
                        s.name
                    ));
                }
            }
        }
        if let Some(c) = &self.lab.chaos {
            problems.extend(c.problems("lab.chaos"));
        }
        problems.extend(self.ha_problems());
        if self.lab.max_s == 0 {
            problems.push("lab.max_s: must be above 0".to_owned());
        }
        problems
    }
}

/// YAML manifests (documents split by `---`) as JSON objects; `at` names
/// where they came from in errors.
pub fn parse_manifests(text: &str, at: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    use anyhow::Context;
    use serde::Deserialize as _;
    // As accordd reads manifests: deep flow nesting refused before
    // libyaml's scanner (quadratic in it: 100,000 `[` took minutes), a key
    // named twice in one mapping refused.
    if let Some((line, column)) = accord::yaml::flow_too_deep(text, accord::yaml::MAX_FLOW_NESTING)
    {
        anyhow::bail!(
            "{at}: YAML: line {line}, column {column}: flow collections nested deeper than {} \
             levels",
            accord::yaml::MAX_FLOW_NESTING
        );
    }
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = accord::json::UniqueValue::deserialize(doc)
            .map(|v| v.0)
            .with_context(|| format!("{at}: YAML"))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// One `--runtime-config` (`group/version=true`, `api/all=false`) or
/// `--feature-gates` (`Name=true`) entry, checked for shape: what the
/// apiserver would refuse at start is refused here, by name.
pub fn check_flag_entry(entry: &str, runtime_config: bool) -> Result<(), String> {
    let (key, value) = match entry.split_once('=') {
        Some(kv) => kv,
        None if runtime_config => (entry, "true"),
        None => return Err("expected Name=true or Name=false".to_owned()),
    };
    if !matches!(value, "true" | "false") {
        return Err(format!("{value:?} is not true or false"));
    }
    let ok = if runtime_config {
        let mut parts = key.split('/');
        let (a, b) = (parts.next(), parts.next());
        parts.next().is_none()
            && [a, b].iter().all(|p| {
                p.is_some_and(|p| {
                    !p.is_empty()
                        && p.bytes().all(|c| {
                            c.is_ascii_lowercase() || c.is_ascii_digit() || b".-".contains(&c)
                        })
                })
            })
    } else {
        !key.is_empty() && key.len() <= 100 && key.bytes().all(|c| c.is_ascii_alphanumeric())
    };
    if ok {
        Ok(())
    } else if runtime_config {
        Err("expected group/version=true or group/version=false".to_owned())
    } else {
        Err("a feature gate's name is letters and digits".to_owned())
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

    const TWO_NODES: &str = "[[fleet.racks]]\nname = \"r1\"\n\
        [fleet.profiles.p]\ngpus = 8\ngpu_model = \"H\"\ncpu = \"4\"\nmemory = \"1Ti\"\n\
        [fleet.profiles.q]\ngpus = 8\ngpu_model = \"H\"\ncpu = \"4\"\nmemory = \"1Ti\"\n\
        [[fleet.nodes]]\nname = \"n1\"\nrack = \"r1\"\nprofile = \"p\"\n\
        [[fleet.nodes]]\nname = \"n2\"\nrack = \"r1\"\nprofile = \"q\"\n\
        [[fleet.nodes]]\nname = \"n3\"\nrack = \"r1\"\nprofile = \"p\"\n";

    fn with_lab(lab: &str) -> Result<Scenario, String> {
        Scenario::parse(&format!("{lab}\n{TWO_NODES}"), Path::new("dir/s.toml"))
            .map_err(|e| e.to_string())
    }

    /// `[lab.ha]`: the replicas, the Lease's timings and one fault, parsed
    /// strictly and checked as accordd checks its `[ha]`; absent: one
    /// accordd.
    #[test]
    fn the_ha_table_parses_strictly_and_is_checked() {
        let s = with_lab("").unwrap();
        assert_eq!(s.lab.ha, crate::ha::HaSettings::default());
        assert!(!s.lab.ha.enabled());
        let s = with_lab(
            "[lab.ha]\nreplicas = 3\nlease_duration_s = 6\nrenew_deadline_s = 4\n\
             retry_period_s = 1\npause_leader = { at = \"powering_on\", pause_s = 9 }",
        )
        .unwrap();
        assert_eq!(s.lab.ha.replicas, 3);
        assert_eq!(
            s.lab.ha.fault(),
            Some(crate::ha::Fault::Pause {
                at: crate::ha::Moment::PoweringOn,
                pause: std::time::Duration::from_secs(9)
            })
        );
        let s = with_lab("[lab.ha]\nreplicas = 2\nkill_leader = { at = \"powering_on\" }").unwrap();
        assert_eq!(
            s.lab.ha.fault(),
            Some(crate::ha::Fault::Kill {
                at: crate::ha::Moment::PoweringOn
            })
        );
        for (lab, want) in [
            ("[lab.ha]\nreplica = 2", "replica"),
            ("[lab.ha]\nkill_leader = { at = \"later\" }", "later"),
            (
                "[lab.ha]\nkill_leader = { at = \"powering_on\" }",
                "lab.ha: a fault for the leader needs replicas = 2 or more",
            ),
            (
                "[lab.ha]\nreplicas = 2\nrenew_deadline_s = 20",
                "lab.ha: need retry_period_s < renew_deadline_s < lease_duration_s",
            ),
            (
                "[lab.ha]\nreplicas = 2\n[lab.chaos]\nseed = 1",
                "lab.chaos: a chaos run has one accordd",
            ),
        ] {
            let e = with_lab(lab).unwrap_err();
            assert!(e.contains(want), "{lab}: {e}");
        }
    }

    /// Every recording key: per profile, per machine over it (each form),
    /// the default for the rest; paths relative to the scenario file.
    #[test]
    fn recordings_per_profile_and_per_machine() {
        let s = with_lab(
            "[lab]\nkube_version = \"1.34\"\n\
             [lab.recordings]\np = { builtin = \"h100-8gpu-mig-1g\" }\n\
             [lab.machines.n3]\nrecording = { hwloc_xml = \"rec/t.xml\", nvml_snapshot = \"rec/n.json\" }\n\
             [lab.machines.n2]\nrecording = { capture = \"cap\" }\n",
        )
        .unwrap();
        assert_eq!(s.kube_version().unwrap().to_string(), "1.34");
        let (r, from) = s.recording_of("n1");
        assert_eq!(r, RecordingSpec::builtin("h100-8gpu-mig-1g"));
        assert_eq!(from, "lab.recordings.p");
        let (r, from) = s.recording_of("n2");
        assert_eq!(r.capture.as_deref(), Some(Path::new("cap")));
        assert_eq!(from, "lab.machines.n2.recording");
        let (r, _) = s.recording_of("n3");
        let dir = tempfile::tempdir().unwrap();
        let rec = crate::Recording::resolve(&r, &s.base, dir.path()).unwrap();
        assert_eq!(rec.hwloc_xml, Path::new("dir/rec/t.xml"));
        assert_eq!(
            rec.nvml_snapshot.as_deref(),
            Some(Path::new("dir/rec/n.json"))
        );

        // No entry for its profile: the documented default.
        let s = with_lab("[lab]\n").unwrap();
        let (r, from) = s.recording_of("n2");
        assert_eq!(r, RecordingSpec::builtin(crate::builtins::DEFAULT_BUILTIN));
        assert_eq!(from, "the default recording");
        assert_eq!(s.kube_version().unwrap(), KubeVersion::NEWEST);
    }

    /// A capture directory: its topology.xml, and nvml.json only where
    /// the capture had NVML.
    #[test]
    fn a_capture_directory_is_what_capture_writes() {
        let base = tempfile::tempdir().unwrap();
        let cap = base.path().join("cap");
        std::fs::create_dir(&cap).unwrap();
        let spec = RecordingSpec {
            capture: Some("cap".into()),
            ..Default::default()
        };
        let e = crate::Recording::resolve(&spec, base.path(), base.path()).unwrap_err();
        assert!(format!("{e:#}").contains("topology.xml"), "{e:#}");
        std::fs::write(cap.join("topology.xml"), "x").unwrap();
        let r = crate::Recording::resolve(&spec, base.path(), base.path()).unwrap();
        assert_eq!(r.nvml_snapshot, None);
        std::fs::write(cap.join("nvml.json"), "x").unwrap();
        let r = crate::Recording::resolve(&spec, base.path(), base.path()).unwrap();
        assert_eq!(r.nvml_snapshot, Some(cap.join("nvml.json")));
    }

    /// Each mistake names its key.
    #[test]
    fn recording_and_version_mistakes_name_their_key() {
        let cases = [
            ("[lab]\nkube_version = \"1.12\"", "lab.kube_version"),
            (
                "[lab.recordings]\nzz = { builtin = \"h100-8gpu\" }",
                "lab.recordings.zz: no profile",
            ),
            (
                "[lab.recordings]\np = { builtin = \"a100\" }",
                "lab.recordings.p.builtin: no built-in recording \"a100\"",
            ),
            (
                "[lab.machines.n9]\nrecording = { builtin = \"h100-8gpu\" }",
                "lab.machines.n9: not a fleet node",
            ),
            (
                "[lab.machines.n1]\nrecording = { builtin = \"h100-8gpu\", capture = \"d\" }",
                "lab.machines.n1.recording: set exactly one of builtin, capture or hwloc_xml",
            ),
            (
                "[lab.machines.n1]\nrecording = {}",
                "lab.machines.n1.recording: set exactly one",
            ),
            (
                "[lab.machines.n1]\nrecording = { capture = \"d\", nvml_snapshot = \"n.json\" }",
                "lab.machines.n1.recording.nvml_snapshot: only with hwloc_xml",
            ),
            (
                "[lab.machines.n1]\nbusy_gpus = [0, 0]",
                "lab.machines.n1.busy_gpus: 0 is not a GPU index below 64 named once",
            ),
            (
                "[lab.machines.n1]\nbusy_gpus = [64]",
                "lab.machines.n1.busy_gpus: 64 is not",
            ),
        ];
        for (lab, want) in cases {
            let e = with_lab(lab).unwrap_err();
            assert!(e.contains(want), "{lab}: {e}");
        }
        // Unknown keys: the parse error names file, line and key.
        let e = with_lab("[lab.machines.n1]\nrecordng = { builtin = \"h100-8gpu\" }").unwrap_err();
        assert!(e.contains("dir/s.toml:2") && e.contains("recordng"), "{e}");
        let e = with_lab("[lab.recordings]\np = { bultin = \"h100-8gpu\" }").unwrap_err();
        assert!(e.contains("dir/s.toml:2") && e.contains("bultin"), "{e}");
    }

    /// The embedded default: r1-n1 replays the 7-GPU machine, the MIG
    /// node the all-1g one, the rest 8 x H100; its submissions need the
    /// newest Kubernetes (scheduling.k8s.io/v1beta1 PodGroups), and an
    /// older one is refused by name.
    #[test]
    fn the_default_scenarios_recordings_and_versions() {
        let s = Scenario::default_scenario();
        let name = |n: &str| s.recording_of(n).0.builtin.unwrap();
        assert_eq!(name("r1-n1"), "h100-7gpu");
        assert_eq!(name("r1-n4"), "h100-8gpu");
        assert_eq!(name("r2-n1"), "h100-8gpu");
        assert_eq!(name("r3-n1"), "h100-8gpu-mig-1g");
        assert_eq!(name("r3-n3"), "h100-8gpu");
        let fleet = s.resolve_fleet().unwrap();
        assert_eq!(fleet.nodes.len(), 11);
        assert!(s.unserved(KubeVersion::NEWEST).is_empty());
        let old = KubeVersion::parse("1.31").unwrap();
        let problems = s.unserved(old);
        assert!(
            problems.iter().any(|p| p.contains("submission train-a")
                && p.contains("PodGroup ml/train-a")
                && p.contains("scheduling.k8s.io/v1beta1")
                && p.contains("Kubernetes 1.31")),
            "{problems:?}"
        );
        // Plain pods are served everywhere.
        assert!(
            !problems.iter().any(|p| p.contains("notebooks")),
            "{problems:?}"
        );
        // At 1.31 the gangs are skipped and the notebooks stay.
        let mut on_old = s.clone();
        let why = on_old.skip_unserved(old);
        // The gangs' API is left out of the runtime config (said first),
        // then their submissions skipped.
        assert!(
            why[0].starts_with("lab.runtime_config: ") && why[0].contains("1.31 has no"),
            "{why:?}"
        );
        assert_eq!(why[1..], problems);
        let left: Vec<&str> = on_old.submit.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(left, ["notebooks", "batch"]);
        // On the fake API nothing runs the Kueue job: skipped, said.
        let mut on_fake = s.clone();
        on_fake.lab.kubernetes = Some(KubernetesKind::Fake);
        let why = on_fake.skip_unserved(KubeVersion::NEWEST);
        assert!(
            why.iter()
                .any(|w| w.starts_with("submission batch: Job batch/render needs a job controller")),
            "{why:?}"
        );
        assert!(!on_fake.submit.iter().any(|s| s.name == "batch"));
    }

    #[test]
    fn after_names_another_submission() {
        let text = |after: &str| {
            format!(
                "{TWO_NODES}\n[[submit]]\nname = \"a\"\nmanifests = \"{{}}\"\n\
                 [[submit]]\nname = \"b\"\nafter = \"{after}\"\nmanifests = \"{{}}\"\n"
            )
        };
        assert!(Scenario::parse(&text("a"), Path::new("s.toml")).is_ok());
        for bad in ["b", "nope"] {
            let e = Scenario::parse(&text(bad), Path::new("s.toml"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "submit[1] (b).after: \"{bad}\" is not another submission's name"
                )),
                "{e}"
            );
        }
    }

    /// DRA objects at a version the emulated Kubernetes does not serve.
    #[test]
    fn dra_objects_need_a_served_version() {
        let text = format!(
            "[lab]\n{TWO_NODES}\n[[submit]]\nname = \"c\"\nmanifests = '''\n\
             {{apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {{namespace: a, name: c}}}}\n'''\n"
        );
        let s = Scenario::parse(&text, Path::new("s.toml")).unwrap();
        assert!(s.unserved(KubeVersion::parse("1.34").unwrap()).is_empty());
        let p = s.unserved(KubeVersion::parse("1.32").unwrap());
        assert!(
            p.len() == 1 && p[0].contains("resource.k8s.io/v1beta1") && p[0].contains("1.32"),
            "{p:?}"
        );
        let p = s.unserved(KubeVersion::parse("1.31").unwrap());
        assert!(p[0].contains("no DRA"), "{p:?}");
    }

    /// Found by fuzz-figures (seed 30, case 5762): 100,000 `[` in a
    /// scenario's manifests held the parse for minutes in libyaml's
    /// scanner; refused at once now, as accordd refuses them.
    #[test]
    fn manifests_nested_past_reason_or_naming_a_key_twice_are_refused() {
        let deep = format!("{{a: {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse_manifests(&deep, "lab.cluster_manifests").unwrap_err();
        assert!(
            format!("{e:#}").contains("nested deeper than 1000"),
            "{e:#}"
        );
        let twice = "{apiVersion: v1, kind: Pod, apiVersion: v2}";
        let e = parse_manifests(twice, "submit.manifests").unwrap_err();
        assert!(format!("{e:#}").contains("twice"), "{e:#}");
        assert_eq!(
            parse_manifests("{a: [1]}\n---\n{b: 2}", "x").unwrap().len(),
            2
        );
    }
}
