//! One memory ceiling for the whole process, and what kshim does as its heap
//! nears it: it sheds load, as Envoy's overload manager does, so that the
//! kernel never has to kill it.
//!
//! The account is the heap itself: the bytes the allocator has handed out and
//! not taken back (`crate::heap`). Every byte kshim holds for a peer is in it (request frames,
//! answers of its own and the brokers', read and TLS buffers, per-connection
//! state), with no counting site per buffer that a new buffer could miss. Each
//! connection's own bounds (`max_unsent_response_bytes`, the frame budget, the
//! TLS stream's) still hold; the ceiling is what they add up to.
//!
//! A sampler reads the account every [`SAMPLE_EVERY`]. From [`SHED_AT`] of the
//! ceiling until the account is back under [`RESUME_UNDER`] of it, kshim sheds:
//! - a new connection is refused at once (closed as soon as it is accepted);
//! - a connection whose client has answers it has not taken reads no further
//!   request until it has taken them (what a Kafka broker does on every
//!   connection: one response in flight), so the clients that hold the most
//!   stop adding to it, while a client that reads its answers is served as
//!   before;
//! - `/readyz` says not ready, with the figures, so that a balancer sends new
//!   clients elsewhere.
//!
//! Owns no connection: the listeners and the connections ask it.

use crate::metrics::MemoryCeilingSnapshot;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the account is read: often enough that a flood of connections
/// adds little between two readings, rarely enough to cost nothing (a reading
/// sums 16 counters).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Shedding starts at this share of the ceiling (in percent)...
pub const SHED_AT: u64 = 80;
/// ...and ends once the account is under this share.
pub const RESUME_UNDER: u64 = 70;
/// What one connection may still add once shedding has started (a read of
/// requests, 16 KiB, and the one answer that stops its reading) and what an
/// open connection keeps, rounded up: `max_connections` defaults to no more
/// connections than the ceiling has room for at this much each.
pub const CONNECTION_ALLOWANCE: u64 = 32 * 1024;

/// Reads the bytes held; `None` where they cannot be counted (a build without
/// kshim's counting allocator): then kshim never sheds.
pub type HeldGauge = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// The ceiling and its state; shared by every listener of one kshim.
pub struct MemoryCeiling {
    bytes: u64,
    held: HeldGauge,
    shedding: AtomicBool,
    last_held: AtomicU64,
    /// Times shedding began.
    episodes: AtomicU64,
}

impl std::fmt::Debug for MemoryCeiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCeiling")
            .field("bytes", &self.bytes)
            .field("shedding", &self.shedding())
            .finish_non_exhaustive()
    }
}

impl MemoryCeiling {
    /// A ceiling of `bytes` over what `held` reads.
    pub fn new(bytes: u64, held: HeldGauge) -> Arc<MemoryCeiling> {
        Arc::new(MemoryCeiling {
            bytes: bytes.max(1),
            held,
            shedding: AtomicBool::new(false),
            last_held: AtomicU64::new(0),
            episodes: AtomicU64::new(0),
        })
    }

    /// A ceiling of `bytes` over the process's heap.
    pub fn of_heap(bytes: u64) -> Arc<MemoryCeiling> {
        MemoryCeiling::new(bytes, Box::new(crate::heap::allocated_bytes))
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether kshim is shedding load now (one relaxed load: asked before
    /// every request read).
    pub fn shedding(&self) -> bool {
        self.shedding.load(Ordering::Relaxed)
    }

    /// What /metrics and /readyz show of the ceiling.
    pub fn snapshot(&self) -> MemoryCeilingSnapshot {
        MemoryCeilingSnapshot {
            ceiling: self.bytes,
            held: self.last_held.load(Ordering::Relaxed),
            shedding: self.shedding(),
            episodes: self.episodes.load(Ordering::Relaxed),
        }
    }

    /// Reads the account and moves into or out of shedding; logs each move.
    pub fn sample(&self) {
        let Some(held) = (self.held)() else {
            return;
        };
        self.last_held.store(held, Ordering::Relaxed);
        let share = held.saturating_mul(100) / self.bytes;
        let was = self.shedding();
        if !was && share >= SHED_AT {
            self.shedding.store(true, Ordering::Relaxed);
            self.episodes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                target: "kshim::server::ceiling",
                "memory: {} MiB held of a {} MiB ceiling (max_memory_bytes); shedding load until \
                 under {RESUME_UNDER}%: new connections are refused, and a connection whose client \
                 has not taken its answers reads no more requests",
                held >> 20,
                self.bytes >> 20
            );
        } else if was && share < RESUME_UNDER {
            self.shedding.store(false, Ordering::Relaxed);
            tracing::info!(
                target: "kshim::server::ceiling",
                "memory: {} MiB held of a {} MiB ceiling; shedding ended",
                held >> 20,
                self.bytes >> 20
            );
        }
    }

    /// Samples the account every [`SAMPLE_EVERY`] for as long as the ceiling
    /// is in use (the task ends once every listener has dropped it).
    pub async fn watch(ceiling: Weak<MemoryCeiling>) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match ceiling.upgrade() {
                Some(ceiling) => ceiling.sample(),
                None => return,
            }
        }
    }
}

impl crate::metrics::MemoryCeilingGauge for MemoryCeiling {
    fn snapshot(&self) -> MemoryCeilingSnapshot {
        MemoryCeiling::snapshot(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn gauge() -> (Arc<AtomicU64>, HeldGauge) {
        let held = Arc::new(AtomicU64::new(0));
        let read = Arc::clone(&held);
        (held, Box::new(move || Some(read.load(Ordering::Relaxed))))
    }

    #[test]
    fn sheds_from_its_threshold_until_under_the_lower_one() {
        let (held, read) = gauge();
        let ceiling = MemoryCeiling::new(1000, read);
        held.store(799, Ordering::Relaxed);
        ceiling.sample();
        assert!(!ceiling.shedding());
        held.store(800, Ordering::Relaxed);
        ceiling.sample();
        assert!(ceiling.shedding());
        // Between the two thresholds it stays as it is.
        held.store(750, Ordering::Relaxed);
        ceiling.sample();
        assert!(ceiling.shedding());
        held.store(699, Ordering::Relaxed);
        ceiling.sample();
        assert!(!ceiling.shedding());
        held.store(2000, Ordering::Relaxed);
        ceiling.sample();
        let s = ceiling.snapshot();
        assert_eq!(
            (s.held, s.shedding, s.episodes, s.ceiling),
            (2000, true, 2, 1000)
        );
    }

    #[test]
    fn a_heap_that_cannot_be_counted_never_sheds() {
        let ceiling = MemoryCeiling::new(1, Box::new(|| None));
        ceiling.sample();
        assert!(!ceiling.shedding());
    }

    #[tokio::test]
    async fn the_sampler_ends_with_the_ceiling() {
        let (held, read) = gauge();
        let ceiling = MemoryCeiling::new(100, read);
        let watching = tokio::spawn(MemoryCeiling::watch(Arc::downgrade(&ceiling)));
        held.store(90, Ordering::Relaxed);
        tokio::time::sleep(SAMPLE_EVERY * 5).await;
        assert!(ceiling.shedding());
        drop(ceiling);
        tokio::time::timeout(SAMPLE_EVERY * 20, watching)
            .await
            .expect("the sampler ended")
            .unwrap();
    }
}
