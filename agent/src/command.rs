//! accordd's commands to the agent (in the answer to a heartbeat or a
//! report): which NVML they go to, and each generation carried out once.
//! An outcome is cut to what accordd accepts in a report before it is
//! kept (`daemon/src/api/limits.rs`): one accordd refused would hold up
//! every report after it.

use std::path::PathBuf;

use accord::hardware::NodeHardware;
use accord_api::agent::{AgentCommand, CommandAction, CommandOutcome, CommandResult};
use tracing::{debug, info, warn};

use crate::mig::replay::ReplayedGpus;
use crate::mig::ApplyOptions;
use crate::run::AgentConfig;

/// Where the agent's MIG commands go, and where its NVML view comes from.
#[derive(Debug, Clone)]
pub enum MigBackend {
    /// The host's driver: live discovery, [`crate::mig::nvml::LiveMig`].
    Live,
    /// A replayed machine's twin: commands change it and discovery reads
    /// its current snapshot (not the file again).
    Replayed {
        gpus: ReplayedGpus,
        hwloc_xml: PathBuf,
        /// The recorded snapshot the twin started from (the model's
        /// `discovery.nvml.origin`).
        origin: PathBuf,
    },
    /// No NVML to command; the reason, starting `NVML not available`.
    Unavailable(String),
}

impl MigBackend {
    /// Discovers the machine: the twin's snapshot through the same merge as
    /// a snapshot file, else [`crate::discover`] on `sources`. Blocking.
    pub fn discover(&self, sources: crate::Sources<'_>) -> crate::error::Result<NodeHardware> {
        match self {
            MigBackend::Replayed {
                gpus,
                hwloc_xml,
                origin,
            } => crate::discover_replayed(hwloc_xml, &gpus.snapshot(), origin),
            _ => crate::discover(sources),
        }
    }

    /// Carries out one action. Blocking (NVML): run it off the runtime.
    pub fn carry_out(&self, action: &CommandAction, opts: &ApplyOptions) -> CommandResult {
        let targets = match action {
            CommandAction::Rediscover => return CommandResult::Done,
            CommandAction::ApplyMig { gpus } => gpus,
        };
        match self {
            MigBackend::Live => match crate::mig::nvml::LiveMig::open() {
                Ok(mut nvml) => crate::mig::apply(&mut nvml, targets, opts),
                Err(reason) => CommandResult::Failed {
                    reason: format!("NVML not available: {reason}"),
                },
            },
            MigBackend::Replayed { gpus, .. } => gpus.apply(targets, opts),
            MigBackend::Unavailable(reason) => CommandResult::Failed {
                reason: reason.clone(),
            },
        }
    }
}

/// GPUs named in an outcome: accordd takes reports of at most 64 GPUs
/// (`max::GPUS`).
pub(crate) const MAX_OUTCOME_GPUS: usize = 64;
/// Processes named per busy GPU: accordd takes at most 1024
/// (`max::PIDS_PER_GPU`).
pub(crate) const MAX_OUTCOME_PIDS: usize = 1024;
/// Bytes of a failure's reason, "…" included: accordd takes strings of up
/// to 4 KiB; a reason is one line for a person.
pub(crate) const MAX_REASON_BYTES: usize = 1024;

/// `result` within what accordd accepts: the first GPUs and the lowest
/// pids of each (enough to say who holds a GPU), a reason cut on a
/// character boundary and ended with "…".
pub(crate) fn fit_outcome(result: CommandResult) -> CommandResult {
    match result {
        CommandResult::Busy { mut gpus } => {
            let named = gpus.len();
            gpus.truncate(MAX_OUTCOME_GPUS);
            for g in &mut gpus {
                if g.pids.len() > MAX_OUTCOME_PIDS {
                    warn!(
                        gpu = g.index,
                        pids = g.pids.len(),
                        "a busy GPU's processes cut to the first {MAX_OUTCOME_PIDS} in the outcome"
                    );
                    g.pids.sort_unstable();
                    g.pids.truncate(MAX_OUTCOME_PIDS);
                }
            }
            if named > MAX_OUTCOME_GPUS {
                warn!(
                    gpus = named,
                    "busy GPUs cut to the first {MAX_OUTCOME_GPUS} in the outcome"
                );
            }
            CommandResult::Busy { gpus }
        }
        CommandResult::ResetRequired { mut gpus } => {
            gpus.truncate(MAX_OUTCOME_GPUS);
            CommandResult::ResetRequired { gpus }
        }
        CommandResult::Failed { reason } if reason.len() > MAX_REASON_BYTES => {
            const MORE: &str = "…";
            let mut end = MAX_REASON_BYTES - MORE.len();
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            CommandResult::Failed {
                reason: format!("{}{MORE}", &reason[..end]),
            }
        }
        other => other,
    }
}

/// The last command carried out, and whether its outcome still has to
/// reach accordd.
#[derive(Debug, Default)]
pub(crate) struct Commands {
    last: Option<CommandOutcome>,
    unsent: bool,
    /// accordd refused a report carrying `last`: it is not sent again,
    /// even when accordd repeats the command (which then times out there).
    refused: bool,
}

impl Commands {
    /// The outcome the next report must carry, if any.
    pub(crate) fn to_send(&self) -> Option<&CommandOutcome> {
        self.last.as_ref().filter(|_| self.unsent)
    }

    /// A report carried `sent`: it has reached accordd.
    pub(crate) fn sent(&mut self, sent: &CommandOutcome) {
        if self.last.as_ref() == Some(sent) {
            self.unsent = false;
        }
    }

    /// accordd refused a report carrying `outcome` for what it carries:
    /// the outcome is dropped, so that the hardware gets through without
    /// it. The generation is still not carried out again.
    pub(crate) fn refused(&mut self, outcome: &CommandOutcome) {
        if self.last.as_ref() == Some(outcome) {
            self.unsent = false;
            self.refused = true;
        }
    }

    /// accordd no longer knows this node (its store was replaced): the
    /// new store numbers commands from 1 again, so the last generation
    /// and its outcome mean nothing there. A generation seen next is
    /// carried out, whatever its number.
    pub(crate) fn forget(&mut self) {
        if let Some(last) = &self.last {
            info!(
                generation = last.generation,
                "accordd does not know this node: forgetting the last command"
            );
        }
        *self = Commands::default();
    }

    /// A command from accordd. The generation carried out last is not
    /// carried out again: seen in a heartbeat's answer, its stored outcome
    /// is sent again (accordd restarted, or lost the report); seen in the
    /// answer to a report, it is the report that just carried it. Another
    /// generation is carried out off the runtime and the machine
    /// discovered again: the hardware after it, when discovery works.
    pub(crate) async fn receive(
        &mut self,
        cmd: AgentCommand,
        in_heartbeat: bool,
        backend: &MigBackend,
        config: &AgentConfig,
    ) -> Option<NodeHardware> {
        if let Some(last) = self
            .last
            .as_ref()
            .filter(|l| l.generation == cmd.generation)
        {
            if in_heartbeat && !self.unsent && !self.refused {
                info!(generation = cmd.generation, result = %last.result.describe(), "accordd sent the last command again: answering with its outcome");
                self.unsent = true;
            } else {
                debug!(
                    generation = cmd.generation,
                    "the last command again: already answered"
                );
            }
            return None;
        }
        let what = match &cmd.action {
            CommandAction::ApplyMig { gpus } => {
                format!("apply MIG layouts on {} GPU(s)", gpus.len())
            }
            CommandAction::Rediscover => "discover again".to_owned(),
        };
        info!(generation = cmd.generation, command = %what, "command from accordd");
        let b = backend.clone();
        let action = cmd.action.clone();
        let config = config.clone();
        let opts = ApplyOptions {
            allow_gpu_reset: config.mig.allow_gpu_reset,
        };
        let work = tokio::task::spawn_blocking(move || {
            let result = b.carry_out(&action, &opts);
            let hw = b.discover(config.sources()).map_err(|e| e.to_string());
            (result, hw)
        });
        let (result, hw) = match work.await {
            Ok(done) => done,
            Err(e) => (
                CommandResult::Failed {
                    reason: format!("the command's task failed: {e}"),
                },
                Err("not run".to_owned()),
            ),
        };
        info!(generation = cmd.generation, result = %result.describe(), "command carried out");
        self.last = Some(CommandOutcome {
            generation: cmd.generation,
            result: fit_outcome(result),
        });
        self.unsent = true;
        self.refused = false;
        match hw {
            Ok(hw) => Some(hw),
            Err(e) => {
                warn!(error = %e, "discovery after the command failed; keeping the last model");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use accord_api::agent::BusyGpu;
    use accordd::api::limits::{self, max};

    use super::*;

    /// The agent's caps are accordd's limits (or below them).
    #[test]
    fn the_caps_are_within_accordds_limits() {
        assert_eq!(MAX_OUTCOME_GPUS, max::GPUS);
        assert_eq!(MAX_OUTCOME_PIDS, max::PIDS_PER_GPU);
        const { assert!(MAX_REASON_BYTES <= max::STRING_BYTES) };
        assert_eq!(crate::mig::nvml::MAX_PROCESSES as usize, max::PIDS_PER_GPU);
    }

    fn accepted(result: &CommandResult) -> Result<(), String> {
        let hw: NodeHardware = serde_json::from_str(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../tests/fixtures/models/h100-8gpu-mig.json"),
            )
            .unwrap(),
        )
        .unwrap();
        limits::check_report(&accord_api::agent::Report {
            agent_version: None,
            hardware: hw,
            command: Some(CommandOutcome {
                generation: 1,
                result: result.clone(),
            }),
        })
    }

    /// Outcomes past accordd's limits are cut to fit, and accordd takes
    /// them; those within are unchanged.
    #[test]
    fn an_outcome_past_accordds_limits_is_cut_to_fit() {
        let busy = CommandResult::Busy {
            gpus: (0..100)
                .map(|index| BusyGpu {
                    index,
                    pids: (0..3000).rev().collect(),
                })
                .collect(),
        };
        assert!(accepted(&busy).is_err());
        let fit = fit_outcome(busy);
        accepted(&fit).unwrap();
        let CommandResult::Busy { gpus } = &fit else {
            panic!("{fit:?}");
        };
        assert_eq!(gpus.len(), 64);
        assert_eq!(gpus[63].index, 63);
        assert_eq!(gpus[0].pids, (0..1024).collect::<Vec<u32>>(), "the lowest");

        let reset = CommandResult::ResetRequired {
            gpus: (0..100).collect(),
        };
        assert!(accepted(&reset).is_err());
        accepted(&fit_outcome(reset)).unwrap();

        // 3 bytes a character: the cut falls inside one.
        let failed = CommandResult::Failed {
            reason: "€".repeat(2000),
        };
        assert!(accepted(&failed).is_err());
        let fit = fit_outcome(failed);
        accepted(&fit).unwrap();
        let CommandResult::Failed { reason } = &fit else {
            panic!("{fit:?}");
        };
        assert!(reason.len() <= MAX_REASON_BYTES, "{}", reason.len());
        assert!(reason.ends_with("€…"), "{reason}");
        assert_eq!(reason.chars().count(), 340 + 1);

        for within in [
            CommandResult::Done,
            CommandResult::Failed {
                reason: "x".repeat(MAX_REASON_BYTES),
            },
            CommandResult::Busy {
                gpus: vec![BusyGpu {
                    index: 3,
                    pids: vec![9, 4],
                }],
            },
            CommandResult::ResetRequired { gpus: vec![1, 2] },
        ] {
            assert_eq!(fit_outcome(within.clone()), within);
        }
    }
}
