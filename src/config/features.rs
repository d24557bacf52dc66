//! `[features]`: the features kshim supports and their dependencies.

use super::walk::record_key;
use super::{level, string_list, walker, Config, ConfigError};
use crate::features::{Requirement, SupportedFeatures, SupportedRange};
use std::collections::BTreeMap;

pub(super) fn parse_features(t: &toml::Table, c: &mut Config, errors: &mut Vec<ConfigError>) {
    let mut w = walker("features", t, errors);
    let supported = w.table("supported");
    let bootstrap = w.table("bootstrap");
    let dependencies = w.table("dependencies");
    let ownership = w.table("ownership");
    w.finish();

    if let Some(t) = ownership {
        let mut w = walker("features.ownership", t, errors);
        if let Some(v) = w.get("kshim_owned") {
            if let Some(list) = string_list(v, "features.ownership.kshim_owned", w.errors) {
                c.kshim_owned = list;
            }
        }
        w.finish();
    }

    if let Some(t) = supported {
        let mut out = SupportedFeatures::new();
        for (name, v) in t {
            let key = format!("features.supported.\"{name}\"");
            let Some(range) = v.as_table() else {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected {{ min = A, max = B }}"),
                ));
                continue;
            };
            let mut w = walker(&key, range, errors);
            let min = w
                .get("min")
                .and_then(|v| level(v, &format!("{key}.min"), w.errors));
            let max = w
                .get("max")
                .and_then(|v| level(v, &format!("{key}.max"), w.errors));
            w.finish();
            match (min, max) {
                (Some(min), Some(max)) if min <= max => {
                    out.insert(name.clone(), SupportedRange::new(min, max));
                }
                (Some(min), Some(max)) => errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("min {min} is above max {max}"),
                )),
                (None, _) | (_, None)
                    if !range.contains_key("min") || !range.contains_key("max") =>
                {
                    errors.push(ConfigError::new(
                        format!("{key}"),
                        format!("both min and max are required"),
                    ))
                }
                _ => {}
            }
        }
        c.supported = Some(out);
    }
    if let Some(t) = bootstrap {
        let mut out = BTreeMap::new();
        for (name, v) in t {
            let key = format!("features.bootstrap.\"{name}\"");
            record_key(&key);
            if let Some(l) = level(v, &key, errors) {
                out.insert(name.clone(), l);
            }
        }
        c.bootstrap = Some(out);
    }
    if let Some(t) = dependencies {
        // "feature" = [{ level = L, requires = { "other" = M, ... } }, ...]
        for (name, v) in t {
            let key = format!("features.dependencies.\"{name}\"");
            let Some(rules) = v.as_array() else {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected a list of {{ level = L, requires = {{ \"feature\" = M }} }}"),
                ));
                continue;
            };
            for (i, rule) in rules.iter().enumerate() {
                let key = format!("{key}[{i}]");
                let Some(rule) = rule.as_table() else {
                    errors.push(ConfigError::new(
                        format!("{key}"),
                        format!("expected {{ level = L, requires = {{ ... }} }}"),
                    ));
                    continue;
                };
                let mut w = walker(&key, rule, errors);
                let from = w
                    .get("level")
                    .and_then(|v| level(v, &format!("{key}.level"), w.errors));
                let requires = w.table("requires");
                w.finish();
                let (Some(from), Some(requires)) = (from, requires) else {
                    errors.push(ConfigError::new(
                        format!("{key}"),
                        format!("both level and requires are required"),
                    ));
                    continue;
                };
                for (dep, min) in requires {
                    let key = format!("{key}.requires.\"{dep}\"");
                    record_key(&key);
                    if let Some(min_level) = level(min, &key, errors) {
                        c.dependencies.add(
                            name,
                            from,
                            Requirement {
                                feature: dep.clone(),
                                min_level,
                            },
                        );
                    }
                }
            }
        }
    }
}
