//! The agent ↔ accordd contract: `POST /v1/nodes/{name}/report` and
//! `/heartbeat`, and accordd's answer to both.

use accord::hardware::NodeHardware;
use serde::{Deserialize, Serialize};

/// What an agent sends when its hardware is (re)discovered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    #[serde(default)]
    pub agent_version: Option<String>,
    pub hardware: NodeHardware,
    /// The outcome of the last command accordd sent, once it is carried
    /// out or refused; the hardware above is discovered after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandOutcome>,
}

/// An agent's periodic sign of life.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    #[serde(default)]
    pub agent_version: Option<String>,
    #[serde(default)]
    pub uptime_s: Option<u64>,
    /// e.g. "ok", "2 GPUs with XID errors".
    #[serde(default)]
    pub gpu_health: Option<String>,
    /// The NVIDIA device-plugin devices the kubelet has assigned, pod by
    /// pod, as its pod-resources API lists them on this heartbeat: accordd
    /// counts exactly these GPUs and MIG devices as held. `None`: the
    /// agent does not read the kubelet (not configured, no socket, or an
    /// agent older than this field), and accordd takes a pod's
    /// device-plugin GPUs to be the node's first free ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned: Option<Vec<PodDevices>>,
}

/// The device-plugin devices the kubelet assigned to one pod's containers
/// (resources named `nvidia.com/…`): NVML UUIDs as NVIDIA's device plugin
/// registers them (`GPU-…`, `MIG-…`, a shared replica as `UUID::N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodDevices {
    pub namespace: String,
    pub name: String,
    pub ids: Vec<String>,
}

/// The request header an agent carries its session in, on reports and
/// heartbeats: the secret accordd answered the node's last accepted report
/// with ([`AgentReply::session`]). With a shared agent token, a heartbeat
/// without the current session is refused (403) and the agent reports
/// again. A header rather than a body field: the bodies refuse unknown
/// fields, so an accordd that predates sessions still takes both.
pub const SESSION_HEADER: &str = "accord-agent-session";

/// The daemon's answer to an agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentReply {
    pub node: String,
    pub generation: u64,
    /// In the answer to an accepted report: the session this agent proves
    /// itself with from now on ([`SESSION_HEADER`]); a new one whenever
    /// the report did not carry the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ReportOutcome>,
    /// A command for the agent: carried out once per generation, answered
    /// with a report carrying its outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<AgentCommand>,
}

/// A command from accordd to one node's agent. Generations increase per
/// node; an agent carries out a generation once and answers a repeat with
/// the outcome it already has (commands are idempotent anyway: a layout
/// already in place is left alone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCommand {
    pub generation: u64,
    pub action: CommandAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CommandAction {
    /// Repartition these GPUs: each ends with exactly its layout.
    ApplyMig { gpus: Vec<MigTarget> },
    /// Discover the hardware again and report it (with the outcome `done`),
    /// changed or not: after something else (the GPU Operator's
    /// mig-manager) changed the machine.
    Rediscover,
}

/// One GPU's wanted MIG layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigTarget {
    /// The GPU's NVML index.
    pub index: u32,
    /// The GPU's UUID as reported: the agent refuses a GPU whose UUID
    /// differs (re-enumerated since the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// GPU instances as `PROFILE@START` (e.g. `1g.10gb@0`), each with one
    /// compute instance over the whole GPU instance. Empty: MIG enabled
    /// with no instances.
    pub layout: Vec<String>,
}

/// What became of a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandOutcome {
    pub generation: u64,
    pub result: CommandResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum CommandResult {
    /// Carried out; the report shows the new state.
    Done,
    /// Refused: processes use these GPUs (nothing was changed).
    Busy { gpus: Vec<BusyGpu> },
    /// MIG mode must change on these GPUs and that needs a GPU reset the
    /// agent's configuration does not allow (`mig.allow_gpu_reset`).
    ResetRequired { gpus: Vec<u32> },
    /// Failed part way or refused for another reason; the GPU is left in a
    /// state a retry of the same command can finish.
    Failed { reason: String },
}

/// A GPU in use, and by which processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusyGpu {
    pub index: u32,
    pub pids: Vec<u32>,
}

impl CommandResult {
    /// One line for logs, events and the status.
    pub fn describe(&self) -> String {
        match self {
            CommandResult::Done => "done".to_owned(),
            CommandResult::Busy { gpus } => format!(
                "refused: GPU {} in use ({})",
                gpus.iter()
                    .map(|g| g.index.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                gpus.iter()
                    .map(|g| format!(
                        "pids {}",
                        g.pids
                            .iter()
                            .map(|p| p.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            CommandResult::ResetRequired { gpus } => format!(
                "refused: enabling MIG mode on GPU {} needs a GPU reset (mig.allow_gpu_reset = false)",
                gpus.iter()
                    .map(|g| g.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            CommandResult::Failed { reason } => format!("failed: {reason}"),
        }
    }
}

/// A command as accordd journals it (sled tree `commands`, one record per
/// node: its latest command): written and flushed before it is sent,
/// closed when the agent's report shows the result or its deadline
/// passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    pub node: String,
    pub generation: u64,
    pub action: CommandAction,
    /// Who carries out the repartition.
    pub via: accord::fleet::MigVia,
    /// The layouts wanted (also for `gpu-operator`, where the agent is
    /// only asked to rediscover).
    #[serde(default)]
    pub targets: Vec<MigTarget>,
    /// `gpu-operator`: the mig-parted configuration set on the Node's
    /// `nvidia.com/mig.config` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_config: Option<String>,
    /// Whether the agent is handed it now (`gpu-operator`: once
    /// mig-manager says `success`).
    pub deliver: bool,
    pub for_workloads: Vec<String>,
    /// Unix seconds.
    pub opened_at: u64,
    pub deadline: u64,
    pub state: CommandState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CommandState {
    /// Journaled, not yet handed to the agent.
    Open,
    /// Handed to the agent (in a heartbeat or report answer) at `at`.
    Sent { at: u64 },
    /// Finished: the agent's outcome, or accordd's (deadline passed,
    /// mig-manager failed).
    Closed { at: u64, result: CommandResult },
}

impl CommandRecord {
    pub fn is_open(&self) -> bool {
        !matches!(self.state, CommandState::Closed { .. })
    }

    /// What the agent is handed.
    pub fn command(&self) -> AgentCommand {
        AgentCommand {
            generation: self.generation,
            action: self.action.clone(),
        }
    }
}

/// What a report did to the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Registered,
    Changed,
    Unchanged,
}
