//! A configuration file past `MAX_CONFIG_BYTES` is refused before the toml
//! crate tokenizes it (4 MiB of `[` took 300 MiB of heap; found by the
//! hostile-input tests), naming the file and its size.

use accord::config_file::{parse, ConfigFileError, MAX_CONFIG_BYTES};

#[test]
fn a_config_past_the_cap_is_refused_before_parsing() {
    let text = "[".repeat(MAX_CONFIG_BYTES + 1);
    let e = parse::<toml::Table>(&text, "fleet.toml").unwrap_err();
    assert!(matches!(e, ConfigFileError::Invalid { .. }), "{e}");
    let shown = e.to_string();
    assert!(
        shown.starts_with("fleet.toml: 1 problem(s):") && shown.contains("at most 4 MiB"),
        "{shown}"
    );
    // At the cap, the parser judges it (and says where).
    let e = parse::<toml::Table>(&"[".repeat(MAX_CONFIG_BYTES), "fleet.toml").unwrap_err();
    assert!(matches!(e, ConfigFileError::Parse { .. }), "{e}");
}
