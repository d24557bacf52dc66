//! ApiVersions (key 18) as Kafka 4.1 speaks it, v0-v4: the request's client
//! software fields, the answer with its feature tags, and a decoder for answers
//! (used by the CLI) that reads tags 0-2 and the draft tags 10000-10002 and refuses
//! answers where the two disagree.

use super::draft_tags::DraftFeatures;
use super::errors::WireRefusal;
use super::response::{encode_body, EncodeError};
use super::wire::{CodecError, Reader};
use crate::features::FeatureSnapshot;
use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use regex::Regex;
use std::collections::BTreeMap;
use std::sync::OnceLock;

pub const MAX_VERSION: i16 = 5;

/// The newest version whose answer layout kshim's Kafka library encodes. v5
/// answers are laid out as v4 ones (KIP-1242 changed only the request).
const NEWEST_ANSWER_LAYOUT: i16 = 4;

/// The layout version of an answer to a request of `version`.
pub fn answer_layout(version: i16) -> i16 {
    version.min(NEWEST_ANSWER_LAYOUT)
}

/// The client software fields of a v3+ request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientSoftware {
    pub name: String,
    pub version: String,
}

/// What a v5 request says of the node the client means to reach (KIP-1242).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IntendedNode {
    /// Null when the client does not say.
    pub cluster_id: Option<String>,
    /// -1 when the client does not say.
    pub node_id: i32,
}

/// The body of an ApiVersions request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsRequestBody {
    /// The client software fields (v3+).
    pub software: Option<ClientSoftware>,
    /// v5+.
    pub intended: Option<IntendedNode>,
}

/// Reads the body of an ApiVersions request of a known version. v0-v2 bodies are
/// empty.
pub fn parse_request(version: i16, body: &[u8]) -> Result<ApiVersionsRequestBody, CodecError> {
    if version < 3 {
        return Ok(ApiVersionsRequestBody::default());
    }
    let mut r = Reader::new(body);
    let name = r.string(true, "ClientSoftwareName")?.to_owned();
    let software_version = r.string(true, "ClientSoftwareVersion")?.to_owned();
    let intended = if version >= 5 {
        Some(IntendedNode {
            cluster_id: r.compact_nullable_string("ClusterId")?.map(str::to_owned),
            node_id: r.i32("NodeId")?,
        })
    } else {
        None
    };
    r.tagged_fields("ApiVersionsRequest")?;
    Ok(ApiVersionsRequestBody {
        software: Some(ClientSoftware {
            name,
            version: software_version,
        }),
        intended,
    })
}

/// Kafka's ApiVersionsRequest.isValid: both fields must match
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
pub fn is_valid_client_software(software: &ClientSoftware) -> bool {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        Regex::new(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
            .expect("the pattern is a constant")
    });
    pattern.is_match(&software.name) && pattern.is_match(&software.version)
}

/// The body of the answer to a request of a version kshim does not know: always
/// the v0 layout, UNSUPPORTED_VERSION, and only ApiVersions' own range, so that the
/// client can retry with a version both sides speak.
pub fn unsupported_version_body() -> Bytes {
    unsupported_version_body_upto(MAX_VERSION)
}

/// The same, from a broker whose highest ApiVersions version is `max`.
pub fn unsupported_version_body_upto(max: i16) -> Bytes {
    let body = ApiVersionsResponse::default()
        .with_error_code(WireRefusal::UnsupportedVersion.code())
        .with_api_keys(vec![ApiVersion::default()
            .with_api_key(ApiKey::ApiVersions as i16)
            .with_min_version(0)
            .with_max_version(max)]);
    encode_body(ApiKey::ApiVersions, 0, &body).unwrap_or_default()
}

/// The body of the INVALID_REQUEST answer to a v3+ request whose client software
/// fields fail the pattern, or a v5 request that names only one of ClusterId and
/// NodeId: no API keys, no features.
pub fn invalid_request_body(version: i16) -> Result<Bytes, EncodeError> {
    error_body(version, WireRefusal::Malformed.code())
}

/// An answer that carries only `code`: no API keys, no features, as a Kafka
/// broker answers its refusals.
pub fn error_body(version: i16, code: i16) -> Result<Bytes, EncodeError> {
    let body = ApiVersionsResponse::default().with_error_code(code);
    encode_body(ApiKey::ApiVersions, answer_layout(version), &body)
}

/// One API key's version range as advertised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub api_key: i16,
    pub min: i16,
    pub max: i16,
}

/// The body of a successful answer at `version`, carrying `snapshot` in tags 0-2
/// and, when `draft_tags` is set, in tags 10000-10002 too.
pub fn success_body(
    version: i16,
    apis: &[ApiRange],
    snapshot: &FeatureSnapshot,
    draft_tags: bool,
) -> Result<Bytes, EncodeError> {
    let view = features_for_version(version, snapshot, true);
    body_with_view(version, apis, &view, draft_tags, &BTreeMap::new())
}

/// The body of a successful answer at `version` carrying `view` (v3+), in the
/// draft tags too when `draft_tags` is set, and the tagged fields `extra`.
pub fn body_with_view(
    version: i16,
    apis: &[ApiRange],
    view: &DraftFeatures,
    draft_tags: bool,
    extra: &BTreeMap<i32, Bytes>,
) -> Result<Bytes, EncodeError> {
    let mut body = ApiVersionsResponse::default().with_api_keys(
        apis.iter()
            .map(|a| {
                ApiVersion::default()
                    .with_api_key(a.api_key)
                    .with_min_version(a.min)
                    .with_max_version(a.max)
            })
            .collect(),
    );
    if version >= 3 {
        body.supported_features = view
            .supported
            .iter()
            .map(|(name, &(min, max))| {
                SupportedFeatureKey::default()
                    .with_name(StrBytes::from_string(name.clone()))
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect();
        body.finalized_features_epoch = view.epoch;
        body.finalized_features = view
            .finalized
            .iter()
            .map(|(name, &(min, max))| {
                FinalizedFeatureKey::default()
                    .with_name(StrBytes::from_string(name.clone()))
                    .with_min_version_level(min)
                    .with_max_version_level(max)
            })
            .collect();
        if draft_tags {
            body.unknown_tagged_fields = view.encode();
        }
        for (tag, value) in extra {
            body.unknown_tagged_fields.insert(*tag, value.clone());
        }
    }
    encode_body(ApiKey::ApiVersions, answer_layout(version), &body)
}

/// The feature view a v3+ answer of `version` carries: finalized levels as
/// min = max = level, disabled features left out, and, below v4 with
/// `min_zero_filter`, supported features whose min is 0 left out (older
/// clients refuse a min of 0; KAFKA-17011).
pub fn features_for_version(
    version: i16,
    snapshot: &FeatureSnapshot,
    min_zero_filter: bool,
) -> DraftFeatures {
    let known = !snapshot.cluster_unknown;
    DraftFeatures {
        supported: snapshot
            .supported
            .iter()
            .filter(|(_, r)| version >= 4 || r.min > 0 || !min_zero_filter)
            .map(|(name, r)| (name.clone(), (r.min, r.max)))
            .collect(),
        epoch: if known { snapshot.finalized.epoch } else { -1 },
        finalized: snapshot
            .finalized
            .levels
            .iter()
            .filter(|(_, &level)| known && level > 0)
            .map(|(name, &level)| (name.clone(), (level, level)))
            .collect(),
    }
}

/// An ApiVersions answer as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedApiVersions {
    pub error_code: i16,
    pub apis: Vec<ApiRange>,
    pub throttle_time_ms: i32,
    /// Tags 0-2. Epoch -1 when absent.
    pub features: DraftFeatures,
    /// Tags 10000-10002, when the server sent them.
    pub draft: Option<DraftFeatures>,
    pub zk_migration_ready: bool,
}

/// Decodes an answer body (after the v0 response header) of `version`.
pub fn decode_response(version: i16, body: &[u8]) -> Result<DecodedApiVersions, CodecError> {
    let flexible = version >= 3;
    let mut r = Reader::new(body);
    let error_code = r.i16("ErrorCode")?;
    let n = r.array_len(flexible, 6, "ApiKeys")?.unwrap_or(0);
    let mut apis = Vec::with_capacity(n);
    for _ in 0..n {
        let api_key = r.i16("ApiKey")?;
        let min = r.i16("MinVersion")?;
        let max = r.i16("MaxVersion")?;
        if flexible {
            r.tagged_fields("ApiVersion")?;
        }
        apis.push(ApiRange { api_key, min, max });
    }
    let throttle_time_ms = if version >= 1 {
        r.i32("ThrottleTimeMs")?
    } else {
        0
    };
    let mut features = DraftFeatures {
        epoch: -1,
        ..Default::default()
    };
    let mut zk_migration_ready = false;
    let mut draft = None;
    if flexible {
        let tags = r.tagged_fields("ApiVersionsResponse")?;
        if let Some(raw) = tags.get(&0) {
            features.supported = decode_levels(raw, "SupportedFeatures")?;
        }
        if let Some(raw) = tags.get(&1) {
            let mut t = Reader::new(raw);
            features.epoch = t.i64("FinalizedFeaturesEpoch")?;
        }
        if let Some(raw) = tags.get(&2) {
            // FinalizedFeatureKey is {Name, MaxVersionLevel, MinVersionLevel}.
            features.finalized = decode_levels(raw, "FinalizedFeatures")?
                .into_iter()
                .map(|(name, (max, min))| (name, (min, max)))
                .collect();
        }
        if let Some(raw) = tags.get(&3) {
            zk_migration_ready = Reader::new(raw).bool("ZkMigrationReady")?;
        }
        draft = DraftFeatures::decode(&tags)?;
    }
    if let Some(d) = &draft {
        check_agreement(&features, d)?;
    }
    Ok(DecodedApiVersions {
        error_code,
        apis,
        throttle_time_ms,
        features,
        draft,
        zk_migration_ready,
    })
}

/// Entries of {Name, int16, int16, tags}, in the order they appear on the wire.
fn decode_levels(
    raw: &[u8],
    what: &'static str,
) -> Result<BTreeMap<String, (i16, i16)>, CodecError> {
    let mut r = Reader::new(raw);
    let n = r.array_len(true, 6, what)?.unwrap_or(0);
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let name = r.string(true, what)?.to_owned();
        let a = r.i16(what)?;
        let b = r.i16(what)?;
        r.tagged_fields(what)?;
        if out.insert(name.clone(), (a, b)).is_some() {
            return Err(CodecError::Invalid(format!(
                "feature {name} listed twice in {what}"
            )));
        }
    }
    r.expect_end(what)?;
    Ok(out)
}

/// Tags 0-2 and 10000-10002 must describe the same snapshot.
fn check_agreement(shipped: &DraftFeatures, draft: &DraftFeatures) -> Result<(), CodecError> {
    let mut problems = Vec::new();
    if shipped.supported != draft.supported {
        problems.push(format!(
            "supported features {:?} vs {:?}",
            shipped.supported, draft.supported
        ));
    }
    if shipped.epoch != draft.epoch {
        problems.push(format!("epoch {} vs {}", shipped.epoch, draft.epoch));
    }
    if shipped.finalized != draft.finalized {
        problems.push(format!(
            "finalized features {:?} vs {:?}",
            shipped.finalized, draft.finalized
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CodecError::Invalid(format!(
            "ApiVersions tags 0-2 and draft tags 10000-10002 disagree: {}",
            problems.join("; ")
        )))
    }
}

/// The ErrorCode an ApiVersions answer starts with, in every version: an
/// UNSUPPORTED_VERSION answer always comes in the v0 layout.
pub fn response_error_code(body: &[u8]) -> Result<i16, CodecError> {
    Reader::new(body).i16("ErrorCode")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{FinalizedFeatures, SupportedRange};

    fn snapshot() -> FeatureSnapshot {
        FeatureSnapshot {
            supported: [
                ("group.version".to_owned(), SupportedRange::new(0, 1)),
                ("metadata.version".to_owned(), SupportedRange::new(7, 27)),
            ]
            .into(),
            finalized: FinalizedFeatures {
                epoch: 9,
                levels: [
                    ("metadata.version".to_owned(), 27),
                    ("group.version".to_owned(), 0),
                ]
                .into(),
            },
            cluster_unknown: false,
        }
    }

    const APIS: &[ApiRange] = &[ApiRange {
        api_key: 18,
        min: 0,
        max: 4,
    }];

    #[test]
    fn v4_lists_min_zero_features_and_v3_leaves_them_out() {
        for (version, expect_group) in [(3, false), (4, true)] {
            let body = success_body(version, APIS, &snapshot(), true).unwrap();
            let decoded = decode_response(version, &body).unwrap();
            assert_eq!(
                decoded.features.supported.contains_key("group.version"),
                expect_group
            );
            assert_eq!(
                decoded.features.finalized,
                [("metadata.version".to_owned(), (27, 27))].into()
            );
            assert_eq!(decoded.features.epoch, 9);
            assert_eq!(decoded.draft.as_ref(), Some(&decoded.features));
        }
    }

    #[test]
    fn a_cluster_not_seen_yet_has_epoch_minus_one_and_nothing_finalized() {
        let unknown = FeatureSnapshot {
            cluster_unknown: true,
            ..snapshot()
        };
        let body = success_body(4, APIS, &unknown, true).unwrap();
        let decoded = decode_response(4, &body).unwrap();
        assert_eq!(decoded.features.epoch, -1);
        assert!(decoded.features.finalized.is_empty());
        assert_eq!(
            decoded.features.supported.len(),
            2,
            "what kshim supports is known"
        );
    }

    #[test]
    fn draft_tags_can_be_left_out() {
        let body = success_body(4, APIS, &snapshot(), false).unwrap();
        assert_eq!(decode_response(4, &body).unwrap().draft, None);
    }

    #[test]
    fn older_versions_carry_no_features() {
        for version in 0..3 {
            let body = success_body(version, APIS, &snapshot(), true).unwrap();
            let decoded = decode_response(version, &body).unwrap();
            assert_eq!(decoded.apis, APIS);
            assert_eq!(decoded.features.epoch, -1);
        }
    }

    #[test]
    fn disagreeing_tags_are_an_error() {
        let mut body = ApiVersionsResponse::default();
        body.finalized_features_epoch = 3;
        body.unknown_tagged_fields = DraftFeatures {
            epoch: 4,
            ..Default::default()
        }
        .encode();
        let raw = encode_body(ApiKey::ApiVersions, 3, &body).unwrap();
        let err = decode_response(3, &raw).unwrap_err();
        assert!(err.to_string().contains("disagree"), "{err}");
    }

    #[test]
    fn unsupported_version_answer_is_v0_with_only_api_versions() {
        let decoded = decode_response(0, &unsupported_version_body()).unwrap();
        assert_eq!(decoded.error_code, WireRefusal::UnsupportedVersion.code());
        assert_eq!(
            decoded.apis,
            vec![ApiRange {
                api_key: 18,
                min: 0,
                max: 5
            }]
        );
    }

    #[test]
    fn v5_requests_name_the_node_they_mean_to_reach() {
        let mut body = Vec::new();
        crate::protocol::wire::put_compact_string(&mut body, "app");
        crate::protocol::wire::put_compact_string(&mut body, "1");
        crate::protocol::wire::put_compact_string(&mut body, "cluster-a");
        body.extend_from_slice(&3i32.to_be_bytes());
        body.push(0);
        let parsed = parse_request(5, &body).unwrap();
        assert_eq!(
            parsed.intended,
            Some(IntendedNode {
                cluster_id: Some("cluster-a".into()),
                node_id: 3
            })
        );
        // The same bytes at v4 end after the software fields.
        assert!(parse_request(4, &body).is_err());
        assert!(parse_request(5, &body[..body.len() - 3]).is_err());
    }

    #[test]
    fn client_software_pattern() {
        let ok = |n: &str, v: &str| {
            is_valid_client_software(&ClientSoftware {
                name: n.into(),
                version: v.into(),
            })
        };
        assert!(ok("apache-kafka-java", "4.1.1"));
        assert!(ok("librdkafka", "2.12.0"));
        assert!(!ok("", "1"));
        assert!(!ok("bad name", "1"));
        assert!(!ok("x", "1.0-"));
        assert!(!ok("-x", "1"));
    }
}
