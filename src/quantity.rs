//! Kubernetes resource quantities (`500m`, `32`, `256Gi`, `1.5`, `1e3`),
//! held as integer milli-units so sums and comparisons are exact.
//!
//! Parsing is checked end to end: a value that does not fit in an `i64`
//! of milli-units (about ±9.2·10^15 units), an exponent of any size, or
//! more significant digits than exact arithmetic holds is an error, never
//! a wrapped or saturated number, in debug and release builds alike.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

const SYNTAX: &str = "expected a number with an optional suffix (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei) or exponent (e3, E-3)";
const RANGE: &str = "out of range (at most 9223372036854775807m)";

/// Milli-units: `"1"` is 1000, `"500m"` is 500, `"1Ki"` is 1_024_000.
pub type Milli = i64;

/// Parses a quantity into milli-units, rounding up (as kube-scheduler does
/// for requests, so a fit is never optimistic).
pub fn parse(input: &str) -> Result<Milli, QuantityError> {
    let err = |reason: &'static str| QuantityError {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(split);
    let (int_digits, frac_digits) = number.split_once('.').unwrap_or((number, ""));
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(err(SYNTAX));
    }
    if frac_digits.contains('.') {
        return Err(err(SYNTAX));
    }
    // value in milli-units = D · 10^pow10 · 2^pow2, D the digits as an integer.
    let (pow10, pow2): (i64, u32) = match suffix {
        "n" => (-6, 0),
        "u" => (-3, 0),
        "m" => (0, 0),
        "" => (3, 0),
        "k" => (6, 0),
        "M" => (9, 0),
        "G" => (12, 0),
        "T" => (15, 0),
        "P" => (18, 0),
        "E" => (21, 0),
        "Ki" => (3, 10),
        "Mi" => (3, 20),
        "Gi" => (3, 30),
        "Ti" => (3, 40),
        "Pi" => (3, 50),
        "Ei" => (3, 60),
        e if e.starts_with(['e', 'E']) => {
            let exp = &e[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(SYNTAX));
            }
            // Any exponent is read without overflow: one past what i64
            // milli-units can hold (or below its smallest step) is as
            // good as infinite, and only a zero mantissa survives it.
            let digits = digits.trim_start_matches('0');
            let magnitude: i64 = if digits.len() > 6 {
                1_000_000
            } else {
                digits.parse().unwrap_or(0)
            };
            let exp = if exp.starts_with('-') {
                -magnitude
            } else {
                magnitude
            };
            (exp + 3, 0)
        }
        _ => return Err(err(SYNTAX)),
    };
    // Significant digits only: leading zeros of the integer part and
    // trailing zeros of the fraction change nothing.
    let frac = frac_digits.trim_end_matches('0');
    let mut digits = String::with_capacity(int_digits.len() + frac.len());
    digits.push_str(int_digits);
    digits.push_str(frac);
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    // i128 holds every 38-digit integer exactly.
    if digits.len() > 38 {
        return Err(err(
            "too many significant digits (at most 38 are read exactly)",
        ));
    }
    let d: i128 = digits.parse().map_err(|_| err(SYNTAX))?;
    let pow10 = pow10 - frac.len() as i64;
    let scaled = d.checked_mul(1i128 << pow2).ok_or_else(|| err(RANGE))?;
    let value = if pow10 >= 0 {
        let p = u32::try_from(pow10).map_err(|_| err(RANGE))?;
        10i128
            .checked_pow(p)
            .and_then(|m| scaled.checked_mul(m))
            .ok_or_else(|| err(RANGE))?
    } else {
        // Rounded away from zero, as kube-scheduler rounds requests up.
        match u32::try_from(-pow10)
            .ok()
            .and_then(|p| 10i128.checked_pow(p))
        {
            Some(den) => scaled / den + i128::from(scaled % den != 0),
            // Divided by more than 10^38: the digits (below 2^127) leave
            // a positive fraction of one milli-unit.
            None => 1,
        }
    };
    let value = if negative { -value } else { value };
    i64::try_from(value).map_err(|_| err(RANGE))
}

/// Formats milli-units for people: `32`, `500m`, `256Gi` when exact.
#[derive(Debug, Clone, Copy)]
pub struct Display(pub Milli);

impl fmt::Display for Display {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v % 1000 != 0 {
            return write!(f, "{v}m");
        }
        let units = v / 1000;
        for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20)] {
            let unit = 1i64 << shift;
            if units >= unit && units % unit == 0 {
                return write!(f, "{}{suffix}", units / unit);
            }
        }
        write!(f, "{units}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_spellings() {
        assert_eq!(parse("32").unwrap(), 32_000);
        assert_eq!(parse("500m").unwrap(), 500);
        assert_eq!(parse("1.5").unwrap(), 1500);
        assert_eq!(parse("256Gi").unwrap(), 256_000 << 30);
        assert_eq!(parse("1k").unwrap(), 1_000_000);
        assert_eq!(parse("0.1m").unwrap(), 1, "rounds up");
        for bad in ["", "Gi", "1Xi", "abc", "1..2"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_exponents_and_the_other_suffixes() {
        assert_eq!(parse("1e3").unwrap(), 1_000_000);
        assert_eq!(parse("1E3").unwrap(), 1_000_000);
        assert_eq!(parse("1P").unwrap(), 1_000_000_000_000_000_000);
        assert_eq!(parse("0.001E").unwrap(), 1_000_000_000_000_000_000);
        assert!(parse("1E").is_err(), "10^21 milli-units do not fit");
        assert_eq!(parse("1e-3").unwrap(), 1);
        assert_eq!(parse("1.5e+2").unwrap(), 150_000);
        assert_eq!(parse("5u").unwrap(), 1, "rounds up");
        assert_eq!(parse("2000000n").unwrap(), 2);
        assert_eq!(parse("1Pi").unwrap(), 1000 << 50);
        assert!(parse("1Ei").is_err(), "2^60 · 1000 milli-units do not fit");
        assert_eq!(parse("-500m").unwrap(), -500);
        assert_eq!(parse("+2").unwrap(), 2000);
        assert_eq!(parse(".5").unwrap(), 500);
        assert_eq!(parse("007.500").unwrap(), 7500);
        for bad in [
            "--5", "+-5", "1-2", "1e", "1e+", "1ee3", "1.2.3", ".", "-", "1 Gi", "1Gi3",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_are_errors_not_wraps() {
        // i64 milli-units: the largest value and one past it.
        assert_eq!(parse("9223372036854775807m").unwrap(), i64::MAX);
        assert_eq!(parse("-9223372036854775808m").unwrap(), i64::MIN);
        assert!(parse("9223372036854775808m").is_err());
        assert!(parse("-9223372036854775809m").is_err());
        assert_eq!(
            parse("9223372036854775").unwrap(),
            9_223_372_036_854_775_000
        );
        assert!(parse("9223372036854776").is_err());
        assert!(parse("8Ei").is_err());
        // i128's limits and past them: 39 and 40 digits.
        assert!(parse("170141183460469231731687303715884105727").is_err());
        assert!(parse("170141183460469231731687303715884105728").is_err());
        assert!(parse("9999999999999999999999999999999999999999").is_err());
        assert!(parse("9999999999999999999999999999999999999999Ei").is_err());
        assert!(parse("0.9999999999999999999999999999999999999999").is_err());
        assert!(parse("99999999999999999999999999999999999999").is_err());
        // Leading and trailing zeros are not significant digits.
        let zeros = "0".repeat(1000);
        assert_eq!(parse(&format!("{zeros}1.5{zeros}")).unwrap(), 1500);
        // Exponents of any size, without overflow.
        assert_eq!(parse("1e15").unwrap(), 1_000_000_000_000_000_000);
        assert!(parse("1e16").is_err());
        assert_eq!(parse("1e12").unwrap(), 1_000_000_000_000_000);
        assert!(parse("1e2147483648").is_err());
        assert!(parse("1e99999999999999999999999999999999999999999").is_err());
        assert_eq!(
            parse("1e-99999999999999999999999999999999").unwrap(),
            1,
            "rounds up"
        );
        assert_eq!(parse("-1e-40").unwrap(), -1);
        assert_eq!(parse("0e99999999999999999999").unwrap(), 0);
        assert_eq!(parse("0.0e-99999999999").unwrap(), 0);
    }

    #[test]
    fn displays_exact_units() {
        assert_eq!(Display(parse("256Gi").unwrap()).to_string(), "256Gi");
        assert_eq!(Display(500).to_string(), "500m");
        assert_eq!(Display(8000).to_string(), "8");
    }
}
