//! The MIG sequence against a recording fake of NVML: every call logged,
//! one call made to fail on demand.

use std::collections::BTreeMap;

use accord::hardware::mig::catalog;
use accord::hardware::{MigMode, MigPlacement, MigProfile, MigState};
use accord_api::agent::{BusyGpu, CommandResult, MigTarget};

use super::{
    apply, ApplyOptions, CallResult, GpuInstanceInfo, MigControl, MigModes, NvmlCallError,
};

#[derive(Debug, Clone)]
struct FakeGpu {
    uuid: String,
    /// `None`: not MIG capable.
    modes: Option<MigModes>,
    /// Enabling MIG mode needs a reset (Ampere).
    reset_needed: bool,
    pids: Vec<u32>,
    profiles: Vec<MigProfile>,
    gis: Vec<GpuInstanceInfo>,
}

/// NVML as a log: each call is recorded as one line (`create_gi 0
/// 19@0`); the call equal to `fail` fails once, changing nothing.
#[derive(Debug, Default)]
struct Fake {
    gpus: BTreeMap<u32, FakeGpu>,
    calls: Vec<String>,
    fail: Option<String>,
}

const MUTATING: [&str; 6] = [
    "set_mig_mode",
    "reset",
    "destroy_ci",
    "destroy_gi",
    "create_gi",
    "create_ci",
];

fn h100() -> Vec<MigProfile> {
    catalog::profiles_for_model("NVIDIA H100 80GB HBM3").unwrap()
}

fn uuid(gpu: u32) -> String {
    format!("GPU-0000000{gpu}-aaaa-bbbb-cccc-dddddddddddd")
}

impl Fake {
    /// `n` idle H100s with MIG disabled.
    fn h100s(n: u32) -> Fake {
        let mut f = Fake::default();
        for i in 0..n {
            f.gpus.insert(
                i,
                FakeGpu {
                    uuid: uuid(i),
                    modes: Some(MigModes {
                        current: MigMode::Disabled,
                        pending: MigMode::Disabled,
                    }),
                    reset_needed: false,
                    pids: Vec::new(),
                    profiles: h100(),
                    gis: Vec::new(),
                },
            );
        }
        f
    }

    /// GPU `gpu` with MIG enabled and `layout` in place, each instance with
    /// its compute instance (ids from 1 in layout order).
    fn with_layout(mut self, gpu: u32, layout: &[&str]) -> Fake {
        let g = self.gpus.get_mut(&gpu).unwrap();
        let state = MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: g.profiles.clone(),
            gpu_instances: Vec::new(),
        }
        .with_layout(&strings(layout))
        .unwrap();
        g.modes = Some(MigModes {
            current: MigMode::Enabled,
            pending: MigMode::Enabled,
        });
        g.gis = state
            .gpu_instances
            .iter()
            .map(|gi| GpuInstanceInfo {
                id: gi.id,
                profile_id: gi.profile_id.unwrap(),
                placement: gi.placement.unwrap(),
                compute_instances: vec![0],
            })
            .collect();
        self
    }

    fn call(&mut self, line: String) -> CallResult<()> {
        let failing = self.fail.as_deref() == Some(line.as_str());
        self.calls.push(line);
        if failing {
            self.fail = None;
            return Err(NvmlCallError("Unknown Error (injected)".to_owned()));
        }
        Ok(())
    }

    fn gpu(&mut self, gpu: u32) -> CallResult<&mut FakeGpu> {
        self.gpus
            .get_mut(&gpu)
            .ok_or_else(|| NvmlCallError("Invalid Argument".to_owned()))
    }

    /// The calls that change something, in order.
    fn changes(&self) -> Vec<&str> {
        self.calls
            .iter()
            .map(String::as_str)
            .filter(|c| MUTATING.iter().any(|m| c.split(' ').next() == Some(*m)))
            .collect()
    }

    /// GPU `gpu`'s layout now, in placement order, `*` marking an instance
    /// without a compute instance.
    fn layout(&self, gpu: u32) -> Vec<String> {
        let g = &self.gpus[&gpu];
        let mut v: Vec<_> = g
            .gis
            .iter()
            .map(|gi| {
                let name = &g
                    .profiles
                    .iter()
                    .find(|p| p.id == gi.profile_id)
                    .unwrap()
                    .name;
                let mark = if gi.compute_instances.is_empty() {
                    "*"
                } else {
                    ""
                };
                (
                    gi.placement.start,
                    format!("{name}@{}{mark}", gi.placement.start),
                )
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, s)| s).collect()
    }
}

impl MigControl for Fake {
    fn uuid(&mut self, gpu: u32) -> CallResult<String> {
        self.call(format!("uuid {gpu}"))?;
        Ok(self.gpu(gpu)?.uuid.clone())
    }

    fn running_pids(&mut self, gpu: u32) -> CallResult<Vec<u32>> {
        self.call(format!("pids {gpu}"))?;
        Ok(self.gpu(gpu)?.pids.clone())
    }

    fn mig_mode(&mut self, gpu: u32) -> CallResult<Option<MigModes>> {
        self.call(format!("mode {gpu}"))?;
        Ok(self.gpu(gpu)?.modes)
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> CallResult<bool> {
        self.call(format!(
            "set_mig_mode {gpu} {}",
            if enabled { "on" } else { "off" }
        ))?;
        let g = self.gpu(gpu)?;
        let want = if enabled {
            MigMode::Enabled
        } else {
            MigMode::Disabled
        };
        let m = g.modes.as_mut().unwrap();
        m.pending = want;
        if !g.reset_needed {
            m.current = want;
        }
        Ok(m.current != m.pending)
    }

    fn reset_gpu(&mut self, gpu: u32) -> CallResult<()> {
        self.call(format!("reset {gpu}"))?;
        let g = self.gpu(gpu)?;
        let m = g.modes.as_mut().unwrap();
        m.current = m.pending;
        g.gis.clear();
        Ok(())
    }

    fn gpu_instance_profiles(&mut self, gpu: u32) -> CallResult<Vec<MigProfile>> {
        self.call(format!("profiles {gpu}"))?;
        Ok(self.gpu(gpu)?.profiles.clone())
    }

    fn gpu_instances(&mut self, gpu: u32) -> CallResult<Vec<GpuInstanceInfo>> {
        self.call(format!("list {gpu}"))?;
        Ok(self.gpu(gpu)?.gis.clone())
    }

    fn destroy_compute_instance(&mut self, gpu: u32, gi: u32, ci: u32) -> CallResult<()> {
        self.call(format!("destroy_ci {gpu} {gi}/{ci}"))?;
        let g = self.gpu(gpu)?;
        let gi = g.gis.iter_mut().find(|g| g.id == gi).unwrap();
        gi.compute_instances.retain(|c| *c != ci);
        Ok(())
    }

    fn destroy_gpu_instance(&mut self, gpu: u32, gi: u32) -> CallResult<()> {
        self.call(format!("destroy_gi {gpu} {gi}"))?;
        let g = self.gpu(gpu)?;
        assert!(
            g.gis
                .iter()
                .find(|g| g.id == gi)
                .unwrap()
                .compute_instances
                .is_empty(),
            "NVML refuses to destroy a GPU instance with compute instances"
        );
        g.gis.retain(|g| g.id != gi);
        Ok(())
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: MigPlacement,
    ) -> CallResult<u32> {
        self.call(format!("create_gi {gpu} {profile_id}@{}", placement.start))?;
        let g = self.gpu(gpu)?;
        assert_eq!(g.modes.unwrap().current, MigMode::Enabled);
        assert!(
            g.gis.iter().all(|gi| !gi.placement.overlaps(placement)),
            "created over an existing instance"
        );
        let id = (1..).find(|i| g.gis.iter().all(|gi| gi.id != *i)).unwrap();
        g.gis.push(GpuInstanceInfo {
            id,
            profile_id,
            placement,
            compute_instances: Vec::new(),
        });
        Ok(id)
    }

    fn create_compute_instance(&mut self, gpu: u32, gi: u32) -> CallResult<u32> {
        self.call(format!("create_ci {gpu} {gi}"))?;
        let g = self.gpu(gpu)?;
        let gi = g.gis.iter_mut().find(|g| g.id == gi).unwrap();
        assert!(gi.compute_instances.is_empty(), "a second compute instance");
        gi.compute_instances.push(0);
        Ok(0)
    }
}

fn strings(layout: &[&str]) -> Vec<String> {
    layout.iter().map(|s| (*s).to_owned()).collect()
}

fn target(gpu: u32, layout: &[&str]) -> MigTarget {
    MigTarget {
        index: gpu,
        uuid: Some(uuid(gpu)),
        layout: strings(layout),
    }
}

const NO_RESET: ApplyOptions = ApplyOptions {
    allow_gpu_reset: false,
};

#[test]
fn a_layout_from_scratch_checks_then_enables_mig_then_creates_gi_then_ci() {
    let mut f = Fake::h100s(1);
    let r = apply(&mut f, &[target(0, &["3g.40gb@4", "1g.10gb@0"])], &NO_RESET);
    assert_eq!(r, CommandResult::Done);
    assert_eq!(
        f.calls,
        [
            // Checked: the GPU, its mode, its profiles (no instances
            // while MIG is off).
            "uuid 0",
            "mode 0",
            "profiles 0",
            // Nothing runs on it.
            "pids 0",
            "set_mig_mode 0 on",
            "mode 0",
            "list 0",
            "create_gi 0 9@4",
            "create_ci 0 1",
            "create_gi 0 19@0",
            "create_ci 0 2",
        ]
    );
    assert_eq!(f.layout(0), ["1g.10gb@0", "3g.40gb@4"]);
}

#[test]
fn instances_not_kept_are_destroyed_ci_then_gi_before_any_creation_and_matching_ones_kept() {
    let seven: Vec<String> = (0..7).map(|s| format!("1g.10gb@{s}")).collect();
    let seven: Vec<&str> = seven.iter().map(String::as_str).collect();
    let mut f = Fake::h100s(1).with_layout(0, &seven);
    let r = apply(
        &mut f,
        &[target(
            0,
            &["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"],
        )],
        &NO_RESET,
    );
    assert_eq!(r, CommandResult::Done);
    assert_eq!(
        f.changes(),
        [
            "destroy_ci 0 1/0",
            "destroy_gi 0 1",
            "destroy_ci 0 2/0",
            "destroy_gi 0 2",
            "destroy_ci 0 3/0",
            "destroy_gi 0 3",
            "destroy_ci 0 4/0",
            "destroy_gi 0 4",
            "create_gi 0 9@0",
            "create_ci 0 1",
        ]
    );
    assert_eq!(
        f.layout(0),
        ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
    );
    // The kept instances are the same ones (ids 5, 6, 7).
    let ids: Vec<u32> = f.gpus[&0].gis.iter().map(|g| g.id).collect();
    assert!(
        ids.contains(&5) && ids.contains(&6) && ids.contains(&7),
        "{ids:?}"
    );
}

#[test]
fn a_busy_gpu_is_refused_and_nothing_changes_on_any_gpu() {
    let mut f = Fake::h100s(2);
    f.gpus.get_mut(&1).unwrap().pids = vec![4242, 17, 4242];
    let r = apply(
        &mut f,
        &[target(0, &["7g.80gb@0"]), target(1, &["7g.80gb@0"])],
        &NO_RESET,
    );
    assert_eq!(
        r,
        CommandResult::Busy {
            gpus: vec![BusyGpu {
                index: 1,
                pids: vec![17, 4242]
            }]
        }
    );
    assert!(f.changes().is_empty(), "{:?}", f.calls);
}

#[test]
fn a_busy_gpu_whose_layout_is_in_place_is_not_a_refusal() {
    let mut f = Fake::h100s(1).with_layout(0, &["7g.80gb@0"]);
    f.gpus.get_mut(&0).unwrap().pids = vec![99];
    let r = apply(&mut f, &[target(0, &["7g.80gb@0"])], &NO_RESET);
    assert_eq!(r, CommandResult::Done);
    assert!(f.changes().is_empty(), "{:?}", f.calls);
}

#[test]
fn a_mode_change_that_needs_a_reset_is_refused_unless_allowed_then_a_retry_finishes() {
    let mut f = Fake::h100s(2).with_layout(1, &["1g.10gb@0"]);
    f.gpus.get_mut(&0).unwrap().reset_needed = true;
    let targets = [target(0, &["7g.80gb@0"]), target(1, &["7g.80gb@0"])];
    let before = f.gpus.clone();
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(r, CommandResult::ResetRequired { gpus: vec![0] });
    // The mode is put back, not left pending for the next boot; no
    // instance changed on either GPU.
    assert_eq!(f.changes(), ["set_mig_mode 0 on", "set_mig_mode 0 off"]);
    assert_eq!(modes(&f), modes_of(&before));
    assert_eq!(f.layout(1), ["1g.10gb@0"]);

    // Again without a reset: the same answer, the GPUs as they were.
    f.calls.clear();
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(r, CommandResult::ResetRequired { gpus: vec![0] });
    assert_eq!(f.changes(), ["set_mig_mode 0 on", "set_mig_mode 0 off"]);
    assert_eq!(modes(&f), modes_of(&before));

    // Allowed: the mode, the reset, then the instances.
    f.calls.clear();
    let allow = ApplyOptions {
        allow_gpu_reset: true,
    };
    let r = apply(&mut f, &targets, &allow);
    assert_eq!(r, CommandResult::Done);
    assert_eq!(
        f.changes(),
        [
            "set_mig_mode 0 on",
            "reset 0",
            "create_gi 0 0@0",
            "create_ci 0 1",
            "destroy_ci 1 1/0",
            "destroy_gi 1 1",
            "create_gi 1 0@0",
            "create_ci 1 1",
        ]
    );
}

/// Every GPU's MIG modes (current, pending).
fn modes_of(gpus: &BTreeMap<u32, FakeGpu>) -> Vec<(u32, Option<(MigMode, MigMode)>)> {
    gpus.iter()
        .map(|(i, g)| (*i, g.modes.map(|m| (m.current, m.pending))))
        .collect()
}

fn modes(f: &Fake) -> Vec<(u32, Option<(MigMode, MigMode)>)> {
    modes_of(&f.gpus)
}

/// One GPU needs a reset that is not allowed: every mode the command set
/// is put back, the last first, whether it needed the reset (pending) or
/// took effect at once; MIG mode pending off elsewhere is not touched.
#[test]
fn a_refused_reset_puts_back_every_mode_the_command_set_and_touches_nothing_else() {
    let mut f = Fake::h100s(3).with_layout(2, &["7g.80gb@0"]);
    f.gpus.get_mut(&1).unwrap().reset_needed = true;
    f.gpus.get_mut(&2).unwrap().modes.as_mut().unwrap().pending = MigMode::Disabled;
    let before = f.gpus.clone();
    let targets = [
        target(0, &["7g.80gb@0"]),
        target(1, &["7g.80gb@0"]),
        target(2, &["7g.80gb@0"]),
    ];
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(r, CommandResult::ResetRequired { gpus: vec![1] });
    assert_eq!(
        f.changes(),
        [
            "set_mig_mode 0 on",
            "set_mig_mode 1 on",
            "set_mig_mode 1 off",
            "set_mig_mode 0 off",
        ]
    );
    assert_eq!(modes(&f), modes_of(&before));
    assert!(f.layout(0).is_empty() && f.layout(1).is_empty());
    assert_eq!(f.layout(2), ["7g.80gb@0"]);
}

/// MIG mode pending on before the command (set by someone else): the
/// command needs only the reset and, refused it, changes nothing.
#[test]
fn a_mode_pending_before_the_command_is_left_as_it_was() {
    let mut f = Fake::h100s(1);
    f.gpus.get_mut(&0).unwrap().reset_needed = true;
    f.gpus.get_mut(&0).unwrap().modes.as_mut().unwrap().pending = MigMode::Enabled;
    let before = f.gpus.clone();
    let r = apply(&mut f, &[target(0, &["7g.80gb@0"])], &NO_RESET);
    assert_eq!(r, CommandResult::ResetRequired { gpus: vec![0] });
    assert!(f.changes().is_empty(), "{:?}", f.calls);
    assert_eq!(modes(&f), modes_of(&before));
}

/// A mode that cannot be put back is a failure naming it (the GPU is not
/// as it was: someone has to look); a mode that cannot be set puts back
/// the ones set before it.
#[test]
fn a_mode_not_put_back_is_a_failure_and_a_mode_not_set_puts_back_the_others() {
    let mut f = Fake::h100s(2);
    f.gpus.get_mut(&1).unwrap().reset_needed = true;
    let targets = [target(0, &["7g.80gb@0"]), target(1, &["7g.80gb@0"])];
    f.fail = Some("set_mig_mode 0 off".to_owned());
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(
        r,
        CommandResult::Failed {
            reason: "GPU 1: enabling MIG mode needs a GPU reset, not allowed (mig.allow_gpu_reset = false); \
                     GPU 0: putting MIG mode back off: Unknown Error (injected) (it stays enabled or pending)"
                .to_owned()
        }
    );
    assert_eq!(
        modes(&f)[1],
        (1, Some((MigMode::Disabled, MigMode::Disabled))),
        "GPU 1 put back all the same"
    );

    let mut f = Fake::h100s(2);
    let before = f.gpus.clone();
    f.fail = Some("set_mig_mode 1 on".to_owned());
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(
        r,
        CommandResult::Failed {
            reason: "GPU 1: enabling MIG mode: Unknown Error (injected)".to_owned()
        }
    );
    assert_eq!(
        f.changes(),
        [
            "set_mig_mode 0 on",
            "set_mig_mode 1 on",
            "set_mig_mode 0 off"
        ]
    );
    assert_eq!(modes(&f), modes_of(&before));
}

#[test]
fn a_gpu_whose_uuid_differs_is_refused_before_any_change() {
    let mut f = Fake::h100s(2);
    let mut wrong = target(1, &["7g.80gb@0"]);
    wrong.uuid = Some("GPU-ffffffff-0000-0000-0000-000000000000".to_owned());
    let r = apply(&mut f, &[target(0, &["7g.80gb@0"]), wrong], &NO_RESET);
    let CommandResult::Failed { reason } = r else {
        panic!("{r:?}");
    };
    assert!(
        reason.starts_with("GPU 1: its UUID is GPU-00000001") && reason.contains("GPU-ffffffff"),
        "{reason}"
    );
    assert!(f.changes().is_empty(), "{:?}", f.calls);
    // Without a UUID in the command, the index alone is enough.
    let mut any = target(1, &["7g.80gb@0"]);
    any.uuid = None;
    assert_eq!(apply(&mut f, &[any], &NO_RESET), CommandResult::Done);
}

#[test]
fn an_invalid_layout_is_refused_before_any_change() {
    let long = "x".repeat(1 << 20);
    let many: Vec<String> = (0..10_000).map(|i| format!("1g.10gb@{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for (layout, says) in [
        (
            vec!["2g.20gb@1"],
            "\"2g.20gb@1\": not a placement of that profile",
        ),
        (
            vec!["9g.99gb@0"],
            "\"9g.99gb@0\": the GPU has no such profile",
        ),
        (
            vec!["3g.40gb@0", "2g.20gb@2"],
            "\"2g.20gb@2\": overlaps an earlier instance",
        ),
        (vec!["1g.10gb"], "\"1g.10gb\": not PROFILE@START"),
        (vec!["1g.10gb@-1"], "not PROFILE@START"),
        (vec![long.as_str()], "is not PROFILE@START"),
        (many, "a layout of 10000 instances cannot fit"),
    ] {
        let mut f = Fake::h100s(2);
        // GPU 0's layout is fine: it is not applied either.
        let r = apply(
            &mut f,
            &[target(0, &["7g.80gb@0"]), target(1, &layout)],
            &NO_RESET,
        );
        let CommandResult::Failed { reason } = r else {
            panic!("{r:?}");
        };
        assert!(reason.starts_with("GPU 1"), "{reason}");
        assert!(reason.contains(says), "{reason} does not say {says}");
        assert!(reason.len() < 200, "{} bytes", reason.len());
        assert!(f.changes().is_empty(), "{:?}", f.calls);
    }
    let mut f = Fake::h100s(2);
    f.gpus.get_mut(&1).unwrap().modes = None;
    let r = apply(&mut f, &[target(1, &["7g.80gb@0"])], &NO_RESET);
    assert_eq!(
        r,
        CommandResult::Failed {
            reason: "GPU 1 is not MIG capable".to_owned()
        }
    );
    let r = apply(
        &mut f,
        &[target(0, &["7g.80gb@0"]), target(0, &[])],
        &NO_RESET,
    );
    assert_eq!(
        r,
        CommandResult::Failed {
            reason: "GPU 0 is named twice in the command".to_owned()
        }
    );
    let r = apply(&mut f, &[target(9, &[])], &NO_RESET);
    assert!(
        matches!(r, CommandResult::Failed { ref reason } if reason.starts_with("GPU 9: reading its UUID")),
        "{r:?}"
    );
    assert!(f.changes().is_empty(), "{:?}", f.calls);
}

/// One creation fails half-way: the GPU instance exists, its compute
/// instance does not. The outcome names it; the same command again makes
/// exactly the missing calls.
#[test]
fn a_creation_failing_half_way_is_named_and_a_retry_finishes_with_the_missing_calls_only() {
    let mut f = Fake::h100s(1);
    let targets = [target(0, &["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"])];
    f.fail = Some("create_ci 0 2".to_owned());
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(
        r,
        CommandResult::Failed {
            reason: "GPU 0: creating the compute instance of new GPU instance 2 (2g.20gb@4): Unknown Error (injected)".to_owned()
        }
    );
    assert_eq!(
        f.changes(),
        [
            "set_mig_mode 0 on",
            "create_gi 0 9@0",
            "create_ci 0 1",
            "create_gi 0 14@4",
            "create_ci 0 2",
        ]
    );
    assert_eq!(f.layout(0), ["3g.40gb@0", "2g.20gb@4*"]);

    f.calls.clear();
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(r, CommandResult::Done);
    assert_eq!(
        f.changes(),
        ["create_ci 0 2", "create_gi 0 19@6", "create_ci 0 3"]
    );
    assert_eq!(f.layout(0), ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"]);
}

/// A destroy fails half-way (the compute instance gone, its GPU instance
/// not): the retry destroys the rest and creates what is missing.
#[test]
fn a_destroy_failing_half_way_is_finished_by_a_retry() {
    let mut f = Fake::h100s(1).with_layout(0, &["1g.10gb@0", "1g.10gb@1", "1g.10gb@2"]);
    let targets = [target(0, &["3g.40gb@0"])];
    f.fail = Some("destroy_gi 0 2".to_owned());
    let r = apply(&mut f, &targets, &NO_RESET);
    assert_eq!(
        r,
        CommandResult::Failed {
            reason: "GPU 0: destroying GPU instance 2 (1g.10gb@1): Unknown Error (injected)"
                .to_owned()
        }
    );
    assert_eq!(f.layout(0), ["1g.10gb@1*", "1g.10gb@2"]);
    f.calls.clear();
    assert_eq!(apply(&mut f, &targets, &NO_RESET), CommandResult::Done);
    assert_eq!(
        f.changes(),
        [
            "destroy_gi 0 2",
            "destroy_ci 0 3/0",
            "destroy_gi 0 3",
            "create_gi 0 9@0",
            "create_ci 0 1",
        ]
    );
}

#[test]
fn a_layout_in_place_is_done_without_a_change_and_an_empty_layout_clears_the_gpu() {
    let mut f = Fake::h100s(2);
    let targets = [
        target(0, &["4g.40gb@0", "1g.20gb@4", "1g.10gb@6"]),
        target(1, &[]),
    ];
    assert_eq!(apply(&mut f, &targets, &NO_RESET), CommandResult::Done);
    f.calls.clear();
    assert_eq!(apply(&mut f, &targets, &NO_RESET), CommandResult::Done);
    assert!(f.changes().is_empty(), "{:?}", f.calls);
    // Not even the processes are asked for: nothing would change.
    assert!(
        !f.calls.iter().any(|c| c.starts_with("pids")),
        "{:?}",
        f.calls
    );
    assert_eq!(f.gpus[&1].modes.unwrap().current, MigMode::Enabled);
    assert!(f.layout(1).is_empty());

    let clear = [target(0, &[])];
    assert_eq!(apply(&mut f, &clear, &NO_RESET), CommandResult::Done);
    assert!(f.layout(0).is_empty());
}

/// MIG mode on now but off after the next reset (someone disabled it):
/// it is enabled again, the instances kept.
#[test]
fn mig_mode_pending_off_is_set_on_again_and_the_instances_kept() {
    let mut f = Fake::h100s(1).with_layout(0, &["7g.80gb@0"]);
    f.gpus.get_mut(&0).unwrap().modes.as_mut().unwrap().pending = MigMode::Disabled;
    let r = apply(&mut f, &[target(0, &["7g.80gb@0"])], &NO_RESET);
    assert_eq!(r, CommandResult::Done);
    assert_eq!(f.changes(), ["set_mig_mode 0 on"]);
    assert_eq!(f.layout(0), ["7g.80gb@0"]);
}
