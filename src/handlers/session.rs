//! One client connection as the handlers see it: who the peer is (a SASL
//! exchange read along can change that), which requests are answered here and
//! which go upstream, and what becomes of an upstream response before the client
//! gets it. The connection (`crate::server`) frames, orders and writes; every
//! decision that needs the Kafka protocol is made here.

use super::forward::{AfterResponse, Then};
use super::sasl::{self, SaslExchange, SaslVerdict};
use super::{dispatch, Action, Context, Peer};
use crate::protocol::response::{response_body_offset, with_new_body};
use crate::protocol::CodecError;
use crate::upstream::{Route, UpstreamLink};
use bytes::Bytes;
use std::sync::Arc;
use tokio::sync::watch;

pub struct Session {
    ctx: Arc<Context>,
    /// Replaced when the client authenticates with SASL through kshim.
    peer: Arc<Peer>,
    sasl: SaslExchange,
}

impl Session {
    pub fn new(ctx: Arc<Context>, peer: Peer) -> Session {
        Session {
            ctx,
            peer: Arc::new(peer),
            sasl: SaslExchange::default(),
        }
    }

    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    /// What to do with one request frame (without its size prefix).
    pub fn request(&mut self, frame: Bytes) -> Action {
        let api_key = frame
            .get(..2)
            .map_or(-1, |b| i16::from_be_bytes([b[0], b[1]]));
        let reads_sasl = self.ctx.upstream.is_some() && sasl::reads(api_key);
        if reads_sasl {
            match self.sasl.request(&frame) {
                SaslVerdict::Forward => {}
                SaslVerdict::Refuse(answer) => return Action::Refused(answer),
                SaslVerdict::Close(why) => {
                    tracing::info!(peer = %self.peer.addr, principal = %self.peer.principal, "SASL exchange refused: {why}");
                    return Action::Close(why);
                }
            }
        }
        match dispatch(&self.ctx, &self.peer, frame) {
            Action::Forward(mut fw) if reads_sasl => {
                fw.then.after = AfterResponse::ReadSasl;
                Action::Forward(fw)
            }
            action => action,
        }
    }

    /// A new link to the upstream broker behind this connection.
    pub fn open_link(&self) -> Result<UpstreamLink, String> {
        let Some(upstream) = &self.ctx.upstream else {
            return Err("nothing to forward to".into());
        };
        let route = self.peer.route;
        let targets = upstream.targets(route);
        if targets.is_empty() {
            return Err(format!("no upstream broker known for {route:?}"));
        }
        let node = match route {
            Route::Node(id) => Some(id),
            Route::Bootstrap => None,
        };
        Ok(UpstreamLink::open(targets, node, &upstream.link))
    }

    /// Changes when the broker behind this connection's listener leaves or moves
    /// (or its listener closes for good); `None` on the bootstrap listener.
    pub fn broker_watch(&self) -> Option<watch::Receiver<u64>> {
        match (self.peer.route, &self.ctx.upstream) {
            (Route::Node(id), Some(u)) => u.listeners.watch(id),
            _ => None,
        }
    }

    /// The client's response to a forwarded request: the upstream's response
    /// frame (without size prefix), made safe to hand on. An error closes the
    /// connection: a response that could not be made safe could send the client
    /// around kshim, or lose results.
    pub fn response(&mut self, then: Then, frame: Bytes) -> Result<Bytes, String> {
        let Then {
            api,
            version,
            after,
            hold,
        } = then;
        let result = match after {
            AfterResponse::PassOn => Ok(frame),
            AfterResponse::ReadSasl => match self.sasl.response(&frame) {
                Ok(Some(principal)) => {
                    tracing::debug!(peer = %self.peer.addr, %principal, "SASL authentication accepted by the upstream");
                    self.ctx.metrics.sasl_authenticated();
                    self.peer = Arc::new(Peer {
                        principal,
                        ..(*self.peer).clone()
                    });
                    Ok(frame)
                }
                Ok(None) => Ok(frame),
                Err(why) => return Err(why),
            },
            AfterResponse::RewriteAddresses => match &self.ctx.upstream {
                Some(upstream) => upstream
                    .rewrite_response(api, version, frame)
                    .map_err(|e| e.to_string()),
                None => Err("nothing to rewrite with".into()),
            },
            AfterResponse::Merge(merge) => {
                let malformed = |e: CodecError| {
                    format!("the upstream's {api:?} v{version} response does not decode: {e}")
                };
                response_body_offset(api, version, &frame)
                    .and_then(|offset| Ok((offset, merge(&frame[offset..])?)))
                    .map(|(offset, body)| with_new_body(&frame, offset, &body))
                    .map_err(malformed)
            }
        };
        drop(hold);
        if let Err(e) = &result {
            tracing::warn!("{e}");
        }
        result
    }
}
