//! Waiting on the lab: until the scenario settles (the summary then), until
//! accordd's status or the lab itself shows something, each with a
//! deadline whose error names what it waited for, with accordd's state and
//! log; at once if accordd exits.

use std::collections::BTreeSet;
use std::time::Duration;

use accord_api::control::{ControlStatus, WorkloadState};
use tokio::time::Instant;

use crate::{workload_keys, Lab, Summary};

/// How long past the idle power-off time an idle node stays on before the
/// lab calls it left on.
pub(crate) const LEFT_ON_GRACE: Duration = Duration::from_secs(20);

impl Lab {
    /// Whether every submission is done: finished, or pending while
    /// accordd says it cannot be placed.
    fn scenario_done(&self, status: Option<&ControlStatus>) -> bool {
        let r = self.record.lock().expect("lock");
        r.subs.iter().all(|s| {
            if s.finished.is_some() {
                return true;
            }
            if s.submitted.is_none() || s.bound.is_some() {
                return false;
            }
            let keys = workload_keys(s);
            status.is_some_and(|st| {
                !keys.is_empty()
                    && keys.iter().all(|k| {
                        st.workloads
                            .iter()
                            .any(|w| &w.workload == k && w.state == WorkloadState::CannotPlace)
                    })
            })
        })
    }

    /// Every node off, or on with none of the scenario's pods and nothing
    /// coming up. With `dark`, every node off, but for one accordd leaves
    /// on: idle [`LEFT_ON_GRACE`] past the idle power-off time, it is left
    /// on for good (an admin's cordon keeps it so; any other the summary
    /// calls a finding: [`Lab::findings`]).
    fn fleet_settled(&self, dark: bool) -> bool {
        let mut r = self.record.lock().expect("lock");
        let now = Instant::now();
        let busy: BTreeSet<String> = r.bound.values().map(|(_, _, n)| n.clone()).collect();
        let left_on_after =
            Duration::from_secs(self.fleet.policy.idle_power_off_after_s) + LEFT_ON_GRACE;
        let mut settled = true;
        for (name, n) in r.nodes.iter_mut() {
            let idle = n.on && n.registered && !busy.contains(name);
            if !idle {
                n.idle_since = None;
            } else if n.idle_since.is_none() {
                n.idle_since = Some(now);
            }
            let left_on = idle
                && n.idle_since
                    .is_some_and(|t| now.duration_since(t) >= left_on_after);
            settled &= !n.on || (idle && (!dark || left_on));
        }
        settled
    }

    /// accordd's requests the upstream apiserver refused (403): the lab
    /// fails on the first, as the admin's cluster would fail accordd.
    pub fn refused(&self) -> anyhow::Result<()> {
        let Some(u) = self.api.upstream() else {
            return Ok(());
        };
        let refused = crate::upstream::refusals(u);
        if refused.is_empty() {
            return Ok(());
        }
        anyhow::bail!(
            "the apiserver refused accordd (403, as {}): {}; deploy/rbac.yaml lacks what accordd uses",
            crate::upstream::accordd_user(),
            refused.join("; ")
        )
    }

    /// What keeps the scenario from settling: submissions not done, nodes
    /// busy or on their way up.
    fn unsettled(&self) -> String {
        let r = self.record.lock().expect("lock");
        let mut out = Vec::new();
        for (sub, s) in self.scenario.submit.iter().zip(&r.subs) {
            if s.finished.is_some() {
                continue;
            }
            let state = match (s.submitted, s.bound) {
                (None, _) => "not submitted".to_owned(),
                (Some(_), None) => format!("{} pods not all bound", s.pods.len()),
                (Some(_), Some(_)) => "running".to_owned(),
            };
            out.push(format!("{}: {state}", sub.name));
        }
        let busy: BTreeSet<&str> = r.bound.values().map(|(_, _, n)| n.as_str()).collect();
        for (name, n) in &r.nodes {
            if n.on && !n.registered {
                out.push(format!("{name}: on, its Node not registered yet"));
            } else if n.on && busy.contains(name.as_str()) {
                out.push(format!("{name}: on, with pods"));
            }
        }
        if out.is_empty() {
            "accordd has power actions in flight, or nodes are on".to_owned()
        } else {
            out.join("; ")
        }
    }

    /// Runs until the scenario is done and every node is idle or off (and
    /// accordd has no power action in flight); with `dark`, until every
    /// node is off. In a chaos run, the fault schedule runs beside it, and
    /// the scenario is not done before the schedule is; the summary then
    /// has the `chaos` section. With several replicas and a fault for the
    /// leader (`[lab.ha]`), the fault is driven beside it too, and the
    /// scenario does not settle while it is under way. Errors after
    /// `lab.max_s`, or if accordd exits (other than killed by the chaos
    /// or the fault).
    pub async fn run_until_idle(&self, dark: bool) -> anyhow::Result<Summary> {
        let chaos = self.drive_chaos();
        tokio::pin!(chaos);
        let ha = self.drive_ha();
        tokio::pin!(ha);
        let settled = self.settle(dark);
        tokio::pin!(settled);
        let mut chaos_done = false;
        let mut ha_done = false;
        let summary = loop {
            tokio::select! {
                r = &mut chaos, if !chaos_done => {
                    r?;
                    chaos_done = true;
                }
                r = &mut ha, if !ha_done => {
                    r?;
                    ha_done = true;
                }
                s = &mut settled => break s?,
            }
        };
        let mut summary = summary;
        summary.chaos = self.chaos_summary().await;
        Ok(summary)
    }

    /// [`Lab::run_until_idle`]'s wait.
    async fn settle(&self, dark: bool) -> anyhow::Result<Summary> {
        let deadline = self.started + Duration::from_secs(self.scenario.lab.max_s);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if self.daemon_exited().is_some() {
                anyhow::bail!("the scenario did not settle: {}", self.daemon_report());
            }
            self.refused()?;
            let status = self.status().await;
            let quiet = status.as_ref().is_some_and(|s| s.open_intents.is_empty());
            let chaos_done = self.chaos.as_ref().is_none_or(|c| c.done());
            if chaos_done
                && !self.ha_busy()
                && quiet
                && self.scenario_done(status.as_ref())
                && self.fleet_settled(dark)
            {
                let summary = self.summary(status.as_ref());
                return Ok(summary);
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the scenario did not settle within lab.max_s = {} s ({}{}{}); {}",
                    self.scenario.lab.max_s,
                    self.unsettled(),
                    if self.chaos.as_ref().is_some_and(|c| !c.done()) {
                        "; the chaos schedule is not done"
                    } else {
                        ""
                    },
                    if self.ha_busy() {
                        "; the fault for the leader is under way"
                    } else {
                        ""
                    },
                    self.daemon_report()
                );
            }
        }
    }

    /// Waits until `cond` holds for accordd's status, up to `timeout`;
    /// the error names `what` was waited for, with accordd's last status,
    /// its state and its log ([`Lab::daemon_report`]). Fails at once if
    /// accordd exits.
    pub async fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&ControlStatus) -> bool,
    ) -> anyhow::Result<ControlStatus> {
        let end = Instant::now() + timeout;
        loop {
            let status = self.status().await;
            if let Some(s) = &status {
                if cond(s) {
                    return Ok(status.expect("checked"));
                }
            }
            if self.daemon_exited().is_some() {
                anyhow::bail!("waiting for {what}: {}", self.daemon_report());
            }
            self.refused()?;
            if Instant::now() > end {
                anyhow::bail!(
                    "waited {timeout:?} for {what}; accordd's last status:\n{}\n{}",
                    status
                        .as_ref()
                        .map(accord_api::text::render_status)
                        .unwrap_or_else(|| "(none)".into()),
                    self.daemon_report()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `cond` holds for the lab itself (its machines, the
    /// fake API, the proxy's log), up to `timeout`; the error names `what`
    /// was waited for, with accordd's state and log. Fails at once if
    /// accordd exits.
    pub async fn wait_lab(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&Lab) -> bool,
    ) -> anyhow::Result<()> {
        let end = Instant::now() + timeout;
        loop {
            if cond(self) {
                return Ok(());
            }
            if self.daemon_exited().is_some() {
                anyhow::bail!("waiting for {what}: {}", self.daemon_report());
            }
            self.refused()?;
            if Instant::now() > end {
                anyhow::bail!("waited {timeout:?} for {what}; {}", self.daemon_report());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
