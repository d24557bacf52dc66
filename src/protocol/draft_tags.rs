//! The KIP-584 draft layout of the feature fields in ApiVersionsResponse v3+:
//! tag 10000 SupportedFeatures, 10001 FinalizedFeaturesEpoch, 10002 FinalizedFeatures,
//! with int64 versions. Shipped Kafka uses tags 0-2 with int16 levels; kshim emits
//! both and reads both (see DESIGN.md §1).

use super::wire::{put_compact_string, put_uvarint, CodecError, Reader};
use bytes::Bytes;
use std::collections::BTreeMap;

pub const TAG_SUPPORTED_FEATURES: i32 = 10000;
pub const TAG_FINALIZED_EPOCH: i32 = 10001;
pub const TAG_FINALIZED_FEATURES: i32 = 10002;

/// The feature view as the draft tags carry it, narrowed to Kafka's int16 levels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftFeatures {
    /// name -> (min, max)
    pub supported: BTreeMap<String, (i16, i16)>,
    /// -1 when tag 10001 is absent, as for tag 1.
    pub epoch: i64,
    /// name -> (min level, max level)
    pub finalized: BTreeMap<String, (i16, i16)>,
}

impl DraftFeatures {
    /// The KIP's describe document: `status`, `supported_features` (name →
    /// {min_version, max_version}), `finalized_features` ({epoch, name →
    /// {min_version_level, max_version_level}}), and the `host` and `port` that
    /// answered.
    pub fn describe_document(
        &self,
        status: &str,
        host: &str,
        port: i32,
    ) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::{json, Map, Value};
        let supported: Map<String, Value> = self
            .supported
            .iter()
            .map(|(n, &(min, max))| (n.clone(), json!({"min_version": min, "max_version": max})))
            .collect();
        let mut finalized = Map::new();
        finalized.insert("epoch".into(), json!(self.epoch));
        for (n, &(min, max)) in &self.finalized {
            finalized.insert(
                n.clone(),
                json!({"min_version_level": min, "max_version_level": max}),
            );
        }
        let mut doc = Map::new();
        doc.insert("status".into(), json!(status));
        doc.insert("supported_features".into(), Value::Object(supported));
        doc.insert("finalized_features".into(), Value::Object(finalized));
        doc.insert("host".into(), json!(host));
        doc.insert("port".into(), json!(port));
        doc
    }

    /// The tagged fields to add to a response. Fields at their default (empty list,
    /// epoch -1) are left out, as Kafka does for tags 0-2.
    pub fn encode(&self) -> BTreeMap<i32, Bytes> {
        let mut tags = BTreeMap::new();
        if !self.supported.is_empty() {
            tags.insert(
                TAG_SUPPORTED_FEATURES,
                encode_ranges(&self.supported, false),
            );
        }
        if self.epoch != -1 {
            tags.insert(
                TAG_FINALIZED_EPOCH,
                Bytes::copy_from_slice(&self.epoch.to_be_bytes()),
            );
        }
        if !self.finalized.is_empty() {
            tags.insert(TAG_FINALIZED_FEATURES, encode_ranges(&self.finalized, true));
        }
        tags
    }

    /// Reads the draft tags out of a response's tagged fields; `None` when none of
    /// them is present.
    pub fn decode(tags: &BTreeMap<u32, Bytes>) -> Result<Option<DraftFeatures>, CodecError> {
        let tag = |t: i32| u32::try_from(t).ok().and_then(|t| tags.get(&t));
        let supported = tag(TAG_SUPPORTED_FEATURES);
        let epoch = tag(TAG_FINALIZED_EPOCH);
        let finalized = tag(TAG_FINALIZED_FEATURES);
        if supported.is_none() && epoch.is_none() && finalized.is_none() {
            return Ok(None);
        }
        let mut out = DraftFeatures {
            epoch: -1,
            ..Default::default()
        };
        if let Some(raw) = supported {
            out.supported = decode_ranges(raw, false)?;
        }
        if let Some(raw) = epoch {
            let mut r = Reader::new(raw);
            out.epoch = r.i64("draft FinalizedFeaturesEpoch")?;
            r.expect_end("draft FinalizedFeaturesEpoch")?;
        }
        if let Some(raw) = finalized {
            out.finalized = decode_ranges(raw, true)?;
        }
        Ok(Some(out))
    }
}

/// Supported entries are {Name, MinVersion, MaxVersion}; finalized entries are
/// {Name, MaxVersionLevel, MinVersionLevel}: the draft orders them differently.
fn encode_ranges(ranges: &BTreeMap<String, (i16, i16)>, max_first: bool) -> Bytes {
    let mut out = Vec::new();
    put_uvarint(&mut out, ranges.len() as u32 + 1);
    for (name, &(min, max)) in ranges {
        put_compact_string(&mut out, name);
        let (a, b) = if max_first { (max, min) } else { (min, max) };
        out.extend_from_slice(&i64::from(a).to_be_bytes());
        out.extend_from_slice(&i64::from(b).to_be_bytes());
        out.push(0);
    }
    Bytes::from(out)
}

fn decode_ranges(raw: &[u8], max_first: bool) -> Result<BTreeMap<String, (i16, i16)>, CodecError> {
    const WHAT: &str = "draft feature list";
    let mut r = Reader::new(raw);
    let n = r.array_len(true, 18, WHAT)?.unwrap_or(0);
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let name = r.string(true, "draft feature name")?.to_owned();
        let a = narrow(r.i64(WHAT)?, &name)?;
        let b = narrow(r.i64(WHAT)?, &name)?;
        r.tagged_fields(WHAT)?;
        let (min, max) = if max_first { (b, a) } else { (a, b) };
        if out.insert(name.clone(), (min, max)).is_some() {
            return Err(CodecError::Invalid(format!(
                "feature {name} listed twice in a draft tag"
            )));
        }
    }
    r.expect_end(WHAT)?;
    Ok(out)
}

fn narrow(v: i64, name: &str) -> Result<i16, CodecError> {
    i16::try_from(v).map_err(|_| {
        CodecError::Invalid(format!(
            "feature {name}: version {v} in a draft tag is outside Kafka's int16 range"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DraftFeatures {
        DraftFeatures {
            supported: [
                ("group.version".to_owned(), (0, 1)),
                ("metadata.version".to_owned(), (7, 27)),
            ]
            .into(),
            epoch: 42,
            finalized: [("metadata.version".to_owned(), (27, 27))].into(),
        }
    }

    #[test]
    fn encode_then_decode_is_identity() {
        let d = sample();
        let tags = d.encode().into_iter().map(|(t, v)| (t as u32, v)).collect();
        assert_eq!(DraftFeatures::decode(&tags).unwrap(), Some(d));
    }

    #[test]
    fn defaults_are_left_out() {
        let d = DraftFeatures {
            epoch: -1,
            ..Default::default()
        };
        assert!(d.encode().is_empty());
        assert_eq!(DraftFeatures::decode(&BTreeMap::new()).unwrap(), None);
    }

    #[test]
    fn finalized_entries_put_max_before_min() {
        let d = DraftFeatures {
            epoch: -1,
            finalized: [("f".to_owned(), (1, 3))].into(),
            ..Default::default()
        };
        let raw = &d.encode()[&TAG_FINALIZED_FEATURES];
        // count+1, name len+1, 'f', max (8 bytes), min (8 bytes), tags
        assert_eq!(raw[..3], [2, 2, b'f']);
        assert_eq!(raw[3..11], 3i64.to_be_bytes());
        assert_eq!(raw[11..19], 1i64.to_be_bytes());
    }

    #[test]
    fn levels_outside_int16_are_refused() {
        let mut raw = vec![2u8];
        put_compact_string(&mut raw, "f");
        raw.extend_from_slice(&1i64.to_be_bytes());
        raw.extend_from_slice(&40_000i64.to_be_bytes());
        raw.push(0);
        let tags = [(TAG_SUPPORTED_FEATURES as u32, Bytes::from(raw))].into();
        let err = DraftFeatures::decode(&tags).unwrap_err();
        assert!(
            err.to_string().contains("outside Kafka's int16 range"),
            "{err}"
        );
    }
}
