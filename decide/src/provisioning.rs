//! ProvisioningRequest conditions, as cluster-autoscaler's provisioning
//! classes define them and Kueue's ProvisioningRequest admission check
//! reads them (pure: what Accord planned in, the conditions to write out;
//! *observe* turns the Kubernetes object into [`ProvisioningSeen`]).
//!
//! - `check-capacity.autoscaling.x-k8s.io`: Provisioned=True when the pods
//!   fit on nodes that are up now (nothing is powered on for it), else
//!   Provisioned=False `CapacityIsNotFound`; checked again each round.
//! - `best-effort-atomic-scale-up.autoscaling.x-k8s.io` and Accord's
//!   `strict-atomic.accord.dev`: all or nothing. Accepted, then
//!   Provisioned=False `Provisioning` while its nodes come up, Provisioned
//!   =True once every node it was planned on is Ready. The capacity is then
//!   booked (its nodes are not powered off) for the booking time, after
//!   which BookingExpired=True. When it cannot be placed: best-effort keeps
//!   Provisioned=False `CapacityIsNotFound` and tries again; strict fails
//!   at once (Failed=True).
//! - A class Accord does not serve is left alone (another provisioner's).

use std::collections::BTreeSet;

use accord::demand::ObjectRef;
use accord_api::control::{WorkloadState, WorkloadStatus};
use serde::{Deserialize, Serialize};

/// The classes Accord serves (`spec.provisioningClassName`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisioningClass {
    /// `check-capacity.autoscaling.x-k8s.io`
    CheckCapacity,
    /// `best-effort-atomic-scale-up.autoscaling.x-k8s.io`
    BestEffortAtomic,
    /// `strict-atomic.accord.dev`
    AccordStrict,
    /// Another provisioner's: left alone.
    Other(String),
}

/// One condition a request shows now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSeen {
    pub type_: String,
    pub status: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Unix seconds of `lastTransitionTime`, when it parses.
    pub last_transition: Option<u64>,
}

/// A ProvisioningRequest as the round sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisioningSeen {
    pub request: ObjectRef,
    pub class: ProvisioningClass,
    /// `parameters.noRetry: "true"` (check-capacity only, as in
    /// cluster-autoscaler): capacity not found fails the request.
    pub no_retry: bool,
    pub conditions: Vec<ConditionSeen>,
}

impl ProvisioningSeen {
    /// The condition `type_` is True.
    pub fn is(&self, type_: &str) -> bool {
        self.conditions.iter().any(|c| c.type_ == type_ && c.status)
    }

    /// When it became Provisioned, if it is.
    pub fn provisioned_at(&self) -> Option<u64> {
        self.conditions
            .iter()
            .find(|c| c.type_ == "Provisioned" && c.status)
            .and_then(|c| c.last_transition)
    }
}

/// A condition to write: the core's one type.
pub use accord::conditions::Condition;

/// What the round knows about one request.
#[derive(Debug)]
pub struct Seen<'a> {
    pub pr: &'a ProvisioningSeen,
    /// Its pending workload in this round's plan.
    pub workload: Option<&'a WorkloadStatus>,
    /// Why it cannot be planned at all (bad template, ...).
    pub cannot_plan: Option<&'a str>,
    /// Every node the plan puts it on is Ready (or in use, or idle).
    pub nodes_up: bool,
    /// check-capacity: it fits on nodes that are up now.
    pub fits_now: Option<bool>,
    /// Its booking has run out.
    pub booking_expired: bool,
    /// When its nodes are expected Ready, from the boots measured.
    pub expected_ready: Option<ExpectedReady>,
}

/// When a request's nodes on their way up are expected Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedReady {
    /// By this instant (Unix s).
    By(u64),
    /// Past the 90th percentile of the boots measured: any moment.
    Overdue,
}

fn cond(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
    }
}

/// The conditions that differ from what the request shows now.
pub fn conditions(s: &Seen) -> Vec<Condition> {
    if let ProvisioningClass::Other(_) = s.pr.class {
        return Vec::new();
    }
    let mut want = Vec::new();
    if s.pr.is("Failed") || s.pr.is("BookingExpired") {
        return Vec::new();
    }
    if s.pr.is("Provisioned") {
        if s.booking_expired {
            want.push(cond(
                "BookingExpired",
                true,
                "CapacityReservationTimeExpired",
                "the capacity was held for the booking time and is released".into(),
            ));
        }
    } else if let Some(reason) = s.cannot_plan {
        want.push(cond("Accepted", true, "Accepted", "read by accordd".into()));
        want.push(cond("Failed", true, "InvalidRequest", reason.to_owned()));
    } else if let Some(w) = s.workload {
        want.push(cond(
            "Accepted",
            true,
            "Accepted",
            "accordd plans capacity for it".into(),
        ));
        match (&s.pr.class, w.state) {
            (ProvisioningClass::CheckCapacity, _) => {
                if s.fits_now == Some(true) {
                    want.push(cond(
                        "Provisioned",
                        true,
                        "CapacityIsFound",
                        format!("fits on {} now", w.nodes.join(", ")),
                    ));
                } else if s.pr.no_retry {
                    // Failed=True is what makes Kueue retry with backoff
                    // (cluster-autoscaler's checkcapacity/provisioningclass.go).
                    want.push(cond(
                        "Failed",
                        true,
                        "CapacityIsNotFound",
                        "does not fit on the nodes that are up, and noRetry is set".into(),
                    ));
                } else {
                    want.push(cond(
                        "Provisioned",
                        false,
                        "CapacityIsNotFound",
                        "does not fit on the nodes that are up (check-capacity powers nothing on)"
                            .into(),
                    ));
                }
            }
            (ProvisioningClass::AccordStrict, WorkloadState::CannotPlace) => want.push(cond(
                "Failed",
                true,
                "CapacityIsNotFound",
                w.reason.clone().unwrap_or_default(),
            )),
            (_, WorkloadState::CannotPlace) => want.push(cond(
                "Provisioned",
                false,
                "CapacityIsNotFound",
                w.reason.clone().unwrap_or_default(),
            )),
            // The capacity the plan counts is a MIG repartition under
            // way: Provisioned only once the node's report shows it.
            (_, WorkloadState::Repartitioning) => want.push(cond(
                "Provisioned",
                false,
                "Provisioning",
                format!("repartitioning MIG on {}", w.nodes.join(", ")),
            )),
            // cluster-autoscaler's reason once its scale-up is done
            // (provisioningrequest/conditions/conditions.go).
            _ if s.nodes_up && !w.nodes.is_empty() => want.push(cond(
                "Provisioned",
                true,
                "CapacityIsProvisioned",
                format!("capacity ready on {}", w.nodes.join(", ")),
            )),
            _ => want.push(cond(
                "Provisioned",
                false,
                "Provisioning",
                format!(
                    "{}{}",
                    if w.powering_on.is_empty() {
                        format!("waiting for {} to become Ready", w.nodes.join(", "))
                    } else {
                        format!("powering on {}", w.powering_on.join(", "))
                    },
                    // An instant, not a countdown: the message (and so the
                    // write) changes only when the prediction does.
                    match s.expected_ready {
                        Some(ExpectedReady::By(at)) => format!(
                            "; expected Ready by {} (from the boots measured)",
                            crate::boot_times::utc(at)
                        ),
                        Some(ExpectedReady::Overdue) => "; expected Ready any moment (past the \
                             90th percentile of the boots measured)"
                            .to_owned(),
                        None => String::new(),
                    }
                ),
            )),
        }
    }
    want.retain(|c| {
        !s.pr.conditions.iter().any(|have| {
            have.type_ == c.type_
                && have.status == c.status
                && have.reason.as_deref() == Some(c.reason.as_str())
                && have.message.as_deref() == Some(c.message.as_str())
        })
    });
    want
}

/// A Provisioned request's nodes and until when they are held (kept by
/// accordd's store, tree `bookings`).
/// Provisioned requests' nodes, and what the store was last given.
#[derive(Debug, Default)]
pub(crate) struct Bookings {
    /// Provisioned request (`ns/name`) → its nodes and when the booking ends.
    pub(crate) booked: std::collections::BTreeMap<String, (BTreeSet<String>, u64)>,
    pub(crate) saved: std::collections::BTreeMap<String, (BTreeSet<String>, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    pub nodes: BTreeSet<String>,
    /// Unix seconds.
    pub until: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEST_EFFORT_ATOMIC: ProvisioningClass = ProvisioningClass::BestEffortAtomic;
    const ACCORD_STRICT: ProvisioningClass = ProvisioningClass::AccordStrict;
    const CHECK_CAPACITY: ProvisioningClass = ProvisioningClass::CheckCapacity;

    /// `conditions`: (type, status, reason, message).
    fn pr(class: ProvisioningClass, conditions: &[(&str, bool, &str, &str)]) -> ProvisioningSeen {
        ProvisioningSeen {
            request: ObjectRef::new(
                "autoscaling.x-k8s.io/v1",
                "ProvisioningRequest",
                "team-b",
                "job-1-prov",
            ),
            class,
            no_retry: false,
            conditions: conditions
                .iter()
                .map(|(t, s, r, m)| ConditionSeen {
                    type_: (*t).into(),
                    status: *s,
                    reason: Some((*r).into()),
                    message: (!m.is_empty()).then(|| (*m).into()),
                    last_transition: None,
                })
                .collect(),
        }
    }

    fn workload(state: WorkloadState) -> WorkloadStatus {
        WorkloadStatus {
            capacity_in_s: None,
            workload: "team-b/job-1-prov".into(),
            sources: Vec::new(),
            pods: 2,
            min: 2,
            state,
            nodes: vec!["n1".into(), "n2".into()],
            powering_on: if state == WorkloadState::PoweringOn {
                vec!["n2".into()]
            } else {
                vec![]
            },
            domain: None,
            reason: (state == WorkloadState::CannotPlace).then(|| "no room".into()),
            approximation: None,
            pending_s: 0.0,
        }
    }

    fn seen<'a>(pr: &'a ProvisioningSeen, w: Option<&'a WorkloadStatus>) -> Seen<'a> {
        Seen {
            pr,
            workload: w,
            cannot_plan: None,
            nodes_up: false,
            fits_now: None,
            booking_expired: false,
            expected_ready: None,
        }
    }

    fn kinds(c: &[Condition]) -> Vec<(String, bool, String)> {
        c.iter()
            .map(|c| (c.type_.clone(), c.status, c.reason.clone()))
            .collect()
    }

    #[test]
    fn capacity_a_mig_repartition_makes_is_not_provisioned_until_it_is_there() {
        for class in [BEST_EFFORT_ATOMIC, ACCORD_STRICT] {
            let p = pr(class, &[]);
            let w = workload(WorkloadState::Repartitioning);
            // The nodes are up: the MIG devices are not there yet.
            let mut s = seen(&p, Some(&w));
            s.nodes_up = true;
            let c = conditions(&s);
            assert_eq!(
                kinds(&c)[1],
                ("Provisioned".into(), false, "Provisioning".into())
            );
            assert_eq!(c[1].message, "repartitioning MIG on n1, n2");
        }
    }

    #[test]
    fn a_provisioning_message_says_when_the_capacity_is_expected() {
        let p = pr(BEST_EFFORT_ATOMIC, &[]);
        let w = workload(WorkloadState::PoweringOn);
        let mut s = seen(&p, Some(&w));
        s.expected_ready = Some(ExpectedReady::By(1_796_527_800));
        let c = conditions(&s);
        assert_eq!(
            c[1].message,
            "powering on n2; expected Ready by 2026-12-06T03:30:00Z (from the boots measured)"
        );
        s.expected_ready = Some(ExpectedReady::Overdue);
        let c = conditions(&s);
        assert!(
            c[1].message.ends_with(
                "; expected Ready any moment (past the 90th percentile of the boots measured)"
            ),
            "{}",
            c[1].message
        );
    }

    #[test]
    fn atomic_goes_accepted_provisioning_provisioned_then_expires() {
        let p = pr(BEST_EFFORT_ATOMIC, &[]);
        let w = workload(WorkloadState::PoweringOn);
        let c = conditions(&seen(&p, Some(&w)));
        assert_eq!(
            kinds(&c),
            [
                ("Accepted".into(), true, "Accepted".into()),
                ("Provisioned".into(), false, "Provisioning".into())
            ]
        );
        assert_eq!(c[1].message, "powering on n2");
        let w = workload(WorkloadState::Placed);
        let mut s = seen(&p, Some(&w));
        s.nodes_up = true;
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Provisioned".into(), true, "CapacityIsProvisioned".into())
        );
        // Provisioned: nothing more until the booking runs out.
        let p = pr(
            BEST_EFFORT_ATOMIC,
            &[("Provisioned", true, "CapacityIsProvisioned", "")],
        );
        assert!(conditions(&seen(&p, None)).is_empty());
        let mut s = seen(&p, None);
        s.booking_expired = true;
        assert_eq!(
            kinds(&conditions(&s)),
            [(
                "BookingExpired".into(),
                true,
                "CapacityReservationTimeExpired".into()
            )]
        );
    }

    #[test]
    fn what_cannot_be_placed_waits_or_fails_by_class() {
        let w = workload(WorkloadState::CannotPlace);
        let best = pr(BEST_EFFORT_ATOMIC, &[]);
        assert_eq!(
            kinds(&conditions(&seen(&best, Some(&w))))[1],
            ("Provisioned".into(), false, "CapacityIsNotFound".into())
        );
        let strict = pr(ACCORD_STRICT, &[]);
        assert_eq!(
            kinds(&conditions(&seen(&strict, Some(&w))))[1],
            ("Failed".into(), true, "CapacityIsNotFound".into())
        );
        let mut s = seen(&best, None);
        s.cannot_plan = Some("PodTemplate team-b/x not found");
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Failed".into(), true, "InvalidRequest".into())
        );
    }

    #[test]
    fn check_capacity_never_waits_for_power_ons() {
        let p = pr(CHECK_CAPACITY, &[]);
        let w = workload(WorkloadState::PoweringOn);
        let mut s = seen(&p, Some(&w));
        s.fits_now = Some(false);
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Provisioned".into(), false, "CapacityIsNotFound".into())
        );
        s.fits_now = Some(true);
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Provisioned".into(), true, "CapacityIsFound".into())
        );
        // noRetry: not found fails it, so Kueue retries with backoff (as
        // cluster-autoscaler's check-capacity class does).
        let mut p = pr(CHECK_CAPACITY, &[]);
        p.no_retry = true;
        let mut s = seen(&p, Some(&w));
        s.fits_now = Some(false);
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Failed".into(), true, "CapacityIsNotFound".into())
        );
        s.fits_now = Some(true);
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Provisioned".into(), true, "CapacityIsFound".into())
        );
    }

    #[test]
    fn unchanged_conditions_are_not_written_and_other_classes_are_left_alone() {
        let p = pr(
            BEST_EFFORT_ATOMIC,
            &[
                (
                    "Accepted",
                    true,
                    "Accepted",
                    "accordd plans capacity for it",
                ),
                ("Provisioned", false, "Provisioning", "powering on n2"),
            ],
        );
        let w = workload(WorkloadState::PoweringOn);
        assert!(conditions(&seen(&p, Some(&w))).is_empty());
        let other = pr(
            ProvisioningClass::Other("queued-provisioning.gke.io".into()),
            &[],
        );
        assert!(conditions(&seen(&other, Some(&w))).is_empty());
    }
}
