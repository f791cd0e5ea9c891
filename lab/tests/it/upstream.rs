//! The lab's stand-ins as upstream sees them: every Node the kubelet
//! stand-in registers and every ResourceSlice the DRA driver stand-in
//! publishes for the default scenario's machines (`published_objects`, what
//! `accord-lab --print-nodes` prints) is accepted by the real
//! kube-apiserver v1.37.2's validation, and the real kube-scheduler places
//! on them: whole GPUs through the device plugin's `nvidia.com/gpu`, MIG
//! slices through `nvidia.com/mig-1g.10gb`, and a DRA claim whose devices
//! it allocates from the published slice (`status.allocation`). Every wait
//! has a condition, a deadline and says what it waited for.

use std::time::Duration;

use accord_lab::{published_objects, Scenario};
use accord_testkit::control_plane::{wait_for, ControlPlane, Options, DEFAULT_MINOR};
use reqwest::Method;
use serde_json::{json, Value};

fn pod(name: &str, limits: Value, claims: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": name},
        "spec": {"containers": [{"name": "c", "image": "c",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                               "limits": limits}}]},
    });
    if let Some(claim) = claims {
        p["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": claim}]);
        p["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
    }
    p
}

/// The node the scheduler bound `name` to.
async fn bound_node(cp: &ControlPlane, name: &str) -> String {
    wait_for(
        &format!("kube-scheduler to bind default/{name}"),
        Duration::from_secs(60),
        || async {
            let p = cp
                .get_json(&format!("/api/v1/namespaces/default/pods/{name}"))
                .await?;
            p["spec"]["nodeName"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("not bound: {}", p["status"]))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_publishes_what_upstream_accepts_and_schedules_on() {
    let cp = ControlPlane::start(Options::full(DEFAULT_MINOR))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let objects = published_objects(&Scenario::default_scenario()).unwrap();
    let mut slices: Vec<Value> = Vec::new();
    for o in &objects {
        match o["kind"].as_str() {
            Some("Node") => {
                let name = o["metadata"]["name"].as_str().unwrap();
                cp.request_json(Method::POST, "/api/v1/nodes", Some(o))
                    .await
                    .unwrap_or_else(|e| panic!("the kubelet stand-in's Node {name}: {e}"));
                // As a kubelet does: the status through its subresource.
                cp.request_json(
                    Method::PATCH,
                    &format!("/api/v1/nodes/{name}/status"),
                    Some(&json!({"status": o["status"]})),
                )
                .await
                .unwrap_or_else(|e| panic!("the kubelet stand-in's Node {name} status: {e}"));
            }
            Some("ResourceSlice") => {
                let created = cp
                    .request_json(
                        Method::POST,
                        "/apis/resource.k8s.io/v1/resourceslices",
                        Some(o),
                    )
                    .await
                    .unwrap_or_else(|e| {
                        panic!(
                            "the DRA driver stand-in's ResourceSlice {}: {e}",
                            o["metadata"]
                        )
                    });
                slices.push(created);
            }
            other => panic!("unexpected object {other:?}"),
        }
    }
    assert_eq!(
        objects.iter().filter(|o| o["kind"] == "Node").count(),
        11,
        "the default scenario's machines"
    );
    assert!(!slices.is_empty(), "no ResourceSlice published");
    // Stored as published: the apiserver dropped none of the devices.
    for (published, stored) in objects
        .iter()
        .filter(|o| o["kind"] == "ResourceSlice")
        .zip(&slices)
    {
        assert_eq!(
            published["spec"]["devices"].as_array().map(Vec::len),
            stored["spec"]["devices"].as_array().map(Vec::len),
            "{}",
            stored["metadata"]["name"]
        );
    }

    // Whole GPUs through the device plugin, a MIG slice, a DRA claim.
    cp.request_json(
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(&pod("eight", json!({"nvidia.com/gpu": "8"}), None)),
    )
    .await
    .unwrap();
    cp.request_json(
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(&pod("mig", json!({"nvidia.com/mig-1g.10gb": "1"}), None)),
    )
    .await
    .unwrap();
    cp.request_json(
        Method::POST,
        "/apis/resource.k8s.io/v1/deviceclasses",
        Some(&json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression":
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]},
        })),
    )
    .await
    .unwrap();
    cp.request_json(
        Method::POST,
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        Some(&json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": "two-gpus"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 2}}]}},
        })),
    )
    .await
    .unwrap();
    cp.request_json(
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(&pod("dra", json!({}), Some("two-gpus"))),
    )
    .await
    .unwrap();

    let eight = bound_node(&cp, "eight").await;
    let node = cp
        .get_json(&format!("/api/v1/nodes/{eight}"))
        .await
        .unwrap();
    assert_eq!(
        node["status"]["allocatable"]["nvidia.com/gpu"], "8",
        "{eight}"
    );
    let mig = bound_node(&cp, "mig").await;
    let node = cp.get_json(&format!("/api/v1/nodes/{mig}")).await.unwrap();
    assert!(
        node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"]
            .as_str()
            .is_some_and(|n| n != "0"),
        "{mig}: {}",
        node["status"]["allocatable"]
    );

    let dra = bound_node(&cp, "dra").await;
    let results = wait_for(
        "the scheduler's allocation in ResourceClaim default/two-gpus",
        Duration::from_secs(30),
        || async {
            let c = cp
                .get_json("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/two-gpus")
                .await?;
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .filter(|r| !r.is_empty())
                .cloned()
                .ok_or_else(|| format!("status: {}", c["status"]))
        },
    )
    .await;
    assert_eq!(results.len(), 2, "{results:?}");
    let slice = slices
        .iter()
        .find(|s| s["spec"]["nodeName"] == dra.as_str())
        .unwrap_or_else(|| panic!("no slice for {dra}"));
    let published: Vec<&str> = slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    for r in &results {
        assert_eq!(r["driver"], "gpu.nvidia.com", "{r}");
        assert_eq!(r["pool"], slice["spec"]["pool"]["name"], "{r}");
        assert!(
            published.contains(&r["device"].as_str().unwrap_or("")),
            "{r} not among {published:?}"
        );
    }
}
