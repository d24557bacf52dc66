//! One constraint on one config value: a numeric range, a set of allowed values,
//! a pattern. Shared by the create-topic policy's per-config rules and by the
//! feature-level validators.

use regex::Regex;
use std::fmt;

/// A bound that keeps its integer form when it has one, so that values near
/// `i64::MAX` (Kafka's "no limit" for many longs) compare exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    Int(i64),
    Float(f64),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Int(i) => write!(f, "{i}"),
            Bound::Float(x) => write!(f, "{x}"),
        }
    }
}

/// A config value read as a number, as Kafka's int, long and double types read it.
#[derive(Debug, Clone, Copy)]
enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    fn parse(value: &str) -> Option<Number> {
        let v = value.trim();
        if let Ok(i) = v.parse::<i64>() {
            return Some(Number::Int(i));
        }
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() => Some(Number::Float(x)),
            _ => None,
        }
    }

    /// `self` compared with `bound`.
    fn cmp(self, bound: Bound) -> Option<std::cmp::Ordering> {
        match (self, bound) {
            (Number::Int(a), Bound::Int(b)) => Some(a.cmp(&b)),
            (Number::Int(a), Bound::Float(b)) => (a as f64).partial_cmp(&b),
            (Number::Float(a), Bound::Int(b)) => a.partial_cmp(&(b as f64)),
            (Number::Float(a), Bound::Float(b)) => a.partial_cmp(&b),
        }
    }
}

/// A pattern that must match the whole value, as Java's `String.matches` does.
#[derive(Debug, Clone)]
pub struct WholeMatch {
    pub source: String,
    regex: Regex,
}

/// Two patterns are the same when they were written the same.
impl PartialEq for WholeMatch {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl WholeMatch {
    pub fn new(source: &str) -> Result<WholeMatch, regex::Error> {
        Ok(WholeMatch {
            source: source.to_owned(),
            regex: Regex::new(&format!("^(?:{source})$"))?,
        })
    }

    pub fn matches(&self, s: &str) -> bool {
        self.regex.is_match(s)
    }
}

/// What a value must satisfy. Every part that is set applies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueRule {
    pub min: Option<Bound>,
    pub max: Option<Bound>,
    /// Each comma-separated element of the value must be one of these (Kafka's
    /// list configs, such as cleanup.policy, are comma-separated).
    pub allowed: Option<Vec<String>>,
    /// Each comma-separated element must match this as a whole.
    pub pattern: Option<WholeMatch>,
}

impl ValueRule {
    pub fn is_empty(&self) -> bool {
        self.min.is_none() && self.max.is_none() && self.allowed.is_none() && self.pattern.is_none()
    }

    /// Why `value` breaks the rule, or `None` when it keeps it.
    pub fn check(&self, value: &str) -> Option<String> {
        if self.min.is_some() || self.max.is_some() {
            let Some(n) = Number::parse(value) else {
                return Some(format!("\"{value}\" is not a number"));
            };
            if let Some(min) = self.min {
                if n.cmp(min) == Some(std::cmp::Ordering::Less) {
                    return Some(format!("must be at least {min}"));
                }
            }
            if let Some(max) = self.max {
                if n.cmp(max) == Some(std::cmp::Ordering::Greater) {
                    return Some(format!("must be at most {max}"));
                }
            }
        }
        for element in elements(value) {
            if let Some(allowed) = &self.allowed {
                if !allowed.iter().any(|a| a == element) {
                    return Some(format!(
                        "\"{element}\" is not one of the allowed values [{}]",
                        allowed.join(", ")
                    ));
                }
            }
            if let Some(p) = &self.pattern {
                if !p.matches(element) {
                    return Some(format!(
                        "\"{element}\" does not match the pattern {}",
                        p.source
                    ));
                }
            }
        }
        None
    }
}

impl fmt::Display for ValueRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(min) = self.min {
            parts.push(format!(">= {min}"));
        }
        if let Some(max) = self.max {
            parts.push(format!("<= {max}"));
        }
        if let Some(a) = &self.allowed {
            parts.push(format!("in [{}]", a.join(", ")));
        }
        if let Some(p) = &self.pattern {
            parts.push(format!("matches {}", p.source));
        }
        if parts.is_empty() {
            write!(f, "no constraint")
        } else {
            write!(f, "{}", parts.join(", "))
        }
    }
}

/// The elements of a list value; a value without commas is one element.
pub fn elements(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(min: Option<Bound>, max: Option<Bound>) -> ValueRule {
        ValueRule {
            min,
            max,
            ..ValueRule::default()
        }
    }

    #[test]
    fn numeric_bounds_are_inclusive_and_exact_for_longs() {
        let r = range(Some(Bound::Int(3_145_728)), Some(Bound::Int(i64::MAX)));
        assert_eq!(r.check("3145728"), None);
        assert_eq!(r.check("9223372036854775807"), None);
        assert!(r.check("3145727").unwrap().contains("at least 3145728"));
        let ratio = range(Some(Bound::Float(0.1)), Some(Bound::Float(0.9)));
        assert_eq!(ratio.check("0.5"), None);
        assert!(ratio.check("1").unwrap().contains("at most 0.9"));
    }

    #[test]
    fn values_that_are_not_numbers_are_refused_not_crashed_on() {
        let r = range(Some(Bound::Int(1)), None);
        for bad in ["", "abc", "1e999", "NaN", "12abc", "--1"] {
            assert!(r.check(bad).unwrap().contains("is not a number"), "{bad}");
        }
    }

    #[test]
    fn allowed_and_pattern_apply_to_each_list_element() {
        let r = ValueRule {
            allowed: Some(vec!["delete".into(), "compact".into()]),
            ..ValueRule::default()
        };
        assert_eq!(r.check("compact,delete"), None);
        assert_eq!(r.check("compact, delete"), None);
        assert!(r.check("compact,none").unwrap().contains("\"none\""));
        let p = ValueRule {
            pattern: Some(WholeMatch::new("[a-z]+").unwrap()),
            ..ValueRule::default()
        };
        assert_eq!(p.check("abc"), None);
        assert!(p.check("abc1").is_some(), "the whole element must match");
    }
}
