//! The principal of a connection that showed a client certificate: the
//! certificate's subject as Kafka's default SSL principal builder writes it
//! (RFC 2253: most specific RDN first, no spaces), mapped by rules in the syntax
//! of Kafka's `ssl.principal.mapping.rules`, then prefixed with `User:`.

use regex::Regex;

/// `RULE:pattern/replacement/[LU]` entries and `DEFAULT`, tried in order.
#[derive(Debug, Clone)]
pub struct PrincipalRules(Vec<Rule>);

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        whole: Regex,
        pattern: Regex,
        replacement: String,
        case: Option<char>,
    },
}

impl Default for PrincipalRules {
    fn default() -> Self {
        PrincipalRules(vec![Rule::Default])
    }
}

impl PrincipalRules {
    /// Parses rules as Kafka writes them, e.g.
    /// `RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT`.
    pub fn parse(text: &str) -> Result<PrincipalRules, String> {
        let entry = Regex::new(
            r"^\s*(?:RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)|(DEFAULT))\s*(?:,|$)",
        )
        .map_err(|e| e.to_string())?;
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let Some(m) = entry.captures(rest) else {
                return Err(format!("cannot read the rule at \"{rest}\""));
            };
            if m.get(4).is_some() {
                rules.push(Rule::Default);
            } else {
                let source = m.get(1).map_or("", |g| g.as_str());
                let bad = |e: regex::Error| format!("invalid pattern \"{source}\": {e}");
                rules.push(Rule::Replace {
                    whole: Regex::new(&format!("^(?:{source})$")).map_err(bad)?,
                    pattern: Regex::new(source).map_err(bad)?,
                    replacement: m.get(2).map_or("", |g| g.as_str()).to_owned(),
                    case: m.get(3).and_then(|g| g.as_str().chars().next()),
                });
            }
            rest = rest[m.get(0).map_or(rest.len(), |g| g.end())..].trim_start();
        }
        if rules.is_empty() {
            return Err("no rules given".into());
        }
        Ok(PrincipalRules(rules))
    }

    /// The principal name for subject `dn`, or `None` when no rule applies (Kafka
    /// refuses such a connection).
    pub fn apply(&self, dn: &str) -> Option<String> {
        self.0.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_owned()),
            Rule::Replace {
                whole,
                pattern,
                replacement,
                case,
            } => whole.is_match(dn).then(|| {
                let out = pattern.replace_all(dn, replacement.as_str()).into_owned();
                match case {
                    Some('L') => out.to_lowercase(),
                    Some('U') => out.to_uppercase(),
                    _ => out,
                }
            }),
        })
    }
}

/// The subject of a DER certificate in RFC 2253 form, as Java's
/// `X500Principal.getName()` gives it.
pub fn subject_rfc2253(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let mut rdns: Vec<String> = Vec::new();
    for rdn in cert.subject().iter_rdn() {
        let parts: Vec<String> = rdn
            .iter()
            .map(|atv| {
                let oid = atv.attr_type().to_id_string();
                let value = atv.as_str().map(escape).unwrap_or_else(|_| {
                    let hex: String = atv
                        .attr_value()
                        .data
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    format!("#{hex}")
                });
                format!("{}={value}", attribute_name(&oid))
            })
            .collect();
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

fn attribute_name(oid: &str) -> &str {
    match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        other => other,
    }
}

/// RFC 2253 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == value.chars().count() - 1 && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_apply_in_order_as_kafka_applies_them() {
        let rules = PrincipalRules::parse(
            r"RULE:^CN=(.*?),OU=ServiceUsers,.*$/$1/, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT",
        )
        .unwrap();
        assert_eq!(
            rules.apply("CN=svc,OU=ServiceUsers,O=Acme").as_deref(),
            Some("svc")
        );
        assert_eq!(
            rules.apply("CN=Alice,OU=Eng,O=Acme").as_deref(),
            Some("alice@eng")
        );
        assert_eq!(rules.apply("CN=bob").as_deref(), Some("CN=bob"));
        let strict = PrincipalRules::parse(r"RULE:^CN=([a-z]+)$/$1/U").unwrap();
        assert_eq!(strict.apply("CN=carol").as_deref(), Some("CAROL"));
        assert_eq!(strict.apply("CN=Carol,O=x"), None);
        assert!(PrincipalRules::parse("RULE:(unclosed/x/").is_err());
        assert!(PrincipalRules::parse("SOMETIMES").is_err());
    }

    #[test]
    fn the_subject_reads_most_specific_first() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "DE");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_rfc2253(cert.der()).unwrap(),
            r"CN=alice,O=Acme\, Inc,C=DE"
        );
    }
}
