//! Pools and topology domains: which nodes a workload may use, in what
//! order, and how much each domain of a level can still hold.

use super::*;

impl Planner<'_> {
    pub(super) fn pods<'d>(&mut self, w: &'d Workload) -> Result<Vec<PodItem<'d>>, String> {
        // Checked before anything is sized by it, whatever made the demand
        // (the Kubernetes reader refuses earlier, at its configured limit).
        let total = w.pod_count_u64();
        let ceiling = crate::demand::MAX_PODS_PER_WORKLOAD_CEILING;
        if total > u64::from(ceiling) {
            return Err(format!(
                "{total} pods exceed the limit of {ceiling} pods per workload"
            ));
        }
        let mut pods = Vec::with_capacity(total as usize);
        for set in &w.pod_sets {
            let req =
                PodRequest::parse(&set.pod).map_err(|e| format!("pod set {}: {e}", set.name))?;
            let devices = compile_devices(&set.pod, &req, &mut self.cel, &self.classes)
                .map_err(|f| format!("pod set {}: {f}", set.name))?;
            let devices = std::rc::Rc::new(devices);
            let claim_gpus: u32 = set
                .pod
                .claims
                .iter()
                .flat_map(|c| &c.requests)
                .filter_map(|r| r.exactly.as_ref())
                .filter(|e| e.device_class == "gpu.nvidia.com" && e.capacity.is_empty())
                .fold(0u32, |n, e| n.saturating_add(e.count));
            let facts = self.relations.as_ref().map(|_| {
                Rc::new(crate::fit::relations::PodFacts::pending(
                    &w.namespace,
                    &set.pod,
                ))
            });
            for i in 0..set.count {
                pods.push(PodItem {
                    facts: facts.clone(),
                    name: format!("{}-{i}", set.name),
                    spec: &set.pod,
                    req: req.clone(),
                    devices: devices.clone(),
                    whole_gpus: req.gpus.saturating_add(claim_gpus) as usize,
                });
            }
        }
        Ok(pods)
    }

    /// The workload's node pools, shared by all workloads that own the same
    /// reservations (and hint the same one).
    pub(super) fn pools(
        &mut self,
        w: &Workload,
    ) -> std::rc::Rc<(Vec<Pool>, BTreeMap<String, usize>)> {
        let owned: Vec<usize> = (0..self.reservations.len())
            .filter(|&ri| {
                let r = &self.reservations[ri];
                r.active(self.now) && r.owns(&w.namespace, &w.labels)
            })
            .collect();
        let key = (owned.clone(), w.reservation.clone());
        if let Some(p) = self.pool_cache.get(&key) {
            return p.clone();
        }
        let built = std::rc::Rc::new(self.build_pools(w, owned));
        self.pool_cache.insert(key, built.clone());
        built
    }

    pub(super) fn build_pools(
        &self,
        w: &Workload,
        mut owned: Vec<usize>,
    ) -> (Vec<Pool>, BTreeMap<String, usize>) {
        let mut pools = Vec::new();
        // The hinted reservation first.
        owned.sort_by_key(|&ri| {
            (
                w.reservation.as_deref() != Some(self.reservations[ri].name.as_str()),
                ri,
            )
        });
        for &ri in &owned {
            pools.push(Pool {
                key: (Some(ri), Vec::new()),
                member: (0..self.nodes.len())
                    .map(|i| self.reserved_by[i] == Some(ri))
                    .collect(),
                reservation: Some(ri),
                reclaimable: BTreeSet::new(),
            });
        }
        let mut excluded: BTreeMap<String, usize> = BTreeMap::new();
        let mut owned_sorted = owned.clone();
        owned_sorted.sort_unstable();
        let mut shared = Pool {
            key: (None, owned_sorted),
            member: vec![false; self.nodes.len()],
            reservation: None,
            reclaimable: BTreeSet::new(),
        };
        for i in 0..self.nodes.len() {
            match self.reserved_by[i] {
                None => shared.member[i] = true,
                Some(ri) if self.reservations[ri].owns(&w.namespace, &w.labels) => {
                    shared.member[i] = true;
                }
                Some(ri) if self.idle_reservations.contains(&ri) => {
                    shared.member[i] = true;
                    shared.reclaimable.insert(i);
                }
                Some(ri) => {
                    *excluded
                        .entry(format!("reserved for {}", self.reservations[ri].name))
                        .or_insert(0) += 1;
                }
            }
        }
        pools.push(shared);
        (pools, excluded)
    }

    pub(super) fn place_workload(&mut self, w: &Workload) -> Result<WorkloadPlacement, String> {
        let pods = self.pods(w)?;
        if pods.is_empty() {
            return Err("workload has no pods".into());
        }
        if let Some(t) = &w.topology {
            if self.level(&t.level).is_none() {
                return Err(format!(
                    "topology level {:?} is not configured on any node",
                    t.level
                ));
            }
        }
        let shared = self.pools(w);
        let (pools, excluded) = (&shared.0, &shared.1);
        let steps: &[Step] = if self.policy.reconfigure_mig {
            &[Step::Up, Step::Reconfigure, Step::PowerOn]
        } else {
            &[Step::Up, Step::PowerOn]
        };
        let mut last_failure = String::new();
        let mut last_tried = None;
        for (pi, pool) in pools.iter().enumerate() {
            for &step in steps {
                if step == Step::Reconfigure && pods.iter().all(|p| p.req.mig.is_empty()) {
                    continue;
                }
                match self.try_pool(w, &pods, pool, step) {
                    Ok(placement) => return Ok(placement),
                    Err(why) => {
                        last_failure = why;
                        last_tried = Some((pi, step));
                    }
                }
            }
        }
        // Failed everywhere: the last try again, explaining (nothing was
        // committed in between, so it fails the same way).
        if let (Some((pi, step)), false) = (last_tried, self.explain) {
            self.explain = true;
            let again = self.try_pool(w, &pods, &pools[pi], step);
            self.explain = false;
            match again {
                Ok(placement) => return Ok(placement),
                Err(why) => last_failure = why,
            }
        }
        let mut reason = last_failure;
        if !excluded.is_empty() {
            let parts: Vec<String> = excluded
                .iter()
                .map(|(k, n)| format!("{n} nodes {k}"))
                .collect();
            reason.push_str(&format!("; not considered: {}", parts.join(", ")));
        }
        Err(reason)
    }

    /// Candidate nodes of a pool for a step, in preference order: nodes that
    /// are up, then off nodes in racks that already have power, then cold
    /// racks; cheaper power first inside each group; lent nodes last.
    /// The pool's usable nodes in preference order (cheaper power first,
    /// lent nodes last). Whether a node is up is checked by the trial, so
    /// the list stays valid as nodes are planned up.
    pub(super) fn candidates(&mut self, pool: &Pool) -> std::rc::Rc<Vec<usize>> {
        if let Some((c, _)) = self.candidate_cache.get(&pool.key) {
            return c.clone();
        }
        let mut c: Vec<usize> = self
            .static_order
            .iter()
            .copied()
            .filter(|&i| pool.member[i] && self.nodes[i].usable())
            .collect();
        if !pool.reclaimable.is_empty() {
            c.sort_by_key(|i| pool.reclaimable.contains(i));
        }
        let mut index = UpIndex::new(self.nodes.len(), c.len());
        for (p, &i) in c.iter().enumerate() {
            index.pos[i] = p as u32;
            if self.up[i] {
                index.set_up(p);
            }
        }
        let c = std::rc::Rc::new(c);
        self.candidate_cache
            .insert(pool.key.clone(), (c.clone(), index));
        c
    }

    pub(super) fn compute_stats(&self, members: &[usize]) -> DomainStats {
        let mut st = DomainStats {
            off_min_w: u64::MAX,
            ..DomainStats::default()
        };
        for &i in members {
            let f = self.free_gpus[i];
            st.all_count += 1;
            st.all_free += f;
            st.all_slots.add(f);
            if self.up[i] {
                st.up_count += 1;
                st.up_free += f;
                st.up_slots.add(f);
            } else {
                st.off_max = st.off_max.max(f);
                st.off_min_w = st.off_min_w.min(self.power_w[i]);
            }
        }
        if st.off_min_w == u64::MAX {
            st.off_min_w = 0;
        }
        st
    }

    /// Capacity per domain, recomputing only domains whose nodes changed.
    pub(super) fn domain_stats(
        &mut self,
        pool: &Pool,
        level: &str,
        index: &LevelIndex,
        lists: &[Vec<usize>],
    ) -> Rc<Vec<DomainStats>> {
        let key = (pool.key.clone(), level.to_owned());
        let mut cache = match self.stats_cache.remove(&key) {
            Some(c) => c,
            None => StatsCache {
                seen: self.touched.len(),
                stats: Rc::new(lists.iter().map(|m| self.compute_stats(m)).collect()),
            },
        };
        if cache.seen < self.touched.len() {
            let mut dirty: BTreeSet<usize> = BTreeSet::new();
            for &i in &self.touched[cache.seen..] {
                if let Some(d) = index.of_node[i] {
                    dirty.insert(d);
                }
            }
            // The previous evaluation's handle is gone: no copy.
            let stats = Rc::make_mut(&mut cache.stats);
            for d in dirty {
                stats[d] = self.compute_stats(&lists[d]);
            }
            cache.seen = self.touched.len();
        }
        let out = cache.stats.clone();
        self.stats_cache.insert(key, cache);
        out
    }

    /// [`Self::candidates`] split by domain at `level`.
    pub(super) fn domain_members(
        &mut self,
        pool: &Pool,
        level: &str,
        index: &LevelIndex,
    ) -> std::rc::Rc<Vec<Vec<usize>>> {
        let key = (pool.key.clone(), level.to_owned());
        if let Some(c) = self.domain_cache.get(&key) {
            return c.clone();
        }
        let lists: Vec<Vec<usize>> = index
            .members
            .iter()
            .map(|m| {
                let mut v: Vec<usize> = m
                    .iter()
                    .copied()
                    .filter(|&i| pool.member[i] && self.nodes[i].usable())
                    .collect();
                if !pool.reclaimable.is_empty() {
                    v.sort_by_key(|i| pool.reclaimable.contains(i));
                }
                v
            })
            .collect();
        let c = std::rc::Rc::new(lists);
        self.domain_cache.insert(key, c.clone());
        c
    }

    pub(super) fn try_pool(
        &mut self,
        w: &Workload,
        pods: &[PodItem<'_>],
        pool: &Pool,
        step: Step,
    ) -> Result<WorkloadPlacement, String> {
        if step != Step::Reconfigure {
            let (domain, trial) = self.evaluate(w, pods, pool, step, &BTreeMap::new())?;
            return Ok(self.commit(w, pool, domain, trial, BTreeMap::new()));
        }
        // Reconfigure as few idle GPUs as it takes: one more each round.
        let candidates = self.candidates(pool);
        let options = mig::options(self, pods, &candidates);
        if options.is_empty() {
            return Err(
                "no idle MIG-capable GPU on a running node can take the requested profiles".into(),
            );
        }
        let mut last = String::new();
        for k in 1..=options.len() {
            let overrides = mig::build(self, &options[..k]);
            match self.evaluate(w, pods, pool, step, &overrides) {
                Ok((domain, trial)) => return Ok(self.commit(w, pool, domain, trial, overrides)),
                Err(why) => last = why,
            }
        }
        Err(last)
    }
}
