//! A byte relay on kshim's runtime: the reference that tells the cost of
//! tokio's event loop apart from the cost of kshim's own work per request.
//!
//! ```text
//! cargo build --release --example byte_relay
//! target/release/examples/byte_relay 127.0.0.1:LISTEN_PORT 127.0.0.1:BROKER_PORT
//! ```
//!
//! One task per connection copies both ways through 128 KiB buffers (the
//! buffer the socat relay of `scripts/bench-proxy.sh` uses), TCP_NODELAY on
//! both sockets, on a multi-threaded runtime built as kshim builds its own. It
//! reads no frame and rewrites nothing, so a client reaches it only through a
//! broker listener that advertises the relay's port, as with socat.
//! `tests/tools/forward_perf.py --relay-command` measures it beside kshim.

use tokio::net::{TcpListener, TcpStream};

/// The relay's buffer each way, socat's `-b` in scripts/bench-proxy.sh.
const BUFFER: usize = 128 * 1024;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, target] = args.as_slice() else {
        eprintln!("usage: byte_relay LISTEN_ADDR TARGET_ADDR");
        return std::process::ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(relay(listen.clone(), target.clone()));
    if let Err(e) = result {
        eprintln!("byte_relay: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

async fn relay(listen: String, target: String) -> std::io::Result<()> {
    let listener = TcpListener::bind(&listen).await?;
    loop {
        let (mut client, _) = listener.accept().await?;
        let target = target.clone();
        tokio::spawn(async move {
            let mut upstream = match TcpStream::connect(&target).await {
                Ok(upstream) => upstream,
                Err(e) => return eprintln!("byte_relay: {target}: {e}"),
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional_with_sizes(
                &mut client,
                &mut upstream,
                BUFFER,
                BUFFER,
            )
            .await;
        });
    }
}
