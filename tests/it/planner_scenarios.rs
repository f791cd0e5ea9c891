//! Data-driven planner scenarios: each folder in tests/scenarios holds a
//! fleet (TOML), a demand (JSON) and the expected plan (`expected.json`, a
//! snapshot; `UPDATE_GOLDEN=1` rewrites it after an intended change). The
//! assertions below say what each scenario is about, so a snapshot update
//! cannot silently change behaviour.

use std::path::{Path, PathBuf};

use accord::demand::Demand;
use accord::fleet::Fleet;
use accord::hardware::NodeHardware;
use accord::plan::{plan, Action, Plan};

/// Scenario time: `idle_since` values in the fleets are relative to it.
const NOW: u64 = 100_000;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(name)
}

pub fn load(dir: &Path) -> (Fleet, Demand) {
    let fleet_path = dir.join("fleet.toml");
    let text = std::fs::read_to_string(&fleet_path).unwrap();
    let mut loader = |rel: &str| -> Result<NodeHardware, String> {
        let t = std::fs::read_to_string(dir.join(rel)).map_err(|e| e.to_string())?;
        serde_json::from_str(&t).map_err(|e| e.to_string())
    };
    let fleet = Fleet::from_toml(&text, "fleet.toml", &mut loader).unwrap();
    let demand_text = std::fs::read_to_string(dir.join("demand.json")).unwrap();
    let demand = Demand::from_json(&demand_text, "demand.json").unwrap();
    (fleet, demand)
}

fn run(name: &str) -> Plan {
    let d = dir(name);
    let (fleet, demand) = load(&d);
    let p = plan(&fleet, &demand, &fleet.policy, NOW);
    let text = serde_json::to_string_pretty(&p).unwrap() + "\n";
    let expected = d.join("expected.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        update_golden(&expected, &text);
    }
    let stored = std::fs::read_to_string(&expected).unwrap_or_default();
    assert!(stored == text, "{name}: plan differs from expected.json (UPDATE_GOLDEN=1 after an intended change):\n{text}");
    p
}

/// Rewrites a snapshot (`UPDATE_GOLDEN` set): never in CI, where a stale
/// snapshot must fail rather than be rewritten into a pass; whole or not at
/// all (a temporary file beside it, renamed over it).
fn update_golden(path: &Path, text: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "UPDATE_GOLDEN is refused when CI is set: update the snapshots locally after an \
         intended change, review the diff and commit it"
    );
    let tmp = path.with_file_name(format!(
        "{}.tmp-{}",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn power_ons(p: &Plan) -> Vec<(&str, u32)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::PowerOn { node, wave, .. } => Some((node.as_str(), *wave)),
            _ => None,
        })
        .collect()
}

fn nodes_of<'p>(p: &'p Plan, workload: &str) -> Vec<&'p str> {
    p.placements
        .iter()
        .find(|w| w.workload == workload)
        .map(|w| w.pods.iter().map(|pod| pod.node.as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn gang_with_required_rack_prefers_the_warm_rack_with_fewest_power_ons() {
    let p = run("gang-rack-mixed");
    // r1: one idle node on + three to power on (r2 would need four; r3 is A100).
    assert_eq!(p.placements[0].domain.as_deref(), Some("rack=r1"));
    assert_eq!(
        nodes_of(&p, "ml/train-a"),
        ["r1-n2", "r1-n3", "r1-n4", "r1-n5"]
    );
    // r1 allows two concurrent power-ons: the third waits for the next wave.
    assert_eq!(power_ons(&p), [("r1-n3", 0), ("r1-n4", 0), ("r1-n5", 1)]);
    // r1-n5 gets its BIOS profile before it boots.
    let bios = p.actions.iter().position(|a| matches!(a, Action::ApplyBiosProfile { node, profile } if node == "r1-n5" && profile == "gpu-perf"));
    let on = p
        .actions
        .iter()
        .position(|a| matches!(a, Action::PowerOn { node, .. } if node == "r1-n5"));
    assert!(bios.is_some() && bios < on, "{:?}", p.actions);
    assert!(p.unsatisfied.is_empty());
}

#[test]
fn a_gang_that_fits_nowhere_powers_nothing_on_and_says_why() {
    let p = run("gang-fits-nowhere");
    assert!(p.actions.is_empty());
    assert!(p.placements.is_empty());
    let reason = &p.unsatisfied[0].reason;
    assert_eq!(p.unsatisfied[0].sources[0].to_string(), "PodGroup ml/big");
    assert!(reason.contains("gang needs 3 pods in one rack"), "{reason}");
    assert!(reason.contains("16 GPUs free, gang needs 24"), "{reason}");
}

#[test]
fn reserved_nodes_serve_their_owner_only() {
    let p = run("reservation-isolation");
    // team-b cannot get three nodes without team-a's: nothing for it, and
    // the reason names the reservation.
    let wide = p
        .unsatisfied
        .iter()
        .find(|u| u.workload == "team-b/wide")
        .unwrap();
    assert!(
        wide.reason.contains("2 nodes reserved for team-a"),
        "{}",
        wide.reason
    );
    assert_eq!(nodes_of(&p, "team-b/small"), ["n3"]);
    // The owner powers on its reserved node rather than unreserved n4.
    assert_eq!(nodes_of(&p, "team-a/own"), ["n1"]);
    assert_eq!(power_ons(&p), [("n1", 0)]);
    for w in &p.placements {
        if w.workload.starts_with("team-b/") {
            assert!(w
                .pods
                .iter()
                .all(|pod| pod.node != "n1" && pod.node != "n2"));
        }
    }
}

#[test]
fn an_idle_lendable_reservation_is_lent_reclaimably() {
    let p = run("reservation-lending");
    let pods = &p.placements[0].pods;
    // Unreserved capacity first, then one borrowed node, marked reclaimable.
    assert_eq!(nodes_of(&p, "team-b/wide"), ["n3", "n4", "n1"]);
    assert_eq!(
        pods.iter().map(|pod| pod.reclaimable).collect::<Vec<_>>(),
        [false, false, true]
    );
}

#[test]
fn mig_reconfiguration_is_chosen_over_a_power_on() {
    let p = run("mig-reconfigure");
    assert!(power_ons(&p).is_empty(), "{:?}", p.actions);
    let Action::ReconfigureMig {
        node, gpu, layout, ..
    } = &p.actions[0]
    else {
        panic!("expected a MIG reconfiguration: {:?}", p.actions);
    };
    // GPU 0 has a busy instance; GPU 1 is idle and becomes 7 x 1g.10gb at
    // the H100's published placements.
    assert_eq!((node.as_str(), *gpu), ("running", 1));
    let expected: Vec<String> = (0..7).map(|i| format!("1g.10gb@{i}")).collect();
    assert_eq!(layout, &expected);
    assert_eq!(p.placements[0].pods.len(), 7);
    assert!(p.placements[0]
        .pods
        .iter()
        .all(|pod| pod.devices[0].device.starts_with("gpu-1-mig-")));
}

#[test]
fn gpu_and_nic_under_one_pcie_root_only_where_the_topology_allows() {
    let p = run("gpu-nic-pcie-root");
    // Real X9DRG topology: ib0 sits on root pci0000:80 with GPUs 83:00.0 and
    // 84:00.0 (gpu-1, gpu-2). x9drg-busy has both taken; the DGX-2 export has
    // no NIC. Only x9drg-free fits.
    let job = &p.placements[0];
    assert_eq!(job.workload, "hpc/rdma-job");
    assert_eq!(job.pods[0].node, "x9drg-free");
    let devices: Vec<&str> = job.pods[0].devices.iter().map(|d| &*d.device).collect();
    assert_eq!(devices, ["gpu-1", "nic-0"]);
    // The second job finds the only IB NIC taken.
    let second = &p.unsatisfied[0];
    assert_eq!(second.workload, "hpc/rdma-job-2");
    assert!(
        second.reason.contains("resource.kubernetes.io/pcieRoot"),
        "{}",
        second.reason
    );
}

#[test]
fn several_pods_share_one_gpu_through_consumable_capacity() {
    let p = run("shared-gpu");
    let pods = &p.placements[0].pods;
    assert_eq!(pods.len(), 5);
    // 250m is rounded up to the 100m step: three shares (900m) on gpu-0,
    // then gpu-1; no power-on for shared-2.
    let on_gpu0 = pods
        .iter()
        .filter(|pod| &*pod.devices[0].device == "gpu-0")
        .count();
    assert_eq!(on_gpu0, 3);
    assert!(pods.iter().all(|pod| pod.node == "shared-1"));
    assert!(pods
        .iter()
        .all(|pod| pod.devices[0].capacity["gpu.nvidia.com/compute"] == 300));
    assert!(p.actions.is_empty());
}

#[test]
fn a_rack_power_budget_forces_another_rack() {
    let p = run("rack-power-budget");
    assert_eq!(p.placements[0].domain.as_deref(), Some("rack=r2"));
    assert_eq!(power_ons(&p), [("r2-n1", 0), ("r2-n2", 0)]);
}

#[test]
fn scale_down_never_touches_a_busy_node() {
    let p = run("scale-down");
    let offs: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::PowerOff { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    // busy has a pod; idle-short is under the threshold; reserved-idle is
    // the reservation's minimum; dark is already off.
    assert_eq!(offs, ["idle-long"]);
}

#[test]
fn least_fragmentation_keeps_whole_gpus_whole() {
    let p = run("fragmentation-aware");
    let share = p
        .placements
        .iter()
        .find(|w| w.workload == "serve/share")
        .unwrap();
    assert_eq!(share.pods[0].node, "b");
    assert_eq!(&*share.pods[0].devices[0].device, "gpu-0");
    // All three whole-GPU pods still fit: a's two GPUs and b's gpu-1.
    assert_eq!(nodes_of(&p, "train/whole").len(), 3);
    assert!(p.unsatisfied.is_empty());
}

#[test]
fn partitionable_gpu_counters_prevent_overlapping_placements() {
    let p = run("mig-dynamic");
    let halves = p
        .placements
        .iter()
        .find(|w| w.workload == "lab/halves")
        .unwrap();
    let devices: Vec<&str> = halves
        .pods
        .iter()
        .map(|pod| &*pod.devices[0].device)
        .collect();
    // Two 3g.40gb fit (slices 0-3 and 4-7); the third does not.
    assert_eq!(devices, ["gpu-0-3g.40gb@0", "gpu-0-3g.40gb@4"]);
    // The whole GPU shares the same counters: no longer available.
    let whole = p
        .unsatisfied
        .iter()
        .find(|u| u.workload == "lab/whole")
        .unwrap();
    assert!(
        whole.reason.contains("nvidia.com/gpu: 1 requested, 0 free"),
        "{}",
        whole.reason
    );
    assert!(p.actions.is_empty());
}
