//! What the control loop has said once (tree `said`): the keys of events
//! and log lines not to repeat, so a restarted accordd does not say again
//! what still holds (a workload that cannot be placed, a drift). The loop
//! keeps only keys of things that still hold and hands the store what
//! changed each round (flushed); read once at start.

use std::collections::BTreeSet;

use super::{io, Store, StoreError};

pub use accord_decide::SaidKey;

/// The tree's key: the JSON of the key (the value is empty).
fn key_bytes(key: &SaidKey) -> Vec<u8> {
    serde_json::to_vec(key).expect("plain strings serialize")
}

impl Store {
    /// Keeps `added` and forgets `removed`; flushed.
    pub fn put_said(&self, added: &[SaidKey], removed: &[SaidKey]) -> Result<(), StoreError> {
        if added.is_empty() && removed.is_empty() {
            return Ok(());
        }
        for k in removed {
            self.said.remove(key_bytes(k)).map_err(io("forget said"))?;
        }
        for k in added {
            self.said
                .insert(key_bytes(k), &[] as &[u8])
                .map_err(io("write said"))?;
        }
        self.flush()
    }

    /// Every kept key, and how many could not be read (written by another
    /// release; they are dropped: at worst something is said again).
    pub fn said(&self) -> Result<(BTreeSet<SaidKey>, usize), StoreError> {
        let mut out = BTreeSet::new();
        let mut bad = 0;
        for kv in self.said.iter() {
            let (k, _) = kv.map_err(io("list said"))?;
            match serde_json::from_slice(&k) {
                Ok(key) => {
                    out.insert(key);
                }
                Err(_) => {
                    bad += 1;
                    self.said.remove(&k).map_err(io("forget said"))?;
                }
            }
        }
        Ok((out, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_keys_survive_a_reopen_and_forgotten_ones_stay_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = SaidKey::new("cannot_place", "ml/a", "no room");
        let b = SaidKey::new("scheduler_drift", "n1", "gpus 8 vs 7");
        store.put_said(&[a.clone(), b.clone()], &[]).unwrap();
        store.put_said(&[], std::slice::from_ref(&b)).unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.said().unwrap(), ([a].into(), 0));
    }
}
