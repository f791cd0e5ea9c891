//! The one escaping rule for text a person reads (accordctl's and the
//! agent's human output, log lines): every control character (C0, DEL,
//! C1: ESC, CSI, OSC 52 clipboard writes…) and every invisible format
//! character (bidirectional overrides, zero-width spaces, BOM) is shown
//! escaped as `\u{…}`, so nothing that came from an agent, a BMC, a
//! tenant's claim or a rogue accordd can drive the admin's terminal, hide
//! text or forge a line. Newlines and tabs are kept where the output is
//! multi-line ([`for_terminal`]) and escaped where it is one line
//! ([`one_line`]).

use std::borrow::Cow;

/// Whether `c` is shown escaped (newline and tab aside).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00ad}'                  // soft hyphen
            | '\u{061c}'                // Arabic letter mark
            | '\u{180e}'                // Mongolian vowel separator
            | '\u{200b}'..='\u{200f}'   // zero-width, LRM, RLM
            | '\u{2028}'..='\u{202e}'   // line/paragraph separators, bidi embeddings
            | '\u{2060}'..='\u{206f}'   // word joiner, bidi isolates, invisible operators
            | '\u{feff}'                // BOM / zero-width no-break space
            | '\u{fff9}'..='\u{fffb}'   // interlinear annotations
            | '\u{e0000}'..='\u{e007f}' // tags
        )
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| hidden(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) && !keep(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Multi-line human output: newlines and tabs kept, every other control
/// or invisible format character escaped.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t')
}

/// One line (a log line, a table cell): newlines escaped too.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// JSON as it reaches a terminal (`--json` on stdout): every hidden
/// character but the layout's newlines written as a JSON escape
/// (`\u009b`, a surrogate pair past U+FFFF). serde_json escapes C0 controls
/// in strings but writes DEL, C1 controls and bidi overrides as they are;
/// outside strings there is only ASCII, so the value read back is the same.
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| hidden(c) && c != '\n') {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if hidden(c) && c != '\n' {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A value as pretty JSON on stdout, through [`json_for_terminal`].
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{}", json_for_terminal(&text));
    Ok(())
}

/// `print!` for what a person reads, through [`for_terminal`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        ::std::print!("{}", $crate::terminal::for_terminal(&::std::format!($($arg)*)))
    };
}

/// `println!` for what a person reads, through [`for_terminal`].
#[macro_export]
macro_rules! sayln {
    ($($arg:tt)*) => {
        ::std::println!("{}", $crate::terminal::for_terminal(&::std::format!($($arg)*)))
    };
}

/// `eprintln!` for what a person reads, through [`for_terminal`].
#[macro_export]
macro_rules! esayln {
    ($($arg:tt)*) => {
        ::std::eprintln!("{}", $crate::terminal::for_terminal(&::std::format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_invisible_characters_are_shown_escaped() {
        // OSC 52 (a clipboard write), CSI, a C1 CSI, a bidi override.
        let hostile = "A100\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\u{9b}31m\u{202e}gpu\r\nok\tx";
        let shown = for_terminal(hostile);
        assert_eq!(
            shown,
            "A100\\u{1b}]52;c;ZWNobyBwd25lZA==\\u{7}\\u{1b}[2J\\u{9b}31m\\u{202e}gpu\\u{d}\nok\tx"
        );
        assert_eq!(
            one_line("a\nb\tc"),
            "a\\u{a}b\\u{9}c",
            "one line keeps nothing"
        );
        // Ordinary text, accents and CJK included, is untouched (and not
        // copied).
        let plain = "NVIDIA H100 80GB HBM3 — Größe 東京\n";
        assert!(matches!(for_terminal(plain), Cow::Borrowed(p) if p == plain));
    }

    #[test]
    fn json_for_a_terminal_escapes_what_serde_json_writes_raw_and_reads_back_the_same() {
        let hostile = "H100\u{7f}\u{9b}31m\u{202e}x\u{e0041}\x1b]52;c;AA==\x07";
        let value = serde_json::json!({ "model": hostile, "n": [1, 2] });
        let raw = serde_json::to_string_pretty(&value).expect("plain data");
        assert!(
            raw.contains('\u{9b}') && raw.contains('\u{202e}'),
            "serde_json writes them raw"
        );
        let shown = json_for_terminal(&raw);
        assert!(!shown.chars().any(|c| hidden(c) && c != '\n'), "{shown}");
        assert!(
            shown.contains("\\u009b") && shown.contains("\\udb40\\udc41"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).expect("still JSON");
        assert_eq!(back, value);
        let plain =
            serde_json::to_string_pretty(&serde_json::json!({"a": "Größe 東京"})).expect("plain");
        assert!(matches!(json_for_terminal(&plain), Cow::Borrowed(_)));
    }
}
