//! End to end in the lab, with the real accordd: a running node whose
//! software hangs (its agent stops, its kubelet stops posting status, the
//! BMC still shows it On) becomes Unhealthy; its gang, evicted by
//! Kubernetes, is planned onto other nodes; with repair on, the empty
//! unhealthy node is power-cycled once and comes back.

use std::path::Path;
use std::time::Duration;

use accord::lifecycle::Stage;
use accord_lab::fixtures::{gang, FLEET};
use accord_lab::Scenario;

use crate::support;
use support::lab::*;

/// Unhealthy 3 s after the Node goes NotReady; evicted after 5 s; repair
/// on (one power cycle per node, none while half the fleet is unhealthy).
fn scenario_text() -> String {
    format!(
        "[lab]\n{GANGS_ON}\n{QUICK}\nevict_after_ms = 5000\n\n\
         [control]\ntick_ms = 1000\ntransition_poll_ms = 500\nbmc_poll_ms = 5000\n\
         deadlines = {{ power_on_s = 60, boot_to_agent_s = 60, agent_to_ready_s = 30, unhealthy_after_s = 3 }}\n\n\
         [control.repair]\nenabled = true\nmax_cycles_per_node = 1\nmax_unhealthy_percent = 50\n\n\
         {FLEET}\n\
         [[submit]]\nname = \"train\"\nrun_ms = 600000\nmanifests = '''\n{}'''\n",
        gang("train", 1)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_node_becomes_unhealthy_its_gang_moves_and_repair_power_cycles_it_once() {
    let _slot = shared_world().await;
    let s = Scenario::parse(&scenario_text(), Path::new("health.toml")).expect("valid scenario");
    let lab = start("a_hung_node_becomes_unhealthy", s).await;
    lab.release("train").unwrap();
    bound(&lab, "train", Duration::from_secs(120)).await;
    let first: Vec<String> = nodes_of(&lab, "ml/train-").into_iter().collect();
    assert_eq!(first.len(), 1, "{first:?}");
    let sick = first[0].clone();
    let resets_before = lab.proxy.power_ons(&sick).len();
    assert_eq!(resets_before, 1);

    // The machine hangs.
    assert!(lab.hang(&sick));
    let st = lab
        .wait_status(
            &format!("{sick} Unhealthy in accordd's status"),
            Duration::from_secs(60),
            |s| {
                s.nodes
                    .iter()
                    .any(|n| n.name == sick && n.stage == Stage::Unhealthy)
            },
        )
        .await
        .unwrap();
    let reason = st
        .nodes
        .iter()
        .find(|n| n.name == sick)
        .and_then(|n| n.reason.clone())
        .unwrap_or_default();
    assert!(reason.contains("NotReady"), "{reason}");
    let events = lab.api.list("events.k8s.io/v1", "Event");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "NodeUnhealthy" && e["regarding"]["name"] == sick.as_str()),
        "{events:#?}"
    );

    // Evicted, the gang is planned and bound elsewhere.
    lab.wait_lab(
        "the gang's pod bound on another node",
        Duration::from_secs(120),
        |lab| {
            let now = nodes_of(lab, "ml/train-");
            !now.is_empty() && !now.contains(&sick)
        },
    )
    .await
    .unwrap();

    // Repair: the empty unhealthy node is power-cycled once and comes back.
    let st = lab
        .wait_status(
            &format!("{sick} back (Idle) after its repair power cycle"),
            Duration::from_secs(120),
            |s| {
                s.nodes
                    .iter()
                    .any(|n| n.name == sick && matches!(n.stage, Stage::Idle | Stage::Ready))
            },
        )
        .await
        .unwrap();
    let back = st.nodes.iter().find(|n| n.name == sick).unwrap();
    assert!(matches!(back.stage, Stage::Idle | Stage::Ready), "{back:?}");
    assert_eq!(lab.proxy.power_ons(&sick).len(), 2, "one repair power-on");
    let events = lab.api.list("events.k8s.io/v1", "Event");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "NodeRepair" && e["regarding"]["name"] == sick.as_str())
            .count(),
        1,
        "{events:#?}"
    );
    let m = metrics(&lab).await;
    assert!(
        m.contains("accord_actions_total{kind=\"repair\",result=\"power_cycle\"} 1"),
        "{m}"
    );
    // The gang stayed where it moved.
    assert!(!nodes_of(&lab, "ml/train-").contains(&sick));
}

/// `accordctl power` asks accordd: it refuses a power-off of a node with
/// a work pod, takes an idle node's through its taint (a graceful
/// shutdown), and a forced one at once (ForceOff), journaled and said as
/// forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accordctl_power_goes_through_accordds_checks_and_journal() {
    let _slot = shared_world().await;
    let test = "accordctl_power_goes_through_accordds_checks_and_journal";
    let lab = start(test, scenario(QUICK, FLEET, &[])).await;
    let ctl = |args: &[&str]| accordctl(&lab, args);
    lab.wait_status("every node Off", Duration::from_secs(60), |s| {
        s.nodes.len() == 9 && s.nodes.iter().all(|n| n.stage == Stage::Off)
    })
    .await
    .unwrap();
    let (ok, out, err) = ctl(&["power", "off", "r1-n1"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("r1-n1  off nothing to do: it is already off"),
        "{out}"
    );
    let (ok, out, err) = ctl(&["power", "on", "r1-n1", "r2-n1"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("r1-n1  on accepted") && out.contains("r2-n1  on accepted"),
        "{out}"
    );
    lab.wait_status("r1-n1 and r2-n1 up", Duration::from_secs(90), |s| {
        ["r1-n1", "r2-n1"].iter().all(|node| {
            s.nodes
                .iter()
                .any(|n| n.name == *node && matches!(n.stage, Stage::Idle | Stage::Ready))
        })
    })
    .await
    .unwrap();
    assert_eq!(lab.proxy.power_ons("r1-n1").len(), 1);
    assert_eq!(lab.nodes_on(), set(&["r1-n1", "r2-n1"]));

    // A work pod on r1-n1: its power-off is refused, naming why.
    lab.api.apply(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "pinned"},
        "spec": {"nodeName": "r1-n1", "containers": [{"name": "c", "image": "c",
            "resources": {"requests": {"cpu": "1"}}}]}
    }));
    lab.wait_status("r1-n1 InUse", Duration::from_secs(60), |s| {
        s.nodes
            .iter()
            .any(|n| n.name == "r1-n1" && n.stage == Stage::InUse)
    })
    .await
    .unwrap();
    let (ok, out, _) = ctl(&["power", "off", "r1-n1"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("r1-n1  REFUSED  node r1-n1: 1 work pod(s) bound to it"),
        "{out}"
    );
    // r2-n1 is idle: tainted, then shut down gracefully.
    let (ok, out, err) = ctl(&["power", "off", "r2-n1"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("r2-n1  off accepted: tainted accord.dev/powering-off"),
        "{out}"
    );
    lab.wait_lab("the machine r2-n1 off", Duration::from_secs(60), |lab| {
        !lab.nodes_on().contains("r2-n1")
    })
    .await
    .unwrap();
    // Forced: r1-n1 goes at once, pod and all.
    let (ok, out, err) = ctl(&["power", "off", "r1-n1", "--force"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("r1-n1  off accepted (FORCED)"), "{out}");
    assert!(err.contains("--force"), "a warning on stderr: {err}");
    lab.wait_lab("the machine r1-n1 off", Duration::from_secs(60), |lab| {
        !lab.nodes_on().contains("r1-n1")
    })
    .await
    .unwrap();
    let offs = |node: &str| -> Vec<Option<String>> {
        lab.proxy
            .log()
            .into_iter()
            .filter(|l| {
                l.method == "POST" && !l.power_on && l.path == accord_lab::proxy::reset_path(node)
            })
            .map(|l| l.reset_type)
            .collect()
    };
    assert_eq!(offs("r2-n1"), [Some("GracefulShutdown".to_owned())]);
    assert_eq!(offs("r1-n1"), [Some("ForceOff".to_owned())]);
    let events = lab.api.list("events.k8s.io/v1", "Event");
    let said = |reason: &str, node: &str| {
        events
            .iter()
            .any(|e| e["reason"] == reason && e["regarding"]["name"] == node)
    };
    assert!(
        said("PowerForced", "r1-n1") && said("AdminPowerOff", "r2-n1"),
        "{events:#?}"
    );
    // Journaled as asked by an admin, the forced one as forced.
    let log = std::fs::read_to_string(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lab-{test}.accordd.log")),
    )
    .unwrap();
    let journaled = |node: &str, by: &str| {
        log.lines().any(|l| {
            l.contains("admin power action journaled")
                && l.contains(&format!("node={node}"))
                && l.contains(by)
        })
    };
    assert!(journaled("r1-n1", "requested_by=admin, forced"), "{log}");
    assert!(journaled("r2-n1", "requested_by=admin"), "{log}");
}
