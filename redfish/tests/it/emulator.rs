//! The Redfish client against OpenStack's `sushy-emulator --fake`: power
//! changes land 1–11 s after the Reset, like real BMCs. Assertions on what
//! the emulator itself logged.

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use accord_redfish::{Bmc, HttpPool, PowerState, RedfishError};
use accord_testkit::sushy::{start_emulator, EmulatorOptions};
use support::{fake, start_proxy, target, Faults};

const USER: &str = "admin";
const PASSWORD: &str = "s3cret-pw";

fn auth() -> EmulatorOptions {
    EmulatorOptions {
        basic_auth: Some((USER.to_owned(), PASSWORD.to_owned())),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_on_off_verified_and_a_second_on_sends_nothing() {
    let emu = start_emulator(&fake(&["n1", "n2", "n3"]), &auth()).unwrap();
    let pool = HttpPool::new(64);
    let bmcs: Vec<Bmc> = ["n1", "n2"]
        .iter()
        .map(|n| {
            Bmc::new(
                target(n, &emu.url(), Some(n), Some((USER, PASSWORD))),
                &pool,
            )
            .unwrap()
        })
        .collect();
    // Both at once: each waits 1–11 s for its own machine.
    let (a, b) = tokio::join!(bmcs[0].power_on(false), bmcs[1].power_on(false));
    for o in [a.unwrap(), b.unwrap()] {
        assert_eq!(o.before, PowerState::Off);
        assert_eq!(o.sent, ["On"]);
        assert_eq!(o.after, PowerState::On);
    }
    let resets = "POST /redfish/v1/Systems/n1/Actions/ComputerSystem.Reset 204";
    assert_eq!(emu.count(resets), 1, "{:#?}", emu.requests());

    // Idempotent: the second On reads the state and sends no Reset.
    let again = bmcs[0].power_on(false).await.unwrap();
    assert!(again.sent.is_empty());
    assert_eq!(emu.count("POST /redfish/v1/Systems/n1/Actions"), 1);

    // The third machine was never touched.
    let n3 = Bmc::new(
        target("n3", &emu.url(), Some("n3"), Some((USER, PASSWORD))),
        &pool,
    )
    .unwrap();
    assert_eq!(n3.power_state().await.unwrap(), PowerState::Off);
    assert_eq!(emu.count("POST /redfish/v1/Systems/n3"), 0);

    let off = bmcs[0].power_off(false, false).await.unwrap();
    assert_eq!(off.sent, ["GracefulShutdown"]);
    assert_eq!(off.after, PowerState::Off);
    let off_again = bmcs[0].power_off(false, false).await.unwrap();
    assert!(off_again.sent.is_empty());
    assert_eq!(emu.count("POST /redfish/v1/Systems/n1/Actions"), 2);

    // A dry run reads but sends nothing.
    let dry = bmcs[1].power_off(true, true).await.unwrap();
    assert_eq!(dry.sent, ["ForceOff"]);
    assert_eq!(emu.count("POST /redfish/v1/Systems/n2/Actions"), 1);
    assert_eq!(bmcs[1].power_state().await.unwrap(), PowerState::On);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_and_with_wrong_credentials() {
    let open = start_emulator(&fake(&["n1"]), &EmulatorOptions::default()).unwrap();
    let pool = HttpPool::new(8);
    // No credentials, one system: it is discovered from the collection.
    let bmc = Bmc::new(target("n1", &open.url(), None, None), &pool).unwrap();
    assert_eq!(bmc.system_path().await.unwrap(), "/redfish/v1/Systems/n1");
    let on = bmc.power_on(false).await.unwrap();
    assert_eq!(on.sent, ["On"]);

    let locked = start_emulator(&fake(&["n1"]), &auth()).unwrap();
    let wrong = Bmc::new(
        target(
            "n1",
            &locked.url(),
            Some("n1"),
            Some((USER, "not-the-password")),
        ),
        &pool,
    )
    .unwrap();
    let err = wrong.power_on(false).await.unwrap_err();
    assert!(matches!(err, RedfishError::Unauthorized { .. }), "{err:?}");
    let text = format!("{err} {err:?}");
    assert!(
        !text.contains("not-the-password"),
        "credentials leaked: {text}"
    );
    // Refused once, never retried: a 4xx is not transient.
    assert_eq!(
        locked.count("GET /redfish/v1/Systems/n1 401"),
        1,
        "{:#?}",
        locked.requests()
    );
    assert_eq!(locked.count("POST"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_then_force() {
    // A shutdown the OS ignores: the proxy accepts GracefulShutdown and
    // drops it; after the graceful timeout Accord forces the machine off.
    let emu = start_emulator(&fake(&["n1"]), &auth()).unwrap();
    let pool = HttpPool::new(8);
    let proxy = start_proxy(
        &emu.url(),
        Faults {
            swallow_resets: vec!["GracefulShutdown".to_owned()],
            ..Default::default()
        },
    )
    .await;
    let mut t = target("n1", &proxy.url, Some("n1"), Some((USER, PASSWORD)));
    t.settings.graceful_timeout = Duration::from_secs(2);
    let bmc = Bmc::new(t, &pool).unwrap();
    bmc.power_on(false).await.unwrap();
    let off = bmc.power_off(false, false).await.unwrap();
    assert_eq!(off.sent, ["GracefulShutdown", "ForceOff"]);
    assert_eq!(off.after, PowerState::Off);
    let resets: Vec<String> = proxy
        .state
        .requests()
        .into_iter()
        .filter(|r| r.contains("ComputerSystem.Reset"))
        .collect();
    assert_eq!(resets.len(), 3, "{resets:#?}");
    assert!(resets[1].contains("GracefulShutdown") && resets[2].contains("ForceOff"));
    // The emulator saw the On and the ForceOff only.
    assert_eq!(
        emu.count("POST /redfish/v1/Systems/n1/Actions/ComputerSystem.Reset 204"),
        2
    );

    // Power-off disabled in the emulator: both are refused (400); Accord
    // tries graceful, then forced, and reports the BMC's message.
    let stuck = start_emulator(
        &[accord_testkit::sushy::FakeSystem {
            id: "n1".into(),
            power_on: true,
        }],
        &EmulatorOptions {
            disable_power_off: true,
            ..auth()
        },
    )
    .unwrap();
    let bmc = Bmc::new(
        target("n1", &stuck.url(), Some("n1"), Some((USER, PASSWORD))),
        &pool,
    )
    .unwrap();
    let err = bmc.power_off(false, false).await.unwrap_err();
    match &err {
        RedfishError::Status {
            status: 400,
            message: Some(m),
            attempts: 1,
            ..
        } => {
            assert!(m.contains("disabled"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stuck.count("POST /redfish/v1/Systems/n1/Actions/ComputerSystem.Reset 400"),
        2
    );
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);

    // Configured not to force: graceful only.
    let mut t = target("n1", &stuck.url(), Some("n1"), Some((USER, PASSWORD)));
    t.settings.force_after_graceful = false;
    let bmc = Bmc::new(t, &pool).unwrap();
    bmc.power_off(false, false).await.unwrap_err();
    assert_eq!(
        stuck.count("POST /redfish/v1/Systems/n1/Actions/ComputerSystem.Reset 400"),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_reset_is_sent_once_more() {
    // The BMC accepts the first On (204) but never acts on it.
    let emu = start_emulator(&fake(&["n1"]), &EmulatorOptions::default()).unwrap();
    let proxy = start_proxy(
        &emu.url(),
        Faults {
            swallow_once: vec!["On".to_owned()],
            ..Default::default()
        },
    )
    .await;
    let pool = HttpPool::new(8);
    let mut t = target("n1", &proxy.url, Some("n1"), None);
    t.settings.resend_after = Duration::from_secs(1);
    let bmc = Bmc::new(t, &pool).unwrap();
    let on = bmc.power_on(false).await.unwrap();
    assert_eq!(on.sent, ["On", "On"]);
    assert_eq!(on.after, PowerState::On);
    assert_eq!(
        emu.count("POST /redfish/v1/Systems/n1/Actions/ComputerSystem.Reset 204"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifying_an_earlier_reset_sends_nothing_while_it_lands() {
    // As after a crash between "sent" and "verified": the Reset is in the
    // BMC; Accord restarts and only verifies.
    let emu = start_emulator(&fake(&["n1", "n2"]), &EmulatorOptions::default()).unwrap();
    reqwest::Client::new()
        .post(format!(
            "{}/redfish/v1/Systems/n1/Actions/ComputerSystem.Reset",
            emu.url()
        ))
        .json(&serde_json::json!({"ResetType": "On"}))
        .send()
        .await
        .unwrap();
    let pool = HttpPool::new(8);
    let mut t = target("n1", &emu.url(), Some("n1"), None);
    t.settings.resend_after = Duration::from_secs(15);
    let bmc = Bmc::new(t, &pool).unwrap();
    let o = bmc.verify_power(true).await.unwrap();
    assert_eq!(o.after, PowerState::On);
    assert!(o.sent.is_empty(), "{o:?}");
    assert_eq!(
        emu.count("POST /redfish/v1/Systems/n1/Actions"),
        1,
        "only the earlier Reset"
    );

    // The Reset never left before the crash: sent once, after resend_after.
    let mut t = target("n2", &emu.url(), Some("n2"), None);
    t.settings.resend_after = Duration::from_secs(1);
    let bmc = Bmc::new(t, &pool).unwrap();
    let o = bmc.verify_power(true).await.unwrap();
    assert_eq!(o.sent, ["On"]);
    assert_eq!(emu.count("POST /redfish/v1/Systems/n2/Actions"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_stay_within_the_per_bmc_and_global_limits() {
    let emu = start_emulator(&fake(&["n1", "n2", "n3"]), &EmulatorOptions::default()).unwrap();
    let proxy = start_proxy(
        &emu.url(),
        Faults {
            delay: Duration::from_millis(150),
            ..Default::default()
        },
    )
    .await;
    // One BMC, limit 2, ten reads at once.
    let pool = HttpPool::new(64);
    let bmc = Arc::new(Bmc::new(target("n1", &proxy.url, Some("n1"), None), &pool).unwrap());
    bmc.system_path().await.unwrap();
    let reads: Vec<_> = (0..10)
        .map(|_| {
            let b = bmc.clone();
            tokio::spawn(async move { b.power_state().await })
        })
        .collect();
    for r in reads {
        r.await.unwrap().unwrap();
    }
    assert_eq!(proxy.state.max_in_flight.load(Ordering::SeqCst), 2);

    // Three BMCs at 2 each, but 3 in flight overall.
    proxy.state.max_in_flight.store(0, Ordering::SeqCst);
    let pool = HttpPool::new(3);
    let bmcs: Vec<Arc<Bmc>> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| Arc::new(Bmc::new(target(n, &proxy.url, Some(n), None), &pool).unwrap()))
        .collect();
    let reads: Vec<_> = (0..18)
        .map(|i| {
            let b = bmcs[i % 3].clone();
            tokio::spawn(async move { b.power_state().await })
        })
        .collect();
    for r in reads {
        r.await.unwrap().unwrap();
    }
    assert_eq!(proxy.state.max_in_flight.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_reused_renewed_on_401_and_deleted_on_close() {
    let emu = start_emulator(&fake(&["n1"]), &auth()).unwrap();
    let proxy = start_proxy(
        &emu.url(),
        Faults {
            sessions: Some((USER.to_owned(), PASSWORD.to_owned())),
            ..Default::default()
        },
    )
    .await;
    let pool = HttpPool::new(8);
    let bmc = Bmc::new(
        target("n1", &proxy.url, Some("n1"), Some((USER, PASSWORD))),
        &pool,
    )
    .unwrap();
    for _ in 0..5 {
        assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    }
    assert_eq!(bmc.auth_mode().await.unwrap(), "session (X-Auth-Token)");
    assert_eq!(proxy.state.seen.lock().unwrap().sessions_created, 1);
    // Every request after the session carried the token, none basic auth:
    // the emulator saw them all through the proxy's own credentials.
    proxy.state.expire_sessions();
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert_eq!(proxy.state.seen.lock().unwrap().sessions_created, 2);
    bmc.close().await;
    assert_eq!(proxy.state.seen.lock().unwrap().sessions_deleted, 1);

    // Wrong password: the session is refused, and so is the BMC.
    let wrong = Bmc::new(
        target("n1", &proxy.url, Some("n1"), Some((USER, "nope"))),
        &pool,
    )
    .unwrap();
    let err = wrong.power_state().await.unwrap_err();
    assert!(matches!(err, RedfishError::Unauthorized { .. }), "{err:?}");

    // sushy-emulator itself has no SessionService: basic auth.
    let direct = Bmc::new(
        target("n1", &emu.url(), Some("n1"), Some((USER, PASSWORD))),
        &pool,
    )
    .unwrap();
    assert_eq!(
        direct.auth_mode().await.unwrap(),
        "basic (no usable session service)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_time_pxe_boot_is_set_once() {
    let emu = start_emulator(&fake(&["n1"]), &auth()).unwrap();
    let pool = HttpPool::new(8);
    let bmc = Bmc::new(
        target("n1", &emu.url(), Some("n1"), Some((USER, PASSWORD))),
        &pool,
    )
    .unwrap();
    assert!(bmc.boot_once("Pxe", false).await.unwrap());
    let sys = bmc.system().await.unwrap();
    assert_eq!(sys.boot_override_target.as_deref(), Some("Pxe"));
    // (The emulator always shows BootSourceOverrideEnabled = Continuous, so
    // "nothing sent when already set" is tested on the DMTF mockup.)
    assert_eq!(
        emu.count("PATCH /redfish/v1/Systems/n1 204"),
        1,
        "{:#?}",
        emu.requests()
    );
    let err = bmc.boot_once("Floppy", false).await.unwrap_err();
    assert!(matches!(err, RedfishError::Unsupported { .. }), "{err:?}");
    // The fake driver's systems link no Bios: a typed refusal, no request.
    let err = bmc.bios().await.unwrap_err();
    assert!(err.to_string().ends_with("no Bios resource"), "{err}");
    assert_eq!(emu.count("GET /redfish/v1/Systems/n1/BIOS"), 0);
}

/// A credentials file (mode 0600) with `password`.
fn credentials_file(dir: &std::path::Path, password: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("bmc.cred");
    let tmp = dir.join("bmc.cred.new");
    std::fs::write(
        &tmp,
        format!("username = \"{USER}\"\npassword = \"{password}\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Replaced as an admin's tool does: a new file renamed over the old.
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// A BMC whose credentials come from `file`, as the inventory makes it.
fn bmc_with_file(url: &str, file: &std::path::Path, pool: &HttpPool) -> Bmc {
    let mut t = target("n1", url, Some("n1"), None);
    t.credentials = Some(accord_redfish::inventory::read_credentials(file).unwrap());
    t.credentials_file = Some(file.to_owned());
    t.settings.max_failed_logins = accord_redfish::client::DEFAULT_MAX_FAILED_LOGINS;
    Bmc::new(t, pool).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_credentials_are_picked_up_without_a_restart() {
    // The proxy's SessionService plays the BMC's accounts (the emulator
    // behind it checks none).
    let emu = start_emulator(&fake(&["n1"]), &EmulatorOptions::default()).unwrap();
    let proxy = start_proxy(
        &emu.url(),
        Faults {
            sessions: Some((USER.to_owned(), PASSWORD.to_owned())),
            ..Default::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = credentials_file(dir.path(), PASSWORD);
    let pool = HttpPool::new(8);
    let bmc = bmc_with_file(&proxy.url, &file, &pool);
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    // The admin rotates the password on the BMC (its sessions end) and in
    // the file.
    proxy.state.faults.lock().unwrap().sessions =
        Some((USER.to_owned(), "rotated-password-2".to_owned()));
    proxy.state.expire_sessions();
    credentials_file(dir.path(), "rotated-password-2");
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    {
        let seen = proxy.state.seen.lock().unwrap();
        assert_eq!(seen.sessions_created, 2, "{:?}", seen.requests);
        // No login refused: the new file was read before the login.
        let logins_made = seen
            .requests
            .iter()
            .filter(|r| r.starts_with("POST /redfish/v1/SessionService/Sessions"))
            .count();
        assert_eq!(logins_made, 2, "{:?}", seen.requests);
    }
    // SIGHUP's path: read again on demand; unchanged, nothing happens.
    assert!(!bmc.reload_credentials().await.unwrap());
    bmc.close().await;
    assert_eq!(proxy.state.seen.lock().unwrap().sessions_deleted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_rounds_with_a_wrong_password_make_at_most_the_bounded_logins() {
    let emu = start_emulator(&fake(&["n1"]), &auth()).unwrap();
    let pool = HttpPool::new(8);
    let dir = tempfile::tempdir().unwrap();
    let logins = |requests: &[String]| {
        requests
            .iter()
            .filter(|r| r.starts_with("POST /redfish/v1/SessionService/Sessions"))
            .count()
    };
    // With sessions: each login is a session POST.
    let proxy = start_proxy(
        &emu.url(),
        Faults {
            sessions: Some((USER.to_owned(), PASSWORD.to_owned())),
            ..Default::default()
        },
    )
    .await;
    let file = credentials_file(dir.path(), "wrong-password");
    let bmc = bmc_with_file(&proxy.url, &file, &pool);
    let mut held = 0;
    for _ in 0..20 {
        match bmc.power_state().await.unwrap_err() {
            RedfishError::Unauthorized { .. } => {}
            RedfishError::LoginHeld { .. } => held += 1,
            e => panic!("{e:?}"),
        }
    }
    let made = logins(&proxy.state.requests());
    assert!(
        (1..=accord_redfish::client::DEFAULT_MAX_FAILED_LOGINS as usize).contains(&made),
        "{made} logins"
    );
    assert_eq!(held, 20 - made);
    // The right password in the file: the hold is lifted at once.
    credentials_file(dir.path(), PASSWORD);
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    bmc.close().await;

    // Basic auth (no session service): every request is a login.
    let basic = start_proxy(&emu.url(), Faults::default()).await;
    let file = credentials_file(dir.path(), "wrong-password");
    let bmc = bmc_with_file(&basic.url, &file, &pool);
    for _ in 0..20 {
        assert!(bmc.power_state().await.is_err());
    }
    let sent = basic
        .state
        .requests()
        .iter()
        // The service root is read without credentials.
        .filter(|r| *r != "GET /redfish/v1" && *r != "GET /redfish/v1/")
        .count();
    assert!(
        sent <= accord_redfish::client::DEFAULT_MAX_FAILED_LOGINS as usize,
        "{:?}",
        basic.state.requests()
    );
}
