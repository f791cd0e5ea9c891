//! The one place Accord's programs (accordd, accordctl, accord-agent, the
//! lab) set up logging: lines go to stderr, never stdout (stdout carries
//! a command's output, `--json` included); colour only when stderr is a
//! terminal and `NO_COLOR` is unset or empty; `ACCORD_LOG` sets the filter
//! (`tracing_subscriber::EnvFilter` syntax: `info`, `warn,accordd=debug`).

use std::io::IsTerminal;

/// The filter variable.
pub const FILTER_VAR: &str = "ACCORD_LOG";

/// Installs the process's subscriber: `ACCORD_LOG`, else `default_filter`.
/// Call once, at the start of `main`; a second call changes nothing.
pub fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(FILTER_VAR)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour(std::io::stderr().is_terminal(), no_color))
        .try_init();
}

/// Whether to colour: only for a terminal, and never when asked not to
/// (<https://no-color.org>).
fn colour(stderr_is_terminal: bool, no_color: bool) -> bool {
    stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(super::colour(true, false));
        assert!(!super::colour(true, true));
        assert!(!super::colour(false, false));
        assert!(!super::colour(false, true));
    }
}
