//! The parsers the agent runs on what the machine (or a capture) gives
//! it, each called as the agent calls it, with its seed corpus from the
//! recorded fixtures. Shared by `agent/tests/hostile.rs` (a small count in
//! CI) and `benches/src/bin/fuzz-figures.rs` (a large one), which includes
//! this file by path.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use accord::hardware::NodeHardware;
use accord_agent::hwloc::{discover, HwlocInput};
use accord_testkit::hostile::{Dialect, Target};

/// The toml crate tokenizes a whole text before parsing it: about 75 bytes
/// of heap per byte of input at worst (a text of punctuation), within
/// `accord::config_file::MAX_CONFIG_BYTES` (4 MiB). TOML targets are held
/// to that multiple on top of the fixed bound.
pub const TOML_BYTES_PER_BYTE: usize = 96;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> Vec<u8> {
    let p = repo().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(input: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(input).map_err(|e| format!("not UTF-8: {e}"))
}

/// The model a snapshot is folded into (the agent's merge).
fn h100_model() -> NodeHardware {
    serde_json::from_slice(&read("tests/fixtures/models/h100-8gpu-mig.json")).unwrap()
}

/// A scratch file the file-reading loaders read each case from.
fn scratch(name: &str) -> (Mutex<tempfile::TempDir>, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(name);
    (Mutex::new(dir), file)
}

/// hwloc XML (`discovery.hwloc_xml`, a capture): the shape check, the
/// pre-check, libhwloc's own parser, then the model. Slow (libhwloc);
/// its C allocations are not counted by the harness.
pub fn hwloc_xml() -> Target {
    let corpus = [
        "tests/fixtures/hwloc/16amd64-4distances.xml",
        "tests/fixtures/hwloc/24em64t-2n6c2t-pci.xml",
        "tests/fixtures/hwloc/32em64t-2n8c2t-pci-wholeio.xml",
        "tests/fixtures/hwloc/nvidiaDGX2.xml",
        "tests/fixtures/hwloc/derived/dgx2-board0-7gpu.xml",
    ]
    .map(read)
    .to_vec();
    let (dir, file) = scratch("topology.xml");
    Target::new("hwloc-xml", Dialect::Xml, corpus, move |input| {
        let _dir = dir.lock().unwrap_or_else(|e| e.into_inner());
        std::fs::write(&file, input).map_err(|e| e.to_string())?;
        discover(HwlocInput::XmlFile(&file))
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// A recorded NVML snapshot (`discovery.nvml_snapshot`): loaded as the
/// agent loads it, then folded into a model as discovery does.
pub fn nvml_snapshot() -> Target {
    let corpus = [
        "tests/fixtures/nvml/h100-7gpu.json",
        "tests/fixtures/nvml/h100-8gpu-mig-1g.json",
        "tests/fixtures/nvml/h100-8gpu-mig.json",
        "tests/fixtures/nvml/h100-8gpu.json",
    ]
    .map(read)
    .to_vec();
    let model = Arc::new(h100_model());
    let (dir, file) = scratch("nvml.json");
    Target::new("nvml-snapshot", Dialect::Json, corpus, move |input| {
        let _dir = dir.lock().unwrap_or_else(|e| e.into_inner());
        std::fs::write(&file, input).map_err(|e| e.to_string())?;
        let snapshot = accord_agent::nvml::load_snapshot(&file).map_err(|e| e.to_string())?;
        let mut hw = (*model).clone();
        accord_agent::merge::merge(&mut hw, &snapshot, "hostile".into());
        Ok(())
    })
}

/// `nvidia-smi -q -x` output (`discovery.nvidia_smi_xml`): imported, then
/// folded into a model.
pub fn nvidia_smi_xml() -> Target {
    let model = Arc::new(h100_model());
    Target::new(
        "nvidia-smi-xml",
        Dialect::Xml,
        vec![read("tests/fixtures/nvidia-smi/a100-sxm4-v12.xml")],
        move |input| {
            let snapshot = accord_agent::nvml::nvidia_smi::import(text(input)?)?;
            let mut hw = (*model).clone();
            accord_agent::merge::merge(&mut hw, &snapshot, "hostile".into());
            Ok(())
        },
    )
}

/// agent.toml, parsed and validated as `AgentConfig::load` does (its
/// token file made, private, in a temporary directory).
pub fn agent_config() -> Target {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("agent-token");
    std::fs::write(&token, "agent-secret\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The cases keep the reference path (the same bytes in every process,
    // so a case replays); the parser reads it pointing at the token made.
    let real = token.display().to_string();
    Target::new(
        "agent.toml",
        Dialect::Toml,
        vec![read("config/agent.toml")],
        move |input| {
            let _token = &dir;
            let input = text(input)?.replace("/etc/accord/agent-token", &real);
            let input = input.as_bytes();
            accord::config_file::parse_valid(
                text(input)?,
                "agent.toml",
                accord_agent::config::AgentConfig::validate,
            )
            .map(|_| ())
            .map_err(|e| accord::config_file::error_chain(&e))
        },
    )
    .per_input_byte(TOML_BYTES_PER_BYTE)
}

/// Every target of this file (the bench runs them all).
#[allow(dead_code)]
pub fn all() -> Vec<Target> {
    vec![
        hwloc_xml(),
        nvml_snapshot(),
        nvidia_smi_xml(),
        agent_config(),
    ]
}
