//! Accord against the API set of each Kubernetes version it supports
//! (the fake API server serving exactly what 1.31 … 1.37 serve):
//! discovery finds the right set, the watchers start only for what is
//! served and become ready, the missing kinds are said, pending pods are
//! planned at every version, and DRA objects at v1beta1/v1beta2 are read
//! as v1.
//!
//! These run against a real HTTP server, so time is not paused (a paused
//! clock would auto-advance past every deadline while a socket is
//! waited on); every wait is on the watchers' change signal, with a
//! deadline that names what it waited for.

use std::time::Duration;

use accord::fleet::TopologyConfig;
use accord_kube::discovery::{self, ServedApis, READS};
use accord_kube::watch::{DemandWatch, WatchedKind};
use accord_kube::{Options, Translation};
use accord_testkit::fake_api::{resources_for, FakeApi, KubeVersion, GANG_RUNTIME_CONFIG};
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(20);

fn options() -> Options {
    Options::for_topology(&TopologyConfig::default())
}

/// A pod the scheduler marked Unschedulable, asking `gpus` GPUs.
fn pending_pod(name: &str, gpus: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"containers": [{"name": "c", "image": "i",
                 "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

/// Waits (on the watchers' change signal, never a sleep) until `done`
/// holds for the snapshot, or fails after [`DEADLINE`] saying `what`.
async fn until(
    w: &DemandWatch,
    what: &str,
    done: impl Fn(&DemandWatch, &Translation) -> bool,
) -> Translation {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut changes = w.changes();
    loop {
        let t = w.snapshot(&options());
        if done(w, &t) {
            return t;
        }
        if tokio::time::timeout_at(deadline, changes.changed())
            .await
            .is_err()
        {
            panic!(
                "within {DEADLINE:?}: {what}\nnot ready: {:?}\nproblems: {:?}\n{}",
                w.not_ready(),
                w.problems(),
                t.render()
            );
        }
    }
}

/// Discovery, then the watchers on what is served, ready within the
/// deadline (or a failure naming the kinds still waited for).
async fn watch_served(api: &FakeApi) -> (ServedApis, DemandWatch) {
    let served = tokio::time::timeout(DEADLINE, discovery::discover(&api.client()))
        .await
        .expect("discovery answered within the deadline")
        .expect("discovery succeeded");
    let w = DemandWatch::start_served(api.client(), &served);
    if tokio::time::timeout(DEADLINE, w.ready()).await.is_err() {
        panic!(
            "DemandWatch not ready within {DEADLINE:?}: still waiting for {:?}; problems {:?}",
            w.not_ready(),
            w.problems()
        );
    }
    (served, w)
}

fn watched<'a>(watches: &'a [WatchedKind], kind: &str) -> &'a WatchedKind {
    watches
        .iter()
        .find(|k| k.kind == kind)
        .unwrap_or_else(|| panic!("{kind} not listed: {watches:#?}"))
}

fn missing(watches: &[WatchedKind]) -> Vec<&str> {
    watches
        .iter()
        .filter(|k| k.api_version.is_none())
        .map(|k| k.kind.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_finds_what_each_version_serves() {
    for v in KubeVersion::ALL {
        let api = FakeApi::start_version(v).await;
        let served = discovery::discover(&api.client()).await.unwrap();
        assert_eq!(served.dra_version(), v.dra_api_version(), "{v}");
        // Off by default on every version (upstream's beta rule) ...
        assert!(!served.pod_group_v1beta1(), "{v}");
        assert!(!served.workload_v1beta1(), "{v}");
        // ... and found where an admin turns it on.
        if v.can_serve_pod_group_v1beta1() {
            let on = FakeApi::start_version_config(v, &[GANG_RUNTIME_CONFIG]).await;
            let served = discovery::discover(&on.client()).await.unwrap();
            assert!(served.pod_group_v1beta1(), "{v}");
            assert!(served.workload_v1beta1(), "{v}");
        }
        for (g, ver, plural) in [
            ("", "v1", "pods"),
            ("", "v1", "nodes"),
            ("batch", "v1", "jobs"),
            ("apps", "v1", "deployments"),
            ("apps", "v1", "daemonsets"),
            ("", "v1", "persistentvolumeclaims"),
            ("", "v1", "persistentvolumes"),
            ("", "v1", "namespaces"),
            ("storage.k8s.io", "v1", "storageclasses"),
            ("storage.k8s.io", "v1", "csinodes"),
            ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
            ("autoscaling.x-k8s.io", "v1", "provisioningrequests"),
            ("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers"),
            ("scheduling.x-k8s.io", "v1alpha1", "podgroups"),
        ] {
            assert!(served.serves(g, ver, plural), "{v}: {g}/{ver} {plural}");
        }
        let pods = served.resource("v1", "pods").unwrap();
        assert!(pods.namespaced && pods.verbs.iter().any(|x| x == "watch"));
        assert!(!served.resource("v1", "nodes").unwrap().namespaced);
        // Exactly the DRA versions that version serves, nothing more.
        let dra: Vec<&str> = served
            .api_versions()
            .into_iter()
            .filter(|a| a.starts_with("resource.k8s.io/"))
            .collect();
        let expect: &[&str] = match v {
            KubeVersion::V1_31 => &[],
            KubeVersion::V1_32 => &["resource.k8s.io/v1beta1"],
            KubeVersion::V1_33 => &["resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"],
            _ => &["resource.k8s.io/v1"],
        };
        assert_eq!(dra, expect, "{v}");
        // Aggregated discovery: two requests.
        assert_eq!(api.requests(), ["GET /api", "GET /apis"], "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_discovery_reads_the_same_and_only_what_accord_reads() {
    for v in [KubeVersion::V1_31, KubeVersion::V1_33, KubeVersion::V1_37] {
        let api = FakeApi::start_version(v).await;
        let aggregated = discovery::discover(&api.client()).await.unwrap();
        // As a server before 1.26 (or behind a proxy dropping the Accept
        // parameters): the legacy lists whatever is asked.
        api.set_aggregated_discovery(false);
        let legacy = discovery::discover(&api.client()).await.unwrap();
        assert_eq!(legacy, aggregated, "{v}");
        let requests = api.requests();
        for want in [
            "GET /api/v1",
            "GET /apis/batch/v1",
            "GET /apis/jobset.x-k8s.io/v1alpha2",
        ] {
            assert!(
                requests.iter().any(|r| r == want),
                "{v}: {want} in {requests:#?}"
            );
        }
        // Groups Accord does not read are not asked about.
        for never in [
            "GET /apis/events.k8s.io/v1",
            "GET /apis/scheduling.k8s.io/v1",
        ] {
            assert!(
                !requests.iter().any(|r| r == never),
                "{v}: {never} in {requests:#?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_discovery_reads_the_fake_server_as_a_real_one() {
    // kube-rs's own discovery, both ways, on 1.33 (two DRA betas, v1beta2
    // preferred) and 1.37 (scheduling.k8s.io at v1 and v1beta1).
    let api = FakeApi::start_version(KubeVersion::V1_33).await;
    for aggregated in [false, true] {
        let d = kube::Discovery::new(api.client());
        let d = if aggregated {
            d.run_aggregated().await.unwrap()
        } else {
            d.run().await.unwrap()
        };
        let dra = d
            .get("resource.k8s.io")
            .unwrap_or_else(|| panic!("aggregated {aggregated}: no resource.k8s.io"));
        assert_eq!(dra.preferred_version_or_latest(), "v1beta2");
        let versions: Vec<&str> = dra.versions().collect();
        assert_eq!(versions, ["v1beta2", "v1beta1"], "aggregated {aggregated}");
        let (ar, caps) = dra.recommended_kind("ResourceSlice").unwrap();
        assert_eq!(
            (ar.plural.as_str(), caps.scope.clone()),
            ("resourceslices", kube::discovery::Scope::Cluster)
        );
        let core = d.get("").unwrap();
        let (pods, caps) = core.recommended_kind("Pod").unwrap();
        assert_eq!(pods.plural, "pods");
        assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
        assert!(
            caps.subresources.iter().any(|(s, _)| s.plural == "status"),
            "aggregated {aggregated}: pods/status"
        );
        assert!(!d.has_group("foo.example.com"));
    }
    let api = FakeApi::start_version_config(KubeVersion::V1_37, &[GANG_RUNTIME_CONFIG]).await;
    let d = kube::Discovery::new(api.client()).run().await.unwrap();
    let sched = d.get("scheduling.k8s.io").unwrap();
    assert_eq!(sched.preferred_version_or_latest(), "v1");
    assert!(sched
        .versioned_resources("v1beta1")
        .iter()
        .any(|(ar, _)| ar.kind == "PodGroup"));
    let info = api.client().apiserver_version().await.unwrap();
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "37"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_server_404s_what_a_version_does_not_serve() {
    let api = FakeApi::start_version(KubeVersion::V1_31).await;
    let http = reqwest::Client::new();
    for path in [
        "/apis/resource.k8s.io",
        "/apis/resource.k8s.io/v1",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1beta1/namespaces/ml/resourceclaims/c",
        "/apis/scheduling.k8s.io/v1beta1/podgroups",
        "/api/v2",
    ] {
        let resp = http.get(format!("{}{path}", api.url)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            (
                body["kind"].as_str(),
                body["reason"].as_str(),
                body["code"].as_u64()
            ),
            (Some("Status"), Some("NotFound"), Some(404)),
            "{path}: {body}"
        );
    }
    // What it does serve answers.
    for path in [
        "/apis/scheduling.k8s.io/v1",
        "/api/v1",
        "/apis/batch/v1/jobs",
    ] {
        let resp = http.get(format!("{}{path}", api.url)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    // And kube-rs sees a NotFound API error.
    let claims: kube::Api<k8s_openapi::api::resource::v1::ResourceClaim> =
        kube::Api::all(api.client());
    match claims.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert!(s.is_not_found(), "{s:?}"),
        other => panic!("expected 404, got {other:?}"),
    }
    // Without the CRDs, they are not served either.
    let api = FakeApi::start_with(
        resources_for(KubeVersion::V1_34, false),
        Duration::from_millis(500),
    )
    .await;
    let served = discovery::discover(&api.client()).await.unwrap();
    assert!(!served.serves("jobset.x-k8s.io", "v1alpha2", "jobsets"));
    assert_eq!(served.dra_version(), Some("resource.k8s.io/v1"));
}

/// The set-up each version's test shares: what is not watched, and a
/// pending pod planned.
async fn plans_a_pending_pod_at(v: KubeVersion, expect_missing: &[&str]) -> DemandWatch {
    let api = FakeApi::start_version(v).await;
    api.apply(pending_pod("solo", 4));
    let (served, w) = watch_served(&api).await;
    let watches = w.watches();
    assert_eq!(watches.len(), READS.len());
    assert_eq!(missing(&watches), expect_missing, "{v}: {watches:#?}");
    for k in &watches {
        if k.api_version.is_none() {
            assert!(
                k.note.as_deref().is_some_and(|n| !n.is_empty()),
                "{v}: {k:?}"
            );
        }
    }
    assert_eq!(
        watched(&watches, "ResourceClaim").api_version.as_deref(),
        served.dra_version(),
        "{v}"
    );
    let t = until(&w, &format!("{v}: the pending pod planned"), |_, t| {
        t.demand.workloads.len() == 1
    })
    .await;
    let pod = &t.demand.workloads[0].pod_sets[0].pod;
    assert_eq!(pod.requests["nvidia.com/gpu"], "4", "{v}");
    // A change after the first list is seen too.
    api.apply(pending_pod("second", 2));
    until(&w, &format!("{v}: the second pod planned"), |_, t| {
        t.demand.workloads.len() == 2
    })
    .await;
    // Only served kinds were watched: no watcher failed (a 404 would be a
    // problem).
    assert!(w.problems().is_empty(), "{v}: {:?}", w.problems());
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_1_31_without_dra_or_pod_groups_the_watch_is_ready_and_plans() {
    let w = plans_a_pending_pod_at(
        KubeVersion::V1_31,
        &[
            "ResourceClaim",
            "ResourceClaimTemplate",
            "DeviceClass",
            "ResourceSlice",
            "DeviceTaintRule",
            "PodGroup",
            "Workload",
        ],
    )
    .await;
    let watches = w.watches();
    assert_eq!(
        watched(&watches, "ResourceClaim").note.as_deref(),
        Some(
            "DRA claims are not planned: the server serves no resource.k8s.io version \
             Accord reads (v1, v1beta2, v1beta1)"
        )
    );
    assert!(w.devices().0.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_1_34_dra_v1_without_pod_groups_the_watch_is_ready_and_plans() {
    // DeviceTaintRules are served from 1.37 by default.
    let w = plans_a_pending_pod_at(
        KubeVersion::V1_34,
        &["DeviceTaintRule", "PodGroup", "Workload"],
    )
    .await;
    let watches = w.watches();
    let pg = watches
        .iter()
        .find(|k| k.kind == "PodGroup" && k.api_version.is_none())
        .unwrap();
    assert!(
        pg.note.as_deref().unwrap().contains("planned pod by pod"),
        "{pg:?}"
    );
    // The coscheduling PodGroup (a CRD) is watched.
    assert!(watches.iter().any(|k| k.kind == "PodGroup"
        && k.api_version.as_deref() == Some("scheduling.x-k8s.io/v1alpha1")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_1_37_with_gangs_turned_on_everything_is_watched_and_gangs_are_planned() {
    let api = FakeApi::start_version_config(KubeVersion::V1_37, &[GANG_RUNTIME_CONFIG]).await;
    api.apply(
        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"namespace": "ml", "name": "train"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}),
    );
    for name in ["w0", "w1"] {
        let mut p = pending_pod(name, 8);
        p["spec"]["schedulingGroup"] = json!({"podGroupName": "train"});
        api.apply(p);
    }
    let (_, w) = watch_served(&api).await;
    assert!(missing(&w.watches()).is_empty(), "{:#?}", w.watches());
    let t = until(&w, "1.37: the gang planned", |_, t| {
        t.demand.workloads.len() == 1 && t.demand.workloads[0].pod_count() == 2
    })
    .await;
    assert_eq!(t.demand.workloads[0].min(), 2);
    // And the solo pod path as at other versions.
    drop(w);
    plans_a_pending_pod_at(KubeVersion::V1_37, &["PodGroup", "Workload"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crds_they_are_said_missing_and_the_rest_is_ready() {
    let api = FakeApi::start_with(
        resources_for(KubeVersion::V1_34, false),
        Duration::from_millis(500),
    )
    .await;
    api.apply(pending_pod("solo", 1));
    let (_, w) = watch_served(&api).await;
    let watches = w.watches();
    let crds: Vec<&WatchedKind> = watches
        .iter()
        .filter(|k| k.api_version.is_none() && k.note.as_deref().is_some_and(|n| n.contains("CRD")))
        .collect();
    assert_eq!(crds.len(), 4, "{watches:#?}");
    until(&w, "the pod planned without CRDs", |_, t| {
        t.demand.workloads.len() == 1
    })
    .await;
    // No watcher was started for what is not served: nothing 404s.
    assert!(
        !api.requests()
            .iter()
            .any(|r| r.contains("x-k8s.io") && r.contains("watch")),
        "{:#?}",
        api.requests()
    );
    assert!(w.problems().is_empty(), "{:?}", w.problems());
}

/// A v1beta1 / v1beta2 slice (v1beta1 nests the device under `basic`).
fn slice(api_version: &str, node: &str) -> Value {
    let attrs = json!({"type": {"string": "gpu"}, "index": {"int": 0}});
    let capacity = json!({"memory": {"value": "80Gi"}});
    let device = if api_version.ends_with("v1beta1") {
        json!({"name": "gpu-0", "basic": {"attributes": attrs, "capacity": capacity}})
    } else {
        json!({"name": "gpu-0", "attributes": attrs, "capacity": capacity})
    };
    json!({"apiVersion": api_version, "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu.example.com")},
        "spec": {"driver": "gpu.example.com", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [device]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_at_v1beta1_and_v1beta2_is_read_as_v1() {
    for v in [KubeVersion::V1_32, KubeVersion::V1_33] {
        let dra = v.dra_api_version().unwrap();
        let api = FakeApi::start_version(v).await;
        api.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-001"}}));
        api.apply(slice(dra, "gpu-001"));
        api.apply(json!({"apiVersion": dra, "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}));
        // The template in its version's shape: v1beta1 requests are flat,
        // v1beta2 ones are under `exactly`.
        let request = if v == KubeVersion::V1_32 {
            json!({"name": "gpus", "deviceClassName": "gpu.example.com", "count": 2})
        } else {
            json!({"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}})
        };
        api.apply(json!({"apiVersion": dra, "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": "ml", "name": "two-gpus"},
            "spec": {"spec": {"devices": {"requests": [request]}}}}));
        let mut pod = pending_pod("dra", 0);
        pod["spec"]["containers"][0]["resources"] = json!({"claims": [{"name": "gpus"}]});
        pod["spec"]["resourceClaims"] =
            json!([{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]);
        api.apply(pod);

        let (_, w) = watch_served(&api).await;
        let watches = w.watches();
        for kind in [
            "ResourceClaim",
            "ResourceClaimTemplate",
            "DeviceClass",
            "ResourceSlice",
        ] {
            let k = watched(&watches, kind);
            assert_eq!(k.api_version.as_deref(), Some(dra), "{v}");
            assert_eq!(k.note.as_deref(), Some("read as resource.k8s.io/v1"), "{v}");
        }
        let t = until(&w, &format!("{v}: the DRA pod planned"), |w, t| {
            t.demand.workloads.len() == 1 && !w.devices().0.is_empty()
        })
        .await;
        assert!(
            t.cannot_plan.is_empty() && t.invalid.is_empty(),
            "{v}: {}",
            t.render()
        );
        let claim = &t.demand.workloads[0].pod_sets[0].pod.claims[0];
        let exact = claim.requests[0].exactly.as_ref().unwrap();
        assert_eq!(
            (exact.device_class.as_str(), exact.count),
            ("gpu.example.com", 2),
            "{v}"
        );
        assert_eq!(t.demand.device_classes.len(), 1, "{v}");

        let (devices, problems) = w.devices();
        assert!(problems.is_empty(), "{v}: {problems:?}");
        let d = &devices["gpu-001"].devices[0];
        assert_eq!(&*d.name, "gpu-0", "{v}");
        assert_eq!(
            d.attributes.get("gpu.example.com/index"),
            Some(&accord::device::AttrValue::Int(0)),
            "{v}"
        );
        assert!(d.capacity.contains_key("gpu.example.com/memory"), "{v}");
        assert!(w.problems().is_empty(), "{v}: {:?}", w.problems());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_beta_slice_is_a_problem_not_a_panic() {
    let api = FakeApi::start_version(KubeVersion::V1_32).await;
    let mut bad = slice("resource.k8s.io/v1beta1", "gpu-002");
    bad["spec"]["devices"] = json!("not a list");
    api.apply(bad);
    let mut odd = slice("resource.k8s.io/v1beta1", "gpu-003");
    odd["spec"]["devices"][0]["basic"] = json!(7);
    api.apply(odd);
    api.apply(slice("resource.k8s.io/v1beta1", "gpu-001"));
    let (_, w) = watch_served(&api).await;
    until(&w, "the good slice read", |w, _| {
        w.devices().0.contains_key("gpu-001")
    })
    .await;
    let (devices, problems) = w.devices();
    assert!(!devices.contains_key("gpu-002"));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("gpu-002-gpu.example.com")),
        "{problems:?}"
    );
    // A device without `basic` is a device without attributes.
    assert!(devices["gpu-003"].devices[0].attributes.is_empty());
}
