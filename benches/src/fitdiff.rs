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
    pub storage: Storage,
}

/// The storage objects of a case.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    pub pvcs: Vec<Value>,
    pub pvs: Vec<Value>,
    pub classes: Vec<Value>,
    pub csi_nodes: Vec<Value>,
}

impl Storage {
    fn all(&self) -> impl Iterator<Item = &Value> {
        self.pvcs
            .iter()
            .chain(&self.pvs)
            .chain(&self.classes)
            .chain(&self.csi_nodes)
    }
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

fn pod(r: &mut Rng, name: &str, node: Option<&str>, pending: bool, st: &Storage) -> Value {
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
    // A RuntimeClass's overhead, as its admission plugin sets it.
    if r.chance(10) {
        spec["overhead"] = json!({ "cpu": format!("{}m", 100 + r.below(900)), "memory": "128Mi" });
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
    if r.chance(if pending { 35 } else { 30 }) {
        let mine = st.pvcs.iter().any(|c| c["metadata"]["namespace"] == ns);
        // Where the namespace has no claim, a missing one now and then.
        if mine || r.chance(15) {
            spec["volumes"] = pod_volumes(r, ns, st);
        }
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

const DRIVER: &str = "disk.csi.accord.dev";

/// Volumes naming claims of the pod's namespace (or, rarely, one that
/// does not exist).
fn pod_volumes(r: &mut Rng, ns: &str, st: &Storage) -> Value {
    let mine: Vec<&str> = st
        .pvcs
        .iter()
        .filter(|c| c["metadata"]["namespace"] == ns)
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    let n = 1 + r.below(2);
    let mut names: Vec<String> = (0..n)
        .map(|_| {
            if mine.is_empty() || r.chance(3) {
                "missing".to_owned()
            } else {
                (*r.pick(&mine)).to_owned()
            }
        })
        .collect();
    names.sort();
    names.dedup();
    json!(names
        .iter()
        .enumerate()
        .map(
            |(i, c)| json!({ "name": format!("v{i}"), "persistentVolumeClaim": { "claimName": c } })
        )
        .collect::<Vec<_>>())
}

fn node_term(r: &mut Rng, nodes: u64) -> Value {
    match r.below(4) {
        0 => json!({ "matchExpressions": [ { "key": ZONE, "operator": "In",
            "values": [ format!("z{}", r.below(3)) ] } ] }),
        1 => json!({ "matchExpressions": [ { "key": RACK, "operator": "NotIn",
            "values": [ format!("r{}", r.below(3)) ] } ] }),
        _ => json!({ "matchExpressions": [ { "key": HOST, "operator": "In",
            "values": [ format!("n{}", r.below(nodes)) ] } ] }),
    }
}

/// StorageClasses (one waits for its consumer and provisions in some
/// zones, one anywhere, one cannot provision, one binds at once), PVs
/// (bound to claims, or available local ones), claims (bound, waiting,
/// immediate; some ReadWriteOncePod; some with a selected node) and
/// CSINodes with attach limits.
fn storage(r: &mut Rng, nodes: u64) -> Storage {
    let wffc = |name: &str, provisioner: &str| {
        json!({ "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": { "name": name }, "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer" })
    };
    let mut zoned = wffc("zoned", DRIVER);
    let zones: Vec<String> = (0..1 + r.below(2))
        .map(|i| format!("z{}", (i + r.below(3)) % 3))
        .collect();
    zoned["allowedTopologies"] =
        json!([ { "matchLabelExpressions": [ { "key": ZONE, "values": zones } ] } ]);
    let mut immediate = wffc("immediate", DRIVER);
    immediate["volumeBindingMode"] = json!("Immediate");
    let classes = vec![
        zoned,
        wffc("anywhere", DRIVER),
        wffc("local", "kubernetes.io/no-provisioner"),
        immediate,
    ];
    let mut st = Storage {
        classes,
        ..Default::default()
    };
    for i in 0..3 + r.below(8) {
        let ns = r.pick(&NAMESPACES).0;
        let name = format!("c{i}");
        let size = *r.pick(&[5u64, 20, 100]);
        let mut modes = json!(["ReadWriteOnce"]);
        if r.chance(20) {
            modes = json!(["ReadWriteOncePod"]);
        }
        let mut pvc = json!({ "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": { "name": name, "namespace": ns },
            "spec": { "accessModes": modes, "resources": { "requests": { "storage": format!("{size}Gi") } } },
            "status": { "phase": "Pending" } });
        match r.below(5) {
            // Bound to its own PV.
            0 | 1 => {
                let pv_name = format!("pv-{ns}-{name}");
                let class = *r.pick(&["local", "anywhere", "zoned"]);
                let mut pv = json!({ "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": { "name": pv_name },
                    "spec": { "capacity": { "storage": format!("{size}Gi") }, "accessModes": modes,
                        "storageClassName": class,
                        "claimRef": { "namespace": ns, "name": name } },
                    "status": { "phase": "Bound" } });
                if class == "local" || r.chance(40) {
                    pv["spec"]["nodeAffinity"] = json!({ "required": { "nodeSelectorTerms":
                        (0..1 + r.below(2)).map(|_| node_term(r, nodes)).collect::<Vec<_>>() } });
                }
                if class == "local" {
                    pv["spec"]["local"] = json!({ "path": "/mnt/disk" });
                } else {
                    pv["spec"]["csi"] =
                        json!({ "driver": DRIVER, "volumeHandle": format!("h-{pv_name}") });
                }
                if r.chance(35) {
                    let v = if r.chance(30) {
                        format!("z{}__z{}", r.below(3), r.below(3))
                    } else {
                        format!("z{}", r.below(3))
                    };
                    pv["metadata"]["labels"] = json!({ ZONE: v });
                }
                pvc["spec"]["storageClassName"] = json!(class);
                pvc["spec"]["volumeName"] = json!(pv_name);
                pvc["status"]["phase"] = json!("Bound");
                // The PV controller marks a binding it finished; one
                // without the mark is still binding.
                if !r.chance(8) {
                    pvc["metadata"]["annotations"] =
                        json!({ "pv.kubernetes.io/bind-completed": "yes" });
                }
                if !r.chance(6) {
                    st.pvs.push(pv);
                }
            }
            // Waiting for its first consumer.
            2 | 3 => {
                pvc["spec"]["storageClassName"] =
                    json!(r.pick(&["local", "anywhere", "zoned", "zoned"]));
                if r.chance(10) {
                    pvc["metadata"]["annotations"] = json!({ "volume.kubernetes.io/selected-node": format!("n{}", r.below(nodes)) });
                }
            }
            _ => {
                pvc["spec"]["storageClassName"] = json!(r.pick(&["immediate", "missing-class"]));
            }
        }
        st.pvcs.push(pvc);
    }
    // Available local PVs.
    for i in 0..r.below(5) {
        let size = *r.pick(&[10u64, 50, 200]);
        st.pvs
            .push(json!({ "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": { "name": format!("local-{i}") },
            "spec": { "capacity": { "storage": format!("{size}Gi") },
                "accessModes": [ *r.pick(&["ReadWriteOnce", "ReadWriteOncePod"]) ],
                "storageClassName": "local", "local": { "path": "/mnt/disk" },
                "nodeAffinity": { "required": { "nodeSelectorTerms": [ node_term(r, nodes) ] } } },
            "status": { "phase": *r.pick(&["Available", "Available", "Released"]) } }));
    }
    for i in 0..nodes {
        if r.chance(40) {
            st.csi_nodes.push(
                json!({ "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                "metadata": { "name": format!("n{i}") },
                "spec": { "drivers": [ { "name": DRIVER, "nodeID": format!("n{i}"),
                    "allocatable": { "count": r.below(3) } } ] } }),
            );
        }
    }
    st
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
    let st = storage(&mut r, n);
    let bound = r.below(15);
    let pods = (0..bound)
        .map(|i| {
            let node = format!("n{}", r.below(n));
            pod(&mut r, &format!("b{i}"), Some(&node), false, &st)
        })
        .collect();
    let pending = (0..1 + r.below(3))
        .map(|i| pod(&mut r, &format!("p{i}"), None, true, &st))
        .collect();
    Case {
        namespaces: namespaces(),
        nodes,
        pods,
        pending,
        storage: st,
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
            "pending": c.pending, "pvcs": c.storage.pvcs, "pvs": c.storage.pvs,
            "storageClasses": c.storage.classes, "csiNodes": c.storage.csi_nodes });
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
        .chain(&c.namespaces)
        .chain(c.storage.all())
        .map(|p| p.to_string())
        .collect();
    let manifests =
        Manifests::parse(&docs.join("\n---\n"), "case.yaml").map_err(|e| e.to_string())?;
    let t = translate(&manifests, &Options::for_topology(&fleet.topology));
    if !t.cannot_plan.is_empty() || !t.invalid.is_empty() {
        return Err(format!("translation: {}", t.render()));
    }
    let demand: Demand = t.demand;
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

/// What the comparison counted, in node verdicts.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Each rejecting plugin of the scheduler's answers, and each reason
    /// ("Plugin: reason", quoted names elided).
    pub rejections: BTreeMap<String, u64>,
    /// Nodes both reject: Accord names the plugin the scheduler names.
    pub same_plugin: u64,
    /// Nodes both reject, for a plugin of another name (both are right
    /// to reject; the first failing filter differs), and one example.
    pub other_plugin: u64,
    pub other_example: Option<(String, String)>,
}

/// Every pod of case `seed` on which the two differ in which nodes admit
/// it; the rejections counted into `tally`.
pub fn compare(
    harness: &mut Harness,
    seed: u64,
    tally: &mut Tally,
) -> Result<Vec<Disagreement>, String> {
    let c = case(seed);
    let theirs = harness.ask(&c)?;
    let ours = accord(&c).map_err(|e| format!("seed {seed}: {e}"))?;
    let mut out = Vec::new();
    for (pod, nodes) in &theirs {
        let mine = ours.get(pod).cloned().unwrap_or_default();
        for (node, why) in nodes.iter().filter(|(_, w)| !w.is_empty()) {
            let plugin = why.split(':').next().unwrap_or_default();
            *tally.rejections.entry(plugin.to_owned()).or_default() += 1;
            // Each reason too, its quoted names elided ("Plugin: reason").
            for reason in why.split_once(": ").map_or("", |(_, r)| r).split("; ") {
                let mut parts = reason.split('"');
                let mut elided = parts.next().unwrap_or_default().to_owned();
                for (i, part) in parts.enumerate() {
                    elided.push_str(if i % 2 == 0 { "\"…\"" } else { part });
                }
                *tally
                    .rejections
                    .entry(format!("{plugin}: {elided}"))
                    .or_default() += 1;
            }
            let ours = mine.get(node).map_or("", String::as_str);
            if !ours.is_empty() {
                if ours.split(':').next() == Some(plugin) {
                    tally.same_plugin += 1;
                } else {
                    tally.other_plugin += 1;
                    tally
                        .other_example
                        .get_or_insert_with(|| (why.clone(), ours.to_owned()));
                }
            }
        }
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
