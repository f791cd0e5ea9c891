//! [`MigControl`] on the real driver: `nvml-wrapper` where it wraps the
//! call, `nvml-wrapper-sys`'s raw functions where 0.13 does not (GPU and
//! compute instances: list, create with placement, destroy; possible
//! placements, whose wrapper returns an empty list).
//!
//! No test here runs this module: the machines that build Accord have no
//! GPU. It is kept small and written to NVML's header (`nvml.h`, the
//! parameter contracts quoted in each `SAFETY` note); every symbol is looked
//! up before it is called (a driver without one is an error, never a
//! panic); every struct NVML fills in is built whole in Rust first, so
//! nothing is read that NVML did not write or Rust did not initialise;
//! no count NVML reports sizes a buffer past a cap (a larger one is an
//! error, never an allocation that aborts the agent).
//! The workspace denies unsafe code; this is the one module that allows it.

#![allow(unsafe_code)]

use std::os::raw::c_uint;
use std::ptr::null_mut;

use accord::hardware::mig::catalog;
use accord::hardware::{MigMode, MigPlacement, MigProfile};
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstancePlacement_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstance_t,
    nvmlProcessInfo_t, nvmlReturn_t, NvmlLib, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_GPU_INSTANCE_PROFILE_COUNT,
};

use super::{CallResult, GpuInstanceInfo, MigControl, MigModes, NvmlCallError};

fn call_err(e: NvmlError) -> NvmlCallError {
    NvmlCallError(e.to_string())
}

fn check(code: nvmlReturn_t) -> CallResult<()> {
    nvml_try(code).map_err(call_err)
}

/// A profile the GPU (or GPU instance) does not have is skipped: NVML says
/// `NotSupported` for a profile it does not support here and
/// `InvalidArgument` for an index it does not know. Any other error (the
/// GPU lost, NVML unloaded) is reported, never taken for "no such
/// profile".
fn supported<T>(r: Result<T, NvmlError>) -> CallResult<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported | NvmlError::InvalidArg) => Ok(None),
        Err(e) => Err(call_err(e)),
    }
}

// Counts NVML reports size the buffers it fills; a garbage one (up to
// 2^32) would abort the agent on the allocation. Each is capped far above
// what a GPU has, and a larger one is an error: NVML is not answering
// sanely, so nothing it says about the GPU is acted on.

/// Instances of one profile on a GPU or GPU instance: a GPU has 8 memory
/// slices and 7 compute slices, so at most 7 of any profile.
const MAX_INSTANCES: u32 = 64;
/// Placements of one GPU-instance profile: at most one per memory slice
/// (8).
const MAX_PLACEMENTS: u32 = 64;
/// Processes on one GPU: as many pids per busy GPU as accordd takes in an
/// outcome (1024); a GPU runs far fewer compute processes (MPS: tens of
/// clients). 24 KiB of buffer.
pub(crate) const MAX_PROCESSES: u32 = accord::hardware::limits::PIDS_PER_GPU as u32;

/// The length of a buffer for `count` things NVML reported, or an error
/// past `cap`.
fn buffer_len(count: c_uint, cap: u32, what: &str) -> CallResult<usize> {
    if count > cap {
        return Err(NvmlCallError(format!(
            "NVML reports {count} {what}; more than {cap} is not plausible"
        )));
    }
    Ok(count as usize)
}

/// A function of the loaded library, or why it is not there.
fn sym<'a, T, E: std::fmt::Display>(f: &'a Result<T, E>, name: &str) -> CallResult<&'a T> {
    f.as_ref()
        .map_err(|e| NvmlCallError(format!("{name} is not in this driver's NVML: {e}")))
}

/// The raw handle of `device`.
fn raw(device: &Device<'_>) -> nvml_wrapper_sys::bindings::nvmlDevice_t {
    // SAFETY: `Device::handle` is marked unsafe only so that callers think
    // before using the handle; it returns the handle the `Device` holds,
    // which stays valid while the `Nvml` it borrows is alive, and every
    // use below is within that borrow.
    unsafe { device.handle() }
}

fn placement_t(p: MigPlacement) -> nvmlGpuInstancePlacement_t {
    nvmlGpuInstancePlacement_t {
        start: p.start,
        size: p.size,
    }
}

fn gi_info(lib: &NvmlLib, gi: nvmlGpuInstance_t) -> CallResult<nvmlGpuInstanceInfo_t> {
    let f = sym(&lib.nvmlGpuInstanceGetInfo, "nvmlGpuInstanceGetInfo")?;
    let mut info = nvmlGpuInstanceInfo_t {
        device: null_mut(),
        id: 0,
        profileId: 0,
        placement: placement_t(MigPlacement { start: 0, size: 0 }),
    };
    // SAFETY: `gi` is a handle NVML returned for this library and device
    // moments ago, with nothing destroyed since; `info` is an initialised
    // struct of the header's layout (bindgen), which NVML writes.
    check(unsafe { f(gi, &mut info) })?;
    Ok(info)
}

fn ci_info(lib: &NvmlLib, ci: nvmlComputeInstance_t) -> CallResult<nvmlComputeInstanceInfo_t> {
    let f = sym(
        &lib.nvmlComputeInstanceGetInfo_v2,
        "nvmlComputeInstanceGetInfo_v2",
    )?;
    let mut info = nvmlComputeInstanceInfo_t {
        device: null_mut(),
        gpuInstance: null_mut(),
        id: 0,
        profileId: 0,
        placement: nvmlComputeInstancePlacement_t { start: 0, size: 0 },
    };
    // SAFETY: as in `gi_info`, for a compute-instance handle NVML just
    // returned.
    check(unsafe { f(ci, &mut info) })?;
    Ok(info)
}

/// The compute-instance profile `index` (`NVML_COMPUTE_INSTANCE_PROFILE_*`)
/// on `gi`, or `None` where the GPU instance does not support it.
fn ci_profile(
    lib: &NvmlLib,
    gi: nvmlGpuInstance_t,
    index: u32,
) -> CallResult<Option<nvmlComputeInstanceProfileInfo_t>> {
    let f = sym(
        &lib.nvmlGpuInstanceGetComputeInstanceProfileInfo,
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    )?;
    let mut info = nvmlComputeInstanceProfileInfo_t {
        id: 0,
        sliceCount: 0,
        instanceCount: 0,
        multiprocessorCount: 0,
        sharedCopyEngineCount: 0,
        sharedDecoderCount: 0,
        sharedEncoderCount: 0,
        sharedJpegCount: 0,
        sharedOfaCount: 0,
    };
    // SAFETY: `gi` is a live handle of this library; `info` is an
    // initialised struct of the header's layout, which NVML writes.
    let code = unsafe {
        f(
            gi,
            index,
            NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            &mut info,
        )
    };
    supported(nvml_try(code).map(|()| info))
}

/// Up to `count` entries (as NVML reported it, at most `cap`) from a NVML
/// list call that fills a caller's buffer and says how many it wrote.
fn handles<H: Copy>(
    count: c_uint,
    cap: u32,
    what: &str,
    null: H,
    fill: impl FnOnce(*mut H, &mut c_uint) -> nvmlReturn_t,
) -> CallResult<Vec<H>> {
    let len = buffer_len(count, cap, what)?;
    let mut buf = vec![null; len];
    let mut written: c_uint = 0;
    check(fill(buf.as_mut_ptr(), &mut written))?;
    buf.truncate((written as usize).min(len));
    Ok(buf)
}

/// Every entry of a NVML list call that takes the buffer's size in and
/// says how many it wrote (`NVML_ERROR_INSUFFICIENT_SIZE` past it), into a
/// buffer of `cap`: no count NVML reports sizes it.
fn up_to<H: Copy>(
    cap: u32,
    what: &str,
    null: H,
    fill: impl FnOnce(*mut H, &mut c_uint) -> nvmlReturn_t,
) -> CallResult<Vec<H>> {
    let len = cap as usize;
    let mut buf = vec![null; len];
    let mut count: c_uint = cap;
    match nvml_try(fill(buf.as_mut_ptr(), &mut count)) {
        Ok(()) => {}
        Err(NvmlError::InsufficientSize(_)) => {
            return Err(NvmlCallError(format!(
                "NVML reports more than {cap} {what}; more is not plausible"
            )))
        }
        Err(e) => return Err(call_err(e)),
    }
    buf.truncate((count as usize).min(len));
    Ok(buf)
}

fn compute_instances(lib: &NvmlLib, gi: nvmlGpuInstance_t) -> CallResult<Vec<u32>> {
    let f = sym(
        &lib.nvmlGpuInstanceGetComputeInstances,
        "nvmlGpuInstanceGetComputeInstances",
    )?;
    let mut ids = Vec::new();
    for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        let Some(p) = ci_profile(lib, gi, index)? else {
            continue;
        };
        if p.instanceCount == 0 {
            continue;
        }
        let what = format!("compute instances of profile {}", p.id);
        let list = handles(
            p.instanceCount,
            MAX_INSTANCES,
            &what,
            null_mut(),
            |buf, count| {
                // SAFETY: nvml.h: the buffer "must be large enough to
                // accommodate the instances supported by the profile", and it
                // has `instanceCount` (the profile's maximum) slots; `count`
                // is written.
                unsafe { f(gi, p.id, buf, count) }
            },
        )?;
        for ci in list {
            ids.push(ci_info(lib, ci)?.id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Every GPU instance of `device`, with its compute instances' ids.
pub(crate) fn instances_of(device: &Device<'_>) -> CallResult<Vec<GpuInstanceInfo>> {
    let lib = device.nvml().lib();
    let f = sym(&lib.nvmlDeviceGetGpuInstances, "nvmlDeviceGetGpuInstances")?;
    let dev = raw(device);
    let mut out = Vec::new();
    for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        let Some(p) = supported(device.profile_info(index))? else {
            continue;
        };
        if p.instance_count == 0 {
            continue;
        }
        let what = format!("GPU instances of profile {}", p.id);
        let list = handles(
            p.instance_count,
            MAX_INSTANCES,
            &what,
            null_mut(),
            |buf, count| {
                // SAFETY: nvml.h: the buffer "must be large enough to
                // accommodate the instances supported by the profile", and it
                // has `instance_count` (the profile's maximum) slots; `count`
                // is written.
                unsafe { f(dev, p.id, buf, count) }
            },
        )?;
        for gi in list {
            let info = gi_info(lib, gi)?;
            out.push(GpuInstanceInfo {
                id: info.id,
                profile_id: info.profileId,
                placement: MigPlacement {
                    start: info.placement.start,
                    size: info.placement.size,
                },
                compute_instances: compute_instances(lib, gi)?,
            });
        }
    }
    out.sort_by_key(|g| g.id);
    Ok(out)
}

/// Where instances of GPU-instance profile `profile_id` may be placed
/// (the call `nvml-wrapper` 0.13's `possible_placements` gets wrong).
pub(crate) fn possible_placements(
    device: &Device<'_>,
    profile_id: u32,
) -> CallResult<Vec<MigPlacement>> {
    let lib = device.nvml().lib();
    let f = sym(
        &lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2,
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    )?;
    let dev = raw(device);
    let mut n: c_uint = 0;
    // SAFETY: nvml.h: placements "can be NULL to discover number of
    // allowed placements for this profile"; `n` is written.
    check(unsafe { f(dev, profile_id, null_mut(), &mut n) })?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let what = format!("placements of profile {profile_id}");
    let list = handles(
        n,
        MAX_PLACEMENTS,
        &what,
        placement_t(MigPlacement { start: 0, size: 0 }),
        |buf, count| {
            *count = n;
            // SAFETY: the buffer has `n` initialised slots (`handles`
            // made it that long, or refused) and `count` says so; NVML
            // writes at most `count` and sets it to what it wrote.
            unsafe { f(dev, profile_id, buf, count) }
        },
    )?;
    Ok(list
        .into_iter()
        .map(|p| MigPlacement {
            start: p.start,
            size: p.size,
        })
        .collect())
}

/// The (GPU instance, compute instance) ids of a MIG device handle.
pub(crate) fn mig_device_ids(mig_device: &Device<'_>) -> CallResult<(u32, u32)> {
    let lib = mig_device.nvml().lib();
    let gi = sym(
        &lib.nvmlDeviceGetGpuInstanceId,
        "nvmlDeviceGetGpuInstanceId",
    )?;
    let ci = sym(
        &lib.nvmlDeviceGetComputeInstanceId,
        "nvmlDeviceGetComputeInstanceId",
    )?;
    let dev = raw(mig_device);
    let (mut g, mut c): (c_uint, c_uint) = (0, 0);
    // SAFETY: `dev` is a live MIG device handle of this library (nvml.h:
    // these calls take one); each writes one unsigned int.
    check(unsafe { gi(dev, &mut g) })?;
    // SAFETY: as above.
    check(unsafe { ci(dev, &mut c) })?;
    Ok((g, c))
}

/// The live driver, initialised for one command.
pub struct LiveMig {
    /// `None` only while a GPU reset runs (NVML shut down, as mig-parted
    /// does before `nvidia-smi -r`).
    nvml: Option<Nvml>,
}

impl std::fmt::Debug for LiveMig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveMig").finish_non_exhaustive()
    }
}

impl LiveMig {
    /// Initialises NVML; the reason it cannot, for the admin.
    pub fn open() -> Result<LiveMig, String> {
        Nvml::init()
            .map(|nvml| LiveMig { nvml: Some(nvml) })
            .map_err(|e| unavailable_reason(&e))
    }

    fn nvml(&self) -> CallResult<&Nvml> {
        self.nvml
            .as_ref()
            .ok_or_else(|| NvmlCallError("NVML could not be initialised again".to_owned()))
    }

    fn device(&self, gpu: u32) -> CallResult<Device<'_>> {
        self.nvml()?.device_by_index(gpu).map_err(call_err)
    }

    fn gpu_instance(&self, gpu: u32, id: u32) -> CallResult<(&NvmlLib, nvmlGpuInstance_t)> {
        let nvml = self.nvml()?;
        let device = nvml.device_by_index(gpu).map_err(call_err)?;
        let lib = nvml.lib();
        let f = sym(
            &lib.nvmlDeviceGetGpuInstanceById,
            "nvmlDeviceGetGpuInstanceById",
        )?;
        let mut gi: nvmlGpuInstance_t = null_mut();
        // SAFETY: a live device handle of this library; NVML writes one
        // handle into `gi`.
        check(unsafe { f(raw(&device), id, &mut gi) })?;
        Ok((lib, gi))
    }
}

impl MigControl for LiveMig {
    fn uuid(&mut self, gpu: u32) -> CallResult<String> {
        self.device(gpu)?.uuid().map_err(call_err)
    }

    fn running_pids(&mut self, gpu: u32) -> CallResult<Vec<u32>> {
        // Not nvml-wrapper's `running_compute_processes`: it sizes its
        // buffer from the count NVML reports (plus 5), unbounded.
        let nvml = self.nvml()?;
        let device = nvml.device_by_index(gpu).map_err(call_err)?;
        let f = sym(
            &nvml.lib().nvmlDeviceGetComputeRunningProcesses_v3,
            "nvmlDeviceGetComputeRunningProcesses_v3",
        )?;
        let none = nvmlProcessInfo_t {
            pid: 0,
            usedGpuMemory: 0,
            gpuInstanceId: 0,
            computeInstanceId: 0,
        };
        let procs = up_to(MAX_PROCESSES, "processes", none, |buf, count| {
            // SAFETY: a live device handle of this library; nvml.h:
            // `infoCount` is "the infos array size" on the way in (the
            // buffer's `MAX_PROCESSES` initialised slots) and the number
            // written on the way out.
            unsafe { f(raw(&device), count, buf) }
        })?;
        Ok(procs.into_iter().map(|p| p.pid).collect())
    }

    fn mig_mode(&mut self, gpu: u32) -> CallResult<Option<MigModes>> {
        let as_mode = |m: u32| {
            if m == nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE {
                MigMode::Enabled
            } else {
                MigMode::Disabled
            }
        };
        match self.device(gpu)?.mig_mode() {
            Ok(m) => Ok(Some(MigModes {
                current: as_mode(m.current),
                pending: as_mode(m.pending),
            })),
            Err(NvmlError::NotSupported) => Ok(None),
            Err(e) => Err(call_err(e)),
        }
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> CallResult<bool> {
        let device = self.device(gpu)?;
        device.set_mig_mode(enabled).map_err(call_err)?;
        // mig-parted's `IsMigModeChangePending`: a reset is due while the
        // pending mode is not the current one.
        let m = device.mig_mode().map_err(call_err)?;
        Ok(m.current != m.pending)
    }

    fn reset_gpu(&mut self, gpu: u32) -> CallResult<()> {
        let bus = self.device(gpu)?.pci_info().map_err(call_err)?.bus_id;
        // mig-parted shuts NVML down and runs `nvidia-smi -r -i BUS`
        // (cmd/nvidia-mig-parted/util/device.go `nvmlResetAllGPUs`): NVML
        // has no reset call of its own for this.
        self.nvml = None;
        let out = std::process::Command::new("nvidia-smi")
            .args(["-r", "-i", &bus])
            .output();
        self.nvml = Nvml::init().ok();
        let out = out.map_err(|e| NvmlCallError(format!("running nvidia-smi -r: {e}")))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(NvmlCallError(format!(
                "nvidia-smi -r -i {bus}: {}: {}",
                out.status,
                last.chars().take(200).collect::<String>()
            )));
        }
        self.nvml()?;
        Ok(())
    }

    fn gpu_instance_profiles(&mut self, gpu: u32) -> CallResult<Vec<MigProfile>> {
        let device = self.device(gpu)?;
        let model = device.name().ok();
        Ok(mig_profiles(&device, model.as_deref()).0)
    }

    fn gpu_instances(&mut self, gpu: u32) -> CallResult<Vec<GpuInstanceInfo>> {
        instances_of(&self.device(gpu)?)
    }

    fn destroy_compute_instance(&mut self, gpu: u32, gi: u32, ci: u32) -> CallResult<()> {
        let (lib, gi) = self.gpu_instance(gpu, gi)?;
        let by_id = sym(
            &lib.nvmlGpuInstanceGetComputeInstanceById,
            "nvmlGpuInstanceGetComputeInstanceById",
        )?;
        let destroy = sym(
            &lib.nvmlComputeInstanceDestroy,
            "nvmlComputeInstanceDestroy",
        )?;
        let mut handle: nvmlComputeInstance_t = null_mut();
        // SAFETY: a live GPU-instance handle of this library; NVML writes
        // one handle into `handle`.
        check(unsafe { by_id(gi, ci, &mut handle) })?;
        // SAFETY: the handle NVML just returned; nothing uses it after.
        check(unsafe { destroy(handle) })
    }

    fn destroy_gpu_instance(&mut self, gpu: u32, gi: u32) -> CallResult<()> {
        let (lib, gi) = self.gpu_instance(gpu, gi)?;
        let destroy = sym(&lib.nvmlGpuInstanceDestroy, "nvmlGpuInstanceDestroy")?;
        // SAFETY: the handle NVML just returned; nothing uses it after.
        check(unsafe { destroy(gi) })
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: MigPlacement,
    ) -> CallResult<u32> {
        let nvml = self.nvml()?;
        let device = nvml.device_by_index(gpu).map_err(call_err)?;
        let lib = nvml.lib();
        let create = sym(
            &lib.nvmlDeviceCreateGpuInstanceWithPlacement,
            "nvmlDeviceCreateGpuInstanceWithPlacement",
        )?;
        let at = placement_t(placement);
        let mut gi: nvmlGpuInstance_t = null_mut();
        // SAFETY: a live device handle of this library; `at` is read,
        // one handle is written into `gi`.
        check(unsafe { create(raw(&device), profile_id, &at, &mut gi) })?;
        Ok(gi_info(lib, gi)?.id)
    }

    fn create_compute_instance(&mut self, gpu: u32, gi: u32) -> CallResult<u32> {
        let (lib, gi) = self.gpu_instance(gpu, gi)?;
        // The profile with the most slices the GPU instance supports is the
        // one that spans it (first of equals: the plain one, not REV1).
        let mut full: Option<nvmlComputeInstanceProfileInfo_t> = None;
        for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            if let Some(p) = ci_profile(lib, gi, index)? {
                if full.is_none_or(|f| p.sliceCount > f.sliceCount) {
                    full = Some(p);
                }
            }
        }
        let full = full.ok_or_else(|| {
            NvmlCallError("the GPU instance supports no compute-instance profile".to_owned())
        })?;
        let create = sym(
            &lib.nvmlGpuInstanceCreateComputeInstance,
            "nvmlGpuInstanceCreateComputeInstance",
        )?;
        let mut ci: nvmlComputeInstance_t = null_mut();
        // SAFETY: a live GPU-instance handle of this library; NVML writes
        // one handle into `ci`.
        check(unsafe { create(gi, full.id, &mut ci) })?;
        Ok(ci_info(lib, ci)?.id)
    }
}

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` in the bindings `nvml-wrapper` ships.
const GPU_INSTANCE_PROFILE_COUNT: u32 = 17;
/// `NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1`: the `+me` (media extensions)
/// one-slice profile.
const PROFILE_1_SLICE_MEDIA: u32 = 7;

/// Why NVML cannot be used, for the admin.
pub(crate) fn unavailable_reason(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => {
            "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this host".to_owned()
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
        NvmlError::NoPermission => "no permission to use NVML".to_owned(),
        other => format!("NVML initialisation failed: {other}"),
    }
}

/// The GPU's GPU-instance profiles: NVML's, named as NVIDIA's published
/// table names them (else from their slices and memory), placed where
/// NVML says (else where the table says); and whether the table knew the
/// model.
pub(crate) fn mig_profiles(device: &Device<'_>, model: Option<&str>) -> (Vec<MigProfile>, bool) {
    let published = model.and_then(catalog::profiles_for_model);
    let mut profiles = Vec::new();
    for profile in 0..GPU_INSTANCE_PROFILE_COUNT {
        let Ok(info) = device.profile_info(profile) else {
            continue;
        };
        if info.instance_count == 0 {
            continue;
        }
        let known = published
            .as_ref()
            .and_then(|table| table.iter().find(|p| p.id == info.id));
        let name = known.map(|p| p.name.clone()).unwrap_or_else(|| {
            let gb = info.memory_size_mb.div_ceil(1024);
            let suffix = if profile == PROFILE_1_SLICE_MEDIA {
                "+me"
            } else {
                ""
            };
            format!("{}g.{gb}gb{suffix}", info.slice_count)
        });
        let placements = possible_placements(device, info.id)
            .ok()
            .filter(|p| !p.is_empty())
            .or_else(|| known.map(|p| p.placements.clone()))
            .unwrap_or_default();
        profiles.push(MigProfile {
            id: info.id,
            name,
            slices: info.slice_count,
            memory_mib: info.memory_size_mb,
            max_count: info.instance_count,
            sm_count: Some(info.multiprocessor_count),
            placements,
        });
    }
    (profiles, published.is_some())
}

#[cfg(test)]
mod tests {
    use nvml_wrapper_sys::bindings::{
        nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
        nvmlReturn_enum_NVML_SUCCESS,
    };

    use super::*;

    /// A count past its cap is refused before any buffer is made (a
    /// garbage count of 2^32 - 1 would abort the agent on the allocation);
    /// one within it sizes the buffer, and a written count past the buffer
    /// is not believed.
    #[test]
    fn a_count_nvml_reports_past_its_cap_sizes_no_buffer() {
        let mut called = false;
        let r = handles(
            u32::MAX,
            MAX_INSTANCES,
            "GPU instances",
            null_mut::<u8>(),
            |_, _| {
                called = true;
                nvmlReturn_enum_NVML_SUCCESS
            },
        );
        assert_eq!(
            r.unwrap_err().0,
            "NVML reports 4294967295 GPU instances; more than 64 is not plausible"
        );
        assert!(!called, "NVML called though no buffer was made");
        assert!(handles(
            MAX_PLACEMENTS + 1,
            MAX_PLACEMENTS,
            "placements",
            0u32,
            |_, _| 0
        )
        .is_err());

        let r = handles(3, MAX_INSTANCES, "GPU instances", 0u32, |buf, count| {
            // SAFETY: the buffer has 3 slots.
            unsafe { buf.add(2).write(7) };
            *count = u32::MAX;
            nvmlReturn_enum_NVML_SUCCESS
        });
        assert_eq!(r.unwrap(), [0, 0, 7]);
    }

    /// A list that takes its buffer's size: the buffer is the cap, NVML is
    /// told so, and more than it is an error.
    #[test]
    fn a_list_longer_than_its_cap_is_an_error() {
        let r = up_to(MAX_PROCESSES, "processes", 0u32, |buf, count| {
            assert_eq!(*count, MAX_PROCESSES);
            // SAFETY: the buffer has `count` slots.
            unsafe { buf.write(42) };
            *count = 1;
            nvmlReturn_enum_NVML_SUCCESS
        });
        assert_eq!(r.unwrap(), [42]);
        let r = up_to(MAX_PROCESSES, "processes", 0u32, |_, count| {
            *count = 5000;
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        });
        assert_eq!(
            r.unwrap_err().0,
            "NVML reports more than 1024 processes; more is not plausible"
        );
        let r = up_to(MAX_PROCESSES, "processes", 0u32, |_, _| {
            nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST
        });
        assert!(r.is_err());
    }

    /// Only "no such profile here" skips a profile; a lost GPU is an
    /// error, not an empty list.
    #[test]
    fn only_an_unsupported_profile_is_skipped() {
        assert_eq!(supported(Ok(3)), Ok(Some(3)));
        assert_eq!(supported::<u32>(Err(NvmlError::NotSupported)), Ok(None));
        assert_eq!(supported::<u32>(Err(NvmlError::InvalidArg)), Ok(None));
        for e in [
            NvmlError::GpuLost,
            NvmlError::Uninitialized,
            NvmlError::Unknown,
        ] {
            let said = e.to_string();
            assert_eq!(supported::<u32>(Err(e)), Err(NvmlCallError(said)));
        }
    }
}
