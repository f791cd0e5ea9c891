//! Each booted machine's GPUs: a twin of its recording's NVML snapshot
//! ([`ReplayedGpus`]) that its agent repartitions on accordd's command (or
//! the lab's mig-manager on the GPU Operator's), and that its kubelet,
//! device plugin, GFD and DRA driver stand-ins publish again whenever it
//! changes, as the real ones do after a MIG repartition.
//!
//! The twin is fresh from the recording at every boot: the recording is the
//! machine as it boots (MIG GPU and compute instances do not survive a
//! power cycle on a real machine either; mig-manager recreates them).

use accord_agent::mig::replay::ReplayedGpus;

use super::Ctx;

/// A process id for a GPU's process Kubernetes does not know (the
/// scenario's `busy_gpus`): recognisable in the agent's refusal.
fn stray_pid(gpu: u32) -> u32 {
    40_000 + gpu
}

/// The machine's GPUs at a boot, with the scenario's busy GPUs; `None`
/// when its recording has no NVML view (its agent then answers MIG
/// commands that NVML is not available).
pub(super) fn at_boot(ctx: &Ctx, name: &str) -> Option<ReplayedGpus> {
    let rec = &ctx.recordings.get(name)?.recording;
    let snapshot = match rec.load_snapshot() {
        Ok(s) => s?,
        Err(e) => {
            tracing::error!(target: "lab", node = %name, error = %format!("{e:#}"), "the machine's NVML recording cannot be read: its GPUs cannot be commanded");
            return None;
        }
    };
    let busy = ctx
        .scenario
        .lab
        .machines
        .get(name)
        .map(|m| m.busy_gpus.clone())
        .unwrap_or_default();
    let missing: Vec<u32> = busy
        .iter()
        .copied()
        .filter(|g| !snapshot.devices.iter().any(|d| d.index == *g))
        .collect();
    if !missing.is_empty() {
        tracing::warn!(target: "lab", node = %name, gpus = ?missing, "lab.machines.{name}.busy_gpus: the recording has no such GPU");
    }
    let gpus = ReplayedGpus::new(snapshot);
    for g in busy {
        gpus.set_busy(g, vec![stray_pid(g)]);
        say!(ctx, node = %name, "GPU {g} runs process {} that Kubernetes does not know", stray_pid(g));
    }
    Some(gpus)
}

/// The node's device plugin, GFD and DRA driver while the machine is up:
/// on every change of its GPUs they publish them again (once its Node is
/// registered: registering publishes what is there then). Ends when the
/// machine's agent does (the caller selects on both).
pub(super) async fn watch(ctx: Ctx, name: String, gpus: ReplayedGpus) {
    let operator = ctx
        .scenario
        .lab
        .machines
        .get(&name)
        .is_some_and(|m| m.gpu_operator_operands);
    if operator {
        return operator_operands(ctx, name, gpus).await;
    }
    let mut changes = gpus.subscribe();
    // The handle holds the sender: this never ends by itself.
    while changes.changed().await.is_ok() {
        let registered = ctx
            .record
            .lock()
            .expect("lock")
            .nodes
            .get(&name)
            .is_some_and(|n| n.registered);
        if registered {
            republish(&ctx, &name, &gpus).await;
        }
    }
}

/// Whether `node`'s DRA driver runs with dynamic MIG
/// (`lab.machines.NODE.dra_dynamic_mig`).
pub(super) fn dynamic_mig(ctx: &Ctx, node: &str) -> bool {
    ctx.scenario
        .lab
        .machines
        .get(node)
        .is_some_and(|m| m.dra_dynamic_mig)
}

/// What an NVIDIA component publishes when it enumerates the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Publishes {
    /// The device plugin and GFD: the Node's `nvidia.com/*` resources and
    /// labels.
    NodeResources,
    /// The DRA driver's kubelet plugin: its ResourceSlice (where DRA is
    /// served).
    Slice,
    /// Both (the lab's plain machine: its plugins follow every change).
    Both,
    /// Nothing (a GPU client, a validator).
    Nothing,
}

/// The Node's `nvidia.com/*` resources and labels, and its ResourceSlice
/// where DRA is served, from the GPUs as they are now; said once.
pub(super) async fn republish(ctx: &Ctx, name: &str, gpus: &ReplayedGpus) {
    publish(ctx, name, gpus, Publishes::Both).await
}

/// [`republish`], `what` of it.
pub(super) async fn publish(ctx: &Ctx, name: &str, gpus: &ReplayedGpus, what: Publishes) {
    if what == Publishes::Nothing {
        return;
    }
    let Some(rec) = ctx.recordings.get(name).map(|m| m.recording.clone()) else {
        return;
    };
    let snapshot = gpus.snapshot();
    let machine = match tokio::task::spawn_blocking(move || rec.machine_with(Some(&snapshot))).await
    {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            tracing::error!(target: "lab", node = %name, error = %format!("{e:#}"), "the machine's GPUs cannot be read: not published");
            return;
        }
        Err(e) => {
            tracing::error!(target: "lab", node = %name, error = %e, "discovery task");
            return;
        }
    };
    if ctx.api.get("v1", "Node", "", name).is_none() {
        // Not registered yet: registering publishes the GPUs as they are.
        return;
    }
    let mut said = Vec::new();
    if matches!(what, Publishes::NodeResources | Publishes::Both) {
        let fresh = crate::kubelet::node_object(name, &machine);
        ctx.api.update("v1", "Node", "", name, |n| {
            crate::kubelet::republish_node(n, &fresh)
        });
        for (k, v) in fresh["status"]["allocatable"]
            .as_object()
            .into_iter()
            .flatten()
        {
            if k.starts_with("nvidia.com/") {
                said.push(format!("{k} {}", v.as_str().unwrap_or("?")));
            }
        }
    }
    let api = ctx
        .kube
        .dra_api_version()
        .filter(|_| matches!(what, Publishes::Slice | Publishes::Both));
    if let Some(api) = api {
        let slices = crate::kubelet::resource_slices(name, &machine, api, dynamic_mig(ctx, name));
        for slice in slices {
            let slice_name = slice["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let devices = slice["spec"]["devices"].as_array().map_or(0, Vec::len);
            let updated = ctx.api.update(api, "ResourceSlice", "", &slice_name, |s| {
                crate::kubelet::republish_slice(s, &slice)
            });
            if !updated {
                ctx.api.apply(slice);
            }
            if devices > 0 {
                said.push(format!("ResourceSlice with {devices} devices"));
            }
        }
    }
    if !said.is_empty() {
        say!(ctx, node = %name, "its GPUs as they are now published: {}", said.join(", "));
    }
}

/// One of the GPU Operator's DaemonSets as it runs on a machine.
#[derive(Debug, Clone, Copy)]
struct Operand {
    /// The Node label its DaemonSet selects on (`…=true`).
    label: &'static str,
    /// Its pods' `app` label (and the pod's name, with the node's).
    app: &'static str,
    image: &'static str,
    publishes: Publishes,
    /// Its pods run by the operator in its namespace (else a third party's
    /// GPU client, in `default`).
    operator: bool,
}

/// The device plugin: NVIDIA's enumerates devices when it starts and not
/// after.
pub const DEVICE_PLUGIN_APP: &str = "nvidia-device-plugin-daemonset";
/// The DRA driver's kubelet plugin: publishes its ResourceSlices when it
/// starts (NVIDIA/k8s-dra-driver-gpu `cmd/gpu-kubelet-plugin/driver.go`,
/// `NewDriver` → `PublishResources`), not on a MIG change under it.
pub const DRA_DRIVER_APP: &str = "nvidia-dra-driver-gpu-kubelet-plugin";
/// A third party's GPU client DaemonSet (mig-parted's
/// `gpu.deploy.client` convention).
pub const CLIENT_APP: &str = "lab-gpu-client";

const OPERANDS: [Operand; 3] = [
    Operand {
        label: "nvidia.com/gpu.deploy.device-plugin",
        app: DEVICE_PLUGIN_APP,
        image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
        publishes: Publishes::NodeResources,
        operator: true,
    },
    Operand {
        label: "nvidia.com/gpu.deploy.dra-driver",
        app: DRA_DRIVER_APP,
        image: "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
        publishes: Publishes::Slice,
        operator: true,
    },
    Operand {
        label: "nvidia.com/gpu.deploy.client",
        app: CLIENT_APP,
        image: "lab/gpu-client",
        publishes: Publishes::Nothing,
        operator: false,
    },
];

/// The validator pods the operator runs on each node (its
/// `nvidia-operator-validator` DaemonSet and the CUDA workload it starts):
/// made again when deleted, as their DaemonSet does.
const VALIDATORS: [&str; 2] = ["nvidia-operator-validator", "nvidia-cuda-validator"];

/// The GPU Operator's operands on one machine: each DaemonSet's pod runs
/// while its Node label is `true` and goes while it is anything else
/// (`paused-for-mig-change`); each publishes what it enumerated when its
/// pod starts, and a MIG change while it runs is counted (what pausing it
/// avoids). The validators run and come back when deleted. Ends when the
/// machine goes off (the caller selects).
async fn operator_operands(ctx: Ctx, name: String, gpus: ReplayedGpus) {
    const NAMESPACE: &str = "gpu-operator";
    let pod = |o: &Operand| {
        (
            if o.operator { NAMESPACE } else { "default" },
            format!("{}-{name}", o.app),
        )
    };
    // What each running operand enumerated (the GPUs' version then).
    let mut enumerated: [Option<u64>; OPERANDS.len()] = [None; OPERANDS.len()];
    // Pods left from before this boot are not this boot's.
    for o in &OPERANDS {
        let (ns, pod_name) = pod(o);
        ctx.api.delete("v1", "Pod", ns, &pod_name);
    }
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let Some(node) = ctx.api.get("v1", "Node", "", &name) else {
            continue;
        };
        for v in VALIDATORS {
            let pod_name = format!("{v}-{name}");
            if ctx.api.get("v1", "Pod", NAMESPACE, &pod_name).is_none() {
                ctx.api.apply(daemon_pod(
                    NAMESPACE,
                    &pod_name,
                    v,
                    v,
                    &name,
                    None,
                    "nvcr.io/nvidia/gpu-operator-validator",
                ));
                count(&ctx, &name, v, |s| s.starts += 1);
            }
        }
        for (i, o) in OPERANDS.iter().enumerate() {
            let Some(label) = node["metadata"]["labels"][o.label]
                .as_str()
                .map(str::to_owned)
            else {
                // The operator's node labeller.
                ctx.api.update("v1", "Node", "", &name, |n| {
                    n["metadata"]["labels"][o.label] = serde_json::json!("true");
                });
                continue;
            };
            let (ns, pod_name) = pod(o);
            let running = ctx.api.get("v1", "Pod", ns, &pod_name).is_some();
            if let (true, Some(v)) = (running, enumerated[i]) {
                if gpus.version() != v {
                    enumerated[i] = Some(gpus.version());
                    if o.publishes != Publishes::Nothing {
                        count(&ctx, &name, o.app, |s| s.changed_under_it += 1);
                        say!(ctx, node = %name, "its GPUs changed under the running {}: it does not see the change", o.app);
                    }
                }
            }
            match (label == "true", running) {
                (true, false) => {
                    ctx.api.apply(daemon_pod(
                        ns,
                        &pod_name,
                        o.app,
                        o.app,
                        &name,
                        Some(o.label),
                        o.image,
                    ));
                    enumerated[i] = Some(gpus.version());
                    count(&ctx, &name, o.app, |s| s.starts += 1);
                    if o.publishes == Publishes::Slice {
                        // Registered and enumerated a while after its start
                        // (if its pod still runs then).
                        let (ctx, name, gpus, ns, pod_name) = (
                            ctx.clone(),
                            name.clone(),
                            gpus.clone(),
                            ns.to_owned(),
                            pod_name.clone(),
                        );
                        // It enumerates at its start: GPUs changed since are
                        // not what it publishes (it shows what it saw).
                        let enumerated = gpus.version();
                        tokio::spawn(async move {
                            let delay = ctx.scenario.lab.gpu_operator.dra_driver_start_ms;
                            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                            let up = crate::machine_gpus(&ctx, &name).is_some();
                            let same = gpus.version() == enumerated;
                            if up && same && ctx.api.get("v1", "Pod", &ns, &pod_name).is_some() {
                                publish(&ctx, &name, &gpus, Publishes::Slice).await;
                            }
                        });
                    } else {
                        publish(&ctx, &name, &gpus, o.publishes).await;
                    }
                    say!(ctx, node = %name, "{} started ({}=true) and enumerated the GPUs", o.app, o.label);
                }
                (false, true) => {
                    ctx.api.delete("v1", "Pod", ns, &pod_name);
                    enumerated[i] = None;
                    count(&ctx, &name, o.app, |s| s.stops += 1);
                    say!(ctx, node = %name, "{} stopped ({}={label})", o.app, o.label);
                }
                _ => {}
            }
        }
    }
}

/// A DaemonSet's pod on `node`, running; selecting `selector=true` where
/// given.
fn daemon_pod(
    ns: &str,
    pod_name: &str,
    app: &str,
    daemon_set: &str,
    node: &str,
    selector: Option<&str>,
    image: &str,
) -> serde_json::Value {
    let mut spec = serde_json::json!({"nodeName": node, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": app, "image": image}]});
    if let Some(key) = selector {
        spec["nodeSelector"] = serde_json::json!({key: "true"});
    }
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": pod_name,
            "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": daemon_set, "uid": format!("lab-{daemon_set}"), "controller": true}]},
        "spec": spec,
        "status": {"phase": "Running"}
    })
}

/// Notes what an operand stand-in (`app`) saw on `name`.
fn count(ctx: &Ctx, name: &str, app: &str, change: impl FnOnce(&mut crate::DevicePluginSeen)) {
    let mut r = ctx.record.lock().expect("lock");
    change(
        r.operands
            .entry((name.to_owned(), app.to_owned()))
            .or_default(),
    );
}
