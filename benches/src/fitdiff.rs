//! Accord's fit against kube-scheduler's own filter plugins, on seeded
//! random clusters: the same Nodes, bound Pods, Namespaces and pending Pods
//! go to `fit-harness` (v1.37.2's framework with the in-tree plugins;
//! lab/controlplane/kubernetes-1.37/fit-harness) and through Accord's
//! production path (the Kubernetes translation, Nodes as scheduler views on
//! the fleet, `accord::plan::filter_nodes`); the two feasible sets must be
//! equal for every pending pod. `fit-figures` runs many cases and prints
//! the figures; `benches/tests/fit_differential.rs` a few hundred in CI.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord_kube::cluster::{cluster_node, scheduler_view};
use accord_kube::{translate, Manifests, Options};
use serde_json::{json, Value};

/// The simulator's SplitMix64: seeded, the same cases on every machine.
#[derive(Debug)]
pub struct Rng(accord_sim::rng::SplitMix);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(accord_sim::rng::SplitMix::new(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const RACK: &str = "topology.accord.dev/rack";
pub const HOST: &str = "kubernetes.io/hostname";
const NAMESPACES: [(&str, &str); 3] = [("ns-a", "red"), ("ns-b", "red"), ("ns-c", "blue")];
const APPS: [&str; 4] = ["web", "db", "cache", "batch"];

/// One generated cluster and its pending pods, as Kubernetes objects.
#[derive(Debug, Clone)]
pub struct Case {
    pub namespaces: Vec<Value>,
    pub nodes: Vec<Value>,
    pub pods: Vec<Value>,
    pub pending: Vec<Value>,
}

fn namespaces() -> Vec<Value> {
    NAMESPACES
        .iter()
        .map(|(n, team)| {
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": n,
                "labels": { "kubernetes.io/metadata.name": n, "team": team } } })
        })
        .collect()
}

fn selector(r: &mut Rng) -> Value {
    match r.below(6) {
        0 => json!({}),
        1 => json!({ "matchExpressions": [ { "key": "app", "operator": "In",
            "values": [ r.pick(&APPS), r.pick(&APPS) ] } ] }),
        2 => {
            json!({ "matchExpressions": [ { "key": "tier", "operator": r.pick(&["Exists", "DoesNotExist"]) } ] })
        }
        3 => json!({ "matchLabels": { "app": r.pick(&APPS) },
            "matchExpressions": [ { "key": "tier", "operator": "NotIn", "values": ["1"] } ] }),
        _ => json!({ "matchLabels": { "app": r.pick(&APPS) } }),
    }
}

fn affinity_term(r: &mut Rng) -> Value {
    let mut t = json!({ "labelSelector": selector(r),
        "topologyKey": r.pick(&[HOST, HOST, ZONE, RACK]) });
    match r.below(6) {
        0 => t["namespaces"] = json!([r.pick(&NAMESPACES).0]),
        1 => t["namespaceSelector"] = json!({}),
        2 => {
            t["namespaceSelector"] = json!({ "matchLabels": { "team": r.pick(&["red", "blue"]) } })
        }
        3 => {
            t["namespaceSelector"] =
                json!({ "matchLabels": { "kubernetes.io/metadata.name": r.pick(&NAMESPACES).0 } })
        }
        _ => {}
    }
    if r.chance(15) {
        t["matchLabelKeys"] = json!(["tier"]);
    }
    t
}

fn labels(r: &mut Rng) -> Value {
    let mut l = json!({ "app": r.pick(&APPS) });
    if r.chance(50) {
        l["tier"] = json!(r.pick(&["1", "2"]));
    }
    l
}

fn host_ports(r: &mut Rng) -> Value {
    let n = 1 + r.below(2);
    let ports: Vec<Value> = (0..n)
        .map(|i| {
            let mut p = json!({ "containerPort": 9000 + i, "hostPort": r.pick(&[80, 443, 8080]) });
            if r.chance(30) {
                p["protocol"] = json!(r.pick(&["TCP", "UDP"]));
            }
            if r.chance(30) {
                p["hostIP"] = json!(r.pick(&["10.0.0.1", "10.0.0.2", "0.0.0.0"]));
            }
            p
        })
        .collect();
    json!(ports)
}

fn container(r: &mut Rng, cpu_m: u64, mem_mi: u64, ports: bool) -> Value {
    let mut c = json!({ "name": "c", "image": "x",
        "resources": { "requests": { "cpu": format!("{cpu_m}m"), "memory": format!("{mem_mi}Mi") } } });
    if ports {
        c["ports"] = host_ports(r);
    }
    c
}

fn pod(r: &mut Rng, name: &str, node: Option<&str>, pending: bool) -> Value {
    let ns = r.pick(&NAMESPACES).0;
    // Mostly small: a node full of CPU hides what the other filters say
    // (the first failing plugin answers), so one pod in eight is large.
    let cpu = if r.chance(12) {
        2000 + r.below(6000)
    } else {
        50 + r.below(900)
    };
    let large = r.chance(12);
    let mem = 64 + r.below(if large { 16_000 } else { 2_000 });
    let ports = r.chance(15);
    let mut spec = json!({ "containers": [ container(r, cpu, mem, ports) ] });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    let mut affinity = json!({});
    if r.chance(if pending { 25 } else { 15 }) {
        affinity["podAntiAffinity"] = json!({ "requiredDuringSchedulingIgnoredDuringExecution":
            (0..1 + r.below(2)).map(|_| affinity_term(r)).collect::<Vec<_>>() });
    }
    if pending {
        if r.chance(20) {
            affinity["podAffinity"] = json!({ "requiredDuringSchedulingIgnoredDuringExecution":
                (0..1 + r.below(2)).map(|_| affinity_term(r)).collect::<Vec<_>>() });
        }
        if r.chance(15) {
            let term = match r.below(3) {
                0 => {
                    json!({ "matchExpressions": [ { "key": ZONE, "operator": "In", "values": [ "z0", "z1" ] } ] })
                }
                1 => {
                    json!({ "matchExpressions": [ { "key": "gen", "operator": r.pick(&["Gt", "Lt"]), "values": [ "2" ] } ] })
                }
                _ => {
                    json!({ "matchExpressions": [ { "key": "disk", "operator": r.pick(&["Exists", "DoesNotExist", "NotIn"]), "values": if r.chance(50) { json!(["ssd"]) } else { json!([]) } } ] })
                }
            };
            // NotIn with no values is refused by the API server: make it Exists.
            let mut term = term;
            if term["matchExpressions"][0]["operator"] == "NotIn"
                && term["matchExpressions"][0]["values"] == json!([])
            {
                term["matchExpressions"][0]["operator"] = json!("Exists");
            }
            if term["matchExpressions"][0]["operator"] != "NotIn"
                && term["matchExpressions"][0]["operator"] != "In"
                && term["matchExpressions"][0]["operator"] != "Gt"
                && term["matchExpressions"][0]["operator"] != "Lt"
            {
                term["matchExpressions"][0]
                    .as_object_mut()
                    .expect("object")
                    .remove("values");
            }
            affinity["nodeAffinity"] = json!({ "requiredDuringSchedulingIgnoredDuringExecution":
                { "nodeSelectorTerms": [ term ] } });
        }
        if r.chance(15) {
            spec["nodeSelector"] = json!({ ZONE: r.pick(&["z0", "z1", "z2"]) });
        }
        if r.chance(35) {
            spec["tolerations"] = match r.below(3) {
                0 => json!([ { "operator": "Exists" } ]),
                1 => {
                    json!([ { "key": "dedicated", "operator": "Equal", "value": r.pick(&["gpu", "infra"]) } ])
                }
                _ => {
                    json!([ { "key": "dedicated", "operator": "Exists", "effect": r.pick(&["NoSchedule", "NoExecute"]) } ])
                }
            };
        }
        if r.chance(45) {
            let n = 1 + r.below(2);
            spec["topologySpreadConstraints"] = json!((0..n)
                .map(|_| {
                    let mut c = json!({ "maxSkew": 1 + r.below(2),
                        "topologyKey": r.pick(&[ZONE, HOST, RACK]),
                        "whenUnsatisfiable": r.pick(&["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"]),
                        "labelSelector": selector(r) });
                    if r.chance(25) {
                        c["minDomains"] = json!(1 + r.below(4));
                        c["whenUnsatisfiable"] = json!("DoNotSchedule");
                    }
                    if r.chance(30) {
                        c["nodeAffinityPolicy"] = json!(r.pick(&["Honor", "Ignore"]));
                    }
                    if r.chance(30) {
                        c["nodeTaintsPolicy"] = json!(r.pick(&["Honor", "Ignore"]));
                    }
                    if r.chance(15) {
                        c["matchLabelKeys"] = json!(["tier"]);
                    }
                    c
                })
                .collect::<Vec<_>>());
        }
    }
    if affinity != json!({}) {
        spec["affinity"] = affinity;
    }
    let mut p = json!({ "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": labels(r) }, "spec": spec });
    as_the_api_server_stores_it(&mut p);
    p
}

/// The pod as the API server stores it: `matchLabelKeys` and
/// `mismatchLabelKeys` of required affinity terms merged into their
/// selectors (pkg/registry/core/pod/strategy.go, `mutatePodAffinity`;
/// kube-scheduler does not merge them itself).
fn as_the_api_server_stores_it(pod: &mut Value) {
    let labels = pod["metadata"]["labels"].clone();
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(terms) = pod["spec"]["affinity"][kind]
            ["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array_mut()
        else {
            continue;
        };
        for t in terms {
            if t["labelSelector"].is_null() {
                continue;
            }
            for (field, op) in [("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")] {
                let keys: Vec<String> = t[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect();
                for k in keys {
                    let Some(v) = labels[&k].as_str() else {
                        continue;
                    };
                    let exprs = &mut t["labelSelector"]["matchExpressions"];
                    if exprs.is_null() {
                        *exprs = json!([]);
                    }
                    exprs
                        .as_array_mut()
                        .expect("a list")
                        .push(json!({ "key": k, "operator": op, "values": [v] }));
                }
            }
        }
    }
}

/// Case `seed`: 3 to 8 nodes in zones and racks, some tainted, some
/// without a zone; up to 14 bound pods; 1 to 3 pending pods.
pub fn case(seed: u64) -> Case {
    let mut r = Rng::new(seed);
    let n = 3 + r.below(6);
    let nodes: Vec<Value> = (0..n)
        .map(|i| {
            let name = format!("n{i}");
            let mut labels = json!({ HOST: name, RACK: format!("r{}", r.below(3)) });
            if !r.chance(10) {
                labels[ZONE] = json!(format!("z{}", r.below(3)));
            }
            if r.chance(40) {
                labels["disk"] = json!(r.pick(&["ssd", "hdd"]));
            }
            labels["gen"] = json!(format!("{}", 1 + r.below(4)));
            let mut spec = json!({});
            if r.chance(20) {
                spec["taints"] = json!([ { "key": "dedicated", "value": r.pick(&["gpu", "infra"]),
                    "effect": r.pick(&["NoSchedule", "NoExecute", "PreferNoSchedule"]) } ]);
            }
            json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name, "labels": labels },
                "spec": spec,
                "status": { "allocatable": { "cpu": format!("{}", 2 + r.below(8)),
                    "memory": format!("{}Gi", 4 + r.below(28)), "pods": format!("{}", 3 + r.below(8)) },
                    "conditions": [ { "type": "Ready", "status": "True" } ] } })
        })
        .collect();
    let bound = r.below(15);
    let pods = (0..bound)
        .map(|i| {
            let node = format!("n{}", r.below(n));
            pod(&mut r, &format!("b{i}"), Some(&node), false)
        })
        .collect();
    let pending = (0..1 + r.below(3))
        .map(|i| pod(&mut r, &format!("p{i}"), None, true))
        .collect();
    Case {
        namespaces: namespaces(),
        nodes,
        pods,
        pending,
    }
}

/// `fit-harness`, running: one case per line in, one answer per line out.
#[derive(Debug)]
pub struct Harness {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// Per pending pod (`ns/name`): node → "" (admitted) or "Plugin: reasons".
pub type Answers = BTreeMap<String, BTreeMap<String, String>>;

impl Harness {
    pub fn start(binary: &Path) -> Result<Harness, String> {
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Harness {
            child,
            stdin,
            stdout,
        })
    }

    /// kube-scheduler's answer for `c`.
    pub fn ask(&mut self, c: &Case) -> Result<Answers, String> {
        let line = json!({ "namespaces": c.namespaces, "nodes": c.nodes, "pods": c.pods,
            "pending": c.pending });
        writeln!(self.stdin, "{line}").map_err(|e| format!("fit-harness stdin: {e}"))?;
        self.stdin
            .flush()
            .map_err(|e| format!("fit-harness stdin: {e}"))?;
        let mut answer = String::new();
        let n = self
            .stdout
            .read_line(&mut answer)
            .map_err(|e| format!("fit-harness stdout: {e}"))?;
        if n == 0 {
            return Err("fit-harness closed its output (its stderr says why)".into());
        }
        let v: Value = serde_json::from_str(&answer).map_err(|e| format!("fit-harness: {e}"))?;
        let mut out = Answers::new();
        for p in v["pods"].as_array().into_iter().flatten() {
            let nodes = p["nodes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            out.insert(p["pod"].as_str().unwrap_or_default().to_owned(), nodes);
        }
        Ok(out)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const FLEET_HEAD: &str = r#"
[profiles.cpu]
gpus = 0
cpu = "64"
memory = "256Gi"
"#;

/// Accord's answer for `c`: the objects through the Kubernetes
/// translation, the Nodes as scheduler views on a fleet of those names.
pub fn accord(c: &Case) -> Result<Answers, String> {
    let mut toml = FLEET_HEAD.to_owned();
    for n in &c.nodes {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        toml.push_str(&format!(
            "\n[[nodes]]\nname = \"{name}\"\nprofile = \"cpu\"\npower = \"on\"\n"
        ));
    }
    let mut fleet = Fleet::from_toml(&toml, "fleet.toml", &mut |_| Err("none".into()))
        .map_err(|e| e.to_string())?;
    for n in &c.nodes {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(n.clone()).map_err(|e| e.to_string())?;
        let view = scheduler_view(&cluster_node(&node), None);
        let name = node.metadata.name.clone().unwrap_or_default();
        let fleet_node = fleet
            .nodes
            .iter_mut()
            .find(|x| x.name == name)
            .ok_or_else(|| format!("node {name} not in the fleet"))?;
        fleet_node.apply_scheduler_view(&view);
    }
    let docs: Vec<String> = c
        .pods
        .iter()
        .chain(&c.pending)
        .map(|p| p.to_string())
        .collect();
    let manifests =
        Manifests::parse(&docs.join("\n---\n"), "case.yaml").map_err(|e| e.to_string())?;
    let t = translate(&manifests, &Options::for_topology(&fleet.topology));
    if !t.cannot_plan.is_empty() || !t.invalid.is_empty() {
        return Err(format!("translation: {}", t.render()));
    }
    let mut demand: Demand = t.demand;
    // accordd does not read Namespaces yet: the labels are given here.
    for ns in &c.namespaces {
        let name = ns["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let labels = ns["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        demand.namespace_labels.insert(name, labels);
    }
    let mut out = Answers::new();
    for w in &demand.workloads {
        let key = w.key();
        let per_node = accord::plan::filter_nodes(&fleet, &demand, &fleet.policy, 0, &key)?;
        out.insert(
            key,
            per_node
                .into_iter()
                .map(|(n, f)| (n, f.map(|f| f.to_string()).unwrap_or_default()))
                .collect(),
        );
    }
    Ok(out)
}

/// A pod the two disagree on: the nodes each admits, and both answers.
#[derive(Debug, Clone)]
pub struct Disagreement {
    pub seed: u64,
    pub pod: String,
    pub scheduler: BTreeMap<String, String>,
    pub accord: BTreeMap<String, String>,
}

/// Every pod of case `seed` on which the two differ in which nodes admit
/// it; and each rejecting plugin of the scheduler's answers, counted.
pub fn compare(
    harness: &mut Harness,
    seed: u64,
    plugins: &mut BTreeMap<String, u64>,
) -> Result<Vec<Disagreement>, String> {
    let c = case(seed);
    let theirs = harness.ask(&c)?;
    let ours = accord(&c).map_err(|e| format!("seed {seed}: {e}"))?;
    let mut out = Vec::new();
    for (pod, nodes) in &theirs {
        for why in nodes.values().filter(|w| !w.is_empty()) {
            let plugin = why.split(':').next().unwrap_or_default().to_owned();
            *plugins.entry(plugin).or_default() += 1;
        }
        let mine = ours.get(pod).cloned().unwrap_or_default();
        let admitted = |m: &BTreeMap<String, String>| {
            m.iter()
                .filter(|(_, w)| w.is_empty())
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        };
        if admitted(nodes) != admitted(&mine) {
            out.push(Disagreement {
                seed,
                pod: pod.clone(),
                scheduler: nodes.clone(),
                accord: mine,
            });
        }
    }
    Ok(out)
}
