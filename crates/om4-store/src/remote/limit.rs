//! How many requests a remote store keeps in flight.
//!
//! Set by the caller (`RequestOptions::concurrency`), the number is fixed. Left unset, it follows
//! Little's law: requests in flight = the byte rate to sustain × the round trip ÷ the bytes of one
//! request, kept between [`AUTO_MIN`] and [`AUTO_MAX`] (and half the process's file-descriptor
//! limit, one connection per request in flight). The round trip is the fastest time to first
//! byte seen in the last [`RTT_WINDOW`] (a windowed minimum, as TCP's BBR keeps it): under load a
//! request's first byte is noticed late, as the client's threads are busy with other answers, so
//! a typical time to first byte grows with the requests in flight and would feed back into more;
//! the fastest one is the wire's. The bytes per request are the mean of the fetch rounds' GET
//! answers, each round weighed by its requests and older rounds fading (so the one small answer
//! of a coordinate read does not count as much as a window's hundreds of chunks). So a store on a
//! nearby server keeps [`AUTO_MIN`] in flight, and one that answers after 50 ms keeps enough to
//! cover the wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::location::RequestOptions;

pub(crate) const AUTO_MIN: usize = RequestOptions::AUTO_MIN_CONCURRENCY;
pub(crate) const AUTO_MAX: usize = RequestOptions::AUTO_MAX_CONCURRENCY;
const TARGET_BYTES_PER_S: f64 = RequestOptions::AUTO_TARGET_BYTES_PER_S;
/// Bytes per request assumed before rounds have been measured, as if seen in [`PRIOR_GETS`]
/// answers.
const ASSUMED_REQUEST_BYTES: f64 = 256.0 * 1024.0;
const PRIOR_GETS: f64 = 64.0;
/// How much of the earlier rounds' bytes and requests each new round leaves.
const KEEP: f64 = 0.7;
/// How long the fastest time to first byte stands for the round trip before a slower one replaces
/// it.
const RTT_WINDOW: Duration = Duration::from_secs(10);

/// Requests in flight for a round trip of `rtt_s` seconds and requests of `request_bytes` bytes
/// on average, at most `ceiling`.
pub(crate) fn auto_in_flight(rtt_s: f64, request_bytes: f64, ceiling: usize) -> usize {
    let wanted = TARGET_BYTES_PER_S * rtt_s.max(0.0) / request_bytes.max(1.0);
    let ceiling = ceiling.clamp(1, AUTO_MAX);
    if wanted.is_finite() { (wanted.ceil() as usize).clamp(AUTO_MIN.min(ceiling), ceiling) } else { ceiling }
}

/// The permits of one store's requests and the rule that sizes them.
#[derive(Debug)]
pub(crate) struct Limit {
    /// One permit per request in flight.
    permits: Semaphore,
    /// `None`: fixed by the caller.
    auto: Option<Mutex<Estimate>>,
    /// The fastest time to first byte, in nanoseconds, since the last round was folded in.
    fastest_ns: AtomicU64,
    /// Permits that exist now (given out or not).
    total: AtomicU64,
    /// Half the process's file-descriptor limit, or `AUTO_MAX`.
    ceiling: usize,
}

#[derive(Debug)]
struct Estimate {
    /// The fastest first byte in the window, in seconds, and when it was seen.
    rtt: Option<(f64, Instant)>,
    /// Bytes and GET answers seen, older rounds weighing less.
    bytes: f64,
    gets: f64,
}

impl Default for Estimate {
    fn default() -> Self {
        Self { rtt: None, bytes: PRIOR_GETS * ASSUMED_REQUEST_BYTES, gets: PRIOR_GETS }
    }
}

impl Limit {
    /// A limit of `n` requests in flight, whatever the round trips. More than half the
    /// open-file limit is allowed, with a warning: connections refused for want of descriptors
    /// are retried, and slow the reads down.
    pub(crate) fn fixed(n: usize) -> Self {
        if let Some(half) = half_open_files()
            && n > half
        {
            tracing::warn!(
                "{n} requests in flight may hold {n} connections, more than half the process's open-file limit \
                 ({}): raise it (ulimit -n) or set fewer",
                2 * half
            );
        }
        Self {
            permits: Semaphore::new(n),
            auto: None,
            fastest_ns: AtomicU64::new(u64::MAX),
            total: AtomicU64::new(n as u64),
            ceiling: n,
        }
    }

    /// A limit that follows the measured round trips, starting at [`AUTO_MIN`].
    pub(crate) fn auto() -> Self {
        Self::auto_below(half_open_files().map_or(AUTO_MAX, |half| half.clamp(1, AUTO_MAX)))
    }

    /// [`auto`](Self::auto) with at most `ceiling` requests in flight.
    fn auto_below(ceiling: usize) -> Self {
        let start = AUTO_MIN.min(ceiling);
        Self {
            permits: Semaphore::new(start),
            auto: Some(Mutex::new(Estimate::default())),
            fastest_ns: AtomicU64::new(u64::MAX),
            total: AtomicU64::new(start as u64),
            ceiling,
        }
    }

    /// The permits: a request holds one while in flight.
    pub(crate) fn permits(&self) -> &Semaphore {
        &self.permits
    }

    /// Requests in flight at most, now.
    pub(crate) fn current(&self) -> usize {
        self.total.load(Ordering::Relaxed) as usize
    }

    /// Notes one request's time from sending to its answer's first byte (headers).
    pub(crate) fn first_byte(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.fastest_ns.fetch_min(ns, Ordering::Relaxed);
    }

    /// Folds in the requests finished since the last call: their fastest first byte and, when
    /// `gets` > 0, their `bytes` over `gets` answers; then resizes the permits.
    pub(crate) fn fold(&self, bytes: u64, gets: u64) {
        self.fold_at(bytes, gets, Instant::now());
    }

    fn fold_at(&self, bytes: u64, gets: u64, now: Instant) {
        let Some(estimate) = &self.auto else { return };
        let fastest = self.fastest_ns.swap(u64::MAX, Ordering::Relaxed);
        let mut e = estimate.lock().unwrap_or_else(PoisonError::into_inner);
        if fastest != u64::MAX {
            let sample = fastest as f64 * 1e-9;
            if e.rtt.is_none_or(|(rtt, seen)| sample <= rtt || now.duration_since(seen) > RTT_WINDOW) {
                e.rtt = Some((sample, now));
            }
        }
        if gets > 0 {
            e.bytes = e.bytes * KEEP + bytes as f64;
            e.gets = e.gets * KEEP + gets as f64;
        }
        let Some((rtt_s, _)) = e.rtt else { return };
        let wanted = auto_in_flight(rtt_s, e.bytes / e.gets, self.ceiling);
        let total = self.current();
        if wanted > total {
            self.permits.add_permits(wanted - total);
            self.total.store(wanted as u64, Ordering::Relaxed);
        } else if wanted < total {
            // only permits not given out can go; the rest go at a later fold
            let gone = self.permits.forget_permits(total - wanted);
            self.total.store((total - gone) as u64, Ordering::Relaxed);
        }
    }
}

/// Half the soft limit on open file descriptors (each request in flight holds a connection), if
/// there is one.
fn half_open_files() -> Option<usize> {
    #[cfg(unix)]
    {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
        Some(usize::try_from(soft / 2).unwrap_or(usize::MAX))
    }
    #[cfg(not(unix))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_law_between_the_bounds() {
        // nearby server: the floor
        assert_eq!(auto_in_flight(0.0003, 117e3, AUTO_MAX), AUTO_MIN);
        // 50 ms, 117 kB answers: 2.5e9 × 0.05 / 117e3 = 1068.4
        assert_eq!(auto_in_flight(0.05, 117e3, AUTO_MAX), 1069);
        // 50 ms, 350 kB answers (sharded, coalesced): 357 wanted, the floor holds
        assert_eq!(auto_in_flight(0.05, 350e3, AUTO_MAX), AUTO_MIN);
        // a second's round trip: the ceiling, and the descriptor ceiling below it
        assert_eq!(auto_in_flight(1.0, 117e3, AUTO_MAX), AUTO_MAX);
        assert_eq!(auto_in_flight(1.0, 117e3, 300), 300);
        assert_eq!(auto_in_flight(0.0, 117e3, 300), 300);
        assert_eq!(auto_in_flight(f64::INFINITY, 117e3, AUTO_MAX), AUTO_MAX);
        assert_eq!(auto_in_flight(f64::NAN, 117e3, AUTO_MAX), AUTO_MIN);
    }

    #[test]
    fn fold_resizes_the_permits() {
        let limit = Limit::auto_below(AUTO_MAX);
        assert_eq!(limit.current(), AUTO_MIN);
        assert_eq!(limit.permits().available_permits(), AUTO_MIN);
        // no first byte measured yet: nothing to go by
        limit.fold(0, 0);
        assert_eq!(limit.current(), AUTO_MIN);
        // one small answer (a coordinate) weighs little against the prior: no jump to the ceiling
        limit.first_byte(Duration::from_millis(50));
        limit.fold(172, 1);
        assert_eq!(limit.current(), AUTO_MIN);
        // a window's worth of 117 kB answers at 50 ms: 2.5e9 × 0.05 / 117e3 (the prior negligible)
        limit.first_byte(Duration::from_millis(50));
        limit.fold(117_000 * 1_000_000, 1_000_000);
        assert_eq!(limit.current(), 1069);
        assert_eq!(limit.permits().available_permits(), 1069);
        // a slower first byte (answers noticed late under load) does not raise it, nor does a
        // small answer shrink it
        limit.first_byte(Duration::from_millis(90));
        limit.fold(172, 1);
        assert_eq!(limit.current(), 1069);
        // a held permit cannot be forgotten at once: the limit comes down as far as it can
        let held = limit.permits().try_acquire_many(1000).unwrap();
        limit.first_byte(Duration::from_micros(300));
        limit.fold(117_000, 1);
        assert_eq!(limit.current(), 1000);
        drop(held);
        limit.first_byte(Duration::from_micros(300));
        limit.fold(117_000, 1);
        assert_eq!(limit.current(), AUTO_MIN);
        assert_eq!(limit.permits().available_permits(), AUTO_MIN);
        // once the fastest is older than the window, a slower round trip stands for it
        let later = Instant::now() + RTT_WINDOW + Duration::from_secs(1);
        limit.first_byte(Duration::from_millis(50));
        limit.fold(117_000, 1);
        assert_eq!(limit.current(), AUTO_MIN, "the 0.3 ms round trip stands within the window");
        limit.first_byte(Duration::from_millis(50));
        limit.fold_at(117_000, 1, later);
        assert_eq!(limit.current(), 1069);
        limit.first_byte(Duration::from_millis(100));
        limit.fold_at(117_000, 1, later + RTT_WINDOW + Duration::from_secs(1));
        assert_eq!(limit.current(), AUTO_MAX);
        // fixed: never resized
        let fixed = Limit::fixed(7);
        fixed.first_byte(Duration::from_secs(1));
        fixed.fold(1, 1);
        assert_eq!((fixed.current(), fixed.permits().available_permits()), (7, 7));
    }
}
