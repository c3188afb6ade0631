//! "Now" on PostgreSQL: the database server's clock, read without a round trip.
//!
//! Leases, member TTLs and due times are written by one process and compared by
//! others, so every process must stamp them on one clock, and the only clock they all
//! share is the database server's. Asking the server in every transaction would cost
//! the hot paths (claims, completions, renewals) a round trip each, and times are also
//! needed outside transactions (claim cursors, a worker's sleep until the next due
//! key). So [`DbClock`] reads the server's clock now and then and carries it forward on
//! this machine's *monotonic* clock:
//!
//! - A **sample** is `SELECT clock_timestamp()` timed on the monotonic clock. The
//!   server read its clock somewhere within the round trip, so the sample is placed at
//!   the round trip's midpoint and is off by half the round trip at most.
//! - Of [`SAMPLES`] in a row the one with the shortest round trip is kept (one that
//!   waited somewhere on the way is the least precise).
//! - [`DbClock::now`] is the kept sample's time plus the monotonic time elapsed since
//!   its midpoint. The machine's wall clock is never read: a worker whose clock is a
//!   minute off stamps the same times as every other.
//! - Samples are taken at connect and every [`REFRESH_EVERY`] in the background. A new
//!   one replaces the kept one when it is at least as precise as the kept one has
//!   become by then (its half round trip, plus [`MAX_DRIFT`] of the time since: two
//!   machines' monotonic clocks run apart by tens of ppm at most), so one slow round
//!   trip under load does not replace a good sample. If the database cannot be reached,
//!   the clock goes on from the last sample.
//!
//! A store opened with a clock of its own ([`StoreConfig::clock`](crate::StoreConfig),
//! tests) uses that one and samples nothing.

use super::PgResult;
use deadpool_postgres::Pool;
use fleetsync_model::{Clock, Timestamp};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How often the background task samples the server's clock again.
pub(super) const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// Round trips per sampling; the shortest is kept.
const SAMPLES: usize = 5;
/// How fast this machine's monotonic clock may run apart from the server's (100 ppm;
/// quartz clocks under NTP discipline are within tens).
const MAX_DRIFT: f64 = 100e-6;
/// A background sampling that takes longer than this is given up until the next.
const SAMPLING_TIMEOUT: Duration = Duration::from_secs(2);

/// The server's clock in microseconds since the Unix epoch.
const READ: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8";

/// One reading of the server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    /// What the server's clock said, in microseconds since the Unix epoch.
    server_micros: i64,
    /// When, on this machine's monotonic clock: the midpoint of the round trip.
    at: Instant,
    round_trip: Duration,
}

impl Sample {
    /// A reading of `server_micros`, asked for at `sent` and answered at `received`.
    fn new(sent: Instant, received: Instant, server_micros: i64) -> Sample {
        let round_trip = received.saturating_duration_since(sent);
        Sample { server_micros, at: sent + round_trip / 2, round_trip }
    }

    /// The server's clock at `t`, carried forward (or back) from the sample.
    fn server_at(&self, t: Instant) -> Timestamp {
        let micros = match t.checked_duration_since(self.at) {
            Some(after) => self.server_micros.saturating_add(micros(after)),
            None => self.server_micros.saturating_sub(micros(self.at.duration_since(t))),
        };
        Timestamp(micros.div_euclid(1000))
    }

    /// How far [`server_at`](Self::server_at) may be off at `t`.
    fn error_at(&self, t: Instant) -> Duration {
        self.round_trip / 2 + t.saturating_duration_since(self.at).mul_f64(MAX_DRIFT)
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Reads a clock [`SAMPLES`] times through `read` and keeps the reading with the
/// shortest round trip.
async fn sample<F, Fut, E>(mut read: F) -> Result<Sample, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<i64, E>>,
{
    let mut best = read_once(&mut read).await?;
    for _ in 1..SAMPLES {
        let s = read_once(&mut read).await?;
        if s.round_trip < best.round_trip {
            best = s;
        }
    }
    Ok(best)
}

/// One reading through `read`, timed.
async fn read_once<F, Fut, E>(read: &mut F) -> Result<Sample, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<i64, E>>,
{
    let sent = Instant::now();
    let server_micros = read().await?;
    Ok(Sample::new(sent, Instant::now(), server_micros))
}

/// The database server's clock, as this process knows it (see the module docs).
#[derive(Debug)]
pub struct DbClock {
    kept: Mutex<Sample>,
}

impl DbClock {
    /// Samples the server's clock on a pooled connection.
    pub(super) async fn connect(pool: &Pool) -> PgResult<DbClock> {
        Ok(DbClock { kept: Mutex::new(read(pool).await?) })
    }

    /// Keeps `s` if it is at least as precise as the kept sample is by now.
    fn offer(&self, s: Sample) -> bool {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let better = s.error_at(s.at) <= kept.error_at(s.at);
        if better {
            *kept = s;
        }
        better
    }

    /// How far [`now`](Clock::now) may be off the server's clock now.
    pub fn error(&self) -> Duration {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner).error_at(Instant::now())
    }
}

impl Clock for DbClock {
    fn now(&self) -> Timestamp {
        let kept = *self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.server_at(Instant::now())
    }
}

/// Samples the server's clock on a connection of `pool`.
async fn read(pool: &Pool) -> PgResult<Sample> {
    let client = pool.get().await?;
    // Prepared first, so that no sample's round trip includes the preparation's.
    let statement = client.prepare_cached(READ).await?;
    sample(|| async { Ok(client.query_one(&statement, &[]).await?.try_get::<_, i64>(0)?) }).await
}

/// Keeps the clock's sample fresh; dropping it stops the task.
pub(super) struct Refresher {
    _stop: oneshot::Sender<()>,
}

/// Starts sampling the server's clock every [`REFRESH_EVERY`] for `clock`.
pub(super) fn refresh(pool: Pool, clock: Arc<DbClock>) -> Refresher {
    let (stop_tx, mut stop) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + REFRESH_EVERY, REFRESH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            match tokio::time::timeout(SAMPLING_TIMEOUT, read(&pool)).await {
                Ok(Ok(s)) => {
                    let kept = clock.offer(s);
                    tracing::trace!(round_trip = ?s.round_trip, kept, error = ?clock.error(), "sampled the database's clock");
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e.message(), "cannot sample the database's clock; going on from the last sample")
                }
                Err(_) => tracing::debug!("sampling the database's clock timed out; going on from the last sample"),
            }
        }
    });
    Refresher { _stop: stop_tx }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    /// A clock a fixed offset away from this test's reference clock (the monotonic
    /// clock from `origin`, called 1,000,000 s after the epoch), answering after
    /// `delays` (one per reading; the first half of each before it reads its clock).
    struct FakeServer {
        origin: Instant,
        offset: Duration,
        delays: std::cell::RefCell<Vec<Duration>>,
    }

    impl FakeServer {
        fn reference(&self, t: Instant) -> Timestamp {
            Timestamp(1_000_000_000 + i64::try_from(t.duration_since(self.origin).as_millis()).expect("ms"))
        }

        async fn read(&self) -> Result<i64, std::convert::Infallible> {
            let delay = self.delays.borrow_mut().pop().unwrap_or_default();
            tokio::time::sleep(delay / 2).await;
            let now = self.reference(Instant::now()).plus(self.offset);
            tokio::time::sleep(delay / 2).await;
            Ok(now.millis() * 1000)
        }
    }

    #[tokio::test]
    async fn now_is_the_servers_clock_carried_forward_on_the_monotonic_clock() {
        let server = FakeServer { origin: Instant::now(), offset: MINUTE, delays: Default::default() };
        let s = sample(|| server.read()).await.expect("sample");
        let clock = DbClock { kept: Mutex::new(s) };
        for _ in 0..3 {
            let (before, now, after) = (Instant::now(), clock.now(), Instant::now());
            let lo = server.reference(before).plus(MINUTE).millis() - 2;
            let hi = server.reference(after).plus(MINUTE).millis() + 2;
            assert!((lo..=hi).contains(&now.millis()), "{now:?} not within [{lo}, {hi}]");
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    #[tokio::test]
    async fn the_shortest_round_trip_is_kept_at_its_midpoint() {
        // Popped from the end: 80 ms, 2 ms, 70 ms, 60 ms, 50 ms.
        let delays = [50, 60, 70, 2, 80].map(Duration::from_millis).to_vec();
        let server = FakeServer { origin: Instant::now(), offset: MINUTE, delays: delays.into() };
        let s = sample(|| server.read()).await.expect("sample");
        assert!(
            s.round_trip >= Duration::from_millis(2) && s.round_trip < Duration::from_millis(50),
            "{:?}",
            s.round_trip
        );
        // Off by half the round trip at most (and a millisecond of rounding).
        let expected = server.reference(s.at).plus(MINUTE).millis();
        let bound = i64::try_from(s.round_trip.as_millis()).expect("ms") / 2 + 1;
        assert!((s.server_at(s.at).millis() - expected).abs() <= bound, "anchored at the midpoint");
    }

    #[test]
    fn a_sample_is_carried_both_ways_and_its_error_grows_with_time() {
        let t0 = Instant::now();
        let s = Sample::new(t0, t0 + Duration::from_millis(4), 5_000_000);
        assert_eq!(s.at, t0 + Duration::from_millis(2));
        assert_eq!(s.server_at(s.at), Timestamp(5_000));
        assert_eq!(s.server_at(s.at + Duration::from_millis(1_500)), Timestamp(6_500));
        assert_eq!(s.server_at(t0), Timestamp(4_998));
        assert_eq!(s.error_at(s.at), Duration::from_millis(2));
        assert_eq!(s.error_at(s.at + Duration::from_secs(100)), Duration::from_millis(12));
    }

    #[test]
    fn a_less_precise_sample_replaces_the_kept_one_only_once_that_one_has_drifted_as_far() {
        let t0 = Instant::now();
        let good = Sample::new(t0, t0 + Duration::from_millis(1), 0);
        let clock = DbClock { kept: Mutex::new(good) };
        let slow = |at: Instant| Sample::new(at, at + Duration::from_millis(40), 0);
        assert!(!clock.offer(slow(t0 + Duration::from_secs(5))), "5 s later the kept one is off by 1 ms at most");
        assert!(clock.offer(slow(t0 + Duration::from_secs(400))), "400 s later it may be off by 40 ms");
        let fast =
            Sample::new(t0 + Duration::from_secs(401), t0 + Duration::from_secs(401) + Duration::from_millis(1), 0);
        assert!(clock.offer(fast));
    }
}
