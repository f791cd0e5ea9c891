//! The NVIDIA GPU Operator's mig-manager, as the lab plays it, each
//! behaviour from NVIDIA's code (mig-parted v0.15, gpu-operator v26.7;
//! nothing here is read from accordd's):
//!
//! - **Its configs file** (`setupMigConfig`,
//!   `cmd/nvidia-mig-manager/main.go`): the custom ConfigMap the
//!   ClusterPolicy names in `spec.migManager.config.name`, mounted as a
//!   volume (gpu-operator `controllers/object_controls.go`,
//!   `TransformMigManager`: `CONFIG_FILE=/mig-parted-config/config.yaml`);
//!   with none named, a configuration generated from the hardware
//!   (`writeGeneratedConfig`, `pkg/mig/builder/builder.go`:
//!   `all-disabled`, `all-enabled`, `all-<profile>`), the operator's
//!   `default-mig-parted-config` only a fallback this hardware never needs.
//! - **The volume lags the API** (the kubelet syncs ConfigMap volumes
//!   periodically): the lab copies the ConfigMap into it
//!   `lab.gpu_operator.volume_sync_ms` after it changes.
//! - **Only a change of the label acts** (`ContinuouslySyncMigConfigChanges`:
//!   `AddFunc` sets the label seen at start, `UpdateFunc` only when it
//!   differs; `SyncableMigConfig.Get` waits for a value not read yet):
//!   the label at mig-manager's start (the machine's boot), then each new
//!   value.
//! - **Reconfigure** (`pkg/mig/reconfigure/reconfigure.go`, `Run`): the
//!   label's configuration not in the file → `failed` (`validateMigConfig`,
//!   no `pending`); already applied → `success`; else `pending`, the
//!   GPUs repartitioned (through the machine's replayed NVML, as
//!   mig-parted would through the real one), `success` or `failed`
//!   (`setState`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use accord::hardware::{MigMode, MigState};
use accord_agent::mig::replay::ReplayedGpus;
use accord_agent::mig::ApplyOptions;
use accord_api::agent::{CommandResult, MigTarget};
use serde::Deserialize;
use serde_json::Value;

use super::Ctx;
use crate::scenario::GpuOperatorSettings;

const CONFIG_LABEL: &str = "nvidia.com/mig.config";
const STATE_LABEL: &str = "nvidia.com/mig.config.state";
/// The GPU Operator's namespace in the lab, and the ConfigMap it creates
/// itself (`MigPartedDefaultConfigMapName`).
pub const CONFIGMAP_NAMESPACE: &str = "gpu-operator";
pub const OPERATOR_CONFIGMAP: &str = "default-mig-parted-config";
pub const CONFIGMAP_KEY: &str = "config.yaml";
/// The ClusterPolicy the operator's install makes (its Helm chart's name).
pub const CLUSTER_POLICY: &str = "cluster-policy";

/// The GPU Operator's install, as far as mig-manager goes: its namespace,
/// its own ConfigMap with NVIDIA's stock configurations, and a
/// ClusterPolicy naming `settings.mig_config` (none: v26's defaults).
pub(crate) fn install(api: &crate::cluster::Cluster, settings: &GpuOperatorSettings) {
    api.apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": CONFIGMAP_NAMESPACE}}));
    api.apply(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": CONFIGMAP_NAMESPACE, "name": OPERATOR_CONFIGMAP},
        "data": {CONFIGMAP_KEY: "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n"}}));
    if api.upstream().is_some() {
        // The ClusterPolicy's CRD, as far as the lab uses it (the
        // operator's full schema is not needed to store one).
        api.apply(serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusterpolicies.nvidia.com"},
            "spec": {"group": "nvidia.com", "scope": "Cluster",
                "names": {"plural": "clusterpolicies", "singular": "clusterpolicy",
                    "kind": "ClusterPolicy", "listKind": "ClusterPolicyList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}}));
    }
    let mut mig_manager =
        serde_json::json!({"enabled": true, "config": {"default": "all-disabled"}});
    if !settings.mig_config.is_empty() {
        mig_manager["config"]["name"] = Value::from(settings.mig_config.as_str());
    }
    api.apply(
        serde_json::json!({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
        "metadata": {"name": CLUSTER_POLICY},
        "spec": {"migManager": mig_manager}}),
    );
    // accordd's permission on its ConfigMap, as an admin grants it
    // (deploy/).
    if api.upstream().is_some() {
        let rbac = include_str!("../../deploy/rbac-gpu-operator.yaml");
        for doc in serde_yaml_ng::Deserializer::from_str(rbac) {
            match <serde_json::Value as serde::Deserialize>::deserialize(doc) {
                Ok(v) => api.apply(v),
                Err(e) => {
                    tracing::error!(target: "lab", error = %e, "deploy/rbac-gpu-operator.yaml")
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
struct ConfigsFile {
    #[serde(rename = "mig-configs")]
    mig_configs: BTreeMap<String, Vec<Entry>>,
}

#[derive(Debug, Clone, Deserialize)]
struct Entry {
    devices: Devices,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Devices {
    All(String),
    List(Vec<u32>),
}

/// Per node: mig-manager's informer and what it did last.
#[derive(Debug, Default, Clone)]
struct Applied {
    /// The label value it read last (`SyncableMigConfig.lastRead`).
    read: String,
    state: &'static str,
    /// The machine's GPUs' version at its start: a lower one is a fresh
    /// boot, a new mig-manager pod that reads the label afresh.
    version: u64,
}

/// The custom ConfigMap's volume, as the kubelet syncs it: its text, and
/// the API's newer text with when it was first seen.
#[derive(Debug, Default)]
struct Volume {
    text: Option<String>,
    newer: Option<(Option<String>, Instant)>,
}

impl Volume {
    /// Follows the API's `now_text`, `lag` behind.
    fn sync(&mut self, now_text: Option<String>, lag: Duration) {
        if now_text == self.text {
            self.newer = None;
            return;
        }
        match &self.newer {
            Some((t, since)) if *t == now_text => {
                if since.elapsed() >= lag {
                    self.text = now_text;
                    self.newer = None;
                }
            }
            _ => self.newer = Some((now_text, Instant::now())),
        }
    }
}

/// The loop: every 300 ms, the volume, then each Node.
pub(super) async fn run(ctx: Ctx) {
    // Only where the lab installed the GPU Operator (`install`).
    if !ctx
        .fleet
        .nodes
        .iter()
        .any(|n| n.mig_via == accord::fleet::MigVia::GpuOperator)
    {
        return;
    }
    let settings = ctx.scenario.lab.gpu_operator.clone();
    let mut applied: BTreeMap<String, Applied> = BTreeMap::new();
    let mut volume = Volume::default();
    let mut failures_left = settings.fail_first;
    let lag = Duration::from_millis(settings.volume_sync_ms);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let named = ctx
            .api
            .get("nvidia.com/v1", "ClusterPolicy", "", CLUSTER_POLICY)
            .and_then(|p| {
                p["spec"]["migManager"]["config"]["name"]
                    .as_str()
                    .map(str::to_owned)
            });
        if let Some(name) = &named {
            let text = ctx
                .api
                .get("v1", "ConfigMap", CONFIGMAP_NAMESPACE, name)
                .and_then(|cm| cm["data"][CONFIGMAP_KEY].as_str().map(str::to_owned));
            volume.sync(text, lag);
        }
        for n in ctx.fleet.nodes.iter() {
            let file = match &named {
                Some(name) => Source::Custom(name.clone(), volume.text.clone()),
                None => Source::Generated,
            };
            step(&ctx, &n.name, &mut applied, &file, &mut failures_left).await;
        }
    }
}

/// Where mig-manager's configurations come from (`setupMigConfig`).
enum Source {
    /// The custom ConfigMap (its name) as its volume holds it.
    Custom(String, Option<String>),
    /// Generated from the machine's GPUs.
    Generated,
}

async fn step(
    ctx: &Ctx,
    name: &str,
    applied: &mut BTreeMap<String, Applied>,
    source: &Source,
    failures_left: &mut u32,
) {
    let Some(node) = ctx.api.get("v1", "Node", "", name) else {
        return;
    };
    let want = node["metadata"]["labels"][CONFIG_LABEL]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // mig-manager runs on the node: nothing happens while it is off.
    let Some(gpus) = super::machine_gpus(ctx, name) else {
        applied.remove(name);
        return;
    };
    // Its pod there (the operator's DaemonSet), whose log says why it
    // failed: on the fake API, which serves pods' logs (upstream has no
    // kubelet to, and would collect a pod whose DaemonSet is not there).
    let pod = format!("nvidia-mig-manager-{name}");
    if ctx.api.fake().is_some()
        && ctx
            .api
            .get("v1", "Pod", CONFIGMAP_NAMESPACE, &pod)
            .is_none()
    {
        ctx.api.apply(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": CONFIGMAP_NAMESPACE, "name": pod,
                "labels": {"app": "nvidia-mig-manager"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "nvidia-mig-manager", "uid": "lab-nvidia-mig-manager", "controller": true}]},
            "spec": {"nodeName": name, "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "nvidia-mig-manager", "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"}]},
            "status": {"phase": "Running"}}));
    }
    let started = applied
        .get(name)
        .is_some_and(|a| gpus.version() >= a.version);
    if let Some(a) = applied.get(name).filter(|a| started && a.read == want) {
        // Nothing new to read: keep the state label showing the last
        // outcome (another writer of the Node may have replaced it).
        if !a.state.is_empty() && node["metadata"]["labels"][STATE_LABEL].as_str() != Some(a.state)
        {
            set_state(ctx, name, a.state);
        }
        return;
    }
    // A new label value (or mig-manager's start, `AddFunc`); an empty
    // one is never applied (`SyncableMigConfig.Set`).
    if want.is_empty() {
        applied.insert(
            name.to_owned(),
            Applied {
                read: want,
                state: "",
                version: gpus.version(),
            },
        );
        return;
    }
    say!(ctx, node = %name, "mig-manager: applying MIG configuration {want}");
    let state = match reconfigure(ctx, name, &gpus, &want, source, failures_left).await {
        Ok(changed) => {
            if changed > 0 {
                let mut r = ctx.record.lock().expect("lock");
                *r.mig_operator.entry(name.to_owned()).or_default() += 1;
            }
            say!(ctx, node = %name, "mig-manager: configuration {want} applied ({changed} GPUs repartitioned)");
            "success"
        }
        Err(e) => {
            tracing::warn!(target: "lab", node = %name, config = %want, error = %e, "mig-manager: failed");
            // As its main loop logs it (`log.Errorf("Error: %s", err)`,
            // logrus' text format).
            if let Some(fake) = ctx.api.fake() {
                let msg = format!("Error: {e}")
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"");
                fake.append_pod_log(
                    CONFIGMAP_NAMESPACE,
                    &pod,
                    &format!("time=\"{}\" level=error msg=\"{msg}\"", unix_now()),
                );
            }
            "failed"
        }
    };
    set_state(ctx, name, state);
    // A boot replays the GPUs afresh, below the version this left.
    applied.insert(
        name.to_owned(),
        Applied {
            read: want,
            state,
            version: gpus.version(),
        },
    );
}

/// `Reconfigure.Run`, as far as the lab goes: the GPUs repartitioned, how
/// many.
async fn reconfigure(
    ctx: &Ctx,
    name: &str,
    gpus: &ReplayedGpus,
    want: &str,
    source: &Source,
    failures_left: &mut u32,
) -> Result<usize, String> {
    // validateMigConfig: `nvidia-mig-parted assert --valid-config -f FILE
    // -c CONFIG` against the file as mig-manager's volume holds it.
    let configs: BTreeMap<String, Vec<Entry>> = match source {
        Source::Custom(cm, text) => {
            let shown =
                format!("ConfigMap {CONFIGMAP_NAMESPACE}/{cm} key {CONFIGMAP_KEY} (its volume)");
            let text = text.as_deref().ok_or_else(|| format!("{shown}: missing"))?;
            serde_yaml_ng::from_str::<ConfigsFile>(text)
                .map_err(|e| format!("{shown}: {e}"))?
                .mig_configs
        }
        Source::Generated => generated(gpus),
    };
    let entries = configs
        .get(want)
        .ok_or_else(|| format!("no configuration {want} in the configs file"))?
        .clone();
    let targets = targets(gpus, &entries);
    // isConfigAlreadyApplied.
    if targets.is_empty() {
        return Ok(0);
    }
    set_state(ctx, name, "pending");
    if *failures_left > 0 {
        *failures_left -= 1;
        return Err(
            "applyMigConfig: the lab's injected failure (lab.gpu_operator.fail_first)".to_owned(),
        );
    }
    let changed = targets.len();
    let g = gpus.clone();
    match tokio::task::spawn_blocking(move || {
        g.apply(
            &targets,
            &ApplyOptions {
                allow_gpu_reset: true,
            },
        )
    })
    .await
    {
        Ok(CommandResult::Done) => Ok(changed),
        Ok(other) => Err(other.describe()),
        Err(e) => Err(e.to_string()),
    }
}

/// The configurations mig-manager v26 generates from the hardware
/// (`pkg/mig/builder/builder.go`, `buildMigConfigSpec`): `all-disabled`,
/// `all-enabled`, and `all-<profile>` with as many of that profile as fit.
fn generated(gpus: &ReplayedGpus) -> BTreeMap<String, Vec<Entry>> {
    let all = |enabled: bool, devices: BTreeMap<String, u32>| {
        vec![Entry {
            devices: Devices::All("all".to_owned()),
            mig_enabled: enabled,
            mig_devices: devices,
        }]
    };
    let mut out = BTreeMap::new();
    out.insert("all-disabled".to_owned(), all(false, BTreeMap::new()));
    out.insert("all-enabled".to_owned(), all(true, BTreeMap::new()));
    let snap = gpus.snapshot();
    if let Some(mig) = snap
        .devices
        .iter()
        .find_map(|d| d.mig.as_ref().filter(|m| m.capable))
    {
        for p in &mig.profiles {
            out.insert(
                format!("all-{}", p.name),
                all(true, BTreeMap::from([(p.name.clone(), p.max_count)])),
            );
        }
    }
    out
}

/// Sets the state label in one read-modify-write under the fake API's
/// lock (the kubelet stand-in republishes the same Node concurrently).
fn set_state(ctx: &Ctx, name: &str, state: &str) {
    ctx.api.update("v1", "Node", "", name, |node| {
        node["metadata"]["labels"][STATE_LABEL] = Value::from(state);
    });
}

/// The GPUs whose MIG devices differ from the configuration, each with a
/// layout: mig-parted chooses placements itself; here largest profiles
/// first, each at its first free placement.
fn targets(gpus: &ReplayedGpus, entries: &[Entry]) -> Vec<MigTarget> {
    let snap = gpus.snapshot();
    let mut out = Vec::new();
    for d in &snap.devices {
        let Some(entry) = entries.iter().find(|e| match &e.devices {
            Devices::All(s) => s == "all",
            Devices::List(l) => l.contains(&d.index),
        }) else {
            continue;
        };
        let Some(mig) = d.mig.as_ref().filter(|m| m.capable) else {
            continue;
        };
        if !entry.mig_enabled {
            // Accord never asks to turn MIG off here; leave the GPU be.
            continue;
        }
        let mut have: BTreeMap<String, u32> = BTreeMap::new();
        if mig.current_mode == MigMode::Enabled {
            for gi in &mig.gpu_instances {
                *have.entry(gi.profile.clone()).or_default() += 1;
            }
        }
        if mig.current_mode == MigMode::Enabled && have == entry.mig_devices {
            continue;
        }
        let mut state = MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: mig.profiles.clone(),
            gpu_instances: Vec::new(),
        };
        let mut wanted: Vec<(&String, u32)> =
            entry.mig_devices.iter().map(|(p, n)| (p, *n)).collect();
        wanted.sort_by_key(|(p, _)| std::cmp::Reverse(state.profile(p).map_or(0, |x| x.slices)));
        let mut layout = Vec::new();
        for (profile, n) in wanted {
            for _ in 0..n {
                let Some(pl) = state
                    .free_placements(profile)
                    .ok()
                    .and_then(|v| v.first().copied())
                else {
                    break;
                };
                let id = state.gpu_instances.len() as u32 + 1;
                state.gpu_instances.push(accord::hardware::GpuInstance {
                    id,
                    profile: profile.clone(),
                    profile_id: state.profile(profile).map(|p| p.id),
                    placement: Some(pl),
                    compute_instances: Vec::new(),
                });
                layout.push(format!("{profile}@{}", pl.start));
            }
        }
        out.push(MigTarget {
            index: d.index,
            uuid: d.uuid.clone(),
            layout,
        });
    }
    out
}

/// Unix seconds now (the log's `time`).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
