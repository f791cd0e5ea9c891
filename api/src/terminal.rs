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
}
