//! What the API server serves, from discovery, among the kinds Accord
//! reads ([`READS`]): which `resource.k8s.io` version DRA objects are read
//! at (v1, else v1beta2, else v1beta1, else none: Kubernetes 1.34+, 1.33,
//! 1.32 with DRA enabled, older), whether `scheduling.k8s.io/v1beta1`
//! PodGroups and Workloads exist (1.37+), which x-k8s.io CRDs are
//! installed. [`crate::watch::DemandWatch::start_served`] starts watchers
//! only for what is served, so a cluster that lacks a kind never leaves
//! the control loop waiting for it.
//!
//! [`discover`] asks for aggregated discovery first (`GET /api` and
//! `GET /apis` with `Accept: application/json;g=apidiscovery.k8s.io;v=v2;
//! as=APIGroupDiscoveryList,application/json`: two requests, Kubernetes
//! 1.30+); a server that answers with the legacy lists instead (before
//! 1.26, or a proxy that drops the parameters) is read the legacy way:
//! `GET /api` (`APIVersions`), `GET /api/v1`, `GET /apis` (`APIGroupList`)
//! and `GET /apis/GROUP/VERSION` for each served group/version Accord
//! reads (never the others, so an unavailable aggregated API elsewhere
//! does not fail discovery). Discovery is allowed to every authenticated
//! user (the built-in `system:discovery` role): no RBAC rule is needed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions};
use kube::core::discovery::v2::{APIGroupDiscoveryList, ACCEPT_AGGREGATED_DISCOVERY_V2};
use serde_json::Value;

use crate::manifests::{DRA_VERSIONS, KUEUE_V1BETA1, KUEUE_V1BETA2};

/// One kind Accord reads from the cluster, and the versions it reads it
/// at, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadKind {
    pub kind: &'static str,
    /// `""` for the core group.
    pub group: &'static str,
    pub plural: &'static str,
    /// `apiVersion`s (`v1`, `resource.k8s.io/v1beta2`), best first.
    pub versions: &'static [&'static str],
    pub namespaced: bool,
    /// Watched whatever discovery says (Pods, Nodes, Jobs, …: every
    /// supported Kubernetes serves them).
    pub always: bool,
    /// An x-k8s.io CRD, installed or not.
    pub crd: bool,
    /// What it means for planning when the server serves none of
    /// `versions`.
    pub missing: &'static str,
}

const DRA_MISSING: &str = "the server serves no resource.k8s.io version Accord reads \
                           (v1, v1beta2, v1beta1)";

/// Every kind Accord reads (watched by [`crate::watch::DemandWatch`]), in
/// the order [`crate::watch::DemandWatch::watches`] lists them.
pub const READS: &[ReadKind] = &[
    core("Pod", "", "pods", &["v1"], true),
    core("PodTemplate", "", "podtemplates", &["v1"], true),
    core("Node", "", "nodes", &["v1"], false),
    core("Job", "batch", "jobs", &["batch/v1"], true),
    core("Deployment", "apps", "deployments", &["apps/v1"], true),
    core("DaemonSet", "apps", "daemonsets", &["apps/v1"], true),
    core(
        "PersistentVolumeClaim",
        "",
        "persistentvolumeclaims",
        &["v1"],
        true,
    ),
    core("PersistentVolume", "", "persistentvolumes", &["v1"], false),
    core("Namespace", "", "namespaces", &["v1"], false),
    core(
        "StorageClass",
        "storage.k8s.io",
        "storageclasses",
        &["storage.k8s.io/v1"],
        false,
    ),
    core(
        "CSINode",
        "storage.k8s.io",
        "csinodes",
        &["storage.k8s.io/v1"],
        false,
    ),
    ReadKind {
        kind: "ResourceClaim",
        group: "resource.k8s.io",
        plural: "resourceclaims",
        versions: &DRA_VERSIONS,
        namespaced: true,
        always: false,
        crd: false,
        missing: "DRA claims are not planned",
    },
    ReadKind {
        kind: "ResourceClaimTemplate",
        group: "resource.k8s.io",
        plural: "resourceclaimtemplates",
        versions: &DRA_VERSIONS,
        namespaced: true,
        always: false,
        crd: false,
        missing: "DRA claim templates are not read (pods that name one cannot be planned)",
    },
    ReadKind {
        kind: "DeviceClass",
        group: "resource.k8s.io",
        plural: "deviceclasses",
        versions: &DRA_VERSIONS,
        namespaced: false,
        always: false,
        crd: false,
        missing: "DRA device classes are not read",
    },
    ReadKind {
        kind: "ResourceSlice",
        group: "resource.k8s.io",
        plural: "resourceslices",
        versions: &DRA_VERSIONS,
        namespaced: false,
        always: false,
        crd: false,
        missing: "drivers' published devices are not read (devices come from the \
                  hardware model)",
    },
    ReadKind {
        kind: "DeviceTaintRule",
        group: "resource.k8s.io",
        plural: "devicetaintrules",
        // GA in 1.37; beta (off by default) and alpha before.
        versions: &[
            "resource.k8s.io/v1",
            "resource.k8s.io/v1beta2",
            "resource.k8s.io/v1alpha3",
        ],
        namespaced: false,
        always: false,
        crd: false,
        missing: "DeviceTaintRules are not read (drivers' own slice taints still are)",
    },
    ReadKind {
        kind: "PodGroup",
        group: "scheduling.k8s.io",
        plural: "podgroups",
        // 1.37 (v1beta1, or v1alpha3), 1.36 (v1alpha2): each off by
        // default, served where an admin turns the API on.
        versions: &[
            "scheduling.k8s.io/v1beta1",
            "scheduling.k8s.io/v1alpha3",
            "scheduling.k8s.io/v1alpha2",
        ],
        namespaced: true,
        always: false,
        crd: false,
        missing: "the server serves no scheduling.k8s.io PodGroups (v1beta1, v1alpha3, \
                  v1alpha2): pods with spec.schedulingGroup are planned pod by pod",
    },
    ReadKind {
        kind: "Workload",
        group: "scheduling.k8s.io",
        plural: "workloads",
        // 1.37 (v1beta1), 1.35 (v1alpha1: its pod groups are the gangs,
        // `workload_ref`); each off by default.
        versions: &["scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha1"],
        namespaced: true,
        always: false,
        crd: false,
        missing: "the server serves no scheduling.k8s.io Workloads (v1beta1, v1alpha1): \
                  Workloads are not read",
    },
    crd(
        "PodGroup",
        "scheduling.x-k8s.io",
        "podgroups",
        &["scheduling.x-k8s.io/v1alpha1"],
        "the coscheduling CRD (scheduling.x-k8s.io/v1alpha1) is not installed: \
         no gangs from coscheduling PodGroups",
    ),
    crd(
        "ProvisioningRequest",
        "autoscaling.x-k8s.io",
        "provisioningrequests",
        &["autoscaling.x-k8s.io/v1", "autoscaling.x-k8s.io/v1beta1"],
        "the ProvisioningRequest CRD (autoscaling.x-k8s.io/v1 or v1beta1) is not installed: \
         no ProvisioningRequests are answered",
    ),
    crd(
        "CapacityBuffer",
        "autoscaling.x-k8s.io",
        "capacitybuffers",
        // v1beta1 (Karpenter's CRD, cluster-autoscaler's newest); v1alpha1
        // (cluster-autoscaler's first, the same shape).
        &[
            "autoscaling.x-k8s.io/v1beta1",
            "autoscaling.x-k8s.io/v1alpha1",
        ],
        "the CapacityBuffer CRD (autoscaling.x-k8s.io/v1beta1 or v1alpha1) is not installed: \
         no capacity is kept spare for buffers",
    ),
    crd(
        "JobSet",
        "jobset.x-k8s.io",
        "jobsets",
        &["jobset.x-k8s.io/v1alpha2"],
        "the JobSet CRD (jobset.x-k8s.io/v1alpha2) is not installed: JobSets are not \
         read (their Jobs and pods still are)",
    ),
    // Kueue (v0.15+ stores v1beta2, v0.17 serves v1beta1 beside it):
    // Workloads not admitted yet are demand (`translate::kueue`); queues,
    // flavors and topologies say whether Kueue would admit them, and where.
    crd(
        "Workload",
        "kueue.x-k8s.io",
        "workloads",
        &[KUEUE_V1BETA2, KUEUE_V1BETA1],
        "Kueue is not installed (kueue.x-k8s.io Workloads): jobs Kueue holds suspended \
         are not planned until it admits them",
    ),
    crd(
        "LocalQueue",
        "kueue.x-k8s.io",
        "localqueues",
        &[KUEUE_V1BETA2, KUEUE_V1BETA1],
        "Kueue's LocalQueues are not served: its Workloads cannot be planned",
    ),
    cluster_crd(
        "ClusterQueue",
        "kueue.x-k8s.io",
        "clusterqueues",
        &[KUEUE_V1BETA2, KUEUE_V1BETA1],
        "Kueue's ClusterQueues are not served: its Workloads cannot be planned",
    ),
    cluster_crd(
        "ResourceFlavor",
        "kueue.x-k8s.io",
        "resourceflavors",
        &[KUEUE_V1BETA2, KUEUE_V1BETA1],
        "Kueue's ResourceFlavors are not served: its Workloads cannot be planned",
    ),
    cluster_crd(
        "Topology",
        "kueue.x-k8s.io",
        "topologies",
        &[KUEUE_V1BETA2, KUEUE_V1BETA1],
        "Kueue's Topologies are not served: topology-aware Workloads cannot be planned",
    ),
    crd(
        "PodGroup",
        "scheduling.volcano.sh",
        "podgroups",
        &["scheduling.volcano.sh/v1beta1"],
        "Volcano is not installed (scheduling.volcano.sh/v1beta1 PodGroups): its pods, \
         where kubernetes.schedulers lists it, are planned pod by pod",
    ),
    crd(
        "PodGroup",
        "scheduling.run.ai",
        "podgroups",
        &["scheduling.run.ai/v2alpha2"],
        "KAI is not installed (scheduling.run.ai/v2alpha2 PodGroups): its pods, where \
         kubernetes.schedulers lists it, are planned pod by pod",
    ),
];

const fn cluster_crd(
    kind: &'static str,
    group: &'static str,
    plural: &'static str,
    versions: &'static [&'static str],
    missing: &'static str,
) -> ReadKind {
    ReadKind {
        namespaced: false,
        ..crd(kind, group, plural, versions, missing)
    }
}

const fn core(
    kind: &'static str,
    group: &'static str,
    plural: &'static str,
    versions: &'static [&'static str],
    namespaced: bool,
) -> ReadKind {
    ReadKind {
        kind,
        group,
        plural,
        versions,
        namespaced,
        always: true,
        crd: false,
        missing: "",
    }
}

const fn crd(
    kind: &'static str,
    group: &'static str,
    plural: &'static str,
    versions: &'static [&'static str],
    missing: &'static str,
) -> ReadKind {
    ReadKind {
        kind,
        group,
        plural,
        versions,
        namespaced: true,
        always: false,
        crd: true,
        missing,
    }
}

impl ReadKind {
    /// What it means when the server serves none of its versions.
    pub fn missing_note(&self) -> String {
        if self.group == "resource.k8s.io" {
            format!("{}: {DRA_MISSING}", self.missing)
        } else {
            self.missing.to_owned()
        }
    }
}

/// The group and version of an `apiVersion` (`v1` is the core group's).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// One resource the server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedResource {
    pub kind: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

/// What the API server serves, among the group/versions Accord reads:
/// `apiVersion` → plural → resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServedApis {
    served: BTreeMap<String, BTreeMap<String, ServedResource>>,
}

/// The `apiVersion`s Accord reads.
fn read_api_versions() -> impl Iterator<Item = &'static str> {
    READS.iter().flat_map(|r| r.versions.iter().copied())
}

fn reads_api_version(api_version: &str) -> bool {
    read_api_versions().any(|v| v == api_version)
}

impl ServedApis {
    /// [`discover`]: asks `client`'s API server what it serves.
    pub async fn discover(client: &kube::Client) -> Result<ServedApis, kube::Error> {
        discover(client).await
    }

    /// Everything Accord reads, each kind at its best version: a cluster
    /// of the newest Kubernetes with every CRD (tests, offline use, and
    /// [`crate::watch::DemandWatch::start`]).
    pub fn everything() -> ServedApis {
        let mut out = ServedApis::default();
        for r in READS {
            out.insert(
                r.versions[0],
                r.plural,
                ServedResource {
                    kind: r.kind.to_owned(),
                    namespaced: r.namespaced,
                    verbs: ["get", "list", "watch"].map(String::from).to_vec(),
                },
            );
        }
        out
    }

    /// Records that `api_version` serves `plural` (tests and [`discover`];
    /// any `apiVersion` is kept).
    pub fn insert(&mut self, api_version: &str, plural: &str, resource: ServedResource) {
        self.served
            .entry(api_version.to_owned())
            .or_default()
            .insert(plural.to_owned(), resource);
    }

    /// Whether `group` (`""` for core) `version` serves `plural`.
    pub fn serves(&self, group: &str, version: &str, plural: &str) -> bool {
        let api_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        self.resource(&api_version, plural).is_some()
    }

    /// The resource `plural` at `api_version`, if served.
    pub fn resource(&self, api_version: &str, plural: &str) -> Option<&ServedResource> {
        self.served.get(api_version)?.get(plural)
    }

    /// The `apiVersion`s recorded (sorted).
    pub fn api_versions(&self) -> Vec<&str> {
        self.served.keys().map(String::as_str).collect()
    }

    /// The first of `candidates` (`apiVersion`s, best first) at which
    /// `plural` is served.
    pub fn best_version(&self, plural: &str, candidates: &[&'static str]) -> Option<&'static str> {
        candidates
            .iter()
            .copied()
            .find(|v| self.resource(v, plural).is_some())
    }

    /// The version of `kind` Accord reads, if served ([`READS`]).
    pub fn read_version(&self, kind: &ReadKind) -> Option<&'static str> {
        self.best_version(kind.plural, kind.versions)
    }

    /// The `resource.k8s.io` `apiVersion` DRA claims are read at:
    /// `resource.k8s.io/v1` if served, else `v1beta2`, else `v1beta1`,
    /// else `None` (no DRA).
    pub fn dra_version(&self) -> Option<&'static str> {
        self.best_version("resourceclaims", &DRA_VERSIONS)
    }

    /// Whether `scheduling.k8s.io/v1beta1` PodGroups are served.
    pub fn pod_group_v1beta1(&self) -> bool {
        self.serves("scheduling.k8s.io", "v1beta1", "podgroups")
    }

    /// Whether `scheduling.k8s.io/v1beta1` Workloads are served.
    pub fn workload_v1beta1(&self) -> bool {
        self.serves("scheduling.k8s.io", "v1beta1", "workloads")
    }

    fn add_list(&mut self, api_version: &str, list: &APIResourceList) {
        for r in &list.resources {
            // Subresources (`pods/status`) are not kinds.
            if r.name.contains('/') || r.name.is_empty() {
                continue;
            }
            self.insert(
                api_version,
                &r.name,
                ServedResource {
                    kind: r.kind.clone(),
                    namespaced: r.namespaced,
                    verbs: r.verbs.clone(),
                },
            );
        }
    }
}

/// Asks the API server what it serves (see the module doc for the
/// requests). Errors: the server unreachable, or discovery refused or
/// unreadable; a group/version that disappears between the group list and
/// its resource list (a CRD removed) is not served.
pub async fn discover(client: &kube::Client) -> Result<ServedApis, kube::Error> {
    if let Some(served) = discover_aggregated(client).await? {
        return Ok(served);
    }
    discover_legacy(client).await
}

fn get(path: &str, accept: &str) -> Result<http::Request<Vec<u8>>, kube::Error> {
    http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)
}

/// Aggregated discovery (v2); `None` when the server answered otherwise
/// (the legacy lists).
async fn discover_aggregated(client: &kube::Client) -> Result<Option<ServedApis>, kube::Error> {
    let mut served = ServedApis::default();
    for path in ["/api", "/apis"] {
        let text = client
            .request_text(get(path, ACCEPT_AGGREGATED_DISCOVERY_V2)?)
            .await?;
        let value: Value = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
        if value["kind"] != "APIGroupDiscoveryList" {
            return Ok(None);
        }
        let list: APIGroupDiscoveryList =
            serde_json::from_value(value).map_err(kube::Error::SerdeError)?;
        for group in list.items {
            let name = group
                .metadata
                .as_ref()
                .and_then(|m| m.name.clone())
                .unwrap_or_default();
            for version in group.versions {
                let Some(v) = version.version.filter(|v| !v.is_empty()) else {
                    continue;
                };
                let api_version = if name.is_empty() {
                    v
                } else {
                    format!("{name}/{v}")
                };
                if !reads_api_version(&api_version) {
                    continue;
                }
                for r in version.resources {
                    let Some(plural) = r.resource.filter(|p| !p.is_empty()) else {
                        continue;
                    };
                    let kind = r.response_kind.and_then(|k| k.kind).unwrap_or_default();
                    served.insert(
                        &api_version,
                        &plural,
                        ServedResource {
                            kind,
                            namespaced: r.scope.as_deref() == Some("Namespaced"),
                            verbs: r.verbs,
                        },
                    );
                }
            }
        }
    }
    Ok(Some(served))
}

/// Legacy discovery: the group lists, then each served group/version
/// Accord reads.
async fn discover_legacy(client: &kube::Client) -> Result<ServedApis, kube::Error> {
    let mut served = ServedApis::default();
    let json = "application/json";
    let core: APIVersions = client.request(get("/api", json)?).await?;
    let groups: APIGroupList = client.request(get("/apis", json)?).await?;
    let mut api_versions: Vec<String> = core.versions.clone();
    for g in &groups.groups {
        api_versions.extend(g.versions.iter().map(|v| v.group_version.clone()));
    }
    api_versions.retain(|v| reads_api_version(v));
    api_versions.sort();
    api_versions.dedup();
    for api_version in api_versions {
        let path = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        match client.request::<APIResourceList>(get(&path, json)?).await {
            Ok(list) => served.add_list(&api_version, &list),
            // Gone since the group list (a CRD removed): not served.
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(served)
}
