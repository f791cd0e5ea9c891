//! Tree `kept_nodes`: what the Nodes accordd deleted for dark machines had
//! (`accord::truth::KeptNode`), put back when their kubelets register them
//! again. Written (flushed) by the loop's effect before the delete is
//! sent; read once at start. As 64 KiB chunks: a Node's annotations may
//! take up to 256 KiB.

use std::collections::BTreeMap;

use accord::truth::KeptNode;

use super::{chunk_error, chunked, io, Store, StoreError};

impl Store {
    /// Keeps (`Some`) or forgets (`None`) each node's copy; flushed.
    pub fn put_kept_nodes(&self, changed: &[(String, Option<KeptNode>)]) -> Result<(), StoreError> {
        if changed.is_empty() {
            return Ok(());
        }
        for (node, kept) in changed {
            match kept {
                Some(k) => {
                    let bytes = serde_json::to_vec(k).expect("kept nodes serialize");
                    self.kept_nodes
                        .put(node, &bytes)
                        .map_err(io("write kept node"))?;
                }
                None => {
                    self.kept_nodes
                        .remove(node)
                        .map_err(io("remove kept node"))?;
                }
            }
        }
        self.flush()
    }

    /// Every kept copy, by node; undecodable ones are left out and named.
    pub fn kept_nodes(&self) -> Result<(BTreeMap<String, KeptNode>, Vec<String>), StoreError> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        for record in self.kept_nodes.records(None) {
            let (name, v) = match record {
                Ok(r) => r,
                Err(chunked::ChunkError::Broken(name)) => {
                    bad.push(name);
                    continue;
                }
                Err(e) => return Err(chunk_error("list kept nodes")(e)),
            };
            match serde_json::from_slice(&v) {
                Ok(k) => {
                    out.insert(name, k);
                }
                Err(_) => bad.push(name),
            }
        }
        Ok((out, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_nodes_survive_a_reopen_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let big = KeptNode {
            uid: "u1".into(),
            labels: [("team".to_owned(), "vision".to_owned())].into(),
            // Past one chunk: a Node's annotations may take 256 KiB.
            annotations: [("note".to_owned(), "x".repeat(200 << 10))].into(),
            ..KeptNode::default()
        };
        let small = KeptNode {
            uid: "u2".into(),
            unschedulable: true,
            ..KeptNode::default()
        };
        store
            .put_kept_nodes(&[("n1".into(), Some(big.clone())), ("n2".into(), Some(small))])
            .unwrap();
        store.put_kept_nodes(&[("n2".into(), None)]).unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        let (kept, bad) = store.kept_nodes().unwrap();
        assert!(bad.is_empty());
        assert_eq!(kept.len(), 1);
        assert_eq!(kept["n1"], big);
    }
}
