//! One upstream connection on behalf of one client connection: request frames go
//! out in the order the client sent them, responses come back in that order and
//! are handed to whoever is waiting for each.
//!
//! The link never looks inside a body. It checks only that every response carries
//! the correlation id of the request it answers, which is what keeps a confused
//! upstream from answering the wrong request.

use super::UpstreamError;
use crate::client::{SaslPlain, Stream};
use crate::protocol::{FrameCodec, Reader};
use crate::tls::ClientTlsCell;
use bytes::Bytes;
use futures::StreamExt;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;

/// A response frame from the upstream, without its size prefix.
pub type ResponseFrame = Bytes;

/// What a forwarded request turns into.
pub type PendingResponse = oneshot::Receiver<Result<ResponseFrame, UpstreamError>>;

struct Outbound {
    /// The request frame, without its size prefix.
    frame: Bytes,
    correlation_id: i32,
    /// `None` for requests that get no response (Produce with acks=0).
    reply: Option<oneshot::Sender<Result<ResponseFrame, UpstreamError>>>,
}

/// The sending side of a link. Dropping it closes the upstream connection once the
/// requests already sent have been answered.
pub struct UpstreamLink {
    requests: mpsc::UnboundedSender<Outbound>,
    target: String,
}

/// How kshim reaches the upstream brokers: how long a connection may take, the
/// largest response accepted, TLS for every connection, and the credentials of
/// kshim's own connections (client connections carry their clients' own SASL).
#[derive(Debug, Clone)]
pub struct LinkSettings {
    pub connect_timeout: Duration,
    pub max_response_bytes: usize,
    /// `None`: plaintext.
    pub tls: Option<Arc<ClientTlsCell>>,
    /// For discovery, audits and forwarded UpdateFeatures.
    pub sasl: Option<SaslPlain>,
}

impl UpstreamLink {
    /// Starts connecting to the first of `targets` that accepts; requests sent
    /// meanwhile wait for the connection. `node` names the broker in logs.
    pub fn open(targets: Vec<String>, node: Option<i32>, settings: LinkSettings) -> UpstreamLink {
        let (tx, rx) = mpsc::unbounded_channel();
        let target = targets.first().cloned().unwrap_or_default();
        tokio::spawn(run(targets, node, settings, rx));
        UpstreamLink {
            requests: tx,
            target,
        }
    }

    /// Queues `frame` for the upstream. With `expects_response`, the returned
    /// receiver yields the response; otherwise it is `None`.
    pub fn send(
        &self,
        frame: Bytes,
        correlation_id: i32,
        expects_response: bool,
    ) -> Result<Option<PendingResponse>, UpstreamError> {
        let (reply, pending) = if expects_response {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.requests
            .send(Outbound {
                frame,
                correlation_id,
                reply,
            })
            .map_err(|_| UpstreamError::LinkClosed {
                target: self.target.clone(),
            })?;
        Ok(pending)
    }

    /// Resolves when the upstream connection has ended.
    pub async fn closed(&self) {
        self.requests.closed().await
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

async fn run(
    targets: Vec<String>,
    node: Option<i32>,
    settings: LinkSettings,
    mut requests: mpsc::UnboundedReceiver<Outbound>,
) {
    let fail_all = |requests: &mut mpsc::UnboundedReceiver<Outbound>,
                    waiting: &mut VecDeque<Waiting>,
                    error: UpstreamError| {
        requests.close();
        for w in waiting.drain(..) {
            let _ = w.reply.send(Err(error.clone()));
        }
        while let Ok(o) = requests.try_recv() {
            if let Some(reply) = o.reply {
                let _ = reply.send(Err(error.clone()));
            }
        }
    };
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let (stream, target) = match connect_first(&targets, &settings).await {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(node = ?node, "{e}");
            fail_all(&mut requests, &mut waiting, e);
            return;
        }
    };
    // Plaintext keeps TcpStream's own halves, which need no lock between them.
    let ending = match stream {
        Stream::Plain(tcp) => {
            let (r, w) = tcp.into_split();
            exchange(r, w, &target, &settings, &mut requests, &mut waiting).await
        }
        Stream::Tls(tls) => {
            let (r, w) = tokio::io::split(*tls);
            exchange(r, w, &target, &settings, &mut requests, &mut waiting).await
        }
    };
    if let Some(ending) = ending {
        tracing::debug!(node = ?node, "upstream link ended: {ending}");
        fail_all(&mut requests, &mut waiting, ending);
    }
}

/// Carries requests out and responses back until the link ends: `None` when it
/// ended because the client side is done and nothing is waiting.
async fn exchange<R, W>(
    read_half: R,
    write_half: W,
    target: &str,
    settings: &LinkSettings,
    requests: &mut mpsc::UnboundedReceiver<Outbound>,
    waiting: &mut VecDeque<Waiting>,
) -> Option<UpstreamError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let target = target.to_owned();
    let mut responses = FramedRead::new(read_half, FrameCodec::new(settings.max_response_bytes));
    let mut out = BufWriter::with_capacity(64 * 1024, write_half);
    let mut accepting = true;

    let ending: UpstreamError = loop {
        if !accepting && waiting.is_empty() {
            return None;
        }
        tokio::select! {
            biased;
            // A response with nobody waiting, or the broker closing the connection
            // (connections.max.idle.ms on an idle link), ends the link, so that the
            // client reconnects rather than writing into a dead socket.
            response = responses.next() => {
                let frame = match response {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => break UpstreamError::Broken { target: target.clone(), reason: e.to_string() },
                    None => break UpstreamError::Broken { target: target.clone(), reason: "the broker closed the connection".into() },
                };
                let Some(w) = waiting.pop_front() else {
                    break UpstreamError::Broken { target: target.clone(), reason: "the broker sent a response nobody asked for".into() };
                };
                let got = Reader::new(&frame).i32("correlation id").ok();
                if got != Some(w.correlation_id) {
                    let _ = w.reply.send(Err(UpstreamError::Broken {
                        target: target.clone(),
                        reason: format!("response correlation id {got:?} does not match request {}", w.correlation_id),
                    }));
                    break UpstreamError::Broken { target: target.clone(), reason: "responses out of order".into() };
                }
                let _ = w.reply.send(Ok(frame));
            }
            request = requests.recv(), if accepting => match request {
                Some(o) => {
                    if let Err(e) = write_frame(&mut out, &o.frame).await {
                        if let Some(reply) = o.reply {
                            let _ = reply.send(Err(broken(&target, &e)));
                        }
                        break broken(&target, &e);
                    }
                    if let Some(reply) = o.reply {
                        waiting.push_back(Waiting { correlation_id: o.correlation_id, reply });
                    }
                    // Batch whatever else is queued into the same flush.
                    let mut failed = None;
                    while let Ok(o) = requests.try_recv() {
                        if let Err(e) = write_frame(&mut out, &o.frame).await {
                            if let Some(reply) = o.reply {
                                let _ = reply.send(Err(broken(&target, &e)));
                            }
                            failed = Some(e);
                            break;
                        }
                        if let Some(reply) = o.reply {
                            waiting.push_back(Waiting { correlation_id: o.correlation_id, reply });
                        }
                    }
                    if failed.is_none() {
                        if let Err(e) = out.flush().await {
                            failed = Some(e);
                        }
                    }
                    if let Some(e) = failed {
                        break broken(&target, &e);
                    }
                }
                None => accepting = false,
            },
        }
    };
    Some(ending)
}

struct Waiting {
    correlation_id: i32,
    reply: oneshot::Sender<Result<ResponseFrame, UpstreamError>>,
}

fn broken(target: &str, e: &std::io::Error) -> UpstreamError {
    UpstreamError::Broken {
        target: target.to_owned(),
        reason: e.to_string(),
    }
}

/// Writes the size prefix and the frame as one vectored write: written one after
/// the other, a frame larger than the buffer would send its 4-byte prefix in a
/// packet of its own.
pub(crate) async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    frame: &[u8],
) -> std::io::Result<()> {
    use bytes::Buf;
    let prefix = (frame.len() as u32).to_be_bytes();
    let mut both = (&prefix[..]).chain(frame);
    out.write_all_buf(&mut both).await
}
