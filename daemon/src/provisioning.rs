//! ProvisioningRequest conditions, as cluster-autoscaler's provisioning
//! classes define them and Kueue's ProvisioningRequest admission check
//! reads them (pure: what Accord planned in, the conditions to write out).
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

use accord_kube::manifests::ProvisioningRequest;
use accord_kube::translate::{ACCORD_STRICT, BEST_EFFORT_ATOMIC, CHECK_CAPACITY};
use accord_kube::write::ProvisioningCondition;

use crate::controller::WorkloadStatus;

/// What the round knows about one request.
#[derive(Debug)]
pub struct Seen<'a> {
    pub pr: &'a ProvisioningRequest,
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
}

fn cond(type_: &str, status: bool, reason: &str, message: String) -> ProvisioningCondition {
    ProvisioningCondition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
    }
}

/// The conditions that differ from what the request shows now.
pub fn conditions(s: &Seen) -> Vec<ProvisioningCondition> {
    let class = s.pr.spec.provisioning_class_name.as_str();
    if !matches!(class, CHECK_CAPACITY | BEST_EFFORT_ATOMIC | ACCORD_STRICT) {
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
                "BookingExpired",
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
        match (class, w.state.as_str()) {
            (CHECK_CAPACITY, _) => {
                if s.fits_now == Some(true) {
                    want.push(cond(
                        "Provisioned",
                        true,
                        "CapacityIsFound",
                        format!("fits on {} now", w.nodes.join(", ")),
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
            (ACCORD_STRICT, "cannot_place") => want.push(cond(
                "Failed",
                true,
                "CapacityIsNotFound",
                w.reason.clone().unwrap_or_default(),
            )),
            (_, "cannot_place") => want.push(cond(
                "Provisioned",
                false,
                "CapacityIsNotFound",
                w.reason.clone().unwrap_or_default(),
            )),
            _ if s.nodes_up && !w.nodes.is_empty() => want.push(cond(
                "Provisioned",
                true,
                "Provisioned",
                format!("capacity ready on {}", w.nodes.join(", ")),
            )),
            _ => want.push(cond(
                "Provisioned",
                false,
                "Provisioning",
                if w.powering_on.is_empty() {
                    format!("waiting for {} to become Ready", w.nodes.join(", "))
                } else {
                    format!("powering on {}", w.powering_on.join(", "))
                },
            )),
        }
    }
    want.retain(|c| {
        !s.pr.status.conditions.iter().any(|have| {
            have.type_ == c.type_
                && (have.status == "True") == c.status
                && have.reason.as_deref() == Some(c.reason.as_str())
                && have.message.as_deref() == Some(c.message.as_str())
        })
    });
    want
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(class: &str, conditions: serde_json::Value) -> ProvisioningRequest {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "team-b", "name": "job-1-prov"},
            "spec": {"provisioningClassName": class, "podSets": []},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn workload(state: &str) -> WorkloadStatus {
        WorkloadStatus {
            workload: "team-b/job-1-prov".into(),
            source: None,
            pods: 2,
            min: 2,
            state: state.into(),
            nodes: vec!["n1".into(), "n2".into()],
            powering_on: if state == "powering_on" {
                vec!["n2".into()]
            } else {
                vec![]
            },
            domain: None,
            reason: (state == "cannot_place").then(|| "no room".into()),
            pending_s: 0.0,
        }
    }

    fn seen<'a>(pr: &'a ProvisioningRequest, w: Option<&'a WorkloadStatus>) -> Seen<'a> {
        Seen {
            pr,
            workload: w,
            cannot_plan: None,
            nodes_up: false,
            fits_now: None,
            booking_expired: false,
        }
    }

    fn kinds(c: &[ProvisioningCondition]) -> Vec<(String, bool, String)> {
        c.iter()
            .map(|c| (c.type_.clone(), c.status, c.reason.clone()))
            .collect()
    }

    #[test]
    fn atomic_goes_accepted_provisioning_provisioned_then_expires() {
        let p = pr(BEST_EFFORT_ATOMIC, serde_json::json!([]));
        let w = workload("powering_on");
        let c = conditions(&seen(&p, Some(&w)));
        assert_eq!(
            kinds(&c),
            [
                ("Accepted".into(), true, "Accepted".into()),
                ("Provisioned".into(), false, "Provisioning".into())
            ]
        );
        assert_eq!(c[1].message, "powering on n2");
        let w = workload("placed");
        let mut s = seen(&p, Some(&w));
        s.nodes_up = true;
        assert_eq!(
            kinds(&conditions(&s))[1],
            ("Provisioned".into(), true, "Provisioned".into())
        );
        // Provisioned: nothing more until the booking runs out.
        let p = pr(
            BEST_EFFORT_ATOMIC,
            serde_json::json!([{"type": "Provisioned", "status": "True", "reason": "Provisioned"}]),
        );
        assert!(conditions(&seen(&p, None)).is_empty());
        let mut s = seen(&p, None);
        s.booking_expired = true;
        assert_eq!(
            kinds(&conditions(&s)),
            [("BookingExpired".into(), true, "BookingExpired".into())]
        );
    }

    #[test]
    fn what_cannot_be_placed_waits_or_fails_by_class() {
        let w = workload("cannot_place");
        let best = pr(BEST_EFFORT_ATOMIC, serde_json::json!([]));
        assert_eq!(
            kinds(&conditions(&seen(&best, Some(&w))))[1],
            ("Provisioned".into(), false, "CapacityIsNotFound".into())
        );
        let strict = pr(ACCORD_STRICT, serde_json::json!([]));
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
        let p = pr(CHECK_CAPACITY, serde_json::json!([]));
        let w = workload("powering_on");
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
    }

    #[test]
    fn unchanged_conditions_are_not_written_and_other_classes_are_left_alone() {
        let p = pr(
            BEST_EFFORT_ATOMIC,
            serde_json::json!([
                {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "accordd plans capacity for it"},
                {"type": "Provisioned", "status": "False", "reason": "Provisioning", "message": "powering on n2"}
            ]),
        );
        let w = workload("powering_on");
        assert!(conditions(&seen(&p, Some(&w))).is_empty());
        let other = pr("queued-provisioning.gke.io", serde_json::json!([]));
        assert!(conditions(&seen(&other, Some(&w))).is_empty());
    }
}
