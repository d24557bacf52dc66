//! Reading TLS material from disk: PEM certificates and keys, PKCS#12 key and
//! trust stores, each read with a size bound from a regular file (so that a path
//! such as /dev/zero is refused instead of read forever); and the rustls crypto
//! provider and protocol versions a table asks for.

use super::{Identity, Protocols, TlsError, Trust, PROTOCOLS};
use p12_keystore::{KeyStore, KeyStoreEntry, Pkcs12ImportPolicy};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{RootCertStore, SupportedProtocolVersion};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// No certificate, key or store kshim reads is larger than this.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The bytes of a regular file of at most `MAX_FILE_BYTES`.
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let mut out = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if out.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{} is larger than {MAX_FILE_BYTES} bytes; it is not TLS material",
            path.display()
        ));
    }
    Ok(out)
}

/// The PEM certificates in the file at `path` (at least one).
pub(crate) fn pem_certificates(
    section: &str,
    name: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let raw = read_bounded(path).map_err(|m| TlsError::new(section, name, m))?;
    let certs = CertificateDer::pem_slice_iter(&raw)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(section, name, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError::new(
            section,
            name,
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(certs)
}

fn open_store(
    section: &str,
    name: &str,
    path: &Path,
    password: &str,
    policy: Pkcs12ImportPolicy,
) -> Result<KeyStore, TlsError> {
    let raw = read_bounded(path).map_err(|m| TlsError::new(section, name, m))?;
    KeyStore::from_pkcs12(&raw, password, policy).map_err(|e| {
        let why = match e {
            p12_keystore::error::Error::MacError(_) => {
                "the password is wrong, or the store is damaged".to_owned()
            }
            other => format!("not a PKCS#12 store kshim can read ({other})"),
        };
        TlsError::new(section, name, format!("{}: {why}", path.display()))
    })
}

/// The certificate chain (leaf first) and private key of `identity`.
pub(crate) fn identity(
    section: &str,
    identity: &Identity,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    match identity {
        Identity::Pem { certificate, key } => {
            let chain = pem_certificates(section, "certificate", certificate)?;
            let raw = read_bounded(key).map_err(|m| TlsError::new(section, "key", m))?;
            let key = PrivateKeyDer::from_pem_slice(&raw).map_err(|e| {
                TlsError::new(
                    section,
                    "key",
                    format!("{} holds no usable PEM private key: {e}", key.display()),
                )
            })?;
            Ok((chain, key))
        }
        Identity::Pkcs12 { keystore, password } => {
            let store = open_store(
                section,
                "keystore",
                keystore,
                password.expose(),
                Pkcs12ImportPolicy::Strict,
            )?;
            let mut chains = store.entries().filter_map(|(alias, e)| match e {
                KeyStoreEntry::PrivateKeyChain(c) => Some((alias, c)),
                _ => None,
            });
            let Some((alias, chain)) = chains.next() else {
                return Err(TlsError::new(
                    section,
                    "keystore",
                    format!(
                        "{} holds no private key with its certificate",
                        keystore.display()
                    ),
                ));
            };
            if let Some((other, _)) = chains.next() {
                return Err(TlsError::new(
                    section,
                    "keystore",
                    format!(
                        "{} holds more than one private key ({alias}, {other}, ...); keep one per store",
                        keystore.display()
                    ),
                ));
            }
            if chain.certs().is_empty() {
                return Err(TlsError::new(
                    section,
                    "keystore",
                    format!("{}: the key {alias} has no certificate", keystore.display()),
                ));
            }
            let certs = chain
                .certs()
                .iter()
                .map(|c| CertificateDer::from(c.as_der().to_vec()))
                .collect();
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().as_der().to_vec()));
            Ok((certs, key))
        }
    }
}

/// The CA certificates of `trust`, as a root store.
pub(crate) fn roots(section: &str, trust: &Trust) -> Result<RootCertStore, TlsError> {
    Ok(trusted(section, trust)?.0)
}

/// The certificates of `trust`: as a root store, and as they are (a server
/// certificate that is itself among them is trusted, as Java trusts it).
pub(crate) fn trusted(
    section: &str,
    trust: &Trust,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), TlsError> {
    let (name, path, certs) = match trust {
        Trust::Pem(path) => ("ca", path, pem_certificates(section, "ca", path)?),
        Trust::Pkcs12 {
            truststore,
            password,
        } => {
            // Raw: every certificate counts, whether or not the store marks it as
            // trusted (openssl does not, keytool does).
            let store = open_store(
                section,
                "truststore",
                truststore,
                password.expose(),
                Pkcs12ImportPolicy::Raw,
            )?;
            let certs: Vec<CertificateDer<'static>> = store
                .entries()
                .flat_map(|(_, e)| match e {
                    KeyStoreEntry::Certificate(c) => vec![c.as_der().to_vec()],
                    KeyStoreEntry::PrivateKeyChain(chain) => {
                        chain.certs().iter().map(|c| c.as_der().to_vec()).collect()
                    }
                    KeyStoreEntry::Secret(_) => Vec::new(),
                })
                .map(CertificateDer::from)
                .collect();
            if certs.is_empty() {
                return Err(TlsError::new(
                    section,
                    "truststore",
                    format!("{} holds no certificate", truststore.display()),
                ));
            }
            ("truststore", truststore, certs)
        }
    };
    let mut roots = RootCertStore::empty();
    for cert in certs.iter().cloned() {
        roots.add(cert).map_err(|e| {
            TlsError::new(
                section,
                name,
                format!(
                    "{} holds a certificate that is not a usable CA: {e}",
                    path.display()
                ),
            )
        })?;
    }
    Ok((roots, certs))
}

/// The crypto provider with the cipher suites asked for, in the order given,
/// and the protocol versions asked for. Without a list, every suite of the
/// provider, AES-128-GCM first: 10 AES rounds per block where AES-256 takes
/// 14, so less CPU per byte forwarded (docs/performance.md), and both beyond
/// reach of any known attack.
pub(crate) fn provider_and_versions(
    section: &str,
    protocols: &Protocols,
) -> Result<(Arc<CryptoProvider>, Vec<&'static SupportedProtocolVersion>), TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !protocols.cipher_suites.is_empty() {
        let mut chosen = Vec::new();
        for name in &protocols.cipher_suites {
            match provider
                .cipher_suites
                .iter()
                .find(|s| format!("{:?}", s.suite()) == *name)
            {
                Some(s) => chosen.push(*s),
                None => {
                    return Err(TlsError::new(
                        section,
                        "cipher_suites",
                        format!(
                            "\"{name}\" is not known; known: {}",
                            super::cipher_suite_names().join(", ")
                        ),
                    ))
                }
            }
        }
        provider.cipher_suites = chosen;
    } else {
        provider
            .cipher_suites
            .sort_by_key(|s| !format!("{:?}", s.suite()).contains("AES_128_GCM"));
    }
    let names: Vec<&str> = if protocols.versions.is_empty() {
        PROTOCOLS.to_vec()
    } else {
        protocols.versions.iter().map(String::as_str).collect()
    };
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    for p in names {
        versions.push(match p {
            "TLSv1.2" => &rustls::version::TLS12,
            "TLSv1.3" => &rustls::version::TLS13,
            other => {
                return Err(TlsError::new(
                    section,
                    "protocols",
                    format!(
                        "\"{other}\" is not supported; use {}",
                        PROTOCOLS.join(" or ")
                    ),
                ))
            }
        });
    }
    Ok((Arc::new(provider), versions))
}

/// When the leaf certificate expires, as Unix seconds.
pub(crate) fn not_after(leaf: &CertificateDer<'_>) -> Option<i64> {
    validity(leaf).map(|(_, not_after)| not_after)
}

/// The DNS names a certificate is for: its subject alternative names, or,
/// without any, its subject's common name (as clients fall back to it).
pub(crate) fn dns_names(cert: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert) else {
        return Vec::new();
    };
    let sans: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if !sans.is_empty() {
        return sans;
    }
    cert.subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect()
}

/// A certificate's (not before, not after), in seconds since the epoch.
pub(crate) fn validity(cert: &CertificateDer<'_>) -> Option<(i64, i64)> {
    x509_parser::parse_x509_certificate(cert)
        .ok()
        .map(|(_, cert)| {
            let validity = cert.validity();
            (
                validity.not_before.timestamp(),
                validity.not_after.timestamp(),
            )
        })
}
