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
        return operator_device_plugin(ctx, name, gpus).await;
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

/// The Node's `nvidia.com/*` resources and labels, and its ResourceSlice
/// where DRA is served, from the GPUs as they are now; said once.
pub(super) async fn republish(ctx: &Ctx, name: &str, gpus: &ReplayedGpus) {
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
    let fresh = crate::kubelet::node_object(name, &machine);
    let updated = ctx.api.update("v1", "Node", "", name, |n| {
        crate::kubelet::republish_node(n, &fresh)
    });
    if !updated {
        // Not registered yet: registering publishes the GPUs as they are.
        return;
    }
    let mut said = Vec::new();
    for (k, v) in fresh["status"]["allocatable"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if k.starts_with("nvidia.com/") {
            said.push(format!("{k} {}", v.as_str().unwrap_or("?")));
        }
    }
    if let Some(api) = ctx.kube.dra_api_version() {
        if let Some(slice) = crate::kubelet::resource_slice(name, &machine, api) {
            let slice_name = crate::kubelet::slice_name(name);
            let devices = slice["spec"]["devices"].as_array().map_or(0, Vec::len);
            let updated = ctx.api.update(api, "ResourceSlice", "", &slice_name, |s| {
                crate::kubelet::republish_slice(s, &slice)
            });
            if !updated {
                ctx.api.apply(slice);
            }
            said.push(format!("ResourceSlice with {devices} devices"));
        }
    }
    say!(ctx, node = %name, "its GPUs changed (MIG): the device plugin, GFD and DRA driver publish {}", said.join(", "));
}

/// The GPU Operator's device-plugin DaemonSet on one machine: the
/// operator labels the Node `nvidia.com/gpu.deploy.device-plugin=true`,
/// its DaemonSet selects nodes on that label, so the plugin's pod runs
/// while it is `true` and goes while it is anything else (mig-manager's
/// `paused-for-mig-change`). NVIDIA's plugin enumerates devices when it
/// starts and not after: a MIG change is published only when its pod
/// starts again. A change while the pod runs is counted (what pausing
/// it avoids). Ends when the machine goes off (the caller selects).
async fn operator_device_plugin(ctx: Ctx, name: String, gpus: ReplayedGpus) {
    const LABEL: &str = "nvidia.com/gpu.deploy.device-plugin";
    const NAMESPACE: &str = "gpu-operator";
    const APP: &str = "nvidia-device-plugin-daemonset";
    let pod_name = format!("{APP}-{name}");
    // What the running plugin enumerated (the GPUs' version then).
    let mut enumerated: Option<u64> = None;
    // A pod left from before this boot is not this boot's plugin.
    ctx.api.delete("v1", "Pod", NAMESPACE, &pod_name);
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let Some(node) = ctx.api.get("v1", "Node", "", &name) else {
            continue;
        };
        let label = node["metadata"]["labels"][LABEL]
            .as_str()
            .map(str::to_owned);
        let Some(label) = label else {
            // The operator's node labeller.
            ctx.api.update("v1", "Node", "", &name, |n| {
                n["metadata"]["labels"][LABEL] = serde_json::json!("true");
            });
            continue;
        };
        let running = ctx.api.get("v1", "Pod", NAMESPACE, &pod_name).is_some();
        if let (true, Some(v)) = (running, enumerated) {
            if gpus.version() != v {
                enumerated = Some(gpus.version());
                count(&ctx, &name, |s| s.changed_under_it += 1);
                say!(ctx, node = %name, "its GPUs changed under the running device plugin: it does not see the change");
            }
        }
        match (label == "true", running) {
            (true, false) => {
                ctx.api.apply(serde_json::json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"namespace": NAMESPACE, "name": pod_name,
                        "labels": {"app": APP},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                            "name": APP, "uid": format!("lab-{APP}"), "controller": true}]},
                    "spec": {"nodeName": name, "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "nvidia-device-plugin",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}]},
                    "status": {"phase": "Running"}
                }));
                enumerated = Some(gpus.version());
                count(&ctx, &name, |s| s.starts += 1);
                republish(&ctx, &name, &gpus).await;
                say!(ctx, node = %name, "the GPU Operator's device plugin started ({LABEL}=true) and enumerated the GPUs");
            }
            (false, true) => {
                ctx.api.delete("v1", "Pod", NAMESPACE, &pod_name);
                enumerated = None;
                count(&ctx, &name, |s| s.stops += 1);
                say!(ctx, node = %name, "the GPU Operator's device plugin stopped ({LABEL}={label})");
            }
            _ => {}
        }
    }
}

/// Notes what the device plugin stand-in saw on `name`.
fn count(ctx: &Ctx, name: &str, change: impl FnOnce(&mut crate::DevicePluginSeen)) {
    let mut r = ctx.record.lock().expect("lock");
    change(r.device_plugin.entry(name.to_owned()).or_default());
}
