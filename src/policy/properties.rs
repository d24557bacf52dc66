//! A broker's `server.properties`, read as Java's `Properties.load` reads it
//! (comments, `=`, `:` or blank separators, backslash continuations and escapes),
//! and checked offline against the validators in force at given feature levels:
//! the seed's format-time validation.

use super::validators::{ConfigValidators, ValidatorViolation};
use std::collections::BTreeMap;

/// Key → value, the last occurrence of a key winning, as in Java.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        loop {
            let trailing = line.chars().rev().take_while(|&c| c == '\\').count();
            if trailing % 2 == 1 {
                logical.push_str(&line[..line.len() - 1]);
                match lines.next() {
                    Some(next) => line = next.trim_start(),
                    None => {
                        line = "";
                        break;
                    }
                }
            } else {
                break;
            }
        }
        logical.push_str(line);
        let (key, value) = split_entry(&logical);
        out.insert(key, value);
        logical.clear();
    }
    out
}

/// Splits `key=value`, `key: value` or `key value`, unescaping both halves.
fn split_entry(entry: &str) -> (String, String) {
    let mut key = String::new();
    let mut chars = entry.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    key.push(unescape(n));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('=') | Some(':')) {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
    let mut value = String::new();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                value.push(unescape(n));
            }
        } else {
            value.push(c);
        }
    }
    (key, value)
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

/// Every property that a validator in force at `level_of` rejects.
pub fn check(
    properties: &BTreeMap<String, String>,
    validators: &ConfigValidators,
    level_of: &dyn Fn(&str) -> i16,
) -> Vec<ValidatorViolation> {
    properties
        .iter()
        .filter_map(|(k, v)| validators.check(k, v, level_of).err())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::rule::{Bound, ValueRule};
    use super::super::validators::ConfigValidator;
    use super::*;

    #[test]
    fn reads_properties_as_java_does() {
        let p = parse(
            "# comment\n! also a comment\n\nlog.segment.bytes=2048\nlisteners : PLAINTEXT://x:9092\n\
             spaced value\nlog.dirs=/a,\\\n   /b\nlog.segment.bytes = 4096\nescaped\\=key=v\\tw\n",
        );
        assert_eq!(p["log.segment.bytes"], "4096", "the last occurrence wins");
        assert_eq!(p["listeners"], "PLAINTEXT://x:9092");
        assert_eq!(p["spaced"], "value");
        assert_eq!(p["log.dirs"], "/a,/b");
        assert_eq!(p["escaped=key"], "v\tw");
        assert_eq!(p.len(), 5);
    }

    #[test]
    fn the_seed_format_time_check() {
        let validators = ConfigValidators::new(vec![ConfigValidator {
            key: "log.segment.bytes".into(),
            feature: "metadata.version".into(),
            level: 26,
            rule: ValueRule {
                min: Some(Bound::Int(3 * 1024 * 1024)),
                ..ValueRule::default()
            },
        }])
        .unwrap();
        let props = parse("node.id=3\nlog.segment.bytes=1024\n");
        let at = |level: i16| move |_: &str| level;
        let found = check(&props, &validators, &at(26));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, "log.segment.bytes");
        assert!(check(&props, &validators, &at(25)).is_empty());
    }
}
