//! Logging in to one BMC: its credentials, re-read when their file changes
//! (a rotated password is used without a restart), and a bound on failed
//! logins. A BMC locks an account (or blocks the client's address) after a
//! few failed logins in a short time; a daemon that polls every node every
//! few seconds with a wrong password would trip that lockout for the
//! admins too. So at most `max_failed_logins` failed logins are made per
//! `failed_login_window`, the next one after a failure only once
//! `login_backoff` (doubled per failure in the window) has passed; in
//! between, a request that needs a login fails at once without reaching
//! the BMC ([`crate::RedfishError::LoginHeld`]). A changed credentials file
//! lifts the hold: new credentials deserve a try.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::error::Secret;

/// A BMC account: user name and password (never shown).
#[derive(Debug, Clone)]
pub struct Credentials {
    pub username: String,
    pub password: Secret,
}

/// The bound on failed logins (from [`crate::BmcSettings`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoginPolicy {
    pub max_failed: u32,
    pub window: Duration,
    pub backoff: Duration,
}

/// Why no login is tried now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub failures: u32,
    pub retry_in: Duration,
}

#[derive(Debug)]
pub(crate) struct Logins {
    file: Option<PathBuf>,
    /// The file's modification time and length when last read.
    stamp: Option<(SystemTime, u64)>,
    current: Option<Credentials>,
    /// Failed logins within the window, oldest first.
    failures: Vec<Instant>,
}

fn stamp(file: &PathBuf) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(file).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl Logins {
    pub fn new(current: Option<Credentials>, file: Option<PathBuf>) -> Logins {
        Logins {
            stamp: file.as_ref().and_then(stamp),
            file,
            current,
            failures: Vec::new(),
        }
    }

    pub fn credentials(&self) -> Option<&Credentials> {
        self.current.as_ref()
    }

    /// Re-reads the credentials file when it changed since it was read
    /// (or always, with `force`). `Ok(true)`: the credentials differ now
    /// (the failed logins are forgotten). A file that cannot be read or
    /// parsed keeps the credentials in use; its problem is returned (never
    /// quoting the file).
    pub fn refresh(&mut self, force: bool) -> Result<bool, String> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        let now = stamp(file);
        if !force && now == self.stamp {
            return Ok(false);
        }
        let read = read_credentials(file)?;
        self.stamp = now;
        let changed = self.current.as_ref().is_none_or(|c| {
            c.username != read.username || c.password.expose() != read.password.expose()
        });
        if changed {
            self.current = Some(read);
            self.failures.clear();
        }
        Ok(changed)
    }

    /// `Err` while no login may be tried.
    pub fn check(&mut self, now: Instant, p: LoginPolicy) -> Result<(), Held> {
        self.failures
            .retain(|t| now.saturating_duration_since(*t) < p.window);
        let n = self.failures.len() as u32;
        let Some(last) = self.failures.last().copied() else {
            return Ok(());
        };
        let until = if n >= p.max_failed.max(1) {
            self.failures[0] + p.window
        } else {
            let factor = 1u32 << (n - 1).min(16);
            last + p.backoff.saturating_mul(factor).min(p.window)
        };
        if now < until {
            Err(Held {
                failures: n,
                retry_in: until - now,
            })
        } else {
            Ok(())
        }
    }

    pub fn failed(&mut self, now: Instant) {
        self.failures.push(now);
    }

    pub fn succeeded(&mut self) {
        self.failures.clear();
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    username: String,
    password: String,
}

/// Reads a credentials file (TOML `username`, `password`), refusing one
/// readable by group or others. The problem never quotes the file.
pub fn read_credentials(path: &Path) -> Result<Credentials, String> {
    use std::os::unix::fs::PermissionsExt;
    let key = "credentials_file";
    let meta = std::fs::metadata(path).map_err(|e| format!("{key}: {}: {e}", path.display()))?;
    if let Some(p) =
        accord::config_file::secret_mode_problem(key, path, meta.permissions().mode(), false)
    {
        return Err(p);
    }
    let text = accord_api::files::read_to_string(path, accord_api::files::limit::SECRET)
        .map_err(|e| format!("{key}: {}: {e}", path.display()))?;
    let c: CredentialsFile = accord::config_file::parse(&text, &path.display().to_string())
        .map_err(|e| match e {
            // A TOML error can quote the offending line: the password.
            accord::config_file::ConfigFileError::Parse {
                file, line, column, ..
            } => format!("{key}: {file}:{line}:{column}: not TOML with `username` and `password`"),
            other => format!("{key}: {other}"),
        })?;
    Ok(Credentials {
        username: c.username,
        password: Secret::new(c.password),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: LoginPolicy = LoginPolicy {
        max_failed: 2,
        window: Duration::from_secs(600),
        backoff: Duration::from_secs(30),
    };

    #[test]
    fn failed_logins_are_bounded_per_window_with_backoff() {
        let mut l = Logins::new(None, None);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut tried = 0;
        // A wrong password, asked every 2 s for an hour.
        for s in (0..3600).step_by(2) {
            if l.check(at(s), P).is_ok() {
                tried += 1;
                l.failed(at(s));
            }
        }
        // 2 per 600 s window: at 0 and 30, then 600 and 630, ...
        assert_eq!(tried, 12);
        let mut l = Logins::new(None, None);
        l.failed(at(0));
        assert_eq!(
            l.check(at(10), P).unwrap_err().retry_in,
            Duration::from_secs(20)
        );
        assert!(l.check(at(30), P).is_ok());
        l.failed(at(30));
        let held = l.check(at(31), P).unwrap_err();
        assert_eq!(
            (held.failures, held.retry_in),
            (2, Duration::from_secs(569))
        );
        l.succeeded();
        assert!(l.check(at(32), P).is_ok());
    }
}
