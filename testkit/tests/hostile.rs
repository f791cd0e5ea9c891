//! The hostile-input harness itself: it must catch a parser that panics,
//! hangs or allocates without bound (or these tests of every parser would
//! pass whatever the parsers do), and its cases must be deterministic and
//! hostile in the ways it claims.

use std::sync::Arc;
use std::time::Duration;

use accord_testkit::hostile::{
    case, counting, exclusive, run, run_case, CountingAlloc, Dialect, Limits, Problem, Target,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const JSON: &str = r#"{"hardware": {"gpus": [{"uuid": "GPU-1", "memory_mib": 81920}], "nics": []},
    "name": "gpu-001", "count": 8, "ratio": 0.5, "on": true}"#;

fn json_target(parse: impl Fn(&[u8]) -> Result<(), String> + Send + Sync + 'static) -> Target {
    Target::new("test", Dialect::Json, vec![JSON.as_bytes().to_vec()], parse)
}

/// Limits for the harness's own tests. The deadline is generous: a case
/// that panics captures and symbolises a backtrace (RUST_BACKTRACE in CI),
/// which takes seconds in a debug build on a loaded machine; only the hang
/// test uses a short one.
fn quick() -> Limits {
    Limits {
        deadline: Duration::from_secs(30),
        max_bytes: 16 << 20,
        hard_cap: 512 << 20,
        ..Limits::default()
    }
}

#[test]
fn a_panicking_parser_is_a_finding_naming_seed_and_case() {
    let t = json_target(|b| {
        if b.len() % 3 == 0 {
            panic!("boom at {}", b.len());
        }
        Ok(())
    });
    let s = run(&t, 7, 0..40, &quick(), None);
    assert!(!s.findings.is_empty());
    let f = &s.findings[0];
    assert!(
        matches!(&f.problem, Problem::Panic(m) if m.starts_with("boom at")),
        "{f}"
    );
    let text = f.to_string();
    assert!(text.contains("seed 7"), "{text}");
    assert!(text.contains(&format!("--case {}", f.index)), "{text}");
    // The same case replays the same way.
    let again = run_case(&t, 7, f.index, &quick());
    assert_eq!(again.problem, Some(f.problem.clone()));
}

#[test]
fn a_hanging_parser_is_a_hang_and_the_run_stops() {
    let t = json_target(|_| {
        std::thread::sleep(Duration::from_secs(3));
        Ok(())
    });
    // The parser sleeps 3 s: past a 500 ms deadline however loaded the
    // machine is.
    let limits = Limits {
        deadline: Duration::from_millis(500),
        ..quick()
    };
    let s = run(&t, 1, 0..10, &limits, None);
    assert_eq!(s.cases, 1, "a run stops at its first hang");
    assert!(matches!(s.findings[0].problem, Problem::Hang(_)));
}

#[test]
fn a_parser_allocating_past_the_bound_is_a_memory_finding() {
    assert!(counting(), "this binary installs CountingAlloc");
    let t = json_target(|b| {
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        Ok::<_, String>(std::hint::black_box(v.len() + b.len())).map(|_| ())
    });
    let r = run_case(&t, 3, 0, &quick());
    match r.problem {
        Some(Problem::Memory(peak)) => assert!(peak >= 64 << 20, "{peak}"),
        other => panic!("expected a memory finding, got {other:?}"),
    }
    // A small parser is measured, and passes.
    let t = json_target(|b| {
        let _: Result<serde_json::Value, _> = serde_json::from_slice(b);
        Ok(())
    });
    let r = run_case(&t, 3, 0, &quick());
    assert!(r.problem.is_none(), "{:?}", r.problem);
    assert!(r.peak.is_some_and(|p| p < 16 << 20), "{:?}", r.peak);
}

#[test]
fn past_the_hard_cap_an_allocation_is_refused() {
    // try_reserve sees the refusal as an error (a plain allocation would
    // abort the process, after naming the case on stderr).
    let t = json_target(|_| {
        let mut v: Vec<u8> = Vec::new();
        match v.try_reserve(1 << 30) {
            Ok(()) => Err("a GiB was granted past a 512 MiB cap".into()),
            Err(_) => Ok(()),
        }
    });
    let r = run_case(&t, 5, 0, &quick());
    assert!(r.accepted, "{:?}", r.problem);
    // Outside a case nothing is capped.
    exclusive(|| {
        let mut v: Vec<u8> = Vec::new();
        assert!(v.try_reserve(600 << 20).is_ok());
    });
}

#[test]
fn a_refusal_must_say_why() {
    let t = json_target(|_| Err("  ".into()));
    let r = run_case(&t, 1, 0, &quick());
    assert_eq!(r.problem, Some(Problem::EmptyReason));
    let t = json_target(|_| Err("count: -1 is negative".into()));
    assert_eq!(run_case(&t, 1, 0, &quick()).problem, None);
}

#[test]
fn cases_are_deterministic_and_differ() {
    exclusive(deterministic)
}

fn deterministic() {
    let corpus = vec![JSON.as_bytes().to_vec()];
    for dialect in [
        Dialect::Json,
        Dialect::Toml,
        Dialect::Yaml,
        Dialect::Xml,
        Dialect::Text,
    ] {
        let a: Vec<Vec<u8>> = (0..50).map(|i| case(&corpus, dialect, 9, i)).collect();
        let b: Vec<Vec<u8>> = (0..50).map(|i| case(&corpus, dialect, 9, i)).collect();
        assert_eq!(a, b, "{dialect:?}");
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(distinct.len() > 40, "{dialect:?}: {}", distinct.len());
        let other: Vec<Vec<u8>> = (0..50).map(|i| case(&corpus, dialect, 10, i)).collect();
        assert_ne!(a, other, "another seed, other cases");
    }
}

#[test]
fn json_cases_carry_every_kind_of_hostility() {
    exclusive(every_kind)
}

fn every_kind() {
    let corpus = vec![JSON.as_bytes().to_vec()];
    type Check = (&'static str, fn(&str) -> bool);
    let checks: &[Check] = &[
        ("1e39", |c| c.contains("1e39")),
        ("2^63", |c| c.contains("9223372036854775808")),
        ("2^31-1", |c| c.contains("2147483647")),
        ("-1", |c| c.contains("-1")),
        ("NaN", |c| c.contains("NaN")),
        ("deep nesting", |c| c.contains(&"[".repeat(1000))),
        ("a long string", |c| c.contains(&"A".repeat(4097))),
        ("a control character", |c| c.contains('\u{1b}')),
        ("a truncated document", |c| {
            !c.is_empty() && serde_json::from_str::<serde_json::Value>(c).is_err()
        }),
        ("many copies of a GPU", |c| {
            c.matches("GPU-1").count() > 1000
        }),
    ];
    let mut seen = vec![false; checks.len()];
    let mut valid = 0;
    let total = 2000;
    for i in 0..total {
        let c = String::from_utf8_lossy(&case(&corpus, Dialect::Json, 16, i)).into_owned();
        for (k, (_, f)) in checks.iter().enumerate() {
            seen[k] |= f(&c);
        }
        valid += usize::from(serde_json::from_str::<serde_json::Value>(&c).is_ok());
    }
    for (k, (what, _)) in checks.iter().enumerate() {
        assert!(seen[k], "no case with {what}");
    }
    // Structure-aware cases stay JSON often enough to reach the checks
    // behind the parser.
    assert!(valid > total as usize / 5, "only {valid} valid JSON cases");
}

#[test]
fn toml_and_yaml_mutations_keep_their_format_often() {
    exclusive(formats_kept)
}

fn formats_kept() {
    let toml_seed =
        b"[daemon]\nurl = \"http://x:1\"\ncount = 4\n[[racks]]\nname = \"a\"\ngpus = [1, 2]\n"
            .to_vec();
    let valid = (0..500)
        .filter(|&i| {
            let c = case(std::slice::from_ref(&toml_seed), Dialect::Toml, 2, i);
            std::str::from_utf8(&c).is_ok_and(|t| t.parse::<toml::Table>().is_ok())
        })
        .count();
    assert!(valid > 100, "only {valid} valid TOML cases");
    let yaml_seed = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: b\n".to_vec();
    let valid = (0..500)
        .filter(|&i| {
            let c = case(std::slice::from_ref(&yaml_seed), Dialect::Yaml, 2, i);
            // (libyaml is quadratic in flow nesting: the deep cases are
            // left to the parsers' own tests.)
            c.len() < 65536
                && std::str::from_utf8(&c).is_ok_and(|t| {
                    t.split("\n---")
                        .all(|d| serde_yaml_ng::from_str::<serde_json::Value>(d).is_ok())
                })
        })
        .count();
    assert!(valid > 100, "only {valid} valid YAML cases");
}

#[test]
fn targets_share_nothing_between_cases_but_what_they_hold() {
    // A target holding state (a store) is called once per case.
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = calls.clone();
    let t = json_target(move |_| {
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    });
    let s = run(&t, 1, 0..25, &quick(), None);
    assert_eq!(s.cases, 25);
    assert_eq!(s.accepted, 25);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 25);
}
