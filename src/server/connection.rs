//! One client connection, served by one task that also drives the connection's
//! upstream link: frames in, each turned into a reply kept in arrival order,
//! replies written in that same order (Kafka clients pipeline requests and match
//! responses by order as well as by correlation id). A forwarded request is
//! queued on the upstream link at once, in arrival order, so that the broker sees
//! the client's order too; its reply is the broker's response as the session
//! makes it safe to hand on. Nothing here reads past a frame's API key and
//! version (kept for the metrics): the rest is the session's (`handlers::session`).
//!
//! Backpressure: a frame is read only when the connection has room for it (fewer
//! than `max_in_flight` requests waiting for a reply or, with no reply due, for
//! their turn on the upstream socket; the upstream queue under its byte bound;
//! the answers the client has not taken yet under `max_unsent_response_bytes`)
//! and the global frame budget has its bytes. Otherwise the client's socket is
//! left unread, and TCP slows the client down: as a Kafka broker mutes a channel
//! while a response is unsent, a client that writes requests and never reads
//! costs kshim its bound and no more. An upstream response is taken off the
//! broker's socket only under the same bound (one answer more when it is the
//! one the client waits for next) and with bytes of the global budget, which it
//! holds until written; the broker's socket to a slow client is its own, so no
//! other client waits for it. A client that takes none of its answers for
//! `connections_max_idle_ms` is closed (`write_stalled`).

use super::budget::Reservation;
use super::Limits;
use crate::framing::{prefixed, FrameReader, Outbox};
use crate::handlers::forward::{Forward, Then};
use crate::handlers::session::Session;
use crate::handlers::{Action, Context, Peer};
use crate::metrics::{Closure, Leg, Outcome};
use crate::protocol::response::Answer;
use crate::protocol::{HeaderPeek, Incoming};
use crate::upstream::UpstreamLink;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Sleep;

mod streaming;
use streaming::Streaming;

/// Bytes queued for the upstream and not yet written above which no further
/// frame is read from the client.
const MAX_LINK_QUEUE_BYTES: usize = 1 << 20;

/// Requests one connection reads in one turn on the runtime before it lets the
/// other connections run: a client that pipelines hundreds of requests must not
/// keep a runtime thread from everyone else while it answers them all.
const FRAMES_PER_TURN: usize = 16;

/// How long a closing connection may take to write the replies it has.
const FINAL_FLUSH: Duration = Duration::from_secs(1);
/// A connection idle this long frees the room its empty queues kept from their last burst
/// (about 1.2 KiB for a forwarded connection): an idle connection holds no memory for traffic.
const FREE_IDLE_ROOM_AFTER: Duration = Duration::from_secs(1);

/// A request on its way to its reply: what the metrics need to know of it.
#[derive(Clone, Copy)]
struct Timing {
    api_key: i16,
    version: i16,
    read_at: Instant,
}

impl Timing {
    fn of(header: &HeaderPeek, read_at: Instant) -> Timing {
        Timing {
            api_key: header.api_key,
            version: header.api_version,
            read_at,
        }
    }
}

/// What goes back to the client for one request.
enum Reply {
    /// A response frame with its size prefix (built by kshim), and when it was
    /// ready.
    Prefixed(Bytes, Instant),
    /// A response frame without its size prefix (from the upstream), with the
    /// bytes of the global budget it holds until written, and when it was read
    /// whole.
    Unprefixed(Answer, u32, Instant),
    /// The last part of an upstream response passed on while it arrived, with
    /// the same.
    Rest(Bytes, u32, Instant),
    Close(String),
}

impl Reply {
    /// Bytes it will take in the outbox.
    fn unsent_bytes(&self) -> usize {
        match self {
            Reply::Prefixed(frame, _) => frame.len(),
            Reply::Unprefixed(answer, ..) => 4 + answer.len(),
            Reply::Rest(part, ..) => part.len(),
            Reply::Close(_) => 0,
        }
    }
}

/// A reply that is ready, counted in `ready_bytes` (the connection's
/// `ready_bytes`) until `take_replies` moves it to the outbox.
fn ready(ready_bytes: &mut usize, reply: Reply, outcome: Outcome) -> Slot {
    *ready_bytes += reply.unsent_bytes();
    Slot::Ready(reply, outcome)
}

/// Where one request's reply stands.
enum Slot {
    Ready(Reply, Outcome),
    /// Answered by kshim once the future resolves.
    Later(BoxFuture<'static, Action>),
    /// Waiting for the upstream's response.
    Upstream(Then),
    /// Its response is being passed on as it arrives (`Connection::streaming`).
    Streaming,
}

struct Entry {
    timing: Timing,
    slot: Slot,
}

/// What the client's outbox notes of each reply: the global budget's bytes it
/// holds until written, and its API key (for kshim's own time; none for the
/// parts of a response before its last).
#[derive(Clone, Copy)]
struct Sending {
    held: u32,
    api_key: Option<i16>,
}

/// Serves one connection (a TCP stream, or a TLS stream over one).
pub(super) async fn run<S>(
    stream: S,
    peer: Peer,
    ctx: Arc<Context>,
    limits: &Limits,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let addr = peer.addr;
    let session = Session::new(ctx, peer);
    let mut broker_gone = session.broker_watch();
    tracing::debug!(peer = %addr, route = ?session.peer().route, "connection opened");
    let mut conn = Connection {
        io: stream,
        frames: FrameReader::new(limits.frame_limit(false)),
        out: Outbox::default(),
        slots: VecDeque::new(),
        front_seq: 0,
        awaiting: VecDeque::new(),
        laters: 0,
        link: None,
        reservation: Reservation::new(&limits.budget),
        answers: Reservation::for_answers(&limits.budget),
        ready_bytes: 0,
        muted: false,
        last_written: Instant::now(),
        queued_held: 0,
        upstream_ended: None,
        streaming: None,
        kept_whole: None,
        reading: true,
        last_activity: Instant::now(),
        timer: Box::pin(tokio::time::sleep(limits.idle_timeout)),
        limits,
        session,
    };
    let reason: String = loop {
        tokio::select! {
            reason = std::future::poll_fn(|cx| conn.poll_serve(cx)) => break reason,
            _ = super::stopped(&mut shutdown), if conn.reading => conn.reading = false,
            _ = gone(&mut broker_gone), if broker_gone.is_some() => {
                break "the upstream broker behind this listener left or moved".into();
            }
        }
    };
    // The replies already in order go out, if the client takes them promptly.
    conn.link = None;
    let flush = std::future::poll_fn(|cx| conn.out.poll_write(&mut conn.io, cx, |_, _, _| {}));
    let _ = tokio::time::timeout(FINAL_FLUSH, flush).await;
    tracing::debug!(peer = %addr, "connection closed: {reason}");
}

struct Connection<'a, S> {
    io: S,
    frames: FrameReader,
    /// Replies for the client, written in order.
    out: Outbox<Sending>,
    /// One entry per request read and not yet replied to, in arrival order.
    slots: VecDeque<Entry>,
    /// The sequence number of `slots[0]`.
    front_seq: u64,
    /// The sequence numbers of the `Upstream` slots, in the order their
    /// responses will come.
    awaiting: VecDeque<u64>,
    /// `Later` slots.
    laters: usize,
    link: Option<UpstreamLink>,
    /// This connection's share of the global frame budget: the frame being read,
    /// and frames queued on the link until written.
    reservation: Reservation,
    /// The part of `reservation` held for frames queued on the link.
    queued_held: usize,
    /// The global budget's bytes held by upstream responses until written.
    answers: Reservation,
    /// Bytes of the replies that are ready and not yet in the outbox.
    ready_bytes: usize,
    /// Whether reading stopped for answers the client has not taken.
    muted: bool,
    /// When the outbox last wrote bytes, or last had a reply queued while
    /// empty: a client that takes none of its answers for the idle timeout is
    /// closed.
    last_written: Instant,
    reading: bool,
    last_activity: Instant,
    /// The idle, unfinished-frame and upstream deadlines share one timer. It is
    /// moved only when it must fire sooner; firing early, it has the deadline
    /// worked out again.
    timer: Pin<Box<Sleep>>,
    limits: &'a Limits,
    session: Session,
    /// The upstream response being passed on while it arrives.
    streaming: Option<Streaming>,
    /// The request whose large response the session keeps whole (it must be
    /// rewritten or decoded whole): asked once, not at every read of it.
    kept_whole: Option<u64>,
    /// Why the upstream connection ended. The answers it gave before it went
    /// (a broker sends its SASL failure, then closes) are delivered first; the
    /// connection closes once they are written.
    upstream_ended: Option<String>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<'_, S> {
    /// Makes every step that can be made now; resolves with the reason the
    /// connection ends.
    fn poll_serve(&mut self, cx: &mut TaskContext<'_>) -> Poll<String> {
        let mut frames_this_turn = 0;
        loop {
            let mut progress = false;
            if self.upstream_ended.is_none() {
                if let Err(why) = self.poll_upstream(cx, &mut progress) {
                    self.upstream_ended = Some(why);
                }
            }
            self.poll_laters(cx, &mut progress);
            if let Some(why) = self.take_replies(&mut progress) {
                return Poll::Ready(why);
            }
            let before = self.out.bytes();
            let answers = &mut self.answers;
            let metrics = self.session.metrics();
            let written = |sending: Sending, _, since: Instant| {
                answers.give_back(sending.held as usize);
                if let Some(api_key) = sending.api_key {
                    metrics.own_time(api_key, Leg::Response, since.elapsed());
                }
            };
            match self.out.poll_write(&mut self.io, cx, written) {
                Poll::Ready(Err(e)) => return Poll::Ready(format!("write failed: {e}")),
                _ if self.out.bytes() != before => {
                    let now = Instant::now();
                    self.last_activity = now;
                    self.last_written = now;
                    progress = true;
                }
                _ => {}
            }
            if let Some(why) = &self.upstream_ended {
                if self.out.is_empty() {
                    return Poll::Ready(why.clone());
                }
            }
            if let Err(why) = self.poll_requests(cx, &mut progress, &mut frames_this_turn) {
                return Poll::Ready(why);
            }
            if frames_this_turn >= FRAMES_PER_TURN {
                // Its turn is over; the replies go out at the start of the next one.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if !self.reading
                && self.slots.is_empty()
                && self.out.is_empty()
                && self.link.as_ref().is_none_or(|l| l.unsent_bytes() == 0)
            {
                return Poll::Ready(if self.frames.at_eof() {
                    "peer closed".into()
                } else {
                    "shutting down".into()
                });
            }
            if let Some(why) = self.poll_deadline(cx, &mut progress) {
                return Poll::Ready(why);
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Writes queued requests upstream and takes in the responses.
    fn poll_upstream(
        &mut self,
        cx: &mut TaskContext<'_>,
        progress: &mut bool,
    ) -> Result<(), String> {
        let mut written = 0;
        loop {
            let may_take = self.may_take_response();
            let Some(link) = self.link.as_mut() else {
                break;
            };
            let answers = &mut self.answers;
            let most = answers.most();
            let grant = |n: usize, cx: &mut TaskContext<'_>| {
                if may_take {
                    answers.poll_take(n.min(most), cx)
                } else {
                    // Woken when the client takes answers (the outbox's write).
                    Poll::Pending
                }
            };
            let metrics = self.session.metrics();
            let sent = |n, api_key, since: Instant| {
                written += n;
                metrics.own_time(api_key, Leg::Request, since.elapsed());
            };
            match link.poll_response(cx, sent, grant) {
                Poll::Pending => {
                    self.pass_on_arrived(progress)?;
                    break;
                }
                Poll::Ready(Err(e)) => return Err(format!("the upstream connection ended: {e}")),
                Poll::Ready(Ok(frame)) => {
                    *progress = true;
                    let read_at = Instant::now();
                    let Some(seq) = self.awaiting.pop_front() else {
                        return Err("an upstream response for no request".into());
                    };
                    let entry = &mut self.slots[(seq - self.front_seq) as usize];
                    if let Some(Streaming {
                        streamed,
                        held,
                        passed,
                    }) = self.streaming.take()
                    {
                        // The rest of the response being passed on (the front slot's).
                        entry.slot = match self.session.streamed_response(streamed, frame, passed) {
                            // It came whole before any of it could be passed on.
                            Ok(frame) if passed == 0 => ready(
                                &mut self.ready_bytes,
                                Reply::Unprefixed(Answer::whole(frame), held as u32, read_at),
                                Outcome::Forwarded,
                            ),
                            Ok(rest) => ready(
                                &mut self.ready_bytes,
                                Reply::Rest(rest, held as u32, read_at),
                                Outcome::Forwarded,
                            ),
                            Err(why) => {
                                self.answers.give_back(held);
                                Slot::Ready(Reply::Close(why), Outcome::Forwarded)
                            }
                        };
                        continue;
                    }
                    let answered = Slot::Ready(Reply::Close(String::new()), Outcome::Forwarded);
                    let Slot::Upstream(then) = std::mem::replace(&mut entry.slot, answered) else {
                        return Err("an upstream response for a request answered already".into());
                    };
                    let delay = then.delay;
                    // What the grant took for it (the budget caps a grant at its total).
                    let held = frame.len().min(self.answers.most());
                    entry.slot = match (self.session.response(then, frame), delay) {
                        (Ok(frame), None) => ready(
                            &mut self.ready_bytes,
                            Reply::Unprefixed(frame, held as u32, read_at),
                            Outcome::Forwarded,
                        ),
                        (Ok(frame), Some(delay)) => {
                            // A lab delay: the answer waits in a timer, outside the budget.
                            self.answers.give_back(held);
                            self.laters += 1;
                            Slot::Later(Box::pin(async move {
                                tokio::time::sleep(delay).await;
                                Action::Respond(prefixed(&frame.into_frame()))
                            }))
                        }
                        (Err(why), _) => {
                            self.answers.give_back(held);
                            Slot::Ready(Reply::Close(why), Outcome::Forwarded)
                        }
                    };
                }
            }
        }
        if written > 0 {
            *progress = true;
            let back = written.min(self.queued_held);
            self.queued_held -= back;
            self.reservation.give_back(back);
        }
        Ok(())
    }

    /// Polls the answers kshim gives later.
    fn poll_laters(&mut self, cx: &mut TaskContext<'_>, progress: &mut bool) {
        if self.laters == 0 {
            return;
        }
        for entry in self.slots.iter_mut() {
            let Slot::Later(answer) = &mut entry.slot else {
                continue;
            };
            let Poll::Ready(action) = answer.as_mut().poll(cx) else {
                continue;
            };
            self.laters -= 1;
            *progress = true;
            let counted = &mut self.ready_bytes;
            let now = Instant::now();
            entry.slot = match action {
                Action::Respond(frame) => {
                    ready(counted, Reply::Prefixed(frame, now), Outcome::Answered)
                }
                Action::Refused(frame) => {
                    ready(counted, Reply::Prefixed(frame, now), Outcome::Rejected)
                }
                Action::Close(why) => Slot::Ready(Reply::Close(why), Outcome::Rejected),
                other => Slot::Ready(
                    Reply::Close(format!("a deferred answer cannot be {other:?}")),
                    Outcome::Rejected,
                ),
            };
        }
    }

    /// Moves the replies that are ready, in order, to the client's outbox; the
    /// reason to close when one of them says so.
    fn take_replies(&mut self, progress: &mut bool) -> Option<String> {
        while matches!(
            self.slots.front(),
            Some(Entry {
                slot: Slot::Ready(..),
                ..
            })
        ) {
            let Some(Entry {
                timing,
                slot: Slot::Ready(reply, outcome),
            }) = self.slots.pop_front()
            else {
                unreachable!("checked above")
            };
            self.front_seq += 1;
            *progress = true;
            self.ready_bytes -= reply.unsent_bytes();
            if self.out.is_empty() {
                self.last_written = Instant::now();
            }
            let metrics = self.session.metrics();
            metrics.request(
                timing.api_key,
                timing.version,
                outcome,
                timing.read_at.elapsed(),
            );
            let api_key = timing.api_key;
            match reply {
                Reply::Prefixed(frame, ready_at) => {
                    metrics.sent(frame.len());
                    let sending = Sending {
                        held: 0,
                        api_key: Some(api_key),
                    };
                    self.out.push_prefixed(frame, sending, ready_at);
                }
                Reply::Unprefixed(Answer { head, tail }, held, read_at) => {
                    metrics.sent(4 + head.len() + tail.len());
                    if tail.is_empty() {
                        let sending = Sending {
                            held,
                            api_key: Some(api_key),
                        };
                        self.out.push_unprefixed(head, sending, read_at);
                    } else {
                        // Each part gives back its bytes of the grant once written;
                        // the last one ends the response's own time.
                        let head_held = held.min(head.len() as u32);
                        let size = head.len() + tail.len();
                        let first = Sending {
                            held: head_held,
                            api_key: None,
                        };
                        self.out.push_first_part(head, size, first, read_at);
                        let rest = Sending {
                            held: held - head_held,
                            api_key: Some(api_key),
                        };
                        self.out.push_prefixed(tail, rest, read_at);
                    }
                }
                Reply::Rest(part, held, read_at) => {
                    metrics.sent(part.len());
                    let sending = Sending {
                        held,
                        api_key: Some(api_key),
                    };
                    self.out.push_prefixed(part, sending, read_at);
                }
                Reply::Close(why) => return Some(why),
            }
        }
        None
    }

    /// Answers ready or written in part that the client has not taken.
    fn unsent_answers(&self) -> usize {
        self.out.bytes() + self.ready_bytes
    }

    /// Whether the next upstream response may be taken off the broker's
    /// socket: while the client's unsent answers are under the bound, or, when
    /// it is the answer the client waits for next, while the outbox is.
    fn may_take_response(&self) -> bool {
        let bound = self.limits.max_unsent_response_bytes;
        let next_is_front = self.awaiting.front() == Some(&self.front_seq);
        self.unsent_answers() < bound || (next_is_front && self.out.bytes() < bound)
    }

    /// Whether a new frame may be read now.
    fn has_room(&self) -> bool {
        let (unanswered, queued) = self
            .link
            .as_ref()
            .map_or((0, 0), |l| (l.unsent_unanswered(), l.unsent_bytes()));
        self.reading
            && self.slots.len() + unanswered < self.limits.max_in_flight
            && queued < MAX_LINK_QUEUE_BYTES
            && self.unsent_answers() < self.unsent_bound()
    }

    /// The answers the client may leave untaken before its requests stop being
    /// read: `max_unsent_response_bytes`, or none while kshim sheds load (the
    /// client is read again once it has taken them, which wakes this task).
    fn unsent_bound(&self) -> usize {
        if self.limits.memory.shedding() {
            1
        } else {
            self.limits.max_unsent_response_bytes
        }
    }

    /// Counts each time the client's unsent answers stop the reading: at
    /// their bound, or while kshim sheds load.
    fn note_muted(&mut self) {
        let unsent = self.unsent_answers();
        let muted = unsent >= self.unsent_bound();
        if muted && !self.muted {
            if unsent >= self.limits.max_unsent_response_bytes {
                self.session.metrics().connection_muted();
            } else {
                self.session.metrics().connection_shed();
            }
        }
        self.muted = muted;
    }

    /// Reads and acts on the client's requests while there is room for them.
    fn poll_requests(
        &mut self,
        cx: &mut TaskContext<'_>,
        progress: &mut bool,
        frames_this_turn: &mut usize,
    ) -> Result<(), String> {
        self.note_muted();
        while self.has_room() && *frames_this_turn < FRAMES_PER_TURN {
            if self.slots.is_empty() {
                self.frames.free_room(); // a connection waiting for its client holds no buffer
            }
            self.frames
                .limit(self.limits.frame_limit(self.session.authenticated()));
            let reservation = &mut self.reservation;
            let frame = match self
                .frames
                .poll_frame(&mut self.io, cx, |n, cx| reservation.poll_take(n, cx))
            {
                Poll::Pending => return Ok(()),
                Poll::Ready(Err(e)) => return Err(e.to_string()),
                Poll::Ready(Ok(None)) => {
                    self.client_gone();
                    *progress = true;
                    return Ok(());
                }
                Poll::Ready(Ok(Some(frame))) => frame,
            };
            *progress = true;
            *frames_this_turn += 1;
            let now = Instant::now();
            self.last_activity = now;
            let size = frame.len();
            self.session.metrics().received(size + 4);
            // The header is read here, once, and handed down with the frame.
            let request = match Incoming::parse(frame) {
                Ok(request) => request,
                Err(e) => {
                    let timing = Timing {
                        api_key: -1,
                        version: -1,
                        read_at: now,
                    };
                    let why = format!("unreadable request header: {e}");
                    self.reservation.give_back(size);
                    self.slots.push_back(Entry {
                        timing,
                        slot: Slot::Ready(Reply::Close(why), Outcome::Rejected),
                    });
                    continue;
                }
            };
            let timing = Timing::of(&request.header, now);
            let counted = &mut self.ready_bytes;
            let action = self.session.request(request, now);
            let answered =
                |frame, outcome, counted: &mut usize, metrics: &crate::metrics::Metrics| {
                    let ready_at = Instant::now();
                    metrics.own_time(timing.api_key, Leg::Request, ready_at - now);
                    (
                        Some(ready(counted, Reply::Prefixed(frame, ready_at), outcome)),
                        0,
                    )
                };
            let metrics = self.session.metrics();
            let (slot, kept) = match action {
                Action::Respond(frame) => answered(frame, Outcome::Answered, counted, metrics),
                Action::Refused(frame) => answered(frame, Outcome::Rejected, counted, metrics),
                Action::Close(why) => (Some(Slot::Ready(Reply::Close(why), Outcome::Rejected)), 0),
                Action::Later(answer) => {
                    self.laters += 1;
                    (Some(Slot::Later(answer)), 0)
                }
                Action::Forward(fw) => self.forward(fw, timing, size),
            };
            // The bytes the link now holds stay in the budget until written.
            self.queued_held += kept;
            self.reservation.give_back(size - kept);
            if let Some(slot) = slot {
                self.slots.push_back(Entry { timing, slot });
            }
        }
        Ok(())
    }

    /// Queues a forwarded request on the link, opened on first use. Returns the
    /// request's slot (none when no response is due: Produce with acks=0) and
    /// the bytes of its `size`-byte frame that the link now holds.
    fn forward(&mut self, fw: Forward, timing: Timing, size: usize) -> (Option<Slot>, usize) {
        let link = match &mut self.link {
            Some(link) => link,
            None => match self.session.open_link() {
                Ok(link) => self.link.insert(link),
                Err(why) => return (Some(Slot::Ready(Reply::Close(why), Outcome::Forwarded)), 0),
            },
        };
        let kept = fw.frame.len().min(size);
        link.send(
            fw.frame,
            timing.api_key,
            fw.correlation_id,
            fw.expects_response,
            timing.read_at,
        );
        if !fw.expects_response {
            let elapsed = timing.read_at.elapsed();
            let metrics = self.session.metrics();
            metrics.request(timing.api_key, timing.version, Outcome::Forwarded, elapsed);
            return (None, kept);
        }
        self.awaiting
            .push_back(self.front_seq + self.slots.len() as u64);
        (Some(Slot::Upstream(fw.then)), kept)
    }

    /// The client closed its side: its upstream link goes at once, and the
    /// replies that do not need it are still written.
    fn client_gone(&mut self) {
        self.reading = false;
        self.link = None;
        self.awaiting.clear();
        if let Some(stream) = self.streaming.take() {
            self.answers.give_back(stream.held);
        }
        for entry in self.slots.iter_mut() {
            if let Slot::Upstream(_) | Slot::Streaming = entry.slot {
                entry.slot = Slot::Ready(Reply::Close("peer closed".into()), Outcome::Forwarded);
            }
        }
    }

    /// Whether the connection's empty queues keep room from their last burst.
    fn keeps_idle_room(&self) -> bool {
        let link = self.link.as_ref().is_some_and(UpstreamLink::keeps_room);
        self.slots.capacity() + self.awaiting.capacity() > 0 || self.out.keeps_room() || link
    }

    /// Frees the room the connection's empty queues kept from their last burst.
    fn free_idle_room(&mut self) {
        self.slots.shrink_to_fit();
        self.awaiting.shrink_to_fit();
        self.out.free_room();
        if let Some(link) = &mut self.link {
            link.free_room();
        }
    }

    /// Checks the connection's deadlines: a frame that started must arrive whole,
    /// a forwarded request must be answered, and an idle connection ends.
    fn poll_deadline(&mut self, cx: &mut TaskContext<'_>, progress: &mut bool) -> Option<String> {
        let limits = self.limits;
        let now = Instant::now();
        let partial = self.frames.partial_since().filter(|_| self.has_room());
        let upstream = self.link.as_ref().and_then(|l| l.oldest());
        let idle = self.slots.is_empty() && self.out.is_empty() && upstream.is_none();
        // While the client leaves its answers untaken, the broker's answers wait
        // for the client, not the other way round.
        let upstream = upstream.filter(|_| self.may_take_response());
        let mut due: Option<(Instant, Closure)> = None;
        let mut consider = |at: Instant, why: Closure| {
            if due.is_none_or(|(d, _)| at < d) {
                due = Some((at, why));
            }
        };
        if let Some(started) = partial {
            consider(started + limits.frame_timeout, Closure::FrameTimeout);
        }
        if let Some(since) = upstream {
            consider(since + limits.request_timeout, Closure::UpstreamTimeout);
        }
        if idle {
            consider(self.last_activity + limits.idle_timeout, Closure::Idle);
        }
        if !self.out.is_empty() {
            consider(
                self.last_written + limits.idle_timeout,
                Closure::WriteStalled,
            );
        }
        if let Some((at, why)) = due {
            if now >= at {
                self.session.metrics().connection_closed(why);
                let text = limits.closed_by(why);
                if why == Closure::UpstreamTimeout {
                    tracing::warn!(peer = %self.session.peer().addr, "connection closed: {text}");
                }
                return Some(text);
            }
        }
        let mut wake = due.map(|(at, _)| at);
        if idle && self.keeps_idle_room() {
            let at = self.last_activity + FREE_IDLE_ROOM_AFTER;
            if now < at {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            } else {
                self.free_idle_room();
            }
        }
        if let Some(at) = wake.map(tokio::time::Instant::from_std) {
            if at < self.timer.deadline() {
                self.timer.as_mut().reset(at);
            }
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            // Fired early (a deadline that moved later): work it out again.
            let next = tokio::time::Instant::now() + limits.idle_timeout;
            self.timer.as_mut().reset(next);
            *progress = true;
        }
        None
    }
}

/// Resolves when the broker behind the connection's listener leaves or moves,
/// or its listener is closed for good (the sender is gone).
async fn gone(watch: &mut Option<watch::Receiver<u64>>) {
    match watch {
        Some(w) => w.changed().await.unwrap_or(()),
        None => std::future::pending::<()>().await,
    }
}
