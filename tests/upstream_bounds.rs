//! What kshim does with an upstream that says too much or too little: a broker
//! whose Metadata names hundreds of new node ids at every refresh, and brokers
//! that accept connections and never answer. Neither is something a real Kafka
//! cluster does on demand, so the fake broker (tests/support/fake_broker.rs)
//! plays it; the proof that discovery works is the interop suite against real
//! Kafka.

use crate::support;

use kshim::client::KafkaClient;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fake_broker::FakeBroker;
use support::start_proxy;

/// The tests count this process's descriptors, so they run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_node_ids_stays_within_max_brokers() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let next_id = Arc::new(AtomicI32::new(1));
    let ids = Arc::clone(&next_id);
    // 300 node ids never seen before at every Metadata answer, all at this broker.
    let broker = FakeBroker::builder()
        .apis(&[(3, 0, 12), (18, 0, 4)])
        .brokers(move |port| {
            let first = ids.fetch_add(300, Ordering::Relaxed);
            (first..first + 300)
                .map(|id| (id, "127.0.0.1".to_owned(), port))
                .collect()
        })
        .start()
        .await;
    let port = broker.port;
    let before = open_descriptors();
    let kshim = start_proxy(format!("127.0.0.1:{port}"), 100, |c| {
        let u = c.upstream.as_mut().unwrap();
        u.max_brokers = 50;
        u.listener_grace_ms = 300;
    })
    .await;
    let upstream_view = kshim.context.upstream.clone().unwrap();
    let started = Instant::now();
    let mut peak = 0;
    let mut served_peak = 0;
    while started.elapsed() < Duration::from_secs(4) {
        peak = peak.max(open_descriptors());
        served_peak = served_peak.max(upstream_view.listeners.served());
        let mut c = KafkaClient::connect(&kshim.addr, Duration::from_secs(2))
            .await
            .expect("kshim still accepts");
        c.api_versions().await.expect("kshim still answers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let named = next_id.load(Ordering::Relaxed) - 1;

    assert!(named >= 3_000, "the flood was small: {named} node ids");
    assert!(served_peak <= 50, "{served_peak} listeners open");
    // 50 listeners (twice over while closed ones wind down and new ones open),
    // the control connections, and a few of the test's own.
    assert!(
        peak <= before + 2 * 50 + 40,
        "descriptors grew from {before} to {peak} for {named} node ids"
    );
    let _ = kshim.stop.send(true);
    println!("{named} node ids named; at most {served_peak} listeners and {peak} descriptors (from {before})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_that_never_answer_cost_one_deadline_not_one_each() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // 19 brokers whose sockets accept (the kernel completes the handshake) and
    // never answer a byte.
    let mut silent = Vec::new();
    for _ in 0..19 {
        silent.push(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    }
    let silent_ports: Vec<u16> = silent
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let broker = FakeBroker::builder()
        .apis(&[(3, 0, 12), (18, 0, 4)])
        .brokers(move |port| {
            std::iter::once((1, "127.0.0.1".to_owned(), port))
                .chain(
                    silent_ports
                        .iter()
                        .enumerate()
                        .map(|(i, &p)| (i as i32 + 2, "127.0.0.1".to_owned(), p)),
                )
                .collect()
        })
        .start()
        .await;
    let port = broker.port;
    let started = Instant::now();
    let kshim = start_proxy(format!("127.0.0.1:{port}"), 60_000, |c| {
        c.upstream.as_mut().unwrap().connect_timeout_ms = 1000;
    })
    .await;
    let first_refresh = started.elapsed();
    let upstream_view = kshim.context.upstream.clone().unwrap();
    let view = upstream_view.view();
    assert_eq!(view.brokers.len(), 20);
    assert_eq!(view.live.keys().copied().collect::<Vec<_>>(), vec![1]);
    let again = Instant::now();
    upstream_view.refresh_now(Duration::from_secs(30)).await;
    let second_refresh = again.elapsed();
    // Asked one at a time, 19 silent brokers would take 19 deadlines of 1 s.
    assert!(
        first_refresh < Duration::from_secs(5) && second_refresh < Duration::from_secs(5),
        "refreshes took {first_refresh:?} and {second_refresh:?}"
    );
    drop(silent);
    let _ = kshim.stop.send(true);
    println!("refreshes with 19 silent brokers: {first_refresh:?}, {second_refresh:?}");
}

/// A broker offering an API key that no Kafka release kshim has data for
/// defines (a fork's own API, or a release newer than kshim's data): hidden by
/// default, and a request for it closes its connection; with
/// `upstream.unknown_api_keys = "forward"` offered at the broker's versions and
/// forwarded byte for byte, its answer passed on unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_no_release_defines_is_hidden_or_forwarded_as_bytes() {
    use kshim::upstream::UnknownApiKeys;
    use support::fake_broker::Reply;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const KEY: i16 = 4000;
    const ANSWER: &[u8] = b"\x00\x00\x00\x07fork answer";
    let broker = FakeBroker::builder()
        .apis(&[(3, 0, 12), (18, 0, 4), (KEY, 0, 2)])
        .on_request(|req| match req.api_key {
            KEY => Reply::Body(bytes::Bytes::from_static(ANSWER)),
            _ => Reply::Default,
        })
        .start()
        .await;
    for (mode, forwarded) in [
        (UnknownApiKeys::Hide, false),
        (UnknownApiKeys::Forward, true),
    ] {
        broker.clear_received();
        let kshim = start_proxy(format!("127.0.0.1:{}", broker.port), 100, |c| {
            c.upstream.as_mut().unwrap().unknown_api_keys = mode;
        })
        .await;
        // ApiVersions, once kshim knows the broker's APIs (Metadata up to v12).
        let deadline = Instant::now() + Duration::from_secs(10);
        let apis = loop {
            let mut c = KafkaClient::connect(&kshim.addr, Duration::from_secs(2))
                .await
                .expect("kshim accepts");
            let (_, answer) = c.api_versions().await.expect("kshim answers");
            let known = answer.apis.iter().any(|a| a.api_key == 3 && a.max == 12);
            if known || Instant::now() > deadline {
                break answer.apis;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let offered: Vec<_> = apis
            .iter()
            .filter(|a| a.api_key == KEY)
            .map(|a| (a.min, a.max))
            .collect();
        assert_eq!(
            offered,
            if forwarded { vec![(0, 2)] } else { vec![] },
            "{mode:?}"
        );

        // A v1 request for the key (header v1: no tagged fields).
        let body = b"opaque request bytes";
        let mut frame = Vec::new();
        frame.extend_from_slice(&KEY.to_be_bytes());
        frame.extend_from_slice(&1i16.to_be_bytes());
        frame.extend_from_slice(&77i32.to_be_bytes());
        frame.extend_from_slice(&4i16.to_be_bytes());
        frame.extend_from_slice(b"fork");
        frame.extend_from_slice(body);
        let mut socket = tokio::net::TcpStream::connect(&kshim.addr).await.unwrap();
        socket
            .write_all(&[(frame.len() as i32).to_be_bytes().as_slice(), &frame].concat())
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), async {
            let mut size = [0u8; 4];
            if socket.read_exact(&mut size).await.is_ok() {
                answer.resize(i32::from_be_bytes(size) as usize, 0);
                socket.read_exact(&mut answer).await.unwrap();
            }
        })
        .await
        .expect("kshim answers or closes within 5 s");
        let reached: Vec<_> = broker
            .received()
            .into_iter()
            .filter(|r| r.api_key == KEY)
            .map(|r| (r.version, r.correlation_id, r.client_id, r.body))
            .collect();
        if forwarded {
            assert_eq!(answer, [77i32.to_be_bytes().as_slice(), ANSWER].concat());
            assert_eq!(reached.len(), 1, "{reached:?}");
            let (version, _, client_id, got) = &reached[0];
            assert_eq!(
                (*version, client_id.as_deref(), &got[..]),
                (1, Some("fork"), &body[..])
            );
        } else {
            assert!(answer.is_empty(), "hidden, yet answered: {answer:?}");
            assert!(reached.is_empty(), "hidden, yet forwarded: {reached:?}");
        }
        let _ = kshim.stop.send(true);
    }
}
