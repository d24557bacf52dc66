//! The TLS tables: `[tls]` (client-facing listeners), `[admin.tls]` (the admin
//! listener) and `[upstream.tls]` (kshim's connections to the brokers). Names and
//! combinations are checked here; the files are read and checked when the
//! material is built (`crate::tls`).

use super::ConfigError;
use super::{walker, Secret, Walker};
use crate::tls::principal::PrincipalRules;
use crate::tls::{
    cipher_suite_names, ClientAuth, Identity, ListenerTls, Protocols, Trust, UpstreamTls, PROTOCOLS,
};
use std::path::PathBuf;

/// The keys of a listener's TLS table, for the reconfiguration whitelist.
pub const LISTENER_KEYS: [&str; 11] = [
    "certificate",
    "key",
    "keystore",
    "keystore_password",
    "ca",
    "truststore",
    "truststore_password",
    "client_auth",
    "protocols",
    "cipher_suites",
    "principal_mapping_rules",
];

/// The keys of `[upstream.tls]`.
pub const UPSTREAM_KEYS: [&str; 10] = [
    "certificate",
    "key",
    "keystore",
    "keystore_password",
    "ca",
    "truststore",
    "truststore_password",
    "protocols",
    "cipher_suites",
    "server_name",
];

pub(super) fn parse_listener_tls(
    section: &str,
    t: &toml::Table,
    errors: &mut Vec<ConfigError>,
) -> Option<ListenerTls> {
    let mut w = walker(section, t, errors);
    let identity = identity(&mut w);
    let trust = trust(&mut w);
    let protocols = protocols(&mut w);
    let client_auth = w.string("client_auth");
    let principal_mapping_rules = w.string("principal_mapping_rules");
    w.finish();
    if let Some(rules) = &principal_mapping_rules {
        if let Err(e) = PrincipalRules::parse(rules) {
            errors.push(ConfigError::new(
                format!("{section}.principal_mapping_rules"),
                format!("{e}"),
            ));
        }
    }
    let identity = match identity {
        Ok(Some(id)) => Some(id),
        Ok(None) => {
            errors.push(ConfigError::new(format!("{section}"), format!("give certificate and key (PEM files), or keystore and keystore_password (PKCS#12)"
            )));
            None
        }
        Err(e) => {
            errors.extend(e);
            None
        }
    };
    let trust = trust.map_err(|e| errors.extend(e)).ok().flatten();
    let client_auth = match client_auth.as_deref() {
        None | Some("none") => ClientAuth::None,
        Some("requested") => ClientAuth::Requested,
        Some("required") => ClientAuth::Required,
        Some(other) => {
            errors.push(ConfigError::new(
                format!("{section}.client_auth"),
                format!("\"{other}\" is not one of none, requested, required"),
            ));
            ClientAuth::None
        }
    };
    if client_auth != ClientAuth::None
        && trust.is_none()
        && !t.contains_key("ca")
        && !t.contains_key("truststore")
    {
        errors.push(ConfigError::new(format!("{section}.ca"), format!("needed when client_auth is requested or required (the CA bundle for client certificates; or truststore)"
        )));
    }
    Some(ListenerTls {
        identity: identity?,
        client_auth,
        trust,
        protocols: protocols?,
        principal_mapping_rules,
    })
}

pub(super) fn parse_upstream_tls(
    section: &str,
    t: &toml::Table,
    errors: &mut Vec<ConfigError>,
) -> Option<UpstreamTls> {
    let mut w = walker(section, t, errors);
    let identity = identity(&mut w);
    let trust = trust(&mut w);
    let protocols = protocols(&mut w);
    let server_name = w.string("server_name");
    w.finish();
    let identity = identity.map_err(|e| errors.extend(e)).ok()?;
    let trust = match trust {
        Ok(Some(trust)) => trust,
        Ok(None) => {
            errors.push(ConfigError::new(format!("{section}.ca"), format!("give the CA certificates the brokers' certificates chain to (ca, a PEM bundle; or truststore, PKCS#12)"
            )));
            return None;
        }
        Err(e) => {
            errors.extend(e);
            return None;
        }
    };
    Some(UpstreamTls {
        trust,
        identity,
        protocols: protocols?,
        server_name,
    })
}

/// certificate + key, or keystore + keystore_password, or neither.
fn identity(w: &mut Walker<'_, '_>) -> Result<Option<Identity>, Vec<ConfigError>> {
    let certificate = w.string("certificate");
    let key = w.string("key");
    let keystore = w.string("keystore");
    let password = w.string("keystore_password");
    let section = w.path.clone();
    let mut errors = Vec::new();
    let identity = match (certificate, key, keystore) {
        (Some(certificate), Some(key), None) => Some(Identity::Pem {
            certificate: PathBuf::from(certificate),
            key: PathBuf::from(key),
        }),
        (None, None, Some(keystore)) => match password {
            Some(password) => Some(Identity::Pkcs12 {
                keystore: PathBuf::from(keystore),
                password: Secret::new(password),
            }),
            None => {
                errors.push(ConfigError::new(
                    format!("{section}.keystore_password"),
                    format!("missing (the password of {keystore})"),
                ));
                None
            }
        },
        (None, None, None) => None,
        (Some(_), None, None) => {
            errors.push(ConfigError::new(
                format!("{section}.key"),
                format!("missing (the PEM private key of certificate)"),
            ));
            None
        }
        (None, Some(_), None) => {
            errors.push(ConfigError::new(
                format!("{section}.certificate"),
                format!("missing (the PEM certificate chain of key)"),
            ));
            None
        }
        (_, _, Some(_)) => {
            errors.push(ConfigError::new(
                format!("{section}.keystore"),
                format!("give either certificate and key, or keystore, not both"),
            ));
            None
        }
    };
    if errors.is_empty() {
        Ok(identity)
    } else {
        Err(errors)
    }
}

/// ca, or truststore (+ truststore_password), or neither.
fn trust(w: &mut Walker<'_, '_>) -> Result<Option<Trust>, Vec<ConfigError>> {
    let ca = w.string("ca");
    let truststore = w.string("truststore");
    let password = w.string("truststore_password");
    let section = w.path.clone();
    match (ca, truststore) {
        (Some(ca), None) => Ok(Some(Trust::Pem(PathBuf::from(ca)))),
        (None, Some(truststore)) => Ok(Some(Trust::Pkcs12 {
            truststore: PathBuf::from(truststore),
            password: Secret::new(password.unwrap_or_default()),
        })),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(vec![ConfigError::new(
            format!("{section}.truststore"),
            "give either ca or truststore, not both",
        )]),
    }
}

fn protocols(w: &mut Walker<'_, '_>) -> Option<Protocols> {
    let versions = w.strings("protocols");
    let cipher_suites = w.strings("cipher_suites");
    let section = w.path.clone();
    let mut ok = true;
    for p in &versions {
        if !PROTOCOLS.contains(&p.as_str()) {
            w.errors.push(ConfigError::new(
                format!("{section}.protocols"),
                format!("\"{p}\" is not supported; use {}", PROTOCOLS.join(" or ")),
            ));
            ok = false;
        }
    }
    let known = cipher_suite_names();
    for c in &cipher_suites {
        if !known.contains(c) {
            w.errors.push(ConfigError::new(
                format!("{section}.cipher_suites"),
                format!("\"{c}\" is not known; known: {}", known.join(", ")),
            ));
            ok = false;
        }
    }
    ok.then_some(Protocols {
        versions,
        cipher_suites,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn errors_of(text: &str) -> String {
        Config::from_toml(text).unwrap_err().messages().join("\n")
    }

    #[test]
    fn every_tls_error_is_reported_at_once() {
        let errors = errors_of(
            r#"
            [tls]
            key = "k.pem"
            client_auth = "sometimes"
            protocols = ["TLSv1.1"]
            cipher_suites = ["TLS_NULL"]
            "#,
        );
        for expected in [
            "tls.certificate: missing",
            "tls.client_auth: \"sometimes\"",
            "tls.protocols: \"TLSv1.1\"",
            "tls.cipher_suites: \"TLS_NULL\"",
        ] {
            assert!(
                errors.contains(expected),
                "missing {expected:?} in:\n{errors}"
            );
        }
        let errors =
            errors_of("[tls]\ncertificate = \"c\"\nkey = \"k\"\nclient_auth = \"required\"\n");
        assert!(errors.contains("tls.ca: needed"), "{errors}");
    }

    #[test]
    fn the_reconfigurable_key_lists_are_the_keys_the_parser_reads() {
        for (section, keys, extra) in [
            ("tls", &super::LISTENER_KEYS[..], ""),
            ("admin.tls", &super::LISTENER_KEYS[..], ""),
            (
                "upstream.tls",
                &super::UPSTREAM_KEYS[..],
                "[upstream]\nbootstrap = \"b:1\"\n",
            ),
        ] {
            for key in keys.iter().chain(["wat"].iter()) {
                let text = format!("{extra}[{section}]\n{key} = \"x\"\n");
                let errors = Config::from_toml(&text)
                    .err()
                    .map(|e| e.messages().join("\n"))
                    .unwrap_or_default();
                let unknown = errors.contains(&format!("{section}.{key}: unknown key"));
                assert_eq!(unknown, *key == "wat", "{section}.{key}:\n{errors}");
            }
        }
    }

    #[test]
    fn keystores_and_truststores_are_alternatives_to_pem() {
        let c = Config::from_toml(
            r#"
            [tls]
            keystore = "/k.p12"
            keystore_password = "${env:KS}"
            truststore = "/t.p12"
            client_auth = "required"
            [upstream]
            bootstrap = "b:9092"
            [upstream.tls]
            truststore = "/t.p12"
            truststore_password = "pw"
            certificate = "/c.pem"
            key = "/c.key"
            server_name = "kafka.internal"
            "#,
        )
        .unwrap();
        let tls = c.tls.unwrap();
        assert!(matches!(tls.identity, crate::tls::Identity::Pkcs12 { .. }));
        assert!(
            format!("{tls:?}").contains("[hidden]"),
            "passwords never print"
        );
        assert!(c.upstream.unwrap().tls.unwrap().identity.is_some());
        for (text, expected) in [
            ("[tls]\nkeystore = \"/k.p12\"\n", "tls.keystore_password: missing"),
            (
                "[tls]\ncertificate = \"c\"\nkey = \"k\"\nkeystore = \"/k.p12\"\nkeystore_password = \"x\"\n",
                "not both",
            ),
            (
                "[upstream]\nbootstrap = \"b:1\"\n[upstream.tls]\ncertificate = \"c\"\nkey = \"k\"\n",
                "upstream.tls.ca: give the CA",
            ),
            ("[admin.tls]\ncertificate = \"c\"\n", "admin.tls.key: missing"),
        ] {
            let errors = errors_of(text);
            assert!(errors.contains(expected), "missing {expected:?} in:\n{errors}");
        }
    }
}
