//! Configuration text shared by every Accord program: strict TOML parsing
//! that locates errors (file:line:column), then a whole-file validation that
//! lists every problem at once. The callers read the files; this does no I/O.

use serde::de::DeserializeOwned;

/// What is wrong with a configuration file: the one error type every
/// Accord program that reads TOML (accordd, the agent, the fleet file, the
/// BMC inventory) reports its files with, wrapped in its own error.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The caller could not read the file (this crate reads none).
    #[error("{file}: cannot read")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or not the expected shape. `line` and `column` are
    /// 1-based (0 when toml gives no position); `key` is the dotted key
    /// path the error sits at (`server.listen`), when toml names one.
    #[error("{file}:{line}:{column}: {message}{}", at_key(key.as_deref()))]
    Parse {
        file: String,
        line: usize,
        column: usize,
        key: Option<String>,
        message: String,
    },
    #[error("{file}: {} problem(s):\n  {}", problems.len(), problems.join("\n  "))]
    Invalid { file: String, problems: Vec<String> },
}

impl ConfigFileError {
    /// A [`ConfigFileError::Read`] for `file`.
    pub fn read(file: &std::path::Path, source: std::io::Error) -> ConfigFileError {
        ConfigFileError::Read {
            file: file.display().to_string(),
            source,
        }
    }
}

fn at_key(key: Option<&str>) -> String {
    key.map(|k| format!(" (at `{k}`)")).unwrap_or_default()
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// The largest configuration file Accord parses (accordd.toml, agent.toml,
/// the fleet, bmcs.toml, lab scenarios): 4 MiB, a fleet of some 50,000
/// declared nodes.
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// Parses `text` (from `file`) as TOML into `T`, locating any error: its
/// line and column, and (for a value of the wrong shape) the dotted key
/// path, which `serde_path_to_error` tracks as serde walks the document.
pub fn parse<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigFileError> {
    // The toml crate tokenizes a whole text before it parses: up to about
    // 75 bytes per byte of input (4 MiB of `[` took 300 MiB, found by the
    // hostile-input tests). A cap bounds that; no real file comes close.
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigFileError::Invalid {
            file: file.to_owned(),
            problems: vec![format!(
                "{} bytes: larger than any configuration file should be (at most {} MiB)",
                text.len(),
                MAX_CONFIG_BYTES >> 20
            )],
        });
    }
    let fail = |e: toml::de::Error, key: Option<String>| {
        let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
        ConfigFileError::Parse {
            file: file.to_owned(),
            line,
            column,
            key,
            message: e.message().to_owned(),
        }
    };
    let document = toml::Deserializer::parse(text).map_err(|e| fail(e, None))?;
    serde_path_to_error::deserialize(document).map_err(|e| {
        let key = e.path().to_string();
        let key = (!key.is_empty() && key != ".").then_some(key);
        fail(e.into_inner(), key)
    })
}

/// [`parse`], then `validate`, which returns every problem it finds.
pub fn parse_valid<T: DeserializeOwned>(
    text: &str,
    file: &str,
    validate: impl FnOnce(&T) -> Vec<String>,
) -> Result<T, ConfigFileError> {
    let value = parse(text, file)?;
    let problems = validate(&value);
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(ConfigFileError::Invalid {
            file: file.to_owned(),
            problems,
        })
    }
}

/// What is wrong with a secret's permissions (`mode` as `stat` gives it):
/// group or others may reach it. Pure, so every program words it alike;
/// the caller reads the mode.
pub fn secret_mode_problem(
    key: &str,
    path: &std::path::Path,
    mode: u32,
    is_dir: bool,
) -> Option<String> {
    if mode & 0o077 == 0 {
        return None;
    }
    let (what, fix) = if is_dir {
        ("accessible", "chmod 700")
    } else {
        ("readable", "chmod 600")
    };
    Some(format!(
        "{key}: {} is {what} by group or others (mode {:o}); {fix}",
        path.display(),
        mode & 0o777
    ))
}

/// An error and its sources, `: `-separated, for one log line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct File {
        server: Server,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Server {
        listen: String,
    }

    #[test]
    fn a_parse_error_names_file_position_and_key() {
        let err = parse::<File>("[server]\nlisten = 3\n", "a.toml").unwrap_err();
        let ConfigFileError::Parse {
            line, column, key, ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!((*line, *column), (2, 10), "{err}");
        assert_eq!(key.as_deref(), Some("server.listen"), "{err}");
        assert!(err.to_string().starts_with("a.toml:2:10: "), "{err}");
        assert!(err.to_string().ends_with(" (at `server.listen`)"), "{err}");
        // A syntax error has a position and no key.
        let err = parse::<File>("[server\n", "a.toml").unwrap_err();
        assert!(
            matches!(
                &err,
                ConfigFileError::Parse {
                    line: 1,
                    key: None,
                    ..
                }
            ),
            "{err}"
        );
    }
}
