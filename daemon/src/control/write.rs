//! *Effect*'s Kubernetes half: events and ProvisioningRequest conditions
//! are written by one background task, in the order rounds decided them,
//! so a slow API server delays neither a Reset nor the next round. A
//! failed write is said once (per error) and not retried: the next round
//! decides a missing condition again, and events are best effort.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::warn;

use accord::fleet::TopologyConfig;
use accord::truth::Publication;

use super::decide::{ConditionWrite, Event};

/// What one round writes.
#[derive(Debug, Default)]
pub struct Writes {
    pub events: Vec<Event>,
    pub conditions: Vec<ConditionWrite>,
    /// CapacityBuffer statuses.
    pub buffers: Vec<accord_decide::buffers::BufferStatusWrite>,
    /// Accord's labels and taints, per Node.
    pub nodes: Vec<(String, Publication)>,
    /// Single labels set on request (node, key, value): the GPU
    /// Operator's `nvidia.com/mig.config`.
    pub labels: Vec<(String, String, String)>,
    /// mig-parted configurations the labels name, put in mig-manager's
    /// ConfigMap before any label is set (none is when that fails).
    pub mig_configs: Option<(super::mig_parted::ConfigMapRef, MigConfigs)>,
    /// What Nodes registered again had before Accord deleted them, put
    /// back before Accord's own keys are published (which may lift the
    /// starting taint).
    pub restores: Vec<(String, accord::truth::KeptNode)>,
    /// Dark machines' Nodes to delete (their copies already kept).
    pub deletes: Vec<accord_decide::dark::NodeDelete>,
    /// (namespace, name): the GPU Operator's validator pods, deleted
    /// around an agent's repartition (after this round's labels).
    pub pod_deletes: Vec<(String, String)>,
    /// (node, configuration): mig-manager failed there; its reason is read
    /// from its log and said in an event.
    pub mig_manager_failed: Vec<(String, String)>,
    /// Pods to evict through the Eviction API (borrowers of reserved
    /// nodes their owner takes back).
    pub evictions: Vec<accord_decide::Eviction>,
}

/// mig-parted configurations by name.
pub type MigConfigs = Vec<(String, Vec<accord_api::mig_parted::DeviceConfig>)>;

impl Writes {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.conditions.is_empty()
            && self.buffers.is_empty()
            && self.nodes.is_empty()
            && self.labels.is_empty()
            && self.mig_configs.is_none()
            && self.restores.is_empty()
            && self.deletes.is_empty()
            && self.pod_deletes.is_empty()
            && self.mig_manager_failed.is_empty()
            && self.evictions.is_empty()
    }
}

/// Rounds' writes queued for the writer; a full queue holds the loop
/// (back-pressure rather than dropping what was decided).
const QUEUE: usize = 256;

/// The handle the loop sends through, and the writer task.
#[derive(Debug)]
pub struct KubeWriter {
    tx: mpsc::Sender<Writes>,
    task: tokio::task::JoinHandle<()>,
}

impl KubeWriter {
    /// `topology` says which label keys Accord owns on Nodes.
    /// Each write is made only while `leadership` allows it (a replica
    /// that stopped leading drops what is queued).
    pub fn spawn(
        kube: kube::Client,
        topology: TopologyConfig,
        leadership: crate::ha::Leadership,
        mig_configs_written: std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>,
    ) -> KubeWriter {
        let (tx, mut rx) = mpsc::channel::<Writes>(QUEUE);
        let task = tokio::spawn(async move {
            let mut said = BTreeSet::new();
            while let Some(w) = rx.recv().await {
                write(
                    &kube,
                    &topology,
                    w,
                    &mut said,
                    &leadership,
                    &mig_configs_written,
                )
                .await;
            }
        });
        KubeWriter { tx, task }
    }

    /// Queues one round's writes.
    pub async fn send(&self, w: Writes) {
        if !w.is_empty() && self.tx.send(w).await.is_err() {
            warn!("the Kubernetes writer has stopped; this round's events and conditions are not written");
        }
    }

    /// Writes what is queued, for up to `grace`; then gives up on the rest.
    pub async fn finish(self, grace: Duration) {
        let KubeWriter { tx, mut task } = self;
        drop(tx);
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            warn!(
                grace_s = grace.as_secs(),
                "Kubernetes writes still queued at shutdown are dropped"
            );
            task.abort();
        }
    }
}

async fn write(
    kube: &kube::Client,
    topology: &TopologyConfig,
    w: Writes,
    said: &mut BTreeSet<String>,
    leadership: &crate::ha::Leadership,
    mig_configs_written: &std::sync::Mutex<BTreeSet<String>>,
) {
    // Asked before each write: a replica paused mid-batch finds its term
    // over on resuming and writes nothing more.
    let may_write = || match leadership.may_act() {
        Ok(_) => true,
        Err(why) => {
            tracing::debug!(%why, "Kubernetes write dropped");
            false
        }
    };
    let mut warn_once = |key: String, line: String| {
        if said.insert(key) {
            warn!("{line}");
        }
    };
    // What a Node registered again had, then Accord's labels and taints:
    // they decide where kube-scheduler puts pods.
    for (node, kept) in &w.restores {
        if !may_write() {
            return;
        }
        match accord_kube::dark_nodes::restore_node(kube, node, kept).await {
            Ok(outcome) => {
                tracing::info!(node = %node, ?outcome, "labels, taints and annotations the Node had before Accord deleted it put back")
            }
            Err(err) => warn_once(
                format!("restore {node} {err}"),
                format!("Node {node}: cannot put back what it had before Accord deleted it (tried again): {err}"),
            ),
        }
    }
    for (node, p) in &w.nodes {
        if !may_write() {
            return;
        }
        let owns_label = |k: &str| accord::fleet::owns_label(topology, k);
        match accord_kube::write::publish_node(
            kube,
            node,
            p,
            &owns_label,
            &accord::fleet::owns_taint,
        )
        .await
        {
            Ok(outcome) => {
                tracing::debug!(node = %node, ?outcome, "Node labels and taints published")
            }
            // A conflict (the Node changed since it was read) or a failed
            // write: the next round sees the Node as it is and decides again.
            Err(err) => warn_once(
                format!("node {node} {err}"),
                format!("Node {node}: cannot publish Accord's labels and taints: {err}"),
            ),
        }
    }
    for d in &w.deletes {
        if !may_write() {
            return;
        }
        match accord_kube::dark_nodes::delete_node(kube, &d.node, &d.uid, &d.resource_version).await
        {
            Ok(outcome) => {
                tracing::info!(node = %d.node, uid = %d.uid, ?outcome, "Node of a machine Accord powered off deleted")
            }
            // Changed since it was seen (409), or refused: the next round
            // sees the Node as it is and decides again.
            Err(err) => warn_once(
                format!("delete {} {err}", d.node),
                format!(
                    "Node {}: cannot delete it (the machine is off): {err}",
                    d.node
                ),
            ),
        }
    }
    let mut labels_ok = true;
    if let Some((cm, configs)) = &w.mig_configs {
        if !may_write() {
            return;
        }
        // The configurations the ConfigMap holds once written (or already
        // held): what *decide* waits for before it sets a label.
        let held = std::sync::Mutex::new(BTreeSet::new());
        let update = |text: Option<&str>| {
            let merged = super::mig_parted::merged(text, configs)?;
            if let Ok(mut h) = held.lock() {
                *h = super::mig_parted::config_names(merged.as_deref().or(text));
            }
            Ok(merged)
        };
        match accord_kube::write::update_configmap_key(
            kube,
            &cm.namespace,
            &cm.name,
            super::mig_parted::CONFIGMAP_KEY,
            &update,
        )
        .await
        {
            Ok(outcome) => {
                if let (Ok(mut w), Ok(h)) = (mig_configs_written.lock(), held.lock()) {
                    *w = h.clone();
                }
                tracing::info!(configmap = %format!("{}/{}", cm.namespace, cm.name), configs = configs.len(), ?outcome, "mig-parted configurations in mig-manager's ConfigMap")
            }
            // Without them mig-manager cannot apply the label: none is
            // set; the commands time out and are planned again.
            Err(err) => {
                labels_ok = false;
                warn_once(
                    format!("mig-parted {err}"),
                    format!("cannot write the mig-parted configurations, so no nvidia.com/mig.config label is set: {err}"),
                );
            }
        }
    }
    for (node, key, value) in w.labels.iter().filter(|_| labels_ok) {
        if !may_write() {
            return;
        }
        match accord_kube::write::set_node_label(kube, node, key, value).await {
            Ok(outcome) => {
                tracing::info!(node = %node, label = %key, value = %value, ?outcome, "Node label set")
            }
            // The next round sees the label missing and sets it again.
            Err(err) => warn_once(
                format!("label {node} {key} {err}"),
                format!("Node {node}: cannot set label {key}={value}: {err}"),
            ),
        }
    }
    if !pod_writes(
        kube,
        &w.pod_deletes,
        &w.evictions,
        &may_write,
        &mut warn_once,
    )
    .await
    {
        return;
    }
    let mut events = w.events;
    for (node, config) in &w.mig_manager_failed {
        events.push(mig_manager_failure(kube, node, config).await);
    }
    for e in events {
        if !may_write() {
            return;
        }
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(e.regarding.api_version.clone()),
            kind: Some(e.regarding.kind.clone()),
            namespace: Some(e.regarding.namespace.clone()),
            name: Some(e.regarding.name.clone()),
            ..Default::default()
        };
        if let Err(err) = accord_kube::write::record_event(
            kube, regarding, e.reason, e.action, &e.note, e.warning,
        )
        .await
        {
            warn_once(
                format!("event {err}"),
                format!("cannot record a Kubernetes event: {err}"),
            );
        }
    }
    for b in w.buffers {
        if !may_write() {
            return;
        }
        if let Err(err) = accord_kube::buffer_status::set_buffer_status(
            kube,
            &b.buffer.api_version,
            &b.buffer.namespace,
            &b.buffer.name,
            &b.status,
        )
        .await
        {
            let key = b.buffer.key();
            warn_once(
                format!("buffer {key} {err}"),
                format!("CapacityBuffer {key}: cannot write its status: {err}"),
            );
        }
    }
    for w in w.conditions {
        if !may_write() {
            return;
        }
        if let Err(err) = accord_kube::write::set_provisioning_condition(
            kube,
            &w.request.api_version,
            &w.request.namespace,
            &w.request.name,
            &w.condition,
        )
        .await
        {
            let key = w.request.key();
            warn_once(
                format!("pr {key} {err}"),
                format!(
                    "ProvisioningRequest {key}: cannot set {}: {err}",
                    w.condition.type_
                ),
            );
        }
    }
}

/// The event saying why mig-manager failed `config` on `node`: the reason
/// its log gives ([`accord_kube::write::mig_manager_error`]), or why that
/// could not be read. Logged too.
/// Pods deleted (validator pods around a repartition) and evicted
/// (borrowers of reserved nodes taken back); false when leadership was
/// lost on the way (nothing more is written).
async fn pod_writes(
    kube: &kube::Client,
    pod_deletes: &[(String, String)],
    evictions: &[accord_decide::Eviction],
    may_write: &impl Fn() -> bool,
    warn_once: &mut impl FnMut(String, String),
) -> bool {
    for (ns, name) in pod_deletes {
        if !may_write() {
            return false;
        }
        match accord_kube::write::delete_pod(kube, ns, name).await {
            Ok(outcome) => {
                tracing::info!(pod = %format!("{ns}/{name}"), ?outcome, "validator pod deleted (its DaemonSet starts it again)")
            }
            // Best effort, as mig-manager's own: the repartition goes on.
            Err(err) => warn_once(
                format!("delete pod {ns}/{name} {err}"),
                format!("Pod {ns}/{name}: cannot delete it: {err}"),
            ),
        }
    }
    for e in evictions {
        if !may_write() {
            return false;
        }
        let pod = format!("{}/{}", e.namespace, e.pod);
        match accord_kube::write::evict_pod(kube, &e.namespace, &e.pod).await {
            Ok(accord_kube::write::EvictOutcome::Refused(why)) => {
                // A budget's answer: the decider asks again.
                tracing::info!(pod = %pod, node = %e.node, reason = %why, "eviction refused for now")
            }
            Ok(outcome) => {
                tracing::info!(pod = %pod, node = %e.node, ?outcome, why = %e.reason, "pod evicted")
            }
            Err(err) => warn_once(
                format!("evict {pod} {err}"),
                format!("Pod {pod}: cannot evict it: {err}"),
            ),
        }
    }
    true
}

async fn mig_manager_failure(kube: &kube::Client, node: &str, config: &str) -> Event {
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        accord_kube::write::mig_manager_error(kube, node),
    )
    .await;
    let why = match read {
        Ok(Ok(Some(reason))) => reason,
        Ok(Ok(None)) => "no nvidia-mig-manager pod on the node, or no error in its log".to_owned(),
        Ok(Err(e)) => format!("its log could not be read: {e}"),
        Err(_) => "its log could not be read within 10 s".to_owned(),
    };
    warn!(node = %node, config = %config, reason = %why, "mig-manager failed");
    Event {
        regarding: accord::demand::ObjectRef::new("v1", "Node", "default", node),
        reason: "MigManagerFailed",
        action: "Repartition",
        note: format!("mig-manager failed configuration {config}: {why}"),
        warning: true,
    }
}
