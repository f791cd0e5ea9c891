//! accordd on the upstream control plane (kube-apiserver, the controller
//! manager and the scheduler of v1.37, built by `scripts/controlplane`),
//! not on the in-repo fake: deploy/crd-accordnode.yaml and deploy/rbac.yaml
//! applied with kubectl as an admin would, two accordd replicas running
//! with a ServiceAccount token bound by that RBAC and electing a leader on
//! the real apiserver's Lease, a DaemonSet's pods made by the real
//! controller and bound by the real scheduler, and the leader killed.
//! Every wait has a condition, a deadline and says what it waited for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_testkit::control_plane::{wait_for, ControlPlane, Options, DEFAULT_MINOR};
use accord_testkit::daemon::{secret, wait_serving};
use accord_testkit::process::{output_within, Process};
use serde_json::{json, Value};

const NS: &str = "accord-system";
const SA: &str = "system:serviceaccount:accord-system:accordd";
const ADMIN: &str = "real-cp-admin-token";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `kubectl ARGS` as the admin; its stdout, or a panic with what it said.
#[track_caller]
fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = output_within(cp.kubectl().unwrap().args(args), Duration::from_secs(60));
    assert!(
        out.status.success(),
        "kubectl {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"
power_kw = 10.2

[[racks]]
name = "r1"

[[nodes]]
name = "r1-n1"
rack = "r1"
profile = "h100"
power = "on"

[[nodes]]
name = "r1-n2"
rack = "r1"
profile = "h100"
"#;

/// Replica `identity`'s accordd.toml: observe mode, `[ha]` with a short
/// lease, Kubernetes through `$KUBECONFIG` (no `[kubernetes] url`).
fn replica_config(dir: &Path, identity: &str) -> PathBuf {
    let d = dir.join(identity);
    std::fs::create_dir_all(&d).unwrap();
    let fleet = d.join("fleet.toml");
    std::fs::write(&fleet, FLEET).unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndir = \"{}\"\n\
         [agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n\
         [fleet]\nfile = \"{}\"\n\
         [control]\nmode = \"observe\"\nbatch_idle_ms = 200\nbatch_max_ms = 1000\ntick_ms = 1000\n\
         [ha]\nenabled = true\nidentity = \"{identity}\"\nnamespace = \"{NS}\"\n\
         lease_duration_s = 6\nrenew_deadline_s = 4\nretry_period_s = 1\n",
        d.join("store").display(),
        secret(&d, "agent-token", "real-cp-agent-token").display(),
        secret(&d, "admin-token", ADMIN).display(),
        fleet.display(),
    );
    let file = d.join("accordd.toml");
    std::fs::write(&file, text).unwrap();
    file
}

async fn get_json(url: &str) -> Result<Value, String> {
    let r = reqwest::Client::new()
        .get(url)
        .bearer_auth(ADMIN)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let text = r.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
}

/// The Lease's holder, as the apiserver has it.
async fn lease_holder(cp: &ControlPlane) -> Result<(String, i64), String> {
    let lease = cp
        .get_json(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/accordd"
        ))
        .await?;
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("no holder yet: {lease}"))?;
    Ok((
        holder.to_owned(),
        lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
    ))
}

/// A Node as a kubelet with the NVIDIA device plugin registers it: Ready,
/// with capacity the scheduler reads.
fn node(name: &str) -> Value {
    let now = "2026-01-01T00:00:00Z";
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "nvidia.com/gpu.present": "true"}},
        "status": {
            "capacity": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        },
    })
}

/// A node exporter as every node runs it: a DaemonSet that tolerates
/// everything.
fn daemon_set() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"namespace": "kube-system", "name": "node-exporter"},
        "spec": {
            "selector": {"matchLabels": {"app": "node-exporter"}},
            "template": {
                "metadata": {"labels": {"app": "node-exporter"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "node-exporter", "image": "prom/node-exporter",
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                },
            },
        },
    })
}

/// One control plane at a time, and never beside a lab: each runs etcd,
/// three components and two accordd replicas on CI's two cores.
use crate::support::lab::shared_world;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordd_runs_on_the_upstream_control_plane_with_its_own_rbac() {
    let _slot = shared_world().await;
    accordd_on(DEFAULT_MINOR).await;
}

/// The same on the oldest pinned minor, with its own defaults (DRA at
/// `resource.k8s.io/v1`, no scheduling.k8s.io/v1beta1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordd_runs_on_upstream_1_34_with_its_own_rbac() {
    let _slot = shared_world().await;
    accordd_on(34).await;
}

async fn accordd_on(minor: u32) {
    let mut cp = ControlPlane::start(Options::full(minor))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cp.get_json("/version").await.unwrap()["gitVersion"],
        cp.binaries.version.as_str()
    );

    // As an admin installs Accord: its namespace, CRD and RBAC, and the
    // x-k8s.io CRDs its demand watch reads.
    kubectl(&cp, &["create", "namespace", NS]);
    for f in [
        "deploy/crd-accordnode.yaml",
        "deploy/rbac.yaml",
        "tests/fixtures/kubernetes/provisioningrequest/autoscaling.x-k8s.io_provisioningrequests.yaml",
        "tests/fixtures/kubernetes/coscheduling/crd.yaml",
    ] {
        kubectl(&cp, &["apply", "-f", repo(f).to_str().unwrap()]);
    }
    for crd in [
        "accordnodes.accord.dev",
        "provisioningrequests.autoscaling.x-k8s.io",
        "podgroups.scheduling.x-k8s.io",
    ] {
        kubectl(
            &cp,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{crd}"),
            ],
        );
    }

    // What the RBAC grants, as the apiserver's authorizer says it.
    let granted = kubectl(&cp, &["auth", "can-i", "--list", &format!("--as={SA}")]);
    for (verb, resource, expect) in [
        ("watch", "pods", "yes"),
        ("patch", "nodes", "yes"),
        ("list", "resourceslices.resource.k8s.io", "yes"),
        ("update", "leases.coordination.k8s.io", "yes"),
        ("create", "accordnodes.accord.dev", "yes"),
        (
            "patch",
            "provisioningrequests.autoscaling.x-k8s.io --subresource=status",
            "yes",
        ),
        ("delete", "pods", "no"),
        ("get", "secrets", "no"),
        ("create", "pods", "no"),
    ] {
        let out = output_within(
            cp.kubectl()
                .unwrap()
                .args(["auth", "can-i", verb])
                .args(resource.split(' '))
                .args([&format!("--as={SA}"), "-n", NS]),
            Duration::from_secs(60),
        );
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(said, expect, "can-i {verb} {resource}:\n{granted}");
    }

    // The kubelet of r1-n1 registers its Node; a DaemonSet's pod lands on
    // it: made by the real controller, bound by the real scheduler.
    cp.request_json(reqwest::Method::POST, "/api/v1/nodes", Some(&node("r1-n1")))
        .await
        .unwrap();
    cp.request_json(
        reqwest::Method::POST,
        "/apis/apps/v1/namespaces/kube-system/daemonsets",
        Some(&daemon_set()),
    )
    .await
    .unwrap();
    let ds_pod = wait_for(
        "the DaemonSet's pod bound to r1-n1 by kube-scheduler",
        Duration::from_secs(90),
        || async {
            let pods = cp
                .get_json("/api/v1/namespaces/kube-system/pods?labelSelector=app%3Dnode-exporter")
                .await?;
            pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| {
                    p["spec"]["nodeName"] == "r1-n1"
                        && p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
                })
                .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_owned())
                .ok_or_else(|| format!("pods: {pods}"))
        },
    )
    .await;

    // Two replicas, each with a token for accordd's ServiceAccount.
    let dir = tempfile::tempdir().unwrap();
    let token = cp.service_account_token(NS, "accordd", 3600).await.unwrap();
    let kubeconfig = cp
        .write_kubeconfig_at(&dir.path().join("accordd.kubeconfig"), "accordd", &token)
        .unwrap();
    let mut replicas: Vec<(String, Process, String)> = Vec::new();
    for identity in ["accordd-a", "accordd-b"] {
        let config = replica_config(dir.path(), identity);
        let mut cmd = accord_testkit::daemon::command(env!("CARGO_BIN_EXE_accordd"), &config);
        cmd.env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST");
        let mut p = Process::spawn(
            identity,
            &mut cmd,
            &dir.path().join(format!("{identity}.log")),
        );
        let url = wait_serving(&mut p).await;
        replicas.push((identity.to_owned(), p, url));
    }

    let (leader, transitions) = wait_for(
        "a replica to hold the Lease on the real apiserver",
        Duration::from_secs(60),
        || lease_holder(&cp),
    )
    .await;
    let leader_index = replicas.iter().position(|r| r.0 == leader).unwrap();
    let leader_url = replicas[leader_index].2.clone();

    // The leader sees the cluster as the scheduler left it: every kind it
    // reads watched (or said why not), and the DaemonSet's pod on r1-n1
    // (among its pods; as a node agent it is no work: the lab's default
    // scenario and control_health's twins show that).
    let status = wait_for(
        &format!("the leader's round counting kube-system/{ds_pod} on r1-n1"),
        Duration::from_secs(60),
        || async {
            let s = get_json(&format!("{leader_url}/v1/status")).await?;
            let n1 = s["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|n| n["name"] == "r1-n1")
                .cloned();
            match n1 {
                Some(n) if n["pods"].as_u64() == Some(1) => Ok(s),
                other => Err(format!("r1-n1: {other:?}")),
            }
        },
    )
    .await;
    for w in status["watches"].as_array().unwrap() {
        assert!(
            w["api_version"].is_string() || w["note"].is_string(),
            "a kind neither watched nor explained: {w}"
        );
    }
    let watched: Vec<&str> = status["watches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["api_version"].is_string())
        .filter_map(|w| w["kind"].as_str())
        .collect();
    for kind in [
        "Pod",
        "Node",
        "ResourceSlice",
        "ResourceClaim",
        "ProvisioningRequest",
    ] {
        assert!(
            watched.contains(&kind),
            "{kind} not watched: {}",
            status["watches"]
        );
    }

    // Kill the leader: the other replica takes the Lease.
    replicas[leader_index].1.kill();
    replicas[leader_index].1.wait();
    let other = replicas[1 - leader_index].0.clone();
    let (holder, after) = wait_for(
        "the other replica to take the Lease after the leader's kill -9",
        Duration::from_secs(60),
        || async {
            let (h, t) = lease_holder(&cp).await?;
            if h == other {
                Ok((h, t))
            } else {
                Err(format!("holder still {h}"))
            }
        },
    )
    .await;
    assert_eq!(holder, other);
    assert!(
        after > transitions,
        "leaseTransitions {transitions} → {after}"
    );
    let other_url = replicas[1 - leader_index].2.clone();
    wait_for(
        "the new leader to say it leads",
        Duration::from_secs(30),
        || async {
            let r = get_json(&format!("{other_url}/v1/replica")).await?;
            if r["leading"] == true {
                Ok(())
            } else {
                Err(r.to_string())
            }
        },
    )
    .await;

    // Nothing accordd asked for was refused: its RBAC covers what it does.
    for (identity, p, _) in &replicas {
        let log = std::fs::read_to_string(p.log()).unwrap();
        // kube-rs renders a refusal as `reason: "Forbidden", code: 403`
        // ("... is forbidden: User ..."); a bare "403" could be digits of a
        // timestamp or a port.
        for refused in ["code: 403", "Forbidden", "forbidden"] {
            assert!(
                !log.contains(refused),
                "{identity} was refused ({refused}):\n{}",
                p.tail()
            );
        }
    }
    cp.check_running().unwrap();
    drop(replicas);
}
