//! The store's own tests.

use super::*;

fn hardware() -> NodeHardware {
    let text = include_str!("../../../tests/fixtures/models/x9drg-wholeio.json");
    serde_json::from_str(text).unwrap()
}

#[test]
fn silent_nodes_turn_stale_and_stay_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.report("a", hardware(), None, 1_000).unwrap();
    let record = store.node("a").unwrap().unwrap();
    assert!(!record.is_stale(1_100, 120));
    assert!(record.is_stale(1_121, 120));
    // A heartbeat makes it fresh again; nothing is ever deleted.
    let beat = Liveness {
        last_seen: 1_200,
        ..Liveness::default()
    };
    assert_eq!(store.heartbeat("a", beat).unwrap(), Some(1));
    let record = store.node("a").unwrap().unwrap();
    assert!(!record.is_stale(1_300, 120));
    assert_eq!(store.node_count(), 1);
    assert_eq!(
        store.heartbeat("unknown", Liveness::default()).unwrap(),
        None
    );
    assert_eq!(store.node_count(), 1);
}

#[test]
fn a_closed_store_opens_again_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20u64 {
        let store = Store::open(dir.path()).unwrap();
        store.report("a", hardware(), None, 1_000 + round).unwrap();
        drop(store.journal().unwrap());
        store.close(CLOSE_WITHIN).unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.node("a").unwrap().unwrap().last_seen, 1_019);
    store.close(CLOSE_WITHIN).unwrap();
}

#[test]
fn close_says_when_a_journal_still_holds_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let journal = store.journal().unwrap();
    let err = store.close(Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, StoreError::StillOpen { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert!(msg.contains("Journal"), "{msg}");
    drop(journal);
}

/// Bytes under `dir`, files of every depth.
fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                disk_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// A model of about `bytes` that differs for each `variant`.
fn big_hardware(bytes: usize, variant: u64) -> NodeHardware {
    let mut h = hardware();
    let filler: String = (0..bytes)
        .map(|i| char::from(b'a' + ((i as u64 * 7 + variant) % 26) as u8))
        .collect();
    h.machine.hostname = Some(filler);
    h
}

#[test]
fn reports_that_differ_each_time_replace_their_record_on_disk() {
    // 300 reports of a 300 KiB model, each different: 90 MB written. Kept
    // whole, each record was a sled blob that an overwrite never removes
    // (the store grew by every report, and a restart reclaimed nothing).
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for i in 0..300 {
        store
            .report("a", big_hardware(300 << 10, i), None, 1_000 + i)
            .unwrap();
    }
    let on_disk = disk_bytes(dir.path());
    assert!(
        on_disk < 32 << 20,
        "300 reports of 300 KiB for one node left {on_disk} bytes on disk"
    );
    assert_eq!(store.node("a").unwrap().unwrap().generation, 300);
    store.close(CLOSE_WITHIN).unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.usage().1, {
        let n = store.stored("a").unwrap().unwrap();
        serde_json::to_vec(&n).unwrap().len() as u64
    });
}

#[test]
fn reports_past_the_store_limits_are_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let one = serde_json::to_vec(&StoredNode {
        name: "n0".into(),
        identity: MachineIdentity::of(&hardware()),
        hardware: hardware(),
        generation: 1,
        reported_at: 1_000,
        replacement_allowed: false,
        session: Some("0".repeat(64)),
    })
    .unwrap()
    .len() as u64;
    let limits = StoreLimits {
        max_nodes: 3,
        max_node_bytes: one + 1_000,
        max_bytes: 3 * one + 100,
    };
    let store = Store::open_with(dir.path(), limits).unwrap();
    for n in ["n0", "n1", "n2"] {
        store.report(n, hardware(), None, 1_000).unwrap();
    }
    // A fourth name: past max_nodes.
    let err = store.report("n3", hardware(), None, 1_000).unwrap_err();
    assert!(matches!(err, StoreError::Full { .. }), "{err}");
    assert!(err.to_string().contains("store.max_nodes"), "{err}");
    assert_eq!(store.node("n3").unwrap(), None);
    assert_eq!(store.node_count(), 3);
    // One node's record past max_node_bytes.
    let err = store
        .report("n0", big_hardware(2_000, 1), None, 1_001)
        .unwrap_err();
    assert!(err.to_string().contains("store.max_node_bytes"), "{err}");
    assert_eq!(store.node("n0").unwrap().unwrap().reported_at, 1_000);
    // Within max_node_bytes, but all of them past max_bytes.
    let err = store
        .report("n0", big_hardware(500, 1), None, 1_001)
        .unwrap_err();
    assert!(err.to_string().contains("store.max_bytes"), "{err}");
    assert_eq!(store.node("n0").unwrap().unwrap().generation, 1);
    // Forgetting one makes room, and is counted after a restart too.
    assert!(store.forget("n2").unwrap());
    assert!(!store.forget("n2").unwrap());
    assert_eq!(store.node("n2").unwrap(), None);
    assert_eq!(store.heartbeat("n2", Liveness::default()).unwrap(), None);
    assert!(!store.agents_seen().unwrap().contains_key("n2"));
    store.report("n3", hardware(), None, 1_002).unwrap();
    let used = store.usage().1;
    store.close(CLOSE_WITHIN).unwrap();
    let store = Store::open_with(dir.path(), limits).unwrap();
    assert_eq!(store.usage().1, used);
    assert_eq!(store.node_count(), 3);
    assert!(store.report("n4", hardware(), None, 1_003).is_err());
}

#[test]
fn nodes_are_listed_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for n in ["n1", "n10", "n2", "n3", "n30"] {
        store.report(n, hardware(), None, 1_000).unwrap();
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = store.nodes_page(after.as_deref(), 2).unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.into_iter().map(|r| r.name));
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ["n1", "n10", "n2", "n3", "n30"]);
    let all: Vec<_> = store.nodes().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(all, seen);
}

#[test]
fn a_schema_1_store_is_read_after_its_records_become_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let record = StoredNode {
        name: "old".into(),
        identity: MachineIdentity::of(&hardware()),
        hardware: hardware(),
        generation: 4,
        reported_at: 1_000,
        replacement_allowed: false,
        session: None,
    };
    {
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        db.open_tree(META)
            .unwrap()
            .insert(SCHEMA_KEY, &1u32.to_le_bytes())
            .unwrap();
        db.open_tree(NODES)
            .unwrap()
            .insert("old", serde_json::to_vec(&record).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    wait_released(dir.path(), CLOSE_WITHIN).unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.node("old").unwrap().unwrap().generation, 4);
    assert_eq!(store.node_count(), 1);
}

#[test]
fn a_store_past_lowered_limits_still_takes_reports_that_do_not_grow() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for n in ["n0", "n1"] {
        store.report(n, hardware(), None, 1_000).unwrap();
    }
    let used = store.usage().1;
    store.close(CLOSE_WITHIN).unwrap();
    let lowered = StoreLimits {
        max_nodes: 1,
        max_node_bytes: used / 4,
        max_bytes: used / 2,
    };
    let store = Store::open_with(dir.path(), lowered).unwrap();
    // The same machine again (a restarted agent): taken.
    let (outcome, _) = store.report("n0", hardware(), None, 1_001).unwrap();
    assert_eq!(outcome, ReportOutcome::Unchanged);
    assert!(store.allow_replacement("n1").unwrap());
    // A larger record, or a third node: refused.
    assert!(store
        .report("n0", big_hardware(1_000, 2), None, 1_002)
        .is_err());
    assert!(store.report("n2", hardware(), None, 1_002).is_err());
}
