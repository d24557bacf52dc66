//! Decoding a Metadata answer and checking it: the fake upstream's answer for
//! named topics, and the first answer through kshim against the direct one
//! (every broker named, each at a port kshim listens on, the same topics and
//! partitions). Runs outside the measured rounds.

use super::fake::{Model, UNKNOWN_TOPIC_OR_PARTITION};
use super::procfs::listening_ports;
use super::rounds::{connect, metadata_request_for};
use super::{frames, HOST, MIB};
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use std::collections::BTreeSet;
use tokio::io::AsyncWriteExt;

/// Asks the fake upstream for two named topics, one it has and one it does
/// not: what kshim's discovery would get if it asked for topics by name.
pub(super) async fn named_topics(
    upstream: &str,
    model: &Model,
    version: i16,
) -> Result<(), String> {
    let mut conn = connect(upstream, 1).await?.remove(0);
    let last = model.topics - 1;
    let name = Model::topic_name(last);
    let request = metadata_request_for(version, 7, Some(&[name.as_str(), "no-such-topic"]))?;
    conn.stream
        .write_all(&request)
        .await
        .map_err(|e| e.to_string())?;
    let body = frames::read_frame(&mut conn.stream, &mut conn.buf, 64 * MIB).await?;
    let answer = decode_answer(&body.freeze(), version)?;
    let (_, count) = model.span(last);
    let ok = answer.topics.len() == 2
        && answer.topics[0] == model.topic(last)
        && answer.topics[0].partitions.len() == count
        && answer.topics[1].error_code == UNKNOWN_TOPIC_OR_PARTITION
        && answer.brokers.len() == model.brokers as usize;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the fake upstream's answer for [{name}, no-such-topic] is wrong: {} topics",
            answer.topics.len()
        ))
    }
}

fn decode_answer(body: &Bytes, version: i16) -> Result<MetadataResponse, String> {
    let mut b = body.clone();
    ResponseHeader::decode(&mut b, ApiKey::Metadata.response_header_version(version))
        .map_err(|e| format!("response header: {e}"))?;
    let decoded = MetadataResponse::decode(&mut b, version)
        .map_err(|e| format!("Metadata v{version}: {e}"))?;
    if !b.is_empty() {
        return Err(format!("{} bytes after the Metadata body", b.len()));
    }
    Ok(decoded)
}

/// What the checks of the first answers found.
pub(super) struct Checks {
    pub(super) brokers_named: usize,
    pub(super) brokers_at_kshim_listeners: usize,
    pub(super) distinct_broker_ports: usize,
    pub(super) partitions_through_kshim: usize,
    pub(super) topics_equal_direct: bool,
    /// Every check that failed, each already reported on stderr.
    pub(super) problems: Vec<String>,
}

/// Checks the first answer through kshim (`kshim_first`) against the model,
/// the ports kshim (`pid`, bootstrap listener at `bootstrap`) listens on, and
/// the first direct answer (`direct_first`). Err when either does not decode.
pub(super) fn answers(
    direct_first: &Bytes,
    kshim_first: &Bytes,
    version: i16,
    model: &Model,
    pid: u32,
    bootstrap: &str,
) -> Result<Checks, String> {
    let mut problems = Vec::new();
    let through = decode_answer(kshim_first, version)?;
    let direct = decode_answer(direct_first, version)?;
    let kshim_ports: BTreeSet<u16> = listening_ports(pid);
    let bootstrap_port: u16 = bootstrap
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let mut broker_ports = BTreeSet::new();
    let mut at_fake = 0;
    let mut not_listening = 0;
    let mut wrong_host = 0;
    for b in &through.brokers {
        let p = u16::try_from(b.port).unwrap_or(0);
        if p == model.port {
            at_fake += 1;
        }
        if !kshim_ports.contains(&p) || p == bootstrap_port {
            not_listening += 1;
        }
        if b.host.as_str() != HOST {
            wrong_host += 1;
        }
        broker_ports.insert(p);
    }
    let node_ids: BTreeSet<i32> = through.brokers.iter().map(|b| b.node_id.0).collect();
    let expected_ids: BTreeSet<i32> = (1..=model.brokers).collect();
    if through.brokers.len() != model.brokers as usize || node_ids != expected_ids {
        problems.push(format!(
            "the answer through kshim names {} brokers ({} distinct node ids), not {}",
            through.brokers.len(),
            node_ids.len(),
            model.brokers
        ));
    }
    if at_fake > 0 || not_listening > 0 || wrong_host > 0 {
        problems.push(format!(
            "through kshim, {at_fake} brokers are at the upstream's port, {not_listening} at a port kshim does not listen on for brokers, {wrong_host} at another host"
        ));
    }
    if broker_ports.len() != through.brokers.len() {
        problems.push(format!(
            "through kshim, {} brokers share {} ports",
            through.brokers.len(),
            broker_ports.len()
        ));
    }
    let partitions: usize = through.topics.iter().map(|t| t.partitions.len()).sum();
    if through.topics.len() != model.topics || partitions != model.partitions {
        problems.push(format!(
            "through kshim: {} topics and {partitions} partitions, not {} and {}",
            through.topics.len(),
            model.topics,
            model.partitions
        ));
    }
    let direct_ok = direct.brokers.len() == model.brokers as usize
        && direct
            .brokers
            .iter()
            .all(|b| b.port == i32::from(model.port));
    if !direct_ok {
        problems.push("the direct answer does not name every broker at the upstream".into());
    }
    let same_topics = through.topics == direct.topics;
    if !same_topics {
        problems.push("the topics through kshim differ from the direct answer's".into());
    }
    if through.cluster_id != direct.cluster_id || through.controller_id != direct.controller_id {
        problems.push("cluster id or controller differ through kshim".into());
    }
    drop((through, direct));
    for p in &problems {
        eprintln!("metadata_scale: CHECK FAILED: {p}");
    }
    Ok(Checks {
        brokers_named: node_ids.len(),
        brokers_at_kshim_listeners: through_ok_count(
            model.brokers as usize,
            at_fake,
            not_listening,
        ),
        distinct_broker_ports: broker_ports.len(),
        partitions_through_kshim: partitions,
        topics_equal_direct: same_topics,
        problems,
    })
}

fn through_ok_count(brokers: usize, at_fake: usize, not_listening: usize) -> usize {
    brokers.saturating_sub(at_fake.max(not_listening))
}
