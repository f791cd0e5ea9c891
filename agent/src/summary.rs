//! The human-readable form of `accord-agent discover`.

use std::fmt::Write;

use accord::hardware::{MigMode, NodeHardware, PciDeviceRole};

fn gib(bytes: u64) -> String {
    let g = bytes as f64 / (1u64 << 30) as f64;
    if g >= 1024.0 {
        format!("{:.1} TiB", g / 1024.0)
    } else {
        format!("{g:.1} GiB")
    }
}

fn or_dash(v: Option<&str>) -> &str {
    v.unwrap_or("-")
}

pub fn render(hw: &NodeHardware) -> String {
    let mut s = String::new();
    let m = &hw.machine;
    let _ = writeln!(
        s,
        "Machine  {} {} (host {}, serial {})",
        or_dash(m.vendor.as_deref()),
        or_dash(m.product.as_deref()),
        or_dash(m.hostname.as_deref()),
        or_dash(m.serial.as_deref()),
    );
    let _ = writeln!(
        s,
        "CPU      {} packages, {} cores, {} threads ({})",
        m.packages,
        m.cores,
        m.threads,
        or_dash(m.cpu_model.as_deref())
    );
    let _ = writeln!(
        s,
        "Memory   {} in {} NUMA nodes",
        gib(m.memory_bytes),
        hw.numa_nodes.len()
    );
    for n in &hw.numa_nodes {
        let _ = writeln!(
            s,
            "  NUMA {}: {} CPUs ({}), {}, {} GPUs",
            n.id,
            n.cpus,
            n.cpuset,
            gib(n.memory_bytes),
            hw.gpus_on_numa_node(n.id).len()
        );
    }
    for d in &hw.numa_distances {
        let rows: Vec<String> = d
            .values
            .iter()
            .map(|r| r.iter().map(u64::to_string).collect::<Vec<_>>().join(" "))
            .collect();
        let _ = writeln!(s, "  {} distances: [{}]", d.name, rows.join("; "));
    }
    let _ = writeln!(
        s,
        "PCIe     {} root complexes, {} switches, {} devices",
        hw.pcie.roots.len(),
        hw.pcie.switches.len(),
        hw.pcie.devices.len()
    );
    for d in &hw.pcie.devices {
        let role = match d.role {
            PciDeviceRole::Gpu => "gpu",
            PciDeviceRole::Nic => "nic",
            PciDeviceRole::NvSwitch => "nvswitch",
            PciDeviceRole::Storage => "storage",
            PciDeviceRole::Other => "other",
        };
        let _ = writeln!(
            s,
            "  {} {:<8} {} [{:04x}:{:04x}] root {} NUMA {}",
            d.bus_id,
            role,
            or_dash(d.name.as_deref()),
            d.vendor_id,
            d.device_id,
            d.root,
            d.numa_node.map_or("-".into(), |n| n.to_string()),
        );
    }
    let models: Vec<String> = hw
        .gpu_models()
        .into_iter()
        .map(|(model, n)| format!("{n} × {model}"))
        .collect();
    let _ = writeln!(s, "GPUs     {} ({})", hw.gpus.len(), models.join(", "));
    for g in &hw.gpus {
        let mig = match &g.mig {
            None => "-".to_owned(),
            Some(mig) if mig.current_mode == MigMode::Enabled => {
                format!("on, {} instances", mig.gpu_instances.len())
            }
            Some(mig) if mig.pending_mode == MigMode::Enabled => "off (on after reset)".to_owned(),
            Some(_) => "off".to_owned(),
        };
        let _ = writeln!(
            s,
            "  {:>2} {} {} mem {} NUMA {} root {} uuid {} MIG {}",
            g.index,
            g.pci_bus_id,
            or_dash(g.model.as_deref()),
            g.memory_bytes.map_or("-".into(), gib),
            g.numa_node.map_or("-".into(), |n| n.to_string()),
            or_dash(g.pcie_root.as_deref()),
            or_dash(g.uuid.as_deref()),
            mig,
        );
    }
    let _ = writeln!(s, "NICs     {}", hw.nics.len());
    for n in &hw.nics {
        let _ = writeln!(
            s,
            "  {} {:?} {} {} NUMA {} speed {}",
            n.name,
            n.kind,
            n.pci_bus_id.map_or("-".into(), |b| b.to_string()),
            or_dash(n.model.as_deref()),
            n.numa_node.map_or("-".into(), |x| x.to_string()),
            n.link_speed_mbps
                .map_or("-".into(), |x| format!("{x} Mb/s")),
        );
    }
    let groups = hw.nvlink_groups();
    let _ = writeln!(
        s,
        "NVLink   {} connections, {} NVSwitches, {} GPU groups",
        hw.nvlinks.len(),
        hw.nvswitches.len(),
        groups.len()
    );
    for g in &groups {
        let _ = writeln!(
            s,
            "  group of {} GPUs via {} NVSwitches",
            g.gpus.len(),
            g.nvswitches.len()
        );
    }
    let source = |info: &Option<accord::hardware::SourceInfo>| match info {
        Some(i) => match &i.version {
            Some(v) => format!("{} ({v})", i.origin),
            None => i.origin.clone(),
        },
        None => "not used".to_owned(),
    };
    let _ = writeln!(
        s,
        "Sources  hwloc: {}; NVML: {}",
        source(&hw.discovery.hwloc),
        source(&hw.discovery.nvml)
    );
    for note in &hw.discovery.notes {
        let _ = writeln!(s, "Note     {note}");
    }
    for d in &hw.discovery.disagreements {
        let _ = writeln!(
            s,
            "Disagree {} {}: hwloc {}, NVML {}",
            d.pci_bus_id.map_or("-".into(), |b| b.to_string()),
            d.field,
            or_dash(d.hwloc.as_deref()),
            or_dash(d.nvml.as_deref()),
        );
    }
    s
}
