//! The reference `config/bmcs.toml`, and how inventory files fail.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use accord_redfish::inventory::Inventory;
use accord_redfish::TlsMode;

#[test]
fn reference_bmcs_toml_parses_and_validates_but_for_its_files() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/bmcs.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let inv: Inventory =
        accord::config_file::parse(&text, "bmcs.toml").unwrap_or_else(|e| panic!("{e}"));
    let nodes = inv.resolve().unwrap();
    assert_eq!(
        nodes.keys().collect::<Vec<_>>(),
        ["gpu-001", "gpu-002", "gpu-003", "gpu-010", "gpu-011"]
    );
    assert_eq!(
        nodes["gpu-002"].endpoint,
        "https://gpu-002-bmc.mgmt.example.net"
    );
    assert_eq!(nodes["gpu-011"].endpoint, "https://10.0.2.011");
    assert_eq!(nodes["gpu-011"].tls, TlsMode::Insecure);
    assert_eq!(inv.insecure_nodes(), ["gpu-010", "gpu-011"]);
    assert_eq!(inv.bios_profiles["gpu-perf"].attributes.len(), 3);
    // The credentials and CA files live on the admin's machine.
    let problems = inv.validate();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems.iter().all(|p| p.contains("/etc/accord/")),
        "{problems:?}"
    );
}

#[test]
fn bad_files_name_file_line_and_key_and_never_quote_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("bmcs.toml");
    std::fs::write(&inv, "[defaults]\nmax_inflight = 2\n").unwrap();
    let err = Inventory::load(&inv).unwrap_err().to_string();
    assert!(
        err.contains("bmcs.toml:2:1") && err.contains("max_inflight"),
        "{err}"
    );

    // A credentials file open to others is refused; so is one that is not
    // TOML, without quoting its content.
    let creds = dir.path().join("creds.toml");
    std::fs::write(&creds, "username = \"root\"\npassword = calvin\n").unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        &inv,
        "[defaults]\ncredentials_file = \"creds.toml\"\n[[bmc]]\nnodes = \"n[1-2]\"\nendpoint = \"https://{node}\"\n",
    )
    .unwrap();
    let err = Inventory::load(&inv).unwrap_err().to_string();
    assert!(err.contains("readable by group or others"), "{err}");
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = Inventory::load(&inv).unwrap_err().to_string();
    assert!(err.contains("creds.toml:2:"), "{err}");
    assert!(!err.contains("calvin"), "password quoted: {err}");
    std::fs::write(&creds, "username = \"root\"\npassword = \"calvin\"\n").unwrap();
    let inv = Inventory::load(&inv).unwrap();
    let t = inv.target("n2").unwrap();
    assert_eq!(t.endpoint.as_str(), "https://n2/");
    let creds = t.credentials.unwrap();
    assert_eq!(creds.password.expose(), "calvin");
    assert!(!format!("{creds:?}").contains("calvin"));
    assert!(inv.target("n3").is_err());
}
