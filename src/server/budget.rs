//! The bytes of frames in transit that kshim holds at once, across every
//! connection: request frames being read (counted in full from their size
//! prefix, before their body is buffered) and queued for an upstream broker
//! until they are written, and the brokers' responses from the moment their size
//! prefix is read until they are written to their client. Kafka bounds the
//! request side with `queued.max.request.bytes`; a proxy holds the responses as
//! well, and a client that reads slowly must not make it hold more of them than
//! the budget. When the budget is spent, connections stop reading new frames
//! (from clients and from brokers) until bytes are given back; the frame that
//! waits longest gets the next bytes (the semaphore is fair), so a large frame
//! is not starved by small ones.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// The budget every listener of one kshim shares.
#[derive(Debug)]
pub struct FrameBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    /// The part of what is held that is held for upstream responses.
    answers: AtomicUsize,
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
            answers: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
        })
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes held now, for requests and responses.
    pub fn held(&self) -> usize {
        self.total - self.bytes.available_permits()
    }

    /// Bytes held now for upstream responses.
    pub fn held_for_answers(&self) -> usize {
        self.answers.load(Ordering::Relaxed)
    }

    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

impl crate::metrics::FrameBudgetGauge for FrameBudget {
    fn snapshot(&self) -> crate::metrics::FrameBudgetSnapshot {
        let answers = self.held_for_answers();
        crate::metrics::FrameBudgetSnapshot {
            held: self.held().saturating_sub(answers),
            answers,
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
    /// Held for upstream responses (counted apart in the metrics).
    for_answers: bool,
}

impl Reservation {
    /// A connection's share for the request frames it reads.
    pub fn new(budget: &Arc<FrameBudget>) -> Reservation {
        Reservation {
            budget: Arc::clone(budget),
            held: 0,
            waiting: None,
            for_answers: false,
        }
    }

    /// A connection's share for the upstream responses it holds for its client.
    pub fn for_answers(budget: &Arc<FrameBudget>) -> Reservation {
        let mut reservation = Reservation::new(budget);
        reservation.for_answers = true;
        reservation
    }

    /// The largest number of bytes that can ever be granted at once.
    pub fn most(&self) -> usize {
        self.budget.total
    }

    fn took(&mut self, n: usize) {
        self.held += n;
        if self.for_answers {
            self.budget.answers.fetch_add(n, Ordering::Relaxed);
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
                    self.took(n);
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
                self.took(n);
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
            if self.for_answers {
                self.budget.answers.fetch_sub(n, Ordering::Relaxed);
            }
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
    fn answers_share_the_budget_and_are_counted_apart() {
        let budget = FrameBudget::new(100);
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut requests = Reservation::new(&budget);
        let mut answers = Reservation::for_answers(&budget);
        assert!(requests.poll_take(30, &mut cx).is_ready());
        assert!(answers.poll_take(60, &mut cx).is_ready());
        assert!(requests.poll_take(20, &mut cx).is_pending());
        assert_eq!(budget.held_for_answers(), 60);
        use crate::metrics::FrameBudgetGauge;
        let snapshot = budget.snapshot();
        assert_eq!((snapshot.held, snapshot.answers), (40, 60));
        drop(answers);
        assert_eq!(budget.held_for_answers(), 0);
        assert!(requests.poll_take(20, &mut cx).is_ready());
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
