//! The fake API server tells the truth: for every minor pinned in
//! `lab/controlplane/`, its discovery documents equal those of the real
//! kube-apiserver of that version, started with its own defaults (and with
//! the same `--runtime-config` where a case turns an API on, as an admin
//! would). The fake serves a subset of resources (what Accord reads and
//! writes), so: every group the fake serves, the real one serves with the
//! same versions in the same order (the preferred first); every resource
//! and subresource the fake lists, the real one lists with the same kind,
//! scope, singular name and verbs; and every version the real server
//! serves of a group Accord reads, the fake serves too. Both forms:
//! `/api`, `/apis`, `/api/v1`, `/apis/G/V`, and aggregated discovery.
//!
//! Needs the binaries `scripts/bootstrap` builds (`scripts/controlplane`);
//! without them it fails, naming the command.

use std::collections::BTreeMap;

use accord_testkit::control_plane::{ControlPlane, Options, MINORS};
use accord_testkit::fake_api::{resources_with, FakeApi, KubeVersion};
use serde_json::Value;

/// The groups Accord reads: here every version the real server serves
/// must be served by the fake as well.
const READ_GROUPS: &[&str] = &[
    "",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "batch",
    "apps",
];

async fn get(http: &reqwest::Client, url: &str, token: Option<&str>, accept: &str) -> Value {
    let mut request = http.get(url).header("accept", accept);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let r = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "GET {url}: {status}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"))
}

/// What one server answers: the core versions, each group's versions
/// (preferred first), and each group version's resource list by name.
#[derive(Debug)]
struct Discovery {
    core: Vec<String>,
    groups: Vec<(String, Vec<String>)>,
    resources: BTreeMap<String, BTreeMap<String, Value>>,
    /// Aggregated discovery: (group, version) → resource → entry.
    aggregated: BTreeMap<(String, String), BTreeMap<String, Value>>,
}

async fn discover(http: &reqwest::Client, base: &str, token: Option<&str>) -> Discovery {
    const JSON: &str = "application/json";
    const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let api = get(http, &format!("{base}/api"), token, JSON).await;
    let core: Vec<String> = api["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let apis = get(http, &format!("{base}/apis"), token, JSON).await;
    let mut groups = Vec::new();
    for g in apis["groups"].as_array().unwrap() {
        let versions: Vec<String> = g["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            g["preferredVersion"]["version"].as_str(),
            versions.first().map(String::as_str),
            "{base}: group {} lists its preferred version first",
            g["name"]
        );
        groups.push((g["name"].as_str().unwrap().to_owned(), versions));
    }
    let mut resources = BTreeMap::new();
    let mut paths: Vec<String> = core.iter().map(|v| format!("/api/{v}")).collect();
    for (g, vs) in &groups {
        paths.extend(vs.iter().map(|v| format!("/apis/{g}/{v}")));
    }
    for path in paths {
        let list = get(http, &format!("{base}{path}"), token, JSON).await;
        let by_name = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["name"].as_str().unwrap().to_owned(), r.clone()))
            .collect();
        resources.insert(path, by_name);
    }
    let mut aggregated = BTreeMap::new();
    for path in ["/api", "/apis"] {
        let list = get(http, &format!("{base}{path}"), token, AGGREGATED).await;
        assert_eq!(list["kind"], "APIGroupDiscoveryList", "{base}{path}");
        for group in list["items"].as_array().unwrap() {
            let name = group["metadata"]["name"].as_str().unwrap_or("").to_owned();
            for version in group["versions"].as_array().unwrap() {
                let v = version["version"].as_str().unwrap().to_owned();
                let by_name = version["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| (r["resource"].as_str().unwrap().to_owned(), r.clone()))
                    .collect();
                aggregated.insert((name.clone(), v), by_name);
            }
        }
    }
    Discovery {
        core,
        groups,
        resources,
        aggregated,
    }
}

fn sorted_strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The fields of a resource entry the fake must get right.
fn legacy_fields(r: &Value) -> Value {
    serde_json::json!({
        "kind": r["kind"], "namespaced": r["namespaced"], "singularName": r["singularName"],
        "group": r["group"], "version": r["version"], "verbs": sorted_strings(&r["verbs"]),
    })
}

fn aggregated_fields(r: &Value) -> Value {
    let mut subs: Vec<Value> = r["subresources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            serde_json::json!({"subresource": s["subresource"], "responseKind": s["responseKind"],
                               "verbs": sorted_strings(&s["verbs"])})
        })
        .collect();
    subs.sort_by_key(|s| s["subresource"].as_str().unwrap_or("").to_owned());
    serde_json::json!({
        "responseKind": r["responseKind"], "scope": r["scope"],
        "singularResource": r["singularResource"], "verbs": sorted_strings(&r["verbs"]),
        "subresources": subs,
    })
}

/// Every way `fake` differs from `real` (empty: it tells the truth).
fn differences(real: &Discovery, fake: &Discovery) -> Vec<String> {
    let mut out = Vec::new();
    if real.core != fake.core {
        out.push(format!(
            "/api versions: real {:?}, fake {:?}",
            real.core, fake.core
        ));
    }
    for (g, fake_versions) in &fake.groups {
        match real.groups.iter().find(|(name, _)| name == g) {
            None => out.push(format!(
                "group {g}: the fake serves {fake_versions:?}, the real server not at all"
            )),
            Some((_, real_versions)) if real_versions != fake_versions => out.push(format!(
                "group {g}: real serves {real_versions:?}, fake {fake_versions:?}"
            )),
            Some(_) => {}
        }
    }
    for (g, real_versions) in &real.groups {
        if READ_GROUPS.contains(&g.as_str()) && !fake.groups.iter().any(|(name, _)| name == g) {
            out.push(format!(
                "group {g} (Accord reads it): real serves {real_versions:?}, the fake not at all"
            ));
        }
    }
    for (path, fake_list) in &fake.resources {
        let Some(real_list) = real.resources.get(path) else {
            out.push(format!("{path}: served by the fake only"));
            continue;
        };
        for (name, f) in fake_list {
            match real_list.get(name) {
                None => out.push(format!("{path} {name}: listed by the fake only")),
                Some(r) if legacy_fields(r) != legacy_fields(f) => out.push(format!(
                    "{path} {name}: real {}, fake {}",
                    legacy_fields(r),
                    legacy_fields(f)
                )),
                Some(_) => {}
            }
        }
    }
    for (gv, fake_list) in &fake.aggregated {
        let Some(real_list) = real.aggregated.get(gv) else {
            out.push(format!("aggregated {gv:?}: served by the fake only"));
            continue;
        };
        for (name, f) in fake_list {
            let fields = |r: &Value| {
                // The fake lists a subset of subresources: compare those.
                let mut v = aggregated_fields(r);
                let listed: Vec<Value> = aggregated_fields(f)["subresources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s["subresource"].clone())
                    .collect();
                v["subresources"] = Value::Array(
                    v["subresources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|s| listed.contains(&s["subresource"]))
                        .cloned()
                        .collect(),
                );
                v
            };
            match real_list.get(name) {
                None => out.push(format!("aggregated {gv:?} {name}: listed by the fake only")),
                Some(r) if fields(r) != aggregated_fields(f) => out.push(format!(
                    "aggregated {gv:?} {name}: real {}, fake {}",
                    fields(r),
                    aggregated_fields(f)
                )),
                Some(_) => {}
            }
        }
    }
    out
}

/// Starts the real apiserver of `minor` with `runtime_config` (and
/// `feature_gates`) and the fake of the same version with the same
/// runtime config, and compares their discovery.
async fn compare(minor: u32, feature_gates: &[&str], runtime_config: &[&str]) -> Vec<String> {
    let mut options = Options::apiserver(minor);
    options.feature_gates = feature_gates.iter().map(|s| s.to_string()).collect();
    options.runtime_config = runtime_config.iter().map(|s| s.to_string()).collect();
    let real = ControlPlane::start(options)
        .await
        .unwrap_or_else(|e| panic!("Kubernetes 1.{minor}: {e}"));
    let version = KubeVersion::parse(&format!("1.{minor}")).unwrap();
    let fake = FakeApi::start_version_with(
        version,
        resources_with(version, false, runtime_config).unwrap(),
        std::time::Duration::from_millis(500),
    )
    .await;
    let real_discovery = discover(
        &real.http().unwrap(),
        &real.url,
        Some(accord_testkit::control_plane::ADMIN_TOKEN),
    )
    .await;
    let fake_discovery = discover(&reqwest::Client::new(), &fake.url, None).await;
    let real_version = real.get_json("/version").await.unwrap();
    let fake_version = get(
        &reqwest::Client::new(),
        &format!("{}/version", fake.url),
        None,
        "application/json",
    )
    .await;
    let mut out = differences(&real_discovery, &fake_discovery);
    for key in ["major", "minor"] {
        if real_version[key] != fake_version[key] {
            out.push(format!(
                "/version {key}: real {}, fake {}",
                real_version[key], fake_version[key]
            ));
        }
    }
    out.into_iter()
        .map(|d| format!("1.{minor} {runtime_config:?}: {d}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_serves_what_each_real_apiserver_serves_by_default() {
    let mut all = Vec::new();
    for minor in MINORS {
        all.extend(compare(minor, &[], &[]).await);
    }
    assert!(
        all.is_empty(),
        "the fake differs from upstream:\n{}",
        all.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apis_an_admin_turns_on_are_served_alike() {
    let mut all = Vec::new();
    // Gang scheduling's PodGroup and Workload (beta, off by default).
    all.extend(
        compare(
            37,
            &["GenericWorkload=true"],
            &["scheduling.k8s.io/v1beta1=true"],
        )
        .await,
    );
    // 1.35's: alpha, the Workload at v1alpha1.
    all.extend(
        compare(
            35,
            &["GenericWorkload=true"],
            &["scheduling.k8s.io/v1alpha1=true"],
        )
        .await,
    );
    // 1.36's: alpha, PodGroup and Workload at v1alpha2.
    all.extend(
        compare(
            36,
            &["GenericWorkload=true"],
            &["scheduling.k8s.io/v1alpha2=true"],
        )
        .await,
    );
    assert!(
        all.is_empty(),
        "the fake differs from upstream:\n{}",
        all.join("\n")
    );
}

#[test]
fn a_runtime_config_the_fake_cannot_play_is_refused_by_name() {
    let v = KubeVersion::V1_37;
    let e = resources_with(v, false, &["nosuch.k8s.io/v1=true"]).unwrap_err();
    assert!(e.contains("nosuch.k8s.io/v1"), "{e}");
}
