//! What kshim does with an upstream that says too much or too little: a broker
//! whose Metadata names hundreds of new node ids at every refresh, and brokers
//! that accept connections and never answer. Neither is something a real Kafka
//! cluster does on demand, so a fake broker plays it; the proof that discovery
//! works is the interop suite against real Kafka.

mod support;

use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use kshim::client::KafkaClient;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{api_versions_body, encode, read_frame, start_proxy, write_response};
use tokio::net::TcpListener;

/// A broker answering ApiVersions, and Metadata with `brokers()` each time.
async fn fake_broker(
    listener: TcpListener,
    brokers: Arc<dyn Fn() -> Vec<(i32, String, u16)> + Send + Sync>,
) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let brokers = Arc::clone(&brokers);
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut s).await {
                let api = i16::from_be_bytes([frame[0], frame[1]]);
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                if api == ApiKey::ApiVersions as i16 {
                    let body = api_versions_body(&[(3, 0, 12), (18, 0, 4)], version);
                    write_response(&mut s, correlation_id, false, &body).await;
                } else if api == ApiKey::Metadata as i16 {
                    let listed = brokers();
                    let controller = listed.first().map_or(-1, |b| b.0);
                    let metadata = MetadataResponse::default()
                        .with_brokers(
                            listed
                                .into_iter()
                                .map(|(id, host, port)| {
                                    MetadataResponseBroker::default()
                                        .with_node_id(BrokerId(id))
                                        .with_host(StrBytes::from_string(host))
                                        .with_port(i32::from(port))
                                })
                                .collect(),
                        )
                        .with_controller_id(BrokerId(controller));
                    write_response(
                        &mut s,
                        correlation_id,
                        version >= 9,
                        &encode(&metadata, version),
                    )
                    .await;
                } else {
                    return;
                }
            }
        });
    }
}

/// The tests count this process's descriptors, so they run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_node_ids_stays_within_max_brokers() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = upstream.local_addr().unwrap().port();
    let next_id = Arc::new(AtomicI32::new(1));
    let ids = Arc::clone(&next_id);
    // 300 node ids never seen before at every Metadata answer, all at this broker.
    tokio::spawn(fake_broker(
        upstream,
        Arc::new(move || {
            let first = ids.fetch_add(300, Ordering::Relaxed);
            (first..first + 300)
                .map(|id| (id, "127.0.0.1".to_owned(), port))
                .collect()
        }),
    ));
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
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = upstream.local_addr().unwrap().port();
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
    tokio::spawn(fake_broker(
        upstream,
        Arc::new(move || {
            std::iter::once((1, "127.0.0.1".to_owned(), port))
                .chain(
                    silent_ports
                        .iter()
                        .enumerate()
                        .map(|(i, &p)| (i as i32 + 2, "127.0.0.1".to_owned(), p)),
                )
                .collect()
        }),
    ));
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
