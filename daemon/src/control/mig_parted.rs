//! *Effect* for `gpu-operator` MIG mode: mig-manager's real interface,
//! the mig-parted ConfigMap the ClusterPolicy names
//! (`[control] mig_parted_configmap`, default
//! `gpu-operator/default-mig-parted-config`), key `config.yaml`: every
//! configuration accordd names is added there (NVIDIA's and an admin's
//! kept) before any Node label names it; mig-manager applies the
//! configuration the label names from it when the label changes (NVIDIA's
//! "GPU Operator with MIG" documentation: a custom configuration is a
//! ConfigMap with key `config.yaml` named in `migManager.config.name`).

use accord_api::mig_parted::DeviceConfig;
#[cfg(test)]
use accord_api::mig_parted::MigPartedFile;

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
        None => Value::Mapping(Mapping::new()),
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
        let parsed: MigPartedFile = serde_yaml_ng::from_str(
            &merged(None, &[("accord-a".into(), a.clone())])
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(parsed.mig_configs["accord-a"], a);
        // Already there: nothing to write.
        assert_eq!(
            merged(Some(&two), &[("accord-b".into(), b.clone())]).unwrap(),
            None
        );
        // What it cannot read it leaves alone.
        assert!(merged(Some("not: [yaml"), &[("accord-c".into(), b.clone())]).is_err());
        assert!(merged(Some("- a list"), &[("accord-c".into(), b)]).is_err());
        assert!(ConfigMapRef::parse("gpu-operator/default-mig-parted-config").is_ok());
        for bad in ["nope", "a/B", "a.b/c", "/c", "a/"] {
            assert!(ConfigMapRef::parse(bad).is_err(), "{bad}");
        }
    }
}
