//! `FleetFile::validate`: every problem of a fleet file at once, each
//! naming its key, before anything is built by its numbers.

use super::schema::{MAX_GPUS, MAX_NICS, MAX_NUMA_NODES};
use super::*;

impl FleetFile {
    /// Every problem at once, each naming the key.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.topology.label_prefix.is_empty() {
            problems.push(
                "topology.label_prefix: must not be empty (Accord owns the Node labels under it)"
                    .into(),
            );
        }
        let levels = self.topology.levels.join(", ");
        for level in &self.topology.levels {
            let key = format!("{}{level}", self.topology.label_prefix);
            if !valid_label_key(&key) || KUBERNETES_SET_LABELS.contains(&key.as_str()) {
                problems.push(format!(
                    "topology.levels: {level:?} makes the label key {key:?} (label_prefix \
                     and level), not a valid Kubernetes label key Accord may own"
                ));
            }
        }
        let owned = [GPU_MODEL_LABEL, GPU_COUNT_LABEL, RESERVATION_KEY];
        for (level, keys) in &self.topology.also_label {
            if !self.topology.levels.contains(level) {
                problems.push(format!(
                    "topology.also_label.{level}: not one of topology.levels ({levels})"
                ));
            }
            for key in keys {
                if !valid_label_key(key) {
                    problems.push(format!(
                        "topology.also_label.{level}: {key:?} is not a valid Kubernetes label key"
                    ));
                } else if KUBERNETES_SET_LABELS.contains(&key.as_str())
                    || owned.contains(&key.as_str())
                {
                    problems.push(format!(
                        "topology.also_label.{level}: {key:?} is set by Kubernetes or Accord \
                         itself; Accord cannot own it as a topology label"
                    ));
                }
            }
        }
        for (p, n) in &self.policy.warm_spares_per_profile {
            if !self.profiles.contains_key(p) {
                problems.push(format!(
                    "policy.warm_spares_per_profile.{p}: no such profile"
                ));
            }
            at_most(
                &mut problems,
                &format!("policy.warm_spares_per_profile.{p}"),
                u64::from(*n),
                u64::from(max::WARM_SPARES),
            );
        }
        at_most(
            &mut problems,
            "policy.warm_spares_per_rack",
            u64::from(self.policy.warm_spares_per_rack),
            u64::from(max::WARM_SPARES),
        );
        problems.extend(self.policy.validate());
        at_most(
            &mut problems,
            "policy.idle_power_off_after_s",
            self.policy.idle_power_off_after_s,
            max::IDLE_POWER_OFF_AFTER_S,
        );
        let racks: BTreeSet<&str> = self.racks.iter().map(|r| r.name.as_str()).collect();
        if racks.len() != self.racks.len() {
            problems.push("racks: duplicate rack names".into());
        }
        // Rack names, level values and reservation names become Node label
        // values: each must be one as it is ("rack 1" would else publish as
        // "rack-1" and merge with a rack of that name).
        let mut value = |key: String, v: &str| {
            if v.is_empty() || !valid_label_value(v) {
                problems.push(format!(
                    "{key}: {v:?} is not a valid Kubernetes label value (1-63 characters, \
                     letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
                ));
            }
        };
        for r in &self.racks {
            value(format!("racks.{}.name", r.name), &r.name);
            for (level, v) in [("site", &r.site), ("row", &r.row), ("block", &r.block)] {
                if let Some(v) = v {
                    value(format!("racks.{}.{level}", r.name), v);
                }
            }
            for (level, v) in &r.levels {
                value(format!("racks.{}.levels.{level}", r.name), v);
            }
        }
        for n in &self.nodes {
            for (level, v) in &n.levels {
                value(format!("nodes.{}.levels.{level}", n.name), v);
            }
        }
        for r in &self.reservations {
            value(format!("reservations.{}.name", r.name), &r.name);
        }
        for (key, levels_of) in self
            .racks
            .iter()
            .map(|r| (format!("racks.{}.levels", r.name), &r.levels))
            .chain(
                self.nodes
                    .iter()
                    .map(|n| (format!("nodes.{}.levels", n.name), &n.levels)),
            )
        {
            for level in levels_of.keys() {
                if !self.topology.levels.contains(level) {
                    problems.push(format!(
                        "{key}.{level}: not one of topology.levels ({levels})"
                    ));
                }
            }
        }
        for r in &self.racks {
            if let Some(kw) = r.power_budget_kw {
                if !(kw.is_finite() && kw > 0.0 && kw <= max::RACK_POWER_KW) {
                    problems.push(format!(
                        "racks.{}.power_budget_kw: {kw} is not a power budget (kW, above 0 \
                         and at most {})",
                        r.name,
                        max::RACK_POWER_KW
                    ));
                }
            }
            if r.max_concurrent_power_ons == Some(0) {
                problems.push(format!(
                    "racks.{}.max_concurrent_power_ons: must be at least 1",
                    r.name
                ));
            }
        }
        for (name, p) in &self.profiles {
            let key = |k: &str| format!("profiles.{name}.{k}");
            problems.extend(quantity_problem(&key("cpu"), &p.cpu));
            problems.extend(quantity_problem(&key("memory"), &p.memory));
            if p.gpus > 0 && p.gpu_model.is_none() {
                problems.push(format!("profiles.{name}.gpu_model: required when gpus > 0"));
            }
            at_most(
                &mut problems,
                &key("gpus"),
                u64::from(p.gpus),
                u64::from(MAX_GPUS),
            );
            at_most(
                &mut problems,
                &key("gpu_memory_gib"),
                p.gpu_memory_gib,
                limits::GPU_MEMORY_GIB,
            );
            if let Some(nics) = p.nics {
                at_most(
                    &mut problems,
                    &key("nics"),
                    u64::from(nics),
                    u64::from(MAX_NICS),
                );
            }
            if !(0..=limits::PODS).contains(&p.pods) {
                problems.push(format!(
                    "profiles.{name}.pods: {} is not a pod limit (0 to {})",
                    p.pods,
                    limits::PODS
                ));
            }
            problems.extend(power_problem(&key("power_kw"), p.power_kw));
            for (k, value, limit) in [
                (
                    "gpus_per_pcie_root",
                    p.gpus_per_pcie_root,
                    limits::GPUS_PER_PCIE_ROOT,
                ),
                ("numa_nodes", p.numa_nodes, MAX_NUMA_NODES),
            ] {
                match value {
                    Some(0) => problems.push(format!("profiles.{name}.{k}: must be at least 1")),
                    Some(n) => at_most(&mut problems, &key(k), u64::from(n), u64::from(limit)),
                    None => {}
                }
            }
            problems.extend(layout_problem(&key("mig_layout"), p, &p.mig_layout));
        }
        let mut names = BTreeSet::new();
        for n in &self.nodes {
            // Names reach URLs, BMC lookups, logs and Kubernetes: refused
            // here unless they are node names, and said escaped.
            if let Err(e) = crate::names::validate_node_name(&n.name) {
                problems.push(format!("nodes: {e}"));
                continue;
            }
            if !names.insert(n.name.as_str()) {
                problems.push(format!("nodes.{}: duplicate node name", n.name));
            }
            if let Some(r) = &n.rack {
                if !racks.contains(r.as_str()) {
                    problems.push(format!("nodes.{}.rack: unknown rack {r:?}", n.name));
                }
            }
            match (&n.profile, &n.hardware) {
                (Some(p), None) if !self.profiles.contains_key(p) => {
                    problems.push(format!("nodes.{}.profile: unknown profile {p:?}", n.name));
                }
                (None, None) => {
                    problems.push(format!("nodes.{}: needs `profile` or `hardware`", n.name))
                }
                (Some(_), Some(_)) => {
                    problems.push(format!(
                        "nodes.{}: `profile` and `hardware` are exclusive",
                        n.name
                    ));
                }
                _ => {}
            }
            for (key, q) in [("cpu", &n.cpu), ("memory", &n.memory)] {
                if let Some(q) = q {
                    problems.extend(quantity_problem(&format!("nodes.{}.{key}", n.name), q));
                }
            }
            for (k, q) in &n.extended {
                problems.extend(quantity_problem(
                    &format!("nodes.{}.extended.{k}", n.name),
                    q,
                ));
            }
            if let Some(kw) = n.power_kw {
                problems.extend(power_problem(&format!("nodes.{}.power_kw", n.name), kw));
            }
            // A node of a profile: its layout on the profile's GPUs; one
            // with a model file: checked on its GPUs once loaded.
            if let (Some(layout), Some(p)) = (
                &n.mig_layout,
                n.profile.as_ref().and_then(|p| self.profiles.get(p)),
            ) {
                problems.extend(layout_problem(
                    &format!("nodes.{}.mig_layout", n.name),
                    p,
                    layout,
                ));
            }
        }
        let mut res_names = BTreeSet::new();
        for r in &self.reservations {
            if !res_names.insert(r.name.as_str()) {
                problems.push(format!("reservations.{}: duplicate name", r.name));
            }
            if r.owner.namespace.is_none() && r.owner.selector.is_empty() {
                problems.push(format!(
                    "reservations.{}.owner: needs a namespace or a selector",
                    r.name
                ));
            }
            for n in &r.nodes {
                if !names.contains(n.as_str()) {
                    problems.push(format!("reservations.{}.nodes: unknown node {n:?}", r.name));
                }
            }
            match (r.nodes.is_empty(), r.count, &r.profile) {
                (false, None, None) => {}
                (true, Some(_), Some(p)) => {
                    if !self.profiles.contains_key(p) {
                        problems.push(format!(
                            "reservations.{}.profile: unknown profile {p:?}",
                            r.name
                        ));
                    }
                }
                _ => problems.push(format!(
                    "reservations.{}: give either `nodes`, or `count` and `profile`",
                    r.name
                )),
            }
            if let (Some(s), Some(e)) = (r.start, r.end) {
                if e <= s {
                    problems.push(format!("reservations.{}.end: must be after start", r.name));
                }
            }
        }
        problems
    }
}

/// `KEY: VALUE is above the limit of LIMIT`, when it is.
pub(super) fn at_most(problems: &mut Vec<String>, key: &str, value: u64, limit: u64) {
    if value > limit {
        problems.push(format!("{key}: {value} is above the limit of {limit}"));
    }
}

/// Why `q` is no allocatable amount: not a quantity, or negative.
pub(super) fn quantity_problem(key: &str, q: &str) -> Option<String> {
    match quantity::parse(q) {
        Err(_) => Some(format!("{key}: invalid quantity {q:?}")),
        Ok(v) if v < 0 => Some(format!("{key}: negative quantity {q:?}")),
        Ok(_) => None,
    }
}

/// Why `kw` is no node's power draw: not a number (NaN would pass every
/// rack budget), infinite, negative, or past [`limits::NODE_POWER_KW`].
pub(super) fn power_problem(key: &str, kw: f64) -> Option<String> {
    (!(kw.is_finite() && (0.0..=limits::NODE_POWER_KW).contains(&kw))).then(|| {
        format!(
            "{key}: {kw} is not a power draw (kW, 0 to {})",
            limits::NODE_POWER_KW
        )
    })
}

/// Why `layout` does not fit the GPUs of profile `p`: an entry that is not
/// `PROFILE@START`, or (as [`MigState::with_layout`] finds) a profile or
/// placement the GPU model's published table lacks, instances that
/// overlap, more of a profile than a GPU holds. A layout for a GPU model
/// without a table is an error where MIG is enabled: nothing could check
/// it, and its instances would be made up.
pub(super) fn layout_problem(key: &str, p: &HardwareProfile, layout: &[String]) -> Option<String> {
    if layout.is_empty() {
        return None;
    }
    if let Some(entry) = layout.iter().find(|e| parse_layout_entry(e).is_none()) {
        return Some(format!("{key}: {entry:?} is not PROFILE@START"));
    }
    let model = p.gpu_model.as_deref().unwrap_or_default();
    match p.gpu_model.as_deref().and_then(catalog::profiles_for_model) {
        Some(profiles) => empty_mig(profiles)
            .with_layout(layout)
            .err()
            .map(|e| format!("{key}: {e} ({model})")),
        None if p.mig_enabled => Some(format!(
            "{key}: no published MIG profile table for gpu_model {model:?} to check it \
             against (Accord has NVIDIA's for A100 40GB and 80GB and H100 80GB)"
        )),
        None => None,
    }
}

/// Why `layout` does not fit the GPUs of a node's model file: as
/// [`layout_problem`], on each GPU with a published table; none having
/// one is an error too.
pub(super) fn model_layout_problem(
    key: &str,
    hw: &NodeHardware,
    layout: &[String],
) -> Option<String> {
    if layout.is_empty() {
        return None;
    }
    if let Some(entry) = layout.iter().find(|e| parse_layout_entry(e).is_none()) {
        return Some(format!("{key}: {entry:?} is not PROFILE@START"));
    }
    let mut tables = 0;
    for gpu in &hw.gpus {
        let Some(model) = gpu.model.as_deref() else {
            continue;
        };
        let Some(profiles) = catalog::profiles_for_model(model) else {
            continue;
        };
        tables += 1;
        if let Err(e) = empty_mig(profiles).with_layout(layout) {
            return Some(format!("{key}: GPU {}: {e} ({model})", gpu.index));
        }
    }
    (tables == 0).then(|| {
        format!(
            "{key}: no GPU of the model has a published MIG profile table to check it \
             against (Accord has NVIDIA's for A100 40GB and 80GB and H100 80GB)"
        )
    })
}

/// A GPU with MIG enabled, no instances, and these profiles.
pub(super) fn empty_mig(profiles: Vec<MigProfile>) -> MigState {
    MigState {
        capable: true,
        current_mode: MigMode::Enabled,
        pending_mode: MigMode::Enabled,
        profiles,
        gpu_instances: Vec::new(),
    }
}

impl Policy {
    /// The problems of the warm-capacity keys, each naming its key (the
    /// profile-naming keys are checked with the profiles, by the fleet).
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        at_most(
            &mut problems,
            "policy.warm_lookahead_s",
            self.warm_lookahead_s,
            max::WARM_LOOKAHEAD_S,
        );
        at_most(
            &mut problems,
            "policy.warm_budget_gpu_hours_per_day",
            u64::from(self.warm_budget_gpu_hours_per_day),
            u64::from(max::WARM_BUDGET_GPU_HOURS_PER_DAY),
        );
        at_most(
            &mut problems,
            "policy.standby_refresh_s",
            self.standby_refresh_s,
            max::STANDBY_REFRESH_S,
        );
        if self.standby_refresh_s == 0 {
            problems.push("policy.standby_refresh_s must be above 0".into());
        }
        if !(1..=99).contains(&self.warm_coverage_percent) {
            problems.push(format!(
                "policy.warm_coverage_percent: {} is not a percentile from 1 to 99",
                self.warm_coverage_percent
            ));
        }
        if self.warm == Warm::Predictive {
            if self.warm_budget_gpu_hours_per_day == 0 {
                problems.push(
                    "policy.warm = \"predictive\" needs policy.warm_budget_gpu_hours_per_day \
                     (GPU-hours held warm at most in 24 hours), above 0"
                        .into(),
                );
            }
            if self.warm_lookahead_s == 0 {
                problems.push(
                    "policy.warm = \"predictive\" needs policy.warm_lookahead_s above 0".into(),
                );
            }
        }
        problems
    }
}
