//! Real Redfish peers for tests, benches and the local lab: OpenStack's
//! `sushy-emulator --fake` (BMCs whose power changes land 1–11 s after the
//! request) and `sushy-static` (serves a recorded mockup tree), started on
//! a free loopback port and stopped on drop. They come from the PyPI
//! package `sushy-tools`, which `scripts/bootstrap` installs into `.venv/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the sushy-tools commands are: `$ACCORD_SUSHY_BIN`, else the
/// repository's `.venv/bin`, else `PATH`.
pub fn sushy_bin(name: &str) -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("ACCORD_SUSHY_BIN") {
        return Ok(Path::new(&dir).join(name));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.venv/bin")
        .join(name);
    if venv.exists() {
        return Ok(venv);
    }
    if let Ok(path) = std::env::var("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.exists() {
                return Ok(p);
            }
        }
    }
    Err(format!(
        "{name} not found: run scripts/bootstrap (it installs sushy-tools into .venv/), \
         or set ACCORD_SUSHY_BIN to the directory holding it"
    ))
}

/// A free loopback port ([`crate::ports::free_port`]): released before the
/// caller binds it; whoever binds it later must still notice a failure, as
/// [`start_emulator`] and [`start_static`] do.
pub fn free_port() -> u16 {
    crate::ports::free_port().expect("a free loopback port")
}

/// One fake system of the emulator.
#[derive(Debug, Clone)]
pub struct FakeSystem {
    /// Id in URLs (`/redfish/v1/Systems/{id}`); also its name.
    pub id: String,
    pub power_on: bool,
}

#[derive(Debug, Default, Clone)]
pub struct EmulatorOptions {
    /// Basic-auth user and password (checked against a bcrypt htpasswd).
    pub basic_auth: Option<(String, String)>,
    /// `SUSHY_EMULATOR_DISABLE_POWER_OFF`: ForceOff and GracefulShutdown
    /// are refused with 400.
    pub disable_power_off: bool,
    /// Serve HTTPS with this PEM certificate and key.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// A running peer; killed on drop.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Peer {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests the peer logged, as `METHOD PATH STATUS` (ANSI colour
    /// codes removed; the readiness probes made while it started left out).
    pub fn requests(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut out = Vec::new();
        // sushy-static prints each request's headers before its log line:
        // a probe's header hides the request line that follows.
        let mut probe_header_seen = false;
        for line in text.lines() {
            let clean = strip_ansi(line);
            if clean.starts_with(PROBE_HEADER) {
                probe_header_seen = true;
                continue;
            }
            // werkzeug: `127.0.0.1 - - [date] "POST /path HTTP/1.1" 204 -`
            if let Some(start) = clean.find('"') {
                let rest = &clean[start + 1..];
                if let Some(end) = rest.find('"') {
                    let request = &rest[..end];
                    let status = rest[end + 1..].split_whitespace().next().unwrap_or("");
                    let mut parts = request.split_whitespace();
                    if let (Some(m), Some(p)) = (parts.next(), parts.next()) {
                        if std::mem::take(&mut probe_header_seen) {
                            continue;
                        }
                        out.push(format!("{m} {p} {status}"));
                    }
                }
            }
        }
        out
    }

    /// Everything the peer wrote (sushy-static prints each request's
    /// headers and body).
    pub fn log_text(&self) -> String {
        strip_ansi(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// How many logged requests start with `prefix` (e.g. `POST /redfish/v1/Systems/n1/Actions`).
    pub fn count(&self, prefix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }

    /// Kills the peer now (as a BMC that dies mid-operation).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The header that marks a readiness probe of sushy-static (which prints
/// each request's headers), with a value only this probe uses.
const PROBE_HEADER: &str = "X-Accord-Ready:";
/// How long a peer may take to answer its first request.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Tries on a fresh port when another process took the one picked.
const PORT_TRIES: u32 = 3;

/// How a starting peer shows that it, not another process, holds its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// sushy-emulator (werkzeug) logs ` * Running on http(s)://127.0.0.1:PORT`
    /// once it has bound the port.
    Announced,
    /// sushy-static (`http.server`) says nothing when it binds: a GET
    /// carrying [`PROBE_HEADER`] with a value only this probe uses must be
    /// answered 200 and show up in its own log.
    Probed,
}

/// Why a peer did not come up.
enum NotReady {
    /// It exited because its port was taken meanwhile: try another.
    PortTaken(String),
    Failed(String),
}

/// A value no other probe uses.
fn nonce(port: u16) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{port}-{n}", std::process::id())
}

/// One `GET /redfish/v1` carrying the probe's header; the status it was
/// answered with.
fn probe_once(port: u16, nonce: &str) -> Result<u16, String> {
    use std::io::Read;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET /redfish/v1 HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{PROBE_HEADER} {nonce}\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let status_line = answer.lines().next().unwrap_or("");
    status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {status_line:?}"))
}

/// Waits until the child shows it holds `port` (as `ready` says) and a
/// connection to it succeeds; fails as soon as the child exits.
fn wait_ready(
    child: &mut Child,
    port: u16,
    log: &Path,
    what: &str,
    ready: Ready,
) -> Result<(), NotReady> {
    let nonce = nonce(port);
    let announced = format!("127.0.0.1:{port}");
    let output = || strip_ansi(&std::fs::read_to_string(log).unwrap_or_default());
    let deadline = Instant::now() + READY_WITHIN;
    let mut last = String::from("nothing listening yet");
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let text = output();
                return Err(if text.contains("Address already in use") {
                    NotReady::PortTaken(text)
                } else {
                    NotReady::Failed(format!(
                        "{what} exited ({status}) before it was ready on port {port}:\n{}",
                        text.trim()
                    ))
                });
            }
            Ok(None) => {}
            Err(e) => return Err(NotReady::Failed(format!("{what}: {e}"))),
        }
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let listening =
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok();
        if listening {
            match ready {
                Ready::Announced => {
                    let text = output();
                    if text
                        .lines()
                        .any(|l| l.contains("Running on") && l.contains(&announced))
                    {
                        return Ok(());
                    }
                    last = "listening, but it has not said it bound the port \
                            (another process on the port?)"
                        .to_owned();
                }
                Ready::Probed => match probe_once(port, &nonce) {
                    Ok(200) if output().contains(&nonce) => return Ok(()),
                    Ok(200) => {
                        last = "answered 200, but the answer is not in its log \
                                (another process on the port?)"
                            .to_owned()
                    }
                    Ok(status) => last = format!("answered {status}"),
                    Err(e) => last = e,
                },
            }
        }
        if Instant::now() > deadline {
            return Err(NotReady::Failed(format!(
                "{what} was not ready on 127.0.0.1:{port} within {} s (last: {last}); \
                 its output:\n{}",
                READY_WITHIN.as_secs(),
                output().trim()
            )));
        }
        std::thread::sleep(Duration::from_millis(if listening { 200 } else { 50 }));
    }
}

/// One request that makes the emulator build its systems driver before any
/// load arrives: sushy-tools 2.2 memoizes the driver without a lock, so a
/// first burst of parallel requests builds several, and a late one rewrites
/// the initial state over an accepted Reset (seen as a power-on that never
/// lands).
fn warm_up(port: u16, auth: Option<&(String, String)>) -> Result<(), String> {
    use base64::Engine;
    use std::io::Read;
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let header = auth
        .map(|(u, p)| {
            format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        })
        .unwrap_or_default();
    write!(
        stream,
        "GET /redfish/v1/Systems HTTP/1.0\r\nHost: 127.0.0.1\r\n{header}\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    if !answer.starts_with("HTTP/1.1 200") && !answer.starts_with("HTTP/1.0 200") {
        return Err(format!(
            "sushy-emulator warm-up: {}",
            answer.lines().next().unwrap_or("no answer")
        ));
    }
    Ok(())
}

fn python_str(s: &str) -> String {
    format!("{s:?}")
}

/// Starts `sushy-emulator --fake` with `systems`.
pub fn start_emulator(systems: &[FakeSystem], options: &EmulatorOptions) -> Result<Peer, String> {
    let bin = sushy_bin("sushy-emulator")?;
    let dir = tempfile::Builder::new()
        .prefix("accord-sushy")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let mut config =
        String::from("SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_FAKE_SYSTEMS = [\n");
    for s in systems {
        config.push_str(&format!(
            "  {{'uuid': {id}, 'name': {id}, 'power_state': {st}, 'nics': []}},\n",
            id = python_str(&s.id),
            st = python_str(if s.power_on { "On" } else { "Off" })
        ));
    }
    config.push_str("]\n");
    // The fake driver keeps its systems in SQLite; without a directory of
    // its own every emulator on the machine would share one state.
    config.push_str(&format!(
        "SUSHY_EMULATOR_STATE_DIR = {}\n",
        python_str(&dir.path().join("state").display().to_string())
    ));
    if options.disable_power_off {
        config.push_str("SUSHY_EMULATOR_DISABLE_POWER_OFF = True\n");
    }
    if let Some((user, password)) = &options.basic_auth {
        let htpasswd = dir.path().join("htpasswd");
        let python = python_for(&bin);
        let out = Command::new(&python)
            .args([
                "-c",
                "import bcrypt,sys; print(bcrypt.hashpw(sys.argv[2].encode(), bcrypt.gensalt(4)).decode())",
                user,
                password,
            ])
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        if !out.status.success() {
            return Err(format!("bcrypt: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let hash = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        std::fs::write(&htpasswd, format!("{user}:{hash}\n")).map_err(|e| e.to_string())?;
        config.push_str(&format!(
            "SUSHY_EMULATOR_AUTH_FILE = {}\n",
            python_str(&htpasswd.display().to_string())
        ));
    }
    if let Some((cert, key)) = &options.tls {
        config.push_str(&format!(
            "SUSHY_EMULATOR_SSL_CERT = {}\nSUSHY_EMULATOR_SSL_KEY = {}\n",
            python_str(&cert.display().to_string()),
            python_str(&key.display().to_string())
        ));
    }
    let cfg = dir.path().join("emulator.conf");
    std::fs::File::create(&cfg)
        .and_then(|mut f| f.write_all(config.as_bytes()))
        .map_err(|e| e.to_string())?;
    let args = vec!["--fake".into(), "--config".into(), cfg.into_os_string()];
    let peer = spawn_peer(&bin, &args, dir, "sushy-emulator", Ready::Announced)?;
    if options.tls.is_none() {
        warm_up(peer.port, options.basic_auth.as_ref())?;
    }
    Ok(peer)
}

/// Serves the mockup tree `dir` (the folder that is `/redfish/v1`) with
/// `sushy-static`.
pub fn start_static(mockup: &Path) -> Result<Peer, String> {
    let bin = sushy_bin("sushy-static")?;
    let dir = tempfile::Builder::new()
        .prefix("accord-sushy-static")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let args = vec!["-m".into(), mockup.as_os_str().to_owned()];
    spawn_peer(&bin, &args, dir, "sushy-static", Ready::Probed)
}

/// The Python next to `bin` (the venv's), else `python3` on `PATH`.
fn python_for(bin: &Path) -> PathBuf {
    let python = bin.with_file_name("python3");
    if python.exists() {
        python
    } else {
        PathBuf::from("python3")
    }
}

/// Runs `bin args` on a free loopback port with its output in `dir`, and
/// waits until it answers; on a fresh port when another process took the
/// one picked before the peer could bind it. A peer that does not come up
/// is killed and reaped.
fn spawn_peer(
    bin: &Path,
    args: &[std::ffi::OsString],
    dir: tempfile::TempDir,
    what: &str,
    ready: Ready,
) -> Result<Peer, String> {
    let log = dir.path().join("requests.log");
    let mut taken = Vec::new();
    let mut last_output = String::new();
    for _ in 0..PORT_TRIES {
        let port = free_port();
        match start_on(bin, args, port, &log, what, ready) {
            Ok(child) => {
                return Ok(Peer {
                    child,
                    port,
                    log,
                    _dir: dir,
                })
            }
            Err(NotReady::PortTaken(output)) => {
                taken.push(port);
                last_output = output;
            }
            Err(NotReady::Failed(message)) => return Err(message),
        }
    }
    Err(format!(
        "{what}: each port picked was taken by another process before it could bind it \
         ({taken:?}); its last output:\n{}",
        last_output.trim()
    ))
}

/// Starts `bin args` on `port` (output in `log`, truncated first) and
/// waits until it answers; kills and reaps it when it does not.
fn start_on(
    bin: &Path,
    args: &[std::ffi::OsString],
    port: u16,
    log: &Path,
    what: &str,
    ready: Ready,
) -> Result<Child, NotReady> {
    let failed = |e: std::io::Error| NotReady::Failed(format!("{what}: {}: {e}", log.display()));
    let log_file = std::fs::File::create(log).map_err(failed)?;
    let mut child = Command::new(bin)
        .args(args)
        .args(["-i", "127.0.0.1", "-p", &port.to_string()])
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().map_err(failed)?)
        .stderr(log_file)
        .spawn()
        .map_err(|e| NotReady::Failed(format!("{what}: {}: {e}", bin.display())))?;
    match wait_ready(&mut child, port, log, what, ready) {
        Ok(()) => Ok(child),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another process holds the port and answers 200 to anything: its
    /// answers are never taken for the peer's, and the peer's exit on the
    /// taken port is recognised (so a fresh port is tried).
    #[test]
    fn a_foreign_listener_on_the_port_is_not_taken_for_the_peer() {
        use std::io::{Read, Write};
        let foreign = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = foreign.local_addr().unwrap().port();
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = answered.clone();
        std::thread::spawn(move || {
            for mut s in foreign.incoming().flatten() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n{}");
                a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let bin = sushy_bin("sushy-static").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mockup = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/redfish/dmtf-public-rackmount1");
        let got = start_on(
            &bin,
            &["-m".into(), mockup.into_os_string()],
            port,
            &dir.path().join("log"),
            "sushy-static",
            Ready::Probed,
        );
        match got {
            Err(NotReady::PortTaken(output)) => {
                assert!(output.contains("Address already in use"), "{output}")
            }
            Err(NotReady::Failed(message)) => panic!("not seen as a taken port: {message}"),
            Ok(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "a foreign listener was taken for the peer ({} answers from it)",
                    answered.load(std::sync::atomic::Ordering::SeqCst)
                );
            }
        }
    }
}
