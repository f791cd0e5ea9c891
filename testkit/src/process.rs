//! Child processes as the integration tests run them: a command run to its
//! end within a deadline, and a long-running child whose stderr goes to a
//! log, killed on drop, with waits that give up at a deadline and fail
//! with the child's state and the tail of its log.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Another workspace binary, built beside `built` (a path cargo gave as
/// `CARGO_BIN_EXE_*`): accordctl is its own crate, so accordd's tests
/// find it in the same target directory (`cargo test --workspace` builds
/// every crate's binaries before any test runs). Fails naming what to build.
pub fn sibling_binary(built: &str, name: &str) -> PathBuf {
    let path = Path::new(built).with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is not built: `cargo test --workspace` builds it, or `cargo build -p {name}`",
        path.display()
    );
    path
}

/// Runs `cmd` to its end, with its output, as `Command::output` does (stdin
/// is null); panics, with what it wrote, when it is still running after
/// `within` (it is killed then).
#[track_caller]
pub fn output_within(cmd: &mut Command, within: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!(
                "{cmd:?} still running after {within:?} (killed: {status}); stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&stdout.join().unwrap()),
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// The last 40 lines of a log, for failure messages (or why it could not
/// be read).
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log)
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(40);
    format!(
        "--- {} (last {} lines) ---\n{}",
        log.display(),
        lines.len() - from,
        lines[from..].join("\n")
    )
}

/// A child process, by name, its stderr in a log file and its stdout in
/// another (the log's path with extension `stdout`); stdin is null. Killed
/// (and reaped) on drop, so a failed assertion leaves nothing behind, and
/// it holds no handle on the test harness's output.
#[derive(Debug)]
pub struct Process {
    name: String,
    log: PathBuf,
    child: std::process::Child,
}

impl Process {
    /// Starts `cmd` (its stdio set as said above) as `name`, e.g.
    /// "accordd" or "accord-agent": failure messages call it so.
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Process {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.with_extension("stdout")).unwrap())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Process {
            name: name.to_owned(),
            log: log.to_owned(),
            child,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Where its stderr goes.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Where its stdout goes.
    pub fn stdout_path(&self) -> PathBuf {
        self.log.with_extension("stdout")
    }

    /// The last lines of its log, for failure messages.
    pub fn tail(&self) -> String {
        tail(&self.log)
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Panics, with its exit status and log, if it has exited.
    #[track_caller]
    pub fn assert_running(&mut self, waiting_for: &str) {
        if let Some(status) = self.exited() {
            panic!(
                "{} pid {} exited ({status}) while waiting for {waiting_for}:\n{}",
                self.name,
                self.id(),
                self.tail()
            );
        }
    }

    /// Panics, when `deadline` has passed, with "NAME pid PID `failure`"
    /// and its log.
    #[track_caller]
    pub fn assert_before(&self, deadline: Instant, failure: std::fmt::Arguments<'_>) {
        assert!(
            Instant::now() < deadline,
            "{} pid {} {failure}:\n{}",
            self.name,
            self.id(),
            self.tail()
        );
    }

    /// Sends it `signal` (a name `kill` knows: "TERM", "INT", "HUP").
    #[track_caller]
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed: {status}");
    }

    /// SIGKILL (`Child::kill`).
    #[track_caller]
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
    }

    /// Waits for it to end, however long that takes (after [`Self::kill`]).
    #[track_caller]
    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }

    /// Waits (up to `within`) for it to exit after `after` (e.g. "the
    /// signal"); panics at the deadline, with its log.
    #[track_caller]
    pub fn wait_exit(&mut self, within: Duration, after: &str) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            self.assert_before(
                deadline,
                format_args!("still running {within:?} after {after}"),
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends it `signal` and waits (up to `within`) for it to exit; asserts
    /// that it exited 0 and wrote nothing on stdout (logs go to stderr).
    /// Returns its log, for the test to check what it said.
    #[track_caller]
    pub fn stops_cleanly_on(&mut self, signal: &str, within: Duration) -> String {
        self.signal(signal);
        let status = self.wait_exit(within, "the signal");
        let said = std::fs::read_to_string(&self.log).unwrap();
        assert_eq!(status.code(), Some(0), "{signal}: {status}:\n{said}");
        let stdout = std::fs::read_to_string(self.stdout_path()).unwrap();
        assert!(stdout.is_empty(), "{} wrote to stdout: {stdout}", self.name);
        said
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
