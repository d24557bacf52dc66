//! The PROXY protocol (HAProxy's, versions 1 and 2): how a TCP load balancer in
//! front of kshim passes on the address of the client it accepted. The header
//! comes first on the connection, before TLS and before any Kafka frame; the
//! address in it is the client's address everywhere in kshim (per-address
//! limits, the census, the lab, logs).
//!
//! Reading is bounded: a version 1 header is one line of at most 107 bytes, a
//! version 2 header 16 bytes plus its length field, capped at `MAX_V2_BODY`.
//! Not a byte past the header is read, so whatever follows (a TLS ClientHello, a
//! Kafka frame) is left on the stream for what comes next.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Which headers a listener accepts (`proxy_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No header: the socket's peer is the client.
    #[default]
    Off,
    V1,
    V2,
    /// Either version.
    Any,
}

/// The longest version 1 header, CRLF included (the specification's bound).
pub const MAX_V1: usize = 107;

/// The longest version 2 address block and TLVs kshim reads. The length field
/// allows 65,535; balancers send well under 1 KiB (addresses and a few TLVs).
pub const MAX_V2_BODY: usize = 4096;

const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Why a connection's header was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("no PROXY protocol header: the connection began with {0:?}")]
    Missing(String),
    #[error("a PROXY protocol version {0} header, where this listener takes version {1} only")]
    WrongVersion(u8, u8),
    #[error("malformed PROXY protocol header: {0}")]
    Malformed(String),
    #[error("the PROXY protocol header is longer than {0} bytes")]
    TooLong(usize),
    #[error("the connection closed inside its PROXY protocol header")]
    Closed,
}

/// What a header says of the connection: the client's address, or `None` for
/// a connection the balancer opened itself (v1 `UNKNOWN`, v2 `LOCAL`, or an
/// address family other than TCP over IPv4 or IPv6), which keeps the socket's.
pub type Source = Option<SocketAddr>;

/// Reads one header from `stream` as `mode` allows. The caller bounds the time.
pub async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    mode: Mode,
) -> Result<Source, HeaderError> {
    // "PROXY" opens version 1; the first five bytes of the signature version 2.
    let mut head = [0u8; 5];
    read_exact(stream, &mut head).await?;
    let version = match &head {
        b"PROXY" => 1,
        h if h[..] == V2_SIGNATURE[..5] => 2,
        other => {
            return Err(HeaderError::Missing(
                String::from_utf8_lossy(other).into_owned(),
            ))
        }
    };
    match (mode, version) {
        (Mode::V1, 2) => return Err(HeaderError::WrongVersion(2, 1)),
        (Mode::V2, 1) => return Err(HeaderError::WrongVersion(1, 2)),
        _ => {}
    }
    if version == 1 {
        let mut line = head.to_vec();
        while !line.ends_with(b"\r\n") {
            if line.len() >= MAX_V1 {
                return Err(HeaderError::TooLong(MAX_V1));
            }
            let mut byte = [0u8; 1];
            read_exact(stream, &mut byte).await?;
            line.push(byte[0]);
        }
        return parse_v1(&line);
    }
    let mut fixed = [0u8; 16];
    fixed[..5].copy_from_slice(&head);
    read_exact(stream, &mut fixed[5..]).await?;
    let length = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if length > MAX_V2_BODY {
        return Err(HeaderError::TooLong(16 + MAX_V2_BODY));
    }
    let mut body = vec![0u8; length];
    read_exact(stream, &mut body).await?;
    parse_v2(&fixed, &body)
}

async fn read_exact<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut [u8],
) -> Result<(), HeaderError> {
    stream
        .read_exact(buf)
        .await
        .map(|_| ())
        .map_err(|_| HeaderError::Closed)
}

/// A whole version 1 line, CRLF included:
/// `PROXY TCP4 192.0.2.1 198.51.100.1 56324 9092\r\n`, or `PROXY UNKNOWN...`.
pub fn parse_v1(line: &[u8]) -> Result<Source, HeaderError> {
    let bad = |why: &str| HeaderError::Malformed(why.to_owned());
    if line.len() > MAX_V1 {
        return Err(HeaderError::TooLong(MAX_V1));
    }
    let text = std::str::from_utf8(line)
        .ok()
        .and_then(|t| t.strip_suffix("\r\n"))
        .ok_or_else(|| bad("a version 1 header is ASCII text ending in CRLF"))?;
    let fields: Vec<&str> = text.split(' ').collect();
    match fields.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Ok(None),
        ["PROXY", family @ ("TCP4" | "TCP6"), source, _dest, source_port, _dest_port] => {
            let ip: IpAddr = source
                .parse()
                .map_err(|_| bad(&format!("{source:?} is not an IP address")))?;
            // Digits only, without leading zeros, as the specification writes ports.
            let digits = !source_port.is_empty()
                && source_port.bytes().all(|b| b.is_ascii_digit())
                && (*source_port == "0" || !source_port.starts_with('0'));
            let port: u16 = digits
                .then(|| source_port.parse().ok())
                .flatten()
                .ok_or_else(|| bad(&format!("{source_port:?} is not a port")))?;
            if ip.is_ipv4() != (*family == "TCP4") {
                return Err(bad(&format!("{source} is not an {family} address")));
            }
            Ok(Some(SocketAddr::new(ip, port)))
        }
        _ => Err(bad(
            "expected PROXY TCP4|TCP6 SOURCE DEST SOURCE_PORT DEST_PORT, or PROXY UNKNOWN",
        )),
    }
}

/// A version 2 header: the fixed 16 bytes (signature, version and command,
/// family, length) and the `length` bytes after them. TLVs after the addresses
/// are skipped.
pub fn parse_v2(fixed: &[u8; 16], body: &[u8]) -> Result<Source, HeaderError> {
    let bad = |why: String| HeaderError::Malformed(why);
    if fixed[..12] != V2_SIGNATURE {
        return Err(bad("not the version 2 signature".into()));
    }
    let (version, command) = (fixed[12] >> 4, fixed[12] & 0x0f);
    if version != 2 {
        return Err(bad(format!("version {version} in a version 2 header")));
    }
    if usize::from(u16::from_be_bytes([fixed[14], fixed[15]])) != body.len() {
        return Err(bad("the length field does not match the header".into()));
    }
    match command {
        // LOCAL: the balancer's own connection (a health check).
        0 => return Ok(None),
        1 => {}
        other => return Err(bad(format!("unknown command {other}"))),
    }
    let (family, transport) = (fixed[13] >> 4, fixed[13] & 0x0f);
    let port = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
    match (family, transport) {
        (1, 1) => {
            if body.len() < 12 {
                return Err(bad("an IPv4 address block is 12 bytes".into()));
            }
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            Ok(Some(SocketAddr::new(IpAddr::V4(ip), port(8))))
        }
        (2, 1) => {
            if body.len() < 36 {
                return Err(bad("an IPv6 address block is 36 bytes".into()));
            }
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&body[..16]);
            Ok(Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(octets)),
                port(32),
            )))
        }
        // UNSPEC, UNIX sockets, datagrams: no client address to take.
        (0 | 3, _) | (_, 0 | 2) => Ok(None),
        _ => Err(bad(format!(
            "unknown address family {family} and transport {transport}"
        ))),
    }
}

/// An address range of `proxy_protocol_trusted`: "10.0.0.0/8", "::1/128", or
/// one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = address
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not an address or a CIDR range"))?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {bits}"))?,
        };
        Ok(Cidr { network, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 client on an IPv6 socket shows as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, family: u8, body: &[u8]) -> ([u8; 16], Vec<u8>) {
        let mut fixed = [0u8; 16];
        fixed[..12].copy_from_slice(&V2_SIGNATURE);
        fixed[12] = 0x20 | command;
        fixed[13] = family;
        fixed[14..].copy_from_slice(&(body.len() as u16).to_be_bytes());
        (fixed, body.to_vec())
    }

    #[test]
    fn version_1_lines() {
        let addr = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        assert_eq!(
            parse_v1(b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 9092\r\n"),
            Ok(addr("192.0.2.1:56324"))
        );
        assert_eq!(
            parse_v1(b"PROXY TCP6 2001:db8::1 2001:db8::2 4000 9092\r\n"),
            Ok(addr("[2001:db8::1]:4000"))
        );
        assert_eq!(parse_v1(b"PROXY UNKNOWN\r\n"), Ok(None));
        assert_eq!(parse_v1(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"), Ok(None));
        for bad in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 9092\n"[..],
            b"PROXY TCP4 2001:db8::1 198.51.100.1 56324 9092\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 65536 9092\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 +1 9092\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 056 9092\r\n",
            b"PROXY TCP4 192.0.2.1  198.51.100.1 56324 9092\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.1 56324 9092\r\n",
            b"PROXY TCP4 192.0.2.1\r\n",
            b"PROXY \xff\r\n",
        ] {
            assert!(
                matches!(parse_v1(bad), Err(HeaderError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn version_2_headers() {
        let mut inet = vec![192, 0, 2, 1, 198, 51, 100, 1];
        inet.extend_from_slice(&56324u16.to_be_bytes());
        inet.extend_from_slice(&9092u16.to_be_bytes());
        let (fixed, body) = v2(1, 0x11, &inet);
        assert_eq!(
            parse_v2(&fixed, &body),
            Ok(Some("192.0.2.1:56324".parse().unwrap()))
        );
        // A TLV after the addresses is skipped.
        let mut with_tlv = inet.clone();
        with_tlv.extend_from_slice(&[0x20, 0x00, 0x01, 0x05]);
        let (fixed, body) = v2(1, 0x11, &with_tlv);
        assert_eq!(
            parse_v2(&fixed, &body),
            Ok(Some("192.0.2.1:56324".parse().unwrap()))
        );
        let mut inet6 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        inet6.extend_from_slice(&[0; 16]);
        inet6.extend_from_slice(&4000u16.to_be_bytes());
        inet6.extend_from_slice(&9092u16.to_be_bytes());
        let (fixed, body) = v2(1, 0x21, &inet6);
        assert_eq!(
            parse_v2(&fixed, &body),
            Ok(Some("[2001:db8::1]:4000".parse().unwrap()))
        );
        // LOCAL, and an unspecified family: the socket's address stays.
        let (fixed, body) = v2(0, 0x00, &[]);
        assert_eq!(parse_v2(&fixed, &body), Ok(None));
        let (fixed, body) = v2(1, 0x31, &[0; 216]);
        assert_eq!(parse_v2(&fixed, &body), Ok(None));
        // Short address blocks, an unknown command, a wrong version.
        let (fixed, body) = v2(1, 0x11, &inet[..8]);
        assert!(parse_v2(&fixed, &body).is_err());
        let (fixed, body) = v2(1, 0x21, &inet);
        assert!(parse_v2(&fixed, &body).is_err());
        let (fixed, body) = v2(2, 0x11, &inet);
        assert!(parse_v2(&fixed, &body).is_err());
        let (mut fixed, body) = v2(1, 0x11, &inet);
        fixed[12] = 0x31;
        assert!(parse_v2(&fixed, &body).is_err());
    }

    #[tokio::test]
    async fn a_header_is_read_and_nothing_after_it() {
        let mut input: &[u8] =
            b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 9092\r\n\x00\x00\x00\x10rest";
        let source = read_header(&mut input, Mode::Any).await.unwrap();
        assert_eq!(source, Some("192.0.2.1:56324".parse().unwrap()));
        assert_eq!(input, b"\x00\x00\x00\x10rest");

        let mut inet = vec![192, 0, 2, 7, 198, 51, 100, 1, 0, 80, 0, 81];
        let (fixed, _) = v2(1, 0x11, &inet);
        let mut bytes = fixed.to_vec();
        bytes.append(&mut inet);
        bytes.extend_from_slice(b"\x16\x03\x01");
        let mut input = &bytes[..];
        assert_eq!(
            read_header(&mut input, Mode::V2).await.unwrap(),
            Some("192.0.2.7:80".parse().unwrap())
        );
        assert_eq!(
            input, b"\x16\x03\x01",
            "the TLS ClientHello after it is left unread"
        );
    }

    #[tokio::test]
    async fn refusals() {
        async fn read(bytes: &[u8], mode: Mode) -> Result<Source, HeaderError> {
            let mut input = bytes;
            read_header(&mut input, mode).await
        }
        assert!(matches!(
            read(b"\x00\x00\x00\x10kafka", Mode::Any).await,
            Err(HeaderError::Missing(_))
        ));
        assert_eq!(
            read(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n", Mode::V2).await,
            Err(HeaderError::WrongVersion(1, 2))
        );
        assert_eq!(
            read(b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c", Mode::V1).await,
            Err(HeaderError::WrongVersion(2, 1))
        );
        let mut endless = b"PROXY ".to_vec();
        endless.extend_from_slice(&[b'x'; 200]);
        assert_eq!(
            read(&endless, Mode::Any).await,
            Err(HeaderError::TooLong(MAX_V1))
        );
        assert_eq!(
            read(b"PROXY TCP4 1.2.3.4", Mode::Any).await,
            Err(HeaderError::Closed)
        );
        assert_eq!(
            read(b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff", Mode::Any).await,
            Err(HeaderError::TooLong(16 + MAX_V2_BODY))
        );
        assert_eq!(
            read(b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\x01", Mode::Any).await,
            Err(HeaderError::Closed)
        );
    }

    #[test]
    fn trusted_ranges() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(
            net.contains("::ffff:10.1.0.9".parse().unwrap()),
            "IPv4 mapped into IPv6"
        );
        let one = Cidr::parse("127.0.0.2").unwrap();
        assert!(one.contains("127.0.0.2".parse().unwrap()));
        assert!(!one.contains("127.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("203.0.113.5".parse().unwrap()));
        assert!(Cidr::parse("fd00::/8")
            .unwrap()
            .contains("fd12::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nope", "::/129", "10.0.0.0/x"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
    }
}
