//! What Accord does to a machine through its BMC. Every action reads the
//! state first and sends nothing when the machine is already there; every
//! power change is verified by polling until the BMC shows it (BMCs take
//! 5–60 s) or the configured timeout passes.

use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::client::Bmc;
use crate::error::RedfishError;
use crate::model::{self, Bios, PowerState, ResetTypesFrom, SystemInfo};

/// What a power action did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PowerOutcome {
    pub bmc: String,
    pub system: String,
    /// The state read before acting.
    pub before: PowerState,
    /// The reset types sent, in order (empty: the machine was already there).
    pub sent: Vec<String>,
    pub after: PowerState,
    /// Time from the first request to the verified state.
    pub took_ms: u64,
    /// Time from the first request until the BMC accepted the last Reset.
    pub accepted_ms: Option<u64>,
    pub dry_run: bool,
}

/// What a BIOS change did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BiosOutcome {
    pub bmc: String,
    /// Attributes that differ from what is wanted (and were sent, unless a
    /// dry run).
    pub changes: Map<String, Value>,
    /// Attributes the BIOS does not have (not sent).
    pub unknown: Vec<String>,
    pub target: Option<String>,
    /// `@Redfish.SettingsApplyTime` sent with the change (`OnReset` where
    /// the Bios resource advertises it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_time: Option<String>,
    pub sent: bool,
    pub dry_run: bool,
}

/// [`RedfishError::TooManyMembers`]' advice for a Systems collection.
pub(crate) const SET_SYSTEM: &str =
    "set `system` in the inventory to the Id or path of the system to manage";

impl Bmc {
    /// The system this BMC manages: the configured Id or path, else the
    /// Systems collection's only member, or only member with a Reset action.
    pub async fn system_path(&self) -> Result<&str, RedfishError> {
        self.system_path
            .get_or_try_init(|| async {
                let systems = self.systems_collection().await?;
                if let Some(sys) = &self.target.system {
                    if sys.starts_with('/') {
                        return Ok(model::normalize_path(sys, &mut Vec::new(), "system"));
                    }
                    return Ok(format!("{systems}/{sys}"));
                }
                let reply = self.get(&systems).await?;
                let members =
                    self.members_of(&systems, &reply.body, &mut Vec::new(), SET_SYSTEM)?;
                if members.len() == 1 {
                    return Ok(members[0].clone());
                }
                let mut resettable = Vec::new();
                for m in &members {
                    let s = self.get(m).await?;
                    if model::parse_system(m, &s.body).reset_target.is_some() {
                        resettable.push(m.clone());
                    }
                }
                match resettable.len() {
                    1 => Ok(resettable.remove(0)),
                    _ => Err(RedfishError::Unsupported {
                        bmc: self.name().to_owned(),
                        system: systems.clone(),
                        what: format!(
                            "{} systems ({}), {} with a Reset action; set `system` in the \
                             inventory to choose one",
                            members.len(),
                            model::some_of(&members),
                            resettable.len()
                        ),
                    }),
                }
            })
            .await
            .map(String::as_str)
    }

    /// A collection's members, or [`RedfishError::TooManyMembers`] (none
    /// of them read) past [`model::MAX_MEMBERS`].
    pub(crate) fn members_of(
        &self,
        path: &str,
        collection: &Value,
        notes: &mut Vec<String>,
        advice: &'static str,
    ) -> Result<Vec<String>, RedfishError> {
        model::members(collection, notes).map_err(|count| RedfishError::TooManyMembers {
            bmc: self.name().to_owned(),
            url: self.url(path),
            count,
            limit: model::MAX_MEMBERS,
            advice,
        })
    }

    async fn systems_collection(&self) -> Result<String, RedfishError> {
        let root = self.root().await?;
        Ok(root
            .systems
            .clone()
            .unwrap_or_else(|| "/redfish/v1/Systems".to_owned()))
    }

    /// The system, with its reset types resolved through ActionInfo when
    /// that is the only place they are given.
    pub async fn system(&self) -> Result<SystemInfo, RedfishError> {
        let path = self.system_path().await?.to_owned();
        self.system_at(&path).await
    }

    pub async fn system_at(&self, path: &str) -> Result<SystemInfo, RedfishError> {
        let reply = self.get(path).await?;
        let mut info = model::parse_system(path, &reply.body);
        if info.etag.is_none() {
            info.etag = reply.etag;
        }
        if info.reset_types_from == ResetTypesFrom::ActionInfo {
            let at = info.action_info.clone().expect("set with ActionInfo");
            match self.get(&at).await {
                Ok(r) => {
                    let types = model::parse_action_info(&r.body, &mut info.notes);
                    info.notes
                        .push(format!("reset types read from @Redfish.ActionInfo {at}"));
                    info.reset_types = types;
                }
                Err(e) if e.status().is_some() => {
                    info.reset_types = model::ASSUMED_RESET_TYPES
                        .iter()
                        .map(|s| (*s).to_owned())
                        .collect();
                    info.reset_types_from = ResetTypesFrom::Assumed;
                    info.notes.push(format!(
                        "ActionInfo {at} unreadable (HTTP {}); assuming the Redfish baseline",
                        e.status().unwrap_or(0)
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(info)
    }

    pub async fn power_state(&self) -> Result<PowerState, RedfishError> {
        Ok(self.system().await?.power_state)
    }

    fn unsupported(&self, system: &SystemInfo, what: String) -> RedfishError {
        RedfishError::Unsupported {
            bmc: self.name().to_owned(),
            system: system.path.clone(),
            what,
        }
    }

    async fn reset(&self, system: &SystemInfo, reset_type: &str) -> Result<(), RedfishError> {
        let target = system
            .reset_target
            .clone()
            .ok_or_else(|| self.unsupported(system, "no #ComputerSystem.Reset action".into()))?;
        info!(bmc = %self.name(), system = %system.path, reset_type, "sending Reset");
        match self
            .change(
                Method::POST,
                &target,
                &json!({ "ResetType": reset_type }),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            // The BMC may have taken it (the answer timed out, or the
            // connection broke after the request went): sending it again
            // could be a second power-on while the first lands. Every
            // caller polls the power state next, and sends the Reset once
            // more only if nothing changes for `resend_after`.
            Err(e) if e.may_have_reached() => {
                warn!(bmc = %self.name(), system = %system.path, reset_type, error = %e,
                      "Reset sent, no answer: reading the power state rather than sending it again");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Polls until the system shows `wanted` or `timeout` passes. When
    /// `resend` names the reset type just sent and the system still shows
    /// the state it had before after `resend_after`, the Reset is sent once
    /// more (BMCs do drop accepted commands; sushy-emulator's fake driver
    /// loses one in a race). Never for PushPowerButton, which toggles.
    /// Returns the state and the reset type re-sent, if any.
    async fn wait_for(
        &self,
        system: &SystemInfo,
        wanted: PowerState,
        timeout: Duration,
        resend: Option<&str>,
    ) -> Result<(PowerState, Option<String>), RedfishError> {
        let start = Instant::now();
        let deadline = start + timeout;
        let resend_after = self.settings().resend_after;
        let mut resent = None;
        loop {
            let state = self.system_at(&system.path).await?.power_state;
            if state == wanted {
                return Ok((state, resent));
            }
            if Instant::now() >= deadline {
                return Err(RedfishError::NotReached {
                    bmc: self.name().to_owned(),
                    system: system.path.clone(),
                    wanted: wanted.to_string(),
                    last: state.to_string(),
                    waited_s: timeout.as_secs(),
                });
            }
            if let Some(rt) = resend {
                if resent.is_none()
                    && rt != "PushPowerButton"
                    && !resend_after.is_zero()
                    && start.elapsed() >= resend_after
                    && state == system.power_state
                {
                    warn!(bmc = %self.name(), system = %system.path, reset_type = rt,
                          waited_s = start.elapsed().as_secs(), "no change since the Reset; sending it again");
                    self.reset(system, rt).await?;
                    resent = Some(rt.to_owned());
                }
            }
            tokio::time::sleep(self.settings().poll_interval).await;
        }
    }

    /// Powers the machine on with the first of On, ForceOn, PushPowerButton
    /// it advertises, and waits until it shows On. Sends nothing when it is
    /// On already (or on its way, then only waits).
    pub async fn power_on(&self, dry_run: bool) -> Result<PowerOutcome, RedfishError> {
        let start = Instant::now();
        let system = self.system().await?;
        let before = system.power_state.clone();
        let mut sent = Vec::new();
        let mut accepted_ms = None;
        if before != PowerState::On && before != PowerState::PoweringOn {
            let choice = model::choose_reset_types(&system.reset_types);
            let reset_type = choice.on.ok_or_else(|| {
                self.unsupported(
                    &system,
                    format!("no power-on reset type among {:?}", system.reset_types),
                )
            })?;
            sent.push(reset_type.clone());
            if !dry_run {
                self.reset(&system, &reset_type).await?;
                accepted_ms = Some(start.elapsed().as_millis() as u64);
            }
        }
        let after = if dry_run || before == PowerState::On {
            before.clone()
        } else {
            let (state, resent) = self
                .wait_for(
                    &system,
                    PowerState::On,
                    self.settings().power_on_timeout,
                    sent.first().map(String::as_str),
                )
                .await?;
            sent.extend(resent);
            state
        };
        let mut o = self.outcome(&system, before, sent, after, start, dry_run);
        o.accepted_ms = accepted_ms;
        Ok(o)
    }

    /// Waits for a power change someone (a previous run of Accord, before a
    /// crash) already asked for, without asking again at once: the Reset is
    /// sent only if nothing changes for `resend_after` (it may never have
    /// left). `on`: the wanted state is On, else Off (ForceOff if resent).
    pub async fn verify_power(&self, on: bool) -> Result<PowerOutcome, RedfishError> {
        let start = Instant::now();
        let system = self.system().await?;
        let before = system.power_state.clone();
        let wanted = if on { PowerState::On } else { PowerState::Off };
        if before == wanted {
            return Ok(self.outcome(&system, before.clone(), Vec::new(), before, start, false));
        }
        let choice = model::choose_reset_types(&system.reset_types);
        let reset = if on { choice.on } else { choice.forced_off };
        let timeout = if on {
            self.settings().power_on_timeout
        } else {
            self.settings().power_off_timeout
        };
        let (after, resent) = self
            .wait_for(&system, wanted, timeout, reset.as_deref())
            .await?;
        Ok(self.outcome(
            &system,
            before,
            resent.into_iter().collect(),
            after,
            start,
            false,
        ))
    }

    /// Graceful shutdown (when advertised), then — after the graceful
    /// timeout, if configured — ForceOff; waits until the machine shows
    /// Off. Sends nothing when it is Off already. `force`: ForceOff at once.
    pub async fn power_off(
        &self,
        force: bool,
        dry_run: bool,
    ) -> Result<PowerOutcome, RedfishError> {
        let start = Instant::now();
        let system = self.system().await?;
        let before = system.power_state.clone();
        let s = self.settings().clone();
        let mut sent = Vec::new();
        if before == PowerState::Off {
            return Ok(self.outcome(&system, before.clone(), sent, before, start, dry_run));
        }
        let choice = model::choose_reset_types(&system.reset_types);
        if !force && before != PowerState::PoweringOff {
            if let Some(graceful) = &choice.graceful_off {
                sent.push(graceful.clone());
                if dry_run {
                    return Ok(self.outcome(&system, before.clone(), sent, before, start, true));
                }
                let graceful_result = match self.reset(&system, graceful).await {
                    Ok(()) => {
                        self.wait_for(&system, PowerState::Off, s.graceful_timeout, None)
                            .await
                    }
                    Err(e) => Err(e),
                };
                match graceful_result {
                    Ok((after, _)) => {
                        return Ok(self.outcome(&system, before, sent, after, start, false))
                    }
                    Err(e) if !s.force_after_graceful => return Err(e),
                    Err(e) if e.is_transient() => return Err(e),
                    Err(e) => {
                        warn!(bmc = %self.name(), system = %system.path, error = %e,
                              "graceful shutdown did not finish; forcing off");
                    }
                }
            }
        }
        let forced = choice.forced_off.ok_or_else(|| {
            self.unsupported(
                &system,
                format!("no ForceOff among {:?}", system.reset_types),
            )
        })?;
        sent.push(forced.clone());
        if dry_run {
            return Ok(self.outcome(&system, before.clone(), sent, before, start, true));
        }
        self.reset(&system, &forced).await?;
        let (after, resent) = self
            .wait_for(&system, PowerState::Off, s.power_off_timeout, Some(&forced))
            .await?;
        sent.extend(resent);
        Ok(self.outcome(&system, before, sent, after, start, false))
    }

    /// Off (graceful, then forced), then On; only On when it is Off.
    pub async fn power_cycle(&self, dry_run: bool) -> Result<PowerOutcome, RedfishError> {
        let start = Instant::now();
        let mut off = self.power_off(false, dry_run).await?;
        if dry_run {
            let system = self.system().await?;
            off.sent
                .extend(model::choose_reset_types(&system.reset_types).on);
            return Ok(off);
        }
        let on = self.power_on(false).await?;
        off.sent.extend(on.sent);
        Ok(PowerOutcome {
            before: off.before,
            sent: off.sent,
            took_ms: start.elapsed().as_millis() as u64,
            ..on
        })
    }

    fn outcome(
        &self,
        system: &SystemInfo,
        before: PowerState,
        sent: Vec<String>,
        after: PowerState,
        start: Instant,
        dry_run: bool,
    ) -> PowerOutcome {
        PowerOutcome {
            bmc: self.name().to_owned(),
            system: system.path.clone(),
            before,
            sent,
            after,
            took_ms: start.elapsed().as_millis() as u64,
            accepted_ms: None,
            dry_run,
        }
    }

    /// One-time boot override (e.g. `Pxe` for re-imaging), applied at the
    /// next boot. Nothing is sent when it is set already.
    pub async fn boot_once(&self, target: &str, dry_run: bool) -> Result<bool, RedfishError> {
        let system = self.system().await?;
        if !system.boot_targets.is_empty() && !system.boot_targets.iter().any(|t| t == target) {
            return Err(self.unsupported(
                &system,
                format!("boot target {target} not among {:?}", system.boot_targets),
            ));
        }
        if system.boot_override_enabled.as_deref() == Some("Once")
            && system.boot_override_target.as_deref() == Some(target)
        {
            return Ok(false);
        }
        if !dry_run {
            let body = json!({"Boot": {"BootSourceOverrideEnabled": "Once",
                                        "BootSourceOverrideTarget": target}});
            self.change(Method::PATCH, &system.path, &body, system.etag.as_deref())
                .await?;
        }
        Ok(true)
    }

    /// The BIOS attributes and where changes go.
    pub async fn bios(&self) -> Result<Bios, RedfishError> {
        let system = self.system().await?;
        let path = system
            .bios
            .clone()
            .ok_or_else(|| self.unsupported(&system, "no Bios resource".into()))?;
        let reply = self.get(&path).await?;
        let mut bios = model::parse_bios(&path, &reply.body);
        if bios.etag.is_none() {
            bios.etag = reply.etag;
        }
        Ok(bios)
    }

    /// The attributes staged and not yet applied (the `@Redfish.Settings`
    /// object's), with that object's ETag. A BMC that has no settings
    /// object, or answers 404 for it, has nothing pending.
    pub async fn bios_pending(
        &self,
        bios: &Bios,
    ) -> Result<(Map<String, Value>, Option<String>), RedfishError> {
        let Some(target) = bios.settings_target.as_deref().filter(|t| *t != bios.path) else {
            return Ok((Map::new(), bios.etag.clone()));
        };
        match self.get(target).await {
            Ok(r) => {
                let p = model::parse_bios(target, &r.body);
                Ok((p.attributes, p.etag.or(r.etag)))
            }
            Err(e) if e.status() == Some(404) => Ok((Map::new(), None)),
            Err(e) => Err(e),
        }
    }

    /// Stages BIOS attributes through the `@Redfish.Settings` object (PATCH
    /// with If-Match when it has an ETag); they apply at the next reset.
    /// Only attributes that differ from both the current and the already
    /// pending values are sent; nothing when none differ. Where the Bios
    /// resource advertises `OnReset` among its `SupportedApplyTimes`, the
    /// PATCH says so (`@Redfish.SettingsApplyTime`): some BMCs otherwise
    /// wait for a maintenance window or an explicit job.
    pub async fn apply_bios(
        &self,
        wanted: &Map<String, Value>,
        dry_run: bool,
    ) -> Result<BiosOutcome, RedfishError> {
        let bios = self.bios().await?;
        let target = bios.settings_target.clone().unwrap_or(bios.path.clone());
        let (pending, etag) = self.bios_pending(&bios).await?;
        let mut changes = Map::new();
        let mut unknown = Vec::new();
        for (k, v) in wanted {
            match bios.attributes.get(k) {
                None => unknown.push(k.clone()),
                Some(cur) if cur == v => {}
                Some(_) if pending.get(k) == Some(v) => {}
                Some(_) => {
                    changes.insert(k.clone(), v.clone());
                }
            }
        }
        let apply_time = bios
            .apply_times
            .iter()
            .any(|t| t == "OnReset")
            .then(|| "OnReset".to_owned());
        let send = !changes.is_empty() && !dry_run;
        if send {
            info!(bmc = %self.name(), target = %target, attributes = changes.len(), apply_time = apply_time.as_deref().unwrap_or("-"), "staging BIOS attributes");
            let mut body = json!({ "Attributes": changes });
            if let Some(t) = &apply_time {
                body["@Redfish.SettingsApplyTime"] = json!({ "ApplyTime": t });
            }
            self.change(Method::PATCH, &target, &body, etag.as_deref())
                .await?;
        }
        Ok(BiosOutcome {
            bmc: self.name().to_owned(),
            changes,
            unknown,
            target: Some(target),
            apply_time,
            sent: send,
            dry_run,
        })
    }

    /// Watts the machine's chassis draws, where the BMC reports it.
    pub async fn power_watts(&self) -> Result<Option<f64>, RedfishError> {
        let system = self.system().await?;
        self.power_watts_for(&system).await
    }

    /// [`Bmc::power_watts`] for a system already read: its `Links.Chassis`,
    /// else every chassis; `EnvironmentMetrics` before the legacy `Power`.
    /// At most [`model::MAX_MEMBERS`] chassis are read (`parse_system`
    /// keeps no more links; a longer Chassis collection is refused).
    pub async fn power_watts_for(&self, system: &SystemInfo) -> Result<Option<f64>, RedfishError> {
        let mut chassis = system.chassis.clone();
        if chassis.is_empty() {
            if let Some(c) = self.root().await?.chassis.clone() {
                match self.get(&c).await {
                    Ok(r) => {
                        chassis = self.members_of(
                            &c,
                            &r.body,
                            &mut Vec::new(),
                            "chassis power is not read from it",
                        )?
                    }
                    Err(e) if e.status().is_some() => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
        }
        for c in chassis {
            let doc = match self.get(&c).await {
                Ok(r) => r.body,
                Err(e) if e.status().is_some() => continue,
                Err(e) => return Err(e),
            };
            for key in ["EnvironmentMetrics", "Power"] {
                let Some(path) = model::link(&doc, key, &mut Vec::new()) else {
                    continue;
                };
                match self.get(&path).await {
                    Ok(r) => {
                        if let Some(w) = model::parse_power_watts(&r.body) {
                            return Ok(Some(w));
                        }
                    }
                    Err(e) if e.status().is_some() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(None)
    }
}
