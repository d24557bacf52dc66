//! The admin listener under callers that hold connections without using them:
//! hundreds of idle connections, and connections trickling a request header a
//! byte at a time, reopened as fast as kshim closes them. Health and readiness
//! probes on fresh connections are answered throughout.

use kshim::config::{CliOverrides, ConfigSource};
use kshim::service::Service;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

async fn probe(addr: &str, path: &str) -> Result<String, String> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: kshim\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut text = String::new();
        s.read_to_string(&mut text)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(text)
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .map_err(|_| format!("{path}: no answer within 2 s"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_answered_while_others_hold_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kshim.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"secret-token\"\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let service = Service::start(
        ConfigSource {
            file: Some(config),
            cli: CliOverrides::default(),
        },
        None,
    )
    .await
    .expect("kshim starts");
    let admin = service.admin_addr.expect("an admin listener").to_string();
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(service.serve(stopped));
    assert!(probe(&admin, "/healthz")
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));

    // 500 idle connections, kept at 500: each one closed is opened again.
    let (attack_stop, attack_stopped) = watch::channel(false);
    let connected = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for i in 0..500 {
        let admin = admin.clone();
        let mut stopped = attack_stopped.clone();
        let connected = Arc::clone(&connected);
        attackers.push(tokio::spawn(async move {
            let mut first = true;
            while !*stopped.borrow() {
                let Ok(mut s) = TcpStream::connect(&admin).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if std::mem::take(&mut first) {
                    connected.fetch_add(1, Ordering::Relaxed);
                }
                // One in ten trickles a header instead of sending nothing.
                let trickle = i % 10 == 0;
                let mut buf = [0u8; 256];
                loop {
                    tokio::select! {
                        _ = stopped.changed() => return,
                        read = s.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) { break },
                        _ = tokio::time::sleep(Duration::from_millis(500)), if trickle => {
                            if s.write_all(b"X").await.is_err() { break }
                        }
                    }
                }
            }
        }));
    }
    // Every attacker holds a connection before the probes start.
    let deadline = Instant::now() + Duration::from_secs(10);
    while connected.load(Ordering::Relaxed) < 500 {
        assert!(
            Instant::now() < deadline,
            "only {} of 500 attackers connected within 10 s",
            connected.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let started = Instant::now();
    let mut answered = 0;
    while started.elapsed() < Duration::from_secs(6) {
        for path in ["/healthz", "/readyz"] {
            let answer = probe(&admin, path).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = attack_stop.send(true);
    for a in attackers {
        let _ = a.await;
    }
    let _ = stop.send(true);
    println!("{answered} probes answered under 500 held admin connections");
    assert!(answered >= 10);
}
