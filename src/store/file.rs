//! The embedded store: one JSON file in `data_dir`, replaced atomically.
//!
//! A save writes `state.json.tmp`, fsyncs it, renames it over `state.json` and
//! fsyncs the directory. rename(2) is atomic, so a crash at any instant leaves the
//! old file or the new one. The layout follows the KIP's `/features` node:
//! `{"version": 1, "epoch": N, "features": {name: {"min_version_level",
//! "max_version_level"}}}`, plus the cluster id.

use super::{FeatureStore, StoreError, StoredState};
use crate::features::{FinalizedFeatures, Mirror, SupportedRange};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

const STATE_FILE: &str = "state.json";
const TEMP_FILE: &str = "state.json.tmp";
const LOCK_FILE: &str = ".lock";
const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateDocument {
    version: u32,
    cluster_id: String,
    epoch: i64,
    features: BTreeMap<String, LevelRange>,
    /// Written only in front of a cluster; files without it load as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upstream: Option<MirrorDocument>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MirrorDocument {
    /// The upstream's epoch of this view: the epoch rule compares against it
    /// after a restart too.
    epoch: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cluster_id: Option<String>,
    supported: BTreeMap<String, SupportedDocument>,
    features: BTreeMap<String, LevelRange>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SupportedDocument {
    min_version: i16,
    max_version: i16,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelRange {
    min_version_level: i16,
    max_version_level: i16,
}

/// The file store. Holding it holds an exclusive lock on the data directory, so
/// that two processes never write the same state.
pub struct FileStore {
    dir: PathBuf,
    _lock: File,
}

impl FileStore {
    pub fn open(dir: &Path) -> Result<FileStore, StoreError> {
        let io = |source| StoreError::Io {
            path: dir.display().to_string(),
            source,
        };
        fs::create_dir_all(dir).map_err(io)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: dir.display().to_string(),
                })
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // A temp file is what a crash during a save leaves; the state file beside
        // it is still the last complete one.
        let _ = fs::remove_file(dir.join(TEMP_FILE));
        Ok(FileStore {
            dir: dir.to_owned(),
            _lock: lock,
        })
    }

    fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.dir.display().to_string(),
            source,
        }
    }
}

impl FeatureStore for FileStore {
    fn load(&self) -> Result<Option<StoredState>, StoreError> {
        let path = self.state_path();
        let raw = match fs::read(&path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io(e)),
        };
        let damaged = |reason: String| StoreError::Damaged {
            path: path.display().to_string(),
            reason,
        };
        let doc: StateDocument =
            serde_json::from_slice(&raw).map_err(|e| damaged(e.to_string()))?;
        if doc.version != SCHEMA_VERSION {
            return Err(damaged(format!(
                "schema version {} is not {SCHEMA_VERSION}",
                doc.version
            )));
        }
        let levels = levels_from(doc.features).map_err(damaged)?;
        let mirror = match doc.upstream {
            None => None,
            Some(m) => {
                let mut supported = BTreeMap::new();
                for (name, r) in m.supported {
                    if r.min_version > r.max_version || r.min_version < 0 {
                        return Err(damaged(format!(
                            "upstream feature {name} has supported range {}-{}",
                            r.min_version, r.max_version
                        )));
                    }
                    supported.insert(name, SupportedRange::new(r.min_version, r.max_version));
                }
                Some(Mirror {
                    supported,
                    finalized: FinalizedFeatures {
                        epoch: m.epoch,
                        levels: levels_from(m.features).map_err(damaged)?,
                    },
                    cluster_id: m.cluster_id,
                })
            }
        };
        Ok(Some(StoredState {
            cluster_id: doc.cluster_id,
            finalized: FinalizedFeatures {
                epoch: doc.epoch,
                levels,
            },
            mirror,
        }))
    }

    fn save(&self, state: &StoredState) -> Result<(), StoreError> {
        let doc = StateDocument {
            version: SCHEMA_VERSION,
            cluster_id: state.cluster_id.clone(),
            epoch: state.finalized.epoch,
            features: level_documents(&state.finalized.levels),
            upstream: state.mirror.as_ref().map(|m| MirrorDocument {
                epoch: m.finalized.epoch,
                cluster_id: m.cluster_id.clone(),
                supported: m
                    .supported
                    .iter()
                    .map(|(name, r)| {
                        (
                            name.clone(),
                            SupportedDocument {
                                min_version: r.min,
                                max_version: r.max,
                            },
                        )
                    })
                    .collect(),
                features: level_documents(&m.finalized.levels),
            }),
        };
        let mut raw =
            serde_json::to_vec_pretty(&doc).map_err(|e| self.io(std::io::Error::other(e)))?;
        raw.push(b'\n');
        let temp = self.dir.join(TEMP_FILE);
        let mut f = File::create(&temp).map_err(|e| self.io(e))?;
        f.write_all(&raw).map_err(|e| self.io(e))?;
        f.sync_all().map_err(|e| self.io(e))?;
        drop(f);
        fs::rename(&temp, self.state_path()).map_err(|e| self.io(e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io(e))?;
        Ok(())
    }
}

fn levels_from(features: BTreeMap<String, LevelRange>) -> Result<BTreeMap<String, i16>, String> {
    let mut levels = BTreeMap::new();
    for (name, range) in features {
        if range.max_version_level < 1 || range.min_version_level > range.max_version_level {
            return Err(format!(
                "feature {name} has levels {}-{}",
                range.min_version_level, range.max_version_level
            ));
        }
        levels.insert(name, range.max_version_level);
    }
    Ok(levels)
}

fn level_documents(levels: &BTreeMap<String, i16>) -> BTreeMap<String, LevelRange> {
    levels
        .iter()
        .map(|(name, &level)| {
            (
                name.clone(),
                LevelRange {
                    min_version_level: level,
                    max_version_level: level,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(epoch: i64) -> StoredState {
        StoredState {
            cluster_id: "c1".into(),
            finalized: FinalizedFeatures {
                epoch,
                levels: [("group.version".to_owned(), 1)].into(),
            },
            mirror: None,
        }
    }

    #[test]
    fn the_mirror_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let mut s = state(5);
        s.mirror = Some(Mirror {
            supported: [("metadata.version".to_owned(), SupportedRange::new(7, 27))].into(),
            finalized: FinalizedFeatures {
                epoch: 1234,
                levels: [("metadata.version".to_owned(), 27)].into(),
            },
            cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qg".to_owned()),
        });
        store.save(&s).unwrap();
        assert_eq!(store.load().unwrap(), Some(s));
    }

    #[test]
    fn saves_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        assert_eq!(store.load().unwrap(), None);
        store.save(&state(3)).unwrap();
        store.save(&state(4)).unwrap();
        assert_eq!(store.load().unwrap(), Some(state(4)));
        drop(store);
        assert_eq!(
            FileStore::open(dir.path()).unwrap().load().unwrap(),
            Some(state(4))
        );
    }

    #[test]
    fn a_second_process_is_locked_out() {
        let dir = tempfile::tempdir().unwrap();
        let _first = FileStore::open(dir.path()).unwrap();
        assert!(matches!(
            FileStore::open(dir.path()),
            Err(StoreError::Locked { .. })
        ));
    }

    #[test]
    fn a_leftover_temp_file_does_not_matter() {
        let dir = tempfile::tempdir().unwrap();
        FileStore::open(dir.path())
            .unwrap()
            .save(&state(7))
            .unwrap();
        fs::write(dir.path().join(TEMP_FILE), b"{\"version\": 1, \"cluster").unwrap();
        assert_eq!(
            FileStore::open(dir.path()).unwrap().load().unwrap(),
            Some(state(7))
        );
    }

    #[test]
    fn a_damaged_file_is_reported_not_guessed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(STATE_FILE), b"{not json").unwrap();
        let err = FileStore::open(dir.path()).unwrap().load().unwrap_err();
        assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    }
}
