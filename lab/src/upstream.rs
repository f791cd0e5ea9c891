//! The lab on the upstream control plane: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler of the chosen minor (built by
//! `scripts/controlplane`), set up as an admin installs Accord on a
//! cluster: its namespace, CRD and RBAC applied with kubectl, the x-k8s.io
//! CRDs its demand watch reads, the scenario's namespaces (and their
//! `default` ServiceAccounts, which the serviceaccount controller makes),
//! what the admin installed before (`lab.cluster_manifests`), and accordd
//! given a token of its own ServiceAccount, so a permission the RBAC lacks
//! is refused as it would be on the admin's cluster. The apiserver's audit
//! log records accordd's requests: a refusal fails the lab ([`refusals`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use accord_testkit::control_plane::{ControlPlane, Options};
use accord_testkit::fake_api::KubeVersion;
use anyhow::Context;
use serde_json::{json, Value};

use crate::cluster::Upstream;
use crate::Scenario;

/// accordd's namespace and ServiceAccount, as `deploy/rbac.yaml` names
/// them.
pub const NAMESPACE: &str = "accord-system";
pub const SERVICE_ACCOUNT: &str = "accordd";

/// What an admin applies to install Accord (`deploy/`), and the x-k8s.io
/// CRDs (from upstream; tests/fixtures/kubernetes/SOURCES.md) that
/// accordd's demand watch reads.
const INSTALL: [(&str, &str); 6] = [
    (
        "crd-accordnode.yaml",
        include_str!("../../deploy/crd-accordnode.yaml"),
    ),
    (
        "crd-capacitybuffer.yaml",
        include_str!("../../deploy/crd-capacitybuffer.yaml"),
    ),
    ("rbac.yaml", include_str!("../../deploy/rbac.yaml")),
    (
        "node-delete-policy.yaml",
        include_str!("../../deploy/node-delete-policy.yaml"),
    ),
    (
        "crd-provisioningrequests.yaml",
        include_str!(
            "../../tests/fixtures/kubernetes/provisioningrequest/autoscaling.x-k8s.io_provisioningrequests.yaml"
        ),
    ),
    (
        "crd-coscheduling-podgroups.yaml",
        include_str!("../../tests/fixtures/kubernetes/coscheduling/crd.yaml"),
    ),
];
const CRDS: [&str; 4] = [
    "accordnodes.accord.dev",
    "capacitybuffers.autoscaling.x-k8s.io",
    "provisioningrequests.autoscaling.x-k8s.io",
    "podgroups.scheduling.x-k8s.io",
];

/// The node lifecycle controller's timings, as an admin of a small
/// cluster may set them: a Node whose kubelet stopped (its machine
/// powered off) turns Unknown and is tainted unreachable 10 s after its
/// Lease's last renewal (upstream's default grace: 50 s).
const CONTROLLER_MANAGER_ARGS: [&str; 2] = [
    "--node-monitor-grace-period=10s",
    "--node-monitor-period=2s",
];

/// Feature gates that need their API group served: on with none of the
/// group's versions turned on, v1.36.3's apiserver never passes /readyz
/// (its informers list v1alpha2 PodGroups and Workloads that are not
/// served: "informer-sync failed"). When the scenario turns on an API of
/// the group that the version cannot serve, its gates are left out with
/// it.
const GATES_OF_AN_API: [(&str, &str); 2] = [
    ("GenericWorkload", "scheduling.k8s.io"),
    ("TopologyAwareWorkloadScheduling", "scheduling.k8s.io"),
];

/// The running control plane and what the lab wrote for it.
#[derive(Debug)]
pub struct Started {
    pub upstream: Upstream,
    /// accordd's kubeconfig (its ServiceAccount's token).
    pub accordd_kubeconfig: PathBuf,
    /// The admin's kubeconfig (for `kubectl --kubeconfig`).
    pub admin_kubeconfig: PathBuf,
    /// `kube-apiserver v1.37.2`, ... (what the summary names).
    pub components: Vec<String>,
    /// Feature gates the version does not know, each with why.
    pub left_out: Vec<String>,
}

/// accordd's identity as the apiserver authenticates it.
pub fn accordd_user() -> String {
    format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}")
}

/// Starts the control plane of `version` and installs Accord on it.
pub async fn start(
    scenario: &Scenario,
    version: KubeVersion,
    runtime_config: &[String],
    dir: &Path,
) -> anyhow::Result<Started> {
    let mut options = Options::full(version.minor());
    let (gates, left_out) = feature_gates_for(scenario, version, runtime_config)?;
    options.feature_gates = gates;
    options.runtime_config = runtime_config.to_vec();
    options.controller_manager_args = CONTROLLER_MANAGER_ARGS.map(String::from).to_vec();
    options.audited_users = vec![accordd_user()];
    let plane = ControlPlane::start(options)
        .await
        .map_err(|e| anyhow::anyhow!("the upstream control plane: {e}"))?;
    let version_text = plane.binaries.version.clone();
    let mut components = vec![format!(
        "etcd {}",
        accord_testkit::control_plane::etcd_version().unwrap_or("(unknown)")
    )];
    for c in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        components.push(format!("{c} {version_text}"));
    }
    let admin_kubeconfig = plane
        .write_kubeconfig_at(
            &dir.join("kubeconfig"),
            "admin",
            accord_testkit::control_plane::ADMIN_TOKEN,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let kubectl = plane
        .binaries
        .path("kubectl")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let run = |args: &[&str]| -> anyhow::Result<String> {
        let out = Command::new(&kubectl)
            .env("KUBECONFIG", &admin_kubeconfig)
            .arg("--request-timeout=60s")
            .args(args)
            .output()
            .with_context(|| format!("{}: cannot run", kubectl.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };

    // As an admin installs Accord.
    run(&["create", "namespace", NAMESPACE])?;
    let install = dir.join("install");
    std::fs::create_dir_all(&install)?;
    for (file, text) in INSTALL {
        let path = install.join(file);
        std::fs::write(&path, text)?;
        run(&["apply", "-f", &path.display().to_string()])?;
    }
    for crd in CRDS {
        run(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}"),
        ])?;
    }
    // accordd's own identity: a token for its ServiceAccount.
    let token = plane
        .service_account_token(NAMESPACE, SERVICE_ACCOUNT, 86400)
        .await
        .map_err(|e| anyhow::anyhow!("accordd's token: {e}"))?;
    let accordd_kubeconfig = plane
        .write_kubeconfig_at(&dir.join("accordd.kubeconfig"), SERVICE_ACCOUNT, &token)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let upstream = Upstream::new(plane).map_err(|e| anyhow::anyhow!("{e}"))?;
    if scenario.lab.kueue {
        let kueue = crate::kueue::start(&run, &upstream, &admin_kubeconfig, dir).await?;
        components.push(format!("kueue {}", kueue.version));
        upstream
            .companions
            .lock()
            .expect("lock")
            .push(Box::new(kueue));
    }

    // The namespaces the admin's and the scenario's objects go in, each
    // with the `default` ServiceAccount a pod needs to be admitted.
    let mut admin_objects = Vec::new();
    if let Some(text) = &scenario.lab.cluster_manifests {
        admin_objects = crate::scenario::parse_manifests(text, "lab.cluster_manifests")?;
    }
    let mut namespaces: BTreeSet<String> = BTreeSet::new();
    for o in &admin_objects {
        namespaces.extend(o["metadata"]["namespace"].as_str().map(str::to_owned));
    }
    for s in &scenario.submit {
        for o in scenario.objects(s)? {
            namespaces.insert(
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned(),
            );
        }
    }
    make_namespaces(&upstream, &namespaces).await?;
    if scenario.lab.cluster_manifests.is_some() {
        let path = install.join("cluster-manifests.yaml");
        let docs: Vec<String> = admin_objects
            .iter()
            .map(|o| serde_json::to_string(o).expect("JSON"))
            .collect();
        std::fs::write(&path, docs.join("\n---\n"))?;
        run(&["apply", "-f", &path.display().to_string()])?;
    }

    Ok(Started {
        upstream,
        accordd_kubeconfig,
        admin_kubeconfig,
        components,
        left_out,
    })
}

/// The scenario's feature gates this version takes, and a line for each
/// left out: a gate it does not know (its apiserver's `--help` says) stops
/// it at start; a gate whose API it cannot serve ([`GATES_OF_AN_API`])
/// keeps it from ever being ready.
fn feature_gates_for(
    scenario: &Scenario,
    version: KubeVersion,
    runtime_config: &[String],
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let known = accord_testkit::control_plane::Binaries::for_minor(version.minor())
        .and_then(|b| b.feature_gates())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut kept = Vec::new();
    let mut left_out = Vec::new();
    for entry in &scenario.lab.feature_gates {
        let name = entry.split('=').next().unwrap_or("");
        let group = GATES_OF_AN_API
            .iter()
            .find(|(gate, _)| *gate == name)
            .map(|(_, group)| *group);
        let api_left_out = group.is_some_and(|g| {
            let in_group = |e: &&String| e.starts_with(&format!("{g}/"));
            scenario.lab.runtime_config.iter().any(|e| in_group(&e))
                && !runtime_config.iter().any(|e| in_group(&e))
        });
        if !known.contains(name) {
            left_out.push(format!(
                "lab.feature_gates: Kubernetes {version} has no feature gate {name}; left out"
            ));
        } else if api_left_out {
            left_out.push(format!(
                "lab.feature_gates: {name} left out with the {} API it is for, which \
                 Kubernetes {version} cannot serve as lab.runtime_config asks (the gate \
                 alone keeps its apiserver from ever being ready)",
                group.unwrap_or("")
            ));
        } else {
            kept.push(entry.clone());
        }
    }
    Ok((kept, left_out))
}

/// Makes each namespace (one there already is fine) and waits for the
/// serviceaccount controller's `default` ServiceAccount in it, which a pod
/// needs to be admitted.
async fn make_namespaces(upstream: &Upstream, namespaces: &BTreeSet<String>) -> anyhow::Result<()> {
    for ns in namespaces {
        let (code, v) = upstream
            .call(
                reqwest::Method::POST,
                "/api/v1/namespaces",
                Some((
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                    "application/json",
                )),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::ensure!(matches!(code, 201 | 409), "namespace {ns}: {code}: {v}");
    }
    for ns in namespaces {
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/default");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let last = match upstream.call(reqwest::Method::GET, &path, None) {
                Ok((200, _)) => break,
                Ok((code, v)) => format!("{code}: {v}"),
                Err(e) => e,
            };
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "waited 60 s for the serviceaccount controller to make {ns}/default (last: {last})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// accordd's requests the apiserver refused as forbidden (403), from its
/// audit log: `verb resource` with the answer, one line each.
pub fn refusals(upstream: &Upstream) -> Vec<String> {
    let log = upstream.plane.lock().expect("lock").audit_log();
    let Ok(text) = std::fs::read_to_string(&log) else {
        return Vec::new();
    };
    let user = accordd_user();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user.as_str() && e["responseStatus"]["code"] == 403)
        .map(|e| {
            format!(
                "{} {} ({})",
                e["verb"].as_str().unwrap_or("?"),
                e["requestURI"].as_str().unwrap_or("?"),
                e["responseStatus"]["reason"]
                    .as_str()
                    .unwrap_or("Forbidden")
            )
        })
        .collect()
}
