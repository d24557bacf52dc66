//! The executor of UpdateFeatures plans: one place where a plan meets the
//! controller's section and the upstream. The upstream is reached through the
//! `Cluster` trait, so that every way it can fail is tested without sockets.
//!
//! An audit runs inside the section with the config fence closed: no other
//! update and no config change through kshim can come between what the audit
//! read and what is applied.

use super::plan::{Audit, Plan};
use crate::controller::UpdateSection;
use crate::features::{Reason, UpdateRejection};
use crate::policy::{self, Policies, ReportedConfig};
use crate::protocol::errors::{self};
use crate::upstream::{cluster, configs, Route, Upstream, UpstreamError};
use bytes::Bytes;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long an answer waits for the mirror to show an upstream change.
pub const MIRROR_WAIT: Duration = Duration::from_secs(10);

/// The upstream, as far as UpdateFeatures needs it.
pub trait Cluster: Sync {
    /// Sends an UpdateFeatures request body on (to the active controller) and
    /// returns the response body.
    fn forward(
        &self,
        version: i16,
        body: Bytes,
        deadline: Instant,
    ) -> impl Future<Output = Result<Bytes, UpstreamError>> + Send;

    /// Every listed broker's and every topic's values of `keys`. A broker that
    /// cannot be read is an error naming it.
    fn read_configs(
        &self,
        keys: Vec<String>,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<ReportedConfig>, UpstreamError>> + Send;

    /// Refreshes kshim's view of the upstream (and so the mirror), waiting at
    /// most `timeout`.
    fn refresh(&self, timeout: Duration) -> impl Future<Output = ()> + Send;
}

impl Cluster for Upstream {
    fn forward(
        &self,
        version: i16,
        body: Bytes,
        deadline: Instant,
    ) -> impl Future<Output = Result<Bytes, UpstreamError>> + Send {
        let targets = self.targets(Route::Bootstrap);
        async move {
            cluster::forward_update_features(&targets, &self.link, version, &body, deadline).await
        }
    }

    fn read_configs(
        &self,
        keys: Vec<String>,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<ReportedConfig>, UpstreamError>> + Send {
        let view = self.view();
        async move { configs::audit_configs(&view, &self.link, &keys, deadline).await }
    }

    fn refresh(&self, timeout: Duration) -> impl Future<Output = ()> + Send {
        self.refresh_now(timeout)
    }
}

/// What became of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// kshim's answer: success, or the first refusal.
    Decided(Result<(), UpdateRejection>),
    /// The upstream's own response body, to pass on as it is.
    Upstream(Bytes),
}

/// What the executor needs of the request besides the plan.
pub struct Call {
    pub version: i16,
    /// The request body, for forwarding byte for byte.
    pub body: Bytes,
    pub validate_only: bool,
    /// Each requested feature with its requested level (negative read as 0).
    pub requested: Vec<(String, i16)>,
    pub deadline: Instant,
    /// How long a forwarded success waits for the mirror to show it.
    pub mirror_wait: Duration,
}

pub async fn execute<C: Cluster>(
    section: &UpdateSection<'_>,
    plan: Plan,
    cluster: Option<&C>,
    policies: &Policies,
    call: &Call,
) -> Outcome {
    match plan {
        Plan::Answer(answer) => Outcome::Decided(answer),
        Plan::Apply {
            changes,
            audit,
            commit,
        } => {
            let _fence = match audit_first(section, cluster, policies, audit, call).await {
                Ok(fence) => fence,
                Err(refusal) => return Outcome::Decided(Err(refusal)),
            };
            if !commit || changes.is_empty() {
                return Outcome::Decided(Ok(()));
            }
            Outcome::Decided(section.apply(&changes).await)
        }
        Plan::Forward { audit } => {
            let Some(cluster) = cluster else {
                return Outcome::Decided(Err(UpdateRejection::new(
                    Reason::UpstreamFailed,
                    "kshim has no upstream cluster to send the update to.",
                )));
            };
            let _fence = match audit_first(section, Some(cluster), policies, audit, call).await {
                Ok(fence) => fence,
                Err(refusal) => return Outcome::Decided(Err(refusal)),
            };
            forward(section, cluster, call).await
        }
    }
}

/// Runs the plan's audit, if it has one; the fence stays closed (the returned
/// value) until the plan is carried out.
async fn audit_first<C: Cluster>(
    section: &UpdateSection<'_>,
    cluster: Option<&C>,
    policies: &Policies,
    audit: Option<Audit>,
    call: &Call,
) -> Result<Option<crate::controller::FenceClosed>, UpdateRejection> {
    match audit {
        Some(audit) => audited(section, cluster, policies, &audit, call)
            .await
            .map(Some),
        None => Ok(None),
    }
}

/// Closes the config fence and audits the cluster's configs against the
/// target levels. The fence stays closed (the returned value) until the plan
/// is carried out.
async fn audited<C: Cluster>(
    section: &UpdateSection<'_>,
    cluster: Option<&C>,
    policies: &Policies,
    audit: &Audit,
    call: &Call,
) -> Result<crate::controller::FenceClosed, UpdateRejection> {
    let Some(cluster) = cluster else {
        return Err(UpdateRejection::new(
            Reason::AuditBlind,
            "kshim has no upstream cluster whose configs it could audit, so nothing was applied.",
        ));
    };
    let wait = call.deadline.saturating_duration_since(Instant::now());
    let fence = tokio::time::timeout(wait, section.fence(audit.target.clone()))
        .await
        .map_err(|_| {
            UpdateRejection::new(
                Reason::Busy,
                "Timed out waiting for config changes in flight to finish before the audit.",
            )
        })?;
    let read = tokio::time::timeout_at(
        call.deadline.into(),
        cluster.read_configs(audit.keys.clone(), call.deadline),
    )
    .await
    .unwrap_or_else(|_| {
        Err(UpstreamError::Unreachable {
            targets: "the upstream".into(),
            reason: "the configs were not read before the request's timeout".into(),
        })
    });
    let configs = read.map_err(|e| {
            UpdateRejection::new(
                Reason::AuditBlind,
                format!(
                    "kshim could not read the cluster's configs to audit the change, so nothing was applied: {e}"
                ),
            )
        })?;
    let current = section.snapshot();
    let level_of = |f: &str| current.finalized.level(f);
    for (feature, target) in &audit.changing {
        let findings = policy::audit(&policies.validators, feature, *target, &level_of, &configs);
        if !findings.is_empty() {
            return Err(UpdateRejection::new(
                Reason::ConfigViolation,
                format!(
                    "Invalid update version {target} for feature {feature}. {}",
                    policy::audit_refusal(feature, *target, &findings)
                ),
            )
            .for_feature(feature));
        }
    }
    Ok(fence)
}

/// Sends the request on and answers with the upstream's response, once the
/// mirror shows what the upstream applied (or `MIRROR_WAIT` has passed).
async fn forward<C: Cluster>(section: &UpdateSection<'_>, cluster: &C, call: &Call) -> Outcome {
    let sent = tokio::time::timeout_at(
        call.deadline.into(),
        cluster.forward(call.version, call.body.clone(), call.deadline),
    )
    .await
    .unwrap_or_else(|_| {
        Err(UpstreamError::Unreachable {
            targets: "the upstream".into(),
            reason: "no answer before the request's timeout".into(),
        })
    });
    let raw = match sent {
        Ok(raw) => raw,
        Err(e) => {
            return Outcome::Decided(Err(UpdateRejection::new(
                Reason::UpstreamFailed,
                format!("kshim could not reach the upstream cluster: {e}"),
            )))
        }
    };
    let code = crate::protocol::apis::update_features_error_code(&raw);
    if code == Ok(errors::NONE) && !call.validate_only {
        let until = Instant::now() + call.mirror_wait;
        loop {
            cluster.refresh(call.mirror_wait).await;
            let snapshot = section.snapshot();
            let mirrored = call
                .requested
                .iter()
                .all(|(name, level)| snapshot.finalized.level(name) == *level);
            if mirrored {
                // In a kshim cluster, the new levels get their shared epoch
                // before the client hears of them.
                if let Err(e) = section.settle_upstream_epoch().await {
                    tracing::warn!(
                        "the upstream's new levels have no shared epoch yet: {}",
                        e.message
                    );
                }
                break;
            }
            if Instant::now() >= until {
                tracing::warn!("the upstream accepted UpdateFeatures but its brokers do not show the new levels yet");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Outcome::Upstream(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{ControllerSettings, FeatureController};
    use crate::features::kafka::KafkaRelease;
    use crate::features::{FeatureUpdate, Ownership, SupportedRange, UpdateRules, UpgradeType};
    use crate::handlers::update_features::plan::{decide, Facts, Request};
    use crate::policy::rule::{Bound, ValueRule};
    use crate::policy::{ConfigResource, ConfigValidator, ConfigValidators};
    use crate::protocol::errors::ResponseError;
    use crate::store::FileStore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// What the fake upstream does when asked.
    #[derive(Clone)]
    enum Reply<T> {
        Ok(T),
        Fail(UpstreamError),
        Hang,
    }

    struct FakeCluster {
        forward: Reply<Bytes>,
        configs: Reply<Vec<ReportedConfig>>,
        forwarded: AtomicUsize,
        refreshes: AtomicUsize,
    }

    impl FakeCluster {
        fn new(forward: Reply<Bytes>, configs: Reply<Vec<ReportedConfig>>) -> FakeCluster {
            FakeCluster {
                forward,
                configs,
                forwarded: AtomicUsize::new(0),
                refreshes: AtomicUsize::new(0),
            }
        }
    }

    async fn play<T: Clone>(reply: &Reply<T>) -> Result<T, UpstreamError> {
        match reply {
            Reply::Ok(v) => Ok(v.clone()),
            Reply::Fail(e) => Err(e.clone()),
            Reply::Hang => std::future::pending().await,
        }
    }

    impl Cluster for FakeCluster {
        fn forward(
            &self,
            _version: i16,
            _body: Bytes,
            _deadline: Instant,
        ) -> impl Future<Output = Result<Bytes, UpstreamError>> + Send {
            self.forwarded.fetch_add(1, Ordering::Relaxed);
            play(&self.forward)
        }

        fn read_configs(
            &self,
            _keys: Vec<String>,
            _deadline: Instant,
        ) -> impl Future<Output = Result<Vec<ReportedConfig>, UpstreamError>> + Send {
            play(&self.configs)
        }

        fn refresh(&self, _timeout: Duration) -> impl Future<Output = ()> + Send {
            self.refreshes.fetch_add(1, Ordering::Relaxed);
            std::future::ready(())
        }
    }

    fn answer(code: i16) -> Bytes {
        let mut b = vec![0, 0, 0, 0];
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&[0xff, 0xff, 0]);
        Bytes::from(b)
    }

    fn broker_config(value: &str) -> ReportedConfig {
        ReportedConfig {
            resource: ConfigResource::Broker("2".into()),
            key: "log.segment.bytes".into(),
            value: value.into(),
            source: "STATIC_BROKER_CONFIG",
        }
    }

    fn unreadable_broker() -> UpstreamError {
        UpstreamError::Protocol {
            target: "broker 2 (127.0.0.1:9093)".into(),
            reason: "its configs could not be read: no answer within 1s".into(),
        }
    }

    struct Bench {
        _dir: tempfile::TempDir,
        controller: FeatureController,
        policies: Policies,
    }

    fn bench() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let kafka = KafkaRelease::named("4.1").unwrap();
        let mut supported = kafka.supported_features();
        supported.insert("acme.audit".into(), SupportedRange::new(0, 3));
        let controller = FeatureController::open(
            Arc::new(FileStore::open(dir.path()).unwrap()),
            ControllerSettings {
                node_id: 1,
                cluster_id: None,
                supported,
                bootstrap: Some([("acme.audit".to_owned(), 1)].into()),
                rules: UpdateRules {
                    release: kafka,
                    dependencies: kafka.dependencies(),
                },
                ownership: Ownership::in_front(vec!["acme.*".into()]),
                cluster: None,
            },
        )
        .unwrap();
        let validators = ConfigValidators::new(vec![ConfigValidator {
            key: "log.segment.bytes".into(),
            feature: "acme.audit".into(),
            level: 2,
            rule: ValueRule {
                min: Some(Bound::Int(2_097_152)),
                ..ValueRule::default()
            },
        }])
        .unwrap();
        Bench {
            _dir: dir,
            controller,
            policies: Policies {
                validators,
                ..Policies::default()
            },
        }
    }

    impl Bench {
        /// Decides and executes one request for `name` at `level`.
        async fn run(
            &self,
            cluster: &FakeCluster,
            name: &str,
            level: i16,
            within: Duration,
        ) -> Outcome {
            let section = self.controller.begin(Duration::from_secs(1)).await.unwrap();
            let snapshot = section.snapshot();
            let supporters = section.supporters();
            let owner = |n: &str| section.owner(n);
            let request = Request {
                updates: vec![FeatureUpdate {
                    name: name.into(),
                    level,
                    upgrade_type: UpgradeType::Upgrade,
                }],
                validate_only: false,
            };
            let plan = decide(
                &request,
                &Facts {
                    finalized: &snapshot.finalized,
                    supporters: &supporters,
                    rules: section.rules(),
                    conflicts: &[],
                    validators: &self.policies.validators,
                    owner: &owner,
                    in_front: true,
                },
            );
            let call = Call {
                version: 1,
                body: Bytes::new(),
                validate_only: false,
                requested: vec![(name.to_owned(), level)],
                deadline: Instant::now() + within,
                mirror_wait: Duration::from_millis(200),
            };
            execute(&section, plan, Some(cluster), &self.policies, &call).await
        }

        fn level(&self, name: &str) -> i16 {
            self.controller.snapshot().finalized.level(name)
        }
    }

    fn refused(outcome: Outcome) -> UpdateRejection {
        match outcome {
            Outcome::Decided(Err(r)) => r,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    const SOON: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn an_upstream_gone_mid_forward_is_an_upstream_failure() {
        let b = bench();
        let gone = UpstreamError::Broken {
            target: "127.0.0.1:9092".into(),
            reason: "connection reset".into(),
        };
        let cluster = FakeCluster::new(Reply::Fail(gone), Reply::Ok(vec![]));
        let r = refused(b.run(&cluster, "group.version", 1, SOON).await);
        assert_eq!(r.reason, Reason::UpstreamFailed);
        assert!(r.message.contains("connection reset"), "{}", r.message);
        assert_eq!(
            super::super::error_code(r.reason),
            ResponseError::RequestTimedOut.code()
        );
    }

    #[tokio::test]
    async fn a_silent_upstream_ends_at_the_deadline() {
        let b = bench();
        let cluster = FakeCluster::new(Reply::Hang, Reply::Ok(vec![]));
        let started = Instant::now();
        let r = refused(
            b.run(&cluster, "group.version", 1, Duration::from_millis(150))
                .await,
        );
        assert_eq!(r.reason, Reason::UpstreamFailed);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn the_upstreams_refusal_stands_and_is_not_waited_for() {
        let b = bench();
        let cluster = FakeCluster::new(
            Reply::Ok(answer(ResponseError::NotController.code())),
            Reply::Ok(vec![]),
        );
        assert_eq!(
            b.run(&cluster, "group.version", 1, SOON).await,
            Outcome::Upstream(answer(ResponseError::NotController.code()))
        );
        assert_eq!(cluster.refreshes.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_accepted_forward_waits_a_bounded_time_for_the_mirror() {
        let b = bench();
        let cluster = FakeCluster::new(Reply::Ok(answer(errors::NONE)), Reply::Ok(vec![]));
        let started = Instant::now();
        assert_eq!(
            b.run(&cluster, "group.version", 1, SOON).await,
            Outcome::Upstream(answer(errors::NONE))
        );
        assert!(cluster.refreshes.load(Ordering::Relaxed) >= 1);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn an_audit_that_cannot_read_a_broker_refuses_naming_it() {
        let b = bench();
        let cluster = FakeCluster::new(Reply::Ok(answer(0)), Reply::Fail(unreadable_broker()));
        let r = refused(b.run(&cluster, "acme.audit", 2, SOON).await);
        assert_eq!(r.reason, Reason::AuditBlind);
        assert_eq!(
            super::super::error_code(r.reason),
            ResponseError::FeatureUpdateFailed.code()
        );
        assert!(r.message.contains("broker 2"), "{}", r.message);
        assert_eq!(b.level("acme.audit"), 1);
    }

    #[tokio::test]
    async fn an_audit_read_that_never_ends_refuses_at_the_deadline() {
        let b = bench();
        let cluster = FakeCluster::new(Reply::Ok(answer(0)), Reply::Hang);
        let r = refused(
            b.run(&cluster, "acme.audit", 2, Duration::from_millis(150))
                .await,
        );
        assert_eq!(r.reason, Reason::AuditBlind);
        assert_eq!(b.level("acme.audit"), 1);
    }

    #[tokio::test]
    async fn a_violation_refuses_and_a_clean_audit_applies() {
        let b = bench();
        let dirty = FakeCluster::new(
            Reply::Ok(answer(0)),
            Reply::Ok(vec![broker_config("1048576")]),
        );
        let r = refused(b.run(&dirty, "acme.audit", 2, SOON).await);
        assert_eq!(r.reason, Reason::ConfigViolation);
        assert!(
            r.message.contains("broker 2: log.segment.bytes=1048576"),
            "{}",
            r.message
        );
        assert_eq!(b.level("acme.audit"), 1);
        let epoch = b.controller.snapshot().finalized.epoch;
        let clean = FakeCluster::new(
            Reply::Ok(answer(0)),
            Reply::Ok(vec![broker_config("4194304")]),
        );
        assert_eq!(
            b.run(&clean, "acme.audit", 2, SOON).await,
            Outcome::Decided(Ok(()))
        );
        assert_eq!(b.level("acme.audit"), 2);
        assert_eq!(b.controller.snapshot().finalized.epoch, epoch + 1);
        assert_eq!(
            clean.forwarded.load(Ordering::Relaxed),
            0,
            "kshim's own feature is never forwarded"
        );
    }

    #[tokio::test]
    async fn a_config_change_in_flight_holds_the_audit_back() {
        let b = bench();
        let clean = FakeCluster::new(Reply::Ok(answer(0)), Reply::Ok(vec![]));
        let in_flight = b.controller.fence().pass();
        let r = refused(
            b.run(&clean, "acme.audit", 2, Duration::from_millis(150))
                .await,
        );
        assert_eq!(r.reason, Reason::Busy);
        assert_eq!(b.level("acme.audit"), 1);
        drop(in_flight);
        assert_eq!(
            b.run(&clean, "acme.audit", 2, SOON).await,
            Outcome::Decided(Ok(()))
        );
    }
}
