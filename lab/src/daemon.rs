//! accordd, the lab's child process: checked (`accordd check-config`)
//! before the lab starts, then started (`run --config`), stopped as
//! systemd does, killed (`kill -9`, for tests) and reported on in errors
//! (its state and its log's last lines).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;
use tracing::info;

use crate::{Lab, LabOptions};

impl Lab {
    /// Starts `accordd run --config` on the lab's configuration; its
    /// output goes to [`LabOptions::daemon_log`] or this process's stderr.
    pub fn start_daemon(&self) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.options.accordd);
        cmd.args(&self.options.accordd_prefix)
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null());
        if std::env::var_os("ACCORD_LOG").is_none() {
            cmd.env("ACCORD_LOG", "info,accordd::api=warn");
        }
        let (out, err) = daemon_output(self.options.daemon_log.as_deref())?;
        cmd.stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .with_context(|| format!("{}: cannot start", self.options.accordd.display()))?;
        info!(target: "lab", pid = child.id(), "accordd started");
        *self.daemon.lock().expect("lock") = Some(child);
        Ok(())
    }

    /// `kill -9` accordd (no shutdown of any kind), and reaps it.
    pub fn kill_daemon(&self) {
        if let Some(mut c) = self.daemon.lock().expect("lock").take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops accordd as systemd does: SIGTERM, then waits up to `within`
    /// for it to exit, and returns its exit status. If it is still running
    /// then, it is killed (SIGKILL) and this is an error naming what it
    /// waited for, with accordd's log. An error too if accordd was not
    /// started (or was killed or stopped already).
    pub async fn stop_daemon(&self, within: Duration) -> anyhow::Result<std::process::ExitStatus> {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let Some(mut child) = self.daemon.lock().expect("lock").take() else {
            anyhow::bail!(
                "stopping accordd: it is not running (not started, or killed or stopped already)"
            );
        };
        let pid = Pid::from_raw(i32::try_from(child.id()).context("accordd's pid")?);
        // A child that exited and is not reaped yet is still signalled
        // without error: only a failure to signal at all is one here.
        if let Err(e) = kill(pid, Signal::SIGTERM) {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("stopping accordd: SIGTERM to {pid}: {e}");
        }
        let end = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().context("waiting for accordd")? {
                info!(target: "lab", %status, "accordd stopped");
                return Ok(status);
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let status = child.wait().context("waiting for accordd")?;
                anyhow::bail!(
                    "accordd did not exit within {within:?} of SIGTERM; killed it ({status}){}",
                    self.log_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether accordd has exited, with its status.
    pub fn daemon_exited(&self) -> Option<std::process::ExitStatus> {
        self.daemon
            .lock()
            .expect("lock")
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Where accordd's output goes ([`LabOptions::daemon_log`]); `None`:
    /// this process's stderr.
    pub fn daemon_log(&self) -> Option<&Path> {
        self.options.daemon_log.as_deref()
    }

    /// accordd's state for an error message: running, exited (with its
    /// status) or not running, then its log's path and last lines.
    pub fn daemon_report(&self) -> String {
        let state = match self.daemon.lock().expect("lock").as_mut() {
            None => {
                "accordd is not running (not started, or killed or stopped by the lab)".to_owned()
            }
            Some(c) => match c.try_wait() {
                Ok(Some(status)) => format!("accordd exited ({status})"),
                Ok(None) => format!("accordd is running (pid {})", c.id()),
                Err(e) => format!("accordd: cannot tell whether it runs: {e}"),
            },
        };
        format!("{state}{}", self.log_report())
    }

    /// accordd's log: its path and last lines (or that it is on stderr).
    fn log_report(&self) -> String {
        match self.daemon_log() {
            Some(log) => format!("; {}", accord_testkit::process::tail(log)),
            None => "; its output is on this process's stderr".to_owned(),
        }
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
pub(super) fn check_config(options: &LabOptions, config: &Path) -> anyhow::Result<()> {
    let out = Command::new(&options.accordd)
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
