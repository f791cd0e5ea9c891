//! What Accord publishes on a Node and which keys it owns there: topology
//! labels, the GPU model, reservations' labels and taints.

use super::*;

/// Node labels the kubelet or the cloud provider sets, that Accord never
/// owns (validation rejects a topology key naming one).
/// `topology.kubernetes.io/zone` and `/region` are not here: an admin may
/// map a level to them explicitly (`also_label`), and then Accord owns
/// them.
pub const KUBERNETES_SET_LABELS: [&str; 7] = [
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
];

/// Whether `key` is a valid Kubernetes label key: an optional DNS
/// subdomain prefix (at most 253 characters, lowercase) and `/`, then a
/// name of at most 63 characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let dns_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(dns_label));
    prefix_ok && !name.is_empty() && valid_label_value(name)
}

/// Whether `value` is a valid Kubernetes label value: at most 63
/// characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, or empty.
pub fn valid_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    let end = |c: &u8| c.is_ascii_alphanumeric();
    value.len() <= 63
        && (b.is_empty()
            || (b.first().is_some_and(end)
                && b.last().is_some_and(end)
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))))
}

/// Taints the node lifecycle controller sets for a Node's readiness: a
/// powered-off or booting machine's Node keeps them until its kubelet
/// reports Ready. Accord models power and boot itself (the node's
/// lifecycle), so a scheduler view's taints of these keys are not the
/// node's: left in, an off node would never fit and never be powered on.
/// The condition taints for pressure (`memory-pressure`, `disk-pressure`,
/// `pid-pressure`) and `network-unavailable` stay: they describe a running
/// node. `node.kubernetes.io/unschedulable` (a cordon) is an admin's
/// choice and stays too.
pub const READINESS_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// The taint kube-scheduler's NodeUnschedulable filter treats a cordon as
/// (`pkg/scheduler/framework/plugins/nodeunschedulable`).
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

/// The Node annotation (`"true"`) by which an admin keeps Accord from
/// powering the node off or repairing it.
pub const DO_NOT_DISRUPT: &str = "accord.dev/do-not-disrupt";

/// A readiness taint, or Accord's [`STARTING_TAINT_KEY`] (lifted by
/// Accord as the node comes up): neither keeps work off a node for good.
pub fn is_readiness_taint(key: &str) -> bool {
    READINESS_TAINTS.contains(&key) || key == STARTING_TAINT_KEY
}

/// Whether Accord owns Node taints with `key`: [`RESERVATION_KEY`],
/// [`BIOS_TAINT_KEY`], [`POWERING_OFF_TAINT_KEY`] and
/// [`STARTING_TAINT_KEY`].
pub fn owns_taint(key: &str) -> bool {
    key == RESERVATION_KEY
        || key == BIOS_TAINT_KEY
        || key == POWERING_OFF_TAINT_KEY
        || key == STARTING_TAINT_KEY
}

/// `s` as a valid label value: spaces become `-`, other characters than
/// `[A-Za-z0-9._-]` are dropped, at most 63 characters, starting and
/// ending alphanumeric (`"NVIDIA H100 80GB HBM3"` → `"NVIDIA-H100-80GB-HBM3"`).
/// Empty when nothing is left.
pub fn label_value(s: &str) -> String {
    let kept: String = s
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') => Some(c),
            _ => None,
        })
        .take(63)
        .collect();
    kept.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}
