//! The one place Accord's programs (accordd, accordctl, accord-agent, the
//! lab) set up logging: lines go to stderr, never stdout (stdout carries
//! a command's output, `--json` included); colour only when stderr is a
//! terminal and `NO_COLOR` is unset or empty; `ACCORD_LOG` sets the filter
//! (`tracing_subscriber::EnvFilter` syntax: `info`, `warn,accordd=debug`).
//! Every field and message is escaped by [`crate::terminal::one_line`]: a
//! serial with a newline or an escape sequence in it cannot forge a line or
//! drive the terminal.

use std::io::IsTerminal;

/// The filter variable.
pub const FILTER_VAR: &str = "ACCORD_LOG";

/// Installs the process's subscriber: `ACCORD_LOG`, else `default_filter`.
/// Call once, at the start of `main`; a second call changes nothing.
pub fn init_logging(default_filter: &str) {
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env(FILTER_VAR)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let ansi = colour(std::io::stderr().is_terminal(), no_color);
    let _ = subscriber(filter, ansi, std::io::stderr).try_init();
}

/// The subscriber: `filter`, escaped fields, lines to `writer`.
fn subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    ansi: bool,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    use tracing_subscriber::field::MakeExt;
    let fields = tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = crate::terminal::one_line(&text);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{}={text}", field.name())
        }
    })
    .delimited(" ");
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .fmt_fields(fields)
        .with_writer(writer)
        .with_ansi(ansi)
        .finish()
}

/// Whether to colour: only for a terminal, and never when asked not to
/// (<https://no-color.org>).
fn colour(stderr_is_terminal: bool, no_color: bool) -> bool {
    stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn fields_and_messages_cannot_forge_a_line_or_reach_the_terminal() {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = super::subscriber(
            tracing_subscriber::EnvFilter::new("info"),
            false,
            move || sink.clone(),
        );
        let serial =
            "SN1\n2026-12-04T10:00:00Z  INFO accordd: node gpu-9 powered off\x1b]52;c;cm0gLXJm\x07";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(serial = %serial, debug = ?serial, "report from {serial}");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text.matches('\n').count(),
            1,
            "one event, one line: {text:?}"
        );
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
        assert!(text.contains("serial=SN1\\u{a}2026"), "{text:?}");
        assert!(text.contains("report from SN1\\u{a}"), "{text:?}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(super::colour(true, false));
        assert!(!super::colour(true, true));
        assert!(!super::colour(false, false));
        assert!(!super::colour(false, true));
    }
}
