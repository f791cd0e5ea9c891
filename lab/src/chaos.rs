//! Chaos in the lab: faults injected while the scenario runs, on a
//! schedule drawn from a seed (the same seed, the same schedule):
//!
//! - accordd killed with SIGKILL at random moments (some right after a
//!   power Reset reaches a BMC) and started again;
//! - BMC faults in the lab's proxy ([`bmc`]): 503 bursts, requests held
//!   past accordd's Redfish timeout, a system reporting the wrong power
//!   state for a while;
//! - API-server faults in the fake API: watch streams cut, history
//!   compacted (410 Gone on resuming), writes answered late.
//!
//! At the end the summary's `chaos` section counts the faults that fired
//! and the four safety counts ([`safety`]), from the lab's own
//! observations: duplicate Resets, busy nodes powered off, acknowledged
//! reports lost, placeable workloads never bound. All must be 0.

pub mod agents;
pub mod bmc;
pub mod safety;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::Lab;
use bmc::{BmcFault, HangTarget};
use safety::Violation;

/// accordd's Redfish request timeout in a chaos run (the inventory's
/// `[defaults] request_timeout_ms`): a hang holds an answer past it.
pub const REDFISH_TIMEOUT_MS: u64 = 4000;

/// A chaos run's settings (`[lab.chaos]`, or `--chaos SEED` with the
/// `--chaos-*` counts). Every count is how many of that fault the
/// schedule holds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChaosOptions {
    /// The schedule's seed.
    pub seed: u64,
    /// accordd killed (SIGKILL) and started again.
    pub kills: u32,
    /// BMC 503 bursts: 2–5 requests for one system answered 503.
    pub bmc_503_bursts: u32,
    /// Requests (half of them the next power Reset, half one system's
    /// next request) forwarded and their answer held past accordd's
    /// Redfish timeout.
    pub bmc_hangs: u32,
    /// Windows of 2–5 s, from when a power Reset has changed a machine's
    /// power state, in which its BMC keeps reporting the state from
    /// before.
    pub wrong_power: u32,
    /// Every open watch stream cut mid-stream.
    pub watch_drops: u32,
    /// The API server's history compacted: resuming watches get 410 Gone
    /// and list again.
    pub gone_410: u32,
    /// 2–5 writes answered 1.5–4 s late.
    pub slow_writes: u32,
    /// The BMC and API faults are spread over this many seconds from
    /// the scenario's start.
    pub window_s: u64,
}

impl Default for ChaosOptions {
    fn default() -> Self {
        ChaosOptions {
            seed: 0,
            kills: 20,
            bmc_503_bursts: 3,
            bmc_hangs: 3,
            wrong_power: 3,
            watch_drops: 3,
            gone_410: 3,
            slow_writes: 3,
            window_s: 60,
        }
    }
}

impl ChaosOptions {
    /// Its problems, each naming its key under `key`.
    pub fn problems(&self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (name, n) in [
            ("kills", self.kills),
            ("bmc_503_bursts", self.bmc_503_bursts),
            ("bmc_hangs", self.bmc_hangs),
            ("wrong_power", self.wrong_power),
            ("watch_drops", self.watch_drops),
            ("gone_410", self.gone_410),
            ("slow_writes", self.slow_writes),
        ] {
            if n > 1000 {
                out.push(format!("{key}.{name}: {n} is above 1000"));
            }
        }
        if self.window_s == 0 || self.window_s > 3600 {
            out.push(format!("{key}.window_s: must be 1 to 3600"));
        }
        out
    }
}

/// When a kill comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillAt {
    /// This long after accordd (started again) answered.
    After(Duration),
    /// This long after the next power Reset reaches a BMC (or, if none
    /// comes within [`RESET_WAIT`], then).
    AfterNextReset(Duration),
}

/// The longest a kill waits for a power Reset to follow.
const RESET_WAIT: Duration = Duration::from_secs(10);

/// One kill: when, and how long accordd stays down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub at: KillAt,
    pub down_for: Duration,
}

/// A BMC or API fault at a moment after the scenario's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timed {
    Bmc(BmcFault),
    WatchDrop,
    Gone410,
    SlowWrites { writes: usize, delay: Duration },
}

/// The run's fault schedule, drawn from the seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub kills: Vec<Kill>,
    /// Sorted by time.
    pub faults: Vec<(Duration, Timed)>,
}

impl Schedule {
    /// The schedule for `o` over the fleet's `nodes`.
    pub fn draw(o: &ChaosOptions, nodes: &[String]) -> Schedule {
        let mut rng = StdRng::seed_from_u64(o.seed);
        let kills = (0..o.kills)
            .map(|_| {
                let at = if rng.random_bool(0.4) {
                    KillAt::AfterNextReset(Duration::from_millis(rng.random_range(0..=400)))
                } else {
                    KillAt::After(Duration::from_millis(rng.random_range(1000..=5000)))
                };
                Kill {
                    at,
                    down_for: Duration::from_millis(rng.random_range(0..=500)),
                }
            })
            .collect();
        let window_ms = o.window_s * 1000;
        let mut faults = Vec::new();
        let node = |rng: &mut StdRng| nodes[rng.random_range(0..nodes.len())].clone();
        let hold = Duration::from_millis(REDFISH_TIMEOUT_MS + 1000);
        for _ in 0..o.bmc_503_bursts {
            let at = rng.random_range(0..window_ms);
            let f = BmcFault::Unavailable {
                node: node(&mut rng),
                requests: rng.random_range(2..=5),
            };
            faults.push((at, Timed::Bmc(f)));
        }
        for _ in 0..o.bmc_hangs {
            let at = rng.random_range(0..window_ms);
            let target = if rng.random_bool(0.5) {
                HangTarget::NextReset
            } else {
                HangTarget::NextRequest(node(&mut rng))
            };
            faults.push((at, Timed::Bmc(BmcFault::Hang { target, hold })));
        }
        for _ in 0..o.wrong_power {
            let at = rng.random_range(0..window_ms);
            let secs = rng.random_range(2..=5);
            faults.push((at, Timed::Bmc(BmcFault::WrongPower { secs })));
        }
        for _ in 0..o.watch_drops {
            faults.push((rng.random_range(0..window_ms), Timed::WatchDrop));
        }
        for _ in 0..o.gone_410 {
            faults.push((rng.random_range(0..window_ms), Timed::Gone410));
        }
        for _ in 0..o.slow_writes {
            let at = rng.random_range(0..window_ms);
            let f = Timed::SlowWrites {
                writes: rng.random_range(2..=5),
                delay: Duration::from_millis(rng.random_range(1500..=4000)),
            };
            faults.push((at, f));
        }
        let mut faults: Vec<(Duration, Timed)> = faults
            .into_iter()
            .map(|(ms, f)| (Duration::from_millis(ms), f))
            .collect();
        // Stable: equal times keep the order they were drawn in.
        faults.sort_by_key(|(t, _)| *t);
        Schedule { kills, faults }
    }
}

/// Faults that fired, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FaultsInjected {
    pub kills: u32,
    pub bmc_503_bursts: u32,
    pub bmc_hangs: u32,
    pub wrong_power_windows: u32,
    pub watch_drops: u32,
    pub gone_410: u32,
    pub slow_writes: u32,
}

/// What the faults did (beyond their count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FaultEffects {
    /// BMC requests answered 503.
    pub bmc_503_answers: u32,
    /// System documents answered with the wrong power state.
    pub wrong_power_answers: u32,
    /// Watch streams open when they were cut (all drops together).
    pub watches_cut: u64,
    /// Watches answered 410 Gone.
    pub gone_answers: u64,
    /// Writes answered late.
    pub writes_slowed: u64,
}

/// The summary's `chaos` section.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosSummary {
    pub seed: u64,
    pub faults_injected: FaultsInjected,
    pub fault_effects: FaultEffects,
    /// Power Resets beyond one per power episode of a machine (per
    /// direction), from the BMC proxy's log.
    pub duplicate_resets: usize,
    /// Power-off Resets that reached a machine with pods bound.
    pub busy_nodes_powered_off: usize,
    /// Reports accordd acknowledged (2xx, through the agent proxy) whose
    /// content or generation it no longer had: checked after every
    /// restart and at the end.
    pub acknowledged_reports_lost: usize,
    /// Placeable submissions never bound.
    pub workloads_never_bound: usize,
    /// Each violation, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
}

impl ChaosSummary {
    /// Whether every safety count is 0.
    pub fn safe(&self) -> bool {
        self.duplicate_resets == 0
            && self.busy_nodes_powered_off == 0
            && self.acknowledged_reports_lost == 0
            && self.workloads_never_bound == 0
    }

    pub fn render(&self) -> String {
        let f = &self.faults_injected;
        let mut out = format!(
            "\nchaos (seed {}): faults injected: {} kills, {} BMC 503 bursts, {} BMC hangs, \
             {} wrong-power windows, {} watch drops, {} 410s, {} slow writes\n\
             safety: duplicate Resets {}, busy nodes powered off {}, acknowledged reports lost {}, \
             workloads never bound {}{}\n",
            self.seed,
            f.kills,
            f.bmc_503_bursts,
            f.bmc_hangs,
            f.wrong_power_windows,
            f.watch_drops,
            f.gone_410,
            f.slow_writes,
            self.duplicate_resets,
            self.busy_nodes_powered_off,
            self.acknowledged_reports_lost,
            self.workloads_never_bound,
            if self.safe() { " (all 0)" } else { "" }
        );
        for v in &self.violations {
            out.push_str(&format!("  {}\n", v.what));
        }
        out
    }
}

/// A chaos run's state, shared by the driver and the summary.
#[derive(Debug)]
pub(crate) struct Chaos {
    pub options: ChaosOptions,
    pub schedule: Schedule,
    pub agents: agents::AgentProxy,
    state: Mutex<ChaosState>,
    /// The schedule has run out (every kill done, every fault armed).
    done: AtomicBool,
}

#[derive(Debug, Default)]
struct ChaosState {
    injected: FaultsInjected,
    watches_cut: u64,
    /// Acknowledged reports found lost after a restart.
    lost: Vec<Violation>,
}

impl Chaos {
    pub(crate) fn new(
        options: ChaosOptions,
        nodes: &[String],
        agents: agents::AgentProxy,
    ) -> Chaos {
        let schedule = Schedule::draw(&options, nodes);
        Chaos {
            options,
            schedule,
            agents,
            state: Mutex::new(ChaosState::default()),
            done: AtomicBool::new(false),
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }
}

/// How long a started accordd gets to answer its API.
const UP_WITHIN: Duration = Duration::from_secs(60);

impl Lab {
    /// Runs the chaos schedule (nothing without one): the kills, one
    /// after another, beside the timed BMC and API faults. Errors when
    /// accordd does not answer within a minute of a start, or exits by
    /// itself.
    pub(crate) async fn drive_chaos(&self) -> anyhow::Result<()> {
        let Some(chaos) = &self.chaos else {
            return Ok(());
        };
        // The scenario's clock: the machines on at the start have
        // reported, the submissions start counting.
        let t0 = loop {
            if let Some(c) = self.record.lock().expect("lock").clock {
                break c;
            }
            if self.daemon_exited().is_some() {
                anyhow::bail!(
                    "chaos: waiting for the scenario's start: {}",
                    self.daemon_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        info!(target: "lab", seed = chaos.options.seed, kills = chaos.schedule.kills.len(), faults = chaos.schedule.faults.len(), "chaos: the schedule starts");
        let timed = async {
            for (at, fault) in &chaos.schedule.faults {
                tokio::time::sleep_until(t0 + *at).await;
                self.inject(chaos, fault);
            }
        };
        let kills = async {
            for (i, kill) in chaos.schedule.kills.iter().enumerate() {
                self.kill_and_restart(chaos, i, kill).await?;
            }
            anyhow::Ok(())
        };
        let (_, kills) = tokio::join!(timed, kills);
        kills?;
        chaos.done.store(true, Ordering::SeqCst);
        info!(target: "lab", "chaos: the schedule is done");
        Ok(())
    }

    fn inject(&self, chaos: &Chaos, fault: &Timed) {
        // A chaos run is on the fake API (`Scenario::ha_problems`).
        let Some(api) = self.api.fake() else {
            return;
        };
        match fault {
            Timed::Bmc(f) => {
                info!(target: "lab", fault = ?f, "chaos: BMC fault armed");
                self.proxy.arm(f.clone());
            }
            Timed::WatchDrop => {
                let open = api.drop_watches();
                info!(target: "lab", open, "chaos: watch streams cut");
                let mut st = chaos.state.lock().expect("lock");
                st.injected.watch_drops += 1;
                st.watches_cut += open as u64;
            }
            Timed::Gone410 => {
                api.compact();
                info!(target: "lab", "chaos: API history compacted (410 Gone on resuming)");
                chaos.state.lock().expect("lock").injected.gone_410 += 1;
            }
            Timed::SlowWrites { writes, delay } => {
                api.slow_writes(*writes, *delay);
                info!(target: "lab", writes, delay_ms = delay.as_millis() as u64, "chaos: writes answered late");
                chaos.state.lock().expect("lock").injected.slow_writes += 1;
            }
        }
    }

    async fn kill_and_restart(&self, chaos: &Chaos, i: usize, kill: &Kill) -> anyhow::Result<()> {
        match kill.at {
            KillAt::After(d) => tokio::time::sleep(d).await,
            KillAt::AfterNextReset(d) => {
                let seen = self.proxy.resets_reached().len();
                let end = Instant::now() + RESET_WAIT;
                while self.proxy.resets_reached().len() == seen && Instant::now() < end {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                tokio::time::sleep(d).await;
            }
        }
        if let Some(status) = self.daemon_exited() {
            anyhow::bail!(
                "chaos: accordd exited by itself ({status}): {}",
                self.daemon_report()
            );
        }
        self.kill_daemon();
        chaos.state.lock().expect("lock").injected.kills += 1;
        info!(target: "lab", kill = i + 1, of = chaos.schedule.kills.len(), "chaos: accordd killed (SIGKILL)");
        tokio::time::sleep(kill.down_for).await;
        self.start_daemon()?;
        let end = Instant::now() + UP_WITHIN;
        loop {
            if self.admin.nodes().await.is_ok() {
                break;
            }
            if self.daemon_exited().is_some() {
                anyhow::bail!(
                    "chaos: accordd started again after kill {} and exited: {}",
                    i + 1,
                    self.daemon_report()
                );
            }
            if Instant::now() > end {
                anyhow::bail!(
                    "chaos: accordd did not answer within {UP_WITHIN:?} of its start after kill {}: {}",
                    i + 1,
                    self.daemon_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // What it acknowledged before the kill must have survived it.
        let lost = self.reports_lost(chaos).await;
        if !lost.is_empty() {
            warn!(target: "lab", lost = lost.len(), "chaos: acknowledged reports lost across a kill");
            chaos.state.lock().expect("lock").lost.extend(lost);
        }
        Ok(())
    }

    /// Acknowledged reports accordd no longer has, asked of it now.
    async fn reports_lost(&self, chaos: &Chaos) -> Vec<Violation> {
        let exchanges = chaos.agents.reports();
        let mut stored = BTreeMap::new();
        let nodes: std::collections::BTreeSet<&str> = exchanges
            .iter()
            .filter(|e| e.acknowledged)
            .map(|e| e.node.as_str())
            .collect();
        for node in nodes {
            match self.admin.node(node).await {
                Ok(view) => {
                    let mut hw = view.record.hardware;
                    hw.canonicalize();
                    stored.insert(node.to_owned(), Some((view.record.generation, hw)));
                }
                Err(e) if e.status() == Some(reqwest::StatusCode::NOT_FOUND) => {
                    stored.insert(node.to_owned(), None);
                }
                // Unreadable now: not judged (no claim either way).
                Err(e) => {
                    warn!(target: "lab", node, error = %e, "chaos: cannot read accordd's node")
                }
            }
        }
        safety::acknowledged_reports_lost(&exchanges, &stored)
    }

    /// The summary's `chaos` section (`None` without chaos): asks accordd
    /// for the nodes the agents had reports acknowledged for.
    pub async fn chaos_summary(&self) -> Option<ChaosSummary> {
        let chaos = self.chaos.as_ref()?;
        self.proxy.disarm();
        let resets = self.proxy.resets_reached();
        let bindings = self.record.lock().expect("lock").bindings.clone();
        let mut violations = safety::duplicate_resets(&resets);
        let duplicate_resets = violations.len();
        let busy = safety::busy_nodes_powered_off(&resets, &bindings);
        let busy_nodes_powered_off = busy.len();
        violations.extend(busy);
        let mut lost = chaos.state.lock().expect("lock").lost.clone();
        lost.extend(self.reports_lost(chaos).await);
        let acknowledged_reports_lost = lost.len();
        violations.extend(lost);
        let subs: Vec<safety::SubmissionSeen> = {
            let r = self.record.lock().expect("lock");
            self.scenario
                .submit
                .iter()
                .zip(&r.subs)
                .map(|(sub, s)| safety::SubmissionSeen {
                    name: sub.name.clone(),
                    placeable: sub.placeable,
                    submitted: s.submitted.is_some(),
                    bound: s.bound.is_some(),
                })
                .collect()
        };
        let never = safety::workloads_never_bound(&subs);
        let workloads_never_bound = never.len();
        violations.extend(never);
        let bmc = self.proxy.fault_counts();
        let st = chaos.state.lock().expect("lock");
        let faults_injected = FaultsInjected {
            bmc_503_bursts: bmc.bursts,
            bmc_hangs: bmc.hangs,
            wrong_power_windows: bmc.wrong_power_windows,
            ..st.injected.clone()
        };
        Some(ChaosSummary {
            seed: chaos.options.seed,
            faults_injected,
            fault_effects: FaultEffects {
                bmc_503_answers: bmc.answered_503,
                wrong_power_answers: bmc.wrong_power_answers,
                watches_cut: st.watches_cut,
                gone_answers: self.api.fake().map_or(0, |a| a.gone_answered()),
                writes_slowed: self.api.fake().map_or(0, |a| a.writes_slowed()),
            },
            duplicate_resets,
            busy_nodes_powered_off,
            acknowledged_reports_lost,
            workloads_never_bound,
            violations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<String> {
        ["n1", "n2", "n3"].map(String::from).to_vec()
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule() {
        let o = ChaosOptions {
            seed: 7,
            ..Default::default()
        };
        let a = Schedule::draw(&o, &nodes());
        assert_eq!(a, Schedule::draw(&o, &nodes()));
        assert_eq!(a.kills.len(), 20);
        // 3 of each of the six timed kinds.
        assert_eq!(a.faults.len(), 18);
        assert!(a.faults.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(a.faults.iter().all(|(t, _)| *t < Duration::from_secs(60)));
        let b = Schedule::draw(&ChaosOptions { seed: 8, ..o }, &nodes());
        assert_ne!(a, b);
    }

    #[test]
    fn the_summary_says_every_count_and_each_violation() {
        let mut c = ChaosSummary {
            seed: 7,
            faults_injected: FaultsInjected {
                kills: 20,
                ..Default::default()
            },
            fault_effects: FaultEffects::default(),
            duplicate_resets: 0,
            busy_nodes_powered_off: 0,
            acknowledged_reports_lost: 0,
            workloads_never_bound: 0,
            violations: Vec::new(),
        };
        let text = c.render();
        assert!(
            text.contains("chaos (seed 7)") && text.contains("20 kills"),
            "{text}"
        );
        assert!(text.contains("(all 0)"), "{text}");
        c.duplicate_resets = 1;
        c.violations.push(Violation {
            node: "n1".into(),
            what: "On n1: a power-on Reset reached a machine that was on".into(),
        });
        let text = c.render();
        assert!(!c.safe() && !text.contains("(all 0)"), "{text}");
        assert!(
            text.contains("duplicate Resets 1") && text.contains("On n1: "),
            "{text}"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["duplicate_resets"], 1);
        assert_eq!(json["faults_injected"]["kills"], 20);
    }

    #[test]
    fn counts_are_bounded_and_named() {
        let o = ChaosOptions {
            kills: 1001,
            window_s: 0,
            ..Default::default()
        };
        let p = o.problems("lab.chaos");
        assert!(p.iter().any(|p| p.starts_with("lab.chaos.kills")), "{p:?}");
        assert!(
            p.iter().any(|p| p.starts_with("lab.chaos.window_s")),
            "{p:?}"
        );
        assert!(ChaosOptions::default().problems("x").is_empty());
    }
}
