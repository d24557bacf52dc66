//! The records of the state topic: what they mean and how they are written.
//!
//! Every key starts with the kshim cluster's id (`<id>/...`), so that two kshim
//! clusters sharing one topic never read each other's state. After the id:
//!
//! | key | value (JSON, each with `"version"`) | tombstone |
//! |---|---|---|
//! | `features` | kshim-owned levels and their epoch, one record per applied change | never |
//! | `config-<key>` | `{"version":0,"value":<raw value>}` (the dynamic-config format) | key removed |
//! | `commit-config` | `{"version":0,"config-keys":[every active key]}` | never |
//! | `instance-<id>` | a registration: supported ranges, listeners, version, status | instance stopped |
//!
//! A record this version cannot read (another `version`, another key) is
//! reported and skipped, never applied in part.

use crate::features::{SupportedFeatures, SupportedRange};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub const FEATURES_VERSION: i32 = 0;
pub const CONFIG_VERSION: i32 = 0;
pub const COMMIT_VERSION: i32 = 0;
pub const INSTANCE_VERSION: i32 = 0;

/// One applied change of the shared feature state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedFeatures {
    pub version: i32,
    /// The epoch every instance serves with these levels.
    pub epoch: i64,
    /// kshim-owned finalized levels (level 0 features are not listed).
    pub levels: BTreeMap<String, i16>,
    /// The upstream's finalized levels this epoch was cut for, so that an
    /// instance knows whether a change upstream has been given an epoch yet.
    #[serde(default)]
    pub upstream_levels: BTreeMap<String, i16>,
    /// The instance that wrote it.
    pub writer: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigValue {
    version: i32,
    value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitMarker {
    version: i32,
    #[serde(rename = "config-keys")]
    config_keys: Vec<String>,
}

/// What an instance tells the others about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub version: i32,
    /// Supported feature ranges: name → [min, max].
    pub supported: BTreeMap<String, [i16; 2]>,
    /// Where clients reach it (its bootstrap listener).
    pub listeners: Vec<String>,
    pub kshim_version: String,
    pub status: InstanceStatus,
}

/// How far an instance has come, as it last reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceStatus {
    /// The next state-topic offset it will apply.
    pub applied_offset: i64,
    /// The epoch it serves.
    pub epoch: i64,
    /// The offset of the config commit it applied last (-1: none).
    pub config_version: i64,
    /// Why the last config commit could not be applied here, if it could not.
    #[serde(default)]
    pub apply_error: Option<String>,
    pub caught_up: bool,
}

impl Registration {
    pub fn supported_features(&self) -> SupportedFeatures {
        self.supported
            .iter()
            .map(|(name, [min, max])| (name.clone(), SupportedRange::new(*min, *max)))
            .collect()
    }

    pub fn ranges_of(supported: &SupportedFeatures) -> BTreeMap<String, [i16; 2]> {
        supported
            .iter()
            .map(|(name, r)| (name.clone(), [r.min, r.max]))
            .collect()
    }
}

/// A record of this kshim cluster, read.
#[derive(Debug, Clone, PartialEq)]
pub enum StateRecord {
    Features(SharedFeatures),
    /// `None`: the override was removed.
    Config {
        key: String,
        value: Option<Value>,
    },
    /// Every override key active after a change.
    ConfigCommit {
        keys: Vec<String>,
    },
    /// `None`: the instance stopped.
    Instance {
        id: String,
        registration: Option<Registration>,
    },
}

/// What reading one record gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    Record(StateRecord),
    /// Another kshim cluster's record.
    Foreign,
    /// A record of ours that this version cannot read.
    Unreadable(String),
}

/// The keys and values of one kshim cluster.
#[derive(Debug, Clone)]
pub struct Codec {
    prefix: String,
}

const FEATURES: &str = "features";
const CONFIG: &str = "config-";
const COMMIT: &str = "commit-config";
const INSTANCE: &str = "instance-";

fn json<T: Serialize>(value: &T) -> Bytes {
    // These types hold strings, numbers and JSON values only: they always
    // serialize.
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

impl Codec {
    pub fn new(cluster_id: &str) -> Codec {
        Codec {
            prefix: format!("{cluster_id}/"),
        }
    }

    fn key(&self, rest: &str) -> Bytes {
        Bytes::from(format!("{}{rest}", self.prefix))
    }

    pub fn features(&self, f: &SharedFeatures) -> (Bytes, Option<Bytes>) {
        (self.key(FEATURES), Some(json(f)))
    }

    pub fn config(&self, key: &str, value: Option<&Value>) -> (Bytes, Option<Bytes>) {
        let value = value.map(|v| {
            json(&ConfigValue {
                version: CONFIG_VERSION,
                value: v.clone(),
            })
        });
        (self.key(&format!("{CONFIG}{key}")), value)
    }

    pub fn commit(&self, keys: Vec<String>) -> (Bytes, Option<Bytes>) {
        let marker = CommitMarker {
            version: COMMIT_VERSION,
            config_keys: keys,
        };
        (self.key(COMMIT), Some(json(&marker)))
    }

    pub fn instance(&self, id: &str, r: Option<&Registration>) -> (Bytes, Option<Bytes>) {
        (self.key(&format!("{INSTANCE}{id}")), r.map(json))
    }

    /// Reads one record; never fails, never panics.
    pub fn read(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> Read {
        let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
            return Read::Foreign;
        };
        let Some(rest) = key.strip_prefix(&self.prefix) else {
            return Read::Foreign;
        };
        let unreadable = |why: String| Read::Unreadable(format!("record {key}: {why}"));
        if rest == FEATURES {
            let Some(v) = value else {
                return unreadable("a tombstone for the feature state".into());
            };
            return match versioned::<SharedFeatures>(v, FEATURES_VERSION) {
                Ok(f) => Read::Record(StateRecord::Features(f)),
                Err(e) => unreadable(e),
            };
        }
        if rest == COMMIT {
            let Some(v) = value else {
                return unreadable("a tombstone for the commit marker".into());
            };
            return match versioned::<CommitMarker>(v, COMMIT_VERSION) {
                Ok(m) => Read::Record(StateRecord::ConfigCommit {
                    keys: m.config_keys,
                }),
                Err(e) => unreadable(e),
            };
        }
        if let Some(name) = rest.strip_prefix(CONFIG) {
            let value = match value.map(config_value) {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => return unreadable(e),
            };
            return Read::Record(StateRecord::Config {
                key: name.to_owned(),
                value,
            });
        }
        if let Some(id) = rest.strip_prefix(INSTANCE) {
            let registration = match value.map(|v| versioned::<Registration>(v, INSTANCE_VERSION)) {
                None => None,
                Some(Ok(r)) => Some(r),
                Some(Err(e)) => return unreadable(e),
            };
            return Read::Record(StateRecord::Instance {
                id: id.to_owned(),
                registration,
            });
        }
        unreadable("unknown key".into())
    }
}

/// Decodes a JSON value whose `version` must be `known`: a newer one is named
/// as such rather than half read.
fn versioned<T: serde::de::DeserializeOwned>(raw: &[u8], known: i32) -> Result<T, String> {
    serde_json::from_value(versioned_document(raw, known)?).map_err(|e| format!("unreadable: {e}"))
}

/// The JSON document of a record whose `version` is `known`.
fn versioned_document(raw: &[u8], known: i32) -> Result<Value, String> {
    let value: Value = serde_json::from_slice(raw).map_err(|e| format!("not JSON: {e}"))?;
    match value.get("version").and_then(Value::as_i64) {
        Some(v) if v == i64::from(known) => Ok(value),
        Some(v) => Err(format!("schema version {v}, this kshim reads {known}")),
        None => Err("no schema version".into()),
    }
}

/// A config record's value, exactly as it was written: numbers keep their text
/// (see `store::OverrideLog`). Not through `serde_json::from_value`, which
/// passes a number whose text Rust prints the same way through an f64 and
/// spells 0.00001 back as 1e-5.
fn config_value(raw: &[u8]) -> Result<Value, String> {
    let Value::Object(mut fields) = versioned_document(raw, CONFIG_VERSION)? else {
        return Err("unreadable: not a JSON object".into());
    };
    if let Some(unknown) = fields.keys().find(|k| *k != "version" && *k != "value") {
        return Err(format!("unreadable: unknown field `{unknown}`"));
    }
    fields
        .remove("value")
        .ok_or_else(|| "unreadable: missing field `value`".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(codec: &Codec, (k, v): (Bytes, Option<Bytes>)) -> Read {
        codec.read(Some(&k), v.as_deref())
    }

    #[test]
    fn every_record_reads_back() {
        let c = Codec::new("east");
        let f = SharedFeatures {
            version: 0,
            epoch: 7,
            levels: [("kshim.a".to_owned(), 3)].into(),
            upstream_levels: [("metadata.version".to_owned(), 27)].into(),
            writer: "kshim-1".into(),
        };
        assert_eq!(
            read(&c, c.features(&f)),
            Read::Record(StateRecord::Features(f))
        );
        for text in [
            "222601422095.333222",
            "0.00000000547819074",
            "0.00001",
            "1e+2",
            "-0.0",
            r#"{"min":0.00001,"max":[222601422095.333222]}"#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            match read(&c, c.config("policy.x", Some(&v))) {
                Read::Record(StateRecord::Config {
                    key,
                    value: Some(back),
                }) => assert_eq!(
                    (key.as_str(), back.to_string()),
                    ("policy.x", text.to_owned())
                ),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(
            read(&c, c.config("log.level", None)),
            Read::Record(StateRecord::Config {
                key: "log.level".into(),
                value: None
            })
        );
        assert_eq!(
            read(&c, c.commit(vec!["a".into()])),
            Read::Record(StateRecord::ConfigCommit {
                keys: vec!["a".into()]
            })
        );
        let r = Registration {
            version: 0,
            supported: [("kshim.a".to_owned(), [1, 3])].into(),
            listeners: vec!["127.0.0.1:9092".into()],
            kshim_version: "0.1.0".into(),
            status: InstanceStatus::default(),
        };
        assert_eq!(
            read(&c, c.instance("kshim-2", Some(&r))),
            Read::Record(StateRecord::Instance {
                id: "kshim-2".into(),
                registration: Some(r)
            })
        );
    }

    #[test]
    fn other_clusters_and_newer_schemas_are_not_applied() {
        let east = Codec::new("east");
        let west = Codec::new("west");
        assert_eq!(read(&east, west.commit(vec![])), Read::Foreign);
        assert_eq!(east.read(None, Some(b"{}")), Read::Foreign);
        let newer = east.read(
            Some(b"east/commit-config"),
            Some(br#"{"version":1,"config-keys":[]}"#),
        );
        assert!(
            matches!(&newer, Read::Unreadable(why) if why.contains("schema version 1")),
            "{newer:?}"
        );
        for (key, value) in [
            (&b"east/features"[..], Some(&b"[1,2"[..])),
            (b"east/features", None),
            (b"east/what", Some(b"{}")),
            (b"east/instance-x", Some(br#"{"version":0}"#)),
        ] {
            assert!(matches!(east.read(Some(key), value), Read::Unreadable(_)));
        }
    }
}
