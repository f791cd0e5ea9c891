//! `set_provisioning_condition` against the fake API server: Accord
//! changes only the condition of the type it writes (others' conditions,
//! and the unknown fields of each, stay), `lastTransitionTime` moves only
//! when the status flips, nothing is written when the condition already
//! shows what Accord wants, and every write carries the resourceVersion
//! read: a request changed in between is read again and written with
//! both changes, and one that keeps changing gets a typed error, never a
//! blind write.

use accord_kube::write::{
    self, ConditionWriteError, ProvisioningCondition, PublishOutcome, CONDITION_WRITE_ATTEMPTS,
};
use accord_testkit::fake_api::FakeApi;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use serde_json::{json, Value};

const API: &str = "autoscaling.x-k8s.io/v1";
const KIND: &str = "ProvisioningRequest";
const STATUS_PATH: &str =
    "/apis/autoscaling.x-k8s.io/v1/namespaces/ml/provisioningrequests/pr/status";
/// Long before any test runs: a time still there was not moved.
const OLD: &str = "2020-01-01T00:00:00Z";

/// A request at generation 3 showing a user's condition (with a field
/// Accord does not know), cluster-autoscaler-style `Accepted` (also with
/// one), and a status field besides the conditions.
fn request() -> Value {
    json!({"apiVersion": API, "kind": KIND,
    "metadata": {"namespace": "ml", "name": "pr", "generation": 3},
    "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
             "podSets": []},
    "status": {
        "provisioningClassDetails": {"region": "r1"},
        "conditions": [
            {"type": "example.com/Approved", "status": "True", "reason": "ByHand",
             "message": "approved by alice", "lastTransitionTime": OLD,
             "observedGeneration": 1, "x-note": "kept"},
            {"type": "Accepted", "status": "True", "reason": "Accepted",
             "message": "read by accordd", "lastTransitionTime": OLD,
             "observedGeneration": 3, "x-extra": {"a": 1}},
        ]}})
}

fn cond(type_: &str, status: bool, reason: &str, message: &str) -> ProvisioningCondition {
    ProvisioningCondition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message: message.into(),
    }
}

async fn set(
    api: &FakeApi,
    c: &ProvisioningCondition,
) -> Result<PublishOutcome, ConditionWriteError> {
    write::set_provisioning_condition(&api.client(), "autoscaling.x-k8s.io/v1", "ml", "pr", c).await
}

fn stored(api: &FakeApi) -> Value {
    api.get(API, KIND, "ml", "pr").expect("the request")
}

fn conditions(pr: &Value) -> Vec<Value> {
    pr["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The condition types, in order.
fn types(pr: &Value) -> Vec<String> {
    conditions(pr)
        .iter()
        .map(|c| c["type"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn condition(pr: &Value, type_: &str) -> Value {
    conditions(pr)
        .into_iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {pr}"))
}

/// Writes (PUT or PATCH) the fake received for the request.
fn writes(api: &FakeApi) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| {
            (r.starts_with("PATCH ") || r.starts_with("PUT "))
                && r.contains("/provisioningrequests/")
        })
        .collect()
}

fn gets(api: &FakeApi) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.starts_with("GET ") && r.contains("/provisioningrequests/pr"))
        .count()
}

/// A user's (or cluster-autoscaler's) condition, added by another writer.
fn add_condition(pr: &mut Value, type_: &str) {
    pr["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(json!({"type": type_, "status": "True", "reason": "Other",
                     "message": "another writer", "lastTransitionTime": OLD}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accords_condition_changes_and_every_other_stays() {
    let api = FakeApi::start().await;
    api.apply(request());
    let before = stored(&api);
    let user = condition(&before, "example.com/Approved");

    // A type not there yet is added at the end.
    let c = cond("Provisioned", false, "Provisioning", "powering on gpu-001");
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Written);
    let pr = stored(&api);
    assert_eq!(
        types(&pr),
        ["example.com/Approved", "Accepted", "Provisioned"]
    );
    assert_eq!(
        condition(&pr, "example.com/Approved"),
        user,
        "the user's condition is untouched"
    );
    assert_eq!(condition(&pr, "Accepted"), condition(&before, "Accepted"));
    let p = condition(&pr, "Provisioned");
    assert_eq!(
        (
            &p["status"],
            &p["reason"],
            &p["message"],
            &p["observedGeneration"]
        ),
        (
            &json!("False"),
            &json!("Provisioning"),
            &json!("powering on gpu-001"),
            &json!(3)
        )
    );
    let first = p["lastTransitionTime"]
        .as_str()
        .expect("a transition time")
        .to_owned();
    assert_ne!(first, OLD);
    assert_eq!(
        pr["status"]["provisioningClassDetails"],
        json!({"region": "r1"})
    );
    assert_eq!(pr["spec"], before["spec"], "a status write keeps the spec");

    // Same status, new message: the transition time stays, the unknown
    // field stays, observedGeneration follows the request.
    api.update(API, KIND, "ml", "pr", |o| {
        o["metadata"]["generation"] = json!(4)
    });
    let c = cond(
        "Accepted",
        true,
        "Accepted",
        "accordd plans capacity for it",
    );
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Written);
    let pr = stored(&api);
    let a = condition(&pr, "Accepted");
    assert_eq!(a["message"], "accordd plans capacity for it");
    assert_eq!(
        a["lastTransitionTime"], OLD,
        "no flip, no new transition time"
    );
    assert_eq!(a["observedGeneration"], 4);
    assert_eq!(
        a["x-extra"],
        json!({"a": 1}),
        "fields Accord does not know stay"
    );
    assert_eq!(condition(&pr, "example.com/Approved"), user);

    // A flip moves the transition time.
    let c = cond("Accepted", false, "Withdrawn", "no longer planned");
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Written);
    let a = condition(&stored(&api), "Accepted");
    assert_eq!(a["status"], "False");
    assert_ne!(a["lastTransitionTime"], OLD);
    assert_eq!(a["x-extra"], json!({"a": 1}));

    // One GET and one merge patch of the status subresource, as accordd,
    // per write.
    let w = writes(&api);
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w.iter()
            .all(|r| r.starts_with(&format!("PATCH {STATUS_PATH}?"))),
        "{w:?}"
    );
    assert!(
        w.iter().all(|r| r.contains("fieldManager=accordd")),
        "{w:?}"
    );
    assert_eq!(gets(&api), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_already_shown_is_not_written() {
    let api = FakeApi::start().await;
    api.apply(request());
    let rv = api.resource_version();
    let c = cond("Accepted", true, "Accepted", "read by accordd");
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Unchanged);
    assert!(writes(&api).is_empty(), "{:?}", writes(&api));
    assert_eq!(gets(&api), 1);
    assert_eq!(api.resource_version(), rv);

    // The request's spec changed since (generation 4): the same condition
    // is written again for the new generation, its time kept.
    api.update(API, KIND, "ml", "pr", |o| {
        o["metadata"]["generation"] = json!(4)
    });
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Written);
    let a = condition(&stored(&api), "Accepted");
    assert_eq!(
        (&a["observedGeneration"], &a["lastTransitionTime"]),
        (&json!(4), &json!(OLD))
    );
    assert_eq!(writes(&api).len(), 1);
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Unchanged);
    assert_eq!(writes(&api).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_loses_a_race_is_read_again_and_keeps_both_changes() {
    let api = FakeApi::start().await;
    api.apply(request());
    // Between Accord's read and its write, someone else adds a condition
    // and a label.
    api.change_before_next_write(API, KIND, "ml", "pr", |pr| {
        add_condition(pr, "example.com/Paused");
        pr["metadata"]["labels"] = json!({"team": "b"});
    });
    let c = cond(
        "Provisioned",
        true,
        "Provisioned",
        "capacity ready on gpu-001",
    );
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Written);

    let pr = stored(&api);
    assert_eq!(
        types(&pr),
        [
            "example.com/Approved",
            "Accepted",
            "example.com/Paused",
            "Provisioned"
        ],
        "both writers' changes: {pr}"
    );
    assert_eq!(condition(&pr, "Provisioned")["status"], "True");
    assert_eq!(pr["metadata"]["labels"]["team"], "b");
    // The first patch met 409 Conflict; the second, from a fresh read, landed.
    assert_eq!(writes(&api).len(), 2, "{:?}", writes(&api));
    assert_eq!(gets(&api), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_keeps_changing_gets_a_typed_error_and_no_blind_write() {
    let api = FakeApi::start().await;
    api.apply(request());
    let attempts = CONDITION_WRITE_ATTEMPTS as usize;
    for i in 0..attempts {
        api.change_before_next_write(API, KIND, "ml", "pr", move |pr| {
            add_condition(pr, &format!("example.com/Step{i}"))
        });
    }
    let c = cond(
        "Provisioned",
        true,
        "Provisioned",
        "capacity ready on gpu-001",
    );
    match set(&api, &c).await {
        Err(ConditionWriteError::Conflict { attempts: n }) => {
            assert_eq!(n, CONDITION_WRITE_ATTEMPTS)
        }
        other => panic!("expected a Conflict error, got {other:?}"),
    }
    let pr = stored(&api);
    let mut expect = vec!["example.com/Approved".to_owned(), "Accepted".to_owned()];
    expect.extend((0..attempts).map(|i| format!("example.com/Step{i}")));
    assert_eq!(
        types(&pr),
        expect,
        "every other change stands, Accord's never landed"
    );
    assert_eq!(writes(&api).len(), attempts);
    assert_eq!(gets(&api), attempts);

    // Once the request holds still, the next round's write lands on top.
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::Written);
    let pr = stored(&api);
    assert_eq!(conditions(&pr).len(), attempts + 3);
    assert_eq!(condition(&pr, "Provisioned")["status"], "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_accords_types_are_written_and_a_missing_request_is_not_found() {
    let api = FakeApi::start().await;
    match set(&api, &cond("example.com/Approved", false, "No", "")).await {
        Err(ConditionWriteError::NotAccords(t)) => assert_eq!(t, "example.com/Approved"),
        other => panic!("expected NotAccords, got {other:?}"),
    }
    assert!(api.requests().is_empty(), "{:?}", api.requests());
    let c = cond("Accepted", true, "Accepted", "read by accordd");
    assert_eq!(set(&api, &c).await.unwrap(), PublishOutcome::NotFound);
    assert!(writes(&api).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_subresource_refuses_a_stale_resource_version() {
    let api = FakeApi::start().await;
    api.apply(request());
    let read = stored(&api);
    let rv = read["metadata"]["resourceVersion"].clone();
    api.update(API, KIND, "ml", "pr", |pr| {
        add_condition(pr, "example.com/Paused")
    });
    let after = stored(&api);
    let http = reqwest::Client::new();
    let url = format!("{}{STATUS_PATH}", api.url);

    // A merge patch and a replace of the status, both from the stale read.
    let patch = json!({"metadata": {"resourceVersion": rv}, "status": {"conditions": []}});
    let resp = http
        .patch(&url)
        .header("content-type", "application/merge-patch+json")
        .body(patch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    let mut stale = read.clone();
    stale["status"]["conditions"] = json!([]);
    let resp = http.put(&url).json(&stale).send().await.unwrap();
    assert_eq!(resp.status(), 409);
    assert_eq!(stored(&api), after, "nothing stale was applied");

    // A replace of the status from a fresh read changes only the status.
    let mut fresh = after.clone();
    fresh["status"] = json!({"conditions": []});
    fresh["spec"]["provisioningClassName"] = json!("changed.example.com");
    fresh["metadata"]["labels"] = json!({"team": "c"});
    let resp = http.put(&url).json(&fresh).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let now = stored(&api);
    assert_eq!(
        now["status"],
        json!({"conditions": []}),
        "the status is replaced"
    );
    assert_eq!(
        now["spec"], after["spec"],
        "a status replace keeps the spec"
    );
    assert_eq!(now["metadata"].get("labels"), None);
}

#[test]
fn the_patch_carries_the_resource_version_and_the_whole_list() {
    let mut pr = request();
    pr["metadata"]["resourceVersion"] = json!("41");
    // A duplicate of Accord's type (a list map allows one) is dropped.
    pr["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Accepted", "status": "False", "reason": "Dup", "message": ""}));
    let pr: DynamicObject = serde_json::from_value(pr).unwrap();
    let now = Time("2026-02-03T04:05:06Z".parse().unwrap());
    let c = cond("Accepted", true, "Accepted", "read by accordd");
    let patch =
        write::provisioning_condition_patch(&pr, &c, now.clone()).expect("the duplicate goes");
    assert_eq!(patch["metadata"], json!({"resourceVersion": "41"}));
    let list = patch["status"]["conditions"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1]["lastTransitionTime"], OLD);
    assert_eq!(
        patch["status"].as_object().unwrap().len(),
        1,
        "only the conditions"
    );

    // From Unknown to True is a transition.
    let mut pr = request();
    pr["status"]["conditions"][1]["status"] = json!("Unknown");
    let pr: DynamicObject = serde_json::from_value(pr).unwrap();
    let patch = write::provisioning_condition_patch(&pr, &c, now).unwrap();
    assert_eq!(patch["status"]["conditions"][1]["status"], "True");
    assert_eq!(
        patch["status"]["conditions"][1]["lastTransitionTime"],
        "2026-02-03T04:05:06Z"
    );
}
