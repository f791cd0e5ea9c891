//! `accord-sim`: what a policy would have done to a demand trace. Runs
//! accordd's own decider (`accord_decide::Decider`: planner, lifecycles
//! and every other rule) in virtual time over a fleet and a trace
//! ([`engine`]), with boot and BMC delays drawn from a seeded
//! generator, for one or more policies side by side; measures
//! ([`figures`]) and draws ([`report`]) the result. Pure like the core:
//! the caller reads the files and writes the output.

pub mod engine;
pub mod figures;
pub mod openb;
pub mod report;
pub mod rng;
pub mod trace;

use accord::config_file::ConfigFileError;
use accord::fleet::{Fleet, Policy};

pub use engine::World;
pub use figures::Figures;
pub use trace::{Job, Trace};

/// The embedded default fleet: six racks, 40 nodes, all dark.
pub const DEFAULT_FLEET: &str = include_str!("default-fleet.toml");

/// After the trace's last arrival or departure, the simulation goes on
/// this long: idle nodes power off, late starts are counted.
pub const DRAIN_S: u64 = 3600;

/// Policies side by side at most (each is a whole run).
pub const MAX_POLICIES: usize = 16;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Input {
    pub fleet: Fleet,
    /// Where the fleet came from, for the report.
    pub fleet_source: String,
    pub trace: Trace,
    pub trace_source: String,
    /// `(name, policy)`, in report order.
    pub policies: Vec<(String, Policy)>,
    pub seed: u64,
    pub world: World,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("policy file {file}")]
    Policy {
        file: String,
        #[source]
        source: ConfigFileError,
    },
    #[error("policy file {file}: {what}")]
    PolicyInvalid { file: String, what: String },
    #[error("{count} policies, more than the limit of {MAX_POLICIES}")]
    TooManyPolicies { count: usize },
    #[error("two policies named {name:?}")]
    DuplicatePolicy { name: String },
    #[error("policy name {name:?}: use 1 to 40 letters, digits, '-', '_' or '.'")]
    PolicyName { name: String },
}

/// The embedded default fleet, built.
pub fn default_fleet() -> Fleet {
    // The file is part of the binary and a test builds it: it is valid.
    Fleet::from_toml(DEFAULT_FLEET, "embedded default fleet", &mut |_| {
        Err("the embedded default fleet names no hardware files".into())
    })
    .unwrap_or_else(|e| panic!("embedded default fleet: {e}"))
}

/// A policy file: the keys of a fleet file's `[policy]` table, at the top
/// level. Keys it leaves out keep `base`'s value (the fleet's policy).
pub fn policy_from_toml(
    text: &str,
    file: &str,
    base: &Policy,
    fleet: &Fleet,
) -> Result<Policy, SimError> {
    let bad = |source| SimError::Policy {
        file: file.to_owned(),
        source,
    };
    // Strict first, for located errors (unknown keys, wrong types).
    let _: Policy = accord::config_file::parse(text, file).map_err(bad)?;
    let overrides: toml::Table = accord::config_file::parse(text, file).map_err(bad)?;
    let invalid = |what: String| SimError::PolicyInvalid {
        file: file.to_owned(),
        what,
    };
    let mut merged = toml::Table::try_from(base).map_err(|e| invalid(e.to_string()))?;
    merged.extend(overrides);
    let policy: Policy = merged
        .try_into()
        .map_err(|e: toml::de::Error| invalid(e.to_string()))?;
    if let Some(problem) = policy.validate().into_iter().next() {
        return Err(invalid(problem));
    }
    for profile in policy.warm_spares_per_profile.keys() {
        if !fleet
            .nodes
            .iter()
            .any(|n| n.profile.as_deref() == Some(profile.as_str()))
        {
            return Err(invalid(format!(
                "warm_spares_per_profile names profile {profile:?}, which no node of the fleet has"
            )));
        }
    }
    Ok(policy)
}

/// Checks a policy's name for the report and the JSON.
pub fn check_policy_names(names: &[&str]) -> Result<(), SimError> {
    if names.len() > MAX_POLICIES {
        return Err(SimError::TooManyPolicies { count: names.len() });
    }
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        let ok = (1..=40).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(SimError::PolicyName {
                name: (*name).to_owned(),
            });
        }
        if !seen.insert(*name) {
            return Err(SimError::DuplicatePolicy {
                name: (*name).to_owned(),
            });
        }
    }
    Ok(())
}

/// When the run stops: the trace's last arrival or departure, plus
/// [`DRAIN_S`].
pub fn horizon_s(trace: &Trace) -> u64 {
    trace
        .jobs
        .iter()
        .map(|j| j.submit_s.saturating_add(j.run_s.unwrap_or(0)))
        .max()
        .unwrap_or(0)
        .saturating_add(DRAIN_S)
}

/// Runs every policy (in parallel, one thread each up to the machine's
/// cores; each run is deterministic on its own) and gathers the figures.
pub fn simulate(input: &Input) -> Figures {
    let horizon = horizon_s(&input.trace);
    let run = |(name, policy): &(String, Policy)| {
        engine::run(
            &input.fleet,
            &input.trace,
            name,
            policy,
            input.seed,
            &input.world,
            horizon,
        )
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut policies = Vec::with_capacity(input.policies.len());
    for chunk in input.policies.chunks(threads.max(1)) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk.iter().map(|p| s.spawn(move || run(p))).collect();
            for h in handles {
                match h.join() {
                    Ok(f) => policies.push(f),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        });
    }
    Figures {
        seed: input.seed,
        inputs: figures::Inputs {
            fleet: input.fleet_source.clone(),
            trace: input.trace_source.clone(),
            nodes: input.fleet.nodes.len(),
            gpus: input.fleet.nodes.iter().map(|n| n.gpus.len() as u64).sum(),
            workloads: input.trace.jobs.len(),
            horizon_s: horizon,
            round_s: input.world.round_s,
            bmc_delay_s: input.world.bmc_delay_s,
            boot_delay_s: input.world.boot_delay_s,
        },
        policies,
    }
}
