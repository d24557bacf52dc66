//! Who owns a feature in front of a cluster, and the one view clients see.
//!
//! Upstream-owned features are Apache Kafka's own feature names (whether the
//! upstream advertises them or not) and any other name the upstream advertises:
//! they are mirrored from it, and kshim never serves a level for them that the
//! upstream did not finalize. kshim-owned features (configured names or
//! prefixes, and anything else kshim supports) live in kshim's store. `merge`
//! builds the single snapshot that ApiVersions reports. Standalone kshim owns
//! everything.

use super::kafka::{is_kafka_feature, kafka_feature_names};
use super::{FeatureSnapshot, FinalizedFeatures, SupportedFeatures};

/// The upstream's feature state as kshim last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mirror {
    /// What every live upstream broker supports.
    pub supported: SupportedFeatures,
    /// The upstream's finalized levels, with the upstream's own epoch (-1 when
    /// no broker reported one).
    pub finalized: FinalizedFeatures,
    /// The upstream's cluster id, when it gave one: a view of another cluster
    /// is not compared by epoch with this one's.
    pub cluster_id: Option<String>,
}

/// Whether a freshly read upstream view may replace the accepted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewVerdict {
    /// Its epoch is at least the accepted one (or it is the first view, or a
    /// view of another cluster).
    Accept,
    /// Older than the accepted view: a lagging broker's, to be ignored.
    Stale { seen: i64, accepted: i64 },
}

impl Mirror {
    /// The epoch rule for mirrored views: "a higher epoch always trumps an
    /// older smaller epoch", so a view is taken only when its upstream epoch is
    /// no older than the last accepted one.
    pub fn judge(accepted: Option<&Mirror>, next: &Mirror) -> ViewVerdict {
        match accepted {
            Some(a)
                if a.cluster_id == next.cluster_id && next.finalized.epoch < a.finalized.epoch =>
            {
                ViewVerdict::Stale {
                    seen: next.finalized.epoch,
                    accepted: a.finalized.epoch,
                }
            }
            _ => ViewVerdict::Accept,
        }
    }
}

/// Who owns which feature: everything kshim's when it stands alone; in front of
/// a cluster, the configured kshim-owned features (exact names, or prefixes
/// written with a trailing `*`, `"acme.*"`) and those the upstream neither
/// defines nor advertises.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ownership {
    patterns: Vec<String>,
    in_front: bool,
}

/// Which side decides a feature's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Kshim,
    Upstream,
}

impl Ownership {
    /// Standalone: kshim owns every feature.
    pub fn standalone() -> Self {
        Ownership::default()
    }

    /// In front of a cluster, with the configured kshim-owned patterns.
    pub fn in_front(patterns: Vec<String>) -> Self {
        Ownership {
            patterns,
            in_front: true,
        }
    }

    /// Apache Kafka's own features that the configuration makes kshim's: each
    /// deserves a warning at startup, as clients will trust kshim's level over
    /// the brokers'.
    pub fn claimed_kafka_features(&self) -> Vec<&'static str> {
        if !self.in_front {
            return Vec::new();
        }
        kafka_feature_names()
            .iter()
            .copied()
            .filter(|name| self.claims(name))
            .collect()
    }

    fn claims(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        })
    }

    /// The owner of `name`, given what the upstream advertises (`None`: not
    /// seen yet).
    pub fn owner(&self, name: &str, mirror: Option<&Mirror>) -> Owner {
        if !self.in_front || self.claims(name) {
            return Owner::Kshim;
        }
        if is_kafka_feature(name) || mirror.is_some_and(|m| m.supported.contains_key(name)) {
            Owner::Upstream
        } else {
            Owner::Kshim
        }
    }
}

/// The snapshot clients see: upstream-owned features from the mirror, kshim-owned
/// ones from kshim's own state, and kshim's epoch (`own.epoch`), which moves
/// whenever either part changes.
pub fn merge(
    own_supported: &SupportedFeatures,
    own: &FinalizedFeatures,
    mirror: Option<&Mirror>,
    ownership: &Ownership,
) -> FeatureSnapshot {
    // Names only the mirror knows are upstream-owned by definition; kshim's own
    // names are taken from kshim's state only when kshim owns them.
    let mut supported = SupportedFeatures::new();
    let mut finalized = FinalizedFeatures {
        epoch: own.epoch,
        levels: Default::default(),
    };
    if let Some(m) = mirror {
        for (name, range) in &m.supported {
            if ownership.owner(name, mirror) == Owner::Upstream {
                supported.insert(name.clone(), *range);
                let level = m.finalized.level(name);
                if level > 0 {
                    finalized.levels.insert(name.clone(), level);
                }
            }
        }
    }
    for (name, range) in own_supported {
        if ownership.owner(name, mirror) == Owner::Kshim {
            supported.insert(name.clone(), *range);
            let level = own.level(name);
            if level > 0 {
                finalized.levels.insert(name.clone(), level);
            }
        }
    }
    FeatureSnapshot {
        supported,
        finalized,
        cluster_unknown: ownership.in_front && mirror.is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::SupportedRange;

    fn levels(pairs: &[(&str, i16)]) -> std::collections::BTreeMap<String, i16> {
        pairs.iter().map(|&(n, l)| (n.to_owned(), l)).collect()
    }

    #[test]
    fn upstream_features_are_mirrored_and_the_rest_are_kshims() {
        let own_supported: SupportedFeatures = [
            ("metadata.version".to_owned(), SupportedRange::new(7, 27)),
            ("acme.widgets".to_owned(), SupportedRange::new(1, 4)),
            ("group.version".to_owned(), SupportedRange::new(0, 1)),
        ]
        .into();
        let own = FinalizedFeatures {
            epoch: 50,
            levels: levels(&[
                ("metadata.version", 27),
                ("acme.widgets", 2),
                ("group.version", 1),
            ]),
        };
        let mirror = Mirror {
            supported: [
                ("metadata.version".to_owned(), SupportedRange::new(7, 26)),
                ("group.version".to_owned(), SupportedRange::new(0, 1)),
            ]
            .into(),
            finalized: FinalizedFeatures {
                epoch: 900,
                levels: levels(&[("metadata.version", 26)]),
            },
            cluster_id: None,
        };
        let ownership = Ownership::in_front(vec!["group.*".into()]);
        let view = merge(&own_supported, &own, Some(&mirror), &ownership);
        assert_eq!(view.finalized.epoch, 50);
        assert_eq!(
            view.finalized.levels,
            levels(&[
                ("metadata.version", 26),
                ("acme.widgets", 2),
                ("group.version", 1)
            ])
        );
        assert_eq!(
            view.supported["metadata.version"],
            SupportedRange::new(7, 26)
        );
        assert_eq!(
            ownership.owner("group.version", Some(&mirror)),
            Owner::Kshim
        );
        assert_eq!(
            ownership.owner("metadata.version", Some(&mirror)),
            Owner::Upstream
        );
        assert_eq!(ownership.owner("metadata.version", None), Owner::Upstream);
        assert_eq!(ownership.claimed_kafka_features(), ["group.version"]);
        let alone = Ownership::standalone();
        assert_eq!(alone.owner("metadata.version", Some(&mirror)), Owner::Kshim);
        assert_eq!(merge(&own_supported, &own, None, &alone).finalized, own);
    }

    #[test]
    fn kafka_features_the_upstream_lacks_are_not_invented() {
        let own_supported: SupportedFeatures = [
            ("group.version".to_owned(), SupportedRange::new(0, 1)),
            ("transaction.version".to_owned(), SupportedRange::new(0, 2)),
            ("acme.widgets".to_owned(), SupportedRange::new(1, 4)),
        ]
        .into();
        let own = FinalizedFeatures {
            epoch: 3,
            levels: levels(&[
                ("group.version", 1),
                ("transaction.version", 2),
                ("acme.widgets", 2),
            ]),
        };
        // An older cluster: it advertises transaction.version only, finalized at 0.
        let mirror = Mirror {
            supported: [("transaction.version".to_owned(), SupportedRange::new(0, 2))].into(),
            finalized: FinalizedFeatures {
                epoch: 10,
                levels: levels(&[]),
            },
            cluster_id: None,
        };
        let ownership = Ownership::in_front(Vec::new());
        for seen in [None, Some(&mirror)] {
            let view = merge(&own_supported, &own, seen, &ownership);
            assert_eq!(view.finalized.levels, levels(&[("acme.widgets", 2)]));
            assert!(!view.supported.contains_key("group.version"));
            assert_eq!(ownership.owner("group.version", seen), Owner::Upstream);
        }
        let view = merge(&own_supported, &own, Some(&mirror), &ownership);
        assert_eq!(
            view.supported["transaction.version"],
            SupportedRange::new(0, 2)
        );
        assert!(ownership.claimed_kafka_features().is_empty());
    }

    #[test]
    fn an_older_view_of_the_same_cluster_is_stale() {
        let view = |epoch, cluster: Option<&str>| Mirror {
            supported: SupportedFeatures::new(),
            finalized: FinalizedFeatures {
                epoch,
                levels: levels(&[]),
            },
            cluster_id: cluster.map(str::to_owned),
        };
        let accepted = view(100, Some("A"));
        assert_eq!(
            Mirror::judge(None, &view(5, Some("A"))),
            ViewVerdict::Accept
        );
        assert_eq!(
            Mirror::judge(Some(&accepted), &view(100, Some("A"))),
            ViewVerdict::Accept
        );
        assert_eq!(
            Mirror::judge(Some(&accepted), &view(101, Some("A"))),
            ViewVerdict::Accept
        );
        assert_eq!(
            Mirror::judge(Some(&accepted), &view(90, Some("A"))),
            ViewVerdict::Stale {
                seen: 90,
                accepted: 100
            }
        );
        assert_eq!(
            Mirror::judge(Some(&accepted), &view(-1, Some("A"))),
            ViewVerdict::Stale {
                seen: -1,
                accepted: 100
            }
        );
        // Another cluster behind the same bootstrap: its epochs are its own.
        assert_eq!(
            Mirror::judge(Some(&accepted), &view(3, Some("B"))),
            ViewVerdict::Accept
        );
    }
}
