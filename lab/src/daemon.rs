//! accordd, the lab's child process: checked (`accordd check-config`)
//! before the lab starts, then started (`run --config`), stopped as
//! systemd does, killed (`kill -9`, for tests) and reported on in errors
//! (its state and its log's last lines). With several replicas
//! ([`crate::ha`]) the same for each: `start_daemon`, `kill_daemon`,
//! `stop_daemon`, `daemon_exited` and `daemon_report` act on every
//! replica; `Lab::kill_replica` and the like on one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;
use tracing::info;

use crate::ha::Replica;
use crate::{Lab, LabOptions};

impl Lab {
    /// Starts `accordd run --config` on the lab's configuration; its
    /// output goes to [`LabOptions::daemon_log`] or this process's stderr.
    /// With several replicas, starts each that is not running.
    pub fn start_daemon(&self) -> anyhow::Result<()> {
        for r in &self.replicas.list {
            let running = r
                .child
                .lock()
                .expect("lock")
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
            if !running {
                self.start_replica(r)?;
            }
        }
        Ok(())
    }

    /// Starts one accordd (`run --config` on its configuration).
    pub(crate) fn start_replica(&self, r: &Replica) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.options.accordd);
        cmd.args(&self.options.accordd_prefix)
            .arg("run")
            .arg("--config")
            .arg(&r.config)
            .stdin(Stdio::null());
        kube_env(&mut cmd, self.accordd_kubeconfig.as_deref());
        if std::env::var_os("ACCORD_LOG").is_none() {
            cmd.env("ACCORD_LOG", "info,accordd::api=warn");
        }
        let (out, err) = daemon_output(r.log.as_deref())?;
        cmd.stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .with_context(|| format!("{}: cannot start", self.options.accordd.display()))?;
        if self.replicas.ha {
            info!(target: "lab", pid = child.id(), replica = %r.identity, "accordd started");
        } else {
            info!(target: "lab", pid = child.id(), "accordd started");
        }
        r.paused.store(false, Ordering::SeqCst);
        *r.child.lock().expect("lock") = Some(child);
        Ok(())
    }

    /// `kill -9` accordd (no shutdown of any kind), and reaps it; with
    /// several replicas, every one ([`Lab::kill_replica`]: one).
    pub fn kill_daemon(&self) {
        for r in &self.replicas.list {
            r.kill();
        }
    }

    /// Stops accordd as systemd does: SIGTERM, then waits up to `within`
    /// for it to exit, and returns its exit status. If it is still running
    /// then, it is killed (SIGKILL) and this is an error naming what it
    /// waited for, with accordd's log. An error too if accordd was not
    /// started (or was killed or stopped already). With several replicas:
    /// every one running (a paused one resumed to take the SIGTERM); the
    /// first unsuccessful status, else the first's.
    pub async fn stop_daemon(&self, within: Duration) -> anyhow::Result<std::process::ExitStatus> {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let mut children = Vec::new();
        for r in &self.replicas.list {
            if let Some(c) = r.child.lock().expect("lock").take() {
                children.push((r, c));
            }
        }
        if children.is_empty() {
            anyhow::bail!(
                "stopping accordd: it is not running (not started, or killed or stopped already)"
            );
        }
        let name = |r: &Replica| {
            if self.replicas.ha {
                format!("accordd {}", r.identity)
            } else {
                "accordd".to_owned()
            }
        };
        let mut waiting = Vec::new();
        let mut failed = None;
        for (r, mut child) in children {
            let pid = Pid::from_raw(i32::try_from(child.id()).context("accordd's pid")?);
            // A child that exited and is not reaped yet is still signalled
            // without error: only a failure to signal at all is one here.
            if let Err(e) = kill(pid, Signal::SIGTERM) {
                let _ = child.kill();
                let _ = child.wait();
                failed.get_or_insert(format!("stopping {}: SIGTERM to {pid}: {e}", name(r)));
                continue;
            }
            if r.paused.swap(false, Ordering::SeqCst) {
                let _ = kill(pid, Signal::SIGCONT);
            }
            waiting.push((r, child));
        }
        let end = Instant::now() + within;
        let mut statuses = Vec::new();
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for (r, mut child) in waiting {
                match child.try_wait().context("waiting for accordd")? {
                    Some(status) => {
                        if self.replicas.ha {
                            info!(target: "lab", %status, replica = %r.identity, "accordd stopped");
                        } else {
                            info!(target: "lab", %status, "accordd stopped");
                        }
                        statuses.push(status);
                    }
                    None if Instant::now() >= end => {
                        let _ = child.kill();
                        let status = child.wait().context("waiting for accordd")?;
                        failed.get_or_insert(format!(
                            "{} did not exit within {within:?} of SIGTERM; killed it ({status}){}",
                            name(r),
                            self.log_report(r)
                        ));
                    }
                    None => still.push((r, child)),
                }
            }
            waiting = still;
            if !waiting.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if let Some(e) = failed {
            anyhow::bail!("{e}");
        }
        Ok(statuses
            .iter()
            .find(|s| !s.success())
            .copied()
            .unwrap_or(statuses[0]))
    }

    /// Whether accordd has exited, with its status; with several
    /// replicas, whether any has (by itself: one the lab killed is not
    /// running, not exited).
    pub fn daemon_exited(&self) -> Option<std::process::ExitStatus> {
        self.replicas.list.iter().find_map(|r| {
            r.child
                .lock()
                .expect("lock")
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
        })
    }

    /// Where accordd's output goes ([`LabOptions::daemon_log`]); `None`:
    /// this process's stderr. With several replicas, each has its own
    /// file ([`Lab::replica_log`]).
    pub fn daemon_log(&self) -> Option<&Path> {
        self.options.daemon_log.as_deref()
    }

    /// Replica `identity`'s output file (`None`: this process's stderr,
    /// or no such replica).
    pub fn replica_log(&self, identity: &str) -> Option<PathBuf> {
        self.replicas.get(identity).ok().and_then(|r| r.log.clone())
    }

    /// accordd's state for an error message: running, exited (with its
    /// status) or not running, then its log's path and last lines; with
    /// several replicas, each's.
    pub fn daemon_report(&self) -> String {
        if !self.replicas.ha {
            let r = &self.replicas.list[0];
            return format!("{}{}", state(r, "accordd"), self.log_report(r));
        }
        self.replicas
            .list
            .iter()
            .map(|r| {
                format!(
                    "{}{}",
                    state(r, &format!("accordd {}", r.identity)),
                    self.log_report(r)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// One accordd's log: its path and last lines (or that it is on stderr).
    fn log_report(&self, r: &Replica) -> String {
        match &r.log {
            Some(log) => format!("; {}", accord_testkit::process::tail(log)),
            None => "; its output is on this process's stderr".to_owned(),
        }
    }
}

/// One accordd's state, named `name`: running (or paused), exited (with
/// its status) or not running.
fn state(r: &Replica, name: &str) -> String {
    match r.child.lock().expect("lock").as_mut() {
        None => format!("{name} is not running (not started, or killed or stopped by the lab)"),
        Some(c) => match c.try_wait() {
            Ok(Some(status)) => format!("{name} exited ({status})"),
            Ok(None) if r.paused.load(Ordering::SeqCst) => {
                format!("{name} is paused (SIGSTOP; pid {})", c.id())
            }
            Ok(None) => format!("{name} is running (pid {})", c.id()),
            Err(e) => format!("{name}: cannot tell whether it runs: {e}"),
        },
    }
}

/// Where accordd's stdout and stderr go: the log file, else this
/// process's stderr (never its stdout: `--json` prints the summary there).
fn daemon_output(log: Option<&Path>) -> anyhow::Result<(Stdio, Stdio)> {
    use std::os::fd::AsFd;
    Ok(match log {
        Some(log) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .with_context(|| format!("{}: cannot open", log.display()))?;
            (f.try_clone()?.into(), f.into())
        }
        None => {
            let err = std::io::stderr().as_fd().try_clone_to_owned()?;
            (err.try_clone()?.into(), err.into())
        }
    })
}

/// `accordd check-config FILE`: the lab's accordd.toml, checked by the
/// accordd it will run (its own words on a problem).
pub(super) fn check_config(
    options: &LabOptions,
    config: &Path,
    kubeconfig: Option<&Path>,
) -> anyhow::Result<()> {
    let mut cmd = Command::new(&options.accordd);
    kube_env(&mut cmd, kubeconfig);
    let out = cmd
        .args(&options.accordd_prefix)
        .arg("check-config")
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "{}: cannot run (the accordd binary the lab runs; build it with \
                 `cargo build -p accord-daemon`, or name it with --accordd or ACCORDD)",
                options.accordd.display()
            )
        })?;
    if !out.status.success() {
        anyhow::bail!(
            "the lab's accordd.toml ({}): {} check-config: {}{}",
            config.display(),
            options.accordd.display(),
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(())
}

/// On the upstream control plane accordd finds its kubeconfig as kubectl
/// does (`$KUBECONFIG`): its ServiceAccount's token; never this process's
/// in-cluster environment.
fn kube_env(cmd: &mut Command, kubeconfig: Option<&Path>) {
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT");
    }
}
