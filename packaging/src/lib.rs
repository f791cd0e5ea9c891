//! What the packaging test (tests/deb.rs) reads and checks: the cargo-deb
//! metadata of the two packages (`[package.metadata.deb]` in
//! daemon/Cargo.toml and agent/Cargo.toml), the systemd units, the
//! sysusers.d and tmpfiles.d files, and a package's file tree (an
//! extracted .deb, or one laid out from the metadata).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("packaging/ is in the repository")
        .to_path_buf()
}

/// One Debian package and the crate it is built from.
#[derive(Debug, Clone)]
pub struct Package {
    /// The Debian package's name (`accordd`).
    pub name: String,
    /// The crate's directory (asset sources are relative to it).
    pub crate_dir: PathBuf,
    /// The crate's version (`0.1.0`).
    pub version: String,
    /// The binaries it ships: the crate's `[[bin]]` names, and any other
    /// workspace binary it carries to /usr/bin (accordd's package carries
    /// accordctl, its own crate).
    pub bins: Vec<String>,
    pub assets: Vec<Asset>,
    /// `maintainer-scripts`, resolved.
    pub maintainer_scripts: Option<PathBuf>,
    /// `changelog`, resolved.
    pub changelog: Option<PathBuf>,
    pub depends: Option<String>,
}

/// One `assets` entry: `[source, dest, mode]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    pub source: String,
    pub dest: String,
    pub mode: u32,
}

impl Asset {
    /// Made by the build (cargo-deb's `target/release/` prefix): the
    /// binaries, and the completions and man pages written with them.
    pub fn is_build_output(&self) -> bool {
        self.source.starts_with("target/release/")
    }

    /// Where it lands, relative to `/` (a `dest` ending in `/` is a folder).
    /// For a glob source, the folder.
    pub fn install_path(&self) -> String {
        if self.dest.ends_with('/') && !self.source.contains('*') {
            let base = self.source.rsplit('/').next().unwrap_or(&self.source);
            format!("{}{base}", self.dest)
        } else {
            self.dest.clone()
        }
    }
}

/// Reads `[package]` and `[package.metadata.deb]` of the crate in `dir`
/// (relative to the repository root).
pub fn package(dir: &str) -> Result<Package, String> {
    let crate_dir = repo_root().join(dir);
    let manifest = crate_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(|e| format!("{dir}/Cargo.toml: {e}"))?;
    let doc: toml::Table = text.parse().map_err(|e| format!("{dir}/Cargo.toml: {e}"))?;
    let pkg = doc
        .get("package")
        .and_then(|p| p.as_table())
        .ok_or(format!("{dir}/Cargo.toml: no [package]"))?;
    let deb = pkg
        .get("metadata")
        .and_then(|m| m.get("deb"))
        .and_then(|d| d.as_table())
        .ok_or(format!("{dir}/Cargo.toml: no [package.metadata.deb]"))?;
    let string = |t: &toml::Table, k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let version = match pkg.get("version") {
        Some(toml::Value::String(v)) => v.clone(),
        // version.workspace = true
        _ => {
            let root: toml::Table = std::fs::read_to_string(repo_root().join("Cargo.toml"))
                .map_err(|e| e.to_string())?
                .parse()
                .map_err(|e: toml::de::Error| e.to_string())?;
            root.get("workspace")
                .and_then(|w| w.get("package"))
                .and_then(|p| p.get("version"))
                .and_then(|v| v.as_str())
                .ok_or("no workspace.package.version")?
                .to_owned()
        }
    };
    let mut bins: Vec<String> = doc
        .get("bin")
        .and_then(|b| b.as_array())
        .map(|bins| {
            bins.iter()
                .filter_map(|b| b.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut assets = Vec::new();
    for a in deb
        .get("assets")
        .and_then(|a| a.as_array())
        .ok_or(format!("{dir}/Cargo.toml: no assets"))?
    {
        let parts: Vec<&str> = a
            .as_array()
            .map(|p| p.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let [source, dest, mode] = parts[..] else {
            return Err(format!(
                "{dir}/Cargo.toml: asset {a} is not [source, dest, mode]"
            ));
        };
        let mode = u32::from_str_radix(mode, 8)
            .map_err(|e| format!("{dir}/Cargo.toml: asset {source}: mode {mode}: {e}"))?;
        assets.push(Asset {
            source: source.to_owned(),
            dest: dest.to_owned(),
            mode,
        });
    }
    for a in &assets {
        if let Some(bin) = a.source.strip_prefix("target/release/") {
            if a.dest == "usr/bin/" && !bins.iter().any(|b| b == bin) {
                bins.push(bin.to_owned());
            }
        }
    }
    Ok(Package {
        name: string(deb, "name").unwrap_or_else(|| string(pkg, "name").unwrap_or_default()),
        maintainer_scripts: string(deb, "maintainer-scripts").map(|p| crate_dir.join(p)),
        changelog: string(deb, "changelog").map(|p| crate_dir.join(p)),
        depends: string(deb, "depends"),
        crate_dir,
        version,
        bins,
        assets,
    })
}

/// The two packages: accordd (daemon/) and accord-agent (agent/).
pub fn packages() -> Vec<Package> {
    ["daemon", "agent"]
        .iter()
        .map(|d| package(d).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// What a systemd unit says about who runs it and where its state is.
#[derive(Debug, Clone, Default)]
pub struct Unit {
    pub name: String,
    /// `User=` (default root).
    pub user: String,
    /// `Group=` (default: the user's group).
    pub group: String,
    /// `StateDirectory=` entries (`accordd`: /var/lib/accordd).
    pub state_dirs: Vec<String>,
    /// `StateDirectoryMode=` (default 0755).
    pub state_mode: u32,
    /// The programs of every `Exec*=` line (absolute paths).
    pub programs: Vec<String>,
}

/// Parses the `[Service]` settings [`Unit`] holds.
pub fn parse_unit(name: &str, text: &str) -> Unit {
    let mut unit = Unit {
        name: name.to_owned(),
        user: "root".to_owned(),
        state_mode: 0o755,
        ..Unit::default()
    };
    let mut group = None;
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "User" => unit.user = value.to_owned(),
            "Group" => group = Some(value.to_owned()),
            "StateDirectory" if value.is_empty() => unit.state_dirs.clear(),
            "StateDirectory" => unit
                .state_dirs
                .extend(value.split_whitespace().map(str::to_owned)),
            "StateDirectoryMode" => {
                unit.state_mode = u32::from_str_radix(value, 8).unwrap_or(u32::MAX)
            }
            k if k.starts_with("Exec") => {
                let program = value.trim_start_matches(['-', '@', ':', '+', '!']);
                if let Some(p) = program.split_whitespace().next() {
                    unit.programs.push(p.to_owned());
                }
            }
            _ => {}
        }
    }
    unit.group = group.unwrap_or_else(|| unit.user.clone());
    unit
}

/// Splits a sysusers.d/tmpfiles.d line into fields, `"quoted words"` as one.
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// The users and groups a sysusers.d file declares (`u NAME` declares a
/// group NAME too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SysUsers {
    pub users: Vec<String>,
    pub groups: Vec<String>,
}

pub fn parse_sysusers(text: &str) -> SysUsers {
    let mut s = SysUsers::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f = fields(line);
        match (f.first().map(String::as_str), f.get(1)) {
            (Some("u") | Some("u!"), Some(name)) => {
                s.users.push(name.clone());
                s.groups.push(name.clone());
            }
            (Some("g"), Some(name)) => s.groups.push(name.clone()),
            (Some("m"), Some(_)) => {
                if let Some(g) = f.get(2) {
                    s.groups.push(g.clone());
                }
            }
            _ => {}
        }
    }
    s
}

/// A tmpfiles.d `d` line: the directory, its mode, owner and group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmpDir {
    pub path: String,
    pub mode: u32,
    pub user: String,
    pub group: String,
}

pub fn parse_tmpfiles(text: &str) -> Vec<TmpDir> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(fields)
        .filter(|f| matches!(f.first().map(String::as_str), Some("d" | "D")) && f.len() >= 5)
        .map(|f| TmpDir {
            path: f[1].clone(),
            mode: u32::from_str_radix(&f[2], 8).unwrap_or(u32::MAX),
            user: f[3].clone(),
            group: f[4].clone(),
        })
        .collect()
}

/// Whether the units, the users and the directories agree: every
/// `StateDirectory=` has a tmpfiles.d `d /var/lib/NAME` with the unit's
/// `StateDirectoryMode=`, `User=` and `Group=`; every user and group other
/// than root is declared in a sysusers.d file. The problems, none when
/// they agree.
pub fn units_agree(units: &[Unit], sysusers: &SysUsers, dirs: &[TmpDir]) -> Vec<String> {
    let mut problems = Vec::new();
    for u in units {
        if u.user != "root" && !sysusers.users.contains(&u.user) {
            problems.push(format!(
                "{}: User={} is not declared in a sysusers.d file",
                u.name, u.user
            ));
        }
        if u.group != "root" && !sysusers.groups.contains(&u.group) {
            problems.push(format!(
                "{}: Group={} is not declared in a sysusers.d file",
                u.name, u.group
            ));
        }
        for d in &u.state_dirs {
            let path = format!("/var/lib/{d}");
            match dirs.iter().find(|t| t.path == path) {
                None => problems.push(format!(
                    "{}: StateDirectory={d}: no tmpfiles.d line for {path}",
                    u.name
                )),
                Some(t) => {
                    if t.mode != u.state_mode {
                        problems.push(format!(
                            "{}: {path}: tmpfiles.d mode {:o}, StateDirectoryMode {:o}",
                            u.name, t.mode, u.state_mode
                        ));
                    }
                    if t.user != u.user || t.group != u.group {
                        problems.push(format!(
                            "{}: {path}: tmpfiles.d owner {}:{}, the unit runs as {}:{}",
                            u.name, t.user, t.group, u.user, u.group
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// Reads every file under `root/rel` whose name ends in `suffix`.
pub fn files_in(root: &Path, rel: &str, suffix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root.join(rel)) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(suffix) && e.path().is_file() {
                out.push((name, std::fs::read_to_string(e.path()).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// The units, users and directories in a package tree (`usr/lib/...`),
/// and whether they agree ([`units_agree`]).
pub fn tree_units_agree(root: &Path) -> (Vec<Unit>, Vec<String>) {
    let units: Vec<Unit> = files_in(root, "usr/lib/systemd/system", ".service")
        .iter()
        .map(|(n, t)| parse_unit(n, t))
        .collect();
    let mut sysusers = SysUsers::default();
    for (_, t) in files_in(root, "usr/lib/sysusers.d", ".conf") {
        let s = parse_sysusers(&t);
        sysusers.users.extend(s.users);
        sysusers.groups.extend(s.groups);
    }
    let dirs: Vec<TmpDir> = files_in(root, "usr/lib/tmpfiles.d", ".conf")
        .iter()
        .flat_map(|(_, t)| parse_tmpfiles(t))
        .collect();
    let problems = units_agree(&units, &sysusers, &dirs);
    (units, problems)
}

/// What a maintainer script does that it must not: start, restart or
/// enable a unit (the packages leave that to the admin). Stopping a unit
/// on removal and `daemon-reload` are fine. One line per problem.
pub fn starts_or_enables(script: &str, postinst: bool) -> Vec<String> {
    const STARTING: &[&str] = &[
        "start",
        "restart",
        "try-restart",
        "reload-or-restart",
        "try-reload-or-restart",
        "enable",
        "reenable",
        "preset",
        "unmask",
        "--now",
    ];
    let mut problems = Vec::new();
    for line in script.lines() {
        let code = line.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = code.split_whitespace().collect();
        let has = |w: &str| words.contains(&w);
        let starting = STARTING.iter().any(|w| has(w));
        let bad = (has("systemctl") && starting)
            || (has("deb-systemd-invoke") && (postinst || starting))
            || (has("deb-systemd-helper") && starting)
            || has("invoke-rc.d")
            || has("update-rc.d")
            || (has("service") && starting);
        if bad {
            problems.push(line.trim().to_owned());
        }
    }
    problems
}

/// A directory with `systemd-analyze verify --root=` can load units from:
/// this host's own units copied under `root/usr/lib/systemd/system` (the
/// targets the package's units name), and every program the units run that
/// the package does not ship (`/bin/kill`) copied from the host. Verifies
/// each `names` unit; the problems (its stderr), none when it passes.
pub fn verify_units(root: &Path, units: &[Unit]) -> Result<Vec<String>, String> {
    let dest = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&dest).map_err(|e| e.to_string())?;
    for host in ["/usr/lib/systemd/system", "/lib/systemd/system"] {
        let Ok(entries) = std::fs::read_dir(host) else {
            continue;
        };
        for e in entries.flatten() {
            let to = dest.join(e.file_name());
            // Follows symlinks: a dangling one or a folder is skipped.
            if e.path().is_file() && !to.exists() {
                std::fs::copy(e.path(), &to).map_err(|e| e.to_string())?;
            }
        }
    }
    for u in units {
        for p in &u.programs {
            let inside = root.join(p.trim_start_matches('/'));
            if !inside.exists() && Path::new(p).is_file() {
                std::fs::create_dir_all(inside.parent().unwrap()).map_err(|e| e.to_string())?;
                std::fs::copy(p, &inside).map_err(|e| format!("{p}: {e}"))?;
            }
        }
    }
    let mut problems = Vec::new();
    for u in units {
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg(&u.name)
            .output()
            .map_err(|e| format!("systemd-analyze: {e}"))?;
        let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if !out.status.success() || !said.is_empty() {
            problems.push(format!("{}: {said}", u.name));
        }
    }
    Ok(problems)
}

/// Whether `systemd-analyze` runs here.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the package's sysusers.d and tmpfiles.d files against `root` as
/// the postinst would (`systemd-sysusers --root`, `systemd-tmpfiles --root
/// --create`), then checks every unit's state directories exist with its
/// owner and mode. Needs root (tmpfiles chowns); the problems.
pub fn create_and_check_state_dirs(root: &Path, units: &[Unit]) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(root.join("etc")).map_err(|e| e.to_string())?;
    let run = |program: &str, args: &[String]| -> Result<(), String> {
        let out = Command::new(program)
            .arg(format!("--root={}", root.display()))
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let sysusers: Vec<String> = files_in(root, "usr/lib/sysusers.d", ".conf")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    if !sysusers.is_empty() {
        run("systemd-sysusers", &sysusers)?;
    }
    let mut tmpfiles: Vec<String> = vec!["--create".to_owned()];
    tmpfiles.extend(
        files_in(root, "usr/lib/tmpfiles.d", ".conf")
            .into_iter()
            .map(|(n, _)| n),
    );
    run("systemd-tmpfiles", &tmpfiles)?;
    Ok(check_state_dirs(root, units))
}

/// Whether every unit's state directories exist under `root` with the
/// unit's owner (by `root/etc/passwd` and `group`) and mode; the problems.
pub fn check_state_dirs(root: &Path, units: &[Unit]) -> Vec<String> {
    let ids = |file: &str| -> BTreeMap<String, u32> {
        std::fs::read_to_string(root.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                Some((f.first()?.to_string(), f.get(2)?.parse().ok()?))
            })
            .chain([("root".to_owned(), 0)])
            .collect()
    };
    let (users, groups) = (ids("etc/passwd"), ids("etc/group"));
    let mut problems = Vec::new();
    for u in units {
        for d in &u.state_dirs {
            use std::os::unix::fs::MetadataExt;
            let path = root.join("var/lib").join(d);
            let Ok(meta) = std::fs::metadata(&path) else {
                problems.push(format!("{}: /var/lib/{d} was not created", u.name));
                continue;
            };
            if meta.mode() & 0o7777 != u.state_mode {
                problems.push(format!(
                    "{}: /var/lib/{d} has mode {:o}, the unit says {:o}",
                    u.name,
                    meta.mode() & 0o7777,
                    u.state_mode
                ));
            }
            if users.get(&u.user) != Some(&meta.uid()) || groups.get(&u.group) != Some(&meta.gid())
            {
                problems.push(format!(
                    "{}: /var/lib/{d} belongs to {}:{}, the unit runs as {}:{}",
                    u.name,
                    meta.uid(),
                    meta.gid(),
                    u.user,
                    u.group
                ));
            }
        }
    }
    problems
}

/// Whether this process runs as root (tmpfiles can chown).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_sysusers_and_tmpfiles_are_parsed() {
        let u = parse_unit(
            "a.service",
            "[Unit]\nUser=nobody\n[Service]\nExecStartPre=-/usr/bin/a check\nExecStart=/usr/bin/a run\n\
             ExecReload=/bin/kill -HUP $MAINPID\nUser=accord\nStateDirectory=a b\nStateDirectoryMode=0700\n",
        );
        assert_eq!(u.user, "accord");
        assert_eq!(u.group, "accord");
        assert_eq!(u.state_dirs, ["a", "b"]);
        assert_eq!(u.state_mode, 0o700);
        assert_eq!(u.programs, ["/usr/bin/a", "/usr/bin/a", "/bin/kill"]);
        let s = parse_sysusers("# c\nu accord - \"Accord fleet daemon\" /var/lib/a\ng extra\n");
        assert_eq!(s.users, ["accord"]);
        assert_eq!(s.groups, ["accord", "extra"]);
        let d =
            parse_tmpfiles("d /var/lib/a 0700 accord accord -\nd /var/lib/b 0755 root root -\n");
        assert_eq!(d[0].mode, 0o700);
        assert!(units_agree(std::slice::from_ref(&u), &s, &d)
            .iter()
            .any(|p| p.contains("/var/lib/b: tmpfiles.d mode 755")));
        let root = parse_unit("r.service", "[Service]\nStateDirectory=b\n");
        assert!(units_agree(&[root], &s, &d).is_empty());
        assert!(units_agree(&[u], &SysUsers::default(), &d)
            .iter()
            .any(|p| p.contains("User=accord is not declared")));
    }

    #[test]
    fn starting_or_enabling_is_caught_and_reloading_is_not() {
        assert!(starts_or_enables(
            "systemctl --system daemon-reload >/dev/null || true\n# systemctl start x\n",
            true
        )
        .is_empty());
        assert!(starts_or_enables("deb-systemd-invoke stop a.service\n", false).is_empty());
        for bad in [
            "systemctl enable --now a.service",
            "  systemctl start a.service || true",
            "deb-systemd-helper enable a.service",
            "deb-systemd-invoke start a.service",
            "invoke-rc.d a start",
        ] {
            assert_eq!(starts_or_enables(bad, true).len(), 1, "{bad}");
        }
        assert_eq!(
            starts_or_enables("deb-systemd-invoke stop a", true).len(),
            1
        );
    }
}
