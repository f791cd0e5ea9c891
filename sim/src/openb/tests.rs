//! Unit tests of the openb parser: shapes, limits and hostile rows.

use super::*;
use accord::demand::Demand;
use accord::fleet::{Placement, Policy};

const POD_HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
const NODE_HEADER: &str = "sn,cpu_milli,memory_mib,gpu,model";

fn pods(rows: &[&str]) -> Result<Vec<OpenbPod>, OpenbError> {
    let mut text = String::from(POD_HEADER);
    for r in rows {
        text.push('\n');
        text.push_str(r);
    }
    text.push('\n');
    parse_pods(&text, "pods.csv")
}

fn pod_error(rows: &[&str]) -> String {
    pods(rows).unwrap_err().to_string()
}

const GOOD: &str = "pod-a,6000,12288,1,460,,LS,Running,427061,12902960,427061";

#[test]
fn openb_parses_a_row_of_the_published_trace() {
    let p = pods(&[GOOD, "pod-b,3000,8192,0,0,,BE,Pending,5,9,"]).unwrap();
    assert_eq!(
        p[0],
        OpenbPod {
            name: "pod-a".into(),
            cpu_milli: 6000,
            memory_mib: 12288,
            num_gpu: 1,
            gpu_milli: 460,
            gpu_spec: vec![],
            creation_s: 427061,
            deletion_s: Some(12902960),
            scheduled_s: Some(427061),
        }
    );
    assert_eq!((p[1].scheduled_s, p[1].deletion_s), (None, Some(9)));
    assert_eq!(p[0].gpu_milli_total(), 460);
}

#[test]
fn openb_gpu_spec_as_fgd_reads_it() {
    let p = pods(&["p,1,1,1,1000,V100M16|V100M32|V100M32||,LS,Running,0,1,0"]).unwrap();
    assert_eq!(p[0].gpu_spec, ["V100M16", "V100M32"]);
    let e = pod_error(&["p,1,1,1,1000,T4|V'100,LS,Running,0,1,0"]);
    assert!(e.starts_with("pods.csv:2: column gpu_spec:"), "{e}");
}

#[test]
fn openb_columns_by_name_extra_and_reordered_and_the_short_form() {
    let text = "extra,gpu_milli,num_gpu,memory_mib,cpu_milli,name\nx,500,1,10,20,p\n";
    let p = parse_pods(text, "f").unwrap();
    assert_eq!(
        (p[0].cpu_milli, p[0].memory_mib, p[0].gpu_milli),
        (20, 10, 500)
    );
    assert_eq!((p[0].creation_s, p[0].deletion_s), (0, None));
    // The FGD repository's multigpu lists.
    let short = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,1000\n";
    assert!(is_pod_list(short) && !is_node_list(short));
    assert_eq!(parse_pods(short, "f").unwrap()[0].num_gpu, 2);
}

#[test]
fn openb_hostile_pod_rows_name_file_line_and_column() {
    let cases: [(&[&str], &str); 16] = [
        (
            &[GOOD, "p,1,1"],
            "pods.csv:3: 3 fields where the header has 11",
        ),
        (
            &["p,x1,1,0,0,,LS,Running,0,1,0"],
            "pods.csv:2: column cpu_milli: \"x1\": not a whole",
        ),
        (
            &["p,+1,1,0,0,,LS,Running,0,1,0"],
            "pods.csv:2: column cpu_milli: \"+1\"",
        ),
        (
            &["p,-1,1,0,0,,LS,Running,0,1,0"],
            "pods.csv:2: column cpu_milli",
        ),
        (
            &["p,1,,0,0,,LS,Running,0,1,0"],
            "pods.csv:2: column memory_mib: \"\": empty",
        ),
        (
            &["p,99999999999999999999999,1,0,0,,LS,Running,0,1,0"],
            "pods.csv:2: column cpu_milli: \"99999999999999999999999\": more than 100000000",
        ),
        (
            &["p,1,1,65,1000,,LS,Running,0,1,0"],
            "pods.csv:2: column num_gpu: \"65\": more than 64",
        ),
        (
            &["p,1,1,1,1001,,LS,Running,0,1,0"],
            "pods.csv:2: column gpu_milli: \"1001\": more than 1000",
        ),
        (
            &["p,1,1,1,0,,LS,Running,0,1,0"],
            "pods.csv:2: GPUs with no share",
        ),
        (
            &["p,1,1,0,10,,LS,Running,0,1,0"],
            "pods.csv:2: gpu_milli without GPUs",
        ),
        (
            &["p,1,1,2,500,,LS,Running,0,1,0"],
            "pods.csv:2: a fraction of several GPUs",
        ),
        (
            &["p,1,1,1,500,,LS,Running,9,8,9"],
            "pods.csv:2: column deletion_time: \"8\": before creation_time 9",
        ),
        (
            &["p,1,1,1,500,,LS,Running,0,1,\"0\""],
            "pods.csv:2: a quote",
        ),
        (
            &[GOOD, GOOD],
            "pods.csv:3: duplicate name \"pod-a\" (first on line 2)",
        ),
        (
            &[GOOD, "", GOOD],
            "pods.csv:3: blank line before the last row",
        ),
        (
            &["a b,1,1,0,0,,LS,Running,0,1,0"],
            "pods.csv:2: column name: \"a b\": ' '",
        ),
    ];
    for (rows, expected) in cases {
        let e = pod_error(rows);
        assert!(
            e.starts_with(expected),
            "{e:?} should start with {expected:?}"
        );
    }
    // A huge field is clipped in the message.
    let long = format!("p,{},1,0,0,,LS,Running,0,1,0", "9".repeat(10_000));
    assert!(pod_error(&[&long]).len() < 200);
}

#[test]
fn openb_empty_header_only_and_bad_headers() {
    let e = |text: &str| parse_pods(text, "f.csv").unwrap_err().to_string();
    assert_eq!(e(""), "f.csv: empty file (line 1 should be the header)");
    assert_eq!(e("\n\n"), "f.csv: empty file (line 1 should be the header)");
    assert_eq!(
        e(&format!("{POD_HEADER}\n")),
        "f.csv: only a header on line 1, no rows"
    );
    assert!(e("name,cpu_milli\np,1\n")
        .starts_with("f.csv:1: header: missing column(s) memory_mib, num_gpu, gpu_milli"));
    assert!(e("name,name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
        .starts_with("f.csv:1: header: column \"name\" twice"));
    assert!(!is_pod_list("") && !is_node_list("garbage"));
    // Trailing blank lines, CRLF and a byte-order mark are fine.
    let ok = format!("\u{feff}{POD_HEADER}\r\n{GOOD}\r\n\r\n\n");
    assert!(is_pod_list(&ok));
    assert_eq!(parse_pods(&ok, "f").unwrap().len(), 1);
}

#[test]
fn openb_node_rows() {
    let text = format!("{NODE_HEADER}\nn0,64000,262144,2,P100\nn1,32000,262144,0,\n");
    let n = parse_nodes(&text, "nodes.csv").unwrap();
    assert!(is_node_list(&text) && !is_pod_list(&text));
    assert_eq!(n[0].model, "P100");
    assert_eq!((n[1].gpus, n[1].model.as_str()), (0, ""));
    let e = |rows: &str| {
        parse_nodes(&format!("{NODE_HEADER}\n{rows}\n"), "nodes.csv")
            .unwrap_err()
            .to_string()
    };
    assert!(e("n0,1,1,2,").starts_with("nodes.csv:2: column model: \"\": empty"));
    assert!(e("n0,1,1,65,G2").starts_with("nodes.csv:2: column gpu: \"65\": more than 64"));
    assert!(e("n0,1,1,1,G2\nn0,1,1,1,G2").starts_with("nodes.csv:3: duplicate name"));
    assert!(e("n0,1,1,1,G'2").starts_with("nodes.csv:2: column model: \"G'2\""));
}

/// The published fixtures parse in full.
#[test]
fn openb_fixtures_parse() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/traces/alibaba-gpu-v2023"
    );
    let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
    let pods = parse_pods(&read("openb_pod_list_default.csv"), "pods").unwrap();
    let nodes = parse_nodes(&read("openb_node_list_gpu_node.csv"), "nodes").unwrap();
    assert_eq!((pods.len(), nodes.len()), (8152, 1213));
    assert_eq!(gpu_capacity_milli(&nodes), 6212 * 1000);
    let sample = parse_pods(&read("../derived/gpuspec-sample.csv"), "sample").unwrap();
    let with_spec = sample.iter().filter(|p| !p.gpu_spec.is_empty()).count();
    assert_eq!((sample.len(), with_spec), (48, 34));
}

fn two_node_fleet() -> accord::fleet::Fleet {
    let nodes = [("p100-node", "P100"), ("t4-node", "T4")].map(|(name, model)| OpenbNode {
        name: name.into(),
        cpu_milli: 64_000,
        memory_mib: 262_144,
        gpus: 2,
        model: model.into(),
    });
    fleet_file(&nodes, PowerState::On)
        .build("fleet", &mut |_| Err("no files".into()))
        .unwrap()
}

fn gpu_pod(num_gpu: u32, gpu_milli: u32, spec: &[&str]) -> OpenbPod {
    OpenbPod {
        name: "p".into(),
        cpu_milli: 1000,
        memory_mib: 1024,
        num_gpu,
        gpu_milli,
        gpu_spec: spec.iter().map(|s| s.to_string()).collect(),
        creation_s: 0,
        deletion_s: None,
        scheduled_s: None,
    }
}

/// The node the planner puts the pod on, or `None` when unsatisfied.
fn placed_on(pod: &OpenbPod, placement: Placement) -> Option<String> {
    let demand = Demand {
        workloads: vec![workload(pod, "w", "trace", 0)],
        ..Demand::default()
    };
    let policy = Policy {
        placement,
        ..Policy::default()
    };
    let plan = accord::plan::plan(&two_node_fleet(), &demand, &policy, 0);
    match plan.placements.first() {
        Some(w) => Some(w.pods[0].node.clone()),
        None => {
            assert_eq!(plan.unsatisfied.len(), 1, "{plan:?}");
            None
        }
    }
}

#[test]
fn openb_gpu_spec_steers_the_planner() {
    assert!(accord::fit::check_selector(&gpu_spec_selector(&["T4".into(), "A10".into()])).is_ok());
    for placement in [Placement::FirstFit, Placement::LeastFragmentation] {
        for (n, milli) in [(1, 1000), (2, 1000), (1, 250)] {
            let on = |spec: &[&str]| placed_on(&gpu_pod(n, milli, spec), placement);
            // Without a spec the P100 node, first, takes it (first
            // fit; least fragmentation is a tie broken the same way).
            assert_eq!(
                on(&[]).as_deref(),
                Some("p100-node"),
                "{placement:?} {n}x{milli}"
            );
            assert_eq!(
                on(&["T4"]).as_deref(),
                Some("t4-node"),
                "{placement:?} {n}x{milli}"
            );
            assert_eq!(on(&["V100M32", "T4"]).as_deref(), Some("t4-node"));
            assert_eq!(on(&["V100M32"]), None, "{placement:?} {n}x{milli}");
        }
    }
}

#[test]
fn openb_cel_strings_are_escaped() {
    assert_eq!(cel_string("a'b\\c"), r"'a\'b\\c'");
    let hostile = gpu_spec_selector(&["x'] || true || ['".into()]);
    assert!(accord::fit::check_selector(&hostile).is_ok(), "{hostile}");
    assert!(
        hostile.ends_with(r"in ['x\'] || true || [\'']"),
        "{hostile}"
    );
}
