//! Text for the page: HTML escaping and number and duration formats that
//! never print NaN or infinity.

/// `text` safe inside HTML elements and quoted attributes.
pub(super) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            _ => escaped.push(c),
        }
    }
    escaped
}

/// `value` with `decimals` decimals, or a dash when it is not a number.
pub(super) fn number(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        // -0.0 would print as "-0.0".
        let value = if value == 0.0 { 0.0 } else { value };
        format!("{value:.decimals$}")
    } else {
        "—".to_owned()
    }
}

/// A short label for a bar: whole numbers up to 99 999, then k and M.
pub(super) fn compact(value: f64) -> String {
    if !value.is_finite() {
        return "—".to_owned();
    }
    let magnitude = value.abs();
    if magnitude >= 1e7 {
        format!("{:.1}M", value / 1e6)
    } else if magnitude >= 1e5 {
        format!("{:.0}k", value / 1e3)
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        number(value, 2)
    }
}

/// A duration in the unit that reads best: "45 s", "12.5 min", "3.2 h", "4.1 d".
pub(super) fn duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "—".to_owned();
    }
    let magnitude = seconds.abs();
    if magnitude < 120.0 {
        format!(
            "{} s",
            number(seconds, if magnitude < 10.0 { 1 } else { 0 })
        )
    } else if magnitude < 2.0 * 3600.0 {
        format!("{} min", number(seconds / 60.0, 1))
    } else if magnitude < 72.0 * 3600.0 {
        format!("{} h", number(seconds / 3600.0, 1))
    } else {
        format!("{} d", number(seconds / 86_400.0, 1))
    }
}

/// A tick label on a logarithmic duration axis: "1 s", "10 min", "1 d".
pub(super) fn tick_duration(seconds: f64) -> String {
    let (value, unit) = if seconds < 60.0 {
        (seconds, "s")
    } else if seconds < 3600.0 {
        (seconds / 60.0, "min")
    } else if seconds < 86_400.0 {
        (seconds / 3600.0, "h")
    } else {
        (seconds / 86_400.0, "d")
    };
    format!("{} {unit}", trim_number(value))
}

/// `value` with at most 2 decimals and no trailing zeros: axis labels.
pub(super) fn trim_number(value: f64) -> String {
    let text = number(value, 2);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// "20–60 s", or "20 s" when both ends are the same.
pub(super) fn range_s([low, high]: [u64; 2]) -> String {
    if low == high {
        format!("{low} s")
    } else {
        format!("{low}–{high} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn numbers_never_print_nan() {
        assert_eq!(number(f64::NAN, 1), "—");
        assert_eq!(number(f64::INFINITY, 1), "—");
        assert_eq!(number(-0.0, 1), "0.0");
        assert_eq!(number(12.345, 1), "12.3");
        assert_eq!(compact(f64::NAN), "—");
        assert_eq!(compact(12_345.4), "12345");
        assert_eq!(compact(123_456.0), "123k");
        assert_eq!(compact(2.5), "2.50");
        assert_eq!(duration(f64::NAN), "—");
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(4.0), "4.0 s");
        assert_eq!(duration(45.0), "45 s");
        assert_eq!(duration(750.0), "12.5 min");
        assert_eq!(duration(3.0 * 3600.0), "3.0 h");
        assert_eq!(duration(7.0 * 86_400.0), "7.0 d");
        assert_eq!(tick_duration(600.0), "10 min");
        assert_eq!(tick_duration(0.5), "0.5 s");
        assert_eq!(tick_duration(86_400.0), "1 d");
        assert_eq!(range_s([20, 60]), "20–60 s");
        assert_eq!(range_s([5, 5]), "5 s");
    }
}
