//! TLS handshakes on threads of their own, below the priority of the threads
//! that serve established connections.
//!
//! A full handshake costs the server about a millisecond of CPU (the RSA 2048
//! signature), where answering a request costs microseconds. On the runtime
//! that serves the connections, a storm of new connections (every client of a
//! fleet reconnecting after a restart) filled the run queue with handshakes, and
//! a connected client's ApiVersions waited behind all of them: on 2 cores, with
//! 256 clients connecting at once, its p99 was 62 ms. Here the handshakes run on
//! a runtime of their own whose threads have a nice value of 10, so the kernel
//! gives the connection threads the CPU first whenever they have work; new
//! connections are admitted with what is left, which is all of it when the
//! established ones are quiet.
//!
//! The TCP stream stays registered with the runtime that accepted it (its I/O
//! readiness comes from there); the handshake is only polled here, and the TLS
//! stream goes back to the connection's task when it is done.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

/// The nice value of the handshake threads (0 is the default; 19 the lowest
/// priority). 10 gives them about a tenth of the weight of a default thread.
const NICE: libc::c_int = 10;

static POOL: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();

/// The handshake runtime, started on first use: as many threads as CPUs, so
/// that a storm with nothing else to do uses the whole machine. `None` when it
/// cannot start; handshakes then run where they are awaited.
fn pool() -> Option<&'static tokio::runtime::Runtime> {
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("kshim-handshake")
            .enable_all()
            .on_thread_start(lower_priority)
            .build()
            .map_err(|e| {
                tracing::warn!(
                    "cannot start the TLS handshake threads ({e}); handshakes run beside the established connections"
                )
            })
            .ok()
    })
    .as_ref()
}

/// Lowers the calling thread's priority: on Linux the nice value is per thread,
/// and `who = 0` names the caller. Needs no privilege.
fn lower_priority() {
    // SAFETY: setpriority has no memory effects; a failure leaves the default.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, NICE);
    }
}

/// Starts `handshake` on the handshake threads; the returned future is its
/// outcome, `None` when it panicked. Not an `async fn`: the handshake is moved
/// to its thread at once, so the caller's task never holds its state (an idle
/// connection's task would keep room for it).
pub(super) fn run<F, T>(handshake: F) -> Pin<Box<dyn Future<Output = Option<T>> + Send>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    match pool() {
        Some(runtime) => {
            let spawned = runtime.spawn(handshake);
            Box::pin(async move { spawned.await.ok() })
        }
        None => Box::pin(async move { Some(handshake.await) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handshake_runs_on_a_lower_priority_thread() {
        let (name, nice) = run(async {
            // SAFETY: getpriority reads the calling thread's nice value.
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            (std::thread::current().name().map(str::to_owned), nice)
        })
        .await
        .expect("the handshake ran");
        assert_eq!(name.as_deref(), Some("kshim-handshake"));
        assert!(nice >= NICE, "nice {nice}");
    }
}
