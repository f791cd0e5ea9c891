//! A node's lifecycle as the control loop tracks it, from dark to serving
//! and back: Off → PoweringOn → Booting (the BMC shows On) → AgentUp (the
//! agent registered) → Ready (the Kubernetes node is Ready) → InUse ⇄ Idle
//! → PoweringOff → Off, and Failed with a reason when a step misses its
//! deadline. Pure: observations and the time in, the next state and what
//! happened out, so the loop, its tests and `accordctl status` agree.
//! accordd's control loop drives it each round.

use serde::{Deserialize, Serialize};

use crate::fleet::PowerState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Off,
    PoweringOn,
    Booting,
    AgentUp,
    Ready,
    InUse,
    Idle,
    PoweringOff,
    Failed,
}

/// How long each step may take. Defaults sized for GPU servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Deadlines {
    /// Reset accepted → the BMC shows On.
    pub power_on_s: u64,
    /// BMC On → the agent registered (firmware, POST, OS boot).
    pub boot_to_agent_s: u64,
    /// Agent registered → the Kubernetes node is Ready.
    pub agent_to_ready_s: u64,
    /// Shutdown requested → the BMC shows Off.
    pub power_off_s: u64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            power_on_s: 120,
            boot_to_agent_s: 900,
            agent_to_ready_s: 600,
            power_off_s: 600,
        }
    }
}

/// What the loop observed of a node this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observation {
    /// The BMC's power state (`None`: not read, or unreadable).
    pub bmc_on: Option<bool>,
    /// The agent has registered since the node last powered on.
    pub agent_up: bool,
    /// The Kubernetes node's Ready condition is True.
    pub kube_ready: bool,
    /// Pods bound to the node.
    pub pods: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLife {
    pub stage: Stage,
    /// When the node entered `stage` (seconds since the epoch).
    pub since: u64,
    /// Why it failed, or what moved it (for `accordctl status`).
    pub reason: Option<String>,
}

/// What a step did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub from: Stage,
    pub to: Stage,
    pub reason: String,
}

impl NodeLife {
    pub fn new(stage: Stage, now: u64) -> NodeLife {
        NodeLife {
            stage,
            since: now,
            reason: None,
        }
    }

    fn go(&mut self, to: Stage, now: u64, reason: String, out: &mut Vec<Transition>) {
        out.push(Transition {
            from: self.stage,
            to,
            reason: reason.clone(),
        });
        self.stage = to;
        self.since = now;
        self.reason = Some(reason);
    }

    /// The loop asked the BMC to power the node on.
    pub fn power_on_requested(&mut self, now: u64) -> Vec<Transition> {
        let mut out = Vec::new();
        if matches!(self.stage, Stage::Off | Stage::Failed | Stage::PoweringOff) {
            self.go(
                Stage::PoweringOn,
                now,
                "power-on requested".into(),
                &mut out,
            );
        }
        out
    }

    /// The loop asked the BMC to power the node off.
    pub fn power_off_requested(&mut self, now: u64) -> Vec<Transition> {
        let mut out = Vec::new();
        if self.stage != Stage::Off && self.stage != Stage::PoweringOff {
            self.go(
                Stage::PoweringOff,
                now,
                "power-off requested".into(),
                &mut out,
            );
        }
        out
    }

    /// The executor reported that a power action failed (the BMC refused,
    /// or the change never showed): the node fails at once with the
    /// reason, rather than waiting out its deadline.
    pub fn fail(&mut self, now: u64, reason: String) -> Vec<Transition> {
        let mut out = Vec::new();
        if self.stage != Stage::Failed {
            self.go(Stage::Failed, now, reason, &mut out);
        }
        out
    }

    /// Advances on what was observed; a step that misses its deadline
    /// fails the node with the reason.
    pub fn observe(&mut self, obs: &Observation, now: u64, d: &Deadlines) -> Vec<Transition> {
        let mut out = Vec::new();
        // Each pass moves at most one stage per observation it uses, so a
        // node seen fully up jumps Booting → AgentUp → Ready in one round.
        for _ in 0..6 {
            let before = out.len();
            let waited = now.saturating_sub(self.since);
            match self.stage {
                Stage::Off if obs.bmc_on == Some(true) => self.go(
                    Stage::Booting,
                    now,
                    "BMC shows On (powered on outside Accord)".into(),
                    &mut out,
                ),
                Stage::PoweringOn if obs.bmc_on == Some(true) => {
                    self.go(Stage::Booting, now, "BMC shows On".into(), &mut out)
                }
                Stage::PoweringOn if waited > d.power_on_s => self.go(
                    Stage::Failed,
                    now,
                    format!("power-on not seen by the BMC within {} s", d.power_on_s),
                    &mut out,
                ),
                Stage::Booting if obs.agent_up => {
                    self.go(Stage::AgentUp, now, "agent registered".into(), &mut out)
                }
                Stage::Booting if waited > d.boot_to_agent_s => self.go(
                    Stage::Failed,
                    now,
                    format!("no agent within {} s of power-on", d.boot_to_agent_s),
                    &mut out,
                ),
                Stage::AgentUp if obs.kube_ready => {
                    self.go(Stage::Ready, now, "Kubernetes node Ready".into(), &mut out)
                }
                Stage::AgentUp if waited > d.agent_to_ready_s => self.go(
                    Stage::Failed,
                    now,
                    format!(
                        "node not Ready within {} s of its agent",
                        d.agent_to_ready_s
                    ),
                    &mut out,
                ),
                Stage::Ready | Stage::Idle if obs.pods > 0 => self.go(
                    Stage::InUse,
                    now,
                    format!("{} pod(s) bound", obs.pods),
                    &mut out,
                ),
                Stage::Ready if obs.pods == 0 && self.since < now => {
                    self.go(Stage::Idle, now, "no pods".into(), &mut out)
                }
                Stage::InUse if obs.pods == 0 => {
                    self.go(Stage::Idle, now, "last pod gone".into(), &mut out)
                }
                Stage::Booting | Stage::AgentUp | Stage::Ready | Stage::InUse | Stage::Idle
                    if obs.bmc_on == Some(false) =>
                {
                    self.go(
                        Stage::Off,
                        now,
                        "BMC shows Off (powered off outside Accord)".into(),
                        &mut out,
                    )
                }
                // A node failed for a missed deadline that comes up after
                // all (a slow BMC or boot) is usable again.
                Stage::Failed if obs.agent_up && obs.kube_ready => self.go(
                    Stage::Ready,
                    now,
                    "came up after failing: agent and Kubernetes node up".into(),
                    &mut out,
                ),
                Stage::PoweringOff if obs.bmc_on == Some(false) => {
                    self.go(Stage::Off, now, "BMC shows Off".into(), &mut out)
                }
                Stage::PoweringOff if waited > d.power_off_s => self.go(
                    Stage::Failed,
                    now,
                    format!("power-off not seen by the BMC within {} s", d.power_off_s),
                    &mut out,
                ),
                _ => {}
            }
            if out.len() == before {
                break;
            }
        }
        out
    }

    /// How the planner sees the node: nodes on their way up count as
    /// committed (powering on), so the next round does not power on more
    /// for the same pods; a failed node is never used.
    pub fn planner_power(&self) -> (PowerState, bool) {
        let power = match self.stage {
            Stage::Off | Stage::Failed => PowerState::Off,
            Stage::PoweringOn | Stage::Booting | Stage::AgentUp => PowerState::PoweringOn,
            Stage::Ready | Stage::InUse | Stage::Idle => PowerState::On,
            Stage::PoweringOff => PowerState::PoweringOff,
        };
        (power, self.stage == Stage::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(bmc_on: Option<bool>, agent_up: bool, kube_ready: bool, pods: u32) -> Observation {
        Observation {
            bmc_on,
            agent_up,
            kube_ready,
            pods,
        }
    }

    #[test]
    fn dark_to_serving_and_back() {
        let d = Deadlines::default();
        let mut n = NodeLife::new(Stage::Off, 0);
        assert_eq!(n.power_on_requested(10).len(), 1);
        assert_eq!(n.planner_power(), (PowerState::PoweringOn, false));
        assert!(n
            .observe(&obs(Some(false), false, false, 0), 20, &d)
            .is_empty());
        n.observe(&obs(Some(true), false, false, 0), 40, &d);
        assert_eq!(n.stage, Stage::Booting);
        assert_eq!(
            n.planner_power().0,
            PowerState::PoweringOn,
            "booting counts as committed"
        );
        n.observe(&obs(Some(true), true, false, 0), 300, &d);
        assert_eq!(n.stage, Stage::AgentUp);
        n.observe(&obs(Some(true), true, true, 4), 320, &d);
        assert_eq!(
            n.stage,
            Stage::InUse,
            "Ready with pods bound is in use at once"
        );
        n.observe(&obs(Some(true), true, true, 0), 900, &d);
        assert_eq!((n.stage, n.since), (Stage::Idle, 900));
        n.power_off_requested(1600);
        n.observe(&obs(Some(false), false, false, 0), 1650, &d);
        assert_eq!(n.stage, Stage::Off);
    }

    #[test]
    fn each_missed_deadline_fails_with_its_reason() {
        let d = Deadlines::default();
        let mut n = NodeLife::new(Stage::Off, 0);
        n.power_on_requested(0);
        n.observe(&obs(Some(false), false, false, 0), 120, &d);
        assert_eq!(n.stage, Stage::PoweringOn, "at the deadline, not past it");
        n.observe(&obs(Some(false), false, false, 0), 121, &d);
        assert_eq!(n.stage, Stage::Failed);
        assert_eq!(
            n.reason.as_deref(),
            Some("power-on not seen by the BMC within 120 s")
        );
        assert_eq!(n.planner_power(), (PowerState::Off, true));

        let mut n = NodeLife::new(Stage::Booting, 0);
        n.observe(&obs(Some(true), false, false, 0), 901, &d);
        assert_eq!(
            n.reason.as_deref(),
            Some("no agent within 900 s of power-on")
        );

        let mut n = NodeLife::new(Stage::AgentUp, 0);
        n.observe(&obs(Some(true), true, false, 0), 601, &d);
        assert_eq!(
            n.reason.as_deref(),
            Some("node not Ready within 600 s of its agent")
        );

        // A failed node can be tried again.
        assert_eq!(n.power_on_requested(700)[0].to, Stage::PoweringOn);

        // One that comes up after failing is usable again.
        let mut n = NodeLife::new(Stage::Failed, 0);
        assert!(n
            .observe(&obs(Some(true), false, false, 0), 5, &d)
            .is_empty());
        n.observe(&obs(Some(true), true, true, 0), 10, &d);
        assert_eq!(n.stage, Stage::Ready);
    }

    #[test]
    fn changes_made_outside_accord_are_followed() {
        let d = Deadlines::default();
        let mut n = NodeLife::new(Stage::Off, 0);
        let t = n.observe(&obs(Some(true), true, true, 0), 10, &d);
        let path: Vec<Stage> = t.iter().map(|t| t.to).collect();
        assert_eq!(path, [Stage::Booting, Stage::AgentUp, Stage::Ready]);
        let mut n = NodeLife::new(Stage::InUse, 0);
        n.observe(&obs(Some(false), false, false, 0), 10, &d);
        assert_eq!(n.stage, Stage::Off);
        assert!(n.reason.unwrap().contains("outside Accord"));
    }
}
