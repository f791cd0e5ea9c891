//! Guards, not promises: shipping files stay under [`FILE_LINES`] lines,
//! functions under [`FN_LINES`], and no crate has an import circle
//! between its files. What is over a limit today is listed with its size
//! and may only shrink: an entry that grew, or that is back under the
//! limit (delete it then), fails here.
//!
//! Shipping = the `src/` of every crate whose code ships in a package or
//! in `accordctl` (not the lab, the testkit or the benches).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const FILE_LINES: usize = 800;
const FN_LINES: usize = 150;

const SHIPPING: &[&str] = &[
    "src",
    "api/src",
    "agent/src",
    "decide/src",
    "daemon/src",
    "ctl/src",
    "redfish/src",
    "kube/src",
    "sim/src",
    "packaging/src",
];

/// Files over [`FILE_LINES`] today, with their lines: they may only shrink.
const FILES_OVER: &[(&str, usize)] = &[
    ("daemon/src/api/server.rs", 818),
    ("redfish/src/model.rs", 821),
    ("src/demand.rs", 824),
    ("src/fit/cel_limits.rs", 809),
];

/// Functions over [`FN_LINES`] today (`file:name`), with their lines.
const FNS_OVER: &[(&str, usize)] = &[
    ("agent/src/hwloc.rs:model_from_topology", 193),
    ("agent/src/summary.rs:render", 157),
    ("api/src/text.rs:render_explain", 161),
    ("api/src/text.rs:render_status", 158),
    ("ctl/src/main.rs:run", 248),
    ("daemon/src/config.rs:validate", 169),
    ("daemon/src/control/write.rs:write", 244),
    ("kube/src/translate/group.rs:workload", 249),
    ("kube/src/translate/mod.rs:translate", 320),
    ("kube/src/translate/render.rs:render", 151),
    ("sim/src/engine.rs:run_quietly", 260),
    ("src/device.rs:devices_from_hardware", 203),
    ("src/fit/cel_limits.rs:call", 185),
    ("src/fleet/install.rs:resolve", 151),
    ("src/fleet/validate.rs:validate", 284),
    ("src/plan/bind.rs:bind", 152),
    ("src/plan/evaluate.rs:evaluate", 244),
    ("src/plan/evaluate.rs:trial_indexed", 162),
];

fn rust_files(root: &Path, dir: &str) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under the root");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &root.join(dir), &mut out);
    out.sort();
    out
}

/// The text with comments, strings and character literals blanked (each
/// byte a space, newlines kept), so braces and `fn` count only as code.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\"") || rest.starts_with(b"br"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let start = if rest[0] == b'b' { i + 2 } else { i + 1 };
            let hashes = b[start..].iter().take_while(|&&c| c == b'#').count();
            if b.get(start + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = start + hashes + 1;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter()
                    .skip(2)
                    .position(|&c| c == b'\'')
                    .map(|p| i + p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every function with a body: (name, lines from `fn` to its closing brace).
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let code = code_only(text);
    let b = code.as_bytes();
    let line_of = |at: usize| b[..at].iter().filter(|&&c| c == b'\n').count();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(p) = code[i..].find("fn ") {
        let at = i + p;
        i = at + 3;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` before any `;` (a declaration
        // without a body ends at its `;`).
        let Some(open) = code[at..].find(['{', ';']).map(|q| at + q) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = None;
        for (k, &c) in b[open..].iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { break };
        found.push((name, line_of(close) - line_of(at) + 1));
    }
    found
}

#[test]
fn shipping_files_and_functions_stay_small() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files_over: BTreeMap<&str, usize> = FILES_OVER.iter().copied().collect();
    let fns_over: BTreeMap<&str, usize> = FNS_OVER.iter().copied().collect();
    let mut problems = Vec::new();
    let (mut seen_files, mut seen_fns) = (BTreeSet::new(), BTreeSet::new());
    for dir in SHIPPING {
        for file in rust_files(root, dir) {
            let text = std::fs::read_to_string(root.join(&file)).expect("read a source file");
            let lines = text.lines().count();
            match files_over.get(file.as_str()) {
                Some(&allowed) if lines > allowed => problems.push(format!(
                    "{file}: {lines} lines, more than its listed {allowed}: it may only shrink"
                )),
                Some(_) if lines <= FILE_LINES => problems.push(format!(
                    "{file}: {lines} lines, under {FILE_LINES} now: delete it from FILES_OVER"
                )),
                Some(_) => {
                    seen_files.insert(file.clone());
                }
                None if lines > FILE_LINES => problems.push(format!(
                    "{file}: {lines} lines (at most {FILE_LINES}): split it by what it does"
                )),
                None => {}
            }
            for (name, lines) in function_lengths(&text) {
                let key = format!("{file}:{name}");
                match fns_over.get(key.as_str()) {
                    Some(&allowed) if lines > allowed => problems.push(format!(
                        "{key}: {lines} lines, more than its listed {allowed}: it may only shrink"
                    )),
                    Some(_) => {
                        seen_fns.insert(key);
                    }
                    None if lines > FN_LINES => problems.push(format!(
                        "{key}: {lines} lines (at most {FN_LINES}): it holds two ideas"
                    )),
                    None => {}
                }
            }
        }
    }
    for (file, _) in FILES_OVER {
        if !seen_files.contains(*file) && !problems.iter().any(|p| p.starts_with(file)) {
            problems.push(format!(
                "{file}: listed in FILES_OVER but not over: delete it"
            ));
        }
    }
    for (key, _) in FNS_OVER {
        if !seen_fns.contains(*key) {
            problems.push(format!(
                "{key}: listed in FNS_OVER but not found: delete it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_function_rule_sees_through_strings_comments_and_declarations() {
    let text = "fn a() {\n  let s = \"}}}\";\n  // }\n  let c = '}';\n}\n\
                trait T { fn decl(&self); }\n\
                fn b<'x>(v: &'x str) -> &'x str {\n  let r = r#\"{\"#;\n  v\n}\n";
    let found = function_lengths(text);
    assert_eq!(
        found,
        [("a".to_owned(), 5), ("b".to_owned(), 4)],
        "{found:?}"
    );
}

/// A crate's module tree: module path (`a::b`) → file.
fn modules(root: &Path, src: &str) -> BTreeMap<Vec<String>, String> {
    let mut out = BTreeMap::new();
    for file in rust_files(root, src) {
        let rel = &file[src.len() + 1..];
        if rel.starts_with("bin/")
            || rel == "main.rs" && Path::new(&root.join(src).join("lib.rs")).exists()
        {
            continue;
        }
        let mut parts: Vec<String> = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_owned)
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        out.insert(parts, file);
    }
    out
}

/// Every path a file names from the crate (`crate::…`, `super::…`,
/// `self::…`, and its own children's), `use` trees expanded, resolved to
/// module paths (absolute).
fn named_modules(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let own: Vec<String> = here.to_vec();
    let resolve = |path: &str| -> Option<Vec<String>> {
        let mut segs = path.split("::").map(str::trim).filter(|s| !s.is_empty());
        let first = segs.next()?;
        let mut base = match first {
            "crate" => Vec::new(),
            "self" => own.clone(),
            "super" => {
                let mut p = own.clone();
                p.pop();
                p
            }
            other => {
                let mut p = own.clone();
                p.push(other.to_owned());
                p
            }
        };
        for s in segs {
            if s == "super" {
                base.pop();
            } else {
                base.push(s.to_owned());
            }
        }
        Some(base)
    };
    let mut paths = Vec::new();
    // `use` trees: `use a::{b, c::{d, e}};` expanded to each leaf.
    for stmt in code.split(';') {
        let Some(u) = stmt.trim_start().strip_prefix("use ").or_else(|| {
            stmt.trim_start().strip_prefix("pub use ").or_else(|| {
                stmt.trim_start()
                    .strip_prefix("pub(crate) use ")
                    .or_else(|| stmt.trim_start().strip_prefix("pub(super) use "))
            })
        }) else {
            continue;
        };
        let mut leaves = Vec::new();
        expand_use(u.trim(), String::new(), &mut leaves);
        for leaf in leaves {
            let leaf = leaf.split(" as ").next().unwrap_or("").trim().to_owned();
            if leaf.starts_with("crate::")
                || leaf.starts_with("super::")
                || leaf.starts_with("self::")
            {
                paths.extend(resolve(&leaf));
            }
        }
    }
    // Paths written inline: `crate::a::b`, `super::a`.
    for start in ["crate::", "super::"] {
        let mut i = 0;
        while let Some(p) = code[i..].find(start) {
            let at = i + p;
            i = at + start.len();
            let prev = code[..at].chars().next_back();
            if prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.extend(resolve(path.trim_end_matches(':')));
        }
    }
    paths
}

fn expand_use(tree: &str, prefix: String, out: &mut Vec<String>) {
    let tree = tree.trim();
    match tree.find('{') {
        None => out.push(format!("{prefix}{tree}")),
        Some(open) => {
            let head = &tree[..open];
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut depth = 0;
            let mut last = 0;
            for (k, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand_use(&inner[last..k], format!("{prefix}{head}"), out);
                        last = k + 1;
                    }
                    _ => {}
                }
            }
            if !inner[last..].trim().is_empty() {
                expand_use(&inner[last..], format!("{prefix}{head}"), out);
            }
        }
    }
}

/// Files of one crate that import each other in a loop (a module and its
/// ancestors excepted: a child's `use super::…` is not a circle).
fn circles(root: &Path, src: &str) -> Vec<Vec<String>> {
    let mods = modules(root, src);
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (path, file) in &mods {
        let text = std::fs::read_to_string(root.join(file)).expect("read a source file");
        let mut code = code_only(&text);
        // A file's own tests (`#[cfg(test)] mod …`, last by convention)
        // are not part of its imports.
        if let Some(at) = code.find("#[cfg(test)]\nmod ") {
            code.truncate(at);
        }
        for named in named_modules(&code, path) {
            // The deepest module the path names (the rest are items).
            let Some(target) = (0..=named.len())
                .rev()
                .find_map(|k| mods.get_key_value(&named[..k]))
            else {
                continue;
            };
            let (tpath, tfile) = target;
            let ancestor = path.starts_with(tpath) || tpath.starts_with(path);
            if !ancestor {
                edges
                    .entry(file.as_str())
                    .or_default()
                    .insert(tfile.as_str());
            }
        }
    }
    // Strongly connected components of two files or more (Tarjan's, kept
    // simple: reachability both ways, the graphs are small).
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(f) = todo.pop() {
            for &t in edges.get(f.as_str()).into_iter().flatten() {
                if seen.insert(t.to_owned()) {
                    todo.push(t.to_owned());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<String>> =
        mods.values().map(|f| (f.as_str(), reach(f))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (f, r) in &reached {
        if !r.contains(*f) {
            continue;
        }
        let mut circle: Vec<String> = r
            .iter()
            .filter(|g| {
                reached
                    .get(g.as_str())
                    .is_some_and(|back| back.contains(*f))
            })
            .cloned()
            .collect();
        circle.sort();
        found.insert(circle);
    }
    found.into_iter().collect()
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<String> = SHIPPING.iter().map(|s| (*s).to_owned()).collect();
    crates.extend(["lab/src", "testkit/src", "benches/src"].map(str::to_owned));
    let mut problems = Vec::new();
    for src in &crates {
        for c in circles(root, src) {
            problems.push(c.join(" <-> "));
        }
    }
    assert!(
        problems.is_empty(),
        "import circles:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_circle_rule_finds_a_circle_between_siblings() {
    let here = vec!["translate".to_owned(), "pod".to_owned()];
    let named = named_modules(
        "use super::{volumes::{a, b}, render};\nfn f() { crate::fit::x(); }",
        &here,
    );
    assert!(
        named.contains(&vec!["translate".into(), "volumes".into(), "a".into()]),
        "{named:?}"
    );
    assert!(
        named.contains(&vec!["translate".into(), "render".into()]),
        "{named:?}"
    );
    assert!(named.contains(&vec!["fit".into(), "x".into()]), "{named:?}");
}

/// accordctl is the admin's tool on any machine: it links none of accordd
/// (what both read, the fleet and demand files and secrets, is in
/// accord-api's `admin_files`), so a change to accordd's internals never
/// rebuilds or reships it for nothing.
#[test]
fn accordctl_links_none_of_accordd() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("ctl/Cargo.toml")).expect("ctl/Cargo.toml");
    let manifest: toml::Table = toml::from_str(&text).expect("ctl/Cargo.toml is TOML");
    for table in ["dependencies", "build-dependencies"] {
        let deps = manifest.get(table).and_then(|d| d.as_table());
        assert!(
            deps.is_none_or(|d| !d.contains_key("accord-daemon")),
            "ctl/Cargo.toml [{table}] names accord-daemon"
        );
    }
}
