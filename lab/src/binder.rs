//! A stand-in for kube-scheduler in the local test lab.
//!
//! The lab runs pods against an API server with no scheduler, so something has
//! to decide which pending pods bind to which nodes. This module does that, one
//! pass at a time, over the raw JSON the API server stores.
//!
//! It is written from kube-scheduler's behaviour, not from Accord's planner
//! (`fit`, `plan`), and shares no code with it: the lab checks that the planner's
//! predictions agree with what a scheduler does, and that check only means
//! something if the two were not derived from each other.
//!
//! Simplified on purpose: filters are node readiness, cordons, NoSchedule and
//! NoExecute taints, node selector and required node affinity, gang topology and
//! resources; scoring is only "fewest free GPUs left" packing. There is no
//! preemption, pod (anti-)affinity, spread, ports, volumes or DRA.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Bind pod `namespace/pod` to `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub namespace: String,
    pub pod: String,
    pub node: String,
}

/// Pod `namespace/pod` stays pending this pass, for the reason in `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    pub namespace: String,
    pub pod: String,
    pub message: String,
}

/// The outcome of one pass, each list in the order decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    pub bind: Vec<Binding>,
    pub unschedulable: Vec<Unschedulable>,
}

const GPU: &str = "nvidia.com/gpu";
const PODS: &str = "pods";

/// Amounts per resource name, in milli-units.
type Resources = BTreeMap<String, i128>;
/// What is already in use on each node, by node name.
type Used<'a> = BTreeMap<&'a str, Resources>;
/// A gang placement tried in one domain: pods placed, resulting use, per-member outcome.
type Trial<'a> = (usize, Used<'a>, Vec<Result<usize, String>>);
/// A gang's topology domain: (node label key, value).
type Domain<'a> = Option<(&'a str, &'a str)>;

/// One scheduling pass. `nodes`: v1 Node objects; `pods`: v1 Pod objects (bound and unbound);
/// `pod_groups`: scheduling.k8s.io/v1beta1 PodGroup objects. Pure and deterministic.
pub fn decide(nodes: &[Value], pods: &[Value], pod_groups: &[Value]) -> Decisions {
    let mut nodes: Vec<Node> = nodes.iter().filter_map(Node::new).collect();
    // Sorted by name, so the first best node found is also the tie-break winner.
    nodes.sort_by(|a, b| a.name.cmp(b.name));
    nodes.dedup_by(|a, b| a.name == b.name);

    let mut used = Used::new();
    let mut bound_members: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    let mut pending = Vec::new();
    for obj in pods.iter().filter(|p| is_live(p)) {
        let pod = Pod::new(obj);
        match obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            Some(node) => {
                commit(&mut used, node, &pod.request);
                if let Some(group) = pod.group {
                    bound_members
                        .entry((pod.namespace, group))
                        .or_default()
                        .push(node);
                }
            }
            None => pending.push(pod),
        }
    }
    pending.sort_by_key(Pod::order);

    let mut out = Decisions::default();
    let mut seen_groups = BTreeSet::new();
    for pod in &pending {
        let Some(group) = pod.group else {
            match place(&nodes, &used, pod, None) {
                Ok(i) => {
                    commit(&mut used, nodes[i].name, &pod.request);
                    out.bind.push(pod.binding(nodes[i].name));
                }
                Err(message) => out.unschedulable.push(pod.unschedulable(message)),
            }
            continue;
        };
        // A gang is handled once, at the position of its earliest member.
        if !seen_groups.insert((pod.namespace, group)) {
            continue;
        }
        let members: Vec<&Pod> = pending
            .iter()
            .filter(|p| p.namespace == pod.namespace && p.group == Some(group))
            .collect();
        let found = pod_groups.iter().find(|g| {
            g["metadata"]["name"] == group
                && g["metadata"]["namespace"].as_str().unwrap_or("default") == pod.namespace
        });
        match found {
            None => {
                let message = format!("PodGroup {group} not found");
                let unschedulable = members.iter().map(|m| m.unschedulable(message.clone()));
                out.unschedulable.extend(unschedulable);
            }
            Some(pg) => {
                let bound = bound_members.get(&(pod.namespace, group));
                let gang = Gang {
                    group: pg,
                    name: format!("{}/{group}", pod.namespace),
                    members,
                    bound: bound.map_or(&[][..], Vec::as_slice),
                };
                gang.schedule(&nodes, &mut used, &mut out);
            }
        }
    }
    out
}

struct Gang<'a, 'p> {
    group: &'a Value,
    name: String,
    members: Vec<&'p Pod<'a>>,
    /// Nodes of the members that are already bound.
    bound: &'p [&'a str],
}

impl<'a> Gang<'a, '_> {
    /// All-or-nothing: place every pending member on a trial copy of `used`, per
    /// candidate domain, and commit the best trial only if it reaches minCount.
    fn schedule(&self, nodes: &[Node<'a>], used: &mut Used<'a>, out: &mut Decisions) {
        let spec = &self.group["spec"];
        let min = spec["schedulingPolicy"]["gang"]["minCount"]
            .as_u64()
            .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let total = self.bound.len() + self.members.len();
        let mut fail = |fit: usize, why: &str| {
            let message = format!(
                "gang {}: {fit} of {total} pods fit (minCount {min}): {why}",
                self.name
            );
            let unschedulable = self
                .members
                .iter()
                .map(|m| m.unschedulable(message.clone()));
            out.unschedulable.extend(unschedulable);
        };
        let domains = match self.domains(nodes, spec) {
            Ok(domains) => domains,
            Err(why) => return fail(self.bound.len(), &why),
        };

        let mut best: Option<Trial> = None;
        for domain in domains {
            let mut trial = used.clone();
            let results: Vec<_> = self
                .members
                .iter()
                .map(|pod| {
                    let placed = place(nodes, &trial, pod, domain);
                    if let Ok(i) = placed {
                        commit(&mut trial, nodes[i].name, &pod.request);
                    }
                    placed
                })
                .collect();
            let placed = results.iter().filter(|r| r.is_ok()).count();
            // Strictly more, so ties go to the earlier domain in sorted order.
            if best.as_ref().is_none_or(|(n, ..)| placed > *n) {
                best = Some((placed, trial, results));
            }
        }
        let Some((placed, trial, results)) = best else {
            return fail(self.bound.len(), "no candidate nodes");
        };
        let fit = self.bound.len() + placed;
        if fit < min {
            let why = match results.iter().find_map(|r| r.as_ref().err()) {
                Some(message) => message.clone(),
                None => format!("waiting for {} more pods", min - fit),
            };
            return fail(fit, &why);
        }
        *used = trial;
        for (pod, result) in self.members.iter().zip(results) {
            match result {
                Ok(i) => out.bind.push(pod.binding(nodes[i].name)),
                Err(message) => out.unschedulable.push(pod.unschedulable(message)),
            }
        }
    }

    /// Candidate topology domains, in the order to try them.
    fn domains(&self, nodes: &[Node<'a>], spec: &'a Value) -> Result<Vec<Domain<'a>>, String> {
        let Some(key) = spec["schedulingConstraints"]["topology"][0]["key"]
            .as_str()
            .filter(|k| !k.is_empty())
        else {
            return Ok(vec![None]);
        };
        let label_of = |name: &str| nodes.iter().find(|n| n.name == name)?.label(key);
        if self.bound.is_empty() {
            let values: BTreeSet<&str> = nodes.iter().filter_map(|n| n.label(key)).collect();
            if values.is_empty() {
                return Err(format!("no node has label {key}"));
            }
            return Ok(values.into_iter().map(|v| Some((key, v))).collect());
        }
        // Bound members pin the gang to their domain.
        let values: BTreeSet<Option<&str>> = self.bound.iter().map(|n| label_of(n)).collect();
        match values.into_iter().collect::<Vec<_>>().as_slice() {
            [Some(value)] => Ok(vec![Some((key, value))]),
            _ => Err(format!("bound members are not all in one {key} domain")),
        }
    }
}

struct Node<'a> {
    obj: &'a Value,
    name: &'a str,
    ready: bool,
    cordoned: bool,
    /// Only the taints that keep pods off (NoSchedule, NoExecute).
    taints: Vec<&'a Value>,
    allocatable: Resources,
}

impl<'a> Node<'a> {
    fn new(obj: &'a Value) -> Option<Self> {
        let conditions = obj["status"]["conditions"].as_array();
        let taints = obj["spec"]["taints"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        Some(Node {
            obj,
            name: obj["metadata"]["name"].as_str()?,
            ready: conditions.is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            }),
            cordoned: obj["spec"]["unschedulable"] == true,
            taints: taints
                .iter()
                .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
                .collect(),
            allocatable: resources(&obj["status"]["allocatable"]),
        })
    }

    fn label(&self, key: &str) -> Option<&'a str> {
        self.obj["metadata"]["labels"][key].as_str()
    }

    fn free(&self, resource: &str, used: Option<&Resources>) -> i128 {
        let in_use = used.and_then(|u| u.get(resource)).copied().unwrap_or(0);
        self.allocatable.get(resource).copied().unwrap_or(0) - in_use
    }

    /// Why `pod` can't go here, as kube-scheduler words it; None when it fits.
    /// Only the first failing check counts, as with kube-scheduler's filters.
    fn reject(&self, pod: &Pod, used: Option<&Resources>, domain: Domain) -> Option<String> {
        if !self.ready {
            return Some("node(s) were not ready".into());
        }
        if self.cordoned {
            return Some("node(s) were unschedulable".into());
        }
        let tolerations = pod.obj["spec"]["tolerations"].as_array();
        let tolerations = tolerations.map_or(&[][..], Vec::as_slice);
        if let Some(taint) = self
            .taints
            .iter()
            .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        {
            let (key, value) = (text(taint, "key"), text(taint, "value"));
            return Some(format!("node(s) had untolerated taint {{{key}: {value}}}"));
        }
        if !self.matches_affinity(&pod.obj["spec"]) {
            return Some("node(s) didn't match Pod's node affinity/selector".into());
        }
        if let Some((key, value)) = domain {
            match self.label(key) {
                None => return Some(format!("node(s) didn't have label {key}")),
                Some(v) if v != value => {
                    return Some(format!(
                        "node(s) were outside topology domain {key}={value}"
                    ))
                }
                Some(_) => {}
            }
        }
        // kube-scheduler's NodeResourcesFit order: pods, cpu, memory, then the rest.
        let first = [PODS, "cpu", "memory"];
        let rest = pod
            .request
            .keys()
            .map(String::as_str)
            .filter(|r| !first.contains(r));
        for resource in first.into_iter().chain(rest) {
            let need = pod.request.get(resource).copied().unwrap_or(0);
            if need > 0 && need > self.free(resource, used) {
                return Some(match resource {
                    PODS => "Too many pods".into(),
                    r => format!("Insufficient {r}"),
                });
            }
        }
        None
    }

    fn matches_affinity(&self, spec: &Value) -> bool {
        let selector = spec["nodeSelector"].as_object();
        let selector_ok =
            selector.is_none_or(|s| s.iter().all(|(k, v)| self.label(k) == v.as_str()));
        let required =
            &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        // Terms are ORed; a required affinity with no terms matches nothing.
        let affinity_ok = required.is_null()
            || required["nodeSelectorTerms"]
                .as_array()
                .is_some_and(|terms| terms.iter().any(|t| self.matches_term(t)));
        selector_ok && affinity_ok
    }

    fn matches_term(&self, term: &Value) -> bool {
        let list = |k: &str| term[k].as_array().map_or(&[][..], Vec::as_slice);
        let (labels, fields) = (list("matchExpressions"), list("matchFields"));
        // An empty term matches no nodes (as in Kubernetes).
        (!labels.is_empty() || !fields.is_empty())
            && labels.iter().all(|e| matches_expr(e, |k| self.label(k)))
            && fields
                .iter()
                .all(|e| matches_expr(e, |k| (k == "metadata.name").then_some(self.name)))
    }
}

/// Kubernetes' toleration rule: an empty effect or key matches any; Exists
/// ignores the value, Equal (the default) compares it.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let (effect, key) = (text(toleration, "effect"), text(toleration, "key"));
    (effect.is_empty() || effect == text(taint, "effect"))
        && (key.is_empty() || key == text(taint, "key"))
        && match text(toleration, "operator") {
            "Exists" => true,
            "Equal" | "" => text(toleration, "value") == text(taint, "value"),
            _ => false,
        }
}

/// A string field, "" when absent.
fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

fn matches_expr<'a>(expr: &Value, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
    let got = lookup(expr["key"].as_str().unwrap_or(""));
    let values: Vec<&str> = expr["values"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let int = |s: &str| s.parse::<i64>().ok();
    match (expr["operator"].as_str().unwrap_or(""), values.as_slice()) {
        ("In", _) => got.is_some_and(|g| values.contains(&g)),
        ("NotIn", _) => got.is_none_or(|g| !values.contains(&g)),
        ("Exists", _) => got.is_some(),
        ("DoesNotExist", _) => got.is_none(),
        ("Gt", [v]) => got.and_then(int).zip(int(v)).is_some_and(|(g, v)| g > v),
        ("Lt", [v]) => got.and_then(int).zip(int(v)).is_some_and(|(g, v)| g < v),
        _ => false,
    }
}

struct Pod<'a> {
    obj: &'a Value,
    namespace: &'a str,
    name: &'a str,
    group: Option<&'a str>,
    request: Resources,
}

impl<'a> Pod<'a> {
    fn new(obj: &'a Value) -> Self {
        let spec = &obj["spec"];
        let containers = |k: &str| spec[k].as_array().map_or(&[][..], Vec::as_slice);
        let mut request = Resources::new();
        for c in containers("containers") {
            add(&mut request, &container_request(c));
        }
        // Init containers run one at a time, before the app containers.
        for c in containers("initContainers") {
            for (r, q) in container_request(c) {
                let e = request.entry(r).or_default();
                *e = (*e).max(q);
            }
        }
        add(&mut request, &resources(&spec["overhead"]));
        *request.entry(PODS.into()).or_default() += 1000;
        Pod {
            obj,
            namespace: obj["metadata"]["namespace"].as_str().unwrap_or("default"),
            name: obj["metadata"]["name"].as_str().unwrap_or(""),
            group: spec["schedulingGroup"]["podGroupName"].as_str(),
            request,
        }
    }

    /// Higher priority first, then older, then by namespace and name.
    fn order(&self) -> (Reverse<i64>, &'a str, &'a str, &'a str) {
        let priority = self.obj["spec"]["priority"].as_i64().unwrap_or(0);
        let created = self.obj["metadata"]["creationTimestamp"].as_str();
        (
            Reverse(priority),
            created.unwrap_or(""),
            self.namespace,
            self.name,
        )
    }

    fn binding(&self, node: &str) -> Binding {
        Binding {
            namespace: self.namespace.into(),
            pod: self.name.into(),
            node: node.into(),
        }
    }

    fn unschedulable(&self, message: String) -> Unschedulable {
        Unschedulable {
            namespace: self.namespace.into(),
            pod: self.name.into(),
            message,
        }
    }
}

/// The best node for `pod` (index into `nodes`), or kube-scheduler's
/// "0/N nodes are available: ..." message.
fn place(nodes: &[Node], used: &Used, pod: &Pod, domain: Domain) -> Result<usize, String> {
    if pod.obj["spec"]["resourceClaims"]
        .as_array()
        .is_some_and(|c| !c.is_empty())
    {
        return Err(
            "pod uses spec.resourceClaims (DRA), which the lab binder does not support".into(),
        );
    }
    let gpus = pod.request.get(GPU).copied().unwrap_or(0);
    let mut best: Option<(i128, usize)> = None;
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let node_used = used.get(node.name);
        match node.reject(pod, node_used, domain) {
            Some(reason) => *reasons.entry(reason).or_default() += 1,
            None => {
                // Most-allocated packing: fewest GPUs left free afterwards.
                let left = node.free(GPU, node_used) - gpus;
                if best.is_none_or(|(b, _)| left < b) {
                    best = Some((left, i));
                }
            }
        }
    }
    best.map(|(_, i)| i).ok_or_else(|| {
        if nodes.is_empty() {
            return "no nodes available to schedule pods".into();
        }
        // kube-scheduler sorts the "count reason" strings as strings.
        let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        parts.sort();
        format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            parts.join(", ")
        )
    })
}

/// Requests, with a missing request defaulting to the limit (as the API server does).
fn container_request(container: &Value) -> Resources {
    let mut out = resources(&container["resources"]["limits"]);
    out.extend(resources(&container["resources"]["requests"]));
    out
}

fn is_live(pod: &Value) -> bool {
    !matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) && pod["metadata"]["deletionTimestamp"].is_null()
}

fn commit<'a>(used: &mut Used<'a>, node: &'a str, request: &Resources) {
    add(used.entry(node).or_default(), request);
}

fn add(into: &mut Resources, more: &Resources) {
    for (r, q) in more {
        *into.entry(r.clone()).or_default() += q;
    }
}

/// A resource list (`{"cpu": "500m", ...}`); unparseable amounts are skipped.
fn resources(list: &Value) -> Resources {
    let Some(list) = list.as_object() else {
        return Resources::new();
    };
    let quantity = |v: &Value| match v {
        Value::String(s) => parse_quantity(s),
        Value::Number(n) => parse_quantity(&n.to_string()),
        _ => None,
    };
    list.iter()
        .filter_map(|(k, v)| Some((k.clone(), quantity(v)?)))
        .collect()
}

/// A Kubernetes quantity in milli-units, rounded up like `MilliValue()`:
/// `"500m"` is 500, `"2"` is 2000, `"1Ki"` is 1_024_000, `"1e3"` is 1_000_000.
fn parse_quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let digits: i128 = format!("{whole}{frac}").parse().ok()?;
    let (pow10, pow2): (i32, u32) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => (suffix.strip_prefix(['e', 'E'])?.parse().ok()?, 0),
    };
    let scaled = digits.checked_mul(1 << pow2)?;
    let pow10 = pow10
        .checked_add(3)?
        .checked_sub(i32::try_from(frac.len()).ok()?)?;
    let milli = if pow10 >= 0 {
        scaled.checked_mul(10i128.checked_pow(pow10.unsigned_abs())?)?
    } else {
        let divisor = 10i128.checked_pow(pow10.unsigned_abs())?;
        (scaled + divisor - 1) / divisor
    };
    Some(if negative { -milli } else { milli })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RACK: &str = "topology.accord.dev/rack";

    fn node(name: &str, gpus: u32, rack: &str) -> Value {
        json!({
            "metadata": {"name": name, "labels": {RACK: rack}},
            "spec": {},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"},
                ],
                "allocatable": {
                    "cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string(),
                },
            },
        })
    }

    fn container(limits: Value, requests: Value) -> Value {
        json!({"name": "c", "resources": {"limits": limits, "requests": requests}})
    }

    fn pod(name: &str, gpus: u32) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"containers": [container(json!({GPU: gpus.to_string()}), json!({}))]},
            "status": {"phase": "Pending"},
        })
    }

    /// Sets the field at a `/`-separated path, creating objects on the way.
    fn set(mut v: Value, path: &str, x: Value) -> Value {
        let mut at = &mut v;
        for key in path.split('/') {
            at = &mut at[key];
        }
        *at = x;
        v
    }

    fn bound(name: &str, gpus: u32, node: &str) -> Value {
        set(pod(name, gpus), "spec/nodeName", json!(node))
    }

    fn binds(d: &Decisions) -> Vec<(&str, &str)> {
        d.bind
            .iter()
            .map(|b| (b.pod.as_str(), b.node.as_str()))
            .collect()
    }

    fn only_message(d: &Decisions) -> &str {
        assert!(d.bind.is_empty(), "{d:?}");
        assert_eq!(d.unschedulable.len(), 1, "{d:?}");
        &d.unschedulable[0].message
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("64"), Some(64_000));
        assert_eq!(parse_quantity("500m"), Some(500));
        assert_eq!(parse_quantity("512Gi"), Some(512 * (1 << 30) * 1000));
        assert_eq!(parse_quantity("1.5"), Some(1500));
        assert_eq!(parse_quantity("2Ti"), Some(2 * (1 << 40) * 1000));
        assert_eq!(parse_quantity("1e3"), Some(1_000_000));
        assert_eq!(parse_quantity("1k"), Some(1_000_000));
        assert_eq!(parse_quantity("0.5Gi"), Some((1 << 29) * 1000));
        assert_eq!(parse_quantity("1E"), Some(10i128.pow(21)));
        assert_eq!(parse_quantity("0.1m"), Some(1), "rounded up");
        assert_eq!(parse_quantity("-2"), Some(-2000));
        for bad in ["", "m", ".", "1.2.3", "1Xi", "e3", "1e", "abc"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn requests_default_to_limits_and_init_containers_take_the_max() {
        let small = set(
            node("a-small", 8, "r1"),
            "status/allocatable/cpu",
            json!("4"),
        );
        let nodes = [small, node("b-big", 8, "r1")];
        let cpu = |limits: Value, requests: Value| {
            set(
                pod("p", 0),
                "spec/containers",
                json!([container(limits, requests)]),
            )
        };
        let d = decide(&nodes, &[cpu(json!({"cpu": "8"}), json!({}))], &[]);
        assert_eq!(binds(&d), [("p", "b-big")]);
        let d = decide(
            &nodes,
            &[cpu(json!({"cpu": "8"}), json!({"cpu": "2"}))],
            &[],
        );
        assert_eq!(binds(&d), [("p", "a-small")], "requests override limits");
        let overhead = |q: &str| {
            let p = cpu(json!({}), json!({"cpu": "3.5"}));
            [set(p, "spec/overhead", json!({"cpu": q}))]
        };
        assert_eq!(
            binds(&decide(&nodes, &overhead("500m"), &[])),
            [("p", "a-small")]
        );
        assert_eq!(
            binds(&decide(&nodes, &overhead("600m"), &[])),
            [("p", "b-big")]
        );
        let d = decide(&nodes, &[cpu(json!({"memory": "1Ti"}), json!({}))], &[]);
        assert_eq!(
            only_message(&d),
            "0/2 nodes are available: 2 Insufficient memory."
        );

        // 2+2 app GPUs but a 6-GPU init container: it needs 6, and `a` has 5 free.
        let gpus = |n: &str| container(json!({GPU: n}), json!({}));
        let p = set(
            pod("p", 0),
            "spec/containers",
            json!([gpus("2"), gpus("2")]),
        );
        let p = set(p, "spec/initContainers", json!([gpus("6")]));
        let d = decide(
            &[node("a", 8, "r1"), node("b", 8, "r1")],
            &[p.clone(), bound("busy", 3, "a")],
            &[],
        );
        assert_eq!(binds(&d), [("p", "b")]);
        let d = decide(&[node("a", 8, "r1")], &[p, bound("busy", 3, "a")], &[]);
        assert_eq!(
            only_message(&d),
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        );
    }

    #[test]
    fn selector_and_affinity() {
        let labelled = |name: &str, pool: &str, count: &str| {
            let n = set(node(name, 8, "r1"), "metadata/labels/pool", json!(pool));
            set(n, "metadata/labels/gpu-count", json!(count))
        };
        let nodes = [
            labelled("a", "a", "8"),
            labelled("b", "b", "8"),
            labelled("c", "a", "2"),
        ];
        let selected = [set(pod("p", 1), "spec/nodeSelector", json!({"pool": "b"}))];
        assert_eq!(binds(&decide(&nodes, &selected, &[])), [("p", "b")]);
        let d = decide(&nodes[..1], &selected, &[]);
        assert_eq!(
            only_message(&d),
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        );

        let required = |terms: Value| {
            let path = "spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution";
            set(pod("p", 1), path, json!({"nodeSelectorTerms": terms}))
        };
        let expr = |key: &str, op: &str, values: &[&str]| json!({"key": key, "operator": op, "values": values});
        // Only `c` has fewer than 4 GPUs and pool a; the second term can't match anything.
        let p = required(json!([
            {"matchExpressions": [expr("gpu-count", "Lt", &["4"]), expr("pool", "NotIn", &["b"])]},
            {"matchExpressions": [expr("zone", "Exists", &[])]},
        ]));
        assert_eq!(binds(&decide(&nodes, &[p], &[])), [("p", "c")]);
        let p = required(
            json!([{"matchExpressions": [expr("gpu-count", "Gt", &["4"]), expr("pool", "In", &["b"])]}]),
        );
        assert_eq!(binds(&decide(&nodes, &[p], &[])), [("p", "b")]);
        let p = required(json!([{"matchFields": [expr("metadata.name", "In", &["c"])]}]));
        assert_eq!(binds(&decide(&nodes, &[p], &[])), [("p", "c")]);
        let p = required(json!([{}]));
        assert_eq!(
            decide(&nodes, &[p], &[]).unschedulable.len(),
            1,
            "an empty term matches nothing"
        );
    }

    #[test]
    fn reasons_are_counted_per_node_and_sorted_as_strings() {
        let nodes = [node("a", 8, "r1"), node("b", 8, "r1"), node("c", 8, "r2")];
        let pods = [
            bound("x", 8, "a"),
            bound("y", 4, "b"),
            set(pod("p", 8), "spec/nodeSelector", json!({RACK: "r2"})),
            // a and b are too full and c, though now also full, is in the wrong rack.
            set(pod("q", 8), "spec/nodeSelector", json!({RACK: "r1"})),
        ];
        let d = decide(&nodes, &pods, &[]);
        assert_eq!(binds(&d), [("p", "c")]);
        assert_eq!(
            d.unschedulable[0].message,
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu."
        );
        assert_eq!(
            only_message(&decide(&[], &[pod("p", 0)], &[])),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn taints_and_tolerations() {
        let taint = |effect: &str| json!([{"key": GPU, "value": "present", "effect": effect}]);
        let tainted = [set(node("n", 8, "r1"), "spec/taints", taint("NoSchedule"))];
        let tolerating = |t: Value| set(pod("p", 1), "spec/tolerations", json!([t]));
        let d = decide(&tainted, &[pod("p", 1)], &[]);
        assert_eq!(
            only_message(&d),
            "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
        );
        for ok in [
            json!({"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"}),
            json!({"key": GPU, "value": "present"}),
            json!({"key": GPU, "operator": "Exists"}),
            json!({"operator": "Exists"}),
        ] {
            assert_eq!(
                decide(&tainted, &[tolerating(ok.clone())], &[]).bind.len(),
                1,
                "{ok}"
            );
        }
        for bad in [
            json!({"key": GPU, "value": "absent"}),
            json!({"key": GPU, "operator": "Exists", "effect": "NoExecute"}),
            json!({"key": "other", "operator": "Exists"}),
        ] {
            assert_eq!(
                decide(&tainted, &[tolerating(bad.clone())], &[]).bind.len(),
                0,
                "{bad}"
            );
        }
        let soft = set(node("n", 8, "r1"), "spec/taints", taint("PreferNoSchedule"));
        assert_eq!(decide(&[soft], &[pod("p", 1)], &[]).bind.len(), 1);
    }

    #[test]
    fn not_ready_and_cordoned_nodes_are_skipped() {
        let not_ready = set(
            node("a", 8, "r1"),
            "status/conditions",
            json!([{"type": "Ready", "status": "False"}]),
        );
        let cordoned = set(node("b", 8, "r1"), "spec/unschedulable", json!(true));
        let d = decide(
            &[not_ready.clone(), cordoned.clone(), node("c", 8, "r1")],
            &[pod("p", 1)],
            &[],
        );
        assert_eq!(binds(&d), [("p", "c")]);
        let d = decide(&[not_ready, cordoned], &[pod("p", 1)], &[]);
        assert_eq!(
            only_message(&d),
            "0/2 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable."
        );
    }

    #[test]
    fn bound_pods_use_capacity_and_packing_is_tight() {
        let nodes = [node("a", 8, "r1"), node("b", 8, "r1")];
        let busy = bound("busy", 6, "b");
        assert_eq!(
            binds(&decide(&nodes, &[busy.clone(), pod("p", 4)], &[])),
            [("p", "a")]
        );
        assert_eq!(
            binds(&decide(&nodes, &[busy.clone(), pod("p", 2)], &[])),
            [("p", "b")],
            "fills b first"
        );
        // Finished or deleting pods free their GPUs.
        let done = set(busy.clone(), "status/phase", json!("Succeeded"));
        let deleting = set(
            busy,
            "metadata/deletionTimestamp",
            json!("2025-01-02T00:00:00Z"),
        );
        assert_eq!(
            binds(&decide(&nodes[1..], &[done, pod("p", 8)], &[])),
            [("p", "b")]
        );
        assert_eq!(
            binds(&decide(&nodes[1..], &[deleting, pod("p", 8)], &[])),
            [("p", "b")]
        );
        // Pods placed earlier in the pass count too; so do pod slots.
        let d = decide(&nodes[..1], &[pod("p", 8), pod("q", 8)], &[]);
        assert_eq!(
            (binds(&d), d.unschedulable[0].pod.as_str()),
            (vec![("p", "a")], "q")
        );
        let one_slot = set(node("a", 8, "r1"), "status/allocatable/pods", json!("1"));
        let d = decide(&[one_slot], &[bound("x", 0, "a"), pod("p", 0)], &[]);
        assert_eq!(
            only_message(&d),
            "0/1 nodes are available: 1 Too many pods."
        );
    }

    #[test]
    fn order_is_priority_then_age_then_name() {
        let nodes = [node("a", 8, "r1")];
        let newer = set(
            pod("new", 8),
            "metadata/creationTimestamp",
            json!("2025-02-01T00:00:00Z"),
        );
        let d = decide(&nodes, &[newer.clone(), pod("old", 8)], &[]);
        assert_eq!(binds(&d), [("old", "a")]);
        let urgent = set(newer, "spec/priority", json!(10));
        let d = decide(&nodes, &[pod("old", 8), urgent], &[]);
        assert_eq!(binds(&d), [("new", "a")]);
        let d = decide(&nodes, &[pod("b", 8), pod("a", 8)], &[]);
        assert_eq!(binds(&d), [("a", "a")]);
    }

    #[test]
    fn resource_claims_are_refused() {
        let p = set(
            pod("p", 0),
            "spec/resourceClaims",
            json!([{"name": "gpu", "resourceClaimName": "c"}]),
        );
        assert!(only_message(&decide(&[node("a", 8, "r1")], &[p], &[])).contains("resourceClaims"));
    }

    fn member(name: &str) -> Value {
        set(
            pod(name, 8),
            "spec/schedulingGroup",
            json!({"podGroupName": "train-a"}),
        )
    }

    fn group(min: u32, topology: bool) -> Value {
        let mut g = json!({
            "metadata": {"name": "train-a", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min}}},
        });
        if topology {
            g["spec"]["schedulingConstraints"] = json!({"topology": [{"key": RACK}]});
        }
        g
    }

    /// Racks r1 (a1..a4) and r2 (b1..b4) of 8-GPU nodes, with the named ones full.
    fn racks(full: &[&str]) -> (Vec<Value>, Vec<Value>) {
        let names = ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"];
        let nodes = names
            .iter()
            .map(|n| node(n, 8, if n.starts_with('a') { "r1" } else { "r2" }));
        let busy = full.iter().map(|n| bound(&format!("busy-{n}"), 8, n));
        (nodes.collect(), busy.collect())
    }

    fn members(pods: &mut Vec<Value>, names: &[&str]) {
        pods.extend(names.iter().map(|n| member(n)));
    }

    #[test]
    fn gang_binds_whole_in_the_one_rack_with_room() {
        let (nodes, mut pods) = racks(&["a3", "a4"]);
        members(&mut pods, &["w0", "w1", "w2", "w3"]);
        let d = decide(&nodes, &pods, &[group(4, true)]);
        assert_eq!(
            binds(&d),
            [("w0", "b1"), ("w1", "b2"), ("w2", "b3"), ("w3", "b4")]
        );
        assert!(d.unschedulable.is_empty());
    }

    #[test]
    fn gang_is_not_split_across_racks() {
        let (nodes, mut pods) = racks(&["a3", "a4", "b3", "b4"]);
        members(&mut pods, &["w0", "w1", "w2", "w3"]);
        let d = decide(&nodes, &pods, &[group(4, true)]);
        assert!(d.bind.is_empty(), "{d:?}");
        assert_eq!(d.unschedulable.len(), 4);
        let want = "gang ml/train-a: 2 of 4 pods fit (minCount 4): 0/8 nodes are available: \
            4 Insufficient nvidia.com/gpu, 4 node(s) were outside topology domain topology.accord.dev/rack=r1.";
        assert!(d.unschedulable.iter().all(|u| u.message == want), "{d:?}");
        // Without the topology constraint the same gang does fit, split 2 + 2.
        assert_eq!(decide(&nodes, &pods, &[group(4, false)]).bind.len(), 4);
        // The failed trial held nothing back: a later pod still gets a1.
        let later = set(
            pod("later", 8),
            "metadata/creationTimestamp",
            json!("2025-03-01T00:00:00Z"),
        );
        pods.push(later);
        let d = decide(&nodes, &pods, &[group(4, true)]);
        assert_eq!(
            (binds(&d), d.unschedulable.len()),
            (vec![("later", "a1")], 4)
        );
    }

    #[test]
    fn gang_follows_its_bound_member() {
        let (nodes, mut pods) = racks(&[]);
        pods.push(set(member("w0"), "spec/nodeName", json!("b1")));
        members(&mut pods, &["w1", "w2", "w3"]);
        let d = decide(&nodes, &pods, &[group(4, true)]);
        assert_eq!(binds(&d), [("w1", "b2"), ("w2", "b3"), ("w3", "b4")]);
        // With r2 otherwise full, the gang waits rather than moving to r1.
        let (nodes, mut pods) = racks(&["b2", "b3"]);
        pods.push(set(member("w0"), "spec/nodeName", json!("b1")));
        members(&mut pods, &["w1", "w2", "w3"]);
        let d = decide(&nodes, &pods, &[group(4, true)]);
        assert!(d.bind.is_empty());
        assert!(d.unschedulable[0]
            .message
            .starts_with("gang ml/train-a: 2 of 4 pods fit (minCount 4): 0/8 nodes"));
    }

    #[test]
    fn gang_quorum_binds_what_fits() {
        let (nodes, mut pods) = racks(&["a1", "a2", "a3", "b1", "b2", "b3", "b4"]);
        members(&mut pods, &["w0", "w1"]);
        let d = decide(&nodes, &pods, &[group(1, false)]);
        assert_eq!(binds(&d), [("w0", "a4")]);
        assert_eq!(
            d.unschedulable[0].message,
            "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
        );
        let d = decide(&nodes, &pods[..pods.len() - 1], &[group(2, false)]);
        assert_eq!(
            only_message(&d),
            "gang ml/train-a: 1 of 1 pods fit (minCount 2): waiting for 1 more pods"
        );
    }

    #[test]
    fn missing_pod_group() {
        let d = decide(&[node("a", 8, "r1")], &[member("w0")], &[]);
        assert_eq!(only_message(&d), "PodGroup train-a not found");
        let elsewhere = set(group(1, false), "metadata/namespace", json!("other"));
        let d = decide(&[node("a", 8, "r1")], &[member("w0")], &[elsewhere]);
        assert_eq!(only_message(&d), "PodGroup train-a not found");
    }
}
