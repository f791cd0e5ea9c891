//! The NVIDIA GPU Operator's mig-manager, as the lab plays it: it watches
//! each Node's `nvidia.com/mig.config` label; when the label names a
//! configuration it has not applied, it sets `nvidia.com/mig.config.state`
//! to `pending`, reads the configuration from its mig-parted ConfigMap
//! (`gpu-operator/default-mig-parted-config`, key `config.yaml`, where
//! accordd adds the configurations it names), repartitions the
//! machine's GPUs that differ from it (through the machine's replayed
//! NVML, as mig-manager would through the real one) and sets the state to
//! `success` (or `failed`). Written from mig-parted's documented
//! behaviour and file format, not from accordd's code: the format is
//! parsed here on its own.

use std::collections::BTreeMap;
use std::time::Duration;

use accord::hardware::{MigMode, MigState};
use accord_agent::mig::replay::ReplayedGpus;
use accord_agent::mig::ApplyOptions;
use accord_api::agent::{CommandResult, MigTarget};
use serde::Deserialize;
use serde_json::Value;

use super::Ctx;

const CONFIG_LABEL: &str = "nvidia.com/mig.config";
/// mig-manager's ConfigMap (the ClusterPolicy's default
/// `migManager.config.name`) and the key it reads.
pub const CONFIGMAP_NAMESPACE: &str = "gpu-operator";
pub const CONFIGMAP_NAME: &str = "default-mig-parted-config";
pub const CONFIGMAP_KEY: &str = "config.yaml";

/// The GPU Operator's install, as far as mig-manager goes: its namespace
/// and its ConfigMap with NVIDIA's stock configurations (two of them).
pub(crate) fn install(api: &crate::cluster::Cluster) {
    api.apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": CONFIGMAP_NAMESPACE}}));
    api.apply(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": CONFIGMAP_NAMESPACE, "name": CONFIGMAP_NAME},
        "data": {CONFIGMAP_KEY: "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n"}}));
    // accordd's permission on it, as an admin grants it (deploy/).
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
const STATE_LABEL: &str = "nvidia.com/mig.config.state";

#[derive(Debug, Deserialize)]
struct ConfigsFile {
    #[serde(rename = "mig-configs")]
    mig_configs: BTreeMap<String, Vec<Entry>>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    devices: Devices,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: BTreeMap<String, u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Devices {
    All(String),
    List(Vec<u32>),
}

/// Per node: the configuration applied last and the state reported.
#[derive(Debug, Default, Clone)]
struct Applied {
    config: String,
    state: &'static str,
    /// The machine's GPUs' version after it: a lower one is a fresh boot,
    /// where mig-manager applies the label's configuration again.
    version: u64,
}

/// The loop: every 300 ms, each Node.
pub(super) async fn run(ctx: Ctx) {
    let mut applied: BTreeMap<String, Applied> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for n in ctx.fleet.nodes.iter() {
            step(&ctx, &n.name, &mut applied).await;
        }
    }
}

async fn step(ctx: &Ctx, name: &str, applied: &mut BTreeMap<String, Applied>) {
    let Some(node) = ctx.api.get("v1", "Node", "", name) else {
        return;
    };
    let Some(want) = node["metadata"]["labels"][CONFIG_LABEL]
        .as_str()
        .map(str::to_owned)
    else {
        return;
    };
    let gpus = super::machine_gpus(ctx, name);
    let rebooted = |a: &Applied| gpus.as_ref().is_some_and(|g| g.version() < a.version);
    if let Some(a) = applied
        .get(name)
        .filter(|a| a.config == want && !rebooted(a))
    {
        // Done already: keep the state label showing it (another writer
        // of the Node may have replaced the object meanwhile).
        if node["metadata"]["labels"][STATE_LABEL].as_str() != Some(a.state) {
            set_state(ctx, name, a.state);
        }
        return;
    }
    // mig-manager runs on the node: nothing happens while it is off.
    let Some(gpus) = gpus else {
        return;
    };
    set_state(ctx, name, "pending");
    say!(ctx, node = %name, "mig-manager: applying MIG configuration {want}");
    let shown = format!("ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} key {CONFIGMAP_KEY}");
    let text = ctx
        .api
        .get("v1", "ConfigMap", CONFIGMAP_NAMESPACE, CONFIGMAP_NAME)
        .and_then(|cm| cm["data"][CONFIGMAP_KEY].as_str().map(str::to_owned))
        .ok_or_else(|| format!("{shown}: missing"));
    let outcome = match text.and_then(|t| {
        serde_yaml_ng::from_str::<ConfigsFile>(&t).map_err(|e| format!("{shown}: {e}"))
    }) {
        Err(e) => Err(e),
        Ok(file) => match file.mig_configs.get(&want) {
            None => Err(format!("no configuration {want} in the configs file")),
            Some(entries) => {
                let targets = targets(&gpus, entries);
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
        },
    };
    let state = match outcome {
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
            "failed"
        }
    };
    set_state(ctx, name, state);
    applied.insert(
        name.to_owned(),
        Applied {
            config: want,
            state,
            version: gpus.version(),
        },
    );
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
