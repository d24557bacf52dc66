//! Full TLS handshakes per second against each target, rotating their order
//! over rounds and concurrency levels.

use super::*;

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    failed: u64,
    errors: Vec<String>,
    last_done: Option<Instant>,
}

async fn handshake_worker(addr: Arc<str>, client: Arc<Client>, end: Instant) -> Tally {
    let request = api_versions_request();
    let mut tally = Tally::default();
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let outcome =
            tokio::time::timeout(client.timeout, handshake_exchange(&addr, &client, &request))
                .await;
        match outcome {
            Ok(Ok(done)) => {
                tally.latencies_us.push(micros(done - start));
                tally.last_done = Some(done);
            }
            Ok(Err(e)) => {
                tally.failed += 1;
                if tally.errors.len() < MAX_REPORTED_FAILURES {
                    tally.errors.push(e);
                }
            }
            Err(_) => {
                tally.failed += 1;
                if tally.errors.len() < MAX_REPORTED_FAILURES {
                    tally
                        .errors
                        .push(format!("no answer within {:?}", client.timeout));
                }
            }
        }
    }
    tally
}

struct Leg {
    target: String,
    concurrency: usize,
    round: usize,
    rate: f64,
    latencies_us: Vec<u32>,
    failed: u64,
    errors: Vec<String>,
    /// Server CPU seconds per handshake, when its PID is known.
    server_cpu: Option<f64>,
    /// This process's CPU over the leg, as a share of one core.
    client_cpu_share: Option<f64>,
}

async fn run_leg(
    name: &str,
    addr: &str,
    pid: Option<&str>,
    client: &Arc<Client>,
    concurrency: usize,
    secs: u64,
    round: usize,
) -> Leg {
    let addr: Arc<str> = Arc::from(addr);
    let server0 = pid.and_then(|p| cpu_seconds(Some(p)));
    let self0 = cpu_seconds(None);
    let begin = Instant::now();
    let end = begin + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(handshake_worker(addr.clone(), client.clone(), end)))
        .collect();
    let mut latencies_us = Vec::new();
    let mut failed = 0;
    let mut errors = Vec::new();
    let mut last_done = end;
    for task in tasks {
        match task.await {
            Ok(t) => {
                latencies_us.extend_from_slice(&t.latencies_us);
                failed += t.failed;
                if let Some(d) = t.last_done {
                    last_done = last_done.max(d);
                }
                for e in t.errors {
                    if errors.len() < MAX_REPORTED_FAILURES {
                        errors.push(e);
                    }
                }
            }
            Err(e) => {
                failed += 1;
                errors.push(format!("worker task failed: {e}"));
            }
        }
    }
    let wall = (last_done - begin).as_secs_f64();
    let server1 = pid.and_then(|p| cpu_seconds(Some(p)));
    let self1 = cpu_seconds(None);
    latencies_us.sort_unstable();
    let done = latencies_us.len();
    Leg {
        target: name.to_owned(),
        concurrency,
        round,
        rate: done as f64 / wall,
        server_cpu: match (server0, server1) {
            (Some(a), Some(b)) if done > 0 => Some((b - a) / done as f64),
            _ => None,
        },
        client_cpu_share: match (self0, self1) {
            (Some(a), Some(b)) => Some((b - a) / wall),
            _ => None,
        },
        latencies_us,
        failed,
        errors,
    }
}

async fn describe_session(name: &str, addr: &str, client: &Client) -> Result<String, String> {
    let stream = tokio::time::timeout(client.timeout, connect(addr, client))
        .await
        .map_err(|_| format!("{name} ({addr}): no handshake within {:?}", client.timeout))??;
    let conn = stream.get_ref().1;
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map_or(0, |c| c.len());
    let shown = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    let line = format!(
        "{name} ({addr}): {}, {}, key exchange {}, leaf certificate {leaf} bytes",
        shown(conn.protocol_version().map(|v| format!("{v:?}"))),
        shown(
            conn.negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
        ),
        shown(
            conn.negotiated_key_exchange_group()
                .map(|g| format!("{:?}", g.name()))
        ),
    );
    let mut stream = stream;
    let _ = stream.shutdown().await;
    Ok(line)
}

pub(super) async fn handshakes(args: HandshakeArgs) -> ExitCode {
    let client = match client(&args.tls) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("tls_bench: {e}");
            return ExitCode::from(2);
        }
    };
    let pid_of = |name: &str| {
        args.pids
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_str())
    };
    let mut sessions = Vec::new();
    for (name, addr) in &args.targets {
        match describe_session(name, addr, &client).await {
            Ok(line) => sessions.push(line),
            Err(e) => {
                eprintln!("tls_bench: FAILED: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let top = args.concurrency.iter().copied().max().unwrap_or(1);
    if args.warmup_secs > 0 {
        for (name, addr) in &args.targets {
            let leg = run_leg(name, addr, None, &client, top, args.warmup_secs, 0).await;
            eprintln!(
                "  warm-up {name:<8} c={top}: {} handshakes/s, {} failed",
                num(leg.rate, 0),
                leg.failed
            );
        }
    }
    let mut legs = Vec::new();
    let n = args.targets.len();
    for &concurrency in &args.concurrency {
        for round in 1..=args.rounds {
            // Rotating the order keeps any one target from always following the
            // same neighbour (a broker's garbage collection, say).
            for i in 0..n {
                let (name, addr) = &args.targets[(i + round - 1) % n];
                let leg = run_leg(
                    name,
                    addr,
                    pid_of(name),
                    &client,
                    concurrency,
                    args.duration_secs,
                    round,
                )
                .await;
                eprintln!(
                    "  c={concurrency:<3} round {round} {name:<8} {:>7} handshakes/s  p50 {:>7} ms  p99 {:>7} ms  {} failed",
                    num(leg.rate, 0),
                    num(percentile_ms(&leg.latencies_us, 0.5), 2),
                    num(percentile_ms(&leg.latencies_us, 0.99), 2),
                    leg.failed
                );
                for e in &leg.errors {
                    eprintln!("      failure: {e}");
                }
                legs.push(leg);
            }
        }
    }
    print!("{}", handshake_report(&args, &sessions, &legs));
    let empty = legs.iter().filter(|l| l.latencies_us.is_empty()).count();
    if empty > 0 {
        eprintln!("tls_bench: FAILED: {empty} leg(s) completed no handshake");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

struct Summary {
    rate: f64,
    p50: f64,
    p99: f64,
    cpu_ms: f64,
    client_share: f64,
    failed: u64,
    rates: Vec<f64>,
}

fn summarize(legs: &[&Leg]) -> Summary {
    let mut pooled: Vec<u32> = legs
        .iter()
        .flat_map(|l| l.latencies_us.iter().copied())
        .collect();
    pooled.sort_unstable();
    let rates: Vec<f64> = legs.iter().map(|l| l.rate).collect();
    let cpu: Vec<f64> = legs.iter().filter_map(|l| l.server_cpu).collect();
    let share: Vec<f64> = legs.iter().filter_map(|l| l.client_cpu_share).collect();
    Summary {
        rate: median(&rates),
        p50: percentile_ms(&pooled, 0.5),
        p99: percentile_ms(&pooled, 0.99),
        cpu_ms: median(&cpu) * 1_000.0,
        client_share: median(&share),
        failed: legs.iter().map(|l| l.failed).sum(),
        rates,
    }
}

fn handshake_report(args: &HandshakeArgs, sessions: &[String], legs: &[Leg]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nTLS sessions (first handshake of each target):\n");
    for s in sessions {
        let _ = writeln!(out, "- {s}");
    }
    let _ = writeln!(
        out,
        "\nFull handshakes (no resumption) + one ApiVersions v3 + close; {} round(s) of {} s per target and concurrency, order rotating:\n",
        args.rounds, args.duration_secs
    );
    let _ = writeln!(
        out,
        "| concurrency | target | handshakes/s (median) | per round | p50 ms | p99 ms | server CPU ms/handshake | client CPU (cores) | failed |"
    );
    let _ = writeln!(out, "|---:|---|---:|---|---:|---:|---:|---:|---:|");
    let mut table = Vec::new();
    for &c in &args.concurrency {
        for (name, _) in &args.targets {
            let mine: Vec<&Leg> = legs
                .iter()
                .filter(|l| l.concurrency == c && &l.target == name)
                .collect();
            let s = summarize(&mine);
            let per_round: Vec<String> = s.rates.iter().map(|r| num(*r, 0)).collect();
            let _ = writeln!(
                out,
                "| {c} | {name} | {} | {} | {} | {} | {} | {} | {} |",
                num(s.rate, 0),
                per_round.join(", "),
                num(s.p50, 2),
                num(s.p99, 2),
                num(s.cpu_ms, 2),
                num(s.client_share, 2),
                s.failed
            );
            table.push((c, name.clone(), s, mine));
        }
    }
    let base = &args.baseline;
    if !args.targets.iter().any(|(n, _)| n == base) || args.targets.len() < 2 {
        return out;
    }
    let _ = writeln!(
        out,
        "\nAgainst {base} (medians; per-round range: each round's own ratio, its legs back to back):\n"
    );
    let _ = writeln!(
        out,
        "| concurrency | target | handshakes/s vs {base} | per-round range | p50 vs {base} | p99 vs {base} | CPU/handshake vs {base} |"
    );
    let _ = writeln!(out, "|---:|---|---:|---|---:|---:|---:|");
    for &c in &args.concurrency {
        let Some((_, _, b, b_legs)) = table.iter().find(|(cc, n, _, _)| *cc == c && n == base)
        else {
            continue;
        };
        for (_, name, s, mine) in table.iter().filter(|(cc, n, _, _)| *cc == c && n != base) {
            let per_round: Vec<f64> = mine
                .iter()
                .filter_map(|l| {
                    b_legs
                        .iter()
                        .find(|bl| bl.round == l.round)
                        .map(|bl| l.rate / bl.rate)
                })
                .filter(|r| r.is_finite())
                .collect();
            let range = match (
                per_round.iter().copied().reduce(f64::min),
                per_round.iter().copied().reduce(f64::max),
            ) {
                (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}x"),
                _ => "n/a".into(),
            };
            let _ = writeln!(
                out,
                "| {c} | {name} | {} | {range} | {} | {} | {} |",
                ratio(s.rate / b.rate),
                ratio(s.p50 / b.p50),
                ratio(s.p99 / b.p99),
                ratio(s.cpu_ms / b.cpu_ms)
            );
        }
    }
    let _ = writeln!(
        out,
        "\nLatency: TCP connect to the ApiVersions answer. Server CPU: utime+stime of its process over the leg / handshakes; client CPU: this load generator's, in cores (of 2 on this machine)."
    );
    out
}
