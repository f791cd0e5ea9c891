//! `accordctl power`, `bios` and `bmc probe` against real Redfish peers:
//! `sushy-emulator --fake` and recorded mockups served by `sushy-static`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use accord_testkit::sushy::{start_emulator, start_static, EmulatorOptions, FakeSystem};

const USER: &str = "admin";
const PASSWORD: &str = "pw-for-tests";

fn mockup(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/redfish")
        .join(name)
}

fn accordctl(args: &[&str]) -> Output {
    Command::new(crate::support::accordctl_bin())
        .args(args)
        .env_remove("ACCORD_BMC_INVENTORY")
        .env_remove("ACCORD_FLEET")
        .env_remove("ACCORD_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// sushy-emulator with these systems (id, powered on) behind basic auth.
fn emulator_with_auth(systems: &[(&str, bool)]) -> accord_testkit::sushy::Peer {
    let systems: Vec<FakeSystem> = systems
        .iter()
        .map(|(id, on)| FakeSystem {
            id: (*id).to_owned(),
            power_on: *on,
        })
        .collect();
    let options = EmulatorOptions {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        ..Default::default()
    };
    start_emulator(&systems, &options).unwrap()
}

fn private(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

const FLEET: &str = r#"
[profiles.h100]
gpus = 8
gpu_model = "NVIDIA H100 80GB HBM3"
gpu_memory_gib = 80
cpu = "192"
memory = "2Ti"

[[racks]]
name = "r1"
max_concurrent_power_ons = 1

[[nodes]]
name = "n1"
rack = "r1"
profile = "h100"

[[nodes]]
name = "n2"
rack = "r1"
profile = "h100"
"#;

#[test]
fn power_on_status_off_through_the_inventory() {
    let emu = emulator_with_auth(&[("n1", false), ("n2", false)]);
    let dir = tempfile::tempdir().unwrap();
    private(
        &dir.path().join("creds.toml"),
        &format!("username = \"{USER}\"\npassword = \"{PASSWORD}\"\n"),
    );
    let inventory = dir.path().join("bmcs.toml");
    std::fs::write(
        &inventory,
        format!(
            "[defaults]\ncredentials_file = \"creds.toml\"\n[power]\npoll_interval_ms = 250\non_timeout_s = 30\n\
             [[bmc]]\nnodes = \"n[1-2]\"\nendpoint = \"{}\"\nsystem = \"{{node}}\"\n",
            emu.url()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("fleet.toml"), FLEET).unwrap();
    // accordd.toml names both files; accordctl reads them from it.
    let config = dir.path().join("accordd.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndir = \"x\"\n[agents]\ntoken_file = \"t\"\n\
             [admin]\ntoken_file = \"t\"\n[fleet]\nfile = \"{}\"\n[redfish]\ninventory = \"{}\"\n",
            dir.path().join("fleet.toml").display(),
            inventory.display()
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();

    let dry = accordctl(&[
        "power",
        "on",
        "n[1-2]",
        "--direct",
        "--dry-run",
        "--config",
        cfg,
    ]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(
        text(&dry).contains("n1  Off  would send On"),
        "{}",
        text(&dry)
    );
    assert_eq!(emu.count("POST"), 0, "a dry run sends nothing");

    let on = accordctl(&["power", "on", "n1", "--direct", "--pxe", "--config", cfg]);
    assert!(on.status.success(), "{}", text(&on));
    assert!(
        text(&on).contains("n1  Off → On  PXE boot once set; sent On"),
        "{}",
        text(&on)
    );
    assert_eq!(
        emu.count("PATCH /redfish/v1/Systems/n1 204"),
        1,
        "the boot override"
    );
    let again = accordctl(&["power", "on", "n1", "--direct", "--config", cfg, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(v[0]["node"], "n1");
    assert_eq!(v[0]["ok"]["sent"], serde_json::json!([]));
    assert_eq!(
        emu.count("POST /redfish/v1/Systems/n1/Actions/ComputerSystem.Reset"),
        1
    );

    let status = accordctl(&["power", "status", "n1", "n2", "--config", cfg]);
    assert!(status.status.success(), "{}", text(&status));
    let t = text(&status);
    assert!(t.contains("n1  On") && t.contains("n2  Off"), "{t}");

    let off = accordctl(&["power", "off", "n1", "--direct", "--force", "--config", cfg]);
    assert!(
        text(&off).contains("On → Off  sent ForceOff"),
        "{}",
        text(&off)
    );

    // Unknown node: refused before anything is sent.
    let unknown = accordctl(&["power", "on", "n9", "--direct", "--config", cfg]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("node n9: no BMC in the inventory"),
        "{}",
        text(&unknown)
    );

    // Without --direct, accordctl asks accordd (none runs here): nothing
    // reaches the BMCs.
    let posts = emu.count("POST");
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "secret\n").unwrap();
    let asked = accordctl(&[
        "power",
        "off",
        "n1",
        "--url",
        "http://127.0.0.1:9",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert!(!asked.status.success());
    assert!(
        text(&asked).contains("accordd unreachable at http://127.0.0.1:9"),
        "{}",
        text(&asked)
    );
    assert_eq!(emu.count("POST"), posts);
    // --pxe is for the direct path only.
    let pxe = accordctl(&["power", "on", "n1", "--pxe", "--config", cfg]);
    assert_eq!(pxe.status.code(), Some(2), "{}", text(&pxe));

    // A failing BMC fails the command, names the node and its error.
    drop(emu);
    let down = accordctl(&["power", "status", "n2", "--config", cfg]);
    assert!(!down.status.success());
    let t = text(&down);
    assert!(
        t.contains("n2  FAILED  BMC n2: GET") && t.contains("cannot connect"),
        "{t}"
    );
    assert!(!t.contains(PASSWORD));
}

#[test]
fn bmc_probe_each_recorded_bmc() {
    for (tree, expect) in [
        (
            "dmtf-public-rackmount1",
            "on = On, graceful off = GracefulShutdown, forced off = ForceOff",
        ),
        ("dell-idrac-r6515", "model: Dell Inc. PowerEdge R6515"),
        (
            "supermicro-hgx-b200",
            "reset types (allowable_values): On, ForceOff, GracefulShutdown",
        ),
        (
            "quirks",
            "merged AllowableValues entry \"On,ForceOff\" split",
        ),
    ] {
        let peer = start_static(&mockup(tree)).unwrap();
        let out = accordctl(&["bmc", "probe", &peer.url()]);
        let t = text(&out);
        assert!(out.status.success(), "{tree}: {t}");
        assert!(t.contains(expect), "{tree}: missing {expect:?}:\n{t}");
        assert!(t.contains("tolerated"), "{t}");
        let json = accordctl(&["bmc", "probe", &peer.url(), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert!(!v["systems"].as_array().unwrap().is_empty(), "{tree}");
    }
}

#[test]
fn bmc_probe_with_credentials_and_without_trust() {
    let emu = emulator_with_auth(&[("n1", true)]);
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    private(&pw, &format!("{PASSWORD}\n"));
    let out = accordctl(&[
        "bmc",
        "probe",
        &emu.url(),
        "--user",
        USER,
        "--password-file",
        pw.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("auth: basic (no usable session service)"), "{t}");
    assert!(t.contains("power: On"), "{t}");
    assert!(!t.contains(PASSWORD));
    // A password file others can read is refused.
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = accordctl(&[
        "bmc",
        "probe",
        &emu.url(),
        "--user",
        USER,
        "--password-file",
        pw.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("chmod 600"), "{}", text(&out));
    // Without credentials: the emulator refuses.
    let out = accordctl(&["bmc", "probe", &emu.url()]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("credentials refused (HTTP 401)"),
        "{}",
        text(&out)
    );
}

/// `accordctl bmc probe` on web servers that are not BMCs: a login page,
/// `null`, an array, invalid JSON. Exit 1 (failure, per `--help`), the
/// BMC, the URL and what came back on stderr, nothing on stdout.
#[test]
fn bmc_probe_refuses_what_is_not_a_redfish_service_root() {
    use axum::http::header::CONTENT_TYPE;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = |content_type: &'static str, body: &'static str| {
        axum::routing::get(move || async move { ([(CONTENT_TYPE, content_type)], body) })
    };
    let app = axum::Router::new()
        .route(
            "/html/redfish/v1",
            answer(
                "text/html",
                "<!DOCTYPE html>\n<html><title>Login</title></html>",
            ),
        )
        .route("/null/redfish/v1", answer("application/json", "null"))
        .route("/array/redfish/v1", answer("application/json", "[]"))
        .route(
            "/invalid/redfish/v1",
            answer("application/json", "{\"RedfishVersion\": "),
        );
    runtime.spawn(async move { axum::serve(listener, app).await });
    for (kind, what) in [
        (
            "html",
            r#"not JSON (expected value at line 1 column 1); Content-Type text/html, 49 bytes: "<!DOCTYPE html>\n<html><title>Login</title></html>""#,
        ),
        (
            "null",
            r#"JSON null, not an object; Content-Type application/json, 4 bytes: "null""#,
        ),
        ("array", "JSON array, not an object"),
        ("invalid", "not JSON (EOF while parsing a value"),
    ] {
        let url = format!("http://{addr}/{kind}");
        let out = accord_testkit::process::output_within(
            Command::new(crate::support::accordctl_bin())
                .args(["bmc", "probe", &url])
                .env_remove("ACCORD_BMC_INVENTORY"),
            std::time::Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{kind}: {}", text(&out));
        assert!(out.stdout.is_empty(), "{kind}: {}", text(&out));
        let want = format!(
            "accordctl: error: BMC 127.0.0.1: GET {url}/redfish/v1: not a Redfish service root: "
        );
        assert!(stderr.contains(&want), "{kind}: {stderr}\nlacks {want}");
        assert!(stderr.contains(what), "{kind}: {stderr}\nlacks {what}");
    }
}

#[test]
fn bios_apply_to_a_rack_within_its_limit() {
    let peer = start_static(&mockup("dmtf-public-rackmount1")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("bmcs.toml");
    std::fs::write(
        &inventory,
        format!(
            "[[bmc]]\nnodes = \"n[1-2]\"\nendpoint = \"{}\"\n\
             [bios_profiles.perf]\nattributes = {{ PowerProfile = \"Balanced\", ProcTurboMode = \"Disabled\", BootMode = \"Uefi\" }}\n",
            peer.url()
        ),
    )
    .unwrap();
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(&fleet, FLEET).unwrap();
    let args = |extra: &[&str]| {
        let rack = if extra.contains(&"r9") { "r9" } else { "r1" };
        let mut a = vec![
            "bios",
            "apply",
            "perf",
            "--rack",
            rack,
            "--inventory",
            inventory.to_str().unwrap(),
            "--fleet",
            fleet.to_str().unwrap(),
        ];
        a.extend(extra.iter().filter(|e| **e != "r9"));
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        accordctl(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let dry = run(&["--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(
        text(&dry).contains("n1  perf: would stage PowerProfile"),
        "{}",
        text(&dry)
    );
    assert_eq!(peer.count("PATCH"), 0);
    let out = run(&[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    // BootMode is Uefi already, ProcTurboMode=Disabled is pending: only
    // PowerProfile is staged, on both nodes of the rack.
    assert!(
        t.contains("n1  perf: staged PowerProfile; applies at the next reset"),
        "{t}"
    );
    assert!(t.contains("n2  perf: staged PowerProfile"), "{t}");
    assert_eq!(
        peer.count("PATCH /redfish/v1/Systems/437XR1138R2/Bios/Settings 204"),
        2
    );
    let bad = run(&["r9"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("rack r9 is not in the fleet file (racks: r1)"),
        "{}",
        text(&bad)
    );
}
