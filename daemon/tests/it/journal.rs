//! The intent journal survives `kill -9`: every intent acknowledged as
//! written (and marked sent) is there after restart, and reconciling a
//! sent intent never resends it at once.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use accordd::journal::{reconcile, IntentAction as Action, IntentState, Resume};
use accordd::store::Store;

/// The writer, run in a child process by `acknowledged_intents_survive_kill_9`
/// (`--ignored --exact`): ignored in ordinary runs, it is only half a test.
#[test]
#[ignore = "the child half of acknowledged_intents_survive_kill_9, which runs it"]
fn journal_child_writer() {
    let dir = std::env::var("ACCORD_JOURNAL_CHILD").expect(
        "journal_child_writer runs only as the child of acknowledged_intents_survive_kill_9 \
         (ACCORD_JOURNAL_CHILD names the store); run that test",
    );
    let store = Store::open(Path::new(&dir)).unwrap();
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

/// Killed on drop, so a failed assertion leaves no writer behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn acknowledged_intents_survive_kill_9() {
    const WANT: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let stderr = dir.path().join("child.stderr");
    let mut child = Guard(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "journal::journal_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ACCORD_JOURNAL_CHILD", &store_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    );
    // The child's stdout, read on a thread: the wait below has a deadline.
    let stdout = child.0.stdout.take().unwrap();
    let (tx, acks) = mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ACK ") {
                if tx.send(id.parse::<u64>().unwrap()).is_err() {
                    break;
                }
            }
        }
    });
    let said = |child: &mut Guard| {
        let status = match child.0.try_wait().unwrap() {
            Some(s) => s.to_string(),
            None => "still running".to_owned(),
        };
        format!(
            "journal_child_writer pid {}: {status}; stderr:\n{}",
            child.0.id(),
            std::fs::read_to_string(&stderr).unwrap_or_default()
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut acked = Vec::new();
    while acked.len() < WANT {
        let left = deadline.saturating_duration_since(Instant::now());
        match acks.recv_timeout(left) {
            Ok(id) => acked.push(id),
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "{WANT} ACK lines from journal_child_writer within 30 s; got {}\n{}",
                acked.len(),
                said(&mut child)
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Its stdout closed: it has ended or is ending.
                let _ = child.0.wait();
                panic!(
                    "{WANT} ACK lines from journal_child_writer; its output ended after {}\n{}",
                    acked.len(),
                    said(&mut child)
                )
            }
        }
    }
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    // What it acknowledged before the kill landed counts as well.
    reader.join().unwrap();
    acked.extend(acks.try_iter());
    let store = Store::open(&store_dir).unwrap();
    let open = store.journal().unwrap().open_intents().unwrap();
    let ids: Vec<u64> = open.iter().map(|i| i.id).collect();
    for id in &acked {
        assert!(
            ids.contains(id),
            "acknowledged intent {id} lost ({} acknowledged)",
            acked.len()
        );
    }
    for intent in open.iter().filter(|i| acked.contains(&i.id)) {
        assert!(matches!(intent.state, IntentState::Sent { .. }));
        // The BMC still shows Off (the Reset may be landing): verify only.
        assert_eq!(reconcile(intent, Some(false)), Resume::Verify);
        assert_eq!(reconcile(intent, Some(true)), Resume::Reached);
    }
}
