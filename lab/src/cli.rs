//! The `accord-lab` command, which `accordd lab` runs: starts the lab on a
//! scenario, runs the accordd binary against it, and prints `accordctl
//! status` and the summary (or only the summary as JSON).
//!
//! stdout carries the result only (with `--json`, nothing but the JSON):
//! the lab's narration and logs, the agents' and accordd's own output all
//! go to stderr.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use accord_testkit::fake_api::KubeVersion;
use clap::Parser;

use crate::{Lab, LabOptions, Scenario};

#[derive(Debug, Parser)]
#[command(
    name = "accord-lab",
    version,
    about = "The local lab: one machine playing a datacenter (emulated BMCs, the upstream \
             Kubernetes control plane or a fake API, agents replaying recorded hardware, \
             kubelet stand-ins) with accordd running against it unmodified",
    after_help = "\
Stopping: SIGTERM (systemctl stop) or SIGINT (Ctrl-C) ends the run; the lab
stops accordd with SIGTERM (SIGKILL after 30 s), then the emulated BMCs.

Exit status:
  0  success (accordd exited 0 on SIGTERM)
  1  any failure: the scenario, --until-idle not settling within lab.max_s,
     accordd exiting early or not cleanly, a signal before --until-idle settled

Environment:
  ACCORDD     the accordd to run (after --accordd); `accordd lab` sets it
  ACCORD_LOG  log filter (the lab's and accordd's); logs go to stderr
  NO_COLOR    set and not empty: no colour in logs"
)]
pub struct Cli {
    /// Scenario file (docs/lab.md); default: the embedded one.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Stop when the scenario is done and every node is idle or off,
    /// and print a summary.
    #[arg(long)]
    pub until_idle: bool,
    /// Print the summary as JSON on stdout (and no narration). Logs go to
    /// stderr.
    #[arg(long)]
    pub json: bool,
    /// The accordd binary to run. Default: $ACCORDD, else `accordd` next to
    /// this program, else on PATH.
    #[arg(long, value_name = "PATH")]
    pub accordd: Option<PathBuf>,
    /// The lab's Kubernetes, over the scenario's `lab.kubernetes`:
    /// `upstream` (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler built by scripts/controlplane; the default) or
    /// `fake` (the in-repo fake API and the lab's binder).
    #[arg(long, value_name = "KIND")]
    pub kubernetes: Option<crate::scenario::KubernetesKind>,
    /// The Kubernetes version the lab runs (`1.34`), over the scenario's
    /// `lab.kube_version`; default: the newest pinned.
    #[arg(long, value_name = "VERSION", value_parser = KubeVersion::parse)]
    pub kube_version: Option<KubeVersion>,
    /// `--runtime-config` of the lab's Kubernetes, as an admin passes it
    /// (`scheduling.k8s.io/v1beta1=true`; comma-separated or repeated),
    /// over the scenario's `lab.runtime_config`.
    #[arg(long, value_name = "GROUP/VERSION=BOOL", value_delimiter = ',')]
    pub runtime_config: Option<Vec<String>>,
    /// `--feature-gates` of the lab's Kubernetes (`GenericWorkload=true`;
    /// comma-separated or repeated), over the scenario's
    /// `lab.feature_gates`.
    #[arg(long, value_name = "NAME=BOOL", value_delimiter = ',')]
    pub feature_gates: Option<Vec<String>>,
    /// Print what every machine publishes when it is up (its Node and, where
    /// DRA is served, its ResourceSlice: built from its recording) as JSON,
    /// and exit; runs no accordd.
    #[arg(long)]
    pub print_nodes: bool,
    /// A chaos run: faults injected on a schedule drawn from SEED (the
    /// same seed, the same schedule), over the scenario's `[lab.chaos]`:
    /// by default 20 kill -9s of accordd (each started again) and 3 of
    /// each BMC and API fault. The summary gets a `chaos` section: the
    /// faults injected and four safety counts that must be 0. Needs
    /// --until-idle.
    #[arg(long, value_name = "SEED")]
    pub chaos: Option<u64>,
    /// accordd killed with SIGKILL (at random moments, some right after
    /// a power Reset reaches a BMC) and started again, N times.
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_kills: Option<u32>,
    /// BMC 503 bursts: 2-5 requests for one system answered 503.
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_503: Option<u32>,
    /// BMC hangs: a request (the next power Reset, or one system's next
    /// request) forwarded and its answer held past accordd's Redfish
    /// timeout (4 s in a chaos run).
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_hangs: Option<u32>,
    /// Wrong-power windows: for 2-5 s from when a power Reset has changed a
    /// machine's power state, its BMC reports the state from before.
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_wrong_power: Option<u32>,
    /// Every open watch stream of the fake API server cut mid-stream.
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_watch_drops: Option<u32>,
    /// The fake API server's history compacted: watches resuming get 410
    /// Gone and list again.
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_410: Option<u32>,
    /// Slow writes: 2-5 writes to the fake API answered 1.5-4 s late.
    #[arg(long, value_name = "N", requires = "chaos")]
    pub chaos_slow_writes: Option<u32>,
    /// The BMC and API faults are spread over the first S seconds of the
    /// scenario (default 60); the kills come one after another until done.
    #[arg(long, value_name = "S", requires = "chaos")]
    pub chaos_window_s: Option<u64>,
    /// accordd replicas electing a leader on a Lease (high availability),
    /// over the scenario's `lab.ha.replicas`; 1: one accordd, no HA.
    #[arg(long, value_name = "N")]
    pub replicas: Option<u32>,
    /// Kill (SIGKILL) the leader at MOMENT (`powering_on`: when the first
    /// power-on Reset reaches a machine); it is started again once
    /// another replica holds the Lease. Needs 2 or more replicas.
    #[arg(long, value_name = "MOMENT", conflicts_with = "pause_leader_at")]
    pub kill_leader_at: Option<crate::ha::Moment>,
    /// Pause (SIGSTOP) the leader at MOMENT for --pause-s, then resume
    /// it (SIGCONT). Needs 2 or more replicas.
    #[arg(long, value_name = "MOMENT")]
    pub pause_leader_at: Option<crate::ha::Moment>,
    /// How long --pause-leader-at pauses it (default: the Lease's
    /// duration + 5 s).
    #[arg(long, value_name = "S", requires = "pause_leader_at")]
    pub pause_s: Option<u64>,
}

impl Cli {
    /// The scenario's `[lab.chaos]` with the command line's over it
    /// (`--chaos SEED` alone: the defaults); `None`: no chaos.
    pub fn chaos_options(
        &self,
        from_scenario: Option<&crate::chaos::ChaosOptions>,
    ) -> Option<crate::chaos::ChaosOptions> {
        let seed = self.chaos?;
        let mut c = from_scenario.cloned().unwrap_or_default();
        c.seed = seed;
        let counts = [
            (self.chaos_kills, &mut c.kills),
            (self.chaos_503, &mut c.bmc_503_bursts),
            (self.chaos_hangs, &mut c.bmc_hangs),
            (self.chaos_wrong_power, &mut c.wrong_power),
            (self.chaos_watch_drops, &mut c.watch_drops),
            (self.chaos_410, &mut c.gone_410),
            (self.chaos_slow_writes, &mut c.slow_writes),
        ];
        for (given, count) in counts {
            if let Some(n) = given {
                *count = n;
            }
        }
        if let Some(w) = self.chaos_window_s {
            c.window_s = w;
        }
        Some(c)
    }

    /// The scenario's `[lab.ha]` with the command line's over it (a
    /// fault given replaces the scenario's).
    pub fn ha_settings(&self, from_scenario: &crate::ha::HaSettings) -> crate::ha::HaSettings {
        let mut h = from_scenario.clone();
        if let Some(n) = self.replicas {
            h.replicas = n;
        }
        if let Some(at) = self.kill_leader_at {
            h.kill_leader = Some(crate::ha::FaultAt { at });
            h.pause_leader = None;
        }
        if let Some(at) = self.pause_leader_at {
            h.pause_leader = Some(crate::ha::PauseAt {
                at,
                pause_s: self.pause_s,
            });
            h.kill_leader = None;
        }
        h
    }
}

/// `accord-lab`'s main: parses the command line, runs the lab.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The lab's own lines, and only the agents' warnings (ten agents
    // saying "hardware reported" is noise).
    accord_api::logging::init_logging("info,accord_agent=warn");
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accord-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The first file named `name` in a `PATH` directory.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The accordd to run: `flag` (`--accordd`), else `$ACCORDD`, else
/// `accordd` next to this program, else on `PATH`.
pub fn find_accordd(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    if let Some(p) = std::env::var_os("ACCORDD").filter(|v| !v.is_empty()) {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().ok();
    if let Some(p) = exe.as_ref().map(|e| e.with_file_name("accordd")) {
        if p.is_file() {
            return Ok(p);
        }
    }
    on_path("accordd").ok_or_else(|| {
        anyhow::anyhow!(
            "accordd not found: not given (--accordd PATH or ACCORDD), not next to {}, \
             not on PATH; build it with `cargo build -p accord-daemon`",
            exe.as_deref()
                .map_or("this program".into(), |e| e.display().to_string())
        )
    })
}

/// How long accordd gets to stop after SIGTERM before it is killed: its
/// own shutdown waits up to 10 s for power actions in flight and 10 s for
/// Kubernetes writes.
const DAEMON_STOP_WITHIN: Duration = Duration::from_secs(30);

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut scenario = match &cli.scenario {
        Some(f) => Scenario::load(f)?,
        None => Scenario::default_scenario(),
    };
    if let Some(k) = cli.kubernetes {
        scenario.lab.kubernetes = Some(k);
    }
    if let Some(v) = cli.kube_version {
        scenario.lab.kube_version = Some(v.to_string());
    }
    if let Some(entries) = &cli.runtime_config {
        scenario.lab.runtime_config = entries.clone();
    }
    if let Some(entries) = &cli.feature_gates {
        scenario.lab.feature_gates = entries.clone();
    }
    for (flag, entries, runtime_config) in [
        ("--runtime-config", &scenario.lab.runtime_config, true),
        ("--feature-gates", &scenario.lab.feature_gates, false),
    ] {
        for e in entries {
            crate::scenario::check_flag_entry(e, runtime_config)
                .map_err(|why| anyhow::anyhow!("{flag} {e:?}: {why}"))?;
        }
    }
    if let Some(c) = cli.chaos_options(scenario.lab.chaos.as_ref()) {
        let problems = c.problems("--chaos");
        if !problems.is_empty() {
            anyhow::bail!("{}", problems.join("; "));
        }
        scenario.lab.chaos = Some(c);
    }
    scenario.lab.ha = cli.ha_settings(&scenario.lab.ha);
    // Chaos and several replicas bring the fake API (`Scenario::kubernetes`):
    // the admin's manifests are for the upstream control plane.
    if scenario.kubernetes() == crate::scenario::KubernetesKind::Fake
        && scenario.lab.kubernetes.is_none()
    {
        if scenario.lab.cluster_manifests.take().is_some() {
            tracing::info!(target: "lab", "a chaos or HA run is on the fake API: lab.cluster_manifests left out");
        }
        if std::mem::take(&mut scenario.lab.kueue) {
            tracing::info!(target: "lab", "a chaos or HA run is on the fake API: lab.kueue left out (its jobs are skipped)");
        }
    }
    let problems = scenario.ha_problems();
    if !problems.is_empty() {
        anyhow::bail!("{}", problems.join("; "));
    }
    if scenario.lab.chaos.is_some() && !cli.until_idle && !cli.print_nodes {
        anyhow::bail!("a chaos run (--chaos, [lab.chaos]) needs --until-idle");
    }
    if cli.print_nodes {
        let objects = crate::published_objects(&scenario)?;
        println!("{}", serde_json::to_string_pretty(&objects)?);
        return Ok(());
    }
    let accordd = find_accordd(cli.accordd.as_deref())?;
    let until_off = scenario.lab.until_off;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        // Installed before anything starts: a SIGTERM (systemd's stop) or
        // SIGINT (Ctrl-C) that comes early still stops the lab and what it
        // started. It logs which one came.
        let stop = accord_api::signals::stop_signal()?;
        tokio::pin!(stop);
        // Stopped while starting: what was started (the emulator, the
        // lab's directory) goes with the half-built lab.
        let lab = tokio::select! {
            lab = Lab::start(
                scenario,
                LabOptions {
                    narrate: !cli.json,
                    ..LabOptions::new(accordd)
                },
            ) => lab?,
            () = &mut stop => anyhow::bail!("stopped by a signal while starting"),
        };
        lab.start_daemon()?;
        if !cli.json {
            tracing::info!(
                target: "lab",
                "watch it: ACCORD_URL={} ACCORD_ADMIN_TOKEN_FILE={} accordctl status | explain WORKLOAD",
                lab.daemon_url,
                lab.dir.path().join("admin-token").display()
            );
            if lab.replica_count() > 1 {
                let others: Vec<String> = lab
                    .replica_identities()
                    .iter()
                    .map(|r| format!("{r} {}", lab.replica_url(r).unwrap_or_default()))
                    .collect();
                tracing::info!(target: "lab", "the replicas: {} (ACCORD_URL above: the first)", others.join(", "));
            }
        }
        // The run's outcome: the summary, or why there is none (accordd
        // exited, lab.max_s passed, a signal before the scenario settled).
        let outcome = if cli.until_idle {
            tokio::select! {
                r = lab.run_until_idle(until_off) => r,
                () = &mut stop => {
                    Err(anyhow::anyhow!("stopped by a signal before the scenario settled"))
                }
            }
        } else {
            // Until accordd exits, or the apiserver refuses it.
            let failed = async {
                loop {
                    if lab.daemon_exited().is_some() {
                        return anyhow::anyhow!("{}", lab.daemon_report());
                    }
                    if let Err(e) = lab.refused() {
                        return e;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            };
            tokio::select! {
                () = &mut stop => Ok(lab.summary(lab.status().await.as_ref())),
                e = failed => Err(e),
            }
        };
        let status = lab.status().await;
        // accordd stops as under systemd (SIGTERM, a clean shutdown); the
        // emulator and the lab's directory go when the lab is dropped.
        let stopped = lab.stop_daemon(DAEMON_STOP_WITHIN).await;
        let summary = outcome?;
        if cli.json {
            println!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            if let Some(s) = &status {
                println!("\n$ accordctl status\n{}", accord_api::text::render_status(s));
            }
            println!("lab summary\n{}", summary.render());
        }
        let exit = stopped?;
        if !exit.success() {
            anyhow::bail!("accordd did not stop cleanly on SIGTERM: {exit}");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scripts/run --kube-version 1.31 --json` reaches the lab as this.
    #[test]
    fn the_kube_version_flag_parses_and_is_checked() {
        let cli = Cli::try_parse_from([
            "accord-lab",
            "--until-idle",
            "--kube-version",
            "1.31",
            "--json",
        ])
        .unwrap();
        assert_eq!(
            cli.kube_version.map(|v| v.to_string()).as_deref(),
            Some("1.31")
        );
        assert!(cli.until_idle && cli.json);
        let e = Cli::try_parse_from(["accord-lab", "--kube-version", "2.0"]).unwrap_err();
        assert!(e.to_string().contains("unknown Kubernetes version"), "{e}");
    }

    /// `scripts/run --chaos 7 --json`: the defaults with seed 7; counts
    /// override the scenario's; a count without --chaos is refused.
    #[test]
    fn the_chaos_flags_parse_over_the_scenario() {
        let cli =
            Cli::try_parse_from(["accord-lab", "--until-idle", "--chaos", "7", "--json"]).unwrap();
        let c = cli.chaos_options(None).unwrap();
        assert_eq!(c.seed, 7);
        assert_eq!(c.kills, 20);
        assert_eq!(c.bmc_503_bursts, 3);
        let cli = Cli::try_parse_from([
            "accord-lab",
            "--chaos",
            "1",
            "--chaos-kills",
            "4",
            "--chaos-410",
            "0",
            "--chaos-window-s",
            "20",
        ])
        .unwrap();
        let from_scenario = crate::chaos::ChaosOptions {
            seed: 99,
            slow_writes: 9,
            ..Default::default()
        };
        let c = cli.chaos_options(Some(&from_scenario)).unwrap();
        assert_eq!(
            (c.seed, c.kills, c.gone_410, c.slow_writes, c.window_s),
            (1, 4, 0, 9, 20)
        );
        assert!(Cli::try_parse_from(["accord-lab"])
            .unwrap()
            .chaos_options(Some(&from_scenario))
            .is_none());
        let e = Cli::try_parse_from(["accord-lab", "--chaos-kills", "4"]).unwrap_err();
        assert!(e.to_string().contains("--chaos"), "{e}");
    }

    /// `accordd lab --until-idle --replicas 2 --kill-leader-at powering_on
    /// --json`, and the pause form; the flags over the scenario's.
    #[test]
    fn the_ha_flags_parse_over_the_scenario() {
        use crate::ha::{FaultAt, HaSettings, Moment, PauseAt};
        let cli = Cli::try_parse_from([
            "accord-lab",
            "--until-idle",
            "--replicas",
            "2",
            "--kill-leader-at",
            "powering_on",
            "--json",
        ])
        .unwrap();
        let from_scenario = HaSettings {
            lease_duration_s: 6,
            renew_deadline_s: 4,
            pause_leader: Some(PauseAt {
                at: Moment::PoweringOn,
                pause_s: Some(9),
            }),
            ..Default::default()
        };
        let h = cli.ha_settings(&from_scenario);
        assert_eq!(h.replicas, 2);
        assert_eq!(
            h.kill_leader,
            Some(FaultAt {
                at: Moment::PoweringOn
            })
        );
        assert_eq!(h.pause_leader, None);
        assert_eq!((h.lease_duration_s, h.renew_deadline_s), (6, 4));
        assert!(
            h.problems("lab.ha").is_empty(),
            "{:?}",
            h.problems("lab.ha")
        );
        let cli = Cli::try_parse_from([
            "accord-lab",
            "--replicas",
            "3",
            "--pause-leader-at",
            "powering_on",
            "--pause-s",
            "30",
        ])
        .unwrap();
        let h = cli.ha_settings(&HaSettings::default());
        assert_eq!(
            (h.replicas, h.pause_leader.and_then(|p| p.pause_s)),
            (3, Some(30))
        );
        // Nothing given: the scenario's, unchanged.
        let cli = Cli::try_parse_from(["accord-lab"]).unwrap();
        assert_eq!(cli.ha_settings(&from_scenario), from_scenario);
        for bad in [
            &["accord-lab", "--pause-s", "3"][..],
            &["accord-lab", "--kill-leader-at", "soon"],
            &[
                "accord-lab",
                "--kill-leader-at",
                "powering_on",
                "--pause-leader-at",
                "powering_on",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
