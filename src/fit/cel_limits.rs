//! What a CEL selector may ask of the `cel` crate, checked once per
//! expression before it runs on any device. A DeviceClass or a claim is
//! cluster input: a hostile or broken selector must cost Accord a refusal
//! ("invalid CEL selector"), never a crash, an abort or a planner that does
//! not come back.
//!
//! The `cel` crate (0.15) has no evaluation budget: a program, once run,
//! cannot be stopped or interrupted, and nothing in the crate counts what
//! it does. So what a selector can make the interpreter do is bounded
//! before it runs, by the limits Kubernetes sets on a DRA selector
//! (`resource.k8s.io`: `CELSelectorExpressionMaxLength`, 10 KiB, and
//! `CELSelectorExpressionMaxCost`, 1,000,000 of cel-go's estimated cost,
//! `k8s.io/dynamic-resource-allocation/cel`), and by what the crate itself
//! survives:
//!
//! * length: at most 10 KiB. This also keeps every error position below
//!   column 65,536, past which the crate's `ParseError` `Display` panics
//!   (a `{:>width$}` caret wider than `u16`); errors are rendered here from
//!   their parts anyway, never with that `Display`;
//! * nesting: brackets at most 32 deep in the text, the parsed expression
//!   at most 24 levels deep. The crate's evaluator recurses once per level
//!   (about 1.5 KiB of stack a level in a release build, 38 KiB in a debug
//!   one, measured), and a stack overflow aborts the process: 24 levels
//!   stay under 1 MiB of the 2 MiB a tokio worker or a test thread has.
//!   Real selectors are 5 to 12 levels deep (`&&` and `||` chains are
//!   balanced trees);
//! * cost: an upper bound on the work of one evaluation, from the parsed
//!   expression (see [`Estimator`]), at most 1,000,000 steps (a step is
//!   about one node evaluated, 20 to 30 ns in a release build: the limit
//!   is some tens of milliseconds per device).
//!
//! Parsing runs on a thread of its own with a large stack: the parser
//! (ANTLR-generated) overflows a 2 MiB stack at 12 nested brackets in a
//! debug build, and at an operator chain (`1+1+...`) of some 1,300
//! operators (debug) or 5,000 (release), which 10 KiB can hold. Only a
//! program that passed every check comes back, so no expression deeper
//! than 24 levels is ever run or dropped on the caller's stack.
//! Panics in parsing and in evaluation are caught (`catch_unwind`) as a
//! last line and reported as the selector's failure.

use cel::common::ast::{
    operators, CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue,
};
use cel::Program;

use super::cel_library as library;
use super::cel_parse::{clip, first_error, panic_message, parser_env};

/// Bytes in a selector (Kubernetes' `CELSelectorExpressionMaxLength`).
pub const MAX_SELECTOR_BYTES: usize = 10 * 1024;
/// Estimated steps of one evaluation (Kubernetes'
/// `CELSelectorExpressionMaxCost`).
pub const MAX_SELECTOR_COST: u64 = 1_000_000;
/// Brackets (`()`, `[]`, `{}`) nested in the text: the parser's stack.
const MAX_BRACKETS: usize = 32;
/// Levels of the parsed expression: the evaluator's stack (see above).
const MAX_DEPTH: usize = 24;
/// The parsing thread's stack: the deepest texts the checks let through
/// (32 brackets or the parser's own limit of 96 nested rules, and a 10 KiB
/// operator chain) parse within 8 MiB in a debug build. Reserved, not
/// committed: only what is touched is used.
const PARSE_STACK_BYTES: usize = 32 << 20;
/// Entries of the device's maps (domains, attributes of a domain):
/// Kubernetes allows 32 attributes and capacities per device, Accord's own
/// devices carry fewer.
const DEVICE_ENTRIES: u64 = 32;
/// Bytes of a device's strings (names, attribute values): accordd refuses
/// reports with longer ones (ResourceSlices allow 64).
const DEVICE_STRING_BYTES: u64 = 4096;
/// Characters of a string read, compared or searched in one step
/// (Kubernetes' `StringTraversalCostFactor`, 0.1).
const CHARS_PER_STEP: u64 = 10;
/// Parses `text` and checks it against the limits above. The error says
/// why, in words that follow "invalid CEL selector: ".
pub(crate) fn compile(text: &str) -> Result<Program, String> {
    compile_costed(text).map(|(program, _)| program)
}

/// [`compile`], with the estimated steps of one evaluation (what
/// `CelEngine` charges against its budgets).
pub(crate) fn compile_costed(text: &str) -> Result<(Program, u64), String> {
    if text.len() > MAX_SELECTOR_BYTES {
        return Err(format!(
            "{} bytes long; a selector may have at most {MAX_SELECTOR_BYTES} (Kubernetes' limit)",
            text.len()
        ));
    }
    let nesting = bracket_nesting(text);
    if nesting > MAX_BRACKETS {
        return Err(format!(
            "brackets nested {nesting} deep; at most {MAX_BRACKETS} are allowed"
        ));
    }
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("cel-parse".into())
            .stack_size(PARSE_STACK_BYTES)
            .spawn_scoped(scope, || {
                std::panic::catch_unwind(|| parse_and_bound(text)).unwrap_or_else(|panic| {
                    Err(format!(
                        "the CEL parser failed on it ({})",
                        panic_message(&*panic)
                    ))
                })
            });
        match parser {
            Ok(parser) => parser
                .join()
                .unwrap_or_else(|_| Err("the CEL parser failed on it".to_owned())),
            Err(e) => Err(format!(
                "cannot be parsed now (no thread to parse it on: {e})"
            )),
        }
    })
}

/// Runs on the parsing thread: what fails is dropped there too.
fn parse_and_bound(text: &str) -> Result<(Program, u64), String> {
    let program = parser_env()
        .compile(text)
        .map_err(|e| format!("does not compile: {}", first_error(&e)))?;
    let cost = Estimator::default().estimate(program.expression())?;
    if cost > MAX_SELECTOR_COST {
        return Err(format!(
            "too costly: one evaluation may take up to {cost} steps, more than the limit of \
             {MAX_SELECTOR_COST} (Kubernetes' cost limit for a selector)"
        ));
    }
    Ok((program, cost))
}

/// The deepest nesting of `()`, `[]` and `{}` outside string literals and
/// comments. A lexical guess, not a parse: it only keeps the parser's
/// recursion in bounds, and what it lets through is parsed and checked.
fn bracket_nesting(text: &str) -> usize {
    let b = text.as_bytes();
    let (mut i, mut depth, mut deepest) = (0, 0usize, 0);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            quote @ (b'\'' | b'"') => {
                let raw = i > 0 && matches!(b[i - 1], b'r' | b'R');
                let triple = b.get(i + 1) == Some(&quote) && b.get(i + 2) == Some(&quote);
                let closes = |j: usize| {
                    b[j] == quote
                        && (!triple
                            || (b.get(j + 1) == Some(&quote) && b.get(j + 2) == Some(&quote)))
                };
                i += if triple { 3 } else { 1 };
                while i < b.len() && !closes(i) {
                    i += if b[i] == b'\\' && !raw { 2 } else { 1 };
                }
                i += if triple { 3 } else { 1 };
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// At most what a sub-expression can evaluate to: a string or bytes of
/// `chars`, or a list (`list`) or a map (`key`, the keys' shape) of `items`
/// entries, each (a map's values) like `elem`; a number, a boolean, null:
/// all zero. Iterating a map yields its keys, a list its elements.
#[derive(Debug, Clone, Default)]
struct Shape {
    chars: u64,
    items: u64,
    list: bool,
    key: Option<Box<Shape>>,
    elem: Option<Box<Shape>>,
}

impl Shape {
    fn text(chars: u64) -> Shape {
        Shape {
            chars,
            ..Shape::default()
        }
    }

    fn list(items: u64, elem: Shape) -> Shape {
        Shape {
            items,
            list: true,
            elem: Some(Box::new(elem)),
            ..Shape::default()
        }
    }

    fn map(items: u64, key: Shape, value: Shape) -> Shape {
        Shape {
            items,
            key: Some(Box::new(key)),
            elem: Some(Box::new(value)),
            ..Shape::default()
        }
    }

    /// An element of this list, or a value of this map.
    fn elem(&self) -> Shape {
        self.elem.as_deref().cloned().unwrap_or_default()
    }

    /// What iterating this collection yields: a list's elements, a map's
    /// keys (either, when it may be both).
    fn iterated(&self) -> Shape {
        match (&self.key, self.list) {
            (Some(key), false) => Shape::clone(key),
            (Some(key), true) => key.join(&self.elem()),
            (None, _) => self.elem(),
        }
    }

    /// Bytes and entries all the way down: what reading, comparing or
    /// copying the value costs at most.
    fn size(&self) -> u64 {
        let key = self.key.as_deref().map_or(0, Shape::size);
        let elem = self.elem.as_deref().map_or(0, Shape::size);
        1u64.saturating_add(self.chars / CHARS_PER_STEP)
            .saturating_add(self.items.saturating_mul(key.saturating_add(elem)))
    }

    /// Either of the two.
    fn join(&self, other: &Shape) -> Shape {
        let either = |a: &Option<Box<Shape>>, b: &Option<Box<Shape>>| match (a, b) {
            (Some(a), Some(b)) => Some(Box::new(a.join(b))),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        Shape {
            chars: self.chars.max(other.chars),
            items: self.items.max(other.items),
            list: self.list || other.list,
            key: either(&self.key, &other.key),
            elem: either(&self.elem, &other.elem),
        }
    }

    /// `a + b`: strings and lists concatenate.
    fn concat(&self, other: &Shape) -> Shape {
        Shape {
            chars: self.chars.saturating_add(other.chars),
            items: self.items.saturating_add(other.items),
            ..self.join(other)
        }
    }
}

/// The `device` variable: `driver`, `attributes` and `capacity`; the
/// latter two maps of domain to maps of name to value.
fn device_shape() -> Shape {
    let string = Shape::text(DEVICE_STRING_BYTES);
    let names = Shape::map(DEVICE_ENTRIES, string.clone(), string.clone());
    let domains = Shape::map(DEVICE_ENTRIES, string.clone(), names);
    Shape::map(3, Shape::text(16), string.join(&domains))
}

/// A sub-expression's result and the steps it takes at most.
#[derive(Debug)]
struct Est {
    shape: Shape,
    cost: u64,
}

impl Est {
    fn new(shape: Shape, cost: u64) -> Est {
        Est { shape, cost }
    }

    fn scalar(cost: u64) -> Est {
        Est::new(Shape::default(), cost)
    }
}

/// The worst-case cost of one evaluation, after cel-go's estimator (which
/// Kubernetes runs on every selector it stores), simplified: every node of
/// the expression costs one step; an operation on a string or collection
/// costs its size (see [`Shape::size`]); a comprehension (`all`, `exists`,
/// `exists_one`, `map`, `filter`) costs its body once per element of its
/// range. Sizes are bounded from the expression itself: a literal's is its
/// own, `+` adds, a comprehension's result grows by what one step adds once
/// per element of the range, the device's maps and strings are bounded by
/// [`DEVICE_ENTRIES`] and [`DEVICE_STRING_BYTES`]. So comprehensions nested
/// over lists the expression builds cost the product of their lengths, and
/// `x + x` in a chain of `map`s costs 2^n: both are refused before they
/// run. A `matches` compiles its pattern (within a bound): its cost is
/// what the pattern parses to, or the bound's for a built one
/// (`cel_regex`), and so do `find` and `findAll`. The Kubernetes
/// libraries' functions (`cel_library`) cost what they read: a list's
/// elements, both lists' pairs for the sets', a string parsed.
#[derive(Debug, Default)]
struct Estimator<'a> {
    /// Comprehension variables in scope, innermost last.
    scope: Vec<(&'a str, Shape)>,
    /// Literal patterns weighed so far (each compiled once, to check it
    /// within the bound), and what they weigh together: past the cost
    /// limit no more is compiled, so checking a selector stays cheap.
    patterns: std::collections::HashMap<&'a str, u64>,
    patterns_cost: u64,
}

impl<'a> Estimator<'a> {
    fn estimate(mut self, e: &'a IdedExpr) -> Result<u64, String> {
        Ok(self.walk(e, 1)?.cost)
    }

    fn walk(&mut self, e: &'a IdedExpr, depth: usize) -> Result<Est, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} levels deep"));
        }
        let next = depth + 1;
        Ok(match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => Est::new(Shape::text(count(s.len())), 1),
            Expr::Literal(LiteralValue::Bytes(b)) => Est::new(Shape::text(count(b.len())), 1),
            Expr::Literal(_) | Expr::Unspecified => Est::scalar(1),
            Expr::Ident(name) => {
                let shape = match self.scope.iter().rev().find(|(n, _)| *n == name.as_str()) {
                    Some((_, shape)) => shape.clone(),
                    None if name == "device" => device_shape(),
                    None => Shape::default(),
                };
                Est::new(shape, 1)
            }
            Expr::Select(s) => {
                let operand = self.walk(&s.operand, next)?;
                // `has(x.f)` is a boolean.
                let shape = if s.test {
                    Shape::default()
                } else {
                    operand.shape.elem()
                };
                Est::new(shape, operand.cost.saturating_add(1))
            }
            Expr::List(list) => {
                let (mut elem, mut cost) = (Shape::default(), 1u64);
                for x in &list.elements {
                    let x = self.walk(x, next)?;
                    elem = elem.join(&x.shape);
                    cost = cost.saturating_add(x.cost).saturating_add(1);
                }
                Est::new(Shape::list(count(list.elements.len()), elem), cost)
            }
            Expr::Map(map) => self.entries(&map.entries, next)?,
            Expr::Struct(s) => self.entries(&s.entries, next)?,
            Expr::Call(call) => self.call(call, next)?,
            Expr::Comprehension(c) => self.comprehension(c, next)?,
        })
    }

    fn entries(&mut self, entries: &'a [IdedEntryExpr], depth: usize) -> Result<Est, String> {
        let (mut key, mut value, mut cost) = (Shape::text(0), Shape::default(), 1u64);
        for entry in entries {
            let (k, v) = match &entry.expr {
                EntryExpr::MapEntry(m) => (Some(&m.key), &m.value),
                EntryExpr::StructField(f) => (None, &f.value),
            };
            if let Some(k) = k {
                let k = self.walk(k, depth)?;
                key = key.join(&k.shape);
                cost = cost.saturating_add(k.cost);
            }
            let v = self.walk(v, depth)?;
            value = value.join(&v.shape);
            cost = cost.saturating_add(v.cost).saturating_add(1);
        }
        Ok(Est::new(Shape::map(count(entries.len()), key, value), cost))
    }

    fn call(&mut self, call: &'a CallExpr, depth: usize) -> Result<Est, String> {
        // `.f(...)` names `f` from the root scope: the interpreter strips
        // the dot, so `.matches(...)` would reach the crate's unbounded
        // compiler past the rename. No selector needs the form.
        if call.func_name.starts_with('.') {
            return Err(format!(
                "`{}(...)`: a call with a leading dot is not supported",
                clip(&call.func_name, 64)
            ));
        }
        if call.func_name == "matches" {
            return Err(format!(
                "`matches` takes a string and a pattern (`s.matches(re)` or `matches(s, re)`), \
                 not {} arguments",
                call.args.len() + usize::from(call.target.is_some())
            ));
        }
        // The libraries' functions in their declared forms only (a
        // method or a global, so many arguments), as upstream's checker.
        if let Some(Err(e)) = library::form(&call.func_name, call.target.is_some(), call.args.len())
        {
            return Err(e);
        }
        let mut args = Vec::with_capacity(call.args.len() + 1);
        for arg in call.target.as_deref().into_iter().chain(&call.args) {
            args.push(self.walk(arg, depth)?);
        }
        let sum = args.iter().fold(1u64, |s, a| s.saturating_add(a.cost));
        let size = |i: usize| args.get(i).map_or(0, |a| a.shape.size());
        let sizes = args
            .iter()
            .fold(0u64, |s, a| s.saturating_add(a.shape.size()));
        Ok(match call.func_name.as_str() {
            // One branch runs.
            operators::CONDITIONAL if args.len() == 3 => Est::new(
                args[1].shape.join(&args[2].shape),
                args[0]
                    .cost
                    .saturating_add(args[1].cost.max(args[2].cost))
                    .saturating_add(1),
            ),
            operators::ADD => {
                let shape = args.iter().skip(1).fold(
                    args.first().map(|a| a.shape.clone()).unwrap_or_default(),
                    |s, a| s.concat(&a.shape),
                );
                let cost = sum.saturating_add(shape.size());
                Est::new(shape, cost)
            }
            // Lengths are compared first: the shorter side bounds the work.
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => Est::scalar(sum.saturating_add(size(0).min(size(1)))),
            // A list is searched element by element; a map is hashed.
            operators::IN => {
                let items = args.get(1).map_or(0, |a| a.shape.items);
                Est::scalar(sum.saturating_add(items.saturating_add(1).saturating_mul(size(0))))
            }
            operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => Est::new(
                args.first().map(|a| a.shape.elem()).unwrap_or_default(),
                sum.saturating_add(size(1)),
            ),
            operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::NOT_STRICTLY_FALSE
            | operators::NEGATE
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | "size"
            | "compareTo"
            | "isGreaterThan"
            | "isLessThan"
            | "asInteger" => Est::scalar(sum),
            // A prefix or suffix is compared, the text searched.
            "startsWith" | "endsWith" => Est::scalar(sum.saturating_add(size(1))),
            "contains" => Est::scalar(sum.saturating_add(sizes)),
            // The pattern is compiled (within a bound, `cel_regex`), then
            // the text searched in linear time. A literal pattern is weighed
            // by what it parses to, and refused here when it cannot compile
            // within the bound; one the selector builds costs the most a
            // compile can.
            super::cel_parse::BOUNDED_MATCHES => {
                let pattern = match call.args.last().map(|p| &p.expr) {
                    Some(Expr::Literal(LiteralValue::String(p))) => self.pattern(p)?,
                    _ => super::cel_regex::BUILT_PATTERN,
                };
                Est::scalar(sum.saturating_add(pattern).saturating_add(size(0)))
            }
            // Kubernetes' lists library: one pass over the list, each
            // element read and compared once; `min` and `max` give one.
            "isSorted" | "sum" => Est::scalar(sum.saturating_add(size(0))),
            "min" | "max" => Est::new(
                args.first().map(|a| a.shape.elem()).unwrap_or_default(),
                sum.saturating_add(size(0)),
            ),
            // Each element compared with the one sought, as `in`.
            "indexOf" | "lastIndexOf" | "includes" => {
                let items = args.first().map_or(0, |a| a.shape.items);
                let each = items.saturating_add(1).saturating_mul(size(1));
                Est::scalar(sum.saturating_add(size(0)).saturating_add(each))
            }
            // cel-go's sets: every element of one list sought in the other
            // (twice for `equivalent`), each comparison at most the smaller
            // element.
            library::SETS_CONTAINS | library::SETS_INTERSECTS | library::SETS_EQUIVALENT => {
                let (a, b) = (&args[0].shape, &args[1].shape);
                let pairs = (a.items.saturating_add(1)).saturating_mul(b.items.saturating_add(1));
                let each = a.elem().size().min(b.elem().size());
                let passes = 1 + u64::from(call.func_name == library::SETS_EQUIVALENT);
                let compared = pairs.saturating_mul(each).saturating_mul(passes);
                Est::scalar(sum.saturating_add(sizes).saturating_add(compared))
            }
            // The Kubernetes regex library: the pattern compiled as
            // `matches`' is, the text searched; `find` gives a part of the
            // text, `findAll` at most one part per character and one more
            // (empty matches), or `n` (a literal), copied out.
            "find" | "findAll" => {
                let pattern = match call.args.first().map(|p| &p.expr) {
                    Some(Expr::Literal(LiteralValue::String(p))) => self.pattern(p)?,
                    _ => super::cel_regex::BUILT_PATTERN,
                };
                let (text, cost) = (args[0].shape.chars, sum.saturating_add(pattern));
                let mut items = text.saturating_add(1);
                if let Some(Expr::Literal(LiteralValue::Int(n))) = call.args.get(1).map(|n| &n.expr)
                {
                    items = items.min(u64::try_from(*n.inner()).unwrap_or(u64::MAX));
                }
                match call.func_name.as_str() {
                    "find" => Est::new(Shape::text(text), cost.saturating_add(size(0))),
                    _ => Est::new(
                        Shape::list(items, Shape::text(text)),
                        cost.saturating_add(size(0).saturating_mul(2).saturating_add(items)),
                    ),
                }
            }
            // The IP and CIDR libraries: a string parsed (read once), an
            // address or prefix (a scalar) read or tested.
            "isIP" | "ip" | "isCIDR" | "cidr" => Est::scalar(sum.saturating_add(sizes)),
            "containsIP" | "containsCIDR" => Est::scalar(sum.saturating_add(sizes)),
            library::IP_IS_CANONICAL => Est::scalar(sum.saturating_add(sizes)),
            "family" | "isUnspecified" | "isLoopback" | "prefixLength" | "masked" => {
                Est::scalar(sum)
            }
            "isLinkLocalMulticast" | "isLinkLocalUnicast" | "isGlobalUnicast" => Est::scalar(sum),
            // The URL library: a string parsed (read once) into a URL no
            // larger than it; each getter copies part of it out, `getQuery`
            // a map of at most that many entries.
            "url" => Est::new(
                Shape::text(args.first().map_or(0, |a| a.shape.chars)),
                sum.saturating_add(sizes),
            ),
            "isURL" => Est::scalar(sum.saturating_add(sizes)),
            "getScheme" | "getHost" | "getHostname" | "getPort" => Est::new(
                Shape::text(args.first().map_or(0, |a| a.shape.chars)),
                sum.saturating_add(sizes),
            ),
            // Escaping may triple the path.
            "getEscapedPath" => Est::new(
                Shape::text(args.first().map_or(0, |a| a.shape.chars.saturating_mul(3))),
                sum.saturating_add(sizes.saturating_mul(3)),
            ),
            "getQuery" => {
                let chars = args.first().map_or(0, |a| a.shape.chars);
                let text = Shape::text(chars);
                let shape = Shape::map(chars, text.clone(), Shape::list(chars, text));
                let cost = sum.saturating_add(sizes.saturating_mul(2));
                Est::new(shape, cost)
            }
            // Conversions (`string`, `int`, `timestamp`, ...), `quantity`,
            // `lowerAscii` and what else the environment has: a value no
            // larger than the arguments (or a number's digits), at the
            // cost of reading them.
            _ => {
                let mut shape = args.iter().fold(Shape::default(), |s, a| s.join(&a.shape));
                shape.chars = shape.chars.saturating_add(32);
                Est::new(shape, sum.saturating_add(sizes))
            }
        })
    }

    /// What compiling the literal `pattern` costs (`cel_regex::cost`),
    /// each pattern compiled once; refused once the patterns weigh more
    /// than a selector may.
    fn pattern(&mut self, pattern: &'a str) -> Result<u64, String> {
        if let Some(cost) = self.patterns.get(pattern) {
            return Ok(*cost);
        }
        if self.patterns_cost > MAX_SELECTOR_COST {
            return Err(format!(
                "too costly: its regular expressions alone weigh more than the limit of \
                 {MAX_SELECTOR_COST} steps"
            ));
        }
        let cost = super::cel_regex::cost(pattern)
            .map_err(|e| format!("regular expression {:?}: {e}", clip(pattern, 64)))?;
        self.patterns.insert(pattern, cost);
        self.patterns_cost = self.patterns_cost.saturating_add(cost);
        Ok(cost)
    }

    fn comprehension(&mut self, c: &'a ComprehensionExpr, depth: usize) -> Result<Est, String> {
        let range = self.walk(&c.iter_range, depth)?;
        let init = self.walk(&c.accu_init, depth)?;
        let steps = range.shape.items;
        let element = range.shape.iterated();
        let outer = self.scope.len();
        self.scope.push((c.iter_var.as_str(), element.clone()));
        if let Some(second) = &c.iter_var2 {
            self.scope.push((second.as_str(), element));
        }
        self.scope.push((c.accu_var.as_str(), init.shape.clone()));
        let accu = self.scope.len() - 1;
        let cond = self.walk(&c.loop_cond, depth)?;
        let step = self.walk(&c.loop_step, depth)?;
        // What one step adds to the accumulator it adds at every step (the
        // macros append one element, or keep a boolean or a count).
        let grows =
            |to: u64, from: u64| from.saturating_add(steps.saturating_mul(to.saturating_sub(from)));
        let last = Shape {
            chars: grows(step.shape.chars, init.shape.chars),
            items: grows(step.shape.items, init.shape.items),
            ..init.shape.join(&step.shape)
        };
        // A `map` or `filter` step appends to its accumulator in place (the
        // cel crate's `AppendStep`, as cel-go does), and the other macros'
        // accumulators are a boolean or a count: a step costs what it
        // computes, not a copy of the accumulator.
        let per_step = cond.cost.saturating_add(step.cost).saturating_add(1);
        self.scope[accu].1 = last;
        let result = self.walk(&c.result, depth);
        self.scope.truncate(outer);
        let result = result?;
        let cost = range
            .cost
            .saturating_add(init.cost)
            .saturating_add(steps.saturating_mul(per_step))
            .saturating_add(result.cost)
            .saturating_add(1);
        Ok(Est::new(result.shape, cost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The estimate of `text`, parsed as selectors are (`matches` renamed).
    fn cost(text: &str) -> u64 {
        let program = parser_env().compile(text).unwrap();
        Estimator::default().estimate(program.expression()).unwrap()
    }

    #[test]
    fn ordinary_selectors_cost_little() {
        for text in [
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')",
            "'gpu.nvidia.com' in device.attributes && device.attributes.exists(d, d.startsWith('gpu'))",
            "device.attributes.all(d, device.attributes[d].all(n, size(n) < 64))",
        ] {
            let c = cost(text);
            assert!(c < MAX_SELECTOR_COST / 4, "{text}: {c}");
            assert!(compile(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn built_work_multiplies() {
        let ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]";
        let nested = |n: usize| {
            let mut s = "true".to_owned();
            for v in 0..n {
                s = format!("{ten}.all(v{v}, {s})");
            }
            s
        };
        assert!(cost(&nested(2)) < cost(&nested(3)));
        assert!(cost(&nested(3)) < MAX_SELECTOR_COST);
        assert!(cost(&nested(7)) > MAX_SELECTOR_COST);
        assert!(compile(&nested(7)).unwrap_err().starts_with("too costly"));
        // Doubling a string in a chain of maps: 2^18 times 64 characters.
        let doubling = format!(
            "['{}']{}.size() > 0",
            "a".repeat(64),
            ".map(x, x + x)".repeat(18)
        );
        assert!(cost(&doubling) > MAX_SELECTOR_COST);
        // A list of lists built by map: 100 × 100 × 100 elements.
        let hundred = format!("[{}]", vec!["1"; 100].join(", "));
        let cube = format!("{hundred}.map(a, {hundred}.map(b, {hundred})).size() > 0");
        assert!(cost(&cube) > MAX_SELECTOR_COST);
        // Over the device's own maps: bounded by what a device has.
        let c = cost("device.attributes.all(d, device.attributes[d].all(n, n != 'x'))");
        assert!(c < MAX_SELECTOR_COST / 4, "{c}");
    }

    #[test]
    fn regular_expressions_are_weighed_by_what_they_compile_to() {
        let small = cost("'H100'.matches('^gpu')");
        assert!(small < 10_000, "{small}");
        // Past the compiler's bound: refused before it runs, whatever the
        // spacing verbose mode allows.
        for big in [r"(?:\\w{100}){100}", r"(?x) \\w { 1 0 0 0 }", r"\\w{1000}"] {
            let text = format!("device.driver.matches('{big}')");
            let e = compile(&text).unwrap_err();
            assert!(e.contains("more than 256 KiB"), "{text}: {e}");
        }
        // A pattern built at evaluation costs the most a compile can: a
        // few such calls per device, not one per character.
        let built = cost("'H100'.matches('\\\\w{10' + '00}')");
        assert!(built >= super::super::cel_regex::BUILT_PATTERN, "{built}");
        let c = cost(&format!(
            "{}true",
            "'H100'.matches('a' + 'b') && ".repeat(5)
        ));
        assert!(c > MAX_SELECTOR_COST, "{c}");
        // The root-scope form and other arities never reach the crate's
        // own `matches`.
        for text in [
            r".matches('a', '\\w{1000}')",
            "'a'.matches('a', 'b')",
            "matches('a')",
        ] {
            assert!(compile(text).is_err(), "{text}");
        }
        // Many distinct patterns: refused once they weigh past the limit,
        // without compiling the rest.
        let many: Vec<String> = (0..300)
            .map(|i| format!(r"'x'.matches('\\w\\w{i}')"))
            .collect();
        let e = compile(&many.join(" || ")).unwrap_err();
        assert!(e.starts_with("too costly"), "{e}");
    }

    /// The libraries' list functions are charged per element: over a
    /// list the selector builds (10,000 strings of 350 characters), one
    /// call is past the limit where `size()` is not; the sets' functions
    /// are charged per pair.
    #[test]
    fn library_functions_are_charged_by_what_they_read() {
        let hundred = format!("[{}]", vec!["1"; 100].join(", "));
        let built = format!("{hundred}.map(a, {hundred}.map(b, '{}'))", "x".repeat(350));
        let size = cost(&format!("{built}.size() > 0"));
        assert!(compile(&format!("{built}.size() > 0")).is_ok(), "{size}");
        for f in
            "sum() min() max() isSorted() indexOf('x') lastIndexOf('x') includes('x')".split(' ')
        {
            let e = compile(&format!("{built}.{f} != 0")).unwrap_err();
            assert!(e.starts_with("too costly"), "{f}: {e}");
        }
        let strings = format!("{hundred}.map(a, '{}')", "x".repeat(1000));
        assert!(cost(&format!("{strings}.size() > 0")) < MAX_SELECTOR_COST / 4);
        for f in ["contains", "intersects", "equivalent"] {
            let e = compile(&format!("sets.{f}({strings}, {strings})")).unwrap_err();
            assert!(e.starts_with("too costly"), "{f}: {e}");
        }
        assert!(cost("sets.contains([1, 2], [1])") < 100);
    }

    /// `find` and `findAll` weigh their pattern as `matches` does.
    #[test]
    fn find_and_find_all_weigh_their_patterns() {
        for call in [
            r"find('\\w{1000}')",
            r"findAll('\\w{1000}')",
            r"findAll('(?x) \\w { 1 0 0 0 }', 2)",
        ] {
            let e = compile(&format!("device.driver.{call}.size() > 0")).unwrap_err();
            assert!(e.contains("more than 256 KiB"), "{call}: {e}");
        }
        assert!(cost("'H100'.find('^H')") < 10_000);
        let built = cost("'H100'.findAll('a' + 'b').size() > 0");
        assert!(built >= super::super::cel_regex::BUILT_PATTERN, "{built}");
        // At most one match per character and one more, or `n`.
        let all = cost("device.driver.findAll('a').exists(m, m == 'a')");
        let two = cost("device.driver.findAll('a', 2).exists(m, m == 'a')");
        assert!(two < all, "{two} {all}");
    }

    #[test]
    fn depth_and_nesting_are_bounded() {
        assert_eq!(bracket_nesting("((a)[b]{c: d})"), 2);
        assert_eq!(bracket_nesting("'((((' + \"[[\" + '''((''' // (((\n"), 0);
        assert_eq!(bracket_nesting(r"'\'(' + ((x))"), 2);
        let deep = format!("{}1{}", "(".repeat(40), ")".repeat(40));
        assert!(compile(&deep).unwrap_err().contains("nested 40 deep"));
        // A left-deep chain: one level per operator.
        let chain = format!("1{} == 31", " + 1".repeat(30));
        assert!(compile(&chain).unwrap_err().contains("levels deep"));
        // `&&` and `||` chains are balanced: long ones are shallow.
        let ands = vec!["device.driver == 'x'"; 200].join(" && ");
        assert!(compile(&ands).is_ok());
    }

    #[test]
    fn errors_past_column_65535_do_not_panic() {
        // The crate's own `Display` panics on this one; ours does not. (A
        // text this long is parsed on a large stack, as `compile` does.)
        let long = format!("{} ==", "1 + ".repeat(17_000));
        let parsed = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(PARSE_STACK_BYTES)
                .spawn_scoped(s, || {
                    Program::compile(&long)
                        .map(|_| ())
                        .map_err(|e| first_error(&e))
                })
                .unwrap()
                .join()
                .unwrap()
        });
        assert!(parsed.unwrap_err().starts_with("ERROR: <input>:1:"));
        // And such a text never reaches the parser.
        assert!(compile(&long).unwrap_err().contains("bytes long"));
        let near = format!("'{}' ==", "a".repeat(MAX_SELECTOR_BYTES - 6));
        assert!(compile(&near).unwrap_err().starts_with("does not compile"));
    }
}
