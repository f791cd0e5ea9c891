//! What is already bound: pods the scheduler placed, devices running pods hold,
//! and reservations whose owners have nothing on them.

use super::*;

/// Bound pods node by node (node, namespace, name): translations list them
/// so already, and checking is cheaper than sorting.
fn in_node_order(bound: &[crate::demand::BoundPod]) -> Vec<&crate::demand::BoundPod> {
    let mut bound: Vec<&crate::demand::BoundPod> = bound.iter().collect();
    let order = |a: &&crate::demand::BoundPod, b: &&crate::demand::BoundPod| {
        (&a.node, &a.namespace, &a.name).cmp(&(&b.node, &b.namespace, &b.name))
    };
    if !bound.is_sorted_by(|a, b| order(a, b).is_le()) {
        bound.sort_by(order);
    }
    bound
}

impl Planner<'_> {
    /// [`Planner::node_index`] of `name`, the node of the next pod in node
    /// order: `last` (the one before's) answers again without a search.
    fn node_index_of_next<'n>(
        &self,
        last: &mut Option<(&'n str, Option<usize>)>,
        name: &'n str,
    ) -> Option<usize> {
        match *last {
            Some((before, i)) if before == name => i,
            _ => {
                let i = self.node_index(name);
                *last = Some((name, i));
                i
            }
        }
    }

    pub(super) fn bind(&mut self, demand: &Demand) {
        let mut owner_busy = BTreeSet::new();
        // (node, DaemonSet) with its pod bound there.
        let mut bound_daemons: BTreeSet<(usize, &str)> = BTreeSet::new();
        let mut last = None;
        for pod in in_node_order(&demand.bound) {
            let Some(i) = self.node_index_of_next(&mut last, &pod.node) else {
                self.notes.push(format!(
                    "bound pod {}/{} is on unknown node {}",
                    pod.namespace, pod.name, pod.node
                ));
                continue;
            };
            // A dark machine whose Node Accord deleted runs none of the
            // pods still bound to it: the pod garbage collector deletes
            // them (orphaned), and its DaemonSets' pods come back new
            // (`daemon_pods`). Left out whether or not they are gone yet,
            // so the plan is the same either way.
            if self.nodes[i].node_deleted {
                continue;
            }
            // GPUs and MIG devices the pod holds through the device plugin;
            // those it names are marked below, the rest after that.
            let mut unnamed: Vec<(Option<String>, u32)> = Vec::new();
            match PodRequest::parse_requests(&pod.requests) {
                Ok(mut req) => {
                    unnamed.push((None, req.gpus));
                    unnamed.extend(req.mig.iter().map(|(p, n)| (Some(p.clone()), *n)));
                    req.gpus = 0;
                    req.mig.clear();
                    let use_ = Rc::make_mut(&mut self.uses[i]);
                    use_.add(&req);
                    use_.attach(&pod.csi_volumes);
                    if !pod.keeps_node_busy() {
                        use_.node_agents = use_.node_agents.saturating_add(1);
                    }
                }
                Err(e) => self
                    .notes
                    .push(format!("bound pod {}/{}: {e}", pod.namespace, pod.name)),
            }
            for dev in &pod.devices {
                let Some(di) = self.nodes[i]
                    .devices
                    .iter()
                    .position(|d| *d.name == *dev.name)
                else {
                    self.notes.push(format!(
                        "bound pod {}/{} holds unknown device {} on {}",
                        pod.namespace, pod.name, dev.name, pod.node
                    ));
                    continue;
                };
                let device = &self.nodes[i].devices[di];
                let profile = match device.kind {
                    DeviceKind::Mig => device.mig_profile().map(str::to_owned),
                    _ => None,
                };
                if dev.capacity.is_empty()
                    && matches!(device.kind, DeviceKind::Gpu | DeviceKind::Mig)
                {
                    if let Some(n) = unnamed.iter_mut().find(|(p, _)| *p == profile) {
                        n.1 = n.1.saturating_sub(1);
                    }
                }
                let use_ = &mut Rc::make_mut(&mut self.uses[i]).devices[di];
                if dev.capacity.is_empty() {
                    use_.exclusive = true;
                } else {
                    use_.shares += 1;
                    for (k, q) in &dev.capacity {
                        // Checked: a negative share frees nothing.
                        let v = quantity::parse(q).unwrap_or(0).max(0);
                        let c = use_.consumed.entry(k.clone()).or_insert(0);
                        *c = c.saturating_add(v);
                    }
                }
            }
            // The ones the kubelet assigned, where the node's agent says.
            for id in &pod.device_ids {
                let Some(di) = plugin_device(&self.nodes[i], id) else {
                    self.notes.push(format!(
                        "bound pod {}/{} holds device-plugin device {id} that {} does not have",
                        pod.namespace, pod.name, pod.node
                    ));
                    continue;
                };
                let device = &self.nodes[i].devices[di];
                let profile = match device.kind {
                    DeviceKind::Mig => device.mig_profile().map(str::to_owned),
                    _ => None,
                };
                if let Some(n) = unnamed.iter_mut().find(|(p, _)| *p == profile) {
                    n.1 = n.1.saturating_sub(1);
                }
                Rc::make_mut(&mut self.uses[i]).devices[di].exclusive = true;
            }
            // The device plugin chose which ones; not knowing, take the
            // first free ones, so the count at least is right.
            for (profile, mut n) in unnamed {
                for di in 0..self.nodes[i].devices.len() {
                    if n == 0 {
                        break;
                    }
                    let d = &self.nodes[i].devices[di];
                    let fits = match &profile {
                        None => d.kind == DeviceKind::Gpu,
                        Some(p) => d.kind == DeviceKind::Mig && d.mig_profile() == Some(p.as_str()),
                    };
                    if fits && self.uses[i].devices[di].is_free() {
                        Rc::make_mut(&mut self.uses[i]).devices[di].exclusive = true;
                        n -= 1;
                    }
                }
                if n > 0 {
                    self.notes.push(format!(
                        "bound pod {}/{} holds {n} more {} than {} has free",
                        pod.namespace,
                        pod.name,
                        profile
                            .as_deref()
                            .map_or("GPUs".to_owned(), |p| format!("MIG {p} devices")),
                        pod.node
                    ));
                }
            }
            if let Some(rel) = &mut self.relations {
                rel.add(i, Rc::new(relations::bound_facts(pod)));
            }
            if let Some(ds) = &pod.daemon_set {
                bound_daemons.insert((i, ds.as_str()));
            }
            if let Some(ri) = self.reserved_by[i] {
                if self.reservations[ri].owns(&pod.namespace, &pod.labels) {
                    owner_busy.insert(ri);
                }
            }
        }
        self.daemon_pods(demand, &bound_daemons);
        for w in &demand.workloads {
            for (ri, r) in self.reservations.iter().enumerate() {
                if r.active(self.now) && r.owns(&w.namespace, &w.labels) {
                    owner_busy.insert(ri);
                }
            }
        }
        for (ri, r) in self.reservations.iter().enumerate() {
            if r.lendable && r.active(self.now) && !owner_busy.contains(&ri) {
                self.idle_reservations.insert(ri);
            }
        }
    }

    /// The DaemonSet pods each node will run and does not yet (a node off,
    /// booting, or just up): their requests are taken before any workload's,
    /// as NodeResourcesFit will find them there. A node runs a DaemonSet's
    /// pod where the template's node selector and affinity admit it and its
    /// NoSchedule and NoExecute taints are tolerated (the DaemonSet
    /// controller's `predicates`, pkg/controller/daemon/daemon_controller.go).
    fn daemon_pods(&mut self, demand: &Demand, bound: &BTreeSet<(usize, &str)>) {
        let mut sets: Vec<&crate::demand::DaemonSetPods> = demand.daemon_sets.iter().collect();
        sets.sort_by_key(|d| d.key());
        for ds in sets {
            let key = ds.key();
            let mut req = match PodRequest::parse(&ds.pod) {
                Ok(r) => r,
                Err(e) => {
                    self.notes.push(format!("DaemonSet {key}: {e}"));
                    continue;
                }
            };
            // Devices are not taken for them: a node agent asking for a
            // GPU is left to its node.
            req.gpus = 0;
            req.mig.clear();
            for i in 0..self.nodes.len() {
                if bound.contains(&(i, key.as_str()))
                    || static_fit(&ds.pod, &self.nodes[i]).is_err()
                {
                    continue;
                }
                let use_ = Rc::make_mut(&mut self.uses[i]);
                use_.add(&req);
                use_.node_agents = use_.node_agents.saturating_add(1);
            }
        }
    }
}
