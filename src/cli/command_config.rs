//! `--command-config FILE`: Kafka client properties (the file Kafka's own tools
//! take) turned into kshim's TLS settings and SASL credentials.
//!
//! Read: `security.protocol`; `ssl.truststore.{location,password,type}`,
//! `ssl.keystore.{location,password,type}`, `ssl.enabled.protocols`,
//! `ssl.endpoint.identification.algorithm` (only its default, `https`);
//! `sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and `sasl.jaas.config`.
//! Any other `ssl.*` or `sasl.*` key that would change how the connection is
//! secured is refused rather than ignored, so that a file never connects less
//! securely than it says. Keys outside those namespaces (timeouts, client.id)
//! are Admin client tuning, and are ignored.

use anyhow::{bail, Context as _, Result};
use kshim::client::{ClientSecurity, SaslCredentials, SaslMechanism};
use kshim::secret::Secret;
use kshim::tls::{ClientTlsMaterial, Identity, Protocols, Trust, UpstreamTls};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a command-config file says.
#[derive(Debug, Default)]
pub struct CommandConfig {
    pub tls: Option<UpstreamTls>,
    pub sasl: Option<SaslCredentials>,
}

/// Keys that select Java implementations and change nothing kshim does.
const WITHOUT_EFFECT: &[&str] = &[
    "ssl.protocol",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "ssl.provider",
];

impl CommandConfig {
    pub fn load(path: &Path) -> Result<CommandConfig> {
        let text = kshim::tls::read_bounded(path)
            .map_err(anyhow::Error::msg)
            .and_then(|raw| String::from_utf8(raw).context("not UTF-8"))
            .with_context(|| format!("--command-config {}", path.display()))?;
        CommandConfig::parse(&text).with_context(|| format!("--command-config {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<CommandConfig> {
        let mut props = parse_properties(text);
        let protocol = props
            .remove("security.protocol")
            .unwrap_or_else(|| "PLAINTEXT".into());
        let (tls, sasl) = match protocol.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            _ => bail!(
                "security.protocol={protocol}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            ),
        };
        let mut config = CommandConfig::default();
        if tls {
            config.tls = Some(tls_settings(&mut props)?);
        }
        if sasl {
            config.sasl = Some(sasl_credentials(&mut props)?);
        }
        for key in props.keys() {
            if WITHOUT_EFFECT.contains(&key.as_str()) {
                continue;
            }
            if key.starts_with("ssl.") || key.starts_with("sasl.") {
                let why =
                    if (key.starts_with("ssl.") && !tls) || (key.starts_with("sasl.") && !sasl) {
                        format!("security.protocol={protocol} does not use it")
                    } else {
                        "kshim does not support it".to_owned()
                    };
                bail!("{key}: {why}");
            }
        }
        Ok(config)
    }

    /// The TLS material and credentials for a Kafka connection.
    pub fn security(&self) -> Result<ClientSecurity> {
        let tls = match &self.tls {
            Some(settings) => Some(Arc::new(build_tls(settings)?)),
            None => None,
        };
        Ok(ClientSecurity {
            tls,
            sasl: self.sasl.clone(),
        })
    }
}

/// Builds the rustls client config, naming Kafka's keys in what goes wrong.
pub fn build_tls(settings: &UpstreamTls) -> Result<ClientTlsMaterial> {
    ClientTlsMaterial::build("ssl", settings).map_err(|e| {
        let key = match e.key.trim_start_matches("ssl.") {
            "ca" | "truststore" => "ssl.truststore.location",
            "truststore_password" => "ssl.truststore.password",
            "certificate" | "key" | "keystore" => "ssl.keystore.location",
            "keystore_password" => "ssl.keystore.password",
            "protocols" => "ssl.enabled.protocols",
            other => other,
        };
        anyhow::anyhow!("{key}: {}", e.message)
    })
}

fn tls_settings(props: &mut BTreeMap<String, String>) -> Result<UpstreamTls> {
    match props
        .remove("ssl.endpoint.identification.algorithm")
        .as_deref()
    {
        None | Some("https") | Some("HTTPS") => {}
        Some(other) => bail!(
            "ssl.endpoint.identification.algorithm={other}: kshim always checks the server's \
             certificate against its host name (https); give the server a certificate for \
             the name or address you connect to"
        ),
    }
    if props.contains_key("ssl.truststore.certificates") || props.contains_key("ssl.keystore.key") {
        bail!(
            "ssl.truststore.certificates and ssl.keystore.key/certificate.chain are not supported: \
             put the PEM text in a file and name it in ssl.truststore.location or \
             ssl.keystore.location with type PEM"
        );
    }
    let trust = match props.remove("ssl.truststore.location") {
        None => bail!(
            "ssl.truststore.location is required: kshim has no default trust store \
             (a PEM file of CA certificates, or a PKCS12 truststore)"
        ),
        Some(location) => {
            let password = props.remove("ssl.truststore.password");
            match store_type(props.remove("ssl.truststore.type"), "ssl.truststore.type")? {
                StoreType::Pem => Trust::Pem(PathBuf::from(location)),
                StoreType::Pkcs12 => Trust::Pkcs12 {
                    truststore: PathBuf::from(location),
                    password: Secret::new(password.unwrap_or_default()),
                },
            }
        }
    };
    let identity = match props.remove("ssl.keystore.location") {
        None => None,
        Some(location) => {
            let password = props.remove("ssl.keystore.password");
            if let Some(key_password) = props.remove("ssl.key.password") {
                if password.as_deref() != Some(key_password.as_str()) {
                    bail!("ssl.key.password: a key password other than the keystore's is not supported");
                }
            }
            Some(
                match store_type(props.remove("ssl.keystore.type"), "ssl.keystore.type")? {
                    // Kafka's PEM keystore holds the key and the chain in one file.
                    StoreType::Pem => Identity::Pem {
                        certificate: PathBuf::from(&location),
                        key: PathBuf::from(location),
                    },
                    StoreType::Pkcs12 => Identity::Pkcs12 {
                        keystore: PathBuf::from(location),
                        password: Secret::new(password.unwrap_or_default()),
                    },
                },
            )
        }
    };
    let versions = props
        .remove("ssl.enabled.protocols")
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok(UpstreamTls {
        trust,
        identity,
        protocols: Protocols {
            versions,
            cipher_suites: Vec::new(),
        },
        server_name: None,
    })
}

enum StoreType {
    Pem,
    Pkcs12,
}

fn store_type(value: Option<String>, key: &str) -> Result<StoreType> {
    match value.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("PEM") => Ok(StoreType::Pem),
        // Kafka's default type is JKS; Java's JKS loader also reads PKCS12, which is
        // what keytool writes by default since Java 9.
        None | Some("PKCS12") | Some("JKS") => Ok(StoreType::Pkcs12),
        Some(other) => bail!("{key}={other}: expected PKCS12, JKS (read as PKCS12) or PEM"),
    }
}

fn sasl_credentials(props: &mut BTreeMap<String, String>) -> Result<SaslCredentials> {
    let name = props
        .remove("sasl.mechanism")
        .unwrap_or_else(|| "GSSAPI".into());
    let mechanism = SaslMechanism::parse(&name).with_context(|| {
        format!(
            "sasl.mechanism={name}: kshim authenticates with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
        )
    })?;
    let jaas = props
        .remove("sasl.jaas.config")
        .context("sasl.jaas.config is required (a login module with username and password)")?;
    let (module, options) = parse_jaas(&jaas).context("sasl.jaas.config")?;
    let expected = match mechanism {
        SaslMechanism::Plain => "PlainLoginModule",
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => "ScramLoginModule",
    };
    if module.rsplit('.').next() != Some(expected) {
        bail!(
            "sasl.jaas.config: {module} does not log in with {}; use {expected}",
            mechanism.name()
        );
    }
    match (options.get("username"), options.get("password")) {
        (Some(username), Some(password)) => Ok(SaslCredentials {
            mechanism,
            username: username.clone(),
            password: password.clone(),
        }),
        _ => bail!("sasl.jaas.config: both username and password are required"),
    }
}

/// One JAAS entry: `CLASS FLAG key="value" key=value ...;`.
fn parse_jaas(text: &str) -> Result<(String, BTreeMap<String, String>)> {
    let mut chars = text.trim().chars().peekable();
    let mut word = || {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut out = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != ';') {
            out.push(c);
        }
        out
    };
    let module = word();
    let flag = word();
    if module.is_empty()
        || !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str())
    {
        bail!("expected `LoginModuleClass required key=\"value\" ...;`");
    }
    let rest: String = chars.collect();
    let mut options = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() && rest != ";" {
        let (key, after) = rest
            .split_once('=')
            .with_context(|| format!("option {rest:?} has no value"))?;
        let after = after.trim_start();
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut escaped = false;
            let mut end = None;
            for (i, c) in quoted.char_indices() {
                match (escaped, c) {
                    (true, c) => {
                        value.push(c);
                        escaped = false;
                    }
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i + 1);
                        break;
                    }
                    (false, c) => value.push(c),
                }
            }
            let end =
                end.with_context(|| format!("option {} has an unclosed quote", key.trim()))?;
            (value, &quoted[end..])
        } else {
            let end = after
                .find(|c: char| c.is_whitespace() || c == ';')
                .unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        options.insert(key.trim().to_owned(), value);
        rest = after.trim_start();
    }
    Ok((module, options))
}

/// Java's `Properties.load` format: `key=value`, `key: value` or `key value`;
/// `#` and `!` comments; a trailing backslash continues the line; `\t`, `\n`,
/// `\uXXXX` and `\X` escapes. Later keys win.
fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim_start().to_owned();
        if logical.is_empty() && (line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        while line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 {
            line.pop();
            logical.push_str(&line);
            line = lines.next().unwrap_or("").trim_start().to_owned();
        }
        logical.push_str(&line);
        let entry = std::mem::take(&mut logical);
        if entry.trim().is_empty() {
            continue;
        }
        let mut key = String::new();
        let mut chars = entry.chars().peekable();
        let mut escaped = false;
        while let Some(c) = chars.next() {
            if escaped {
                key.push(unescape(c, &mut chars));
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '=' || c == ':' || c.is_whitespace() {
                // The separator: one `=` or `:`, with whitespace around it.
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
                if !matches!(c, '=' | ':') {
                    chars.next_if(|c| *c == '=' || *c == ':');
                    while chars.next_if(|c| c.is_whitespace()).is_some() {}
                }
                break;
            } else {
                key.push(c);
            }
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            if c == '\\' {
                if let Some(next) = chars.next() {
                    value.push(unescape(next, &mut chars));
                }
            } else {
                value.push(c);
            }
        }
        out.insert(key, value);
    }
    out
}

fn unescape(c: char, rest: &mut std::iter::Peekable<std::str::Chars<'_>>) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        'u' => {
            let hex: String = (0..4).filter_map(|_| rest.next()).collect();
            u32::from_str_radix(&hex, 16)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{fffd}')
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_properties_syntax() {
        let p = parse_properties(
            "# comment\n! also\n a=1\nb : 2\nc 3\nd=x\\\n   y\ne=tab\\there\\u0041\nkey\\=x=v\nempty=\nf=last\nf=wins\n",
        );
        assert_eq!(p["a"], "1");
        assert_eq!(p["b"], "2");
        assert_eq!(p["c"], "3");
        assert_eq!(p["d"], "xy");
        assert_eq!(p["e"], "tab\there\u{41}");
        assert_eq!(p["key=x"], "v");
        assert_eq!(p["empty"], "");
        assert_eq!(p["f"], "wins");
    }

    #[test]
    fn sasl_ssl_with_scram() {
        let c = CommandConfig::parse(
            "security.protocol=SASL_SSL\n\
             ssl.truststore.location=/tmp/ca.pem\nssl.truststore.type=PEM\n\
             sasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n  username=\"al ice\" password=\"p w;d=\";\n\
             request.timeout.ms=5000\n",
        )
        .unwrap();
        let sasl = c.sasl.unwrap();
        assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
        assert_eq!(sasl.username, "al ice");
        assert_eq!(sasl.password, "p w;d=");
        assert_eq!(c.tls.unwrap().trust, Trust::Pem("/tmp/ca.pem".into()));
    }

    #[test]
    fn plaintext_by_default_and_unusable_keys_refused() {
        let c = CommandConfig::parse("client.id=x\n").unwrap();
        assert!(c.tls.is_none() && c.sasl.is_none());
        for (text, wanted) in [
            ("security.protocol=TLS", "expected PLAINTEXT"),
            ("ssl.truststore.location=/x", "does not use it"),
            ("security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=x required username=a password=b;", "GSSAPI"),
            ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN", "sasl.jaas.config is required"),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=a password=b;",
                "use PlainLoginModule",
            ),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=PlainLoginModule required username=a;",
                "both username and password",
            ),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=PlainLoginModule required username=\"a;",
                "unclosed quote",
            ),
            ("security.protocol=SSL", "ssl.truststore.location is required"),
            (
                "security.protocol=SSL\nssl.truststore.location=/x\nssl.endpoint.identification.algorithm=",
                "always checks",
            ),
            ("security.protocol=SSL\nssl.truststore.location=/x\nssl.truststore.type=BKS", "expected PKCS12"),
            ("security.protocol=SSL\nssl.truststore.location=/x\nssl.cipher.suites=A", "does not support it"),
        ] {
            let err = format!("{:#}", CommandConfig::parse(text).unwrap_err());
            assert!(err.contains(wanted), "{text}: {err}");
        }
    }
}
