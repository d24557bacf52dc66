//! `[tls]`: TLS on the client-facing listeners. The names are checked here; the
//! files are read and checked when kshim starts (`server::tls`).

use super::walker;
use crate::server::tls::{cipher_suite_names, ClientAuth, TlsSettings, PROTOCOLS};
use std::path::PathBuf;

pub(super) fn parse_tls(t: &toml::Table, errors: &mut Vec<String>) -> Option<TlsSettings> {
    let mut w = walker("tls", t, errors);
    let certificate = w.string("certificate");
    let key = w.string("key");
    let client_auth = w.string("client_auth");
    let ca = w.string("ca");
    let protocols = w.strings("protocols");
    let cipher_suites = w.strings("cipher_suites");
    let principal_mapping_rules = w.string("principal_mapping_rules");
    w.finish();
    if let Some(rules) = &principal_mapping_rules {
        if let Err(e) = crate::server::principal::PrincipalRules::parse(rules) {
            errors.push(format!("tls.principal_mapping_rules: {e}"));
        }
    }
    for (name, given) in [
        ("certificate", certificate.is_some()),
        ("key", key.is_some()),
    ] {
        if !given && !t.contains_key(name) {
            errors.push(format!("tls.{name}: missing (a PEM file)"));
        }
    }
    let client_auth = match client_auth.as_deref() {
        None | Some("none") => ClientAuth::None,
        Some("requested") => ClientAuth::Requested,
        Some("required") => ClientAuth::Required,
        Some(other) => {
            errors.push(format!(
                "tls.client_auth: \"{other}\" is not one of none, requested, required"
            ));
            ClientAuth::None
        }
    };
    if client_auth != ClientAuth::None && ca.is_none() {
        errors.push("tls.ca: needed when client_auth is requested or required (the CA bundle for client certificates)".into());
    }
    for p in &protocols {
        if !PROTOCOLS.contains(&p.as_str()) {
            errors.push(format!(
                "tls.protocols: \"{p}\" is not supported; use {}",
                PROTOCOLS.join(" or ")
            ));
        }
    }
    let known = cipher_suite_names();
    for c in &cipher_suites {
        if !known.contains(c) {
            errors.push(format!(
                "tls.cipher_suites: \"{c}\" is not known; known: {}",
                known.join(", ")
            ));
        }
    }
    Some(TlsSettings {
        certificate: PathBuf::from(certificate?),
        key: PathBuf::from(key?),
        client_auth,
        ca: ca.map(PathBuf::from),
        protocols,
        cipher_suites,
        principal_mapping_rules,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn every_tls_error_is_reported_at_once() {
        let errors = Config::from_toml(
            r#"
            [tls]
            key = "k.pem"
            client_auth = "sometimes"
            protocols = ["TLSv1.1"]
            cipher_suites = ["TLS_NULL"]
            "#,
        )
        .unwrap_err()
        .0
        .join("\n");
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
        let errors = Config::from_toml(
            "[tls]\ncertificate = \"c\"\nkey = \"k\"\nclient_auth = \"required\"\n",
        )
        .unwrap_err()
        .0
        .join("\n");
        assert!(errors.contains("tls.ca: needed"), "{errors}");
    }
}
