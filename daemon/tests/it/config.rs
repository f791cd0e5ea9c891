//! The reference `config/accordd.toml` parses, and validates but for the
//! secret files it names (they live on the admin's machine, not here).

use std::path::Path;

use accordd::config::DaemonConfig;

#[test]
fn reference_accordd_toml_parses_and_validates() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/accordd.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let config = DaemonConfig::parse(&text, &file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.listen_addr().port(), 7480);
    assert_eq!(config.server.max_body_bytes, 4 << 20);
    let problems = config.validate();
    assert!(
        problems
            .iter()
            .all(|p| p.contains("/etc/accord/") && p.contains("No such file")),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// `systemd-analyze verify` accepts every unit in systemd/, with the
/// binaries pointed at the ones just built (`scripts/bootstrap` installs
/// systemd-analyze; CI requires it).
#[test]
fn systemd_units_verify() {
    if std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze missing in CI"
        );
        eprintln!("systemd-analyze not installed; skipping");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd");
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "service") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("/usr/bin/accordd", env!("CARGO_BIN_EXE_accordd"))
            // Any executable stands in for the agent: verify checks paths.
            .replace("/usr/bin/accord-agent", env!("CARGO_BIN_EXE_accordd"));
        let unit = tmp.path().join(path.file_name().unwrap());
        std::fs::write(&unit, text).unwrap();
        let out = std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{}: {said}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 1);
}

/// `[control]` and `[kubernetes]`: parsed strictly, and validated against
/// the rest of the file.
#[test]
fn control_section_is_checked_against_fleet_and_redfish() {
    let file = Path::new("accordd.toml");
    let base = "[server]\nlisten = \"127.0.0.1:7480\"\n[store]\ndir = \"/tmp/x\"\n\
                [agents]\ntoken_file = \"/nonexistent/t\"\n[admin]\ntoken_file = \"/nonexistent/t\"\n";
    let config = DaemonConfig::parse(&format!("{base}[control]\nmode = \"act\"\n"), file).unwrap();
    let problems = config.validate();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("control: needs [fleet]")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("control.mode: \"act\" needs [redfish]")),
        "{problems:?}"
    );
    let config = DaemonConfig::parse(
        &format!(
            "{base}[control]\nmode = \"observe\"\nbatch_idle_ms = 0\ntick_ms = 5\n\
             [kubernetes]\nurl = \"localhost:8001\"\n"
        ),
        file,
    )
    .unwrap();
    let problems = config.validate();
    assert!(!problems.iter().any(|p| p.contains("needs [redfish]")));
    assert!(problems
        .iter()
        .any(|p| p.starts_with("control: batch_idle_ms")));
    assert!(problems
        .iter()
        .any(|p| p == "control.tick_ms: below 100 ms"));
    assert!(problems.iter().any(|p| p.starts_with("kubernetes.url")));
    // Unknown keys name the line.
    let e = DaemonConfig::parse(
        &format!("{base}[control]\nmode = \"act\"\nbatch = 1\n"),
        file,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("accordd.toml:11"), "{e}");
    let e = DaemonConfig::parse(&format!("{base}[control]\nmode = \"acting\"\n"), file)
        .unwrap_err()
        .to_string();
    assert!(e.contains("acting"), "{e}");
}

/// `[kubernetes] kubeconfig` and `context`: the file must be a secret
/// file, `url` excludes them, and the client reaches the context's
/// cluster, not the current one.
#[tokio::test]
async fn a_kubeconfig_and_its_context_name_the_cluster() {
    use std::os::unix::fs::PermissionsExt;
    let api = accord_testkit::fake_api::FakeApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: elsewhere\n\
             clusters:\n- name: lab\n  cluster: {{server: \"{}\"}}\n\
             - name: gone\n  cluster: {{server: \"http://127.0.0.1:9\"}}\n\
             users:\n- name: accordd\n  user: {{token: t}}\n\
             contexts:\n- name: lab\n  context: {{cluster: lab, user: accordd}}\n\
             - name: elsewhere\n  context: {{cluster: gone, user: accordd}}\n",
            api.url
        ),
    )
    .unwrap();
    let base = format!(
        "[server]\nlisten = \"127.0.0.1:7480\"\n[store]\ndir = \"/tmp/x\"\n\
         [agents]\ntoken_file = \"/nonexistent/t\"\n[admin]\ntoken_file = \"/nonexistent/t\"\n\
         [kubernetes]\nkubeconfig = \"{}\"\n",
        kubeconfig.display()
    );
    let file = Path::new("accordd.toml");
    let problem = |text: &str| {
        DaemonConfig::parse(text, file)
            .unwrap()
            .validate()
            .into_iter()
            .filter(|p| p.starts_with("kubernetes"))
            .collect::<Vec<_>>()
    };
    // World-readable credentials are refused, by key.
    std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = problem(&base);
    assert!(
        p.iter().any(|p| p.starts_with("kubernetes.kubeconfig")),
        "{p:?}"
    );
    std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(problem(&base).is_empty(), "{:?}", problem(&base));
    let both = format!("{base}url = \"http://127.0.0.1:8001\"\n");
    assert!(
        problem(&both)
            .iter()
            .any(|p| p.contains("set url (no credentials) or kubeconfig")),
        "{:?}",
        problem(&both)
    );
    // The named context's cluster answers; the current one would not.
    let config = DaemonConfig::parse(&format!("{base}context = \"lab\"\n"), file).unwrap();
    let client = accordd::control::run::kube_client(&config).await.unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert!(!version.git_version.is_empty());
    // A context the file lacks is an error naming the key.
    let config = DaemonConfig::parse(&format!("{base}context = \"nope\"\n"), file).unwrap();
    let Err(e) = accordd::control::run::kube_client(&config).await else {
        panic!("a context the kubeconfig lacks was accepted");
    };
    let e = format!("{e:#}");
    assert!(
        e.contains("kubernetes.kubeconfig") && e.contains("nope"),
        "{e}"
    );
}

/// `[kubernetes] schedulers`: the schedulers whose pods accordd plans;
/// `default-scheduler` unless listed; names checked.
#[test]
fn the_schedulers_accordd_plans_for_are_listed_and_checked() {
    let file = Path::new("accordd.toml");
    let base = "[server]\nlisten = \"127.0.0.1:7480\"\n[store]\ndir = \"/tmp/x\"\n\
                [agents]\ntoken_file = \"/nonexistent/t\"\n[admin]\ntoken_file = \"/nonexistent/t\"\n";
    let config = DaemonConfig::parse(base, file).unwrap();
    assert_eq!(
        config.kubernetes.schedulers(),
        ["default-scheduler".to_owned()].into()
    );
    let config = DaemonConfig::parse(
        &format!("{base}[kubernetes]\nschedulers = [\"default-scheduler\", \"gpu-profile\"]\n"),
        file,
    )
    .unwrap();
    assert_eq!(config.kubernetes.schedulers().len(), 2);
    assert!(!config
        .validate()
        .iter()
        .any(|p| p.starts_with("kubernetes.schedulers")));
    let config = DaemonConfig::parse(
        &format!("{base}[kubernetes]\nschedulers = [\"\", \"Bad Name\"]\n"),
        file,
    )
    .unwrap();
    let problems: Vec<String> = config
        .validate()
        .into_iter()
        .filter(|p| p.starts_with("kubernetes.schedulers"))
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
}
