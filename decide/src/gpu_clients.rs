//! The GPU Operator's operands paused around a repartition through the
//! agent, as mig-manager pauses them around its own (NVIDIA/mig-parted
//! `pkg/mig/reconfigure/reconfigure.go`: `shutdownKubernetesGPUClients`,
//! `waitForPodsToBeDeleted`, `restartKubernetesGPUClients`):
//!
//! 1. each `nvidia.com/gpu.deploy.<operand>` label of the Node that is not
//!    `false` is set to `paused-for-mig-change` (the operator's
//!    DaemonSets select nodes on `…=true`, so their pods there go);
//! 2. the command is handed to the agent only once no operand pod runs on
//!    the node (`app=nvidia-device-plugin-daemonset`,
//!    `gpu-feature-discovery`, `nvidia-dcgm-exporter`, `nvidia-dcgm`);
//! 3. when the command has ended (done, refused, failed or timed out),
//!    every label showing `paused-for-mig-change` is set back to `true`;
//!    the device plugin and GFD start again and publish the new MIG
//!    devices, which is when the work counts as placed.
//!
//! A Node with none of these labels (no GPU Operator: a device plugin
//! installed on its own) is repartitioned at once, as before. Step 3 needs
//! no memory: in agent mode nothing but Accord pauses these labels, so a
//! node with no command in flight that shows one paused (an accordd
//! restarted in between, say) is restored. Pure, like the rest of *decide*.

use std::collections::BTreeMap;

use accord::demand::BoundPod;

/// The operands' deploy labels mig-manager pauses (its `*DeployLabel`).
pub const DEPLOY_LABELS: [&str; 5] = [
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.nvsm",
];

/// The value that pauses one (mig-manager's `maybeSetPaused`).
pub const PAUSED: &str = "paused-for-mig-change";

/// The `app` label values of the operand pods mig-manager waits to be
/// gone (`waitForPodsToBeDeleted`).
pub const CLIENT_APPS: [&str; 4] = [
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "nvidia-dcgm",
];

/// The deploy labels to set to [`PAUSED`] on a Node with `labels`: those
/// it has, not `false`, not paused yet.
pub fn to_pause(labels: &BTreeMap<String, String>) -> Vec<(String, String)> {
    DEPLOY_LABELS
        .iter()
        .filter(|k| labels.get(**k).is_some_and(|v| v != "false" && v != PAUSED))
        .map(|k| ((*k).to_owned(), PAUSED.to_owned()))
        .collect()
}

/// Whether the Node has any operand to pause (or paused).
pub fn deployed(labels: &BTreeMap<String, String>) -> bool {
    DEPLOY_LABELS
        .iter()
        .any(|k| labels.get(*k).is_some_and(|v| v != "false"))
}

/// The deploy labels to set back to `true` (mig-manager's `maybeSetTrue`):
/// those showing [`PAUSED`].
pub fn to_restore(labels: &BTreeMap<String, String>) -> Vec<(String, String)> {
    DEPLOY_LABELS
        .iter()
        .filter(|k| labels.get(**k).is_some_and(|v| v == PAUSED))
        .map(|k| ((*k).to_owned(), "true".to_owned()))
        .collect()
}

/// The operand pods still bound to `node`, by name.
pub fn running<'a>(bound: &'a [BoundPod], node: &str) -> Vec<&'a str> {
    bound
        .iter()
        .filter(|p| p.node == node)
        .filter(|p| {
            p.labels
                .get("app")
                .is_some_and(|a| CLIENT_APPS.contains(&a.as_str()))
        })
        .map(|p| p.name.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn false_stays_false_and_paused_comes_back_true() {
        let l = labels(&[
            ("nvidia.com/gpu.deploy.device-plugin", "true"),
            ("nvidia.com/gpu.deploy.dcgm", "false"),
            ("nvidia.com/gpu.deploy.gpu-feature-discovery", PAUSED),
        ]);
        assert!(deployed(&l));
        assert_eq!(
            to_pause(&l),
            [(
                "nvidia.com/gpu.deploy.device-plugin".to_owned(),
                PAUSED.to_owned()
            )]
        );
        assert_eq!(
            to_restore(&l),
            [(
                "nvidia.com/gpu.deploy.gpu-feature-discovery".to_owned(),
                "true".to_owned()
            )]
        );
        assert!(!deployed(&labels(&[(
            "nvidia.com/gpu.deploy.dcgm",
            "false"
        )])));
    }
}
