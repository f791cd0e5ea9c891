//! CEL's `matches` with a bounded compiler, and what a pattern costs.
//!
//! The `cel` crate compiles the pattern of every `matches` call with
//! `regex::Regex::new`, whose compiled program may reach 10 MiB: measured,
//! `\w{1000}` or `[\p{L}\p{N}]{500}` take 0.2 to 0.35 s to be refused there,
//! on every device. Here the pattern is compiled with a program of at most
//! [`PROGRAM_BYTES`] (the compiler stops as soon as it is past: about 1 ms
//! in a release build, growing with the bound: 3.6 ms at 1 MiB) and kept
//! for the next call, and a pattern's cost is read
//! from what the pattern parses to (`regex_syntax`'s `Hir`: verbose-mode
//! spacing, comments and flags are the parser's, not a text scan's), so a
//! pattern written to look small is weighed by what it is. A pattern the
//! selector builds at evaluation (`'\\w{10' + '00}'`) is unknown until it
//! runs: it is charged the most a compile can cost ([`BUILT_PATTERN`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use regex_syntax::hir::{Class, Hir, HirKind};

/// The largest compiled program of a pattern (the `regex` crate's
/// `size_limit`; its default is 10 MiB): five `\w` fit, or `^\w+-\w+$`
/// and much besides; `^.*a100.*$` takes a few KiB.
pub(crate) const PROGRAM_BYTES: usize = 256 << 10;
/// The lazy DFA's cache of one kept pattern (the crate's default is
/// 2 MiB; a smaller one makes it give way to the slower PikeVM sooner).
const DFA_BYTES: usize = 1 << 20;
/// Nesting of a pattern's groups and repetitions.
const NEST_LIMIT: u32 = 32;
/// Compiled patterns kept per thread (a plan evaluates few distinct ones;
/// each holds at most `PROGRAM_BYTES` and `DFA_BYTES`).
const KEPT: usize = 32;

/// Estimated steps (about 30 ns each) of compiling what a pattern is made
/// of, measured in a release build on 200 repetitions each: any pattern
/// about 30 µs, a literal character or small class 0.4 µs, `.` or a
/// negated class 3 µs, `\d` 17 µs, `\w` or `\p{L}` up to 220 µs.
const CALL: u64 = 1_000;
const LITERAL: u64 = 12;
const SMALL_CLASS: u64 = 100;
const DIGIT_CLASS: u64 = 600;
const WORD_CLASS: u64 = 8_000;
/// What compiling any pattern can cost: the compiler gives up at
/// [`PROGRAM_BYTES`], about 1 ms (measured on `\w{1000}`,
/// `[\p{L}\p{N}]{500}` and the like; 6 ms charged, for slower machines).
pub(crate) const BUILT_PATTERN: u64 = 200_000;

thread_local! {
    static KEPT_PATTERNS: RefCell<HashMap<Arc<String>, Result<regex::Regex, String>>> =
        RefCell::new(HashMap::new());
}

/// Compiles `pattern` within the bounds, or says why not.
fn build(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(PROGRAM_BYTES)
        .dfa_size_limit(DFA_BYTES)
        .nest_limit(NEST_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => format!(
                "the regular expression compiles to more than {} KiB",
                PROGRAM_BYTES >> 10
            ),
            other => format!("not a valid regular expression: {other}"),
        })
}

/// `pattern` compiled within the bounds, from the patterns kept (or kept
/// now); a refusal is `function`'s error. `matches` and the Kubernetes
/// regex library's `find` and `findAll` (`cel_library`) compile here.
pub(crate) fn compiled(
    function: &str,
    pattern: Arc<String>,
) -> Result<regex::Regex, cel::ExecutionError> {
    KEPT_PATTERNS.with(|kept| {
        let mut kept = kept.borrow_mut();
        if !kept.contains_key(&pattern) {
            if kept.len() >= KEPT {
                kept.clear();
            }
            let compiled = build(&pattern);
            kept.insert(pattern.clone(), compiled);
        }
        // A `Regex` is shared, not copied, by `clone`.
        kept[&pattern]
            .clone()
            .map_err(|e| cel::ExecutionError::function_error(function, e))
    })
}

/// CEL's `s.matches(re)` and `matches(s, re)`, on the bounded compiler.
pub(crate) fn matches(text: &str, pattern: Arc<String>) -> Result<bool, cel::ExecutionError> {
    compiled("matches", pattern).map(|re| re.is_match(text))
}

/// The estimated steps of compiling `pattern` (a literal of the
/// selector), or why it is refused: one that does not parse or compiles
/// past [`PROGRAM_BYTES`] is refused before anything runs.
pub(crate) fn cost(pattern: &str) -> Result<u64, String> {
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(NEST_LIMIT)
        .build()
        .parse(pattern)
        .map_err(|e| format!("not a valid regular expression: {e}"))?;
    build(pattern)?;
    Ok(CALL.saturating_add(weight(&hir)).min(BUILT_PATTERN))
}

/// What compiling `hir` costs: classes by their size, groups the sum of
/// their parts, a repetition what it repeats as many times as the
/// compiler copies it.
fn weight(hir: &Hir) -> u64 {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => LITERAL,
        HirKind::Literal(l) => LITERAL.saturating_mul(l.0.len() as u64),
        HirKind::Class(c) => class_weight(c),
        HirKind::Repetition(r) => {
            let copies = r.max.unwrap_or(r.min.saturating_add(1)).max(1);
            weight(&r.sub).saturating_mul(u64::from(copies))
        }
        HirKind::Capture(c) => weight(&c.sub).saturating_add(LITERAL),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => parts
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(weight(p))),
    }
}

/// A class by its ranges: ASCII-sized ones little, `\d` more, `\w` and
/// the Unicode categories most.
fn class_weight(class: &Class) -> u64 {
    let ranges = match class {
        Class::Unicode(u) => u.ranges().len(),
        Class::Bytes(b) => b.ranges().len(),
    };
    match ranges {
        0..=4 => SMALL_CLASS,
        5..=64 => DIGIT_CLASS,
        _ => WORD_CLASS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_weighed_by_what_they_parse_to() {
        assert!(cost("^a100$").unwrap() < 2 * CALL);
        assert!(cost(".*[a-z]+").unwrap() < 2 * CALL);
        assert!(cost(r"\w").unwrap() >= WORD_CLASS);
        // Verbose mode: the spaces are the parser's, the repetition real.
        let spaced = r"(?x) \w { 1 0 0 0 }";
        assert!(cost(spaced).unwrap_err().contains("more than 256 KiB"));
        for big in [r"\w{1000}", r"(?:\w{100}){100}", r"[\p{L}\p{N}]{500}"] {
            assert!(
                cost(big).unwrap_err().contains("more than 256 KiB"),
                "{big}"
            );
        }
        assert!(cost("(a{10}){10}").unwrap() >= 100 * LITERAL);
        assert!(cost("a{").unwrap_err().contains("not a valid"));
        let deep = format!("{}a{}", "(".repeat(40), ")".repeat(40));
        assert!(cost(&deep).unwrap_err().contains("not a valid"));
    }

    #[test]
    fn a_built_pattern_is_compiled_within_the_bound_and_kept() {
        let big = Arc::new(r"\w{1000}".to_owned());
        let e = matches("abc", big.clone()).unwrap_err().to_string();
        assert!(e.contains("more than 256 KiB"), "{e}");
        // The second call finds the refusal kept.
        assert!(matches("abc", big).is_err());
        assert!(matches("NVIDIA A100", Arc::new("(?i)a100".into())).unwrap());
        assert!(!matches("H100", Arc::new("^a".into())).unwrap());
    }
}
