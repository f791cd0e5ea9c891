//! The `accord-agent` binary as an admin runs it: live discovery, capture and
//! replay, and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use accord_testkit::process::output_within;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(rel)
}

/// Runs `accord-agent ARGS` to its end, as `Command::output` does; panics,
/// with what it wrote, when it is still running after 60 s.
fn agent(args: &[&str]) -> Output {
    output_within(
        Command::new(env!("CARGO_BIN_EXE_accord-agent"))
            .args(args)
            .env_remove("ACCORD_LOG"),
        Duration::from_secs(60),
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn nvml_present() -> bool {
    Path::new("/dev/nvidiactl").exists()
}

#[test]
fn live_discovery_prints_numa_cores_memory_and_pci() {
    let out = agent(&["discover"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in ["NUMA 0:", "cores", "Memory", "PCIe", "root complexes"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    if !nvml_present() {
        // Said once, plainly, and not an error.
        assert_eq!(text.matches("NVML not available").count(), 1, "{text}");
        assert!(!stderr(&out).contains("NVML"), "{}", stderr(&out));
    }
}

#[test]
fn live_json_has_the_contract_fields() {
    let out = agent(&["discover", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["schema_version", "numa_nodes", "gpus", "nics", "nvlinks"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["schema_version"], 1);
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(!v["numa_nodes"].as_array().unwrap().is_empty());
    if !nvml_present() {
        assert_eq!(stderr(&out).matches("NVML not available").count(), 1);
    }
}

#[test]
fn gpu_json_fields_are_present_even_when_unknown() {
    // This export has NVIDIA GPUs that hwloc could not identify (no driver).
    let xml = fixture("hwloc/24em64t-2n6c2t-pci.xml");
    let out = agent(&["discover", "--json", "--hwloc-xml", xml.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 3);
    for g in gpus {
        for key in ["pci_bus_id", "numa_node", "model", "uuid"] {
            assert!(
                g.as_object().unwrap().contains_key(key),
                "missing {key} in {g}"
            );
        }
        assert!(g["uuid"].is_null());
    }
}

#[test]
fn capture_replays_like_the_live_host() {
    let dir = tempfile::tempdir().unwrap();
    let out = agent(&["capture", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let topo = dir.path().join("topology.xml");
    assert!(topo.exists());
    assert_eq!(dir.path().join("nvml.json").exists(), nvml_present());

    let live: serde_json::Value =
        serde_json::from_slice(&agent(&["discover", "--json"]).stdout).unwrap();
    let mut args = vec!["discover", "--json", "--hwloc-xml", topo.to_str().unwrap()];
    let snap = dir.path().join("nvml.json");
    if nvml_present() {
        args.extend(["--nvml-snapshot", snap.to_str().unwrap()]);
    }
    let replay: serde_json::Value = serde_json::from_slice(&agent(&args).stdout).unwrap();
    for key in ["numa_nodes", "gpus", "pcie", "nvlinks"] {
        assert_eq!(
            live[key], replay[key],
            "{key} differs between live and replay"
        );
    }
    assert_eq!(live["machine"]["cores"], replay["machine"]["cores"]);
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("model.json")).unwrap())
            .unwrap();
    assert_eq!(model["pcie"], replay["pcie"]);
}

/// `capture` runs as root: links planted in its directory are replaced,
/// never followed, and what they point at is left as it was.
#[test]
fn capture_replaces_planted_symlinks_and_leaves_their_targets() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let victim = elsewhere.path().join("shadow");
    std::fs::write(&victim, "precious\n").unwrap();
    for name in ["topology.xml", "nvml.json", "model.json"] {
        std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
    }
    let out = agent(&["capture", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for name in ["topology.xml", "model.json"] {
        let meta = std::fs::symlink_metadata(dir.path().join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is still a link");
    }
}

fn assert_one_line_error(out: &Output, file: &Path, needle: &str) {
    assert!(!out.status.success());
    let err = stderr(out);
    assert_eq!(err.trim_end().lines().count(), 1, "not one line:\n{err}");
    assert!(
        err.contains(&file.display().to_string()),
        "file not named:\n{err}"
    );
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_inputs_fail_with_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.xml");
    let full = std::fs::read_to_string(fixture("hwloc/nvidiaDGX2.xml")).unwrap();
    std::fs::write(&truncated, &full[..full.len() / 3]).unwrap();
    let out = agent(&["discover", "--hwloc-xml", truncated.to_str().unwrap()]);
    assert_one_line_error(&out, &truncated, "not well-formed XML");

    let not_hwloc = fixture("nvidia-smi/a100-sxm4-v12.xml");
    let out = agent(&["discover", "--hwloc-xml", not_hwloc.to_str().unwrap()]);
    assert_one_line_error(&out, &not_hwloc, "not an hwloc XML topology");

    let v3 = fixture("hwloc/hwloc3-format/nvidiaDGX2.xml");
    let out = agent(&["discover", "--hwloc-xml", v3.to_str().unwrap()]);
    assert_one_line_error(&out, &v3, "unsupported hwloc XML version 3.0");

    let missing = dir.path().join("missing.xml");
    let out = agent(&["discover", "--hwloc-xml", missing.to_str().unwrap()]);
    assert_one_line_error(&out, &missing, "cannot read file: No such file");

    let topo = fixture("hwloc/nvidiaDGX2.xml");
    let replay = |snapshot: &Path| {
        agent(&[
            "discover",
            "--hwloc-xml",
            topo.to_str().unwrap(),
            "--nvml-snapshot",
            snapshot.to_str().unwrap(),
        ])
    };
    let good = std::fs::read_to_string(fixture("nvml/h100-8gpu-mig.json")).unwrap();
    let broken_snapshots = [
        (
            "truncated.json",
            good[..good.len() / 2].to_owned(),
            "invalid NVML snapshot",
        ),
        (
            "wrong-field.json",
            good.replacen("\"pci_bus_id\"", "\"pci_bus\"", 1),
            "unknown field `pci_bus`",
        ),
        (
            "future.json",
            good.replacen("\"snapshot_version\": 1", "\"snapshot_version\": 9", 1),
            "unsupported NVML snapshot version 9",
        ),
    ];
    for (name, contents, needle) in broken_snapshots {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        assert_one_line_error(&replay(&path), &path, needle);
    }

    let out = agent(&["import-nvidia-smi", topo.to_str().unwrap()]);
    assert_one_line_error(&out, &topo, "expected <nvidia_smi_log>");
}

/// NVML strings (a GPU's name) are the driver's, and a hostile or broken
/// one cannot drive the admin's terminal: `discover` shows them escaped.
#[test]
fn nvml_strings_reach_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let topo = fixture("hwloc/nvidiaDGX2.xml");
    let good = std::fs::read_to_string(fixture("nvml/h100-8gpu-mig.json")).unwrap();
    let hostile = good.replace(
        "\"NVIDIA H100 80GB HBM3\"",
        "\"H100\\u001b]52;c;cm0gLXJm\\u0007\\u009b2J\\u202e\"",
    );
    assert_ne!(hostile, good);
    let path = dir.path().join("hostile.json");
    std::fs::write(&path, hostile).unwrap();
    let out = agent(&[
        "discover",
        "--hwloc-xml",
        topo.to_str().unwrap(),
        "--nvml-snapshot",
        path.to_str().unwrap(),
    ]);
    let shown = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    let text = String::from_utf8_lossy(&shown);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("H100\\u{1b}]52;c;"), "{text}");
    for raw in [&b"\x1b"[..], b"\x07", b"\xc2\x9b", b"\xe2\x80\xae"] {
        assert!(
            !shown.windows(raw.len()).any(|w| w == raw),
            "{raw:?} in {text}"
        );
    }
    // `--json`: the same string as JSON escapes (serde_json alone writes
    // C1 controls and bidi overrides raw), and the model reads back whole.
    let out = agent(&[
        "discover",
        "--json",
        "--hwloc-xml",
        topo.to_str().unwrap(),
        "--nvml-snapshot",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for raw in [&b"\x1b"[..], b"\x07", b"\xc2\x9b", b"\xe2\x80\xae"] {
        assert!(
            !out.stdout.windows(raw.len()).any(|w| w == raw),
            "{raw:?} in the JSON"
        );
    }
    let model: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert!(
        model
            .to_string()
            .contains("H100\\u001b]52;c;cm0gLXJm\\u0007\u{9b}2J\u{202e}"),
        "the string is kept: {model}"
    );
}

/// A configuration file that is missing, not TOML or invalid exits 78
/// (EX_CONFIG), naming the file (and every problem); `--help` says so.
#[test]
fn configuration_errors_exit_78() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[daemon]\nurl = 3\n").unwrap();
    let invalid = dir.path().join("invalid.toml");
    std::fs::write(
        &invalid,
        "[daemon]\nurl = \"ftp://x\"\ntoken_file = \"/nonexistent/token\"\n",
    )
    .unwrap();
    for (file, needle) in [
        (&missing, "cannot read"),
        (&bad, "bad.toml:2:7"),
        (&invalid, "daemon.url"),
    ] {
        let path = file.to_str().unwrap();
        for args in [vec!["check-config", path], vec!["run", "--config", path]] {
            let out = agent(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
            assert!(err.contains(&file.display().to_string()), "{err}");
            assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
            assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
        }
    }
    let help = stdout(&agent(&["--help"]));
    assert!(help.contains("78") && help.contains("EX_CONFIG"), "{help}");
}

/// hwloc and `nvidia-smi -q -x` XML nested 20,000 deep: a one-line error
/// naming the file, never a stack overflow (the parsers recurse per level,
/// so the depth is checked before any of them runs).
#[test]
fn deeply_nested_xml_is_refused_not_a_stack_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let deep = |root: &str, inner: &str| {
        format!(
            "<?xml version=\"1.0\"?>\n<{root}>\n{}{}</{root}>\n",
            format!("<{inner}>").repeat(20_000),
            format!("</{inner}>").repeat(20_000)
        )
    };
    let hwloc = dir.path().join("deep-topology.xml");
    std::fs::write(&hwloc, deep("topology", "object")).unwrap();
    let out = agent(&["discover", "--hwloc-xml", hwloc.to_str().unwrap()]);
    assert_one_line_error(&out, &hwloc, "nested deeper than 512 levels");

    let smi = dir.path().join("deep-nvidia-smi.xml");
    std::fs::write(&smi, deep("nvidia_smi_log", "gpu")).unwrap();
    let out = agent(&["import-nvidia-smi", smi.to_str().unwrap()]);
    assert_one_line_error(&out, &smi, "nested deeper than 512 levels");
    let topo = fixture("hwloc/nvidiaDGX2.xml");
    let out = agent(&[
        "discover",
        "--hwloc-xml",
        topo.to_str().unwrap(),
        "--nvidia-smi-xml",
        smi.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, &smi, "nested deeper than 512 levels");

    // Entities declared in the file could nest past the check: refused.
    let entities = dir.path().join("entities.xml");
    std::fs::write(
        &entities,
        "<?xml version=\"1.0\"?>\n<!DOCTYPE topology [\n<!ENTITY e \"<a>\">\n]>\n<topology>&e;</topology>\n",
    )
    .unwrap();
    let out = agent(&["discover", "--hwloc-xml", entities.to_str().unwrap()]);
    assert_one_line_error(&out, &entities, "DTD internal subset");
}

/// `node.name` must be a Kubernetes node name: exit 78 naming the key.
#[test]
fn a_node_name_that_is_not_a_kubernetes_node_name_is_a_config_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (name, needle) in [
        ("../nodes/x", "'/'"),
        ("GPU-01", "'G'"),
        ("gpu-01\\nforged", "'\\n'"),
    ] {
        let file = dir.path().join("agent.toml");
        std::fs::write(
            &file,
            format!(
                "[daemon]\nurl = \"http://127.0.0.1:1\"\ntoken_file = \"{}\"\n[node]\nname = \"{name}\"\n",
                token.display()
            ),
        )
        .unwrap();
        let out = agent(&["check-config", file.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(78), "{name}: {err}");
        assert!(
            err.contains("node.name") && err.contains(needle),
            "{name}: {err}"
        );
    }
}

/// `completions bash|zsh|fish` prints a script; the hidden `man --out DIR`
/// writes accord-agent.8 and a page per subcommand.
#[test]
fn completions_and_man_pages() {
    for (shell, marker) in [
        ("bash", "accord-agent"),
        ("zsh", "#compdef accord-agent"),
        ("fish", "complete -c accord-agent "),
    ] {
        let out = agent(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(
            script.contains(marker) && script.contains("discover"),
            "{shell}:\n{script}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = agent(&["man", "--out", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    for page in [
        "accord-agent.8",
        "accord-agent-run.8",
        "accord-agent-capture.8",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(
            text.contains(&format!(".TH {} 8 ", page.trim_end_matches(".8"))),
            "{page}"
        );
    }
    assert!(!stdout(&agent(&["--help"])).contains("  man "));
}
