//! End-to-end in the local lab: sushy-emulator BMCs (behind the lab's
//! proxy), the fake Kubernetes API, agents replaying recorded hardware, the
//! lab's independent binder, and the real `accordd` binary as a child
//! process. One lab at a time (each runs an emulator, accordd and ten
//! agents; two cores).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use accord::lifecycle::Stage;
use accord_api::control::{IntentAction, WorkloadState};
use accord_api::text::render_explain;
use accord_lab::fixtures::{gang, FLEET};
use accord_lab::{Lab, Scenario};

use crate::support;
use support::lab::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_gang_powers_on_exactly_its_rack_and_binds() {
    let _slot = shared_world().await;
    let lab = start_gang(
        "a_rack_gang_powers_on_exactly_its_rack_and_binds",
        QUICK,
        FLEET,
        "train",
        4,
    )
    .await;
    let to_bound = bound(&lab, "train", Duration::from_secs(120)).await;

    // r1 and r3 have three and two nodes: all of r2, nothing else.
    assert_eq!(lab.nodes_powered_on(), r2());
    assert_eq!(nodes_of(&lab, "ml/train-"), r2(), "{:?}", lab.bound_pods());
    // One Reset per node, as the emulator logged them.
    for n in r2() {
        assert_eq!(lab.emulator_resets(&n), 1, "{n}");
    }
    for n in ["r1-n1", "r1-n2", "r1-n3", "r3-n1", "r3-n2"] {
        assert_eq!(lab.emulator_resets(n), 0, "{n}");
    }
    let (t0, _) = lab.submission_times("train");
    let first_reset = lab
        .proxy
        .log()
        .iter()
        .filter(|l| l.power_on)
        .map(|l| l.at.duration_since(t0.unwrap()).as_secs_f64())
        .reduce(f64::min)
        .unwrap();
    // accordd's lifecycle for them: in use.
    let st = lab
        .wait_status("4 nodes InUse", Duration::from_secs(20), |s| {
            s.nodes.iter().filter(|n| n.stage == Stage::InUse).count() == 4
        })
        .await
        .unwrap();
    assert!(st.workloads.is_empty(), "{:?}", st.workloads);
    println!(
        "lab figures: pending → first Reset {first_reset:.2} s (1 s batch window included); \
         pending → 4 pods bound {to_bound:.1} s"
    );
    // How fast is a figure (`lab-figures` measures it), not something a
    // loaded CI machine may fail on.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_cannot_fit_powers_nothing_and_is_explained() {
    let _slot = shared_world().await;
    let lab = start_gang(
        "a_gang_that_cannot_fit_powers_nothing_and_is_explained",
        QUICK,
        FLEET,
        "huge",
        5,
    )
    .await;
    let st = workload_in(&lab, "ml/huge", WorkloadState::CannotPlace).await;
    // Four more rounds (at least one a tick): still nothing.
    let st = rounds_after(&lab, &st, 4).await;
    assert!(st.actions.is_empty(), "{:?}", st.actions);
    assert!(st.open_intents.is_empty(), "{:?}", st.open_intents);
    assert!(
        lab.proxy.log().iter().all(|l| l.method == "GET"),
        "only reads may reach the BMCs"
    );
    assert_eq!(lab.emulator.count("POST "), 0);
    assert!(lab.nodes_powered_on().is_empty());
    let text = render_explain(&st, "ml/huge").unwrap();
    assert!(text.contains("cannot place it"), "{text}");
    assert!(text.contains("one rack"), "{text}");
    assert!(text.contains("nothing will be powered on"), "{text}");
    // The scheduler's word is there, and the two agree.
    assert!(text.contains("scheduler (ml/huge-"), "{text}");
    assert!(text.contains("agree: it fits nowhere"), "{text}");
    // A Warning event on the PodGroup says so (kubectl describe).
    let on_group = |e: &serde_json::Value| {
        e["regarding"]["kind"] == "PodGroup" && e["regarding"]["name"] == "huge"
    };
    lab.wait_lab(
        "a CannotPlace event on PodGroup ml/huge",
        Duration::from_secs(20),
        |lab| {
            lab.api
                .list("events.k8s.io/v1", "Event")
                .iter()
                .any(|e| on_group(e) && e["reason"] == "CannotPlace")
        },
    )
    .await
    .unwrap();
    let events = lab.api.list("events.k8s.io/v1", "Event");
    let on_group: Vec<_> = events.iter().filter(|e| on_group(e)).collect();
    // (Once per reason: a round that saw the gang half-marked by the
    // scheduler may have said it differently first.)
    assert!(!on_group.is_empty() && on_group.len() <= 2, "{events:?}");
    let last = on_group.last().unwrap();
    assert_eq!(last["type"], "Warning");
    assert_eq!(last["reason"], "CannotPlace");
    assert!(
        last["note"].as_str().unwrap().contains("one rack"),
        "{last}"
    );
    // A pod name finds its gang.
    let by_pod = render_explain(&st, "ml/huge-3").unwrap();
    assert!(by_pod.contains("belongs to workload ml/huge"), "{by_pod}");

    // The same through accordctl, against the running accordd.
    let ctl = |args: &[&str]| accordctl(&lab, args);
    let (ok, out, err) = ctl(&["explain", "huge"]);
    assert!(ok, "{err}");
    assert!(out.contains("ml/huge: 5 pod(s), gang minimum 5"), "{out}");
    let (ok, out, err) = ctl(&["status"]);
    assert!(ok, "{err}");
    assert!(out.contains("9 off"), "{out}");
    assert!(
        out.contains("ml/huge") && out.contains("cannot_place"),
        "{out}"
    );
    let (ok, out, err) = ctl(&["plan"]);
    assert!(ok, "{err}");
    assert!(out.contains("Actions (0)"), "{out}");
    assert!(out.contains("ml/huge"), "{out}");
    let (ok, _, err) = ctl(&["explain", "ml/nothing-here"]);
    assert!(!ok);
    assert!(err.contains("no pending pod or workload"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_powers_on_fails_and_another_is_chosen() {
    let _slot = shared_world().await;
    // One rack of five: the planner's first pick, r1-n1, has a BMC that
    // accepts the Reset and never powers the machine on.
    let mut fleet = FLEET[..FLEET.find("[[fleet.nodes]]").unwrap()].to_owned();
    for i in 1..=5 {
        fleet.push_str(&format!(
            "[[fleet.nodes]]\nname = \"r1-n{i}\"\nrack = \"r1\"\nprofile = \"h100\"\n"
        ));
    }
    let lab_settings = format!("{QUICK}\nbroken = [\"r1-n1\"]\npower_on_timeout_s = 18");
    let lab = start_gang(
        "a_node_that_never_powers_on_fails_and_another_is_chosen",
        &lab_settings,
        &fleet,
        "train",
        4,
    )
    .await;
    let st = lab
        .wait_status("r1-n1 Failed", Duration::from_secs(60), |s| {
            s.nodes
                .iter()
                .any(|n| n.name == "r1-n1" && n.stage == Stage::Failed)
        })
        .await
        .unwrap();
    let failed = st.nodes.iter().find(|n| n.name == "r1-n1").unwrap();
    assert!(
        failed.reason.as_deref().unwrap_or("").contains("power"),
        "{failed:?}"
    );
    bound(&lab, "train", Duration::from_secs(120)).await;
    assert_eq!(
        nodes_of(&lab, "ml/train-"),
        set(&["r1-n2", "r1-n3", "r1-n4", "r1-n5"])
    );
    // The emulator never got r1-n1's Reset (the proxy dropped it); the
    // machine never came on.
    assert_eq!(lab.emulator_resets("r1-n1"), 0);
    assert!(!lab.proxy.power_ons("r1-n1").is_empty());
    assert!(!lab.nodes_powered_on().contains("r1-n1"));
    // Failed is counted and visible.
    let metrics = metrics(&lab).await;
    assert!(
        metrics.contains("accord_bmc_errors_total{bmc=\"r1-n1\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_nodes_are_powered_off_after_the_idle_time() {
    let _slot = shared_world().await;
    let fleet = FLEET.replace("idle_power_off_after_s = 600", "idle_power_off_after_s = 4");
    let job = "{apiVersion: v1, kind: Pod, metadata: {namespace: ml, name: job-0}, \
               spec: {containers: [{name: t, image: t, resources: {limits: {nvidia.com/gpu: \"8\"}}}]}}\n"
        .to_owned();
    let lab = start(
        "idle_nodes_are_powered_off_after_the_idle_time",
        scenario(QUICK, &fleet, &[("job", job, 2000)]),
    )
    .await;
    lab.release("job").unwrap();
    bound(&lab, "job", Duration::from_secs(90)).await;
    let powered = lab.nodes_powered_on();
    assert_eq!(powered.len(), 1, "{powered:?}");
    let node = powered.iter().next().unwrap().clone();
    // The job ends after 2 s; 4 s idle later the node is powered off
    // (gracefully) and the emulator shows it Off.
    lab.wait_lab(
        &format!("the lab's machine {node} to go off"),
        Duration::from_secs(60),
        |lab| !lab.nodes_on().contains(&node),
    )
    .await
    .unwrap();
    // accordd sees it Off, and its power-off intent is closed (the
    // executor's own verification may land a poll after the BMC poller's).
    lab.wait_status(
        &format!("{node} Off and no intent open"),
        Duration::from_secs(20),
        |s| {
            s.open_intents.is_empty()
                && s.nodes
                    .iter()
                    .any(|n| n.name == node && n.stage == Stage::Off)
        },
    )
    .await
    .unwrap();
    let offs: Vec<String> = lab
        .emulator
        .requests()
        .into_iter()
        .filter(|r| r.starts_with(&format!("POST /redfish/v1/Systems/{node}/Actions")))
        .collect();
    assert_eq!(offs.len(), 2, "one On, one GracefulShutdown: {offs:?}");
    assert_eq!(lab.nodes_powered_on().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_flight_sends_no_second_reset_and_the_gang_starts() {
    let _slot = shared_world().await;
    let lab = start_gang(
        "kill_9_mid_flight_sends_no_second_reset_and_the_gang_starts",
        QUICK,
        FLEET,
        "train",
        4,
    )
    .await;
    // The moment the first Reset reaches a BMC, accordd dies: the others
    // are planned, sent or in flight, and none is verified.
    first_power_on_reset(&lab).await;
    lab.kill_daemon();
    let sent_before = lab.proxy.log().iter().filter(|l| l.power_on).count();
    lab.start_daemon().unwrap();
    bound(&lab, "train", Duration::from_secs(150)).await;
    assert_eq!(lab.nodes_powered_on(), r2());
    for n in r2() {
        assert_eq!(
            lab.emulator_resets(&n),
            1,
            "{n}: exactly one Reset across the crash (before the kill: {sent_before} sent)"
        );
    }
}

/// SIGTERM (systemd's stop) the moment accordd's first Reset reaches a
/// BMC: accordd exits 0 within the deadline and its store is closed (it
/// opens at once); restarted, it sends no second Reset and the gang starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_flight_exits_0_and_the_gang_starts_after_restart() {
    let _slot = shared_world().await;
    let lab = start_gang(
        "sigterm_mid_flight_exits_0_and_the_gang_starts_after_restart",
        QUICK,
        FLEET,
        "train",
        2,
    )
    .await;
    first_power_on_reset(&lab).await;
    // Its shutdown waits up to 10 s for power actions in flight and 10 s
    // for Kubernetes writes.
    let within = Duration::from_secs(30);
    let status = lab.stop_daemon(within).await.unwrap();
    assert!(
        status.success(),
        "accordd on SIGTERM: {status}; {}",
        lab.daemon_report()
    );
    // Closed: another process opens the store at once.
    let store_dir = lab.store_dir();
    let store = accordd::store::Store::open(&store_dir).unwrap_or_else(|e| {
        panic!(
            "{}: the store does not open after accordd exited 0: {e}; {}",
            store_dir.display(),
            lab.daemon_report()
        )
    });
    drop(store);
    let sent_before = lab.proxy.log().iter().filter(|l| l.power_on).count();
    lab.start_daemon().unwrap();
    bound(&lab, "train", Duration::from_secs(150)).await;
    let nodes = nodes_of(&lab, "ml/train-");
    assert_eq!(nodes.len(), 2, "{:?}", lab.bound_pods());
    assert_eq!(lab.nodes_powered_on(), nodes);
    for n in &nodes {
        assert_eq!(
            lab.emulator_resets(n),
            1,
            "{n}: exactly one Reset across the stop (before it: {sent_before} sent)"
        );
    }
    assert_eq!(
        lab.emulator.count("POST "),
        2,
        "{:?}",
        lab.emulator.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_mode_sends_nothing_to_the_bmcs() {
    let _slot = shared_world().await;
    let settings = format!("{QUICK}\nmode = \"observe\"");
    // A gang that fits r2, and one that fits nowhere (in act mode: a
    // CannotPlace event).
    let lab = start(
        "observe_mode_sends_nothing_to_the_bmcs",
        scenario(
            &settings,
            FLEET,
            &[
                ("train", gang("train", 4), 600_000),
                ("huge", gang("huge", 8), 600_000),
            ],
        ),
    )
    .await;
    lab.release("train").unwrap();
    lab.release("huge").unwrap();
    let st = workload_in(&lab, "ml/train", WorkloadState::PoweringOn).await;
    let huge = workload_in(&lab, "ml/huge", WorkloadState::CannotPlace).await;
    let text = render_explain(&huge, "ml/huge").unwrap();
    assert!(
        text.contains(
            "observe mode: would have written on PodGroup ml/huge: Warning event CannotPlace"
        ),
        "{text}"
    );
    // Four more rounds (at least one a tick): still nothing sent.
    let later = rounds_after(&lab, &st, 4).await;
    assert!(later.open_intents.is_empty(), "{:?}", later.open_intents);
    let w = st
        .workloads
        .iter()
        .find(|w| w.workload == "ml/train")
        .unwrap();
    assert_eq!(w.powering_on.iter().cloned().collect::<BTreeSet<_>>(), r2());
    let text = render_explain(&st, "ml/train").unwrap();
    assert!(text.contains("would power on"), "{text}");
    // Not a single request, not even a read, reached a BMC.
    assert!(lab.proxy.log().is_empty(), "{:?}", lab.proxy.log());
    assert_eq!(lab.emulator.count("POST "), 0);
    assert!(lab.nodes_powered_on().is_empty());
    // Nor a single write the API server: accordd only read (discovery,
    // lists, watches).
    let writes: Vec<String> = lab
        .api
        .fake()
        .expect("these tests run on the fake API")
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET "))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[test]
fn the_embedded_default_scenario_is_valid() {
    let s = Scenario::default_scenario();
    assert!(s.submit.len() >= 3);
    let fleet = s.resolve_fleet().unwrap();
    assert!(fleet.reservations.len() == 1);
    for sub in &s.submit {
        let objects = s.objects(sub).unwrap();
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == "Pod" || o["kind"] == "Job"),
            "{}",
            sub.name
        );
    }
}

#[test]
fn scenario_errors_name_the_key() {
    let bad = "[lab]\nboot_delay = 3\n[fleet]\n";
    let e = Scenario::parse(bad, Path::new("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("s.toml:2"), "{e}");
    assert!(e.contains("boot_delay"), "{e}");
    let bad = format!("[lab]\nbroken = [\"nope\"]\n{FLEET}");
    let e = Scenario::parse(&bad, Path::new("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("lab.broken"), "{e}");
}

pub(crate) fn condition(lab: &Lab, ns: &str, name: &str, type_: &str) -> Option<(String, String)> {
    let pr = lab
        .api
        .get("autoscaling.x-k8s.io/v1", "ProvisioningRequest", ns, name)?;
    pr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
}

/// Waits until the ProvisioningRequest's condition `type_` is `want`
/// (status, reason); fails at once if accordd exits.
pub(crate) async fn wait_condition(
    lab: &Lab,
    ns: &str,
    name: &str,
    type_: &str,
    want: (&str, &str),
) {
    let within = Duration::from_secs(90);
    let end = tokio::time::Instant::now() + within;
    loop {
        let got = condition(lab, ns, name, type_);
        if got.as_ref().map(|(s, r)| (s.as_str(), r.as_str())) == Some(want) {
            return;
        }
        if lab.daemon_exited().is_some() {
            panic!(
                "waiting for {ns}/{name} {type_} {want:?} (now {got:?}): {}",
                lab.daemon_report()
            );
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{ns}/{name} {type_}: {got:?} after {within:?}, wanted {want:?}; {}",
            lab.daemon_report()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The power-off Resets accordd sent any of `nodes`.
fn power_off_resets(lab: &Lab, nodes: &BTreeSet<String>) -> Vec<accord_lab::proxy::Logged> {
    lab.proxy
        .log()
        .into_iter()
        .filter(|l| {
            l.method == "POST"
                && !l.power_on
                && nodes
                    .iter()
                    .any(|n| l.path == accord_lab::proxy::reset_path(n))
        })
        .collect()
}

/// Kueue's ProvisioningRequest admission check, played by the test: it
/// creates the PodTemplate and the request, waits for Provisioned=True,
/// then admits the job (creates its pods), which land on the booked nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_requests_get_kueues_conditions_and_their_capacity() {
    let _slot = shared_world().await;
    let spec = "{nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, containers: [{name: main, image: t, resources: {requests: {cpu: \"1\", memory: 64Gi, nvidia.com/gpu: \"8\"}}}]}";
    let request = |name: &str, class: &str, count: u32| {
        format!(
            "{{apiVersion: v1, kind: PodTemplate, metadata: {{namespace: team-b, name: {name}-main}}, template: {{spec: {spec}}}}}\n---\n\
             {{apiVersion: autoscaling.x-k8s.io/v1, kind: ProvisioningRequest, metadata: {{namespace: team-b, name: {name}}}, \
             spec: {{provisioningClassName: {class}, podSets: [{{podTemplateRef: {{name: {name}-main}}, count: {count}}}]}}}}\n"
        )
    };
    const IDLE_S: u64 = 2;
    let fleet = FLEET.replace(
        "idle_power_off_after_s = 600",
        &format!("idle_power_off_after_s = {IDLE_S}"),
    );
    let lab = start(
        "provisioning_requests_get_kueues_conditions_and_their_capacity",
        scenario(
            QUICK,
            &fleet,
            &[
                (
                    "check",
                    request("check", "check-capacity.autoscaling.x-k8s.io", 2),
                    600_000,
                ),
                (
                    "atomic",
                    request(
                        "job-1-prov",
                        "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                        2,
                    ),
                    600_000,
                ),
            ],
        ),
    )
    .await;
    // check-capacity on a dark fleet: not found, and nothing powered on.
    lab.release("check").unwrap();
    wait_condition(
        &lab,
        "team-b",
        "check",
        "Provisioned",
        ("False", "CapacityIsNotFound"),
    )
    .await;
    wait_condition(&lab, "team-b", "check", "Accepted", ("True", "Accepted")).await;
    // Four more rounds: nothing is powered on for it (no Reset sent, none
    // about to be).
    let st = current_status(&lab).await;
    let st = rounds_after(&lab, &st, 4).await;
    assert!(st.open_intents.is_empty(), "{:?}", st.open_intents);
    assert!(
        lab.proxy.log().iter().all(|l| !l.power_on),
        "a power-on Reset for a check-capacity request: {:?}",
        lab.proxy.log()
    );
    assert!(lab.nodes_powered_on().is_empty());

    // best-effort-atomic: Provisioning while two nodes come up, then
    // Provisioned.
    lab.release("atomic").unwrap();
    wait_condition(
        &lab,
        "team-b",
        "job-1-prov",
        "Provisioned",
        ("False", "Provisioning"),
    )
    .await;
    wait_condition(
        &lab,
        "team-b",
        "job-1-prov",
        "Provisioned",
        ("True", "CapacityIsProvisioned"),
    )
    .await;
    let powered = lab.nodes_powered_on();
    assert_eq!(powered.len(), 2, "{powered:?}");
    // The booking holds them on past the idle time: they were idle (Ready,
    // no pods) by Provisioned=True, so by a round the idle time and two
    // ticks (1 s) later, accordd would have decided a power-off, and its
    // Reset would be on the proxy's log (an Off lands on the emulator only
    // 1-11 s after it, too late to look for). `at` is whole seconds: one
    // more. (The round's plan does list their power-off, idle for longer
    // than the threshold: the booking is what keeps it from being sent.)
    let st0 = current_status(&lab).await;
    let st = lab
        .wait_status(
            &format!("a round {IDLE_S} s + 2 ticks after round {}", st0.round),
            Duration::from_secs(30),
            |s| s.at > st0.at + IDLE_S + 2 && s.round >= st0.round + 2,
        )
        .await
        .unwrap();
    let offs = power_off_resets(&lab, &powered);
    assert!(offs.is_empty(), "booked nodes powered off: {offs:?}");
    let open_offs: Vec<_> = st
        .open_intents
        .iter()
        .filter(|i| matches!(i.action, IntentAction::PowerOff { .. }))
        .collect();
    assert!(
        open_offs.is_empty(),
        "booked nodes being powered off: {open_offs:?}"
    );
    assert_eq!(lab.nodes_on(), powered, "booked nodes stay on");
    // accordd is killed and restarted: the booking is in its store, so the
    // nodes stay on past the idle time after the restart too.
    lab.kill_daemon();
    lab.start_daemon().unwrap();
    let st0 = lab
        .wait_status(
            "accordd's first round after the restart",
            Duration::from_secs(60),
            |s| s.round >= 1 && s.round < st.round,
        )
        .await
        .unwrap();
    lab.wait_status(
        &format!(
            "a round {IDLE_S} s + 2 ticks after the restart's round {}",
            st0.round
        ),
        Duration::from_secs(30),
        |s| s.at > st0.at + IDLE_S + 2 && s.round >= st0.round + 2,
    )
    .await
    .unwrap();
    let offs = power_off_resets(&lab, &powered);
    assert!(
        offs.is_empty(),
        "booked nodes powered off after a restart: {offs:?}"
    );
    assert_eq!(
        lab.nodes_on(),
        powered,
        "booked nodes stay on across a restart"
    );
    // Kueue admits the job: its pods bind to the booked nodes.
    for i in 0..2 {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "team-b", "name": format!("job-1-{i}")},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                     "containers": [{"name": "main", "image": "t", "resources":
                        {"requests": {"cpu": "1", "memory": "64Gi", "nvidia.com/gpu": "8"}}}]},
        });
        lab.api.apply(pod);
    }
    lab.wait_lab(
        "both team-b/job-1 pods bound",
        Duration::from_secs(30),
        |lab| nodes_of(lab, "team-b/job-1-").len() == 2,
    )
    .await
    .unwrap();
    assert_eq!(nodes_of(&lab, "team-b/job-1-"), powered);
    // Nothing else was powered on for either request.
    assert_eq!(lab.nodes_powered_on(), powered);
}

/// Capacity held for a gang while its nodes boot is released when the gang
/// goes away: the nodes come up idle, nothing more is powered on, and they
/// are powered off after the idle time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_goes_away_releases_its_booting_nodes() {
    let _slot = shared_world().await;
    let fleet = FLEET.replace("idle_power_off_after_s = 600", "idle_power_off_after_s = 3");
    let lab = start_gang(
        "a_gang_that_goes_away_releases_its_booting_nodes",
        QUICK,
        &fleet,
        "train",
        4,
    )
    .await;
    // Every r2 node on its way up. (Not "all four PoweringOn, Booting or
    // AgentUp at once": the emulator lands each power-on 1–11 s after its
    // Reset, so one node may be Ready before another is even on. None has
    // the gang's pods: it binds only when all four are Ready.)
    let up = [
        Stage::PoweringOn,
        Stage::Booting,
        Stage::AgentUp,
        Stage::Ready,
    ];
    lab.wait_status(
        "r2's four nodes powering on for the gang",
        Duration::from_secs(30),
        |s| {
            r2().iter().all(|name| {
                s.nodes
                    .iter()
                    .any(|n| &n.name == name && up.contains(&n.stage))
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(lab.submission_times("train").1, None, "bound already");
    // The job is cancelled while its nodes boot.
    for i in 0..4 {
        lab.api.delete("v1", "Pod", "ml", &format!("train-{i}"));
    }
    lab.api
        .delete("scheduling.k8s.io/v1beta1", "PodGroup", "ml", "train");
    // They come up, find nothing to do, and go dark again.
    let st = lab
        .wait_status(
            "every node Off in accordd's view, no intent open",
            Duration::from_secs(120),
            |s| s.nodes.iter().all(|n| n.stage == Stage::Off) && s.open_intents.is_empty(),
        )
        .await
        .unwrap();
    assert!(st.workloads.is_empty(), "{:?}", st.workloads);
    // accordd saw every BMC Off (its poller's readings, and each
    // power-off intent verified), so the emulator shows them Off and
    // nothing powers them on again. The lab's machines read the emulator
    // on their own (a pass over all nodes, then 500 ms; a read may take up
    // to its 10 s timeout on a busy emulator): they may see the last Off a
    // pass later than accordd did.
    lab.wait_lab(
        "the lab's machines to see every BMC Off",
        Duration::from_secs(30),
        |lab| lab.nodes_on().is_empty(),
    )
    .await
    .unwrap();
    assert_eq!(lab.nodes_powered_on(), r2(), "nothing else was powered on");
    for n in r2() {
        let actions = lab
            .emulator
            .requests()
            .into_iter()
            .filter(|r| r.starts_with(&format!("POST /redfish/v1/Systems/{n}/Actions")))
            .count();
        assert_eq!(actions, 2, "{n}: one On, one GracefulShutdown");
    }
}

/// BMCs that ask for credentials and offer Redfish sessions (the lab's
/// proxy plays a SessionService): accordd logs in once per BMC and reuses
/// the session; the admin rotates the password on every BMC and in the
/// credentials file, and accordd goes on with the new one without a
/// restart (a gang still gets its nodes); SIGTERM leaves no session open
/// on any BMC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bmc_sessions_survive_a_password_rotation_and_none_is_left_after_sigterm() {
    let _slot = shared_world().await;
    let s = scenario(
        &format!("bmc_sessions = true\n{QUICK}"),
        FLEET,
        &[("train", gang("train", 1), 600_000)],
    );
    let lab = start("bmc_sessions", s).await;
    let nodes = lab.fleet.nodes.len() as u64;
    let sessions = |lab: &Lab| lab.proxy.sessions().expect("lab.bmc_sessions");
    lab.wait_lab(
        "a session open on every BMC",
        Duration::from_secs(60),
        |lab| sessions(lab).2 as u64 == nodes,
    )
    .await
    .unwrap();
    let st = current_status(&lab).await;
    rounds_after(&lab, &st, 3).await;
    let (created, _, open, refused) = sessions(&lab);
    assert_eq!(
        (created, open as u64, refused),
        (nodes, nodes, 0),
        "sessions reused"
    );

    // Rotated on every BMC (their sessions end), then in the file.
    lab.proxy.rotate_password("rotated-bmc-password-2");
    accord_lab::write_bmc_credentials(&lab.bmc_credentials_file(), "rotated-bmc-password-2")
        .unwrap();
    lab.wait_lab(
        "a session made with the new password on every BMC",
        Duration::from_secs(90),
        |lab| {
            let (c, _, o, _) = sessions(lab);
            c >= created + nodes && o as u64 == nodes
        },
    )
    .await
    .unwrap();
    lab.release("train").unwrap();
    bound(&lab, "train", Duration::from_secs(120)).await;
    let (_, _, _, refused) = sessions(&lab);
    // At most the bound per BMC (the old password tried in the moment
    // between the two changes).
    assert!(
        refused <= nodes * accord_redfish::client::DEFAULT_MAX_FAILED_LOGINS as u64,
        "{refused} logins refused"
    );

    let exit = lab.stop_daemon(Duration::from_secs(60)).await.unwrap();
    assert!(exit.success(), "{exit:?}");
    let (created, deleted, open, _) = sessions(&lab);
    assert_eq!(
        open, 0,
        "sessions left on the BMCs: created {created}, deleted {deleted}"
    );
}
