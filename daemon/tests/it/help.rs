//! accordd and accordctl parse their arguments and print help (their
//! behaviour arrives with the daemon issue).

use std::process::Command;

#[test]
fn binaries_print_help_and_refuse_unknown_arguments() {
    for (bin, words) in [
        (
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_accordd")),
            vec![
                "run",
                "check-config",
                "lab",
                "Exit status",
                "78",
                "EX_CONFIG",
            ],
        ),
        (
            crate::support::accordctl_bin(),
            vec!["plan", "nodes", "status", "explain", "Exit status"],
        ),
    ] {
        let out = Command::new(&bin).arg("--help").output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for w in words {
            assert!(
                text.contains(w),
                "{} help lacks {w}:\n{text}",
                bin.display()
            );
        }
        let bad = Command::new(&bin).arg("--no-such-flag").output().unwrap();
        assert!(!bad.status.success());
    }
}

/// `completions bash|zsh|fish` prints a script for the program; the hidden
/// `man --out DIR` writes its page and one per subcommand, in its section;
/// neither shows `man` in `--help`.
#[test]
fn binaries_write_completions_and_man_pages() {
    for (bin, name, section, sub) in [
        (
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_accordd")),
            "accordd",
            "8",
            "run",
        ),
        (crate::support::accordctl_bin(), "accordctl", "1", "plan"),
    ] {
        for (shell, marker) in [
            ("bash", format!("complete -F _{name}")),
            ("zsh", format!("#compdef {name}")),
            ("fish", format!("complete -c {name} ")),
        ] {
            let out = Command::new(&bin)
                .args(["completions", shell])
                .output()
                .unwrap();
            assert!(out.status.success(), "{name} completions {shell}");
            let script = String::from_utf8_lossy(&out.stdout);
            assert!(script.contains(&marker), "{name} {shell}:\n{script}");
            assert!(script.contains(sub), "{name} {shell}:\n{script}");
        }
        let bad = Command::new(&bin)
            .args(["completions", "tcsh"])
            .output()
            .unwrap();
        assert_eq!(bad.status.code(), Some(2), "{name}");
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(&bin)
            .args(["man", "--out"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} man");
        for page in [
            format!("{name}.{section}"),
            format!("{name}-{sub}.{section}"),
        ] {
            let text = std::fs::read_to_string(dir.path().join(&page))
                .unwrap_or_else(|e| panic!("{page}: {e}"));
            let title = page.trim_end_matches(&format!(".{section}"));
            assert!(text.contains(&format!(".TH {title} {section} ")), "{page}");
        }
        assert!(!dir.path().join(format!("{name}-man.{section}")).exists());
        let help = Command::new(&bin).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(help.contains("completions"), "{help}");
        assert!(!help.contains("  man "), "{help}");
    }
}
