//! The control loop's last round as `GET /v1/status` serves it, and the
//! power intents it shows in flight.

use std::collections::BTreeMap;

use accord::demand::ObjectRef;
use accord::lifecycle::Stage;
use accord::plan::{Action, Plan, Unsatisfied, WorkloadPlacement};
use serde::{Deserialize, Serialize};

/// `observe`: plan, explain, log, expose; act on nothing (where admins
/// start). `act`: execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Observe,
    Act,
}

/// One node as the last round saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    pub stage: Stage,
    pub since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub pods: u32,
    pub gpus: u32,
    /// The BMC's last power reading (`None`: not read, or observe mode).
    #[serde(default)]
    pub bmc_on: Option<bool>,
    /// What the planner plans this node with.
    #[serde(default)]
    pub model: ModelSource,
    /// Where the agent's report (or the scheduler's view) and the fleet
    /// file's declaration (or the model) disagree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<accord::truth::Drift>,
    /// Its BIOS profile: wanted, applied, where it stands (absent when
    /// none is wanted or known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<BiosStatus>,
}

/// Which hardware model a node is planned with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// The fleet file's declaration: no agent has reported.
    #[default]
    Declared,
    /// The agent's last report.
    Reported,
    /// Left out of planning: its report drifts from its declaration and
    /// `policy.on_drift = "hold"` (until an admin acts).
    Held,
}

/// One kind of object Accord reads from the cluster, and whether (at which
/// version) the API server serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindWatch {
    pub kind: String,
    /// The group/version watched; `None`: the server serves it at no
    /// version Accord reads, so it is not watched.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Why it is not watched, or what that means for planning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A stage as `accordctl status`, the lab and the `accord_nodes{stage}`
/// metric name it (`poweringon`, `inuse`): one spelling for all three.
pub fn stage_label(stage: Stage) -> String {
    format!("{stage:?}").to_lowercase()
}

/// What Accord makes of a pending workload this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadState {
    /// Fits on nodes that are up or coming up.
    Placed,
    /// This round's plan powers nodes on for it.
    PoweringOn,
    /// Waits for a MIG repartition (an agent command, or the GPU
    /// Operator) that makes room for it; the capacity counts once the
    /// node's report shows it.
    Repartitioning,
    /// Fits nowhere Accord can make room; `reason` says why.
    CannotPlace,
}

impl WorkloadState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadState::Placed => "placed",
            WorkloadState::PoweringOn => "powering_on",
            WorkloadState::Repartitioning => "repartitioning",
            WorkloadState::CannotPlace => "cannot_place",
        }
    }
}

impl std::fmt::Display for WorkloadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pending workload and what Accord makes of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadStatus {
    /// `namespace/name`.
    pub workload: String,
    /// The objects it came from, the defining one first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ObjectRef>,
    pub pods: u32,
    pub min: u32,
    pub state: WorkloadState,
    /// Seconds until the nodes it is placed on are expected Ready, from
    /// the boots measured of their profiles (0: they are up; none: not
    /// placed, or a profile with no boot measured yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_in_s: Option<u64>,
    /// The nodes the plan puts its pods on.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Nodes powered on for it this round.
    #[serde(default)]
    pub powering_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where its plan approximates the scheduler that places it (another
    /// scheduler's gang planned with kube-scheduler's filters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approximation: Option<String>,
    /// Seconds since Accord first saw it pending.
    pub pending_s: f64,
}

/// An object that cannot be planned at all, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CannotPlan {
    pub workload: String,
    pub reason: String,
}

/// What `GET /v1/status` answers: the last round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlStatus {
    pub mode: Mode,
    pub round: u64,
    /// Unix seconds of the round.
    pub at: u64,
    pub planner_ms: f64,
    pub nodes: Vec<NodeStatus>,
    pub workloads: Vec<WorkloadStatus>,
    /// Objects that cannot be planned at all, with the reason.
    pub cannot_plan: Vec<CannotPlan>,
    /// The round's plan (in observe mode: what Accord would do).
    pub actions: Vec<Action>,
    #[serde(default)]
    pub placements: Vec<WorkloadPlacement>,
    #[serde(default)]
    pub unsatisfied: Vec<Unsatisfied>,
    /// Pending pod (`ns/name`) → its workload.
    pub pods: BTreeMap<String, String>,
    /// Pending pod → the scheduler's word on it (its PodScheduled
    /// condition message).
    pub scheduler: BTreeMap<String, String>,
    /// Power actions in flight (journal intents not yet done).
    pub open_intents: Vec<Intent>,
    /// Recent lifecycle changes, newest last.
    pub recent: Vec<String>,
    /// The kinds Accord reads from the cluster, as the API server serves
    /// them (those it does not are said here and once in the log).
    #[serde(default)]
    pub watches: Vec<KindWatch>,
    /// Observe mode writes nothing to Kubernetes: what it would have
    /// written (events, ProvisioningRequest conditions, Node labels and
    /// taints), the most recent last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub would_write: Vec<WouldWrite>,
    /// Agent commands (MIG repartitions): the latest per node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<crate::agent::CommandRecord>,
    /// With replicas (`[ha]`): this replica, and who leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaStatus>,
    /// Capacity kept warm ahead of demand (`policy.warm = "predictive"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<WarmStatus>,
    /// The boots seen per hardware profile, from which the time to
    /// capacity is predicted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_times: Vec<BootTimeStatus>,
}

/// A hardware profile's boots as the decider saw them, each from the
/// power-on asked for (the latest 64, since accordd started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootTimeStatus {
    pub profile: String,
    pub boots: u64,
    /// Median to the BMC showing On, and to the agent's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc_on_median_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_up_median_s: Option<u64>,
    /// Median and 90th percentile to the Kubernetes Node Ready.
    pub ready_median_s: u64,
    pub ready_p90_s: u64,
}

/// This round's warm capacity: what is expected, what is held for it, and
/// the budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmStatus {
    /// Arrivals expected within `warm_lookahead_s`.
    pub expected_arrivals: f64,
    pub lookahead_s: u64,
    /// Placeholders planned (shaped like the arrivals seen).
    pub placeholders: u64,
    /// GPUs of nodes held for placeholders alone.
    pub held_gpus: u64,
    /// GPU-hours held in the last 24 hours, and the budget for them.
    pub spent_gpu_hours: f64,
    pub budget_gpu_hours: u32,
}

/// One accordd replica's word on the leadership (`GET /v1/replica`, and
/// in the status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Whether this replica leads (and acts) now.
    pub leading: bool,
    /// The Lease's holder as this replica last saw it.
    pub leader: Option<String>,
    /// This replica's term (the Lease's transitions) while it leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitions: Option<i32>,
}

/// A Kubernetes write observe mode did not make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WouldWrite {
    pub regarding: ObjectRef,
    /// What: `event CannotPlace: …`, `condition Provisioned=True: …`,
    /// `labels and taints: …`.
    pub what: String,
}

impl ControlStatus {
    /// The round's plan, as `accordctl plan` shows it.
    pub fn plan(&self) -> Plan {
        Plan {
            actions: self.actions.clone(),
            placements: self.placements.clone(),
            unsatisfied: self.unsatisfied.clone(),
            notes: Vec::new(),
        }
    }
}

/// What a power intent asks of a BMC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum IntentAction {
    PowerOn,
    PowerOff { force: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum IntentState {
    /// Written; the BMC has not been called.
    Planned,
    /// The BMC is being (or was) called: a crash here must not resend at
    /// once (the BMC may have accepted it).
    Sent {
        at: u64,
    },
    Done {
        at: u64,
    },
    Failed {
        at: u64,
        reason: String,
    },
}

/// One power action in the intent journal (the journal's record, as
/// `accordctl status` shows those in flight).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub id: u64,
    pub node: String,
    pub action: IntentAction,
    pub created: u64,
    /// The workloads it serves (`ns/name`), for explanations.
    pub for_workloads: Vec<String>,
    pub state: IntentState,
    /// A power-on's BIOS profile, staged before the Reset: after a crash
    /// the resumed power-on stages it again (idempotent) and the machine
    /// is verified once up. Absent in records written before BIOS
    /// profiles were staged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_profile: Option<String>,
    /// With replicas (`[ha]`): the leader's term it was sent in, written
    /// with it to the API server before the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
    /// Who asked for it when not the plan: `admin` (`accordctl power`),
    /// `admin, forced` (`--force`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

/// A leader's term: the Lease holder and the Lease's transition count
/// when it took the Lease. A write by an older term than the one an
/// object carries is refused (the replica was deposed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub holder: String,
    pub transitions: i32,
}

impl Intent {
    pub fn is_open(&self) -> bool {
        matches!(self.state, IntentState::Planned | IntentState::Sent { .. })
    }
}

/// One line for an action, for logs and `accordctl explain`.
pub fn describe(a: &Action) -> String {
    match a {
        Action::PowerOn {
            node,
            wave,
            for_workloads,
        } => format!(
            "power on {node} (wave {wave}) for {}",
            for_workloads.join(", ")
        ),
        Action::PowerOff { node, reason } => format!("power off {node}: {reason}"),
        Action::ApplyBiosProfile { node, profile } => {
            format!("apply BIOS profile {profile} to {node} before boot")
        }
        Action::ReconfigureMig {
            node, gpu, layout, ..
        } => format!("repartition GPU {gpu} of {node} as {}", layout.join(" ")),
    }
}

/// A node's BIOS profile as the last round saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BiosStatus {
    /// The profile the fleet file wants (`bios_profile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted: Option<String>,
    /// The profile applied: the last one Accord verified on the machine
    /// (kept in its store), else the fleet file's `bios_profile_applied`
    /// (the admin's statement, until Accord has verified one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    pub state: BiosState,
    /// When Accord verified `applied` (Unix seconds); absent when the
    /// fleet file says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<u64>,
    /// Why the wanted profile is not applied: the last one staged did
    /// not take (`failed`), the running machine's BIOS differs from it
    /// (`pending`: staged at its next power-on), or its BIOS cannot be
    /// read back yet (`staged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BiosState {
    /// The wanted profile is the applied one.
    Applied,
    /// It differs: staged before the node's next power-on.
    Pending,
    /// Staged with the power-on under way; verified once the machine is up.
    Staged,
    /// The last profile staged did not take (`reason`): the node failed.
    Failed,
}

impl BiosState {
    pub fn as_str(self) -> &'static str {
        match self {
            BiosState::Applied => "applied",
            BiosState::Pending => "pending",
            BiosState::Staged => "staged",
            BiosState::Failed => "failed",
        }
    }
}

/// What accordd keeps of a node's BIOS profile (its store's
/// `bios_applied` tree): the last profile it staged (written with the
/// power-on, so a restart before the read-back still verifies it), then
/// verified, or that did not take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BiosRecord {
    pub profile: String,
    /// Unix seconds of the verification (of the staging, for `Staged`).
    pub at: u64,
    #[serde(flatten)]
    pub result: BiosResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum BiosResult {
    /// Staged with a power-on, not read back yet.
    Staged,
    /// Every attribute of the profile read back as wanted.
    Verified,
    /// Some did not take.
    Failed { reason: String },
}

/// What an admin asks of a node's power (`accordctl power`,
/// `POST /v1/nodes/{name}/power`): accordd applies the loop's checks and
/// journals the action as every power action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminPowerAction {
    On,
    Off,
    /// Off (as `off`), then on once the BMC shows it off.
    Cycle,
}

impl AdminPowerAction {
    pub fn word(self) -> &'static str {
        match self {
            AdminPowerAction::On => "on",
            AdminPowerAction::Off => "off",
            AdminPowerAction::Cycle => "cycle",
        }
    }
}

/// The body of `POST /v1/nodes/{name}/power`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminPowerRequest {
    pub action: AdminPowerAction,
    /// The emergency path: none of the loop's checks (work pods, bookings,
    /// `do-not-disrupt`, the plan, the rack's power-on limit, a stage in
    /// transition); an off is a ForceOff sent at once, without the
    /// powering-off taint's wait. Journaled and logged as forced. The
    /// leader check still holds.
    #[serde(default)]
    pub force: bool,
    /// Check and say what would be done; change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What accordd does about an admin's power request it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminPowerOutcome {
    /// Taken: the action is journaled and sent by the loop (a non-forced
    /// off once the Node shows the powering-off taint).
    Accepted,
    /// The node is already there: nothing is sent.
    NothingToDo,
    /// A dry run that every check passed: nothing changed.
    WouldDo,
}

/// accordd's answer to an accepted power request (a refused one is an
/// HTTP error whose reason names the check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminPowerAnswer {
    pub node: String,
    pub action: AdminPowerAction,
    pub outcome: AdminPowerOutcome,
    pub forced: bool,
    /// What happens next, for people.
    pub detail: String,
}

/// The loop's answer: accepted (what it does), or refused (why).
pub type AdminReply = Result<AdminPowerAnswer, AdminRefusal>;

/// Why an admin's power request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminRefusal {
    pub kind: RefusalKind,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// Not a node of the fleet (404).
    UnknownNode,
    /// A check refused it (409): the reason names the check.
    Check,
    /// This replica does not lead, or the loop cannot answer now (503).
    Unavailable,
}

impl AdminRefusal {
    pub fn check(reason: impl Into<String>) -> AdminRefusal {
        AdminRefusal {
            kind: RefusalKind::Check,
            reason: reason.into(),
        }
    }
}

/// A power action an admin asked for (`accordctl power`), as the executor
/// journals it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requested {
    /// `--force`: a power-off is a ForceOff at once.
    pub forced: bool,
}

impl Requested {
    /// The intent's `requested_by`.
    pub fn by(&self) -> &'static str {
        if self.forced {
            "admin, forced"
        } else {
            "admin"
        }
    }
}

/// How long an admin's power request may wait for the control loop's
/// answer (a round, after its batching window; longer only while the loop
/// starts: first lists, every BMC read once): accordd's limit, and what
/// accordctl waits for beyond its own.
pub const ADMIN_ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);
