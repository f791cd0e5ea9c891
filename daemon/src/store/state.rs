//! The control loop's state that must survive a restart (trees
//! `lifecycle` and `bookings`): each node's lifecycle stage with when it
//! began (so a node powering on keeps its deadline, an idle one its idle
//! timer) and the ProvisioningRequest bookings (so a booked node stays on).
//! Written by the loop's effect when they change, flushed before the next
//! round; read once at start.

use std::collections::{BTreeMap, BTreeSet};

use accord::lifecycle::NodeLife;

use super::{io, Store, StoreError};

pub use accord_decide::Booking;

impl Store {
    /// Keeps the lifecycles that changed and forgets `gone` (nodes no
    /// longer in the fleet); flushed.
    pub fn put_lives(&self, changed: &[(String, NodeLife)]) -> Result<(), StoreError> {
        if changed.is_empty() {
            return Ok(());
        }
        for (node, life) in changed {
            let bytes = serde_json::to_vec(life).expect("lifecycles serialize");
            self.lifecycle
                .insert(node.as_bytes(), bytes)
                .map_err(io("write lifecycle"))?;
        }
        self.flush()
    }

    /// Every kept lifecycle, by node. One that cannot be decoded (written
    /// by another release) is left out and named in the second list: the
    /// loop observes the node afresh.
    pub fn lives(&self) -> Result<(BTreeMap<String, NodeLife>, Vec<String>), StoreError> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        for kv in self.lifecycle.iter() {
            let (k, v) = kv.map_err(io("list lifecycles"))?;
            let name = String::from_utf8_lossy(&k).into_owned();
            match serde_json::from_slice(&v) {
                Ok(l) => {
                    out.insert(name, l);
                }
                Err(_) => bad.push(name),
            }
        }
        Ok((out, bad))
    }

    /// Replaces the bookings with `bookings`; flushed.
    pub fn put_bookings(&self, bookings: &BTreeMap<String, Booking>) -> Result<(), StoreError> {
        let keep: BTreeSet<&[u8]> = bookings.keys().map(|k| k.as_bytes()).collect();
        for kv in self.bookings.iter() {
            let (k, _) = kv.map_err(io("list bookings"))?;
            if !keep.contains(k.as_ref()) {
                self.bookings.remove(&k).map_err(io("remove booking"))?;
            }
        }
        for (request, b) in bookings {
            let bytes = serde_json::to_vec(b).expect("bookings serialize");
            self.bookings
                .insert(request.as_bytes(), bytes)
                .map_err(io("write booking"))?;
        }
        self.flush()
    }

    /// Every kept booking, by request (`namespace/name`); undecodable ones
    /// are left out and named.
    pub fn bookings(&self) -> Result<(BTreeMap<String, Booking>, Vec<String>), StoreError> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        for kv in self.bookings.iter() {
            let (k, v) = kv.map_err(io("list bookings"))?;
            let name = String::from_utf8_lossy(&k).into_owned();
            match serde_json::from_slice(&v) {
                Ok(b) => {
                    out.insert(name, b);
                }
                Err(_) => bad.push(name),
            }
        }
        Ok((out, bad))
    }
}

#[cfg(test)]
mod tests {
    use accord::lifecycle::Stage;

    use super::*;

    #[test]
    fn lifecycles_and_bookings_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let life = NodeLife::new(Stage::PoweringOn, 1234);
        store.put_lives(&[("n1".into(), life.clone())]).unwrap();
        let mut b = BTreeMap::new();
        b.insert(
            "team/pr".to_owned(),
            Booking {
                nodes: ["n1".to_owned()].into(),
                until: 9999,
            },
        );
        b.insert(
            "team/old".to_owned(),
            Booking {
                nodes: BTreeSet::new(),
                until: 1,
            },
        );
        store.put_bookings(&b).unwrap();
        b.remove("team/old");
        store.put_bookings(&b).unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.lives().unwrap().0["n1"], life);
        assert_eq!(store.bookings().unwrap().0, b);
    }
}
