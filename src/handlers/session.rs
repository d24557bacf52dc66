//! One client connection as the handlers see it: who the peer is (a SASL
//! exchange read along can change that), which requests are answered here and
//! which go upstream, and what becomes of an upstream response before the client
//! gets it. The connection (`crate::server`) frames, orders and writes; every
//! decision that needs the Kafka protocol is made here.

use super::api_versions;
use super::forward::{AfterResponse, Streamed, Then};
use super::sasl::{self, SaslExchange, SaslVerdict};
use super::{dispatch, Action, Context, Peer};
use crate::census::{ServedRecord, Tracked};
use crate::lab::{self, Applied, Who};
use crate::protocol::api_name;
use crate::protocol::api_versions::ClientSoftware;
use crate::protocol::errors::{self};
use crate::protocol::response::{frame_with_body, response_body_offset, with_new_body, Answer};
use crate::protocol::{CodecError, HeaderPeek, Incoming};
use crate::upstream::{Route, UpstreamLink};
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// CreateTopics, AlterConfigs, IncrementalAlterConfigs and UpdateFeatures.
fn refusable(api_key: i16) -> bool {
    [
        ApiKey::CreateTopics,
        ApiKey::AlterConfigs,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::UpdateFeatures,
    ]
    .iter()
    .any(|a| *a as i16 == api_key)
}

/// Clients that connect before any upstream broker has answered: one log line
/// a minute for all of them.
static NO_UPSTREAM_YET: crate::log_limit::PerCauseLimit =
    crate::log_limit::PerCauseLimit::new(Duration::from_secs(60));

pub struct Session {
    ctx: Arc<Context>,
    /// Replaced when the client authenticates with SASL through kshim.
    peer: Arc<Peer>,
    sasl: SaslExchange,
    /// The client software named in the last ApiVersions v3+ request.
    software: Option<ClientSoftware>,
    /// This connection's census record; `None` with the census off.
    census: Option<Tracked>,
    /// The discovery-lab scenarios this connection is under.
    lab: Applied,
}

impl Session {
    pub fn new(ctx: Arc<Context>, peer: Peer) -> Session {
        let security = if peer.tls { "SSL" } else { "PLAINTEXT" };
        let census = ctx.census.open(peer.addr, &peer.principal, security);
        let mut session = Session {
            ctx,
            peer: Arc::new(peer),
            sasl: SaslExchange::default(),
            software: None,
            census,
            lab: Applied::default(),
        };
        session.rematch();
        session
    }

    /// Whether the client has authenticated with SASL (the upstream accepted
    /// an exchange).
    pub fn authenticated(&self) -> bool {
        self.sasl.mechanism().is_some()
    }

    /// Kafka's name for how the client connected: "PLAINTEXT", "SSL",
    /// "SASL_SSL/SCRAM-SHA-512".
    fn security(&self) -> String {
        let transport = if self.peer.tls { "SSL" } else { "PLAINTEXT" };
        match self.sasl.mechanism() {
            Some(m) => format!("SASL_{transport}/{m}"),
            None => transport.to_owned(),
        }
    }

    /// Works out again which lab scenarios apply to this connection, and logs
    /// the ones that newly do.
    fn rematch(&mut self) {
        let who = Who {
            software: self.software.as_ref(),
            principal: &self.peer.principal,
            addr: self.peer.addr.ip(),
        };
        for name in self.lab.rematch(&self.ctx.lab, &who) {
            tracing::info!(
                peer = %self.peer.addr,
                principal = %self.peer.principal,
                software = %self.software_label(),
                scenario = %name,
                "discovery lab: scenario applies to this connection"
            );
        }
        if let Some(census) = &self.census {
            census.scenarios(self.lab.names());
        }
    }

    /// The connection's identity changed: the census counts it anew and the
    /// lab matches it again.
    fn identified(&mut self) {
        if let Some(census) = &self.census {
            census.identify(
                &self.peer.principal,
                self.software.as_ref(),
                Some(&self.security()),
            );
        }
        self.rematch();
    }

    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    /// What to do with one request, read at `read_at`.
    pub fn request(&mut self, request: Incoming, read_at: Instant) -> Action {
        let HeaderPeek {
            api_key,
            api_version: version,
            correlation_id,
        } = request.header;
        // ApiVersions counts under the client software it names.
        if api_key != ApiKey::ApiVersions as i16 {
            if let Some(census) = &self.census {
                census.request(api_key, version, read_at);
            }
        }
        if self.lab.stale(&self.ctx.lab) {
            self.rematch();
        }
        if self.lab.is_empty() {
            return self.act(request, read_at);
        }
        if api_key != ApiKey::ApiVersions as i16 {
            if let Some(why) = self.lab.refusal(api_key, version) {
                if let Some(census) = &self.census {
                    census.error(&format!("{}: not offered as presented", api_name(api_key)));
                }
                return Action::Close(why);
            }
        }
        // ApiVersions meets the lab's errors once it has named the software
        // (`api_versions`), so that scenarios matching the software apply to it.
        let injected = if api_key != ApiKey::ApiVersions as i16 {
            self.lab_error(api_key, version, correlation_id)
        } else {
            None
        };
        let action = match injected {
            Some(answer) => answer,
            None => self.act(request, read_at),
        };
        match self.lab.delay_for(api_key) {
            Some(delay) => delayed(action, delay),
            None => action,
        }
    }

    /// The lab's error answer to this request, when a scenario has one for it:
    /// an error it was told to give, or the refusal of a broker whose presented
    /// feature levels turn the API off.
    fn lab_error(&mut self, api_key: i16, version: i16, correlation_id: i32) -> Option<Action> {
        let e = self.lab.error_for(api_key)?;
        let (code, scenario) = (e.code, e.scenario);
        let frame = match lab::errors::error_frame(api_key, version, correlation_id, code)? {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!("discovery lab: {e}");
                return None;
            }
        };
        let api = api_name(api_key);
        let because = e.gate.unwrap_or("discovery lab");
        tracing::info!(peer = %self.peer.addr, %scenario, "discovery lab: {api} v{version} answered with error {code} ({}): {because}", errors::name(code));
        if let Some(census) = &self.census {
            census.error(&format!(
                "{api}: {} ({code}, {because})",
                errors::name(code)
            ));
        }
        Some(Action::Respond(frame))
    }

    /// What kshim does with a request the lab leaves alone.
    fn act(&mut self, request: Incoming, read_at: Instant) -> Action {
        let api_key = request.header.api_key;
        let action = if api_key == ApiKey::ApiVersions as i16 {
            self.api_versions(request, read_at)
        } else {
            self.dispatch(request)
        };
        if let Some(census) = &self.census {
            match &action {
                Action::Refused(_) => census.error(&format!("{}: refused", api_name(api_key))),
                Action::Close(_) => {
                    census.error(&format!("{}: connection closed", api_name(api_key)))
                }
                _ => {}
            }
        }
        action
    }

    /// ApiVersions: the client software it names identifies the connection, and
    /// the lab's scenarios for that software shape the answer.
    fn api_versions(&mut self, request: Incoming, read_at: Instant) -> Action {
        let version = request.header.api_version;
        let request = match api_versions::read(request) {
            Ok(api_versions::Read::Request(request)) => request,
            Ok(api_versions::Read::Refused(frame)) => {
                self.counted_api_versions(version, read_at, None);
                return Action::Respond(frame);
            }
            Err(e) => {
                self.counted_api_versions(version, read_at, None);
                return Err::<Bytes, _>(e).into();
            }
        };
        if request.software.is_some() && request.software != self.software {
            self.software.clone_from(&request.software);
            self.identified();
        }
        self.note_without_upstream();
        match api_versions::refused_as_elsewhere(&self.ctx, self.peer.route, &request) {
            Ok(Some(frame)) => {
                self.counted_api_versions(version, read_at, None);
                return Action::Respond(frame);
            }
            Ok(None) => {}
            Err(e) => {
                self.counted_api_versions(version, read_at, None);
                return Err::<Bytes, _>(e).into();
            }
        }
        if let Some(max) = self.lab.api_versions_max().filter(|max| version > *max) {
            // As the presented release's broker answers a version it does not know.
            self.counted_api_versions(version, read_at, None);
            return Action::Respond(frame_with_body(
                ApiKey::ApiVersions,
                0,
                request.correlation_id,
                &crate::protocol::api_versions::unsupported_version_body_upto(max),
            ));
        }
        if !self.lab.is_empty() {
            let api = ApiKey::ApiVersions as i16;
            if let Some(answer) = self.lab_error(api, version, request.correlation_id) {
                self.counted_api_versions(version, read_at, None);
                return answer;
            }
        }
        let shape = self.lab.shape();
        match api_versions::answer(&self.ctx, &request, shape.as_ref()) {
            Ok((frame, served)) => {
                self.counted_api_versions(version, read_at, Some(served));
                Action::Respond(frame)
            }
            Err(e) => {
                self.counted_api_versions(version, read_at, None);
                Err::<Bytes, _>(e).into()
            }
        }
    }

    /// In front of a cluster that has never answered, kshim knows no API
    /// versions but its own: it serves the feature state it keeps at once (a
    /// kshim cluster member must), but a client that needs more will report
    /// the missing APIs as unsupported by the broker. kshim's log says why, once
    /// a minute with the count of clients meanwhile.
    fn note_without_upstream(&self) {
        let Some(upstream) = self.ctx.upstream.as_ref() else {
            return;
        };
        if upstream.refreshes().0 > 0 {
            return;
        }
        if let Some(repeats) = NO_UPSTREAM_YET.admit("no upstream", Instant::now()) {
            tracing::warn!(
                peer = %self.peer.addr,
                software = %self.software_label(),
                clients_since_last_line = repeats,
                "a client connected while no upstream broker has answered yet: it is offered only \
                 the APIs kshim answers itself, and will report the others (Metadata, Produce, ...) \
                 as not supported by the broker until the upstream answers"
            );
        }
    }

    /// The client software as logs name it: NAME/VERSION, or "unknown".
    fn software_label(&self) -> String {
        match &self.software {
            Some(s) => format!("{}/{}", s.name, s.version),
            None => "unknown".to_owned(),
        }
    }

    fn counted_api_versions(&self, version: i16, read_at: Instant, served: Option<ServedRecord>) {
        if let Some(census) = &self.census {
            census.api_versions(version, read_at, served);
        }
    }

    fn dispatch(&mut self, request: Incoming) -> Action {
        let api_key = request.header.api_key;
        let reads_sasl = self.ctx.upstream.is_some() && sasl::reads(api_key);
        if reads_sasl {
            match self.sasl.request(&request) {
                SaslVerdict::Forward => {}
                SaslVerdict::Refuse(answer) => return Action::Refused(answer),
                SaslVerdict::Close(why) => {
                    tracing::info!(peer = %self.peer.addr, principal = %self.peer.principal, "SASL exchange refused: {why}");
                    return Action::Close(why);
                }
            }
        }
        // The requests kshim may refuse on a policy or for want of ALTER: what the
        // handlers log of them carries who asked, from where and with what
        // software. Only these few APIs pay for the span.
        let span = refusable(api_key).then(|| {
            tracing::info_span!(
                "client",
                peer = %self.peer.addr,
                principal = %self.peer.principal,
                software = %self.software_label()
            )
        });
        let action = match &span {
            Some(span) => {
                span.in_scope(|| dispatch(&self.ctx, &self.peer, self.software.as_ref(), request))
            }
            None => dispatch(&self.ctx, &self.peer, self.software.as_ref(), request),
        };
        match (action, span) {
            (Action::Forward(mut fw), _) if reads_sasl => {
                fw.then.after = AfterResponse::ReadSasl;
                Action::Forward(fw)
            }
            (Action::Later(answer), Some(span)) => {
                use tracing::Instrument as _;
                Action::Later(Box::pin(answer.instrument(span)))
            }
            (action, _) => action,
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
    pub fn response(&mut self, then: Then, frame: Bytes) -> Result<Answer, String> {
        let Then {
            api_key,
            version,
            after,
            hold,
            delay: _,
        } = then;
        // Only responses kshim changes are read, and only APIs its Kafka
        // library knows are planned that way.
        let api = || {
            ApiKey::try_from(api_key)
                .map_err(|_| format!("no layout known for the responses of API key {api_key}"))
        };
        let result = match after {
            AfterResponse::PassOn => Ok(Answer::whole(frame)),
            AfterResponse::ReadSasl => match self.sasl.response(&frame) {
                Ok(Some(principal)) => {
                    tracing::debug!(peer = %self.peer.addr, %principal, "SASL authentication accepted by the upstream");
                    self.ctx.metrics.sasl_authenticated();
                    self.peer = Arc::new(Peer {
                        principal,
                        ..(*self.peer).clone()
                    });
                    self.identified();
                    Ok(Answer::whole(frame))
                }
                Ok(None) => Ok(Answer::whole(frame)),
                Err(why) => return Err(why),
            },
            AfterResponse::RewriteAddresses => match &self.ctx.upstream {
                Some(upstream) => upstream
                    .rewrite_response(api()?, version, frame)
                    .map_err(|e| e.to_string()),
                None => Err("nothing to rewrite with".into()),
            },
            AfterResponse::Merge(merge) => {
                let api = api()?;
                let malformed = |e: CodecError| {
                    format!("the upstream's {api:?} v{version} response does not decode: {e}")
                };
                response_body_offset(api, version, &frame)
                    .and_then(|offset| Ok((offset, merge(&frame[offset..])?)))
                    .map(|(offset, body)| Answer::whole(with_new_body(&frame, offset, &body)))
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

impl Session {
    /// The rest of a response passed on while it arrived: `rest` is the frame
    /// from offset `offset` on. A Fetch v16+ has its top-level tagged fields
    /// rewritten at their length (`protocol::rewrite::rewrite_fetch_tail`).
    pub fn streamed_response(
        &mut self,
        streamed: Streamed,
        rest: Bytes,
        offset: usize,
    ) -> Result<Bytes, String> {
        let Streamed { then, tail } = streamed;
        let Some(mut scanner) = tail else {
            return Ok(rest);
        };
        let version = then.version;
        let malformed = |why: &str| {
            let e = format!("the upstream's Fetch v{version} response does not decode: {why}");
            tracing::warn!("{e}");
            e
        };
        // The bytes that made the response whole have not been scanned yet.
        scanner
            .feed(&rest, offset)
            .map_err(|e| malformed(&e.to_string()))?;
        let at = scanner
            .tail()
            .and_then(|at| at.checked_sub(offset))
            .filter(|&at| at <= rest.len())
            .ok_or_else(|| malformed("it ends before its tagged fields"))?;
        let Some(upstream) = &self.ctx.upstream else {
            return Err("nothing to rewrite with".into());
        };
        match upstream.rewrite_fetch_tail(version, &rest[at..]) {
            Ok(None) => Ok(rest),
            Ok(Some(tail)) => {
                let mut out = bytes::BytesMut::with_capacity(rest.len());
                out.extend_from_slice(&rest[..at]);
                out.extend_from_slice(&tail);
                Ok(out.freeze())
            }
            Err(e) => Err(malformed(&e.to_string())),
        }
    }
}

/// `action`, answered `delay` later. A forwarded request goes upstream at once
/// (the broker sees the client's order); its response waits.
fn delayed(action: Action, delay: Duration) -> Action {
    match action {
        Action::Forward(mut fw) => {
            fw.then.delay = Some(delay);
            Action::Forward(fw)
        }
        Action::Close(why) => Action::Close(why),
        other => Action::Later(Box::pin(async move {
            tokio::time::sleep(delay).await;
            other.settle().await
        })),
    }
}
