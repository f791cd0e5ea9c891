//! Kueue on the lab's upstream control plane (`lab.kueue`): its manager,
//! built by `scripts/kueue` from the pinned `sigs.k8s.io/kueue`, run as a
//! cluster's admin installs it, with its CRDs from the same module. The
//! scenario's queues, flavors and admission checks are the admin's
//! (`lab.cluster_manifests`, applied after Kueue is up); its jobs are
//! submissions.
//!
//! What differs from Kueue's release manifests, and why: the lab has no
//! kube-proxy, so the apiserver cannot reach a Service's cluster IP. Its
//! webhook Service is therefore selectorless, with an EndpointSlice naming
//! the manager's address on this machine, and the apiserver runs with
//! `--enable-aggregator-routing` (it then calls a webhook Service at its
//! endpoint, cmd/kube-apiserver/app/server.go `buildServiceResolver`,
//! verifying the certificate for `SERVICE.NAMESPACE.svc` as on any
//! cluster). Kueue's own rotator makes the certificate and injects its CA
//! into the webhook configurations and the CRDs' conversion webhooks, as
//! its release does. Registered: the admission webhooks of Kueue's own
//! kinds and of the integration it runs (batch/job: a job with a queue
//! name is suspended on creation); another integration's webhook is left
//! out (its handler is not served, and `failurePolicy: Fail` would refuse
//! every object of its kind). Where this machine has no address but
//! loopback (an EndpointSlice may not name one), the webhooks are not
//! registered and the lab says so: jobs are then submitted suspended, as
//! Kueue's samples are.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::cluster::Upstream;

/// Kueue's namespace, as its release manifests name it.
pub const NAMESPACE: &str = "kueue-system";

/// The version `lab/controlplane/kueue/go.mod` pins.
pub fn pinned_version() -> &'static str {
    const GO_MOD: &str = include_str!("../controlplane/kueue/go.mod");
    GO_MOD
        .lines()
        .map(|l| l.trim().trim_start_matches("require").trim_start())
        .find_map(|l| l.strip_prefix("sigs.k8s.io/kueue "))
        .map(str::trim)
        .expect("lab/controlplane/kueue/go.mod requires sigs.k8s.io/kueue")
}

/// Where `scripts/kueue` puts the manager and the CRDs.
pub fn cache_dir() -> PathBuf {
    accord_testkit::control_plane::cache_root()
        .join("kueue")
        .join(pinned_version())
}

/// The CRDs whose conversion webhook Kueue's kustomization turns on
/// (config/components/crd/kustomization.yaml, `webhook_in_*` patches),
/// and into which its certificate rotator injects its CA
/// (pkg/util/cert/cert.go).
const CONVERTED: [&str; 5] = [
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
];

/// The webhook Service and its certificate's Secret, as Kueue's
/// release manifests name them.
const WEBHOOK_SERVICE: &str = "kueue-webhook-service";
const WEBHOOK_SECRET: &str = "kueue-webhook-server-cert";

/// The webhooks registered, by their paths in Kueue's
/// config/components/webhook/manifests.yaml: Kueue's own kinds' and the
/// batch/job integration's.
fn registered(path: &str) -> bool {
    ["/mutate-kueue-x-k8s-io-", "/validate-kueue-x-k8s-io-"]
        .iter()
        .any(|p| path.starts_with(p))
        || path == "/mutate-batch-v1-job"
        || path == "/validate-batch-v1-job"
}

/// Kueue's mutating and validating webhook configurations as its release
/// manifests hold them (named `kueue-…` by its kustomization, the names
/// its rotator injects its CA into), with the webhooks the lab registers
/// (`registered`), each calling the webhook Service.
pub fn webhook_configurations(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let file = dir.join("webhook").join("manifests.yaml");
    anyhow::ensure!(
        dir.join("webhook").join(".complete").is_file(),
        "{}: Kueue's webhook manifests are missing: `scripts/kueue` copies them \
         (scripts/bootstrap runs it)",
        file.display()
    );
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{}: cannot read", file.display()))?;
    let mut out = Vec::new();
    for mut config in crate::scenario::parse_manifests(&text, &file.display().to_string())? {
        let name = config["metadata"]["name"].as_str().unwrap_or("").to_owned();
        config["metadata"] = json!({"name": format!("kueue-{name}")});
        let hooks: Vec<Value> = config["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|h| {
                h["clientConfig"]["service"]["path"]
                    .as_str()
                    .is_some_and(registered)
            })
            .map(|mut h| {
                let service = &mut h["clientConfig"]["service"];
                service["namespace"] = Value::from(NAMESPACE);
                service["name"] = Value::from(WEBHOOK_SERVICE);
                h
            })
            .collect();
        anyhow::ensure!(
            !hooks.is_empty(),
            "{}: {name}: none of the webhooks the lab registers",
            file.display()
        );
        config["webhooks"] = Value::from(hooks);
        out.push(config);
    }
    Ok(out)
}

/// This machine's address the apiserver can reach the manager at: the
/// source address of a route out (no packet is sent); none where it is
/// only loopback.
fn machine_address() -> Option<std::net::Ipv4Addr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("198.51.100.1:9").ok()?;
    match socket.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(ip)
            if !ip.is_loopback() && !ip.is_unspecified() && !ip.is_link_local() =>
        {
            Some(ip)
        }
        _ => None,
    }
}

/// The webhook Service without a selector and its EndpointSlice (the
/// kubelet's and the endpoint controller's part for Kueue's Deployment).
fn webhook_service(address: std::net::Ipv4Addr, port: u16) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE},
            "spec": {"ports": [{"port": 443, "targetPort": port, "protocol": "TCP"}]}
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": NAMESPACE, "name": format!("{WEBHOOK_SERVICE}-lab"),
                "labels": {"kubernetes.io/service-name": WEBHOOK_SERVICE,
                           "endpointslice.kubernetes.io/managed-by": "lab.accord.dev"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address.to_string()], "conditions": {"ready": true}}],
            "ports": [{"port": port, "protocol": "TCP"}]
        }),
    ]
}

/// How long the rotator may take to inject its CA into the webhook
/// configurations, and the webhooks to answer.
const WEBHOOKS_WITHIN: Duration = Duration::from_secs(60);

/// How long the manager may take to pass /readyz (certificates made and
/// injected, caches synced).
const READY_WITHIN: Duration = Duration::from_secs(120);

/// The running manager (killed when dropped).
#[derive(Debug)]
pub struct Kueue {
    child: Child,
    pub version: String,
    /// Its log (stderr and stdout).
    pub log: PathBuf,
    /// Whether its admission webhooks are registered.
    pub webhooks: bool,
}

/// Registers Kueue's webhooks (`webhook_configurations`) behind a Service
/// at `address:port`, and returns once its rotator has injected its CA
/// into them and one answers (a server-side dry run of a ResourceFlavor,
/// which its webhooks default and validate).
async fn register_webhooks(
    run: &dyn Fn(&[&str]) -> anyhow::Result<String>,
    cache: &Path,
    dir: &Path,
    address: std::net::Ipv4Addr,
    port: u16,
) -> anyhow::Result<()> {
    let write = |name: &str, docs: &[Value]| -> anyhow::Result<String> {
        let path = dir.join(name);
        let docs: Vec<String> = docs
            .iter()
            .map(|o| serde_json::to_string(o).expect("JSON"))
            .collect();
        std::fs::write(&path, docs.join("\n---\n"))?;
        Ok(path.display().to_string())
    };
    run(&[
        "apply",
        "-f",
        &write("webhook-service.yaml", &webhook_service(address, port))?,
    ])?;
    let configs = webhook_configurations(cache)?;
    run(&["apply", "-f", &write("webhooks.yaml", &configs)?])?;
    let probe = write(
        "webhook-probe.yaml",
        &[
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "lab-webhook-probe"}, "spec": {}}),
        ],
    )?;
    let deadline = tokio::time::Instant::now() + WEBHOOKS_WITHIN;
    loop {
        let injected = configs.iter().all(|c| {
            let kind = c["kind"].as_str().unwrap_or("").to_lowercase();
            let name = c["metadata"]["name"].as_str().unwrap_or("");
            run(&[
                "get",
                &format!("{kind}/{name}"),
                "-o",
                "jsonpath={.webhooks[*].clientConfig.caBundle}",
            ])
            .is_ok_and(|b| {
                b.split_whitespace().count() == c["webhooks"].as_array().map_or(0, Vec::len)
            })
        });
        let last = if injected {
            match run(&["apply", "--dry-run=server", "-f", &probe]) {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            }
        } else {
            "its rotator has not injected its CA into every webhook yet".to_owned()
        };
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "kueue: its webhooks did not answer within {} s: {last}",
            WEBHOOKS_WITHIN.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Drop for Kueue {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CRDs of the pinned Kueue, with the conversion webhooks its
/// kustomization adds, as the documents `kubectl apply` takes.
pub fn crds(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let crd_dir = dir.join("crd");
    anyhow::ensure!(
        crd_dir.join(".complete").is_file(),
        "{}: Kueue's CRDs are missing: `scripts/kueue` builds the manager and copies them \
         (scripts/bootstrap runs it)",
        crd_dir.display()
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&crd_dir)
        .with_context(|| format!("{}: cannot list", crd_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("{}: cannot read", f.display()))?;
        for mut crd in crate::scenario::parse_manifests(&text, &f.display().to_string())? {
            let name = crd["metadata"]["name"].as_str().unwrap_or("").to_owned();
            if CONVERTED.contains(&name.as_str()) {
                crd["spec"]["conversion"] = json!({
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {
                            "service": {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "path": "/convert"}
                        },
                        "conversionReviewVersions": ["v1"]
                    }
                });
            }
            out.push(crd);
        }
    }
    anyhow::ensure!(
        CONVERTED
            .iter()
            .all(|c| out.iter().any(|o| o["metadata"]["name"] == *c)),
        "{}: not every CRD Kueue converts is there ({})",
        crd_dir.display(),
        CONVERTED.join(", ")
    );
    Ok(out)
}

/// The manager's configuration (`config.kueue.x-k8s.io/v1beta2`), as
/// config/components/manager/controller_manager_config.yaml has it but
/// for one replica (no leader election), the job integration alone, no
/// metrics server, and ports of its own.
fn configuration(
    health_port: u16,
    webhook_port: u16,
    webhook_host: &str,
    cert_dir: &Path,
) -> Value {
    json!({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{health_port}")},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": webhook_host, "certDir": cert_dir},
        "leaderElection": {"leaderElect": false},
        "internalCertManagement": {
            "enable": true,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]}
    })
}

/// Installs Kueue's CRDs with `kubectl` (`run` takes its arguments) and
/// starts its manager as the cluster's admin (`admin_kubeconfig`); returns
/// once it is ready. `dir` holds its configuration, certificates and log.
pub async fn start(
    run: &dyn Fn(&[&str]) -> anyhow::Result<String>,
    upstream: &Upstream,
    admin_kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<Kueue> {
    let cache = cache_dir();
    let binary = cache.join("kueue");
    anyhow::ensure!(
        binary.is_file(),
        "{} is missing: `scripts/kueue` builds it (scripts/bootstrap runs it)",
        binary.display()
    );
    let dir = dir.join("kueue");
    std::fs::create_dir_all(&dir)?;

    run(&["create", "namespace", NAMESPACE])?;
    // The empty Secret its release manifests hold
    // (config/components/internalcert/secret.yaml): the rotator fills it.
    run(&[
        "create",
        "secret",
        "generic",
        WEBHOOK_SECRET,
        &format!("--namespace={NAMESPACE}"),
    ])?;
    let crds = crds(&cache)?;
    let path = dir.join("crds.yaml");
    let docs: Vec<String> = crds
        .iter()
        .map(|o| serde_json::to_string(o).expect("JSON"))
        .collect();
    std::fs::write(&path, docs.join("\n---\n"))?;
    // Server-side: the Workload CRD is larger than the annotation a
    // client-side apply keeps.
    run(&["apply", "--server-side", "-f", &path.display().to_string()])?;
    for crd in &crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or("");
        run(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{name}"),
        ])?;
    }

    let health_port = accord_testkit::sushy::free_port();
    let webhook_port = accord_testkit::sushy::free_port();
    let address = machine_address();
    let config = dir.join("config.yaml");
    let cert_dir = dir.join("certs");
    std::fs::create_dir_all(&cert_dir)?;
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&configuration(
            health_port,
            webhook_port,
            &address.map_or("127.0.0.1".to_owned(), |a| a.to_string()),
            &cert_dir,
        ))?,
    )?;
    let log = dir.join("kueue.log");
    let out = std::fs::File::create(&log)?;
    let child = Command::new(&binary)
        .arg(format!("--config={}", config.display()))
        .arg(format!("--kubeconfig={}", admin_kubeconfig.display()))
        // Its visibility server writes certificates to /visibility; the
        // lab does not use it.
        .arg("--feature-gates=VisibilityOnDemand=false")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("{}: cannot start", binary.display()))?;
    let mut kueue = Kueue {
        child,
        version: pinned_version().to_owned(),
        log,
        webhooks: false,
    };
    wait_ready(&mut kueue, upstream, health_port, &cert_dir).await?;
    match address {
        Some(address) => {
            register_webhooks(run, &cache, &dir, address, webhook_port).await?;
            kueue.webhooks = true;
        }
        None => tracing::warn!(
            target: "lab",
            "kueue: this machine has no address but loopback: its webhooks are not registered \
             (jobs are submitted suspended)"
        ),
    }
    Ok(kueue)
}

/// The kubelet's part for Kueue's Deployment, which mounts the webhook
/// certificate's Secret at the cert dir: once the rotator has filled the
/// Secret, its keys become files there (the rotator waits for them).
/// True once they are written.
fn mount_secret(upstream: &Upstream, cert_dir: &Path) -> anyhow::Result<bool> {
    if cert_dir.join("tls.crt").is_file() {
        return Ok(true);
    }
    let path = format!("/api/v1/namespaces/{NAMESPACE}/secrets/{WEBHOOK_SECRET}");
    let (code, v) = upstream
        .call(reqwest::Method::GET, &path, None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(code == 200, "GET {path}: {code}: {v}");
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(v).with_context(|| format!("GET {path}: not a Secret"))?;
    let data = secret.data.unwrap_or_default();
    if !["tls.crt", "tls.key"].iter().all(|k| data.contains_key(*k)) {
        return Ok(false);
    }
    // The certificate last: the rotator looks for it.
    for (key, bytes) in data.iter().filter(|(k, _)| *k != "tls.crt") {
        std::fs::write(cert_dir.join(key), &bytes.0)?;
    }
    std::fs::write(cert_dir.join("tls.crt"), &data["tls.crt"].0)?;
    Ok(true)
}

/// Waits for the manager's /readyz (its webhook server up with the
/// rotator's certificates, which [`mount_secret`] puts in place); fails with its log's tail if it exits or
/// takes longer than [`READY_WITHIN`].
async fn wait_ready(
    kueue: &mut Kueue,
    upstream: &Upstream,
    health_port: u16,
    cert_dir: &Path,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let url = format!("http://127.0.0.1:{health_port}/readyz");
    let deadline = tokio::time::Instant::now() + READY_WITHIN;
    loop {
        if let Some(status) = kueue.child.try_wait()? {
            anyhow::bail!(
                "kueue {} exited ({status}) before it was ready; its log ({}) ends:\n{}",
                kueue.version,
                kueue.log.display(),
                log_tail(&kueue.log)
            );
        }
        if !mount_secret(upstream, cert_dir)? {
            tracing::debug!(target: "lab", "kueue: its webhook certificate's Secret is not filled yet");
        }
        let last = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => r.status().to_string(),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "kueue {} did not pass {url} within {} s (last: {last}); its log ({}) ends:\n{}",
                kueue.version,
                READY_WITHIN.as_secs(),
                kueue.log.display(),
                log_tail(&kueue.log)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_version_is_read_from_go_mod() {
        assert!(pinned_version().starts_with("v0."), "{}", pinned_version());
    }

    #[test]
    fn only_kueues_own_and_the_job_integrations_webhooks_are_registered() {
        assert!(registered("/mutate-kueue-x-k8s-io-v1beta2-workload"));
        assert!(registered("/validate-kueue-x-k8s-io-v1beta2-clusterqueue"));
        assert!(registered("/mutate-batch-v1-job"));
        assert!(!registered("/mutate-kubeflow-org-v1-pytorchjob"));
        assert!(!registered("/mutate--v1-pod"));
    }

    #[test]
    fn configuration_has_one_replica_and_its_own_ports() {
        let c = configuration(1001, 1002, "127.0.0.1", Path::new("/x/certs"));
        assert_eq!(c["leaderElection"]["leaderElect"], false);
        assert_eq!(c["health"]["healthProbeBindAddress"], "127.0.0.1:1001");
        assert_eq!(c["webhook"]["port"], 1002);
        assert_eq!(c["internalCertManagement"]["enable"], true);
        assert_eq!(c["integrations"]["frameworks"], json!(["batch/job"]));
    }
}
