//! The writer role, fenced by Kafka's transactional producer epoch.
//!
//! Every instance of a kshim cluster uses one transactional id,
//! `kshim-<cluster id>`. Taking the writer role is InitProducerId on that id:
//! the transaction coordinator bumps the producer epoch, aborts whatever the
//! previous holder left open, and from then on refuses the previous epoch at
//! AddPartitionsToTxn, at EndTxn, and (once a marker of the new epoch is on the
//! partition) at Produce. So a holder that was paused and lost the role gets
//! PRODUCER_FENCED on its next step, and none of its records ever become
//! visible to a read_committed reader.
//!
//! A change is one transaction: its records, then a commit. The decision that
//! produced it was taken after reading the topic to the end under the same
//! epoch (see `ClusterNode::turn`), so a committed change always saw every
//! change committed before it.

use super::log::{LogError, StateLog};
use crate::protocol::apis::{self as wire, ProducerIdentity};
use crate::protocol::errors::{self, ResponseError};
use crate::protocol::records;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use std::time::{Duration, Instant};

/// Pause between tries of a step that another party is still finishing.
const RETRY_PAUSE: Duration = Duration::from_millis(25);

pub struct TxnWriter {
    log: StateLog,
    transactional_id: String,
    transaction_timeout_ms: i32,
    coordinator: Option<String>,
    /// The producer epoch this instance holds, while it believes it holds one.
    identity: Option<ProducerIdentity>,
    sequence: i32,
}

/// One record: key, and value (`None`: a tombstone).
pub type Entry = (Bytes, Option<Bytes>);

fn past(deadline: Instant, what: &str) -> Result<(), LogError> {
    if Instant::now() >= deadline {
        Err(LogError::Timeout(what.to_owned()))
    } else {
        Ok(())
    }
}

fn unreadable(api: &str, e: crate::protocol::CodecError) -> LogError {
    LogError::Upstream(crate::upstream::UpstreamError::Protocol {
        target: "the upstream".into(),
        reason: format!("unreadable {api} response: {e}"),
    })
}

fn fenced(code: i16) -> bool {
    matches!(
        errors::error(code),
        Some(
            ResponseError::ProducerFenced
                | ResponseError::InvalidProducerEpoch
                | ResponseError::InvalidTxnState
        )
    )
}

impl TxnWriter {
    pub fn new(log: StateLog, cluster_id: &str, transaction_timeout: Duration) -> TxnWriter {
        TxnWriter {
            log,
            transactional_id: format!("kshim-{cluster_id}"),
            transaction_timeout_ms: transaction_timeout.as_millis().min(i32::MAX as u128) as i32,
            coordinator: None,
            identity: None,
            sequence: 0,
        }
    }

    pub fn log(&mut self) -> &mut StateLog {
        &mut self.log
    }

    /// Whether this instance holds (or believes it holds) the writer role.
    pub fn holds_role(&self) -> bool {
        self.identity.is_some()
    }

    /// Gives up the role as far as this instance is concerned: the next
    /// `claim` takes it anew, which also aborts anything left open.
    pub fn forget(&mut self) {
        self.identity = None;
    }

    async fn coordinator(&mut self) -> Result<String, LogError> {
        if let Some(c) = &self.coordinator {
            return Ok(c.clone());
        }
        let body =
            wire::find_coordinator_request(wire::COORDINATOR_TRANSACTION, &self.transactional_id);
        let raw = self
            .log
            .call_any(
                ApiKey::FindCoordinator,
                wire::FIND_COORDINATOR_VERSION,
                &body,
            )
            .await?;
        let c =
            wire::decode_find_coordinator(&raw).map_err(|e| unreadable("FindCoordinator", e))?;
        if c.error_code != errors::NONE {
            return Err(LogError::Kafka {
                api: "FindCoordinator",
                code: c.error_code,
                message: c.error_message,
            });
        }
        let addr = crate::upstream::cluster::host_port(&c.host, c.port);
        self.coordinator = Some(addr.clone());
        Ok(addr)
    }

    /// Sends a request to the transaction coordinator and returns the error
    /// code `decode` reads from the answer; a coordinator that moved is found
    /// again.
    async fn ask_coordinator<T>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &[u8],
        decode: impl Fn(&[u8]) -> Result<(i16, T), crate::protocol::CodecError>,
    ) -> Result<(i16, T), LogError> {
        let addr = self.coordinator().await?;
        let raw = match self.log.call(&addr, api, version, body).await {
            Ok(raw) => raw,
            Err(e) => {
                self.coordinator = None;
                return Err(e);
            }
        };
        let (code, value) = decode(&raw).map_err(|e| unreadable(api_name(api), e))?;
        if matches!(
            errors::error(code),
            Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable)
        ) {
            self.coordinator = None;
        }
        Ok((code, value))
    }

    /// Takes the writer role unless this instance holds it already.
    pub async fn claim(&mut self, deadline: Instant) -> Result<(), LogError> {
        if self.identity.is_some() {
            return Ok(());
        }
        let body = wire::init_producer_id_request(
            Some(&self.transactional_id.clone()),
            self.transaction_timeout_ms,
            None,
        );
        loop {
            let attempt = self
                .ask_coordinator(
                    ApiKey::InitProducerId,
                    wire::INIT_PRODUCER_ID_VERSION,
                    &body,
                    wire::decode_init_producer_id,
                )
                .await;
            match attempt {
                Ok((errors::NONE, identity)) => {
                    tracing::debug!(
                        producer_id = identity.producer_id,
                        epoch = identity.epoch,
                        "took the state writer role"
                    );
                    self.identity = Some(identity);
                    self.sequence = 0;
                    return Ok(());
                }
                // The previous holder's transaction is being aborted, or the
                // coordinator is loading: both pass.
                Ok((code, _)) => {
                    let e = LogError::Kafka {
                        api: "InitProducerId",
                        code,
                        message: None,
                    };
                    if !e.retriable() {
                        return Err(e);
                    }
                    past(deadline, &format!("taking the writer role: {e}"))?;
                }
                Err(e) if e.retriable() => {
                    past(deadline, &format!("taking the writer role: {e}"))?;
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Commits `entries` as one transaction and returns the offset of the
    /// last one. On any failure the role is forgotten: the next claim starts a
    /// new epoch, which aborts whatever this attempt left open.
    pub async fn commit(&mut self, entries: &[Entry], deadline: Instant) -> Result<i64, LogError> {
        let result = self.try_commit(entries, deadline).await;
        if result.is_err() {
            self.identity = None;
        }
        result
    }

    async fn try_commit(&mut self, entries: &[Entry], deadline: Instant) -> Result<i64, LogError> {
        let Some(identity) = self.identity else {
            return Err(LogError::Fenced);
        };
        let topic = self.log.topic().to_owned();
        let txn = self.transactional_id.clone();

        let add = wire::add_partitions_to_txn_request(&txn, identity, &topic, 0);
        self.coordinator_step(
            "AddPartitionsToTxn",
            ApiKey::AddPartitionsToTxn,
            wire::ADD_PARTITIONS_TO_TXN_VERSION,
            &add,
            |raw| wire::decode_add_partitions_to_txn(raw).map(|c| (c, ())),
            deadline,
        )
        .await?;

        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = entries
            .iter()
            .map(|(k, v)| (Some(k.clone()), v.clone()))
            .collect();
        let batch = records::encode_batch(Some(identity), self.sequence, true, now_ms, &records);
        let produce = wire::produce_request(Some(&txn), -1, 30_000, &topic, 0, batch);
        let last = loop {
            let addr = self.log.leader_addr().await;
            let answer = match addr {
                Ok(addr) => {
                    self.log
                        .call(&addr, ApiKey::Produce, wire::PRODUCE_VERSION, &produce)
                        .await
                }
                Err(e) => Err(e),
            };
            let e = match answer {
                Ok(raw) => {
                    let a = wire::decode_produce(&raw).map_err(|e| unreadable("Produce", e))?;
                    match errors::error(a.error_code) {
                        None => break a.base_offset + entries.len() as i64 - 1,
                        // A retry of a batch the leader already has.
                        Some(ResponseError::DuplicateSequenceNumber) => break -1,
                        _ if fenced(a.error_code) => return Err(LogError::Fenced),
                        Some(error) => {
                            let code = error.code();
                            if matches!(
                                error,
                                ResponseError::NotLeaderOrFollower
                                    | ResponseError::FencedLeaderEpoch
                                    | ResponseError::LeaderNotAvailable
                            ) {
                                self.log.leader_moved();
                            }
                            LogError::Kafka {
                                api: "Produce",
                                code,
                                message: a.error_message,
                            }
                        }
                    }
                }
                Err(e) => e,
            };
            if !e.retriable() {
                return Err(e);
            }
            past(deadline, &format!("writing the change: {e}"))?;
            tokio::time::sleep(RETRY_PAUSE).await;
        };
        self.sequence = records::next_sequence(self.sequence, entries.len());
        fault_pause_before_commit().await;

        let end = wire::end_txn_request(&txn, identity, true);
        let committed = self
            .coordinator_step(
                "EndTxn",
                ApiKey::EndTxn,
                wire::END_TXN_VERSION,
                &end,
                |raw| wire::decode_end_txn(raw).map(|c| (c, ())),
                deadline,
            )
            .await;
        match committed {
            Ok(()) => Ok(last),
            Err(LogError::Fenced) => Err(LogError::Fenced),
            // The records are written; only the topic can tell whether they
            // were committed (a coordinator that was fencing this epoch at the
            // same moment answers UNKNOWN_SERVER_ERROR, for one).
            Err(e) if last >= 0 => Err(LogError::Undecided {
                last,
                reason: e.to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    /// One coordinator step of the transaction, tried until it succeeds, is
    /// fenced, fails for good, or the deadline passes.
    async fn coordinator_step(
        &mut self,
        name: &'static str,
        api: ApiKey,
        version: i16,
        body: &[u8],
        decode: impl Fn(&[u8]) -> Result<(i16, ()), crate::protocol::CodecError> + Copy,
        deadline: Instant,
    ) -> Result<(), LogError> {
        loop {
            let e = match self.ask_coordinator(api, version, body, decode).await {
                Ok((errors::NONE, ())) => return Ok(()),
                Ok((code, ())) if fenced(code) => return Err(LogError::Fenced),
                Ok((code, ())) => LogError::Kafka {
                    api: name,
                    code,
                    message: None,
                },
                Err(e) => e,
            };
            if !e.retriable() {
                return Err(e);
            }
            past(deadline, &format!("{name}: {e}"))?;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// A fault-injection point for the failover tests, off unless the
/// environment variable `KSHIM_FAULT_PAUSE_BEFORE_COMMIT_MS` is set: the
/// writer waits that long between writing a change's records and committing
/// them, so that a test can pause or kill it exactly there.
async fn fault_pause_before_commit() {
    static PAUSE: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        std::env::var("KSHIM_FAULT_PAUSE_BEFORE_COMMIT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
    });
    if let Some(pause) = pause {
        tracing::warn!(
            "KSHIM_FAULT_PAUSE_BEFORE_COMMIT_MS: pausing {pause:?} before committing a change"
        );
        tokio::time::sleep(*pause).await;
    }
}

fn api_name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
        ApiKey::EndTxn => "EndTxn",
        _ => "coordinator",
    }
}
