//! One upstream connection on behalf of one client connection, driven by the
//! task that serves the client (no hand-off between tasks per request): request
//! frames go out in the order the client sent them, responses come back in that
//! order.
//!
//! The link never looks inside a body. It checks only that every response carries
//! the correlation id of the request it answers, which is what keeps a confused
//! upstream from answering the wrong request.

use super::UpstreamError;
use crate::client::{SaslCredentials, Stream};
use crate::framing::{FrameReader, Outbox};
use crate::log_limit::PerCauseLimit;
use crate::protocol::response::response_correlation_id;
use crate::tls::ClientTlsCell;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How kshim reaches the upstream brokers: how long a connection may take, how
/// long a request may wait for its answer, the largest response accepted, TLS
/// for every connection, and the credentials of kshim's own connections (client
/// connections carry their clients' own SASL).
#[derive(Debug, Clone)]
pub struct LinkSettings {
    pub connect_timeout: Duration,
    /// A forwarded request unanswered for this long ends its client's connection
    /// (Kafka's `request.timeout.ms`).
    pub request_timeout: Duration,
    pub max_response_bytes: usize,
    /// `None`: plaintext.
    pub tls: Option<Arc<ClientTlsCell>>,
    /// For discovery, audits and forwarded UpdateFeatures.
    pub sasl: Option<SaslCredentials>,
    /// What becomes of API keys no Kafka release kshim has data for defines.
    pub unknown_api_keys: UnknownApiKeys,
}

/// `[upstream] unknown_api_keys`: API keys that no Kafka release kshim has
/// data for defines (a broker newer than kshim's data, or a fork's own APIs).
/// kshim cannot tell whether their responses name brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownApiKeys {
    /// Left out of ApiVersions, and a request for one closes its connection.
    #[default]
    Hide,
    /// Offered at the brokers' versions and forwarded as bytes, unrewritten:
    /// a response that names a broker would lead its client around kshim.
    Forward,
}

/// Connection failures, logged once per cause per minute: while a broker is
/// down, every client reconnecting in a loop fails the same way, and one line
/// (with a count of the repeats) says all of it.
static CONNECT_FAILURES: PerCauseLimit = PerCauseLimit::new(Duration::from_secs(60));

/// What the link notes of each queued request: whether it waits for a
/// response, and its API key (for kshim's own-time metrics).
#[derive(Debug, Clone, Copy)]
struct Queued {
    answered: bool,
    api_key: i16,
}

enum State {
    Connecting(BoxFuture<'static, Result<(Stream, String), UpstreamError>>),
    Open(Stream),
    Ended(UpstreamError),
}

/// An upstream connection, polled by its owner.
pub struct UpstreamLink {
    state: State,
    node: Option<i32>,
    target: String,
    outbox: Outbox<Queued>,
    responses: FrameReader,
    /// Requests written (or queued) that wait for a response, in order.
    waiting: VecDeque<Waiting>,
    /// Requests queued, not yet written, that expect no response.
    unsent_unanswered: usize,
    /// When the connection was ready for requests: a request queued before
    /// waited for the broker, not for kshim, until then.
    opened: Option<Instant>,
    /// Whether part of the response being read was taken before it was whole
    /// (its correlation id was checked then).
    streaming: bool,
}

struct Waiting {
    correlation_id: i32,
    since: Instant,
}

impl UpstreamLink {
    /// Starts connecting to the first of `targets` that accepts; requests sent
    /// meanwhile wait for the connection. `node` names the broker in logs.
    pub fn open(targets: Vec<String>, node: Option<i32>, settings: &LinkSettings) -> UpstreamLink {
        let target = targets.first().cloned().unwrap_or_default();
        let s = settings.clone();
        UpstreamLink {
            state: State::Connecting(Box::pin(async move { connect_first(&targets, &s).await })),
            node,
            target,
            outbox: Outbox::default(),
            responses: FrameReader::new(settings.max_response_bytes),
            waiting: VecDeque::new(),
            unsent_unanswered: 0,
            streaming: false,
            opened: None,
        }
    }

    /// The response being read, once its size was granted and before it is
    /// whole: its size, the offset of what arrived and was not taken yet, and
    /// those bytes.
    pub fn receiving(&self) -> Option<(usize, usize, &[u8])> {
        let (size, arrived) = self.responses.receiving()?;
        Some((size, self.responses.taken(), arrived))
    }

    /// Takes what arrived of the response being read, up to frame offset
    /// `upto`, to pass it on before it is whole; the response `poll_response`
    /// yields is then the rest of the frame. The first bytes taken must hold
    /// the correlation id, which is checked then.
    pub fn take_arrived(&mut self, upto: usize) -> Result<Option<Bytes>, UpstreamError> {
        if !self.streaming {
            let arrived = self.responses.receiving().map_or(0, |(_, a)| a.len());
            if arrived.min(upto) < 4 {
                return Ok(None);
            }
        }
        let Some(piece) = self.responses.take_arrived(upto) else {
            return Ok(None);
        };
        if !self.streaming {
            self.streaming = true;
            let expected = self.waiting.front().map(|w| w.correlation_id);
            let got = response_correlation_id(&piece).ok();
            if got.is_none() || got != expected {
                let e = UpstreamError::Broken {
                    target: self.target.clone(),
                    reason: format!(
                        "response correlation id {got:?} does not match request {expected:?}"
                    ),
                };
                self.state = State::Ended(e.clone());
                return Err(e);
            }
        }
        Ok(Some(piece))
    }

    /// Queues `frame` (without its size prefix), a request of `api_key`, for
    /// the upstream; `since` is when kshim took it from the client.
    pub fn send(
        &mut self,
        frame: Bytes,
        api_key: i16,
        correlation_id: i32,
        expects_response: bool,
        since: Instant,
    ) {
        if expects_response {
            self.waiting.push_back(Waiting {
                correlation_id,
                since,
            });
        } else {
            self.unsent_unanswered += 1;
        }
        let tag = Queued {
            answered: expects_response,
            api_key,
        };
        self.outbox.push_unprefixed(frame, tag, since);
    }

    /// Requests queued and not yet written that expect no response.
    pub fn unsent_unanswered(&self) -> usize {
        self.unsent_unanswered
    }

    /// Bytes queued and not yet written.
    pub fn unsent_bytes(&self) -> usize {
        self.outbox.bytes()
    }

    /// Whether its queues, though empty, keep room from their last burst.
    pub fn keeps_room(&self) -> bool {
        self.outbox.keeps_room() || (self.waiting.is_empty() && self.waiting.capacity() > 0)
    }

    /// Frees the room its empty queues kept from their last burst.
    pub fn free_room(&mut self) {
        self.outbox.free_room();
        if self.waiting.is_empty() {
            self.waiting = VecDeque::new();
        }
    }

    /// Since when the oldest request that is unwritten or unanswered has waited.
    pub fn oldest(&self) -> Option<Instant> {
        match (self.waiting.front().map(|w| w.since), self.outbox.oldest()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Connects, writes what is queued, and yields the next response (a frame
    /// without its size prefix). `sent` hears of each request frame written
    /// whole, with its size, its API key and when it was queued (or, queued
    /// while the connection was being made, when it was made). `grant` is asked for each response's size before
    /// its body is buffered; while it is pending, the response waits in the
    /// socket (the broker's side of a client that does not read). An error ends
    /// the link: every later poll returns it.
    pub fn poll_response(
        &mut self,
        cx: &mut Context<'_>,
        mut sent: impl FnMut(usize, i16, Instant),
        grant: impl FnMut(usize, &mut Context<'_>) -> Poll<()>,
    ) -> Poll<Result<Bytes, UpstreamError>> {
        if let State::Connecting(connecting) = &mut self.state {
            match connecting.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok((stream, target))) => {
                    self.target = target;
                    self.state = State::Open(stream);
                    self.opened = Some(Instant::now());
                }
                Poll::Ready(Err(e)) => {
                    let cause = e.to_string();
                    match CONNECT_FAILURES.admit(&cause, Instant::now()) {
                        Some(0) => tracing::warn!(node = ?self.node, "{cause}"),
                        Some(repeats) => tracing::warn!(
                            node = ?self.node,
                            "{cause} ({repeats} more like it since it was last logged)"
                        ),
                        None => {}
                    }
                    self.state = State::Ended(e);
                }
            }
        }
        let stream = match &mut self.state {
            State::Open(stream) => stream,
            State::Ended(e) => return Poll::Ready(Err(e.clone())),
            State::Connecting(_) => unreachable!("handled above"),
        };
        let target = &self.target;
        let broken = |reason: String| UpstreamError::Broken {
            target: target.clone(),
            reason,
        };
        let unsent_unanswered = &mut self.unsent_unanswered;
        let opened = self.opened;
        let written = |tag: Queued, n, since: Instant| {
            if !tag.answered {
                *unsent_unanswered -= 1;
            }
            sent(n, tag.api_key, opened.map_or(since, |at| since.max(at)))
        };
        if self.waiting.is_empty() {
            self.responses.free_room(); // no answer due: no read buffer
        }
        let e = match self.outbox.poll_write(stream, cx, written) {
            Poll::Ready(Err(e)) => broken(e.to_string()),
            _ => match self.responses.poll_frame(stream, cx, grant) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => broken(e.to_string()),
                // The broker closing the connection (connections.max.idle.ms on
                // an idle link) ends the link, so that the client reconnects
                // rather than writing into a dead socket.
                Poll::Ready(Ok(None)) => broken("the broker closed the connection".into()),
                Poll::Ready(Ok(Some(frame))) => match self.waiting.pop_front() {
                    None => broken("the broker sent a response nobody asked for".into()),
                    Some(_) if std::mem::take(&mut self.streaming) => {
                        return Poll::Ready(Ok(frame))
                    }
                    Some(w) => {
                        let got = response_correlation_id(&frame).ok();
                        if got == Some(w.correlation_id) {
                            return Poll::Ready(Ok(frame));
                        }
                        broken(format!(
                            "response correlation id {got:?} does not match request {}",
                            w.correlation_id
                        ))
                    }
                },
            },
        };
        tracing::debug!(node = ?self.node, "upstream link ended: {e}");
        self.state = State::Ended(e.clone());
        Poll::Ready(Err(e))
    }
}

/// Connects (and with TLS, shakes hands) to the first target that accepts within
/// the timeout. Each connection uses the TLS material in force when it starts.
pub(crate) async fn connect_first(
    targets: &[String],
    settings: &LinkSettings,
) -> Result<(Stream, String), UpstreamError> {
    let tls = settings.tls.as_ref().map(|cell| cell.current());
    let mut reasons = Vec::new();
    for target in targets {
        match crate::client::connect(target, settings.connect_timeout, tls.as_deref()).await {
            Ok(stream) => {
                log_connection(&stream, target);
                return Ok((stream, target.clone()));
            }
            Err(e) => reasons.push(format!("{target}: {e}")),
        }
    }
    Err(UpstreamError::Unreachable {
        targets: targets.join(","),
        reason: reasons.join("; "),
    })
}

/// Every upstream connection kshim opens is logged with both ends, so that an
/// operator (or a test) can tell kshim's connections from anyone else's.
fn log_connection(stream: &Stream, target: &str) {
    let local = stream
        .tcp()
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a: SocketAddr| a.to_string());
    tracing::debug!(target: "kshim::upstream", "upstream connection from {local} to {target}");
}
