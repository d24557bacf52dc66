//! One client connection: frames in, handler futures queued in arrival order,
//! responses written in that same order (Kafka clients pipeline requests and match
//! responses by order as well as by correlation id).

use super::Limits;
use crate::handlers::{dispatch, Action, Context, Peer, ANONYMOUS};
use crate::protocol::FrameCodec;
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::FramedRead;

pub(super) async fn run(
    stream: TcpStream,
    addr: SocketAddr,
    ctx: Arc<Context>,
    limits: &Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = Arc::new(Peer {
        addr,
        principal: ANONYMOUS.to_owned(),
    });
    let (read_half, write_half) = stream.into_split();
    let mut frames = FramedRead::new(read_half, FrameCodec::new(limits.max_frame_bytes));
    let mut out = BufWriter::new(write_half);
    let mut in_flight = FuturesOrdered::new();
    let mut reading = true;
    tracing::debug!(peer = %addr, "connection opened");

    let reason: String = loop {
        if !reading && in_flight.is_empty() {
            break "peer closed".into();
        }
        tokio::select! {
            biased;
            Some(action) = in_flight.next(), if !in_flight.is_empty() => match action {
                Action::Respond(frame) => {
                    if let Err(e) = out.write_all(&frame).await {
                        break format!("write failed: {e}");
                    }
                    if in_flight.is_empty() {
                        if let Err(e) = out.flush().await {
                            break format!("flush failed: {e}");
                        }
                    }
                }
                Action::Close(why) => break why,
            },
            frame = frames.next(), if reading && in_flight.len() < limits.max_in_flight => match frame {
                Some(Ok(frame)) => {
                    let ctx = Arc::clone(&ctx);
                    let peer = Arc::clone(&peer);
                    in_flight.push_back(async move { dispatch(&ctx, &peer, frame).await });
                }
                Some(Err(e)) => break e.to_string(),
                None => reading = false,
            },
            _ = super::stopped(&mut shutdown), if reading => reading = false,
        }
    };
    let _ = out.flush().await;
    tracing::debug!(peer = %addr, "connection closed: {reason}");
}
