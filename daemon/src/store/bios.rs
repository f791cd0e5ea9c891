//! BIOS profiles in the store (tree `bios_applied`): per node, the last
//! profile Accord staged, and how its read-back went: `staged` (written
//! with the power-on, before the BMC is touched: a restart before the
//! read-back, which can be minutes of POST away, still verifies it),
//! then verified or failed. The planner plans with the verified one (the
//! fleet file's `bios_profile_applied` is the admin's word only until
//! there is one), so a node whose profile took is not staged again,
//! across restarts. Flushed on each write: a verification lost to a
//! crash would stage and reboot a machine for nothing.

use std::collections::BTreeMap;

use accord_api::control::{BiosRecord, BiosResult};

use super::{io, Store, StoreError};
use crate::journal::Journal;

const BIOS_APPLIED: &str = "bios_applied";

// The tree is opened per call (sled keeps opened trees in a map: a
// lookup), so the store's open and close need not know of it.
fn bios_tree(db: &sled::Db) -> Result<sled::Tree, StoreError> {
    db.open_tree(BIOS_APPLIED)
        .map_err(io("open bios_applied tree"))
}

fn put(db: &sled::Db, node: &str, rec: &BiosRecord) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(rec).expect("BIOS records serialize");
    bios_tree(db)?
        .insert(node.as_bytes(), bytes)
        .map_err(io("write BIOS record"))?;
    db.flush().map_err(io("flush"))?;
    Ok(())
}

impl Store {
    /// Keeps `node`'s BIOS outcome, durably.
    pub fn put_bios_record(&self, node: &str, rec: &BiosRecord) -> Result<(), StoreError> {
        put(&self.db, node, rec)
    }

    /// Forgets `node`'s BIOS outcome, durably.
    pub fn remove_bios_record(&self, node: &str) -> Result<(), StoreError> {
        bios_tree(&self.db)?
            .remove(node.as_bytes())
            .map_err(io("remove BIOS record"))?;
        self.db.flush().map_err(io("flush"))?;
        Ok(())
    }

    /// Every node's BIOS outcome. One that cannot be decoded (written by
    /// another release) is skipped and named in the second list: that
    /// node's profile counts as not verified.
    pub fn bios_records(&self) -> Result<(BTreeMap<String, BiosRecord>, Vec<String>), StoreError> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        for kv in bios_tree(&self.db)?.iter() {
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

impl Journal {
    /// Keeps, with a power-on's intent, that `profile` is staged on
    /// `node` and not yet read back (the BIOS tree's `staged` record),
    /// durably: after a restart the loop still verifies it.
    pub fn record_bios_staged(
        &self,
        node: &str,
        profile: &str,
        now: u64,
    ) -> Result<(), StoreError> {
        put(
            self.db(),
            node,
            &BiosRecord {
                profile: profile.to_owned(),
                at: now,
                result: BiosResult::Staged,
            },
        )
    }
}

#[cfg(test)]
mod tests {
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
        // Staged with a power-on (through the journal, as the executor
        // does), not read back before the stop.
        {
            let journal = store.journal().unwrap();
            journal.record_bios_staged("n3", "gpu-perf", 12).unwrap();
        }
        store.close(crate::store::CLOSE_WITHIN).unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (recs, bad) = store.bios_records().unwrap();
        assert!(bad.is_empty());
        assert_eq!(recs["n1"], verified);
        assert_eq!(recs["n2"], failed);
        assert_eq!(
            recs["n3"],
            BiosRecord {
                profile: "gpu-perf".into(),
                at: 12,
                result: BiosResult::Staged,
            }
        );
    }
}
