//! The built-in recordings the lab embeds (tests/fixtures/SOURCES.md says
//! where they come from): one HGX baseboard of a real DGX-2 (hwloc export)
//! with recorded 8 x H100 NVML views. Scenarios name them; [`crate::recordings`]
//! writes them out for the machines.

const BOARD: &str = include_str!("../../tests/fixtures/hwloc/derived/dgx2-board0-no-nvml.xml");
const BOARD_7GPU: &str = include_str!("../../tests/fixtures/hwloc/derived/dgx2-board0-7gpu.xml");

/// One embedded recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    pub name: &'static str,
    /// What it shows, in a few words.
    pub about: &'static str,
    pub hwloc_xml: &'static str,
    pub nvml_snapshot: &'static str,
}

/// Every built-in recording, by name.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "h100-8gpu",
        about: "8 x H100, MIG disabled",
        hwloc_xml: BOARD,
        nvml_snapshot: include_str!("../../tests/fixtures/nvml/h100-8gpu.json"),
    },
    Builtin {
        name: "h100-8gpu-mig-1g",
        about: "8 x H100, MIG enabled on all, 7 x 1g.10gb each",
        hwloc_xml: BOARD,
        nvml_snapshot: include_str!("../../tests/fixtures/nvml/h100-8gpu-mig-1g.json"),
    },
    Builtin {
        name: "h100-7gpu",
        about: "7 x H100, MIG disabled: the eighth GPU fell off the bus",
        hwloc_xml: BOARD_7GPU,
        nvml_snapshot: include_str!("../../tests/fixtures/nvml/h100-7gpu.json"),
    },
    Builtin {
        name: "h100-8gpu-mixed-mig",
        about: "8 x H100, MIG mixed: 4 disabled, 3 enabled (7 + 3 + 0 instances), 1 enabled after a reset",
        hwloc_xml: BOARD,
        nvml_snapshot: include_str!("../../tests/fixtures/nvml/h100-8gpu-mig.json"),
    },
];

/// What a machine replays when neither it (`[lab.machines.NODE]
/// recording`) nor its profile (`[lab.recordings]`) names a recording.
pub const DEFAULT_BUILTIN: &str = "h100-8gpu";

pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The built-in names, for error messages.
pub fn builtin_names() -> String {
    BUILTINS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}
