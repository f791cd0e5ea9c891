//! Node names: the one check the fleet file, accordd's API, the agent's
//! configuration and accordctl share. A node name is a Kubernetes node name: an RFC 1123
//! subdomain of at most 253 characters (lowercase letters, digits, `-`
//! and `.`, starting and ending with a letter or digit), each dot-separated
//! label at most 63 characters (as in a hostname). Anything else (`..`,
//! `/`, newlines, escape sequences, 10k characters) is refused before it
//! reaches a URL, a log line or the store.

/// The longest node name (RFC 1123 subdomain).
pub const MAX_NODE_NAME: usize = 253;
/// The longest dot-separated label of a node name (RFC 1123 label).
pub const MAX_NODE_NAME_LABEL: usize = 63;

/// Why a string is not a node name. Its `Display` shows the name escaped
/// (`{:?}`) and cut to 64 characters, so it is safe in a log line or a
/// JSON reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    #[error("node name is empty")]
    Empty,
    #[error("node name {shown} is {len} characters long; at most {MAX_NODE_NAME} allowed")]
    TooLong { shown: String, len: usize },
    #[error(
        "node name {shown}: character {ch:?} at position {at} is not allowed \
         (lowercase letters, digits, '-' and '.' only)"
    )]
    BadCharacter { shown: String, ch: char, at: usize },
    #[error("node name {shown}: empty label at position {at} (leading, trailing or doubled '.')")]
    EmptyLabel { shown: String, at: usize },
    #[error(
        "node name {shown}: label {label:?} must start and end with a lowercase letter or digit"
    )]
    LabelEdge { shown: String, label: String },
    #[error(
        "node name {shown}: label at position {at} is {len} characters long; \
         at most {MAX_NODE_NAME_LABEL} allowed"
    )]
    LabelTooLong {
        shown: String,
        at: usize,
        len: usize,
    },
}

/// The name as shown in a message: escaped, at most 64 characters.
fn shown(name: &str) -> String {
    const SHOWN: usize = 64;
    if name.chars().count() > SHOWN {
        let cut: String = name.chars().take(SHOWN).collect();
        format!("{cut:?}…")
    } else {
        format!("{name:?}")
    }
}

/// Checks that `name` is a Kubernetes node name (see the module's text).
pub fn validate_node_name(name: &str) -> Result<(), NodeNameError> {
    if name.is_empty() {
        return Err(NodeNameError::Empty);
    }
    let len = name.chars().count();
    if len > MAX_NODE_NAME {
        return Err(NodeNameError::TooLong {
            shown: shown(name),
            len,
        });
    }
    if let Some((at, ch)) = name
        .chars()
        .enumerate()
        .find(|(_, c)| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '.'))
    {
        return Err(NodeNameError::BadCharacter {
            shown: shown(name),
            ch,
            at,
        });
    }
    // ASCII only from here: byte positions are character positions.
    let mut at = 0;
    for label in name.split('.') {
        if label.is_empty() {
            return Err(NodeNameError::EmptyLabel {
                shown: shown(name),
                at,
            });
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(NodeNameError::LabelEdge {
                shown: shown(name),
                label: label.to_owned(),
            });
        }
        if label.len() > MAX_NODE_NAME_LABEL {
            return Err(NodeNameError::LabelTooLong {
                shown: shown(name),
                at,
                len: label.len(),
            });
        }
        at += label.len() + 1;
    }
    Ok(())
}

/// Whether `name` is a Kubernetes node name.
pub fn is_node_name(name: &str) -> bool {
    validate_node_name(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_node_names_pass() {
        let longest = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        assert_eq!(longest.len(), MAX_NODE_NAME);
        let label = "a".repeat(MAX_NODE_NAME_LABEL);
        for ok in [
            "a",
            "0",
            "gpu-01",
            "node-a.rack1.example.com",
            "10.0.0.1",
            label.as_str(),
            longest.as_str(),
        ] {
            assert_eq!(validate_node_name(ok), Ok(()), "{ok}");
            assert!(is_node_name(ok));
        }
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("..", "empty label"),
            ("../nodes/x", "'/'"),
            ("a/b", "'/'"),
            ("a\nb", "'\\n'"),
            ("a\u{1b}[31mb", "'\\u{1b}'"),
            ("Gpu-01", "'G'"),
            ("gpu_01", "'_'"),
            ("gpu 01", "' '"),
            ("-gpu", "must start and end"),
            ("gpu-", "must start and end"),
            ("a.-b", "must start and end"),
            (".a", "empty label at position 0"),
            ("a.", "empty label at position 2"),
            ("a..b", "empty label at position 2"),
            ("é", "'é'"),
        ];
        for (name, why) in cases {
            let e = validate_node_name(name).expect_err(name).to_string();
            assert!(e.contains(why), "{name:?}: {e}");
            assert!(!e.contains('\n'), "{name:?}: a reason is one line: {e}");
            assert!(!e.contains('\u{1b}'), "{name:?}: escapes are escaped: {e}");
        }
        let long = "a".repeat(254);
        let e = validate_node_name(&long).unwrap_err().to_string();
        assert!(
            e.contains("254 characters") && e.contains("at most 253"),
            "{e}"
        );
        assert!(e.len() < 200, "the name is cut in the reason: {e}");
        let e = validate_node_name(&"a".repeat(10_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 200, "{e}");
        let e = validate_node_name(&format!("x.{}", "a".repeat(64)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("label at position 2 is 64 characters"), "{e}");
    }
}
