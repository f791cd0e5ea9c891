//! The lab's plumbing for several accordd replicas (`[lab.ha]`), with a
//! stand-in for accordd (a shell script: `check-config` passes, `run`
//! waits for SIGTERM): each replica's accordd.toml and listeners, what
//! the BMC proxy and the fake API attribute to each, the Lease read
//! from the API server, the fault driver and the summary's `ha` section.
//! The real accordd against the lab: daemon/tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_lab::{Lab, LabOptions, Scenario};
use serde_json::{json, Value};

const FLEET: &str = "[[fleet.racks]]\nname = \"r1\"\n\
    [fleet.profiles.p]\ngpus = 8\ngpu_model = \"H\"\ncpu = \"4\"\nmemory = \"1Ti\"\n\
    [[fleet.nodes]]\nname = \"n1\"\nrack = \"r1\"\nprofile = \"p\"\n\
    [[fleet.nodes]]\nname = \"n2\"\nrack = \"r1\"\nprofile = \"p\"\n";

/// accordd's stand-in: passes `check-config`; `run` waits for SIGTERM
/// and exits 0.
const FAKE_ACCORDD: &str = "case \"$1\" in\n\
    check-config) exit 0 ;;\n\
    run) trap 'exit 0' TERM; while :; do sleep 0.05; done ;;\n\
    esac\nexit 2\n";

struct Setup {
    lab: Lab,
    _tmp: tempfile::TempDir,
}

async fn lab(ha: &str) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("accordd.sh");
    std::fs::write(&script, FAKE_ACCORDD).unwrap();
    let scenario = Scenario::parse(&format!("{ha}\n{FLEET}"), Path::new("ha.toml")).unwrap();
    let options = LabOptions {
        accordd_prefix: vec![script.display().to_string()],
        daemon_log: Some(tmp.path().join("accordd.log")),
        ..LabOptions::new("/bin/sh")
    };
    let lab = Lab::start(scenario, options).await.unwrap();
    Setup { lab, _tmp: tmp }
}

fn toml_file(path: &Path) -> toml::Table {
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The BMC endpoint a replica's inventory names.
fn bmc_endpoint(config: &toml::Table) -> String {
    let inventory = PathBuf::from(config["redfish"]["inventory"].as_str().unwrap());
    toml_file(&inventory)["bmc"][0]["endpoint"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn replica_config(lab: &Lab, identity: &str) -> toml::Table {
    toml_file(&lab.replica_config(identity).unwrap())
}

fn lease(holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"namespace": "accord-system", "name": "accordd"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 6},
    })
}

async fn reset(endpoint: &str, node: &str, reset_type: &str) {
    reqwest::Client::new()
        .post(format!(
            "{endpoint}/redfish/v1/Systems/{node}/Actions/ComputerSystem.Reset"
        ))
        .json(&json!({ "ResetType": reset_type }))
        .send()
        .await
        .unwrap();
}

const HA: &str =
    "[lab.ha]\nreplicas = 2\nlease_duration_s = 6\nrenew_deadline_s = 4\nretry_period_s = 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_has_its_own_config_and_listeners_and_what_it_sends_is_its() {
    let s = lab(HA).await;
    let lab = &s.lab;
    assert_eq!(lab.replica_count(), 2);
    assert_eq!(lab.replica_identities(), ["accordd-a", "accordd-b"]);
    let mut seen_urls = Vec::new();
    for id in ["accordd-a", "accordd-b"] {
        let c = replica_config(lab, id);
        let ha = &c["ha"];
        assert_eq!(ha["enabled"].as_bool(), Some(true));
        assert_eq!(ha["identity"].as_str(), Some(id));
        assert_eq!(ha["namespace"].as_str(), Some("accord-system"));
        assert_eq!(ha["lease_name"].as_str(), Some("accordd"));
        assert_eq!(ha["lease_duration_s"].as_integer(), Some(6));
        assert_eq!(ha["renew_deadline_s"].as_integer(), Some(4));
        assert_eq!(ha["retry_period_s"].as_integer(), Some(1));
        assert_eq!(
            c["store"]["dir"].as_str(),
            Some(lab.replica_store_dir(id).unwrap().to_str().unwrap())
        );
        let listen = c["server"]["listen"].as_str().unwrap();
        assert_eq!(
            lab.replica_url(id).unwrap(),
            format!("http://{listen}"),
            "{id}"
        );
        let kube = c["kubernetes"]["url"].as_str().unwrap().to_owned();
        let bmc = bmc_endpoint(&c);
        assert_ne!(kube, lab.api.url());
        assert_ne!(bmc, lab.proxy.url);
        seen_urls.extend([listen.to_owned(), kube, bmc]);
    }
    let mut unique = seen_urls.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen_urls.len(), "{seen_urls:?}");
    // The single-accordd API names the first replica.
    assert_eq!(lab.config, lab.replica_config("accordd-a").unwrap());
    assert_eq!(lab.daemon_url, lab.replica_url("accordd-a").unwrap());
    assert_eq!(lab.store_dir(), lab.replica_store_dir("accordd-a").unwrap());
    assert!(lab.replica_url("accordd-c").is_none());

    // BMC requests through b's listener are b's.
    let b = replica_config(lab, "accordd-b");
    let endpoint = bmc_endpoint(&b);
    reqwest::get(format!("{endpoint}/redfish/v1/Systems/n1"))
        .await
        .unwrap();
    reset(&endpoint, "n1", "On").await;
    let from_b = lab.bmc_requests_from("accordd-b");
    let said: Vec<(&str, &str)> = from_b
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect();
    assert_eq!(
        said,
        [
            ("GET", "/redfish/v1/Systems/n1"),
            (
                "POST",
                "/redfish/v1/Systems/n1/Actions/ComputerSystem.Reset"
            )
        ]
    );
    assert!(lab.bmc_requests_from("accordd-a").is_empty());
    let reached = lab.proxy.resets_reached();
    assert_eq!(reached.len(), 1);
    assert_eq!(reached[0].replica.as_deref(), Some("accordd-b"));

    // Kubernetes requests through a's listener are a's; its writes are
    // what api_writes_from counts; the Lease says who leads.
    assert_eq!(lab.leader(), None);
    let a = replica_config(lab, "accordd-a");
    let kube_a = a["kubernetes"]["url"].as_str().unwrap();
    let http = reqwest::Client::new();
    http.get(format!("{kube_a}/api/v1/nodes"))
        .send()
        .await
        .unwrap();
    let created = http
        .post(format!(
            "{kube_a}/apis/coordination.k8s.io/v1/namespaces/accord-system/leases"
        ))
        .json(&lease("accordd-a"))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    let writes = lab.api_writes_from("accordd-a");
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].starts_with("POST "), "{writes:?}");
    assert!(lab.api_writes_from("accordd-b").is_empty());
    assert_eq!(
        lab.wait_leader(Duration::from_secs(5)).await.unwrap(),
        "accordd-a"
    );
    assert_eq!(lab.leader().as_deref(), Some("accordd-a"));
    // The lab notes the holder change (it polls every 100 ms).
    tokio::time::sleep(Duration::from_millis(400)).await;

    let summary = serde_json::to_value(lab.summary(None)).unwrap();
    let ha = &summary["ha"];
    assert_eq!(ha["replicas"], 2);
    assert_eq!(
        ha["bmc_writes_by_replica"],
        json!({"accordd-a": 0, "accordd-b": 1})
    );
    assert_eq!(ha["resets_per_node"], json!({"n1": 1}));
    assert_eq!(ha["leader_changes"].as_array().unwrap().len(), 1, "{ha}");
    assert_eq!(ha["leader_changes"][0]["from"], Value::Null);
    assert_eq!(ha["leader_changes"][0]["to"], "accordd-a");
    assert_eq!(ha["takeover_s"], Value::Null);
    assert!(ha.get("fault").is_none() && ha.get("writes_after_resume").is_none());
    let text = lab.summary(None).render();
    assert!(text.contains("HA: 2 accordd replicas"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_is_killed_as_a_machine_powers_on_and_started_after_the_takeover() {
    let s = lab(&format!("{HA}kill_leader = {{ at = \"powering_on\" }}\n")).await;
    let lab = &s.lab;
    lab.start_daemon().unwrap();
    lab.api.apply(lease("accordd-a"));
    let a = bmc_endpoint(&replica_config(lab, "accordd-a"));
    let b = bmc_endpoint(&replica_config(lab, "accordd-b"));
    let play = async {
        // accordd-a, leading, powers n1 on: the moment.
        reset(&a, "n1", "On").await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !lab
            .daemon_report()
            .contains("accordd accordd-a is not running")
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}",
                lab.daemon_report()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // accordd-b takes the Lease over and acts.
        tokio::time::sleep(Duration::from_millis(300)).await;
        lab.api.apply(lease("accordd-b"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        reset(&b, "n2", "On").await;
    };
    let (driven, ()) = tokio::join!(lab.drive_ha(), play);
    driven.unwrap();
    let report = lab.daemon_report();
    assert!(
        report.contains("accordd accordd-a is running")
            && report.contains("accordd accordd-b is running"),
        "{report}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let summary = lab.summary(None);
    let ha = summary.ha.as_ref().expect("an ha section");
    let fault = ha.fault.as_ref().expect("the fault");
    assert_eq!(
        (
            fault.kind.as_str(),
            fault.moment.as_str(),
            fault.replica.as_str()
        ),
        ("kill_leader", "powering_on", "accordd-a")
    );
    assert_eq!(fault.new_leader.as_deref(), Some("accordd-b"));
    assert!(fault.restarted_at_s.is_some() && fault.resumed_at_s.is_none());
    let takeover = ha.takeover_s.expect("a takeover");
    assert!((0.3..5.0).contains(&takeover), "{takeover}");
    assert!(ha.first_action_after_takeover_s.is_some(), "{ha:?}");
    assert_eq!(ha.bmc_writes_by_replica["accordd-a"], 1);
    assert_eq!(ha.bmc_writes_by_replica["accordd-b"], 1);
    let changes: Vec<(Option<&str>, Option<&str>)> = ha
        .leader_changes
        .iter()
        .map(|c| (c.from.as_deref(), c.to.as_deref()))
        .collect();
    assert_eq!(
        changes,
        [
            (None, Some("accordd-a")),
            (Some("accordd-a"), Some("accordd-b"))
        ]
    );
    let text = summary.render();
    assert!(
        text.contains("kill_leader at powering_on") && text.contains("(by accordd-b)"),
        "{text}"
    );
    // Both stop cleanly on SIGTERM.
    let status = lab.stop_daemon(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_resumed_and_what_it_sends_after_is_counted() {
    let s = lab(&format!(
        "{HA}pause_leader = {{ at = \"powering_on\", pause_s = 2 }}\n"
    ))
    .await;
    let lab = &s.lab;
    lab.start_daemon().unwrap();
    lab.api.apply(lease("accordd-a"));
    let a = replica_config(lab, "accordd-a");
    let bmc_a = bmc_endpoint(&a);
    let play = async {
        reset(&bmc_a, "n1", "On").await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !lab.daemon_report().contains("accordd accordd-a is paused") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}",
                lab.daemon_report()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lab.api.apply(lease("accordd-b"));
    };
    let (driven, ()) = tokio::join!(lab.drive_ha(), play);
    driven.unwrap();
    assert!(
        lab.daemon_report().contains("accordd accordd-a is running"),
        "{}",
        lab.daemon_report()
    );
    // What the resumed replica sends now is counted: one BMC write, one
    // Kubernetes write.
    reset(&bmc_a, "n2", "On").await;
    let kube_a = a["kubernetes"]["url"].as_str().unwrap();
    reqwest::Client::new()
        .put(format!(
            "{kube_a}/apis/coordination.k8s.io/v1/namespaces/accord-system/leases/accordd"
        ))
        .json(&lease("accordd-a"))
        .send()
        .await
        .unwrap();
    let ha = lab.summary(None).ha.expect("an ha section");
    let fault = ha.fault.as_ref().expect("the fault");
    assert_eq!(fault.kind, "pause_leader");
    let resumed = fault.resumed_at_s.expect("resumed") - fault.at_s;
    assert!((1.9..4.0).contains(&resumed), "{resumed}");
    assert!(ha.takeover_s.is_some());
    let after = ha.writes_after_resume.expect("writes after the resume");
    assert_eq!((after.bmc, after.api), (1, 1));
    lab.kill_replica("accordd-b").unwrap();
    assert!(lab.kill_replica("accordd-z").is_err());
    let status = lab.stop_daemon(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_a_replica_can_wipe_its_store() {
    let s = lab(HA).await;
    let lab = &s.lab;
    lab.start_daemon().unwrap();
    let store = lab.replica_store_dir("accordd-b").unwrap();
    std::fs::create_dir_all(store.join("db")).unwrap();
    lab.restart_replica("accordd-b", false).unwrap();
    assert!(store.join("db").exists());
    lab.pause_replica("accordd-b").unwrap();
    lab.restart_replica("accordd-b", true).unwrap();
    assert!(!store.exists());
    assert!(
        lab.daemon_report().contains("accordd accordd-b is running"),
        "{}",
        lab.daemon_report()
    );
    // Each replica's output has its own file.
    let log = lab.replica_log("accordd-b").unwrap();
    assert!(log.ends_with("accordd.accordd-b.log"), "{}", log.display());
    lab.kill_daemon();
    assert!(lab
        .daemon_report()
        .contains("accordd accordd-a is not running"));
}

/// One replica (the default): the lab without HA, its files where they
/// always were, no `[ha]`, the fake API's main listener, no `ha` in the
/// summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_is_the_lab_without_ha() {
    let s = lab("[lab]\nkubernetes = \"fake\"").await;
    let lab = &s.lab;
    assert_eq!(lab.replica_count(), 1);
    assert_eq!(lab.replica_identities(), ["accordd"]);
    let d = lab.dir.path();
    assert_eq!(lab.config, d.join("accordd.toml"));
    assert_eq!(lab.store_dir(), d.join("store"));
    let c = toml_file(&lab.config);
    assert!(!c.contains_key("ha"));
    let keys: Vec<&str> = c.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "admin",
            "agents",
            "control",
            "fleet",
            "kubernetes",
            "redfish",
            "server",
            "store"
        ]
    );
    assert_eq!(c["kubernetes"]["url"].as_str(), Some(lab.api.url()));
    assert_eq!(
        c["redfish"]["inventory"].as_str(),
        Some(d.join("bmcs.toml").to_str().unwrap())
    );
    assert_eq!(bmc_endpoint(&c), lab.proxy.url);
    assert_eq!(lab.leader(), None);
    let summary = serde_json::to_value(lab.summary(None)).unwrap();
    assert!(summary.get("ha").is_none(), "{summary}");
    assert!(!lab.summary(None).render().contains("HA:"));
    lab.start_daemon().unwrap();
    assert!(lab.daemon_report().starts_with("accordd is running"));
    assert_eq!(lab.daemon_log(), lab.replica_log("accordd").as_deref());
    // The stand-in's trap is set once its shell runs.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = lab.stop_daemon(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "{status}");
}
