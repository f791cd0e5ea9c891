//! accordd's commands to the agent (in the answer to a heartbeat or a
//! report): which NVML they go to, and each generation carried out once.

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

/// The last command carried out, and whether its outcome still has to
/// reach accordd.
#[derive(Debug, Default)]
pub(crate) struct Commands {
    last: Option<CommandOutcome>,
    unsent: bool,
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
            if in_heartbeat && !self.unsent {
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
            result,
        });
        self.unsent = true;
        match hw {
            Ok(hw) => Some(hw),
            Err(e) => {
                warn!(error = %e, "discovery after the command failed; keeping the last model");
                None
            }
        }
    }
}
