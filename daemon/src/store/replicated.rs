//! The part of the store a new leader takes from the API server (HA,
//! `crate::ha::shared_state`): each node's lifecycle, bookings, BIOS record,
//! agent command and kept copy of its deleted Node, as one `NodeShared`. `node_shared` reads it for the
//! leader's write-behind; `adopt` replaces it with what the previous
//! leader left, at a takeover, before the loop is seeded from the store.

use std::collections::BTreeMap;

use accord_api::agent::CommandRecord;

use super::{io, Store, StoreError};
use crate::ha::shared_state::NodeShared;
use crate::store::state::Booking;

impl Store {
    /// Every fleet node's lifecycle, bookings, BIOS record and command as
    /// this store has them (fence and intents left empty: the journal's).
    /// Unreadable records are left out (as the loop's seeding does).
    pub fn shared_parts(
        &self,
        nodes: &[String],
    ) -> Result<BTreeMap<String, NodeShared>, StoreError> {
        let (lives, _) = self.lives()?;
        let (bookings, _) = self.bookings()?;
        let (bios, _) = self.bios_records()?;
        let (kept, _) = self.kept_nodes()?;
        let mut commands: BTreeMap<String, CommandRecord> = BTreeMap::new();
        for kv in self.commands.iter() {
            let (k, v) = kv.map_err(io("list commands"))?;
            if let Ok(rec) = serde_json::from_slice::<CommandRecord>(&v) {
                commands.insert(String::from_utf8_lossy(&k).into_owned(), rec);
            }
        }
        let mut out = BTreeMap::new();
        for node in nodes {
            let mut s = NodeShared {
                lifecycle: lives.get(node).cloned(),
                bios: bios.get(node).cloned(),
                command: commands.get(node).cloned(),
                kept: kept.get(node).cloned(),
                ..NodeShared::default()
            };
            for (request, b) in &bookings {
                if b.nodes.contains(node) {
                    s.bookings.insert(request.clone(), b.until);
                }
            }
            out.insert(node.clone(), s);
        }
        Ok(out)
    }

    /// Replaces every node's lifecycle, BIOS record and command, and all
    /// bookings, with `shared` (the previous leader's); flushed. A node
    /// without a lifecycle there is observed afresh.
    pub fn adopt(&self, shared: &BTreeMap<String, NodeShared>) -> Result<(), StoreError> {
        self.lifecycle.clear().map_err(io("clear lifecycles"))?;
        let lives: Vec<_> = shared
            .iter()
            .filter_map(|(n, s)| Some((n.clone(), s.lifecycle.clone()?)))
            .collect();
        for (node, life) in &lives {
            let bytes = serde_json::to_vec(life).expect("lifecycles serialize");
            self.lifecycle
                .insert(node.as_bytes(), bytes)
                .map_err(io("write lifecycle"))?;
        }
        let mut bookings: BTreeMap<String, Booking> = BTreeMap::new();
        for (node, s) in shared {
            for (request, until) in &s.bookings {
                let b = bookings.entry(request.clone()).or_insert_with(|| Booking {
                    nodes: Default::default(),
                    until: *until,
                });
                b.nodes.insert(node.clone());
                b.until = b.until.max(*until);
            }
        }
        self.put_bookings(&bookings)?;
        {
            let _one = self.commands_lock.lock().unwrap_or_else(|e| e.into_inner());
            for (node, s) in shared {
                match &s.command {
                    Some(rec) => {
                        let bytes = serde_json::to_vec(rec).expect("command records serialize");
                        self.commands
                            .insert(node.as_bytes(), bytes)
                            .map_err(io("write command"))?;
                    }
                    None => {
                        self.commands
                            .remove(node.as_bytes())
                            .map_err(io("remove command"))?;
                    }
                }
            }
        }
        for (node, s) in shared {
            match &s.bios {
                Some(rec) => self.put_bios_record(node, rec)?,
                None => self.remove_bios_record(node)?,
            }
        }
        let kept: Vec<_> = shared
            .iter()
            .map(|(n, s)| (n.clone(), s.kept.clone()))
            .collect();
        self.put_kept_nodes(&kept)?;
        self.flush()
    }
}
