//! MIG repartitioning on the node: accordd's `apply_mig` command carried
//! out by the agent itself (issue 15, the `agent` mode).
//!
//! [`MigControl`] is NVML at the level the sequence needs, one GPU at a
//! time by NVML index; [`apply`] is the sequence, written once against the
//! trait. Three implementations: [`nvml::LiveMig`] (real NVML, through
//! `nvml-wrapper-sys` where `nvml-wrapper` 0.13 has no wrapper),
//! [`replay::ReplayedGpus`] (the twin: a replayed NVML snapshot changed the
//! way NVML would change the machine, so the lab runs the whole path), and
//! the recording fake of the unit tests.
//!
//! The order is NVIDIA's mig-manager's (mig-parted at bd7160f,
//! `pkg/mig/reconfigure/reconfigure.go` `Run`,
//! `cmd/nvidia-mig-parted/apply/{mode,config}.go`, `pkg/mig/config/config.go`):
//! validate the wanted configuration, stop at once when it is already
//! applied, change MIG mode on every GPU that needs it (then reset them, if
//! a mode change is pending), and only then, GPU by GPU, destroy compute
//! instances and their GPU instance, and create GPU instances each with its
//! compute instance. Two differences, both on purpose: mig-manager stops
//! Kubernetes' GPU clients and goes ahead, where the agent refuses while
//! any process uses a GPU it would change (accordd re-plans: a busy GPU is
//! never repartitioned); and mig-parted clears a GPU and recreates
//! everything, where the agent keeps an instance that already has the
//! wanted profile at the wanted placement (what runs there survives, and a
//! retry after a half-done apply finishes the job instead of redoing it).
//! A GPU that needs a reset the agent may not do is answered
//! `reset_required` with every mode the command set put back: nothing is
//! left pending to take effect at the next boot.

pub mod nvml;
pub mod replay;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use accord::hardware::{MigMode, MigPlacement, MigProfile, MigState};
use accord_api::agent::{BusyGpu, CommandResult, MigTarget};
use tracing::{info, warn};

/// An NVML call that failed, in NVML's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NvmlCallError(pub String);

pub type CallResult<T> = Result<T, NvmlCallError>;

/// A GPU's MIG mode now and after its next reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigModes {
    pub current: MigMode,
    pub pending: MigMode,
}

/// A GPU instance as NVML lists it (`nvmlGpuInstanceGetInfo`), with the ids
/// of its compute instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInstanceInfo {
    pub id: u32,
    pub profile_id: u32,
    pub placement: MigPlacement,
    pub compute_instances: Vec<u32>,
}

/// NVML, as far as repartitioning a GPU needs it. Every method names the GPU
/// by its NVML index; instances by NVML's ids.
pub trait MigControl {
    /// `nvmlDeviceGetUUID`.
    fn uuid(&mut self, gpu: u32) -> CallResult<String>;
    /// Processes with a compute context on the GPU (or any of its MIG
    /// devices): `nvmlDeviceGetComputeRunningProcesses_v3`.
    fn running_pids(&mut self, gpu: u32) -> CallResult<Vec<u32>>;
    /// `nvmlDeviceGetMigMode`; `None` when the GPU is not MIG capable.
    fn mig_mode(&mut self, gpu: u32) -> CallResult<Option<MigModes>>;
    /// `nvmlDeviceSetMigMode`; whether a GPU reset is needed before the
    /// new mode takes effect (it is then pending).
    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> CallResult<bool>;
    /// A GPU reset (`nvidia-smi -r`, as mig-parted does it).
    fn reset_gpu(&mut self, gpu: u32) -> CallResult<()>;
    /// The GPU-instance profiles, names ↔ ids, with their possible
    /// placements (`nvmlDeviceGetGpuInstanceProfileInfo`,
    /// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`).
    fn gpu_instance_profiles(&mut self, gpu: u32) -> CallResult<Vec<MigProfile>>;
    /// The GPU instances and their compute instances
    /// (`nvmlDeviceGetGpuInstances`, `nvmlGpuInstanceGetInfo`,
    /// `nvmlGpuInstanceGetComputeInstances`). Only with MIG mode enabled.
    fn gpu_instances(&mut self, gpu: u32) -> CallResult<Vec<GpuInstanceInfo>>;
    /// `nvmlComputeInstanceDestroy`.
    fn destroy_compute_instance(&mut self, gpu: u32, gi: u32, ci: u32) -> CallResult<()>;
    /// `nvmlGpuInstanceDestroy` (NVML refuses while it has compute instances).
    fn destroy_gpu_instance(&mut self, gpu: u32, gi: u32) -> CallResult<()>;
    /// `nvmlDeviceCreateGpuInstanceWithPlacement`; the new instance's id.
    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: MigPlacement,
    ) -> CallResult<u32>;
    /// `nvmlGpuInstanceCreateComputeInstance` with the compute-instance
    /// profile that spans the whole GPU instance; the new one's id.
    fn create_compute_instance(&mut self, gpu: u32, gi: u32) -> CallResult<u32>;
}

/// What the agent's configuration allows (`[mig]` in agent.toml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Reset a GPU when enabling MIG mode needs it (`mig.allow_gpu_reset`).
    pub allow_gpu_reset: bool,
}

/// At most this many GPUs in one command (accordd accepts reports of at
/// most 64 GPUs).
const MAX_TARGETS: usize = 64;
/// At most this many instances in one GPU's layout (a GPU has 8 memory
/// slices; a longer layout cannot fit and is refused before it is read).
const MAX_LAYOUT: usize = 16;
/// Command strings quoted back in a reason are cut to this many bytes.
const MAX_QUOTE: usize = 64;

/// One wanted GPU instance.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    profile_id: u32,
    profile: String,
    placement: MigPlacement,
}

/// What one GPU needs, from what NVML shows now.
#[derive(Debug, Default)]
struct Diff {
    /// Instances the layout does not keep (with their compute instances).
    destroy: Vec<GpuInstanceInfo>,
    /// Kept instances without a compute instance.
    ensure_ci: Vec<GpuInstanceInfo>,
    /// Wanted instances that do not exist.
    create: Vec<Wanted>,
}

impl Diff {
    fn is_empty(&self) -> bool {
        self.destroy.is_empty() && self.ensure_ci.is_empty() && self.create.is_empty()
    }
}

/// One target GPU, checked.
#[derive(Debug)]
struct Plan {
    gpu: u32,
    modes: MigModes,
    profiles: Vec<MigProfile>,
    wanted: Vec<Wanted>,
    /// Against the instances listed at the check (none while MIG is off).
    diff: Diff,
}

impl Plan {
    /// MIG mode is not in effect, or will not stay in effect after the
    /// next reset.
    fn mode_change(&self) -> bool {
        self.modes.current != MigMode::Enabled || self.modes.pending != MigMode::Enabled
    }

    fn changes(&self) -> bool {
        self.mode_change() || !self.diff.is_empty()
    }

    /// `1g.10gb@3`, or the profile id when the GPU does not list it.
    fn name(&self, profile_id: u32, placement: MigPlacement) -> String {
        match self.profiles.iter().find(|p| p.id == profile_id) {
            Some(p) => format!("{}@{}", p.name, placement.start),
            None => format!("profile {profile_id}@{}", placement.start),
        }
    }
}

/// Instances kept (same profile at the same placement, each wanted one
/// matched once), the rest destroyed, the missing ones created.
fn diff(existing: &[GpuInstanceInfo], wanted: &[Wanted]) -> Diff {
    let mut matched = vec![false; wanted.len()];
    let mut d = Diff::default();
    for gi in existing {
        let hit = wanted.iter().enumerate().position(|(i, w)| {
            !matched[i] && w.profile_id == gi.profile_id && w.placement == gi.placement
        });
        match hit {
            Some(i) => {
                matched[i] = true;
                if gi.compute_instances.is_empty() {
                    d.ensure_ci.push(gi.clone());
                }
            }
            None => d.destroy.push(gi.clone()),
        }
    }
    d.create = wanted
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(w, _)| w.clone())
        .collect();
    d
}

fn clip(s: &str) -> String {
    if s.len() <= MAX_QUOTE {
        return s.to_owned();
    }
    let mut end = MAX_QUOTE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Checks one target without changing anything: the GPU is the one the
/// command names, MIG capable, and the layout fits its profiles.
fn check(ctrl: &mut dyn MigControl, t: &MigTarget) -> Result<Plan, String> {
    let gpu = t.index;
    let uuid = ctrl
        .uuid(gpu)
        .map_err(|e| format!("GPU {gpu}: reading its UUID: {e}"))?;
    if let Some(want) = &t.uuid {
        if *want != uuid {
            return Err(format!(
                "GPU {gpu}: its UUID is {uuid}, the command is for {} (re-enumerated since the report?)",
                clip(want)
            ));
        }
    }
    if t.layout.len() > MAX_LAYOUT {
        return Err(format!(
            "GPU {gpu}: a layout of {} instances cannot fit a GPU",
            t.layout.len()
        ));
    }
    if let Some(long) = t.layout.iter().find(|e| e.len() > MAX_QUOTE) {
        return Err(format!(
            "GPU {gpu}: layout entry {:?} is not PROFILE@START",
            clip(long)
        ));
    }
    let modes = ctrl
        .mig_mode(gpu)
        .map_err(|e| format!("GPU {gpu}: reading its MIG mode: {e}"))?
        .ok_or_else(|| format!("GPU {gpu} is not MIG capable"))?;
    let profiles = ctrl
        .gpu_instance_profiles(gpu)
        .map_err(|e| format!("GPU {gpu}: reading its MIG profiles: {e}"))?;
    let state = MigState {
        capable: true,
        current_mode: modes.current,
        pending_mode: modes.pending,
        profiles: profiles.clone(),
        gpu_instances: Vec::new(),
    };
    let laid = state
        .with_layout(&t.layout)
        .map_err(|e| format!("GPU {gpu}: {e}"))?;
    let mut wanted = Vec::with_capacity(laid.gpu_instances.len());
    for gi in laid.gpu_instances {
        // with_layout sets both from the GPU's own profiles.
        let (Some(profile_id), Some(placement)) = (gi.profile_id, gi.placement) else {
            return Err(format!("GPU {gpu}: profile {} has no id", gi.profile));
        };
        wanted.push(Wanted {
            profile_id,
            profile: gi.profile,
            placement,
        });
    }
    let existing = if modes.current == MigMode::Enabled {
        ctrl.gpu_instances(gpu)
            .map_err(|e| format!("GPU {gpu}: listing its GPU instances: {e}"))?
    } else {
        Vec::new()
    };
    let diff = diff(&existing, &wanted);
    Ok(Plan {
        gpu,
        modes,
        profiles,
        wanted,
        diff,
    })
}

/// Makes each target GPU hold exactly its layout, in mig-manager's order
/// (see the module's comment). Nothing is changed unless every target
/// checks out and none that needs a change is in use; an answer
/// `ResetRequired` leaves every GPU as it was (a mode set is put back,
/// never left pending for the next boot). Any NVML error part
/// way stops at once with a reason naming the GPU, the step and the
/// instance; every step leaves a state from which the same command
/// finishes the job (a kept instance is never destroyed, a created one is
/// kept next time, a missing compute instance is created).
pub fn apply(
    ctrl: &mut dyn MigControl,
    targets: &[MigTarget],
    opts: &ApplyOptions,
) -> CommandResult {
    match run(ctrl, targets, opts) {
        Ok(result) => result,
        Err(reason) => {
            warn!(%reason, "MIG layout not applied");
            CommandResult::Failed { reason }
        }
    }
}

fn run(
    ctrl: &mut dyn MigControl,
    targets: &[MigTarget],
    opts: &ApplyOptions,
) -> Result<CommandResult, String> {
    if targets.len() > MAX_TARGETS {
        return Err(format!(
            "{} GPUs in one command; at most {MAX_TARGETS}",
            targets.len()
        ));
    }
    let mut seen = BTreeSet::new();
    if let Some(t) = targets.iter().find(|t| !seen.insert(t.index)) {
        return Err(format!("GPU {} is named twice in the command", t.index));
    }
    // 1. Check every target before anything changes.
    let mut plans = Vec::with_capacity(targets.len());
    for t in targets {
        plans.push(check(ctrl, t)?);
    }
    let plans: Vec<Plan> = plans.into_iter().filter(Plan::changes).collect();
    if plans.is_empty() {
        info!(gpus = targets.len(), "MIG layout already in place");
        return Ok(CommandResult::Done);
    }
    // 2. A GPU in use is never repartitioned: refuse, changing nothing.
    let mut busy = Vec::new();
    for p in &plans {
        let mut pids = ctrl
            .running_pids(p.gpu)
            .map_err(|e| format!("GPU {}: listing its processes: {e}", p.gpu))?;
        if !pids.is_empty() {
            pids.sort_unstable();
            pids.dedup();
            busy.push(BusyGpu { index: p.gpu, pids });
        }
    }
    if !busy.is_empty() {
        let result = CommandResult::Busy { gpus: busy };
        info!(result = %result.describe(), "MIG layout refused");
        return Ok(result);
    }
    // 3. MIG mode on every GPU that needs it, then the resets. GPUs with
    // MIG mode off go first: only they can need a reset, and NVML says so
    // only once the mode is set (`nvmlDeviceSetMigMode`'s activation
    // status). When one does and no reset is allowed, every mode this
    // command set is put back before the answer: left pending, it would
    // take effect at the node's next boot, a MIG-enabled GPU without
    // instances (its whole-GPU capacity gone).
    let mut set = Vec::new();
    let mut reset = Vec::new();
    for p in plans.iter().filter(|p| p.modes.current != MigMode::Enabled) {
        if p.modes.pending == MigMode::Enabled {
            // Pending before this command (not its to put back): only
            // the reset is missing.
            reset.push(p.gpu);
            continue;
        }
        info!(gpu = p.gpu, "enabling MIG mode");
        match ctrl.set_mig_mode(p.gpu, true) {
            Ok(needs_reset) => {
                set.push(p.gpu);
                if needs_reset {
                    reset.push(p.gpu);
                }
            }
            Err(e) => {
                let reason = format!("GPU {}: enabling MIG mode: {e}", p.gpu);
                return Err(match put_back(ctrl, &set) {
                    Ok(()) => reason,
                    Err(left) => format!("{reason}; {left}"),
                });
            }
        }
    }
    if !reset.is_empty() && !opts.allow_gpu_reset {
        if let Err(left) = put_back(ctrl, &set) {
            let gpus: Vec<String> = reset.iter().map(u32::to_string).collect();
            return Err(format!(
                "GPU {}: enabling MIG mode needs a GPU reset, not allowed (mig.allow_gpu_reset = false); {left}",
                gpus.join(", ")
            ));
        }
        let result = CommandResult::ResetRequired { gpus: reset };
        info!(result = %result.describe(), "MIG layout not applied");
        return Ok(result);
    }
    // MIG mode in effect but to go off at the next reset (someone disabled
    // it): set on again, which needs no reset.
    for p in plans
        .iter()
        .filter(|p| p.modes.current == MigMode::Enabled && p.mode_change())
    {
        info!(gpu = p.gpu, "MIG mode is pending off: enabling it again");
        ctrl.set_mig_mode(p.gpu, true)
            .map_err(|e| format!("GPU {}: enabling MIG mode: {e}", p.gpu))?;
    }
    for gpu in &reset {
        info!(gpu, "resetting the GPU: MIG mode takes effect");
        ctrl.reset_gpu(*gpu)
            .map_err(|e| format!("GPU {gpu}: GPU reset: {e}"))?;
    }
    for p in plans.iter().filter(|p| p.mode_change()) {
        let now = ctrl
            .mig_mode(p.gpu)
            .map_err(|e| format!("GPU {}: reading its MIG mode: {e}", p.gpu))?;
        if now.map(|m| m.current) != Some(MigMode::Enabled) {
            return Err(format!(
                "GPU {}: MIG mode is still not enabled after enabling it",
                p.gpu
            ));
        }
    }
    // 4. GPU by GPU: destroy what the layout does not keep, then create.
    for p in &plans {
        instances(ctrl, p)?;
    }
    info!(gpus = plans.len(), "MIG layout applied");
    Ok(CommandResult::Done)
}

/// Puts MIG mode back off on `gpus`, whose mode this command enabled (in
/// effect or pending), the last first; every one that could not be put
/// back, said.
fn put_back(ctrl: &mut dyn MigControl, gpus: &[u32]) -> Result<(), String> {
    let mut left = Vec::new();
    for gpu in gpus.iter().rev() {
        info!(gpu, "putting MIG mode back off");
        if let Err(e) = ctrl.set_mig_mode(*gpu, false) {
            warn!(gpu, error = %e, "MIG mode not put back off");
            left.push(format!(
                "GPU {gpu}: putting MIG mode back off: {e} (it stays enabled or pending)"
            ));
        }
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(left.join("; "))
    }
}

/// Step 4 on one GPU, against its instances as listed now (MIG mode may
/// have just been enabled).
fn instances(ctrl: &mut dyn MigControl, p: &Plan) -> Result<(), String> {
    let gpu = p.gpu;
    let existing = ctrl
        .gpu_instances(gpu)
        .map_err(|e| format!("GPU {gpu}: listing its GPU instances: {e}"))?;
    let d = diff(&existing, &p.wanted);
    for gi in &d.destroy {
        let name = p.name(gi.profile_id, gi.placement);
        for ci in &gi.compute_instances {
            info!(gpu, gpu_instance = gi.id, compute_instance = ci, instance = %name, "destroying compute instance");
            ctrl.destroy_compute_instance(gpu, gi.id, *ci)
                .map_err(|e| {
                    format!(
                    "GPU {gpu}: destroying compute instance {ci} of GPU instance {} ({name}): {e}",
                    gi.id
                )
                })?;
        }
        info!(gpu, gpu_instance = gi.id, instance = %name, "destroying GPU instance");
        ctrl.destroy_gpu_instance(gpu, gi.id)
            .map_err(|e| format!("GPU {gpu}: destroying GPU instance {} ({name}): {e}", gi.id))?;
    }
    for gi in &d.ensure_ci {
        let name = p.name(gi.profile_id, gi.placement);
        info!(gpu, gpu_instance = gi.id, instance = %name, "creating the missing compute instance");
        ctrl.create_compute_instance(gpu, gi.id).map_err(|e| {
            format!(
                "GPU {gpu}: creating the compute instance of GPU instance {} ({name}): {e}",
                gi.id
            )
        })?;
    }
    for w in &d.create {
        let name = format!("{}@{}", w.profile, w.placement.start);
        let id = ctrl
            .create_gpu_instance(gpu, w.profile_id, w.placement)
            .map_err(|e| format!("GPU {gpu}: creating GPU instance {name}: {e}"))?;
        info!(gpu, gpu_instance = id, instance = %name, "created GPU instance");
        let ci = ctrl.create_compute_instance(gpu, id).map_err(|e| {
            format!(
                "GPU {gpu}: creating the compute instance of new GPU instance {id} ({name}): {e}"
            )
        })?;
        info!(gpu, gpu_instance = id, compute_instance = ci, instance = %name, "created compute instance");
    }
    Ok(())
}
