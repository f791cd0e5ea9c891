//! `redfish-figures`: power on N systems of `sushy-emulator --fake` (default
//! 1,000) through Accord's Redfish client, and the same requests through a
//! minimal parallel HTTP client (the baseline), each against a fresh
//! emulator in the same run. Prints, for both, the time until every Reset
//! was accepted and until every system was verified On, the requests the
//! emulator logged, and Accord's overhead against the baseline.
//! Goal (issue 5): within 10 % of the baseline.
//!
//! Both send per system: GET the service root, GET the system, POST the
//! Reset, then GET the system every poll interval until it shows On (the
//! emulator applies power changes 1–11 s after the request); both keep at
//! most IN_FLIGHT requests open overall, Accord also 2 per BMC.
//!
//! The verified time carries the emulator's random 1–11 s delay and the
//! poll phase, so runs alternate who goes first and medians are compared.
//!
//! `cargo run --release -p accord-benches --bin redfish-figures [SYSTEMS] [IN_FLIGHT] [ROUNDS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use accord_redfish::{Bmc, BmcSettings, BmcTarget, HttpPool, TlsMode};
use accord_testkit::sushy::{start_emulator, EmulatorOptions, FakeSystem, Peer};
use tokio::sync::Semaphore;

const POLL: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Figures {
    accepted: Duration,
    verified: Duration,
    requests: usize,
}

fn systems(n: usize) -> Vec<FakeSystem> {
    (0..n)
        .map(|i| FakeSystem {
            id: format!("node-{i:04}"),
            power_on: false,
        })
        .collect()
}

fn emulator(n: usize) -> anyhow::Result<Peer> {
    start_emulator(&systems(n), &EmulatorOptions::default()).map_err(anyhow::Error::msg)
}

async fn accord(peer: &Peer, n: usize, in_flight: usize) -> anyhow::Result<Figures> {
    let pool = HttpPool::new(in_flight);
    let settings = BmcSettings {
        poll_interval: POLL,
        power_on_timeout: Duration::from_secs(600),
        ..BmcSettings::default()
    };
    let start = Instant::now();
    let mut tasks = Vec::new();
    for s in systems(n) {
        let bmc = Arc::new(Bmc::new(
            BmcTarget {
                name: s.id.clone(),
                endpoint: peer.url().parse()?,
                system: Some(s.id),
                credentials: None,
                credentials_file: None,
                tls: TlsMode::Verify { ca_file: None },
                settings: settings.clone(),
            },
            &pool,
        )?);
        tasks.push(tokio::spawn(async move { bmc.power_on(false).await }));
    }
    let (mut accepted, mut verified) = (Duration::ZERO, Duration::ZERO);
    for t in tasks {
        let o = t.await??;
        anyhow::ensure!(o.sent == ["On"], "{o:?}");
        accepted = accepted.max(Duration::from_millis(o.accepted_ms.unwrap_or(0)));
        verified = verified.max(Duration::from_millis(o.took_ms));
    }
    let _ = start;
    Ok(Figures {
        accepted,
        verified,
        requests: peer.requests().len(),
    })
}

async fn baseline(peer: &Peer, n: usize, in_flight: usize) -> anyhow::Result<Figures> {
    let client = reqwest::Client::new();
    let limit = Arc::new(Semaphore::new(in_flight));
    let base = peer.url();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for s in systems(n) {
        let (client, limit, base) = (client.clone(), limit.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let get = |path: String| {
                let (client, limit) = (client.clone(), limit.clone());
                async move {
                    let _p = limit.acquire().await.unwrap();
                    client
                        .get(path)
                        .send()
                        .await?
                        .json::<serde_json::Value>()
                        .await
                }
            };
            get(format!("{base}/redfish/v1")).await?;
            let system = format!("{base}/redfish/v1/Systems/{}", s.id);
            get(system.clone()).await?;
            {
                let _p = limit.acquire().await.unwrap();
                client
                    .post(format!("{system}/Actions/ComputerSystem.Reset"))
                    .json(&serde_json::json!({"ResetType": "On"}))
                    .send()
                    .await?
                    .error_for_status()?;
            }
            let accepted = start.elapsed();
            loop {
                let v = get(system.clone()).await?;
                if v["PowerState"] == "On" {
                    return Ok::<_, reqwest::Error>((accepted, start.elapsed()));
                }
                tokio::time::sleep(POLL).await;
            }
        }));
    }
    let (mut accepted, mut verified) = (Duration::ZERO, Duration::ZERO);
    for t in tasks {
        let (a, v) = t.await??;
        accepted = accepted.max(a);
        verified = verified.max(v);
    }
    Ok(Figures {
        accepted,
        verified,
        requests: peer.requests().len(),
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(Ok(1000), |a| a.parse())?;
    let in_flight: usize = args.get(2).map_or(Ok(16), |a| a.parse())?;
    let rounds: usize = args.get(3).map_or(Ok(3), |a| a.parse())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "power on {n} sushy-emulator --fake systems, {in_flight} requests in flight, polls every {} s, {rounds} rounds",
        POLL.as_secs()
    );
    let row = |name: &str, f: &Figures| {
        println!(
            "  {name:<9} all Resets accepted {:>6.1} s   all verified On {:>6.1} s   requests {:>6}",
            f.accepted.as_secs_f64(),
            f.verified.as_secs_f64(),
            f.requests
        )
    };
    let (mut base, mut ours) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each run on a fresh emulator; who goes first alternates.
        println!("round {}", round + 1);
        for accord_first in [round % 2 == 1, round % 2 == 0] {
            let peer = emulator(n)?;
            if accord_first {
                let a = rt.block_on(accord(&peer, n, in_flight))?;
                row("accord", &a);
                ours.push(a);
            } else {
                let b = rt.block_on(baseline(&peer, n, in_flight))?;
                row("baseline", &b);
                base.push(b);
            }
        }
    }
    let pick = |v: &[Figures], f: fn(&Figures) -> Duration| median(v.iter().map(f).collect());
    let (ba, bv) = (pick(&base, |f| f.accepted), pick(&base, |f| f.verified));
    let (aa, av) = (pick(&ours, |f| f.accepted), pick(&ours, |f| f.verified));
    let pct = |x: Duration, y: Duration| 100.0 * (x.as_secs_f64() / y.as_secs_f64() - 1.0);
    println!(
        "median: baseline accepted {:.1} s, verified {:.1} s; accord accepted {:.1} s, verified {:.1} s",
        ba.as_secs_f64(),
        bv.as_secs_f64(),
        aa.as_secs_f64(),
        av.as_secs_f64()
    );
    println!(
        "accord vs baseline (medians): accepted {:+.1} %, verified {:+.1} % (goal: within 10 %)",
        pct(aa, ba),
        pct(av, bv)
    );
    println!(
        "resumes per minute: accord {:.0} (Slurm's default: 300)",
        n as f64 / aa.as_secs_f64() * 60.0
    );
    Ok(())
}
