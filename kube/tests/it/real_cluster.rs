//! Accord's reading of DRA supply against the real kube-apiserver and
//! kube-scheduler v1.37.2 (the pinned test dependency): a DeviceTaintRule
//! as an admin writes it taints a GPU, Accord's watch reads it, and
//! Accord's fit and the real scheduler agree on which claims get which
//! devices. Every wait has a condition, a deadline and says what it
//! waited for.

use std::time::Duration;

use accord_kube::watch::DemandWatch;
use accord_kube::{translate, Manifests, Options as Translate};
use accord_testkit::control_plane::{wait_for, ControlPlane, Options, DEFAULT_MINOR};
use reqwest::Method;
use serde_json::{json, Value};

const NODE: &str = "gpu-1";
const TAINT_KEY: &str = "gpu.nvidia.com/unhealthy";

fn claim(name: &str, tolerate: bool) -> Value {
    let mut exactly = json!({"deviceClassName": "gpu.nvidia.com", "count": 2});
    if tolerate {
        exactly["tolerations"] =
            json!([{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]);
    }
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    })
}

fn pod(name: &str, claim: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": name},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                 "containers": [{"name": "c", "image": "c",
                                 "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]},
    })
}

/// The devices Accord's fit gives `pod` with `claim` on the node, from
/// what the watch reads.
fn accord_fit(w: &DemandWatch, claim: &Value, pod: &Value) -> Result<Vec<String>, String> {
    let text = format!(
        "{}\n---\n{}",
        serde_json::to_string(claim).unwrap(),
        serde_json::to_string(pod).unwrap()
    );
    let t = translate(
        &Manifests::parse(&text, "test").unwrap(),
        &Translate::for_topology(&Default::default()),
    );
    assert!(t.cannot_plan.is_empty(), "{}", t.render());
    let spec = &t.demand.workloads[0].pod_sets[0].pod;
    let published = w.devices().0.remove(NODE).expect("the node's devices");
    crate::cluster::allocate_on(NODE, published, spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_taint_rule_keeps_a_gpu_from_claims_that_do_not_tolerate_it() {
    let cp = ControlPlane::start(Options::full(DEFAULT_MINOR))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let post = |path: &'static str, body: Value| {
        let cp = &cp;
        async move {
            cp.request_json(Method::POST, path, Some(&body))
                .await
                .unwrap_or_else(|e| panic!("POST {path}: {e}"))
        }
    };
    post(
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}),
    )
    .await;
    // As a kubelet does: the status through its subresource.
    cp.request_json(
        Method::PATCH,
        &format!("/api/v1/nodes/{NODE}/status"),
        Some(&json!({"status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "ready"}]}})),
    )
    .await
    .unwrap();
    let gpu = |name: &str| json!({"name": name, "attributes": {"type": {"string": "gpu"}}});
    post(
        "/apis/resource.k8s.io/v1/resourceslices",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": format!("{NODE}-gpus")},
               "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE,
                        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                        "devices": [gpu("gpu-0"), gpu("gpu-1")]}}),
    )
    .await;
    post(
        "/apis/resource.k8s.io/v1/deviceclasses",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "gpu.nvidia.com"},
               "spec": {"selectors": [{"cel": {"expression":
                   "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}),
    )
    .await;
    // As an admin takes an unhealthy GPU out of service (GA in 1.37).
    post(
        "/apis/resource.k8s.io/v1/devicetaintrules",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
               "metadata": {"name": "gpu-0-xid-79"},
               "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"},
                        "taint": {"key": TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"}}}),
    )
    .await;

    // Accord reads the rule onto the device.
    let client = cp.client().await.unwrap();
    let served = accord_kube::discovery::ServedApis::discover(&client)
        .await
        .unwrap();
    let w = DemandWatch::start_served(client, &served);
    wait_for(
        "accordd's watch to show gpu-0 tainted by the DeviceTaintRule",
        Duration::from_secs(30),
        || async {
            let (published, problems) = w.devices();
            let tainted: Vec<String> = published
                .get(NODE)
                .map(|p| {
                    p.devices
                        .iter()
                        .filter(|d| !d.taints.is_empty())
                        .map(|d| d.name.to_string())
                        .collect()
                })
                .unwrap_or_default();
            (tainted == ["gpu-0"])
                .then_some(())
                .ok_or_else(|| format!("tainted {tainted:?}; problems {problems:?}"))
        },
    )
    .await;

    // A claim for both GPUs that does not tolerate the taint: Accord's
    // fit says no, and the real scheduler leaves the pod unschedulable.
    let plain = claim("both", false);
    post(
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        plain.clone(),
    )
    .await;
    post("/api/v1/namespaces/default/pods", pod("plain", "both")).await;
    let err = accord_fit(&w, &plain, &pod("plain", "both")).unwrap_err();
    assert!(err.contains("1 device(s) tainted, not tolerated"), "{err}");
    wait_for(
        "kube-scheduler to mark default/plain Unschedulable",
        Duration::from_secs(60),
        || async {
            let p = cp.get_json("/api/v1/namespaces/default/pods/plain").await?;
            let unschedulable = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable");
            assert!(p["spec"]["nodeName"].is_null(), "bound: {p}");
            unschedulable
                .then_some(())
                .ok_or_else(|| format!("status {}", p["status"]))
        },
    )
    .await;

    // The same claim tolerating it: Accord's fit takes both GPUs, and so
    // does the real scheduler.
    let tolerant = claim("both-tolerating", true);
    post(
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        tolerant.clone(),
    )
    .await;
    let fit = accord_fit(&w, &tolerant, &pod("tolerant", "both-tolerating")).unwrap();
    assert_eq!(fit, ["gpu-0", "gpu-1"]);
    post(
        "/api/v1/namespaces/default/pods",
        pod("tolerant", "both-tolerating"),
    )
    .await;
    let devices = wait_for(
        "kube-scheduler's allocation for default/both-tolerating",
        Duration::from_secs(60),
        || async {
            let c = cp
                .get_json(
                    "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/both-tolerating",
                )
                .await?;
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .map(|r| {
                    let mut d: Vec<String> = r
                        .iter()
                        .filter_map(|r| r["device"].as_str().map(str::to_owned))
                        .collect();
                    d.sort();
                    d
                })
                .ok_or_else(|| format!("status {}", c["status"]))
        },
    )
    .await;
    assert_eq!(devices, fit, "the real scheduler and Accord agree");
}

/// The real kube-apiserver v1.36.3 with its gang API turned on as an
/// admin does (the `GenericWorkload` gate, `scheduling.k8s.io/v1alpha2`):
/// a PodGroup of 4 whose pods name it in `spec.schedulingGroup` is one
/// gang to Accord, read through v1alpha2. (CI builds only 1.36's
/// apiserver: the pods' Unschedulable condition is written here as
/// kube-scheduler writes it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha2_pod_group_on_1_36_is_one_gang() {
    let mut options = Options::apiserver(36);
    options.feature_gates = vec!["GenericWorkload=true".into()];
    options.runtime_config = vec!["scheduling.k8s.io/v1alpha2=true".into()];
    let cp = ControlPlane::start(options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cp.request_json(
        Method::POST,
        "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups",
        Some(
            &json!({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                     "metadata": {"namespace": "default", "name": "train"},
                     "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("the v1alpha2 PodGroup: {e}"));
    // The controller manager would make it.
    cp.request_json(
        Method::POST,
        "/api/v1/namespaces/default/serviceaccounts",
        Some(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"namespace": "default", "name": "default"}})),
    )
    .await
    .unwrap_or_else(|e| panic!("the default ServiceAccount: {e}"));
    for i in 0..4 {
        cp.request_json(
            Method::POST,
            "/api/v1/namespaces/default/pods",
            Some(&json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": "default", "name": format!("w{i}")},
                "spec": {"schedulingGroup": {"podGroupName": "train"},
                         "containers": [{"name": "c", "image": "c",
                                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("pod w{i}: {e}"));
        let stored = cp
            .get_json(&format!("/api/v1/namespaces/default/pods/w{i}"))
            .await
            .unwrap();
        assert_eq!(
            stored["spec"]["schedulingGroup"]["podGroupName"], "train",
            "the gate keeps the field: {stored}"
        );
        cp.request_json(
            Method::PATCH,
            &format!("/api/v1/namespaces/default/pods/w{i}/status"),
            Some(
                &json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/0 nodes are available"}]}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("pod w{i} status: {e}"));
    }
    let client = cp.client().await.unwrap();
    let served = accord_kube::discovery::ServedApis::discover(&client)
        .await
        .unwrap();
    let w = DemandWatch::start_served(client, &served);
    let watched = w.watches();
    let pg = watched
        .iter()
        .find(|k| {
            k.kind == "PodGroup"
                && k.api_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("scheduling.k8s.io/"))
        })
        .unwrap_or_else(|| panic!("PodGroups not watched: {watched:#?}"));
    assert_eq!(
        pg.api_version.as_deref(),
        Some("scheduling.k8s.io/v1alpha2")
    );
    let options = Translate::for_topology(&Default::default());
    let t = wait_for(
        "the 4 Unschedulable pods as one gang in accordd's snapshot",
        Duration::from_secs(60),
        || async {
            let t = w.snapshot(&options);
            match t.demand.workloads.as_slice() {
                [one] if one.pod_count() == 4 => Ok(t),
                _ => Err(t.render()),
            }
        },
    )
    .await;
    let gang = &t.demand.workloads[0];
    assert_eq!((gang.key().as_str(), gang.min()), ("default/train", 4));
    assert!(t.unsupported.is_empty(), "{:?}", t.unsupported);
}

/// The real kube-apiserver v1.35.4 with its gang API turned on (the
/// `GenericWorkload` gate, `scheduling.k8s.io/v1alpha1`): a Workload with
/// a gang pod group of 4 whose pods name it in `spec.workloadRef` (a field
/// the newest typed Pod does not have) is one gang to Accord, its source
/// the Workload. (Only 1.35's apiserver runs: the pods' Unschedulable
/// condition is written here as kube-scheduler writes it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_workload_on_1_35_is_one_gang() {
    let mut options = Options::apiserver(35);
    options.feature_gates = vec!["GenericWorkload=true".into()];
    options.runtime_config = vec!["scheduling.k8s.io/v1alpha1=true".into()];
    let cp = ControlPlane::start(options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cp.request_json(
        Method::POST,
        "/apis/scheduling.k8s.io/v1alpha1/namespaces/default/workloads",
        Some(
            &json!({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"namespace": "default", "name": "train"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("the v1alpha1 Workload: {e}"));
    cp.request_json(
        Method::POST,
        "/api/v1/namespaces/default/serviceaccounts",
        Some(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"namespace": "default", "name": "default"}})),
    )
    .await
    .unwrap_or_else(|e| panic!("the default ServiceAccount: {e}"));
    for i in 0..4 {
        cp.request_json(
            Method::POST,
            "/api/v1/namespaces/default/pods",
            Some(&json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": "default", "name": format!("w{i}")},
                "spec": {"workloadRef": {"name": "train", "podGroup": "workers"},
                         "containers": [{"name": "c", "image": "c",
                                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("pod w{i}: {e}"));
        let stored = cp
            .get_json(&format!("/api/v1/namespaces/default/pods/w{i}"))
            .await
            .unwrap();
        assert_eq!(
            stored["spec"]["workloadRef"]["podGroup"], "workers",
            "the gate keeps the field: {stored}"
        );
        cp.request_json(
            Method::PATCH,
            &format!("/api/v1/namespaces/default/pods/w{i}/status"),
            Some(
                &json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/0 nodes are available"}]}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("pod w{i} status: {e}"));
    }
    let client = cp.client().await.unwrap();
    let served = accord_kube::discovery::ServedApis::discover(&client)
        .await
        .unwrap();
    let w = DemandWatch::start_served(client, &served);
    let workload = w
        .watches()
        .into_iter()
        .find(|k| k.kind == "Workload")
        .unwrap();
    assert_eq!(
        workload.api_version.as_deref(),
        Some("scheduling.k8s.io/v1alpha1")
    );
    let options = Translate::for_topology(&Default::default());
    let t = wait_for(
        "the 4 Unschedulable pods as one gang in accordd's snapshot",
        Duration::from_secs(60),
        || async {
            let t = w.snapshot(&options);
            match t.demand.workloads.as_slice() {
                [one] if one.pod_count() == 4 => Ok(t),
                _ => Err(t.render()),
            }
        },
    )
    .await;
    let gang = &t.demand.workloads[0];
    assert_eq!(
        (gang.key().as_str(), gang.min()),
        ("default/train/workers", 4)
    );
    assert_eq!(gang.sources[0].kind, "Workload");
    assert!(t.unsupported.is_empty(), "{:?}", t.unsupported);
}
