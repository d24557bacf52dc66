//! Log lines rate-limited per cause: while a broker is down, every client that
//! reconnects in a loop fails the same way, and one line a minute (with the
//! count of the repeats) says all of it. Knows nothing of Kafka.

use std::time::{Duration, Instant};

/// Rate-limits log lines per cause (a failure's text): the first occurrence of
/// a cause is logged; repeats within `window` are counted, and the count goes
/// with the next line for that cause.
pub struct PerCauseLimit {
    window: Duration,
    causes: std::sync::Mutex<Option<std::collections::HashMap<String, (Instant, u64)>>>,
}

/// Causes remembered at most; a burst of distinct causes cannot grow the map.
const FAILURE_CAUSES: usize = 256;

impl PerCauseLimit {
    pub const fn new(window: Duration) -> PerCauseLimit {
        PerCauseLimit {
            window,
            causes: std::sync::Mutex::new(None),
        }
    }

    /// Whether to log `cause` now: `Some(repeats since it was last logged)`, or
    /// `None` while it was logged within the window.
    pub fn admit(&self, cause: &str, now: Instant) -> Option<u64> {
        let mut guard = self.causes.lock().unwrap_or_else(|e| e.into_inner());
        let causes = guard.get_or_insert_with(Default::default);
        if let Some((since, repeats)) = causes.get_mut(cause) {
            if now.duration_since(*since) < self.window {
                *repeats += 1;
                return None;
            }
        }
        if causes.len() >= FAILURE_CAUSES {
            let window = self.window;
            causes.retain(|_, (since, _)| now.duration_since(*since) < window);
            if causes.len() >= FAILURE_CAUSES {
                causes.clear();
            }
        }
        Some(
            causes
                .insert(cause.to_owned(), (now, 0))
                .map_or(0, |(_, n)| n),
        )
    }
}

/// Causes logged once for the life of the process: the first occurrence of each
/// is logged, never a repeat. Bounded: past `cap` causes, new ones are not
/// logged (a cause may carry text a client chose).
pub struct OncePerCause {
    cap: usize,
    seen: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl OncePerCause {
    pub const fn new(cap: usize) -> OncePerCause {
        OncePerCause {
            cap,
            seen: std::sync::Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// Whether `cause` is new: log it now.
    pub fn first(&self, cause: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        !seen.contains(cause) && seen.len() < self.cap && seen.insert(cause.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_cause_logs_each_cause_once_and_stops_at_its_cap() {
        let once = OncePerCause::new(2);
        assert!(once.first("a"));
        assert!(!once.first("a"));
        assert!(once.first("b"));
        assert!(!once.first("c"), "past the cap");
        assert!(!once.first("b"));
    }

    #[test]
    fn a_cause_is_logged_once_per_window_and_its_repeats_counted() {
        let log = PerCauseLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(log.admit("connection refused", t0), Some(0));
        for i in 1..6 {
            assert_eq!(
                log.admit("connection refused", t0 + Duration::from_secs(i)),
                None
            );
        }
        assert_eq!(
            log.admit("timed out", t0),
            Some(0),
            "another cause is logged at once"
        );
        assert_eq!(
            log.admit("connection refused", t0 + Duration::from_secs(61)),
            Some(5)
        );
        let causes = log.causes.lock().unwrap();
        assert_eq!(causes.as_ref().unwrap()["connection refused"].1, 0);
    }

    #[test]
    fn distinct_causes_cannot_grow_the_log_without_bound() {
        let log = PerCauseLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..10 * FAILURE_CAUSES {
            log.admit(&format!("cause {i}"), t0);
        }
        assert!(log.causes.lock().unwrap().as_ref().unwrap().len() <= FAILURE_CAUSES);
    }
}
