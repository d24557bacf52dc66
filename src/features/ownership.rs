//! Who owns a feature in front of a cluster, and the one view clients see.
//!
//! Upstream-owned features (those the upstream advertises) are mirrored from it;
//! kshim-owned features (configured names or prefixes, and anything the upstream
//! does not know) live in kshim's store. `merge` builds the single snapshot that
//! ApiVersions reports. Standalone kshim has no mirror, so it owns everything.

use super::{FeatureSnapshot, FinalizedFeatures, SupportedFeatures};

/// The upstream's feature state as kshim last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mirror {
    /// What every live upstream broker supports.
    pub supported: SupportedFeatures,
    /// The upstream's finalized levels, with the upstream's own epoch.
    pub finalized: FinalizedFeatures,
}

/// Configured kshim-owned features: exact names, or prefixes written with a
/// trailing `*` (`"acme.*"`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ownership {
    patterns: Vec<String>,
}

/// Which side decides a feature's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Kshim,
    Upstream,
}

impl Ownership {
    pub fn new(patterns: Vec<String>) -> Self {
        Ownership { patterns }
    }

    fn claims(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        })
    }

    /// The owner of `name`, given what the upstream advertises (`None`: no upstream).
    pub fn owner(&self, name: &str, mirror: Option<&Mirror>) -> Owner {
        match mirror {
            Some(m) if !self.claims(name) && m.supported.contains_key(name) => Owner::Upstream,
            _ => Owner::Kshim,
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
        };
        let ownership = Ownership::new(vec!["group.*".into()]);
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
        assert_eq!(ownership.owner("metadata.version", None), Owner::Kshim);
        assert_eq!(merge(&own_supported, &own, None, &ownership).finalized, own);
    }
}
