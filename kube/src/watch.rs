//! Demand kept current from a live API server: kube-rs watchers feed
//! reflector stores (list, then watch from the list's resourceVersion;
//! bookmarks; a 410 Gone re-lists), and a snapshot translates what the
//! stores hold. Watchers start only for the kinds the server serves
//! ([`crate::discovery::ServedApis`]): core kinds always, DRA at the best
//! `resource.k8s.io` version served (v1 typed; v1beta2 and v1beta1 as
//! dynamic objects converted to v1), `scheduling.k8s.io/v1beta1` PodGroups
//! and Workloads and the x-k8s.io CRDs (JobSet, coscheduling PodGroup,
//! ProvisioningRequest, dynamic) only where served. What is not served is
//! said once at start and listed by [`DemandWatch::watches`]. A watcher
//! never stops on a bad object: translation reports it per workload; its
//! errors are said once per kind and message while it backs off.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde::Serialize;
use tracing::warn;

use crate::discovery::{split_api_version, ReadKind, ServedApis, READS};
use crate::manifests::{dra_as_v1, Manifests, Object, DRA_V1};
use crate::translate::{translate, Options, Translation};

/// One kind Accord reads, and whether (at which version) it is watched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatchedKind {
    pub kind: String,
    /// The `apiVersion` watched (`resource.k8s.io/v1beta2`); `None`: the
    /// server serves the kind at no version Accord reads, so it is not
    /// watched.
    pub api_version: Option<String>,
    /// What not being watched means for planning, or how it is read (a
    /// beta DRA version converted to v1).
    pub note: Option<String>,
}

/// The stores, one per kind watched.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    pod_templates: Store<PodTemplate>,
    jobs: Store<Job>,
    deployments: Store<Deployment>,
    daemon_sets: Store<DaemonSet>,
    claims_pv: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    storage_classes: Store<StorageClass>,
    csi_nodes: Store<CSINode>,
    namespaces: Store<Namespace>,
    nodes: Store<Node>,
    /// DRA at `resource.k8s.io/v1` (typed); at a beta version these are
    /// `None` and the kinds are in `dynamic`.
    claims: Option<Store<ResourceClaim>>,
    claim_templates: Option<Store<ResourceClaimTemplate>>,
    classes: Option<Store<DeviceClass>>,
    slices: Option<Store<ResourceSlice>>,
    pod_groups: Option<Store<PodGroup>>,
    workloads: Option<Store<Workload>>,
    /// Pods' `spec.workloadRef`, where 1.35's Workloads are watched (the
    /// typed Pod has no such field: `workload_ref`).
    pod_refs: Option<Store<crate::workload_ref::PodWorkloadRef>>,
    /// CRDs, and DRA kinds at v1beta2/v1beta1 (converted when read).
    dynamic: Vec<(ApiResource, Store<DynamicObject>)>,
}

/// One running watcher: whether its first list is in the store.
#[derive(Debug)]
struct Watcher {
    kind: String,
    /// `Kind (apiVersion)`.
    what: String,
    listed: Arc<AtomicBool>,
    /// [`DemandWatch::ready`] waits for it.
    required: bool,
}

/// Watches everything demand is made of. Dropping it stops the watchers.
pub struct DemandWatch {
    stores: Stores,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    watchers: Vec<Watcher>,
    watches: Vec<WatchedKind>,
    problems: Arc<Mutex<BTreeSet<String>>>,
    /// Raised on every event any watcher applies to its store.
    changes: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for DemandWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemandWatch")
            .field("watchers", &self.tasks.len())
            .field("watches", &self.watches)
            .finish()
    }
}

impl Drop for DemandWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn api_resource(kind: &ReadKind, api_version: &str) -> ApiResource {
    let (group, version) = split_api_version(api_version);
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind.kind),
        kind.plural,
    )
}

/// The CRDs Accord reads, by group, version and kind.
pub fn crds() -> Vec<ApiResource> {
    READS
        .iter()
        .filter(|r| r.crd)
        .map(|r| api_resource(r, r.versions[0]))
        .collect()
}

/// Starts watchers and keeps what `ready` and `problems` need.
struct Spawner {
    client: kube::Client,
    problems: Arc<Mutex<BTreeSet<String>>>,
    changes: tokio::sync::watch::Sender<u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    watchers: Vec<Watcher>,
}

impl Spawner {
    /// A typed watcher on all namespaces.
    fn typed<K>(&mut self, kind: &str, api_version: &str, required: bool) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        self.run(
            Api::all(self.client.clone()),
            Default::default(),
            kind,
            api_version,
            required,
        )
    }

    /// A dynamic watcher on all namespaces.
    fn dynamic(&mut self, ar: &ApiResource, required: bool) -> Store<DynamicObject> {
        self.run(
            Api::all_with(self.client.clone(), ar),
            reflector::store::Writer::new(ar.clone()),
            &ar.kind,
            &ar.api_version,
            required,
        )
    }

    /// Runs one watcher into `writer`'s store until dropped; errors are
    /// said once per kind and message while the watcher backs off and
    /// retries.
    fn run<K>(
        &mut self,
        api: Api<K>,
        writer: reflector::store::Writer<K>,
        kind: &str,
        api_version: &str,
        required: bool,
    ) -> Store<K>
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let reader = writer.as_reader();
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().any_semantic()),
        )
        .default_backoff();
        let listed = Arc::new(AtomicBool::new(false));
        self.watchers.push(Watcher {
            kind: kind.to_owned(),
            what: format!("{kind} ({api_version})"),
            listed: listed.clone(),
            required,
        });
        let (problems, changes) = (self.problems.clone(), self.changes.clone());
        let kind = kind.to_owned();
        let api_version = api_version.to_owned();
        self.tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                match &item {
                    // The end of a (re-)list, or one change: the stores moved.
                    Ok(watcher::Event::InitDone) => {
                        listed.store(true, Ordering::Release);
                        changes.send_modify(|c| *c += 1);
                    }
                    Ok(watcher::Event::Apply(_)) | Ok(watcher::Event::Delete(_)) => {
                        changes.send_modify(|c| *c += 1)
                    }
                    _ => {}
                }
                if let Err(e) = item {
                    let line = format!("{kind}: {e}");
                    let new = problems.lock().map(|mut p| p.insert(line)).unwrap_or(false);
                    if new {
                        warn!(kind = %kind, api_version = %api_version, error = %e,
                              "watch failed; retrying with backoff");
                    }
                }
            }
        }));
        reader
    }
}

impl DemandWatch {
    /// Starts one watcher per kind Accord reads on `client`'s cluster (all
    /// namespaces), assuming the server serves every one at its best
    /// version ([`ServedApis::everything`]). [`DemandWatch::ready`] does
    /// not wait for the CRDs here (the cluster may lack them); prefer
    /// [`DemandWatch::start_served`] with what discovery found.
    pub fn start(client: kube::Client) -> DemandWatch {
        DemandWatch::start_inner(client, &ServedApis::everything(), false)
    }

    /// Starts a watcher for each kind Accord reads that `served` says the
    /// server serves, at the best version Accord reads it at; says once
    /// (a warning) each kind that is not served, and lists all in
    /// [`DemandWatch::watches`]. [`DemandWatch::ready`] waits for every
    /// watcher started.
    pub fn start_served(client: kube::Client, served: &ServedApis) -> DemandWatch {
        DemandWatch::start_inner(client, served, true)
    }

    fn start_inner(client: kube::Client, served: &ServedApis, crds_required: bool) -> DemandWatch {
        let problems = Arc::new(Mutex::new(BTreeSet::new()));
        let (changes, _) = tokio::sync::watch::channel(0);
        let mut s = Spawner {
            client,
            problems: problems.clone(),
            changes: changes.clone(),
            tasks: Vec::new(),
            watchers: Vec::new(),
        };
        let mut watches = Vec::new();
        let mut stores = Stores {
            pods: s.typed("Pod", "v1", true),
            pod_templates: s.typed("PodTemplate", "v1", true),
            jobs: s.typed("Job", "batch/v1", true),
            deployments: s.typed("Deployment", "apps/v1", true),
            daemon_sets: s.typed("DaemonSet", "apps/v1", true),
            claims_pv: s.typed("PersistentVolumeClaim", "v1", true),
            volumes: s.typed("PersistentVolume", "v1", true),
            storage_classes: s.typed("StorageClass", "storage.k8s.io/v1", true),
            csi_nodes: s.typed("CSINode", "storage.k8s.io/v1", true),
            namespaces: s.typed("Namespace", "v1", true),
            nodes: s.typed("Node", "v1", true),
            claims: None,
            claim_templates: None,
            classes: None,
            slices: None,
            pod_groups: None,
            workloads: None,
            pod_refs: None,
            dynamic: Vec::new(),
        };
        for r in READS {
            let version = if r.always {
                Some(r.versions[0])
            } else {
                served.read_version(r)
            };
            let Some(version) = version else {
                let note = r.missing_note();
                warn!(kind = %r.kind, group = %r.group, versions = ?r.versions, note = %note,
                      "not served by the API server: not watched");
                watches.push(WatchedKind {
                    kind: r.kind.to_owned(),
                    api_version: None,
                    note: Some(note),
                });
                continue;
            };
            let mut note = None;
            match (r.group, r.kind) {
                // Started above.
                (
                    _,
                    "Pod"
                    | "PodTemplate"
                    | "Job"
                    | "Deployment"
                    | "DaemonSet"
                    | "Node"
                    | "PersistentVolumeClaim"
                    | "PersistentVolume"
                    | "StorageClass"
                    | "CSINode",
                ) if r.always => {}
                // Read as JSON at whichever version is served (the
                // shapes Accord reads are the same): see `devices`.
                ("resource.k8s.io", "DeviceTaintRule") => {
                    let ar = api_resource(r, version);
                    let store = s.dynamic(&ar, true);
                    stores.dynamic.push((ar, store));
                }
                ("resource.k8s.io", kind) if version == DRA_V1 => match kind {
                    "ResourceClaim" => stores.claims = Some(s.typed(kind, version, true)),
                    "ResourceClaimTemplate" => {
                        stores.claim_templates = Some(s.typed(kind, version, true))
                    }
                    "DeviceClass" => stores.classes = Some(s.typed(kind, version, true)),
                    _ => stores.slices = Some(s.typed(kind, version, true)),
                },
                ("resource.k8s.io", _) => {
                    note = Some(format!("read as {DRA_V1}"));
                    let ar = api_resource(r, version);
                    let store = s.dynamic(&ar, true);
                    stores.dynamic.push((ar, store));
                }
                ("scheduling.k8s.io", "PodGroup") if version == "scheduling.k8s.io/v1beta1" => {
                    stores.pod_groups = Some(s.typed(r.kind, version, true))
                }
                // An alpha version: read as v1beta1 (see manifests).
                ("scheduling.k8s.io", "PodGroup") => {
                    note = Some("read as scheduling.k8s.io/v1beta1".to_owned());
                    let ar = api_resource(r, version);
                    let store = s.dynamic(&ar, true);
                    stores.dynamic.push((ar, store));
                }
                ("scheduling.k8s.io", "Workload") if version == "scheduling.k8s.io/v1beta1" => {
                    stores.workloads = Some(s.typed(r.kind, version, true))
                }
                // 1.35: the Workload's pod groups are the gangs, and pods
                // name theirs in spec.workloadRef, read apart.
                ("scheduling.k8s.io", "Workload") => {
                    note = Some(
                        "its pod groups read as PodGroups, pods' spec.workloadRef as \
                         spec.schedulingGroup"
                            .to_owned(),
                    );
                    let ar = api_resource(r, version);
                    let store = s.dynamic(&ar, true);
                    stores.dynamic.push((ar, store));
                    stores.pod_refs = Some(s.typed("Pod", "v1 (spec.workloadRef)", true));
                }
                _ => {
                    let ar = api_resource(r, version);
                    let store = s.dynamic(&ar, crds_required || !r.crd);
                    stores.dynamic.push((ar, store));
                }
            }
            watches.push(WatchedKind {
                kind: r.kind.to_owned(),
                api_version: Some(version.to_owned()),
                note,
            });
        }
        DemandWatch {
            stores,
            tasks: s.tasks,
            watchers: s.watchers,
            watches,
            problems,
            changes,
        }
    }

    /// Every kind Accord reads, in [`READS`] order: the version watched,
    /// or `None` with what its absence means.
    pub fn watches(&self) -> Vec<WatchedKind> {
        self.watches.clone()
    }

    /// A receiver that sees a new value whenever any store changed: what
    /// wakes the control loop on new demand or node state.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Returns once every watcher started (bar, with
    /// [`DemandWatch::start`], the CRDs') has had its first list. A kind
    /// whose list keeps failing (not allowed by RBAC, a CRD removed since
    /// discovery) holds it up: wrap it in a deadline and report
    /// [`DemandWatch::not_ready`] and [`DemandWatch::problems`].
    pub async fn ready(&self) {
        // Subscribed before looking, so a list that ends in between is
        // seen either way.
        let mut changed = self.changes.subscribe();
        while !self.not_ready().is_empty() {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// The watchers [`DemandWatch::ready`] still waits for, as
    /// `Kind (apiVersion)`.
    pub fn not_ready(&self) -> Vec<String> {
        self.watchers
            .iter()
            .filter(|w| w.required && !w.listed.load(Ordering::Acquire))
            .map(|w| w.what.clone())
            .collect()
    }

    /// Whether Pods and Nodes have had their first list: without them a
    /// node's pods are unknown, so nothing may be planned (a busy node
    /// would look idle).
    pub fn pods_and_nodes_listed(&self) -> bool {
        self.watchers
            .iter()
            .filter(|w| w.kind == "Pod" || w.kind == "Node")
            .all(|w| w.listed.load(Ordering::Acquire))
    }

    /// Watch problems so far (each said once).
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// What the stores hold now, as objects for translation (DRA objects
    /// watched at a beta version converted to v1).
    pub fn manifests(&self) -> Manifests {
        let s = &self.stores;
        let mut m = Manifests::default();
        fn copy<K>(store: Option<&Store<K>>, wrap: fn(Box<K>) -> Object, out: &mut Vec<Object>)
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            let Some(store) = store else { return };
            out.extend(store.state().iter().map(|o| wrap(Box::new((**o).clone()))));
        }
        match &s.pod_refs {
            None => copy(Some(&s.pods), Object::Pod, &mut m.objects),
            Some(refs) => pods_with_refs(&s.pods, refs, &mut m.objects),
        }
        copy(Some(&s.pod_templates), Object::PodTemplate, &mut m.objects);
        copy(Some(&s.jobs), Object::Job, &mut m.objects);
        copy(Some(&s.deployments), Object::Deployment, &mut m.objects);
        copy(Some(&s.daemon_sets), Object::DaemonSet, &mut m.objects);
        copy(
            Some(&s.claims_pv),
            Object::PersistentVolumeClaim,
            &mut m.objects,
        );
        copy(Some(&s.volumes), Object::PersistentVolume, &mut m.objects);
        copy(
            Some(&s.storage_classes),
            Object::StorageClass,
            &mut m.objects,
        );
        copy(Some(&s.csi_nodes), Object::CSINode, &mut m.objects);
        copy(Some(&s.namespaces), Object::Namespace, &mut m.objects);
        copy(s.claims.as_ref(), Object::ResourceClaim, &mut m.objects);
        copy(
            s.claim_templates.as_ref(),
            Object::ResourceClaimTemplate,
            &mut m.objects,
        );
        copy(s.classes.as_ref(), Object::DeviceClass, &mut m.objects);
        copy(s.pod_groups.as_ref(), Object::PodGroup, &mut m.objects);
        copy(s.workloads.as_ref(), Object::Workload, &mut m.objects);
        for (ar, store) in &s.dynamic {
            if ar.kind == "ResourceSlice" || ar.kind == "DeviceTaintRule" {
                // Supply, not demand: see `devices`.
                continue;
            }
            for o in store.state() {
                m.add(dynamic_value(ar, &o), &format!("watch {}", ar.kind));
            }
        }
        m
    }

    /// The cluster's nodes now, by name.
    pub fn nodes(&self) -> Vec<crate::cluster::ClusterNode> {
        let mut out: Vec<_> = self
            .stores
            .nodes
            .state()
            .iter()
            .map(|n| crate::cluster::cluster_node(n))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// What DRA drivers publish now, per node: the devices (slices sorted
    /// by name, so the order is stable) and the counter sets of their
    /// pools; and the slices or rules that could not be read, with the
    /// reason.
    pub fn devices(
        &self,
    ) -> (
        std::collections::BTreeMap<String, crate::cluster::Published>,
        Vec<String>,
    ) {
        let mut problems = Vec::new();
        let mut slices: Vec<ResourceSlice> = self
            .stores
            .slices
            .iter()
            .flat_map(|s| s.state())
            .map(|s| (*s).clone())
            .collect();
        let mut rules = Vec::new();
        for (ar, store) in &self.stores.dynamic {
            match ar.kind.as_str() {
                // Watched at a beta version: converted to v1.
                "ResourceSlice" => {
                    for o in store.state() {
                        let name = o.metadata.name.clone().unwrap_or_default();
                        match serde_json::from_value(dra_as_v1(dynamic_value(ar, &o))) {
                            Ok(s) => slices.push(s),
                            Err(e) => problems.push(format!(
                                "ResourceSlice {name} ({}): not readable as {DRA_V1}: {e}",
                                ar.api_version
                            )),
                        }
                    }
                }
                "DeviceTaintRule" => {
                    for o in store.state() {
                        match crate::cluster::taint_rule(&dynamic_value(ar, &o)) {
                            Ok(r) => rules.push(r),
                            Err(e) => problems.push(e),
                        }
                    }
                }
                _ => {}
            }
        }
        rules.sort();
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let (out, more) = crate::cluster::published(slices, &rules);
        problems.extend(more);
        (out, problems)
    }

    /// The demand now: only pods the scheduler marked Unschedulable are
    /// pending.
    pub fn snapshot(&self, options: &Options) -> Translation {
        let mut options = options.clone();
        options.pod_groups_served = self.pod_groups_served();
        translate_live(&self.manifests(), &options)
    }

    /// Whether the cluster serves a `scheduling.k8s.io` group API this
    /// watch reads ([`Options::pod_groups_served`]): a PodGroup version,
    /// or 1.35's Workloads, which stand for PodGroups (`workload_ref`).
    pub fn pod_groups_served(&self) -> bool {
        self.watches.iter().any(|w| {
            let v = w.api_version.as_deref().unwrap_or("");
            (w.kind == "PodGroup" && v.starts_with("scheduling.k8s.io/"))
                || (w.kind == "Workload" && v == crate::workload_ref::WORKLOAD_V1ALPHA1)
        })
    }
}

/// The pods, each given the group its `spec.workloadRef` names (read by
/// the second watch of pods) as its `spec.schedulingGroup`. A pending pod
/// that watch has not seen yet waits for the next round (planned alone
/// now, its gang could be split); a bound one is always kept (its node is
/// busy either way).
fn pods_with_refs(
    pods: &Store<Pod>,
    refs: &Store<crate::workload_ref::PodWorkloadRef>,
    out: &mut Vec<Object>,
) {
    for p in pods.state() {
        let key = reflector::ObjectRef::<crate::workload_ref::PodWorkloadRef>::new(
            p.metadata.name.as_deref().unwrap_or_default(),
        )
        .within(p.metadata.namespace.as_deref().unwrap_or_default());
        let bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let mut pod = (*p).clone();
        match refs.get(&key) {
            Some(r) => {
                if let (Some(spec), Some(wr)) = (pod.spec.as_mut(), r.workload_ref()) {
                    if spec.scheduling_group.is_none() {
                        spec.scheduling_group =
                            Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
                                pod_group_name: Some(wr.pod_group_name()),
                            });
                    }
                }
            }
            None if !bound => continue,
            None => {}
        }
        out.push(Object::Pod(Box::new(pod)));
    }
}

/// A dynamic object as JSON with its `apiVersion` and `kind` (the store
/// keeps them in its `ApiResource`).
fn dynamic_value(ar: &ApiResource, o: &DynamicObject) -> serde_json::Value {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), ar.api_version.clone().into());
        map.insert("kind".into(), ar.kind.clone().into());
    }
    v
}

/// Translates objects read from a live cluster: only pods the scheduler
/// marked Unschedulable are pending (in files, a pod with no status is).
pub fn translate_live(manifests: &Manifests, options: &Options) -> Translation {
    let mut options = options.clone();
    options.pending_without_status = false;
    translate(manifests, &options)
}
