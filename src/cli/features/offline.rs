//! The lookups of `kshim features` that ask no server: `version-mapping` and
//! `feature-dependencies`, from the newest release's tables, printed as Kafka's
//! FeatureCommand prints them.

use super::{emit, release_level, tool_release, Output};
use anyhow::{bail, Result};
use kshim::features::kafka::METADATA_VERSION;
use serde_json::{json, Map, Value};

/// `version-mapping`: Kafka's FeatureCommand lines for a release.
pub(super) fn version_mapping(release: Option<&str>, output: Output) -> Result<u8> {
    let (name, level) = match release {
        None => {
            let level = tool_release().metadata_version_latest_production();
            (
                tool_release()
                    .metadata_version_name(level)
                    .unwrap_or_default(),
                level,
            )
        }
        Some(name) => (name, release_level(name)?),
    };
    let levels = tool_release().release_levels(level);
    match output {
        Output::Text => {
            let mut out = String::new();
            for (feature, l) in &levels {
                if *feature == METADATA_VERSION {
                    out.push_str(&format!("{feature}={l} ({name})\n"));
                } else {
                    out.push_str(&format!("{feature}={l}\n"));
                }
            }
            emit(&out);
        }
        Output::Json => {
            let features: Map<String, Value> = levels
                .iter()
                .map(|(f, l)| ((*f).to_owned(), json!(l)))
                .collect();
            emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(
                    &json!({"release_version": name, "features": features})
                )?
            ));
        }
    }
    Ok(0)
}

/// `feature-dependencies`: what each named level requires, from the newest
/// release's table. Every name is checked before anything is printed.
pub(super) fn feature_dependencies(specs: &[String], output: Output) -> Result<u8> {
    let table = tool_release().dependencies();
    let mut found = Vec::new();
    for spec in specs {
        let Some((name, level)) = spec.split_once('=') else {
            bail!("Can't parse feature=level string {spec}: equals sign not found.");
        };
        let level: i16 = level.trim().parse().map_err(|_| {
            anyhow::anyhow!(
                "Can't parse feature=level string {spec}: unable to parse {level} as a short."
            )
        })?;
        let name = name.trim();
        match tool_release().defines_level(name, level) {
            None => bail!("Unknown feature: {name}"),
            Some(false) if name == METADATA_VERSION => bail!("Unknown metadata.version {level}"),
            Some(false) => bail!("No feature:{name} with feature level {level}"),
            Some(true) => {}
        }
        let requires: Vec<(String, i16)> = table
            .requirements(name, level)
            .into_iter()
            .map(|r| (r.feature.clone(), r.min_level))
            .collect();
        found.push((name.to_owned(), level, requires));
    }
    match output {
        Output::Text => {
            let mut out = String::new();
            for (name, level, requires) in &found {
                let head = with_release_name(name, *level);
                if requires.is_empty() {
                    out.push_str(&format!("{head} has no dependencies.\n"));
                } else {
                    out.push_str(&format!("{head} requires:\n"));
                    for (feature, min) in requires {
                        out.push_str(&format!("    {}\n", with_release_name(feature, *min)));
                    }
                }
            }
            emit(&out);
        }
        Output::Json => {
            let doc: Vec<Value> = found
                .iter()
                .map(|(name, level, requires)| {
                    let requires: Map<String, Value> = requires
                        .iter()
                        .map(|(f, l)| (f.clone(), json!(l)))
                        .collect();
                    json!({"feature": name, "level": level, "requires": requires})
                })
                .collect();
            emit(&format!("{}\n", serde_json::to_string_pretty(&doc)?));
        }
    }
    Ok(0)
}

/// `name=level`, with the release name after a metadata.version level.
fn with_release_name(name: &str, level: i16) -> String {
    match tool_release().any_metadata_version_name(level) {
        Some(release) if name == METADATA_VERSION => format!("{name}={level} ({release})"),
        _ => format!("{name}={level}"),
    }
}
