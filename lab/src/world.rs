//! The lab's moving parts, each a background task over the shared
//! [`Ctx`]: the machines (BMC power → agent → Kubernetes Node), the
//! stand-in scheduler, the submitter, and the narration of accordd's view.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{json, Value};
use tokio::time::Instant;
use tracing::info;

use accord_api::control::WorkloadState;

use super::{binder, fetch_status, workload_keys, Ctx};

async fn power_state(ctx: &Ctx, node: &str) -> Option<bool> {
    let r = ctx
        .http
        .get(format!("{}/redfish/v1/Systems/{node}", ctx.emulator_url))
        .send()
        .await
        .ok()?;
    let v: Value = r.json().await.ok()?;
    Some(v["PowerState"].as_str()? == "On")
}

/// The machine's agent.toml: accordd, and its recording to replay.
fn agent_config(ctx: &Ctx, node: &str) -> anyhow::Result<accord_agent::config::AgentConfig> {
    let d = &ctx.dir;
    let rec = &ctx
        .recordings
        .get(node)
        .context("a fleet node has a recording")?
        .recording;
    let quoted = |p: &std::path::Path| toml::Value::from(p.display().to_string()).to_string();
    let nvml = rec
        .nvml_snapshot
        .as_deref()
        .map(|p| format!("nvml_snapshot = {}\n", quoted(p)))
        .unwrap_or_default();
    // One accordd: `url`; several replicas: every one (`urls`): the
    // agent reports to each.
    let daemon = match ctx.agent_urls.as_slice() {
        [one] => format!("url = \"{one}\""),
        all => format!("urls = {}", toml::Value::from(all.to_vec())),
    };
    let text = format!(
        "[daemon]\n{daemon}\ntoken_file = {}\n[node]\nname = \"{node}\"\n\
         [discovery]\ninterval_s = 3600\nhwloc_xml = {}\n{nvml}\
         [heartbeat]\ninterval_ms = {}\n[backoff]\ninitial_ms = 200\nmax_ms = 2000\n",
        quoted(&d.join("agent-token")),
        quoted(&rec.hwloc_xml),
        ctx.scenario.lab.heartbeat_ms
    );
    Ok(accord_agent::config::AgentConfig::parse(
        &text,
        &d.join(format!("agent-{node}.toml")),
    )?)
}

/// The lab's machines: follow each BMC's power state; boot the agent and
/// register the Kubernetes Node after the configured delays; take both
/// away (and the node's pods) when the machine goes off.
pub(super) async fn machines(ctx: Ctx) {
    let boot = Duration::from_millis(ctx.scenario.lab.boot_delay_ms);
    let kubelet = Duration::from_millis(ctx.scenario.lab.kubelet_delay_ms);
    let mut came_on: BTreeMap<String, Instant> = BTreeMap::new();
    let mut agent_at: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let reads = ctx.fleet.nodes.iter().map(|n| {
            let ctx = ctx.clone();
            async move { (n.name.clone(), power_state(&ctx, &n.name).await) }
        });
        let readings = futures::future::join_all(reads).await;
        let now = Instant::now();
        for (name, on) in readings {
            let Some(on) = on else { continue };
            let mut start_agent = false;
            let mut register = false;
            let mut went_off = false;
            {
                let mut r = ctx.record.lock().expect("lock");
                let sim = r.nodes.get_mut(&name).expect("fleet node");
                if on && !sim.on {
                    sim.on = true;
                    sim.power_cycles += 1;
                    sim.powered_at = Some(now);
                    came_on.insert(name.clone(), now);
                    say!(ctx, node = %name, "BMC shows On: booting");
                } else if on && sim.powered_at.is_some() && !came_on.contains_key(&name) {
                    // On from the start: booted already.
                    came_on.insert(name.clone(), now - boot - kubelet);
                }
                if on
                    && !sim.hung
                    && !sim.agent_started
                    && came_on
                        .get(&name)
                        .is_some_and(|t| now.duration_since(*t) >= boot)
                {
                    sim.agent_started = true;
                    start_agent = true;
                    agent_at.insert(name.clone(), now);
                }
                if on
                    && sim.agent_started
                    && !sim.registered
                    && agent_at
                        .get(&name)
                        .is_some_and(|t| now.duration_since(*t) >= kubelet)
                {
                    sim.registered = true;
                    sim.registered_at.push(now);
                    register = true;
                }
                if !on && sim.on {
                    sim.on = false;
                    if let Some(t) = sim.powered_at.take() {
                        sim.on_total += now.duration_since(t);
                    }
                    if let Some(stop) = sim.agent.take() {
                        let _ = stop.send(());
                    }
                    if let Some(gpus) = sim.gpus.take() {
                        sim.repartitions += gpus.repartitions();
                    }
                    sim.agent_started = false;
                    sim.registered = false;
                    sim.hung = false;
                    came_on.remove(&name);
                    agent_at.remove(&name);
                    went_off = true;
                }
            }
            if start_agent {
                match agent_config(&ctx, &name) {
                    Ok(cfg) => {
                        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                        let gpus = crate::gpus::at_boot(&ctx, &name);
                        {
                            let mut r = ctx.record.lock().expect("lock");
                            let sim = r.nodes.get_mut(&name).expect("fleet node");
                            sim.agent = Some(tx);
                            sim.gpus = gpus.clone();
                        }
                        if let Some(m) = ctx.recordings.get(&name) {
                            say!(ctx, node = %name, "booted: accord-agent starting (replaying {}: {})", m.recording.name, m.describe);
                        }
                        let (c, n) = (ctx.clone(), name.clone());
                        tokio::spawn(async move {
                            // The agent, and the node's GPU publishers
                            // (`gpus::watch`), until the machine goes off.
                            let agent = accord_agent::run::run_with(cfg, gpus.clone(), async {
                                let _ = rx.await;
                            });
                            let watch = async {
                                match gpus {
                                    Some(g) => crate::gpus::watch(c, n, g).await,
                                    None => std::future::pending().await,
                                }
                            };
                            tokio::select! {
                                r = agent => if let Err(e) = r {
                                    tracing::warn!(target: "lab", error = %e, "agent stopped");
                                },
                                () = watch => {}
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(target: "lab", node = %name, error = %e, "agent config")
                    }
                }
            }
            if register {
                register_node(&ctx, &name).await;
            }
            if went_off {
                node_lost(&ctx.api, &name);
                say!(ctx, node = %name, "BMC shows Off: agent stopped, Node NotReady and tainted unreachable");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The taints Kubernetes' node lifecycle controller puts on a Node whose
/// kubelet stopped posting status, and lifts when it is Ready again.
const READINESS_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

/// A machine that went off: its Node object stays (Kubernetes deletes no
/// Node by itself), its Ready condition turns Unknown and the node
/// lifecycle controller taints it unreachable (here at once, not after
/// the node-monitor grace period). Its ResourceSlice stays too, as it
/// does while the Node exists.
pub(crate) fn node_lost(api: &crate::Cluster, name: &str) {
    // Upstream: its kubelet stops renewing the Node's Lease
    // (`kubelets::leases`), and the real node lifecycle controller does
    // the rest.
    let Some(api) = api.fake() else {
        return;
    };
    api.update("v1", "Node", "", name, |node| {
        node["status"]["conditions"] = json!([{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        }]);
        let mut taints: Vec<Value> = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| !READINESS_TAINTS.contains(&t["key"].as_str().unwrap_or("")))
            .cloned()
            .collect();
        for effect in ["NoSchedule", "NoExecute"] {
            taints.push(json!({"key": READINESS_TAINTS[0], "effect": effect}));
        }
        node["spec"]["taints"] = Value::Array(taints);
    });
}

/// The machine's kubelet registers its Node, and the NVIDIA device
/// plugin, GPU Feature Discovery and (where DRA is served) DRA driver
/// publish what they find: all from the machine's recording, discovered
/// as its agent discovers it ([`crate::kubelet`]), never from the fleet
/// file.
async fn register_node(ctx: &Ctx, name: &str) {
    let Some(rec) = ctx.recordings.get(name).map(|m| m.recording.clone()) else {
        return;
    };
    // The GPUs as they are now (a MIG command may have come before the
    // kubelet registered), else the recording's.
    let twin = super::machine_gpus(ctx, name);
    let seen = twin.as_ref().map(|g| (g.version(), g.snapshot()));
    let version = seen.as_ref().map(|s| s.0);
    let snapshot = seen.map(|s| s.1);
    let machine = match tokio::task::spawn_blocking(move || match snapshot {
        Some(s) => rec.machine_with(Some(&s)),
        None => rec.discover(),
    })
    .await
    {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            tracing::error!(target: "lab", node = %name, error = %format!("{e:#}"), "the kubelet cannot read the machine's recording: no Node");
            return;
        }
        Err(e) => {
            tracing::error!(target: "lab", node = %name, error = %e, "discovery task");
            return;
        }
    };
    let mut node = crate::kubelet::node_object(name, &machine);
    // As the kubelet's Ready setter (`pkg/kubelet/nodestatus/setters.go`,
    // `ReadyCondition`): the heartbeat is now.
    let now = time_now();
    if let Some(c) = node["status"]["conditions"].get_mut(0) {
        c["lastHeartbeatTime"] = json!(now);
        c["lastTransitionTime"] = json!(now);
    }
    let first = ctx.api.get("v1", "Node", "", name).is_none();
    crate::bios::registration_taint(&ctx.fleet, name, first, &mut node);
    if first && ctx.scenario.lab.kubelet_starting_taint {
        let taint = json!({"key": accord::truth::STARTING_TAINT_KEY, "effect": "NoSchedule"});
        match node["spec"]["taints"].as_array_mut() {
            Some(t) => t.push(taint),
            None => node["spec"]["taints"] = json!([taint]),
        }
    }
    // Registering again: the Node object stayed while the machine was off
    // (with others' labels and taints on it, Accord's among them); the
    // kubelet updates it, and the node lifecycle controller lifts its
    // unreachable taint once it is Ready.
    if let Some(old) = ctx.api.get("v1", "Node", "", name) {
        if let (Some(labels), Some(mine)) = (
            old["metadata"]["labels"].as_object(),
            node["metadata"]["labels"].as_object_mut(),
        ) {
            for (k, v) in labels {
                mine.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let kept: Vec<Value> = old["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| !READINESS_TAINTS.contains(&t["key"].as_str().unwrap_or("")))
            .cloned()
            .collect();
        if !kept.is_empty() {
            node["spec"]["taints"] = Value::Array(kept);
        }
    }
    let gpus = node["status"]["allocatable"]["nvidia.com/gpu"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    ctx.api.apply(node);
    // The machine's first registration ever (an admin acts once; a Node
    // Accord deleted registers again as new).
    let first_ever = {
        let r = ctx.record.lock().expect("lock");
        r.nodes
            .get(name)
            .is_some_and(|n| n.registered_at.len() <= 1)
    };
    let admin = ctx.scenario.lab.machines.get(name);
    if first && first_ever {
        if let Some(m) = admin.filter(|m| {
            !m.admin_labels.is_empty()
                || !m.admin_taints.is_empty()
                || !m.admin_annotations.is_empty()
        }) {
            // `kubectl label`, `taint`, `annotate`: once, when the machine
            // first registers (not again when Accord's restore is due).
            ctx.api.update("v1", "Node", "", name, |n| {
                for (k, v) in &m.admin_labels {
                    n["metadata"]["labels"][k] = json!(v);
                }
                for (k, v) in &m.admin_annotations {
                    n["metadata"]["annotations"][k] = json!(v);
                }
                let mut taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
                for t in &m.admin_taints {
                    taints.push(admin_taint(t));
                }
                n["spec"]["taints"] = Value::Array(taints);
            });
            say!(ctx, node = %name, "an admin labels, taints and annotates the Node");
        }
    }
    if first
        && first_ever
        && ctx
            .scenario
            .lab
            .machines
            .get(name)
            .is_some_and(|m| m.cordoned)
    {
        // `kubectl cordon`: the admin takes it out of scheduling for
        // maintenance as soon as it is up.
        ctx.api.update("v1", "Node", "", name, |n| {
            n["spec"]["unschedulable"] = json!(true);
        });
        say!(ctx, node = %name, "an admin cordons the Node (maintenance)");
    }
    let dynamic = crate::gpus::dynamic_mig(ctx, name);
    let slices = ctx
        .kube
        .dra_api_version()
        .map(|api| crate::kubelet::resource_slices(name, &machine, api, dynamic))
        .unwrap_or_default();
    let count: usize = slices
        .iter()
        .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
        .sum();
    let devices = if slices.is_empty() {
        String::new()
    } else {
        format!(", ResourceSlice with {count} devices")
    };
    for s in slices {
        ctx.api.apply(s);
    }
    say!(ctx, node = %name, "Kubernetes Node registered Ready (nvidia.com/gpu {gpus}{devices})");
    // Changed while registering: `gpus::watch` skipped it.
    if let Some(g) = super::machine_gpus(ctx, name).filter(|g| Some(g.version()) != version) {
        crate::gpus::republish(ctx, name, &g).await;
    }
}

/// `key=value:Effect` or `key:Effect` as a Node taint.
fn admin_taint(t: &str) -> Value {
    let (kv, effect) = t.rsplit_once(':').unwrap_or((t, "NoSchedule"));
    match kv.split_once('=') {
        Some((k, v)) => json!({"key": k, "value": v, "effect": effect}),
        None => json!({"key": kv, "effect": effect}),
    }
}

/// A pod of the scenario's bound to `node` now: from now it counts as
/// the node's work (used, GPU-seconds, the busy-node spans).
pub(crate) fn note_bound(r: &mut super::Record, key: (String, String), node: &str, gpus: f64) {
    let now = Instant::now();
    r.bound.insert(key.clone(), (now, gpus, node.to_owned()));
    r.bindings.push(crate::chaos::safety::BindingSpan {
        pod: format!("{}/{}", key.0, key.1),
        node: node.to_owned(),
        from: now,
        until: None,
    });
    if let Some(n) = r.nodes.get_mut(node) {
        n.used = true;
    }
    for s in r.subs.iter_mut() {
        if s.pods.contains(&key) {
            s.nodes.insert(node.to_owned());
        }
    }
}

/// A scenario's pod no longer bound (deleted by someone else, evicted):
/// its GPU-seconds counted, its span ended.
pub(crate) fn note_gone(r: &mut super::Record, key: &(String, String), now: Instant) {
    if let Some((t, g, _)) = r.bound.remove(key) {
        r.used_gpu_s += now.duration_since(t).as_secs_f64() * g;
    }
    unbound(r, key, now);
}

pub(crate) fn key_of(p: &Value) -> (String, String) {
    (
        p["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
    )
}

pub(crate) fn pod_gpus(p: &Value) -> f64 {
    let count = |v: &Value| {
        v.as_str()
            .and_then(|q| accord::quantity::parse(q).ok())
            .map_or(0.0, |m| m as f64 / 1000.0)
    };
    let mut g = 0.0;
    for c in p["spec"]["containers"].as_array().into_iter().flatten() {
        let r = &c["resources"];
        let gpu = &r["requests"]["nvidia.com/gpu"];
        g += count(if gpu.is_null() {
            &r["limits"]["nvidia.com/gpu"]
        } else {
            gpu
        });
        // A MIG `Ng` slice is N sevenths of a GPU.
        for (k, v) in r["limits"].as_object().into_iter().flatten() {
            if let Some(rest) = k.strip_prefix("nvidia.com/mig-") {
                let slices: f64 = rest
                    .split('g')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(1.0);
                g += slices / 7.0 * count(v);
            }
        }
    }
    g
}

/// The stand-in scheduler (on the fake API): on each change, one
/// [`binder::decide`] pass; binds what fits, marks the rest Unschedulable
/// (only when the message changed, so it does not churn the watch).
pub(super) async fn scheduler(ctx: Ctx) {
    let Some(api) = ctx.api.fake().cloned() else {
        return;
    };
    let mut seen_rv = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rv = api.resource_version();
        if rv == seen_rv {
            continue;
        }
        // What is decided below is of the store as of `rv` (or later): a
        // write that lands while it is decided is seen next time. (Taking
        // the version after the binder's own writes lost such a write when
        // nothing came after it: a gang whose last Node label landed then
        // was never bound.)
        seen_rv = rv;
        let nodes = api.list("v1", "Node");
        let pods = api.list("v1", "Pod");
        let groups = api.list("scheduling.k8s.io/v1beta1", "PodGroup");
        let d = binder::decide(&nodes, &pods, &groups);
        for b in &d.bind {
            let Some(mut pod) = api.get("v1", "Pod", &b.namespace, &b.pod) else {
                continue;
            };
            pod["spec"]["nodeName"] = json!(b.node);
            pod["status"] = json!({
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
            });
            let gpus = pod_gpus(&pod);
            // The record learns the node under the same lock as the pod is
            // bound: whoever sees the pod bound (the submitter, then the
            // summary) finds its node recorded.
            let mut r = ctx.record.lock().expect("lock");
            api.apply(pod);
            note_bound(&mut r, (b.namespace.clone(), b.pod.clone()), &b.node, gpus);
        }
        if !d.bind.is_empty() {
            let names: Vec<String> = d
                .bind
                .iter()
                .map(|b| format!("{}/{}→{}", b.namespace, b.pod, b.node))
                .collect();
            say!(ctx, "scheduler bound {}", names.join(", "));
        }
        for u in &d.unschedulable {
            let Some(mut pod) = api.get("v1", "Pod", &u.namespace, &u.pod) else {
                continue;
            };
            let cond = &pod["status"]["conditions"][0];
            if cond["reason"] == "Unschedulable" && cond["message"] == u.message.as_str() {
                continue;
            }
            pod["status"] = json!({
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "message": u.message}],
            });
            api.apply(pod);
        }
    }
}

/// Submits the scenario's workloads on time, notes when all their pods are
/// bound, and finishes them (deletes the pods and groups) after `run_ms`.
pub(super) async fn submitter(ctx: Ctx) {
    loop {
        let now = Instant::now();
        for (i, sub) in ctx.scenario.submit.iter().enumerate() {
            let (submitted, released) = {
                let r = ctx.record.lock().expect("lock");
                (r.subs[i].submitted, r.subs[i].released)
            };
            let (clock, after_bound) = {
                let r = ctx.record.lock().expect("lock");
                let after = sub
                    .after
                    .as_ref()
                    .and_then(|a| ctx.scenario.submit.iter().position(|o| o.name == *a));
                (r.clock, after.map(|j| r.subs[j].bound))
            };
            let at = Duration::from_millis(sub.at_ms.unwrap_or(0));
            let due = match (after_bound, sub.at_ms) {
                (Some(bound), _) => bound.is_some_and(|b| now >= b + at),
                (None, Some(_)) => clock.is_some_and(|c| now >= c + at),
                (None, None) if sub.after.is_some() => clock.is_some(),
                (None, None) => released,
            };
            match submitted {
                None if due => {
                    let objects = match ctx.scenario.objects(sub) {
                        Ok(o) => o,
                        Err(e) => {
                            tracing::error!(target: "lab", submission = %sub.name, error = %format!("{e:#}"), "cannot submit");
                            ctx.record.lock().expect("lock").subs[i].submitted = Some(now);
                            continue;
                        }
                    };
                    let mut pods = Vec::new();
                    let mut jobs = Vec::new();
                    let mut others = Vec::new();
                    for o in objects {
                        if o["kind"] == "Pod" {
                            pods.push(key_of(&o));
                        } else {
                            if o["kind"] == "Job" {
                                let (ns, name) = key_of(&o);
                                let parallelism =
                                    o["spec"]["parallelism"].as_u64().unwrap_or(1) as usize;
                                jobs.push((ns, name, parallelism));
                            }
                            others.push(o.clone());
                        }
                        ctx.api.apply(o);
                    }
                    say!(ctx, submission = %sub.name, pods = pods.len(), jobs = jobs.len(), "submitted");
                    let mut r = ctx.record.lock().expect("lock");
                    let s = &mut r.subs[i];
                    s.submitted = Some(now);
                    s.pods = pods;
                    s.jobs = jobs;
                    s.others = others;
                }
                Some(t0) => {
                    let (bound, finished, jobs) = {
                        let r = ctx.record.lock().expect("lock");
                        let s = &r.subs[i];
                        (s.bound, s.finished, s.jobs.clone())
                    };
                    if finished.is_some() {
                        continue;
                    }
                    if bound.is_none() && !jobs.is_empty() {
                        note_job_pods(&ctx, i, &jobs);
                    }
                    let pods = ctx.record.lock().expect("lock").subs[i].pods.clone();
                    let expected = pods.len().max(jobs.iter().map(|j| j.2).sum());
                    if pods.is_empty() {
                        continue;
                    }
                    match bound {
                        None => {
                            // Each pod's node, while all are bound.
                            let nodes: Option<BTreeSet<String>> = pods
                                .iter()
                                .map(|(ns, n)| {
                                    ctx.api.get("v1", "Pod", ns, n).and_then(|p| {
                                        p["spec"]["nodeName"].as_str().map(str::to_owned)
                                    })
                                })
                                .collect();
                            if let Some(nodes) = nodes.filter(|_| pods.len() >= expected) {
                                let mut r = ctx.record.lock().expect("lock");
                                r.subs[i].bound = Some(now);
                                let nodes: Vec<String> = nodes.into_iter().collect();
                                say!(ctx, submission = %sub.name, seconds = format!("{:.1}", now.duration_since(t0).as_secs_f64()), nodes = %nodes.join(","), "all pods bound: Pending → Running");
                            }
                        }
                        Some(b) if now.duration_since(b) >= Duration::from_millis(sub.run_ms) => {
                            finish(&ctx, i, &sub.name);
                        }
                        Some(_) => {}
                    }
                }
                None => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pods of submission `i`'s Jobs that the job controller has made
/// (its `batch.kubernetes.io/job-name` label) join the submission's pods;
/// one bound already (the kubelet saw it first) counts its node.
fn note_job_pods(ctx: &Ctx, i: usize, jobs: &[(String, String, usize)]) {
    let made: Vec<(String, String)> = ctx
        .api
        .list("v1", "Pod")
        .iter()
        .filter(|p| {
            let (ns, _) = key_of(p);
            let job = p["metadata"]["labels"]["batch.kubernetes.io/job-name"].as_str();
            jobs.iter()
                .any(|(jns, jname, _)| *jns == ns && job == Some(jname))
        })
        .map(key_of)
        .collect();
    // Kueue's ProvisioningRequest for a job is named after its Workload
    // (`job-NAME-HASH-CHECK-ATTEMPT`, pkg/controller/admissionchecks/
    // provisioning: ProvisioningRequestName).
    let provisioned = ctx
        .api
        .list("autoscaling.x-k8s.io/v1", "ProvisioningRequest")
        .into_iter()
        .find(|pr| {
            let (ns, name) = key_of(pr);
            let provisioned = pr["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Provisioned" && c["status"] == "True")
            });
            provisioned
                && jobs
                    .iter()
                    .any(|(jns, jname, _)| *jns == ns && name.starts_with(&format!("job-{jname}-")))
        });
    let mut r = ctx.record.lock().expect("lock");
    if let Some(pr) = provisioned.filter(|_| r.subs[i].provisioned.is_none()) {
        let ready_nodes: Vec<String> = r
            .nodes
            .iter()
            .filter(|(_, n)| n.on && n.registered)
            .map(|(name, _)| name.clone())
            .collect();
        let (_, name) = key_of(&pr);
        say!(ctx, request = %name, ready = %ready_nodes.join(","), "ProvisioningRequest Provisioned=True");
        r.subs[i].provisioned = Some(crate::ProvisionedSeen {
            name,
            class: pr["spec"]["provisioningClassName"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            at: Instant::now(),
            ready_nodes,
        });
    }
    for key in made {
        if r.subs[i].pods.contains(&key) {
            continue;
        }
        let node = r.bound.get(&key).map(|(_, _, n)| n.clone());
        let s = &mut r.subs[i];
        s.pods.push(key);
        s.nodes.extend(node);
    }
}

fn finish(ctx: &Ctx, i: usize, name: &str) {
    let (pods, others) = {
        let r = ctx.record.lock().expect("lock");
        (r.subs[i].pods.clone(), r.subs[i].others.clone())
    };
    // A Job first, so that its controller makes no pod again.
    for o in others.iter().filter(|o| o["kind"] == "Job") {
        let (ns, n) = key_of(o);
        ctx.api.delete("batch/v1", "Job", &ns, &n);
    }
    for (ns, n) in &pods {
        ctx.api.delete("v1", "Pod", ns, n);
    }
    for o in others.iter().filter(|o| o["kind"] != "Job") {
        let (ns, n) = key_of(o);
        let api = o["apiVersion"].as_str().unwrap_or("");
        let kind = o["kind"].as_str().unwrap_or("");
        ctx.api.delete(api, kind, &ns, &n);
    }
    let now = Instant::now();
    let mut r = ctx.record.lock().expect("lock");
    for key in &pods {
        if let Some((t, g, _)) = r.bound.remove(key) {
            r.used_gpu_s += now.duration_since(t).as_secs_f64() * g;
        }
        unbound(&mut r, key, now);
    }
    r.subs[i].finished = Some(now);
    drop(r);
    say!(ctx, submission = %name, "finished: pods done and deleted");
}

/// The pod `key` (namespace, name) is no longer bound from `now` (deleted
/// or evicted): its open binding span ends.
fn unbound(r: &mut super::Record, key: &(String, String), now: Instant) {
    let pod = format!("{}/{}", key.0, key.1);
    for b in r.bindings.iter_mut().filter(|b| b.pod == pod) {
        b.until.get_or_insert(now);
    }
}

/// How long the scenario's clock waits for the machines on at the start
/// to report before it starts anyway.
const CLOCK_WAIT: Duration = Duration::from_secs(30);

/// Starts the scenario's clock once accordd's status shows every machine
/// that was on at the start planned with its agent's report (or after
/// [`CLOCK_WAIT`], said).
fn start_clock(ctx: &Ctx, st: &accord_api::control::ControlStatus, r: &mut super::Record) {
    let on_at_start: Vec<&str> = ctx
        .fleet
        .nodes
        .iter()
        .filter(|n| n.power == accord::fleet::PowerState::On)
        .map(|n| n.name.as_str())
        .collect();
    let waiting: Vec<&str> = on_at_start
        .iter()
        .copied()
        .filter(|name| {
            !st.nodes
                .iter()
                .any(|n| n.name == *name && n.model != accord_api::control::ModelSource::Declared)
        })
        .collect();
    let now = Instant::now();
    if waiting.is_empty() {
        r.clock = Some(now);
        if !on_at_start.is_empty() {
            say!(ctx, machines = %on_at_start.join(","), "the machines on at the start have reported to accordd: the scenario's clock starts");
        }
    } else if now.duration_since(ctx.started) >= CLOCK_WAIT {
        r.clock = Some(now);
        tracing::warn!(target: "lab", waiting = %waiting.join(","), "machines on at the start have not reported to accordd within 30 s; the scenario's clock starts anyway");
    }
}

/// Follows accordd's status: notes what cannot be placed, and explains
/// each workload once when Accord first acts on it (or cannot).
pub(super) async fn watch_status(ctx: Ctx) {
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let Some(st) = fetch_status(&ctx.daemons).await else {
            continue;
        };
        let mut r = ctx.record.lock().expect("lock");
        if r.clock.is_none() {
            start_clock(&ctx, &st, &mut r);
        }
        for n in &st.nodes {
            let Some(sim) = r.nodes.get_mut(&n.name) else {
                continue;
            };
            let drift: Vec<String> = n.drift.iter().map(ToString::to_string).collect();
            let model_changed = sim.model != Some(n.model);
            sim.model = Some(n.model);
            if !drift.is_empty() && drift != sim.drift {
                say!(ctx, node = %n.name, "accordd notices drift: {}; it plans the node as {}", drift.join("; "), match n.model {
                    accord_api::control::ModelSource::Declared => "declared",
                    accord_api::control::ModelSource::Reported => "reported",
                    accord_api::control::ModelSource::Held => "held (left out until an admin acts)",
                });
                sim.drift = drift;
            } else if model_changed && n.model == accord_api::control::ModelSource::Held {
                say!(ctx, node = %n.name, "accordd holds the node (left out of planning: it drifts)");
            }
        }
        for i in 0..r.subs.len() {
            let keys = workload_keys(&r.subs[i]);
            for w in st.workloads.iter().filter(|w| keys.contains(&w.workload)) {
                if w.state == WorkloadState::CannotPlace {
                    r.subs[i].cannot_place = w.reason.clone();
                }
                if w.state != WorkloadState::Placed
                    && r.explained.insert(format!("{}:{}", w.workload, w.state))
                    && ctx.narrate
                {
                    if let Some(text) = accord_api::text::render_explain(&st, &w.workload) {
                        info!(target: "lab", "accordctl explain {}\n{}", w.workload, text.trim_end());
                    }
                }
            }
        }
    }
}

/// Kubernetes' taint-based eviction (`lab.evict_after_ms`): a pod bound to
/// a Node tainted `node.kubernetes.io/unreachable` (NoExecute) for that
/// long is evicted, and its controller makes it again, unbound, with the
/// same name (as a StatefulSet or JobSet would); the scheduler then places
/// it like any pending pod.
pub(super) async fn evictor(ctx: Ctx) {
    let Some(after) = ctx.scenario.lab.evict_after_ms.map(Duration::from_millis) else {
        return;
    };
    let Some(api) = ctx.api.fake().cloned() else {
        return;
    };
    let mut tainted_since: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = Instant::now();
        let unreachable: BTreeSet<String> = api
            .list("v1", "Node")
            .iter()
            .filter(|n| {
                n["spec"]["taints"].as_array().is_some_and(|ts| {
                    ts.iter()
                        .any(|t| t["key"] == READINESS_TAINTS[0] && t["effect"] == "NoExecute")
                })
            })
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        tainted_since.retain(|n, _| unreachable.contains(n));
        for n in &unreachable {
            tainted_since.entry(n.clone()).or_insert(now);
        }
        let due: BTreeSet<&String> = tainted_since
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= after)
            .map(|(n, _)| n)
            .collect();
        if due.is_empty() {
            continue;
        }
        for pod in api.list("v1", "Pod") {
            let Some(node) = pod["spec"]["nodeName"].as_str() else {
                continue;
            };
            if !due.contains(&node.to_owned()) {
                continue;
            }
            let (ns, name) = key_of(&pod);
            let mut fresh = pod.clone();
            if let Some(spec) = fresh["spec"].as_object_mut() {
                spec.remove("nodeName");
            }
            fresh["status"] = json!({"phase": "Pending"});
            if let Some(meta) = fresh["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
                meta.remove("uid");
            }
            let mut r = ctx.record.lock().expect("lock");
            api.delete("v1", "Pod", &ns, &name);
            api.apply(fresh);
            if let Some((t, g, _)) = r.bound.remove(&(ns.clone(), name.clone())) {
                r.used_gpu_s += now.duration_since(t).as_secs_f64() * g;
            }
            unbound(&mut r, &(ns.clone(), name.clone()), now);
            drop(r);
            say!(ctx, node = %node, pod = %format!("{ns}/{name}"), "evicted from an unreachable node; its controller makes it again");
        }
    }
}

/// Kubernetes `Time` (whole seconds), UTC.
pub(crate) fn time_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
