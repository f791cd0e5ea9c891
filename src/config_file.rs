//! Configuration text shared by every Accord program: strict TOML parsing
//! that locates errors (file:line:column), then a whole-file validation that
//! lists every problem at once. The callers read the files; this does no I/O.

use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}: {} problem(s):\n  {}", problems.len(), problems.join("\n  "))]
    Invalid { file: String, problems: Vec<String> },
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// Parses `text` (from `file`) as TOML into `T`, locating any error.
pub fn parse<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigFileError> {
    toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
        ConfigFileError::Parse {
            file: file.to_owned(),
            line,
            column,
            message: e.message().to_owned(),
        }
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
