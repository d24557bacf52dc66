//! Override keys and values: a key is a dotted path into the TOML config
//! (`tls.certificate`, `policy.create_topic.configs."retention.ms"`), a value is
//! JSON as the admin API takes it. Setting a key puts the value at that path of
//! the config document, replacing what the file had there.

use crate::store::Overrides;
use serde_json::Value;

/// The most keys one change may name, and the most overrides kshim keeps.
pub const MAX_KEYS: usize = 256;
const MAX_KEY_LEN: usize = 256;

/// A parsed key: its segments, and its canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPath {
    pub segments: Vec<String>,
}

impl KeyPath {
    /// Reads TOML dotted-key syntax: bare segments of letters, digits, `_` and
    /// `-`, or double-quoted segments without escapes.
    pub fn parse(text: &str) -> Result<KeyPath, String> {
        if text.is_empty() {
            return Err("the key is empty".into());
        }
        if text.len() > MAX_KEY_LEN {
            return Err(format!("the key is longer than {MAX_KEY_LEN} characters"));
        }
        let mut segments = Vec::new();
        let mut rest = text;
        loop {
            let (segment, after) = if let Some(quoted) = rest.strip_prefix('"') {
                let end = quoted
                    .find('"')
                    .ok_or_else(|| format!("\"{text}\": a quoted part is not closed"))?;
                let inner = &quoted[..end];
                if inner.is_empty() || inner.contains('\\') {
                    return Err(format!(
                        "\"{text}\": a quoted part must be non-empty and without escapes"
                    ));
                }
                (inner.to_owned(), &quoted[end + 1..])
            } else {
                let end = rest.find('.').unwrap_or(rest.len());
                let bare = &rest[..end];
                if bare.is_empty()
                    || !bare
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    return Err(format!(
                        "\"{text}\" is not a key: write dotted names such as tls.certificate, quoting parts that hold dots (policy.create_topic.configs.\"retention.ms\")"
                    ));
                }
                (bare.to_owned(), &rest[end..])
            };
            segments.push(segment);
            match after.strip_prefix('.') {
                Some(more) => rest = more,
                None if after.is_empty() => break,
                None => return Err(format!("\"{text}\": expected a dot after a quoted part")),
            }
        }
        Ok(KeyPath { segments })
    }

    /// The canonical spelling, quoting segments that need it.
    pub fn render(&self) -> String {
        self.segments
            .iter()
            .map(|s| {
                if s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    s.clone()
                } else {
                    format!("\"{s}\"")
                }
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Whether `self` is `other` or lies below it.
    pub fn is_under(&self, other: &KeyPath) -> bool {
        self.segments.len() >= other.segments.len()
            && self.segments[..other.segments.len()] == other.segments[..]
    }
}

/// A JSON value as a TOML value; `None` for null (which removes an override).
pub fn to_toml(value: &Value) -> Result<Option<toml::Value>, String> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) => toml::Value::Float(f),
            _ => return Err(format!("{n} is out of range")),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => toml::Value::Array(
            items
                .iter()
                .map(|i| to_toml(i)?.ok_or_else(|| "null cannot be a list element".to_owned()))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut t = toml::Table::new();
            for (k, v) in map {
                if let Some(v) = to_toml(v)? {
                    t.insert(k.clone(), v);
                }
            }
            toml::Value::Table(t)
        }
    }))
}

/// The config document with `overrides` put in: broader keys first, so that a
/// narrower key refines what a broader one set. Errors name the key.
pub fn merge(
    doc: &toml::Table,
    overrides: &Overrides,
) -> Result<toml::Table, Vec<crate::config::ConfigError>> {
    let mut out = doc.clone();
    let mut errors = Vec::new();
    let mut ordered: Vec<(KeyPath, &String, &Value)> = Vec::new();
    for (key, value) in overrides {
        match KeyPath::parse(key) {
            Ok(path) => ordered.push((path, key, value)),
            Err(e) => errors.push(crate::config::ConfigError::new(key.as_str(), e.to_string())),
        }
    }
    ordered.sort_by(|a, b| {
        a.0.segments
            .len()
            .cmp(&b.0.segments.len())
            .then_with(|| a.1.cmp(b.1))
    });
    for (path, key, value) in ordered {
        let value = match to_toml(value) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err(e) => {
                errors.push(crate::config::ConfigError::new(key.as_str(), e.to_string()));
                continue;
            }
        };
        if let Err(e) = set(&mut out, &path.segments, value) {
            errors.push(crate::config::ConfigError::new(key.as_str(), e.to_string()));
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn set(table: &mut toml::Table, segments: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = segments
        .split_last()
        .ok_or_else(|| "the key is empty".to_owned())?;
    let mut here = table;
    for (i, s) in parents.iter().enumerate() {
        let next = here
            .entry(s.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = next.as_table_mut().ok_or_else(|| {
            format!(
                "{} is a value in the config, not a table",
                segments[..=i].join(".")
            )
        })?;
    }
    here.insert(last.clone(), value);
    Ok(())
}

/// Whether the value of `key` is a secret: shown masked unless it is a
/// placeholder.
pub fn is_secret(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    last.ends_with("password") || last == "token"
}

/// Whether a value is (or holds) a placeholder that a config provider resolves.
pub fn is_placeholder(value: &Value) -> bool {
    matches!(value, Value::String(s) if s.contains("${env:") || s.contains("${file:"))
}

/// The overrides as the admin API shows them: placeholders as stored, literal
/// secrets masked.
pub fn shown(overrides: &Overrides) -> serde_json::Map<String, Value> {
    overrides
        .iter()
        .map(|(k, v)| {
            let v = if is_secret(k) && !is_placeholder(v) {
                Value::String("[hidden]".into())
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_parse_as_dotted_toml_keys() {
        let k = KeyPath::parse(r#"policy.create_topic.configs."retention.ms".min"#).unwrap();
        assert_eq!(
            k.segments,
            ["policy", "create_topic", "configs", "retention.ms", "min"]
        );
        assert_eq!(
            k.render(),
            r#"policy.create_topic.configs."retention.ms".min"#
        );
        assert!(k.is_under(&KeyPath::parse("policy").unwrap()));
        assert!(!KeyPath::parse("policy").unwrap().is_under(&k));
        for bad in [
            "", ".", "a..b", "a.", "a b", "\"a", "\"\"", "a.\"b\"c", "../etc", "a/b",
        ] {
            assert!(KeyPath::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(KeyPath::parse(&"a".repeat(300)).is_err());
    }

    #[test]
    fn overrides_merge_broad_first() {
        let doc: toml::Table = "[policy.create_topic]\nmax_partitions = 10\nmin_partitions = 2\n"
            .parse()
            .unwrap();
        let overrides: Overrides = [
            ("policy.create_topic.max_partitions".to_owned(), json!(5)),
            (
                "policy.create_topic".to_owned(),
                json!({"max_partitions": 99, "allowed_names": ["a.*"]}),
            ),
            ("log.level".to_owned(), json!("debug")),
        ]
        .into();
        let merged = merge(&doc, &overrides).unwrap();
        let ct = merged["policy"]["create_topic"].as_table().unwrap();
        assert_eq!(ct["max_partitions"].as_integer(), Some(5));
        assert!(
            !ct.contains_key("min_partitions"),
            "the table override replaced the file's"
        );
        assert_eq!(merged["log"]["level"].as_str(), Some("debug"));
        let clash: Overrides = [("listen.port".to_owned(), json!(1))].into();
        let doc: toml::Table = "listen = \"x:1\"".parse().unwrap();
        assert!(merge(&doc, &clash).unwrap_err()[0]
            .message
            .contains("not a table"));
    }

    #[test]
    fn secrets_are_masked_unless_placeholders() {
        let o: Overrides = [
            ("tls.keystore_password".to_owned(), json!("hunter2")),
            ("admin.token".to_owned(), json!("${env:KSHIM_ADMIN_TOKEN}")),
            ("tls.keystore".to_owned(), json!("/k.p12")),
        ]
        .into();
        let s = shown(&o);
        assert_eq!(s["tls.keystore_password"], "[hidden]");
        assert_eq!(s["admin.token"], "${env:KSHIM_ADMIN_TOKEN}");
        assert_eq!(s["tls.keystore"], "/k.p12");
    }
}
