//! What accordd accepts in an agent's report besides well-formed JSON:
//! counts within plausibility limits far above any real machine (so a
//! hostile or broken agent cannot make one record megabytes long), strings
//! of bounded length, and only finite numbers (an `f32` fed `1e39` parses
//! as infinity, which JSON cannot store: it would come back as `null`).
//! A report over any of them is refused whole; nothing is stored.

use accord::hardware::NodeHardware;
use serde::ser::{self, Serialize};

/// The limits: the one table in the core, shared with the fleet file's
/// validation and the agent's own caps.
pub use accord::hardware::limits as max;

/// A heartbeat's device assignments: bounded counts, pod names as
/// Kubernetes allows them, device IDs short and printable (they end up in
/// `explain` and logs).
pub fn check_heartbeat(beat: &accord_api::agent::Heartbeat) -> Result<(), String> {
    agent_version(beat.agent_version.as_deref())?;
    if let Some(h) = &beat.gpu_health {
        if h.len() > GPU_HEALTH_BYTES || h.chars().any(char::is_control) {
            return Err(format!(
                "gpu_health: {:?}: at most {GPU_HEALTH_BYTES} bytes, no control characters",
                clip(h)
            ));
        }
    }
    if let Some(pods) = &beat.assigned {
        count("assigned", pods.len(), max::ASSIGNED_PODS)?;
        for (i, p) in pods.iter().enumerate() {
            // A namespace is a DNS label, a pod name a DNS subdomain (as a
            // node name is).
            let label = p.namespace.len() <= 63 && !p.namespace.contains('.');
            if !label || !accord_api::names::is_node_name(&p.namespace) {
                return Err(format!(
                    "assigned[{i}].namespace: {:?} is not a namespace name",
                    clip(&p.namespace)
                ));
            }
            if !accord_api::names::is_node_name(&p.name) {
                return Err(format!(
                    "assigned[{i}].name: {:?} is not a pod name",
                    clip(&p.name)
                ));
            }
            count(&format!("assigned[{i}].ids"), p.ids.len(), max::IDS_PER_POD)?;
            for (j, id) in p.ids.iter().enumerate() {
                if id.is_empty()
                    || id.len() > max::DEVICE_ID_BYTES
                    || !id.bytes().all(|b| b.is_ascii_graphic())
                {
                    return Err(format!(
                        "assigned[{i}].ids[{j}]: {:?}: a device ID is 1 to {} printable ASCII bytes",
                        clip(id),
                        max::DEVICE_ID_BYTES
                    ));
                }
            }
        }
    }
    finite_and_bounded(beat)
}

/// An agent version (`accord-agent --version`, a build's `git describe`).
const AGENT_VERSION_BYTES: usize = 64;
/// A heartbeat's word on its GPUs ("ok", "2 GPUs with XID errors").
const GPU_HEALTH_BYTES: usize = 256;

/// Reports and heartbeats carry the same version: 1 to 64 printable
/// ASCII bytes (it is stored with every heartbeat and shown to admins).
fn agent_version(v: Option<&str>) -> Result<(), String> {
    match v {
        Some(v)
            if v.is_empty()
                || v.len() > AGENT_VERSION_BYTES
                || !v.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Err(format!(
                "agent_version: {:?}: 1 to {AGENT_VERSION_BYTES} printable ASCII bytes",
                clip(v)
            ))
        }
        _ => Ok(()),
    }
}

/// At most 80 characters of `text`, for a message.
fn clip(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Why a report is refused: the field (a path like
/// `hardware.gpus[3].mig.gpu_instances`) and what is wrong.
pub fn check_report(report: &accord_api::agent::Report) -> Result<(), String> {
    agent_version(report.agent_version.as_deref())?;
    plausible(&report.hardware)?;
    if let Some(c) = &report.command {
        command_outcome(c)?;
    }
    finite_and_bounded(report)
}

/// A command's outcome: as many GPUs as a report may have, and a bounded
/// list of processes on each.
fn command_outcome(c: &accord_api::agent::CommandOutcome) -> Result<(), String> {
    use accord_api::agent::CommandResult;
    match &c.result {
        CommandResult::Busy { gpus } => {
            count("command.result.gpus", gpus.len(), max::GPUS)?;
            for (i, g) in gpus.iter().enumerate() {
                count(
                    &format!("command.result.gpus[{i}].pids"),
                    g.pids.len(),
                    max::PIDS_PER_GPU,
                )?;
            }
        }
        CommandResult::ResetRequired { gpus } => {
            count("command.result.gpus", gpus.len(), max::GPUS)?
        }
        CommandResult::Done | CommandResult::Failed { .. } => {}
    }
    Ok(())
}

fn count(field: &str, len: usize, limit: usize) -> Result<(), String> {
    if len > limit {
        Err(format!(
            "{field}: {len} entries; at most {limit} accepted (plausibility limit)"
        ))
    } else {
        Ok(())
    }
}

fn number<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    limit: T,
) -> Result<(), String> {
    if value > limit {
        Err(format!(
            "{field}: {value}; at most {limit} accepted (plausibility limit)"
        ))
    } else {
        Ok(())
    }
}

/// The counts of a hardware model against [`max`].
pub fn plausible(hw: &NodeHardware) -> Result<(), String> {
    let m = &hw.machine;
    number("hardware.machine.packages", m.packages, max::PACKAGES)?;
    number("hardware.machine.cores", m.cores, max::CORES)?;
    number("hardware.machine.threads", m.threads, max::THREADS)?;
    count("hardware.gpus", hw.gpus.len(), max::GPUS)?;
    count("hardware.nics", hw.nics.len(), max::NICS)?;
    count("hardware.numa_nodes", hw.numa_nodes.len(), max::NUMA_NODES)?;
    count(
        "hardware.numa_distances",
        hw.numa_distances.len(),
        max::DISTANCE_MATRICES,
    )?;
    for (i, d) in hw.numa_distances.iter().enumerate() {
        count(
            &format!("hardware.numa_distances[{i}].nodes"),
            d.nodes.len(),
            max::NUMA_NODES,
        )?;
        count(
            &format!("hardware.numa_distances[{i}].values"),
            d.values.len(),
            max::NUMA_NODES,
        )?;
        for (r, row) in d.values.iter().enumerate() {
            count(
                &format!("hardware.numa_distances[{i}].values[{r}]"),
                row.len(),
                max::NUMA_NODES,
            )?;
        }
    }
    count("hardware.pcie.roots", hw.pcie.roots.len(), max::PCIE_ROOTS)?;
    count(
        "hardware.pcie.switches",
        hw.pcie.switches.len(),
        max::PCIE_SWITCHES,
    )?;
    count(
        "hardware.pcie.devices",
        hw.pcie.devices.len(),
        max::PCIE_DEVICES,
    )?;
    for (i, d) in hw.pcie.devices.iter().enumerate() {
        count(
            &format!("hardware.pcie.devices[{i}].path"),
            d.path.len(),
            max::PCIE_PATH,
        )?;
    }
    count("hardware.nvswitches", hw.nvswitches.len(), max::NVSWITCHES)?;
    count("hardware.nvlinks", hw.nvlinks.len(), max::NVLINKS)?;
    for (i, l) in hw.nvlinks.iter().enumerate() {
        number(
            &format!("hardware.nvlinks[{i}].bandwidth_mbps"),
            l.bandwidth_mbps,
            max::NVLINK_BANDWIDTH_MBPS,
        )?;
    }
    for (i, g) in hw.gpus.iter().enumerate() {
        // Indexes name GPUs in commands and device IDs: below the count.
        number(
            &format!("hardware.gpus[{i}].index"),
            u64::from(g.index),
            max::GPUS as u64 - 1,
        )?;
        if let Some(b) = g.memory_bytes {
            number(
                &format!("hardware.gpus[{i}].memory_bytes"),
                b,
                max::GPU_MEMORY_BYTES,
            )?;
        }
        count(
            &format!("hardware.gpus[{i}].os_devices"),
            g.os_devices.len(),
            max::NAMES_PER_DEVICE,
        )?;
        if let Some(mig) = &g.mig {
            count(
                &format!("hardware.gpus[{i}].mig.gpu_instances"),
                mig.gpu_instances.len(),
                max::MIG_INSTANCES_PER_GPU,
            )?;
            for (j, gi) in mig.gpu_instances.iter().enumerate() {
                count(
                    &format!("hardware.gpus[{i}].mig.gpu_instances[{j}].compute_instances"),
                    gi.compute_instances.len(),
                    max::MIG_COMPUTE_INSTANCES,
                )?;
                for (k, ci) in gi.compute_instances.iter().enumerate() {
                    if let Some(m) = ci.memory_mib {
                        number(
                            &format!(
                                "hardware.gpus[{i}].mig.gpu_instances[{j}].compute_instances[{k}].memory_mib"
                            ),
                            m,
                            max::GPU_MEMORY_MIB,
                        )?;
                    }
                }
            }
            count(
                &format!("hardware.gpus[{i}].mig.profiles"),
                mig.profiles.len(),
                max::MIG_PROFILES,
            )?;
            for (j, p) in mig.profiles.iter().enumerate() {
                count(
                    &format!("hardware.gpus[{i}].mig.profiles[{j}].placements"),
                    p.placements.len(),
                    max::MIG_PLACEMENTS,
                )?;
                number(
                    &format!("hardware.gpus[{i}].mig.profiles[{j}].memory_mib"),
                    p.memory_mib,
                    max::GPU_MEMORY_MIB,
                )?;
            }
            mig.check_instances()
                .map_err(|e| format!("hardware.gpus[{i}].mig: {e}"))?;
        }
    }
    for (i, n) in hw.nics.iter().enumerate() {
        count(
            &format!("hardware.nics[{i}].interfaces"),
            n.interfaces.len(),
            max::NAMES_PER_DEVICE,
        )?;
        count(
            &format!("hardware.nics[{i}].rdma_devices"),
            n.rdma_devices.len(),
            max::NAMES_PER_DEVICE,
        )?;
    }
    count(
        "hardware.discovery.notes",
        hw.discovery.notes.len(),
        max::NOTES,
    )?;
    count(
        "hardware.discovery.disagreements",
        hw.discovery.disagreements.len(),
        max::DISAGREEMENTS,
    )?;
    Ok(())
}

/// Every number finite and every string at most [`max::STRING_BYTES`],
/// anywhere in `value` (whatever fields its type grows later): a walk over
/// its `Serialize` form that names the first offending field.
pub fn finite_and_bounded<T: Serialize>(value: &T) -> Result<(), String> {
    let mut walk = Walk { path: Vec::new() };
    value.serialize(&mut walk).map(drop).map_err(|e| e.0)
}

#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl ser::Error for Refused {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Refused(msg.to_string())
    }
}

enum Seg {
    Field(&'static str),
    Index(usize),
}

struct Walk {
    path: Vec<Seg>,
}

impl Walk {
    fn at(&self) -> String {
        let mut s = String::new();
        for seg in &self.path {
            match seg {
                Seg::Field(f) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(f);
                }
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        if s.is_empty() {
            s.push_str("(report)");
        }
        s
    }

    fn float(&self, v: f64) -> Result<(), Refused> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(Refused(format!(
                "{}: not a finite number ({v}; a value too large for its type overflows)",
                self.at()
            )))
        }
    }

    fn string(&self, len: usize) -> Result<(), Refused> {
        if len > max::STRING_BYTES {
            Err(Refused(format!(
                "{}: string of {len} bytes; at most {} accepted",
                self.at(),
                max::STRING_BYTES
            )))
        } else {
            Ok(())
        }
    }
}

/// A sequence, tuple, map or struct being walked: counts its elements.
struct Compound<'a> {
    walk: &'a mut Walk,
    index: usize,
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Refused> {
        self.walk.path.push(Seg::Index(self.index));
        self.index += 1;
        let r = value.serialize(&mut *self.walk);
        self.walk.path.pop();
        r
    }

    fn field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Refused> {
        self.walk.path.push(Seg::Field(key));
        let r = value.serialize(&mut *self.walk);
        self.walk.path.pop();
        r
    }
}

impl<'a> ser::Serializer for &'a mut Walk {
    type Ok = ();
    type Error = Refused;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, _: bool) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Refused> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Refused> {
        self.float(v)
    }
    fn serialize_char(self, _: char) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Refused> {
        self.string(v.len())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Refused> {
        self.string(v.len())
    }
    fn serialize_none(self) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Refused> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), Refused> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Refused> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Refused> {
        Compound {
            walk: self,
            index: 0,
        }
        .field(variant, value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Refused> {
        Ok(Compound {
            walk: self,
            index: 0,
        })
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Refused> {
        self.serialize_seq(None)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Refused> {
        self.serialize_seq(None)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Refused> {
        self.serialize_seq(None)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Refused> {
        self.serialize_seq(None)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Refused> {
        self.serialize_seq(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Refused> {
        self.serialize_seq(None)
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Refused> {
        self.element(value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Refused> {
        self.element(value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Refused> {
        self.element(value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Refused> {
        self.element(value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Refused> {
        // Keys are checked like values; they count as the entry's index.
        self.walk.path.push(Seg::Index(self.index));
        let r = key.serialize(&mut *self.walk);
        self.walk.path.pop();
        r
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Refused> {
        self.element(value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Refused> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Refused;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Refused> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Refused> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Inner {
        speed: Option<f32>,
        names: Vec<String>,
    }

    #[derive(serde::Serialize)]
    struct Outer {
        ok: f64,
        items: Vec<Inner>,
        map: std::collections::BTreeMap<String, f64>,
    }

    #[test]
    fn the_first_non_finite_number_is_named_by_its_path() {
        let mut v = Outer {
            ok: 1.5,
            items: vec![
                Inner {
                    speed: Some(16.0),
                    names: vec!["a".into()],
                },
                Inner {
                    speed: Some(f32::INFINITY),
                    names: vec![],
                },
            ],
            map: Default::default(),
        };
        let e = finite_and_bounded(&v).unwrap_err();
        assert!(
            e.starts_with("items[1].speed: not a finite number (inf"),
            "{e}"
        );
        v.items[1].speed = None;
        assert_eq!(finite_and_bounded(&v), Ok(()));
        v.ok = f64::NAN;
        let e = finite_and_bounded(&v).unwrap_err();
        assert!(e.starts_with("ok: not a finite number (NaN"), "{e}");
        v.ok = 0.0;
        v.map.insert("k".into(), f64::NEG_INFINITY);
        let e = finite_and_bounded(&v).unwrap_err();
        assert!(e.starts_with("map[0]: not a finite"), "{e}");
        v.map.clear();
        v.items[0].names.push("x".repeat(max::STRING_BYTES + 1));
        let e = finite_and_bounded(&v).unwrap_err();
        assert!(
            e.starts_with("items[0].names[1]: string of 4097 bytes"),
            "{e}"
        );
    }

    #[test]
    fn a_command_outcome_is_bounded_like_the_rest_of_a_report() {
        use accord_api::agent::{BusyGpu, CommandOutcome, CommandResult};
        let busy = |gpus: usize, pids: usize| CommandOutcome {
            generation: 1,
            result: CommandResult::Busy {
                gpus: (0..gpus as u32)
                    .map(|index| BusyGpu {
                        index,
                        pids: vec![7; pids],
                    })
                    .collect(),
            },
        };
        assert_eq!(command_outcome(&busy(2, 3)), Ok(()));
        let e = command_outcome(&busy(65, 1)).unwrap_err();
        assert!(e.starts_with("command.result.gpus: 65 entries"), "{e}");
        let e = command_outcome(&busy(1, 1025)).unwrap_err();
        assert!(e.starts_with("command.result.gpus[0].pids: 1025"), "{e}");
        // A failure's reason is a string like any other: over 4 KiB, refused.
        let long = CommandOutcome {
            generation: 1,
            result: CommandResult::Failed {
                reason: "x".repeat(max::STRING_BYTES + 1),
            },
        };
        assert!(finite_and_bounded(&long).is_err());
    }

    /// Numbers the planner multiplies or sums (GPU memory, MIG memory,
    /// NVLink bandwidth) and GPU indexes: bounded like the counts, the
    /// reason naming the field; at the limit, taken.
    #[test]
    fn gpu_memory_mig_memory_nvlink_bandwidth_and_gpu_index_past_the_limits_are_refused() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/models/h100-8gpu-mig.json"
        );
        let base: NodeHardware =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(plausible(&base), Ok(()));
        type Edit = fn(&mut NodeHardware, bool);
        let cases: [(Edit, &str); 5] = [
            (
                |hw, over| hw.gpus[0].memory_bytes = Some(max::GPU_MEMORY_BYTES + u64::from(over)),
                "hardware.gpus[0].memory_bytes: 4398046511105; at most 4398046511104",
            ),
            (
                |hw, over| {
                    let mig = hw.gpus[5].mig.as_mut().unwrap();
                    mig.profiles[0].memory_mib = max::GPU_MEMORY_MIB + u64::from(over);
                },
                "hardware.gpus[5].mig.profiles[0].memory_mib: 4194305; at most 4194304",
            ),
            (
                |hw, over| {
                    let mig = hw.gpus[5].mig.as_mut().unwrap();
                    mig.gpu_instances[1].compute_instances[0].memory_mib =
                        Some(max::GPU_MEMORY_MIB + u64::from(over));
                },
                "hardware.gpus[5].mig.gpu_instances[1].compute_instances[0].memory_mib: 4194305",
            ),
            (
                |hw, over| {
                    hw.nvlinks[3].bandwidth_mbps = max::NVLINK_BANDWIDTH_MBPS + u64::from(over)
                },
                "hardware.nvlinks[3].bandwidth_mbps: 100000001; at most 100000000",
            ),
            (
                |hw, over| hw.gpus[7].index = 63 + u32::from(over),
                "hardware.gpus[7].index: 64; at most 63",
            ),
        ];
        for (edit, reason) in cases {
            let mut at_limit = base.clone();
            edit(&mut at_limit, false);
            assert_eq!(plausible(&at_limit), Ok(()), "{reason}");
            let mut over = base.clone();
            edit(&mut over, true);
            let e = plausible(&over).unwrap_err();
            assert!(e.starts_with(reason), "{e}");
        }
        let mut hostile = base.clone();
        hostile.gpus[0].memory_bytes = Some(u64::MAX);
        assert!(plausible(&hostile).is_err());
    }

    #[test]
    fn an_f32_fed_1e39_is_infinite_after_parsing() {
        // Why the walk exists: serde_json narrows to f32 without an error.
        let v: f32 = serde_json::from_str("1e39").unwrap();
        assert!(v.is_infinite());
    }
}
