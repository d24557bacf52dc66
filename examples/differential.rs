//! Differential test of UpdateFeatures: the same seeded random sequence of
//! requests goes to a real Kafka broker and to a standalone kshim configured with
//! the broker's supported ranges and finalized levels. After every step the error
//! codes and the finalized levels must agree, except for the divergences kshim
//! makes on purpose (listed in the README), which are counted, checked to take the
//! documented form, and then reconciled so that both sides stay in the same state.
//!
//!     cargo run --release --example differential -- \
//!         --broker 127.0.0.1:9092 --kshim 127.0.0.1:9192 --seed 42 --count 200

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest};
use kafka_protocol::protocol::StrBytes;
use kshim::client::KafkaClient;
use kshim::protocol::errors::{self, ResponseError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::Duration;

/// Features both sides manage the same way. kraft.version is left out: Kafka
/// upgrades it through its Raft quorum, which a kshim has no equivalent of.
const FEATURES: &[(&str, i16, i16)] = &[
    ("group.version", -1, 2),
    ("transaction.version", -1, 3),
    ("eligible.leader.replicas.version", -1, 2),
    ("share.version", -1, 2),
    // metadata.version stays within 22..=28 so that the broker keeps running at a
    // level it was built for; downgrades inside 23..=27 are the safe ones.
    ("metadata.version", 22, 28),
    ("no.such.feature", 0, 2),
];

#[derive(Debug, Clone)]
struct Update {
    name: String,
    level: i16,
    /// v0: AllowDowngrade; v1+: UpgradeType code.
    allow_downgrade: bool,
    upgrade_type: i8,
}

#[derive(Debug)]
struct Step {
    version: i16,
    validate_only: bool,
    updates: Vec<Update>,
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn random_step(rng: &mut StdRng) -> Step {
    let version = rng.gen_range(0..=2);
    let validate_only = version >= 1 && rng.gen_bool(0.2);
    let n = if rng.gen_bool(0.75) {
        1
    } else {
        rng.gen_range(2..=3)
    };
    let mut updates = Vec::new();
    for _ in 0..n {
        let (name, lo, hi) = FEATURES[rng.gen_range(0..FEATURES.len())];
        let level = rng.gen_range(lo..=hi);
        let upgrade_type = match rng.gen_range(0..20) {
            0 => 0, // UNKNOWN
            1 => 7, // not a type at all
            2..=9 => 1,
            10..=15 => 2,
            _ => 3,
        };
        updates.push(Update {
            name: name.to_owned(),
            level,
            allow_downgrade: rng.gen_bool(0.4),
            upgrade_type,
        });
    }
    // Usually one entry per feature; sometimes a duplicate on purpose.
    if !rng.gen_bool(0.1) {
        let mut seen = std::collections::HashSet::new();
        updates.retain(|u| seen.insert(u.name.clone()));
    }
    Step {
        version,
        validate_only,
        updates,
    }
}

fn request(step: &Step) -> UpdateFeaturesRequest {
    let mut r = UpdateFeaturesRequest::default().with_timeout_ms(30_000);
    r.validate_only = step.validate_only;
    for u in &step.updates {
        let mut k = FeatureUpdateKey::default()
            .with_feature(StrBytes::from_string(u.name.clone()))
            .with_max_version_level(u.level);
        if step.version == 0 {
            k.allow_downgrade = u.allow_downgrade;
        } else {
            k.upgrade_type = u.upgrade_type;
        }
        r.feature_updates.push(k);
    }
    r
}

async fn levels(client: &mut KafkaClient) -> Result<BTreeMap<String, i16>, String> {
    let (_, answer) = client.api_versions().await.map_err(|e| e.to_string())?;
    Ok(answer
        .features
        .finalized
        .into_iter()
        .filter(|(name, _)| name != "kraft.version")
        .map(|(name, (_, max))| (name, max))
        .collect())
}

async fn send(client: &mut KafkaClient, step: &Step) -> Result<(i16, Option<String>), String> {
    let answer = client
        .update_features(step.version, &request(step))
        .await
        .map_err(|e| e.to_string())?;
    Ok((answer.error_code, answer.error_message))
}

/// The divergences kshim makes on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Deliberate {
    /// Kafka 4.1's controller reads only UpgradeType, which v0 does not carry, so
    /// it treats every v0 entry as UPGRADE; kshim honours AllowDowngrade (the KIP,
    /// and UpdateFeaturesRequest's own v0 mapping).
    V0AllowDowngrade,
    /// Kafka lets the last of several entries for one feature win; kshim refuses
    /// the request as INVALID_REQUEST, as the KIP's all-or-nothing rule asks.
    DuplicateFeature,
}

fn classify(step: &Step, current: &BTreeMap<String, i16>) -> Option<Deliberate> {
    let mut seen = std::collections::HashSet::new();
    if step.updates.iter().any(|u| !seen.insert(u.name.as_str())) {
        return Some(Deliberate::DuplicateFeature);
    }
    if step.version == 0
        && step
            .updates
            .iter()
            .any(|u| u.allow_downgrade && u.level < current.get(&u.name).copied().unwrap_or(0))
    {
        return Some(Deliberate::V0AllowDowngrade);
    }
    None
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let broker_addr = arg("--broker").expect("--broker HOST:PORT");
    let kshim_addr = arg("--kshim").expect("--kshim HOST:PORT");
    let seed: u64 = arg("--seed").map_or(42, |s| s.parse().expect("--seed N"));
    let count: usize = arg("--count").map_or(200, |s| s.parse().expect("--count N"));
    let timeout = Duration::from_secs(30);
    let mut broker = KafkaClient::connect(&broker_addr, timeout)
        .await
        .expect("connect to the broker");
    let mut kshim = KafkaClient::connect(&kshim_addr, timeout)
        .await
        .expect("connect to kshim");
    let mut rng = StdRng::seed_from_u64(seed);

    let start_broker = levels(&mut broker).await.expect("broker ApiVersions");
    let start_kshim = levels(&mut kshim).await.expect("kshim ApiVersions");
    if start_broker != start_kshim {
        eprintln!("initial states differ: broker {start_broker:?} kshim {start_kshim:?}");
        return std::process::ExitCode::FAILURE;
    }

    let mut agreed = 0usize;
    let mut deliberate: BTreeMap<Deliberate, usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut by_code: BTreeMap<i16, usize> = BTreeMap::new();
    for i in 0..count {
        let step = random_step(&mut rng);
        let before = levels(&mut broker).await.expect("broker ApiVersions");
        let kind = classify(&step, &before);
        let b = send(&mut broker, &step).await;
        let k = send(&mut kshim, &step).await;
        let (Ok((b_code, b_msg)), Ok((k_code, k_msg))) = (b.clone(), k.clone()) else {
            unexpected.push(format!(
                "step {i}: transport error: broker {b:?} kshim {k:?}"
            ));
            break;
        };
        match kind {
            Some(Deliberate::DuplicateFeature) => {
                if k_code != ResponseError::InvalidRequest.code() {
                    unexpected.push(format!(
                        "step {i}: duplicate names: kshim answered {k_code}, not INVALID_REQUEST"
                    ));
                }
                if b_code == errors::NONE && !step.validate_only {
                    // Replay the broker's last-wins reading on kshim.
                    let mut last: BTreeMap<String, Update> = BTreeMap::new();
                    for u in &step.updates {
                        last.insert(u.name.clone(), u.clone());
                    }
                    let dedup = Step {
                        version: step.version,
                        validate_only: false,
                        updates: last.into_values().collect(),
                    };
                    let dedup = if classify(&dedup, &before).is_some() {
                        Step {
                            version: 2,
                            validate_only: false,
                            updates: dedup
                                .updates
                                .iter()
                                .map(|u| Update {
                                    upgrade_type: if u.level
                                        < before.get(&u.name).copied().unwrap_or(0)
                                    {
                                        2
                                    } else {
                                        1
                                    },
                                    ..u.clone()
                                })
                                .collect(),
                        }
                    } else {
                        dedup
                    };
                    let r = send(&mut kshim, &dedup).await;
                    if !matches!(r, Ok((0, _))) {
                        unexpected.push(format!(
                            "step {i}: reconciling a duplicate on kshim failed: {r:?}"
                        ));
                    }
                }
                *deliberate.entry(Deliberate::DuplicateFeature).or_default() += 1;
            }
            Some(Deliberate::V0AllowDowngrade) => {
                if b_code != ResponseError::InvalidUpdateVersion.code() {
                    unexpected.push(format!(
                        "step {i}: v0 AllowDowngrade: broker answered {b_code} ({b_msg:?})"
                    ));
                }
                if k_code == errors::NONE {
                    // kshim applied the downgrade; apply it on the broker the v1+ way.
                    let v2 = Step {
                        version: 2,
                        validate_only: false,
                        updates: step
                            .updates
                            .iter()
                            .map(|u| Update {
                                upgrade_type: if u.allow_downgrade { 2 } else { 1 },
                                ..u.clone()
                            })
                            .collect(),
                    };
                    let r = send(&mut broker, &v2).await;
                    if !matches!(r, Ok((0, _))) {
                        unexpected.push(format!(
                            "step {i}: reconciling a v0 downgrade on the broker failed: {r:?}"
                        ));
                    }
                }
                *deliberate.entry(Deliberate::V0AllowDowngrade).or_default() += 1;
            }
            None => {
                if b_code == k_code {
                    agreed += 1;
                    *by_code.entry(b_code).or_default() += 1;
                } else {
                    unexpected.push(format!(
                        "step {i}: {step:?}: broker {b_code} {b_msg:?} vs kshim {k_code} {k_msg:?}"
                    ));
                }
            }
        }
        let after_k = levels(&mut kshim).await.expect("kshim ApiVersions");
        // A broker serves finalized features from its metadata cache, which
        // follows the controller a moment later (the KIP's eventual consistency):
        // give it up to five seconds to catch up before calling it a divergence.
        let mut after_b = levels(&mut broker).await.expect("broker ApiVersions");
        for _ in 0..50 {
            if after_b == after_k {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            after_b = levels(&mut broker).await.expect("broker ApiVersions");
        }
        if after_b != after_k {
            unexpected.push(format!(
                "step {i}: {step:?}: levels differ: broker {after_b:?} kshim {after_k:?}"
            ));
            break;
        }
        println!(
            "step {i:3}: v{} {:?} -> broker {b_code} kshim {k_code}",
            step.version,
            step.updates
                .iter()
                .map(|u| format!(
                    "{}={}/{}",
                    u.name,
                    u.level,
                    if step.version == 0 {
                        u.allow_downgrade as i8
                    } else {
                        u.upgrade_type
                    }
                ))
                .collect::<Vec<_>>()
        );
    }
    let _ = ApiKey::UpdateFeatures;
    println!("differential: seed {seed}, {count} steps, {agreed} agreed ({by_code:?} by error code), deliberate divergences {deliberate:?}, unexpected {}", unexpected.len());
    for u in &unexpected {
        println!("UNEXPECTED {u}");
    }
    if unexpected.is_empty() && agreed + deliberate.values().sum::<usize>() == count {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
