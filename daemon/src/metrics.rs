//! Prometheus metrics (`prometheus-client`), served on `GET /metrics`:
//! agent traffic, and what each control round saw and did (nodes by
//! stage, pending workloads by reason, actions, BMC errors, planner time,
//! pending → power-on / Ready / bound, the oldest pending workload's
//! age), and this replica's leadership (`[ha]`: whether it leads, its
//! takeovers and step-downs).

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResult {
    pub kind: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeDriftLabel {
    pub node: String,
    /// `declaration` (report vs fleet file) or `scheduler` (model vs the
    /// Kubernetes Node and its ResourceSlices).
    pub against: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BootLabel {
    pub profile: String,
    pub quantile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcLabel {
    pub bmc: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

pub use accord_decide::metrics::{reason_class, RoundMetrics};

pub struct Metrics {
    registry: Mutex<Registry>,
    pub agent_reports: Counter,
    pub agent_heartbeats: Counter,
    pub pending_workloads: Family<Reason, Gauge>,
    pub nodes_by_stage: Family<StageLabel, Gauge>,
    pub actions: Family<KindResult, Counter>,
    pub bmc_errors: Family<BmcLabel, Counter>,
    pub node_drift: Family<NodeDriftLabel, Gauge>,
    pub bios_profiles: Family<ResultLabel, Counter>,
    pub planner_seconds: Histogram,
    pub pending_to_power_on_seconds: Histogram,
    pub pending_to_ready_seconds: Histogram,
    pub pending_to_bound_seconds: Histogram,
    /// Seconds the oldest workload still pending has waited (as of the
    /// last round; 0 when none is).
    pub oldest_pending_seconds: Gauge<f64, AtomicU64>,
    /// The longest predicted time to capacity (last round).
    pub time_to_capacity_seconds: Gauge<f64, AtomicU64>,
    /// Power-on → Node Ready measured, per profile, median and p90.
    pub boot_ready_seconds: Family<BootLabel, Gauge<f64, AtomicU64>>,
    /// 1 while this replica leads and acts (a single replica always), 0
    /// otherwise.
    pub ha_leading: Gauge,
    /// Terms this replica took over (successful takeovers).
    pub ha_leader_changes: Counter,
    /// Times this replica stopped leading.
    pub ha_step_downs: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("accord");
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            agent_reports: Counter::default(),
            agent_heartbeats: Counter::default(),
            pending_workloads: Family::default(),
            nodes_by_stage: Family::default(),
            actions: Family::default(),
            bmc_errors: Family::default(),
            node_drift: Family::default(),
            bios_profiles: Family::default(),
            // 1 ms … ~33 s
            planner_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            // 0.25 s … ~68 min: GPU servers take minutes to boot.
            pending_to_power_on_seconds: Histogram::new(exponential_buckets(0.25, 2.0, 15)),
            pending_to_ready_seconds: Histogram::new(exponential_buckets(0.25, 2.0, 15)),
            pending_to_bound_seconds: Histogram::new(exponential_buckets(0.25, 2.0, 15)),
            oldest_pending_seconds: Gauge::default(),
            time_to_capacity_seconds: Gauge::default(),
            boot_ready_seconds: Family::default(),
            ha_leading: Gauge::default(),
            ha_leader_changes: Counter::default(),
            ha_step_downs: Counter::default(),
        };
        // A single replica always leads; with `[ha]` the loop says.
        m.ha_leading.set(1);
        r.register(
            "agent_reports",
            "Hardware reports accepted from agents",
            m.agent_reports.clone(),
        );
        r.register(
            "agent_heartbeats",
            "Heartbeats accepted from agents",
            m.agent_heartbeats.clone(),
        );
        r.register(
            "pending_workloads",
            "Pending workloads by reason",
            m.pending_workloads.clone(),
        );
        r.register(
            "nodes",
            "Nodes by lifecycle stage",
            m.nodes_by_stage.clone(),
        );
        r.register(
            "actions",
            "Actions executed, by kind and result",
            m.actions.clone(),
        );
        r.register("bmc_errors", "BMC errors, by BMC", m.bmc_errors.clone());
        r.register(
            "node_drift",
            "Differences between a node's agent report and its declaration, or between its model and the scheduler's view (only nodes with any)",
            m.node_drift.clone(),
        );
        r.register(
            "bios_profiles",
            "BIOS profiles staged with a power-on, verified after it, or failed (did not take)",
            m.bios_profiles.clone(),
        );
        r.register(
            "planner_duration_seconds",
            "Time to plan one round",
            m.planner_seconds.clone(),
        );
        r.register(
            "pending_to_power_on_seconds",
            "From a workload pending to its power-on issued",
            m.pending_to_power_on_seconds.clone(),
        );
        r.register(
            "pending_to_ready_seconds",
            "From a workload pending to its nodes Ready",
            m.pending_to_ready_seconds.clone(),
        );
        r.register(
            "pending_to_bound_seconds",
            "From a workload pending to its pods bound",
            m.pending_to_bound_seconds.clone(),
        );
        r.register(
            "oldest_pending_workload_seconds",
            "Seconds the oldest workload still pending has waited since this accordd first saw it pending (0 when none is; counts afresh after a restart or a takeover)",
            m.oldest_pending_seconds.clone(),
        );
        r.register(
            "time_to_capacity_seconds",
            "The longest predicted time until the nodes a pending workload is placed on are Ready, from the boots measured (0 when none is on its way up)",
            m.time_to_capacity_seconds.clone(),
        );
        r.register(
            "boot_ready_seconds",
            "Power-on to Kubernetes Node Ready measured per hardware profile (the latest 64 boots since accordd started): quantile 0.5 and 0.9",
            m.boot_ready_seconds.clone(),
        );
        r.register(
            "ha_leading",
            "1 while this replica leads and acts (a single replica always), 0 while it follows",
            m.ha_leading.clone(),
        );
        r.register(
            "ha_leader_changes",
            "Terms this replica took over (successful takeovers of the Lease's shared state)",
            m.ha_leader_changes.clone(),
        );
        r.register(
            "ha_step_downs",
            "Times this replica stopped leading (its term ended or a new one began)",
            m.ha_step_downs.clone(),
        );
        *m.registry.lock().expect("lock") = r;
        m
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().expect("lock"))
            .expect("writing to a String");
        out
    }

    /// Whether this replica leads and acts now (`accord_ha_leading`).
    pub fn set_leading(&self, leading: bool) {
        self.ha_leading.set(i64::from(leading));
    }

    /// This replica took a term over and leads
    /// (`accord_ha_leader_changes_total`; leading).
    pub fn took_over(&self) {
        self.ha_leader_changes.inc();
        self.set_leading(true);
    }

    /// This replica stopped leading (`accord_ha_step_downs_total`; not
    /// leading).
    pub fn stepped_down(&self) {
        self.ha_step_downs.inc();
        self.set_leading(false);
    }

    /// What one control round measured (the loop's *effect* calls it
    /// once per round).
    pub fn record_round(&self, m: &RoundMetrics) {
        self.planner_seconds.observe(m.planner_seconds);
        for (node, ok) in &m.power_results {
            let result = if *ok { "ok" } else { "failed" };
            self.actions
                .get_or_create(&KindResult {
                    kind: "power".into(),
                    result: result.into(),
                })
                .inc();
            if !ok {
                self.bmc_errors
                    .get_or_create(&BmcLabel { bmc: node.clone() })
                    .inc();
            }
        }
        for (kind, result) in &m.commands {
            self.actions
                .get_or_create(&KindResult {
                    kind: (*kind).into(),
                    result: (*result).into(),
                })
                .inc();
        }
        for (result, n) in &m.bios_profiles {
            self.bios_profiles
                .get_or_create(&ResultLabel {
                    result: (*result).to_owned(),
                })
                .inc_by(u64::from(*n));
        }
        self.nodes_by_stage.clear();
        for (stage, n) in &m.nodes_by_stage {
            self.nodes_by_stage
                .get_or_create(&StageLabel {
                    stage: stage.clone(),
                })
                .set(i64::from(*n));
        }
        self.pending_workloads.clear();
        for (reason, n) in &m.pending_by_reason {
            self.pending_workloads
                .get_or_create(&Reason {
                    reason: (*reason).to_owned(),
                })
                .set(i64::from(*n));
        }
        self.node_drift.clear();
        for ((node, against), n) in &m.drift {
            self.node_drift
                .get_or_create(&NodeDriftLabel {
                    node: node.clone(),
                    against: (*against).to_owned(),
                })
                .set(i64::from(*n));
        }
        for s in &m.pending_to_power_on {
            self.pending_to_power_on_seconds.observe(*s);
        }
        for s in &m.pending_to_ready {
            self.pending_to_ready_seconds.observe(*s);
        }
        for s in &m.pending_to_bound {
            self.pending_to_bound_seconds.observe(*s);
        }
        self.oldest_pending_seconds.set(m.oldest_pending_seconds);
        self.time_to_capacity_seconds
            .set(m.time_to_capacity_seconds);
        for (profile, (median, p90)) in &m.boot_ready_seconds {
            for (q, v) in [("0.5", median), ("0.9", p90)] {
                self.boot_ready_seconds
                    .get_or_create(&BootLabel {
                        profile: profile.clone(),
                        quantile: q.to_owned(),
                    })
                    .set(*v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leadership_is_exported_a_single_replica_leading() {
        let m = Metrics::new();
        let text = m.encode();
        assert!(text.contains("accord_ha_leading 1\n"), "{text}");
        assert!(
            text.contains("accord_ha_leader_changes_total 0\n"),
            "{text}"
        );
        assert!(text.contains("accord_ha_step_downs_total 0\n"), "{text}");
        m.set_leading(false);
        assert!(m.encode().contains("accord_ha_leading 0\n"));
        m.took_over();
        m.stepped_down();
        m.took_over();
        let text = m.encode();
        assert!(text.contains("accord_ha_leading 1\n"), "{text}");
        assert!(
            text.contains("accord_ha_leader_changes_total 2\n"),
            "{text}"
        );
        assert!(text.contains("accord_ha_step_downs_total 1\n"), "{text}");
        m.stepped_down();
        assert!(m.encode().contains("accord_ha_leading 0\n"));
    }

    #[test]
    fn the_oldest_pending_workload_age_is_the_last_rounds() {
        let m = Metrics::new();
        assert!(
            m.encode()
                .contains("accord_oldest_pending_workload_seconds 0.0\n"),
            "{}",
            m.encode()
        );
        m.record_round(&RoundMetrics {
            oldest_pending_seconds: 1200.5,
            ..RoundMetrics::default()
        });
        let text = m.encode();
        assert!(
            text.contains("# TYPE accord_oldest_pending_workload_seconds gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("accord_oldest_pending_workload_seconds 1200.5\n"),
            "{text}"
        );
        // A round with nothing pending sets it back to 0.
        m.record_round(&RoundMetrics::default());
        assert!(m
            .encode()
            .contains("accord_oldest_pending_workload_seconds 0.0\n"));
    }
}
