//! The Debian packages `accordd` and `accord-agent`.
//!
//! Always (`cargo test --workspace`, so CI checks the packaging inputs on
//! every run without building a package): the cargo-deb metadata in
//! daemon/Cargo.toml and agent/Cargo.toml names files that exist, ships
//! every unit in systemd/ and every reference configuration as a conffile
//! under /etc/accord, completions and man pages for every binary; the units,
//! sysusers.d and tmpfiles.d files agree; the maintainer scripts start and
//! enable nothing; and the package trees laid out from the metadata pass
//! `systemd-analyze verify` (and, as root, get their state directories with
//! the units' owner and mode from systemd-sysusers/systemd-tmpfiles).
//!
//! With `ACCORD_DEB_DIR` set (scripts/package sets it): the same and more on
//! the built .debs, read with dpkg-deb.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use accord_packaging::{
    check_state_dirs, create_and_check_state_dirs, files_in, have, is_root, packages, parse_unit,
    repo_root, starts_or_enables, tree_units_agree, verify_units, Package,
};

const SHELLS: [(&str, &str); 3] = [
    ("usr/share/bash-completion/completions/", ""),
    ("usr/share/zsh/vendor-completions/", "_"),
    ("usr/share/fish/vendor_completions.d/", ".fish"),
];

/// Where a binary's completion script for each shell goes.
fn completion_paths(bin: &str) -> Vec<String> {
    SHELLS
        .iter()
        .map(|(dir, affix)| match *affix {
            "_" => format!("{dir}_{bin}"),
            "" => format!("{dir}{bin}"),
            suffix => format!("{dir}{bin}{suffix}"),
        })
        .collect()
}

/// The man section of `bin`'s pages, from its man page asset.
fn man_section(p: &Package, bin: &str) -> String {
    let asset = p
        .assets
        .iter()
        .find(|a| {
            a.dest.starts_with("usr/share/man/man")
                && a.source
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .starts_with(&format!("{bin}*."))
        })
        .unwrap_or_else(|| panic!("{}: no man page asset for {bin}", p.name));
    let section = asset
        .dest
        .trim_start_matches("usr/share/man/man")
        .trim_end_matches('/')
        .to_owned();
    assert!(
        asset.source.ends_with(&format!(".{section}.gz")),
        "{}: {} goes to man{section}: pages of another section, or not gzipped",
        p.name,
        asset.source
    );
    section
}

fn systemd_analyze_here() -> bool {
    if have("systemd-analyze") {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "systemd-analyze missing in CI (scripts/bootstrap installs systemd)"
    );
    eprintln!("systemd-analyze not installed; not verifying the units");
    false
}

#[test]
fn the_metadata_names_every_input_and_they_agree() {
    let root = repo_root();
    let pkgs = packages();
    let mut etc = BTreeSet::new();
    let mut units = Vec::new();
    let mut sysusers = Vec::new();
    let mut tmpfiles = Vec::new();
    for p in &pkgs {
        assert!(!p.bins.is_empty(), "{}: no [[bin]]", p.name);
        for a in &p.assets {
            if !a.is_build_output() {
                let src = p.crate_dir.join(&a.source);
                assert!(
                    src.is_file(),
                    "{}: asset {} does not exist",
                    p.name,
                    a.source
                );
            }
            let dest = a.install_path();
            assert!(
                !dest.starts_with('/'),
                "{}: {dest}: relative, please",
                p.name
            );
            if dest.starts_with("etc/") {
                assert!(
                    dest.starts_with("etc/accord/"),
                    "{}: {dest}: configuration goes under /etc/accord",
                    p.name
                );
                assert_eq!(a.mode, 0o644, "{}: {dest}: no secrets in conffiles", p.name);
                assert!(
                    a.source.starts_with("../config/"),
                    "{}: {dest} is not a reference file from config/",
                    p.name
                );
                etc.insert(dest.trim_start_matches("etc/accord/").to_owned());
            }
            let file = a.source.rsplit('/').next().unwrap().to_owned();
            match a.dest.as_str() {
                "usr/lib/systemd/system/" => units.push(file),
                "usr/lib/sysusers.d/" => sysusers.push(file),
                "usr/lib/tmpfiles.d/" => tmpfiles.push(file),
                _ => {}
            }
        }
        for bin in &p.bins {
            assert!(
                p.assets
                    .iter()
                    .any(|a| a.source == format!("target/release/{bin}")
                        && a.dest == "usr/bin/"
                        && a.mode == 0o755),
                "{}: {bin} is not packaged as /usr/bin/{bin}, mode 755",
                p.name
            );
            for path in completion_paths(bin) {
                assert!(
                    p.assets
                        .iter()
                        .any(|a| a.is_build_output() && a.install_path() == path),
                    "{}: no {path}",
                    p.name
                );
            }
            man_section(p, bin);
        }
        // Maintainer scripts: sh, set -e, start and enable nothing.
        let dir = p.maintainer_scripts.as_ref().expect("maintainer-scripts");
        assert!(dir.join("postinst").is_file(), "{}: no postinst", p.name);
        for script in ["preinst", "postinst", "prerm", "postrm"] {
            let Ok(text) = std::fs::read_to_string(dir.join(script)) else {
                continue;
            };
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(script))
                .unwrap()
                .permissions()
                .mode();
            assert!(mode & 0o111 != 0, "{}: {script} is not executable", p.name);
            assert!(text.starts_with("#!/bin/sh\n"), "{}: {script}", p.name);
            assert!(text.contains("\nset -e\n"), "{}: {script}: set -e", p.name);
            let bad = starts_or_enables(&text, script.ends_with("inst"));
            assert!(
                bad.is_empty(),
                "{}: {script} starts or enables: {bad:?}",
                p.name
            );
        }
        // The changelog's version is the package's.
        let changelog = std::fs::read_to_string(p.changelog.as_ref().expect("changelog")).unwrap();
        let first = changelog.lines().next().unwrap_or("");
        assert!(
            first.starts_with(&format!("{} ({}-1) ", p.name, p.version)),
            "{}: changelog starts {first:?}, not version {}-1",
            p.name,
            p.version
        );
    }
    // Every reference configuration, every unit, sysusers and tmpfiles file.
    let want = |dir: &str, suffix: &str| -> BTreeSet<String> {
        std::fs::read_dir(root.join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(suffix))
            .collect()
    };
    // Every reference configuration a program reads is a conffile; the
    // `accordctl simulate` policies (config/policy-*.toml) are examples of
    // a command-line argument, not a configuration: not under /etc.
    let configs: BTreeSet<String> = want("config", ".toml")
        .into_iter()
        .filter(|n| !n.starts_with("policy-"))
        .collect();
    assert_eq!(etc, configs, "config/*.toml vs /etc/accord");
    let sorted = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    assert_eq!(sorted(&units), want("systemd", ".service"));
    assert_eq!(units.len(), sorted(&units).len(), "a unit in two packages");
    assert_eq!(sorted(&sysusers), want("systemd/sysusers.d", ".conf"));
    assert_eq!(sorted(&tmpfiles), want("systemd/tmpfiles.d", ".conf"));
}

/// Lays `p` out in `root` from its metadata: the files as they are in the
/// repository, and a stand-in script for each binary (the units' programs
/// must be executable files for `systemd-analyze verify`).
fn lay_out(p: &Package, root: &Path) {
    for a in &p.assets {
        let dest = root.join(a.install_path());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        if !a.is_build_output() {
            std::fs::copy(p.crate_dir.join(&a.source), &dest).unwrap();
        } else if a.dest == "usr/bin/" {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(&dest, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}

/// The units, users and directories of a package tree agree, the units
/// verify, and (as root) the postinst's sysusers/tmpfiles calls give the
/// units' state directories their owner and mode.
fn check_units(name: &str, root: &Path) {
    let (units, problems) = tree_units_agree(root);
    assert!(!units.is_empty(), "{name}: no units");
    assert!(problems.is_empty(), "{name}: {problems:#?}");
    for u in &units {
        let repo = std::fs::read_to_string(repo_root().join("systemd").join(&u.name)).unwrap();
        assert_eq!(
            parse_unit(&u.name, &repo).programs,
            u.programs,
            "{name}: {}",
            u.name
        );
    }
    if systemd_analyze_here() {
        let problems = verify_units(root, &units).unwrap();
        assert!(problems.is_empty(), "{name}: {problems:#?}");
    }
    if is_root() && have("systemd-tmpfiles") {
        let problems = create_and_check_state_dirs(root, &units).unwrap();
        assert!(problems.is_empty(), "{name}: {problems:#?}");
    } else {
        eprintln!("{name}: not root; state directories not created");
    }
}

#[test]
fn package_trees_laid_out_from_the_metadata_verify() {
    for p in packages() {
        let tmp = tempfile::tempdir().unwrap();
        lay_out(&p, tmp.path());
        check_units(&p.name, tmp.path());
    }
}

fn dpkg_deb(args: &[&str]) -> String {
    let out = Command::new("dpkg-deb").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn gunzip(path: &Path) -> String {
    let out = Command::new("gzip").arg("-dc").arg(path).output().unwrap();
    assert!(out.status.success(), "{}: not gzip", path.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file (not folder) under `root/rel`, as `/rel/...`.
fn walk(root: &Path, rel: &str) -> BTreeSet<String> {
    fn go(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = format!("{prefix}/{}", e.file_name().to_string_lossy());
            if e.file_type().unwrap().is_dir() {
                go(&e.path(), &name, out);
            } else {
                out.insert(name);
            }
        }
    }
    let mut out = BTreeSet::new();
    go(&root.join(rel), &format!("/{rel}"), &mut out);
    out
}

fn the_deb(dir: &Path, name: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("ACCORD_DEB_DIR {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&format!("{name}_")) && n.ends_with(".deb")
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "ACCORD_DEB_DIR {}: want exactly one {name}_*.deb, found {found:?}",
        dir.display()
    );
    found.into_iter().next().unwrap()
}

#[test]
fn the_built_packages_hold_what_they_should() {
    let Some(dir) = std::env::var_os("ACCORD_DEB_DIR") else {
        eprintln!(
            "ACCORD_DEB_DIR not set: the .debs are not checked (scripts/package builds and checks them); \
             their inputs are (the other tests here)"
        );
        return;
    };
    let dir = PathBuf::from(dir);
    for p in packages() {
        let deb = the_deb(&dir, &p.name);
        let debs = deb.to_str().unwrap();
        let field = |f: &str| dpkg_deb(&["--field", debs, f]).trim().to_owned();
        assert_eq!(field("Package"), p.name);
        assert_eq!(field("Version"), format!("{}-1", p.version));
        assert!(!field("Maintainer").is_empty());
        assert!(!field("Architecture").is_empty());
        let depends = field("Depends");
        if let Some(want) = p.depends.as_deref() {
            for d in want.split(',').map(str::trim).filter(|d| *d != "$auto") {
                assert!(
                    depends.contains(d),
                    "{}: Depends {depends:?} lacks {d}",
                    p.name
                );
            }
        }
        // Everything belongs to root.
        for line in dpkg_deb(&["-c", debs]).lines() {
            let owner = line.split_whitespace().nth(1);
            assert!(
                matches!(owner, Some("root/root" | "0/0")),
                "{}: {line}",
                p.name
            );
        }
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let control = tmp.path().join("control");
        dpkg_deb(&["-x", debs, root.to_str().unwrap()]);
        dpkg_deb(&["-e", debs, control.to_str().unwrap()]);

        // The binaries: executable ELF files that run.
        for bin in &p.bins {
            let path = root.join("usr/bin").join(bin);
            let head = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {bin}: {e}", p.name));
            assert!(head.starts_with(b"\x7fELF"), "{}: {bin}: not ELF", p.name);
            assert_eq!(mode(&path), 0o755, "{}: {bin}", p.name);
            let out = Command::new(&path).arg("--version").output().unwrap();
            assert!(out.status.success(), "{}: {bin} --version", p.name);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("{bin} {}", p.version)
            );
        }
        // The files from the repository, as they are there, with their modes.
        for a in p.assets.iter().filter(|a| !a.is_build_output()) {
            let path = root.join(a.install_path());
            let got = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: /{}: {e}", p.name, a.install_path()));
            assert!(
                got == std::fs::read(p.crate_dir.join(&a.source)).unwrap(),
                "{}: /{} differs from {} (a package older than the tree?)",
                p.name,
                a.install_path(),
                a.source
            );
            assert_eq!(mode(&path), a.mode, "{}: /{}", p.name, a.install_path());
        }
        // conffiles: exactly the files under /etc, all under /etc/accord.
        let conffiles: BTreeSet<String> = std::fs::read_to_string(control.join("conffiles"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let etc = walk(&root, "etc");
        assert!(!etc.is_empty(), "{}: nothing under /etc", p.name);
        assert_eq!(conffiles, etc, "{}: conffiles vs /etc", p.name);
        assert!(etc.iter().all(|f| f.starts_with("/etc/accord/")), "{etc:?}");
        // Completions and man pages for every binary.
        for bin in &p.bins {
            for path in completion_paths(bin) {
                let text = std::fs::read_to_string(root.join(&path))
                    .unwrap_or_else(|e| panic!("{}: /{path}: {e}", p.name));
                let ok = match path.rsplit('/').nth(1).unwrap() {
                    "completions" => text.lines().any(|l| {
                        l.trim_start().starts_with("complete -F")
                            && l.trim_end().ends_with(&format!(" {bin}"))
                    }),
                    "vendor-completions" => text.starts_with(&format!("#compdef {bin}")),
                    _ => text.contains(&format!("complete -c {bin} ")),
                };
                assert!(ok, "{}: /{path} is not {bin}'s completion:\n{text}", p.name);
                assert!(text.contains("completions"), "{}: /{path}", p.name);
            }
            let section = man_section(&p, bin);
            let mandir = format!("usr/share/man/man{section}");
            let pages: Vec<(String, String)> = files_in(&root, &mandir, &format!(".{section}.gz"))
                .into_iter()
                .filter(|(n, _)| {
                    n.starts_with(&format!("{bin}.")) || n.starts_with(&format!("{bin}-"))
                })
                .collect();
            assert!(
                pages
                    .iter()
                    .any(|(n, _)| *n == format!("{bin}.{section}.gz")),
                "{}: no /{mandir}/{bin}.{section}.gz",
                p.name
            );
            assert!(pages.len() > 1, "{}: no subcommand pages for {bin}", p.name);
            for (n, _) in &pages {
                let page = gunzip(&root.join(&mandir).join(n));
                let title = n.trim_end_matches(&format!(".{section}.gz"));
                assert!(
                    page.contains(&format!(".TH {title} {section} ")),
                    "{}: {n}: .TH is not {title} {section}",
                    p.name
                );
                assert!(!n.contains("-man.") && !n.contains("-help."), "{n}");
            }
        }
        assert!(
            walk(&root, "usr/share/man")
                .iter()
                .all(|f| f.ends_with(".gz")),
            "{}: a man page not gzipped",
            p.name
        );
        assert!(
            root.join("usr/share/doc")
                .join(&p.name)
                .join("copyright")
                .is_file(),
            "{}: no copyright",
            p.name
        );
        // The maintainer scripts: postinst sets up users and directories,
        // and none starts or enables anything.
        let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
        for (name, _) in files_in(&root, "usr/lib/sysusers.d", ".conf") {
            assert!(
                postinst.contains("systemd-sysusers") && postinst.contains(&name),
                "{}: postinst does not run systemd-sysusers {name}",
                p.name
            );
        }
        for (name, _) in files_in(&root, "usr/lib/tmpfiles.d", ".conf") {
            assert!(
                postinst.contains("systemd-tmpfiles") && postinst.contains(&name),
                "{}: postinst does not run systemd-tmpfiles --create {name}",
                p.name
            );
        }
        for script in ["preinst", "postinst", "prerm", "postrm"] {
            if let Ok(text) = std::fs::read_to_string(control.join(script)) {
                let bad = starts_or_enables(&text, script.ends_with("inst"));
                assert!(bad.is_empty(), "{}: {script}: {bad:?}", p.name);
            }
        }
        // The postinst itself, on the extracted tree (DPKG_ROOT), twice:
        // as root, and where systemd is not running (it would reload it).
        if is_root() && !Path::new("/run/systemd/system").exists() {
            let (units, _) = tree_units_agree(&root);
            for _ in 0..2 {
                let out = Command::new("sh")
                    .arg(control.join("postinst"))
                    .arg("configure")
                    .env("DPKG_ROOT", &root)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}: postinst configure: {}",
                    p.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let problems = check_state_dirs(&root, &units);
            assert!(
                problems.is_empty(),
                "{}: after postinst: {problems:#?}",
                p.name
            );
        }
        check_units(&p.name, &root);
    }
}
