//! kube-rs watchers against the in-repo fake API server (real HTTP, list
//! and watch with resourceVersion, bookmarks, chunked lists, 410 Gone then
//! re-list): the demand snapshot converges after every change, and what
//! Accord writes lands on the server.

use std::time::Duration;

use accord::fleet::TopologyConfig;
use accord_kube::watch::DemandWatch;
use accord_kube::write::{self, ProvisioningCondition};
use accord_kube::{Options, Translation};
use accord_testkit::fake_api::FakeApi;
use serde_json::{json, Value};

fn options() -> Options {
    Options::for_topology(&TopologyConfig::default())
}

fn pod(name: &str, gpus: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {
            "schedulingGroup": {"podGroupName": "train"},
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

fn group(min: u32) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"namespace": "ml", "name": "train"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}}
    })
}

/// Polls the snapshot until `done` holds (or 15 s pass).
async fn converge(w: &DemandWatch, what: &str, done: impl Fn(&Translation) -> bool) -> Translation {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let t = w.snapshot(&options());
        if done(&t) {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never converged: {what}\n{}",
            t.render()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn gpus_of(t: &Translation) -> Option<String> {
    t.demand
        .workloads
        .first()?
        .pod_sets
        .first()?
        .pod
        .requests
        .get("nvidia.com/gpu")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_converges_on_add_modify_delete() {
    let api = FakeApi::start().await;
    api.apply(group(2));
    api.apply(pod("p0", 4));
    api.apply(pod("p1", 4));
    let w = DemandWatch::start(api.client());
    let t = converge(&w, "initial list", |t| t.demand.workloads.len() == 1).await;
    assert_eq!(t.demand.workloads[0].pod_count(), 2);
    assert_eq!(gpus_of(&t).as_deref(), Some("4"));

    // Modified: both pods now ask 8 GPUs.
    api.apply(pod("p0", 8));
    api.apply(pod("p1", 8));
    converge(&w, "modified", |t| {
        gpus_of(t).as_deref() == Some("8") && t.demand.workloads[0].pod_sets.len() == 1
    })
    .await;

    // Deleted: the gang waits for its second pod.
    assert!(api.delete("v1", "Pod", "ml", "p1"));
    let t = converge(&w, "deleted", |t| !t.cannot_plan.is_empty()).await;
    assert_eq!(
        t.cannot_plan[0].reason,
        "gang needs 2 pods, 1 exist (waiting for the rest)"
    );

    // The pod comes back, and is bound: pending 1, bound 1.
    let mut bound = pod("p1", 8);
    bound["spec"]["nodeName"] = json!("gpu-007");
    bound["status"] = json!({"phase": "Running"});
    api.apply(bound);
    api.apply(group(1));
    let t = converge(&w, "bound", |t| {
        t.demand.bound.len() == 1 && t.demand.workloads.len() == 1
    })
    .await;
    assert_eq!(t.demand.bound[0].node, "gpu-007");
    assert!(w.problems().is_empty(), "{:?}", w.problems());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_published_devices_follow_the_cluster() {
    let api = FakeApi::start().await;
    let node = |ready: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-001"},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}})
    };
    api.apply(node("False"));
    api.apply(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "gpu-001-gpu.nvidia.com"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-001", "pool": {"name": "gpu-001", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}, "capacity": {"memory": {"value": "80Gi"}}}]}}));
    let w = DemandWatch::start(api.client());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while w.nodes().len() != 1 || w.devices().0.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "within 15 s, one node and its published devices: nodes {:?}, devices {:?}, problems {:?}",
            w.nodes(),
            w.devices(),
            w.problems()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!w.nodes()[0].ready);
    assert_eq!(&*w.devices().0["gpu-001"].devices[0].name, "gpu-0");
    api.apply(node("True"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !w.nodes()[0].ready {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gpu-001 not seen Ready within 15 s of the change: nodes {:?}, problems {:?}",
            w.nodes(),
            w.problems()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_after_compaction_gets_410_and_relists() {
    let api = FakeApi::start().await;
    api.apply(group(1));
    api.apply(pod("p0", 4));
    let w = DemandWatch::start(api.client());
    converge(&w, "initial", |t| t.demand.workloads.len() == 1).await;
    let lists_before = pod_lists(&api);
    // History is compacted and every watch closed: the watcher resumes
    // from its resourceVersion, gets 410 Gone, and lists again.
    api.compact();
    api.apply(pod("p0", 2));
    converge(&w, "after 410", |t| gpus_of(t).as_deref() == Some("2")).await;
    assert!(pod_lists(&api) > lists_before, "{:#?}", api.requests());
}

fn pod_lists(api: &FakeApi) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/pods") && !r.contains("watch=true"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_lists_come_in_chunks() {
    let api = FakeApi::start().await;
    for i in 0..1_200 {
        let mut p = pod(&format!("solo-{i:04}"), 1);
        p["spec"].as_object_mut().unwrap().remove("schedulingGroup");
        api.apply(p);
    }
    let w = DemandWatch::start(api.client());
    converge(&w, "1200 pods", |t| t.demand.workloads.len() == 1_200).await;
    let chunks = api
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/pods") && r.contains("continue="))
        .count();
    assert!(chunks >= 2, "{:#?}", &api.requests()[..10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_objects_never_stop_the_watchers() {
    let api = FakeApi::start().await;
    // A pod whose claim template does not exist, and a good one.
    let mut bad = pod("bad", 1);
    bad["spec"]["resourceClaims"] = json!([{"name": "g", "resourceClaimTemplateName": "nope"}]);
    bad["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGroup");
    api.apply(bad);
    let mut good = pod("good", 1);
    good["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGroup");
    api.apply(good);
    // A ProvisioningRequest (a CRD, read dynamically) with its template.
    api.apply(json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"namespace": "ml", "name": "tpl"},
        "template": {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}));
    api.apply(
        json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"namespace": "ml", "name": "pr"},
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                 "podSets": [{"podTemplateRef": {"name": "tpl"}, "count": 3}]}}),
    );
    let w = DemandWatch::start(api.client());
    let t = converge(&w, "bad and good", |t| {
        t.demand.workloads.len() == 2 && t.cannot_plan.len() == 1
    })
    .await;
    assert!(t.cannot_plan[0]
        .reason
        .contains("ResourceClaimTemplate ml/nope not found"));
    let pr = t.demand.workloads.iter().find(|w| w.name == "pr").unwrap();
    assert_eq!((pr.pod_count(), pr.min()), (3, 3));
    // Still watching: a change after the bad object is seen.
    api.delete("v1", "Pod", "ml", "bad");
    converge(&w, "bad gone", |t| t.cannot_plan.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_the_cluster_lacks_is_said_once_and_the_rest_works() {
    let resources: Vec<_> = accord_testkit::fake_api::default_resources()
        .into_iter()
        .filter(|r| r.plural != "jobsets")
        .collect();
    let api = FakeApi::start_with(resources, Duration::from_millis(500)).await;
    api.apply(group(1));
    api.apply(pod("p0", 4));
    let w = DemandWatch::start(api.client());
    converge(&w, "without JobSets", |t| t.demand.workloads.len() == 1).await;
    let jobset_gets = || {
        api.requests()
            .iter()
            .filter(|r| r.starts_with("GET /apis/jobset.x-k8s.io/"))
            .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while w.problems().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no watch problem listed within 15 s for the missing JobSet CRD \
             ({} JobSet requests made)",
            jobset_gets()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Said once: the watcher keeps retrying with backoff (0.8 s, 1.6 s, …)
    // and each retry fails the same way. Two more requests mean at least
    // one retry's failure came back (a watcher sends its next request only
    // after the last one failed), yet the problem is listed once.
    let after_first = jobset_gets();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while jobset_gets() < after_first + 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the JobSet watcher did not retry twice within 30 s of its first failure \
             ({} JobSet requests, {after_first} then); problems {:?}",
            jobset_gets(),
            w.problems()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let problems = w.problems();
    assert_eq!(
        problems.len(),
        1,
        "the missing CRD is said once, not once per retry: {problems:#?}"
    );
    assert!(problems[0].starts_with("JobSet: "), "{problems:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_provisioning_conditions_land_on_the_server() {
    // Node labels and taints: kube/tests/it/publish.rs.
    let api = FakeApi::start().await;
    api.apply(
        json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"namespace": "ml", "name": "pr", "generation": 2},
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io", "podSets": []}}),
    );
    let client = api.client();

    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("scheduling.k8s.io/v1beta1".into()),
        kind: Some("PodGroup".into()),
        namespace: Some("ml".into()),
        name: Some("train-a".into()),
        ..Default::default()
    };
    write::record_event(
        &client,
        regarding,
        "PoweringOn",
        "PowerOn",
        "powering on node gpu-001 in rack r3 for podgroup train-a",
        false,
    )
    .await
    .unwrap();
    let events = api.list("events.k8s.io/v1", "Event");
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0]["note"],
        "powering on node gpu-001 in rack r3 for podgroup train-a"
    );
    assert_eq!(events[0]["regarding"]["name"], "train-a");
    assert_eq!(events[0]["type"], "Normal");

    for (t, s) in [
        ("Accepted", true),
        ("Provisioned", false),
        ("Provisioned", true),
    ] {
        write::set_provisioning_condition(
            &client,
            "autoscaling.x-k8s.io/v1",
            "ml",
            "pr",
            &ProvisioningCondition {
                type_: t.into(),
                status: s,
                reason: "Accord".into(),
                message: format!("{t} by Accord"),
            },
        )
        .await
        .unwrap();
    }
    let pr = api
        .get("autoscaling.x-k8s.io/v1", "ProvisioningRequest", "ml", "pr")
        .unwrap();
    let conditions = pr["status"]["conditions"].as_array().unwrap();
    let summary: Vec<(&str, &str)> = conditions
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(summary, [("Accepted", "True"), ("Provisioned", "True")]);
    assert_eq!(conditions[1]["observedGeneration"], 2);
    assert_eq!(
        pr["spec"]["provisioningClassName"], "check-capacity.autoscaling.x-k8s.io",
        "status patch keeps spec"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_server_streams_bookmarks_and_410() {
    // Raw HTTP, as a client sees it.
    let api = FakeApi::start().await;
    api.apply(pod("p0", 1));
    let rv = api.resource_version();
    let http = reqwest::Client::new();
    // Nothing changes after `rv`: the first line can only be a bookmark
    // (sent every 500 ms). The watch lasts 60 s and the wait 30 s, both far
    // beyond that, so only a server that sends no bookmark fails this.
    let mut resp = http
        .get(format!("{}/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=60", api.url))
        .send()
        .await
        .unwrap();
    let mut first = Vec::new();
    let line = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(end) = first.iter().position(|b| *b == b'\n') {
                return first[..end].to_vec();
            }
            match resp.chunk().await.unwrap() {
                Some(chunk) => first.extend_from_slice(&chunk),
                None => panic!(
                    "watch ended before a full line: {:?}",
                    String::from_utf8_lossy(&first)
                ),
            }
        }
    })
    .await
    .expect("a BOOKMARK line within 30 s (the server sends one every 500 ms)");
    let line: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(line["type"], "BOOKMARK", "{line}");
    drop(resp);
    api.compact();
    let gone: Value = http
        .get(format!(
            "{}/api/v1/pods?watch=true&resourceVersion={rv}",
            api.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(gone["type"], "ERROR");
    assert_eq!(gone["object"]["code"], 410);
}
