//! Kubernetes resource quantities (`500m`, `32`, `256Gi`, `1.5`), held as
//! integer milli-units so sums and comparisons are exact.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: expected a number with an optional suffix (m, k, M, G, T, P, Ki, Mi, Gi, Ti, Pi)")]
pub struct QuantityError {
    pub input: String,
}

/// Milli-units: `"1"` is 1000, `"500m"` is 500, `"1Ki"` is 1_024_000.
pub type Milli = i64;

/// Parses a quantity into milli-units, rounding up (as kube-scheduler does
/// for requests, so a fit is never optimistic).
pub fn parse(input: &str) -> Result<Milli, QuantityError> {
    let err = || QuantityError {
        input: input.to_owned(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() {
        return Err(err());
    }
    // multiplier expressed as (numerator, denominator) of milli-units
    let (num, den): (i128, i128) = match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "k" => (1_000_000, 1),
        "M" => (1_000_000_000, 1),
        "G" => (1_000_000_000_000, 1),
        "T" => (1_000_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1000 << 10, 1),
        "Mi" => (1000 << 20, 1),
        "Gi" => (1000 << 30, 1),
        "Ti" => (1000 << 40, 1),
        "Pi" => (1000 << 50, 1),
        _ => return Err(err()),
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let negative = int_part.starts_with('-');
    let int_digits = int_part.trim_start_matches(['+', '-']);
    if int_digits.is_empty() && frac_part.is_empty() {
        return Err(err());
    }
    let int: i128 = if int_digits.is_empty() {
        0
    } else {
        int_digits.parse().map_err(|_| err())?
    };
    let frac_den: i128 = 10i128.checked_pow(frac_part.len() as u32).ok_or_else(err)?;
    let frac: i128 = if frac_part.is_empty() {
        0
    } else {
        frac_part.parse().map_err(|_| err())?
    };
    let total_num = (int * frac_den + frac) * num;
    let total_den = frac_den * den;
    let mut value = (total_num + total_den - 1) / total_den;
    if negative {
        value = -value;
    }
    i64::try_from(value).map_err(|_| err())
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
    fn displays_exact_units() {
        assert_eq!(Display(parse("256Gi").unwrap()).to_string(), "256Gi");
        assert_eq!(Display(500).to_string(), "500m");
        assert_eq!(Display(8000).to_string(), "8");
    }
}
