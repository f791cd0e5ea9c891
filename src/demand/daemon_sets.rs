//! DaemonSets: the pods a node runs because it is up.

use serde::{Deserialize, Serialize};

use super::PodSpec;

/// A DaemonSet's pod template, with the tolerations its controller adds
/// to every daemon pod (pkg/controller/daemon/util/daemonset_util.go,
/// `AddOrUpdateDaemonPodTolerations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSetPods {
    pub namespace: String,
    pub name: String,
    pub pod: PodSpec,
}

impl DaemonSetPods {
    /// `namespace/name`, as bound pods name their DaemonSet.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
