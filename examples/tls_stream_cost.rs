//! What kshim's TLS stream (`kshim::tls::stream`, on rustls's unbuffered API)
//! costs per GB against rustls's buffered connection (through tokio-rustls),
//! measured in the same run over loopback.
//!
//! ```text
//! cargo run --release --example tls_stream_cost -- --megabytes 512 --rounds 3
//! ```
//!
//! The server side is the one measured: it runs alone on a thread of its own
//! (a current-thread runtime) and its CPU time comes from that thread's
//! `/proc` entry. The client is tokio-rustls on another thread. Two
//! directions: the server reads what the client sends (what kshim does with a
//! produce request), and the server writes in 1 MiB writes (what kshim does
//! with a fetch answer). Prints the server's CPU seconds per GB for each
//! stream, and kshim's stream against the buffered one per direction and round.

use clap::Parser;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
struct Args {
    /// Megabytes moved per measurement.
    #[arg(long, default_value_t = 512)]
    megabytes: usize,
    /// Rounds; each measures both streams in both directions, alternating.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Stream {
    Buffered,
    Unbuffered,
}

#[derive(Clone, Copy)]
enum Direction {
    ServerReads,
    ServerWrites,
}

const CHUNK: usize = 1 << 20;

fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).expect("root");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// utime + stime of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split(' ')
        .collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based).
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    // SAFETY: sysconf has no memory effects.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, direction: Direction, bytes: usize) {
    let mut buf = vec![0u8; CHUNK];
    match direction {
        Direction::ServerReads => {
            let mut got = 0;
            while got < bytes {
                let n = s.read(&mut buf).await.expect("read");
                assert!(n > 0, "the client ended early");
                got += n;
            }
            s.write_all(b"k").await.expect("ack");
            s.flush().await.expect("flush");
        }
        Direction::ServerWrites => {
            let mut sent = 0;
            while sent < bytes {
                s.write_all(&buf).await.expect("write");
                sent += buf.len();
            }
            s.flush().await.expect("flush");
            let mut ack = [0u8; 1];
            s.read_exact(&mut ack).await.expect("ack");
        }
    }
}

/// The server's CPU seconds for one measurement.
fn measure(stream: Stream, direction: Direction, bytes: usize) -> f64 {
    let (server_config, client_config) = configs();
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    let listener = rt()
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let std_listener = listener.into_std().expect("std listener");
    let addr = std_listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        rt().block_on(async move {
            let listener = TcpListener::from_std(std_listener).expect("listener");
            let (tcp, _) = listener.accept().await.expect("accept");
            let _ = tcp.set_nodelay(true);
            let before = thread_cpu_seconds();
            match stream {
                Stream::Buffered => {
                    let tls = tokio_rustls::TlsAcceptor::from(server_config)
                        .accept(tcp)
                        .await
                        .expect("handshake");
                    serve(tls, direction, bytes).await;
                }
                Stream::Unbuffered => {
                    let tls = kshim::tls::hello::accept(server_config, tcp)
                        .await
                        .expect("handshake");
                    serve(tls, direction, bytes).await;
                }
            }
            thread_cpu_seconds() - before
        })
    });
    rt().block_on(async move {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from("localhost").expect("name");
        let mut tls = tokio_rustls::TlsConnector::from(client_config)
            .connect(name, tcp)
            .await
            .expect("client handshake");
        let mut buf = vec![7u8; CHUNK];
        match direction {
            Direction::ServerReads => {
                let mut sent = 0;
                while sent < bytes {
                    tls.write_all(&buf).await.expect("client write");
                    sent += buf.len();
                }
                tls.flush().await.expect("flush");
                let mut ack = [0u8; 1];
                tls.read_exact(&mut ack).await.expect("ack");
            }
            Direction::ServerWrites => {
                let mut got = 0;
                while got < bytes {
                    let n = tls.read(&mut buf).await.expect("client read");
                    assert!(n > 0, "the server ended early");
                    got += n;
                }
                tls.write_all(b"k").await.expect("ack");
                tls.flush().await.expect("flush");
            }
        }
    });
    server.join().expect("server thread")
}

fn main() {
    let args = Args::parse();
    let bytes = args.megabytes << 20;
    let gb = bytes as f64 / (1u64 << 30) as f64;
    println!("server CPU s/GB, {} MiB per measurement", args.megabytes);
    println!("| round | direction | buffered (tokio-rustls) | kshim's stream | kshim / buffered |");
    println!("|---:|---|---:|---:|---:|");
    for round in 1..=args.rounds {
        for (direction, name) in [
            (Direction::ServerReads, "server reads"),
            (Direction::ServerWrites, "server writes"),
        ] {
            // Alternate which goes first, so that neither always runs on a
            // machine warmed by the other.
            let order = if round % 2 == 1 {
                [Stream::Buffered, Stream::Unbuffered]
            } else {
                [Stream::Unbuffered, Stream::Buffered]
            };
            let mut cost = [0.0; 2];
            for stream in order {
                let cpu = measure(stream, direction, bytes);
                cost[(stream == Stream::Unbuffered) as usize] = cpu / gb;
            }
            println!(
                "| {round} | {name} | {:.3} | {:.3} | {:.2}x |",
                cost[0],
                cost[1],
                cost[1] / cost[0]
            );
        }
    }
}
