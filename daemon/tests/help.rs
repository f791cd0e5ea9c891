//! accordd and accordctl parse their arguments and print help (their
//! behaviour arrives with the daemon issue).

use std::process::Command;

#[test]
fn binaries_print_help_and_refuse_unknown_arguments() {
    for (bin, words) in [
        (
            env!("CARGO_BIN_EXE_accordd"),
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
            env!("CARGO_BIN_EXE_accordctl"),
            vec!["plan", "nodes", "status", "explain", "Exit status"],
        ),
    ] {
        let out = Command::new(bin).arg("--help").output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for w in words {
            assert!(text.contains(w), "{bin} help lacks {w}:\n{text}");
        }
        let bad = Command::new(bin).arg("--no-such-flag").output().unwrap();
        assert!(!bad.status.success());
    }
}
