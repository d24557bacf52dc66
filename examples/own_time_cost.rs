//! What keeping kshim's own-time histogram costs a request: the clock reads and
//! the histogram updates a forwarded request and its response make
//! (`kshim_own_time_seconds`), timed over many of them on one thread, against
//! the same loop without them.
//!
//! ```text
//! cargo run --release --example own_time_cost -- --requests 20000000
//! ```
//!
//! Prints the nanoseconds per request of both loops and their difference. A
//! forwarded request observes its request leg (a clock read when its last byte
//! is written upstream) and its response leg (a clock read when the response is
//! read whole, another when it is written to the client): three clock reads and
//! two observations per request. The loop here makes four clock reads, so its
//! figure is an upper bound.

use clap::Parser;
use kshim::metrics::{Leg, Metrics};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// Requests to time in each loop.
    #[arg(long, default_value_t = 20_000_000)]
    requests: u64,
}

/// Per request, what the loop without the histogram does too: pick the API
/// key, pass it on.
fn baseline(requests: u64) -> Duration {
    let started = Instant::now();
    for i in 0..requests {
        black_box((i % 3) as i16);
    }
    started.elapsed()
}

fn with_histogram(metrics: &Metrics, requests: u64) -> Duration {
    let started = Instant::now();
    for i in 0..requests {
        let api_key = black_box((i % 3) as i16);
        let read_at = Instant::now();
        metrics.own_time(api_key, Leg::Request, read_at.elapsed());
        let response_at = Instant::now();
        metrics.own_time(api_key, Leg::Response, response_at.elapsed());
    }
    started.elapsed()
}

fn main() {
    let args = Args::parse();
    let metrics = Metrics::new();
    // One warm-up pass each, then the measured ones.
    baseline(args.requests / 10);
    with_histogram(&metrics, args.requests / 10);
    let base = baseline(args.requests);
    let with = with_histogram(&metrics, args.requests);
    let per = |d: Duration| d.as_nanos() as f64 / args.requests as f64;
    println!(
        "{} requests: {:.1} ns per request with the own-time histogram, {:.1} without: {:.1} ns each",
        args.requests,
        per(with),
        per(base),
        per(with) - per(base)
    );
}
