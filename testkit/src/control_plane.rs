//! The upstream Kubernetes control plane as the lab and the end-to-end tests
//! run it: etcd, kube-apiserver, and (when asked) kube-controller-manager
//! and kube-scheduler, built from `k8s.io/kubernetes` at the version pinned
//! in `lab/controlplane/kubernetes-1.NN/go.mod` by `scripts/controlplane`
//! into a cache outside the clone ([`Binaries`]).
//!
//! The apiserver runs as a cluster's does: TLS with its own CA, a token per
//! component (`--token-auth-file`), `--authorization-mode=Node,RBAC`,
//! ServiceAccount tokens signed by its own key, and that minor's default
//! feature gates and served APIs unless [`Options`] passes
//! `--feature-gates` / `--runtime-config` through. Everything lives in a
//! temporary directory, every process is killed when the [`ControlPlane`]
//! is dropped, and every wait has a deadline and says what it waited for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::process::Process;

/// The minors whose modules are pinned, oldest first.
pub const MINORS: [u32; 4] = [34, 35, 36, 37];
/// The default minor (the newest pinned).
pub const DEFAULT_MINOR: u32 = 37;

/// How long the apiserver has to answer `/readyz` with 200.
pub const READY_WITHIN: Duration = Duration::from_secs(90);

/// The admin identity's token (group `system:masters`): the lab's own
/// stand-ins (the kubelets, the DRA driver, the workloads) and the tests.
pub const ADMIN_TOKEN: &str = "accord-lab-admin";
const CONTROLLER_MANAGER_TOKEN: &str = "accord-lab-kube-controller-manager";
const SCHEDULER_TOKEN: &str = "accord-lab-kube-scheduler";

/// The controllers the lab's kube-controller-manager runs: those a GPU
/// cluster's nodes and workloads meet (`--controllers`).
pub const CONTROLLERS: &[&str] = &[
    "daemonset-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "pod-garbage-collector-controller",
    "namespace-controller",
    "resourceclaim-controller",
    // Completes the binding of a claim and its PV (the bind-completed mark
    // kube-scheduler's VolumeBinding waits for).
    "persistentvolume-binder-controller",
];

/// `go.mod` of each pinned minor, for the exact version it pins.
fn pinned_go_mod(minor: u32) -> Option<&'static str> {
    Some(match minor {
        34 => include_str!("../../lab/controlplane/kubernetes-1.34/go.mod"),
        35 => include_str!("../../lab/controlplane/kubernetes-1.35/go.mod"),
        36 => include_str!("../../lab/controlplane/kubernetes-1.36/go.mod"),
        37 => include_str!("../../lab/controlplane/kubernetes-1.37/go.mod"),
        _ => return None,
    })
}

/// The etcd server version every minor runs (`v3.7.0`): the one the
/// newest pinned module requires (`scripts/controlplane` builds it there).
pub fn etcd_version() -> Option<&'static str> {
    pinned_go_mod(DEFAULT_MINOR)?
        .lines()
        .find_map(|l| l.trim().strip_prefix("go.etcd.io/etcd/server/v3 "))
        .map(str::trim)
}

/// The exact `k8s.io/kubernetes` version pinned for `minor` (`v1.37.2`).
pub fn pinned_version(minor: u32) -> Option<&'static str> {
    pinned_go_mod(minor)?
        .lines()
        .map(|l| l.trim().trim_start_matches("require").trim_start())
        .find_map(|l| l.strip_prefix("k8s.io/kubernetes "))
        .map(str::trim)
}

/// Where `scripts/controlplane` puts the binaries: `$ACCORD_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/accord`, else `~/.cache/accord`.
pub fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("ACCORD_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("accord");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/accord")
}

/// The built binaries of one pinned version.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `v1.37.2`.
    pub version: String,
    pub minor: u32,
    pub dir: PathBuf,
}

impl Binaries {
    /// The binaries of `minor` (37 for 1.37); an error naming what is
    /// missing and the command that builds it.
    pub fn for_minor(minor: u32) -> Result<Binaries, String> {
        let version = pinned_version(minor).ok_or_else(|| {
            format!(
                "Kubernetes 1.{minor} is not pinned (lab/controlplane/kubernetes-1.{minor}); pinned: {}",
                MINORS.map(|m| format!("1.{m}")).join(", ")
            )
        })?;
        Ok(Binaries {
            version: version.to_owned(),
            minor,
            dir: cache_root().join("kubernetes").join(version),
        })
    }

    /// The feature gates this version's kube-apiserver knows, as its
    /// `--help` lists them (`kube:Name=true|false (BETA - default=...)`): a
    /// gate it does not know stops it at start.
    pub fn feature_gates(&self) -> Result<std::collections::BTreeSet<String>, String> {
        let apiserver = self.path("kube-apiserver")?;
        let out = Command::new(&apiserver)
            .arg("--help")
            .output()
            .map_err(|e| format!("{}: {e}", apiserver.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let gates: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("kube:").unwrap_or(l);
                let (name, rest) = l.split_once("=true|false")?;
                (rest.trim_start().starts_with('(')
                    && !name.is_empty()
                    && name.bytes().all(|c| c.is_ascii_alphanumeric()))
                .then(|| name.to_owned())
            })
            .collect();
        if gates.is_empty() {
            return Err(format!(
                "{} --help lists no feature gates",
                apiserver.display()
            ));
        }
        Ok(gates)
    }

    /// The path of `component`, or an error naming the command that builds
    /// it.
    pub fn path(&self, component: &str) -> Result<PathBuf, String> {
        let p = self.dir.join(component);
        if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "{} is missing: `scripts/controlplane 1.{} {component}` builds it \
                 (scripts/bootstrap builds what the tests use)",
                p.display(),
                self.minor
            ))
        }
    }
}

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub minor: u32,
    /// `--feature-gates` entries (`GenericWorkload=true`), as an admin
    /// would pass them: the apiserver, the controller manager and the
    /// scheduler all get them.
    pub feature_gates: Vec<String>,
    /// `--runtime-config` entries (`scheduling.k8s.io/v1beta1=true`).
    pub runtime_config: Vec<String>,
    /// Run kube-controller-manager with [`CONTROLLERS`].
    pub controller_manager: bool,
    /// Run kube-scheduler.
    pub scheduler: bool,
    /// More kube-controller-manager flags, as an admin sets them
    /// (`--node-monitor-grace-period=10s`).
    pub controller_manager_args: Vec<String>,
    /// Users whose requests the apiserver's audit log records (at the
    /// Metadata level: who, what, the answer's code), in
    /// [`ControlPlane::audit_log`]; none: no audit log.
    pub audited_users: Vec<String>,
}

impl Options {
    /// etcd and the apiserver of `minor`, with its defaults.
    pub fn apiserver(minor: u32) -> Options {
        Options {
            minor,
            feature_gates: Vec::new(),
            runtime_config: Vec::new(),
            controller_manager: false,
            scheduler: false,
            controller_manager_args: Vec::new(),
            audited_users: Vec::new(),
        }
    }

    /// The whole control plane of `minor`, with its defaults.
    pub fn full(minor: u32) -> Options {
        Options {
            controller_manager: true,
            scheduler: true,
            ..Options::apiserver(minor)
        }
    }
}

/// A running control plane; every process is killed on drop.
#[derive(Debug)]
pub struct ControlPlane {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub binaries: Binaries,
    pub options: Options,
    /// The CA that signed the apiserver's serving certificate (PEM).
    pub ca_pem: String,
    /// Every process, in the order started; dropped (killed) in reverse.
    processes: Vec<Process>,
    dir: tempfile::TempDir,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(p) = self.processes.pop() {
            drop(p);
        }
    }
}

/// Polls `check` every 100 ms until it gives a value; panics after
/// `within`, naming `what`, with the last thing it said.
pub async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what} (last: {last})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free loopback port for a child to bind ([`crate::ports`]).
fn free_port() -> Result<u16, String> {
    crate::ports::free_port()
}

/// Waits (up to [`READY_WITHIN`]) until `process`, serving on
/// `port` (its own self-signed certificate) answers `/healthz` with 200;
/// an error, with its log, if it exits or the deadline passes.
async fn wait_healthy(process: &mut Process, port: u16) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("https://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Some(status) = process.exited() {
            return Err(format!(
                "{} exited ({status}) before {url} answered:\n{}",
                process.name(),
                process.tail()
            ));
        }
        let last = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => r.status().to_string(),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{} not healthy at {url} within {READY_WITHIN:?} (last: {last}):\n{}",
                process.name(),
                process.tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn run_openssl(args: &[&str], dir: &Path) -> Result<(), String> {
    let out = crate::process::output_within(
        Command::new("openssl").args(args).current_dir(dir),
        Duration::from_secs(60),
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The PKI of one control plane, in `dir`: a CA, the apiserver's serving
/// certificate (127.0.0.1 and localhost) signed by it, and the key pair
/// ServiceAccount tokens are signed with.
fn make_pki(dir: &Path) -> Result<(), String> {
    let o = |args: &[&str]| run_openssl(args, dir);
    o(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "7",
        "-subj",
        "/CN=accord-lab-ca",
    ])?;
    std::fs::write(
        dir.join("serving.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n\
         basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
    )
    .map_err(|e| e.to_string())?;
    o(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "apiserver.key",
        "-out",
        "apiserver.csr",
        "-subj",
        "/CN=kube-apiserver",
    ])?;
    o(&[
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "apiserver.crt",
        "-days",
        "7",
        "-extfile",
        "serving.ext",
    ])?;
    o(&["genrsa", "-out", "sa.key", "2048"])?;
    o(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
    Ok(())
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver (and the controller manager and the
    /// scheduler where `options` says) and waits until the apiserver is
    /// ready; an error names what failed, with the tail of its log.
    pub async fn start(options: Options) -> Result<ControlPlane, String> {
        let binaries = Binaries::for_minor(options.minor)?;
        let dir = tempfile::Builder::new()
            .prefix("accord-controlplane-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let d = dir.path().to_owned();
        make_pki(&d)?;
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},accord-lab-admin,uid-admin,\"system:masters\"\n\
                 {CONTROLLER_MANAGER_TOKEN},system:kube-controller-manager,uid-kcm\n\
                 {SCHEDULER_TOKEN},system:kube-scheduler,uid-scheduler\n"
            ),
        )
        .map_err(|e| e.to_string())?;

        let mut processes = Vec::new();
        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let mut etcd = Command::new(binaries.path("etcd")?);
        etcd.arg(format!("--data-dir={}", d.join("etcd").display()))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!(
                "--initial-cluster=default=http://127.0.0.1:{etcd_peer}"
            ))
            // A test cluster: losing it on a crash is fine, fsync is slow.
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        processes.push(Process::spawn("etcd", &mut etcd, &d.join("etcd.log")));

        let port = free_port()?;
        let mut apiserver = Command::new(binaries.path("kube-apiserver")?);
        apiserver
            .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_client}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            // No `kubernetes` Service endpoints: a loopback address may not
            // be one, and nothing in the lab reaches the apiserver through
            // the Service.
            .arg("--endpoint-reconciler-type=none")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", d.join("certs").display()))
            .arg(format!(
                "--tls-cert-file={}",
                d.join("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                d.join("apiserver.key").display()
            ))
            .arg(format!("--client-ca-file={}", d.join("ca.crt").display()))
            .arg(format!(
                "--token-auth-file={}",
                d.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!(
                "--service-account-key-file={}",
                d.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ))
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            // No kube-proxy here: a webhook Service is called at its
            // endpoint, not its cluster IP (the lab's Kueue).
            .arg("--enable-aggregator-routing=true")
            .arg("--allow-privileged=true")
            .arg("--v=1");
        if !options.feature_gates.is_empty() {
            apiserver.arg(format!(
                "--feature-gates={}",
                options.feature_gates.join(",")
            ));
        }
        if !options.audited_users.is_empty() {
            let policy = json!({
                "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "users": options.audited_users},
                          {"level": "None"}],
            });
            std::fs::write(d.join("audit-policy.yaml"), policy.to_string())
                .map_err(|e| e.to_string())?;
            apiserver
                .arg(format!(
                    "--audit-policy-file={}",
                    d.join("audit-policy.yaml").display()
                ))
                .arg(format!(
                    "--audit-log-path={}",
                    d.join("audit.log").display()
                ));
        }
        if !options.runtime_config.is_empty() {
            apiserver.arg(format!(
                "--runtime-config={}",
                options.runtime_config.join(",")
            ));
        }
        processes.push(Process::spawn(
            "kube-apiserver",
            &mut apiserver,
            &d.join("kube-apiserver.log"),
        ));

        let ca_pem = std::fs::read_to_string(d.join("ca.crt")).map_err(|e| e.to_string())?;
        let mut plane = ControlPlane {
            url: format!("https://127.0.0.1:{port}"),
            binaries,
            options,
            ca_pem,
            processes,
            dir,
        };
        plane.wait_ready().await?;

        if plane.options.controller_manager {
            plane.start_controller_manager().await?;
        }
        if plane.options.scheduler {
            plane.start_scheduler().await?;
        }
        Ok(plane)
    }

    async fn start_controller_manager(&mut self) -> Result<(), String> {
        let d = self.dir.path().to_owned();
        let kubeconfig =
            self.write_kubeconfig("kube-controller-manager", CONTROLLER_MANAGER_TOKEN)?;
        let port = free_port()?;
        let mut kcm = Command::new(self.binaries.path("kube-controller-manager")?);
        kcm.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--controllers={}", CONTROLLERS.join(",")))
            .arg(format!(
                "--service-account-private-key-file={}",
                d.join("sa.key").display()
            ))
            .arg(format!("--root-ca-file={}", d.join("ca.crt").display()))
            .arg("--use-service-account-credentials=true")
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", d.join("kcm-certs").display()))
            .arg("--v=1")
            .args(&self.options.controller_manager_args);
        if !self.options.feature_gates.is_empty() {
            kcm.arg(format!(
                "--feature-gates={}",
                self.options.feature_gates.join(",")
            ));
        }
        let mut process = Process::spawn(
            "kube-controller-manager",
            &mut kcm,
            &d.join("kube-controller-manager.log"),
        );
        let healthy = wait_healthy(&mut process, port).await;
        self.processes.push(process);
        healthy
    }

    async fn start_scheduler(&mut self) -> Result<(), String> {
        let d = self.dir.path().to_owned();
        let kubeconfig = self.write_kubeconfig("kube-scheduler", SCHEDULER_TOKEN)?;
        let port = free_port()?;
        let mut scheduler = Command::new(self.binaries.path("kube-scheduler")?);
        scheduler
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!(
                "--cert-dir={}",
                d.join("scheduler-certs").display()
            ))
            .arg("--v=1");
        if !self.options.feature_gates.is_empty() {
            scheduler.arg(format!(
                "--feature-gates={}",
                self.options.feature_gates.join(",")
            ));
        }
        let mut process = Process::spawn(
            "kube-scheduler",
            &mut scheduler,
            &d.join("kube-scheduler.log"),
        );
        let healthy = wait_healthy(&mut process, port).await;
        self.processes.push(process);
        healthy
    }

    /// The directory everything lives in (logs: `NAME.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The tail of every component's log, for failure messages.
    pub fn logs(&self) -> String {
        self.processes
            .iter()
            .map(Process::tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// An error if a component has exited, naming it, with its log.
    pub fn check_running(&mut self) -> Result<(), String> {
        for p in &mut self.processes {
            if let Some(status) = p.exited() {
                return Err(format!(
                    "{} pid {} exited ({status}):\n{}",
                    p.name(),
                    p.id(),
                    p.tail()
                ));
            }
        }
        Ok(())
    }

    /// An HTTP client that trusts this control plane's CA.
    pub fn http(&self) -> Result<reqwest::Client, String> {
        let ca = reqwest::Certificate::from_pem(self.ca_pem.as_bytes())
            .map_err(|e| format!("the CA certificate: {e}"))?;
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())
    }

    /// Waits until `/readyz` answers 200 (within [`READY_WITHIN`]).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let http = self.http()?;
        let deadline = Instant::now() + READY_WITHIN;
        let mut last: String;
        loop {
            self.check_running()
                .map_err(|e| format!("waiting for kube-apiserver /readyz: {e}"))?;
            match http
                .get(format!("{}/readyz", self.url))
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "kube-apiserver {} not ready within {READY_WITHIN:?} (last: {last}):\n{}",
                    self.binaries.version,
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// GET `path` as the admin: the JSON answer, or an error naming the
    /// path and status.
    pub async fn get_json(&self, path: &str) -> Result<Value, String> {
        self.request_json(reqwest::Method::GET, path, None).await
    }

    /// `method` `path` as the admin, with `body` as JSON (a merge patch for
    /// PATCH): the JSON answer, or an error naming the request and status.
    pub async fn request_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let what = format!("{method} {path}");
        let mut request = self
            .http()?
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(ADMIN_TOKEN)
            .header("accept", "application/json");
        if let Some(b) = body {
            let content_type = if method == reqwest::Method::PATCH {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            request = request
                .header("content-type", content_type)
                .body(b.to_string());
        }
        let r = request.send().await.map_err(|e| format!("{what}: {e}"))?;
        let status = r.status();
        let text = r.text().await.map_err(|e| format!("{what}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{what}: {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| format!("{what}: not JSON: {e}"))
    }

    /// A kubeconfig for `user` with `token`, in this control plane's
    /// directory (mode 600): the apiserver's URL, its CA, the token.
    pub fn write_kubeconfig(&self, user: &str, token: &str) -> Result<PathBuf, String> {
        self.write_kubeconfig_at(
            &self.dir.path().join(format!("{user}.kubeconfig")),
            user,
            token,
        )
    }

    /// [`Self::write_kubeconfig`] at `path`.
    pub fn write_kubeconfig_at(
        &self,
        path: &Path,
        user: &str,
        token: &str,
    ) -> Result<PathBuf, String> {
        use std::os::unix::fs::PermissionsExt;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "accord-lab", "cluster": {
                "server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "accord-lab", "user": user}}],
            "current-context": user,
        });
        let text = serde_yaml_ng::to_string(&config).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path.to_owned())
    }

    /// The apiserver's audit log (JSON lines, one event per request of
    /// [`Options::audited_users`]); it exists once one was recorded.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.path().join("audit.log")
    }

    /// The admin's kubeconfig (what `kubectl` gets).
    pub fn admin_kubeconfig(&self) -> Result<PathBuf, String> {
        self.write_kubeconfig("admin", ADMIN_TOKEN)
    }

    /// A kube client for the kubeconfig at `path`.
    pub async fn client_for(path: &Path) -> Result<kube::Client, String> {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
        kube::Client::try_from(config).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A kube client as the admin.
    pub async fn client(&self) -> Result<kube::Client, String> {
        ControlPlane::client_for(&self.admin_kubeconfig()?).await
    }

    /// `kubectl` of this version with the admin's kubeconfig.
    pub fn kubectl(&self) -> Result<Command, String> {
        let mut cmd = Command::new(self.binaries.path("kubectl")?);
        cmd.env("KUBECONFIG", self.admin_kubeconfig()?);
        Ok(cmd)
    }

    /// A token for ServiceAccount `namespace/name` (the TokenRequest API,
    /// as a pod's projected token is made), valid for `seconds`.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        seconds: u64,
    ) -> Result<String, String> {
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
        let r = self
            .http()?
            .post(format!("{}{path}", self.url))
            .bearer_auth(ADMIN_TOKEN)
            .json(
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": seconds}}),
            )
            .send()
            .await
            .map_err(|e| format!("POST {path}: {e}"))?;
        let status = r.status();
        let body: Value = r.json().await.map_err(|e| format!("POST {path}: {e}"))?;
        if !status.is_success() {
            return Err(format!("POST {path}: {status}: {body}"));
        }
        body["status"]["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("POST {path}: no status.token in {body}"))
    }
}
