//! `accordctl bmc probe`: what an admin checks on a new BMC before adding
//! it to the inventory — and what Accord had to tolerate to read it.

use serde::Serialize;

use crate::client::Bmc;
use crate::error::RedfishError;
use crate::model::{self, ResetChoice, ServiceRoot, SystemInfo};

#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub endpoint: String,
    pub root: ServiceRoot,
    /// Whether an X-Auth-Token session could be made (`None`: no
    /// credentials given).
    pub auth: String,
    pub systems: Vec<ProbedSystem>,
    /// Every repair made while reading, per document.
    pub tolerated: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ProbedSystem {
    pub system: SystemInfo,
    pub would_use: ResetChoice,
    pub bios_settings_target: Option<String>,
    pub bios_attributes: Option<usize>,
    pub power_watts: Option<f64>,
    pub problems: Vec<String>,
}

pub async fn probe(bmc: &Bmc) -> Result<ProbeReport, RedfishError> {
    let root = bmc.root().await?.clone();
    let mut tolerated: Vec<String> = root
        .notes
        .iter()
        .map(|n| format!("service root: {n}"))
        .collect();
    let systems_path = root
        .systems
        .clone()
        .unwrap_or_else(|| "/redfish/v1/Systems".to_owned());
    let collection = bmc.get(&systems_path).await?;
    let mut notes = Vec::new();
    let members = bmc.members_of(
        &systems_path,
        &collection.body,
        &mut notes,
        crate::ops::SET_SYSTEM,
    )?;
    tolerated.extend(notes.into_iter().map(|n| format!("{systems_path}: {n}")));
    let mut systems = Vec::new();
    for m in members {
        let system = bmc.system_at(&m).await?;
        tolerated.extend(system.notes.iter().map(|n| format!("{m}: {n}")));
        if !system.oem_actions.is_empty() {
            tolerated.push(format!(
                "{m}: OEM actions {} beside the standard ones (not used)",
                system.oem_actions.join(", ")
            ));
        }
        let would_use = model::choose_reset_types(&system.reset_types);
        let mut problems = Vec::new();
        if system.reset_target.is_some() {
            if would_use.on.is_none() {
                problems.push("no reset type Accord can power on with".to_owned());
            }
            if would_use.graceful_off.is_none() {
                problems.push("no GracefulShutdown: power-off will be forced".to_owned());
            }
            if would_use.forced_off.is_none() {
                problems.push("no ForceOff".to_owned());
            }
        }
        let (mut bios_settings_target, mut bios_attributes) = (None, None);
        if let Some(b) = &system.bios {
            match bmc.get(b).await {
                Ok(r) => {
                    let bios = model::parse_bios(b, &r.body);
                    tolerated.extend(bios.notes.iter().map(|n| format!("{b}: {n}")));
                    bios_attributes = Some(bios.attributes.len());
                    bios_settings_target = bios.settings_target;
                }
                Err(e) => problems.push(format!("BIOS unreadable: {e}")),
            }
        }
        systems.push(ProbedSystem {
            system,
            would_use,
            bios_settings_target,
            bios_attributes,
            power_watts: None,
            problems,
        });
    }
    // Chassis power once per BMC: it belongs to the chassis, not a system.
    if let Some(first) = systems.iter_mut().find(|s| s.system.reset_target.is_some()) {
        first.power_watts = bmc.power_watts_for(&first.system).await?;
    }
    let auth = bmc.auth_mode().await?;
    Ok(ProbeReport {
        endpoint: bmc.url(""),
        root,
        auth,
        systems,
        tolerated,
    })
}

impl ProbeReport {
    /// The report for people.
    pub fn render(&self) -> String {
        let r = &self.root;
        let mut out = format!(
            "BMC {}\n  vendor: {}  product: {}  Redfish {}\n  auth: {}\n",
            self.endpoint,
            r.vendor.as_deref().unwrap_or("-"),
            r.product.as_deref().unwrap_or("-"),
            r.redfish_version.as_deref().unwrap_or("?"),
            self.auth
        );
        for s in &self.systems {
            let sys = &s.system;
            out.push_str(&format!(
                "\nsystem {} ({})\n  model: {} {}\n  power: {}\n",
                sys.id.as_deref().unwrap_or("?"),
                sys.path,
                sys.manufacturer.as_deref().unwrap_or("-"),
                sys.model.as_deref().unwrap_or("-"),
                sys.power_state
            ));
            match &sys.reset_target {
                None => out.push_str("  reset: no Reset action (not a system Accord can power)\n"),
                Some(t) => {
                    out.push_str(&format!(
                        "  reset: {t}\n  reset types ({}): {}\n",
                        serde_json::to_value(&sys.reset_types_from)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        sys.reset_types.join(", ")
                    ));
                    let w = &s.would_use;
                    out.push_str(&format!(
                        "  Accord would use: on = {}, graceful off = {}, forced off = {}\n",
                        w.on.as_deref().unwrap_or("(none)"),
                        w.graceful_off.as_deref().unwrap_or("(none)"),
                        w.forced_off.as_deref().unwrap_or("(none)")
                    ));
                }
            }
            if !sys.boot_targets.is_empty() {
                out.push_str(&format!(
                    "  boot override targets: {}\n",
                    sys.boot_targets.join(", ")
                ));
            }
            match (&sys.bios, &s.bios_attributes) {
                (Some(b), Some(n)) => out.push_str(&format!(
                    "  BIOS: {b} ({n} attributes), settings target: {}\n",
                    s.bios_settings_target
                        .as_deref()
                        .unwrap_or("(the Bios resource itself)")
                )),
                (Some(b), None) => out.push_str(&format!("  BIOS: {b} (unreadable)\n")),
                (None, _) => out.push_str("  BIOS: none\n"),
            }
            if sys.reset_target.is_some() {
                out.push_str(&format!(
                    "  chassis power: {}\n",
                    s.power_watts
                        .map_or("not reported".to_owned(), |w| format!("{w} W"))
                ));
            }
            for p in &s.problems {
                out.push_str(&format!("  problem: {p}\n"));
            }
        }
        if self.tolerated.is_empty() {
            out.push_str("\ntolerated: nothing\n");
        } else {
            out.push_str("\ntolerated:\n");
            for t in &self.tolerated {
                out.push_str(&format!("  - {t}\n"));
            }
        }
        out
    }
}
