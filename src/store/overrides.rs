//! Dynamic configuration overrides, kept the way a compacted config topic keeps
//! them: one record per key, tombstones for removed keys, and a commit marker
//! that lists every key active after the change (snapshot semantics, so that
//! compacting the log can never drop an override set by an earlier change).
//!
//! The log is `data_dir/config-overrides.log`, one JSON record per line:
//!
//! ```text
//! {"key":"config-tls.certificate","value":{"version":0,"value":"/etc/kshim/b.pem"}}
//! {"key":"config-log.level","value":null}
//! {"key":"commit-config","value":{"version":0,"config-keys":["tls.certificate"]}}
//! ```
//!
//! A change is appended as its records followed by its marker, in one write,
//! then fsynced. Records after the last marker were never committed (a crash in
//! the middle of a change): they are dropped when the log is opened. Records
//! this version cannot read (another key prefix, a newer `version`) are logged
//! and ignored. Values are stored raw: placeholders stay placeholders.
//!
//! Knows nothing of what the keys mean; `crate::reconfig` does.

use super::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

const LOG_FILE: &str = "config-overrides.log";
const TEMP_FILE: &str = "config-overrides.log.tmp";
const RECORD_PREFIX: &str = "config-";
const COMMIT_KEY: &str = "commit-config";
const RECORD_VERSION: i32 = 0;
const COMMIT_VERSION: i32 = 0;
/// The log is rewritten (compacted) once it is this many times larger than its
/// live content, and at least this many bytes.
const COMPACT_RATIO: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 64 * 1024;

/// The overrides in force: key → raw value.
pub type Overrides = BTreeMap<String, Value>;

#[derive(Serialize, Deserialize)]
struct Record {
    key: String,
    value: Option<Value>,
}

#[derive(Serialize)]
struct ConfigValue {
    version: i32,
    value: Value,
}

impl ConfigValue {
    /// A record's `{"version": N, "value": V}`, V kept exactly as it was read.
    /// A number keeps its text (serde_json's `arbitrary_precision`), so that a
    /// value comes back as the operator wrote it, as Kafka keeps config values as
    /// strings. `serde_json::from_value` would not do: it passes a number whose
    /// text Rust prints the same way through an f64, and 0.00001 comes back as 1e-5.
    fn read(record: Value) -> Result<ConfigValue, String> {
        let Value::Object(mut fields) = record else {
            return Err("not a JSON object".into());
        };
        let version = match fields.get("version") {
            Some(v) => v
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| format!("version {v} is not a 32-bit integer"))?,
            None => return Err("missing field `version`".into()),
        };
        let value = fields
            .remove("value")
            .ok_or_else(|| "missing field `value`".to_owned())?;
        Ok(ConfigValue { version, value })
    }
}

#[derive(Serialize, Deserialize)]
struct CommitMarker {
    version: i32,
    #[serde(rename = "config-keys")]
    config_keys: Vec<String>,
}

/// The override log of one data directory. The directory's lock is held by the
/// `FileStore` opened on it; this adds a file beside the feature state.
pub struct OverrideLog {
    dir: PathBuf,
    active: Overrides,
    /// Bytes in the log file now.
    size: u64,
}

impl OverrideLog {
    /// Reads the log, keeping what the last commit marker lists, and cuts off
    /// anything after that marker.
    pub fn open(dir: &Path) -> Result<OverrideLog, StoreError> {
        let path = dir.join(LOG_FILE);
        let io = |source| StoreError::Io {
            path: path.display().to_string(),
            source,
        };
        let _ = fs::remove_file(dir.join(TEMP_FILE));
        let raw = match fs::read(&path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(e)),
        };
        let replay = replay(&raw, &path);
        if replay.committed_len < raw.len() {
            tracing::warn!(
                "{}: {} byte(s) after the last commit marker were never committed; dropping them",
                path.display(),
                raw.len() - replay.committed_len
            );
            let f = OpenOptions::new().write(true).open(&path).map_err(io)?;
            f.set_len(replay.committed_len as u64).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        Ok(OverrideLog {
            dir: dir.to_owned(),
            active: replay.active,
            size: replay.committed_len as u64,
        })
    }

    /// The overrides committed last.
    pub fn active(&self) -> &Overrides {
        &self.active
    }

    /// Makes `next` the committed set: a record for every key whose value
    /// changed, a tombstone for every key that is gone, and a marker listing
    /// every key of `next`. Durable when this returns.
    pub fn commit(&mut self, next: &Overrides) -> Result<(), StoreError> {
        let mut batch = Vec::new();
        for (key, value) in next {
            if self.active.get(key) != Some(value) {
                push_line(&mut batch, &record(key, Some(value)));
            }
        }
        for key in self.active.keys() {
            if !next.contains_key(key) {
                push_line(&mut batch, &record(key, None));
            }
        }
        push_line(&mut batch, &marker(next));
        let path = self.path();
        let io = |source| StoreError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        if let Err(e) = f.write_all(&batch).and_then(|()| f.sync_data()) {
            // Whatever part of the batch reached the file ends without a marker
            // and is dropped on the next open; cut it now so that a later commit
            // cannot follow it.
            let _ = f.set_len(self.size);
            return Err(io(e));
        }
        drop(f);
        if self.size == 0 {
            sync_dir(&self.dir).map_err(io)?;
        }
        self.size += batch.len() as u64;
        self.active = next.clone();
        let live = self.live_size();
        if self.size >= COMPACT_MIN_BYTES && self.size > live * COMPACT_RATIO {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the log as one record per active key and one marker, replacing
    /// the old file atomically.
    pub fn compact(&mut self) -> Result<(), StoreError> {
        let path = self.path();
        let temp = self.dir.join(TEMP_FILE);
        let io = |source| StoreError::Io {
            path: path.display().to_string(),
            source,
        };
        let content = self.snapshot_bytes();
        let mut f = File::create(&temp).map_err(io)?;
        f.write_all(&content)
            .and_then(|()| f.sync_all())
            .map_err(io)?;
        drop(f);
        fs::rename(&temp, &path).map_err(io)?;
        sync_dir(&self.dir).map_err(io)?;
        self.size = content.len() as u64;
        Ok(())
    }

    fn path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    fn snapshot_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, value) in &self.active {
            push_line(&mut out, &record(key, Some(value)));
        }
        push_line(&mut out, &marker(&self.active));
        out
    }

    fn live_size(&self) -> u64 {
        self.snapshot_bytes().len() as u64
    }
}

fn record(key: &str, value: Option<&Value>) -> Record {
    Record {
        key: format!("{RECORD_PREFIX}{key}"),
        value: value.map(|v| {
            serde_json::to_value(ConfigValue {
                version: RECORD_VERSION,
                value: v.clone(),
            })
            .unwrap_or(Value::Null)
        }),
    }
}

fn marker(active: &Overrides) -> Record {
    Record {
        key: COMMIT_KEY.into(),
        value: serde_json::to_value(CommitMarker {
            version: COMMIT_VERSION,
            config_keys: active.keys().cloned().collect(),
        })
        .ok(),
    }
}

fn push_line(out: &mut Vec<u8>, record: &Record) {
    // Serializing a struct of strings and JSON values cannot fail.
    if let Ok(line) = serde_json::to_vec(record) {
        out.extend_from_slice(&line);
        out.push(b'\n');
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

struct Replay {
    active: Overrides,
    /// Bytes up to and including the last commit marker's line.
    committed_len: usize,
}

/// Reads the log as a consumer of a config topic would: values are buffered per
/// key, and a marker makes exactly the keys it lists the active set.
fn replay(raw: &[u8], path: &Path) -> Replay {
    let mut latest: BTreeMap<String, Option<Value>> = BTreeMap::new();
    let mut active = Overrides::new();
    let mut committed_len = 0;
    let mut offset = 0;
    for line in raw.split_inclusive(|&b| b == b'\n') {
        let start = offset;
        offset += line.len();
        if line.last() != Some(&b'\n') {
            // A torn last line: never committed.
            break;
        }
        let text = &line[..line.len() - 1];
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record: Record = match serde_json::from_slice(text) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "{} at byte {start}: unreadable record ignored: {e}",
                    path.display()
                );
                continue;
            }
        };
        if record.key == COMMIT_KEY {
            let Some(marker) = record
                .value
                .and_then(|v| serde_json::from_value::<CommitMarker>(v).ok())
            else {
                tracing::warn!(
                    "{} at byte {start}: unreadable commit marker ignored",
                    path.display()
                );
                continue;
            };
            if marker.version != COMMIT_VERSION {
                tracing::warn!(
                    "{} at byte {start}: commit marker version {} is not known here; ignored",
                    path.display(),
                    marker.version
                );
                continue;
            }
            let mut next = Overrides::new();
            for key in marker.config_keys {
                let value = match latest.get(&key) {
                    Some(buffered) => buffered.clone(),
                    None => active.get(&key).cloned(),
                };
                match value {
                    Some(value) => {
                        next.insert(key, value);
                    }
                    None => tracing::warn!(
                        "{}: the commit marker at byte {start} lists {key}, which has no value; ignored",
                        path.display()
                    ),
                }
            }
            active = next;
            latest.clear();
            committed_len = offset;
        } else if let Some(key) = record.key.strip_prefix(RECORD_PREFIX) {
            match record.value {
                None => {
                    latest.insert(key.to_owned(), None);
                }
                Some(v) => match ConfigValue::read(v) {
                    Ok(c) if c.version == RECORD_VERSION => {
                        latest.insert(key.to_owned(), Some(c.value));
                    }
                    Ok(c) => tracing::warn!(
                        "{} at byte {start}: record for {key} has version {}, not known here; ignored",
                        path.display(),
                        c.version
                    ),
                    Err(e) => tracing::warn!(
                        "{} at byte {start}: record for {key} is unreadable ({e}); ignored",
                        path.display()
                    ),
                },
            }
        } else {
            tracing::warn!(
                "{} at byte {start}: record with unknown key {:?} ignored",
                path.display(),
                record.key
            );
        }
    }
    Replay {
        active,
        committed_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(pairs: &[(&str, Value)]) -> Overrides {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn commits_survive_a_reopen_and_deletes_are_tombstones() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OverrideLog::open(dir.path()).unwrap();
        assert!(log.active().is_empty());
        let first = set(&[
            ("tls.certificate", json!("/a.pem")),
            ("log.level", json!("debug")),
        ]);
        log.commit(&first).unwrap();
        let second = set(&[("tls.certificate", json!("/b.pem"))]);
        log.commit(&second).unwrap();
        let text = fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert!(
            text.contains(r#"{"key":"config-log.level","value":null}"#),
            "{text}"
        );
        assert_eq!(OverrideLog::open(dir.path()).unwrap().active(), &second);
    }

    /// Commits `texts` as the values of keys `policy.key<i>`, reopens the log,
    /// and returns each value as it reads back, spelled as JSON.
    fn written_and_read_back(texts: &[String]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OverrideLog::open(dir.path()).unwrap();
        let key = |i: usize| format!("policy.key{i}");
        let values: Overrides = texts
            .iter()
            .enumerate()
            .map(|(i, text)| (key(i), serde_json::from_str::<Value>(text).unwrap()))
            .collect();
        log.commit(&values).unwrap();
        let reopened = OverrideLog::open(dir.path()).unwrap();
        (0..texts.len())
            .map(|i| reopened.active()[&key(i)].to_string())
            .collect()
    }

    #[test]
    fn numbers_come_back_as_written_after_a_reopen() {
        let texts: Vec<String> = [
            // Not a double: the nearest one prints as 222601422095.33322.
            "222601422095.333222",
            // Rust prints these doubles the same way, serde_json as 5.47819074e-9 and 1e-5.
            "0.00000000547819074",
            "0.00001",
            "0.1",
            "1e-300",
            "1e+2",
            "100.0",
            "-0",
            "-0.0",
            "3.141592653589793238462643383279",
            "18446744073709551616",
            "-9223372036854775809",
            "1e+400",
            "179769313486231570000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000.0",
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(written_and_read_back(&texts), texts);
        // Inside lists and tables too.
        let nested = vec![r#"{"min":0.00001,"max":[222601422095.333222,1e+2]}"#.to_owned()];
        assert_eq!(written_and_read_back(&nested), nested);
        // An exponent is kept as the JSON parser spells it when the body is read:
        // a lower-case e and a sign.
        let exponents = ["1E+2", "1e400", "0E0"].map(str::to_owned).to_vec();
        assert_eq!(
            written_and_read_back(&exponents),
            ["1e+2", "1e+400", "0e+0"]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn any_number_comes_back_as_written(
            texts in proptest::collection::vec(
                "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?", 1..12),
        ) {
            let as_read: Vec<String> = texts
                .iter()
                .map(|t| serde_json::from_str::<Value>(t).unwrap().to_string())
                .collect();
            for (text, read) in texts.iter().zip(&as_read) {
                if !text.contains(['e', 'E']) {
                    proptest::prop_assert_eq!(read, text);
                }
            }
            proptest::prop_assert_eq!(written_and_read_back(&texts), as_read);
        }
    }

    #[test]
    fn a_change_without_its_marker_is_dropped_and_cannot_be_committed_later() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OverrideLog::open(dir.path()).unwrap();
        let committed = set(&[("tls.certificate", json!("/a.pem"))]);
        log.commit(&committed).unwrap();
        // A crash after the record, before the marker, and a torn line after it.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG_FILE))
            .unwrap();
        f.write_all(b"{\"key\":\"config-tls.certificate\",\"value\":{\"version\":0,\"value\":\"/evil.pem\"}}\n{\"key\":\"commit-con")
            .unwrap();
        drop(f);
        let mut log = OverrideLog::open(dir.path()).unwrap();
        assert_eq!(log.active(), &committed);
        // The next change lists tls.certificate again: it must still be /a.pem.
        let mut next = committed.clone();
        next.insert("log.level".into(), json!("info"));
        log.commit(&next).unwrap();
        assert_eq!(OverrideLog::open(dir.path()).unwrap().active(), &next);
    }

    #[test]
    fn unknown_records_are_ignored_and_the_rest_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(LOG_FILE),
            concat!(
                "{\"key\":\"config-a\",\"value\":{\"version\":0,\"value\":1}}\n",
                "{\"key\":\"config-b\",\"value\":{\"version\":7,\"value\":\"from the future\"}}\n",
                "{\"key\":\"worker-config-x\",\"value\":{\"version\":0,\"value\":2}}\n",
                "not json at all\n",
                "{\"key\":\"commit-config\",\"value\":{\"version\":0,\"config-keys\":[\"a\",\"b\"]}}\n",
            ),
        )
        .unwrap();
        let log = OverrideLog::open(dir.path()).unwrap();
        assert_eq!(log.active(), &set(&[("a", json!(1))]));
    }

    #[test]
    fn compaction_keeps_every_active_override() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OverrideLog::open(dir.path()).unwrap();
        let big = "x".repeat(4096);
        let mut want = Overrides::new();
        // An early override that later changes never touch.
        want.insert("policy.exempt_principals".into(), json!(["User:ops"]));
        log.commit(&want).unwrap();
        for i in 0..200 {
            want.insert("log.level".into(), json!(format!("{big}{i}")));
            log.commit(&want).unwrap();
        }
        let size = fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
        assert!(
            size < COMPACT_MIN_BYTES * 2,
            "the log was compacted: {size} bytes"
        );
        assert_eq!(OverrideLog::open(dir.path()).unwrap().active(), &want);
    }
}
