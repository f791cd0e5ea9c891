//! Kubernetes' CEL libraries in the DRA environment: the parts of the
//! environment kube-scheduler compiles a device selector in (the base
//! environment of k8s.io/apiserver/pkg/cel/environment/base.go at the
//! 1.37 compatibility version, which
//! k8s.io/dynamic-resource-allocation/cel/compile.go extends) that the
//! `cel` crate lacks: Kubernetes' lists, regex, IP and CIDR libraries and
//! cel-go's sets extension.
//!
//! Selectors are not type-checked here as upstream's are: a call that
//! upstream refuses when it compiles (`[1, 'a'].min()`, `'a'.sum()`) is
//! an error where it runs. How each function is called (a method or a
//! global, and with how many arguments) is checked before anything runs
//! ([`form`], from `cel_limits`' estimator, which also bounds what each
//! costs).

use std::cmp::Ordering;
use std::net::IpAddr;
use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, DeclarationError, ExecutionError, FunctionContext, Value};

use super::cel_url::GoUrl;

/// What `sets.contains(a, b)` and the other calls in a namespace are
/// parsed into (`cel_parse`): the crate parses them as methods of an
/// identifier `sets`; `#` keeps the names out of any selector's reach.
pub(crate) const SETS_CONTAINS: &str = "sets#contains";
pub(crate) const SETS_EQUIVALENT: &str = "sets#equivalent";
pub(crate) const SETS_INTERSECTS: &str = "sets#intersects";
pub(crate) const IP_IS_CANONICAL: &str = "ip#isCanonical";

/// (namespace, function, arguments, the name it is parsed into).
pub(crate) const NAMESPACED: &[(&str, &str, usize, &str)] = &[
    ("sets", "contains", 2, SETS_CONTAINS),
    ("sets", "equivalent", 2, SETS_EQUIVALENT),
    ("sets", "intersects", 2, SETS_INTERSECTS),
    ("ip", "isCanonical", 1, IP_IS_CANONICAL),
];

/// A function's calling form: a method (`x.f(...)`) or a global
/// (`f(...)`), with this many arguments.
#[derive(Debug, Clone, Copy)]
enum Form {
    Method(usize),
    Global(usize),
}
use Form::{Global, Method};

/// Every function added here, in each form upstream declares it.
const FORMS: &[(&str, Form, &str)] = &[
    ("isSorted", Method(0), "list.isSorted()"),
    ("sum", Method(0), "list.sum()"),
    ("min", Method(0), "list.min()"),
    ("max", Method(0), "list.max()"),
    ("indexOf", Method(1), "list.indexOf(x)"),
    ("lastIndexOf", Method(1), "list.lastIndexOf(x)"),
    ("includes", Method(1), "list.includes(x)"),
    (SETS_CONTAINS, Global(2), "sets.contains(list, list)"),
    (SETS_EQUIVALENT, Global(2), "sets.equivalent(list, list)"),
    (SETS_INTERSECTS, Global(2), "sets.intersects(list, list)"),
    ("find", Method(1), "string.find(regex)"),
    ("findAll", Method(1), "string.findAll(regex)"),
    ("findAll", Method(2), "string.findAll(regex, int)"),
    ("isIP", Global(1), "isIP(string)"),
    ("ip", Global(1), "ip(string)"),
    ("ip", Method(0), "cidr.ip()"),
    (IP_IS_CANONICAL, Global(1), "ip.isCanonical(string)"),
    ("family", Method(0), "ip.family()"),
    ("isUnspecified", Method(0), "ip.isUnspecified()"),
    ("isLoopback", Method(0), "ip.isLoopback()"),
    (
        "isLinkLocalMulticast",
        Method(0),
        "ip.isLinkLocalMulticast()",
    ),
    ("isLinkLocalUnicast", Method(0), "ip.isLinkLocalUnicast()"),
    ("isGlobalUnicast", Method(0), "ip.isGlobalUnicast()"),
    ("isCIDR", Global(1), "isCIDR(string)"),
    ("cidr", Global(1), "cidr(string)"),
    ("containsIP", Method(1), "cidr.containsIP(ip or string)"),
    (
        "containsCIDR",
        Method(1),
        "cidr.containsCIDR(cidr or string)",
    ),
    ("prefixLength", Method(0), "cidr.prefixLength()"),
    ("masked", Method(0), "cidr.masked()"),
    ("url", Global(1), "url(string)"),
    ("isURL", Global(1), "isURL(string)"),
    ("getScheme", Method(0), "url.getScheme()"),
    ("getHost", Method(0), "url.getHost()"),
    ("getHostname", Method(0), "url.getHostname()"),
    ("getPort", Method(0), "url.getPort()"),
    ("getEscapedPath", Method(0), "url.getEscapedPath()"),
    ("getQuery", Method(0), "url.getQuery()"),
];

/// Whether `name` is a function of these libraries.
pub(crate) fn has(name: &str) -> bool {
    FORMS.iter().any(|(n, _, _)| *n == name)
}

/// `None` when `name` is no function here; else whether a call as a
/// method (`method`) with `args` arguments is one of its forms, or why not.
pub(crate) fn form(name: &str, method: bool, args: usize) -> Option<Result<(), String>> {
    let forms: Vec<&(&str, Form, &str)> = FORMS.iter().filter(|(n, _, _)| *n == name).collect();
    let first = forms.first()?;
    let fits = forms.iter().any(|(_, f, _)| match f {
        Method(n) => method && *n == args,
        Global(n) => !method && *n == args,
    });
    if fits {
        return Some(Ok(()));
    }
    let usage: Vec<&str> = forms.iter().map(|(_, _, u)| *u).collect();
    Some(Err(format!(
        "found no matching overload for `{}` {} with {args} argument(s); it is called as `{}`",
        first.0.replace('#', "."),
        if method {
            "as a method"
        } else {
            "as a function"
        },
        usage.join("` or `")
    )))
}

/// Adds the libraries' functions to a selector's context.
pub(super) fn register(ctx: &mut Context<'_, '_>) -> Result<(), DeclarationError> {
    // Kubernetes' lists library, version 1 (with `includes`) at 1.37:
    // k8s.io/apiserver/pkg/cel/library/lists.go.
    ctx.add_function("isSorted", |This(l): This<Value>| is_sorted(&l))?;
    ctx.add_function("sum", |This(l): This<Value>| sum(&l))?;
    ctx.add_function("min", |This(l): This<Value>| extreme("min", &l))?;
    ctx.add_function("max", |This(l): This<Value>| extreme("max", &l))?;
    ctx.add_function("indexOf", |This(l): This<Value>, x: Value| {
        let items = list("indexOf", &l)?;
        Ok::<_, ExecutionError>(position(items.iter().position(|v| *v == x)))
    })?;
    ctx.add_function("lastIndexOf", |This(l): This<Value>, x: Value| {
        let items = list("lastIndexOf", &l)?;
        Ok::<_, ExecutionError>(position(items.iter().rposition(|v| *v == x)))
    })?;
    ctx.add_function("includes", |This(t): This<Value>, x: Value| match &t {
        Value::List(items) => items.contains(&x),
        other => *other == x,
    })?;
    // cel-go's sets extension (github.com/google/cel-go/ext/sets.go), in
    // the base environment since 1.29.
    ctx.add_function(SETS_CONTAINS, |a: Value, b: Value| {
        sets_contains("sets.contains", &a, &b)
    })?;
    ctx.add_function(SETS_EQUIVALENT, |a: Value, b: Value| {
        Ok::<_, ExecutionError>(
            sets_contains("sets.equivalent", &a, &b)? && sets_contains("sets.equivalent", &b, &a)?,
        )
    })?;
    ctx.add_function(SETS_INTERSECTS, |a: Value, b: Value| {
        let (a, b) = (list("sets.intersects", &a)?, list("sets.intersects", &b)?);
        Ok::<_, ExecutionError>(a.iter().any(|x| b.contains(x)))
    })?;
    // Kubernetes' regex library (k8s.io/apiserver/pkg/cel/library/
    // regex.go), on the bounded compiler `matches` has (`cel_regex`).
    ctx.add_function(
        "find",
        |This(s): This<Arc<String>>, re: Arc<String>| -> Result<Value, ExecutionError> {
            let re = super::cel_regex::compiled("find", re)?;
            Ok(Value::from(
                re.find(&s).map_or("", |m| m.as_str()).to_owned(),
            ))
        },
    )?;
    ctx.add_function("findAll", find_all)?;
    // Kubernetes' IP and CIDR libraries (k8s.io/apiserver/pkg/cel/library/
    // ip.go, cidr.go), in the base environment since 1.30. `string(ip)`
    // and `string(cidr)` are not here: `string` is the crate's own.
    ctx.add_function("isIP", |s: Arc<String>| parse_ip(&s).is_ok())?;
    // `ip(string)` and `cidr.ip()`: not `string.ip()`.
    ctx.add_function("ip", |ftx: &FunctionContext, This(v): This<Value>| {
        match (&v, ftx.this.is_some()) {
            (Value::String(s), false) => parse_ip(s).map(ip_value).map_err(|e| fail("ip", e)),
            (other, true) => cidr_of("ip", other).map(|c| ip_value(c.addr)),
            (other, false) => Err(no_overload("ip", other)),
        }
    })?;
    ctx.add_function(IP_IS_CANONICAL, |s: Arc<String>| {
        parse_ip(&s)
            .map(|a| a.to_string() == *s)
            .map_err(|e| fail("ip.isCanonical", e))
    })?;
    ctx.add_function("family", |This(v): This<Value>| {
        ip_of("family", &v).map(|a| if a.is_ipv4() { 4i64 } else { 6 })
    })?;
    ctx.add_function("isUnspecified", |This(v): This<Value>| {
        ip_of("isUnspecified", &v).map(|a| a.is_unspecified())
    })?;
    ctx.add_function("isLoopback", |This(v): This<Value>| {
        ip_of("isLoopback", &v).map(|a| a.is_loopback())
    })?;
    ctx.add_function("isLinkLocalMulticast", |This(v): This<Value>| {
        ip_of("isLinkLocalMulticast", &v).map(link_local_multicast)
    })?;
    ctx.add_function("isLinkLocalUnicast", |This(v): This<Value>| {
        ip_of("isLinkLocalUnicast", &v).map(link_local_unicast)
    })?;
    ctx.add_function("isGlobalUnicast", |This(v): This<Value>| {
        ip_of("isGlobalUnicast", &v).map(global_unicast)
    })?;
    ctx.add_function("isCIDR", |s: Arc<String>| parse_cidr(&s).is_ok())?;
    ctx.add_function("cidr", |s: Arc<String>| {
        parse_cidr(&s)
            .map(|c| Value::Opaque(Arc::new(c)))
            .map_err(|e| fail("cidr", e))
    })?;
    ctx.add_function("containsIP", |This(c): This<Value>, other: Value| {
        let c = cidr_of("containsIP", &c)?;
        let ip = match &other {
            Value::String(s) => parse_ip(s).map_err(|e| fail("containsIP", e))?,
            v => ip_of("containsIP", v)?,
        };
        Ok::<_, ExecutionError>(c.contains(ip))
    })?;
    ctx.add_function("containsCIDR", |This(c): This<Value>, other: Value| {
        let c = cidr_of("containsCIDR", &c)?;
        let other = match &other {
            Value::String(s) => parse_cidr(s).map_err(|e| fail("containsCIDR", e))?,
            v => *cidr_of("containsCIDR", v)?,
        };
        Ok::<_, ExecutionError>(c.bits <= other.bits && c.contains(other.addr))
    })?;
    ctx.add_function("prefixLength", |This(c): This<Value>| {
        cidr_of("prefixLength", &c).map(|c| i64::from(c.bits))
    })?;
    ctx.add_function("masked", |This(c): This<Value>| {
        cidr_of("masked", &c).map(|c| Value::Opaque(Arc::new(c.masked())))
    })?;
    // Kubernetes' URL library (k8s.io/apiserver/pkg/cel/library/urls.go),
    // Go's net/url ported in `cel_url`.
    ctx.add_function("url", |s: Arc<String>| {
        GoUrl::from_cel(&s)
            .map(|u| Value::Opaque(Arc::new(u)))
            .map_err(|e| fail("url", e))
    })?;
    ctx.add_function("isURL", |s: Arc<String>| GoUrl::is_url(&s))?;
    ctx.add_function("getScheme", |This(u): This<Value>| {
        url_of("getScheme", &u).map(|u| Value::from(u.scheme().to_owned()))
    })?;
    ctx.add_function("getHost", |This(u): This<Value>| {
        url_of("getHost", &u).map(|u| Value::from(u.host()))
    })?;
    ctx.add_function("getHostname", |This(u): This<Value>| {
        url_of("getHostname", &u).map(|u| Value::from(u.hostname()))
    })?;
    ctx.add_function("getPort", |This(u): This<Value>| {
        url_of("getPort", &u).map(|u| Value::from(u.port()))
    })?;
    ctx.add_function("getEscapedPath", |This(u): This<Value>| {
        url_of("getEscapedPath", &u).map(|u| Value::from(u.escaped_path()))
    })?;
    ctx.add_function("getQuery", |This(u): This<Value>| {
        url_of("getQuery", &u).map(super::cel_url::query_value)
    })?;
    Ok(())
}

fn url_of<'a>(function: &str, v: &'a Value) -> Result<&'a GoUrl, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<GoUrl>(),
        _ => None,
    }
    .ok_or_else(|| no_overload(function, v))
}

fn fail(function: &str, message: String) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn type_name(v: &Value) -> String {
    match v {
        Value::Float(_) => "double".to_owned(),
        Value::Opaque(o) => o.runtime_type_name().to_owned(),
        other => other.type_of().to_string(),
    }
}

fn no_overload(function: &str, v: &Value) -> ExecutionError {
    fail(
        function,
        format!("found no matching overload for {}", type_name(v)),
    )
}

fn list<'a>(function: &str, v: &'a Value) -> Result<&'a [Value], ExecutionError> {
    match v {
        Value::List(items) => Ok(items),
        other => Err(no_overload(function, other)),
    }
}

fn position(found: Option<usize>) -> i64 {
    found.map_or(-1, |i| i64::try_from(i).unwrap_or(i64::MAX))
}

/// An element of a type upstream orders (lists.go's `comparableTypes`).
fn comparable(function: &str, v: &Value) -> Result<(), ExecutionError> {
    match v {
        Value::Int(_)
        | Value::UInt(_)
        | Value::Float(_)
        | Value::Bool(_)
        | Value::String(_)
        | Value::Bytes(_)
        | Value::Duration(_)
        | Value::Timestamp(_) => Ok(()),
        other => Err(no_overload(function, other)),
    }
}

/// Two elements ordered as upstream's `Compare` (numbers across types, as
/// the scheduler's environment has `CrossTypeNumericComparisons`).
/// `None` for a NaN: upstream's `Compare` gives an error there, which
/// `isSorted`, `min` and `max` pass over. Elements of two other types
/// are an error (upstream refuses such a list when it compiles).
fn order(function: &str, a: &Value, b: &Value) -> Result<Option<Ordering>, ExecutionError> {
    comparable(function, a)?;
    comparable(function, b)?;
    let number = |v: &Value| matches!(v, Value::Int(_) | Value::UInt(_) | Value::Float(_));
    match (a, b) {
        (Value::Bytes(a), Value::Bytes(b)) => Ok(Some(a.cmp(b))),
        _ => match a.partial_cmp(b) {
            Some(o) => Ok(Some(o)),
            None if number(a) && number(b) => Ok(None),
            None => Err(fail(
                function,
                format!("cannot compare {} with {}", type_name(a), type_name(b)),
            )),
        },
    }
}

fn is_sorted(l: &Value) -> Result<bool, ExecutionError> {
    let items = list("isSorted", l)?;
    let mut prev: Option<&Value> = None;
    for next in items {
        comparable("isSorted", next)?;
        if let Some(prev) = prev {
            if order("isSorted", prev, next)? == Some(Ordering::Greater) {
                return Ok(false);
            }
        }
        prev = Some(next);
    }
    Ok(true)
}

/// `min()` or `max()`: the first of the least (greatest) elements; an
/// error on an empty list, as upstream's ("min called on empty list").
fn extreme(function: &'static str, l: &Value) -> Result<Value, ExecutionError> {
    let replaced_when = if function == "min" {
        Ordering::Greater
    } else {
        Ordering::Less
    };
    let items = list(function, l)?;
    let mut best: Option<&Value> = None;
    for next in items {
        comparable(function, next)?;
        best = match best {
            Some(b) if order(function, b, next)? != Some(replaced_when) => Some(b),
            _ => Some(next),
        };
    }
    best.cloned()
        .ok_or_else(|| fail(function, format!("{function} called on empty list")))
}

/// `sum()`: ints, uints, doubles or durations, checked for overflow as
/// upstream's `Add`; an empty list sums to `0` (upstream's zero is of the
/// list's declared type, `0.0` for a `list(double)`; equal either way).
fn sum(l: &Value) -> Result<Value, ExecutionError> {
    let items = list("sum", l)?;
    let mut acc: Option<Value> = None;
    for next in items {
        let overflow = |what: &str| fail("sum", what.to_owned());
        acc = Some(match (acc, next) {
            (None, v @ (Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Duration(_))) => {
                v.clone()
            }
            (Some(Value::Int(a)), Value::Int(b)) => Value::Int(
                a.checked_add(*b)
                    .ok_or_else(|| overflow("integer overflow"))?,
            ),
            (Some(Value::UInt(a)), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| overflow("unsigned integer overflow"))?,
            ),
            (Some(Value::Float(a)), Value::Float(b)) => Value::Float(a + b),
            (Some(Value::Duration(a)), Value::Duration(b)) => Value::Duration(
                a.checked_add(b)
                    .ok_or_else(|| overflow("duration overflow"))?,
            ),
            (_, other) => return Err(no_overload("sum", other)),
        });
    }
    Ok(acc.unwrap_or(Value::Int(0)))
}

/// Whether every element of `b` is one of `a` (CEL equality: `1 == 1.0`).
fn sets_contains(function: &str, a: &Value, b: &Value) -> Result<bool, ExecutionError> {
    let (a, b) = (list(function, a)?, list(function, b)?);
    Ok(b.iter().all(|x| a.contains(x)))
}

/// `s.findAll(re)` and `s.findAll(re, n)`: at most `n` matches (all when
/// `n` is negative, none when it is zero), as Go's `FindAllString`.
fn find_all(
    This(s): This<Arc<String>>,
    Arguments(args): Arguments,
) -> Result<Value, ExecutionError> {
    let pattern = match args.first() {
        Some(Value::String(p)) => p.clone(),
        Some(other) => return Err(no_overload("findAll", other)),
        None => return Err(fail("findAll", "a regular expression is missing".into())),
    };
    let limit = match args.get(1) {
        None => usize::MAX,
        Some(Value::Int(n)) => usize::try_from(*n).unwrap_or(usize::MAX),
        Some(other) => return Err(no_overload("findAll", other)),
    };
    let re = super::cel_regex::compiled("findAll", pattern)?;
    let found: Vec<Value> = re
        .find_iter(&s)
        .take(limit)
        .map(|m| Value::from(m.as_str().to_owned()))
        .collect();
    Ok(Value::List(Arc::new(found)))
}

/// An IP address in CEL (upstream's `net.IP`).
#[derive(Debug, PartialEq, Eq)]
struct Ip(IpAddr);

impl cel::objects::Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

/// A CIDR in CEL (upstream's `net.CIDR`): an address and a prefix
/// length, the address kept as written (`cidr('10.0.0.1/8').ip()` is
/// `10.0.0.1`), as Go's `netip.Prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl cel::objects::Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

/// An address's bits and their width.
fn bits_of(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

impl Cidr {
    /// Whether `ip` is in this prefix (never across families).
    fn contains(&self, ip: IpAddr) -> bool {
        let ((a, width), (b, other)) = (bits_of(self.addr), bits_of(ip));
        let shift = u32::from(width - self.bits);
        width == other && (self.bits == 0 || a >> shift == b >> shift)
    }

    fn masked(&self) -> Cidr {
        let (a, width) = (bits_of(self.addr).0, bits_of(self.addr).1);
        let shift = u32::from(width - self.bits);
        let kept = if self.bits == 0 {
            0
        } else {
            a >> shift << shift
        };
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(u32::try_from(kept).unwrap_or(0).into()),
            IpAddr::V6(_) => IpAddr::V6(kept.into()),
        };
        Cidr {
            addr,
            bits: self.bits,
        }
    }
}

fn ip_value(addr: IpAddr) -> Value {
    Value::Opaque(Arc::new(Ip(addr)))
}

fn ip_of(function: &str, v: &Value) -> Result<IpAddr, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Ip>().map(|ip| ip.0),
        _ => None,
    }
    .ok_or_else(|| no_overload(function, v))
}

fn as_cidr(v: &Value) -> Option<&Cidr> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Cidr>(),
        _ => None,
    }
}

fn cidr_of<'a>(function: &str, v: &'a Value) -> Result<&'a Cidr, ExecutionError> {
    as_cidr(v).ok_or_else(|| no_overload(function, v))
}

/// Upstream's `parseIPAddr`: Go's `netip.ParseAddr`, no zone, no
/// IPv4-mapped IPv6 address. Here std's parser, which is as strict on
/// what both refuse that a selector might hold (IPv4 octets with leading
/// zeros or out of range, three or five parts, `::` twice); its messages
/// are its own.
fn parse_ip(s: &str) -> Result<IpAddr, String> {
    let addr: IpAddr = match s.parse() {
        Ok(a) => a,
        Err(_)
            if s.split_once('%')
                .is_some_and(|(a, _)| a.parse::<IpAddr>().is_ok()) =>
        {
            return Err(format!("IP address {s:?} with zone value is not allowed"))
        }
        Err(e) => {
            return Err(format!(
                "IP Address {s:?} parse error during conversion from string: {e}"
            ))
        }
    };
    match addr {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
            Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"))
        }
        _ => Ok(addr),
    }
}

/// Upstream's `parseCIDR`: Go's `netip.ParsePrefix` (an address, `/`, a
/// decimal length without sign or leading zeros, within the family's
/// width), no IPv4-mapped IPv6 address.
fn parse_cidr(s: &str) -> Result<Cidr, String> {
    let err = |why: String| format!("network address {s:?} parse error: {why}");
    let (addr, bits) = s.rsplit_once('/').ok_or_else(|| err("no '/'".into()))?;
    if addr.contains('%') {
        return Err(err("IPv6 zones cannot be present in a prefix".into()));
    }
    let addr = parse_ip(addr).map_err(err)?;
    let digits = bits.bytes().all(|b| b.is_ascii_digit());
    let bits = match bits.parse::<u8>() {
        Ok(n) if digits && (bits == "0" || !bits.starts_with('0')) => n,
        _ => return Err(err(format!("bad bits after slash: {bits:?}"))),
    };
    if bits > bits_of(addr).1 {
        return Err(err("prefix length out of range".into()));
    }
    Ok(Cidr { addr, bits })
}

/// Go's `netip.Addr` predicates (std's lack some, or differ).
fn link_local_multicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => v.segments()[0] & 0xff0f == 0xff02,
    }
}

fn link_local_unicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[..2] == [169, 254],
        IpAddr::V6(v) => v.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn global_unicast(a: IpAddr) -> bool {
    let multicast = match a {
        IpAddr::V4(v) => v.octets()[0] & 0xf0 == 0xe0,
        IpAddr::V6(v) => v.octets()[0] == 0xff,
    };
    let broadcast = matches!(a, IpAddr::V4(v) if v.is_broadcast());
    !a.is_unspecified() && !broadcast && !a.is_loopback() && !multicast && !link_local_unicast(a)
}

#[cfg(test)]
mod tests {
    use super::super::cel_env::check;
    use super::super::cel_env::library_tests::{eval, gpu};

    /// Each expression evaluates to `true` on a device.
    fn all_true(exprs: &[&str]) {
        let d = gpu("580.105.4");
        for expr in exprs {
            assert_eq!(eval(expr, &d), Ok(true), "{expr}");
        }
    }

    /// Each expression fails (before any device or where it runs) with
    /// a message that says `why`.
    fn all_fail(cases: &[(&str, &str)]) {
        let d = gpu("580.105.4");
        for (expr, why) in cases {
            let e = eval(expr, &d).unwrap_err();
            assert!(e.contains(why), "{expr}: {e}");
        }
    }

    const TYPE: &str = "device.attributes['gpu.nvidia.com'].type";

    /// lists.go's own examples, and its errors.
    #[test]
    fn the_kubernetes_lists_library() {
        all_true(&[
            "[1, 2, 3].isSorted() && ['a', 'b', 'b', 'c'].isSorted() && [1].isSorted()",
            "![2.0, 1.0].isSorted() && [].isSorted() && [b'a', b'b'].isSorted()",
            "[1, 3].sum() == 4 && [1.0, 3.0].sum() == 4.0 && [].sum() == 0",
            "[uint(1), uint(2)].sum() == uint(3) && [duration('1m'), duration('1s')].sum() == duration('61s')",
            "[1, 3].min() == 1 && [1, 3].max() == 3 && [1].min() == 1 && ([0] + []).min() == 0",
            "['b', 'a', 'c'].min() == 'a' && [false, true].max() && [2.5, -1.0].min() == -1.0",
            "[1, 2, 2, 3].indexOf(2) == 1 && ['a', 'b', 'b', 'c'].lastIndexOf('b') == 2",
            "[1.0].indexOf(1.1) == -1 && [].indexOf('string') == -1 && [1, 2].indexOf(2.0) == 1",
            "[1, 2, 3].includes(2) && ![1, 2, 3].includes(4)",
            "'model-a'.includes('model-a') && !'model-a'.includes('model-b')",
            &format!("[{TYPE}, 'a'].min() == 'a' && [{TYPE}].includes('gpu')"),
        ]);
        all_fail(&[
            ("[].min() == 0", "min called on empty list"),
            ("[].max() == 0", "max called on empty list"),
            ("[9223372036854775807, 1].sum() == 0", "integer overflow"),
            ("[1, 'a'].min() == 1", "cannot compare int with string"),
            ("[1, 2.5].sum() == 0", "no matching overload for double"),
            ("[[1], [2]].isSorted()", "no matching overload for list"),
            ("'abc'.sum() == 0", "no matching overload for string"),
            ("'abc'.indexOf('b') == 1", "no matching overload for string"),
            // Only the forms upstream declares, refused before any device.
            ("sum([1, 2]) == 3", "`sum` as a function with 1 argument"),
            ("[1].indexOf() == 0", "it is called as `list.indexOf(x)`"),
        ]);
    }

    /// cel-go's ext/sets.go, its examples; `sets.f` is no method call on a
    /// variable `sets`.
    #[test]
    fn the_sets_extension() {
        all_true(&[
            "sets.contains([], []) && sets.contains([1, 2, 3, 4], [2, 3])",
            "!sets.contains([2, 3], [1, 2, 3]) && sets.contains([1], [1.0, 1])",
            "sets.equivalent([], []) && sets.equivalent([1], [1, 1]) && sets.equivalent([1], [1.0])",
            "sets.equivalent([1, 2, 3], [3, 2, 1]) && !sets.equivalent([2, 1], [1])",
            "sets.intersects([1], [1, 2]) && sets.intersects([[1], [2, 3]], [[1, 2], [2, 3.0]])",
            "!sets.intersects([], []) && !sets.intersects([1], [])",
            &format!("sets.contains(['gpu', 'vgpu'], [{TYPE}])"),
            // Other `contains` calls are left as they are.
            &format!("{TYPE}.contains('p')"),
        ]);
        all_fail(&[
            ("sets.contains('a', [1])", "no matching overload for string"),
            ("sets.contains([1])", "unknown variable `sets`"),
        ]);
        assert!(check("'a'.sets#contains('a')").is_err());
    }

    /// regex.go's `find` and `findAll`, compiled as `matches` is.
    #[test]
    fn the_kubernetes_regex_library() {
        all_true(&[
            "'abc 123'.find('[0-9]+') == '123' && 'abc'.find('[0-9]+') == ''",
            "'123 abc 456'.findAll('[0-9]+') == ['123', '456']",
            "'123 abc 456'.findAll('[0-9]+', 1) == ['123'] && '123 abc 456'.findAll('[0-9]+', 0) == []",
            "'123 abc 456'.findAll('[0-9]+', -1).size() == 2 && 'baaab'.findAll('a*') == ['', 'aaa', '']",
            &format!("{TYPE}.find('^g.') == 'gp' && {TYPE}.findAll('[gu]') == ['g', 'u']"),
        ]);
        all_fail(&[
            (r"'a'.find('\\w{1000}') == ''", "more than 256 KiB"),
            (
                r"'a'.findAll('\\w{10' + '00}').size() == 0",
                "more than 256 KiB",
            ),
            ("'a'.find('(') == ''", "not a valid regular expression"),
            (
                "'a'.findAll('a', 'b').size() == 0",
                "no matching overload for string",
            ),
            (
                "find('a', 'b') == ''",
                "`find` as a function with 2 argument(s)",
            ),
        ]);
    }

    /// ip.go and cidr.go: their examples, and what they refuse.
    #[test]
    fn the_kubernetes_ip_and_cidr_libraries() {
        all_true(&[
            "isIP('192.168.0.1') && isIP('::1') && isIP('2001:db8::68')",
            "!isIP('192.168.0.01') && !isIP('1.2.3') && !isIP('fe80::1%eth0') && !isIP('::ffff:1.2.3.4')",
            "ip('127.0.0.1').family() == 4 && ip('::1').family() == 6",
            "ip('127.0.0.1').isLoopback() && ip('::1').isLoopback() && !ip('10.0.0.1').isLoopback()",
            "ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified() && !ip('::1').isUnspecified()",
            "ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()",
            "!ip('224.0.1.1').isLinkLocalMulticast() && !ip('ff05::1').isLinkLocalMulticast()",
            "ip('169.254.1.1').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()",
            "ip('10.0.0.1').isGlobalUnicast() && ip('2001:db8::1').isGlobalUnicast()",
            "!ip('255.255.255.255').isGlobalUnicast() && !ip('224.0.0.1').isGlobalUnicast()",
            "ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')",
            "!ip.isCanonical('2001:db8:0:0:0:0:0:1') && ip.isCanonical('10.0.0.1')",
            "ip('10.0.0.1') == ip('10.0.0.1') && ip('10.0.0.1') != ip('10.0.0.2')",
            "isCIDR('10.0.0.0/8') && isCIDR('::/0') && !isCIDR('10.0.0.0/33') && !isCIDR('10.0.0.0')",
            "!isCIDR('10.0.0.0/08') && !isCIDR('10.0.0.0/+8') && !isCIDR('::ffff:1.2.3.4/120')",
            "cidr('10.0.0.0/8').containsIP('10.1.2.3') && cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))",
            "!cidr('10.0.0.0/8').containsIP('11.0.0.1') && !cidr('::/0').containsIP('10.0.0.1')",
            "cidr('0.0.0.0/0').containsIP('1.2.3.4') && cidr('2001:db8::/32').containsIP('2001:db8::1')",
            "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')",
            "cidr('10.0.0.0/8').containsCIDR(cidr('10.0.0.0/8'))",
            "cidr('10.0.0.1/8').ip() == ip('10.0.0.1') && cidr('10.0.0.1/8').prefixLength() == 8",
            "cidr('10.0.0.1/8').masked() == cidr('10.0.0.0/8') && cidr('10.0.0.1/8') != cidr('10.0.0.0/8')",
            "cidr('2001:db8::1/32').masked() == cidr('2001:db8::/32') && cidr('1.2.3.4/0').masked() == cidr('0.0.0.0/0')",
        ]);
        all_fail(&[
            (
                "ip('1.2.3').family() == 4",
                "parse error during conversion from string",
            ),
            (
                "ip('fe80::1%eth0').family() == 6",
                "with zone value is not allowed",
            ),
            (
                "ip('::ffff:1.2.3.4').family() == 6",
                "IPv4-mapped IPv6 address",
            ),
            (
                "cidr('10.0.0.0/33').prefixLength() == 0",
                "prefix length out of range",
            ),
            ("cidr('10.0.0.0').prefixLength() == 0", "no '/'"),
            (
                "ip('::1').prefixLength() == 0",
                "no matching overload for net.IP",
            ),
            (
                "cidr('::/0').family() == 6",
                "no matching overload for net.CIDR",
            ),
            (
                "'10.0.0.1'.ip().family() == 4",
                "no matching overload for string",
            ),
            (
                "ip(cidr('::/0')).family() == 6",
                "no matching overload for net.CIDR",
            ),
            ("'10.0.0.1'.isIP()", "`isIP` as a method with 0 argument(s)"),
        ]);
    }
}
