//! Multi-Instance GPU: the profiles a GPU supports, its current instances,
//! and which placements are still free.
//!
//! Placements are in memory-slice units, as NVML reports them
//! (`nvmlGpuInstancePlacement_t`): a GPU instance occupies the slices
//! `start..start + size`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigMode {
    Enabled,
    Disabled,
}

/// MIG state of one physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MigState {
    /// Whether the GPU supports MIG at all.
    pub capable: bool,
    pub current_mode: MigMode,
    /// The mode after the next GPU reset.
    pub pending_mode: MigMode,
    /// GPU-instance profiles the device supports, sorted by `id`.
    #[serde(default)]
    pub profiles: Vec<MigProfile>,
    /// Current GPU instances, sorted by `id`.
    #[serde(default)]
    pub gpu_instances: Vec<GpuInstance>,
}

/// A GPU-instance profile (`nvidia-smi mig -lgip`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MigProfile {
    /// NVML's profile id (`nvmlGpuInstanceProfileInfo_t.id`, 19 for
    /// `1g.10gb` on H100).
    pub id: u32,
    /// e.g. `1g.10gb`, `3g.40gb`, `1g.10gb+me`.
    pub name: String,
    /// Compute (GPU) slices.
    pub slices: u32,
    pub memory_mib: u64,
    /// How many instances of this profile fit on an empty GPU.
    pub max_count: u32,
    pub sm_count: Option<u32>,
    pub placements: Vec<MigPlacement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MigPlacement {
    pub start: u32,
    pub size: u32,
}

impl MigPlacement {
    fn end(self) -> u32 {
        // Saturating: placements may come from an agent's report.
        self.start.saturating_add(self.size)
    }

    pub fn overlaps(self, other: MigPlacement) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuInstance {
    pub id: u32,
    /// Profile name, e.g. `3g.40gb`.
    pub profile: String,
    pub profile_id: Option<u32>,
    /// `None` when the source did not say (e.g. `nvidia-smi -q`); such an
    /// instance makes free-placement queries refuse to guess.
    pub placement: Option<MigPlacement>,
    #[serde(default)]
    pub compute_instances: Vec<ComputeInstance>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ComputeInstance {
    pub id: u32,
    /// The MIG device UUID (`MIG-...`) that workloads see.
    pub uuid: Option<String>,
    pub sm_count: Option<u32>,
    pub memory_mib: Option<u64>,
}

/// A MIG layout that does not fit a GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigLayoutError {
    #[error("the GPU is not MIG capable")]
    NotCapable,
    #[error("layout entry {entry:?}: {why}")]
    Entry { entry: String, why: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigQueryError {
    #[error("the GPU is not MIG capable")]
    NotCapable,
    #[error("MIG mode is disabled on the GPU (pending: {pending:?})")]
    Disabled { pending: MigMode },
    #[error("the GPU does not support MIG profile {profile:?}")]
    UnknownProfile { profile: String },
    #[error("the placement of GPU instance {instance} is unknown, so free placements cannot be computed")]
    UnknownPlacement { instance: u32 },
}

impl MigState {
    pub fn profile(&self, name: &str) -> Option<&MigProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// Placements where a new instance of `profile` could be created now,
    /// given the instances that exist. Honours the profile's `max_count`.
    pub fn free_placements(&self, profile: &str) -> Result<Vec<MigPlacement>, MigQueryError> {
        if !self.capable {
            return Err(MigQueryError::NotCapable);
        }
        if self.current_mode != MigMode::Enabled {
            return Err(MigQueryError::Disabled {
                pending: self.pending_mode,
            });
        }
        let wanted = self
            .profile(profile)
            .ok_or_else(|| MigQueryError::UnknownProfile {
                profile: profile.to_owned(),
            })?;
        let mut used = Vec::with_capacity(self.gpu_instances.len());
        for gi in &self.gpu_instances {
            used.push(
                gi.placement
                    .ok_or(MigQueryError::UnknownPlacement { instance: gi.id })?,
            );
        }
        let existing = self
            .gpu_instances
            .iter()
            .filter(|gi| gi.profile == wanted.name)
            .count();
        if existing >= wanted.max_count as usize {
            return Ok(Vec::new());
        }
        Ok(wanted
            .placements
            .iter()
            .copied()
            .filter(|p| used.iter().all(|u| !u.overlaps(*p)))
            .collect())
    }

    /// This GPU with MIG mode enabled and exactly the instances of
    /// `layout` (`PROFILE@START` each, e.g. `1g.10gb@0`), numbered from 1
    /// in layout order, without compute instances. Checks each entry
    /// against the GPU's published profiles: a known profile, one of its
    /// placements, no overlap, no more than its `max_count`.
    pub fn with_layout(&self, layout: &[String]) -> Result<MigState, MigLayoutError> {
        if !self.capable {
            return Err(MigLayoutError::NotCapable);
        }
        let mut state = MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: self.profiles.clone(),
            gpu_instances: Vec::with_capacity(layout.len().min(64)),
        };
        for (n, entry) in layout.iter().enumerate() {
            let bad = |why: &str| MigLayoutError::Entry {
                entry: entry.clone(),
                why: why.to_owned(),
            };
            let (name, start) = entry
                .split_once('@')
                .and_then(|(p, s)| Some((p, s.parse::<u32>().ok()?)))
                .ok_or_else(|| bad("not PROFILE@START"))?;
            let profile = self
                .profile(name)
                .ok_or_else(|| bad("the GPU has no such profile"))?;
            let placement = profile
                .placements
                .iter()
                .copied()
                .find(|p| p.start == start)
                .ok_or_else(|| bad("not a placement of that profile"))?;
            if state
                .gpu_instances
                .iter()
                .filter_map(|g| g.placement)
                .any(|p| p.overlaps(placement))
            {
                return Err(bad("overlaps an earlier instance"));
            }
            let same = state
                .gpu_instances
                .iter()
                .filter(|g| g.profile == name)
                .count();
            if same >= profile.max_count as usize {
                return Err(bad("more instances of the profile than the GPU allows"));
            }
            state.gpu_instances.push(GpuInstance {
                id: n as u32 + 1,
                profile: name.to_owned(),
                profile_id: Some(profile.id),
                placement: Some(placement),
                compute_instances: Vec::new(),
            });
        }
        Ok(state)
    }

    /// Whether the GPU instances can be on this GPU: where the profiles
    /// are known, each instance's profile is one of them, its placement
    /// one of that profile's, at most `max_count` of a profile; placed
    /// instances never overlap (seven overlapping `7g.80gb` would count
    /// one GPU seven times). Checked wherever instances enter: agents'
    /// reports, hardware files.
    pub fn check_instances(&self) -> Result<(), String> {
        let mut placed: Vec<(MigPlacement, &str)> = Vec::new();
        let mut per_profile: std::collections::BTreeMap<&str, usize> = Default::default();
        for gi in &self.gpu_instances {
            *per_profile.entry(gi.profile.as_str()).or_default() += 1;
        }
        for gi in &self.gpu_instances {
            let what = format!("GPU instance {} ({})", gi.id, gi.profile);
            if !self.profiles.is_empty() {
                let profile = self
                    .profile(&gi.profile)
                    .ok_or_else(|| format!("{what}: the GPU has no such profile"))?;
                if let Some(p) = gi.placement {
                    if !profile.placements.contains(&p) {
                        return Err(format!(
                            "{what}: placement {}+{} is not one of the profile's",
                            p.start, p.size
                        ));
                    }
                }
                let same = per_profile[gi.profile.as_str()];
                if same > profile.max_count as usize {
                    return Err(format!(
                        "{what}: {same} instances of the profile; the GPU holds at most {}",
                        profile.max_count
                    ));
                }
            }
            if let Some(p) = gi.placement {
                if let Some((_, other)) = placed.iter().find(|(q, _)| q.overlaps(p)) {
                    return Err(format!("{what}: overlaps {other}"));
                }
                placed.push((p, &gi.profile));
            }
        }
        Ok(())
    }

    /// Instances as `PROFILE@START`, in placement order; `None` when a
    /// placement is unknown.
    pub fn layout(&self) -> Option<Vec<String>> {
        let mut v: Vec<(u32, String)> = Vec::with_capacity(self.gpu_instances.len());
        for g in &self.gpu_instances {
            let p = g.placement?;
            v.push((p.start, format!("{}@{}", g.profile, p.start)));
        }
        v.sort();
        Some(v.into_iter().map(|(_, s)| s).collect())
    }

    pub(crate) fn canonicalize(&mut self) {
        self.profiles.sort_by_key(|p| p.id);
        for p in &mut self.profiles {
            p.placements.sort();
        }
        self.gpu_instances.sort_by_key(|gi| gi.id);
        for gi in &mut self.gpu_instances {
            gi.compute_instances.sort_by_key(|ci| ci.id);
        }
    }
}

/// NVIDIA's published GPU-instance profiles for the common MIG-capable
/// data-centre GPUs (NVIDIA MIG User Guide, "Supported MIG Profiles"), used
/// to name instances that a source reports only by size (`nvidia-smi -q`),
/// and to describe machines never seen.
pub mod catalog {
    use super::{MigPlacement, MigProfile};

    /// (name, NVML profile id, compute slices, memory MiB, max count, SMs,
    /// placement starts, placement size).
    type Row = (&'static str, u32, u32, u64, u32, u32, &'static [u32], u32);

    const ONE: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
    const EVEN: &[u32] = &[0, 2, 4, 6];
    const TWO_G: &[u32] = &[0, 2, 4];
    const HALF: &[u32] = &[0, 4];
    const ZERO: &[u32] = &[0];

    const A100_40GB: &[Row] = &[
        ("1g.5gb", 19, 1, 4864, 7, 14, ONE, 1),
        ("1g.5gb+me", 20, 1, 4864, 1, 14, ONE, 1),
        ("1g.10gb", 15, 1, 9856, 4, 14, EVEN, 2),
        ("2g.10gb", 14, 2, 9856, 3, 28, TWO_G, 2),
        ("3g.20gb", 9, 3, 19968, 2, 42, HALF, 4),
        ("4g.20gb", 5, 4, 19968, 1, 56, ZERO, 4),
        ("7g.40gb", 0, 7, 40192, 1, 98, ZERO, 8),
    ];
    const A100_80GB: &[Row] = &[
        ("1g.10gb", 19, 1, 9728, 7, 14, ONE, 1),
        ("1g.10gb+me", 20, 1, 9728, 1, 14, ONE, 1),
        ("1g.20gb", 15, 1, 19968, 4, 14, EVEN, 2),
        ("2g.20gb", 14, 2, 19968, 3, 28, TWO_G, 2),
        ("3g.40gb", 9, 3, 40192, 2, 42, HALF, 4),
        ("4g.40gb", 5, 4, 40192, 1, 56, ZERO, 4),
        ("7g.80gb", 0, 7, 80896, 1, 98, ZERO, 8),
    ];
    const H100_80GB: &[Row] = &[
        ("1g.10gb", 19, 1, 9984, 7, 16, ONE, 1),
        ("1g.10gb+me", 20, 1, 9984, 1, 16, ONE, 1),
        ("1g.20gb", 15, 1, 19968, 4, 26, EVEN, 2),
        ("2g.20gb", 14, 2, 19968, 3, 32, TWO_G, 2),
        ("3g.40gb", 9, 3, 40448, 2, 60, HALF, 4),
        ("4g.40gb", 5, 4, 40448, 1, 64, ZERO, 4),
        ("7g.80gb", 0, 7, 80896, 1, 132, ZERO, 8),
    ];

    /// The profile table for a GPU model name as NVML reports it, if known.
    pub fn profiles_for_model(model: &str) -> Option<Vec<MigProfile>> {
        let m = model.to_ascii_uppercase();
        let rows = if m.contains("A100") && m.contains("40GB") {
            A100_40GB
        } else if m.contains("A100") && m.contains("80GB") {
            A100_80GB
        } else if m.contains("H100") && (m.contains("80GB") || m.contains("HBM3")) {
            H100_80GB
        } else {
            return None;
        };
        Some(rows.iter().map(to_profile).collect())
    }

    fn to_profile(row: &Row) -> MigProfile {
        let (name, id, slices, memory_mib, max_count, sms, starts, size) = *row;
        MigProfile {
            id,
            name: name.to_owned(),
            slices,
            memory_mib,
            max_count,
            sm_count: Some(sms),
            placements: starts
                .iter()
                .map(|&start| MigPlacement { start, size })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100(instances: &[(u32, &str, u32, u32)]) -> MigState {
        MigState {
            capable: true,
            current_mode: MigMode::Enabled,
            pending_mode: MigMode::Enabled,
            profiles: catalog::profiles_for_model("NVIDIA H100 80GB HBM3").unwrap(),
            gpu_instances: instances
                .iter()
                .map(|&(id, profile, start, size)| GpuInstance {
                    id,
                    profile: profile.to_owned(),
                    profile_id: None,
                    placement: Some(MigPlacement { start, size }),
                    compute_instances: vec![],
                })
                .collect(),
        }
    }

    fn starts(v: Vec<MigPlacement>) -> Vec<u32> {
        v.into_iter().map(|p| p.start).collect()
    }

    #[test]
    fn instances_that_cannot_be_on_the_gpu_are_refused() {
        assert_eq!(
            h100(&[(1, "3g.40gb", 4, 4), (2, "1g.10gb", 0, 1)]).check_instances(),
            Ok(())
        );
        // Seven overlapping 7g.80gb: one GPU counted seven times.
        let seven: Vec<_> = (1..=7).map(|id| (id, "7g.80gb", 0, 8)).collect();
        let e = h100(&seven).check_instances().unwrap_err();
        assert!(
            e.contains("7 instances of the profile; the GPU holds at most 1"),
            "{e}"
        );
        let e = h100(&[
            (1, "3g.40gb", 4, 4),
            (2, "4g.40gb", 0, 4),
            (3, "1g.10gb", 4, 1),
        ])
        .check_instances()
        .unwrap_err();
        assert_eq!(e, "GPU instance 3 (1g.10gb): overlaps 3g.40gb");
        let e = h100(&[(1, "9g.900gb", 0, 8)])
            .check_instances()
            .unwrap_err();
        assert!(e.contains("no such profile"), "{e}");
        let e = h100(&[(1, "3g.40gb", 1, 4)]).check_instances().unwrap_err();
        assert!(
            e.contains("placement 1+4 is not one of the profile's"),
            "{e}"
        );
    }

    #[test]
    fn a_layout_is_checked_against_the_gpus_profiles_and_built() {
        let gpu = h100(&[(1, "3g.40gb", 4, 4)]);
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let s = gpu
            .with_layout(&l(&["3g.40gb@4", "1g.10gb@0", "1g.10gb@1"]))
            .unwrap();
        assert_eq!(s.current_mode, MigMode::Enabled);
        assert_eq!(s.gpu_instances.len(), 3);
        assert_eq!(
            s.layout().unwrap(),
            l(&["1g.10gb@0", "1g.10gb@1", "3g.40gb@4"])
        );
        let refused = |v: &[&str], why: &str| match gpu.with_layout(&l(v)) {
            Err(MigLayoutError::Entry { why: w, .. }) => assert!(w.contains(why), "{w}"),
            other => panic!("{v:?}: {other:?}"),
        };
        refused(&["9g.99gb@0"], "no such profile");
        refused(&["3g.40gb@2"], "not a placement");
        refused(&["3g.40gb@0", "2g.20gb@2"], "overlaps");
        refused(&["1g.10gb"], "not PROFILE@START");
        refused(&["1g.10gb@x"], "not PROFILE@START");
        let not_capable = MigState {
            capable: false,
            ..gpu.clone()
        };
        assert_eq!(
            not_capable.with_layout(&[]),
            Err(MigLayoutError::NotCapable)
        );
        // Unknown placements: no layout to say.
        let mut unknown = gpu.clone();
        unknown.gpu_instances[0].placement = None;
        assert_eq!(unknown.layout(), None);
    }

    #[test]
    fn empty_gpu_offers_every_published_placement() {
        let gpu = h100(&[]);
        assert_eq!(
            starts(gpu.free_placements("1g.10gb").unwrap()),
            vec![0, 1, 2, 3, 4, 5, 6]
        );
        assert_eq!(starts(gpu.free_placements("3g.40gb").unwrap()), vec![0, 4]);
        assert_eq!(starts(gpu.free_placements("7g.80gb").unwrap()), vec![0]);
    }

    #[test]
    fn existing_instances_block_overlapping_placements() {
        // A 3g.40gb at slices 4..8 leaves only the lower half.
        let gpu = h100(&[(1, "3g.40gb", 4, 4)]);
        assert_eq!(starts(gpu.free_placements("3g.40gb").unwrap()), vec![0]);
        assert_eq!(starts(gpu.free_placements("2g.20gb").unwrap()), vec![0, 2]);
        assert_eq!(
            starts(gpu.free_placements("1g.10gb").unwrap()),
            vec![0, 1, 2, 3]
        );
        assert!(gpu.free_placements("7g.80gb").unwrap().is_empty());
    }

    #[test]
    fn max_count_is_honoured() {
        // 1g.10gb+me may exist once per GPU even where slices are free.
        let gpu = h100(&[(1, "1g.10gb+me", 0, 1)]);
        assert!(gpu.free_placements("1g.10gb+me").unwrap().is_empty());
        assert_eq!(
            starts(gpu.free_placements("1g.10gb").unwrap()),
            vec![1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    fn refusals_say_why() {
        let mut gpu = h100(&[]);
        assert_eq!(
            gpu.free_placements("9g.1tb"),
            Err(MigQueryError::UnknownProfile {
                profile: "9g.1tb".into()
            })
        );
        gpu.gpu_instances.push(GpuInstance {
            id: 7,
            profile: "1g.10gb".into(),
            profile_id: None,
            placement: None,
            compute_instances: vec![],
        });
        assert_eq!(
            gpu.free_placements("1g.10gb"),
            Err(MigQueryError::UnknownPlacement { instance: 7 })
        );
        gpu.current_mode = MigMode::Disabled;
        let err = gpu.free_placements("1g.10gb").unwrap_err();
        assert_eq!(
            err.to_string(),
            "MIG mode is disabled on the GPU (pending: Enabled)"
        );
        gpu.capable = false;
        assert_eq!(
            gpu.free_placements("1g.10gb"),
            Err(MigQueryError::NotCapable)
        );
    }

    #[test]
    fn catalog_knows_the_big_three_and_nothing_else() {
        assert_eq!(
            catalog::profiles_for_model("NVIDIA A100-SXM4-80GB").unwrap()[2].name,
            "1g.20gb"
        );
        assert_eq!(
            catalog::profiles_for_model("NVIDIA A100-SXM4-40GB").unwrap()[0].name,
            "1g.5gb"
        );
        assert!(catalog::profiles_for_model("Tesla V100-SXM3-32GB-H").is_none());
    }
}
