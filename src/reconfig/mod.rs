//! Changing kshim's configuration while it runs: the pipeline of the dynamic
//! worker-config seed, applied to kshim.
//!
//! Every component that can change registers as `Reconfigurable`, naming the
//! keys it owns. A change — a PATCH or DELETE of the admin API, or SIGHUP
//! re-reading the file — goes through one pipeline:
//!
//! 1. every key named must be owned by a component (others are unknown, or need
//!    a restart);
//! 2. the overrides are put into the file's document, placeholders resolved, and
//!    the result parsed (every error at once);
//! 3. every component checks the new config and builds what it needs aside;
//! 4. only if all of that succeeded are the overrides stored (one record per
//!    key and a commit marker, `store::OverrideLog`) and every component's new
//!    state put in force. A failure anywhere changes nothing.
//!
//! One change runs at a time. Messages never carry a resolved secret.

mod components;
pub mod keys;
mod restart;

pub use components::{
    AuthorizationComponent, ListenerTlsComponent, LogFilterSetter, LogLevelComponent,
    PolicyComponent, UpstreamTlsComponent,
};

use crate::cluster::ClusterNode;
use crate::config::{Config, ConfigError, ConfigErrors, ConfigSource, Loaded};
use crate::metrics::{Metrics, ReloadSource};
use crate::store::{OverrideLog, Overrides, StoreError};
use keys::KeyPath;
use restart::{differences, restart_keys, restart_view, RestartView};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// A component whose settings can change while kshim runs.
pub trait Reconfigurable: Send + Sync {
    /// Named in logs and in the admin API's answers.
    fn name(&self) -> &'static str;
    /// The keys this component changes; a key covers every key below it.
    fn keys(&self) -> Vec<String>;
    /// Checks `next` and builds what it needs aside, changing nothing yet.
    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>>;
    /// The TLS role and expiry (Unix seconds) of the certificate in force, if
    /// the component holds one.
    fn certificate_expiry(&self) -> Option<(&'static str, i64)> {
        None
    }
}

/// What a component will put in force, once every component is ready.
pub struct Prepared {
    pub changed: bool,
    apply: Box<dyn FnOnce() + Send>,
}

impl Prepared {
    pub fn new(changed: bool, apply: impl FnOnce() + Send + 'static) -> Prepared {
        Prepared {
            changed,
            apply: Box::new(apply),
        }
    }

    pub fn unchanged() -> Prepared {
        Prepared::new(false, || {})
    }
}

/// One reason a change was refused, about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    pub key: String,
    pub message: String,
}

impl KeyError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> KeyError {
        KeyError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Every reason a change was refused, by key.
pub type KeyErrors = BTreeMap<String, Vec<String>>;

/// Why a change did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The change itself is wrong: nothing was stored or applied.
    #[error("the change was refused: {}", describe(.0))]
    Invalid(KeyErrors),
    /// DELETE of a key that has no override.
    #[error("{0} has no dynamic override")]
    NotFound(String),
    /// The overrides could not be stored: nothing was applied.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// In a kshim cluster: the change could not be committed to the shared
    /// state (nothing was applied anywhere), or was committed but this
    /// instance could not apply it (the message says which). Also a change
    /// that kshim's shutdown kept from starting.
    #[error("{0}")]
    Shared(String),
}

fn describe(errors: &KeyErrors) -> String {
    errors
        .iter()
        .flat_map(|(k, ms)| ms.iter().map(move |m| format!("{k}: {m}")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a change did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// The components whose settings changed.
    pub applied: Vec<&'static str>,
    /// Keys whose new values take effect only after a restart (from the file).
    pub pending_restart: Vec<String>,
    /// The overrides in force now, raw.
    pub overrides: Overrides,
}

/// The answer to a validation: the seed's `{valid, configs, errors}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    pub configs: Vec<String>,
    pub errors: KeyErrors,
}

/// The config kshim starts with: the file with the stored overrides over it,
/// when that config and its TLS material check out; otherwise the file alone,
/// and the reason is logged. `file` is the file's config, already checked.
pub fn startup_config(
    source: &ConfigSource,
    doc: &toml::Table,
    overrides: &Overrides,
    file: Loaded,
) -> Loaded {
    if overrides.is_empty() {
        return file;
    }
    let merged = match keys::merge(doc, overrides) {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(
                "the stored config overrides are not applied, kshim runs with its config file: {}",
                ConfigErrors(e).messages().join("; ")
            );
            return file;
        }
    };
    match source.build(merged) {
        Ok(loaded) => match components::check_material(&loaded.config) {
            Ok(()) => {
                tracing::info!(keys = ?overrides.keys().collect::<Vec<_>>(), "stored config overrides applied");
                loaded
            }
            Err(e) => {
                tracing::error!(
                    "the stored config overrides are not applied, kshim runs with its config file: {}",
                    loaded.scrubber.scrub(&e.to_string())
                );
                file
            }
        },
        Err(e) => {
            tracing::error!(
                "the stored config overrides are not applied, kshim runs with its config file: {}",
                e.messages().join("; ")
            );
            file
        }
    }
}

struct State {
    log: OverrideLog,
    /// The config file as last read.
    doc: toml::Table,
    /// The restart-only values kshim runs with.
    running: RestartView,
    /// The restart-only values of the config last put in force (they differ from
    /// `running` after SIGHUP read a file that changes them).
    current: RestartView,
}

/// The registered components and the stored overrides: the one place a change
/// goes through.
pub struct Registry {
    source: ConfigSource,
    components: Vec<Box<dyn Reconfigurable>>,
    /// Held across a change from its check to its end (an owned guard, which
    /// the change's last step takes to a blocking thread).
    state: Arc<Mutex<State>>,
    metrics: Arc<Metrics>,
    /// The number of overrides in force, for the metrics.
    active: Arc<std::sync::atomic::AtomicUsize>,
    /// In a kshim cluster, PATCH and DELETE are committed to the shared state
    /// and applied by every instance (`adopt`) when it reads the commit.
    cluster: Option<Arc<ClusterNode>>,
    /// What the last `adopt` did here.
    adopted: std::sync::Mutex<Option<Result<Change, String>>>,
}

/// How many times a change is tried when another instance writes first.
const SHARED_ATTEMPTS: u32 = 8;

/// A candidate config that passed every check, with what each component
/// prepared for it.
struct Candidate {
    prepared: Vec<(&'static str, Prepared)>,
    view: RestartView,
}

impl Registry {
    /// `running` is the config kshim started with (`startup_config`), `doc` the
    /// file it read.
    pub fn new(
        source: ConfigSource,
        doc: toml::Table,
        log: OverrideLog,
        running: &Config,
        components: Vec<Box<dyn Reconfigurable>>,
        metrics: Arc<Metrics>,
        cluster: Option<Arc<ClusterNode>>,
    ) -> Registry {
        let active = log.active().len();
        Registry {
            source,
            components,
            state: Arc::new(Mutex::new(State {
                log,
                doc,
                running: restart_view(running),
                current: restart_view(running),
            })),
            metrics,
            active: Arc::new(active.into()),
            cluster,
            adopted: std::sync::Mutex::new(None),
        }
    }

    /// The overrides in force, raw (placeholders unresolved, secrets in clear).
    pub async fn overrides(&self) -> Overrides {
        self.state.lock().await.log.active().clone()
    }

    pub fn override_count(&self) -> usize {
        self.active.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn certificate_expiry(&self) -> Vec<(&'static str, i64)> {
        self.components
            .iter()
            .filter_map(|c| c.certificate_expiry())
            .collect()
    }

    /// Every key a component can change.
    pub fn dynamic_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.components.iter().flat_map(|c| c.keys()).collect();
        keys.sort();
        keys
    }

    /// Checks a change (key → new value, `None` to remove) without storing or
    /// applying anything.
    pub async fn validate(&self, patch: &BTreeMap<String, Option<Value>>) -> Validation {
        let state = self.state.lock().await;
        let configs = patch.keys().cloned().collect();
        let errors = match self.plan(&state, patch) {
            Ok(next) => match self.evaluate(&state, &state.doc, &next, true) {
                Ok(_) => KeyErrors::new(),
                Err(e) => e,
            },
            Err(e) => e,
        };
        Validation { configs, errors }
    }

    /// Puts a change (key → new value, `None` to remove) in force and stores it,
    /// or changes nothing.
    pub async fn patch(
        &self,
        patch: &BTreeMap<String, Option<Value>>,
    ) -> Result<Change, ChangeError> {
        if let Some(node) = &self.cluster {
            let result = self
                .shared_change(node, |state| {
                    self.plan(state, patch).map_err(ChangeError::Invalid)
                })
                .await;
            self.count(ReloadSource::Admin, &result);
            return result;
        }
        let state = self.lock_for_change().await;
        match self.plan(&state, patch) {
            Ok(next) => {
                self.commit(state, None, next, true, Some(ReloadSource::Admin))
                    .await
            }
            Err(e) => self.counted(Some(ReloadSource::Admin), Err(ChangeError::Invalid(e))),
        }
    }

    /// Removes the override of `key`, so that the file's value applies again.
    pub async fn delete(&self, key: &str) -> Result<Change, ChangeError> {
        let canonical = KeyPath::parse(key)
            .map(|k| k.render())
            .unwrap_or_else(|_| key.to_owned());
        let without = |state: &State| {
            if !state.log.active().contains_key(&canonical) {
                return Err(ChangeError::NotFound(canonical.clone()));
            }
            let mut next = state.log.active().clone();
            next.remove(&canonical);
            Ok(next)
        };
        if let Some(node) = &self.cluster {
            let result = self.shared_change(node, without).await;
            self.count(ReloadSource::Admin, &result);
            return result;
        }
        let state = self.lock_for_change().await;
        let next = without(&state)?;
        self.commit(state, None, next, true, Some(ReloadSource::Admin))
            .await
    }

    /// Reads the config file again and puts it (with the overrides over it) in
    /// force; keys that need a restart are reported, not applied.
    pub async fn reload_file(&self) -> Result<Change, ChangeError> {
        let state = self.lock_for_change().await;
        match self.source.read_document() {
            Ok(doc) => {
                let next = state.log.active().clone();
                self.commit(state, Some(doc), next, false, Some(ReloadSource::Sighup))
                    .await
            }
            Err(e) => self.counted(
                Some(ReloadSource::Sighup),
                Err(ChangeError::Invalid(attribute(&e.0))),
            ),
        }
    }

    /// A change in a kshim cluster, the dynamic-config flow: decided and
    /// validated here by every component with the shared state read to its
    /// end, committed as per-key records and a commit marker listing every
    /// active key, in one transaction; applied here (and by every other
    /// instance) when the commit marker is read. Answered once applied here.
    async fn shared_change(
        &self,
        node: &ClusterNode,
        plan: impl Fn(&State) -> Result<Overrides, ChangeError>,
    ) -> Result<Change, ChangeError> {
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(node.settings.write_timeout_ms);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = std::time::Instant::now();
            let mut turn = node.turn(deadline).await.map_err(|e| {
                ChangeError::Shared(format!(
                    "the kshim cluster's shared state could not be read: {e}"
                ))
            })?;
            let entries = {
                let state = self.state.lock().await;
                let next = plan(&state)?;
                self.evaluate(&state, &state.doc, &next, true)
                    .map_err(ChangeError::Invalid)?;
                shared_entries(turn.codec(), state.log.active(), &next)
            };
            *lock(&self.adopted) = None;
            match turn.append(&entries, deadline).await {
                Ok(()) => break,
                Err(crate::cluster::LogError::Fenced) if attempt < SHARED_ATTEMPTS => {
                    drop(turn);
                    crate::cluster::pause_after_lost_role(attempt, started, deadline).await;
                }
                Err(e) => {
                    return Err(ChangeError::Shared(format!(
                        "the change was not committed to the kshim cluster's shared state, so nothing was changed: {e}"
                    )))
                }
            }
        }
        match lock(&self.adopted).take() {
            Some(Ok(change)) => Ok(change),
            Some(Err(e)) => Err(ChangeError::Shared(format!(
                "the change was committed for the whole kshim cluster, but this instance could not apply it: {e}"
            ))),
            None => Ok(Change::default()),
        }
    }

    /// Applies a set of overrides committed to the shared state: validated by
    /// every component here, then applied; or, when this instance cannot
    /// (a file missing on this host), nothing changes here and the reason is
    /// returned.
    pub async fn adopt(&self, next: Overrides) -> Result<(), String> {
        let state = self.lock_for_change().await;
        let result = if &next == state.log.active() {
            Ok(Change {
                overrides: next,
                ..Change::default()
            })
        } else {
            self.commit(state, None, next, true, None)
                .await
                .map_err(|e| e.to_string())
        };
        let out = result.as_ref().map(|_| ()).map_err(Clone::clone);
        *lock(&self.adopted) = Some(result);
        out
    }

    fn count(&self, source: ReloadSource, result: &Result<Change, ChangeError>) {
        self.metrics.reload(source, result.is_ok());
    }

    /// `result`, counted as a change from `source` (if any).
    fn counted(
        &self,
        source: Option<ReloadSource>,
        result: Result<Change, ChangeError>,
    ) -> Result<Change, ChangeError> {
        if let Some(source) = source {
            self.count(source, &result);
        }
        result
    }

    /// The overrides after `patch`, if every key in it may change.
    fn plan(
        &self,
        state: &State,
        patch: &BTreeMap<String, Option<Value>>,
    ) -> Result<Overrides, KeyErrors> {
        let mut errors = KeyErrors::new();
        let mut next = state.log.active().clone();
        if patch.len() > keys::MAX_KEYS {
            errors
                .entry("config".into())
                .or_default()
                .push(format!("at most {} keys per change", keys::MAX_KEYS));
            return Err(errors);
        }
        for (key, value) in patch {
            let path = match KeyPath::parse(key) {
                Ok(p) => p,
                Err(e) => {
                    errors.entry(key.clone()).or_default().push(e);
                    continue;
                }
            };
            if let Err(e) = self.classify(&path) {
                errors.entry(key.clone()).or_default().push(e);
                continue;
            }
            let canonical = path.render();
            match value {
                None | Some(Value::Null) => {
                    next.remove(&canonical);
                }
                Some(v) => {
                    if let Err(e) = keys::to_toml(v) {
                        errors.entry(key.clone()).or_default().push(e);
                        continue;
                    }
                    next.insert(canonical, v.clone());
                }
            }
        }
        if next.len() > keys::MAX_KEYS {
            errors
                .entry("config".into())
                .or_default()
                .push(format!("kshim keeps at most {} overrides", keys::MAX_KEYS));
        }
        if errors.is_empty() {
            Ok(next)
        } else {
            Err(errors)
        }
    }

    /// Whether some component owns `key`.
    fn classify(&self, key: &KeyPath) -> Result<(), String> {
        let owned: Vec<KeyPath> = self
            .dynamic_keys()
            .iter()
            .filter_map(|k| KeyPath::parse(k).ok())
            .collect();
        if owned.iter().any(|k| key.is_under(k)) {
            return Ok(());
        }
        let below: Vec<String> = owned
            .iter()
            .filter(|k| k.is_under(key))
            .map(KeyPath::render)
            .collect();
        if !below.is_empty() {
            return Err(format!(
                "set the keys below it one by one: {}",
                below.join(", ")
            ));
        }
        let restart = restart_keys()
            .filter_map(|k| KeyPath::parse(k).ok())
            .find(|k| key.is_under(k));
        // In a table whose keys are dynamic, an unclaimed key is unknown unless
        // it is a restart key itself (admin.listen).
        let parent = &key.segments[..key.segments.len() - 1];
        let beside_dynamic = owned.iter().any(|k| {
            k.segments.len() == key.segments.len() && k.segments[..parent.len()] == *parent
        });
        let restart = match restart {
            Some(k) => !beside_dynamic || k.segments.len() == key.segments.len(),
            None => false,
        };
        if restart {
            Err("this key needs a restart: change it in the config file and restart kshim".into())
        } else {
            Err(format!(
                "unknown key; the keys that can change while kshim runs are: {}",
                self.dynamic_keys().join(", ")
            ))
        }
    }

    /// Steps 2 and 3: the candidate config, checked by every component.
    fn evaluate(
        &self,
        state: &State,
        doc: &toml::Table,
        overrides: &Overrides,
        refuse_restart_keys: bool,
    ) -> Result<Candidate, KeyErrors> {
        let merged = keys::merge(doc, overrides).map_err(|e| attribute(&e))?;
        let loaded = self.source.build(merged).map_err(|e| attribute(&e.0))?;
        let view = restart_view(&loaded.config);
        let needs_restart = differences(&state.current, &view);
        if refuse_restart_keys && !needs_restart.is_empty() {
            let mut errors = KeyErrors::new();
            for key in &needs_restart {
                errors.entry(key.clone()).or_default().push(
                    "this change needs a restart: change it in the config file and restart kshim"
                        .into(),
                );
            }
            return Err(errors);
        }
        let mut errors = KeyErrors::new();
        let mut prepared = Vec::new();
        for c in &self.components {
            match c.prepare(&loaded.config) {
                Ok(p) => prepared.push((c.name(), p)),
                Err(es) => {
                    for e in es {
                        errors
                            .entry(e.key)
                            .or_default()
                            .push(loaded.scrubber.scrub(&e.message));
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(Candidate { prepared, view })
        } else {
            Err(errors)
        }
    }

    /// The state, held until a change made with it ends (`commit`).
    async fn lock_for_change(&self) -> OwnedMutexGuard<State> {
        Arc::clone(&self.state).lock_owned().await
    }

    /// Step 4: store, then apply; or nothing. Once checked, the change runs to
    /// its end on a blocking thread (the store's fsync is blocking work), so
    /// that a caller that goes away meanwhile (an admin client that hangs up)
    /// cannot leave it stored and not applied, nor uncounted: a change from
    /// `source` (none: one the kshim cluster made, counted where it was asked
    /// for) is counted in the metrics where it ends.
    async fn commit(
        &self,
        mut state: OwnedMutexGuard<State>,
        doc: Option<toml::Table>,
        next: Overrides,
        refuse_restart_keys: bool,
        source: Option<ReloadSource>,
    ) -> Result<Change, ChangeError> {
        let checked = self.evaluate(
            &state,
            doc.as_ref().unwrap_or(&state.doc),
            &next,
            refuse_restart_keys,
        );
        let candidate = match checked {
            Ok(candidate) => candidate,
            Err(e) => return self.counted(source, Err(ChangeError::Invalid(e))),
        };
        let active = Arc::clone(&self.active);
        let metrics = Arc::clone(&self.metrics);
        let change = move |state: &mut State| {
            if &next != state.log.active() {
                // The change is durable before it applies.
                state.log.commit(&next)?;
            }
            if let Some(doc) = doc {
                state.doc = doc;
            }
            let mut applied = Vec::new();
            for (name, p) in candidate.prepared {
                if p.changed {
                    applied.push(name);
                }
                (p.apply)();
            }
            active.store(next.len(), std::sync::atomic::Ordering::Relaxed);
            let pending_restart = differences(&state.running, &candidate.view);
            state.current = candidate.view;
            Ok(Change {
                applied,
                pending_restart,
                overrides: next,
            })
        };
        let finish = move || {
            let result = change(&mut state);
            // Counted while the registry's lock is still held: whoever takes it next
            // sees the change counted.
            if let Some(source) = source {
                metrics.reload(source, result.is_ok());
            }
            drop(state);
            result
        };
        match tokio::task::spawn_blocking(finish).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => self.counted(
                source,
                Err(ChangeError::Shared(format!(
                    "kshim is shutting down; the change was not made: {e}"
                ))),
            ),
        }
    }
}

/// The records of a change from `active` to `next`: a record for every key
/// whose value changed, a tombstone for every key gone, and the marker listing
/// every key of `next`.
fn shared_entries(
    codec: &crate::cluster::Codec,
    active: &Overrides,
    next: &Overrides,
) -> Vec<crate::cluster::writer::Entry> {
    let mut entries = Vec::new();
    for (key, value) in next {
        if active.get(key) != Some(value) {
            entries.push(codec.config(key, Some(value)));
        }
    }
    for key in active.keys() {
        if !next.contains_key(key) {
            entries.push(codec.config(key, None));
        }
    }
    entries.push(codec.commit(next.keys().cloned().collect()));
    entries
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Messages of the form `key: text` by key; others under `config`.
fn attribute(errors: &[ConfigError]) -> KeyErrors {
    let mut out = KeyErrors::new();
    for e in errors {
        out.entry(e.top_key().to_owned())
            .or_default()
            .push(e.message.clone());
    }
    out
}
