//! `[lab]`: the discovery lab's scenarios, each checked as the lab would
//! build it, every problem reported with its key.

use super::ConfigError;
use crate::lab::{Scenario, ScenarioSpec, MAX_SCENARIOS};

/// Reads `[lab]`: `scenarios`, a list of scenario tables.
pub(super) fn parse_lab(table: &toml::Table, errors: &mut Vec<ConfigError>) -> Vec<ScenarioSpec> {
    let mut out = Vec::new();
    for key in table.keys() {
        if key != "scenarios" {
            errors.push(ConfigError::new(format!("lab.{key}"), "unknown key"));
        }
    }
    let Some(list) = table.get("scenarios") else {
        return out;
    };
    let Some(list) = list.as_array() else {
        errors.push(ConfigError::new(
            "lab.scenarios",
            "expected a list of scenarios ([[lab.scenarios]])",
        ));
        return out;
    };
    for (i, item) in list.iter().enumerate() {
        let key = format!("lab.scenarios[{i}]");
        match item.clone().try_into::<ScenarioSpec>() {
            Ok(spec) => match Scenario::new(spec.clone()) {
                Ok(_) if out.iter().any(|s: &ScenarioSpec| s.name == spec.name) => {
                    errors.push(ConfigError::new(
                        key,
                        format!("a second scenario named {}", spec.name),
                    ));
                }
                Ok(_) => out.push(spec),
                Err(problems) => {
                    for p in problems {
                        errors.push(ConfigError::new(key.clone(), p));
                    }
                }
            },
            Err(e) => errors.push(ConfigError::new(key, e.message().to_owned())),
        }
    }
    if out.len() > MAX_SCENARIOS {
        errors.push(ConfigError::new(
            "lab.scenarios",
            format!("at most {MAX_SCENARIOS} scenarios"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_scenarios_are_checked_with_their_keys() {
        let doc: toml::Table = toml::from_str(
            r#"
            [[scenarios]]
            name = "a"
            [[scenarios]]
            name = "a"
            [[scenarios]]
            name = "b"
            colour = "red"
            "#,
        )
        .unwrap();
        let mut errors = Vec::new();
        let specs = parse_lab(&doc, &mut errors);
        assert_eq!(specs.len(), 1);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text[0].starts_with("lab.scenarios[1]: a second scenario named a"),
            "{text:?}"
        );
        assert!(
            text[1].starts_with("lab.scenarios[2]") && text[1].contains("colour"),
            "{text:?}"
        );
    }
}
