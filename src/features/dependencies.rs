//! Feature dependencies, as Kafka 4.x declares them: a level of one feature requires
//! a minimum level of another (for example `group.version` 1 needs
//! `metadata.version` 4.0-IV0). A requirement declared at level L holds for L and
//! every level above it.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub feature: String,
    pub min_level: i16,
}

/// feature -> (from level, requirements), kept sorted by level.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dependencies {
    rules: BTreeMap<String, BTreeMap<i16, Vec<Requirement>>>,
}

impl Dependencies {
    pub fn add(&mut self, feature: &str, from_level: i16, requirement: Requirement) {
        self.rules
            .entry(feature.to_owned())
            .or_default()
            .entry(from_level)
            .or_default()
            .push(requirement);
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every (feature, from level, requirement) declared.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i16, &Requirement)> {
        self.rules.iter().flat_map(|(f, levels)| {
            levels
                .iter()
                .flat_map(move |(l, reqs)| reqs.iter().map(move |r| (f.as_str(), *l, r)))
        })
    }

    /// The requirements in force for `feature` at `level`.
    pub fn requirements(&self, feature: &str, level: i16) -> Vec<&Requirement> {
        match self.rules.get(feature) {
            None => Vec::new(),
            Some(levels) => levels
                .range(..=level)
                .flat_map(|(_, reqs)| reqs.iter())
                .collect(),
        }
    }

    /// Merges `other` over `self`: a feature named in `other` takes its rules from
    /// there entirely.
    pub fn overridden_by(mut self, other: Dependencies) -> Dependencies {
        for (feature, levels) in other.rules {
            self.rules.insert(feature, levels);
        }
        self
    }

    /// The first requirement that the proposed levels leave unmet, as the message
    /// Kafka gives for it.
    pub fn unmet(
        &self,
        feature: &str,
        level: i16,
        proposed: &dyn Fn(&str) -> i16,
    ) -> Option<String> {
        if level == 0 {
            return None;
        }
        self.requirements(feature, level)
            .into_iter()
            .find_map(|req| {
                let have = proposed(&req.feature);
                (have < req.min_level).then(|| {
                    format!(
                        "{feature} could not be set to {level} because it depends on {} level {}",
                        req.feature, req.min_level
                    )
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps() -> Dependencies {
        let mut d = Dependencies::default();
        d.add(
            "g",
            1,
            Requirement {
                feature: "m".into(),
                min_level: 22,
            },
        );
        d.add(
            "g",
            3,
            Requirement {
                feature: "m".into(),
                min_level: 25,
            },
        );
        d
    }

    #[test]
    fn a_requirement_holds_from_its_level_upwards() {
        let d = deps();
        assert!(d.requirements("g", 0).is_empty());
        assert_eq!(d.requirements("g", 1).len(), 1);
        assert_eq!(d.requirements("g", 2).len(), 1);
        assert_eq!(d.requirements("g", 3).len(), 2);
        assert!(d.requirements("other", 3).is_empty());
    }

    #[test]
    fn unmet_names_the_dependency() {
        let d = deps();
        assert_eq!(d.unmet("g", 1, &|_| 22), None);
        let msg = d.unmet("g", 3, &|_| 24).unwrap();
        assert_eq!(
            msg,
            "g could not be set to 3 because it depends on m level 25"
        );
        assert_eq!(d.unmet("g", 0, &|_| 0), None);
    }
}
