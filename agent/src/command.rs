//! accordd's commands to the agent (in the answer to a heartbeat or a
//! report): which NVML they go to, and each generation carried out once.
//! An outcome is cut to what accordd accepts in a report before it is
//! kept (`daemon/src/api/limits.rs`): one accordd refused would hold up
//! every report after it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use accord::hardware::NodeHardware;
use accord_api::agent::{AgentCommand, CommandAction, CommandOutcome, CommandResult};
use tracing::{debug, info, warn};

use crate::config::AgentConfig;
use crate::mig::replay::ReplayedGpus;
use crate::mig::ApplyOptions;

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

/// GPUs named in an outcome: as many as accordd takes in a report.
pub(crate) const MAX_OUTCOME_GPUS: usize = accord::hardware::limits::GPUS;
/// Processes named per busy GPU: as many as accordd takes.
pub(crate) const MAX_OUTCOME_PIDS: usize = accord::hardware::limits::PIDS_PER_GPU;
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
        held: &BTreeMap<u32, String>,
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
        if let Some(reason) = held_refusal(&cmd.action, held) {
            warn!(generation = cmd.generation, %reason, "command refused");
            self.last = Some(CommandOutcome {
                generation: cmd.generation,
                result: CommandResult::Failed { reason },
            });
            self.unsent = true;
            self.refused = false;
            return None;
        }
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

/// Why a repartition must not run: a GPU it would change holds a device
/// the kubelet assigned to a pod (`held`: GPU index → the pod), whether
/// or not the pod has started a process on it yet (NVML shows only
/// processes). `None`: nothing held, or not a repartition.
pub(crate) fn held_refusal(action: &CommandAction, held: &BTreeMap<u32, String>) -> Option<String> {
    let CommandAction::ApplyMig { gpus } = action else {
        return None;
    };
    let taken: Vec<String> = gpus
        .iter()
        .filter_map(|t| {
            held.get(&t.index)
                .map(|pod| format!("GPU {} (pod {pod})", t.index))
        })
        .collect();
    (!taken.is_empty()).then(|| {
        format!(
            "the kubelet has assigned {} to running pods (pod-resources API): not repartitioned",
            taken.join(", ")
        )
    })
}

/// GPU index → a pod holding it (or one of its MIG devices), from the
/// kubelet's assignments and the machine's model (GPU and MIG UUIDs; a
/// shared replica's `UUID::N` is its GPU).
pub(crate) fn held_gpus(
    hw: &NodeHardware,
    pods: &[accord_api::agent::PodDevices],
) -> BTreeMap<u32, String> {
    let mut by_uuid: BTreeMap<&str, u32> = BTreeMap::new();
    for g in &hw.gpus {
        if let Some(u) = &g.uuid {
            by_uuid.insert(u, g.index);
        }
        for gi in g.mig.iter().flat_map(|m| &m.gpu_instances) {
            for ci in &gi.compute_instances {
                if let Some(u) = &ci.uuid {
                    by_uuid.insert(u, g.index);
                }
            }
        }
    }
    let mut held = BTreeMap::new();
    for p in pods {
        for id in &p.ids {
            let uuid = id.split_once("::").map_or(id.as_str(), |(u, _)| u);
            if let Some(&g) = by_uuid.get(uuid) {
                held.entry(g)
                    .or_insert_with(|| format!("{}/{}", p.namespace, p.name));
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use accord_api::agent::BusyGpu;
    use accordd::api::limits::{self, max};

    use super::*;

    /// A pod holding a MIG device (or a shared replica of a GPU) holds its
    /// GPU; a repartition of it is refused, naming the pod.
    #[test]
    fn a_gpu_whose_device_a_pod_holds_is_not_repartitioned() {
        const H100: &str = "NVIDIA H100 80GB HBM3";
        let profile = accord::fleet::HardwareProfile {
            gpus: 2,
            gpu_model: Some(H100.into()),
            gpu_memory_gib: 80,
            ..accord::fleet::HardwareProfile::new("8", "64Gi")
        };
        let mut hw = accord::fleet::hardware_from_profile(&profile, &[]);
        for (i, g) in hw.gpus.iter_mut().enumerate() {
            g.uuid = Some(["GPU-a", "GPU-b"][i].into());
        }
        // GPU 1 in MIG mode, one 7g.80gb instance: MIG-b1.
        let state = accord::hardware::MigState {
            capable: true,
            current_mode: accord::hardware::MigMode::Enabled,
            pending_mode: accord::hardware::MigMode::Enabled,
            profiles: accord::hardware::mig::catalog::profiles_for_model(H100).unwrap(),
            gpu_instances: Vec::new(),
        };
        let mut state = state.with_layout(&["7g.80gb@0".to_owned()]).unwrap();
        state.gpu_instances[0].compute_instances = vec![accord::hardware::ComputeInstance {
            id: 0,
            uuid: Some("MIG-b1".into()),
            sm_count: None,
            memory_mib: None,
        }];
        hw.gpus[1].mig = Some(state);
        let pod = |name: &str, id: &str| accord_api::agent::PodDevices {
            namespace: "ml".into(),
            name: name.into(),
            ids: vec![id.into()],
        };
        let held = held_gpus(
            &hw,
            &[pod("a", "GPU-a::3"), pod("b", "MIG-b1"), pod("c", "GPU-zz")],
        );
        assert_eq!(held.get(&0).map(String::as_str), Some("ml/a"));
        assert_eq!(held.get(&1).map(String::as_str), Some("ml/b"));
        assert_eq!(held.len(), 2);
        let on = |index| CommandAction::ApplyMig {
            gpus: vec![accord_api::agent::MigTarget {
                index,
                uuid: None,
                layout: vec!["7g.80gb@0".into()],
            }],
        };
        let why = held_refusal(&on(1), &held).unwrap();
        assert!(why.contains("GPU 1 (pod ml/b)"), "{why}");
        assert_eq!(held_refusal(&on(2), &held), None);
        assert_eq!(held_refusal(&CommandAction::Rediscover, &held), None);
    }

    /// A failure's reason fits the strings accordd takes (the counts are
    /// the limits table's own constants).
    #[test]
    fn the_caps_are_within_accordds_limits() {
        const { assert!(MAX_REASON_BYTES <= max::STRING_BYTES) };
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
