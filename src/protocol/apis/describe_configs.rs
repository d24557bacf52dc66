//! DescribeConfigs (key 32): the bounded decoder of the answers the config
//! audit reads (the request is built with kafka-protocol where it is sent).

use crate::protocol::{CodecError, Reader};

/// One config entry of a DescribeConfigs answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

pub type DescribedResource = ((i8, String), i16, Option<String>, Vec<DescribedConfig>);

/// DescribeConfigs response, v1-v4 (flexible from v4).
pub fn decode_describe_configs(
    version: i16,
    body: &[u8],
) -> Result<Vec<DescribedResource>, CodecError> {
    let flexible = version >= 4;
    let string = |r: &mut Reader<'_>, what| r.string(flexible, what).map(str::to_owned);
    let nullable = |r: &mut Reader<'_>, what| -> Result<Option<String>, CodecError> {
        Ok(r.nullable(flexible, what)?.map(str::to_owned))
    };
    let mut r = Reader::new(body);
    r.i32("ThrottleTimeMs")?;
    let n = r.array_len(flexible, 6, "Results")?.unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let code = r.i16("ErrorCode")?;
        let message = nullable(&mut r, "ErrorMessage")?;
        let resource_type = r.i8("ResourceType")?;
        let name = string(&mut r, "ResourceName")?;
        let count = r.array_len(flexible, 6, "Configs")?.unwrap_or(0);
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let config_name = string(&mut r, "Name")?;
            let value = nullable(&mut r, "Value")?;
            r.bool("ReadOnly")?;
            let source = r.i8("ConfigSource")?;
            r.bool("IsSensitive")?;
            let synonyms = r.array_len(flexible, 3, "Synonyms")?.unwrap_or(0);
            for _ in 0..synonyms {
                string(&mut r, "Name")?;
                nullable(&mut r, "Value")?;
                r.i8("Source")?;
                if flexible {
                    r.tagged_fields("DescribeConfigsSynonym")?;
                }
            }
            if version >= 3 {
                r.i8("ConfigType")?;
                nullable(&mut r, "Documentation")?;
            }
            if flexible {
                r.tagged_fields("DescribeConfigsResourceResult")?;
            }
            entries.push(DescribedConfig {
                name: config_name,
                value,
                source,
            });
        }
        if flexible {
            r.tagged_fields("DescribeConfigsResult")?;
        }
        out.push(((resource_type, name), code, message, entries));
    }
    Ok(out)
}
