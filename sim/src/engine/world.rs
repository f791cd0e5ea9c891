//! The stand-in datacenter around the decider: machines behind BMCs that
//! land power changes after a drawn delay and boot (agent up, then Ready)
//! after another, and agents that carry out MIG commands and report the
//! result. Physics only: what to power, repartition or bind is the
//! decider's (and the stand-in scheduler's, in `engine`).

use std::collections::BTreeMap;
use std::time::Duration;

use accord::fleet::{Fleet, PowerState};
use accord::hardware::{BiosSeen, NodeHardware};
use accord::plan::Action;
use accord_api::agent::{CommandRecord, CommandResult, CommandState};
use accord_decide::{BiosRead, Decision, Executed, Snapshot};

use super::{close_on_interval, Totals, World};
use crate::rng::SplitMix;

/// The machine behind one node, as the world keeps it.
#[derive(Debug, Clone)]
pub(super) struct Machine {
    pub name: String,
    pub bmc_on: bool,
    /// A power change on its way: (lands at, on?).
    pub bmc_change: Option<(u64, bool)>,
    pub agent_up_at: u64,
    pub ready_at: u64,
    pub pods: u32,
    /// Powered on by the simulation (not on from the start).
    pub powered_by_us: bool,
    /// Ran a pod since its last power-on.
    pub used: bool,
    /// Was ever powered off by the simulation (so a power-on is a cycle).
    pub was_off: bool,
    /// BMC On since (for powered hours and energy).
    pub on_since: Option<u64>,
    /// A MIG repartition runs until then: nothing binds on the node.
    pub mig_until: u64,
    pub gpus: u64,
    pub power_kw: f64,
    /// What its agent would report (the declaration, as repartitioned).
    pub model: Option<NodeHardware>,
}

impl Machine {
    pub fn agent_up(&self, t: u64) -> bool {
        self.bmc_on && t >= self.agent_up_at
    }

    pub fn ready(&self, t: u64) -> bool {
        self.bmc_on && t >= self.ready_at
    }
}

/// Every machine, the commands accordd journaled for their agents, and
/// what the next round will read back (power results, BIOS, reports).
pub(super) struct Datacenter {
    pub machines: Vec<Machine>,
    pub index: BTreeMap<String, usize>,
    /// Each node's latest agent command, as accordd's store keeps it.
    commands: BTreeMap<String, CommandRecord>,
    generation: u64,
    executed: Vec<Executed>,
    bios_reads: Vec<BiosRead>,
    reports: BTreeMap<String, NodeHardware>,
    intents: u64,
    rng: SplitMix,
    /// What the last snapshot observed of the machines, kept between
    /// rounds and patched in place (rebuilding five maps of every node's
    /// name each round was an eighth of a simulated day).
    observed: Observed,
    /// Machine indices in name order: the observed maps' order.
    by_name: Vec<usize>,
}

/// The per-machine maps of a [`Snapshot`].
#[derive(Default)]
struct Observed {
    bmc: BTreeMap<String, bool>,
    kube_ready: BTreeMap<String, bool>,
    pods_per_node: BTreeMap<String, u32>,
    agents: BTreeMap<String, u64>,
    agent_reports: BTreeMap<String, u64>,
}

impl Datacenter {
    pub fn new(fleet: &Fleet, seed: u64) -> Datacenter {
        let machines: Vec<Machine> = fleet
            .nodes
            .iter()
            .map(|n| {
                let on = n.power == PowerState::On;
                Machine {
                    name: n.name.clone(),
                    bmc_on: on,
                    bmc_change: None,
                    agent_up_at: 0,
                    ready_at: 0,
                    pods: 0,
                    powered_by_us: false,
                    used: false,
                    was_off: false,
                    on_since: on.then_some(0),
                    mig_until: 0,
                    gpus: n.gpus.len() as u64,
                    power_kw: n.power_kw,
                    model: fleet.declared_hardware(&n.name).cloned(),
                }
            })
            .collect();
        let index = machines
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        let mut by_name: Vec<usize> = (0..machines.len()).collect();
        by_name.sort_by(|&a, &b| machines[a].name.cmp(&machines[b].name));
        Datacenter {
            machines,
            index,
            observed: Observed::default(),
            by_name,
            commands: BTreeMap::new(),
            generation: 0,
            executed: Vec::new(),
            bios_reads: Vec::new(),
            reports: BTreeMap::new(),
            intents: 0,
            rng: SplitMix::new(seed),
        }
    }

    /// The world moves to `t`: BMCs land their changes (their power
    /// results go back to the decider), agents take and finish commands.
    pub fn advance(&mut self, t: u64, world: &World, totals: &mut Totals) {
        for m in &mut self.machines {
            let Some((at, on)) = m.bmc_change else {
                continue;
            };
            if at > t {
                continue;
            }
            m.bmc_change = None;
            if on && !m.bmc_on {
                m.on_since = Some(at);
            }
            if !on && m.bmc_on {
                close_on_interval(m, at, totals);
            }
            m.bmc_on = on;
            if on {
                let boot = self.rng.range(world.boot_delay_s[0], world.boot_delay_s[1]);
                m.agent_up_at = at + boot * 4 / 5;
                m.ready_at = at + boot;
            }
            self.intents += 1;
            self.executed.push(Executed {
                intent: self.intents,
                node: m.name.clone(),
                result: Ok(()),
            });
        }
        for rec in self.commands.values_mut() {
            let Some(&i) = self.index.get(&rec.node) else {
                continue;
            };
            let m = &mut self.machines[i];
            match rec.state {
                CommandState::Open if rec.deliver && m.agent_up(t) => {
                    rec.state = CommandState::Sent { at: t };
                    m.mig_until = t + world.mig_s;
                }
                CommandState::Sent { .. } if t >= m.mig_until => {
                    rec.state = CommandState::Closed {
                        at: t,
                        result: CommandResult::Done,
                    };
                    if let Some(model) = &mut m.model {
                        for target in &rec.targets {
                            let gpu = model.gpus.iter_mut().find(|g| g.index == target.index);
                            if let Some(g) = gpu {
                                let state = g.mig.as_ref().map(|s| s.with_layout(&target.layout));
                                if let Some(Ok(state)) = state {
                                    g.mig = Some(state);
                                }
                            }
                        }
                        self.reports.insert(rec.node.clone(), model.clone());
                    }
                    totals.summary.mig_reconfigurations += 1;
                }
                _ => {}
            }
        }
    }

    /// What accordd's *observe* would gather now (demand aside). Give
    /// the snapshot back with [`Datacenter::take_back`] after the round.
    pub fn snapshot(&mut self, t: u64) -> Snapshot {
        let mut o = std::mem::take(&mut self.observed);
        self.observe(&mut o, t);
        Snapshot {
            now: t,
            mono: Duration::from_secs(t),
            executed: std::mem::take(&mut self.executed),
            bios_reads: std::mem::take(&mut self.bios_reads),
            reports: std::mem::take(&mut self.reports),
            commands: self.commands.values().cloned().collect(),
            bmc: o.bmc,
            kube_ready: o.kube_ready,
            pods_per_node: o.pods_per_node,
            agents: o.agents,
            agent_reports: o.agent_reports,
            ..Snapshot::default()
        }
    }

    /// Keeps the observed maps of `snap` for the next round; its demand
    /// back to the caller.
    pub fn take_back(&mut self, snap: Snapshot) -> accord::demand::Demand {
        self.observed = Observed {
            bmc: snap.bmc,
            kube_ready: snap.kube_ready,
            pods_per_node: snap.pods_per_node,
            agents: snap.agents,
            agent_reports: snap.agent_reports,
        };
        snap.demand
    }

    /// `o` as the machines are at `t`: values patched in place where the
    /// maps hold the names they should, rebuilt where not (the first
    /// round; an agent come up or gone).
    fn observe(&self, o: &mut Observed, t: u64) {
        let in_order = || self.by_name.iter().map(|&i| &self.machines[i]);
        let all_known = o.bmc.len() == self.machines.len()
            && o.kube_ready.len() == self.machines.len()
            && o.pods_per_node.len() == self.machines.len();
        if all_known {
            let maps = o.bmc.iter_mut().zip(o.kube_ready.values_mut());
            let maps = maps.zip(o.pods_per_node.values_mut());
            for (m, (((name, bmc), ready), pods)) in in_order().zip(maps) {
                debug_assert_eq!(name, &m.name);
                *bmc = m.bmc_on;
                *ready = m.ready(t);
                *pods = m.pods;
            }
        } else {
            o.bmc = in_order().map(|m| (m.name.clone(), m.bmc_on)).collect();
            o.kube_ready = in_order().map(|m| (m.name.clone(), m.ready(t))).collect();
            o.pods_per_node = in_order().map(|m| (m.name.clone(), m.pods)).collect();
        }
        let up = || in_order().filter(|m| m.agent_up(t));
        let same_agents = up().count() == o.agents.len()
            && o.agents.len() == o.agent_reports.len()
            && up().zip(o.agents.keys()).all(|(m, name)| m.name == *name);
        if same_agents {
            for ((m, seen), report) in up()
                .zip(o.agents.values_mut())
                .zip(o.agent_reports.values_mut())
            {
                *seen = t;
                *report = m.agent_up_at;
            }
        } else {
            o.agents = up().map(|m| (m.name.clone(), t)).collect();
            o.agent_reports = up().map(|m| (m.name.clone(), m.agent_up_at)).collect();
        }
    }

    /// Carries out what the decision sends: power actions (counted),
    /// commands journaled and closed, BIOS read back (as staged: the
    /// simulation has no BMC inventory to differ from). The decision is
    /// taken apart whole, as accordd's *effect* does: a new effect does
    /// not compile until the simulator says what it makes of it.
    pub fn apply(&mut self, d: &Decision, t: u64, world: &World, totals: &mut Totals) {
        let Decision {
            power,
            commands,
            bios,
            // Kubernetes writes: the stand-in scheduler reads the status
            // (`engine`), no API server keeps them.
            events: _,
            conditions: _,
            buffer_status: _,
            publish: _,
            dark: _,
            // Read by `engine` for what binds and when to look again,
            // and which running jobs stop (the pods evicted).
            status: _,
            evictions: _,
            transitional: _,
            // accordd's store and metrics: the decider's own memory
            // carries the simulation from round to round.
            metrics: _,
            views_changed: _,
            lives_changed: _,
            bookings: _,
            said: _,
            // No admin asks anything of a simulation.
            admin_replies: _,
            requested: _,
        } = d;
        for a in power {
            let Some(&i) = self.index.get(a.node()) else {
                continue;
            };
            let delay = self.rng.range(world.bmc_delay_s[0], world.bmc_delay_s[1]);
            let m = &mut self.machines[i];
            match a {
                Action::PowerOn { .. } => {
                    m.bmc_change = Some((t + delay, true));
                    totals.summary.power_ons += 1;
                    if m.was_off {
                        totals.summary.power_cycles += 1;
                    }
                    m.powered_by_us = true;
                    m.used = false;
                }
                Action::PowerOff { .. } => {
                    m.bmc_change = Some((t + delay + world.shutdown_s, false));
                    totals.summary.power_offs += 1;
                    if m.powered_by_us && !m.used {
                        totals.summary.unused_power_ons += 1;
                    }
                    m.was_off = true;
                }
                _ => {}
            }
        }
        for rec in &commands.open {
            self.generation += 1;
            let mut rec = rec.clone();
            rec.generation = self.generation;
            rec.state = CommandState::Open;
            self.commands.insert(rec.node.clone(), rec);
        }
        for (node, generation, result) in &commands.close {
            if let Some(rec) = self.commands.get_mut(node) {
                if rec.generation == *generation && rec.is_open() {
                    rec.state = CommandState::Closed {
                        at: t,
                        result: result.clone(),
                    };
                }
            }
        }
        for (node, generation) in &commands.release {
            if let Some(rec) = self.commands.get_mut(node) {
                if rec.generation == *generation {
                    rec.deliver = true;
                }
            }
        }
        for c in &bios.checks {
            self.bios_reads.push(BiosRead {
                node: c.node.clone(),
                profile: c.profile.clone(),
                result: Ok(BiosSeen::default()),
            });
        }
    }

    /// Whether anything the decider waits on is open (a command).
    pub fn commands_open(&self) -> bool {
        self.commands.values().any(CommandRecord::is_open)
    }
}
