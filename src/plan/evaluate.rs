//! Trying a gang on a pool at one step: per domain or flat, first fit with
//! the least fragmentation, each pod on one node.

use super::*;

impl Planner<'_> {
    /// Places the gang over the pool's candidates for `step`, honouring its
    /// topology.
    pub(super) fn evaluate(
        &mut self,
        w: &Workload,
        pods: &[PodItem<'_>],
        pool: &Pool,
        step: Step,
        overrides: &BTreeMap<usize, mig::Override>,
    ) -> Result<(Option<String>, Trial), String> {
        let min = w.min() as usize;
        let no_nodes = || match step {
            Step::PowerOn => "no usable nodes".to_owned(),
            _ => "no usable nodes are up".to_owned(),
        };
        let need_gpus: usize = pods.iter().take(min).map(|p| p.whole_gpus).sum();
        // The smallest whole-GPU pod: no node with fewer free GPUs takes
        // any pod of the gang.
        let least_gpus = pods.iter().map(|p| p.whole_gpus).min().unwrap_or(0);
        let per = PodsPer::new(least_gpus);
        // Not all the nodes that are up together hold the gang: this step
        // fails (said only when explaining, by the full evaluation).
        if !self.explain
            && step == Step::Up
            && need_gpus > 0
            && overrides.is_empty()
            && (self.up_free < need_gpus || self.up_slots.pods_by(&per) < min)
        {
            return Err(no_nodes());
        }
        let Some(topology) = &w.topology else {
            let candidates = self.candidates(pool);
            if !candidates
                .iter()
                .any(|&i| self.up[i] || step == Step::PowerOn)
            {
                return Err(no_nodes());
            }
            let mut index = self
                .candidate_cache
                .remove(&pool.key)
                .map(|(_, idx)| idx)
                .unwrap_or_default();
            let trial = self.trial_indexed(
                pods,
                &candidates,
                overrides,
                step == Step::PowerOn,
                Some(&mut index),
            );
            self.candidate_cache
                .insert(pool.key.clone(), (candidates.clone(), index));
            return if trial.pods.len() >= min {
                Ok((None, trial))
            } else {
                Err(self.explain_flat(w, pods, &trial))
            };
        };
        let level = topology.level.as_str();
        let Some(index) = self.level(level) else {
            return Err(format!("no usable node has a {level}"));
        };
        let names = &index.names;
        let lists = self.domain_members(pool, level, &index);
        let mut best: Option<(Cost, String, Trial)> = None;
        let mut partial: Vec<(usize, String, Trial)> = Vec::new();
        // Lower bound of power-ons per domain (whole GPUs missing on its up
        // nodes over the most an off node offers): try likely-cheap domains
        // first and stop once no remaining domain can beat the best.
        let mut order: Vec<(Cost, usize)> = Vec::with_capacity(names.len());
        let mut domains_seen = 0;
        // (domain, nodes, why) of domains too small for the gang.
        let mut too_small: Vec<(usize, usize, TooSmall)> = Vec::new();
        let stats = self.domain_stats(pool, level, &index, &lists);
        for (d, st) in stats.iter().enumerate() {
            let (count, total, slots) = if step == Step::PowerOn {
                (st.all_count, st.all_free, &st.all_slots)
            } else {
                (st.up_count, st.up_free, &st.up_slots)
            };
            if count == 0 {
                continue;
            }
            domains_seen += 1;
            if need_gpus > 0 && overrides.is_empty() {
                if total < need_gpus {
                    if self.explain {
                        too_small.push((d, count, TooSmall::Gpus(total)));
                    }
                    continue;
                }
                let fit = slots.pods_by(&per);
                if fit < min {
                    if self.explain {
                        too_small.push((d, count, TooSmall::Pods(fit, least_gpus)));
                    }
                    continue;
                }
            }
            let deficit = need_gpus.saturating_sub(st.up_free);
            let lb = if deficit == 0 || !overrides.is_empty() {
                0
            } else {
                deficit.div_ceil(st.off_max.max(1))
            };
            let bound = Cost {
                power_ons: lb,
                cold_racks: usize::from(lb > 0 && st.up_count == 0),
                power_w: lb as u64 * st.off_min_w,
                reconfigs: 0,
                boot_s: 0,
            };
            order.push((bound, d));
        }
        // Usually the first domain or two settle it: a heap, not a sort
        // of every domain.
        let mut order: std::collections::BinaryHeap<std::cmp::Reverse<(Cost, usize)>> =
            order.into_iter().map(std::cmp::Reverse).collect();
        while let Some(std::cmp::Reverse((bound, d))) = order.pop() {
            // Sorted by a lower bound of the cost: nothing later can beat
            // the best found.
            if best.as_ref().is_some_and(|(c, _, _)| *c <= bound) {
                break;
            }
            let value = names[d].as_str();
            let trial = self.trial(pods, &lists[d], overrides, step == Step::PowerOn);
            if trial.pods.len() >= min {
                let cost = self.cost(&trial, overrides);
                if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                    let free = cost.power_ons == 0 && cost.reconfigs == 0;
                    best = Some((cost, value.to_string(), trial));
                    if free {
                        break;
                    }
                }
            } else if self.explain {
                partial.push((trial.pods.len(), value.to_string(), trial));
            }
        }
        if let Some((_, value, trial)) = best {
            return Ok((Some(format!("{level}={value}")), trial));
        }
        if domains_seen == 0 {
            return Err(no_nodes());
        }
        if !self.explain && topology.mode == TopologyMode::Required {
            return Err(String::new());
        }
        if best.is_none() {
            // Only the best domain is explained (most pods, then first by
            // name): of those too small, the first by name.
            let first = too_small
                .into_iter()
                .min_by(|a, b| names[a.0].cmp(&names[b.0]));
            if let Some((d, count, small)) = first {
                let detail = match small {
                    TooSmall::Gpus(total) => format!("{total} GPUs free, gang needs {need_gpus}"),
                    TooSmall::Pods(fit, g) => {
                        format!("{fit} pods of {g} GPUs fit on nodes' free GPUs, gang needs {min}")
                    }
                };
                let group = FailureGroup {
                    nodes: count,
                    detail,
                    names: Vec::new(),
                };
                let why = BTreeMap::from([("insufficient GPUs".to_owned(), group)]);
                partial.push((
                    0,
                    names[d].clone(),
                    Trial {
                        first_failure: Some((String::new(), why)),
                        ..Trial::default()
                    },
                ));
            }
        }
        if topology.mode == TopologyMode::Required {
            return Err(self.explain_domains(w, level, domains_seen, partial));
        }
        // Preferred: span as few domains as possible, fullest domains first.
        let candidates = self.candidates(pool);
        if need_gpus > 0 && overrides.is_empty() {
            // Not even all domains together (and nodes outside any) have
            // room for the gang: say so without trying.
            let slots = |st: &DomainStats| {
                if step == Step::PowerOn {
                    st.all_slots.pods_by(&per)
                } else {
                    st.up_slots.pods_by(&per)
                }
            };
            let mut fit: usize = stats.iter().map(slots).fold(0, usize::saturating_add);
            if fit < min {
                fit += candidates
                    .iter()
                    .filter(|&&i| index.of_node[i].is_none())
                    .filter(|&&i| self.up[i] || step == Step::PowerOn)
                    .map(|&i| self.free_gpus[i] / least_gpus)
                    .sum::<usize>();
            }
            if fit < min {
                let where_ = if step == Step::PowerOn {
                    "usable"
                } else {
                    "up"
                };
                return Err(format!(
                    "{} needs {min} pods of {least_gpus} GPUs; the {where_} nodes' free GPUs hold {fit}",
                    w.key()
                ));
            }
        }
        // Without explanations, domains (and nodes outside any) whose free
        // GPUs hold no pod of the gang are left out: first fit would pass
        // over each of their nodes for every pod.
        let skip_full = !self.explain && least_gpus > 0 && overrides.is_empty();
        let holds = |st: &DomainStats| {
            !skip_full
                || if step == Step::PowerOn {
                    st.all_slots.pods_by(&per) > 0
                } else {
                    st.up_slots.pods_by(&per) > 0
                }
        };
        let mut ordered: Vec<(usize, usize)> = (0..names.len())
            .filter(|&d| !lists[d].is_empty() && holds(&stats[d]))
            .map(|d| (stats[d].all_free, d))
            .collect();
        ordered.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut order = std::mem::take(&mut self.order_buf);
        order.clear();
        order.extend(ordered.iter().flat_map(|&(_, d)| lists[d].iter().copied()));
        order.extend(candidates.iter().copied().filter(|&i| {
            index.of_node[i].is_none()
                && (!skip_full
                    || ((self.up[i] || step == Step::PowerOn) && self.free_gpus[i] >= least_gpus))
        }));
        let trial = self.trial(pods, &order, overrides, step == Step::PowerOn);
        self.order_buf = order;
        if trial.pods.len() >= min {
            Ok((None, trial))
        } else {
            Err(self.explain_flat(w, pods, &trial))
        }
    }

    /// Places the pods first-fit over `order`: nodes already up (or already
    /// chosen for power-on in this trial) before nodes that would need it.
    /// Once a replica of a pod set fits nowhere, its identical siblings are
    /// not tried again.
    pub(super) fn trial(
        &mut self,
        pods: &[PodItem<'_>],
        order: &[usize],
        overrides: &BTreeMap<usize, mig::Override>,
        allow_off: bool,
    ) -> Trial {
        self.trial_indexed(pods, order, overrides, allow_off, None)
    }

    /// [`Self::trial`], with an index of the up nodes in `order` when the
    /// list is long.
    pub(super) fn trial_indexed(
        &mut self,
        pods: &[PodItem<'_>],
        order: &[usize],
        overrides: &BTreeMap<usize, mig::Override>,
        allow_off: bool,
        mut up_index: Option<&mut UpIndex>,
    ) -> Trial {
        let mut t = Trial::default();
        if let Some(rel) = &mut self.relations {
            rel.new_trial();
        }
        let mut rack_kw: BTreeMap<usize, f64> = BTreeMap::new();
        let mut hopeless: Vec<*const PodSpec> = Vec::new();
        // First fit: a node an identical earlier replica skipped cannot fit
        // this one either, so each pass resumes where the last replica of
        // the same pod set was placed.
        let mut cursors: Vec<(*const PodSpec, [usize; 3])> = Vec::new();
        let passes = if allow_off { 3 } else { 1 };
        for pod in pods {
            let spec_ptr = pod.spec as *const PodSpec;
            if hopeless.contains(&spec_ptr) {
                continue;
            }
            let ci = match cursors.iter().position(|(p, _)| *p == spec_ptr) {
                Some(ci) => ci,
                None => {
                    cursors.push((spec_ptr, [0; 3]));
                    cursors.len() - 1
                }
            };
            let mut failures: FailureCounts = BTreeMap::new();
            let mut gpu_short = 0usize;
            let mut placed = None;
            if self.policy.placement == Placement::LeastFragmentation && overrides.is_empty() {
                placed = self.least_fragmentation(pod, order, &t, &rack_kw);
            }
            // Affinity and spread can admit a node that an earlier replica
            // could not use: scan such pods from the start each time.
            let relations = &pod.spec.relations;
            if !relations.affinity.is_empty() || !relations.spread.is_empty() {
                cursors[ci].1 = [0; 3];
            }
            let resumed = cursors[ci].1 != [0; 3];
            // A second scan from the start only explains a failure fully.
            for full in [false, true] {
                if placed.is_some() || (full && (!resumed || !self.explain)) {
                    break;
                }
                if full {
                    failures.clear();
                    gpu_short = 0;
                }
                'passes: for pass in 0..passes {
                    let start = if full { 0 } else { cursors[ci].1[pass] };
                    // Over an indexed list, pass 0 visits only up nodes past
                    // the full prefix, passes 1 and 2 only nodes that are off.
                    let gpu_pod = pod.whole_gpus > 0 && overrides.is_empty();
                    let mut from = start;
                    if let (Some(idx), 0) = (up_index.as_deref_mut(), pass) {
                        if gpu_pod {
                            idx.advance_full(|q| self.free_gpus[order[q]] == 0);
                            from = from.max(idx.full);
                        }
                    }
                    let idx = up_index.as_deref();
                    let mut next = from;
                    loop {
                        let pos = match idx {
                            Some(idx) => match idx.next(next, pass == 0) {
                                Some(p) => p,
                                None => break,
                            },
                            None if next < order.len() => next,
                            None => break,
                        };
                        next = pos + 1;
                        let i = order[pos];
                        // Pass 0: nodes up now; 1: off in racks with power;
                        // 2: off in cold racks.
                        let node_pass = if self.up[i] {
                            0
                        } else if self.rack_of[i].is_some_and(|r| self.rack_up_nodes[r] > 0) {
                            1
                        } else {
                            2
                        };
                        if node_pass != pass {
                            continue;
                        }
                        // The common "no" first, without building a message.
                        if pod.whole_gpus > self.free_gpus[i]
                            && pod.req.mig.is_empty()
                            && overrides.is_empty()
                        {
                            gpu_short += 1;
                            continue;
                        }
                        match self.fit_one(pod, i, &t, overrides, &rack_kw) {
                            Ok(found) if !full => {
                                cursors[ci].1[pass] = pos;
                                placed = Some((i, found));
                                break 'passes;
                            }
                            Ok(_) => {}
                            Err(f) => {
                                let e = failures.entry(f.category).or_insert(FailureGroup {
                                    detail: f.detail,
                                    ..FailureGroup::default()
                                });
                                e.nodes += 1;
                                if self.explain && e.names.len() < NAMED_NODES {
                                    e.names.push(self.nodes[i].name.clone());
                                }
                            }
                        }
                    }
                    if !full {
                        cursors[ci].1[pass] = order.len();
                    }
                }
            }
            match placed {
                Some((i, (allocs, use_))) => {
                    if !self.up[i] && t.power_ons.insert(i) {
                        if let Some(r) = self.rack_of[i] {
                            *rack_kw.entry(r).or_insert(0.0) += self.nodes[i].power_kw;
                        }
                    }
                    if !pod.spec.volumes.waiting.is_empty() {
                        let node = overrides.get(&i).map_or(&*self.nodes[i], |o| &o.node);
                        let used = t.uses.get(&i).unwrap_or(&*self.uses[i]);
                        let cx = self.volume_context(i, &t, used);
                        if let Ok(chosen) = claim_choices(&pod.spec.volumes, node, cx) {
                            t.claims.extend(chosen);
                        }
                    }
                    t.uses.insert(i, use_);
                    t.pods.push((pod.name.clone(), i, allocs));
                    if let Some(f) = &pod.facts {
                        t.placed.push((i, f.clone()));
                    }
                }
                None => {
                    if gpu_short > 0 {
                        let e = failures.entry("insufficient GPUs".to_owned()).or_insert(
                            FailureGroup {
                                detail: format!("{} requested", pod.whole_gpus),
                                ..FailureGroup::default()
                            },
                        );
                        e.nodes += gpu_short;
                    }
                    hopeless.push(pod.spec);
                    if t.first_failure.is_none() {
                        t.first_failure = Some((pod.name.clone(), failures));
                    }
                }
            }
        }
        t
    }

    /// Among nodes that are up, the one where the pod fits with the least
    /// growth of GPU fragmentation for the pending mix.
    #[allow(clippy::type_complexity)]
    pub(super) fn least_fragmentation(
        &mut self,
        pod: &PodItem<'_>,
        order: &[usize],
        t: &Trial,
        rack_kw: &BTreeMap<usize, f64>,
    ) -> Option<(usize, (Vec<DeviceAllocation>, NodeUse))> {
        let no_overrides = BTreeMap::new();
        // (score, free GPU capacity when the pod takes no GPU, node, fit)
        let mut best: Option<(u32, Milli, usize, (Vec<DeviceAllocation>, NodeUse))> = None;
        for &i in order {
            if !self.up[i] || pod.whole_gpus > self.free_gpus[i] {
                continue;
            }
            let Ok(found) = self.fit_one(pod, i, t, &no_overrides, rack_kw) else {
                continue;
            };
            let node = &self.nodes[i];
            let before_use = t.uses.get(&i).unwrap_or(&*self.uses[i]);
            let free_before = fragmentation::free(node, before_use);
            let free_after = fragmentation::free(node, &found.1);
            let growth = fragmentation::fragmentation(&free_after, &self.mix)
                - fragmentation::fragmentation(&free_before, &self.mix);
            let score = fragmentation::score(growth);
            // Equal scores go to the earlier node in preference order, as
            // first fit would: packing the same nodes keeps others whole.
            // A pod that takes no GPU goes, among equals, where the fewest
            // GPUs are free: there its CPU and memory strand the least.
            let gpu_free = if free_after.same_gpus(&free_before) {
                free_after.gpu_total()
            } else {
                0
            };
            let better = match &best {
                None => true,
                Some((s, f, _, _)) => score > *s || (score == *s && gpu_free < *f),
            };
            if better {
                best = Some((score, gpu_free, i, found));
            }
        }
        best.map(|(_, _, i, found)| (i, found))
    }

    /// What pods placed so far hold that a pod's volumes on node `i`
    /// contend for.
    fn volume_context<'a>(
        &'a self,
        i: usize,
        t: &'a Trial,
        used: &'a NodeUse,
    ) -> VolumeContext<'a> {
        VolumeContext {
            planned: [&self.claims, &t.claims],
            attached: &used.csi,
            limits: self.csi_limits.get(&i),
        }
    }

    pub(super) fn fit_one(
        &mut self,
        pod: &PodItem<'_>,
        i: usize,
        t: &Trial,
        overrides: &BTreeMap<usize, mig::Override>,
        rack_kw: &BTreeMap<usize, f64>,
    ) -> Result<(Vec<DeviceAllocation>, NodeUse), Failure> {
        let (node, prints) = match overrides.get(&i) {
            Some(o) => (&o.node, o.prints.as_slice()),
            None => (&*self.nodes[i], &*self.prints[i]),
        };
        // PreFilter's verdict comes before any node's filters, as the
        // scheduler's does.
        if let Some(b) = pod.spec.volumes.blocked.as_ref().filter(|b| !b.at_filter) {
            return Err(Failure::new(format!("{}: {}", b.plugin, b.reason), ""));
        }
        if pod.whole_gpus > 0 && pod.req.mig.is_empty() && !overrides.contains_key(&i) {
            let free = match t.uses.get(&i) {
                Some(u) => count_free_gpus(node, u),
                None => self.free_gpus[i],
            };
            if free < pod.whole_gpus {
                return Err(Failure::new(
                    "insufficient GPUs",
                    format!("{} requested, {free} free", pod.whole_gpus),
                ));
            }
        }
        static_fit(pod.spec, node)?;
        let used = t
            .uses
            .get(&i)
            .or_else(|| overrides.get(&i).map(|o| &o.uses))
            .unwrap_or(&*self.uses[i]);
        self.host_ports_fit(pod, i, t)?;
        resource_fit(&pod.req, node, used)?;
        let volumes = &pod.spec.volumes;
        if !volumes.is_empty() {
            volumes_fit(volumes, node, self.volume_context(i, t, used))?;
        }
        self.relations_fit(pod, node, t)?;
        if !self.up[i] && !t.power_ons.contains(&i) {
            self.power_budget_ok(i, rack_kw)?;
        }
        let mut ctx = DeviceContext {
            cel: &mut self.cel,
            classes: &self.classes,
            prints,
            node_key: i as u64,
        };
        let (allocs, devices) = allocate_compiled(&pod.devices, node, &used.devices, &mut ctx)?;
        let mut next = NodeUse {
            cpu: used.cpu,
            memory: used.memory,
            pods: used.pods,
            node_agents: used.node_agents,
            extended: used.extended.clone(),
            devices,
            csi: used.csi.clone(),
        };
        next.add(&pod.req);
        next.attach(&volumes.csi);
        Ok((allocs, next))
    }
}
