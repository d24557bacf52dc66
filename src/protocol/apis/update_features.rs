//! UpdateFeatures (key 57): the bounded decoder of its answers, as kshim's own
//! client reads them and as kshim reads the upstream's answer to an update it
//! passes on.

use crate::protocol::{CodecError, Reader};

/// A feature update result as the server reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFeaturesAnswer {
    pub error_code: i16,
    pub error_message: Option<String>,
    /// (feature, code, message); empty for v2 and for failures.
    pub results: Vec<(String, i16, Option<String>)>,
}

/// The top-level error code of an UpdateFeatures answer, every version.
pub fn update_features_error_code(raw: &[u8]) -> Result<i16, CodecError> {
    let mut r = Reader::new(raw);
    r.i32("ThrottleTimeMs")?;
    r.i16("ErrorCode")
}

/// UpdateFeaturesResponse v0-v2 (flexible in every version).
pub fn decode_update_features_response(
    version: i16,
    raw: &[u8],
) -> Result<UpdateFeaturesAnswer, CodecError> {
    let mut r = Reader::new(raw);
    r.i32("ThrottleTimeMs")?;
    let error_code = r.i16("ErrorCode")?;
    let error_message = r
        .compact_nullable_string("ErrorMessage")?
        .map(str::to_owned);
    let mut results = Vec::new();
    if version < 2 {
        let n = r.array_len(true, 4, "Results")?.unwrap_or(0);
        for _ in 0..n {
            let feature = r.string(true, "Feature")?.to_owned();
            let code = r.i16("ErrorCode")?;
            let message = r
                .compact_nullable_string("ErrorMessage")?
                .map(str::to_owned);
            r.tagged_fields("UpdatableFeatureResult")?;
            results.push((feature, code, message));
        }
    }
    r.tagged_fields("UpdateFeaturesResponse")?;
    Ok(UpdateFeaturesAnswer {
        error_code,
        error_message,
        results,
    })
}
