//! The Alibaba GPU cluster trace `cluster-trace-gpu-v2023` ("openb",
//! released with Weng et al., "Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX
//! ATC '23): typed parsing of its pod and node lists, and their
//! translation into Accord's fleet file and workloads.
//!
//! Pod lists: `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
//! pod_phase,creation_time,deletion_time,scheduled_time`; the FGD
//! repository's `multigpu*` lists have only the first five columns. Node
//! lists: `sn,cpu_milli,memory_mib,gpu,model`. Columns are found by the
//! header's names, so other orders and extra columns work; `name`,
//! `cpu_milli`, `memory_mib`, `num_gpu`, `gpu_milli` (pods) and all five
//! node columns are required, the rest optional.
//!
//! The FGD simulator's reading (hkust-adsl/kubernetes-scheduler-simulator,
//! `data/pod_csv_to_yaml.py`, `pkg/utils/utils.go`
//! `IsNodeAccessibleToPodByType`): `gpu_spec` lists GPU models separated
//! by `|` (`V100M16|V100M32`; empty segments skipped, repeats occur, as in
//! `V100M16|V100M32|V100M32`); empty means any model; it only applies to
//! pods that request GPUs. `deletion_time` and `scheduled_time` are empty
//! when unknown (a pending pod has no `scheduled_time`); 0 is a time.
//!
//! What is refused, each an [`OpenbError`] naming file, line and column:
//! a row whose field count differs from the header's; a number that is
//! not plain decimal digits or exceeds its limit (`MAX_*` below); a GPU
//! count above [`MAX_GPUS`]; `gpu_milli` above 1000 (FGD's converter
//! clamps it; a trace that has one is not the one published); GPUs with
//! `gpu_milli` 0, or `gpu_milli` without GPUs; a fraction of several GPUs
//! (FGD's simulator panics on it: "unknown gpu affinity"); a deletion or
//! scheduling before the creation; a name or GPU model outside
//! `[A-Za-z0-9._-]` or too long; duplicate names; a blank line before the
//! last row; an empty file, a header without rows, or more than
//! [`MAX_ROWS`] rows.
//!
//! Quoted fields: the published files have none, and none of their fields
//! could need one, so this is a plain split on `,` rather than a CSV
//! library; a `"` anywhere is refused with its line, never mis-split.

use std::collections::{BTreeMap, HashMap};

use accord::demand::{Claim, DeviceRequest, ExactRequest, PodSet, PodSpec, Workload};
use accord::device::{Sharing, COMPUTE, GPU_DRIVER};
use accord::fleet::{FleetFile, HardwareProfile, NodeConfig, PowerState};

/// Rows per file (the published lists have about 10,000).
pub const MAX_ROWS: usize = 10_000_000;
/// GPUs of a pod or a node: Accord's per-node limit.
pub const MAX_GPUS: u32 = accord::hardware::limits::GPUS as u32;
/// A pod's share of each GPU, milli-GPU: one whole GPU.
pub const MAX_GPU_MILLI: u32 = 1000;
/// CPU of a pod or node, milli-CPU: 100,000 cores (the trace's largest
/// node has 96).
pub const MAX_CPU_MILLI: u64 = 100_000_000;
/// Memory of a pod or node, MiB: 1 PiB.
pub const MAX_MEMORY_MIB: u64 = 1 << 30;
/// Times, seconds from the trace's start: a century.
pub const MAX_TIME_S: u64 = 100 * 365 * 24 * 3600;
/// A pod's or node's name: a Kubernetes object name's limit.
pub const MAX_NAME_CHARS: usize = 253;
/// A GPU model name (`V100M32`): a Kubernetes label value's limit.
pub const MAX_MODEL_CHARS: usize = 63;
/// Distinct models in one `gpu_spec` (the trace has at most 7).
pub const MAX_SPEC_MODELS: usize = 32;
/// Characters of a bad field quoted in an error.
const SHOWN_CHARS: usize = 40;

/// The DRA attribute that carries a GPU's model: what the core's devices
/// publish (`accord::device::devices_from_hardware`) from a profile's
/// `gpu_model`, as the NVIDIA DRA driver does.
pub const MODEL_ATTRIBUTE: &str = "productName";

/// Pod-list columns that must be present.
const POD_COLUMNS: [&str; 5] = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"];
/// Node-list columns that must be present.
const NODE_COLUMNS: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];

/// One row of a pod list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenbPod {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// GPUs requested; 0 for a CPU-only pod.
    pub num_gpu: u32,
    /// Share of each GPU, milli-GPU (1000: whole GPUs); 0 iff `num_gpu` is 0.
    pub gpu_milli: u32,
    /// GPU models the pod may use, distinct, in the file's order; empty =
    /// any.
    pub gpu_spec: Vec<String>,
    /// Seconds from the trace's start; 0 when the list has no
    /// `creation_time` column.
    pub creation_s: u64,
    pub deletion_s: Option<u64>,
    pub scheduled_s: Option<u64>,
}

impl OpenbPod {
    /// GPU capacity requested, milli-GPU (what the FGD paper's allocation
    /// ratio counts).
    pub fn gpu_milli_total(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }
}

/// One row of a node list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenbNode {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    /// GPU model (`P100`, `V100M32`, `G2`); may be empty on a node without
    /// GPUs.
    pub model: String,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenbError {
    #[error("{file}: empty file (line 1 should be the header)")]
    Empty { file: String },
    #[error("{file}:1: header: {reason}")]
    Header { file: String, reason: String },
    #[error("{file}: only a header on line 1, no rows")]
    NoRows { file: String },
    #[error("{file}:{line}: more than {MAX_ROWS} rows")]
    TooManyRows { file: String, line: usize },
    #[error("{file}:{line}: {found} fields where the header has {expected}")]
    FieldCount {
        file: String,
        line: usize,
        found: usize,
        expected: usize,
    },
    #[error("{file}:{line}: column {column}: {value:?}: {reason}")]
    Field {
        file: String,
        line: usize,
        column: String,
        /// The field, clipped to a few dozen characters.
        value: String,
        reason: String,
    },
    /// A problem of the line as a whole (a quote, a blank line) or of
    /// several of its fields together.
    #[error("{file}:{line}: {reason}")]
    Row {
        file: String,
        line: usize,
        reason: String,
    },
    #[error("{file}:{line}: duplicate name {name:?} (first on line {first})")]
    Duplicate {
        file: String,
        line: usize,
        name: String,
        first: usize,
    },
}

/// Whether the text's header is a pod list's (has every required pod
/// column).
pub fn is_pod_list(text: &str) -> bool {
    has_columns(text, &POD_COLUMNS)
}

/// Whether the text's header is a node list's.
pub fn is_node_list(text: &str) -> bool {
    has_columns(text, &NODE_COLUMNS)
}

fn has_columns(text: &str, required: &[&str]) -> bool {
    let header = strip_bom(text.lines().next().unwrap_or(""));
    let names: Vec<&str> = header.split(',').collect();
    required.iter().all(|c| names.contains(c))
}

fn strip_bom(line: &str) -> &str {
    line.strip_prefix('\u{feff}').unwrap_or(line)
}

/// Parses a pod list; `file` names it in errors.
pub fn parse_pods(text: &str, file: &str) -> Result<Vec<OpenbPod>, OpenbError> {
    let table = Table::new(text, file, &POD_COLUMNS)?;
    let col = |name: &str| table.column(name);
    let (name, cpu, memory, num_gpu, gpu_milli) = (
        col("name"),
        col("cpu_milli"),
        col("memory_mib"),
        col("num_gpu"),
        col("gpu_milli"),
    );
    let (gpu_spec, creation, deletion, scheduled) = (
        table.optional("gpu_spec"),
        table.optional("creation_time"),
        table.optional("deletion_time"),
        table.optional("scheduled_time"),
    );
    let mut pods = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    table.rows(|row| {
        let pod_name = row.name(name)?;
        let num_gpu = row.number(num_gpu, u64::from(MAX_GPUS))? as u32;
        let gpu_milli = row.number(gpu_milli, u64::from(MAX_GPU_MILLI))? as u32;
        let gpu_share = |reason: &str| Err(row.problem(reason));
        match (num_gpu, gpu_milli) {
            (0, m) if m > 0 => gpu_share("gpu_milli without GPUs (num_gpu 0)")?,
            (n, 0) if n > 0 => gpu_share("GPUs with no share of them (gpu_milli 0)")?,
            (n, m) if n > 1 && m < MAX_GPU_MILLI => gpu_share(
                "a fraction of several GPUs (num_gpu > 1, gpu_milli < 1000): \
                 the trace has none, and FGD's simulator refuses it",
            )?,
            _ => {}
        }
        let creation_s = match creation {
            Some(c) => row.number(c, MAX_TIME_S)?,
            None => 0,
        };
        let deletion_s = row.optional_number(deletion, MAX_TIME_S)?;
        let scheduled_s = row.optional_number(scheduled, MAX_TIME_S)?;
        for (column, t) in [(deletion, deletion_s), (scheduled, scheduled_s)] {
            if let (Some(c), Some(t)) = (column, t) {
                if t < creation_s {
                    return Err(row.field_error(c, &format!("before creation_time {creation_s}")));
                }
            }
        }
        let spec = match gpu_spec {
            Some(c) => row.gpu_spec(c)?,
            None => Vec::new(),
        };
        let pod = OpenbPod {
            name: pod_name.to_owned(),
            cpu_milli: row.number(cpu, MAX_CPU_MILLI)?,
            memory_mib: row.number(memory, MAX_MEMORY_MIB)?,
            num_gpu,
            gpu_milli,
            gpu_spec: spec,
            creation_s,
            deletion_s,
            scheduled_s,
        };
        if pods.len() == accord::demand::MAX_WORKLOADS_IN_FILE {
            return Err(row.problem(&format!(
                "more than {} pods; refused while reading",
                accord::demand::MAX_WORKLOADS_IN_FILE
            )));
        }
        row.unique(&mut seen, &pod.name)?;
        pods.push(pod);
        Ok(())
    })?;
    Ok(pods)
}

/// Parses a node list; `file` names it in errors.
pub fn parse_nodes(text: &str, file: &str) -> Result<Vec<OpenbNode>, OpenbError> {
    let table = Table::new(text, file, &NODE_COLUMNS)?;
    let col = |name: &str| table.column(name);
    let (sn, cpu, memory, gpu, model) = (
        col("sn"),
        col("cpu_milli"),
        col("memory_mib"),
        col("gpu"),
        col("model"),
    );
    let mut nodes = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    table.rows(|row| {
        let gpus = row.number(gpu, u64::from(MAX_GPUS))? as u32;
        let model_text = row.field(model);
        // The full node list has CPU-only nodes with no model.
        if gpus > 0 || !model_text.is_empty() {
            row.model(model)?;
        }
        let node = OpenbNode {
            name: row.name(sn)?.to_owned(),
            cpu_milli: row.number(cpu, MAX_CPU_MILLI)?,
            memory_mib: row.number(memory, MAX_MEMORY_MIB)?,
            gpus,
            model: model_text.to_owned(),
        };
        row.unique(&mut seen, &node.name)?;
        nodes.push(node);
        Ok(())
    })?;
    Ok(nodes)
}

/// The header's columns and the rows after it.
struct Table<'t> {
    text: &'t str,
    file: &'t str,
    columns: Vec<&'t str>,
}

impl<'t> Table<'t> {
    fn new(text: &'t str, file: &'t str, required: &[&str]) -> Result<Self, OpenbError> {
        let header = match text.lines().next() {
            Some(h) if !h.trim().is_empty() => strip_bom(h),
            _ => return Err(OpenbError::Empty { file: file.into() }),
        };
        let header_error = |reason: String| OpenbError::Header {
            file: file.into(),
            reason,
        };
        if header.contains('"') {
            return Err(header_error(
                "a quote; quoted fields are not supported".into(),
            ));
        }
        let columns: Vec<&str> = header.split(',').collect();
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].contains(c) {
                return Err(header_error(format!("column {c:?} twice")));
            }
        }
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|c| !columns.contains(c))
            .collect();
        if !missing.is_empty() {
            return Err(header_error(format!(
                "missing column(s) {} (needs {})",
                missing.join(", "),
                required.join(", ")
            )));
        }
        Ok(Table {
            text,
            file,
            columns,
        })
    }

    /// Index of a required column (present: `new` checked).
    fn column(&self, name: &str) -> Column {
        self.optional(name).unwrap_or(Column {
            index: 0,
            name: "?",
        })
    }

    fn optional(&self, name: &str) -> Option<Column> {
        let index = self.columns.iter().position(|c| *c == name)?;
        Some(Column {
            index,
            name: static_name(name),
        })
    }

    /// Calls `each` on every row, in order, stopping at the first error.
    fn rows(
        &self,
        mut each: impl FnMut(&Row<'_>) -> Result<(), OpenbError>,
    ) -> Result<(), OpenbError> {
        let mut rows = 0usize;
        // A blank line is fine at the end only: one between rows is a
        // sign of a damaged or concatenated file.
        let mut blank: Option<usize> = None;
        for (i, text) in self.text.lines().enumerate().skip(1) {
            let line = i + 1;
            if text.trim().is_empty() {
                blank.get_or_insert(line);
                continue;
            }
            if let Some(b) = blank {
                return Err(OpenbError::Row {
                    file: self.file.into(),
                    line: b,
                    reason: "blank line before the last row".into(),
                });
            }
            rows += 1;
            if rows > MAX_ROWS {
                return Err(OpenbError::TooManyRows {
                    file: self.file.into(),
                    line,
                });
            }
            if text.contains('"') {
                return Err(OpenbError::Row {
                    file: self.file.into(),
                    line,
                    reason: "a quote; quoted fields are not supported".into(),
                });
            }
            let fields: Vec<&str> = text.split(',').collect();
            if fields.len() != self.columns.len() {
                return Err(OpenbError::FieldCount {
                    file: self.file.into(),
                    line,
                    found: fields.len(),
                    expected: self.columns.len(),
                });
            }
            each(&Row {
                file: self.file,
                line,
                fields,
            })?;
        }
        if rows == 0 {
            return Err(OpenbError::NoRows {
                file: self.file.into(),
            });
        }
        Ok(())
    }
}

/// The column names this module looks up, as `'static` (errors outlive
/// the text).
fn static_name(name: &str) -> &'static str {
    const KNOWN: [&str; 12] = [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "creation_time",
        "deletion_time",
        "scheduled_time",
        "sn",
        "gpu",
        "model",
    ];
    KNOWN.into_iter().find(|k| *k == name).unwrap_or("?")
}

#[derive(Debug, Clone, Copy)]
struct Column {
    index: usize,
    name: &'static str,
}

struct Row<'t> {
    file: &'t str,
    line: usize,
    fields: Vec<&'t str>,
}

impl<'t> Row<'t> {
    fn field(&self, c: Column) -> &'t str {
        self.fields.get(c.index).copied().unwrap_or("")
    }

    fn field_error(&self, c: Column, reason: &str) -> OpenbError {
        let value = self.field(c);
        let mut shown: String = value.chars().take(SHOWN_CHARS).collect();
        if shown.len() < value.len() {
            shown.push('…');
        }
        OpenbError::Field {
            file: self.file.into(),
            line: self.line,
            column: c.name.into(),
            value: shown,
            reason: reason.into(),
        }
    }

    fn problem(&self, reason: &str) -> OpenbError {
        OpenbError::Row {
            file: self.file.into(),
            line: self.line,
            reason: reason.into(),
        }
    }

    /// A decimal number of plain digits, at most `max`.
    fn number(&self, c: Column, max: u64) -> Result<u64, OpenbError> {
        let text = self.field(c);
        if text.is_empty() {
            return Err(self.field_error(c, "empty; a number is required"));
        }
        // Plain digits only: `parse` would also take `+5`.
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.field_error(c, "not a whole decimal number"));
        }
        match text.parse::<u64>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(self.field_error(c, &format!("more than {max}"))),
        }
    }

    /// A number, or `None` for an empty field or an absent column.
    fn optional_number(&self, c: Option<Column>, max: u64) -> Result<Option<u64>, OpenbError> {
        match c {
            Some(c) if !self.field(c).is_empty() => self.number(c, max).map(Some),
            _ => Ok(None),
        }
    }

    fn name(&self, c: Column) -> Result<&'t str, OpenbError> {
        let text = self.field(c);
        check_token(text, MAX_NAME_CHARS).map_err(|reason| self.field_error(c, &reason))?;
        Ok(text)
    }

    fn model(&self, c: Column) -> Result<(), OpenbError> {
        check_token(self.field(c), MAX_MODEL_CHARS).map_err(|reason| self.field_error(c, &reason))
    }

    /// `gpu_spec`: models separated by `|`, empty segments skipped and
    /// repeats dropped as FGD's converter and matcher do.
    fn gpu_spec(&self, c: Column) -> Result<Vec<String>, OpenbError> {
        let mut models: Vec<String> = Vec::new();
        for m in self.field(c).split('|').filter(|m| !m.is_empty()) {
            check_token(m, MAX_MODEL_CHARS)
                .map_err(|reason| self.field_error(c, &format!("model {m:?}: {reason}")))?;
            if !models.iter().any(|k| k == m) {
                if models.len() == MAX_SPEC_MODELS {
                    return Err(self
                        .field_error(c, &format!("more than {MAX_SPEC_MODELS} distinct models")));
                }
                models.push(m.to_owned());
            }
        }
        Ok(models)
    }

    fn unique(&self, seen: &mut HashMap<String, usize>, name: &str) -> Result<(), OpenbError> {
        match seen.get(name) {
            Some(&first) => Err(OpenbError::Duplicate {
                file: self.file.into(),
                line: self.line,
                name: name.into(),
                first,
            }),
            None => {
                seen.insert(name.to_owned(), self.line);
                Ok(())
            }
        }
    }
}

/// Names and models: non-empty `[A-Za-z0-9._-]`, at most `max` characters
/// (so a model can go into a CEL string and a profile name as is).
fn check_token(text: &str, max: usize) -> Result<(), String> {
    if text.is_empty() {
        return Err("empty".into());
    }
    if text.len() > max {
        return Err(format!("longer than {max} characters"));
    }
    match text
        .chars()
        .find(|ch| !(ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | '-')))
    {
        Some(ch) => Err(format!("{ch:?} is not one of A-Z a-z 0-9 . _ -")),
        None => Ok(()),
    }
}

/// GPU capacity of the nodes, milli-GPU.
pub fn gpu_capacity_milli(nodes: &[OpenbNode]) -> u64 {
    nodes
        .iter()
        .map(|n| u64::from(n.gpus) * u64::from(MAX_GPU_MILLI))
        .sum()
}

/// The fleet profile name of a node: `<gpus>x<model>` (`8xG2`), `cpu-only`
/// without GPUs.
pub fn profile_name(node: &OpenbNode) -> String {
    if node.gpus == 0 {
        "cpu-only".into()
    } else {
        format!("{}x{}", node.gpus, node.model)
    }
}

/// Fleet file for the node list: one profile per (GPU count, model),
/// each node's own CPU and memory, GPUs shared (consumable capacity, so
/// pods asking for a fraction of a GPU fit beside each other, as the FGD
/// paper models them), every node in `power`. Build it with
/// `FleetFile::build`; nodes from [`parse_nodes`] always make a valid one.
pub fn fleet_file(nodes: &[OpenbNode], power: PowerState) -> FleetFile {
    let mut file = FleetFile::default();
    for n in nodes {
        let profile = profile_name(n);
        file.profiles.entry(profile.clone()).or_insert_with(|| {
            let gpus = n.gpus.min(MAX_GPUS);
            HardwareProfile {
                gpus,
                gpu_model: (gpus > 0).then(|| n.model.clone()),
                // No pod of the trace asks for GPU memory: any size does.
                gpu_memory_gib: if gpus > 0 { 16 } else { 0 },
                // Bounded by the CPU and memory the pods ask for, not a
                // pod count.
                pods: 1000,
                power_kw: 1.0,
                numa_nodes: Some(1),
                // Each node states its own CPU and memory below.
                ..HardwareProfile::new("1", "1Gi")
            }
        });
        file.nodes.push(NodeConfig {
            cpu: Some(format!("{}m", n.cpu_milli)),
            memory: Some(format!("{}Mi", n.memory_mib)),
            power,
            gpu_sharing: (n.gpus > 0).then(Sharing::default),
            ..NodeConfig::new(&n.name, &profile)
        });
    }
    file
}

/// The CEL selector that admits only GPUs of the listed models, as the
/// FGD simulator's `gpu_spec` match (the node's model is one listed).
pub fn gpu_spec_selector(models: &[String]) -> String {
    let list: Vec<String> = models.iter().map(|m| cel_string(m)).collect();
    format!(
        "device.attributes['{GPU_DRIVER}'].{MODEL_ATTRIBUTE} in [{}]",
        list.join(", ")
    )
}

/// A CEL string literal. Parsed models are plain tokens; a caller's own
/// `OpenbPod` may hold anything, so escape rather than trust.
fn cel_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => out.push_str(&format!("\\U{:08x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// One single-pod workload `namespace/name` for the pod, created at
/// `created`: its CPU and memory as requests; whole GPUs as a count of
/// `gpu.nvidia.com` devices, a fraction as that share of one GPU's
/// compute (`gpu.nvidia.com/compute`, the shared capacity of
/// [`fleet_file`]'s nodes); `gpu_spec` as a selector on the device
/// request, so only GPUs of the listed models qualify. A CPU-only pod's
/// `gpu_spec` is ignored, as FGD does.
pub fn workload(pod: &OpenbPod, name: &str, namespace: &str, created: u64) -> Workload {
    let mut claims = Vec::new();
    if pod.num_gpu > 0 {
        let mut capacity = BTreeMap::new();
        if pod.gpu_milli < MAX_GPU_MILLI {
            capacity.insert(COMPUTE.to_owned(), format!("{}m", pod.gpu_milli));
        }
        let selectors = if pod.gpu_spec.is_empty() {
            Vec::new()
        } else {
            vec![gpu_spec_selector(&pod.gpu_spec)]
        };
        claims.push(Claim {
            name: "gpu".into(),
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                exactly: Some(ExactRequest {
                    name: None,
                    device_class: GPU_DRIVER.into(),
                    selectors,
                    count: pod.num_gpu,
                    allocation_mode: Default::default(),
                    capacity,
                    tolerations: Vec::new(),
                }),
                first_available: vec![],
            }],
            constraints: vec![],
        });
    }
    Workload {
        name: name.into(),
        namespace: namespace.into(),
        labels: BTreeMap::new(),
        min_count: None,
        priority: 0,
        created,
        topology: None,
        reservation: None,
        approximation: None,
        sources: Vec::new(),
        pod_sets: vec![PodSet {
            name: "p".into(),
            count: 1,
            pod: PodSpec {
                requests: BTreeMap::from([
                    ("cpu".to_owned(), format!("{}m", pod.cpu_milli)),
                    ("memory".to_owned(), format!("{}Mi", pod.memory_mib)),
                ]),
                claims,
                ..PodSpec::default()
            },
        }],
    }
}

#[cfg(test)]
mod tests;
