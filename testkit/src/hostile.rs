//! Hostile input, generated and mutated: a seeded, deterministic mutation
//! engine over a seed corpus (the recorded fixtures), and a guarded harness
//! that runs one parser on each case and says what went wrong.
//!
//! - [`case`]: case `index` of `seed` for a corpus in a [`Dialect`]: byte
//!   flips, truncation, spans deleted, duplicated or spliced in from
//!   another corpus entry, huge and odd numbers (`1e39`, `-1`, `2^31-1`,
//!   `2^63`, `NaN`, `1e400`), deep nesting, long strings, Unicode and
//!   control characters, and (JSON, YAML, TOML: parsed, changed at a node,
//!   written back) type swaps, elements repeated thousands of times, keys
//!   dropped or added. The same `(seed, index)` always gives the same
//!   bytes, so a finding replays from those two numbers alone.
//! - [`run`] / [`run_case`]: each case on its own named thread
//!   (`hostile:PARSER:SEED:CASE`, so even a stack overflow, which aborts,
//!   names its case) with the stack a tokio worker has (2 MiB), inside
//!   `catch_unwind` (a panic is a [`Problem::Panic`]), with a deadline (a
//!   [`Problem::Hang`]) and, where the binary installs [`CountingAlloc`],
//!   its peak heap measured (over the bound: [`Problem::Memory`]) and a hard
//!   cap past which allocations are refused (the process then aborts with
//!   a line naming the case instead of taking the machine's memory).
//!
//! Why not `proptest` or `arbitrary`: both generate values of Rust types;
//! what Accord's parsers take is text in five formats, best reached by
//! mutating real recordings, where a few hundred lines of seeded mutation
//! do more than a type-driven generator (and add no crate). `proptest`'s
//! shrinking would help, but a case here replays from `(seed, index)`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

/// No case is larger than this (a mutation that would grow past it is cut).
pub const MAX_INPUT: usize = 4 << 20;

/// The text format of a parser's input: which mutations make sense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Json,
    Toml,
    Yaml,
    Xml,
    /// Plain text (a CEL selector): byte- and token-level only.
    Text,
}

/// The call under test: the input's bytes → accepted, or refused saying why.
pub type Parser = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// A parser under test: its name, its input format, its seed corpus and
/// the call. `parse` returns `Err(reason)` for input it refuses; the
/// harness only asks that it return (no panic, no hang, bounded memory)
/// and that a refusal say something.
#[derive(Clone)]
pub struct Target {
    pub name: &'static str,
    pub dialect: Dialect,
    pub corpus: Vec<Vec<u8>>,
    pub parse: Parser,
    /// Heap a case may take per byte of its input, over the fixed bound:
    /// 0 for most; a parser known to cost a fixed multiple of its input
    /// (the toml crate tokenizes all of it first) says so here, and is
    /// held to that.
    pub per_input_byte: usize,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("dialect", &self.dialect)
            .field("corpus", &self.corpus.len())
            .finish()
    }
}

impl Target {
    pub fn new(
        name: &'static str,
        dialect: Dialect,
        corpus: Vec<Vec<u8>>,
        parse: impl Fn(&[u8]) -> Result<(), String> + Send + Sync + 'static,
    ) -> Target {
        assert!(!corpus.is_empty(), "{name}: empty seed corpus");
        Target {
            name,
            dialect,
            corpus,
            parse: Arc::new(parse),
            per_input_byte: 0,
        }
    }

    /// The target, allowed `bytes` of heap per byte of input beyond the
    /// fixed bound.
    pub fn per_input_byte(mut self, bytes: usize) -> Target {
        self.per_input_byte = bytes;
        self
    }
}

// ---------------------------------------------------------------- rng

/// SplitMix64: small, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The generator for case `index` of `seed`: independent of every other
/// case, so one replays alone.
fn case_rng(seed: u64, index: u64) -> Rng {
    let mut r = Rng::new(seed ^ 0xA5A5_5A5A_C3C3_3C3C);
    let base = r.next_u64();
    let mut r = Rng::new(base ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
    r.next_u64();
    r
}

// ------------------------------------------------------- what is hostile

/// Numbers that break careless code: overflow at every width, floats that
/// are not finite once parsed, negative where only positive makes sense.
pub const NUMBERS: &[&str] = &[
    "-1",
    "0",
    "-0",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "1e39",
    "-1e39",
    "1e308",
    "1e400",
    "-1e400",
    "5e-324",
    "1e-400",
    "0.1",
    "1.5",
    "1000000",
];

/// Number-like strings (quantities, versions, ids parsed from text).
pub const NUMBER_STRINGS: &[&str] = &[
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "-1",
    "1e39",
    "9223372036854775808",
    "18446744073709551616Ki",
    "-200",
    "1e400m",
    "0x7fffffff",
    "999999999999999999999999999999Gi",
    "1.5.6",
    "",
];

/// Strings: control characters, bidi overrides, invalid escapes of the
/// target format, path tricks, terminal escapes, very long ones.
fn hostile_string(rng: &mut Rng) -> String {
    const SHORT: &[&str] = &[
        "",
        " ",
        "\u{0}",
        "\u{7}\u{8}\u{1b}[31mred\u{1b}[0m",
        "line\nforged: log",
        "%0Aforged",
        "../../../../etc/passwd",
        "..",
        "/",
        "\u{202e}evil\u{202c}",
        "\u{feff}",
        "\u{fffd}\u{fffe}",
        "é\u{301}",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢🙂",
        "\\",
        "\"",
        "'",
        "${HOME}",
        "<![CDATA[x]]>",
        "&amp;&lt;&#0;&#x110000;",
        "N/A",
        "Not Supported",
        "0000:00:00.0",
        "ffff:ff:1f.7",
        "GPU-00000000-0000-0000-0000-000000000000",
    ];
    match rng.below(4) {
        0 => {
            let n = *rng.pick(&[256usize, 4097, 70_000, 1 << 20]);
            let unit = *rng.pick(&["A", "é", "🙂", "\u{0}", " "]);
            unit.repeat(n / unit.len().max(1))
        }
        1 => rng.pick(NUMBER_STRINGS).to_string(),
        _ => rng.pick(SHORT).to_string(),
    }
}

/// Nesting depths: just past common limits, and far past any stack.
const DEPTHS: &[usize] = &[33, 64, 129, 513, 1_000, 20_000, 100_000];

fn deep(dialect: Dialect, depth: usize, closed: bool) -> String {
    let (open, close) = match dialect {
        Dialect::Json | Dialect::Yaml | Dialect::Toml => ("[", "]"),
        Dialect::Xml => ("<a>", "</a>"),
        Dialect::Text => ("(", ")"),
    };
    let mut s = open.repeat(depth);
    if closed {
        s.push_str(&close.repeat(depth));
    }
    s
}

/// Tokens spliced into text: the format's own punctuation and keywords.
fn tokens(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Json => &[
            "{", "}", "[", "]", ":", ",", "\"", "null", "true", "\\u0000", "\\ud800", "\\",
            "{\"a\":", "NaN", "Infinity", "1e39", "-1",
        ],
        Dialect::Toml => &[
            "[",
            "]",
            "[[",
            "]]",
            "=",
            "\"",
            "'''",
            "\"\"\"",
            "\n[x]\n",
            "\n[[x]]\n",
            "nan",
            "inf",
            "1e39",
            "-1",
            "1979-05-27T07:32:00Z",
            "{",
            "}",
            "\na.b.c = 1\n",
            "#",
        ],
        Dialect::Yaml => &[
            "\n---\n",
            "- ",
            ": ",
            "&a ",
            "*a",
            "!!binary ",
            "!!str ",
            "? ",
            "|",
            ">",
            "{",
            "}",
            "[",
            "]",
            "\t",
            "'",
            "\"",
            ".nan",
            ".inf",
            "~",
            "<<: *a",
            "\n  ",
            "#",
        ],
        Dialect::Xml => &[
            "<",
            ">",
            "</",
            "/>",
            "<!--",
            "-->",
            "<![CDATA[",
            "]]>",
            "&amp;",
            "&#0;",
            "&bogus;",
            "<!DOCTYPE x [<!ENTITY e \"e\">]>",
            "<?xml version=\"1.0\"?>",
            "=\"",
            "\"",
            "<object type=\"PCIDev\">",
            "</object>",
        ],
        Dialect::Text => &[
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            "'",
            "\"",
            "\\",
            ".",
            "&&",
            "||",
            "!",
            "?",
            ":",
            "device.attributes",
            "device.capacity",
            "[\"",
            "\"]",
            ".all(x, ",
            ".exists(x, ",
            ".map(x, ",
            "matches(",
            "quantity(",
            "size(",
            "1e39",
            "-1",
            "9223372036854775808",
        ],
    }
}

// ------------------------------------------------------------ the engine

/// Case `index` of `seed` over `corpus`: one to four mutations stacked on
/// a corpus entry, or (sometimes) a document made from nothing.
pub fn case(corpus: &[Vec<u8>], dialect: Dialect, seed: u64, index: u64) -> Vec<u8> {
    let mut rng = case_rng(seed, index);
    if dialect == Dialect::Json && rng.chance(4) {
        return generate_json(&mut rng);
    }
    let mut data = rng.pick(corpus).clone();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        data = mutate(&mut rng, data, corpus, dialect);
        if data.len() > MAX_INPUT {
            data.truncate(MAX_INPUT);
        }
    }
    data
}

fn mutate(rng: &mut Rng, data: Vec<u8>, corpus: &[Vec<u8>], dialect: Dialect) -> Vec<u8> {
    let structured = matches!(dialect, Dialect::Json | Dialect::Toml | Dialect::Yaml);
    if structured && rng.chance(45) {
        if let Some(out) = structural(rng, &data, dialect) {
            return out;
        }
    }
    match rng.below(11) {
        0 => flip_bit(rng, data),
        1 => set_byte(rng, data),
        2 => delete_span(rng, data),
        3 => truncate(rng, data),
        4 => duplicate_span(rng, data),
        5 => splice(rng, data, corpus),
        6 => insert_at(rng, data, rng_token(dialect)),
        7 => replace_number(rng, data),
        8 => replace_string(rng, data, dialect),
        9 => {
            let depth = *rng.pick(DEPTHS);
            let closed = rng.chance(60);
            insert_at(rng, data, move |_| deep(dialect, depth, closed))
        }
        _ => {
            let s = hostile_string(rng);
            insert_at(rng, data, move |_| s.clone())
        }
    }
}

fn rng_token(dialect: Dialect) -> impl FnOnce(&mut Rng) -> String {
    move |rng| rng.pick(tokens(dialect)).to_string()
}

fn span(rng: &mut Rng, len: usize) -> (usize, usize) {
    if len == 0 {
        return (0, 0);
    }
    let start = rng.below(len);
    let max = (len - start).min(*rng.pick(&[1usize, 8, 64, 4096, usize::MAX]));
    (start, start + 1 + rng.below(max))
}

fn flip_bit(rng: &mut Rng, mut data: Vec<u8>) -> Vec<u8> {
    if !data.is_empty() {
        let i = rng.below(data.len());
        data[i] ^= 1 << rng.below(8);
    }
    data
}

fn set_byte(rng: &mut Rng, mut data: Vec<u8>) -> Vec<u8> {
    const BYTES: &[u8] = &[
        0, 0xff, 0x7f, 0x80, 0xc0, 0xed, b'"', b'\'', b'<', b'>', b'[', b']', b'{', b'}', b'=',
        b'\n', b'\r', b'\t', b'\\', b'&', b'#', b':', b'-', b'9', b'.', b' ',
    ];
    if !data.is_empty() {
        let i = rng.below(data.len());
        data[i] = *rng.pick(BYTES);
    }
    data
}

fn delete_span(rng: &mut Rng, mut data: Vec<u8>) -> Vec<u8> {
    let (a, b) = span(rng, data.len());
    data.drain(a..b);
    data
}

fn truncate(rng: &mut Rng, mut data: Vec<u8>) -> Vec<u8> {
    let at = rng.below(data.len() + 1);
    data.truncate(at);
    data
}

fn duplicate_span(rng: &mut Rng, data: Vec<u8>) -> Vec<u8> {
    let (a, b) = span(rng, data.len());
    if a == b {
        return data;
    }
    let piece = data[a..b].to_vec();
    let times = *rng.pick(&[1usize, 2, 16, 1000, 100_000]);
    let times = times.min(MAX_INPUT / piece.len().max(1)).max(1);
    let at = if rng.chance(50) {
        b
    } else {
        rng.below(data.len() + 1)
    };
    let mut out = Vec::with_capacity(data.len() + piece.len() * times);
    out.extend_from_slice(&data[..at]);
    for _ in 0..times {
        out.extend_from_slice(&piece);
    }
    out.extend_from_slice(&data[at..]);
    out
}

fn splice(rng: &mut Rng, data: Vec<u8>, corpus: &[Vec<u8>]) -> Vec<u8> {
    let other = rng.pick(corpus);
    let (a, b) = span(rng, other.len());
    let piece = other[a..b].to_vec();
    let (c, d) = span(rng, data.len());
    let mut out = data[..c].to_vec();
    out.extend_from_slice(&piece);
    if rng.chance(50) {
        out.extend_from_slice(&data[d..]);
    } else {
        out.extend_from_slice(&data[c..]);
    }
    out
}

fn insert_at(rng: &mut Rng, data: Vec<u8>, what: impl FnOnce(&mut Rng) -> String) -> Vec<u8> {
    let at = rng.below(data.len() + 1);
    let piece = what(rng);
    let mut out = data[..at].to_vec();
    out.extend_from_slice(piece.as_bytes());
    out.extend_from_slice(&data[at..]);
    out
}

/// A run of ASCII digits (with sign, point, exponent) replaced by a
/// hostile number.
fn replace_number(rng: &mut Rng, data: Vec<u8>) -> Vec<u8> {
    let starts: Vec<usize> = (0..data.len())
        .filter(|&i| data[i].is_ascii_digit() && (i == 0 || !data[i - 1].is_ascii_alphanumeric()))
        .collect();
    if starts.is_empty() {
        return insert_at(rng, data, |r| r.pick(NUMBERS).to_string());
    }
    let a = *rng.pick(&starts);
    let mut b = a;
    while b < data.len() && (data[b].is_ascii_digit() || matches!(data[b], b'.' | b'e' | b'E')) {
        b += 1;
    }
    let mut out = data[..a].to_vec();
    out.extend_from_slice(rng.pick(NUMBERS).as_bytes());
    out.extend_from_slice(&data[b..]);
    out
}

/// The content of a quoted string (or of an XML text node) replaced by a
/// hostile string, escaped enough to stay inside its quotes most times.
fn replace_string(rng: &mut Rng, data: Vec<u8>, dialect: Dialect) -> Vec<u8> {
    let (open, close) = if dialect == Dialect::Xml && rng.chance(50) {
        (b'>', b'<')
    } else {
        (b'"', b'"')
    };
    let opens: Vec<usize> = (0..data.len()).filter(|&i| data[i] == open).collect();
    if opens.is_empty() {
        let s = hostile_string(rng);
        return insert_at(rng, data, move |_| s);
    }
    let a = *rng.pick(&opens) + 1;
    let b = data[a..]
        .iter()
        .position(|&c| c == close || c == b'\n')
        .map_or(data.len(), |p| a + p);
    let raw = hostile_string(rng);
    let s = match dialect {
        Dialect::Json | Dialect::Toml if rng.chance(70) => {
            let quoted = serde_json::to_string(&raw).unwrap_or_default();
            quoted[1..quoted.len().saturating_sub(1).max(1)].to_owned()
        }
        Dialect::Xml if rng.chance(70) => raw
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('"', "&quot;"),
        _ => raw,
    };
    let mut out = data[..a].to_vec();
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(&data[b..]);
    out
}

// --------------------------------------------------- structure-aware

/// A string the writer replaces, once the document is text again, with a
/// token no value can hold (`1e400`, `NaN`, nesting 100,000 deep).
const RAW: &str = "__hostile_raw__";

fn raw_token(rng: &mut Rng, dialect: Dialect) -> String {
    match rng.below(4) {
        0 => deep(dialect, *rng.pick(DEPTHS), true),
        1 => match dialect {
            Dialect::Yaml => rng.pick(&[".nan", ".inf", "-.inf", "1e400"]).to_string(),
            Dialect::Toml => rng.pick(&["nan", "inf", "-inf", "1e400"]).to_string(),
            _ => rng.pick(&["NaN", "Infinity", "-1e400"]).to_string(),
        },
        _ => rng.pick(NUMBERS).to_string(),
    }
}

fn structural(rng: &mut Rng, data: &[u8], dialect: Dialect) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(data).ok()?;
    match dialect {
        Dialect::Json => {
            let mut v: Value = serde_json::from_str(text).ok()?;
            mutate_value(rng, &mut v);
            let out = serde_json::to_string(&v).ok()?;
            Some(fill_raw(rng, out, dialect))
        }
        Dialect::Toml => {
            let table: toml::Table = toml::from_str(text).ok()?;
            let mut v = serde_json::to_value(&table).ok()?;
            mutate_value(rng, &mut v);
            let out = toml::to_string(&v).ok()?;
            Some(fill_raw(rng, out, dialect))
        }
        Dialect::Yaml => {
            // One document of a multi-document stream, written back as
            // JSON (which is YAML), the others as they were.
            let docs: Vec<&str> = text.split("\n---").collect();
            let i = rng.below(docs.len());
            let mut v: Value = serde_yaml_ng::from_str(docs[i]).ok()?;
            mutate_value(rng, &mut v);
            let json = fill_raw(rng, serde_json::to_string(&v).ok()?, dialect);
            let mut out = Vec::new();
            for (j, d) in docs.iter().enumerate() {
                if j > 0 {
                    out.extend_from_slice(b"\n---");
                    if j == i {
                        out.push(b'\n');
                    }
                }
                if j == i {
                    out.extend_from_slice(&json);
                } else {
                    out.extend_from_slice(d.as_bytes());
                }
            }
            Some(out)
        }
        _ => None,
    }
}

fn fill_raw(rng: &mut Rng, text: String, dialect: Dialect) -> Vec<u8> {
    let quoted = format!("\"{RAW}\"");
    if !text.contains(&quoted) {
        return text.into_bytes();
    }
    let token = raw_token(rng, dialect);
    text.replace(&quoted, &token).into_bytes()
}

/// Counts the nodes of a value, then changes the `k`-th.
fn mutate_value(rng: &mut Rng, v: &mut Value) {
    let n = count_nodes(v);
    let target = rng.below(n);
    let mut seen = 0;
    visit(v, target, &mut seen, rng);
}

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        Value::Object(o) => o.values().map(count_nodes).sum(),
        _ => 0,
    }
}

fn visit(v: &mut Value, target: usize, seen: &mut usize, rng: &mut Rng) -> bool {
    if *seen == target {
        change(v, rng);
        return true;
    }
    *seen += 1;
    match v {
        Value::Array(a) => a.iter_mut().any(|c| visit(c, target, seen, rng)),
        Value::Object(o) => o.values_mut().any(|c| visit(c, target, seen, rng)),
        _ => false,
    }
}

fn change(v: &mut Value, rng: &mut Rng) {
    match rng.below(9) {
        // A hostile number, as a JSON number where it fits.
        0 => {
            let t = *rng.pick(NUMBERS);
            *v = serde_json::from_str(t).unwrap_or_else(|_| Value::String(RAW.into()));
        }
        1 => *v = Value::String(RAW.into()),
        2 => *v = Value::String(hostile_string(rng)),
        // Type swaps.
        3 => {
            *v = match std::mem::take(v) {
                Value::String(s) => s
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .unwrap_or(Value::Array(vec![Value::String(s)])),
                Value::Number(n) => Value::String(n.to_string()),
                Value::Bool(b) => Value::String(b.to_string()),
                Value::Null => Value::Object(Map::new()),
                Value::Array(a) => Value::Object(
                    a.into_iter()
                        .enumerate()
                        .map(|(i, x)| (i.to_string(), x))
                        .collect(),
                ),
                Value::Object(o) => Value::Array(o.into_iter().map(|(_, x)| x).collect()),
            }
        }
        4 => *v = Value::Null,
        5 => *v = Value::Bool(rng.chance(50)),
        // Many copies of an element (10,000 GPUs in one report).
        6 => match v {
            Value::Array(a) if !a.is_empty() => {
                let one = a[rng.below(a.len())].clone();
                let size = one.to_string().len().max(1);
                let times = (*rng.pick(&[2usize, 65, 1025, 10_000])).min(MAX_INPUT / size);
                a.extend(std::iter::repeat_n(one, times));
            }
            Value::Object(o) => {
                o.insert(
                    format!("x-hostile-{}", rng.below(1000)),
                    Value::String(hostile_string(rng)),
                );
            }
            _ => *v = Value::Array(vec![v.clone(); 1 + rng.below(64)]),
        },
        // A key dropped.
        7 => {
            if let Value::Object(o) = v {
                if !o.is_empty() {
                    let k = o.keys().nth(rng.below(o.len())).cloned();
                    if let Some(k) = k {
                        o.remove(&k);
                    }
                }
            } else if let Value::Array(a) = v {
                a.clear();
            }
        }
        _ => *v = Value::Object(Map::new()),
    }
}

/// A JSON document from nothing: random shape, bounded size.
fn generate_json(rng: &mut Rng) -> Vec<u8> {
    let mut budget = 2000usize;
    let v = gen_value(rng, 0, &mut budget);
    serde_json::to_vec(&v).unwrap_or_default()
}

fn gen_value(rng: &mut Rng, depth: usize, budget: &mut usize) -> Value {
    *budget = budget.saturating_sub(1);
    if depth > 6 || *budget == 0 {
        return Value::Null;
    }
    match rng.below(7) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => serde_json::from_str(rng.pick::<&str>(NUMBERS)).unwrap_or(Value::Null),
        3 => Value::String(hostile_string(rng)),
        4 => Value::Array(
            (0..rng.below(8))
                .map(|_| gen_value(rng, depth + 1, budget))
                .collect(),
        ),
        _ => {
            const KEYS: &[&str] = &[
                "hardware",
                "gpus",
                "nics",
                "numa_nodes",
                "schema_version",
                "apiVersion",
                "kind",
                "metadata",
                "spec",
                "name",
                "count",
                "Members",
                "@odata.id",
                "PowerState",
                "Attributes",
                "snapshot_version",
                "devices",
                "uuid",
            ];
            (0..rng.below(8))
                .map(|_| {
                    (
                        rng.pick(KEYS).to_string(),
                        gen_value(rng, depth + 1, budget),
                    )
                })
                .collect::<Map<_, _>>()
                .into()
        }
    }
}

// ------------------------------------------------------------ memory

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);
static CASE_SEED: AtomicU64 = AtomicU64::new(0);
static CASE_INDEX: AtomicU64 = AtomicU64::new(0);
static CASE_NAME: Mutex<&'static str> = Mutex::new("");
/// One measured case at a time per process (the counters are global).
static CASE_LOCK: Mutex<()> = Mutex::new(());

/// The system allocator, counting live bytes and their peak. A binary
/// that runs hostile cases installs it:
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
/// While a case runs, an allocation that would take the live heap past
/// the case's hard cap is refused (null: the process aborts) after a line
/// on stderr naming the case.
#[derive(Debug)]
pub struct CountingAlloc;

impl CountingAlloc {
    fn admit(n: usize) -> bool {
        let live = LIVE.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if live > CAP.load(Ordering::Relaxed) {
            LIVE.fetch_sub(n, Ordering::Relaxed);
            refused(n, live);
            return false;
        }
        PEAK.fetch_max(live, Ordering::Relaxed);
        true
    }
}

/// Says which case asked for too much, without allocating.
fn refused(n: usize, live: usize) {
    let name = CASE_NAME.try_lock().map(|g| *g).unwrap_or("?");
    let mut buf = [0u8; 512];
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    let _ = writeln!(
        cur,
        "hostile: parser {name} seed {} case {}: an allocation of {n} bytes (live {live}) over the hard cap refused",
        CASE_SEED.load(Ordering::Relaxed),
        CASE_INDEX.load(Ordering::Relaxed)
    );
    let end = cur.position() as usize;
    let _ = std::io::stderr().write_all(&buf[..end]);
}

// The one unsafe item of the test kit: a GlobalAlloc must be an `unsafe
// impl`. It only counts, and hands every call to `System` unchanged.
#[allow(unsafe_code)]
// SAFETY: every method forwards to `System` with the caller's own layout
// and pointer, so `System`'s guarantees are ours; refusing (returning
// null) is allowed by the `GlobalAlloc` contract. The counters are atomics
// and the refusal message is written without allocating.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !Self::admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged (see the impl).
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !Self::admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged (see the impl).
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !Self::admit(new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if new_size > old {
                LIVE.fetch_sub(new_size - old, Ordering::Relaxed);
            }
        } else if new_size < old {
            LIVE.fetch_sub(old - new_size, Ordering::Relaxed);
        }
        p
    }
}

/// Whether this binary counts its allocations ([`CountingAlloc`] installed).
pub fn counting() -> bool {
    // Without it nothing ever moves the counter; with it, the program's
    // own start-up has already allocated.
    LIVE.load(Ordering::Relaxed) > 0
}

// ------------------------------------------------------------ harness

/// The bounds each case runs under.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Past this, the case is a hang.
    pub deadline: Duration,
    /// A case whose heap peaks above this (over what was live when it
    /// started) is a memory finding.
    pub max_bytes: usize,
    /// Past this the allocator refuses (the process aborts, naming the
    /// case): the machine's memory is not the test's to take.
    pub hard_cap: usize,
    /// The case thread's stack: a tokio worker's (2 MiB).
    pub stack: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            deadline: Duration::from_secs(10),
            max_bytes: 256 << 20,
            hard_cap: 2 << 30,
            stack: 2 << 20,
        }
    }
}

impl Limits {
    /// The limits for one input of `target`: the fixed memory bound plus
    /// what the target may take per byte of input.
    pub fn for_input(&self, target: &Target, input_len: usize) -> Limits {
        let mut l = self.clone();
        l.max_bytes = l
            .max_bytes
            .saturating_add(target.per_input_byte.saturating_mul(input_len));
        l
    }
}

/// What went wrong with one case.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    Panic(String),
    Hang(Duration),
    Memory(usize),
    /// Refused, but with nothing said about why.
    EmptyReason,
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub index: u64,
    pub input_len: usize,
    pub accepted: bool,
    /// Why it was refused (the first 300 characters), when it was.
    pub reason: Option<String>,
    pub problem: Option<Problem>,
    /// Peak heap over the case's start, where allocations are counted.
    pub peak: Option<usize>,
    pub elapsed: Duration,
}

/// A problem with what replays it.
#[derive(Debug, Clone)]
pub struct Finding {
    pub parser: &'static str,
    pub seed: u64,
    pub index: u64,
    pub input_len: usize,
    pub problem: Problem,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.problem {
            Problem::Panic(m) => format!("panic: {m}"),
            Problem::Hang(d) => format!("hang: no answer within {d:?}"),
            Problem::Memory(b) => format!("memory: peak {} MiB", b >> 20),
            Problem::EmptyReason => "refused with an empty reason".to_owned(),
        };
        write!(
            f,
            "{} seed {} case {} ({} bytes): {what} — replay: fuzz-figures --parser {} --seed {} --case {}",
            self.parser, self.seed, self.index, self.input_len, self.parser, self.seed, self.index
        )
    }
}

/// Runs `parse` on `input` under `limits` on a named thread.
pub fn run_input(
    name: &'static str,
    seed: u64,
    index: u64,
    input: Vec<u8>,
    parse: &Parser,
    limits: &Limits,
) -> CaseResult {
    exclusive(|| run_locked(name, seed, index, input, parse, limits))
}

/// Runs `f` while no case is measured (and no other `exclusive` runs):
/// the counters are the process's, so whatever allocates much beside a
/// case (generating cases, a test of its own) takes this.
pub fn exclusive<T>(f: impl FnOnce() -> T) -> T {
    let _one = CASE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    f()
}

fn run_locked(
    name: &'static str,
    seed: u64,
    index: u64,
    input: Vec<u8>,
    parse: &Parser,
    limits: &Limits,
) -> CaseResult {
    let input_len = input.len();
    let counted = counting();
    *CASE_NAME.lock().unwrap_or_else(|e| e.into_inner()) = name;
    CASE_SEED.store(seed, Ordering::Relaxed);
    CASE_INDEX.store(index, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    let parse = parse.clone();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    if counted {
        CAP.store(base.saturating_add(limits.hard_cap), Ordering::Relaxed);
    }
    let started = Instant::now();
    let spawned = std::thread::Builder::new()
        .name(format!("hostile:{name}:{seed}:{index}"))
        .stack_size(limits.stack)
        .spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| parse(&input)));
            drop(input);
            let _ = tx.send(r);
        });
    let answer = match spawned {
        Ok(_) => rx.recv_timeout(limits.deadline),
        Err(e) => Ok(Err(Box::new(format!("case thread not started: {e}")) as _)),
    };
    let elapsed = started.elapsed();
    CAP.store(usize::MAX, Ordering::Relaxed);
    let peak = counted.then(|| PEAK.load(Ordering::Relaxed).saturating_sub(base));
    let mut reason = None;
    let (accepted, mut problem) = match answer {
        Err(_) => (false, Some(Problem::Hang(limits.deadline))),
        Ok(Ok(Ok(()))) => (true, None),
        Ok(Ok(Err(why))) => {
            let empty = why.trim().is_empty();
            reason = Some(why.chars().take(300).collect());
            (false, empty.then_some(Problem::EmptyReason))
        }
        Ok(Err(payload)) => (false, Some(Problem::Panic(panic_message(&*payload)))),
    };
    if problem.is_none() && peak.is_some_and(|p| p > limits.max_bytes) {
        problem = Some(Problem::Memory(peak.unwrap_or(0)));
    }
    CaseResult {
        index,
        input_len,
        accepted,
        reason,
        problem,
        peak,
        elapsed,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_owned())
}

/// Case `index` of `seed` for `target`, run under `limits`.
pub fn run_case(target: &Target, seed: u64, index: u64, limits: &Limits) -> CaseResult {
    exclusive(|| {
        let input = case(&target.corpus, target.dialect, seed, index);
        let limits = limits.for_input(target, input.len());
        run_locked(target.name, seed, index, input, &target.parse, &limits)
    })
}

/// What a run of many cases found.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub parser: &'static str,
    pub cases: u64,
    pub accepted: u64,
    pub refused: u64,
    pub findings: Vec<Finding>,
    /// The largest peak and its case.
    pub peak: Option<(usize, u64)>,
    /// The slowest case and its time.
    pub slowest: (Duration, u64),
    pub elapsed: Duration,
}

impl Summary {
    pub fn cases_per_second(&self) -> f64 {
        self.cases as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Cases `range` of `seed` for `target`. Stops early after a hang (its
/// thread cannot be stopped) or once `budget` has passed.
pub fn run(
    target: &Target,
    seed: u64,
    range: std::ops::Range<u64>,
    limits: &Limits,
    budget: Option<Duration>,
) -> Summary {
    run_observed(target, seed, range, limits, budget, &mut |_| {})
}

/// [`run`], telling `before` each case's index before it runs (a crash
/// the harness cannot catch, a C `abort()`, is then known by its case).
pub fn run_observed(
    target: &Target,
    seed: u64,
    range: std::ops::Range<u64>,
    limits: &Limits,
    budget: Option<Duration>,
    before: &mut dyn FnMut(u64),
) -> Summary {
    let started = Instant::now();
    let mut s = Summary {
        parser: target.name,
        ..Summary::default()
    };
    for index in range {
        if budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        before(index);
        let r = run_case(target, seed, index, limits);
        s.cases += 1;
        if r.accepted {
            s.accepted += 1;
        } else {
            s.refused += 1;
        }
        if let Some(p) = r.peak {
            if s.peak.is_none_or(|(q, _)| p > q) {
                s.peak = Some((p, index));
            }
        }
        if r.elapsed > s.slowest.0 {
            s.slowest = (r.elapsed, index);
        }
        let hang = matches!(r.problem, Some(Problem::Hang(_)));
        if let Some(problem) = r.problem {
            s.findings.push(Finding {
                parser: target.name,
                seed,
                index,
                input_len: r.input_len,
                problem,
            });
        }
        if hang {
            break;
        }
    }
    s.elapsed = started.elapsed();
    s
}

/// The seed for test runs: `ACCORD_HOSTILE_SEED`, else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("ACCORD_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Case counts for test runs, scaled by `ACCORD_HOSTILE_SCALE` (default 1).
pub fn scaled(count: u64) -> u64 {
    let scale: f64 = std::env::var("ACCORD_HOSTILE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((count as f64) * scale).max(1.0) as u64
}

/// For a test: runs `count` cases and fails naming every finding.
pub fn assert_survives(target: &Target, default_seed: u64, count: u64, limits: &Limits) {
    let seed = seed_from_env(default_seed);
    let s = run(target, seed, 0..scaled(count), limits, None);
    assert!(
        s.findings.is_empty(),
        "{} of {} cases of {} failed:\n{}",
        s.findings.len(),
        s.cases,
        target.name,
        s.findings
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every corpus entry, unmutated, is accepted: the harness calls the
/// parser the way the program does (a seed that fails says the target is
/// wired wrong, and every mutation of it would test nothing).
pub fn assert_corpus_accepted(target: &Target) {
    for (i, input) in target.corpus.iter().enumerate() {
        let r = exclusive(|| catch_unwind(AssertUnwindSafe(|| (target.parse)(input))));
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{}: corpus entry {i} refused: {e}", target.name),
            Err(p) => panic!(
                "{}: corpus entry {i} panicked: {}",
                target.name,
                panic_message(&*p)
            ),
        }
    }
}
