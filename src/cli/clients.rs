//! `kshim clients`: the client census and the upgrade-impact report, read from
//! a running kshim's admin API.

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use kshim::tls::{Identity, Protocols, Trust, UpstreamTls};
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

#[derive(clap::Args, Debug)]
pub struct ClientsArgs {
    #[command(flatten)]
    admin: AdminArgs,
    #[command(subcommand)]
    op: Op,
}

#[derive(clap::Args, Debug)]
struct AdminArgs {
    /// The admin API of the kshim to ask: http://HOST:PORT or https://HOST:PORT.
    #[arg(long, global = true, default_value = "http://127.0.0.1:9880")]
    admin: String,
    /// The admin bearer token (admin.token); default: $KSHIM_ADMIN_TOKEN.
    #[arg(long, global = true)]
    token: Option<String>,
    /// PEM CA certificates the admin API's certificate must chain to (https).
    #[arg(long, global = true)]
    ca_file: Option<PathBuf>,
    /// A PEM client certificate and key for an admin API that asks for one.
    #[arg(long, global = true, requires = "key_file")]
    cert_file: Option<PathBuf>,
    #[arg(long, global = true, requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// Kafka client properties: their ssl.* settings secure an https admin API
    /// (the file `kshim features --command-config` takes). The admin API
    /// authenticates callers by token or client certificate, so sasl.* is not used.
    #[arg(long = "command-config", global = true, value_name = "FILE")]
    command_config: Option<PathBuf>,
    #[arg(long, global = true, value_enum, default_value = "text")]
    output: Output,
    /// Seconds to wait for the answer.
    #[arg(long, global = true, default_value_t = 30)]
    timeout: u64,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

#[derive(clap::Args, Debug, Clone, Default)]
struct Which {
    /// Only this client software: NAME, or NAME/VERSION.
    #[arg(long)]
    software: Option<String>,
    /// Only this principal, such as User:alice.
    #[arg(long)]
    principal: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Op {
    /// One line per (principal, client software, version) seen.
    List {
        #[command(flatten)]
        which: Which,
        /// Only clients that used this API (name such as Produce, or key).
        #[arg(long)]
        api_key: Option<String>,
    },
    /// Everything the census knows of the matching clients, live connections
    /// included.
    Show {
        #[command(flatten)]
        which: Which,
        #[arg(long)]
        api_key: Option<String>,
    },
    /// Which clients a planned Kafka release, or feature level, would affect.
    Impact {
        #[command(flatten)]
        which: Which,
        /// A Kafka release such as 4.0: clients using API versions it no longer serves.
        #[arg(long, conflicts_with = "feature", required_unless_present = "feature")]
        kafka_version: Option<String>,
        /// NAME=LEVEL such as group.version=1: clients served a lower level,
        /// and clients using API versions that need another level.
        #[arg(long)]
        feature: Option<String>,
    },
}

pub async fn run(args: ClientsArgs) -> Result<u8> {
    let admin = &args.admin;
    let (path, params) = match &args.op {
        Op::List { which, api_key } | Op::Show { which, api_key } => (
            "/admin/clients",
            query(which, &[("api_key", api_key.as_deref())]),
        ),
        Op::Impact {
            which,
            kafka_version,
            feature,
        } => (
            "/admin/clients/impact",
            query(
                which,
                &[
                    ("kafka_version", kafka_version.as_deref()),
                    ("feature", feature.as_deref()),
                ],
            ),
        ),
    };
    let answer = tokio::time::timeout(
        Duration::from_secs(admin.timeout),
        get(admin, &format!("{path}{params}")),
    )
    .await
    .with_context(|| format!("{} did not answer within {} s", admin.admin, admin.timeout))??;
    if admin.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(0);
    }
    let text = match &args.op {
        Op::List { .. } => list_text(&answer),
        Op::Show { .. } => show_text(&answer),
        Op::Impact {
            kafka_version: Some(_),
            ..
        } => release_text(&answer),
        Op::Impact { .. } => feature_text(&answer),
    };
    print!("{text}");
    Ok(0)
}

/// "?a=b&c=d" from the given parameters, percent-encoded.
fn query(which: &Which, more: &[(&str, Option<&str>)]) -> String {
    let mut parts = Vec::new();
    let all = [
        ("software", which.software.as_deref()),
        ("principal", which.principal.as_deref()),
    ];
    for (k, v) in all.iter().chain(more) {
        if let Some(v) = v {
            parts.push(format!("{k}={}", encode(v)));
        }
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GETs `path` from the admin API and reads the JSON answer; an error answer
/// becomes an error with the API's message.
async fn get(admin: &AdminArgs, path: &str) -> Result<Value> {
    let (https, authority) = match admin.admin.split_once("://") {
        Some(("http", rest)) => (false, rest),
        Some(("https", rest)) => (true, rest),
        _ => bail!(
            "--admin {}: expected http://HOST:PORT or https://HOST:PORT",
            admin.admin
        ),
    };
    let authority = authority.trim_end_matches('/');
    let stream = TcpStream::connect(authority)
        .await
        .with_context(|| format!("cannot connect to the admin API at {authority}"))?;
    let token = admin
        .token
        .clone()
        .or_else(|| std::env::var("KSHIM_ADMIN_TOKEN").ok())
        .filter(|t| !t.is_empty());
    if !https {
        return exchange(stream, authority, path, token.as_deref()).await;
    }
    let from_file = match &admin.command_config {
        None => None,
        Some(path) => {
            let config = super::command_config::CommandConfig::load(path)?;
            if config.sasl.is_some() {
                eprintln!(
                    "note: the admin API authenticates with its token or a client certificate; \
                     the sasl.* settings in {} are not used",
                    path.display()
                );
            }
            config.tls
        }
    };
    let settings = match from_file {
        Some(settings) => settings,
        None => UpstreamTls {
            trust: match &admin.ca_file {
                Some(path) => Trust::Pem(path.clone()),
                None => bail!("--ca-file (or --command-config with ssl.truststore.location) is needed for an https admin API"),
            },
            identity: match (&admin.cert_file, &admin.key_file) {
                (Some(certificate), Some(key)) => Some(Identity::Pem {
                    certificate: certificate.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            protocols: Protocols::default(),
            server_name: None,
        },
    };
    let material = super::command_config::build_tls(&settings)?;
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_matches(|c| c == '[' || c == ']');
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .with_context(|| format!("{host} is not a host name or address"))?;
    let tls = kshim::tls::stream::connect(material.config, name, stream)
        .await
        .with_context(|| format!("TLS with the admin API at {authority} failed"))?;
    exchange(tls, authority, path, token.as_deref()).await
}

async fn exchange<S>(stream: S, authority: &str, path: &str, token: Option<&str>) -> Result<Value>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("the admin API does not speak HTTP/1.1")?;
    tokio::spawn(conn);
    let mut request = hyper::Request::get(path).header(hyper::header::HOST, authority);
    if let Some(token) = token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new())?)
        .await
        .context("the admin API request failed")?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .context("reading the admin API's answer")?
        .to_bytes();
    let value: Value = serde_json::from_slice(&body).with_context(|| {
        format!(
            "the admin API answered {status} with something other than JSON: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
    })?;
    if status == hyper::StatusCode::UNAUTHORIZED {
        bail!(
            "the admin API refused ({status}): {}",
            if token.is_some() {
                "the token given (--token or $KSHIM_ADMIN_TOKEN) is not admin.token"
            } else {
                "it needs a token: pass --token or set KSHIM_ADMIN_TOKEN"
            }
        );
    }
    if !status.is_success() {
        let message = value["error"].as_str().unwrap_or("no message");
        bail!("the admin API refused ({status}): {message}");
    }
    Ok(value)
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The principal, software name and software version cells of a client, then `more`.
fn row(c: &Value, more: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut cells = vec![
        s(&c["principal"]),
        s(&c["software_name"]),
        s(&c["software_version"]),
    ];
    cells.extend(more);
    cells
}

/// A JSON list of strings, joined.
fn joined(list: &Value, separator: &str) -> String {
    list.as_array()
        .map(|a| a.iter().map(s).collect::<Vec<_>>().join(separator))
        .unwrap_or_default()
}

fn ago(ms: &Value) -> String {
    let Some(then) = ms.as_u64() else {
        return "-".into();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = now.saturating_sub(then) / 1000;
    match secs {
        0..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{}m ago", secs / 60),
        3600..=86_399 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// Rows as columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        out.push_str(&line(row.clone()));
    }
    out
}

fn apis_line(apis: &Value) -> String {
    apis.as_array()
        .map(|list| {
            list.iter()
                .map(|a| format!("{} v{}", s(&a["api"]), a["version"]))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn list_text(answer: &Value) -> String {
    let empty = Vec::new();
    let clients = answer["clients"].as_array().unwrap_or(&empty);
    let rows: Vec<Vec<String>> = clients
        .iter()
        .map(|c| {
            let requests: u64 = c["apis"]
                .as_array()
                .map_or(0, |a| a.iter().filter_map(|x| x["requests"].as_u64()).sum());
            row(
                c,
                [
                    s(&c["connections_live"]),
                    s(&c["connections_total"]),
                    requests.to_string(),
                    s(&c["served"]["epoch"]),
                    s(&c["security"]),
                    ago(&c["last_seen_ms"]),
                ],
            )
        })
        .collect();
    let mut out = table(
        &[
            "PRINCIPAL",
            "SOFTWARE",
            "VERSION",
            "LIVE",
            "CONNECTIONS",
            "REQUESTS",
            "EPOCH",
            "SECURITY",
            "LAST SEEN",
        ],
        &rows,
    );
    out.push_str(&format!(
        "{} client(s) shown; the census keeps {} of at most {}, {} evicted\n",
        clients.len(),
        s(&answer["kept"]),
        s(&answer["max_clients"]),
        s(&answer["evicted"])
    ));
    out
}

fn show_text(answer: &Value) -> String {
    let mut out = String::new();
    let empty = Vec::new();
    for c in answer["clients"].as_array().unwrap_or(&empty) {
        out.push_str(&format!(
            "{} {} {}\n",
            s(&c["principal"]),
            s(&c["software_name"]),
            s(&c["software_version"])
        ));
        out.push_str(&format!(
            "  connections: {} live, {} in all; addresses: {}\n",
            s(&c["connections_live"]),
            s(&c["connections_total"]),
            joined(&c["addresses"], ", ")
        ));
        out.push_str(&format!(
            "  security: {}; last seen {}\n",
            s(&c["security"]),
            ago(&c["last_seen_ms"])
        ));
        if c["served"].is_object() {
            let served = &c["served"];
            let levels = served["levels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "  served (ApiVersions v{}): epoch {}, {}\n",
                s(&served["api_versions_version"]),
                s(&served["epoch"]),
                if levels.is_empty() {
                    "no finalized features".into()
                } else {
                    levels
                }
            ));
        }
        for a in c["apis"].as_array().unwrap_or(&empty) {
            out.push_str(&format!(
                "  {:<28} v{:<3} {} request(s)\n",
                s(&a["api"]),
                s(&a["version"]),
                s(&a["requests"])
            ));
        }
        if let Some(errors) = c["errors"].as_object().filter(|e| !e.is_empty()) {
            for (kind, n) in errors {
                out.push_str(&format!("  error: {kind} x{n}\n"));
            }
        }
        for conn in c["connections"].as_array().unwrap_or(&empty) {
            let lab = conn["scenarios"]
                .as_array()
                .map(|a| format!(" (lab: {})", a.iter().map(s).collect::<Vec<_>>().join(", ")))
                .unwrap_or_default();
            out.push_str(&format!(
                "  connection {} from {}{lab}: {}\n",
                s(&conn["id"]),
                s(&conn["peer"]),
                apis_line(&conn["apis"])
            ));
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("no client matches\n");
    }
    out
}

fn release_text(answer: &Value) -> String {
    let empty = Vec::new();
    let affected = answer["affected"].as_array().unwrap_or(&empty);
    let mut out = format!(
        "Kafka {}: {} of {} client(s) use API versions its brokers do not serve\n",
        s(&answer["kafka_version"]),
        affected.len(),
        s(&answer["clients_checked"])
    );
    if affected.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = affected
        .iter()
        .map(|c| {
            let apis = c["apis"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|a| match a["served_min"].as_i64() {
                    Some(min) => format!(
                        "{} v{} (serves v{min}-v{}; {} request(s))",
                        s(&a["api"]),
                        a["version"],
                        a["served_max"],
                        a["requests"]
                    ),
                    None => format!(
                        "{} v{} (API removed; {} request(s))",
                        s(&a["api"]),
                        a["version"],
                        a["requests"]
                    ),
                })
                .collect::<Vec<_>>()
                .join(", ");
            row(c, [joined(&c["addresses"], ","), apis])
        })
        .collect();
    out.push_str(&table(
        &[
            "PRINCIPAL",
            "SOFTWARE",
            "VERSION",
            "ADDRESSES",
            "NOT SERVED",
        ],
        &rows,
    ));
    out
}

fn feature_text(answer: &Value) -> String {
    let empty = Vec::new();
    let feature = format!("{}={}", s(&answer["feature"]), s(&answer["level"]));
    let mut out = String::new();
    let lower = answer["served_lower"].as_array().unwrap_or(&empty);
    out.push_str(&format!(
        "{feature}: {} of {} client(s) were last served a lower level\n",
        lower.len(),
        s(&answer["clients_checked"])
    ));
    if !lower.is_empty() {
        let rows: Vec<Vec<String>> = lower
            .iter()
            .map(|c| row(c, [s(&c["served_level"]), s(&c["served_epoch"])]))
            .collect();
        out.push_str(&table(
            &["PRINCIPAL", "SOFTWARE", "VERSION", "SERVED LEVEL", "EPOCH"],
            &rows,
        ));
    }
    for (key, title) in [
        ("would_break", "use API versions that need a higher level"),
        ("depend_on_it", "use API versions that need this feature"),
    ] {
        let list = answer[key].as_array().unwrap_or(&empty);
        out.push_str(&format!("{feature}: {} client(s) {title}\n", list.len()));
        if list.is_empty() {
            continue;
        }
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|c| {
                let apis = c["apis"]
                    .as_array()
                    .unwrap_or(&empty)
                    .iter()
                    .map(|a| {
                        format!(
                            "{} v{} (needs level {})",
                            s(&a["api"]),
                            a["version"],
                            a["needs_level"]
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                row(c, [apis])
            })
            .collect();
        out.push_str(&table(&["PRINCIPAL", "SOFTWARE", "VERSION", "APIS"], &rows));
    }
    out
}
