//! What Accord reads from Redfish documents, parsed tolerantly: real
//! firmware leaves out links, merges AllowableValues into one string, gives
//! reset types only through `@Redfish.ActionInfo`, adds trailing slashes and
//! absolute URLs to targets, and puts OEM actions beside standard ones.
//! Every such repair is recorded as a note, so `accordctl bmc probe` can say
//! what was tolerated. Pure: documents in, values out.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The reset types of the Redfish `ResetType` enum, in their canonical
/// spelling.
pub const RESET_TYPES: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
    "PowerCycle",
    "FullPowerCycle",
    "Suspend",
    "Pause",
    "Resume",
];

/// What Accord sends to power on, in order of preference.
pub const ON_PREFERENCE: &[&str] = &["On", "ForceOn", "PushPowerButton"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Paused,
    Unknown(String),
}

impl PowerState {
    pub fn parse(s: Option<&str>) -> PowerState {
        match s {
            Some("On") => PowerState::On,
            Some("Off") => PowerState::Off,
            Some("PoweringOn") => PowerState::PoweringOn,
            Some("PoweringOff") => PowerState::PoweringOff,
            Some("Paused") => PowerState::Paused,
            Some(other) => PowerState::Unknown(other.to_owned()),
            None => PowerState::Unknown("absent".to_owned()),
        }
    }
}

impl std::fmt::Display for PowerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PowerState::Unknown(s) => write!(f, "unknown ({s})"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A link or target as a path on the BMC: scheme and host dropped (some
/// BMCs give absolute URLs), trailing slash dropped, leading slash ensured.
pub fn normalize_path(raw: &str, notes: &mut Vec<String>, what: &str) -> String {
    let mut s = raw.trim();
    if let Some(rest) = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
    {
        s = rest.find('/').map_or("/", |i| &rest[i..]);
        notes.push(format!("{what}: absolute URL {raw:?}; using its path"));
    }
    let trimmed = s.trim_end_matches('/');
    if trimmed.len() != s.len() && !trimmed.is_empty() {
        notes.push(format!("{what}: trailing slash in {raw:?} dropped"));
    }
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    if trimmed.starts_with('/') {
        trimmed.to_owned()
    } else {
        format!("/{trimmed}")
    }
}

/// `{"@odata.id": "..."}` at `v[key]`, normalized.
pub fn link(v: &Value, key: &str, notes: &mut Vec<String>) -> Option<String> {
    v.get(key)?
        .get("@odata.id")?
        .as_str()
        .map(|s| normalize_path(s, notes, key))
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ServiceRoot {
    pub vendor: Option<String>,
    pub product: Option<String>,
    pub redfish_version: Option<String>,
    pub uuid: Option<String>,
    pub systems: Option<String>,
    pub chassis: Option<String>,
    pub managers: Option<String>,
    /// The Sessions collection (`Links.Sessions`), where X-Auth-Token
    /// sessions are created.
    pub sessions: Option<String>,
    pub notes: Vec<String>,
}

pub fn parse_root(v: &Value) -> ServiceRoot {
    let mut notes = Vec::new();
    let sessions = match v.get("Links").and_then(|l| link(l, "Sessions", &mut notes)) {
        Some(s) => Some(s),
        None => {
            let fallback = link(v, "SessionService", &mut notes).map(|s| format!("{s}/Sessions"));
            if let Some(f) = &fallback {
                notes.push(format!(
                    "service root has no Links.Sessions; using {f} from SessionService"
                ));
            }
            fallback
        }
    };
    let mut vendor = string(v, "Vendor");
    if vendor.is_none() {
        // Older firmware (e.g. iDRAC before Redfish 1.5) names itself only
        // through its OEM section.
        vendor = v
            .get("Oem")
            .and_then(Value::as_object)
            .and_then(|o| o.keys().next().cloned());
        if let Some(vn) = &vendor {
            notes.push(format!("no Vendor property; vendor taken from Oem.{vn}"));
        }
    }
    ServiceRoot {
        vendor,
        product: string(v, "Product"),
        redfish_version: string(v, "RedfishVersion"),
        uuid: string(v, "UUID"),
        systems: link(v, "Systems", &mut notes),
        chassis: link(v, "Chassis", &mut notes),
        managers: link(v, "Managers", &mut notes),
        sessions,
        notes,
    }
}

/// Whether a document is a Redfish service root, as far as Accord needs
/// one: a JSON object that says it is one (`RedfishVersion`, an
/// `@odata.id` of `/redfish/v1`, or an `@odata.type` of
/// `#ServiceRoot.…`) and links to what Accord reads (`Systems` or
/// `Chassis`). DMTF's schema also requires `Id`, `Name` and `Links`;
/// firmware leaves them out (the quirks mockup has no `Links`), so they
/// are not asked for. `Err` says what the document is instead, never
/// what it holds.
pub fn check_root(v: &Value) -> Result<(), String> {
    let Some(o) = v.as_object() else {
        return Err(format!("JSON {}, not an object", json_kind(v)));
    };
    let text = |key: &str| o.get(key).and_then(Value::as_str);
    let says_root = text("RedfishVersion").is_some()
        || text("@odata.id")
            .is_some_and(|id| normalize_path(id, &mut Vec::new(), "@odata.id") == "/redfish/v1")
        || text("@odata.type")
            .is_some_and(|t| t.trim_start_matches('#').starts_with("ServiceRoot."));
    if !says_root {
        return Err(
            "a JSON object without RedfishVersion, an @odata.id of /redfish/v1 \
                    or an @odata.type of ServiceRoot"
                .to_owned(),
        );
    }
    let mut notes = Vec::new();
    if link(v, "Systems", &mut notes).is_none() && link(v, "Chassis", &mut notes).is_none() {
        return Err("a service root that links to neither Systems nor Chassis".to_owned());
    }
    Ok(())
}

/// The most members of a collection (Systems, Chassis) and the most
/// `Links.Chassis` of a system Accord reads. A BMC manages one machine, a
/// chassis or blade enclosure a few dozen; a collection longer than this
/// is refused unwalked ([`crate::RedfishError::TooManyMembers`]) rather
/// than read member by member, a GET each.
pub const MAX_MEMBERS: usize = 64;

/// How many names of a list an error message shows ([`some_of`]).
pub const NAMES_SHOWN: usize = 4;

/// The member paths of a collection; `Err(count)`, none of them read or
/// normalized, when it has more than [`MAX_MEMBERS`].
pub fn members(v: &Value, notes: &mut Vec<String>) -> Result<Vec<String>, usize> {
    let Some(m) = v.get("Members").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    if m.len() > MAX_MEMBERS {
        return Err(m.len());
    }
    Ok(m.iter()
        .filter_map(|x| x.get("@odata.id").and_then(Value::as_str))
        .map(|s| normalize_path(s, notes, "Members"))
        .collect())
}

/// At most [`NAMES_SHOWN`] of `names`, joined by commas, then "and N
/// more": a list for an error message that stays short.
pub fn some_of(names: &[String]) -> String {
    let shown = names[..names.len().min(NAMES_SHOWN)].join(", ");
    match names.len().saturating_sub(NAMES_SHOWN) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Splits AllowableValues as firmware sends them: an array of names, but
/// also one string of names joined by commas or spaces, or an array whose
/// items are such strings. Names are matched case-insensitively to the
/// canonical spelling; unknown names are kept as sent.
pub fn split_allowable(v: &Value, notes: &mut Vec<String>) -> Vec<String> {
    let raw: Vec<&str> = match v {
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        Value::String(s) => {
            notes.push(format!("AllowableValues is a string {s:?}, not an array"));
            vec![s.as_str()]
        }
        _ => Vec::new(),
    };
    let mut out: Vec<String> = Vec::new();
    for item in raw {
        let parts: Vec<&str> = item
            .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .filter(|p| !p.is_empty())
            .collect();
        if parts.len() > 1 {
            notes.push(format!("merged AllowableValues entry {item:?} split"));
        }
        for p in parts {
            let canonical = RESET_TYPES
                .iter()
                .find(|t| t.eq_ignore_ascii_case(p))
                .map(|t| (*t).to_owned());
            let name = match canonical {
                Some(c) => {
                    if c != p {
                        notes.push(format!("reset type {p:?} read as {c}"));
                    }
                    c
                }
                None => p.to_owned(),
            };
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// Where a system's reset types come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetTypesFrom {
    AllowableValues,
    /// Only `@Redfish.ActionInfo` lists them; the caller fetches it.
    ActionInfo,
    /// Neither: the Redfish baseline (On, ForceOff, GracefulShutdown,
    /// GracefulRestart, ForceRestart) is assumed.
    Assumed,
}

#[derive(Debug, Clone, Serialize)]
pub struct SystemInfo {
    pub path: String,
    pub id: Option<String>,
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub power_state: PowerState,
    pub reset_target: Option<String>,
    pub reset_types: Vec<String>,
    pub reset_types_from: ResetTypesFrom,
    /// The ActionInfo document to read when `reset_types_from` says so.
    pub action_info: Option<String>,
    pub oem_actions: Vec<String>,
    pub bios: Option<String>,
    pub boot_override_enabled: Option<String>,
    pub boot_override_target: Option<String>,
    pub boot_targets: Vec<String>,
    pub chassis: Vec<String>,
    pub etag: Option<String>,
    pub notes: Vec<String>,
}

/// The baseline assumed when a BMC advertises no reset types at all.
pub const ASSUMED_RESET_TYPES: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
];

pub fn parse_system(path: &str, v: &Value) -> SystemInfo {
    let mut notes = Vec::new();
    let actions = v.get("Actions");
    let reset = actions.and_then(|a| {
        a.get("#ComputerSystem.Reset").or_else(|| {
            // Some firmware drops the leading '#'.
            let r = a.get("ComputerSystem.Reset");
            if r.is_some() {
                notes.push("Reset action named without '#'".to_owned());
            }
            r
        })
    });
    let reset_target = reset
        .and_then(|r| r.get("target"))
        .and_then(Value::as_str)
        .map(|t| normalize_path(t, &mut notes, "Reset target"));
    let mut reset_types = Vec::new();
    let mut reset_types_from = ResetTypesFrom::Assumed;
    let mut action_info = None;
    if let Some(r) = reset {
        if let Some(values) = r.get("ResetType@Redfish.AllowableValues") {
            reset_types = split_allowable(values, &mut notes);
            reset_types_from = ResetTypesFrom::AllowableValues;
        }
        if let Some(info) = r.get("@Redfish.ActionInfo").and_then(Value::as_str) {
            action_info = Some(normalize_path(info, &mut notes, "ActionInfo"));
            if reset_types.is_empty() {
                reset_types_from = ResetTypesFrom::ActionInfo;
            }
        }
    }
    if reset_types_from == ResetTypesFrom::Assumed {
        reset_types = ASSUMED_RESET_TYPES
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        if reset.is_some() {
            notes.push(
                "Reset action advertises no reset types; assuming the Redfish baseline".to_owned(),
            );
        }
    }
    if reset.is_none() {
        notes.push("no #ComputerSystem.Reset action".to_owned());
    }
    let oem_actions = actions
        .and_then(|a| a.get("Oem"))
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let boot = v.get("Boot");
    let mut boot_notes = Vec::new();
    let boot_targets = boot
        .and_then(|b| b.get("BootSourceOverrideTarget@Redfish.AllowableValues"))
        .map(|x| split_allowable(x, &mut boot_notes))
        .unwrap_or_default();
    let chassis_links = v
        .get("Links")
        .and_then(|l| l.get("Chassis"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if chassis_links.len() > MAX_MEMBERS {
        notes.push(format!(
            "Links.Chassis: {} links, more than the {MAX_MEMBERS} Accord reads; only the first {MAX_MEMBERS} read",
            chassis_links.len()
        ));
    }
    let chassis = chassis_links
        .iter()
        .take(MAX_MEMBERS)
        .filter_map(|c| c.get("@odata.id").and_then(Value::as_str))
        .map(|s| normalize_path(s, &mut notes, "Links.Chassis"))
        .collect();
    SystemInfo {
        path: path.to_owned(),
        id: string(v, "Id"),
        manufacturer: string(v, "Manufacturer"),
        model: string(v, "Model"),
        power_state: PowerState::parse(v.get("PowerState").and_then(Value::as_str)),
        reset_target,
        reset_types,
        reset_types_from,
        action_info,
        oem_actions,
        bios: link(v, "Bios", &mut notes),
        boot_override_enabled: boot.and_then(|b| string(b, "BootSourceOverrideEnabled")),
        boot_override_target: boot.and_then(|b| string(b, "BootSourceOverrideTarget")),
        boot_targets,
        chassis,
        etag: string(v, "@odata.etag"),
        notes,
    }
}

/// The ResetType values an ActionInfo document allows.
pub fn parse_action_info(v: &Value, notes: &mut Vec<String>) -> Vec<String> {
    v.get("Parameters")
        .and_then(Value::as_array)
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.get("Name").and_then(Value::as_str) == Some("ResetType"))
        })
        .and_then(|p| p.get("AllowableValues"))
        .map(|vals| split_allowable(vals, notes))
        .unwrap_or_default()
}

/// The reset types Accord would send, given what a system advertises.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResetChoice {
    pub on: Option<String>,
    pub graceful_off: Option<String>,
    pub forced_off: Option<String>,
}

pub fn choose_reset_types(advertised: &[String]) -> ResetChoice {
    let has = |t: &str| advertised.iter().any(|a| a == t);
    ResetChoice {
        on: ON_PREFERENCE
            .iter()
            .find(|t| has(t))
            .map(|t| (*t).to_owned()),
        graceful_off: has("GracefulShutdown").then(|| "GracefulShutdown".to_owned()),
        forced_off: has("ForceOff").then(|| "ForceOff".to_owned()),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Bios {
    pub path: String,
    pub attributes: Map<String, Value>,
    /// Where changes go (`@Redfish.Settings`); `None`: PATCH the Bios
    /// resource itself.
    pub settings_target: Option<String>,
    pub attribute_registry: Option<String>,
    pub etag: Option<String>,
    /// When staged settings may apply (`@Redfish.Settings`'
    /// `SupportedApplyTimes`, canonical spelling); empty when the BMC
    /// does not say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub apply_times: Vec<String>,
    pub notes: Vec<String>,
}

/// The `ApplyTime` values of the Redfish `Settings` schema, in their
/// canonical spelling.
pub const APPLY_TIMES: &[&str] = &[
    "Immediate",
    "OnReset",
    "AtMaintenanceWindowStart",
    "InMaintenanceWindowOnReset",
];

pub fn parse_bios(path: &str, v: &Value) -> Bios {
    let mut notes = Vec::new();
    let settings = v.get("@Redfish.Settings");
    let settings_target = settings
        .and_then(|s| s.get("SettingsObject"))
        .and_then(|o| o.get("@odata.id"))
        .and_then(Value::as_str)
        .map(|s| normalize_path(s, &mut notes, "SettingsObject"));
    let apply_times = settings
        .and_then(|s| s.get("SupportedApplyTimes"))
        .map(|t| parse_apply_times(t, &mut notes))
        .unwrap_or_default();
    Bios {
        path: path.to_owned(),
        attributes: v
            .get("Attributes")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        settings_target,
        attribute_registry: string(v, "AttributeRegistry"),
        etag: string(v, "@odata.etag"),
        apply_times,
        notes,
    }
}

/// A JSON value's type, for notes (never the value: it may be large).
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `SupportedApplyTimes` as firmware sends it: an array of names, but
/// also one string of names, or names in another case. Names are matched
/// case-insensitively to the canonical spelling; unknown ones are kept
/// as sent; anything that is not a string is skipped with a note.
pub fn parse_apply_times(v: &Value, notes: &mut Vec<String>) -> Vec<String> {
    let raw: Vec<&str> = match v {
        Value::Array(items) => items
            .iter()
            .filter_map(|i| {
                let s = i.as_str();
                if s.is_none() {
                    notes.push(format!(
                        "SupportedApplyTimes entry of type {} is not a string; skipped",
                        json_kind(i)
                    ));
                }
                s
            })
            .collect(),
        Value::String(s) => {
            notes.push(format!(
                "SupportedApplyTimes is a string {s:?}, not an array"
            ));
            vec![s.as_str()]
        }
        other => {
            notes.push(format!(
                "SupportedApplyTimes is of type {}, not an array; ignored",
                json_kind(other)
            ));
            Vec::new()
        }
    };
    let mut out: Vec<String> = Vec::new();
    for item in raw {
        for p in item
            .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .filter(|p| !p.is_empty())
        {
            let name = match APPLY_TIMES.iter().find(|t| t.eq_ignore_ascii_case(p)) {
                Some(c) => {
                    if *c != p {
                        notes.push(format!("apply time {p:?} read as {c}"));
                    }
                    (*c).to_owned()
                }
                None => p.chars().take(64).collect(),
            };
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// Watts drawn, from a legacy `Power` resource (`PowerControl[].
/// PowerConsumedWatts`) or an `EnvironmentMetrics` one (`PowerWatts.Reading`).
pub fn parse_power_watts(v: &Value) -> Option<f64> {
    if let Some(pc) = v.get("PowerControl").and_then(Value::as_array) {
        if let Some(w) = pc
            .iter()
            .find_map(|c| c.get("PowerConsumedWatts").and_then(Value::as_f64))
        {
            return Some(w);
        }
    }
    v.get("PowerWatts")
        .and_then(|p| p.get("Reading"))
        .and_then(Value::as_f64)
}

/// The message a Redfish error body carries: the first
/// `@Message.ExtendedInfo` message, else `error.message`.
pub fn error_message(v: &Value) -> Option<String> {
    let err = v.get("error").unwrap_or(v);
    let extended = err
        .get("@Message.ExtendedInfo")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find_map(|m| m.get("Message").and_then(Value::as_str))
        });
    extended
        .or_else(|| err.get("message").and_then(Value::as_str))
        .map(|s| s.chars().take(300).collect())
}

/// A task's state: `None` while a task monitor answers without a Task body.
pub fn task_state(v: &Value) -> Option<&str> {
    v.get("TaskState").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merged_and_odd_allowable_values_are_split_and_canonicalized() {
        let mut notes = Vec::new();
        let v = json!(["On,ForceOff", "gracefulshutdown", "OemSpecial"]);
        assert_eq!(
            split_allowable(&v, &mut notes),
            ["On", "ForceOff", "GracefulShutdown", "OemSpecial"]
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        let mut notes = Vec::new();
        assert_eq!(
            split_allowable(&json!("On ForceOff"), &mut notes),
            ["On", "ForceOff"]
        );
        assert!(notes[0].contains("not an array"));
    }

    #[test]
    fn targets_lose_host_and_trailing_slash_with_a_note() {
        let mut notes = Vec::new();
        assert_eq!(
            normalize_path(
                "https://10.0.0.5/redfish/v1/Systems/1/Actions/ComputerSystem.Reset/",
                &mut notes,
                "t"
            ),
            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
        );
        assert_eq!(notes.len(), 2);
        let mut notes = Vec::new();
        assert_eq!(
            normalize_path("/redfish/v1/", &mut notes, "t"),
            "/redfish/v1"
        );
        assert_eq!(
            normalize_path("/redfish/v1", &mut notes, "t"),
            "/redfish/v1"
        );
    }

    #[test]
    fn reset_types_from_action_info_only() {
        let sys = json!({
            "Id": "1", "PowerState": "Off",
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset/",
                    "@Redfish.ActionInfo": "/redfish/v1/Systems/1/ResetActionInfo"
                },
                "Oem": {"#OemVendor.Reboot": {"target": "/x"}}
            }
        });
        let s = parse_system("/redfish/v1/Systems/1", &sys);
        assert_eq!(s.reset_types_from, ResetTypesFrom::ActionInfo);
        assert_eq!(
            s.action_info.as_deref(),
            Some("/redfish/v1/Systems/1/ResetActionInfo")
        );
        assert_eq!(s.oem_actions, ["#OemVendor.Reboot"]);
        assert_eq!(
            s.reset_target.as_deref(),
            Some("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset")
        );
        let info = json!({"Parameters": [{"Name": "ResetType", "AllowableValues": ["ForceOn", "ForceOff"]}]});
        let mut notes = Vec::new();
        let types = parse_action_info(&info, &mut notes);
        let choice = choose_reset_types(&types);
        assert_eq!(choice.on.as_deref(), Some("ForceOn"));
        assert_eq!(choice.graceful_off, None, "missing GracefulShutdown");
        assert_eq!(choice.forced_off.as_deref(), Some("ForceOff"));
    }

    #[test]
    fn power_on_prefers_on_then_force_on_then_button() {
        let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            choose_reset_types(&v(&["PushPowerButton", "ForceOn", "On"]))
                .on
                .as_deref(),
            Some("On")
        );
        assert_eq!(
            choose_reset_types(&v(&["PushPowerButton", "ForceOn"]))
                .on
                .as_deref(),
            Some("ForceOn")
        );
        assert_eq!(
            choose_reset_types(&v(&["PushPowerButton"])).on.as_deref(),
            Some("PushPowerButton")
        );
        assert_eq!(choose_reset_types(&v(&["ForceOff"])).on, None);
    }

    #[test]
    fn error_message_prefers_extended_info() {
        let v = json!({"error": {"code": "Base.1.8.GeneralError", "message": "generic",
            "@Message.ExtendedInfo": [{"Message": "The request failed due to an internal service error."}]}});
        assert_eq!(
            error_message(&v).as_deref(),
            Some("The request failed due to an internal service error.")
        );
        assert_eq!(
            error_message(&json!({"error": {"message": "m"}})).as_deref(),
            Some("m")
        );
        assert_eq!(error_message(&json!(null)), None);
    }

    #[test]
    fn supported_apply_times_are_read_tolerantly() {
        // Dell iDRAC 9's Bios (tests/fixtures/redfish/dell-idrac-r6515).
        let dell: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/redfish/dell-idrac-r6515/Systems/System.Embedded.1/Bios/index.json"
        ))
        .unwrap();
        let b = parse_bios("/redfish/v1/Systems/System.Embedded.1/Bios", &dell);
        assert_eq!(
            b.apply_times,
            [
                "OnReset",
                "AtMaintenanceWindowStart",
                "InMaintenanceWindowOnReset"
            ]
        );
        assert!(b.notes.is_empty(), "{:?}", b.notes);
        // DMTF's mockup says nothing: none assumed.
        let dmtf: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/redfish/dmtf-public-rackmount1/Systems/437XR1138R2/Bios/index.json"
        ))
        .unwrap();
        assert!(parse_bios("/b", &dmtf).apply_times.is_empty());
        // A string, another case, junk: tolerated and noted.
        let odd = json!({"@Redfish.Settings": {"SupportedApplyTimes": "onreset, Immediate"}});
        let b = parse_bios("/b", &odd);
        assert_eq!(b.apply_times, ["OnReset", "Immediate"]);
        assert_eq!(b.notes.len(), 2, "{:?}", b.notes);
        let junk = json!({"@Redfish.Settings": {"SupportedApplyTimes": [7, null, "OnReset"]}});
        let b = parse_bios("/b", &junk);
        assert_eq!(b.apply_times, ["OnReset"]);
        assert_eq!(b.notes.len(), 2, "{:?}", b.notes);
        let b = parse_bios(
            "/b",
            &json!({"@Redfish.Settings": {"SupportedApplyTimes": {}}}),
        );
        assert!(b.apply_times.is_empty());
    }

    #[test]
    fn service_roots_are_recognized_tolerantly_and_anything_else_is_not() {
        for root in [
            json!({"RedfishVersion": "1.0.0", "Systems": {"@odata.id": "/redfish/v1/Systems"}}),
            json!({"@odata.id": "/redfish/v1/", "Chassis": {"@odata.id": "/redfish/v1/Chassis/"}}),
            json!({"@odata.id": "https://bmc/redfish/v1", "Systems": {"@odata.id": "/s"}}),
            json!({"@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
                   "Systems": {"@odata.id": "/redfish/v1/Systems"}}),
        ] {
            assert_eq!(check_root(&root), Ok(()), "{root}");
        }
        for (doc, why) in [
            (json!(null), "JSON null, not an object"),
            (json!([1, 2]), "JSON array, not an object"),
            (json!(7), "JSON number, not an object"),
            (json!("<html>"), "JSON string, not an object"),
            (
                json!({"status": "ok", "Systems": {"@odata.id": "/redfish/v1/Systems"}}),
                "without RedfishVersion",
            ),
            (
                json!({"RedfishVersion": 1, "@odata.id": "/api/v1"}),
                "without RedfishVersion",
            ),
            (
                json!({"RedfishVersion": "1.6.0", "Systems": "/redfish/v1/Systems"}),
                "neither Systems nor Chassis",
            ),
        ] {
            let e = check_root(&doc).unwrap_err();
            assert!(e.contains(why), "{doc}: {e}");
        }
    }

    #[test]
    fn long_collections_and_chassis_links_are_not_read() {
        let many = |n: usize| -> Vec<Value> {
            (0..n)
                .map(|i| json!({"@odata.id": format!("https://bmc/redfish/v1/Systems/{i}/")}))
                .collect()
        };
        let mut notes = Vec::new();
        let ok = members(&json!({"Members": many(MAX_MEMBERS)}), &mut notes).unwrap();
        assert_eq!(ok.len(), MAX_MEMBERS);
        let mut notes = Vec::new();
        assert_eq!(
            members(&json!({"Members": many(100_000)}), &mut notes),
            Err(100_000)
        );
        assert!(notes.is_empty(), "nothing normalized: {}", notes.len());
        let s = parse_system("/s", &json!({"Links": {"Chassis": many(100_000)}}));
        assert_eq!(s.chassis.len(), MAX_MEMBERS);
        // No Reset action, the links left unread, two repairs per link read.
        assert_eq!(s.notes.len(), 2 + 2 * MAX_MEMBERS, "{:?}", &s.notes[..3]);
        assert!(s.notes[1].contains("100000 links"), "{}", s.notes[1]);
        let names: Vec<String> = (0..10).map(|i| format!("/s/{i}")).collect();
        assert_eq!(some_of(&names), "/s/0, /s/1, /s/2, /s/3 and 6 more");
        assert_eq!(some_of(&names[..2]), "/s/0, /s/1");
        assert_eq!(some_of(&[]), "");
    }

    #[test]
    fn root_without_links_falls_back_to_session_service() {
        let r = parse_root(
            &json!({"RedfishVersion": "1.5.0", "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "SessionService": {"@odata.id": "/redfish/v1/SessionService"}}),
        );
        assert_eq!(
            r.sessions.as_deref(),
            Some("/redfish/v1/SessionService/Sessions")
        );
        assert_eq!(r.notes.len(), 1);
    }
}
