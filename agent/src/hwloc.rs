//! hwloc's view of the machine: CPUs, NUMA, memory, the PCI tree, OS devices
//! and distance matrices, turned into Accord's hardware model.
//!
//! Topologies come from the live system or from an hwloc XML export; both go
//! through the same conversion, so a capture replays exactly like the host.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::path::Path;

use accord::hardware::{
    limits, DistanceMatrix, Gpu, Machine, Nic, NicKind, NodeHardware, NumaNode, NvLink, NvLinkPeer,
    NvLinkPeerKind, NvSwitch, PciBusId, PciDevice, PciDeviceRole, PcieRoot, PcieSwitch, Source,
    SourceInfo,
};
use hwlocality::object::attributes::{DownstreamAttributes, ObjectAttributes, UpstreamAttributes};
use hwlocality::object::types::{BridgeType, OSDeviceType, ObjectType};
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::TypeFilter;
use hwlocality::topology::export::xml::XMLExportFlags;
use hwlocality::Topology;

use crate::error::{read_file, DiscoveryError, Result};

/// hwloc components that talk to GPU drivers. The agent queries NVML itself,
/// once; letting hwloc initialise NVML/CUDA too would double discovery time
/// (NVML init serialises across processes) and mix two views of the GPUs.
const GPU_DRIVER_COMPONENTS: &[&str] = &["cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"];

/// Where hwloc's topology comes from.
#[derive(Debug, Clone, Copy)]
pub enum HwlocInput<'a> {
    Live,
    XmlFile(&'a Path),
}

/// Loads a topology and converts it.
pub fn discover(input: HwlocInput<'_>) -> Result<NodeHardware> {
    let (topology, origin) = match input {
        HwlocInput::Live => (load_live()?, "live".to_owned()),
        HwlocInput::XmlFile(path) => (load_xml_file(path)?, path.display().to_string()),
    };
    Ok(model_from_topology(&topology, origin))
}

/// The live topology as an hwloc XML document, for `accord-agent capture`.
pub fn export_live_xml() -> Result<String> {
    let topology = load_live()?;
    let xml =
        topology
            .export_xml(XMLExportFlags::empty())
            .map_err(|e| DiscoveryError::HwlocLive {
                reason: format!("XML export failed: {e}"),
            })?;
    Ok(xml.as_str().to_owned())
}

fn load_live() -> Result<Topology> {
    let live = |e: &dyn std::fmt::Display| DiscoveryError::HwlocLive {
        reason: e.to_string(),
    };
    let mut builder = Topology::builder()
        .with_io_type_filter(TypeFilter::KeepImportant)
        .map_err(|e| live(&e))?;
    for component in GPU_DRIVER_COMPONENTS {
        // hwloc refuses to blacklist a component it was built without;
        // such a component cannot run anyway, so the refusal is ignored.
        let candidate = Topology::builder().without_component(component);
        if candidate.is_ok() {
            builder = builder.without_component(component).map_err(|e| live(&e))?;
        }
    }
    builder.build().map_err(|e| live(&e))
}

/// Loads an hwloc XML export, checking it first so that a wrong file gets a
/// precise message instead of hwloc's generic "invalid argument".
pub fn load_xml_file(path: &Path) -> Result<Topology> {
    let text = read_file(path)?;
    check_hwloc_xml(path, &text)?;
    let rejected = |e: &dyn std::fmt::Display| DiscoveryError::HwlocRejected {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    Topology::builder()
        .from_xml(&text)
        .map_err(|e| rejected(&e))?
        .with_io_type_filter(TypeFilter::KeepImportant)
        .map_err(|e| rejected(&e))?
        .build()
        .map_err(|e| rejected(&e))
}

/// Refuses what hwloc 2.x would refuse, with a message that says why.
pub fn check_hwloc_xml(path: &Path, text: &str) -> Result<()> {
    // Before any parser: roxmltree and hwloc recurse per nesting level.
    crate::xml::check_shape(text, crate::xml::MAX_XML_DEPTH).map_err(|problem| {
        DiscoveryError::XmlShape {
            path: path.to_owned(),
            problem,
        }
    })?;
    let doc = roxmltree::Document::parse_with_options(text, crate::xml_options()).map_err(|e| {
        let pos = e.pos();
        DiscoveryError::MalformedXml {
            path: path.to_owned(),
            line: pos.row,
            column: pos.col,
            reason: e.to_string(),
        }
    })?;
    let root = doc.root_element();
    if root.tag_name().name() != "topology" {
        return Err(DiscoveryError::NotHwlocXml {
            path: path.to_owned(),
            root: root.tag_name().name().to_owned(),
        });
    }
    // hwloc 1.x exports have no version attribute and hwloc 2 still reads
    // them; 3.0 and later are refused by the 2.x library.
    if let Some(version) = root.attribute("version") {
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(u32::MAX);
        if major >= 3 {
            return Err(DiscoveryError::UnsupportedHwlocVersion {
                path: path.to_owned(),
                version: version.to_owned(),
            });
        }
    }
    // A bridge's downstream side is a PCI bus (`bridge_type="U-1"`); libhwloc
    // loads one without the attribute, or with a Host downstream, as Host on
    // both sides, which hwlocality cannot describe (it panics).
    for bridge in root
        .descendants()
        .filter(|n| n.has_tag_name("object") && n.attribute("type") == Some("Bridge"))
    {
        let downstream_pci = bridge
            .attribute("bridge_type")
            .and_then(|t| t.split_once('-'))
            .is_some_and(|(_, down)| down.trim() == "1");
        if !downstream_pci {
            let pos = doc.text_pos_at(bridge.range().start);
            return Err(DiscoveryError::MalformedXml {
                path: path.to_owned(),
                line: pos.row,
                column: pos.col,
                reason: format!(
                    "<object type=\"Bridge\"> with bridge_type {:?}: its downstream side must be PCI (\"U-1\")",
                    bridge.attribute("bridge_type").unwrap_or("(none)")
                ),
            });
        }
    }
    // libhwloc 2 (2.9) dereferences an object's complete set when it has
    // the set: an object with a `cpuset` and no `complete_cpuset` (or a
    // `nodeset` and no `complete_nodeset`) crashes the process inside
    // `hwloc_topology_load` (found by the hostile-input tests). Every
    // export, 1.x and 2.x, writes both.
    for object in root.descendants().filter(|n| n.has_tag_name("object")) {
        for (set, complete) in [
            ("cpuset", "complete_cpuset"),
            ("nodeset", "complete_nodeset"),
        ] {
            if object.attribute(set).is_some() && object.attribute(complete).is_none() {
                let pos = doc.text_pos_at(object.range().start);
                return Err(DiscoveryError::MalformedXml {
                    path: path.to_owned(),
                    line: pos.row,
                    column: pos.col,
                    reason: format!(
                        "<object type=\"{}\"> has a {set} but no {complete}",
                        object.attribute("type").unwrap_or("?")
                    ),
                });
            }
        }
    }
    Ok(())
}

fn info(obj: &TopologyObject, key: &str) -> Option<String> {
    obj.info(key)
        .map(|v| v.to_string_lossy().trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn cstr(s: Option<&CStr>) -> Option<String> {
    s.map(|v| v.to_string_lossy().into_owned())
}

/// The NUMA node an I/O or CPU object is local to, when exactly one.
fn numa_of(obj: &TopologyObject) -> Option<u32> {
    let anchor = if obj.object_type().is_io() {
        obj.first_non_io_ancestor()?
    } else {
        obj
    };
    let nodeset = anchor.nodeset()?;
    if nodeset.weight() != Some(1) {
        return None;
    }
    nodeset
        .iter_set()
        .next()
        .and_then(|i| u32::try_from(usize::from(i)).ok())
}

/// Linux list form of a bitmap's set indices: `0-3,8,10-11`.
fn list_form(indices: impl Iterator<Item = usize>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(usize, usize)> = None;
    let flush = |run: (usize, usize), out: &mut Vec<String>| {
        out.push(if run.0 == run.1 {
            run.0.to_string()
        } else {
            format!("{}-{}", run.0, run.1)
        });
    };
    for i in indices {
        run = match run {
            Some((start, end)) if i == end + 1 => Some((start, i)),
            Some(r) => {
                flush(r, &mut out);
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some(r) = run {
        flush(r, &mut out);
    }
    out.join(",")
}

fn pci_bus_id_of(obj: &TopologyObject) -> Option<PciBusId> {
    let pci = match obj.attributes()? {
        ObjectAttributes::PCIDevice(pci) => pci,
        ObjectAttributes::Bridge(bridge) => match bridge.upstream_attributes()? {
            UpstreamAttributes::PCI(pci) => pci,
        },
        _ => return None,
    };
    Some(PciBusId::new(
        u32::from(pci.domain()),
        pci.bus_id(),
        pci.bus_device(),
        pci.function(),
    ))
}

fn is_host_bridge(obj: &TopologyObject) -> bool {
    matches!(obj.attributes(), Some(ObjectAttributes::Bridge(b)) if b.upstream_type() == BridgeType::Host)
}

fn is_pci_bridge(obj: &TopologyObject) -> bool {
    matches!(obj.attributes(), Some(ObjectAttributes::Bridge(b)) if b.upstream_type() == BridgeType::PCI)
}

fn root_id(host_bridge: &TopologyObject) -> Option<(String, u16, u8)> {
    let Some(ObjectAttributes::Bridge(b)) = host_bridge.attributes() else {
        return None;
    };
    // hwlocality panics (`unreachable!`) asked for the downstream side of
    // a bridge whose downstream type is Host, which libhwloc loads from an
    // XML with no or a bad `bridge_type` (the pre-check refuses those; this
    // holds whatever the topology's source).
    if b.downstream_type() != BridgeType::PCI {
        return None;
    }
    let DownstreamAttributes::PCI(down) = b.downstream_attributes()?;
    let domain: u16 = down.domain();
    let bus = down.secondary_bus();
    Some((format!("pci{domain:04x}:{bus:02x}"), domain, bus))
}

/// The PCIe placement of one I/O object: root complex, bridge path, nearest
/// switch.
struct PciePlace {
    root: String,
    path: Vec<PciBusId>,
    switch: Option<PciBusId>,
}

/// Classifies PCI bridges top-down: a bridge below a root port or a switch's
/// downstream port that has bridges below it is a switch's upstream port;
/// the bridges directly below it are that switch's downstream ports.
fn switch_upstream_ports(topology: &Topology) -> BTreeMap<PciBusId, Option<PciBusId>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Port {
        Root,
        Upstream,
        Downstream,
        Plain,
    }
    let mut switches: BTreeMap<PciBusId, Option<PciBusId>> = BTreeMap::new();
    fn walk(
        obj: &TopologyObject,
        above: Port,
        parent_switch: Option<PciBusId>,
        switches: &mut BTreeMap<PciBusId, Option<PciBusId>>,
    ) {
        for child in obj.io_children() {
            if !is_pci_bridge(child) {
                continue;
            }
            let has_bridge_children = child.io_children().any(is_pci_bridge);
            let port = match above {
                _ if is_host_bridge(obj) => Port::Root,
                Port::Upstream => Port::Downstream,
                Port::Root | Port::Downstream if has_bridge_children => Port::Upstream,
                _ => Port::Plain,
            };
            let mut next_switch = parent_switch;
            if port == Port::Upstream {
                if let Some(id) = pci_bus_id_of(child) {
                    switches.insert(id, parent_switch);
                    next_switch = Some(id);
                }
            }
            walk(child, port, next_switch, switches);
        }
    }
    for host in topology.bridges().filter(|b| is_host_bridge(b)) {
        walk(host, Port::Plain, None, &mut switches);
    }
    switches
}

fn place(obj: &TopologyObject, switches: &BTreeMap<PciBusId, Option<PciBusId>>) -> PciePlace {
    let mut path = Vec::new();
    let mut root = None;
    for ancestor in obj.ancestors() {
        if is_host_bridge(ancestor) {
            root = root_id(ancestor).map(|(id, _, _)| id);
            break;
        }
        if is_pci_bridge(ancestor) {
            if let Some(id) = pci_bus_id_of(ancestor) {
                path.push(id);
            }
        }
    }
    path.reverse();
    let switch = path
        .iter()
        .rev()
        .find(|b| switches.contains_key(b))
        .copied();
    let root = root.unwrap_or_else(|| match pci_bus_id_of(obj) {
        Some(id) => format!("pci{:04x}:{:02x}", id.domain, id.bus),
        None => "unknown".to_owned(),
    });
    PciePlace { root, path, switch }
}

fn osdev_type(obj: &TopologyObject) -> Option<OSDeviceType> {
    match obj.attributes()? {
        ObjectAttributes::OSDevice(os) => Some(os.device_type()),
        _ => None,
    }
}

fn classify(pci: &TopologyObject, class_id: u16, vendor_id: u16) -> PciDeviceRole {
    let osdevs: Vec<OSDeviceType> = pci.io_children().filter_map(osdev_type).collect();
    let subtype = cstr(pci.subtype());
    if subtype.as_deref() == Some("NVSwitch") || (vendor_id == 0x10de && class_id == 0x0680) {
        return PciDeviceRole::NvSwitch;
    }
    let class = class_id >> 8;
    let compute_osdev = osdevs
        .iter()
        .any(|t| matches!(t, OSDeviceType::CoProcessor | OSDeviceType::GPU));
    if class == 0x03
        && (class_id == 0x0302 || vendor_id == 0x10de || vendor_id == 0x1002 || compute_osdev)
    {
        // Display controllers count as GPUs when they are compute-class
        // (3D controller), from a GPU vendor, or have a compute OS device;
        // a BMC's VGA chip does not.
        if class_id == 0x0300 && vendor_id != 0x10de && !compute_osdev {
            return PciDeviceRole::Other;
        }
        return PciDeviceRole::Gpu;
    }
    if class == 0x02
        || osdevs
            .iter()
            .any(|t| matches!(t, OSDeviceType::Network | OSDeviceType::OpenFabrics))
    {
        return PciDeviceRole::Nic;
    }
    if class == 0x01 {
        return PciDeviceRole::Storage;
    }
    PciDeviceRole::Other
}

/// Converts a loaded topology into the hardware model (hwloc's part only).
pub fn model_from_topology(topology: &Topology, origin: String) -> NodeHardware {
    let mut hw = NodeHardware::empty();
    let root = topology.root_object();

    hw.machine = Machine {
        hostname: info(root, "HostName"),
        vendor: info(root, "DMISysVendor").or_else(|| info(root, "DMIBoardVendor")),
        product: info(root, "DMIProductName").or_else(|| info(root, "DMIBoardName")),
        serial: info(root, "DMIProductSerial"),
        cpu_model: topology
            .objects_with_type(ObjectType::Package)
            .find_map(|p| info(p, "CPUModel")),
        packages: count(topology.objects_with_type(ObjectType::Package).len()),
        cores: count(topology.objects_with_type(ObjectType::Core).len()),
        threads: count(topology.objects_with_type(ObjectType::PU).len()),
        memory_bytes: root.total_memory(),
    };
    hw.discovery.hwloc = Some(SourceInfo {
        origin,
        version: info(root, "hwlocVersion"),
    });

    for numa in topology.objects_with_type(ObjectType::NUMANode) {
        let memory_bytes = match numa.attributes() {
            Some(ObjectAttributes::NUMANode(n)) => n.local_memory().map_or(0, |m| m.get()),
            _ => 0,
        };
        let cpus: Vec<usize> = numa
            .cpuset()
            .map(|set| set.iter_set().map(usize::from).collect())
            .unwrap_or_default();
        hw.numa_nodes.push(NumaNode {
            id: numa
                .os_index()
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0),
            cpus: count(cpus.len()),
            cpuset: list_form(cpus.into_iter()),
            memory_bytes,
        });
    }

    let switches = switch_upstream_ports(topology);
    for host in topology.bridges().filter(|b| is_host_bridge(b)) {
        if let Some((id, domain, bus)) = root_id(host) {
            hw.pcie.roots.push(PcieRoot {
                id,
                domain,
                bus,
                numa_node: numa_of(host),
            });
        }
    }
    for bridge in topology.bridges().filter(|b| is_pci_bridge(b)) {
        let Some(id) = pci_bus_id_of(bridge) else {
            continue;
        };
        let Some(parent) = switches.get(&id) else {
            continue;
        };
        let (vendor_id, device_id) = match bridge.attributes() {
            Some(ObjectAttributes::Bridge(b)) => match b.upstream_attributes() {
                Some(UpstreamAttributes::PCI(p)) => (p.vendor_id(), p.device_id()),
                None => (0, 0),
            },
            _ => (0, 0),
        };
        hw.pcie.switches.push(PcieSwitch {
            bus_id: id,
            root: place(bridge, &switches).root,
            parent: *parent,
            vendor_id,
            device_id,
            name: info(bridge, "PCIDevice"),
            numa_node: numa_of(bridge),
        });
    }

    let mut seen_bus_ids = BTreeMap::new();
    for pci in topology.pci_devices() {
        let Some(ObjectAttributes::PCIDevice(attrs)) = pci.attributes() else {
            continue;
        };
        let Some(bus_id) = pci_bus_id_of(pci) else {
            continue;
        };
        *seen_bus_ids.entry(bus_id).or_insert(0) += 1;
        let role = classify(pci, attrs.class_id(), attrs.vendor_id());
        let place = place(pci, &switches);
        let numa_node = numa_of(pci);
        let link = attrs.link_speed();
        hw.pcie.devices.push(PciDevice {
            bus_id,
            role,
            class_id: attrs.class_id(),
            vendor_id: attrs.vendor_id(),
            device_id: attrs.device_id(),
            vendor: info(pci, "PCIVendor"),
            name: info(pci, "PCIDevice"),
            root: place.root.clone(),
            path: place.path.clone(),
            switch: place.switch,
            numa_node,
            link_gbps: (link > 0.0).then_some(link),
        });
        let osdevs: Vec<&TopologyObject> = pci
            .io_children()
            .filter(|c| c.object_type() == ObjectType::OSDevice)
            .collect();
        let osinfo = |key: &str| osdevs.iter().find_map(|o| info(o, key));
        match role {
            PciDeviceRole::Gpu => {
                let memory_kib = osinfo("CUDAGlobalMemorySize")
                    .or_else(|| osinfo("OpenCLGlobalMemorySize"))
                    .and_then(|v| v.parse::<u64>().ok());
                let memory_bytes = gpu_memory_bytes(memory_kib, bus_id, &mut hw.discovery.notes);
                hw.gpus.push(Gpu {
                    index: 0,
                    uuid: osinfo("NVIDIAUUID"),
                    pci_bus_id: bus_id,
                    vendor: osinfo("GPUVendor").or_else(|| info(pci, "PCIVendor")),
                    model: osinfo("GPUModel").or_else(|| info(pci, "PCIDevice")),
                    memory_bytes,
                    architecture: None,
                    compute_capability: osinfo("CUDAComputeCapability"),
                    numa_node,
                    pcie_root: Some(place.root),
                    pcie_switch: place.switch,
                    serial: osinfo("NVIDIASerial"),
                    os_devices: osdevs.iter().filter_map(|o| cstr(o.name())).collect(),
                    fabric: None,
                    mig: None,
                    sources: vec![Source::Hwloc],
                });
            }
            PciDeviceRole::Nic => hw
                .nics
                .push(nic_from(pci, &osdevs, bus_id, numa_node, place)),
            PciDeviceRole::NvSwitch => hw.nvswitches.push(NvSwitch {
                pci_bus_id: bus_id,
                numa_node,
                pcie_root: Some(place.root),
            }),
            PciDeviceRole::Storage | PciDeviceRole::Other => {}
        }
    }
    for (bus_id, n) in seen_bus_ids {
        if n > 1 {
            hw.discovery.notes.push(format!(
                "hwloc reports {n} PCI devices at bus id {bus_id}; queries by bus id see the first"
            ));
        }
    }
    hw.gpus.sort_by_key(|g| g.pci_bus_id);
    for (i, gpu) in hw.gpus.iter_mut().enumerate() {
        gpu.index = count(i);
    }

    if let Ok(all) = topology.distances(None) {
        for distances in all {
            let name = cstr(distances.name()).unwrap_or_default();
            let objects: Vec<Option<&TopologyObject>> = distances.objects().collect();
            let n = objects.len();
            let values = distances.distances();
            if name == "NVLinkBandwidth" {
                let links = nvlinks_from_matrix(&objects, values, &mut hw.discovery.notes);
                hw.nvlinks.extend(links);
                continue;
            }
            let numa_ids: Option<Vec<u32>> = objects
                .iter()
                .map(|o| {
                    o.filter(|o| o.object_type() == ObjectType::NUMANode)
                        .and_then(|o| o.os_index())
                        .and_then(|i| u32::try_from(i).ok())
                })
                .collect();
            if let Some(nodes) = numa_ids {
                hw.numa_distances.push(DistanceMatrix {
                    name: if name.is_empty() {
                        "unnamed".into()
                    } else {
                        name
                    },
                    nodes,
                    values: values.chunks(n.max(1)).map(<[u64]>::to_vec).collect(),
                });
            }
        }
    }
    hw.canonicalize();
    hw
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A GPU's memory in bytes from hwloc's KiB (`CUDAGlobalMemorySize`,
/// `OpenCLGlobalMemorySize`): unknown, and said in a note, past the
/// plausibility limit (which accordd holds reports to), where `* 1024`
/// would also wrap.
fn gpu_memory_bytes(kib: Option<u64>, bus_id: PciBusId, notes: &mut Vec<String>) -> Option<u64> {
    let kib = kib?;
    let bytes = kib
        .checked_mul(1024)
        .filter(|b| *b <= limits::GPU_MEMORY_BYTES);
    if bytes.is_none() {
        notes.push(format!(
            "hwloc reports {kib} KiB of memory on GPU {bus_id}; more than {} GiB is not plausible: memory unknown",
            limits::GPU_MEMORY_GIB
        ));
    }
    bytes
}

fn nic_from(
    pci: &TopologyObject,
    osdevs: &[&TopologyObject],
    bus_id: PciBusId,
    numa_node: Option<u32>,
    place: PciePlace,
) -> Nic {
    let mut interfaces = Vec::new();
    let mut rdma_devices = Vec::new();
    let mut link_layers = Vec::new();
    let mut address = None;
    for os in osdevs {
        let Some(name) = cstr(os.name()) else {
            continue;
        };
        match osdev_type(os) {
            Some(OSDeviceType::Network) => {
                address = address.or_else(|| info(os, "Address"));
                interfaces.push(name);
            }
            Some(OSDeviceType::OpenFabrics) => {
                link_layers.extend(
                    os.infos()
                        .iter()
                        .filter(|i| i.name().to_string_lossy().ends_with("LinkLayer"))
                        .map(|i| i.value().to_string_lossy().into_owned()),
                );
                rdma_devices.push(name);
            }
            _ => {}
        }
    }
    let attrs_class = match pci.attributes() {
        Some(ObjectAttributes::PCIDevice(a)) => a.class_id(),
        _ => 0,
    };
    let kind = if link_layers.iter().any(|l| l == "Ethernet") && !rdma_devices.is_empty() {
        NicKind::Roce
    } else if attrs_class == 0x0207
        || link_layers.iter().any(|l| l == "InfiniBand")
        || interfaces.iter().any(|i| i.starts_with("ib"))
    {
        NicKind::Infiniband
    } else if attrs_class >> 8 == 0x02 || !interfaces.is_empty() {
        NicKind::Ethernet
    } else {
        NicKind::Unknown
    };
    Nic {
        name: interfaces
            .first()
            .or(rdma_devices.first())
            .cloned()
            .unwrap_or_else(|| bus_id.to_string()),
        kind,
        pci_bus_id: Some(bus_id),
        vendor: info(pci, "PCIVendor"),
        model: info(pci, "PCIDevice"),
        numa_node,
        pcie_root: Some(place.root),
        pcie_switch: place.switch,
        interfaces,
        rdma_devices,
        link_speed_mbps: None,
        address,
    }
}

/// hwloc's `NVLinkBandwidth` matrix (MB/s) over GPU OS devices and NVSwitch
/// PCI devices, as connected pairs. A bandwidth past the plausibility limit
/// is cut to it, and said in one note.
fn nvlinks_from_matrix(
    objects: &[Option<&TopologyObject>],
    values: &[u64],
    notes: &mut Vec<String>,
) -> Vec<NvLink> {
    let max = limits::NVLINK_BANDWIDTH_MBPS;
    let mut cut: Vec<u64> = Vec::new();
    let n = objects.len();
    let peer = |obj: &TopologyObject| -> Option<NvLinkPeer> {
        let pci = if obj.object_type() == ObjectType::OSDevice {
            obj.parent()?
        } else {
            obj
        };
        let pci_bus_id = pci_bus_id_of(pci)?;
        let kind = match (obj.object_type(), cstr(pci.subtype()).as_deref()) {
            (_, Some("NVSwitch")) => NvLinkPeerKind::NvSwitch,
            (ObjectType::OSDevice, _) => NvLinkPeerKind::Gpu,
            _ => NvLinkPeerKind::Other,
        };
        Some(NvLinkPeer { kind, pci_bus_id })
    };
    let peers: Vec<Option<NvLinkPeer>> = objects.iter().map(|o| o.and_then(peer)).collect();
    let mut out = Vec::new();
    for i in 0..n {
        for j in (i + 1)..n {
            let bw = values
                .get(i * n + j)
                .copied()
                .unwrap_or(0)
                .max(values.get(j * n + i).copied().unwrap_or(0));
            if bw == 0 {
                continue;
            }
            if let (Some(a), Some(b)) = (&peers[i], &peers[j]) {
                if bw > max {
                    cut.push(bw);
                }
                out.push(NvLink {
                    a: a.clone(),
                    b: b.clone(),
                    links: None,
                    bandwidth_mbps: bw.min(max),
                    version: None,
                    sources: vec![Source::Hwloc],
                });
            }
        }
    }
    if let Some(largest) = cut.iter().max() {
        notes.push(format!(
            "hwloc's NVLinkBandwidth matrix holds {} bandwidths over {max} MB/s (up to {largest}); more is not plausible: cut to {max}",
            cut.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_form_collapses_runs() {
        assert_eq!(
            list_form([0, 1, 2, 3, 8, 10, 11].into_iter()),
            "0-3,8,10-11"
        );
        assert_eq!(list_form([5].into_iter()), "5");
        assert_eq!(list_form(std::iter::empty()), "");
    }
}
