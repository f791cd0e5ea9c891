//! `flood-figures`: accordd under a connection flood nobody authenticated.
//! Opens CONNECTIONS (10,000) TCP connections to accordd, each sending a
//! request line and 8 KiB of a header that never ends, and keeps them
//! open; meanwhile asks `/v1/health` every 100 ms on a fresh connection.
//! Prints how many health checks answered (and their worst latency), how
//! many flood connections accordd closed, and accordd's RSS (peak and at
//! the end). accordd runs in a child process (this binary with `--serve`)
//! so the flood's own memory is apart.
//!
//! Bound (docs/operations.md, "Connections"): accordd holds at most
//! `MAX_CONNECTIONS` (1,024) connections, each with at most
//! `MAX_HEADER_BYTES` (16 KiB) of unparsed request head; the flood's peak
//! RSS stays under 150 MB and every health check answers.
//!
//! `cargo run --release -p accord-benches --bin flood-figures [CONNECTIONS]`

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn status_kb(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

fn secret(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("flood-{name}-token")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// `--serve DIR`: accordd on a store in DIR; prints its address.
async fn serve(dir: &std::path::Path) -> anyhow::Result<()> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndir = \"{}\"\n[agents]\ntoken_file = \"{}\"\n[admin]\ntoken_file = \"{}\"\n",
        dir.join("store").display(),
        secret(dir, "agent").display(),
        secret(dir, "admin").display()
    );
    let file = dir.join("accordd.toml");
    std::fs::write(&file, text)?;
    let config = accordd::config::DaemonConfig::load(&file)?;
    let state = accordd::state(&config)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    accordd::serve_on(
        listener,
        state,
        config.server.max_body_bytes,
        std::future::pending(),
    )
    .await
}

/// Raises this process's open-file limit to its hard limit (the flood's
/// sockets); the child inherits it.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// One `/v1/health` on a fresh connection: its latency, or why not.
fn health(addr: &str) -> Result<Duration, String> {
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    if answer.starts_with(b"HTTP/1.1 200") {
        Ok(started.elapsed())
    } else {
        Err(format!(
            "answered {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(40)])
        ))
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve") {
        return tokio::runtime::Runtime::new()?.block_on(serve(std::path::Path::new(&args[2])));
    }
    let wanted: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let fds = raise_fd_limit();
    // Leave room for the health checks and the process's own files.
    let connections = wanted.min(fds.saturating_sub(64) as usize);
    let dir = tempfile::tempdir()?;
    let mut daemon = std::process::Command::new(std::env::current_exe()?)
        .arg("--serve")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let pid = daemon.id();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(daemon.stdout.take().expect("piped")),
        &mut line,
    )?;
    let addr = line.trim().to_owned();
    println!(
        "accordd at {addr}; RSS at start {:.0} MB; {connections} flood connections (fd limit {fds})",
        status_kb(pid, "VmRSS:") / 1024.0
    );

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (addr, stop) = (addr.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut ok, mut failed, mut worst) = (0u32, Vec::new(), Duration::ZERO);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match health(&addr) {
                    Ok(d) => {
                        ok += 1;
                        worst = worst.max(d);
                    }
                    Err(e) => failed.push(e),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (ok, failed, worst)
        })
    };

    let head = format!(
        "GET /v1/health HTTP/1.1\r\nX-Flood: {}",
        "a".repeat(8 << 10)
    );
    let started = Instant::now();
    let mut flood = Vec::with_capacity(connections);
    let mut refused = 0usize;
    for _ in 0..connections {
        match std::net::TcpStream::connect(&addr) {
            Ok(mut s) => {
                let _ = s.set_nonblocking(true);
                let _ = s.write(head.as_bytes());
                flood.push(s);
            }
            Err(_) => refused += 1,
        }
    }
    println!(
        "flood opened in {:.1} s ({refused} connects refused)",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(5));
    // Which flood connections accordd has closed (a read sees the end).
    let mut closed = 0usize;
    for s in &mut flood {
        let mut b = [0u8; 256];
        // Still open: nothing to read yet. Closed: the end, an answer
        // (431, then the close) or a reset.
        let open = matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        if !open {
            closed += 1;
        }
    }
    let (rss_end, peak) = (status_kb(pid, "VmRSS:"), status_kb(pid, "VmHWM:"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed, worst) = prober.join().expect("the prober ends");
    drop(flood);
    let _ = daemon.kill();
    let _ = daemon.wait();
    println!(
        "health: {ok} answered (worst {:.0} ms), {} failed{}",
        worst.as_secs_f64() * 1000.0,
        failed.len(),
        failed
            .first()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    println!("flood connections accordd closed: {closed} of {connections}");
    println!(
        "accordd RSS: {:.0} MB at the end, {:.0} MB peak",
        rss_end / 1024.0,
        peak / 1024.0
    );
    Ok(())
}
