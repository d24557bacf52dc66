//! Placeholders in config values, as Kafka's config providers write them:
//! `${env:NAME}` (an environment variable) and `${file:PATH:KEY}` (the value of
//! KEY in the Java properties file at PATH). They are kept raw wherever a config
//! is stored or shown, and resolved by each kshim just before the config is
//! checked, so that a secret need never be written down anywhere but its source.
//!
//! `${file:...}` reads only an absolute path without `.` or `..` parts that names a
//! regular file of at most 1 MiB, and, when `[config_providers]
//! file_allowed_paths` is set, only below one of those directories (after
//! symbolic links are resolved). Other `${...}` text is left as it is.
//!
//! Resolved values are secrets: `Scrubber` replaces them with their placeholder
//! in every message that could reach a log line or an HTTP answer.

use super::ConfigError;
use std::path::{Component, Path, PathBuf};

/// What placeholders may read.
#[derive(Debug, Clone, Default)]
pub struct Providers {
    /// Directories `${file:...}` may read below; empty: anywhere.
    pub file_allowed_paths: Vec<PathBuf>,
}

/// Turns resolved secret values back into their placeholders in text.
#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    /// (value, placeholder), longest value first.
    pairs: Vec<(String, String)>,
}

impl Scrubber {
    fn add(&mut self, value: String, placeholder: String) {
        // A value this short would mangle unrelated text; it is no secret worth
        // the name either way.
        if value.len() >= 3 && !self.pairs.iter().any(|(v, _)| *v == value) {
            self.pairs.push((value, placeholder));
            self.pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        }
    }

    /// Keeps values that are secret although they were written literally
    /// (passwords, tokens).
    pub fn add_literal(&mut self, value: &str) {
        self.add(value.to_owned(), "[hidden]".to_owned());
    }

    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, placeholder) in &self.pairs {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), placeholder);
            }
        }
        out
    }

    pub fn merge(&mut self, other: Scrubber) {
        for (v, p) in other.pairs {
            self.add(v, p);
        }
    }
}

/// Resolves every placeholder in every string of `doc`, in place. Errors name
/// the key whose value could not be resolved.
pub fn resolve_document(
    doc: &mut toml::Table,
    providers: &Providers,
    scrubber: &mut Scrubber,
) -> Result<(), Vec<ConfigError>> {
    let mut errors = Vec::new();
    for (key, value) in doc.iter_mut() {
        resolve_value(key, value, providers, scrubber, &mut errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn resolve_value(
    path: &str,
    value: &mut toml::Value,
    providers: &Providers,
    scrubber: &mut Scrubber,
    errors: &mut Vec<ConfigError>,
) {
    match value {
        toml::Value::String(s) => match resolve_string(s, providers, scrubber) {
            Ok(Some(resolved)) => *s = resolved,
            Ok(None) => {}
            Err(e) => errors.push(ConfigError::new(format!("{path}"), format!("{e}"))),
        },
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                resolve_value(&format!("{path}[{i}]"), item, providers, scrubber, errors);
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                resolve_value(&format!("{path}.{k}"), v, providers, scrubber, errors);
            }
        }
        _ => {}
    }
}

/// The string with its placeholders replaced, or `None` when it has none.
pub fn resolve_string(
    text: &str,
    providers: &Providers,
    scrubber: &mut Scrubber,
) -> Result<Option<String>, String> {
    if !text.contains("${env:") && !text.contains("${file:") {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inner = &after[..end];
        let placeholder = &rest[start..start + 2 + end + 1];
        let value = match inner.split_once(':') {
            Some(("env", name)) => Some(env(name)?),
            Some(("file", spec)) => Some(file(spec, providers)?),
            _ => None,
        };
        match value {
            Some(v) => {
                scrubber.add(v.clone(), placeholder.to_owned());
                out.push_str(&v);
            }
            None => out.push_str(placeholder),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Some(out))
}

fn env(name: &str) -> Result<String, String> {
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(format!(
            "${{env:{name}}}: \"{name}\" is not an environment variable name"
        ));
    }
    std::env::var(name).map_err(|e| match e {
        std::env::VarError::NotPresent => {
            format!("${{env:{name}}}: the environment variable {name} is not set")
        }
        std::env::VarError::NotUnicode(_) => {
            format!("${{env:{name}}}: the environment variable {name} is not UTF-8")
        }
    })
}

/// `PATH:KEY`: the value of KEY in the properties file at PATH.
fn file(spec: &str, providers: &Providers) -> Result<String, String> {
    let shown = format!("${{file:{spec}}}");
    let Some((path, key)) = spec.split_once(':') else {
        return Err(format!("{shown}: write ${{file:PATH:KEY}}"));
    };
    if key.is_empty() {
        return Err(format!("{shown}: the KEY after the path is empty"));
    }
    let path = Path::new(path);
    if !path.is_absolute() {
        return Err(format!("{shown}: the path must be absolute"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!("{shown}: the path must not contain . or .. parts"));
    }
    let real = path
        .canonicalize()
        .map_err(|e| format!("{shown}: cannot read {}: {e}", path.display()))?;
    if !providers.file_allowed_paths.is_empty()
        && !providers.file_allowed_paths.iter().any(|allowed| {
            allowed
                .canonicalize()
                .is_ok_and(|dir| real.starts_with(dir))
        })
    {
        return Err(format!(
            "{shown}: {} is not below config_providers.file_allowed_paths",
            path.display()
        ));
    }
    let raw = crate::tls::read_bounded(&real).map_err(|e| format!("{shown}: {e}"))?;
    let text = String::from_utf8(raw).map_err(|_| format!("{shown}: the file is not UTF-8"))?;
    crate::policy::properties::parse(&text)
        .remove(key)
        .ok_or_else(|| format!("{shown}: {} has no key {key}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str, providers: &Providers) -> Result<Option<String>, String> {
        resolve_string(text, providers, &mut Scrubber::default())
    }

    #[test]
    fn env_and_file_placeholders_resolve_and_the_rest_stays() {
        let dir = tempfile::tempdir().unwrap();
        let props = dir.path().join("secrets.properties");
        std::fs::write(&props, "keystore.password = s3cr3t-pw\nother=1\n").unwrap();
        std::env::set_var("KSHIM_TEST_PLACEHOLDER", "from-env");
        let providers = Providers::default();
        let mut scrubber = Scrubber::default();
        let text = format!(
            "a-${{env:KSHIM_TEST_PLACEHOLDER}}-${{file:{}:keystore.password}}-${{vault:x}}-$1",
            props.display()
        );
        let out = resolve_string(&text, &providers, &mut scrubber)
            .unwrap()
            .unwrap();
        assert_eq!(out, "a-from-env-s3cr3t-pw-${vault:x}-$1");
        assert_eq!(
            scrubber.scrub("cannot open s3cr3t-pw"),
            format!(
                "cannot open ${{file:{}:keystore.password}}",
                props.display()
            )
        );
        assert_eq!(resolve("plain", &providers).unwrap(), None);
    }

    #[test]
    fn path_tricks_and_unreadable_sources_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = dir.path().join("secrets");
        std::fs::create_dir(&allowed).unwrap();
        std::fs::write(allowed.join("ok.properties"), "k=v\n").unwrap();
        std::fs::write(dir.path().join("outside.properties"), "k=v\n").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("outside.properties"),
            allowed.join("link.properties"),
        )
        .unwrap();
        let providers = Providers {
            file_allowed_paths: vec![allowed.clone()],
        };
        let ok = format!("${{file:{}/ok.properties:k}}", allowed.display());
        assert_eq!(resolve(&ok, &providers).unwrap().as_deref(), Some("v"));
        for (spec, expected) in [
            ("relative/ok.properties:k".to_owned(), "must be absolute"),
            (
                format!("{}/../outside.properties:k", allowed.display()),
                ". or ..",
            ),
            (
                format!("{}/link.properties:k", allowed.display()),
                "not below config_providers.file_allowed_paths",
            ),
            (
                format!("{}/outside.properties:k", dir.path().display()),
                "not below",
            ),
            (
                format!("{}/ok.properties:nope", allowed.display()),
                "has no key nope",
            ),
            (
                format!("{}/ok.properties", allowed.display()),
                "write ${file:PATH:KEY}",
            ),
            (format!("{}/missing:k", allowed.display()), "cannot read"),
        ] {
            let err = resolve(&format!("${{file:{spec}}}"), &providers).unwrap_err();
            assert!(err.contains(expected), "{spec}: {err}");
        }
        let anywhere = Providers::default();
        let err = resolve("${file:/dev/zero:k}", &anywhere).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        for bad in [
            "${env:}",
            "${env:1X}",
            "${env:A-B}",
            "${env:KSHIM_SURELY_NOT_SET_42}",
        ] {
            assert!(resolve(bad, &anywhere).is_err(), "{bad}");
        }
    }
}
