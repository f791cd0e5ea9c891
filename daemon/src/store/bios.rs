//! BIOS profiles in the store (tree `bios_applied`): per node, the last
//! profile Accord staged and read back, verified or not. The planner
//! plans with the verified one (the fleet file's `bios_profile_applied`
//! is the admin's word only until there is one), so a node whose profile
//! took is not staged again, across restarts. Flushed on each write: a
//! verification lost to a crash would stage and reboot a machine for
//! nothing.

use std::collections::BTreeMap;

use accord_api::control::BiosRecord;

use super::{io, Store, StoreError};

const BIOS_APPLIED: &str = "bios_applied";

impl Store {
    // The tree is opened per call (sled keeps opened trees in a map: a
    // lookup), so the store's open and close need not know of it.
    fn bios_tree(&self) -> Result<sled::Tree, StoreError> {
        self.db
            .open_tree(BIOS_APPLIED)
            .map_err(io("open bios_applied tree"))
    }

    /// Keeps `node`'s BIOS outcome, durably.
    pub fn put_bios_record(&self, node: &str, rec: &BiosRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(rec).expect("BIOS records serialize");
        self.bios_tree()?
            .insert(node.as_bytes(), bytes)
            .map_err(io("write BIOS record"))?;
        self.flush()
    }

    /// Every node's BIOS outcome. One that cannot be decoded (written by
    /// another release) is skipped and named in the second list: that
    /// node's profile counts as not verified.
    pub fn bios_records(&self) -> Result<(BTreeMap<String, BiosRecord>, Vec<String>), StoreError> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        for kv in self.bios_tree()?.iter() {
            let (k, v) = kv.map_err(io("list BIOS records"))?;
            let name = String::from_utf8_lossy(&k).into_owned();
            match serde_json::from_slice(&v) {
                Ok(rec) => {
                    out.insert(name, rec);
                }
                Err(_) => bad.push(name),
            }
        }
        Ok((out, bad))
    }
}

#[cfg(test)]
mod tests {
    use accord_api::control::BiosResult;

    use super::*;

    #[test]
    fn bios_records_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let verified = BiosRecord {
            profile: "gpu-perf".into(),
            at: 10,
            result: BiosResult::Verified,
        };
        store.put_bios_record("n1", &verified).unwrap();
        let failed = BiosRecord {
            profile: "gpu-perf".into(),
            at: 11,
            result: BiosResult::Failed {
                reason: "ProcTurboMode is \"Enabled\", wanted \"Disabled\"".into(),
            },
        };
        store.put_bios_record("n2", &failed).unwrap();
        store.close(crate::store::CLOSE_WITHIN).unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (recs, bad) = store.bios_records().unwrap();
        assert!(bad.is_empty());
        assert_eq!(recs["n1"], verified);
        assert_eq!(recs["n2"], failed);
    }
}
