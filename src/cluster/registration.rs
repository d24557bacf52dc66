//! Each instance announces itself in the state topic: the feature ranges it
//! supports, where clients reach it, its version, and how far it has applied
//! the state. It renews the record every `heartbeat_interval_ms`; the others
//! count it live while they have read a renewal within `session_timeout_ms`
//! (by their own clock, so no two hosts' clocks are ever compared). A clean
//! stop writes a tombstone, so a stopped instance leaves at once.
//!
//! Registrations are not changes of state: they go through an idempotent
//! producer of their own (acks=all), not through the writer role, so that
//! renewing one never fences a change in progress.

use super::log::{LogError, StateLog};
use super::ClusterNode;
use crate::protocol::apis::{self as wire, ProducerIdentity};
use crate::protocol::errors::{self, ResponseError};
use crate::protocol::records;
use kafka_protocol::messages::ApiKey;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How soon a registration that could not be written is tried again.
const RETRY: Duration = Duration::from_millis(200);

/// An idempotent producer for this instance's registration.
struct Announcer {
    log: StateLog,
    identity: Option<ProducerIdentity>,
    sequence: i32,
}

impl Announcer {
    async fn send(
        &mut self,
        key: bytes::Bytes,
        value: Option<bytes::Bytes>,
    ) -> Result<(), LogError> {
        let identity = match self.identity {
            Some(i) => i,
            None => {
                let body = wire::init_producer_id_request(None, 60_000, None);
                let raw = self
                    .log
                    .call_any(
                        ApiKey::InitProducerId,
                        wire::INIT_PRODUCER_ID_VERSION,
                        &body,
                    )
                    .await?;
                let (code, identity) =
                    wire::decode_init_producer_id(&raw).map_err(|e| LogError::Topic {
                        topic: self.log.topic().to_owned(),
                        reason: format!("unreadable InitProducerId response: {e}"),
                    })?;
                if code != errors::NONE {
                    return Err(LogError::Kafka {
                        api: "InitProducerId",
                        code,
                        message: None,
                    });
                }
                self.identity = Some(identity);
                self.sequence = 0;
                identity
            }
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let batch = records::encode_batch(
            Some(identity),
            self.sequence,
            false,
            now_ms,
            &[(Some(key), value)],
        );
        let body = wire::produce_request(None, -1, 10_000, self.log.topic(), 0, batch);
        let addr = self.log.leader_addr().await?;
        let raw = self
            .log
            .call(&addr, ApiKey::Produce, wire::PRODUCE_VERSION, &body)
            .await;
        let raw = match raw {
            Ok(raw) => raw,
            Err(e) => {
                // The batch may or may not have landed: a new producer id
                // makes the next one unambiguous.
                self.identity = None;
                return Err(e);
            }
        };
        let answer = wire::decode_produce(&raw).map_err(|e| LogError::Topic {
            topic: self.log.topic().to_owned(),
            reason: format!("unreadable Produce response: {e}"),
        })?;
        match errors::error(answer.error_code) {
            None | Some(ResponseError::DuplicateSequenceNumber) => {
                self.sequence = records::next_sequence(self.sequence, 1);
                Ok(())
            }
            Some(error) => {
                let code = error.code();
                if matches!(
                    error,
                    ResponseError::NotLeaderOrFollower | ResponseError::FencedLeaderEpoch
                ) {
                    self.log.leader_moved();
                }
                self.identity = None;
                Err(LogError::Kafka {
                    api: "Produce",
                    code,
                    message: answer.error_message,
                })
            }
        }
    }
}

/// Renews this instance's registration until `shutdown`, then withdraws it.
pub async fn announce(node: Arc<ClusterNode>, mut shutdown: watch::Receiver<bool>) {
    let mut announcer = Announcer {
        log: node.new_log(),
        identity: None,
        sequence: 0,
    };
    let interval = Duration::from_millis(node.settings.heartbeat_interval_ms);
    let mut failing = false;
    loop {
        let registration = node.registration();
        let (key, value) = node
            .codec()
            .instance(node.instance_id(), Some(&registration));
        let wait = match announcer.send(key, value).await {
            Ok(()) => {
                if failing {
                    failing = false;
                    tracing::info!("this instance's registration is renewed again");
                }
                interval
            }
            Err(e) => {
                if !failing {
                    failing = true;
                    tracing::warn!(
                        "could not renew this instance's registration in the state topic: {e}"
                    );
                }
                // Soon again: until it is written, the others do not count
                // this instance among the live ones.
                RETRY.min(interval)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = node.report.notified() => {}
            _ = shutdown.changed() => break,
        }
    }
    let (key, _) = node.codec().instance(node.instance_id(), None);
    let withdraw = announcer.send(key, None);
    match tokio::time::timeout(Duration::from_secs(3), withdraw).await {
        Ok(Ok(())) => tracing::info!("withdrew this instance's registration"),
        Ok(Err(e)) => tracing::warn!("could not withdraw this instance's registration: {e}"),
        Err(_) => tracing::warn!("could not withdraw this instance's registration in time"),
    }
}
