//! CEL selectors over devices, evaluated with the `cel` crate in the DRA
//! environment: `device.driver`, `device.attributes[domain].name`,
//! `device.capacity[domain].name` (base units), `quantity("40Gi")` and
//! `x.compareTo(y)`.
//!
//! Results are cached per (expression, device fingerprint): devices that
//! differ only in node-specific attributes (UUIDs, bus ids, PCIe roots, NUMA)
//! share one evaluation unless the expression mentions such an attribute.
//! The cache is a `HashMap` that is only looked up, never iterated, so it
//! cannot leak an order into a plan.
//!
//! Every expression is checked against Kubernetes' limits for a selector
//! (length, nesting, estimated cost; `cel_limits`) before it runs: one
//! that fails them is an invalid selector, never run.

use std::collections::HashMap;
use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, Program, Value};

use super::cel_limits;
use super::cel_parse::{clip, panic_message};
use crate::device::{AttrValue, Device, NODE_SPECIFIC};

/// Characters of a selector quoted in a message.
const SHOWN_CHARS: usize = 120;

struct Expr {
    text: String,
    program: Result<Program, String>,
    /// Estimated steps of one evaluation.
    cost: u64,
    /// Estimated steps charged to it this round.
    spent: u64,
    node_specific: bool,
}

/// Estimated evaluation steps one round may spend on all selectors (a
/// step is 20 to 30 ns in a release build: a few seconds), and on one
/// selector. The estimate at compile time bounds one evaluation; these
/// bound a round, so a claim whose selector is costly on every device of
/// a large fleet cannot stall planning: what is past them is refused this
/// round ("budget spent") and tried again the next. Charged per
/// evaluation actually run (cached answers cost nothing), in the order
/// the plan evaluates, so the same inputs spend the same way.
pub const ROUND_CEL_BUDGET: u64 = 200_000_000;
/// See [`ROUND_CEL_BUDGET`].
pub const SELECTOR_CEL_BUDGET: u64 = 50_000_000;

/// FNV-1a as a `Hasher`: much cheaper than SipHash for the small keys of
/// the caches here, which hold no attacker-controlled data.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.0 == 0 {
            self.0 = 0xcbf2_9ce4_8422_2325;
        }
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

pub(crate) type FnvMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

/// (expression ids, device fingerprints, mask of devices passing all).
type MaskEntry = (Vec<usize>, Vec<u64>, u64);

#[derive(Default)]
pub struct CelEngine {
    exprs: Vec<Expr>,
    ids: FnvMap<String, usize>,
    cache: FnvMap<(usize, bool, u64), Result<bool, String>>,
    /// (hash of expression ids, hash of a node's device fingerprints) →
    /// (the ids, the fingerprints, which devices pass all of them): one
    /// lookup per fit instead of one per device and expression. The keys
    /// are kept so a hash collision cannot return another node's answer.
    masks: FnvMap<(u64, u64), MaskEntry>,
    /// Estimated steps spent this round, and the budgets (see
    /// [`ROUND_CEL_BUDGET`]; `None`: the defaults).
    spent: u64,
    budgets: Option<(u64, u64)>,
}

impl std::fmt::Debug for CelEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CelEngine")
            .field("expressions", &self.exprs.len())
            .field("cached", &self.cache.len())
            .finish()
    }
}

/// Milli-units to base units, rounding up.
fn base_units(milli: i64) -> i64 {
    milli.div_euclid(1000) + i64::from(milli.rem_euclid(1000) != 0)
}

fn split_name<'a>(qualified: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    qualified.rsplit_once('/').unwrap_or((driver, qualified))
}

fn device_value(device: &Device) -> Value {
    let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (k, v) in &device.attributes {
        let (domain, name) = split_name(k, &device.driver);
        let value = match v {
            AttrValue::Bool(b) => Value::from(*b),
            AttrValue::Int(i) => Value::from(*i),
            AttrValue::String(s) => Value::from(s.clone()),
            // As DRA's CEL environment: a version attribute is a semver;
            // one that does not parse is an error where it is used.
            AttrValue::Version { version } => match semver::Version::parse(version) {
                Ok(v) => Value::Opaque(Arc::new(Semver(v))),
                Err(_) => Value::from(version.clone()),
            },
        };
        attributes
            .entry(domain.to_owned())
            .or_default()
            .insert(name.to_owned(), value);
    }
    let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (k, v) in &device.capacity {
        let (domain, name) = split_name(k, &device.driver);
        capacity
            .entry(domain.to_owned())
            .or_default()
            .insert(name.to_owned(), Value::from(base_units(*v)));
    }
    let mut d: HashMap<String, Value> = HashMap::new();
    d.insert("driver".into(), Value::from(device.driver.clone()));
    d.insert("attributes".into(), attributes.into());
    d.insert("capacity".into(), capacity.into());
    d.into()
}

/// A semantic version in CEL, as Kubernetes' semver library
/// (k8s.io/apiserver/pkg/cel/library/semverlib.go) and DRA's version
/// attributes (k8s.io/dynamic-resource-allocation/cel/compile.go).
#[derive(Debug, PartialEq, Eq)]
struct Semver(semver::Version);

impl cel::objects::Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

/// `semver("1.2.3")`: strict semantic versioning 2.0 (no `v`, no leading
/// zeros, three parts), as upstream's `semver.Parse`.
fn parse_semver(s: Arc<String>) -> Result<Value, cel::ExecutionError> {
    semver::Version::parse(&s)
        .map(|v| Value::Opaque(Arc::new(Semver(v))))
        .map_err(|e| cel::ExecutionError::function_error("semver", format!("{s:?}: {e}")))
}

fn as_semver(v: &Value) -> Option<&semver::Version> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Semver>().map(|s| &s.0),
        _ => None,
    }
}

/// Orders two quantities (base-unit integers here) or two semvers (by
/// precedence: build metadata does not count, as upstream's Compare).
fn compare(method: &str, a: &Value, b: &Value) -> Result<std::cmp::Ordering, cel::ExecutionError> {
    match (a, b) {
        // By comparison, not subtraction: `quantity` of something that is
        // not one is i64::MIN, and `a - b` would overflow.
        (Value::Int(a), Value::Int(b)) => Ok(a.cmp(b)),
        _ => match (as_semver(a), as_semver(b)) {
            (Some(a), Some(b)) => Ok(a.cmp_precedence(b)),
            _ => Err(cel::ExecutionError::function_error(
                method,
                "compares two quantities or two semvers",
            )),
        },
    }
}

/// A semver's component (`major()`, `minor()`, `patch()`).
fn component(method: &'static str, v: &Value) -> Result<i64, cel::ExecutionError> {
    let v =
        as_semver(v).ok_or_else(|| cel::ExecutionError::function_error(method, "not a semver"))?;
    let n = match method {
        "major" => v.major,
        "minor" => v.minor,
        _ => v.patch,
    };
    i64::try_from(n).map_err(|_| cel::ExecutionError::function_error(method, "out of range"))
}

/// The DRA CEL environment for one device.
fn context(device: &Device) -> Result<Context<'static, 'static>, cel::DeclarationError> {
    let mut ctx = Context::default();
    ctx.add_function("quantity", |s: Arc<String>| -> i64 {
        crate::quantity::parse(&s).map_or(i64::MIN, base_units)
    })?;
    // Kubernetes' quantity and semver libraries (quantities are base-unit
    // integers here) and the strings extension the NVIDIA driver's
    // examples use.
    ctx.add_function("semver", parse_semver)?;
    ctx.add_function("isSemver", |s: Arc<String>| {
        semver::Version::parse(&s).is_ok()
    })?;
    ctx.add_function("major", |This(v): This<Value>| component("major", &v))?;
    ctx.add_function("minor", |This(v): This<Value>| component("minor", &v))?;
    ctx.add_function("patch", |This(v): This<Value>| component("patch", &v))?;
    ctx.add_function("compareTo", |This(a): This<Value>, b: Value| {
        compare("compareTo", &a, &b).map(|o| o as i64)
    })?;
    ctx.add_function("isGreaterThan", |This(a): This<Value>, b: Value| {
        compare("isGreaterThan", &a, &b).map(|o| o.is_gt())
    })?;
    ctx.add_function("isLessThan", |This(a): This<Value>, b: Value| {
        compare("isLessThan", &a, &b).map(|o| o.is_lt())
    })?;
    // `matches` on a compiler bounded in what it builds (`cel_regex`):
    // the crate's own compiles up to 10 MiB at every call.
    ctx.add_function(
        super::cel_parse::BOUNDED_MATCHES,
        |s: Arc<String>, re: Arc<String>| super::cel_regex::matches(&s, re),
    )?;
    ctx.add_function("asInteger", |This(a): This<i64>| a)?;
    ctx.add_function("lowerAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_lowercase()
    })?;
    ctx.add_function("upperAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_uppercase()
    })?;
    super::cel_library::register(&mut ctx)?;
    ctx.add_variable_from_value("device", device_value(device));
    Ok(ctx)
}

impl CelEngine {
    /// An engine with other budgets than [`ROUND_CEL_BUDGET`] and
    /// [`SELECTOR_CEL_BUDGET`] (tests).
    pub fn with_budgets(round: u64, per_selector: u64) -> CelEngine {
        CelEngine {
            budgets: Some((round, per_selector)),
            ..CelEngine::default()
        }
    }

    /// The id of an expression, compiling it on first sight.
    pub fn id(&mut self, text: &str) -> usize {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let (program, cost) = match cel_limits::compile_costed(text) {
            Ok((program, cost)) => (Ok(program), cost),
            Err(e) => (Err(e), 0),
        };
        let id = self.exprs.len();
        self.exprs.push(Expr {
            text: text.to_owned(),
            program,
            cost,
            spent: 0,
            node_specific: NODE_SPECIFIC.iter().any(|n| text.contains(n)),
        });
        self.ids.insert(text.to_owned(), id);
        id
    }

    pub fn text(&self, id: usize) -> &str {
        &self.exprs[id].text
    }

    /// Whether `device` satisfies expression `id`. `unique` identifies the
    /// device in the fleet, `print` is its [`fingerprint`](crate::device::fingerprint). An expression
    /// that cannot be compiled or evaluated is an `Err` with the reason:
    /// never a silent match.
    /// Which of `devices` (at most 64) pass every expression in `exprs`, as
    /// a bit mask; `None` when that cannot be cached (node-specific
    /// expressions, too many devices) or an expression fails on some
    /// device, so that the caller evaluates per device and explains.
    pub fn mask(&mut self, exprs: &[usize], devices: &[Device], prints: &[u64]) -> Option<u64> {
        if devices.len() > 64 || exprs.iter().any(|&id| self.exprs[id].node_specific) {
            return None;
        }
        let hash = |xs: &mut dyn Iterator<Item = u64>| {
            use std::hash::Hasher;
            let mut h = Fnv::default();
            for x in xs {
                h.write_u64(x);
            }
            h.finish()
        };
        let key = (
            hash(&mut exprs.iter().map(|&e| e as u64)),
            hash(&mut prints.iter().copied()),
        );
        if let Some((ids, fingerprints, mask)) = self.masks.get(&key) {
            if ids == exprs && fingerprints == prints {
                return Some(*mask);
            }
        }
        let mut mask = 0u64;
        for (di, device) in devices.iter().enumerate() {
            let mut pass = true;
            for &id in exprs {
                match self.matches(id, device, 0, prints[di]) {
                    Ok(true) => {}
                    Ok(false) => {
                        pass = false;
                        break;
                    }
                    Err(_) => return None,
                }
            }
            if pass {
                mask |= 1 << di;
            }
        }
        self.masks
            .insert(key, (exprs.to_vec(), prints.to_vec(), mask));
        Some(mask)
    }

    pub fn matches(
        &mut self,
        id: usize,
        device: &Device,
        unique: u64,
        print: u64,
    ) -> Result<bool, String> {
        let expr = &self.exprs[id];
        let key = if expr.node_specific {
            (id, true, unique)
        } else {
            (id, false, print)
        };
        if let Some(hit) = self.cache.get(&key) {
            return hit.clone();
        }
        let shown = || clip(&expr.text, SHOWN_CHARS);
        let (round_budget, selector_budget) = self
            .budgets
            .unwrap_or((ROUND_CEL_BUDGET, SELECTOR_CEL_BUDGET));
        let over = expr.program.is_ok()
            && (self.spent.saturating_add(expr.cost) > round_budget
                || expr.spent.saturating_add(expr.cost) > selector_budget);
        let result = match &expr.program {
            Err(e) => Err(format!("invalid CEL selector `{}`: {e}", shown())),
            Ok(_) if over => Err(format!(
                "CEL selector `{}` not evaluated on {}: this round's evaluation budget is spent \
                 ({} estimated steps on this selector, {} on all; at most {selector_budget} and \
                 {round_budget}); planned again next round",
                shown(),
                device.name,
                expr.spent,
                self.spent
            )),
            Ok(program) => match context(device) {
                Err(e) => Err(format!("CEL environment: {e}")),
                // A panic in the interpreter is this selector's failure on
                // this device, not the planner's end (the cel crate's
                // evaluator has `unreachable!`s and panics of its own).
                Ok(ctx) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    program.execute(&ctx)
                })) {
                    Ok(Ok(Value::Bool(b))) => Ok(b),
                    Ok(Ok(other)) => Err(format!(
                        "CEL selector `{}` gave {}, not a boolean",
                        shown(),
                        clip(&format!("{other:?}"), SHOWN_CHARS)
                    )),
                    Ok(Err(e)) => Err(format!(
                        "CEL selector `{}` cannot be evaluated on {}: {}",
                        shown(),
                        device.name,
                        clip(&e.to_string(), SHOWN_CHARS)
                    )),
                    Err(panic) => Err(format!(
                        "CEL selector `{}` cannot be evaluated on {}: the CEL interpreter \
                         failed ({})",
                        shown(),
                        device.name,
                        panic_message(&*panic)
                    )),
                },
            },
        };
        if !over && self.exprs[id].program.is_ok() {
            let cost = self.exprs[id].cost;
            self.exprs[id].spent = self.exprs[id].spent.saturating_add(cost);
            self.spent = self.spent.saturating_add(cost);
        }
        self.cache.insert(key, result.clone());
        result
    }
}

/// Compiles an expression within Kubernetes' limits for a selector; the
/// error says why not (the parser's first error, or the limit).
fn compile(text: &str) -> Result<Program, String> {
    cel_limits::compile(text)
}

/// Functions Accord adds to CEL's standard ones.
const EXTENSIONS: &[&str] = &[
    "quantity",
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    "asInteger",
    "lowerAscii",
    "upperAscii",
    super::cel_parse::BOUNDED_MATCHES,
];

/// Checks a selector before any device is seen, as the API server's
/// validation would: it parses within Kubernetes' limits (10 KiB, cost;
/// see `cel_limits`), names no variable but `device`, and calls only
/// functions the environment has (CEL's standard ones, `quantity`,
/// `compareTo`). What passes may still fail on a device (a missing
/// attribute), which fit reports per device.
pub fn check(text: &str) -> Result<(), String> {
    let program = compile(text)?;
    let refs = program.references();
    let mut bound = std::collections::BTreeSet::new();
    bound_names(program.expression(), &mut bound);
    for v in refs.variables() {
        if v != "device" && !bound.contains(v) {
            return Err(format!("unknown variable `{v}` (only `device` is defined)"));
        }
    }
    for f in refs.functions() {
        // Operators (`_>_`, `@in`, `!_`) are the parser's, always defined.
        if f.starts_with('_') || f.starts_with('@') || f.starts_with('!') {
            continue;
        }
        if EXTENSIONS.contains(&f) || super::cel_library::has(f) {
            continue;
        }
        // A standard function cannot be defined again: that is the test.
        let known = Context::default().add_function(f, |x: i64| x).is_err();
        if !known {
            return Err(format!("unknown function `{f}`"));
        }
    }
    Ok(())
}

/// The names comprehensions bind (`cel.bind`'s, the macros' accumulators
/// and iteration variables): defined inside the expression.
fn bound_names<'a>(e: &'a cel::IdedExpr, out: &mut std::collections::BTreeSet<&'a str>) {
    use cel::common::ast::{EntryExpr, Expr};
    match &e.expr {
        Expr::Comprehension(c) => {
            out.insert(&c.accu_var);
            out.insert(&c.iter_var);
            if let Some(v) = &c.iter_var2 {
                out.insert(v);
            }
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                bound_names(x, out);
            }
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                bound_names(t, out);
            }
            for a in &c.args {
                bound_names(a, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| bound_names(x, out)),
        Expr::Select(s) => bound_names(&s.operand, out),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    bound_names(&me.key, out);
                    bound_names(&me.value, out);
                }
            }
        }
        Expr::Struct(st) => {
            for entry in &st.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    bound_names(&f.value, out);
                }
            }
        }
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
    }
}

#[cfg(test)]
mod check_tests {
    use super::check;

    #[test]
    fn selectors_are_checked_before_any_device() {
        assert!(check("device.attributes['gpu.nvidia.com'].profile == '1g.5gb'").is_ok());
        assert!(
            check("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0")
                .is_ok()
        );
        assert!(
            check("device.attributes['x'].name.startsWith('a') && size(device.driver) > 0").is_ok()
        );
        assert!(
            check("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('10Gi'))")
                .is_ok()
        );
        assert!(check(
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')"
        )
        .is_ok());
        assert_eq!(
            check("device.attributes['x'].frobnicate(1)").unwrap_err(),
            "unknown function `frobnicate`"
        );
        assert!(check("node.name == 'a'")
            .unwrap_err()
            .contains("unknown variable `node`"));
        assert!(check("device.driver ==").is_err());
    }
}

#[cfg(test)]
pub(super) mod library_tests {
    use std::collections::BTreeMap;

    use super::{check, CelEngine};
    use crate::device::{fingerprint, AttrValue, Device, DeviceKind};

    /// A GPU as NVIDIA's DRA driver publishes it: `driverVersion` a
    /// version attribute, memory a capacity.
    pub(in crate::fit) fn gpu(driver_version: &str) -> Device {
        Device {
            name: "gpu-0".into(),
            driver: "gpu.nvidia.com".into(),
            kind: DeviceKind::Gpu,
            attributes: BTreeMap::from([
                (
                    "gpu.nvidia.com/type".into(),
                    AttrValue::String("gpu".into()),
                ),
                (
                    "gpu.nvidia.com/driverVersion".into(),
                    AttrValue::Version {
                        version: driver_version.into(),
                    },
                ),
            ]),
            capacity: BTreeMap::from([("gpu.nvidia.com/memory".into(), 80 * (1 << 30) * 1000)]),
            shared: None,
            gpu: Some(0),
            consumes: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    pub(in crate::fit) fn eval(expr: &str, device: &Device) -> Result<bool, String> {
        check(expr)?;
        let mut e = CelEngine::default();
        let id = e.id(expr);
        e.matches(id, device, 0, fingerprint(device))
    }

    #[test]
    fn the_kubernetes_semver_library_and_version_attributes() {
        let d = gpu("580.105.4");
        // NVIDIA's driver e2e selector (test/e2e/framework/specs/
        // driver-version.yaml.tmpl), as its framework renders it.
        let nvidia = |v: &str| {
            format!(
                r#"device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("{v}")) >= 0"#
            )
        };
        assert_eq!(eval(&nvidia("580.105.4"), &d), Ok(true));
        assert_eq!(eval(&nvidia("580.0.0"), &d), Ok(true));
        assert_eq!(eval(&nvidia("580.106.0"), &d), Ok(false));
        for (expr, want) in [
            ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('575.57.8'))", true),
            ("device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('575.57.8'))", false),
            ("semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3", true),
            ("isSemver('1.2.3-rc.1+b5') && !isSemver('v1.2') && !isSemver('01.2.3')", true),
            // Build metadata does not count; prereleases come first.
            ("semver('1.0.0+build.1').compareTo(semver('1.0.0+build.2')) == 0", true),
            ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", true),
            // Quantities still compare as before.
            ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", true),
            ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))", false),
            // cel.bind and optional syntax, as the scheduler's environment has.
            ("cel.bind(v, device.attributes['gpu.nvidia.com'].driverVersion, v.major() >= 580 && v.minor() >= 100)", true),
            ("device.attributes['gpu.nvidia.com'].?missing.orValue('none') == 'none'", true),
            ("device.attributes[?'gpu.nvidia.com'].hasValue()", true),
        ] {
            assert_eq!(eval(expr, &d), Ok(want), "{expr}");
        }
        // What upstream refuses is an error here too, never a silent match.
        let err = eval("semver('01.2.3').major() == 1", &d).unwrap_err();
        assert!(err.contains("semver"), "{err}");
        let err = eval(
            "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(quantity('1')) == 0",
            &d,
        )
        .unwrap_err();
        assert!(err.contains("two quantities or two semvers"), "{err}");
    }

    /// `matches` runs on the bounded compiler in both forms: a literal
    /// pattern past its bound is refused before any device, one the
    /// selector builds is refused where it runs, at once, not after the
    /// 10 MiB the crate's own compiler allows.
    #[test]
    fn matches_compiles_within_its_bound() {
        let d = gpu("580.105.4");
        let ty = "device.attributes['gpu.nvidia.com'].type";
        assert_eq!(eval(&format!("{ty}.matches('^g.u$')"), &d), Ok(true));
        assert_eq!(eval(&format!("matches({ty}, '^x')"), &d), Ok(false));
        let e = eval(&format!(r"{ty}.matches('(?x) \\w {{ 1 0 0 0 }}')"), &d).unwrap_err();
        assert!(e.contains("more than 256 KiB"), "{e}");
        let e = eval(&format!(r"{ty}.matches('\\w{{10' + '00}}')"), &d).unwrap_err();
        assert!(
            e.contains("cannot be evaluated") && e.contains("more than 256 KiB"),
            "{e}"
        );
        // The renamed call is no function a selector can name.
        assert!(check("'a'.matches#bounded('a')").is_err());
    }

    /// A round's evaluations are charged their estimated cost: past the
    /// per-selector budget a selector is not evaluated on more devices
    /// (refused, saying so), another selector still is; past the round's,
    /// none is. Cached answers cost nothing.
    #[test]
    fn a_round_spends_at_most_its_cel_budget() {
        let d = gpu("580.105.4");
        let costly = "device.attributes['gpu.nvidia.com'].type == 'gpu'";
        let cheap = "device.driver == 'gpu.nvidia.com'";
        let mut probe = CelEngine::default();
        let id = probe.id(costly);
        let one = probe.exprs[id].cost;
        assert!(one > 0);
        let mut e = CelEngine::with_budgets(one * 5, one * 3);
        let (a, b) = (e.id(costly), e.id(cheap));
        for print in 0..3 {
            assert_eq!(e.matches(a, &d, 0, print), Ok(true), "device {print}");
        }
        // The same device again: cached, free.
        assert_eq!(e.matches(a, &d, 0, 0), Ok(true));
        let refused = e.matches(a, &d, 0, 3).unwrap_err();
        assert!(refused.contains("evaluation budget is spent"), "{refused}");
        // Another selector has a budget of its own, within the round's.
        assert_eq!(e.matches(b, &d, 0, 10), Ok(true));
        let mut spent_all = false;
        for print in 11..40 {
            if e.matches(b, &d, 0, print).is_err() {
                spent_all = true;
                break;
            }
        }
        assert!(spent_all, "the round's budget held no limit");
    }
}
