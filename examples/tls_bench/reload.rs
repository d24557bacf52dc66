//! What rotating kshim's certificate through the admin API costs: PATCH
//! latency, time until new handshakes see the new leaf, and the effect on an
//! established connection's forwarded requests.

use super::*;

struct Rotation {
    client: Client,
    tls_listener: String,
    admin: String,
    token: String,
    /// (leaf DER, keystore path) of every store.
    stores: Vec<(CertificateDer<'static>, PathBuf)>,
}

fn leaf_of(pem: &Path) -> Result<CertificateDer<'static>, String> {
    let raw = std::fs::read(pem).map_err(|e| format!("cannot read {}: {e}", pem.display()))?;
    CertificateDer::pem_slice_iter(&raw)
        .next()
        .ok_or_else(|| format!("{} holds no PEM certificate", pem.display()))?
        .map_err(|e| format!("{}: {e}", pem.display()))
}

impl Rotation {
    /// Which store's leaf a new handshake sees (`None`: a certificate of none of them).
    async fn served(&self) -> Result<Option<usize>, String> {
        let attempt = async {
            let mut stream = connect(&self.tls_listener, &self.client).await?;
            let leaf = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .cloned()
                .ok_or("the server showed no certificate")?;
            let _ = stream.shutdown().await;
            Ok::<_, String>(self.stores.iter().position(|(l, _)| *l == leaf))
        };
        tokio::time::timeout(self.client.timeout, attempt)
            .await
            .map_err(|_| format!("no handshake within {:?}", self.client.timeout))?
    }

    /// PATCHes tls.keystore to store `index`; the status and body of the answer.
    async fn patch(&self, index: usize) -> Result<(u16, String), String> {
        let body = serde_json::json!({ "tls.keystore": self.stores[index].1 }).to_string();
        let exchange = async {
            let mut s = TcpStream::connect(&self.admin)
                .await
                .map_err(|e| format!("connect to the admin API at {}: {e}", self.admin))?;
            let _ = s.set_nodelay(true);
            let request = format!(
                "PATCH /admin/config HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                self.admin,
                self.token,
                body.len()
            );
            s.write_all(request.as_bytes())
                .await
                .map_err(|e| format!("admin API write: {e}"))?;
            let mut response = Vec::new();
            s.take(1 << 20)
                .read_to_end(&mut response)
                .await
                .map_err(|e| format!("admin API read: {e}"))?;
            let text = String::from_utf8_lossy(&response).into_owned();
            let status = text
                .strip_prefix("HTTP/1.1 ")
                .and_then(|r| r.get(..3))
                .and_then(|c| c.parse::<u16>().ok())
                .ok_or_else(|| format!("the admin API's answer is not HTTP/1.1: {text:.200}"))?;
            let body = text
                .split_once("\r\n\r\n")
                .map_or("", |(_, b)| b)
                .to_owned();
            Ok((status, body))
        };
        tokio::time::timeout(self.client.timeout, exchange)
            .await
            .map_err(|_| {
                format!(
                    "the admin API gave no answer within {:?}",
                    self.client.timeout
                )
            })?
    }

    /// PATCHes to store `index` and fails unless kshim answers 200.
    async fn switch(&self, index: usize) -> Result<(), String> {
        let (status, body) = self.patch(index).await?;
        if status != 200 {
            return Err(format!(
                "PATCH tls.keystore={} answered {status}: {body}",
                self.stores[index].1.display()
            ));
        }
        Ok(())
    }
}

/// One timed rotation on an idle kshim.
struct Timed {
    patch: Duration,
    /// From sending the PATCH to the end of the first handshake with the new leaf.
    visible: Duration,
    /// Signed: that handshake's end minus the moment the 200 was read.
    after_answer_ms: f64,
    polls: u32,
    stale: u32,
    poll_failures: u32,
}

struct PollOutcome {
    seen: Instant,
    polls: u32,
    stale: u32,
    failures: u32,
}

async fn poll_for(
    rotation: Arc<Rotation>,
    want: usize,
    answered: Arc<OnceLock<Instant>>,
    deadline: Instant,
) -> Result<PollOutcome, String> {
    let mut out = PollOutcome {
        seen: deadline,
        polls: 0,
        stale: 0,
        failures: 0,
    };
    let mut last_error = String::new();
    loop {
        let start = Instant::now();
        if start >= deadline {
            return Err(format!(
                "no handshake showed the new certificate within the deadline ({} polls, {} failed; last error: {last_error})",
                out.polls, out.failures
            ));
        }
        out.polls += 1;
        match rotation.served().await {
            Ok(Some(i)) if i == want => {
                out.seen = Instant::now();
                return Ok(out);
            }
            Ok(_) => {
                if answered.get().is_some_and(|a| start > *a) {
                    out.stale += 1;
                }
            }
            Err(e) => {
                out.failures += 1;
                last_error = e;
            }
        }
    }
}

async fn timed_rotation(rotation: &Arc<Rotation>, next: usize) -> Result<Timed, String> {
    let answered = Arc::new(OnceLock::new());
    let sent = Instant::now();
    let poller = tokio::spawn(poll_for(
        rotation.clone(),
        next,
        answered.clone(),
        sent + Duration::from_secs(10),
    ));
    let patched = rotation.switch(next).await;
    let done = Instant::now();
    let _ = answered.set(done);
    let polled = poller
        .await
        .map_err(|e| format!("poller task failed: {e}"))?;
    patched?;
    let polled = polled?;
    let after_answer_ms = if polled.seen >= done {
        (polled.seen - done).as_secs_f64() * 1e3
    } else {
        -(done - polled.seen).as_secs_f64() * 1e3
    };
    Ok(Timed {
        patch: done - sent,
        visible: polled.seen - sent,
        after_answer_ms,
        polls: polled.polls,
        stale: polled.stale,
        poll_failures: polled.failures,
    })
}

/// What the established connection saw.
#[derive(Default)]
struct Probe {
    /// (sent, latency) of every answered request.
    samples: Vec<(Instant, u32)>,
    failed: u64,
    breaks: Vec<String>,
    /// Local ports of the connections used, in order: one unless it broke.
    local_ports: Vec<u16>,
}

async fn probe_connection(
    addr: String,
    client: Arc<Client>,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> Result<Probe, String> {
    let mut probe = Probe::default();
    let mut request = metadata_request();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut correlation: i32 = 0;
    'connection: while !stop.load(Ordering::Relaxed) {
        let mut stream = tokio::time::timeout(client.timeout, connect(&addr, &client))
            .await
            .map_err(|_| format!("no handshake with {addr} within {:?}", client.timeout))??;
        probe
            .local_ports
            .push(stream.get_ref().0.local_addr().map_or(0, |a| a.port()));
        let mut buf = BytesMut::with_capacity(16 * 1024);
        let mut first_on_connection = true;
        loop {
            ticks.tick().await;
            if stop.load(Ordering::Relaxed) {
                let _ = stream.shutdown().await;
                break 'connection;
            }
            correlation = correlation.wrapping_add(1);
            set_correlation(&mut request, correlation);
            let sent = Instant::now();
            let exchange = async {
                stream
                    .write_all(&request)
                    .await
                    .map_err(|e| format!("write failed: {e}"))?;
                let body = frames::read_frame(&mut stream, &mut buf, MAX_RESPONSE_BYTES).await?;
                check_correlation(&body, correlation)?;
                Ok::<_, String>(body)
            };
            match tokio::time::timeout(client.timeout, exchange).await {
                Ok(Ok(body)) => {
                    let latency = micros(sent.elapsed());
                    if first_on_connection {
                        first_on_connection = false;
                        check_rewritten(body, &addr)?;
                    }
                    probe.samples.push((sent, latency));
                }
                Ok(Err(e)) => {
                    probe.failed += 1;
                    probe.breaks.push(e);
                    continue 'connection;
                }
                Err(_) => {
                    probe.failed += 1;
                    probe
                        .breaks
                        .push(format!("no answer within {:?}", client.timeout));
                    continue 'connection;
                }
            }
        }
    }
    Ok(probe)
}

/// The Metadata answer must list only `addr`'s port: proof that the request went
/// through kshim's forwarding and rewriting, not straight to a broker.
fn check_rewritten(body: BytesMut, addr: &str) -> Result<(), String> {
    use kafka_protocol::messages::{MetadataResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;
    let mut body = body.freeze();
    ResponseHeader::decode(&mut body, 1)
        .and_then(|_| MetadataResponse::decode(&mut body, METADATA_VERSION))
        .map_err(|e| format!("undecodable Metadata v{METADATA_VERSION} answer: {e}"))
        .and_then(|m| {
            let ports: Vec<i32> = m.brokers.iter().map(|b| b.port).collect();
            let want = addr.rsplit_once(':').and_then(|(_, p)| p.parse::<i32>().ok());
            if want.is_some() && ports.iter().all(|p| Some(*p) == want) && !ports.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "Metadata through {addr} lists broker ports {ports:?}, not only its own: it is not kshim's rewritten answer"
                ))
            }
        })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Quiet,
    Reloading,
}

struct Window {
    kind: Kind,
    start: Instant,
    end: Instant,
    reloads: usize,
    /// Whether a handshake after the window saw the certificate last PATCHed.
    served_ok: bool,
}

pub(super) async fn reload(args: ReloadArgs) -> ExitCode {
    match reload_inner(args).await {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tls_bench: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn reload_inner(args: ReloadArgs) -> Result<String, String> {
    if args.keystores.len() < 2 {
        return Err("--keystore is needed at least twice (stores to alternate between)".into());
    }
    let token = std::env::var(TOKEN_ENV)
        .map_err(|_| format!("{TOKEN_ENV} is not set (the admin API's bearer token)"))?;
    let mut stores = Vec::new();
    for (pem, store) in &args.keystores {
        stores.push((leaf_of(pem)?, store.clone()));
    }
    let rotation = Arc::new(Rotation {
        client: client(&args.tls)?,
        tls_listener: args.tls_listener.clone(),
        admin: args.admin.clone(),
        token,
        stores,
    });
    let count = rotation.stores.len();
    let mut current = rotation.served().await?.ok_or_else(|| {
        format!(
            "{} serves a certificate that is none of the --keystore leaves",
            args.tls_listener
        )
    })?;

    // (a) and (b): rotations on an idle kshim.
    let mut timed = Vec::new();
    for i in 0..args.reloads {
        let next = (current + 1) % count;
        let t = timed_rotation(&rotation, next).await?;
        eprintln!(
            "  rotation {:>2}: PATCH {:>7.2} ms, new leaf seen {:>7.2} ms after sending ({} polls, {} stale)",
            i + 1,
            t.patch.as_secs_f64() * 1e3,
            t.visible.as_secs_f64() * 1e3,
            t.polls,
            t.stale
        );
        timed.push(t);
        current = next;
        tokio::time::sleep(Duration::from_millis(args.reload_gap_ms)).await;
    }

    // (c): an established connection through windows with and without reloads.
    let stop = Arc::new(AtomicBool::new(false));
    let probe_client = Arc::new(client(&args.tls)?);
    let prober = tokio::spawn(probe_connection(
        args.inflight.clone(),
        probe_client,
        Duration::from_micros(args.probe_interval_us.max(1)),
        stop.clone(),
    ));
    // The connection's first requests open kshim's upstream link; not measured.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut windows = Vec::new();
    let mut patch_busy = Vec::new();
    let window = Duration::from_secs(args.window_secs);
    let every = Duration::from_millis(args.reload_every_ms.max(1));
    for pair in 0..args.window_pairs {
        // ABBA: a slow drift of the machine does not land on one kind only.
        let kinds = if pair % 2 == 0 {
            [Kind::Quiet, Kind::Reloading]
        } else {
            [Kind::Reloading, Kind::Quiet]
        };
        for kind in kinds {
            if prober.is_finished() {
                break;
            }
            let start = Instant::now();
            let end = start + window;
            let mut reloads = 0;
            if kind == Kind::Reloading {
                let mut next_at = start;
                while next_at < end {
                    tokio::time::sleep_until(next_at).await;
                    let next = (current + 1) % count;
                    let sent = Instant::now();
                    rotation.switch(next).await?;
                    patch_busy.push(sent.elapsed());
                    current = next;
                    reloads += 1;
                    next_at += every;
                }
            }
            tokio::time::sleep_until(end).await;
            let end = Instant::now();
            let served_ok = rotation.served().await? == Some(current);
            eprintln!(
                "  window {:?}: {reloads} reload(s), served certificate {}",
                kind,
                if served_ok {
                    "is the last one PATCHed"
                } else {
                    "is NOT the last one PATCHed"
                }
            );
            windows.push(Window {
                kind,
                start,
                end,
                reloads,
                served_ok,
            });
        }
    }
    stop.store(true, Ordering::Relaxed);
    let probe = prober
        .await
        .map_err(|e| format!("prober task failed: {e}"))??;
    Ok(reload_report(&args, &timed, &patch_busy, &windows, &probe))
}

fn duration_row(name: &str, values_ms: &[f64]) -> String {
    let mut v: Vec<f64> = values_ms.to_vec();
    v.sort_by(f64::total_cmp);
    let q = |q: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
        }
    };
    format!(
        "| {name} | {} | {} | {} | {} |\n",
        v.len(),
        num(q(0.5), 2),
        num(q(0.99), 2),
        num(v.last().copied().unwrap_or(f64::NAN), 2)
    )
}

fn reload_report(
    args: &ReloadArgs,
    timed: &[Timed],
    patch_busy: &[Duration],
    windows: &[Window],
    probe: &Probe,
) -> String {
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nCertificate rotation: PATCH /admin/config {{\"tls.keystore\": ...}}, alternating between {} PKCS#12 stores\n",
        args.keystores.len()
    );
    let _ = writeln!(out, "| measure | n | p50 ms | p99 ms | max ms |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    out += &duration_row(
        "(a) PATCH sent → 200 read, idle kshim",
        &timed.iter().map(|t| ms(&t.patch)).collect::<Vec<_>>(),
    );
    out += &duration_row(
        "(a) PATCH sent → 200 read, during (c)",
        &patch_busy.iter().map(ms).collect::<Vec<_>>(),
    );
    out += &duration_row(
        "(b) PATCH sent → first handshake with the new leaf done",
        &timed.iter().map(|t| ms(&t.visible)).collect::<Vec<_>>(),
    );
    out += &duration_row(
        "(b) 200 read → that handshake done (negative: before the 200)",
        &timed.iter().map(|t| t.after_answer_ms).collect::<Vec<_>>(),
    );
    let polls: u32 = timed.iter().map(|t| t.polls).sum();
    let stale: u32 = timed.iter().map(|t| t.stale).sum();
    let poll_failures: u32 = timed.iter().map(|t| t.poll_failures).sum();
    let _ = writeln!(
        out,
        "\n(b) {polls} handshakes polled back to back over {} rotations; {stale} started after the 200 and still saw the old leaf; {poll_failures} failed.",
        timed.len()
    );

    let _ = writeln!(
        out,
        "\n(c) One TLS connection to kshim's broker listener, Metadata v12 (forwarded) every {} µs, one in flight; {} s windows, ABBA:\n",
        args.probe_interval_us, args.window_secs
    );
    let in_window = |w: &Window| -> Vec<u32> {
        let mut v: Vec<u32> = probe
            .samples
            .iter()
            .filter(|(t, _)| *t >= w.start && *t < w.end)
            .map(|(_, l)| *l)
            .collect();
        v.sort_unstable();
        v
    };
    let _ = writeln!(
        out,
        "| window | kind | reloads | requests | p50 ms | p99 ms | max ms |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|");
    for (i, w) in windows.iter().enumerate() {
        let v = in_window(w);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            kind_name(w.kind),
            w.reloads,
            v.len(),
            num(percentile_ms(&v, 0.5), 3),
            num(percentile_ms(&v, 0.99), 3),
            num(percentile_ms(&v, 1.0), 3)
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| kind | windows | reloads | requests | p50 ms | p99 ms | max ms |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    let mut pooled_p = [f64::NAN; 2];
    for (k, kind) in [Kind::Quiet, Kind::Reloading].into_iter().enumerate() {
        let ws: Vec<&Window> = windows.iter().filter(|w| w.kind == kind).collect();
        let mut v: Vec<u32> = ws.iter().flat_map(|w| in_window(w)).collect();
        v.sort_unstable();
        pooled_p[k] = percentile_ms(&v, 0.99);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            kind_name(kind),
            ws.len(),
            ws.iter().map(|w| w.reloads).sum::<usize>(),
            v.len(),
            num(percentile_ms(&v, 0.5), 3),
            num(percentile_ms(&v, 0.99), 3),
            num(percentile_ms(&v, 1.0), 3)
        );
    }
    let _ = writeln!(
        out,
        "\np99 with reloads / without: {}.",
        ratio(pooled_p[1] / pooled_p[0])
    );
    let answered = probe.samples.len();
    if probe.breaks.is_empty() {
        let port = probe.local_ports.first().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "The connection never broke: {answered} requests answered on one connection (local port {port}), {} failed.",
            probe.failed
        );
    } else {
        let _ = writeln!(
            out,
            "The connection BROKE {} time(s) and was reopened (local ports {:?}); {answered} answered, {} failed; first: {}",
            probe.breaks.len(),
            probe.local_ports,
            probe.failed,
            probe.breaks[0]
        );
    }
    let wrong = windows.iter().filter(|w| !w.served_ok).count();
    let _ = writeln!(
        out,
        "After every window a new handshake saw the certificate last PATCHed: {}.",
        if wrong == 0 {
            "yes".to_owned()
        } else {
            format!("NO, after {wrong} window(s)")
        }
    );
    out
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Quiet => "without reloads",
        Kind::Reloading => "with reloads",
    }
}
