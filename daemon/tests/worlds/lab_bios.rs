//! BIOS profiles end to end in the lab: the real accordd stages a node's
//! profile through the lab BMCs' `@Redfish.Settings` before its power-on
//! Reset, reads it back once the machine is on and keeps what it verified
//! (status, `accordctl nodes`, its store, across a restart); a machine
//! whose BIOS drops staged settings fails with every attribute that did
//! not take (status reason, a Warning event on its Node, its Node tainted
//! so the scheduler keeps off it), and the gang starts elsewhere.

use std::time::Duration;

use accord::lifecycle::Stage;
use accord::truth::BIOS_TAINT_KEY;
use accord_api::control::{BiosResult, BiosState, ControlStatus};
use accord_lab::fixtures::FLEET;
use accord_lab::Lab;

use crate::support;
use support::lab::*;

/// The scenario's BIOS: one profile, and r1-n1's BIOS drops what is
/// staged (every machine starts with the lab's default attributes:
/// `ProcTurboMode = "Enabled"`, `SysProfile = "Balanced"`, ...).
const BIOS: &str = r#"
[lab.bios_profiles.gpu-perf]
description = "steady clocks: turbo off, performance profile"
attributes = { ProcTurboMode = "Disabled", SysProfile = "PerfOptimized" }

[lab.machines.r1-n1]
bios_never_applies = true
"#;

/// What accordd says of r1-n1.
const DID_NOT_TAKE: &str = "BIOS profile gpu-perf did not take: \
    ProcTurboMode is \"Enabled\", wanted \"Disabled\"; SysProfile is \"Balanced\", wanted \"PerfOptimized\"";

/// One rack of three dark nodes that all want `gpu-perf`, powered on one
/// at a time (`max_concurrent_power_ons = 1`: a wave each).
fn fleet() -> String {
    let mut fleet = FLEET[..FLEET.find("[[fleet.nodes]]").unwrap()].replace(
        "name = \"r1\"\n",
        "name = \"r1\"\nmax_concurrent_power_ons = 1\n",
    );
    for i in 1..=3 {
        fleet.push_str(&format!(
            "[[fleet.nodes]]\nname = \"r1-n{i}\"\nrack = \"r1\"\nprofile = \"h100\"\nbios_profile = \"gpu-perf\"\n"
        ));
    }
    fleet
}

fn bios_state(s: &ControlStatus, node: &str) -> Option<(BiosState, bool)> {
    let b = s.nodes.iter().find(|n| n.name == node)?.bios.as_ref()?;
    Some((b.state, b.verified_at.is_some()))
}

/// The value of Accord's BIOS taint on `node`'s Kubernetes Node.
fn bios_taint(lab: &Lab, node: &str) -> Option<String> {
    let n = lab.api.get("v1", "Node", "", node)?;
    n["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == BIOS_TAINT_KEY)
        .map(|t| {
            assert_eq!(t["effect"], "NoSchedule", "{t}");
            t["value"].as_str().unwrap_or("").to_owned()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bios_profiles_are_staged_before_power_on_verified_after_and_a_failed_node_moves_the_gang()
{
    let _slot = shared_world().await;
    let started = tokio::time::Instant::now();
    // The planner's first picks for the two-pod gang are r1-n1 and r1-n2.
    let lab = start_gang(
        "bios_profiles_are_staged_before_power_on_verified_after_and_a_failed_node_moves_the_gang",
        &format!("{QUICK}\n{BIOS}"),
        &fleet(),
        "train",
        2,
    )
    .await;

    // r1-n1 fails with every attribute that did not take.
    let st = lab
        .wait_status(
            "r1-n1 Failed for its BIOS profile",
            Duration::from_secs(90),
            |s| {
                s.nodes
                    .iter()
                    .any(|n| n.name == "r1-n1" && n.stage == Stage::Failed)
            },
        )
        .await
        .unwrap();
    let failed = st.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert_eq!(failed.reason.as_deref(), Some(DID_NOT_TAKE), "{failed:?}");
    let b = failed.bios.as_ref().unwrap();
    assert_eq!(b.state, BiosState::Failed);
    assert_eq!(b.reason.as_deref(), Some(DID_NOT_TAKE));

    // The gang starts elsewhere: r1-n2 and r1-n3 (powered on for it once
    // r1-n1 failed); nothing is ever bound on r1-n1.
    let took = bound(&lab, "train", Duration::from_secs(150)).await;
    assert_eq!(nodes_of(&lab, "ml/train-"), set(&["r1-n2", "r1-n3"]));
    assert!(
        lab.bound_pods().values().all(|n| n != "r1-n1"),
        "{:?}",
        lab.bound_pods()
    );

    // Staged before each power-on: the Settings PATCH reached the BMC
    // before that node's Reset, asking for OnReset, with the profile's
    // attributes; one of each per node.
    for n in ["r1-n1", "r1-n2", "r1-n3"] {
        let patches = lab.proxy.bios_stagings(n);
        let resets = lab.proxy.power_ons(n);
        assert_eq!(patches.len(), 1, "{n}: {patches:?}");
        assert_eq!(resets.len(), 1, "{n}: {resets:?}");
        assert!(patches[0].at < resets[0].at, "{n}: PATCH after the Reset");
        let body = patches[0].body.as_deref().unwrap_or("");
        assert!(
            body.contains(r#""@Redfish.SettingsApplyTime":{"ApplyTime":"OnReset"}"#),
            "{n}: {body}"
        );
        assert!(
            body.contains(r#""ProcTurboMode":"Disabled""#)
                && body.contains(r#""SysProfile":"PerfOptimized""#),
            "{n}: {body}"
        );
    }
    // Staging is part of the power-on, so the rack's limit holds for it:
    // r1-n2 (the second wave) is staged only once r1-n1's power-on is
    // through.
    let reset_n1 = &lab.proxy.power_ons("r1-n1")[0];
    let patch_n2 = &lab.proxy.bios_stagings("r1-n2")[0];
    assert!(
        patch_n2.at > reset_n1.at,
        "r1-n2 staged before r1-n1's Reset: {:?}",
        lab.proxy.log()
    );
    // The lab's BIOS took them on r1-n2 and r1-n3, not on r1-n1.
    let attr = |n: &str| lab.proxy.bios_attributes(n).unwrap()["ProcTurboMode"].clone();
    assert_eq!(attr("r1-n1"), "Enabled");
    assert_eq!(attr("r1-n2"), "Disabled");
    assert_eq!(attr("r1-n3"), "Disabled");

    // Verified after boot: the status and `accordctl nodes` show it.
    let st = lab
        .wait_status(
            "gpu-perf verified on r1-n2 and r1-n3",
            Duration::from_secs(30),
            |s| {
                ["r1-n2", "r1-n3"]
                    .iter()
                    .all(|n| bios_state(s, n) == Some((BiosState::Applied, true)))
            },
        )
        .await
        .unwrap();
    let b = st
        .nodes
        .iter()
        .find(|n| n.name == "r1-n2")
        .and_then(|n| n.bios.clone())
        .unwrap();
    assert_eq!(b.applied.as_deref(), Some("gpu-perf"));
    // Every machine's agent has reported (r1-n1 came up too, with its
    // Node held off by Accord's taint).
    lab.wait_lab(
        "r1-n1's Node registered and tainted accord.dev/bios=failed",
        Duration::from_secs(30),
        |lab| bios_taint(lab, "r1-n1").as_deref() == Some("failed"),
    )
    .await
    .unwrap();
    lab.wait_lab(
        "Accord's BIOS taint gone from r1-n2 and r1-n3",
        Duration::from_secs(30),
        |lab| {
            ["r1-n2", "r1-n3"]
                .iter()
                .all(|n| lab.api.get("v1", "Node", "", n).is_some() && bios_taint(lab, n).is_none())
        },
    )
    .await
    .unwrap();
    let (ok, out, err) = accordctl(&lab, &["nodes"]);
    assert!(ok, "{err}");
    assert!(out.lines().next().unwrap().contains("BIOS"), "{out}");
    let row = |n: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{n} ")))
            .unwrap_or_else(|| panic!("no row for {n} in:\n{out}"))
            .to_owned()
    };
    assert!(row("r1-n1").contains("gpu-perf FAILED"), "{out}");
    for n in ["r1-n2", "r1-n3"] {
        let r = row(n);
        assert!(
            r.contains("gpu-perf") && !r.contains("FAILED") && !r.contains("staged"),
            "{out}"
        );
    }

    // A Warning event on r1-n1's Node says which attributes.
    let on_node = |e: &serde_json::Value| {
        e["regarding"]["kind"] == "Node"
            && e["regarding"]["name"] == "r1-n1"
            && e["reason"] == "BiosProfileFailed"
    };
    lab.wait_lab(
        "a BiosProfileFailed event on Node r1-n1",
        Duration::from_secs(20),
        |lab| {
            lab.api
                .list("events.k8s.io/v1", "Event")
                .iter()
                .any(on_node)
        },
    )
    .await
    .unwrap();
    let events = lab.api.list("events.k8s.io/v1", "Event");
    let ev: Vec<_> = events.iter().filter(|e| on_node(e)).collect();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["type"], "Warning");
    assert_eq!(ev[0]["note"], DID_NOT_TAKE);

    // Counted, and in the lab's summary.
    let m = metrics(&lab).await;
    for (result, n) in [("staged", 3), ("verified", 2), ("failed", 1)] {
        assert!(
            m.contains(&format!(
                "accord_bios_profiles_total{{result=\"{result}\"}} {n}"
            )),
            "{result} {n}:\n{m}"
        );
    }
    let summary = lab.summary(Some(&st));
    assert_eq!(
        (
            summary.bios.staged,
            summary.bios.verified,
            summary.bios.failed
        ),
        (3, 2, 1),
        "{summary:?}"
    );
    assert!(
        summary.render().contains(
            "BIOS profiles: staged 3 (Settings PATCHes), verified on 2 node(s), failed on 1"
        ),
        "{}",
        summary.render()
    );

    // The store keeps it: stopped, accordd's store holds each outcome...
    let status = lab.stop_daemon(Duration::from_secs(30)).await.unwrap();
    assert!(status.success(), "{status}; {}", lab.daemon_report());
    {
        let store = accordd::store::Store::open(&lab.store_dir()).unwrap();
        let (records, bad) = store.bios_records().unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        for n in ["r1-n2", "r1-n3"] {
            assert_eq!(records[n].profile, "gpu-perf");
            assert_eq!(records[n].result, BiosResult::Verified, "{n}");
        }
        assert_eq!(
            records["r1-n1"].result,
            BiosResult::Failed {
                reason: DID_NOT_TAKE.into()
            }
        );
        store.close(accordd::store::CLOSE_WITHIN).unwrap();
    }
    // ...and restarted, it plans with them: r1-n2 and r1-n3 show the
    // profile applied, r1-n1 is held Failed (it runs with what did not
    // take), nothing is staged again.
    let patches = lab
        .proxy
        .log()
        .iter()
        .filter(|l| l.method == "PATCH")
        .count();
    lab.start_daemon().unwrap();
    let st = lab
        .wait_status(
            "after the restart: r1-n2 and r1-n3 up with gpu-perf applied, r1-n1 Failed",
            Duration::from_secs(60),
            |s| {
                ["r1-n2", "r1-n3"].iter().all(|n| {
                    bios_state(s, n) == Some((BiosState::Applied, true))
                        && s.nodes
                            .iter()
                            .any(|x| &x.name == n && x.stage == Stage::InUse)
                }) && s
                    .nodes
                    .iter()
                    .any(|x| x.name == "r1-n1" && x.stage == Stage::Failed)
            },
        )
        .await
        .unwrap();
    let st = rounds_after(&lab, &st, 3).await;
    let r1n1 = st.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert_eq!(r1n1.stage, Stage::Failed, "{r1n1:?}");
    assert_eq!(r1n1.reason.as_deref(), Some(DID_NOT_TAKE));
    assert_eq!(bios_taint(&lab, "r1-n1").as_deref(), Some("failed"));
    assert_eq!(
        lab.proxy
            .log()
            .iter()
            .filter(|l| l.method == "PATCH")
            .count(),
        patches,
        "nothing staged again after the restart"
    );
    assert_eq!(nodes_of(&lab, "ml/train-"), set(&["r1-n2", "r1-n3"]));
    eprintln!(
        "lab_bios: gang bound {took:.1} s after submission (one node failed for its BIOS); whole test {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
