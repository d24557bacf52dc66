//! The bytes of request frames kshim holds at once, across every connection:
//! frames being read (counted in full from their size prefix, before their body
//! is buffered) and frames queued for an upstream broker until they are written.
//! Kafka bounds the same with `queued.max.request.bytes`. When the budget is
//! spent, connections stop reading new frames until bytes are given back; the
//! frame that waits longest gets the next bytes (the semaphore is fair), so a
//! large frame is not starved by small ones.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// The budget every listener of one kshim shares.
#[derive(Debug)]
pub struct FrameBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    /// Frames that had to wait for bytes.
    waits: AtomicU64,
}

impl FrameBudget {
    /// `total` is at least the largest frame, or that frame could never be read.
    pub fn new(total: usize) -> Arc<FrameBudget> {
        let total = total.min(Semaphore::MAX_PERMITS);
        Arc::new(FrameBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            waits: AtomicU64::new(0),
        })
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.total - self.bytes.available_permits()
    }

    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

impl crate::metrics::FrameBudgetGauge for FrameBudget {
    fn snapshot(&self) -> crate::metrics::FrameBudgetSnapshot {
        crate::metrics::FrameBudgetSnapshot {
            held: self.held(),
            total: self.total(),
            waits: self.waits(),
        }
    }
}

type Acquiring = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// One connection's share of the budget; what it still holds goes back when it
/// is dropped.
pub struct Reservation {
    budget: Arc<FrameBudget>,
    held: usize,
    waiting: Option<(usize, Acquiring)>,
}

impl Reservation {
    pub fn new(budget: &Arc<FrameBudget>) -> Reservation {
        Reservation {
            budget: Arc::clone(budget),
            held: 0,
            waiting: None,
        }
    }

    /// Takes `n` more bytes, or registers to be woken when they can be had.
    pub fn poll_take(&mut self, n: usize, cx: &mut Context<'_>) -> Poll<()> {
        let Ok(want) = u32::try_from(n) else {
            // Larger than any frame can be; never granted.
            return Poll::Pending;
        };
        if want == 0 {
            return Poll::Ready(());
        }
        if self.waiting.as_ref().is_some_and(|(m, _)| *m != n) {
            self.waiting = None;
        }
        if self.waiting.is_none() {
            match Arc::clone(&self.budget.bytes).try_acquire_many_owned(want) {
                Ok(permit) => {
                    permit.forget();
                    self.held += n;
                    return Poll::Ready(());
                }
                Err(_) => {
                    self.budget.waits.fetch_add(1, Ordering::Relaxed);
                    let acquiring = Arc::clone(&self.budget.bytes).acquire_many_owned(want);
                    self.waiting = Some((n, Box::pin(acquiring)));
                }
            }
        }
        let (_, acquiring) = self.waiting.as_mut().expect("set above");
        match acquiring.as_mut().poll(cx) {
            Poll::Ready(Ok(permit)) => {
                permit.forget();
                self.held += n;
                self.waiting = None;
                Poll::Ready(())
            }
            // The semaphore is never closed.
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
        }
    }

    /// Gives `n` bytes back (at most what is held).
    pub fn give_back(&mut self, n: usize) {
        let n = n.min(self.held);
        if n > 0 {
            self.held -= n;
            self.budget.bytes.add_permits(n);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let held = self.held;
        self.give_back(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker_ref;

    #[test]
    fn bytes_are_shared_and_come_back() {
        let budget = FrameBudget::new(100);
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut a = Reservation::new(&budget);
        let mut b = Reservation::new(&budget);
        assert!(a.poll_take(70, &mut cx).is_ready());
        assert!(b.poll_take(40, &mut cx).is_pending());
        // The waiting frame has set aside what was free.
        assert_eq!(budget.held(), 100);
        assert_eq!(budget.waits(), 1);
        a.give_back(20);
        assert!(b.poll_take(40, &mut cx).is_ready());
        assert_eq!(budget.held(), 90);
        drop(a);
        assert_eq!(budget.held(), 40);
        b.give_back(1_000);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_waiting_frame_is_served_before_later_small_ones() {
        let budget = FrameBudget::new(100);
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut a = Reservation::new(&budget);
        let mut big = Reservation::new(&budget);
        let mut small = Reservation::new(&budget);
        assert!(a.poll_take(50, &mut cx).is_ready());
        assert!(big.poll_take(80, &mut cx).is_pending());
        // 50 bytes are free, but the big frame waits first.
        assert!(small.poll_take(10, &mut cx).is_pending());
        drop(a);
        assert!(big.poll_take(80, &mut cx).is_ready());
    }
}
