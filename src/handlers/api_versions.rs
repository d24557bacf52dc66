//! ApiVersions: the API table and the feature snapshot, answered from encoded
//! bodies that are rebuilt only when the snapshot changes.

use super::refusal::Refusal;
use super::{Context, HandlerError};
use crate::census::{Served, ServedRecord};
use crate::features::kafka::is_kafka_feature;
use crate::features::FeatureSnapshot;
use crate::lab::Shape;
use crate::protocol::api_versions::{
    body_with_view, error_body, features_for_version, invalid_request_body,
    is_valid_client_software, parse_request, success_body, unsupported_version_body, ApiRange,
    ApiVersionsRequestBody, ClientSoftware, IntendedNode, MAX_VERSION,
};
use crate::protocol::response::{frame_with_body, EncodeError};
use crate::protocol::Incoming;
use crate::upstream::{Route, UnknownApiKeys};
use arc_swap::ArcSwap;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use std::sync::Arc;

/// The APIs kshim answers in both modes, with the versions it handles.
const OWN_APIS: [ApiRange; 2] = [
    ApiRange {
        api_key: ApiKey::ApiVersions as i16,
        min: 0,
        max: MAX_VERSION,
    },
    ApiRange {
        api_key: ApiKey::UpdateFeatures as i16,
        min: 0,
        max: super::update_features::MAX_VERSION,
    },
];

/// The APIs a standalone kshim answers, with the versions it handles.
pub const STANDALONE_APIS: &[ApiRange] = &[
    ApiRange {
        api_key: ApiKey::Metadata as i16,
        min: 0,
        max: super::metadata::MAX_VERSION,
    },
    OWN_APIS[0],
    OWN_APIS[1],
    ApiRange {
        api_key: ApiKey::DescribeCluster as i16,
        min: 0,
        max: super::describe_cluster::MAX_VERSION,
    },
];

/// Encoded answer bodies for one snapshot and API table: per version, without and
/// with the draft tags.
struct Answers {
    snapshot: Arc<FeatureSnapshot>,
    apis: Arc<Vec<ApiRange>>,
    bodies: Vec<[Bytes; 2]>,
}

/// What kshim advertises, and the cache of its encoded answers. In front of a
/// cluster the API table follows the upstream (`set_apis`).
pub struct Discovery {
    apis: ArcSwap<Vec<ApiRange>>,
    pub draft_tags: bool,
    answers: ArcSwap<Answers>,
}

impl Discovery {
    pub fn new(
        apis: Vec<ApiRange>,
        draft_tags: bool,
        snapshot: Arc<FeatureSnapshot>,
    ) -> Result<Discovery, EncodeError> {
        let apis = Arc::new(apis);
        let answers = build(Arc::clone(&apis), snapshot)?;
        Ok(Discovery {
            apis: ArcSwap::new(apis),
            draft_tags,
            answers: ArcSwap::from_pointee(answers),
        })
    }

    /// Replaces the API table; the next answer is rebuilt from it.
    pub fn set_apis(&self, apis: Vec<ApiRange>) {
        if **self.apis.load() != apis {
            tracing::info!("advertised API versions changed: {} keys", apis.len());
            self.apis.store(Arc::new(apis));
        }
    }

    /// The API table advertised now.
    pub fn apis(&self) -> Arc<Vec<ApiRange>> {
        self.apis.load_full()
    }

    /// The answer body for `version` and `snapshot`, rebuilding the cache when the
    /// snapshot or the API table has moved on since it was built.
    fn body(
        &self,
        version: i16,
        snapshot: Arc<FeatureSnapshot>,
        with_draft: bool,
    ) -> Result<Bytes, EncodeError> {
        let mut answers = self.answers.load_full();
        let apis = self.apis.load_full();
        if !Arc::ptr_eq(&answers.snapshot, &snapshot) || !Arc::ptr_eq(&answers.apis, &apis) {
            let fresh = Arc::new(build(apis, snapshot)?);
            self.answers.store(Arc::clone(&fresh));
            answers = fresh;
        }
        Ok(answers.bodies[version as usize][usize::from(with_draft && self.draft_tags)].clone())
    }
}

fn build(apis: Arc<Vec<ApiRange>>, snapshot: Arc<FeatureSnapshot>) -> Result<Answers, EncodeError> {
    let mut bodies = Vec::new();
    for version in 0..=MAX_VERSION {
        bodies.push([
            success_body(version, &apis, &snapshot, false)?,
            success_body(version, &apis, &snapshot, true)?,
        ]);
    }
    Ok(Answers {
        snapshot,
        apis,
        bodies,
    })
}

/// The API table in front of a cluster: what every live broker serves, narrowed
/// to the versions whose broker addresses kshim can rewrite and to the versions of
/// the requests it checks that it can read, plus the APIs kshim
/// answers itself. Versions whose responses name brokers (or controllers) kshim
/// cannot rewrite are left out (`forward::forwardable_versions`). Keys the newest
/// Kafka release kshim has data for does not define are left out, kshim cannot
/// tell whether their responses name brokers, unless `unknown` says to forward
/// them.
pub fn proxy_apis(upstream: &[ApiRange], unknown: UnknownApiKeys) -> Vec<ApiRange> {
    let release = crate::releases::newest();
    let mut out: Vec<ApiRange> = upstream
        .iter()
        .filter_map(|r| {
            if OWN_APIS.iter().any(|o| o.api_key == r.api_key) {
                return None;
            }
            if release.api(r.api_key).is_none() {
                return (unknown == UnknownApiKeys::Forward).then_some(*r);
            }
            let (min, max) = super::forward::forwardable_versions(r.api_key, r.min, r.max)?;
            let r = &ApiRange {
                api_key: r.api_key,
                min,
                max,
            };
            match ApiKey::try_from(r.api_key)
                .ok()
                .and_then(super::checked_versions)
            {
                None => Some(*r),
                Some((min, max)) => {
                    let (min, max) = (r.min.max(min), r.max.min(max));
                    (min <= max).then_some(ApiRange {
                        api_key: r.api_key,
                        min,
                        max,
                    })
                }
            }
        })
        .collect();
    out.extend(OWN_APIS);
    out.sort_by_key(|r| r.api_key);
    out
}

/// What `proxy_apis` took from the brokers' table, one line per API, for the
/// log: an operator must be able to see why a client cannot use a version its
/// brokers offer.
pub fn narrowings(upstream: &[ApiRange], offered: &[ApiRange]) -> Vec<String> {
    let release = crate::releases::newest();
    let mut out = Vec::new();
    for r in upstream {
        if OWN_APIS.iter().any(|o| o.api_key == r.api_key) {
            continue;
        }
        let name = release
            .api(r.api_key)
            .map_or_else(|| format!("API key {}", r.api_key), |a| a.name.clone());
        let kept = offered.iter().find(|o| o.api_key == r.api_key);
        let why = if release.api(r.api_key).is_none() {
            format!(
                "no Kafka release kshim has data for (up to {}) defines it; upstream.unknown_api_keys = \"forward\" offers it",
                release.release
            )
        } else {
            let first_refused = (r.min..=r.max)
                .find(|&v| kept.is_none_or(|k| !(k.min..=k.max).contains(&v)))
                .unwrap_or(r.max);
            match super::forward::response_handling(r.api_key, first_refused) {
                Err(why) => why,
                Ok(_) => format!("kshim checks only the versions it can read of {name}"),
            }
        };
        match kept {
            None => out.push(format!(
                "{name} (v{}-v{}) is not offered to clients: {why}",
                r.min, r.max
            )),
            Some(k) if (k.min, k.max) != (r.min, r.max) => out.push(format!(
                "{name} is offered at v{}-v{} of the brokers' v{}-v{}: {why}",
                k.min, k.max, r.min, r.max
            )),
            Some(_) => {}
        }
    }
    out
}

/// The first librdkafka release that skips unknown tagged fields correctly
/// (confluentinc/librdkafka#4278): older ones skip one byte too few per tag and
/// then misread the rest of the response, so they get only the fields a real
/// broker sends.
const FIRST_TAG_SAFE_LIBRDKAFKA: (u32, u32, u32) = (2, 2, 0);

/// Whether a client may be sent the draft tags 10000-10002.
pub fn tolerates_draft_tags(software: Option<&ClientSoftware>) -> bool {
    match software.and_then(librdkafka_version) {
        Some(version) => version_triple(version) >= FIRST_TAG_SAFE_LIBRDKAFKA,
        None => true,
    }
}

/// The librdkafka version inside a client's software fields: librdkafka itself
/// ("librdkafka" / "2.0.2") or a binding that names it in its version
/// ("confluent-kafka-python" / "2.16.1-rdkafka-2.16.0", "...-librdkafka-v2.3.0").
fn librdkafka_version(software: &ClientSoftware) -> Option<&str> {
    if software.name == "librdkafka" {
        return Some(software.version.trim_start_matches('v'));
    }
    let (_, tail) = software.version.rsplit_once("rdkafka-")?;
    Some(tail.trim_start_matches('v'))
}

/// "2.0.2" -> (2, 0, 2); missing or non-numeric parts count as 0.
fn version_triple(version: &str) -> (u32, u32, u32) {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

/// An ApiVersions request as read.
pub enum Read {
    /// A version kshim does not know, or client software fields that fail
    /// Kafka's pattern: answered with an error, not with features.
    Refused(Bytes),
    Request(Request),
}

pub struct Request {
    pub version: i16,
    pub correlation_id: i32,
    /// The client software fields (v3+).
    pub software: Option<ClientSoftware>,
    /// The node the client means to reach (v5+, both fields given).
    pub intended: Option<IntendedNode>,
}

/// Reads an ApiVersions request.
pub fn read(request: Incoming) -> Result<Read, HandlerError> {
    let api = ApiKey::ApiVersions;
    let peek = request.header;
    if !(0..=MAX_VERSION).contains(&peek.api_version) {
        return Ok(Read::Refused(frame_with_body(
            api,
            0,
            peek.correlation_id,
            &unsupported_version_body(),
        )));
    }
    let version = peek.api_version;
    let request = request
        .decode_header()
        .map_err(HandlerError::malformed(api, version))?;
    let ApiVersionsRequestBody { software, intended } =
        parse_request(version, request.body()).map_err(HandlerError::malformed(api, version))?;
    // KIP-1242: ClusterId and NodeId come together or not at all.
    let intended = match intended {
        Some(i) if i.cluster_id.is_some() != (i.node_id != -1) => {
            tracing::debug!(cluster_id = ?i.cluster_id, node_id = i.node_id, "ApiVersions v5 naming only one of ClusterId and NodeId");
            return Ok(Read::Refused(frame_with_body(
                api,
                version,
                peek.correlation_id,
                &invalid_request_body(version)?,
            )));
        }
        Some(i) if i.cluster_id.is_some() => Some(i),
        _ => None,
    };
    if let Some(s) = &software {
        if !is_valid_client_software(s) {
            tracing::debug!(name = %s.name, version = %s.version, "ApiVersions with invalid client software fields");
            return Ok(Read::Refused(frame_with_body(
                api,
                version,
                peek.correlation_id,
                &invalid_request_body(version)?,
            )));
        }
    }
    Ok(Read::Request(Request {
        version,
        correlation_id: peek.correlation_id,
        software,
        intended,
    }))
}

/// KIP-1242: a v5 request that names the node it means to reach, sent to
/// another cluster or node, gets REBOOTSTRAP_REQUIRED and nothing else, as a
/// Kafka 4.4 broker answers. kshim's identity is the cluster id it hands out in
/// Metadata (its own standalone, the brokers' in front of a cluster) and the
/// node the listener serves; the bootstrap listener of a proxy serves no one
/// node, so only the cluster id is checked there, and an upstream not reached
/// yet leaves nothing to check.
pub fn refused_as_elsewhere(
    ctx: &Context,
    route: Route,
    request: &Request,
) -> Result<Option<Bytes>, HandlerError> {
    let Some(intended) = &request.intended else {
        return Ok(None);
    };
    let (cluster_id, node_id) = match &ctx.upstream {
        None => (
            Some(ctx.controller.cluster_id().to_owned()),
            Some(ctx.node.node_id),
        ),
        Some(upstream) => (
            upstream.view().cluster_id.clone(),
            match route {
                Route::Node(id) => Some(id),
                Route::Bootstrap => None,
            },
        ),
    };
    let other_cluster =
        cluster_id.is_some_and(|c| intended.cluster_id.as_deref() != Some(c.as_str()));
    let other_node = node_id.is_some_and(|n| n != intended.node_id);
    if !(other_cluster || other_node) {
        return Ok(None);
    }
    tracing::debug!(cluster_id = ?intended.cluster_id, node_id = intended.node_id, "ApiVersions v5 meant for another cluster or node: REBOOTSTRAP_REQUIRED");
    let body = error_body(request.version, Refusal::OtherNode.code())?;
    Ok(Some(frame_with_body(
        ApiKey::ApiVersions,
        request.version,
        request.correlation_id,
        &body,
    )))
}

/// The answer to `request`, and the feature view it carries; shaped by the
/// discovery lab's scenarios when `shape` is given (built afresh then: such
/// answers are not cached).
pub fn answer(
    ctx: &Context,
    request: &Request,
    shape: Option<&Shape<'_>>,
) -> Result<(Bytes, ServedRecord), HandlerError> {
    let version = request.version;
    let snapshot = ctx.controller.snapshot();
    let draft = tolerates_draft_tags(request.software.as_ref());
    let (body, served) = match shape {
        None => (
            ctx.discovery.body(version, Arc::clone(&snapshot), draft)?,
            ServedRecord::Snapshot { version, snapshot },
        ),
        Some(shape) => {
            let pinned = shape.features;
            let min_zero_filter = pinned.is_none_or(|p| p.min_zero_filter);
            let mut view = features_for_version(version, &snapshot, min_zero_filter);
            if let Some(release) = shape.release {
                // Kafka's own features are the release's; kshim's own stay.
                view.supported.retain(|name, _| !is_kafka_feature(name));
                view.finalized.retain(|name, _| !is_kafka_feature(name));
                view.supported.extend(
                    release
                        .supported
                        .iter()
                        .filter(|(_, (min, _))| version >= 4 || *min > 0 || !min_zero_filter)
                        .map(|(name, range)| (name.clone(), *range)),
                );
                if view.epoch >= 0 {
                    view.finalized.extend(
                        release
                            .levels
                            .iter()
                            .filter(|(_, &l)| l > 0)
                            .map(|(name, &l)| (name.clone(), (l, l))),
                    );
                }
            }
            if let Some(epoch) = pinned.and_then(|p| p.epoch) {
                view.epoch = epoch;
            }
            if let Some(pinned) = pinned {
                if pinned.replace && pinned.levels.is_some() {
                    view.finalized.clear();
                }
                // A level of 0 leaves the feature out, as Kafka does.
                for (name, &level) in pinned.levels.iter().flatten() {
                    match level {
                        0 => view.finalized.remove(name),
                        l => view.finalized.insert(name.clone(), (l, l)),
                    };
                }
            }
            let apis = narrowed(
                &ctx.discovery.apis(),
                &shape.ranges,
                shape.release.is_some(),
            );
            let draft = draft && ctx.discovery.draft_tags;
            let body = body_with_view(version, &apis, &view, draft, &shape.tags)?;
            let served = Served {
                api_versions_version: version,
                epoch: if version >= 3 { view.epoch } else { -1 },
                levels: if version >= 3 {
                    view.finalized
                        .iter()
                        .map(|(n, (_, max))| (n.clone(), *max))
                        .collect()
                } else {
                    Default::default()
                },
                scenarios: shape.names.clone(),
            };
            (body, ServedRecord::Shaped(served))
        }
    };
    Ok((
        frame_with_body(ApiKey::ApiVersions, version, request.correlation_id, &body),
        served,
    ))
}

/// `apis` with the lab's ranges intersected in; an API whose intersection is
/// empty is left out.
/// `apis` narrowed to `ranges`; with `only_listed`, an API `ranges` does not
/// name is left out (a release that lacks it).
fn narrowed(apis: &[ApiRange], ranges: &[(i16, i16, i16)], only_listed: bool) -> Vec<ApiRange> {
    apis.iter()
        .filter_map(|a| match ranges.iter().find(|r| r.0 == a.api_key) {
            None => (!only_listed).then_some(*a),
            Some(&(_, min, max)) => {
                let (min, max) = (a.min.max(min), a.max.min(max));
                (min <= max).then_some(ApiRange {
                    api_key: a.api_key,
                    min,
                    max,
                })
            }
        })
        .collect()
}

/// Answers an ApiVersions request (as a client with no lab scenario gets it).
pub fn handle(ctx: &Context, request: Incoming) -> Result<Bytes, HandlerError> {
    match read(request)? {
        Read::Refused(frame) => Ok(frame),
        Read::Request(request) => match refused_as_elsewhere(ctx, Route::Bootstrap, &request)? {
            Some(frame) => Ok(frame),
            None => answer(ctx, &request, None).map(|(frame, _)| frame),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_apis_offer_every_key_the_newest_release_defines() {
        let range = |api_key: i16, min: i16, max: i16| ApiRange { api_key, min, max };
        // Kafka 4.4's Streams group APIs, UnregisterController, a key no release
        // defines, and Vote, whose v1+ responses name brokers without a rewrite.
        let upstream = [
            range(88, 0, 1),
            range(89, 0, 1),
            range(93, 0, 0),
            range(500, 0, 3),
            range(52, 0, 2),
        ];
        let got = proxy_apis(&upstream, UnknownApiKeys::Hide);
        let find = |k: i16| got.iter().find(|r| r.api_key == k).copied();
        assert_eq!(find(88), Some(range(88, 0, 1)));
        assert_eq!(find(89), Some(range(89, 0, 1)));
        assert_eq!(find(93), Some(range(93, 0, 0)));
        assert_eq!(find(500), None, "a key no release data defines");
        assert_eq!(
            find(52),
            Some(range(52, 0, 0)),
            "capped below the versions naming brokers"
        );
        let forwarded = proxy_apis(&upstream, UnknownApiKeys::Forward);
        assert!(forwarded.contains(&range(500, 0, 3)), "{forwarded:?}");
        // Every narrowing is said, with its reason.
        let said = narrowings(&upstream, &got);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].starts_with("API key 500 (v0-v3) is not offered to clients: no Kafka release"),
            "{said:?}"
        );
        assert!(
            said[1].starts_with("Vote is offered at v0-v0 of the brokers' v0-v2: Vote v1 is not served: its responses name brokers"),
            "{said:?}"
        );
    }

    #[test]
    fn proxy_apis_narrow_rewritten_apis_and_add_kshims_own() {
        let upstream = [
            ApiRange {
                api_key: 0,
                min: 3,
                max: 13,
            },
            ApiRange {
                api_key: 3,
                min: 0,
                max: 14,
            },
            ApiRange {
                api_key: 18,
                min: 0,
                max: 5,
            },
            ApiRange {
                api_key: 19,
                min: 2,
                max: 7,
            },
            ApiRange {
                api_key: 55,
                min: 0,
                max: 2,
            },
            ApiRange {
                api_key: 999,
                min: 0,
                max: 1,
            },
        ];
        let got = proxy_apis(&upstream, UnknownApiKeys::Hide);
        let find = |k: i16| got.iter().find(|r| r.api_key == k).copied();
        assert_eq!(
            find(3),
            Some(ApiRange {
                api_key: 3,
                min: 0,
                max: 13
            })
        );
        assert_eq!(
            find(18),
            Some(ApiRange {
                api_key: 18,
                min: 0,
                max: MAX_VERSION
            })
        );
        assert_eq!(
            find(19),
            Some(ApiRange {
                api_key: 19,
                min: 2,
                max: 7
            })
        );
        assert_eq!(
            find(57),
            Some(ApiRange {
                api_key: 57,
                min: 0,
                max: 2
            })
        );
        assert_eq!(
            find(55),
            Some(ApiRange {
                api_key: 55,
                min: 0,
                max: 1
            })
        );
        assert_eq!(find(999), None);
    }

    fn sw(name: &str, version: &str) -> ClientSoftware {
        ClientSoftware {
            name: name.into(),
            version: version.into(),
        }
    }

    #[test]
    fn old_librdkafka_gets_no_draft_tags() {
        assert!(!tolerates_draft_tags(Some(&sw("librdkafka", "2.0.2"))));
        assert!(!tolerates_draft_tags(Some(&sw("librdkafka", "1.9.2"))));
        assert!(!tolerates_draft_tags(Some(&sw("librdkafka", "2.1.1"))));
        assert!(tolerates_draft_tags(Some(&sw("librdkafka", "2.2.0"))));
        assert!(tolerates_draft_tags(Some(&sw("librdkafka", "2.12.1"))));
        assert!(tolerates_draft_tags(Some(&sw(
            "apache-kafka-java",
            "4.1.1"
        ))));
        assert!(tolerates_draft_tags(Some(&sw(
            "confluent-kafka-python",
            "2.16.1-rdkafka-2.16.0"
        ))));
        assert!(!tolerates_draft_tags(Some(&sw(
            "confluent-kafka-python",
            "1.9.2-rdkafka-1.9.2"
        ))));
        assert!(!tolerates_draft_tags(Some(&sw(
            "karafka",
            "v2.0.0-rdkafka-ruby-v0.12.0-librdkafka-v2.0.2"
        ))));
        assert!(tolerates_draft_tags(None));
    }
}
