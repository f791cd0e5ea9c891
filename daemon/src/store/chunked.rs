//! Records kept as chunks of at most [`CHUNK`] bytes, under the keys
//! `name 0x00 index` (big-endian `u32`), written and removed in one atomic
//! batch.
//!
//! Why: sled 0.34 keeps a value over a quarter of its segment (512 KiB /
//! 4 = 128 KiB) as a file in `blobs/`, and an overwritten blob is never
//! removed, not even by a restart (measured: 2,000 overwrites of one 1 MB
//! value left 2.0 GB on disk; `pagecache/constants.rs`,
//! `MINIMUM_ITEMS_PER_SEGMENT`). Chunks stay in its log, whose segments
//! are cleaned as they are rewritten: the same 2,000 overwrites as 64 KiB
//! chunks leave about 6 MB. Node names hold no NUL (they are Kubernetes
//! node names), so one name's chunks are contiguous and sort by index.

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use sled::{Batch, IVec, Tree};

/// Well under sled's blob threshold (128 KiB with its default segment).
pub(crate) const CHUNK: usize = 64 << 10;

/// The key of `name`'s chunk `index`.
fn key(name: &str, index: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 5);
    k.extend_from_slice(name.as_bytes());
    k.push(0);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// `name 0x00`: the prefix of every chunk of `name`.
fn prefix(name: &str) -> Vec<u8> {
    let mut p = name.as_bytes().to_vec();
    p.push(0);
    p
}

/// A chunk key's name and index; `None` for a key that is not one (a
/// record written whole, before chunks).
fn split(key: &[u8]) -> Option<(&[u8], u32)> {
    let at = key.len().checked_sub(5)?;
    if key[at] != 0 {
        return None;
    }
    let index = u32::from_be_bytes(key[at + 1..].try_into().ok()?);
    Some((&key[..at], index))
}

/// What went wrong reading chunked records.
#[derive(Debug)]
pub(crate) enum ChunkError {
    Sled(sled::Error),
    /// A record whose chunks do not run 0, 1, 2, … (named).
    Broken(String),
}

impl From<sled::Error> for ChunkError {
    fn from(e: sled::Error) -> Self {
        ChunkError::Sled(e)
    }
}

/// A tree of chunked records. sled reads a batch's keys one at a time, so
/// a record read while a batch replaces it could be half old and half
/// new: reads share a lock that writes hold alone.
pub(crate) struct Chunked {
    tree: Tree,
    lock: RwLock<()>,
}

impl Chunked {
    pub(crate) fn new(tree: Tree) -> Chunked {
        Chunked {
            tree,
            lock: RwLock::new(()),
        }
    }

    /// Replaces `name`'s record with `bytes`, atomically: its new chunks
    /// written and any old chunk past them removed in one batch.
    pub(crate) fn put(&self, name: &str, bytes: &[u8]) -> Result<(), sled::Error> {
        let _write = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        let mut batch = Batch::default();
        let mut count = 0u32;
        for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
            count = u32::try_from(i + 1).expect("records are bounded far below 2^32 chunks");
            batch.insert(key(name, count - 1), chunk);
        }
        if bytes.is_empty() {
            batch.insert(key(name, 0), &[][..]);
            count = 1;
        }
        for old in self.tree.scan_prefix(prefix(name)).keys() {
            let old = old?;
            if let Some((_, index)) = split(&old) {
                if index >= count {
                    batch.remove(old);
                }
            }
        }
        self.tree.apply_batch(batch)
    }

    /// `name`'s record, its chunks joined.
    pub(crate) fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ChunkError> {
        let _read = self.lock.read().unwrap_or_else(PoisonError::into_inner);
        let mut out: Option<Vec<u8>> = None;
        for (expected, kv) in self.tree.scan_prefix(prefix(name)).enumerate() {
            let (k, v) = kv?;
            match split(&k) {
                Some((_, index)) if index as usize == expected => {
                    out.get_or_insert_with(Vec::new).extend_from_slice(&v)
                }
                _ => return Err(ChunkError::Broken(name.to_owned())),
            }
        }
        Ok(out)
    }

    /// Removes `name`'s record; whether there was one.
    pub(crate) fn remove(&self, name: &str) -> Result<bool, sled::Error> {
        let _write = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        let mut batch = Batch::default();
        let mut found = false;
        for k in self.tree.scan_prefix(prefix(name)).keys() {
            batch.remove(k?);
            found = true;
        }
        if found {
            self.tree.apply_batch(batch)?;
        }
        Ok(found)
    }

    /// Every record from the first name after `after` on (all, without),
    /// in name order: (name, bytes). Writes wait until it is dropped.
    pub(crate) fn records(&self, after: Option<&str>) -> Records<'_> {
        let read = self.lock.read().unwrap_or_else(PoisonError::into_inner);
        let inner = match after {
            // Past every chunk of `after`: `after 0x01` sorts after them
            // and before any longer name (no name holds a byte below 0x20).
            Some(a) => {
                let mut from = a.as_bytes().to_vec();
                from.push(1);
                self.tree.range(from..)
            }
            None => self.tree.iter(),
        };
        Records {
            _read: read,
            inner,
            pending: None,
        }
    }

    /// Rewrites records kept whole (schema 1) as chunks, one at a time;
    /// how many.
    pub(crate) fn migrate_whole(&self) -> Result<usize, sled::Error> {
        let _write = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        let mut whole = Vec::new();
        for k in self.tree.iter().keys() {
            let k = k?;
            if split(&k).is_none() {
                whole.push(k);
            }
        }
        for k in &whole {
            let Some(v) = self.tree.get(k)? else { continue };
            let name = String::from_utf8_lossy(k).into_owned();
            let mut batch = Batch::default();
            for (i, chunk) in v.chunks(CHUNK).enumerate() {
                batch.insert(key(&name, i as u32), chunk);
            }
            if v.is_empty() {
                batch.insert(key(&name, 0), &[][..]);
            }
            batch.remove(k.clone());
            self.tree.apply_batch(batch)?;
        }
        Ok(whole.len())
    }
}

/// The iterator of [`Chunked::records`].
pub(crate) struct Records<'a> {
    _read: RwLockReadGuard<'a, ()>,
    inner: sled::Iter,
    /// The first chunk of the next record, read while ending the last.
    pending: Option<(IVec, IVec)>,
}

impl Iterator for Records<'_> {
    type Item = Result<(String, Vec<u8>), ChunkError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (k, v) = match self.pending.take() {
            Some(kv) => kv,
            None => match self.inner.next()? {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e.into())),
            },
        };
        let Some((name, 0)) = split(&k) else {
            // No chunk 0 (or not a chunk): named as far as it can be, and
            // the rest of that name's chunks passed over.
            let name = split(&k).map_or(&k[..], |(n, _)| n).to_vec();
            loop {
                match self.inner.next() {
                    Some(Ok((k2, v2))) if split(&k2).is_some_and(|(n, _)| n == name.as_slice()) => {
                        let _ = v2;
                    }
                    Some(Ok(kv)) => {
                        self.pending = Some(kv);
                        break;
                    }
                    _ => break,
                }
            }
            return Some(Err(ChunkError::Broken(
                String::from_utf8_lossy(&name).into_owned(),
            )));
        };
        let name = name.to_vec();
        let mut bytes = v.to_vec();
        let mut expected = 1u32;
        loop {
            match self.inner.next() {
                None => break,
                Some(Err(e)) => return Some(Err(e.into())),
                Some(Ok((k2, v2))) => match split(&k2) {
                    Some((n, i)) if n == name.as_slice() => {
                        if i != expected {
                            return Some(Err(ChunkError::Broken(
                                String::from_utf8_lossy(&name).into_owned(),
                            )));
                        }
                        bytes.extend_from_slice(&v2);
                        expected += 1;
                    }
                    _ => {
                        self.pending = Some((k2, v2));
                        break;
                    }
                },
            }
        }
        Some(Ok((String::from_utf8_lossy(&name).into_owned(), bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, sled::Db, Tree) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        (dir, db, tree)
    }

    fn put(c: &Chunked, name: &str, bytes: &[u8]) -> Result<(), sled::Error> {
        c.put(name, bytes)
    }
    fn get(c: &Chunked, name: &str) -> Result<Option<Vec<u8>>, ChunkError> {
        c.get(name)
    }
    fn remove(c: &Chunked, name: &str) -> Result<bool, sled::Error> {
        c.remove(name)
    }
    fn records<'a>(c: &'a Chunked, after: Option<&str>) -> Records<'a> {
        c.records(after)
    }

    #[test]
    fn records_round_trip_shrink_and_list_in_name_order() {
        let (_d, _db, raw) = tree();
        let t = Chunked::new(raw.clone());
        let big: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i % 251) as u8).collect();
        put(&t, "n1", &big).unwrap();
        put(&t, "n10", b"ten").unwrap();
        put(&t, "n2", b"").unwrap();
        assert_eq!(get(&t, "n1").unwrap().unwrap(), big);
        assert_eq!(raw.len(), 4 + 1 + 1);
        // Shrinking removes the chunks past the new end.
        put(&t, "n1", b"small").unwrap();
        assert_eq!(raw.len(), 3);
        assert_eq!(get(&t, "n1").unwrap().unwrap(), b"small");
        let all: Vec<_> = records(&t, None).map(Result::unwrap).collect();
        let names: Vec<_> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["n1", "n10", "n2"]);
        assert_eq!(all[2].1, b"");
        let after: Vec<_> = records(&t, Some("n1")).map(|r| r.unwrap().0).collect();
        assert_eq!(after, ["n10", "n2"]);
        assert!(remove(&t, "n10").unwrap());
        assert!(!remove(&t, "n10").unwrap());
        assert_eq!(get(&t, "n10").unwrap(), None);
    }

    #[test]
    fn whole_records_become_chunks() {
        let (_d, _db, raw) = tree();
        let t = Chunked::new(raw.clone());
        let big: Vec<u8> = vec![7; CHUNK + 1];
        raw.insert("old", big.clone()).unwrap();
        assert_eq!(t.migrate_whole().unwrap(), 1);
        assert_eq!(get(&t, "old").unwrap().unwrap(), big);
        assert_eq!(raw.len(), 2);
        assert_eq!(t.migrate_whole().unwrap(), 0);
        // A record without its first chunk is named, once, and the next
        // one still read.
        put(&t, "b", &vec![1; CHUNK + 1]).unwrap();
        put(&t, "c", b"c").unwrap();
        raw.remove(key("b", 0)).unwrap();
        let listed: Vec<String> = records(&t, None)
            .map(|r| match r {
                Ok((name, _)) => name,
                Err(ChunkError::Broken(name)) => format!("broken {name}"),
                Err(e) => format!("{e:?}"),
            })
            .collect();
        assert_eq!(listed, ["broken b", "c", "old"]);
    }
}
