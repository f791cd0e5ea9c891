//! Lookups by node name in name order: a round visits every node in the
//! order its maps are sorted in, so each lookup walks on from the last
//! instead of searching from the root (n lookups in a map of m: n + m
//! steps, not n·log m string comparisons).

use std::collections::btree_map;
use std::iter::Peekable;

/// A cursor over a map (or a set, as a map to `()`) sorted by name.
pub(crate) struct InOrder<'a, V, I: Iterator<Item = (&'a String, V)>> {
    entries: Peekable<I>,
}

/// [`InOrder`] over a `BTreeMap`.
pub(crate) fn in_order<V>(
    map: &std::collections::BTreeMap<String, V>,
) -> InOrder<'_, &V, btree_map::Iter<'_, String, V>> {
    InOrder {
        entries: map.iter().peekable(),
    }
}

/// [`InOrder`] over a `BTreeSet`.
pub(crate) fn set_in_order(
    set: &std::collections::BTreeSet<String>,
) -> InOrder<'_, (), impl Iterator<Item = (&String, ())>> {
    InOrder {
        entries: set.iter().map(|k| (k, ())).peekable(),
    }
}

impl<'a, V: Copy, I: Iterator<Item = (&'a String, V)>> InOrder<'a, V, I> {
    /// The value under `name`. Names must be asked for in ascending order
    /// (a smaller name than the last is answered `None`).
    pub(crate) fn get(&mut self, name: &str) -> Option<V> {
        while let Some((k, _)) = self.entries.peek() {
            if k.as_str() < name {
                self.entries.next();
            } else {
                break;
            }
        }
        match self.entries.peek() {
            Some((k, v)) if k.as_str() == name => Some(*v),
            _ => None,
        }
    }

    /// Whether `name` is there (same order rule as [`InOrder::get`]).
    pub(crate) fn contains(&mut self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn lookups_in_order_find_what_a_search_finds() {
        let map: BTreeMap<String, u32> = [("b", 2), ("d", 4), ("e", 5)]
            .map(|(k, v)| (k.to_owned(), v))
            .into();
        let mut c = in_order(&map);
        let got: Vec<Option<u32>> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|n| c.get(n).copied())
            .collect();
        assert_eq!(got, vec![None, Some(2), None, Some(4), Some(5), None]);
        let set: BTreeSet<String> = ["x".to_owned()].into();
        let mut s = set_in_order(&set);
        assert!(!s.contains("w"));
        assert!(s.contains("x"));
        assert!(!s.contains("y"));
    }
}
