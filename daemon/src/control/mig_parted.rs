//! *Effect* for `gpu-operator` MIG mode: the mig-parted configs file
//! accordd keeps (`[control] mig_parted_config`), with every configuration
//! it has named, written before any Node label names one (mig-manager
//! reads the file, installed as its ConfigMap, when the label changes).
//! Written to a temporary file and renamed, so a reader never sees half
//! of it.

use std::path::Path;

use accord_api::mig_parted::{DeviceConfig, MigPartedFile};

#[derive(Debug, thiserror::Error)]
pub enum MigPartedError {
    #[error("mig-parted configs file {path}: cannot read")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("mig-parted configs file {path}: not one accordd wrote")]
    Parse {
        path: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("mig-parted configs file {path}: cannot write")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The file as YAML, with a note on where it goes.
pub fn render(file: &MigPartedFile) -> String {
    let mut out = String::from(
        "# Written by accordd: the MIG configurations it names in the Node label\n\
         # nvidia.com/mig.config. Install it as the GPU Operator's mig-parted\n\
         # ConfigMap (ClusterPolicy spec.migManager.config.name).\n",
    );
    out.push_str(&serde_yaml_ng::to_string(file).expect("configs serialize"));
    out
}

/// Adds `configs` to the file at `path` (created when missing), keeping
/// the configurations already there.
pub fn add(path: &Path, configs: &[(String, Vec<DeviceConfig>)]) -> Result<(), MigPartedError> {
    let shown = path.display().to_string();
    let mut file = match std::fs::read_to_string(path) {
        Ok(text) => serde_yaml_ng::from_str::<MigPartedFile>(&text).map_err(|source| {
            MigPartedError::Parse {
                path: shown.clone(),
                source,
            }
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => MigPartedFile::default(),
        Err(source) => {
            return Err(MigPartedError::Read {
                path: shown,
                source,
            })
        }
    };
    let before = file.clone();
    for (name, entries) in configs {
        file.mig_configs.insert(name.clone(), entries.clone());
    }
    if file == before && path.exists() {
        return Ok(());
    }
    let tmp = path.with_extension("tmp");
    let write = |source| MigPartedError::Write {
        path: shown.clone(),
        source,
    };
    std::fs::write(&tmp, render(&file)).map_err(write)?;
    std::fs::rename(&tmp, path).map_err(write)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use accord_api::mig_parted::device;

    use super::*;

    #[test]
    fn configurations_accumulate_and_the_file_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mig.yaml");
        let a = vec![device(0, Some(&["1g.10gb@0".to_owned()]))];
        let b = vec![device(1, None)];
        add(&path, &[("accord-a".into(), a.clone())]).unwrap();
        add(&path, &[("accord-b".into(), b.clone())]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("mig-configs:"), "{text}");
        assert!(text.contains("1g.10gb: 1"), "{text}");
        let back: MigPartedFile = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back.mig_configs["accord-a"], a);
        assert_eq!(back.mig_configs["accord-b"], b);
        std::fs::write(&path, "not: [yaml").unwrap();
        assert!(matches!(
            add(&path, &[("accord-c".into(), b)]),
            Err(MigPartedError::Parse { .. })
        ));
    }
}
