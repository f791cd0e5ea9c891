//! Indexes the planner keeps current as it commits: where the up nodes sit
//! in a candidate list, free-GPU slots per domain, and each topology level's
//! domains.

use super::*;

/// Where the up nodes sit in a cached candidate list, so first fit over
/// 10,000 nodes skips the off ones and the prefix already full.
#[derive(Debug, Default)]
pub(super) struct UpIndex {
    /// Node → position in the list (`u32::MAX`: not in it).
    pub(super) pos: Vec<u32>,
    /// Bit per position: the node there is up (a bit set, so a power-on
    /// is O(1) and a scan skips 64 positions at a time, up or off).
    pub(super) up: Vec<u64>,
    /// Positions in the list.
    pub(super) len: usize,
    /// Up nodes before this position have no whole GPU free (monotone:
    /// no departures within a plan).
    pub(super) full: usize,
}

impl UpIndex {
    pub(super) fn new(nodes: usize, len: usize) -> UpIndex {
        UpIndex {
            pos: vec![u32::MAX; nodes],
            up: vec![0; len.div_ceil(64)],
            len,
            full: 0,
        }
    }

    pub(super) fn set_up(&mut self, p: usize) {
        self.up[p / 64] |= 1 << (p % 64);
    }

    /// The first position at or after `from` whose node is up (`up`) or
    /// not.
    pub(super) fn next(&self, from: usize, up: bool) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        let word = |w: usize| if up { self.up[w] } else { !self.up[w] };
        let mut w = from / 64;
        let mut bits = word(w) & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                let p = w * 64 + bits.trailing_zeros() as usize;
                return (p < self.len).then_some(p);
            }
            w += 1;
            if w >= self.up.len() {
                return None;
            }
            bits = word(w);
        }
    }

    /// Moves `full` past up nodes with no whole GPU free.
    pub(super) fn advance_full(&mut self, is_full: impl Fn(usize) -> bool) {
        loop {
            match self.next(self.full, true) {
                Some(q) if is_full(q) => self.full = q + 1,
                Some(q) => {
                    self.full = q;
                    return;
                }
                None => {
                    self.full = self.len;
                    return;
                }
            }
        }
    }
}

/// Whole-GPU capacity of one domain's candidate nodes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DomainStats {
    pub(super) up_free: usize,
    pub(super) up_count: usize,
    pub(super) all_free: usize,
    pub(super) all_count: usize,
    /// Most GPUs an off node offers.
    pub(super) off_max: usize,
    /// Least power an off node draws (W).
    pub(super) off_min_w: u64,
    /// Up nodes, and all nodes, by free whole GPUs (see [`Slots`]).
    pub(super) up_slots: Slots,
    pub(super) all_slots: Slots,
}

/// Nodes counted by free whole GPUs, to bound how many pods of `g` GPUs a
/// domain can take without trying: a domain with 100 free GPUs spread as
/// 4 per node takes no 8-GPU pod. Fixed-size, so the stats stay `Copy`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slots {
    /// Nodes with exactly `k` free GPUs, for `k` below [`Slots::BIG`].
    pub(super) by_free: [u32; Slots::BIG],
    /// Free GPUs summed over nodes with `BIG` or more.
    pub(super) big_free: usize,
}

impl Slots {
    const BIG: usize = 16;

    pub(super) fn add(&mut self, free: usize) {
        if free < Self::BIG {
            self.by_free[free] += 1;
        } else {
            self.big_free += free;
        }
    }

    /// At least as many pods of `g` whole GPUs as fit (exact below `BIG`);
    /// unbounded for pods of no GPU.
    #[cfg(test)]
    pub(super) fn pods_of(&self, g: usize) -> usize {
        self.pods_by(&PodsPer::new(g))
    }

    /// [`Slots::pods_of`] with the divisions done once per gang.
    pub(super) fn pods_by(&self, per: &PodsPer) -> usize {
        if per.g == 0 {
            return usize::MAX;
        }
        let small: u32 = self
            .by_free
            .iter()
            .zip(&per.quotient)
            .map(|(n, q)| n * q)
            .sum();
        small as usize + self.big_free / per.g
    }

    pub(super) fn remove(&mut self, free: usize) {
        if free < Self::BIG {
            self.by_free[free] -= 1;
        } else {
            self.big_free -= free;
        }
    }
}

/// Pods of `g` GPUs a node with `k` free GPUs holds, for `k` below
/// [`Slots::BIG`].
pub(super) struct PodsPer {
    pub(super) g: usize,
    pub(super) quotient: [u32; Slots::BIG],
}

impl PodsPer {
    pub(super) fn new(g: usize) -> PodsPer {
        let mut quotient = [0; Slots::BIG];
        for (k, q) in quotient.iter_mut().enumerate() {
            *q = k.checked_div(g).unwrap_or(0) as u32;
        }
        PodsPer { g, quotient }
    }
}

/// Why a domain cannot take a gang, known without trying it.
pub(super) enum TooSmall {
    /// Free GPUs in all.
    Gpus(usize),
    /// (pods of this many GPUs that fit, GPUs per pod)
    Pods(usize, usize),
}

/// Per-domain stats kept current from the log of touched nodes.
pub(super) struct StatsCache {
    pub(super) seen: usize,
    /// Shared with the evaluation reading them (no copy per gang).
    pub(super) stats: Rc<Vec<DomainStats>>,
}

/// The domains of one topology level.
pub(super) struct LevelIndex {
    /// Domain values, sorted; a domain's id is its position.
    pub(super) names: Vec<String>,
    /// Each domain's nodes, in the planner's static preference order.
    pub(super) members: Vec<Vec<usize>>,
    /// Each node's domain.
    pub(super) of_node: Vec<Option<usize>>,
}

/// The domains of `level`, in `static_order` within each; `None` where no
/// node has the level. Built the first time a gang asks for the level in
/// a plan (most rounds ask for one level, or none).
pub(super) fn level_index(
    nodes: &[Cow<'_, Node>],
    static_order: &[usize],
    level: &str,
) -> Option<LevelIndex> {
    // Hashed while collecting (thousands of lookups), sorted once after:
    // the ids follow the sorted names, never the hash order.
    let mut seen: FnvMap<&str, ()> = FnvMap::default();
    for n in nodes {
        if let Some(v) = n.domains.get(level) {
            seen.insert(v, ());
        }
    }
    if seen.is_empty() {
        return None;
    }
    let mut names: Vec<&str> = seen.keys().copied().collect();
    names.sort_unstable();
    let id: FnvMap<&str, usize> = names.iter().enumerate().map(|(d, v)| (*v, d)).collect();
    let mut members = vec![Vec::new(); names.len()];
    let mut of_node = vec![None; nodes.len()];
    for &i in static_order {
        if let Some(&d) = nodes[i].domains.get(level).and_then(|v| id.get(v.as_str())) {
            members[d].push(i);
            of_node[i] = Some(d);
        }
    }
    Some(LevelIndex {
        names: names.into_iter().map(str::to_owned).collect(),
        members,
        of_node,
    })
}

#[cfg(test)]
mod tests {
    use super::{Slots, UpIndex};

    #[test]
    fn slots_count_pods_that_fit_whole_on_each_node() {
        let mut s = Slots::default();
        for free in [8, 4, 4, 3, 0] {
            s.add(free);
        }
        assert_eq!(s.pods_of(8), 1);
        assert_eq!(s.pods_of(4), 4);
        assert_eq!(s.pods_of(3), 5);
        assert_eq!(s.pods_of(1), 19);
        // Nodes with many GPUs are summed: an upper bound, never less
        // (16 and 17 free take 2 + 2 pods of 8; the bound says 33 / 8 = 4).
        s.add(16);
        s.add(17);
        assert_eq!(s.pods_of(8), 1 + 4);
        assert_eq!(s.pods_of(16), 2);
        // Pods of no GPU are not bounded; removing undoes adding.
        assert_eq!(s.pods_of(0), usize::MAX);
        s.remove(17);
        s.remove(8);
        assert_eq!(s.pods_of(8), 2);
    }

    #[test]
    fn up_index_finds_the_next_up_or_off_position() {
        let mut idx = UpIndex::new(200, 130);
        for p in [3, 64, 129] {
            idx.set_up(p);
        }
        let walk = |up: bool| {
            let mut out = Vec::new();
            let mut from = 0;
            while let Some(p) = idx.next(from, up) {
                out.push(p);
                from = p + 1;
            }
            out
        };
        assert_eq!(walk(true), [3, 64, 129]);
        let off = walk(false);
        assert_eq!(off.len(), 127);
        assert!(off.iter().all(|p| ![3, 64, 129].contains(p) && *p < 130));
        assert_eq!(idx.next(130, false), None);
        // `full` moves past up positions with nothing free, and stops at
        // the first that has some.
        idx.advance_full(|p| p < 64);
        assert_eq!(idx.full, 64);
        idx.advance_full(|_| true);
        assert_eq!(idx.full, 130);
    }
}
