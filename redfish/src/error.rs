//! One error enum for everything that talks to a BMC. Every variant names
//! the BMC (its inventory name) and, where there was one, the URL; no
//! variant can hold a credential (URLs with user info are refused by the
//! inventory, and tokens and passwords are never formatted).

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum RedfishError {
    /// Not sent: this process may not change BMCs now (`WriteGate`).
    #[error("BMC {bmc}: {method} {url}: not sent: {reason}")]
    Refused {
        bmc: String,
        method: &'static str,
        url: String,
        reason: String,
    },
    #[error("BMC {bmc}: {method} {url}: cannot connect{}", attempts_suffix(*attempts))]
    Connect {
        bmc: String,
        method: &'static str,
        url: String,
        attempts: u32,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "BMC {bmc}: {url}: TLS certificate not trusted (give the BMC's CA in ca_file, \
         or set insecure = true for this BMC)"
    )]
    UntrustedCertificate {
        bmc: String,
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("BMC {bmc}: {method} {url}: no answer within {after_ms} ms{}", attempts_suffix(*attempts))]
    Timeout {
        bmc: String,
        method: &'static str,
        url: String,
        after_ms: u64,
        attempts: u32,
    },
    #[error("BMC {bmc}: {method} {url}: HTTP {status}{}{}", message_suffix(message), attempts_suffix(*attempts))]
    Status {
        bmc: String,
        method: &'static str,
        url: String,
        status: u16,
        /// The Redfish `@Message.ExtendedInfo` message (or `error.message`).
        message: Option<String>,
        attempts: u32,
    },
    #[error("BMC {bmc}: {url}: credentials refused (HTTP 401)")]
    Unauthorized { bmc: String, url: String },
    /// No login tried: too many failed ones lately (`crate::login`).
    #[error(
        "BMC {bmc}: not logging in: {failures} failed login(s) within {window_s} s \
         (max_failed_logins); next try in {retry_in_s} s, or at once when its \
         credentials file changes"
    )]
    LoginHeld {
        bmc: String,
        failures: u32,
        window_s: u64,
        retry_in_s: u64,
    },
    #[error("BMC {bmc}: {url}: {reason}")]
    Decode {
        bmc: String,
        url: String,
        reason: String,
    },
    #[error("BMC {bmc}: system {system}: {what}")]
    Unsupported {
        bmc: String,
        system: String,
        what: String,
    },
    #[error(
        "BMC {bmc}: system {system}: power state still {last} after {waited_s} s (wanted {wanted})"
    )]
    NotReached {
        bmc: String,
        system: String,
        wanted: String,
        last: String,
        waited_s: u64,
    },
    #[error("BMC {bmc}: task {url} ended {state}{}", message_suffix(message))]
    TaskFailed {
        bmc: String,
        url: String,
        state: String,
        message: Option<String>,
    },
    #[error("BMC {bmc}: task {url} not finished after {waited_s} s")]
    TaskTimeout {
        bmc: String,
        url: String,
        waited_s: u64,
    },
    /// An answer larger than `limits.max_response_bytes`: refused as soon
    /// as its `Content-Length` says so, else once that many bytes have
    /// been read; the rest is never read.
    #[error(
        "BMC {bmc}: {method} {url}: answer larger than the {limit}-byte limit{} \
         (limits.max_response_bytes)",
        declared_suffix(*declared)
    )]
    TooLarge {
        bmc: String,
        method: &'static str,
        url: String,
        limit: usize,
        /// The `Content-Length` the BMC declared, when it did.
        declared: Option<u64>,
    },
    /// A collection with more members than Accord reads
    /// (`model::MAX_MEMBERS`): refused unwalked, none of its members read.
    #[error("BMC {bmc}: GET {url}: {count} members, more than the {limit} Accord reads; {advice}")]
    TooManyMembers {
        bmc: String,
        /// The collection's URL.
        url: String,
        count: usize,
        limit: usize,
        /// What the admin can do about it.
        advice: &'static str,
    },
    /// The document is not what a Redfish service answers there (HTML,
    /// not JSON, `null`, an array, an object without a service root's
    /// properties): `found` says what came back, escaped.
    #[error("BMC {bmc}: GET {url}: not a Redfish {expected}: {found}")]
    NotRedfish {
        bmc: String,
        url: String,
        expected: &'static str,
        found: String,
    },
}

fn declared_suffix(declared: Option<u64>) -> String {
    declared
        .map(|n| format!(" (Content-Length {n})"))
        .unwrap_or_default()
}

fn attempts_suffix(attempts: u32) -> String {
    if attempts > 1 {
        format!(" ({attempts} attempts)")
    } else {
        String::new()
    }
}

fn message_suffix(message: &Option<String>) -> String {
    message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

impl RedfishError {
    /// Whether retrying the same request may succeed: 5xx (but 501),
    /// timeouts and connection failures. Never a 4xx.
    pub fn is_transient(&self) -> bool {
        match self {
            RedfishError::Connect { .. } | RedfishError::Timeout { .. } => true,
            RedfishError::Status { status, .. } => *status >= 500 && *status != 501,
            _ => false,
        }
    }

    /// Whether the request may have reached the BMC, and been acted on,
    /// though no answer came back: it timed out, or the connection broke
    /// after it was made. A request that changes something (a Reset) is
    /// then not sent again blindly (that could be a second power-on while
    /// the first lands): its outcome is read instead.
    pub fn may_have_reached(&self) -> bool {
        match self {
            RedfishError::Timeout { .. } => true,
            RedfishError::Connect { source, .. } => !source.is_connect(),
            _ => false,
        }
    }

    pub(crate) fn set_attempts(&mut self, n: u32) {
        match self {
            RedfishError::Connect { attempts, .. }
            | RedfishError::Timeout { attempts, .. }
            | RedfishError::Status { attempts, .. } => *attempts = n,
            _ => {}
        }
    }

    /// The HTTP status, when the BMC answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            RedfishError::Status { status, .. } => Some(*status),
            RedfishError::Unauthorized { .. } => Some(401),
            _ => None,
        }
    }

    /// A short stable name for metrics and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            RedfishError::Connect { .. } => "connect",
            RedfishError::UntrustedCertificate { .. } => "untrusted_certificate",
            RedfishError::Timeout { .. } => "timeout",
            RedfishError::Status { .. } => "status",
            RedfishError::Unauthorized { .. } => "unauthorized",
            RedfishError::LoginHeld { .. } => "login_held",
            RedfishError::Decode { .. } => "decode",
            RedfishError::Unsupported { .. } => "unsupported",
            RedfishError::NotReached { .. } => "not_reached",
            RedfishError::TaskFailed { .. } => "task_failed",
            RedfishError::TaskTimeout { .. } => "task_timeout",
            RedfishError::TooLarge { .. } => "too_large",
            RedfishError::TooManyMembers { .. } => "too_many_members",
            RedfishError::NotRedfish { .. } => "not_redfish",
            RedfishError::Refused { .. } => "refused",
        }
    }
}

/// A redacted credential: `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
