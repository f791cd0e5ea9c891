//! The twin of a machine's GPUs: a replayed NVML snapshot that MIG
//! commands change the way NVML would change the machine, so an agent
//! replaying a recording (the lab) runs the whole repartition path and
//! re-discovers what it did through the same merge as any snapshot.
//!
//! What it plays, from NVML's documented behaviour: a GPU instance is
//! created only with MIG mode in effect, with a profile the GPU lists, at
//! one of that profile's placements, over free memory slices and within
//! the profile's count; ids are the lowest free (GPU instances from 1,
//! compute instances from 0 within their GPU instance); a GPU instance
//! with compute instances, and anything on a GPU with processes, cannot be
//! destroyed (NVML: "In use"); enabling MIG mode takes effect at once on
//! an idle Hopper or later GPU (the driver resets it) and needs a GPU reset
//! on Ampere (A100, A30: NVIDIA's MIG guide); a reset clears every
//! instance. Compute instances get `MIG-` UUIDs derived from the GPU's
//! UUID and the placement (the same every time), memory and SMs from the
//! profile.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use accord::hardware::{ComputeInstance, GpuInstance, MigMode, MigPlacement, MigProfile, MigState};
use accord_api::agent::{CommandResult, MigTarget};

use super::{ApplyOptions, CallResult, GpuInstanceInfo, MigControl, MigModes, NvmlCallError};
use crate::nvml::{NvmlDevice, NvmlSnapshot};

/// A cheap-to-clone handle on one machine's replayed GPUs: every clone
/// sees and changes the same state.
#[derive(Debug, Clone)]
pub struct ReplayedGpus {
    state: Arc<Mutex<State>>,
    /// Bumped once per change that reached the GPUs.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

#[derive(Debug)]
struct State {
    snapshot: NvmlSnapshot,
    /// Processes Kubernetes does not know, per GPU index.
    busy: BTreeMap<u32, Vec<u32>>,
    /// Commands that changed the GPUs.
    repartitions: u64,
}

impl ReplayedGpus {
    /// The machine as `snapshot` recorded it, no process on any GPU.
    pub fn new(snapshot: NvmlSnapshot) -> ReplayedGpus {
        ReplayedGpus {
            state: Arc::new(Mutex::new(State {
                snapshot,
                busy: BTreeMap::new(),
                repartitions: 0,
            })),
            changes: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves the state as
        // whole as NVML calls leave a GPU: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// NVML's view now, as a snapshot (what the agent re-discovers).
    pub fn snapshot(&self) -> NvmlSnapshot {
        self.lock().snapshot.clone()
    }

    /// Plays processes Kubernetes does not know on GPU `index` (none:
    /// idle again).
    pub fn set_busy(&self, index: u32, pids: Vec<u32>) {
        let mut s = self.lock();
        if pids.is_empty() {
            s.busy.remove(&index);
        } else {
            s.busy.insert(index, pids);
        }
    }

    /// Wakes on every change of the GPUs; the value is [`Self::version`].
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many changes reached the GPUs since [`Self::new`].
    pub fn version(&self) -> u64 {
        *self.changes.borrow()
    }

    /// How many applied commands changed the GPUs.
    pub fn repartitions(&self) -> u64 {
        self.lock().repartitions
    }

    /// [`super::apply`] on these GPUs, as one NVML client would run it
    /// (others wait), counted as one repartition and one change when it
    /// changed anything.
    pub fn apply(&self, targets: &[MigTarget], opts: &ApplyOptions) -> CommandResult {
        let mut s = self.lock();
        let before = s.snapshot.clone();
        let result = super::apply(&mut Nvml(&mut s), targets, opts);
        if s.snapshot != before {
            s.repartitions += 1;
            drop(s);
            self.changes.send_modify(|v| *v += 1);
        }
        result
    }
}

/// The twin's NVML, on the locked state.
struct Nvml<'a>(&'a mut State);

fn err(what: impl Into<String>) -> NvmlCallError {
    NvmlCallError(what.into())
}

impl Nvml<'_> {
    fn device(&mut self, gpu: u32) -> CallResult<&mut NvmlDevice> {
        self.0
            .snapshot
            .devices
            .iter_mut()
            .find(|d| d.index == gpu)
            .ok_or_else(|| err("Invalid Argument (no such GPU)"))
    }

    fn mig(&mut self, gpu: u32) -> CallResult<&mut MigState> {
        self.device(gpu)?
            .mig
            .as_mut()
            .filter(|m| m.capable)
            .ok_or_else(|| err("Not Supported"))
    }

    /// The GPU's MIG state with MIG mode in effect.
    fn enabled(&mut self, gpu: u32) -> CallResult<&mut MigState> {
        let mig = self.mig(gpu)?;
        if mig.current_mode != MigMode::Enabled {
            return Err(err("Not Supported (MIG mode is not enabled)"));
        }
        Ok(mig)
    }

    fn idle(&self, gpu: u32) -> CallResult<()> {
        match self.0.busy.get(&gpu) {
            Some(pids) if !pids.is_empty() => Err(err("In use by another client")),
            _ => Ok(()),
        }
    }
}

fn gi_profile_id(mig: &MigState, gi: &GpuInstance) -> Option<u32> {
    gi.profile_id
        .or_else(|| mig.profile(&gi.profile).map(|p| p.id))
}

fn lowest_free(used: impl Iterator<Item = u32>, from: u32) -> u32 {
    let used: std::collections::BTreeSet<u32> = used.collect();
    (from..).find(|i| !used.contains(i)).unwrap_or(from)
}

/// 64-bit FNV-1a: stable across Rust versions, unlike `DefaultHasher`.
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The `MIG-` UUID of the compute instance at `placement` of the GPU
/// `gpu_uuid`: the same for the same GPU and placement.
pub fn mig_uuid(gpu_uuid: &str, profile_id: u32, placement: MigPlacement) -> String {
    let key = format!(
        "{gpu_uuid}/{profile_id}/{}/{}",
        placement.start, placement.size
    );
    let a = fnv(1, key.as_bytes());
    let b = fnv(2, key.as_bytes());
    format!(
        "MIG-{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

impl MigControl for Nvml<'_> {
    fn uuid(&mut self, gpu: u32) -> CallResult<String> {
        self.device(gpu)?
            .uuid
            .clone()
            .ok_or_else(|| err("Not Supported (no UUID recorded)"))
    }

    fn running_pids(&mut self, gpu: u32) -> CallResult<Vec<u32>> {
        self.device(gpu)?;
        Ok(self.0.busy.get(&gpu).cloned().unwrap_or_default())
    }

    fn mig_mode(&mut self, gpu: u32) -> CallResult<Option<MigModes>> {
        let dev = self.device(gpu)?;
        Ok(dev.mig.as_ref().filter(|m| m.capable).map(|m| MigModes {
            current: m.current_mode,
            pending: m.pending_mode,
        }))
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> CallResult<bool> {
        self.idle(gpu)?;
        let ampere = self
            .device(gpu)?
            .architecture
            .as_deref()
            .is_some_and(|a| a.eq_ignore_ascii_case("ampere"));
        let mig = self.mig(gpu)?;
        let mode = if enabled {
            MigMode::Enabled
        } else {
            MigMode::Disabled
        };
        if !enabled && !mig.gpu_instances.is_empty() {
            return Err(err("In use by another client (GPU instances exist)"));
        }
        mig.pending_mode = mode;
        if ampere {
            return Ok(mig.current_mode != mode);
        }
        mig.current_mode = mode;
        Ok(false)
    }

    fn reset_gpu(&mut self, gpu: u32) -> CallResult<()> {
        self.idle(gpu)?;
        if let Some(mig) = self.device(gpu)?.mig.as_mut() {
            mig.current_mode = mig.pending_mode;
            mig.gpu_instances.clear();
        }
        Ok(())
    }

    fn gpu_instance_profiles(&mut self, gpu: u32) -> CallResult<Vec<MigProfile>> {
        Ok(self.mig(gpu)?.profiles.clone())
    }

    fn gpu_instances(&mut self, gpu: u32) -> CallResult<Vec<GpuInstanceInfo>> {
        let mig = self.enabled(gpu)?;
        let mut out = Vec::with_capacity(mig.gpu_instances.len());
        for gi in &mig.gpu_instances {
            let (Some(profile_id), Some(placement)) = (gi_profile_id(mig, gi), gi.placement) else {
                return Err(err(format!(
                    "Unknown Error (the recording does not say GPU instance {}'s profile id or placement)",
                    gi.id
                )));
            };
            out.push(GpuInstanceInfo {
                id: gi.id,
                profile_id,
                placement,
                compute_instances: gi.compute_instances.iter().map(|c| c.id).collect(),
            });
        }
        Ok(out)
    }

    fn destroy_compute_instance(&mut self, gpu: u32, gi: u32, ci: u32) -> CallResult<()> {
        self.idle(gpu)?;
        let mig = self.enabled(gpu)?;
        let g = mig
            .gpu_instances
            .iter_mut()
            .find(|g| g.id == gi)
            .ok_or_else(|| err("Not Found (no such GPU instance)"))?;
        let before = g.compute_instances.len();
        g.compute_instances.retain(|c| c.id != ci);
        if g.compute_instances.len() == before {
            return Err(err("Not Found (no such compute instance)"));
        }
        Ok(())
    }

    fn destroy_gpu_instance(&mut self, gpu: u32, gi: u32) -> CallResult<()> {
        self.idle(gpu)?;
        let mig = self.enabled(gpu)?;
        let i = mig
            .gpu_instances
            .iter()
            .position(|g| g.id == gi)
            .ok_or_else(|| err("Not Found (no such GPU instance)"))?;
        if !mig.gpu_instances[i].compute_instances.is_empty() {
            return Err(err("In use by another client (compute instances exist)"));
        }
        mig.gpu_instances.remove(i);
        Ok(())
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: MigPlacement,
    ) -> CallResult<u32> {
        let mig = self.enabled(gpu)?;
        let profile = mig
            .profiles
            .iter()
            .find(|p| p.id == profile_id)
            .cloned()
            .ok_or_else(|| err("Invalid Argument (no such profile)"))?;
        if !profile.placements.contains(&placement) {
            return Err(err("Invalid Argument (not a placement of the profile)"));
        }
        let mut same = 0;
        for g in &mig.gpu_instances {
            let Some(p) = g.placement else {
                return Err(err(
                    "Insufficient Resources (an instance of unknown placement)",
                ));
            };
            if p.overlaps(placement) {
                return Err(err("Insufficient Resources (the placement is taken)"));
            }
            if gi_profile_id(mig, g) == Some(profile.id) {
                same += 1;
            }
        }
        if same >= profile.max_count {
            return Err(err(
                "Insufficient Resources (the profile's count is reached)",
            ));
        }
        let id = lowest_free(mig.gpu_instances.iter().map(|g| g.id), 1);
        mig.gpu_instances.push(GpuInstance {
            id,
            profile: profile.name.clone(),
            profile_id: Some(profile.id),
            placement: Some(placement),
            compute_instances: Vec::new(),
        });
        mig.gpu_instances.sort_by_key(|g| g.id);
        Ok(id)
    }

    fn create_compute_instance(&mut self, gpu: u32, gi: u32) -> CallResult<u32> {
        let gpu_uuid = self.device(gpu)?.uuid.clone().unwrap_or_default();
        let mig = self.enabled(gpu)?;
        let profiles = mig.profiles.clone();
        let g = mig
            .gpu_instances
            .iter_mut()
            .find(|g| g.id == gi)
            .ok_or_else(|| err("Not Found (no such GPU instance)"))?;
        // One compute instance spans the whole GPU instance.
        if !g.compute_instances.is_empty() {
            return Err(err("Insufficient Resources (the GPU instance is full)"));
        }
        let profile = profiles
            .iter()
            .find(|p| Some(p.id) == g.profile_id || p.name == g.profile);
        let placement = g.placement.unwrap_or(MigPlacement { start: 0, size: 0 });
        let id = lowest_free(g.compute_instances.iter().map(|c| c.id), 0);
        g.compute_instances.push(ComputeInstance {
            id,
            uuid: Some(mig_uuid(&gpu_uuid, profile.map_or(0, |p| p.id), placement)),
            sm_count: profile.and_then(|p| p.sm_count),
            memory_mib: profile.map(|p| p.memory_mib),
        });
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use accord::hardware::MigMode;
    use accord_api::agent::{BusyGpu, CommandResult, MigTarget};

    use super::*;

    fn fixture(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(rel)
    }

    fn twin(nvml: &str) -> ReplayedGpus {
        ReplayedGpus::new(
            crate::nvml::load_snapshot(&fixture(&format!("nvml/{nvml}.json"))).unwrap(),
        )
    }

    fn target(index: u32, layout: &[&str]) -> MigTarget {
        MigTarget {
            index,
            uuid: None,
            layout: layout.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    const OPTS: ApplyOptions = ApplyOptions {
        allow_gpu_reset: false,
    };

    /// What the agent discovers from the twin: the recorded topology and
    /// the twin's NVML view, through the one merge.
    fn discover(t: &ReplayedGpus) -> accord::hardware::NodeHardware {
        crate::discover_replayed(
            &fixture("hwloc/derived/dgx2-board0-no-nvml.xml"),
            &t.snapshot(),
            Path::new("nvml.json"),
        )
        .unwrap()
    }

    #[test]
    fn a_layout_applied_to_a_replayed_h100_is_discovered_with_its_placements() {
        let t = twin("h100-8gpu");
        let mut changes = t.subscribe();
        let layout = ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"];
        assert_eq!(t.apply(&[target(3, &layout)], &OPTS), CommandResult::Done);
        assert_eq!((t.version(), t.repartitions()), (1, 1));
        assert!(changes.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), 1);

        let hw = discover(&t);
        let gpu = hw.gpus.iter().find(|g| g.index == 3).unwrap();
        let mig = gpu.mig.as_ref().unwrap();
        assert_eq!(mig.current_mode, MigMode::Enabled);
        assert_eq!(mig.layout().unwrap(), layout);
        for gi in &mig.gpu_instances {
            let ci = &gi.compute_instances[..];
            assert_eq!(ci.len(), 1, "{gi:?}");
            let p = mig.profile(&gi.profile).unwrap();
            assert_eq!(ci[0].memory_mib, Some(p.memory_mib));
            assert_eq!(ci[0].sm_count, p.sm_count);
            assert!(ci[0].uuid.as_deref().unwrap().starts_with("MIG-"));
        }
        // The others are as recorded.
        let others = hw.gpus.iter().filter(|g| g.index != 3);
        assert!(others
            .map(|g| g.mig.as_ref().unwrap())
            .all(|m| m.current_mode == MigMode::Disabled));

        // The same layout on a fresh twin of the same recording: the same
        // MIG device UUIDs (derived from the GPU and the placement).
        let again = twin("h100-8gpu");
        again.apply(&[target(3, &layout)], &OPTS);
        assert_eq!(discover(&again), hw);

        // Applied again: nothing changes, nobody is woken.
        assert_eq!(t.apply(&[target(3, &layout)], &OPTS), CommandResult::Done);
        assert_eq!((t.version(), t.repartitions()), (1, 1));
        assert!(!changes.has_changed().unwrap());
    }

    #[test]
    fn an_untouched_twin_discovers_as_its_recording() {
        let t = twin("h100-8gpu-mig-1g");
        let file = fixture("nvml/h100-8gpu-mig-1g.json");
        let from_file = crate::discover(crate::Sources {
            hwloc_xml: Some(&fixture("hwloc/derived/dgx2-board0-no-nvml.xml")),
            nvml_snapshot: Some(&file),
            nvidia_smi_xml: None,
        })
        .unwrap();
        let replayed = crate::discover_replayed(
            &fixture("hwloc/derived/dgx2-board0-no-nvml.xml"),
            &t.snapshot(),
            &file,
        )
        .unwrap();
        assert_eq!(replayed, from_file);
    }

    #[test]
    fn seven_small_instances_become_one_whole_gpu_instance() {
        let t = twin("h100-8gpu-mig-1g");
        assert_eq!(
            t.apply(&[target(0, &["7g.80gb@0"])], &OPTS),
            CommandResult::Done
        );
        let s = t.snapshot();
        let mig = s.devices[0].mig.as_ref().unwrap();
        assert_eq!(mig.layout().unwrap(), ["7g.80gb@0"]);
        // Ids as NVML hands them out: the lowest free.
        assert_eq!(mig.gpu_instances[0].id, 1);
        assert_eq!(mig.gpu_instances[0].compute_instances[0].id, 0);
    }

    #[test]
    fn a_busy_replayed_gpu_is_refused_and_left_alone() {
        let t = twin("h100-8gpu-mig-1g");
        t.set_busy(2, vec![31337]);
        let before = t.snapshot();
        let r = t.apply(&[target(2, &["7g.80gb@0"])], &OPTS);
        assert_eq!(
            r,
            CommandResult::Busy {
                gpus: vec![BusyGpu {
                    index: 2,
                    pids: vec![31337]
                }]
            }
        );
        assert_eq!(t.snapshot(), before);
        assert_eq!((t.version(), t.repartitions()), (0, 0));
        t.set_busy(2, Vec::new());
        assert_eq!(
            t.apply(&[target(2, &["7g.80gb@0"])], &OPTS),
            CommandResult::Done
        );
    }

    /// An Ampere GPU needs a reset for MIG mode; a Hopper one does not.
    #[test]
    fn enabling_mig_on_a_replayed_ampere_gpu_needs_a_reset() {
        let t = twin("h100-8gpu");
        t.lock().snapshot.devices[1].architecture = Some("Ampere".to_owned());
        let targets = [target(1, &["7g.80gb@0"])];
        let before = t.snapshot();
        assert_eq!(
            t.apply(&targets, &OPTS),
            CommandResult::ResetRequired { gpus: vec![1] }
        );
        // MIG mode put back, not left pending for the next boot: the GPU
        // as it was, nothing changed, nobody woken.
        let mig = t.snapshot().devices[1].mig.clone().unwrap();
        assert_eq!(
            (mig.current_mode, mig.pending_mode),
            (MigMode::Disabled, MigMode::Disabled)
        );
        assert_eq!(t.snapshot(), before);
        assert_eq!((t.version(), t.repartitions()), (0, 0));
        let allow = ApplyOptions {
            allow_gpu_reset: true,
        };
        assert_eq!(t.apply(&targets, &allow), CommandResult::Done);
        assert_eq!((t.version(), t.repartitions()), (1, 1));
        assert_eq!(
            t.snapshot().devices[1]
                .mig
                .as_ref()
                .unwrap()
                .layout()
                .unwrap(),
            ["7g.80gb@0"]
        );
    }

    /// The twin refuses what NVML refuses.
    #[test]
    fn the_twin_refuses_what_nvml_refuses() {
        let t = twin("h100-8gpu-mig-1g");
        let mut s = t.lock();
        let mut n = Nvml(&mut s);
        let at = |start| MigPlacement { start, size: 1 };
        assert!(n
            .destroy_gpu_instance(0, 7)
            .unwrap_err()
            .0
            .starts_with("In use"));
        assert!(n
            .create_gpu_instance(0, 19, at(0))
            .unwrap_err()
            .0
            .contains("taken"));
        assert!(n.create_gpu_instance(0, 99, at(0)).is_err());
        assert!(n.create_compute_instance(0, 7).is_err());
        n.destroy_compute_instance(0, 7, 0).unwrap();
        assert!(n.destroy_compute_instance(0, 7, 0).is_err());
        n.destroy_gpu_instance(0, 7).unwrap();
        assert!(n
            .create_gpu_instance(0, 19, MigPlacement { start: 0, size: 2 })
            .is_err());
        assert_eq!(n.create_gpu_instance(0, 19, at(0)).unwrap(), 1);
        assert!(n.gpu_instances(99).is_err());
        assert!(n.set_mig_mode(0, false).is_err(), "instances exist");
    }
}
