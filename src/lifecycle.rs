//! A node's lifecycle as the control loop tracks it, from dark to serving
//! and back: Off → PoweringOn → Booting (the BMC shows On) → AgentUp (the
//! agent registered) → Ready (the Kubernetes node is Ready) → InUse ⇄ Idle
//! → PoweringOff → Off, and Failed with a reason when a step misses its
//! deadline; a node that was up and whose Kubernetes node is NotReady or
//! whose agent is silent for `unhealthy_after_s` is Unhealthy (not used
//! for planning) until both are back. Pure: observations and the time in, the next state and what
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
    /// Was up; its Kubernetes node has been NotReady, or its agent silent,
    /// for longer than `unhealthy_after_s`.
    Unhealthy,
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
    /// A node that is up (Ready, InUse, Idle) whose Kubernetes node is
    /// NotReady, or whose agent is silent, this long is Unhealthy.
    pub unhealthy_after_s: u64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            power_on_s: 120,
            boot_to_agent_s: 900,
            agent_to_ready_s: 600,
            power_off_s: 600,
            unhealthy_after_s: 300,
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
    /// The agent was heard from recently (its heartbeats are not stale).
    pub agent_alive: bool,
    /// An admin cordoned the node: maintenance, not a fault. It does not
    /// turn Unhealthy, nor fail for want of a Ready Node.
    pub cordoned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLife {
    pub stage: Stage,
    /// When the node entered `stage` (seconds since the epoch).
    pub since: u64,
    /// Why it failed, or what moved it (for `accordctl status`).
    pub reason: Option<String>,
    /// Since when a node that is up has looked unwell (Kubernetes node not
    /// Ready, or agent silent); `None` while it looks well.
    #[serde(default)]
    pub unwell_since: Option<u64>,
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
            unwell_since: None,
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
        if !matches!(
            to,
            Stage::Ready | Stage::InUse | Stage::Idle | Stage::Unhealthy
        ) {
            self.unwell_since = None;
        }
    }

    /// The loop asked the BMC to power the node on.
    pub fn power_on_requested(&mut self, now: u64) -> Vec<Transition> {
        let mut out = Vec::new();
        if matches!(
            self.stage,
            Stage::Off | Stage::Failed | Stage::PoweringOff | Stage::Unhealthy
        ) {
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
        // A node that is up: how long has it looked unwell?
        // A cordoned node's state is the admin's business: never unwell.
        let well = (obs.kube_ready && obs.agent_alive) || obs.cordoned;
        if matches!(self.stage, Stage::Ready | Stage::InUse | Stage::Idle) {
            if well {
                self.unwell_since = None;
            } else {
                self.unwell_since.get_or_insert(now);
            }
        }

        // Each pass moves at most one stage per observation it uses, so a
        // node seen fully up jumps Booting → AgentUp → Ready in one round.
        for _ in 0..6 {
            let before = out.len();
            let waited = now.saturating_sub(self.since);
            let unwell_for = self.unwell_since.map(|t| now.saturating_sub(t));
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
                Stage::AgentUp if waited > d.agent_to_ready_s && !obs.cordoned => self.go(
                    Stage::Failed,
                    now,
                    format!(
                        "node not Ready within {} s of its agent",
                        d.agent_to_ready_s
                    ),
                    &mut out,
                ),
                Stage::Ready | Stage::InUse | Stage::Idle
                    if obs.bmc_on != Some(false)
                        && unwell_for.is_some_and(|t| t > d.unhealthy_after_s) =>
                {
                    let what = match (obs.kube_ready, obs.agent_alive) {
                        (false, false) => "Kubernetes node NotReady and agent silent",
                        (false, true) => "Kubernetes node NotReady",
                        _ => "agent silent",
                    };
                    self.go(
                        Stage::Unhealthy,
                        now,
                        format!("{what} for more than {} s", d.unhealthy_after_s),
                        &mut out,
                    )
                }
                Stage::Unhealthy if obs.bmc_on == Some(false) => {
                    self.go(Stage::Off, now, "BMC shows Off".into(), &mut out)
                }
                Stage::Unhealthy if well => {
                    self.unwell_since = None;
                    self.go(
                        Stage::Ready,
                        now,
                        "healthy again: Kubernetes node Ready and agent heard".into(),
                        &mut out,
                    )
                }
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
    /// for the same pods; a failed or unhealthy node is never used (an
    /// unhealthy one is on, and not capacity).
    pub fn planner_power(&self) -> (PowerState, bool) {
        let power = match self.stage {
            Stage::Off | Stage::Failed => PowerState::Off,
            Stage::PoweringOn | Stage::Booting | Stage::AgentUp => PowerState::PoweringOn,
            Stage::Ready | Stage::InUse | Stage::Idle | Stage::Unhealthy => PowerState::On,
            Stage::PoweringOff => PowerState::PoweringOff,
        };
        (
            power,
            matches!(self.stage, Stage::Failed | Stage::Unhealthy),
        )
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
            agent_alive: agent_up,
            cordoned: false,
        }
    }

    #[test]
    fn a_cordoned_node_is_never_unhealthy_nor_failed_for_want_of_a_ready_node() {
        let d = Deadlines {
            unhealthy_after_s: 60,
            agent_to_ready_s: 60,
            ..Deadlines::default()
        };
        let cordoned_notready = Observation {
            bmc_on: Some(true),
            agent_up: true,
            agent_alive: true,
            kube_ready: false,
            pods: 0,
            cordoned: true,
        };
        let mut up = NodeLife::new(Stage::Idle, 0);
        for t in [100, 200, 1000] {
            assert!(up.observe(&cordoned_notready, t, &d).is_empty(), "{t}");
        }
        assert_eq!(up.stage, Stage::Idle);
        let mut coming = NodeLife::new(Stage::AgentUp, 0);
        assert!(coming.observe(&cordoned_notready, 1000, &d).is_empty());
        assert_eq!(coming.stage, Stage::AgentUp);
        // Uncordoned and still NotReady: the deadlines count again.
        let plain = Observation {
            cordoned: false,
            ..cordoned_notready
        };
        assert_eq!(coming.observe(&plain, 1001, &d)[0].to, Stage::Failed);
    }

    #[test]
    fn a_node_that_was_up_and_stops_answering_is_unhealthy_until_it_answers_again() {
        let d = Deadlines {
            unhealthy_after_s: 60,
            ..Deadlines::default()
        };
        let mut n = NodeLife::new(Stage::InUse, 0);
        // NotReady, agent still heard: unwell from 100.
        let notready = Observation {
            bmc_on: Some(true),
            agent_up: true,
            agent_alive: true,
            kube_ready: false,
            pods: 2,
            cordoned: false,
        };
        assert!(n.observe(&notready, 100, &d).is_empty());
        assert!(n.observe(&notready, 160, &d).is_empty(), "at the limit");
        let t = n.observe(&notready, 161, &d);
        assert_eq!(t[0].to, Stage::Unhealthy);
        assert_eq!(
            n.reason.as_deref(),
            Some("Kubernetes node NotReady for more than 60 s")
        );
        assert_eq!(n.planner_power(), (PowerState::On, true), "not capacity");
        // A blip shorter than the limit is nothing.
        let mut m = NodeLife::new(Stage::Idle, 0);
        let silent = Observation {
            agent_alive: false,
            kube_ready: true,
            pods: 0,
            ..notready
        };
        m.observe(&silent, 10, &d);
        m.observe(&obs(Some(true), true, true, 0), 50, &d);
        m.observe(&silent, 100, &d);
        assert!(m.observe(&silent, 150, &d).is_empty());
        assert_eq!(m.stage, Stage::Idle);
        m.observe(&silent, 161, &d);
        assert_eq!(m.stage, Stage::Unhealthy);
        assert_eq!(m.reason.as_deref(), Some("agent silent for more than 60 s"));
        // Both back: Ready again (and then in use or idle as usual).
        let t = n.observe(&obs(Some(true), true, true, 2), 200, &d);
        let path: Vec<Stage> = t.iter().map(|t| t.to).collect();
        assert_eq!(path, [Stage::Ready, Stage::InUse]);
        assert_eq!(n.unwell_since, None);
        // An unhealthy node powered off is Off; it can be powered on again.
        m.power_off_requested(300);
        m.observe(&obs(Some(false), false, false, 0), 310, &d);
        assert_eq!(m.stage, Stage::Off);
        assert_eq!(m.unwell_since, None);
        let mut u = NodeLife::new(Stage::Unhealthy, 0);
        assert_eq!(u.power_on_requested(5)[0].to, Stage::PoweringOn);
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
