//! One file per API that kshim answers itself, and `forward` for the rest. A
//! handler takes a request frame and returns an `Action`; it never touches a
//! socket, so each is testable alone.
//!
//! `dispatch` is the one place that maps an API key to its handler.

pub mod alter_configs;
pub mod api_versions;
mod checked;
pub mod create_topics;
pub mod describe_cluster;
pub mod forward;
pub mod incremental_alter_configs;
pub mod metadata;
pub mod refusal;
pub mod sasl;
pub mod session;
pub mod update_features;

use crate::controller::FeatureController;
use crate::policy::PolicyCell;
use crate::protocol::response::EncodeError;
use crate::protocol::{CodecError, Incoming};
use crate::upstream::{Route, Upstream};
use api_versions::Discovery;
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use futures::future::BoxFuture;
use kafka_protocol::messages::ApiKey;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

/// What the connection does with a request.
pub enum Action {
    /// Write this response frame (size prefix included).
    Respond(Bytes),
    /// Close the connection, as Kafka does for requests it cannot read. The reason
    /// is logged at debug: the peer caused it.
    Close(String),
    /// The answer comes later (UpdateFeatures waits for a controller); the
    /// connection keeps it in its place in the response order.
    Later(BoxFuture<'static, Action>),
    /// Send the request to the upstream broker behind this connection.
    Forward(forward::Forward),
    /// Write this response frame (size prefix included): kshim refused the
    /// request (authorization, or a policy refusing every item). Counted apart
    /// from the requests it answered.
    Refused(Bytes),
}

impl Action {
    /// Waits for a deferred answer; other actions come back as they are.
    pub async fn settle(self) -> Action {
        match self {
            Action::Later(answer) => answer.await,
            other => other,
        }
    }
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Respond(b) => write!(f, "Respond({} bytes)", b.len()),
            Action::Refused(b) => write!(f, "Refused({} bytes)", b.len()),
            Action::Close(why) => write!(f, "Close({why:?})"),
            Action::Later(_) => write!(f, "Later(..)"),
            Action::Forward(fw) => write!(f, "Forward({fw:?})"),
        }
    }
}

/// The address kshim gives clients for itself.
#[derive(Debug, Clone)]
pub struct NodeAddress {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// Who may finalize features: ALTER on CLUSTER. Changes at runtime apply to the
/// next request.
#[derive(Debug, Default)]
pub struct Authorizer {
    /// `None`: no authorizer configured, everyone may (as in Kafka).
    alter_cluster: ArcSwapOption<HashSet<String>>,
}

impl Authorizer {
    pub fn new(alter_cluster: Option<HashSet<String>>) -> Authorizer {
        Authorizer {
            alter_cluster: ArcSwapOption::from(alter_cluster.map(Arc::new)),
        }
    }

    pub fn may_alter_cluster(&self, principal: &str) -> bool {
        self.alter_cluster
            .load()
            .as_ref()
            .is_none_or(|allowed| allowed.contains(principal))
    }

    pub fn alter_cluster(&self) -> Option<HashSet<String>> {
        self.alter_cluster.load().as_deref().cloned()
    }

    pub fn replace(&self, alter_cluster: Option<HashSet<String>>) {
        self.alter_cluster.store(alter_cluster.map(Arc::new));
    }
}

/// Shared by every connection.
pub struct Context {
    pub controller: Arc<FeatureController>,
    pub discovery: Discovery,
    pub node: NodeAddress,
    pub authorizer: Arc<Authorizer>,
    /// `None`: a standalone discovery server.
    pub upstream: Option<Arc<Upstream>>,
    /// The create-topic policy and config validators in force; shared with
    /// whoever changes them at runtime.
    pub policies: Arc<PolicyCell>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub census: Arc<crate::census::Census>,
    pub lab: Arc<crate::lab::Lab>,
}

/// Per connection.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub principal: String,
    /// Which listener the connection came in on.
    pub route: Route,
    /// Whether the connection is TLS.
    pub tls: bool,
}

pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Why a handler could not answer.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The peer sent bytes that do not decode.
    #[error("malformed {api:?} v{version} request: {source}")]
    Malformed {
        api: ApiKey,
        version: i16,
        source: CodecError,
    },
    /// kshim built a response it cannot encode.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

impl HandlerError {
    pub fn malformed(api: ApiKey, version: i16) -> impl FnOnce(CodecError) -> HandlerError {
        move |source| HandlerError::Malformed {
            api,
            version,
            source,
        }
    }
}

impl From<Result<Bytes, HandlerError>> for Action {
    fn from(result: Result<Bytes, HandlerError>) -> Action {
        match result {
            Ok(frame) => Action::Respond(frame),
            Err(e @ HandlerError::Malformed { .. }) => Action::Close(e.to_string()),
            Err(e @ HandlerError::Encode(_)) => {
                tracing::error!("{e}");
                Action::Close(e.to_string())
            }
        }
    }
}

/// Routes one request frame to its handler: kshim answers ApiVersions and
/// UpdateFeatures itself; in front of a cluster everything else is forwarded,
/// and a standalone kshim answers Metadata and DescribeCluster too.
pub fn dispatch(
    ctx: &Arc<Context>,
    peer: &Arc<Peer>,
    software: Option<&crate::protocol::api_versions::ClientSoftware>,
    request: Incoming,
) -> Action {
    let peek = request.header;
    let Some(api) = peek.known_api_key() else {
        // An API newer than kshim's Kafka library: forwarded when the newest
        // release kshim has data for defines it (its ApiVersions offers no other).
        if let Some(upstream) = &ctx.upstream {
            if crate::releases::newest().api(peek.api_key).is_some() {
                return forward::plan(peek, request.frame);
            }
            let forwarded =
                upstream.link.unknown_api_keys == crate::upstream::UnknownApiKeys::Forward;
            let _ = forward::log_unknown_key(peek.api_key, software, peer, forwarded);
            if forwarded {
                return forward::plan_unknown(peek, request.frame);
            }
        }
        return Action::Close(format!("unknown API key {}", peek.api_key));
    };
    match api {
        ApiKey::ApiVersions => api_versions::handle(ctx, request).into(),
        ApiKey::UpdateFeatures => {
            let (ctx, peer) = (Arc::clone(ctx), Arc::clone(peer));
            Action::Later(Box::pin(async move {
                update_features::handle(&ctx, &peer, request).await
            }))
        }
        ApiKey::CreateTopics | ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs
            if ctx.upstream.is_some() =>
        {
            checked_request(ctx, peer, api, request)
        }
        _ if ctx.upstream.is_some() => forward::plan(peek, request.frame),
        ApiKey::Metadata => metadata::handle(ctx, peer, request).into(),
        ApiKey::DescribeCluster => describe_cluster::handle(ctx, peer, request).into(),
        other => Action::Close(format!("{other:?} is not served by a standalone kshim")),
    }
}

/// The requests kshim checks before forwarding; forwarded as they are when no
/// policy could refuse them.
fn checked_request(ctx: &Arc<Context>, peer: &Peer, api: ApiKey, request: Incoming) -> Action {
    let peek = request.header;
    if let Some((min, max)) = checked_versions(api) {
        if !(min..=max).contains(&peek.api_version) {
            return Action::Close(format!(
                "{api:?} v{} is not served: kshim checks v{min}-v{max}",
                peek.api_version
            ));
        }
    }
    let policies = ctx.policies.load();
    // With validators, an upgrade audit may run: the change passes its fence
    // first (even an exempt principal's: the audit must see it), and holds the
    // pass until the upstream has answered.
    let pass = (!policies.validators.is_empty()).then(|| ctx.controller.fence().pass());
    if !checked::anything_to_check(&policies) || policies.exempts(&peer.principal) {
        return checked::holding(forward::plan(peek, request.frame), pass);
    }
    let snapshot = ctx.controller.snapshot();
    let mut levels = vec![&snapshot.finalized];
    levels.extend(pass.as_ref().and_then(|p| p.target()));
    let result = match api {
        ApiKey::CreateTopics => {
            let defaults = ctx
                .upstream
                .as_ref()
                .map(|u| u.view().topic_defaults)
                .unwrap_or_default();
            create_topics::handle(&policies, &levels, request, defaults)
        }
        ApiKey::AlterConfigs => alter_configs::handle(&policies, &levels, request),
        _ => incremental_alter_configs::handle(&policies, &levels, request),
    };
    match result {
        Ok(action) => checked::holding(action, pass),
        Err(e) => Err::<Bytes, _>(e).into(),
    }
}

/// The versions of the requests kshim checks before forwarding: those its
/// decoders read. In front of a cluster, ApiVersions offers no others.
pub fn checked_versions(api: ApiKey) -> Option<(i16, i16)> {
    use crate::protocol::config_requests as c;
    match api {
        ApiKey::CreateTopics => Some(c::CREATE_TOPICS_VERSIONS),
        ApiKey::AlterConfigs => Some(c::ALTER_CONFIGS_VERSIONS),
        ApiKey::IncrementalAlterConfigs => Some(c::INCREMENTAL_ALTER_CONFIGS_VERSIONS),
        _ => None,
    }
}

/// Reads the header of a request to `api`, refuses versions above `max`, and
/// decodes its body with `decode`: the preamble every body-decoding handler shares.
pub(crate) fn decode_request<T>(
    api: ApiKey,
    max: i16,
    request: Incoming,
    decode: fn(i16, &[u8]) -> Result<T, CodecError>,
) -> Result<(crate::protocol::RequestFrame, T), HandlerError> {
    let version = request.header.api_version;
    let request = request
        .decode_header()
        .map_err(HandlerError::malformed(api, 0))?;
    check_version(api, version, max)?;
    let body = decode(version, request.body()).map_err(HandlerError::malformed(api, version))?;
    Ok((request, body))
}

/// Refuses versions outside what kshim advertises for `api`; Kafka closes the
/// connection on those too.
pub(crate) fn check_version(api: ApiKey, version: i16, max: i16) -> Result<(), HandlerError> {
    if (0..=max).contains(&version) {
        Ok(())
    } else {
        Err(HandlerError::Malformed {
            api,
            version,
            source: CodecError::Invalid(format!("version {version} is not supported (0-{max})")),
        })
    }
}

/// The authorized-operations bitfield Kafka reports for the cluster resource when
/// asked: every cluster operation, ALTER only for principals that hold it.
pub(crate) fn cluster_authorized_operations(ctx: &Context, peer: &Peer) -> i32 {
    const CREATE: i32 = 5;
    const ALTER: i32 = 7;
    const DESCRIBE: i32 = 8;
    const CLUSTER_ACTION: i32 = 9;
    const DESCRIBE_CONFIGS: i32 = 10;
    const ALTER_CONFIGS: i32 = 11;
    const IDEMPOTENT_WRITE: i32 = 12;
    let mut ops = [
        CREATE,
        DESCRIBE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
    ]
    .iter()
    .fold(0, |acc, op| acc | (1 << op));
    if ctx.authorizer.may_alter_cluster(&peer.principal) {
        ops |= 1 << ALTER;
    }
    ops
}
