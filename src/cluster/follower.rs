//! Every instance, the writer included, applies the state topic in offset
//! order, reading only committed records (read_committed), and serves only
//! what it has applied.
//!
//! Aborted transactions are left out as Kafka's own consumer leaves them out:
//! the fetch names each aborted transaction's producer and first offset; from
//! that offset, that producer's transactional batches are skipped until its
//! abort marker.
//!
//! Config records are buffered: an override takes effect only when the
//! commit marker that lists it is applied, and the marker lists every active
//! key, so a compacted topic still yields the whole set.

use super::records::{Read, StateRecord};
use super::{ClusterNode, LogError, SharedFeatures};
use crate::protocol::records::{self, Batch, ControlType};
use crate::store::Overrides;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a fetch waits at the broker for something new: the bound on how
/// late a follower hears of a change is the broker's own wake-up, not this.
const LONG_POLL: Duration = Duration::from_millis(500);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// What the follower hands on. Both calls return once the change is served.
pub trait Applier: Send + Sync + 'static {
    /// A new shared feature state.
    fn features(&self, features: SharedFeatures) -> impl Future<Output = ()> + Send;
    /// A committed set of config overrides; `Err` says why this instance
    /// could not apply it (it keeps its previous config).
    fn config(&self, overrides: Overrides) -> impl Future<Output = Result<(), String>> + Send;
}

/// What the follower keeps between fetches.
#[derive(Default)]
struct Position {
    next: i64,
    /// Aborted transactions named by fetches, not yet reached: (first offset, producer).
    pending_aborts: BTreeSet<(i64, i64)>,
    /// Producers whose transaction in progress is an aborted one.
    aborting: BTreeSet<i64>,
    /// The latest value of every config key, committed or not yet.
    config_values: BTreeMap<String, Value>,
}

/// Follows the state topic until `shutdown` turns true.
pub async fn follow<A: Applier>(
    node: Arc<ClusterNode>,
    applier: A,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut log = node.new_log();
    let mut pos = Position::default();
    let mut backoff = BACKOFF_MIN;
    let mut reported: Option<String> = None;
    // The end to catch up with at startup. The topic is made sure of here too:
    // an instance that started while the upstream was away has not checked it.
    loop {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let end = match log.ensure_topic(deadline).await {
            Ok(()) => log.committed_end().await,
            Err(e) => Err(e),
        };
        match end {
            Ok(end) => {
                node.startup_end.store(end, Ordering::Relaxed);
                node.publish_applied(0);
                break;
            }
            Err(e) => {
                note_failure(&node, &mut reported, &e);
                if pause(&mut shutdown, &mut backoff).await {
                    return;
                }
            }
        }
    }
    loop {
        if *shutdown.borrow() {
            return;
        }
        let fetched = tokio::select! {
            r = log.fetch(pos.next, LONG_POLL) => r,
            _ = shutdown.changed() => return,
        };
        let answer = match fetched {
            Ok(a) => a,
            Err(e) => {
                note_failure(&node, &mut reported, &e);
                if pause(&mut shutdown, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        if reported.take().is_some() {
            tracing::info!(topic = log.topic(), "reading the state topic again");
        }
        node.reachable.store(true, Ordering::Relaxed);
        backoff = BACKOFF_MIN;
        if answer.partition_error == crate::protocol::errors::ResponseError::OffsetOutOfRange.code()
        {
            if pos.next < answer.log_start_offset {
                // Only deletion moves a compacted topic's start; what was
                // before it is gone for everyone, so read on from the start.
                tracing::warn!(
                    offset = pos.next,
                    log_start = answer.log_start_offset,
                    "the state topic no longer holds the next offset; reading on from its start"
                );
                pos.next = answer.log_start_offset;
            } else {
                // Past the end: the topic is shorter than what was applied here
                // (it was deleted and created again). Its content is the truth
                // now; read it again from the start.
                tracing::error!(
                    offset = pos.next,
                    "the state topic ends before what this instance applied (was it recreated?); reading it again from its start"
                );
                pos = Position {
                    next: answer.log_start_offset.max(0),
                    ..Position::default()
                };
                if pause(&mut shutdown, &mut backoff).await {
                    return;
                }
            }
            continue;
        }
        for (producer, first) in &answer.aborted {
            pos.pending_aborts.insert((*first, *producer));
        }
        let batches = match records::decode_batches(&answer.records) {
            Ok(b) => b,
            Err(e) => {
                let e = LogError::Topic {
                    topic: log.topic().to_owned(),
                    reason: format!("unreadable records at offset {}: {e}", pos.next),
                };
                note_failure(&node, &mut reported, &e);
                if pause(&mut shutdown, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        for batch in batches {
            apply_batch(&node, &applier, &mut pos, batch).await;
        }
        // A read_committed fetch ends at the last stable offset: every offset
        // below `next` is now applied or was never committed.
        node.publish_applied(pos.next);
    }
}

fn note_failure(node: &ClusterNode, reported: &mut Option<String>, e: &LogError) {
    node.read_failed();
    let text = e.to_string();
    if reported.as_deref() != Some(text.as_str()) {
        tracing::warn!(
            "cannot read the kshim cluster's state topic: {text}; serving the last applied state and retrying"
        );
        *reported = Some(text);
    }
}

/// Sleeps for the backoff (doubling it); true when shutting down.
async fn pause(shutdown: &mut watch::Receiver<bool>, backoff: &mut Duration) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    tokio::select! {
        _ = tokio::time::sleep(wait) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}

async fn apply_batch<A: Applier>(
    node: &ClusterNode,
    applier: &A,
    pos: &mut Position,
    batch: Batch,
) {
    if batch.last_offset < pos.next {
        return;
    }
    // Aborted transactions that start at or before this batch are in force.
    while let Some(&(first, producer)) = pos.pending_aborts.first() {
        if first > batch.last_offset {
            break;
        }
        pos.pending_aborts.pop_first();
        pos.aborting.insert(producer);
    }
    let skip = match batch.control {
        Some(ControlType::Abort) => {
            pos.aborting.remove(&batch.producer_id);
            true
        }
        Some(_) => true,
        None => batch.transactional && pos.aborting.contains(&batch.producer_id),
    };
    if !skip {
        for record in batch.records {
            if record.offset < pos.next {
                continue;
            }
            let read = node
                .codec
                .read(record.key.as_deref(), record.value.as_deref());
            apply_record(node, applier, pos, record.offset, read).await;
            node.note_applied(record.offset);
            pos.next = record.offset + 1;
        }
    }
    pos.next = pos.next.max(batch.last_offset + 1);
}

async fn apply_record<A: Applier>(
    node: &ClusterNode,
    applier: &A,
    pos: &mut Position,
    offset: i64,
    read: Read,
) {
    let record = match read {
        Read::Record(r) => r,
        Read::Foreign => return,
        Read::Unreadable(why) => {
            tracing::warn!(
                offset,
                "skipping a state record this kshim cannot read: {why}"
            );
            return;
        }
    };
    match record {
        StateRecord::Features(f) => {
            node.set_shared(f.clone());
            applier.features(f).await;
        }
        StateRecord::Config { key, value } => match value {
            Some(v) => {
                pos.config_values.insert(key, v);
            }
            None => {
                pos.config_values.remove(&key);
            }
        },
        StateRecord::ConfigCommit { keys } => {
            let mut next = Overrides::new();
            for key in keys {
                match pos.config_values.get(&key) {
                    Some(v) => {
                        next.insert(key, v.clone());
                    }
                    None => tracing::warn!(
                        offset,
                        "config commit lists {key}, but no value for it was read; left out"
                    ),
                }
            }
            let result = applier.config(next).await;
            if let Err(e) = &result {
                tracing::error!(
                    offset,
                    "the cluster's config change could not be applied here; this instance keeps its previous config: {e}"
                );
            }
            node.set_config_status(offset, result.err());
        }
        StateRecord::Instance { id, registration } => node.set_instance(id, registration),
    }
}
