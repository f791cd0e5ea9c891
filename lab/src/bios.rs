//! The lab's BIOS: sushy-emulator's fake driver has none (its `/BIOS`
//! routes need a driver that implements it), so the BMC proxy serves one
//! Bios resource per system, the way firmware does: `GET …/Bios` (the
//! current `Attributes`, `@Redfish.Settings` naming the settings object
//! and `SupportedApplyTimes: ["OnReset"]`, an ETag), `GET …/Bios/Settings`
//! (the staged attributes) and `PATCH …/Bios/Settings` (If-Match checked).
//! Staged attributes become current at the system's next power-on Reset,
//! except on machines set `bios_never_applies`, whose BIOS drops them (and
//! says so in `@Redfish.Settings.Messages`, as DMTF's mockup does).
//!
//! Also from the scenario: each machine's initial attributes, the BIOS
//! profiles written into accordd's BMC inventory, and the taint a
//! machine's kubelet registers its Node with when the fleet wants a BIOS
//! profile on it (`--register-with-taints`), which accordd lifts once the
//! profile is verified.

use std::collections::BTreeMap;

use accord::fleet::Fleet;
use accord::truth::BIOS_TAINT_KEY;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::Scenario;

/// A BIOS profile of the scenario (`[lab.bios_profiles.NAME]`), written
/// into accordd's BMC inventory as `[bios_profiles.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BiosProfileSpec {
    #[serde(default)]
    pub description: String,
    /// Attribute names and values, as the lab's Bios resources name them.
    pub attributes: Map<String, Value>,
}

/// Every machine's BIOS attributes at the start, unless the scenario says
/// otherwise (`[lab] bios`, `[lab.machines.NODE] bios`).
pub fn default_attributes() -> Map<String, Value> {
    [
        ("BootMode", json!("Uefi")),
        ("LogicalProc", json!("Enabled")),
        ("ProcCStates", json!("Enabled")),
        ("ProcTurboMode", json!("Enabled")),
        ("SriovGlobalEnable", json!("Disabled")),
        ("SysProfile", json!("Balanced")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The scenario's BIOS problems, each naming its key.
pub(crate) fn problems(s: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    let value_ok = |v: &Value| matches!(v, Value::String(_) | Value::Bool(_) | Value::Number(_));
    let mut check = |key: String, attrs: &Map<String, Value>| {
        for (k, v) in attrs {
            if !value_ok(v) {
                out.push(format!(
                    "{key}.{k}: a BIOS attribute is a string, a number or a boolean"
                ));
            }
        }
    };
    for (name, p) in &s.lab.bios_profiles {
        check(
            format!("lab.bios_profiles.{name}.attributes"),
            &p.attributes,
        );
    }
    if let Some(a) = &s.lab.bios {
        check("lab.bios".to_owned(), a);
    }
    for (node, m) in &s.lab.machines {
        if let Some(a) = &m.bios {
            check(format!("lab.machines.{node}.bios"), a);
        }
    }
    for n in &s.fleet.nodes {
        if let Some(p) = &n.bios_profile {
            if !s.lab.bios_profiles.contains_key(p) {
                out.push(format!(
                    "fleet.nodes.{}.bios_profile: no [lab.bios_profiles.{p}] (the lab writes accordd's BMC inventory from those)",
                    n.name
                ));
            }
        }
    }
    out
}

/// `[bios_profiles.NAME]` tables for accordd's BMC inventory (empty when
/// the scenario has none).
pub(crate) fn inventory_toml(s: &Scenario) -> anyhow::Result<String> {
    if s.lab.bios_profiles.is_empty() {
        return Ok(String::new());
    }
    #[derive(Serialize)]
    struct Inventory<'a> {
        bios_profiles: &'a BTreeMap<String, BiosProfileSpec>,
    }
    Ok(format!(
        "\n# The scenario's BIOS profiles ([lab.bios_profiles]).\n{}",
        toml::to_string(&Inventory {
            bios_profiles: &s.lab.bios_profiles
        })?
    ))
}

/// One system's BIOS.
#[derive(Debug, Clone, Default)]
pub struct MachineBios {
    pub current: Map<String, Value>,
    pub pending: Map<String, Value>,
    /// Staged attributes are dropped at the power-on, never applied.
    pub never_applies: bool,
    /// Bumped on every change (the ETags).
    version: u64,
    /// What the last power-on dropped.
    dropped: Vec<String>,
}

/// Every fleet machine's BIOS at the start, from the scenario.
pub(crate) fn machines(s: &Scenario, fleet: &Fleet) -> BTreeMap<String, MachineBios> {
    let base = s.lab.bios.clone().unwrap_or_else(default_attributes);
    fleet
        .nodes
        .iter()
        .map(|n| {
            let m = s.lab.machines.get(&n.name);
            let mut current = base.clone();
            if let Some(a) = m.and_then(|m| m.bios.as_ref()) {
                current.extend(a.clone());
            }
            let bios = MachineBios {
                current,
                never_applies: m.is_some_and(|m| m.bios_never_applies),
                ..MachineBios::default()
            };
            (n.name.clone(), bios)
        })
        .collect()
}

/// What a request to a Bios path is answered.
pub(crate) struct Answer {
    pub status: u16,
    pub etag: Option<String>,
    pub body: Option<Value>,
}

impl Answer {
    fn error(status: u16, message: String) -> Answer {
        Answer {
            status,
            etag: None,
            body: Some(json!({"error": {"code": "Base.1.8.GeneralError", "message": message}})),
        }
    }
}

/// The Bios path of `node`.
pub(crate) fn bios_path(node: &str) -> String {
    format!("/redfish/v1/Systems/{node}/Bios")
}

/// The Bios settings path of `node` (where changes are PATCHed).
pub fn settings_path(node: &str) -> String {
    format!("/redfish/v1/Systems/{node}/Bios/Settings")
}

impl MachineBios {
    fn bios_etag(&self) -> String {
        format!("W/\"bios-{}\"", self.version)
    }

    fn settings_etag(&self) -> String {
        format!("W/\"bios-settings-{}\"", self.version)
    }

    pub(crate) fn get_bios(&self, node: &str) -> Answer {
        let mut settings = json!({
            "@odata.type": "#Settings.v1_3_5.Settings",
            "SettingsObject": {"@odata.id": settings_path(node)},
            "SupportedApplyTimes": ["OnReset"],
            "ETag": self.settings_etag(),
        });
        if !self.dropped.is_empty() {
            settings["Messages"] = json!([{
                "MessageId": "Base.1.0.SettingsFailed",
                "RelatedProperties": self.dropped.iter().map(|a| format!("/Attributes/{a}")).collect::<Vec<_>>(),
            }]);
        }
        let etag = self.bios_etag();
        Answer {
            status: 200,
            body: Some(json!({
                "@odata.id": bios_path(node),
                "@odata.type": "#Bios.v1_2_0.Bios",
                "@odata.etag": etag,
                "Id": "BIOS",
                "Name": "BIOS Configuration Current Settings",
                "AttributeRegistry": "AccordLabBiosRegistry.v1_0_0",
                "Attributes": self.current,
                "@Redfish.Settings": settings,
            })),
            etag: Some(etag),
        }
    }

    pub(crate) fn get_settings(&self, node: &str) -> Answer {
        let etag = self.settings_etag();
        Answer {
            status: 200,
            body: Some(json!({
                "@odata.id": settings_path(node),
                "@odata.type": "#Bios.v1_2_0.Bios",
                "@odata.etag": etag,
                "Id": "Settings",
                "Name": "BIOS Configuration Pending Settings",
                "Attributes": self.pending,
            })),
            etag: Some(etag),
        }
    }

    /// A PATCH of the settings object: If-Match (when sent) must name the
    /// settings' ETag; `Attributes` must be attributes this BIOS has;
    /// `@Redfish.SettingsApplyTime`, when sent, must be `OnReset`.
    pub(crate) fn patch_settings(&mut self, if_match: Option<&str>, body: &[u8]) -> Answer {
        if let Some(m) = if_match {
            if m != self.settings_etag() && m != "*" {
                return Answer::error(
                    412,
                    format!(
                        "If-Match {m} does not match the settings' ETag {}",
                        self.settings_etag()
                    ),
                );
            }
        }
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return Answer::error(400, "the body is not JSON".into());
        };
        if let Some(t) = v.get("@Redfish.SettingsApplyTime") {
            if t.get("ApplyTime").and_then(Value::as_str) != Some("OnReset") {
                return Answer::error(
                    400,
                    "@Redfish.SettingsApplyTime: only OnReset is supported".into(),
                );
            }
        }
        let Some(attrs) = v.get("Attributes").and_then(Value::as_object) else {
            return Answer::error(400, "no Attributes object".into());
        };
        if let Some(unknown) = attrs.keys().find(|k| !self.current.contains_key(*k)) {
            return Answer::error(400, format!("no BIOS attribute {unknown:?}"));
        }
        self.pending
            .extend(attrs.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.version += 1;
        Answer {
            status: 204,
            etag: Some(self.settings_etag()),
            body: None,
        }
    }

    /// A power-on Reset went through: staged attributes apply (or are
    /// dropped, on a machine whose settings never apply).
    pub(crate) fn power_on(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        if self.never_applies {
            self.dropped = pending.keys().cloned().collect();
        } else {
            self.dropped.clear();
            self.current.extend(pending);
        }
        self.version += 1;
    }
}

/// The taint a machine's kubelet registers its Node with when the fleet
/// wants a BIOS profile on it (first registration only, as the kubelet's
/// `--register-with-taints` does): the Node takes no pods until accordd
/// has verified the profile and lifted it.
pub(crate) fn registration_taint(fleet: &Fleet, name: &str, first: bool, node: &mut Value) {
    let wants = fleet.node(name).is_some_and(|n| n.bios_profile.is_some());
    if !first || !wants {
        return;
    }
    let taint = json!({"key": BIOS_TAINT_KEY, "value": "unverified", "effect": "NoSchedule"});
    match node["spec"]["taints"].as_array_mut() {
        Some(t) => t.push(taint),
        None => node["spec"]["taints"] = json!([taint]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_attributes_apply_at_the_power_on_or_are_dropped() {
        let mut m = MachineBios {
            current: default_attributes(),
            ..MachineBios::default()
        };
        let etag = m.get_settings("n1").etag.unwrap();
        let body = br#"{"@Redfish.SettingsApplyTime":{"ApplyTime":"OnReset"},"Attributes":{"ProcTurboMode":"Disabled"}}"#;
        assert_eq!(m.patch_settings(Some("W/\"nope\""), body).status, 412);
        assert_eq!(m.patch_settings(Some(&etag), body).status, 204);
        assert_eq!(m.pending["ProcTurboMode"], "Disabled");
        assert_eq!(m.current["ProcTurboMode"], "Enabled");
        assert_eq!(
            m.patch_settings(None, br#"{"Attributes":{"Nope":1}}"#)
                .status,
            400
        );
        m.power_on();
        assert_eq!(m.current["ProcTurboMode"], "Disabled");
        assert!(m.pending.is_empty());

        let mut never = MachineBios {
            current: default_attributes(),
            never_applies: true,
            ..MachineBios::default()
        };
        assert_eq!(never.patch_settings(None, body).status, 204);
        never.power_on();
        assert_eq!(never.current["ProcTurboMode"], "Enabled");
        assert!(never.pending.is_empty());
        let doc = never.get_bios("n2").body.unwrap();
        assert_eq!(
            doc["@Redfish.Settings"]["Messages"][0]["RelatedProperties"][0],
            "/Attributes/ProcTurboMode"
        );
        assert_eq!(
            doc["@Redfish.Settings"]["SupportedApplyTimes"],
            json!(["OnReset"])
        );
    }
}
