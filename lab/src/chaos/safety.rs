//! The chaos run's safety counts, each derived from what the lab itself
//! saw (the BMC proxy's log with each machine's power state when a Reset
//! reached it, the binder's bindings, the agents' exchanges with accordd
//! through the agent proxy, the submissions), never from what accordd
//! says of itself. All must be 0. Pure functions over those observations.

use std::collections::BTreeMap;

use accord::hardware::NodeHardware;
use serde::Serialize;
use tokio::time::Instant;

/// Which way a Reset turns the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetDirection {
    On,
    Off,
    /// ForceRestart, PowerCycle, Nmi, ...: neither.
    Other,
}

impl ResetDirection {
    /// Redfish's `ResetType` values.
    pub fn of(reset_type: &str) -> ResetDirection {
        match reset_type {
            "On" | "ForceOn" | "PushPowerButton" => ResetDirection::On,
            "Off" | "ForceOff" | "GracefulShutdown" => ResetDirection::Off,
            _ => ResetDirection::Other,
        }
    }
}

/// A power Reset that reached a machine (forwarded to the emulator, not
/// answered by the proxy itself).
#[derive(Debug, Clone)]
pub struct ResetReached {
    pub at: Instant,
    pub node: String,
    pub reset_type: String,
    /// The machine's power state when the Reset arrived (the emulator's,
    /// read by the proxy just before forwarding); `None`: unreadable.
    pub machine_on: Option<bool>,
    /// The accordd replica that sent it ([`crate::proxy::Logged::replica`]).
    pub replica: Option<String>,
}

/// One violation, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub node: String,
    pub what: String,
}

/// Power Resets beyond one per power episode of a machine: a power-on
/// Reset reaching a machine that is on, or a second power-on before any
/// power-off; the same for power-off (a ForceOff after a
/// GracefulShutdown while the machine is still on is the escalation, not
/// a second intent). `resets` in the order they reached the machines.
pub fn duplicate_resets(resets: &[ResetReached]) -> Vec<Violation> {
    // Per node: the direction of the last Reset that reached it and its type.
    let mut last: BTreeMap<&str, (ResetDirection, &str)> = BTreeMap::new();
    let mut out = Vec::new();
    for r in resets {
        let dir = ResetDirection::of(&r.reset_type);
        if dir == ResetDirection::Other {
            continue;
        }
        let prev = last.get(r.node.as_str()).copied();
        let why = match dir {
            ResetDirection::On if r.machine_on == Some(true) => {
                Some("a power-on Reset reached a machine that was on".to_owned())
            }
            ResetDirection::On if prev.map(|p| p.0) == Some(ResetDirection::On) => Some(format!(
                "a second power-on Reset ({}) before any power-off (the first: {})",
                r.reset_type,
                prev.map_or("", |p| p.1)
            )),
            ResetDirection::Off if r.machine_on == Some(false) => {
                Some("a power-off Reset reached a machine that was off".to_owned())
            }
            ResetDirection::Off => match prev {
                Some((ResetDirection::Off, "GracefulShutdown")) if r.reset_type == "ForceOff" => {
                    None
                }
                Some((ResetDirection::Off, first)) => Some(format!(
                    "a second power-off Reset ({}) before any power-on (the first: {first})",
                    r.reset_type
                )),
                _ => None,
            },
            _ => None,
        };
        if let Some(why) = why {
            out.push(Violation {
                node: r.node.clone(),
                what: format!("{} {}: {why}", r.reset_type, r.node),
            });
        }
        last.insert(&r.node, (dir, &r.reset_type));
    }
    out
}

/// A pod bound to a node, from when the binder bound it until it was
/// deleted or evicted (`None`: still bound).
#[derive(Debug, Clone)]
pub struct BindingSpan {
    pub pod: String,
    pub node: String,
    pub from: Instant,
    pub until: Option<Instant>,
}

/// Power-off Resets (Off, ForceOff, GracefulShutdown) that reached a
/// machine while pods were bound to it.
pub fn busy_nodes_powered_off(resets: &[ResetReached], bindings: &[BindingSpan]) -> Vec<Violation> {
    resets
        .iter()
        .filter(|r| ResetDirection::of(&r.reset_type) == ResetDirection::Off)
        .filter_map(|r| {
            let pods: Vec<&str> = bindings
                .iter()
                .filter(|b| b.node == r.node && b.from <= r.at && b.until.is_none_or(|u| u > r.at))
                .map(|b| b.pod.as_str())
                .collect();
            (!pods.is_empty()).then(|| Violation {
                node: r.node.clone(),
                what: format!(
                    "{} reached {} while pods were bound to it: {}",
                    r.reset_type,
                    r.node,
                    pods.join(", ")
                ),
            })
        })
        .collect()
}

/// One hardware report an agent sent accordd, as the agent proxy saw it.
#[derive(Debug, Clone)]
pub struct ReportExchange {
    pub node: String,
    pub sent_at: Instant,
    /// When accordd answered (any status); `None`: no answer (accordd
    /// died, or the connection broke).
    pub answered_at: Option<Instant>,
    /// accordd's answer was a 2xx: the report is acknowledged.
    pub acknowledged: bool,
    /// The hardware it carried, canonical order.
    pub hardware: NodeHardware,
    /// The generation accordd answered with (a 2xx's).
    pub generation: Option<u64>,
}

/// What accordd has for a node now (`GET /v1/nodes/{name}`): its
/// generation and hardware (canonical order); `None`: it knows no such
/// node.
pub type Stored = Option<(u64, NodeHardware)>;

/// Acknowledged reports accordd no longer has. For each node, take the
/// last acknowledged report A: accordd must still hold a generation at
/// least A's, and hardware equal to A's or to a report that may have been
/// stored after A (one not answered before A was sent: accordd stores one
/// report at a time, so only those can have come last). A node whose
/// `stored` entry is missing is not checked (not read).
pub fn acknowledged_reports_lost(
    exchanges: &[ReportExchange],
    stored: &BTreeMap<String, Stored>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for (node, now) in stored {
        let mine: Vec<&ReportExchange> = exchanges.iter().filter(|e| &e.node == node).collect();
        let Some(last) = mine
            .iter()
            .filter(|e| e.acknowledged)
            .max_by_key(|e| e.sent_at)
        else {
            continue;
        };
        let acked_generation = last.generation.unwrap_or(0);
        let Some((generation, hardware)) = now else {
            out.push(Violation {
                node: node.clone(),
                what: format!(
                    "{node}: a report acknowledged at generation {acked_generation} and accordd \
                     knows no such node"
                ),
            });
            continue;
        };
        if *generation < acked_generation {
            out.push(Violation {
                node: node.clone(),
                what: format!(
                    "{node}: a report acknowledged at generation {acked_generation}, accordd \
                     has generation {generation}"
                ),
            });
            continue;
        }
        let may_be_last = mine
            .iter()
            .filter(|e| e.answered_at.is_none_or(|t| t > last.sent_at) || e.sent_at >= last.sent_at)
            .any(|e| &e.hardware == hardware);
        if !may_be_last {
            out.push(Violation {
                node: node.clone(),
                what: format!(
                    "{node}: accordd's hardware (generation {generation}) is neither the last \
                     acknowledged report's (generation {acked_generation}) nor one sent after it"
                ),
            });
        }
    }
    out
}

/// A submission as the lab saw it.
#[derive(Debug, Clone)]
pub struct SubmissionSeen {
    pub name: String,
    /// The scenario says it can be placed (`placeable`, default true).
    pub placeable: bool,
    pub submitted: bool,
    /// All its pods were bound at some moment.
    pub bound: bool,
}

/// Placeable submissions that were submitted and never had all their
/// pods bound.
pub fn workloads_never_bound(subs: &[SubmissionSeen]) -> Vec<Violation> {
    subs.iter()
        .filter(|s| s.placeable && s.submitted && !s.bound)
        .map(|s| Violation {
            node: String::new(),
            what: format!("{}: placeable, never bound", s.name),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reset(t0: Instant, ms: u64, node: &str, rt: &str, on: bool) -> ResetReached {
        ResetReached {
            at: t0 + Duration::from_millis(ms),
            node: node.into(),
            reset_type: rt.into(),
            machine_on: Some(on),
            replica: None,
        }
    }

    #[test]
    fn one_reset_per_episode_is_not_a_duplicate() {
        let t0 = Instant::now();
        let resets = [
            reset(t0, 0, "n1", "On", false),
            reset(t0, 10, "n2", "On", false),
            reset(t0, 5000, "n1", "GracefulShutdown", true),
            // The escalation while the machine is still on.
            reset(t0, 6000, "n1", "ForceOff", true),
            reset(t0, 9000, "n1", "On", false),
            // Neither way: not counted, not an episode.
            reset(t0, 9500, "n2", "ForceRestart", true),
        ];
        assert_eq!(duplicate_resets(&resets), []);
    }

    #[test]
    fn a_duplicate_reset_is_counted() {
        let t0 = Instant::now();
        // A second On before the first landed (the machine still off).
        let d = duplicate_resets(&[
            reset(t0, 0, "n1", "On", false),
            reset(t0, 500, "n1", "On", false),
        ]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].what.contains("second power-on"), "{d:?}");
        // An On to a machine that is on (no earlier Reset seen).
        let d = duplicate_resets(&[reset(t0, 0, "n1", "On", true)]);
        assert_eq!(d.len(), 1, "{d:?}");
        // The same for power-off: to a machine already off, and twice.
        let d = duplicate_resets(&[reset(t0, 0, "n1", "GracefulShutdown", false)]);
        assert_eq!(d.len(), 1, "{d:?}");
        let d = duplicate_resets(&[
            reset(t0, 0, "n1", "GracefulShutdown", true),
            reset(t0, 100, "n1", "GracefulShutdown", true),
        ]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].node, "n1");
    }

    #[test]
    fn a_power_off_of_a_busy_node_is_counted() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let bindings = [
            BindingSpan {
                pod: "ml/a-0".into(),
                node: "n1".into(),
                from: at(1000),
                until: Some(at(5000)),
            },
            BindingSpan {
                pod: "ml/b-0".into(),
                node: "n2".into(),
                from: at(1000),
                until: None,
            },
        ];
        let resets = [
            // Before the pod, after it, and an On while busy: fine.
            reset(t0, 500, "n1", "GracefulShutdown", true),
            reset(t0, 5000, "n1", "ForceOff", true),
            reset(t0, 2000, "n1", "On", true),
            // While bound.
            reset(t0, 3000, "n1", "Off", true),
            reset(t0, 9000, "n2", "GracefulShutdown", true),
        ];
        let v = busy_nodes_powered_off(&resets, &bindings);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].what.contains("ml/a-0") && v[1].what.contains("ml/b-0"),
            "{v:?}"
        );
    }

    fn hw(gpus: usize) -> NodeHardware {
        let mut h: NodeHardware =
            serde_json::from_str(include_str!("../../../tests/fixtures/models/dgx2.json"))
                .expect("fixture model");
        h.gpus.truncate(gpus);
        h
    }

    fn exchange(
        t0: Instant,
        sent: u64,
        answered: Option<u64>,
        ok: bool,
        gpus: usize,
        generation: u64,
    ) -> ReportExchange {
        ReportExchange {
            node: "n1".into(),
            sent_at: t0 + Duration::from_millis(sent),
            answered_at: answered.map(|a| t0 + Duration::from_millis(a)),
            acknowledged: ok,
            hardware: hw(gpus),
            generation: ok.then_some(generation),
        }
    }

    #[test]
    fn a_lost_acknowledged_report_is_counted() {
        let t0 = Instant::now();
        let stored = |g, gpus| BTreeMap::from([("n1".to_owned(), Some((g, hw(gpus))))]);
        let log = [
            exchange(t0, 0, Some(10), true, 8, 1),
            exchange(t0, 100, Some(110), true, 7, 2),
        ];
        // Kept: fine.
        assert_eq!(acknowledged_reports_lost(&log, &stored(2, 7)), []);
        // Back to the earlier report's content: lost.
        assert_eq!(acknowledged_reports_lost(&log, &stored(2, 8)).len(), 1);
        // A lower generation: lost.
        assert_eq!(acknowledged_reports_lost(&log, &stored(1, 7)).len(), 1);
        // Forgotten altogether: lost.
        let gone = BTreeMap::from([("n1".to_owned(), None)]);
        assert_eq!(acknowledged_reports_lost(&log, &gone).len(), 1);
        // A later report accordd stored but never answered (it died):
        // that may be what it has.
        let mut later = log.to_vec();
        later.push(exchange(t0, 200, None, false, 6, 0));
        assert_eq!(acknowledged_reports_lost(&later, &stored(3, 6)), []);
        // Nothing acknowledged: nothing to lose.
        let none = [exchange(t0, 0, None, false, 8, 0)];
        assert_eq!(
            acknowledged_reports_lost(&none, &BTreeMap::from([("n1".to_owned(), None)])),
            []
        );
    }

    #[test]
    fn a_placeable_workload_never_bound_is_counted() {
        let s = |name: &str, placeable, submitted, bound| SubmissionSeen {
            name: name.into(),
            placeable,
            submitted,
            bound,
        };
        let v = workloads_never_bound(&[
            s("a", true, true, true),
            s("huge", false, true, false),
            s("later", true, false, false),
            s("stuck", true, true, false),
        ]);
        assert_eq!(v.len(), 1);
        assert!(v[0].what.starts_with("stuck"), "{v:?}");
    }
}
