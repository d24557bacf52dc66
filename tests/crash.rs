//! kill -9 at random instants while updates are being applied: after every restart
//! the store holds the last acknowledged state or the one update that was in
//! flight, never a mixture, and the epoch never goes back.

use crate::support;

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::UpdateFeaturesRequest;
use kafka_protocol::protocol::StrBytes;
use kshim::client::KafkaClient;
use rand::{Rng, SeedableRng};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FEATURE: &str = "transaction.version";

fn start(data_dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kshim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kshim");
    let addr = support::listening_addr(&mut child);
    (child, addr)
}

async fn observed(addr: &str) -> (i64, i16) {
    let mut client = KafkaClient::connect(addr, Duration::from_secs(5))
        .await
        .expect("connect");
    let (_, answer) = client.api_versions().await.expect("ApiVersions");
    let level = answer
        .features
        .finalized
        .get(FEATURE)
        .map_or(0, |&(_, max)| max);
    (answer.features.epoch, level)
}

fn toggle(level: i16) -> UpdateFeaturesRequest {
    let target = if level == 2 { 1 } else { 2 };
    let mut r = UpdateFeaturesRequest::default().with_timeout_ms(5_000);
    r.feature_updates.push(
        FeatureUpdateKey::default()
            .with_feature(StrBytes::from_static_str(FEATURE))
            .with_max_version_level(target)
            .with_upgrade_type(if target < level { 2 } else { 1 }),
    );
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_kill_9_at_any_instant() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(584);
    let (mut child, mut addr) = start(dir.path());
    let (mut acked_epoch, mut acked_level) = observed(&addr).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rounds = 0;
    let mut applied = 0u64;
    while rounds < 12 && Instant::now() < deadline {
        // Fire updates back to back and kill the process at a random moment.
        let kill_after = Duration::from_millis(rng.gen_range(5..120));
        let started = Instant::now();
        let mut client = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect("connect");
        while started.elapsed() < kill_after {
            match client.update_features(2, &toggle(acked_level)).await {
                Ok(answer) if answer.error_code == 0 => {
                    acked_epoch += 1;
                    acked_level = if acked_level == 2 { 1 } else { 2 };
                    applied += 1;
                }
                other => panic!("update refused before the kill: {other:?}"),
            }
        }
        // One more request in flight as the process dies.
        let in_flight = tokio::spawn({
            let addr = addr.clone();
            let request = toggle(acked_level);
            async move {
                if let Ok(mut c) = KafkaClient::connect(&addr, Duration::from_secs(2)).await {
                    let _ = c.update_features(2, &request).await;
                }
            }
        });
        tokio::time::sleep(Duration::from_micros(rng.gen_range(0..2_000))).await;
        child.kill().expect("kill -9");
        let _ = child.wait();
        let _ = in_flight.await;

        (child, addr) = start(dir.path());
        let (epoch, level) = observed(&addr).await;
        assert!(
            epoch >= acked_epoch,
            "epoch went back: {epoch} < acknowledged {acked_epoch}"
        );
        assert!(
            epoch <= acked_epoch + 1,
            "epoch {epoch} is ahead of anything sent ({acked_epoch} acknowledged)"
        );
        if epoch == acked_epoch {
            assert_eq!(level, acked_level, "same epoch, different level");
        } else {
            assert_ne!(
                level, acked_level,
                "the in-flight update moved the epoch but not the level"
            );
            acked_level = level;
        }
        acked_epoch = epoch;
        serde_json::from_slice::<serde_json::Value>(
            &std::fs::read(dir.path().join("state.json")).unwrap(),
        )
        .expect("state.json parses after a crash");
        rounds += 1;
    }
    child.kill().ok();
    let _ = child.wait();
    assert!(rounds >= 5, "only {rounds} crash rounds ran");
    assert!(applied > 0, "no update was applied between crashes");
    println!("{rounds} kill -9 rounds, {applied} acknowledged updates, final epoch {acked_epoch}");
}
