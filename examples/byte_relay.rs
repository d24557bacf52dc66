//! A byte relay on kshim's runtime: the reference that tells the cost of
//! tokio's event loop apart from the cost of kshim's own work per request.
//!
//! ```text
//! cargo build --release --example byte_relay
//! target/release/examples/byte_relay 127.0.0.1:LISTEN_PORT 127.0.0.1:BROKER_PORT [--splice]
//! ```
//!
//! One task per connection copies both ways through 128 KiB buffers (the
//! buffer the socat relay of `scripts/bench-proxy.sh` uses), TCP_NODELAY on
//! both sockets, on a multi-threaded runtime built as kshim builds its own. It
//! reads no frame and rewrites nothing, so a client reaches it only through a
//! broker listener that advertises the relay's port, as with socat.
//! `tests/tools/forward_perf.py --relay-command` measures it beside kshim.
//!
//! With `--splice` it moves the bytes with splice(2) through a pipe per
//! direction instead: the kernel passes the socket's pages on without copying
//! them into the relay and out again. That measures what forwarding without
//! the two copies would save.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};

/// The relay's buffer each way, socat's `-b` in scripts/bench-proxy.sh.
const BUFFER: usize = 128 * 1024;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, target, splice) = match args.as_slice() {
        [listen, target] => (listen, target, false),
        [listen, target, flag] if flag == "--splice" => (listen, target, true),
        _ => {
            eprintln!("usage: byte_relay LISTEN_ADDR TARGET_ADDR [--splice]");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let result = runtime.block_on(relay(listen.clone(), target.clone(), splice));
    if let Err(e) = result {
        eprintln!("byte_relay: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

async fn relay(listen: String, target: String, splice: bool) -> io::Result<()> {
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
            if splice {
                // The connection ends when either side does.
                let result = tokio::select! {
                    r = splice_one_way(&client, &upstream) => r,
                    r = splice_one_way(&upstream, &client) => r,
                };
                if let Err(e) = result {
                    eprintln!("byte_relay: splice: {e}");
                }
                return;
            }
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

/// Moves what `from` receives to `to` through a pipe of its own, until `from`
/// reaches its end.
async fn splice_one_way(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    let (pipe_out, pipe_in) = pipe()?;
    loop {
        let mut held = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe_in.as_raw_fd(), BUFFER)
            }) {
                Ok(0) => return Ok(()),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        while held > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(pipe_out.as_raw_fd(), to.as_raw_fd(), held)
            }) {
                Ok(n) => held -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// A pipe's read end and write end, non-blocking, with room for `BUFFER`.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: F_SETPIPE_SZ on a descriptor this function owns; on failure the pipe keeps
    // its default size, which only means more system calls.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, BUFFER as libc::c_int) };
    Ok((read, write))
}

/// One splice(2) of at most `len` bytes, without blocking.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: both descriptors are open for the duration of the call; null offsets
    // are what splice takes for sockets and pipes.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
