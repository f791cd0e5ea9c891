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

use super::cel_limits::{self, clip, panic_message};
use crate::device::{AttrValue, Device, NODE_SPECIFIC};

/// Characters of a selector quoted in a message.
const SHOWN_CHARS: usize = 120;

struct Expr {
    text: String,
    program: Result<Program, String>,
    node_specific: bool,
}

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

/// The DRA CEL environment for one device.
fn context(device: &Device) -> Result<Context<'static, 'static>, cel::DeclarationError> {
    let mut ctx = Context::default();
    ctx.add_function("quantity", |s: Arc<String>| -> i64 {
        crate::quantity::parse(&s).map_or(i64::MIN, base_units)
    })?;
    // By comparison, not subtraction: `quantity` of something that is not
    // one is i64::MIN, and `a - b` would overflow.
    ctx.add_function("compareTo", |This(a): This<i64>, b: i64| -> i64 {
        a.cmp(&b) as i64
    })?;
    // Kubernetes' quantity library (quantities are base-unit integers here)
    // and the strings extension the NVIDIA driver's examples use.
    ctx.add_function("isGreaterThan", |This(a): This<i64>, b: i64| a > b)?;
    ctx.add_function("isLessThan", |This(a): This<i64>, b: i64| a < b)?;
    ctx.add_function("asInteger", |This(a): This<i64>| a)?;
    ctx.add_function("lowerAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_lowercase()
    })?;
    ctx.add_function("upperAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_uppercase()
    })?;
    ctx.add_variable_from_value("device", device_value(device));
    Ok(ctx)
}

impl CelEngine {
    /// The id of an expression, compiling it on first sight.
    pub fn id(&mut self, text: &str) -> usize {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let program = compile(text);
        let id = self.exprs.len();
        self.exprs.push(Expr {
            text: text.to_owned(),
            program,
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
        let result = match &expr.program {
            Err(e) => Err(format!("invalid CEL selector `{}`: {e}", shown())),
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
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    "asInteger",
    "lowerAscii",
    "upperAscii",
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
    for v in refs.variables() {
        if v != "device" {
            return Err(format!("unknown variable `{v}` (only `device` is defined)"));
        }
    }
    for f in refs.functions() {
        // Operators (`_>_`, `@in`, `!_`) are the parser's, always defined.
        if f.starts_with('_') || f.starts_with('@') || f.starts_with('!') {
            continue;
        }
        if EXTENSIONS.contains(&f) {
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
