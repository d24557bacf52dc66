//! Walking a TOML table by hand: every key read is marked seen, every wrong
//! type or value is recorded with its key path, and the keys nobody read are
//! reported as unknown. While `recording` runs (for `accepted_keys`), the path
//! of every key read is noted too.

use super::ConfigError;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Collects errors while walking one table.
pub(super) struct Walker<'a, 'e> {
    pub(super) path: String,
    pub(super) table: &'a toml::Table,
    pub(super) seen: HashSet<&'a str>,
    pub(super) errors: &'e mut Vec<ConfigError>,
}

impl<'a> Walker<'a, '_> {
    pub(super) fn key(&self, k: &str) -> String {
        if self.path.is_empty() {
            k.to_owned()
        } else {
            format!("{}.{k}", self.path)
        }
    }

    pub(super) fn get(&mut self, k: &'a str) -> Option<&'a toml::Value> {
        let value = self.lookup(k);
        // A table is not a key of its own: the keys read in it are.
        if !value.is_some_and(holds_tables) {
            record_key(&self.key(k));
        }
        value
    }

    fn lookup(&mut self, k: &'a str) -> Option<&'a toml::Value> {
        self.seen.insert(k);
        let table: &'a toml::Table = self.table;
        table.get(k)
    }

    pub(super) fn string(&mut self, k: &'a str) -> Option<String> {
        match self.get(k)? {
            toml::Value::String(s) => Some(s.clone()),
            other => {
                self.errors.push(ConfigError::new(
                    self.key(k),
                    format!("expected a string, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    pub(super) fn bool(&mut self, k: &'a str) -> Option<bool> {
        match self.get(k)? {
            toml::Value::Boolean(b) => Some(*b),
            other => {
                self.errors.push(ConfigError::new(
                    self.key(k),
                    format!("expected true or false, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    pub(super) fn int<T: TryFrom<i64>>(&mut self, k: &'a str, range: &str) -> Option<T> {
        let full = self.key(k);
        match self.get(k)? {
            toml::Value::Integer(i) => match T::try_from(*i) {
                Ok(v) => Some(v),
                Err(_) => {
                    self.errors.push(ConfigError::new(
                        format!("{full}"),
                        format!("{i} is out of range ({range})"),
                    ));
                    None
                }
            },
            other => {
                self.errors.push(ConfigError::new(
                    format!("{full}"),
                    format!("expected an integer, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    pub(super) fn table(&mut self, k: &'a str) -> Option<&'a toml::Table> {
        let Some(value) = self.lookup(k) else {
            record_missing_table(&self.key(k));
            return None;
        };
        match value {
            toml::Value::Table(t) => Some(t),
            other => {
                self.errors.push(ConfigError::new(
                    self.key(k),
                    format!("expected a table, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    /// A list of strings; empty when the key is absent.
    pub(super) fn strings(&mut self, k: &'a str) -> Vec<String> {
        let full = self.key(k);
        let Some(v) = self.get(k) else {
            return Vec::new();
        };
        match v.as_array().and_then(|a| {
            a.iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        }) {
            Some(list) => list,
            None => {
                self.errors.push(ConfigError::new(
                    format!("{full}"),
                    format!("expected a list of strings"),
                ));
                Vec::new()
            }
        }
    }

    pub(super) fn finish(self) {
        for k in self.table.keys() {
            if !self.seen.contains(k.as_str()) {
                self.errors
                    .push(ConfigError::new(self.key(k), "unknown key"));
            }
        }
    }
}

pub(super) fn walker<'a, 'e>(
    path: &str,
    table: &'a toml::Table,
    errors: &'e mut Vec<ConfigError>,
) -> Walker<'a, 'e> {
    Walker {
        path: path.to_owned(),
        table,
        seen: HashSet::new(),
        errors,
    }
}

pub(super) fn level(v: &toml::Value, key: &str, errors: &mut Vec<ConfigError>) -> Option<i16> {
    match v {
        toml::Value::Integer(i) => match i16::try_from(*i) {
            Ok(l) if l >= 0 => Some(l),
            _ => {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("level {i} must be between 0 and {}", i16::MAX),
                ));
                None
            }
        },
        other => {
            errors.push(ConfigError::new(
                format!("{key}"),
                format!("expected an integer level, found {}", other.type_str()),
            ));
            None
        }
    }
}

/// What a walk over a document read, kept while `recording` runs.
#[derive(Debug, Default)]
pub(super) struct Recording {
    /// The path of every key read (array indexes written `[]`).
    pub(super) keys: BTreeSet<String>,
    /// Tables the parser asked for that the document did not have: the keys
    /// in them were never asked for.
    pub(super) missing_tables: BTreeSet<String>,
}

thread_local! {
    // Per thread rather than passed to every walker: only `accepted_keys` turns
    // it on, and the walkers need not carry it through every section parser.
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Runs `walk` and returns what it read, as well as its result.
pub(super) fn recording<T>(walk: impl FnOnce() -> T) -> (T, Recording) {
    RECORDING.with(|r| *r.borrow_mut() = Some(Recording::default()));
    let out = walk();
    let recorded = RECORDING
        .with(|r| r.borrow_mut().take())
        .unwrap_or_default();
    (out, recorded)
}

/// Notes that the parser reads the key at `path`: called by `Walker::get`, and
/// by the loops over tables whose keys the operator names (addresses, node ids,
/// feature names), which read them without a walker.
pub(super) fn record_key(path: &str) {
    RECORDING.with(|r| {
        if let Some(recording) = r.borrow_mut().as_mut() {
            recording.keys.insert(without_indexes(path));
        }
    });
}

fn record_missing_table(path: &str) {
    RECORDING.with(|r| {
        if let Some(recording) = r.borrow_mut().as_mut() {
            recording.missing_tables.insert(without_indexes(path));
        }
    });
}

/// `policy.validators[2].min` as `policy.validators[].min`: every item of a
/// list takes the same keys.
fn without_indexes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && rest[digits..].starts_with(']') {
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// A table, or a list of tables.
fn holds_tables(value: &toml::Value) -> bool {
    match value {
        toml::Value::Table(_) => true,
        toml::Value::Array(items) => !items.is_empty() && items.iter().all(toml::Value::is_table),
        _ => false,
    }
}

/// `max_connections_per_ip_overrides`: IP address = count (0 refuses the address).
pub(super) fn per_ip_overrides(
    t: &toml::Table,
    errors: &mut Vec<ConfigError>,
) -> BTreeMap<std::net::IpAddr, usize> {
    let mut out = BTreeMap::new();
    for (addr, count) in t {
        let key = format!("max_connections_per_ip_overrides.\"{addr}\"");
        record_key(&key);
        let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
            errors.push(ConfigError::new(
                format!("{key}"),
                format!("the key must be an IP address"),
            ));
            continue;
        };
        match count.as_integer().map(usize::try_from) {
            Some(Ok(n)) => {
                out.insert(ip, n);
            }
            _ => errors.push(ConfigError::new(
                format!("{key}"),
                format!("expected a count of connections"),
            )),
        }
    }
    out
}

/// The host of `HOST:PORT` (brackets of an IPv6 address removed).
pub(super) fn host_of(host_port: &str) -> &str {
    host_port
        .rsplit_once(':')
        .map_or(host_port, |(h, _)| h)
        .trim_matches(['[', ']'])
}

/// Whether `host` means every address: never one to tell clients.
pub(super) fn is_wildcard(host: &str) -> bool {
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
}

/// `HOST:PORT` with a numeric port.
pub(super) fn check_host_port(key: &str, value: &str, errors: &mut Vec<ConfigError>) {
    match value.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
        _ => errors.push(ConfigError::new(
            format!("{key}"),
            format!("\"{value}\" is not HOST:PORT"),
        )),
    }
}

/// A list of strings, or one comma-separated string.
pub(super) fn string_list(
    v: &toml::Value,
    key: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Vec<String>> {
    match v {
        toml::Value::String(s) => Some(
            s.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        toml::Value::Array(items) => {
            let out: Option<Vec<String>> = items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect();
            if out.is_none() {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected a list of strings"),
                ));
            }
            out
        }
        other => {
            errors.push(ConfigError::new(
                format!("{key}"),
                format!(
                    "expected a string or a list of strings, found {}",
                    other.type_str()
                ),
            ));
            None
        }
    }
}

/// `proxy_protocol` and `proxy_protocol_trusted`: with headers on, the
/// balancers that may send them must be named.
pub(super) fn proxy_protocol(top: &mut Walker<'_, '_>, c: &mut super::Config) {
    use crate::server::proxy_protocol::{Cidr, Mode};
    if let Some(v) = top.string("proxy_protocol") {
        c.proxy_protocol = match v.as_str() {
            "off" => Mode::Off,
            "v1" => Mode::V1,
            "v2" => Mode::V2,
            "any" => Mode::Any,
            _ => {
                top.errors.push(ConfigError::new(
                    "proxy_protocol",
                    format!("\"{v}\" is not one of \"off\", \"v1\", \"v2\", \"any\""),
                ));
                Mode::Off
            }
        };
    }
    for range in top.strings("proxy_protocol_trusted") {
        match Cidr::parse(&range) {
            Ok(cidr) => c.proxy_protocol_trusted.push(cidr),
            Err(e) => top
                .errors
                .push(ConfigError::new("proxy_protocol_trusted", e)),
        }
    }
    if c.proxy_protocol != Mode::Off && c.proxy_protocol_trusted.is_empty() {
        top.errors.push(ConfigError::new(
            "proxy_protocol_trusted",
            "name the load balancers' addresses (\"10.0.0.0/8\", \"192.0.2.7\"): with proxy_protocol on, \
             a PROXY header is taken only from them",
        ));
    }
}
