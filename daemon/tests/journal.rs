//! The intent journal survives `kill -9`: every intent acknowledged as
//! written (and marked sent) is there after restart, and reconciling a
//! sent intent never resends it at once.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use accordd::journal::{reconcile, IntentAction as Action, IntentState, Resume};
use accordd::store::Store;

/// The writer, run in a child process by the test below.
#[test]
fn journal_child_writer() {
    let Ok(dir) = std::env::var("ACCORD_JOURNAL_CHILD") else {
        return;
    };
    let store = Store::open(std::path::Path::new(&dir)).unwrap();
    let journal = store.journal().unwrap();
    for i in 0.. {
        let mut intent = journal
            .record(
                &format!("n{i}"),
                Action::PowerOn,
                vec!["ml/train".into()],
                i,
            )
            .unwrap();
        journal
            .mark(&mut intent, IntentState::Sent { at: i })
            .unwrap();
        // Acknowledged only after both writes were flushed.
        println!("ACK {}", intent.id);
    }
}

#[test]
fn acknowledged_intents_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "journal_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ACCORD_JOURNAL_CHILD", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while acked.len() < 40 {
        let line = lines.next().expect("child output").unwrap();
        if let Some(id) = line.strip_prefix("ACK ") {
            acked.push(id.parse::<u64>().unwrap());
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let open = store.journal().unwrap().open_intents().unwrap();
    let ids: Vec<u64> = open.iter().map(|i| i.id).collect();
    for id in &acked {
        assert!(ids.contains(id), "acknowledged intent {id} lost");
    }
    for intent in open.iter().filter(|i| acked.contains(&i.id)) {
        assert!(matches!(intent.state, IntentState::Sent { .. }));
        // The BMC still shows Off (the Reset may be landing): verify only.
        assert_eq!(reconcile(intent, Some(false)), Resume::Verify);
        assert_eq!(reconcile(intent, Some(true)), Resume::Reached);
    }
}
