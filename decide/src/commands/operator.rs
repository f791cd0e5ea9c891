//! `gpu-operator` mode's handshake with mig-manager (see the parent's
//! docs): the configuration into the ConfigMap under its names, the label
//! once mig-manager can read it, `nvidia.com/mig.config.state` followed,
//! and a failure retried under the next name.

use accord::fleet::Node;
use accord_api::agent::{CommandRecord, CommandResult, MigTarget};
use accord_api::mig_parted::{self, DeviceConfig};
use tracing::{info, warn};

use super::{kind, Absorbed, CommandEffects, Commands, STATE_FRESH_S};
use crate::{node_ref, Event, MigManager, Snapshot};

/// One `gpu-operator` command's handshake with mig-manager.
#[derive(Debug, Clone)]
pub(super) struct OperatorHandshake {
    pub(super) generation: u64,
    /// Which of the configuration's names the label tries now.
    attempt: u32,
    /// When the writer first saw every name in the ConfigMap.
    written_at: Option<u64>,
    /// When the Node first showed this attempt's label.
    shown_at: Option<u64>,
    /// mig-manager was seen working (`pending`, `rebooting`) on it since.
    working: bool,
}

/// The `n`th name of configuration `first` (mig-manager applies a
/// configuration only when the label changes, so a retry names the same
/// content differently).
pub fn config_alias(first: &str, n: u32) -> String {
    if n == 0 {
        first.to_owned()
    } else {
        format!("{first}-r{n}")
    }
}

impl Commands {
    /// `gpu-operator`: the configuration into the ConfigMap, the label
    /// once mig-manager can read it there; on `success` hand the agent its
    /// rediscovery; on `failed` the next name, or close the command.
    pub(super) fn follow_operator(
        &mut self,
        rec: &CommandRecord,
        snap: &Snapshot,
        model: &Node,
        mig_manager: MigManager,
        effects: &mut CommandEffects,
        out: &mut Absorbed,
    ) {
        let node = &rec.node;
        let Some(first) = &rec.mig_config else {
            return;
        };
        let labels = snap.views.get(node).map(|v| &v.labels);
        let shown = labels.and_then(|l| l.get(mig_parted::CONFIG_LABEL));
        let tries = mig_manager.label_tries.max(1);
        let names: Vec<String> = (0..tries).map(|n| config_alias(first, n)).collect();
        let now = snap.now;
        // A new command starts from the first name the Node does not show
        // (the same layout asked again, after a reboot lost it, would not
        // change the label otherwise).
        let start = OperatorHandshake {
            generation: rec.generation,
            attempt: names.iter().position(|n| Some(n) != shown).unwrap_or(0) as u32,
            written_at: None,
            shown_at: None,
            working: false,
        };
        let h = self.operator.entry(node.clone()).or_insert(start.clone());
        if h.generation != rec.generation {
            *h = start;
        }
        // 1. Every name in the ConfigMap (written each round until the
        //    writer has seen them there).
        if !names.iter().all(|n| snap.mig_configs_written.contains(n)) {
            h.written_at = None;
            let entries = self
                .configs
                .get(first)
                .cloned()
                .unwrap_or_else(|| operator_config(model, &rec.targets));
            effects
                .mig_configs
                .extend(names.iter().map(|n| (n.clone(), entries.clone())));
            return;
        }
        let written = *h.written_at.get_or_insert(now);
        // 2. The kubelet has synced mig-manager's volume.
        if now < written.saturating_add(mig_manager.sync_s) {
            return;
        }
        // 3. The label names this attempt's name.
        let name = &names[(h.attempt as usize).min(names.len() - 1)];
        if shown != Some(name) {
            h.shown_at = None;
            h.working = false;
            if self.relabel_due(rec, now) {
                effects.labels.push((
                    node.clone(),
                    mig_parted::CONFIG_LABEL.to_owned(),
                    name.clone(),
                ));
            }
            return;
        }
        // 4. mig-manager's state is about it once it was seen working, or
        //    [`STATE_FRESH_S`] after the label first showed (not a
        //    leftover from an earlier one).
        let shown_at = *h.shown_at.get_or_insert(now);
        let state = labels
            .and_then(|l| l.get(mig_parted::STATE_LABEL))
            .map(String::as_str);
        if matches!(state, Some("pending" | "rebooting")) {
            h.working = true;
        }
        let fresh = h.working || now >= shown_at + STATE_FRESH_S;
        match state {
            Some("success") if fresh && !rec.deliver => {
                info!(node = %node, config = %name, "mig-manager applied the configuration; asking the agent to rediscover");
                effects.release.push((node.clone(), rec.generation));
            }
            Some("failed") if fresh && h.attempt + 1 < tries => {
                effects
                    .mig_manager_failed
                    .push((node.clone(), name.clone()));
                h.attempt += 1;
                h.shown_at = None;
                h.working = false;
                let next = &names[h.attempt as usize];
                let note = format!(
                    "mig-manager reports {}=failed for configuration {name} (its reason is in the log of the nvidia-mig-manager pod on {node}); trying again under the label {}={next}",
                    mig_parted::STATE_LABEL,
                    mig_parted::CONFIG_LABEL
                );
                warn!(node = %node, command = rec.generation, "{note}");
                out.metrics.push((kind(rec.via), "retried"));
                out.events.push(Event {
                    regarding: node_ref(node),
                    reason: "MigRepartitionRetried",
                    action: "Repartition",
                    note,
                    warning: true,
                });
                self.labelled.remove(node);
                effects.labels.push((
                    node.clone(),
                    mig_parted::CONFIG_LABEL.to_owned(),
                    next.clone(),
                ));
                self.labelled.insert(node.clone(), (rec.generation, now));
            }
            Some("failed") if fresh => {
                effects
                    .mig_manager_failed
                    .push((node.clone(), name.clone()));
                let reason = format!(
                    "mig-manager reports {}=failed for configuration {name}, after {tries} labels (its reason is in the log of the nvidia-mig-manager pod on {node})",
                    mig_parted::STATE_LABEL
                );
                effects.close.push((
                    node.clone(),
                    rec.generation,
                    CommandResult::Failed { reason },
                ));
            }
            _ => {}
        }
    }
}

/// The whole node's mig-parted configuration: every MIG-capable GPU with
/// its target layout, or the layout it has now.
pub(super) fn operator_config(node: &Node, targets: &[MigTarget]) -> Vec<DeviceConfig> {
    let mut out = Vec::new();
    for g in &node.gpus {
        let Some(mig) = g.mig.as_deref().filter(|m| m.capable) else {
            continue;
        };
        let entry = match targets.iter().find(|t| t.index == g.nvml_index) {
            Some(t) => mig_parted::device(g.nvml_index, Some(&t.layout)),
            None if mig.current_mode == accord::hardware::MigMode::Enabled => {
                let layout = mig.layout().unwrap_or_else(|| {
                    mig.gpu_instances
                        .iter()
                        .map(|i| format!("{}@0", i.profile))
                        .collect()
                });
                mig_parted::device(g.nvml_index, Some(&layout))
            }
            None => mig_parted::device(g.nvml_index, None),
        };
        out.push(entry);
    }
    out
}
