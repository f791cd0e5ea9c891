//! The parsers accordd and accordctl run on outside input, each called as
//! the program calls it, with its seed corpus from the recorded fixtures.
//! Shared by `daemon/tests/hostile.rs` (a small count in CI) and
//! `benches/src/bin/fuzz-figures.rs` (a large one), which includes this
//! file by path: it uses only what both can reach.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use accord::fleet::Fleet;
use accord::hardware::{NodeHardware, SCHEMA_VERSION};
use accord_testkit::hostile::{Dialect, Target};
use serde_json::Value;

/// The toml crate tokenizes a whole text before parsing it: about 75 bytes
/// of heap per byte of input at worst (a text of punctuation), within
/// `accord::config_file::MAX_CONFIG_BYTES` (4 MiB). TOML targets are held
/// to that multiple on top of the fixed bound.
pub const TOML_BYTES_PER_BYTE: usize = 96;

/// The repository root (both includers live one level below it).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> Vec<u8> {
    let p = repo().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every file under `rel` (recursively) whose name ends with one of `exts`.
fn files(rel: &str, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![repo().join(rel)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn text(input: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(input).map_err(|e| format!("not UTF-8: {e}"))
}

fn models() -> Vec<NodeHardware> {
    files("tests/fixtures/models", &[".json"])
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect()
}

/// A fleet's hardware files, as `accordctl`'s loader reads them, but only
/// from the recorded models (a hostile path reads nothing).
fn fixture_loader(rel: &str) -> Result<NodeHardware, String> {
    let name = Path::new(rel)
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{rel}: no file name"))?;
    let p = repo().join("tests/fixtures/models").join(name);
    let text = std::fs::read_to_string(&p).map_err(|e| format!("cannot read: {e}"))?;
    let hw: NodeHardware = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if hw.schema_version > SCHEMA_VERSION {
        return Err("newer schema".into());
    }
    Ok(hw)
}

fn scenario_fleet() -> Fleet {
    let text = String::from_utf8(read("tests/scenarios/gang-rack-mixed/fleet.toml")).unwrap();
    Fleet::from_toml(&text, "fleet.toml", &mut fixture_loader).expect("scenario fleet")
}

/// The secret files the reference configs name (`/etc/accord/...`), made
/// in a private temporary directory. The cases keep `/etc/accord/` (so a
/// case is the same bytes in every process, and replays); the parser is
/// handed them with that prefix pointing at the directory.
fn secrets() -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let files: [(&str, &[u8]); 4] = [
        ("agent-token", b"agent-secret\n"),
        ("admin-token", b"admin-secret\n"),
        (
            "bmc-credentials.toml",
            b"username = \"root\"\npassword = \"calvin\"\n",
        ),
        ("bmc-ca.pem", &read("tests/fixtures/tls/ca.pem")),
    ];
    let tokens = dir.path().join("agent-tokens");
    let tls = dir.path().join("tls");
    for d in [&tokens, &tls] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let tls_files = [
        ("tls/cert.pem", read("tests/fixtures/tls/cert.pem")),
        ("tls/key.pem", read("tests/fixtures/tls/key.pem")),
        ("agent-tokens/gpu-001", b"node-secret\n".to_vec()),
    ];
    let all = files.iter().map(|(n, c)| (*n, c.to_vec())).chain(tls_files);
    for (name, content) in all {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let prefix = format!("{}/", dir.path().display());
    (dir, prefix)
}

fn with_secrets(input: &[u8], prefix: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut rest = input;
    let from = b"/etc/accord/";
    while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(prefix.as_bytes());
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

// ------------------------------------------------------------- targets

/// An agent's report as accordd's API takes it: the JSON body, the schema
/// version, `limits::check_report`, then the store (a temporary sled
/// store, one node name, as the handler calls it).
pub fn report() -> Target {
    let corpus = models()
        .into_iter()
        .map(|hw| {
            serde_json::to_vec(&serde_json::json!({
                "agent_version": "0.1.0",
                "hardware": hw,
            }))
            .unwrap()
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = accordd::store::Store::open(dir.path()).expect("store");
    let held = Mutex::new((dir, store));
    let now = AtomicU64::new(1_000);
    let names = AtomicU64::new(0);
    Target::new("report", Dialect::Json, corpus, move |input| {
        let report: accordd::api::Report =
            serde_json::from_slice(input).map_err(|e| format!("invalid JSON body: {e}"))?;
        if report.hardware.schema_version > SCHEMA_VERSION {
            return Err("schema_version newer than this accordd".into());
        }
        accordd::api::limits::check_report(&report).map_err(|r| format!("report refused: {r}"))?;
        let held = held.lock().unwrap_or_else(|e| e.into_inner());
        // A fresh node name per accepted report: a machine identity bound
        // by one case does not refuse the next.
        let k = names.fetch_add(1, Ordering::Relaxed);
        let name = format!("gpu-{}", k % 64);
        // Both identity rules: per-node tokens and a shared token.
        let rule = if k.is_multiple_of(2) {
            accordd::store::IdentityRule::Lenient
        } else {
            accordd::store::IdentityRule::Bound
        };
        held.1
            .report_as(
                &name,
                report.hardware,
                report.agent_version,
                now.fetch_add(1, Ordering::Relaxed),
                rule,
                None,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// accordd.toml: parsed and validated as `DaemonConfig::load` does.
pub fn daemon_config() -> Target {
    let (dir, prefix) = secrets();
    Target::new(
        "accordd.toml",
        Dialect::Toml,
        vec![read("config/accordd.toml")],
        move |input| {
            let _secrets = &dir;
            let input = with_secrets(input, &prefix);
            let text = text(&input)?;
            accord::config_file::parse_valid(
                text,
                "accordd.toml",
                accordd::config::DaemonConfig::validate,
            )
            .map(|_| ())
            .map_err(|e| accord::config_file::error_chain(&e))
        },
    )
    .per_input_byte(TOML_BYTES_PER_BYTE)
}

/// The fleet file: parsed, validated, resolved (hardware files from the
/// recorded models), then planned against a scenario's demand: what the
/// checks let through must be safe to plan.
pub fn fleet() -> Target {
    let mut corpus = vec![read("config/fleet.toml")];
    corpus.extend(
        files("tests/scenarios", &["fleet.toml"])
            .iter()
            .map(|p| std::fs::read(p).unwrap()),
    );
    let demand: accord::demand::Demand =
        serde_json::from_slice(&read("tests/scenarios/gang-rack-mixed/demand.json")).unwrap();
    Target::new("fleet", Dialect::Toml, corpus, move |input| {
        let text = text(input)?;
        let fleet =
            Fleet::from_toml(text, "fleet.toml", &mut fixture_loader).map_err(|e| e.to_string())?;
        let _ = accord::plan::plan(&fleet, &demand, &fleet.policy, 1_000);
        Ok(())
    })
    .per_input_byte(TOML_BYTES_PER_BYTE)
}

/// A demand file as `accordctl plan --demand FILE.json` reads it, planned
/// on a scenario's fleet.
pub fn demand() -> Target {
    let corpus = files("tests/scenarios", &["demand.json"])
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let fleet = scenario_fleet();
    Target::new("demand", Dialect::Json, corpus, move |input| {
        let text = text(input)?;
        let demand = accord_api::admin_files::parse_demand(text, "demand.json")
            .map_err(|e| e.to_string())?;
        let _ = accord::plan::plan(&fleet, &demand, &fleet.policy, 1_000);
        Ok(())
    })
}

/// Every `expression` under a Kubernetes fixture: the CEL selectors of
/// DeviceClasses and claims.
fn selectors() -> Vec<Vec<u8>> {
    fn walk(v: &Value, out: &mut Vec<Vec<u8>>) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    match x {
                        Value::String(s) if k == "expression" => out.push(s.as_bytes().to_vec()),
                        _ => walk(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for p in files("tests/fixtures/kubernetes", &[".yaml", ".yml"]) {
        let text = std::fs::read_to_string(&p).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            if let Ok(v) = <Value as serde::Deserialize>::deserialize(doc) {
                walk(&v, &mut out);
            }
        }
    }
    out.extend(
        [
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('h100')",
            "device.attributes['gpu.nvidia.com'].index in [0, 1, 2] && size(device.attributes) > 0",
            // Kubernetes' URL, IP and lists libraries (src/fit/cel_url.rs,
            // cel_library.rs).
            "url('https://[fe80::1%25en0]:8080/a%2fb?k=v&k=w#f').getQuery()['k'].size() == 2 && isURL('/p')",
            "url('http://' + device.attributes['gpu.nvidia.com'].productName + ':80/').getPort() == '80'",
            "cidr('10.0.0.0/8').containsIP(ip('10.1.2.3')) && [3, 1, 2].max() == 3",
        ]
        .map(|s| s.as_bytes().to_vec()),
    );
    // (The fixture of broken manifests holds selectors refused on purpose.)
    out.retain(|s| std::str::from_utf8(s).is_ok_and(|t| accord::fit::check_selector(t).is_ok()));
    out.sort();
    out.dedup();
    out
}

/// A CEL selector (cluster input: a DeviceClass or claim): checked as
/// translation checks it, then evaluated on every device of the recorded
/// models as fit evaluates it.
pub fn cel() -> Target {
    let devices: Vec<accord::device::Device> = models()
        .iter()
        .flat_map(|hw| {
            [false, true]
                .into_iter()
                .flat_map(|mig| accord::device::devices_from_hardware(hw, None, mig).devices)
                .collect::<Vec<_>>()
        })
        .collect();
    let devices = Arc::new(devices);
    Target::new("cel", Dialect::Text, selectors(), move |input| {
        let text = text(input)?;
        accord::fit::check_selector(text)?;
        let mut engine = accord::fit::CelEngine::default();
        let id = engine.id(text);
        for (i, d) in devices.iter().enumerate() {
            let _ = engine.matches(id, d, i as u64, accord::fit::fingerprint(d));
        }
        Ok(())
    })
}

/// bmcs.toml as `Inventory::load` reads it (from a file).
pub fn inventory() -> Target {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bmcs.toml");
    let (secrets, prefix) = secrets();
    let held = Mutex::new((dir, secrets));
    Target::new(
        "bmcs.toml",
        Dialect::Toml,
        vec![read("config/bmcs.toml")],
        move |input| {
            let _dirs = held.lock().unwrap_or_else(|e| e.into_inner());
            std::fs::write(&file, with_secrets(input, &prefix)).map_err(|e| e.to_string())?;
            accord_redfish::inventory::Inventory::load(&file)
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .per_input_byte(TOML_BYTES_PER_BYTE)
}

/// A Redfish answer (service root, system, BIOS, action info, task
/// monitor, power, error) through every reader of `redfish::model`.
pub fn redfish() -> Target {
    let corpus = files("tests/fixtures/redfish", &[".json"])
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    Target::new("redfish", Dialect::Json, corpus, |input| {
        use accord_redfish::model;
        // As the client reads a body: strictly (a key named twice refused).
        let v: Value = serde_json::from_slice::<accord::json::UniqueValue>(input)
            .map(|v| v.0)
            .map_err(|e| format!("invalid JSON: {e}"))?;
        let mut notes = Vec::new();
        let _ = model::parse_root(&v);
        let root = model::check_root(&v);
        let _ = model::members(&v, &mut notes);
        let _ = model::link(&v, "Systems", &mut notes);
        let _ = model::link(&v, "@odata.id", &mut notes);
        let _ = model::parse_system("/redfish/v1/Systems/1", &v);
        let advertised = model::parse_action_info(&v, &mut notes);
        let _ = model::choose_reset_types(&advertised);
        let _ = model::split_allowable(&v, &mut notes);
        let _ = model::parse_bios("/redfish/v1/Systems/1/Bios", &v);
        let _ = model::parse_apply_times(&v, &mut notes);
        let _ = model::parse_power_watts(&v);
        let _ = model::error_message(&v);
        let _ = model::task_state(&v);
        if let Some(s) = v.get("@odata.id").and_then(Value::as_str) {
            let _ = model::normalize_path(s, &mut notes, "@odata.id");
        }
        // A service root that is not one is the probe's refusal; every
        // other answer is read leniently (notes, not errors).
        match root {
            Err(e) if v.get("RedfishVersion").is_some() => Err(e),
            _ => Ok(()),
        }
    })
}

fn topology_options() -> accord_kube::Options {
    accord_kube::Options::for_topology(&scenario_fleet().topology)
}

/// Kubernetes manifests (YAML, multi-document, Lists) as `accordctl
/// demand` / `plan --demand` read them: parsed, translated (CEL selectors
/// of DeviceClasses checked there), rendered, and the demand planned.
pub fn manifests() -> Target {
    let corpus = files("tests/fixtures/kubernetes", &[".yaml", ".yml"])
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let fleet = scenario_fleet();
    let mut options = topology_options();
    options.pending_without_status = true;
    Target::new("manifests", Dialect::Yaml, corpus, move |input| {
        let text = text(input)?;
        let m = accord_kube::Manifests::parse(text, "hostile.yaml").map_err(|e| e.to_string())?;
        let t = accord_kube::translate(&m, &options);
        let _ = t.render();
        let _ = accord::plan::plan(&fleet, &t.demand, &fleet.policy, 1_000);
        Ok(())
    })
}

const NODE: &str = r#"{"apiVersion": "v1", "kind": "Node",
  "metadata": {"name": "gpu-001", "resourceVersion": "7",
    "labels": {"kubernetes.io/hostname": "gpu-001", "topology.kubernetes.io/zone": "z1",
      "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "accord.dev/rack": "r1"}},
  "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "accord.dev/bios", "value": "unverified", "effect": "NoSchedule"}]},
  "status": {"allocatable": {"cpu": "191500m", "memory": "2015Gi", "nvidia.com/gpu": "8",
      "pods": "110", "ephemeral-storage": "3500G"},
    "capacity": {"cpu": "192", "memory": "2Ti", "nvidia.com/gpu": "8", "pods": "110"},
    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"},
      {"type": "MemoryPressure", "status": "False"}]}}"#;

/// Nodes and ResourceSlices as the watch gives them (JSON; DRA versions
/// converted to v1) → the scheduler's view accordd compares with.
pub fn cluster() -> Target {
    let mut corpus = vec![NODE.as_bytes().to_vec()];
    for p in files("tests/fixtures/kubernetes/dra", &[".yaml"]) {
        let text = std::fs::read_to_string(&p).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let Ok(v) = <Value as serde::Deserialize>::deserialize(doc) else {
                continue;
            };
            let items = match v.get("items").and_then(Value::as_array) {
                Some(items) => items.clone(),
                None => vec![v],
            };
            for item in items {
                // The versions the watch reads (v1alpha3 is not served).
                let served = matches!(
                    item.get("apiVersion").and_then(Value::as_str),
                    Some(
                        "resource.k8s.io/v1"
                            | "resource.k8s.io/v1beta2"
                            | "resource.k8s.io/v1beta1"
                    )
                );
                if served && item.get("kind").and_then(Value::as_str) == Some("ResourceSlice") {
                    corpus.push(serde_json::to_vec(&item).unwrap());
                }
            }
        }
    }
    Target::new("cluster", Dialect::Json, corpus, |input| {
        use accord_kube::cluster;
        let v: Value = serde_json::from_slice(input).map_err(|e| format!("invalid JSON: {e}"))?;
        match v.get("kind").and_then(Value::as_str) {
            Some("Node") => {
                let node: k8s_openapi::api::core::v1::Node =
                    serde_json::from_value(v).map_err(|e| e.to_string())?;
                let n = cluster::cluster_node(&node);
                let _ = cluster::scheduler_view(&n, None);
                Ok(())
            }
            Some("ResourceSlice") => {
                let v = accord_kube::manifests::dra_as_v1(v);
                let slice: k8s_openapi::api::resource::v1::ResourceSlice =
                    serde_json::from_value(v).map_err(|e| e.to_string())?;
                let (pools, _) = cluster::current_pools(vec![slice.clone()]);
                let (_, devices) = cluster::slice_devices(&slice)?;
                let (mut published, _) = cluster::published(vec![slice], &[]);
                let node: k8s_openapi::api::core::v1::Node =
                    serde_json::from_str(NODE).map_err(|e| e.to_string())?;
                let n = cluster::cluster_node(&node);
                let _ = cluster::scheduler_view(&n, published.pop_first().map(|(_, p)| p));
                let _ = (pools, devices);
                Ok(())
            }
            other => Err(format!("not a Node or ResourceSlice: {other:?}")),
        }
    })
}

/// A lab scenario file (`accordd lab --scenario FILE`).
pub fn scenario() -> Target {
    let file = repo().join("lab/src/default-scenario.toml");
    Target::new(
        "scenario",
        Dialect::Toml,
        vec![read("lab/src/default-scenario.toml")],
        move |input| {
            let text = text(input)?;
            accord_lab::scenario::Scenario::parse(text, &file)
                .map(|_| ())
                .map_err(|e| accord::config_file::error_chain(&e))
        },
    )
    .per_input_byte(TOML_BYTES_PER_BYTE)
}

/// An `AccordNode` object as a replica reads it from the API server at a
/// takeover (outside input: whatever is stored there): the object's
/// metadata as kube decodes it, its `spec` through
/// `accordd::ha::shared_state::decode_spec` (no `spec`: an empty state),
/// then what was accepted adopted by a store (a temporary sled store, as
/// the takeover adopts it) and read back unchanged.
pub fn accord_node() -> Target {
    let corpus = files("tests/fixtures/accordnode", &[".json"])
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = accordd::store::Store::open(dir.path()).expect("store");
    let held = Mutex::new((dir, store));
    Target::new("accord_node", Dialect::Json, corpus, move |input| {
        use accordd::ha::shared_state::{decode_spec, NodeShared};
        let v: Value = serde_json::from_slice(input).map_err(|e| format!("invalid JSON: {e}"))?;
        let metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(v.get("metadata").cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("metadata: {e}"))?;
        // The object is read by its node's name.
        let node = metadata.name.ok_or("an object without a name")?;
        let state = match v.get("spec") {
            None => NodeShared::default(),
            Some(spec) => decode_spec(&node, spec)?,
        };
        let held = held.lock().unwrap_or_else(|e| e.into_inner());
        let one = std::collections::BTreeMap::from([(node.clone(), state.clone())]);
        held.1.adopt(&one).map_err(|e| e.to_string())?;
        let back = held
            .1
            .shared_parts(std::slice::from_ref(&node))
            .map_err(|e| e.to_string())?;
        // What the store gives back is what it adopted (intents and the
        // fence live elsewhere).
        let kept = NodeShared {
            fence: None,
            intents: Vec::new(),
            ..state
        };
        assert_eq!(back[&node], kept, "the store did not keep what it adopted");
        Ok(())
    })
}

/// A heartbeat body, checked as the API checks it.
pub fn heartbeat() -> Target {
    let corpus = vec![
        br#"{"agent_version": "0.1.0", "uptime_s": 60, "gpu_health": "ok"}"#.to_vec(),
        br#"{"uptime_s": 6, "assigned": [{"namespace": "ml", "name": "train-0", "ids": ["GPU-1", "MIG-2::3"]}]}"#.to_vec(),
    ];
    Target::new("heartbeat", Dialect::Json, corpus, |input| {
        let beat: accord_api::agent::Heartbeat =
            serde_json::from_slice(input).map_err(|e| format!("invalid JSON body: {e}"))?;
        accordd::api::limits::check_heartbeat(&beat)
    })
}

/// Node ranges as `bmcs.toml` and `accordctl power` expand them: counted
/// before they are built.
pub fn node_ranges() -> Target {
    let corpus = ["gpu-[001-064]", "r[1-2]n[08-09,10]", "solo", "n[0-9]-[0-9]"]
        .map(|s| s.as_bytes().to_vec())
        .to_vec();
    Target::new("node range", Dialect::Text, corpus, |input| {
        let names = accord_redfish::inventory::expand_range(text(input)?)?;
        assert!(names.len() as u64 <= accord_redfish::inventory::MAX_EXPANDED_NAMES);
        Ok(())
    })
}

/// MIG instance lists (a GPU's `mig` in a report or hardware file)
/// against its profile tables.
pub fn mig_instances() -> Target {
    let corpus = models()
        .iter()
        .flat_map(|hw| hw.gpus.iter().filter_map(|g| g.mig.clone()))
        .take(4)
        .map(|m| serde_json::to_vec(&m).unwrap())
        .collect();
    Target::new("MIG instances", Dialect::Json, corpus, |input| {
        let mig: accord::hardware::MigState =
            serde_json::from_slice(input).map_err(|e| e.to_string())?;
        mig.check_instances()
    })
}

/// What a person reads: any text through the one escaping rule leaves no
/// control or invisible character but newline and tab.
pub fn terminal_output() -> Target {
    let corpus = vec![
        "NVIDIA H100 80GB HBM3\n\tok".as_bytes().to_vec(),
        "x\u{1b}]52;c;cm0=\u{7}\u{9b}2J\u{202e}y"
            .as_bytes()
            .to_vec(),
    ];
    Target::new("terminal output", Dialect::Text, corpus, |input| {
        let shown =
            accord_api::terminal::for_terminal(&String::from_utf8_lossy(input)).into_owned();
        let leaked = shown
            .chars()
            .find(|&c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{202e}');
        assert_eq!(leaked, None, "a control character reached the terminal");
        let line = accord_api::terminal::one_line(&shown);
        assert!(!line.contains('\n'), "a line break in one line");
        Ok(())
    })
}

/// Machine identity from a report: placeholders never count, and an
/// identity proves itself and nothing it shares no part with.
pub fn identity_proofs() -> Target {
    let corpus = models()
        .into_iter()
        .filter(|hw| !accord_api::nodes::MachineIdentity::of(hw).is_empty())
        .map(|hw| serde_json::to_vec(&hw).unwrap())
        .collect();
    Target::new("identity proofs", Dialect::Json, corpus, |input| {
        let hw: NodeHardware = serde_json::from_slice(input).map_err(|e| e.to_string())?;
        let id = accord_api::nodes::MachineIdentity::of(&hw);
        if id.is_empty() {
            return Err("no machine identity".into());
        }
        assert!(id
            .gpu_uuids
            .iter()
            .all(|u| accord_api::nodes::real_gpu_uuid(u)));
        assert!(id.proves(&id), "an identity does not prove itself");
        let stranger = accord_api::nodes::MachineIdentity {
            serial: id.serial.as_ref().map(|s| format!("{s}-other")),
            gpu_uuids: id.gpu_uuids.iter().map(|u| format!("{u}-other")).collect(),
        };
        assert!(!stranger.proves(&id), "a stranger proves the binding");
        Ok(())
    })
}

/// Every target of this file (the bench runs them all).
#[allow(dead_code)]
pub fn all() -> Vec<Target> {
    vec![
        report(),
        daemon_config(),
        fleet(),
        demand(),
        cel(),
        inventory(),
        redfish(),
        manifests(),
        cluster(),
        scenario(),
        accord_node(),
        heartbeat(),
        node_ranges(),
        mig_instances(),
        terminal_output(),
        identity_proofs(),
    ]
}
