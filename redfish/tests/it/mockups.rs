//! The client against recorded BMCs served by `sushy-static`: DMTF's
//! public rack-mount mockup, a Dell iDRAC (R6515) and a Supermicro HGX B200
//! capture, plus a written tree of firmware quirks.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_redfish::model::ResetTypesFrom;
use accord_redfish::probe::probe;
use accord_redfish::{Bmc, HttpPool, PowerState, RedfishError};
use accord_testkit::sushy::start_static;
use serde_json::json;
use support::target;

fn mockup(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/redfish")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dmtf_rackmount() {
    let peer = start_static(&mockup("dmtf-public-rackmount1")).unwrap();
    let pool = HttpPool::new(8);
    let bmc = Bmc::new(target("rm1", &peer.url(), None, None), &pool).unwrap();
    let sys = bmc.system().await.unwrap();
    assert_eq!(sys.path, "/redfish/v1/Systems/437XR1138R2");
    assert_eq!(sys.power_state, PowerState::On);
    assert_eq!(sys.reset_types_from, ResetTypesFrom::AllowableValues);
    assert_eq!(
        sys.reset_types,
        [
            "On",
            "ForceOff",
            "GracefulShutdown",
            "GracefulRestart",
            "ForceRestart",
            "Nmi",
            "ForceOn",
            "PushPowerButton"
        ]
    );
    assert_eq!(sys.oem_actions, ["#Contoso.Reset"]);
    let bios = bmc.bios().await.unwrap();
    assert_eq!(bios.attributes.len(), 10);
    assert_eq!(
        bios.settings_target.as_deref(),
        Some("/redfish/v1/Systems/437XR1138R2/Bios/Settings")
    );
    // EnvironmentMetrics (374 W) is read before the legacy Power (344 W).
    assert_eq!(bmc.power_watts().await.unwrap(), Some(374.0));

    // Boot override Once/Pxe is set already: nothing sent.
    assert!(!bmc.boot_once("Pxe", false).await.unwrap());
    // Already On: nothing sent.
    assert!(bmc.power_on(false).await.unwrap().sent.is_empty());
    assert_eq!(peer.count("POST"), 0);
    assert_eq!(peer.count("PATCH"), 0);

    // BIOS: only what differs from current and pending values is staged
    // (ProcTurboMode=Disabled is pending in the Settings object already).
    let current = bios.attributes.clone();
    let (same_key, same_val) = current.iter().next().unwrap();
    let wanted = json!({
        same_key.clone(): same_val.clone(),
        "PowerProfile": "Balanced",
        "ProcTurboMode": "Disabled",
        "NoSuchAttribute": 1
    });
    let wanted = wanted.as_object().unwrap();
    let out = bmc.apply_bios(wanted, true).await.unwrap();
    assert!(!out.sent && out.dry_run);
    assert_eq!(peer.count("PATCH"), 0, "dry run sends nothing");
    let out = bmc.apply_bios(wanted, false).await.unwrap();
    assert!(out.sent);
    assert_eq!(out.changes.keys().collect::<Vec<_>>(), ["PowerProfile"]);
    assert_eq!(out.unknown, ["NoSuchAttribute"]);
    // The mockup advertises no SupportedApplyTimes: none is sent (the
    // body below is exactly the attributes).
    assert_eq!(out.apply_time, None);
    assert_eq!(
        peer.count("PATCH /redfish/v1/Systems/437XR1138R2/Bios/Settings 204"),
        1
    );
    assert!(peer
        .log_text()
        .contains(r#"{"Attributes":{"PowerProfile":"Balanced"}}"#));

    let report = probe(&bmc).await.unwrap();
    let text = report.render();
    assert!(text.contains("Redfish 1.15.0"), "{text}");
    assert!(
        text.contains(
            "Accord would use: on = On, graceful off = GracefulShutdown, forced off = ForceOff"
        ),
        "{text}"
    );
    assert!(text.contains("chassis power: 374 W"), "{text}");
    assert!(text.contains("OEM actions #Contoso.Reset"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dell_idrac() {
    let peer = start_static(&mockup("dell-idrac-r6515")).unwrap();
    let pool = HttpPool::new(8);
    let bmc = Bmc::new(
        target("r6515", &peer.url(), Some("System.Embedded.1"), None),
        &pool,
    )
    .unwrap();
    let root = bmc.root().await.unwrap();
    assert_eq!(root.vendor.as_deref(), Some("Dell"));
    assert_eq!(root.redfish_version.as_deref(), Some("1.9.0"));
    let sys = bmc.system().await.unwrap();
    assert_eq!(sys.model.as_deref(), Some("PowerEdge R6515"));
    assert_eq!(sys.power_state, PowerState::On);
    assert!(sys.reset_types.contains(&"PowerCycle".to_owned()));
    let bios = bmc.bios().await.unwrap();
    assert_eq!(bios.attributes.len(), 195);
    assert_eq!(
        bios.settings_target.as_deref(),
        Some("/redfish/v1/Systems/System.Embedded.1/Bios/Settings")
    );
    assert_eq!(bios.attributes["SystemModelName"], "PowerEdge R6515");
    // The capture has no Chassis: no reading, no error.
    assert_eq!(bmc.power_watts().await.unwrap(), None);
    // Settings object missing from the capture (404): nothing pending.
    let wanted = json!({"SysProfile": "PerfOptimized"});
    let current = bios.attributes["SysProfile"].clone();
    let out = bmc
        .apply_bios(wanted.as_object().unwrap(), false)
        .await
        .unwrap();
    assert_eq!(out.sent, current != "PerfOptimized");
    // iDRAC advertises OnReset among its SupportedApplyTimes: the PATCH
    // asks for it.
    assert_eq!(out.apply_time.as_deref(), Some("OnReset"));
    assert!(out.sent, "the capture's SysProfile is {current}");
    let log = peer.log_text();
    assert!(
        log.contains(r#"{"@Redfish.SettingsApplyTime":{"ApplyTime":"OnReset"},"Attributes":{"SysProfile":"PerfOptimized"}}"#),
        "{log}"
    );
    let report = probe(&bmc).await.unwrap().render();
    assert!(
        report.contains("vendor: Dell  product: Integrated Dell Remote Access Controller"),
        "{report}"
    );
    assert!(report.contains("(195 attributes)"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supermicro_hgx_b200() {
    let peer = start_static(&mockup("supermicro-hgx-b200")).unwrap();
    let pool = HttpPool::new(8);
    // Two systems; only the host has a Reset action (the HGX baseboard has
    // none), so the host is chosen without configuration.
    let bmc = Bmc::new(target("b200", &peer.url(), None, None), &pool).unwrap();
    assert_eq!(bmc.system_path().await.unwrap(), "/redfish/v1/Systems/1");
    let sys = bmc.system().await.unwrap();
    assert_eq!(
        sys.reset_types_from,
        ResetTypesFrom::AllowableValues,
        "ActionInfo (404 here) not needed"
    );
    assert!(sys.reset_types.contains(&"FullPowerCycle".to_owned()));
    let report = probe(&bmc).await.unwrap();
    assert_eq!(report.systems.len(), 2);
    assert_eq!(report.root.vendor.as_deref(), Some("Supermicro"));
    let text = report.render();
    assert!(text.contains("reset: no Reset action"), "{text}");
    assert!(text.contains("BIOS unreadable"), "{text}");
    assert!(text.contains("#OemSystemExtensions.Reset"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firmware_quirks_are_tolerated_and_reported() {
    let peer = start_static(&mockup("quirks")).unwrap();
    let pool = HttpPool::new(8);
    let mut t = target("q1", &peer.url(), None, None);
    t.settings.power_on_timeout = Duration::from_secs(1);
    let bmc = Bmc::new(t, &pool).unwrap();
    let sys = bmc.system().await.unwrap();
    assert_eq!(sys.path, "/redfish/v1/Systems/Node1");
    assert_eq!(sys.reset_types_from, ResetTypesFrom::ActionInfo);
    assert_eq!(
        sys.reset_types,
        ["On", "ForceOff", "ForceRestart", "PushPowerButton"]
    );
    assert_eq!(
        sys.reset_target.as_deref(),
        Some("/redfish/v1/Systems/Node1/Actions/ComputerSystem.Reset")
    );
    let report = probe(&bmc).await.unwrap();
    let text = report.render();
    for expected in [
        "reset types (action_info): On, ForceOff, ForceRestart, PushPowerButton",
        "graceful off = (none)",
        "problem: no GracefulShutdown: power-off will be forced",
        "merged AllowableValues entry \"On,ForceOff\" split",
        "reset type \"forcerestart\" read as ForceRestart",
        "trailing slash",
        "absolute URL",
        "vendor taken from Oem.Contoso",
        "no Links.Sessions",
        "OEM actions #Contoso.ClearNvram, #Contoso.Reset",
        "chassis power: 6120 W",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // The static server accepts the Reset but the machine never shows On:
    // verification fails, typed, after the timeout.
    let err = bmc.power_on(false).await.unwrap_err();
    assert!(matches!(err, RedfishError::NotReached { .. }), "{err:?}");
    assert!(peer.log_text().contains(r#"{"ResetType":"On"}"#));
    // Off with no GracefulShutdown: forced at once (dry run).
    let dry = bmc.power_off(false, true).await;
    assert!(dry.unwrap().sent.is_empty(), "already Off");

    // BIOS: ProcCStates=Disabled is pending already; only SysProfile is
    // sent, with the Settings object's ETag as If-Match.
    let wanted = json!({"ProcCStates": "Disabled", "SysProfile": "Performance"});
    let out = bmc
        .apply_bios(wanted.as_object().unwrap(), false)
        .await
        .unwrap();
    assert_eq!(out.changes.keys().collect::<Vec<_>>(), ["SysProfile"]);
    let log = peer.log_text();
    assert!(
        log.contains("PATCH /redfish/v1/Systems/Node1/Bios/Settings"),
        "{log}"
    );
    assert!(
        log.to_ascii_lowercase()
            .contains(r#"if-match: w/"bios-settings-42""#),
        "{log}"
    );
}
