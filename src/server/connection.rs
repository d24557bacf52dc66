//! One client connection: frames in, each turned into a reply that is queued in
//! arrival order, replies written in that same order (Kafka clients pipeline
//! requests and match responses by order as well as by correlation id).
//!
//! A forwarded request is handed to the upstream link at once, in arrival order,
//! so that the broker sees the client's order too; its reply is the broker's
//! response, rewritten where it names brokers.

use super::Limits;
use crate::handlers::forward::{AfterResponse, MergeFn};
use crate::handlers::sasl::{self, SaslExchange, SaslVerdict};
use crate::handlers::{dispatch, Action, Context, Peer};
use crate::metrics::{Closure, Outcome};
use crate::protocol::response::{response_body_offset, with_new_body};
use crate::protocol::CodecError;
use crate::protocol::FrameCodec;
use crate::upstream::link::write_frame;
use crate::upstream::{Route, UpstreamLink};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::FutureExt;
use futures::StreamExt;
use kafka_protocol::messages::ApiKey;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::watch;
use tokio_util::codec::FramedRead;

/// A request on its way to its reply: what the metrics, and the SASL reader,
/// need to know of it.
#[derive(Clone, Copy)]
struct Timing {
    api_key: i16,
    version: i16,
    read_at: Instant,
    /// A SASL request the upstream answers; its answer goes to `SaslExchange`.
    sasl: bool,
}

impl Timing {
    fn of(frame: &[u8]) -> Timing {
        let field = |at: usize| {
            frame
                .get(at..at + 2)
                .map_or(-1, |b| i16::from_be_bytes([b[0], b[1]]))
        };
        Timing {
            api_key: field(0),
            version: field(2),
            read_at: Instant::now(),
            sasl: false,
        }
    }
}

/// What goes back to the client for one request.
enum Reply {
    /// A response frame with its size prefix (built by kshim).
    Prefixed(Bytes),
    /// A response frame without its size prefix (from the upstream).
    Unprefixed(Bytes),
    Close(String),
}

/// Serves one connection over its two halves: a TCP stream's own halves, or
/// those of a TLS stream.
pub(super) async fn run<R, W>(
    read_half: R,
    write_half: W,
    peer: Peer,
    ctx: Arc<Context>,
    limits: &Limits,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let addr = peer.addr;
    // Replaced when the client authenticates with SASL through kshim.
    let mut peer = Arc::new(peer);
    let mut sasl = SaslExchange::default();
    let mut frames = FramedRead::new(read_half, FrameCodec::new(limits.max_frame_bytes));
    let mut out = BufWriter::new(write_half);
    let mut in_flight: FuturesOrdered<BoxFuture<'static, (Reply, Outcome, Timing)>> =
        FuturesOrdered::new();
    let metrics = Arc::clone(&ctx.metrics);
    let mut reading = true;
    let mut link: Option<UpstreamLink> = None;
    // A connection to a broker's listener ends when that broker leaves or moves.
    let mut broker_gone = match (peer.route, &ctx.upstream) {
        (Route::Node(id), Some(u)) => u.listeners.watch(id),
        _ => None,
    };
    tracing::debug!(peer = %addr, route = ?peer.route, "connection opened");
    // The idle and unfinished-frame deadlines share one timer. It is moved only
    // when it must fire sooner; firing early, it has the deadline worked out again.
    let mut last_activity = Instant::now();
    let timer = tokio::time::sleep(limits.idle_timeout);
    tokio::pin!(timer);

    let reason: String = loop {
        if !reading && in_flight.is_empty() {
            break "peer closed".into();
        }
        let accepting = reading && in_flight.len() < limits.max_in_flight;
        let partial = frames.decoder().partial_since();
        let deadline = match partial {
            Some(started) if accepting => Some(started + limits.frame_timeout),
            _ if in_flight.is_empty() => Some(last_activity + limits.idle_timeout),
            _ => None,
        };
        if let Some(d) = deadline {
            let d = tokio::time::Instant::from_std(d);
            if d < timer.deadline() {
                timer.as_mut().reset(d);
            }
        }
        tokio::select! {
            biased;
            Some((reply, outcome, timing)) = in_flight.next(), if !in_flight.is_empty() => {
                metrics.request(timing.api_key, timing.version, outcome, timing.read_at.elapsed());
                if let (true, Reply::Unprefixed(frame)) = (timing.sasl, &reply) {
                    match sasl.response(frame) {
                        Ok(Some(principal)) => {
                            tracing::debug!(peer = %addr, %principal, "SASL authentication accepted by the upstream");
                            metrics.sasl_authenticated();
                            peer = Arc::new(Peer { principal, ..(*peer).clone() });
                        }
                        Ok(None) => {}
                        Err(why) => break why,
                    }
                }
                let written = match reply {
                    Reply::Prefixed(frame) => {
                        metrics.sent(frame.len());
                        out.write_all(&frame).await
                    }
                    Reply::Unprefixed(frame) => {
                        metrics.sent(frame.len() + 4);
                        write_frame(&mut out, &frame).await
                    }
                    Reply::Close(why) => break why,
                };
                if let Err(e) = written {
                    break format!("write failed: {e}");
                }
                last_activity = Instant::now();
                if in_flight.is_empty() {
                    if let Err(e) = out.flush().await {
                        break format!("flush failed: {e}");
                    }
                }
            }
            event = next_frame(&mut frames, partial), if accepting => match event {
                // The loop sets the frame's deadline.
                FrameEvent::Started => {}
                FrameEvent::Frame(Some(Ok(frame))) => {
                    last_activity = Instant::now();
                    metrics.received(frame.len() + 4);
                    let mut timing = Timing::of(&frame);
                    if ctx.upstream.is_some() && sasl::reads(timing.api_key) {
                        match sasl.request(&frame) {
                            SaslVerdict::Forward => timing.sasl = true,
                            SaslVerdict::Refuse(answer) => {
                                in_flight.push_back(Box::pin(std::future::ready((
                                    Reply::Prefixed(answer),
                                    Outcome::Rejected,
                                    timing,
                                ))));
                                continue;
                            }
                            SaslVerdict::Close(why) => {
                                tracing::info!(peer = %addr, principal = %peer.principal, "SASL exchange refused: {why}");
                                break why;
                            }
                        }
                    }
                    match reply_to(dispatch(&ctx, &peer, frame), &ctx, &peer, &mut link) {
                        Some(reply) => in_flight.push_back(Box::pin(
                            reply.map(move |(reply, outcome)| (reply, outcome, timing)),
                        )),
                        // A request with no response (Produce with acks=0) went upstream.
                        None => metrics.request(timing.api_key, timing.version, Outcome::Forwarded, timing.read_at.elapsed()),
                    }
                }
                FrameEvent::Frame(Some(Err(e))) => break e.to_string(),
                FrameEvent::Frame(None) => reading = false,
            },
            // Broker-side state (SASL authentication, for one) lives on the upstream
            // connection; once it ends, the client must start over on a new one.
            _ = link_closed(&link), if link.is_some() => {
                break "the upstream connection ended".into();
            }
            _ = gone(&mut broker_gone), if broker_gone.is_some() => {
                break "the upstream broker behind this listener left or moved".into();
            }
            _ = super::stopped(&mut shutdown), if reading => reading = false,
            () = &mut timer => {
                match deadline {
                    Some(d) if Instant::now() >= d => {
                        let (why, text) = if partial.is_some() && accepting {
                            (Closure::FrameTimeout, format!("a frame did not arrive whole within {:?} (frame_read_timeout_ms)", limits.frame_timeout))
                        } else {
                            (Closure::Idle, format!("idle for {:?} (connections_max_idle_ms)", limits.idle_timeout))
                        };
                        metrics.connection_closed(why);
                        break text;
                    }
                    _ => timer.as_mut().reset(tokio::time::Instant::now() + limits.idle_timeout),
                }
            }
        }
    };
    let _ = out.flush().await;
    tracing::debug!(peer = %addr, "connection closed: {reason}");
}

/// What reading the client's socket brought.
enum FrameEvent {
    /// A whole frame, an error, or the end of the stream.
    Frame(Option<Result<Bytes, crate::protocol::frame::FrameError>>),
    /// The first bytes of a frame arrived; the rest has not.
    Started,
}

/// The next frame, or word that one has started (so that its deadline is set
/// from its first byte). `seen` is the start the caller already knows of.
fn next_frame<'a, R: AsyncRead + Unpin>(
    frames: &'a mut FramedRead<R, FrameCodec>,
    seen: Option<Instant>,
) -> impl std::future::Future<Output = FrameEvent> + 'a {
    futures::future::poll_fn(move |cx| match frames.poll_next_unpin(cx) {
        std::task::Poll::Ready(frame) => std::task::Poll::Ready(FrameEvent::Frame(frame)),
        std::task::Poll::Pending if frames.decoder().partial_since() != seen => {
            std::task::Poll::Ready(FrameEvent::Started)
        }
        std::task::Poll::Pending => std::task::Poll::Pending,
    })
}

async fn link_closed(link: &Option<UpstreamLink>) {
    match link {
        Some(l) => l.closed().await,
        None => std::future::pending::<()>().await,
    }
}

/// Resolves when the broker behind the connection's listener leaves or moves,
/// or its listener is closed for good (the sender is gone).
async fn gone(watch: &mut Option<watch::Receiver<u64>>) {
    match watch {
        Some(w) => {
            let _ = w.changed().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// A reply that is ready now.
fn ready(reply: Reply, outcome: Outcome) -> Option<BoxFuture<'static, (Reply, Outcome)>> {
    Some(Box::pin(std::future::ready((reply, outcome))))
}

/// Turns a handler's action into the reply the connection waits for, and what
/// kshim did with the request; `None` when no response is due.
fn reply_to(
    action: Action,
    ctx: &Arc<Context>,
    peer: &Peer,
    link: &mut Option<UpstreamLink>,
) -> Option<BoxFuture<'static, (Reply, Outcome)>> {
    match action {
        Action::Respond(frame) => ready(Reply::Prefixed(frame), Outcome::Answered),
        Action::Refused(frame) => ready(Reply::Prefixed(frame), Outcome::Rejected),
        Action::Close(why) => ready(Reply::Close(why), Outcome::Rejected),
        Action::Later(answer) => Some(Box::pin(async move {
            match answer.await {
                Action::Respond(frame) => (Reply::Prefixed(frame), Outcome::Answered),
                Action::Refused(frame) => (Reply::Prefixed(frame), Outcome::Rejected),
                Action::Close(why) => (Reply::Close(why), Outcome::Rejected),
                other => (
                    Reply::Close(format!("a deferred answer cannot be {other:?}")),
                    Outcome::Rejected,
                ),
            }
        })),
        Action::Forward(fw) => {
            let Some(upstream) = ctx.upstream.clone() else {
                return ready(
                    Reply::Close("nothing to forward to".into()),
                    Outcome::Rejected,
                );
            };
            let open = match link {
                Some(l) => l,
                None => {
                    let targets = upstream.targets(peer.route);
                    if targets.is_empty() {
                        return ready(
                            Reply::Close(format!("no upstream broker known for {:?}", peer.route)),
                            Outcome::Forwarded,
                        );
                    }
                    let node = match peer.route {
                        Route::Node(id) => Some(id),
                        Route::Bootstrap => None,
                    };
                    link.insert(UpstreamLink::open(targets, node, upstream.link.clone()))
                }
            };
            let pending = match open.send(fw.frame, fw.correlation_id, fw.expects_response) {
                Ok(pending) => pending?,
                Err(e) => return ready(Reply::Close(e.to_string()), Outcome::Forwarded),
            };
            let (api, version, after, hold) = (fw.api, fw.version, fw.after, fw.hold);
            Some(Box::pin(async move {
                let reply = forwarded(pending, &upstream, api, version, after).await;
                drop(hold);
                (reply, Outcome::Forwarded)
            }))
        }
    }
}

/// The client's reply to a forwarded request: the upstream's response, made
/// safe to hand on.
async fn forwarded(
    pending: crate::upstream::link::PendingResponse,
    upstream: &crate::upstream::Upstream,
    api: ApiKey,
    version: i16,
    after: AfterResponse,
) -> Reply {
    let frame = match pending.await {
        Ok(Ok(frame)) => frame,
        Ok(Err(e)) => return Reply::Close(e.to_string()),
        Err(_) => return Reply::Close("the upstream link ended".into()),
    };
    let rewritten = match after {
        AfterResponse::PassOn => return Reply::Unprefixed(frame),
        AfterResponse::RewriteAddresses => upstream
            .rewrite_response(api, version, frame)
            .map_err(|e| e.to_string()),
        AfterResponse::Merge(merge) => merge_response(api, version, &frame, merge),
    };
    match rewritten {
        Ok(frame) => Reply::Unprefixed(frame),
        Err(e) => {
            // Never pass on a response that could not be made safe: it could
            // send the client around kshim, or lose results.
            tracing::warn!("{e}");
            Reply::Close(e)
        }
    }
}

/// The upstream's response frame (without size prefix) with its body replaced by
/// what `merge` makes of it.
fn merge_response(
    api: ApiKey,
    version: i16,
    frame: &Bytes,
    merge: MergeFn,
) -> Result<Bytes, String> {
    let malformed =
        |e: CodecError| format!("the upstream's {api:?} v{version} response does not decode: {e}");
    let offset = response_body_offset(api, version, frame).map_err(malformed)?;
    let body = merge(&frame[offset..]).map_err(malformed)?;
    Ok(with_new_body(frame, offset, &body))
}
