//! *Effect* for `gpu-operator` MIG mode: mig-manager's real interface,
//! a custom mig-parted ConfigMap the ClusterPolicy names in
//! `spec.migManager.config.name` (`[control] mig_parted_configmap`,
//! default `gpu-operator/accord-mig-parted-config`), key `config.yaml`:
//! every configuration accordd names is added there (NVIDIA's and an
//! admin's kept) before any Node label names it; mig-manager applies the
//! configuration the label names from it when the label changes.
//!
//! Not the operator's `default-mig-parted-config`: the operator owns that
//! one (gpu-operator `controllers/object_controls.go`, `createConfigMap`)
//! and, with no custom ConfigMap named, mounts it only as
//! `config-default.yaml` (`TransformMigManager`), which mig-manager v26
//! reads only when it cannot generate a configuration from the hardware
//! (mig-parted `cmd/nvidia-mig-manager/main.go`, `setupMigConfig`).
//! [`check_cluster_policy`] says at start when the ClusterPolicy does not
//! name accordd's ConfigMap.

use accord_api::mig_parted::DeviceConfig;

/// Where mig-manager reads its configurations: the mig-parted ConfigMap
/// the GPU Operator's ClusterPolicy names (`spec.migManager.config.name`),
/// its key `config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigMapRef {
    pub namespace: String,
    pub name: String,
}

/// The key mig-manager reads (its `--config-file`, mounted from the
/// ConfigMap).
pub const CONFIGMAP_KEY: &str = "config.yaml";

impl ConfigMapRef {
    /// `NAMESPACE/NAME`, each a DNS label (RFC 1123) or subdomain as
    /// Kubernetes names them.
    pub fn parse(s: &str) -> Result<ConfigMapRef, String> {
        let (ns, name) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: not NAMESPACE/NAME"))?;
        for (what, v) in [("namespace", ns), ("name", name)] {
            accord_api::names::validate_node_name(v).map_err(|e| format!("{s:?}: {what}: {e}"))?;
        }
        if ns.contains('.') || ns.len() > 63 {
            return Err(format!("{s:?}: namespace: not a DNS label"));
        }
        Ok(ConfigMapRef {
            namespace: ns.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// NVIDIA's stock configurations every mig-parted configs file of the
/// operator's has (gpu-operator `assets/state-mig-manager/0400_configmap.yaml`
/// starts with these two).
const STOCK: &str = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n";

/// The ClusterPolicy's name in the ConfigMap the operator creates.
pub const OPERATOR_DEFAULT_CONFIGMAP: &str = "default-mig-parted-config";

/// Reads the GPU Operator's ClusterPolicies (`nvidia.com/v1`) and says,
/// once at start, what keeps mig-manager from reading `cm`: no
/// ClusterPolicy, MIG manager disabled, or `spec.migManager.config.name`
/// naming another ConfigMap. Returns what it said (empty: all is well).
pub async fn check_cluster_policy(kube: &kube::Client, cm: &ConfigMapRef) -> Vec<String> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nvidia.com", "v1", "ClusterPolicy"),
        "clusterpolicies",
    );
    let api: Api<DynamicObject> = Api::all_with(kube.clone(), &resource);
    let policies = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            return vec![format!(
                "cannot read the GPU Operator's ClusterPolicy (nvidia.com/v1 clusterpolicies): {e}; make sure its spec.migManager.config.name is {:?}, or mig-manager never reads the configurations accordd writes",
                cm.name
            )]
        }
    };
    if policies.is_empty() {
        return vec![format!(
            "no GPU Operator ClusterPolicy (nvidia.com/v1) exists; `gpu-operator` MIG mode needs one whose spec.migManager.config.name is {:?}",
            cm.name
        )];
    }
    policies
        .iter()
        .filter_map(|p| {
            cluster_policy_problem(&p.data, p.metadata.name.as_deref().unwrap_or("?"), cm)
        })
        .collect()
}

/// What keeps the ClusterPolicy `spec` (its object's data) from making
/// mig-manager read `cm`.
pub fn cluster_policy_problem(
    data: &serde_json::Value,
    name: &str,
    cm: &ConfigMapRef,
) -> Option<String> {
    let mm = &data["spec"]["migManager"];
    if mm["enabled"] == serde_json::Value::Bool(false) {
        return Some(format!(
            "ClusterPolicy {name}: spec.migManager.enabled is false; no mig-manager runs to apply the configurations accordd names"
        ));
    }
    match mm["config"]["name"].as_str() {
        Some(n) if n == cm.name && n != OPERATOR_DEFAULT_CONFIGMAP => None,
        Some(n) if n == OPERATOR_DEFAULT_CONFIGMAP => Some(format!(
            "ClusterPolicy {name}: spec.migManager.config.name is the operator's own {n:?}, which it rewrites on every reconcile; name a ConfigMap of accordd's ({:?}, [control] mig_parted_configmap) there",
            cm.name
        )),
        other => Some(format!(
            "ClusterPolicy {name}: spec.migManager.config.name is {}, not {:?} ([control] mig_parted_configmap): mig-manager reads its own configurations and never the ones accordd writes; set it (kubectl patch clusterpolicies.nvidia.com {name} --type merge -p '{{\"spec\":{{\"migManager\":{{\"config\":{{\"name\":\"{}\",\"default\":\"all-disabled\"}}}}}}}}')",
            other.map_or_else(|| "unset".to_owned(), |n| format!("{n:?}")),
            cm.name,
            cm.name
        )),
    }
}

/// The configuration names a configs file holds (none when it is not
/// one).
pub fn config_names(text: Option<&str>) -> std::collections::BTreeSet<String> {
    text.and_then(|t| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(t).ok())
        .and_then(|doc| {
            doc.get("mig-configs")?.as_mapping().map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// `text` (the ConfigMap's `config.yaml` now; `None`: none yet) with
/// `configs` added, every other configuration (NVIDIA's, an admin's) and
/// key kept; `Ok(None)` when it holds them already. YAML comments are not
/// kept. A text that is not a mig-parted configs file is left alone (an
/// error): accordd does not overwrite what it cannot read.
pub fn merged(
    text: Option<&str>,
    configs: &[(String, Vec<DeviceConfig>)],
) -> Result<Option<String>, String> {
    use serde_yaml_ng::{Mapping, Value};
    let mut doc = match text {
        // A new ConfigMap also holds NVIDIA's stock configurations: the
        // operator labels MIG-capable nodes with `migManager.config.default`
        // (`all-disabled`), which mig-manager must find in it.
        None => serde_yaml_ng::from_str::<Value>(STOCK).map_err(|e| e.to_string())?,
        Some(t) if t.trim().is_empty() => Value::Mapping(Mapping::new()),
        Some(t) => serde_yaml_ng::from_str::<Value>(t).map_err(|e| format!("not YAML: {e}"))?,
    };
    let Value::Mapping(root) = &mut doc else {
        return Err("not a mig-parted configs file (no mapping at the top)".to_owned());
    };
    let before = root.clone();
    root.entry(Value::from("version"))
        .or_insert_with(|| Value::from("v1"));
    let all = root
        .entry(Value::from("mig-configs"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(all) = all else {
        return Err("mig-configs: not a mapping".to_owned());
    };
    for (name, entries) in configs {
        let v = serde_yaml_ng::to_value(entries).map_err(|e| e.to_string())?;
        all.insert(Value::from(name.as_str()), v);
    }
    if *root == before && text.is_some() {
        return Ok(None);
    }
    let mut out = String::from(
        "# mig-manager's configurations; accordd adds the accord-<hash> ones it\n\
         # names in the Node label nvidia.com/mig.config.\n",
    );
    out.push_str(&serde_yaml_ng::to_string(&doc).map_err(|e| e.to_string())?);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use accord_api::mig_parted::device;

    use super::*;

    #[test]
    fn configurations_accumulate_and_others_are_kept() {
        let a = vec![device(0, Some(&["1g.10gb@0".to_owned()]))];
        let b = vec![device(1, None)];
        // NVIDIA's default configurations are there already.
        let nvidia = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n";
        let one = merged(Some(nvidia), &[("accord-a".into(), a.clone())])
            .unwrap()
            .unwrap();
        let two = merged(Some(&one), &[("accord-b".into(), b.clone())])
            .unwrap()
            .unwrap();
        assert!(two.contains("1g.10gb: 1"), "{two}");
        let back: serde_yaml_ng::Value = serde_yaml_ng::from_str(&two).unwrap();
        assert_eq!(back["mig-configs"]["all-disabled"][0]["devices"], "all");
        // A new ConfigMap: NVIDIA's stock configurations (the operator's
        // default label names `all-disabled`) and Accord's.
        let new: serde_yaml_ng::Value = serde_yaml_ng::from_str(
            &merged(None, &[("accord-a".into(), a.clone())])
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        let accord: Vec<accord_api::mig_parted::DeviceConfig> =
            serde_yaml_ng::from_value(new["mig-configs"]["accord-a"].clone()).unwrap();
        assert_eq!(accord, a);
        assert_eq!(new["mig-configs"]["all-disabled"][0]["mig-enabled"], false);
        assert_eq!(new["mig-configs"]["all-enabled"][0]["devices"], "all");
        // Already there: nothing to write.
        assert_eq!(
            merged(Some(&two), &[("accord-b".into(), b.clone())]).unwrap(),
            None
        );
        // What it cannot read it leaves alone.
        assert!(merged(Some("not: [yaml"), &[("accord-c".into(), b.clone())]).is_err());
        assert!(merged(Some("- a list"), &[("accord-c".into(), b)]).is_err());
        assert_eq!(
            config_names(Some(&two)).into_iter().collect::<Vec<_>>(),
            ["accord-a", "accord-b", "all-disabled"]
        );
        assert!(config_names(Some("not: [yaml")).is_empty());
        assert!(config_names(None).is_empty());
        assert!(ConfigMapRef::parse("gpu-operator/default-mig-parted-config").is_ok());
        for bad in ["nope", "a/B", "a.b/c", "/c", "a/"] {
            assert!(ConfigMapRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_cluster_policy_must_name_accordds_configmap() {
        let cm = ConfigMapRef::parse("gpu-operator/accord-mig-parted-config").unwrap();
        let policy = |mm: serde_json::Value| serde_json::json!({"spec": {"migManager": mm}});
        assert_eq!(
            cluster_policy_problem(
                &policy(serde_json::json!({"config": {"name": "accord-mig-parted-config"}})),
                "cluster-policy",
                &cm
            ),
            None
        );
        // v26's defaults: no custom ConfigMap named.
        let unset =
            cluster_policy_problem(&policy(serde_json::json!({})), "cluster-policy", &cm).unwrap();
        assert!(
            unset.contains("is unset")
                && unset.contains("kubectl patch clusterpolicies.nvidia.com cluster-policy"),
            "{unset}"
        );
        let own = cluster_policy_problem(
            &policy(serde_json::json!({"config": {"name": "default-mig-parted-config"}})),
            "cluster-policy",
            &cm,
        )
        .unwrap();
        assert!(own.contains("rewrites"), "{own}");
        let off = cluster_policy_problem(&policy(serde_json::json!({"enabled": false})), "p", &cm)
            .unwrap();
        assert!(off.contains("enabled is false"), "{off}");
        // accordd's own name set to the operator's: still said.
        let cm = ConfigMapRef::parse("gpu-operator/default-mig-parted-config").unwrap();
        assert!(cluster_policy_problem(
            &policy(serde_json::json!({"config": {"name": "default-mig-parted-config"}})),
            "p",
            &cm
        )
        .is_some());
    }
}
