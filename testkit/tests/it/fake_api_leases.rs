//! The fake API server serves what accordd's high availability uses: a
//! `coordination.k8s.io/v1` Lease (leader election) and Accord's own
//! `accord.dev/v1alpha1` AccordNode objects (shared state), each read,
//! created and replaced with optimistic concurrency as a real API server
//! does; and tells several clients' requests apart by the listener they
//! came in on.

use accord_testkit::fake_api::{resources_for, FakeApi, KubeVersion};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Discovery;
use serde_json::{json, Value};

const NS: &str = "accord-system";

fn expect_status(result: Result<impl std::fmt::Debug, kube::Error>, code: u16, reason: &str) {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (code, reason), "{s:?}")
        }
        other => panic!("expected {code} {reason}, got {other:?}"),
    }
}

fn lease(holder: &str, transitions: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("accordd".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            ..Default::default()
        }),
    }
}

fn holder(l: &Lease) -> Option<&str> {
    l.spec.as_ref()?.holder_identity.as_deref()
}

#[tokio::test]
async fn a_lease_is_created_read_and_replaced_with_its_resource_version() {
    let fake = FakeApi::start().await;
    let leases: Api<Lease> = Api::namespaced(fake.client(), NS);
    expect_status(leases.get("accordd").await, 404, "NotFound");

    let created = leases
        .create(&PostParams::default(), &lease("a", 0))
        .await
        .unwrap();
    assert_eq!(holder(&created), Some("a"));
    assert_eq!(created.metadata.namespace.as_deref(), Some(NS));
    let uid = created.metadata.uid.clone().expect("a uid");
    let born = created
        .metadata
        .creation_timestamp
        .clone()
        .expect("a creationTimestamp");
    // A second create of the same name: AlreadyExists.
    expect_status(
        leases.create(&PostParams::default(), &lease("b", 0)).await,
        409,
        "AlreadyExists",
    );

    let read = leases.get("accordd").await.unwrap();
    assert_eq!(
        read.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(holder(&read), Some("a"));

    // Replica b takes over with the version it read: accepted, a new
    // resourceVersion; uid and creationTimestamp kept.
    let mut takeover = lease("b", 1);
    takeover.metadata.resource_version = read.metadata.resource_version.clone();
    let replaced = leases
        .replace("accordd", &PostParams::default(), &takeover)
        .await
        .unwrap();
    assert_eq!(holder(&replaced), Some("b"));
    assert_ne!(
        replaced.metadata.resource_version,
        read.metadata.resource_version
    );
    assert_eq!(replaced.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(replaced.metadata.creation_timestamp, Some(born));

    // Replica a renews with the version it read before: 409 Conflict,
    // and b still holds it.
    let mut renew = lease("a", 0);
    renew.metadata.resource_version = read.metadata.resource_version.clone();
    expect_status(
        leases
            .replace("accordd", &PostParams::default(), &renew)
            .await,
        409,
        "Conflict",
    );
    let now = leases.get("accordd").await.unwrap();
    assert_eq!(holder(&now), Some("b"));
    assert_eq!(
        now.metadata.resource_version,
        replaced.metadata.resource_version
    );

    // A replace of a Lease that does not exist: 404.
    let mut other = lease("a", 0);
    other.metadata.name = Some("other".into());
    other.metadata.resource_version = now.metadata.resource_version.clone();
    expect_status(
        leases
            .replace("other", &PostParams::default(), &other)
            .await,
        404,
        "NotFound",
    );
}

fn accord_node_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("accord.dev", "v1alpha1", "AccordNode"),
        "accordnodes",
    )
}

fn accord_node(name: &str, spec: Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &accord_node_resource()).within(NS);
    o.data = json!({ "spec": spec });
    o
}

#[tokio::test]
async fn an_accord_node_is_replaced_whole_with_optimistic_concurrency() {
    let fake = FakeApi::start().await;
    let ar = accord_node_resource();
    let nodes: Api<DynamicObject> = Api::namespaced_with(fake.client(), NS, &ar);
    let spec = json!({
        "fence": {"holder": "accordd-0", "transitions": 1},
        "intents": [{"power": "on"}],
        "lifecycle": {"stage": "Booting"},
        "bookings": {"job-a": {"gpus": 8}},
        "bios": {"profile": "hpc"},
        "command": {"kind": "mig", "layout": "1g.10gb@0"},
    });
    let created = nodes
        .create(
            &PostParams::default(),
            &accord_node("gpu-001", spec.clone()),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"], spec);
    let types = created.types.as_ref().expect("apiVersion and kind");
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("accord.dev/v1alpha1", "AccordNode")
    );
    expect_status(
        nodes
            .create(&PostParams::default(), &accord_node("gpu-001", json!({})))
            .await,
        409,
        "AlreadyExists",
    );
    let listed = nodes.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);

    // Replace with the current version, without `bios` and `command` and
    // with `fence` changed: a replace, not a merge — what is absent is
    // gone, also inside `fence`.
    let read = nodes.get("gpu-001").await.unwrap();
    let mut next = accord_node(
        "gpu-001",
        json!({
            "fence": {"holder": "accordd-1"},
            "intents": [],
            "lifecycle": {"stage": "Ready"},
            "bookings": {},
        }),
    );
    next.metadata.resource_version = read.metadata.resource_version.clone();
    let replaced = nodes
        .replace("gpu-001", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version,
        read.metadata.resource_version
    );
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    assert_eq!(
        replaced.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );
    let stored = nodes.get("gpu-001").await.unwrap();
    let s = &stored.data["spec"];
    assert_eq!(s["fence"], json!({"holder": "accordd-1"}), "{s}");
    assert_eq!(s["lifecycle"]["stage"], "Ready");
    let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["bookings", "fence", "intents", "lifecycle"], "{s}");

    // A replace carrying the version read before: 409 Conflict, and the
    // stored object stands.
    let mut stale = accord_node("gpu-001", json!({"fence": {"holder": "accordd-0"}}));
    stale.metadata.resource_version = read.metadata.resource_version.clone();
    expect_status(
        nodes
            .replace("gpu-001", &PostParams::default(), &stale)
            .await,
        409,
        "Conflict",
    );
    let after = nodes.get("gpu-001").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        stored.metadata.resource_version
    );
    assert_eq!(after.data["spec"]["fence"]["holder"], "accordd-1");

    // A replace of a node with no object: 404.
    let mut missing = accord_node("gpu-404", json!({}));
    missing.metadata.resource_version = after.metadata.resource_version.clone();
    expect_status(
        nodes
            .replace("gpu-404", &PostParams::default(), &missing)
            .await,
        404,
        "NotFound",
    );
}

/// Whether kube-rs's discovery (`aggregated`: `apidiscovery.k8s.io/v2`,
/// else the legacy per-group lists) finds `group`/`version` `plural`,
/// namespaced, of `kind`.
async fn discovers(
    fake: &FakeApi,
    aggregated: bool,
    group: &str,
    version: &str,
    kind: &str,
) -> bool {
    let discovery = Discovery::new(fake.client());
    let discovery = if aggregated {
        discovery.run_aggregated().await
    } else {
        discovery.run().await
    }
    .unwrap();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match discovery.resolve_gvk(&gvk) {
        Some((ar, caps)) => {
            assert_eq!(caps.scope, kube::discovery::Scope::Namespaced, "{gvk:?}");
            for verb in ["get", "list", "watch", "create", "update", "delete"] {
                assert!(caps.supports_operation(verb), "{gvk:?}: {verb}");
            }
            assert!(
                ar.plural == "leases" || ar.plural == "accordnodes",
                "{ar:?}"
            );
            true
        }
        None => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_leases_everywhere_and_accord_nodes_with_the_crds() {
    for v in KubeVersion::ALL {
        for crds in [true, false] {
            let fake = FakeApi::start_version_with(
                v,
                resources_for(v, crds),
                std::time::Duration::from_millis(500),
            )
            .await;
            for aggregated in [true, false] {
                let what = format!("{v} crds={crds} aggregated={aggregated}");
                assert!(
                    discovers(&fake, aggregated, "coordination.k8s.io", "v1", "Lease").await,
                    "{what}: leases"
                );
                assert_eq!(
                    discovers(&fake, aggregated, "accord.dev", "v1alpha1", "AccordNode").await,
                    crds,
                    "{what}: accordnodes"
                );
            }
            // Without the CRD, its path is not served at all.
            if !crds {
                let http = reqwest::Client::new();
                let r = http
                    .get(format!(
                        "{}/apis/accord.dev/v1alpha1/namespaces/{NS}/accordnodes",
                        fake.url
                    ))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 404, "{v}");
            }
        }
    }
    // The lab's and the tests' servers install the CRDs.
    let fake = FakeApi::start_version(KubeVersion::V1_31).await;
    assert!(discovers(&fake, true, "accord.dev", "v1alpha1", "AccordNode").await);
    let fake = FakeApi::start().await;
    assert!(discovers(&fake, true, "accord.dev", "v1alpha1", "AccordNode").await);
}

#[tokio::test]
async fn a_tagged_listener_serves_the_same_state_and_attributes_its_requests() {
    let fake = FakeApi::start().await;
    let a = fake.listen_tagged("replica-a").await;
    let b = fake.listen_tagged("replica-b").await;
    assert!(a != fake.url && b != fake.url && a != b);
    let client =
        |url: &str| kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    // Created through a, seen through b and the main listener.
    let via_a: Api<Lease> = Api::namespaced(client(&a), NS);
    via_a
        .create(&PostParams::default(), &lease("a", 0))
        .await
        .unwrap();
    let via_b: Api<Lease> = Api::namespaced(client(&b), NS);
    assert_eq!(holder(&via_b.get("accordd").await.unwrap()), Some("a"));
    let via_main: Api<Lease> = Api::namespaced(fake.client(), NS);
    let read = via_main.get("accordd").await.unwrap();

    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    let post = format!("POST {path}?");
    let get = format!("GET {path}/accordd");
    let from_a = fake.requests_from("replica-a");
    let from_b = fake.requests_from("replica-b");
    assert_eq!(from_a.len(), 1, "{from_a:?}");
    assert!(from_a[0].starts_with(&post), "{from_a:?}");
    assert_eq!(from_b, std::slice::from_ref(&get));
    assert!(fake.requests_from("replica-c").is_empty());
    // requests(): every listener's, in order.
    let all = fake.requests();
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[0], from_a[0]);
    assert_eq!(all[1..], [get.clone(), get]);

    // A stale write through b after a write through a: the one state.
    let mut renew = lease("a", 0);
    renew.metadata.resource_version = read.metadata.resource_version.clone();
    via_a
        .replace("accordd", &PostParams::default(), &renew)
        .await
        .unwrap();
    let mut takeover = lease("b", 1);
    takeover.metadata.resource_version = read.metadata.resource_version;
    expect_status(
        via_b
            .replace("accordd", &PostParams::default(), &takeover)
            .await,
        409,
        "Conflict",
    );
    assert_eq!(fake.requests_from("replica-a").len(), 2);
    assert_eq!(fake.requests_from("replica-b").len(), 2);
    assert_eq!(fake.requests().len(), 5);

    // Dropped with the FakeApi: the tagged listeners stop too.
    drop(fake);
    tokio::task::yield_now().await;
    let refused = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let r = reqwest::Client::new()
                .get(format!("{a}/version"))
                .send()
                .await;
            if r.is_err() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "{a} still answers after the drop");
}
