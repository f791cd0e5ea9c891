//! docs/ARCHITECTURE.md is the code map: every `.rs` file under `src/`,
//! `tests/`, `benches/benches/` and each crate's `src/` and `tests/` is
//! named there exactly once, by its repo-relative path in backticks, and
//! every such path it names exists. A file added, moved or removed without
//! the map following fails here, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Directories never walked: build output, VCS, Python venv, recorded data.
const SKIPPED: &[&str] = &["target", ".git", ".venv", "node_modules", "fixtures"];

fn rust_files_under(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("read a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !SKIPPED.contains(&name) {
                rust_files_under(root, &path, out);
            }
        } else if name.ends_with(".rs") {
            let relative = path.strip_prefix(root).expect("under the root");
            out.insert(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn repository_rust_files(root: &Path) -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    for dir in ["src", "tests", "benches/benches"] {
        rust_files_under(root, &root.join(dir), &mut files);
    }
    for entry in std::fs::read_dir(root).expect("read the repository root") {
        let path: PathBuf = entry.expect("read a root entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !name.starts_with('.') && !SKIPPED.contains(&name) {
            for sub in ["src", "tests"] {
                rust_files_under(root, &path.join(sub), &mut files);
            }
        }
    }
    files
}

/// Every backticked token with a `/` that ends in `.rs`, with its count.
fn named_paths(text: &str) -> BTreeMap<&str, usize> {
    let mut named = BTreeMap::new();
    for (i, token) in text.split('`').enumerate() {
        let quoted = i % 2 == 1;
        let path_like = token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if quoted && path_like && token.contains('/') && token.ends_with(".rs") {
            *named.entry(token).or_insert(0) += 1;
        }
    }
    named
}

#[test]
fn every_rust_file_is_named_once_in_the_code_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))
        .expect("read docs/ARCHITECTURE.md");
    let files = repository_rust_files(root);
    assert!(
        files.contains("src/lib.rs") && files.contains("daemon/src/lib.rs"),
        "the walk found the crates' files: {files:?}"
    );
    let named = named_paths(&map);
    let mut problems = Vec::new();
    for file in &files {
        match named.get(file.as_str()) {
            Some(1) => {}
            Some(n) => problems.push(format!("{file}: named {n} times")),
            None => problems.push(format!("{file}: not named")),
        }
    }
    for path in named.keys() {
        if !files.contains(*path) {
            problems.push(format!("{path}: named, but there is no such file"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md and the code disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_code_map_stays_a_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))
        .expect("read docs/ARCHITECTURE.md");
    let lines = map.lines().count();
    assert!(
        lines < 400,
        "docs/ARCHITECTURE.md has {lines} lines (a map stays under 400)"
    );
}

#[test]
fn the_path_rule_counts_quoted_paths_only() {
    let text = "`a/b.rs` and `a/b.rs`, `mod.rs`, a/c.rs, `x y/z.rs`, `d/e.rs`.";
    let named = named_paths(text);
    assert_eq!(named.get("a/b.rs"), Some(&2));
    assert_eq!(named.get("d/e.rs"), Some(&1));
    assert_eq!(named.len(), 2, "{named:?}");
}
