//! The GPU Operator's operands paused around a repartition through the
//! agent, as mig-manager pauses them around its own (NVIDIA/mig-parted
//! v0.15 `pkg/mig/reconfigure/reconfigure.go`, `Run`):
//!
//! 1. each `nvidia.com/gpu.deploy.<operand>` label of the Node that is not
//!    `false` is set to `paused-for-mig-change` (`shutdownKubernetesGPUClients`;
//!    the operator's DaemonSets select nodes on `…=true`, so their pods
//!    there go): mig-manager's five, `gpu.deploy.client` where the Node
//!    has it (third-party GPU clients), and the operator's DRA operands
//!    (`gpu.deploy.dra-driver`, `dcgm-dra`, `dcgm-exporter-dra`,
//!    gpu-operator v26 `controllers/state_manager.go`), which mig-manager
//!    leaves running: the DRA driver publishes its ResourceSlices when it
//!    starts, so it must start again to show the new devices;
//! 2. the command is handed to the agent only once none of those pods
//!    runs on the node (`waitForPodsToBeDeleted`: the operand pods by
//!    their `app` label, and every DaemonSet pod selecting a paused label,
//!    as `waitForPodsWithNodeSelector` does for `gpu.deploy.client`), and
//!    the CUDA and plugin validator pods there are deleted (same
//!    function);
//! 3. when the command has ended (done, refused, failed or timed out),
//!    every label showing `paused-for-mig-change` is set back to `true`
//!    (`restartKubernetesGPUClients`) and the operator's validator pod
//!    there deleted (`restartValidatorPod`); the device plugin, GFD and
//!    the DRA driver start again and publish the new MIG devices, which is
//!    when the work counts as placed.
//!
//! A Node with none of these labels (no GPU Operator: a device plugin
//! installed on its own) is repartitioned at once, as before. Step 3 needs
//! no memory: in agent mode nothing but Accord pauses these labels, so a
//! node with no command in flight that shows one paused (an accordd
//! restarted in between, say) is restored. Pure, like the rest of *decide*.

use std::collections::BTreeMap;

use accord::demand::BoundPod;

/// The operands' deploy labels paused: mig-manager's `*DeployLabel`
/// (`gpu.deploy.client` among them, paused only where set, as it does),
/// then the operator's DRA operands.
pub const DEPLOY_LABELS: [&str; 9] = [
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.nvsm",
    "nvidia.com/gpu.deploy.client",
    "nvidia.com/gpu.deploy.dra-driver",
    "nvidia.com/gpu.deploy.dcgm-dra",
    "nvidia.com/gpu.deploy.dcgm-exporter-dra",
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

/// The validator pods deleted before the repartition (`app` labels,
/// `waitForPodsToBeDeleted`) and after it (`restartValidatorPod`).
pub const VALIDATORS_BEFORE: [&str; 2] =
    ["nvidia-cuda-validator", "nvidia-device-plugin-validator"];
pub const VALIDATORS_AFTER: [&str; 1] = ["nvidia-operator-validator"];

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

/// Whether pod `p` is on `node` with an `app` label among `apps`.
fn app_on(p: &BoundPod, node: &str, apps: &[&str]) -> bool {
    p.node == node
        && p.labels
            .get("app")
            .is_some_and(|a| apps.contains(&a.as_str()))
}

/// The operand and GPU-client pods still bound to `node`, by name: the
/// operands by `app`, and every DaemonSet pod selecting a deploy label.
pub fn running<'a>(bound: &'a [BoundPod], node: &str) -> Vec<&'a str> {
    bound
        .iter()
        .filter(|p| {
            app_on(p, node, &CLIENT_APPS)
                || (p.node == node
                    && p.node_selector_keys
                        .iter()
                        .any(|k| DEPLOY_LABELS.contains(&k.as_str())))
        })
        .map(|p| p.name.as_str())
        .collect()
}

/// The pods on `node` whose `app` label is one of `apps`, as
/// (namespace, name).
pub fn pods_of(bound: &[BoundPod], node: &str, apps: &[&str]) -> Vec<(String, String)> {
    bound
        .iter()
        .filter(|p| app_on(p, node, apps))
        .map(|p| (p.namespace.clone(), p.name.clone()))
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
