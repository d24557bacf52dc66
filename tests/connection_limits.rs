//! What a client may hold of kshim: connections per address (with overrides),
//! idle connections, and frames that start and never finish. Each limit is
//! exercised on a standalone kshim with raw sockets, since the point is what
//! kshim does to a client that misbehaves; the interop suite shows real clients
//! served under the same limits in front of real Kafka.

use kshim::client::KafkaClient;
use kshim::config::Config;
use kshim::standalone::Standalone;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

struct Running {
    addr: String,
    _stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

async fn start(configure: impl FnOnce(&mut Config)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    configure(&mut config);
    let kshim = Standalone::bind(&config).await.expect("kshim starts");
    let addr = kshim.local_addr.to_string();
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(kshim.serve(stopped));
    Running {
        addr,
        _stop: stop,
        _dir: dir,
    }
}

/// Whether kshim closes `s` within `within` (it reads end of stream, or a reset).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

async fn answers_api_versions(addr: &str) -> bool {
    match KafkaClient::connect(addr, Duration::from_secs(2)).await {
        Ok(mut c) => c.api_versions().await.is_ok(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn connections_per_address_are_capped_and_come_back() {
    let kshim = start(|c| c.max_connections_per_ip = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(&kshim.addr).await.unwrap());
    }
    // The fourth is closed at once: refused, not left waiting.
    let mut fourth = TcpStream::connect(&kshim.addr).await.unwrap();
    assert!(closed_within(&mut fourth, Duration::from_secs(2)).await);
    assert!(!answers_api_versions(&kshim.addr).await);
    // The held ones are still served.
    let mut first = held.remove(0);
    first
        .write_all(&[0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0])
        .await
        .unwrap();
    let size = tokio::time::timeout(Duration::from_secs(2), first.read_i32())
        .await
        .expect("an answer")
        .unwrap();
    assert!(size > 0);
    // A place freed is a place to take.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !answers_api_versions(&kshim.addr).await {
        assert!(Instant::now() < deadline, "the freed place never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_override_raises_or_closes_one_address() {
    let kshim = start(|c| {
        c.max_connections_per_ip = 1;
        c.max_connections_per_ip_overrides = [("127.0.0.1".parse().unwrap(), 4)].into();
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(&kshim.addr).await.unwrap());
    }
    assert!(
        answers_api_versions(&kshim.addr).await,
        "the fourth is allowed"
    );
    held.push(TcpStream::connect(&kshim.addr).await.unwrap());
    let mut fifth = TcpStream::connect(&kshim.addr).await.unwrap();
    assert!(closed_within(&mut fifth, Duration::from_secs(2)).await);

    let banned = start(|c| {
        c.max_connections_per_ip_overrides = [("127.0.0.1".parse().unwrap(), 0)].into();
    })
    .await;
    assert!(!answers_api_versions(&banned.addr).await);
}

#[tokio::test]
async fn idle_connections_are_closed_and_busy_ones_are_not() {
    let kshim = start(|c| c.connections_max_idle_ms = 400).await;
    let mut idle = TcpStream::connect(&kshim.addr).await.unwrap();
    let mut busy = KafkaClient::connect(&kshim.addr, Duration::from_secs(2))
        .await
        .unwrap();
    let started = Instant::now();
    // Requests every 100 ms keep a connection in use past the idle limit.
    while started.elapsed() < Duration::from_millis(1200) {
        busy.api_versions()
            .await
            .expect("the busy connection is served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed_within(&mut idle, Duration::from_millis(10)).await,
        "the idle connection was closed meanwhile"
    );
}

#[tokio::test]
async fn a_frame_that_never_finishes_is_cut_off() {
    // A deadline well above the trickle below (160 ms), which a loaded machine may stretch.
    let kshim = start(|c| c.frame_read_timeout_ms = 1000).await;
    // Half a size prefix, and then a frame announced with a few bytes of it.
    let mut header = TcpStream::connect(&kshim.addr).await.unwrap();
    header.write_all(&[0, 0]).await.unwrap();
    let mut body = TcpStream::connect(&kshim.addr).await.unwrap();
    body.write_all(&[0, 0, 0, 100, 0, 18]).await.unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut header, Duration::from_secs(5)).await);
    assert!(closed_within(&mut body, Duration::from_secs(5)).await);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cut off near the deadline, not at the idle limit (600 s)"
    );
    // A frame trickled in well within the deadline is served.
    let mut slow = TcpStream::connect(&kshim.addr).await.unwrap();
    let request = [0u8, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 7, 0, 0];
    for chunk in request.chunks(4) {
        slow.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let size = tokio::time::timeout(Duration::from_secs(2), slow.read_i32())
        .await
        .expect("an answer")
        .unwrap();
    assert!(size > 0);
}
