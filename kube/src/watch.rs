//! Demand kept current from a live API server: kube-rs watchers feed
//! reflector stores (list, then watch from the list's resourceVersion;
//! bookmarks; a 410 Gone re-lists), and a snapshot translates what the
//! stores hold. Typed (k8s-openapi) for built-in kinds, dynamic for the
//! CRDs (JobSet, coscheduling PodGroup, ProvisioningRequest), whose absence
//! from a cluster is reported once, not retried noisily. A watcher never
//! stops on a bad object: translation reports it per workload.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use tracing::warn;

use crate::manifests::{Manifests, Object};
use crate::translate::{translate, Options, Translation};

/// The stores, one per kind.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    pod_templates: Store<PodTemplate>,
    jobs: Store<Job>,
    deployments: Store<Deployment>,
    claims: Store<ResourceClaim>,
    claim_templates: Store<ResourceClaimTemplate>,
    classes: Store<DeviceClass>,
    pod_groups: Store<PodGroup>,
    nodes: Store<Node>,
    slices: Store<ResourceSlice>,
    dynamic: Vec<(ApiResource, Store<DynamicObject>)>,
}

/// Watches everything demand is made of. Dropping it stops the watchers.
pub struct DemandWatch {
    stores: Stores,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    problems: Arc<Mutex<BTreeSet<String>>>,
    /// Raised on every event any watcher applies to its store.
    changes: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for DemandWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemandWatch")
            .field("watchers", &self.tasks.len())
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

/// The CRDs Accord reads, by group, version and kind.
pub fn crds() -> Vec<ApiResource> {
    [
        ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        ("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
        ("autoscaling.x-k8s.io", "v1", "ProvisioningRequest"),
    ]
    .iter()
    .map(|(g, v, k)| ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, k)))
    .collect()
}

/// Runs one watcher into `writer`'s store until dropped; errors are said
/// once per kind and message while the watcher backs off and retries.
fn watch_into<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    what: String,
    problems: Arc<Mutex<BTreeSet<String>>>,
    changes: tokio::sync::watch::Sender<u64>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
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
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match &item {
                // The end of a (re-)list, or one change: the stores moved.
                Ok(watcher::Event::InitDone)
                | Ok(watcher::Event::Apply(_))
                | Ok(watcher::Event::Delete(_)) => changes.send_modify(|c| *c += 1),
                _ => {}
            }
            if let Err(e) = item {
                let line = format!("{what}: {e}");
                if problems.lock().expect("lock").insert(line) {
                    warn!(kind = %what, error = %e, "watch failed (a CRD not installed?); retrying with backoff");
                }
            }
        }
    }));
    reader
}

impl DemandWatch {
    /// Starts one watcher per kind on `client`'s cluster (all namespaces).
    pub fn start(client: kube::Client) -> DemandWatch {
        let problems = Arc::new(Mutex::new(BTreeSet::new()));
        let (changes, _) = tokio::sync::watch::channel(0);
        let mut tasks = Vec::new();
        let p = &problems;
        let c = &changes;
        // One typed watcher per kind, all namespaces.
        macro_rules! watch {
            ($kind:literal) => {
                watch_into(
                    Api::all(client.clone()),
                    Default::default(),
                    $kind.to_owned(),
                    p.clone(),
                    c.clone(),
                    &mut tasks,
                )
            };
        }
        let stores = Stores {
            pods: watch!("Pod"),
            pod_templates: watch!("PodTemplate"),
            jobs: watch!("Job"),
            deployments: watch!("Deployment"),
            claims: watch!("ResourceClaim"),
            claim_templates: watch!("ResourceClaimTemplate"),
            classes: watch!("DeviceClass"),
            pod_groups: watch!("PodGroup"),
            nodes: watch!("Node"),
            slices: watch!("ResourceSlice"),
            dynamic: crds()
                .into_iter()
                .map(|ar| {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                    let writer = reflector::store::Writer::new(ar.clone());
                    let reader = watch_into(
                        api,
                        writer,
                        ar.kind.clone(),
                        p.clone(),
                        c.clone(),
                        &mut tasks,
                    );
                    (ar, reader)
                })
                .collect(),
        };
        DemandWatch {
            stores,
            tasks,
            problems,
            changes,
        }
    }

    /// A receiver that sees a new value whenever any store changed: what
    /// wakes the control loop on new demand or node state.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether every store has had its first list.
    pub async fn ready(&self) {
        let s = &self.stores;
        let _ = s.pods.wait_until_ready().await;
        let _ = s.claims.wait_until_ready().await;
        let _ = s.claim_templates.wait_until_ready().await;
        let _ = s.classes.wait_until_ready().await;
        let _ = s.pod_groups.wait_until_ready().await;
    }

    /// Watch problems so far (each said once).
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .expect("lock")
            .iter()
            .cloned()
            .collect()
    }

    /// What the stores hold now, as objects for translation.
    pub fn manifests(&self) -> Manifests {
        let s = &self.stores;
        let mut m = Manifests::default();
        fn copy<K>(store: &Store<K>, wrap: fn(Box<K>) -> Object, out: &mut Vec<Object>)
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            out.extend(store.state().iter().map(|o| wrap(Box::new((**o).clone()))));
        }
        copy(&s.pods, Object::Pod, &mut m.objects);
        copy(&s.pod_templates, Object::PodTemplate, &mut m.objects);
        copy(&s.jobs, Object::Job, &mut m.objects);
        copy(&s.deployments, Object::Deployment, &mut m.objects);
        copy(&s.claims, Object::ResourceClaim, &mut m.objects);
        copy(
            &s.claim_templates,
            Object::ResourceClaimTemplate,
            &mut m.objects,
        );
        copy(&s.classes, Object::DeviceClass, &mut m.objects);
        copy(&s.pod_groups, Object::PodGroup, &mut m.objects);
        for (ar, store) in &s.dynamic {
            for o in store.state() {
                let mut v = serde_json::to_value(&*o).expect("plain data");
                v["apiVersion"] = serde_json::Value::from(ar.api_version.clone());
                v["kind"] = serde_json::Value::from(ar.kind.clone());
                m.add(v, &format!("watch {}", ar.kind));
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

    /// The devices DRA drivers publish now, per node (slices sorted by
    /// name, so the order is stable), and the slices that could not be
    /// read, with the reason.
    pub fn devices(
        &self,
    ) -> (
        std::collections::BTreeMap<String, Vec<accord::device::Device>>,
        Vec<String>,
    ) {
        let mut slices = self.stores.slices.state();
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut out: std::collections::BTreeMap<String, Vec<accord::device::Device>> =
            Default::default();
        let mut problems = Vec::new();
        for s in slices {
            let name = s.metadata.name.clone().unwrap_or_default();
            match crate::cluster::slice_devices(&s) {
                Ok((Some(node), devices)) => out.entry(node).or_default().extend(devices),
                Ok((None, _)) => problems.push(format!(
                    "ResourceSlice {name}: not node-local; not planned with"
                )),
                Err(e) => problems.push(format!("ResourceSlice {name}: {e}")),
            }
        }
        (out, problems)
    }

    /// The demand now: only pods the scheduler marked Unschedulable are
    /// pending.
    pub fn snapshot(&self, options: &Options) -> Translation {
        translate_live(&self.manifests(), options)
    }
}

/// Translates objects read from a live cluster: only pods the scheduler
/// marked Unschedulable are pending (in files, a pod with no status is).
pub fn translate_live(manifests: &Manifests, options: &Options) -> Translation {
    let mut options = options.clone();
    options.pending_without_status = false;
    translate(manifests, &options)
}
