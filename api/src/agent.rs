//! The agent ↔ accordd contract: `POST /v1/nodes/{name}/report` and
//! `/heartbeat`, and accordd's answer to both.

use accord::hardware::NodeHardware;
use serde::{Deserialize, Serialize};

use crate::nodes::ReportOutcome;

/// What an agent sends when its hardware is (re)discovered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    #[serde(default)]
    pub agent_version: Option<String>,
    pub hardware: NodeHardware,
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
}

/// The daemon's answer to an agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentReply {
    pub node: String,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ReportOutcome>,
    /// A command for the agent (MIG reconfiguration, later); none yet.
    #[serde(default)]
    pub command: Option<serde_json::Value>,
}
