//! kshim under a small open-file limit (128, soft and hard, set for the child
//! process only): clients beyond what the descriptors allow are refused, never
//! left hanging in the backlog, and the store keeps the descriptors it needs, so
//! an UpdateFeatures during the flood is still applied.

use crate::support;

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::UpdateFeaturesRequest;
use kafka_protocol::protocol::StrBytes;
use kshim::client::KafkaClient;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMIT: u64 = 128;

struct Kshim {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Kshim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(settings: &str) -> Kshim {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kshim.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n{settings}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kshim"));
    command
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("start kshim");
    let addr = support::listening_addr(&mut child);
    Kshim {
        child,
        addr,
        _dir: dir,
    }
}

const API_VERSIONS_V0: [u8; 14] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 9, 0, 0];

/// Whether a connection is answered, or closed, within `within`; `None` if it
/// hangs.
async fn fate(s: &mut TcpStream, within: Duration) -> Option<&'static str> {
    if s.write_all(&API_VERSIONS_V0).await.is_err() {
        return Some("closed");
    }
    match tokio::time::timeout(within, s.read_i32()).await {
        Err(_) => None,
        Ok(Ok(_)) => Some("answered"),
        Ok(Err(_)) => Some("closed"),
    }
}

/// Waits (at most 5 s) until a new connection is answered again.
async fn served_again(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(addr).await.unwrap();
        if fate(&mut s, Duration::from_secs(2)).await == Some("answered") {
            return;
        }
        assert!(Instant::now() < deadline, "kshim never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn set_transaction_version(level: i16) -> UpdateFeaturesRequest {
    let mut r = UpdateFeaturesRequest::default().with_timeout_ms(5_000);
    r.feature_updates.push(
        FeatureUpdateKey::default()
            .with_feature(StrBytes::from_static_str("transaction.version"))
            .with_max_version_level(level)
            .with_upgrade_type(if level < 2 { 2 } else { 1 }),
    );
    r
}

#[tokio::test]
async fn the_budget_refuses_in_time_and_keeps_the_store_working() {
    let kshim = start("descriptor_reserve = 32\nmax_connections_per_ip = 10000");
    let mut admin = KafkaClient::connect(&kshim.addr, Duration::from_secs(5))
        .await
        .unwrap();
    let mut flood = Vec::new();
    for _ in 0..200 {
        match TcpStream::connect(&kshim.addr).await {
            Ok(s) => flood.push(s),
            Err(_) => break,
        }
    }
    let mut answered = 0;
    let mut refused = 0;
    for s in &mut flood {
        match fate(s, Duration::from_secs(3)).await {
            Some("answered") => answered += 1,
            Some(_) => refused += 1,
            None => panic!("a connection hung: {answered} answered, {refused} refused so far"),
        }
    }
    assert!(
        answered > 0 && refused > 0,
        "{answered} answered, {refused} refused"
    );
    assert!(
        answered < 128,
        "{answered} answered, more than the descriptors allow"
    );
    // The store still has descriptors for its temporary file.
    for level in [1, 2] {
        let answer = admin
            .update_features(1, &set_transaction_version(level))
            .await
            .expect("UpdateFeatures answered");
        assert_eq!(answer.error_code, 0, "{answer:?}");
    }
    drop(flood);
    served_again(&kshim.addr).await;
    println!("{answered} answered, {refused} refused at an open-file limit of {LIMIT}");
}

#[tokio::test]
async fn out_of_descriptors_refuses_instead_of_hanging() {
    // No reserve and a cap far above the limit: accept itself runs out.
    let kshim =
        start("descriptor_reserve = 0\nmax_connections = 100000\nmax_connections_per_ip = 100000");
    let mut flood = Vec::new();
    for _ in 0..200 {
        match TcpStream::connect(&kshim.addr).await {
            Ok(s) => flood.push(s),
            Err(_) => break,
        }
    }
    let mut outcomes = (0, 0);
    for s in &mut flood {
        match fate(s, Duration::from_secs(3)).await {
            Some("answered") => outcomes.0 += 1,
            Some(_) => outcomes.1 += 1,
            None => panic!("a connection hung in the backlog: {outcomes:?} so far"),
        }
    }
    assert!(outcomes.1 > 0, "nothing was refused: {outcomes:?}");
    drop(flood);
    served_again(&kshim.addr).await;
    println!("answered {}, refused {}", outcomes.0, outcomes.1);
}
