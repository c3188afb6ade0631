//! How often the dashboard may be signed in to: a token bucket per client address and
//! one per credential, so that no client and no credential can sign in fast enough to
//! crowd the hub's sessions (or make it check credentials without end).
//!
//! A bucket holds up to `burst` sign-ins and earns one back every `every`. Both buckets
//! must have one for a sign-in to go ahead; a refusal says when to try again. The
//! buckets are in memory, bounded: a full bucket is the same as none, so full ones are
//! dropped first, and when still too many clients are being counted a new one waits.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// One bucket's size and refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Sign-ins that may follow one another at once.
    pub burst: u32,
    /// The time that earns one back.
    pub every: Duration,
}

/// The sign-in rates of a hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// Per client address (an IPv6 client's /64).
    pub per_client: Rate,
    /// Per credential (the token or JWT signed in with, whoever sends it).
    pub per_credential: Rate,
    /// Clients (and credentials) counted at once.
    pub max_tracked: usize,
}

impl Default for SignInLimits {
    /// Per client 20 at once, then one every 3 s (20 a minute); per credential 5 at
    /// once, then one every 12 s (5 a minute); 10,000 of each counted at once.
    fn default() -> Self {
        Self {
            per_client: Rate { burst: 20, every: Duration::from_secs(3) },
            per_credential: Rate { burst: 5, every: Duration::from_secs(12) },
            max_tracked: 10_000,
        }
    }
}

/// Which limit refused a sign-in, and when one will be there again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub scope: &'static str,
    pub retry_after: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// What it holds at `now`, refilled at `rate` since it was last taken from (at most
    /// `rate.burst`).
    fn level(&self, rate: Rate, now: Instant) -> f64 {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() / rate.every.as_secs_f64().max(f64::EPSILON);
        (self.tokens + earned).min(f64::from(rate.burst))
    }
}

/// Buckets by key.
#[derive(Debug)]
struct Buckets<K> {
    rate: Rate,
    by_key: HashMap<K, Bucket>,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    fn new(rate: Rate) -> Self {
        Self { rate, by_key: HashMap::new() }
    }

    /// The bucket of `key` as it is at `now`.
    fn level(&self, key: &K, now: Instant) -> f64 {
        self.by_key.get(key).map_or(f64::from(self.rate.burst), |b| b.level(self.rate, now))
    }

    /// How long until `key`'s bucket holds a sign-in; zero if it does.
    fn wait(&self, key: &K, now: Instant) -> Duration {
        let missing = 1.0 - self.level(key, now);
        if missing <= 0.0 {
            Duration::ZERO
        } else {
            self.rate.every.mul_f64(missing)
        }
    }

    fn take(&mut self, key: &K, now: Instant) {
        let tokens = self.level(key, now) - 1.0;
        self.by_key.insert(key.clone(), Bucket { tokens, at: now });
    }

    /// Makes room for one more key: drops the buckets that have filled up again.
    fn room(&mut self, key: &K, now: Instant, max: usize) -> bool {
        if self.by_key.len() < max || self.by_key.contains_key(key) {
            return true;
        }
        let (rate, burst) = (self.rate, f64::from(self.rate.burst));
        self.by_key.retain(|_, b| b.level(rate, now) < burst);
        self.by_key.len() < max
    }
}

/// The buckets of a hub's sign-ins.
#[derive(Debug)]
pub(crate) struct SignInBuckets {
    limits: SignInLimits,
    clients: Buckets<IpAddr>,
    credentials: Buckets<[u8; 32]>,
}

impl SignInBuckets {
    pub(crate) fn new(limits: SignInLimits) -> Self {
        Self { limits, clients: Buckets::new(limits.per_client), credentials: Buckets::new(limits.per_credential) }
    }

    /// Takes one sign-in from the buckets of `client` and of `credential` (the
    /// SHA-256 of the credential), or takes none and says which limit refused it.
    pub(crate) fn take(&mut self, client: IpAddr, credential: &[u8; 32], now: Instant) -> Result<(), Refused> {
        let client = prefix(client);
        let max = self.limits.max_tracked;
        let busy = Refused { scope: "too many clients are signing in", retry_after: self.limits.per_client.every };
        if !self.clients.room(&client, now, max) || !self.credentials.room(credential, now, max) {
            return Err(busy);
        }
        let wait = self.clients.wait(&client, now);
        if !wait.is_zero() {
            return Err(Refused { scope: "from this client", retry_after: wait });
        }
        let wait = self.credentials.wait(credential, now);
        if !wait.is_zero() {
            return Err(Refused { scope: "with this credential", retry_after: wait });
        }
        self.clients.take(&client, now);
        self.credentials.take(credential, now);
        Ok(())
    }
}

/// The address a client is counted by: an IPv4 address, an IPv6 client's /64 (one
/// host commonly has all of it); an IPv4-mapped IPv6 address counts as its IPv4 one.
fn prefix(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SignInLimits {
        SignInLimits {
            per_client: Rate { burst: 3, every: Duration::from_secs(2) },
            per_credential: Rate { burst: 2, every: Duration::from_secs(10) },
            max_tracked: 2,
        }
    }

    #[test]
    fn a_client_signs_in_at_its_rate_and_is_told_when_to_come_back() {
        let mut b = SignInBuckets::new(SignInLimits { max_tracked: 100, ..limits() });
        let (ip, t0) = ("10.0.0.1".parse().expect("ip"), Instant::now());
        for n in 0..3u8 {
            b.take(ip, &[n; 32], t0).expect("the burst");
        }
        let e = b.take(ip, &[9; 32], t0).expect_err("past the burst");
        assert_eq!(e, Refused { scope: "from this client", retry_after: Duration::from_secs(2) });
        b.take(ip, &[9; 32], t0 + Duration::from_secs(2)).expect("one earned back");
        assert_eq!(
            b.take(ip, &[8; 32], t0 + Duration::from_secs(3)).expect_err("half earned").retry_after,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_credential_is_limited_from_every_client_and_refusals_take_nothing() {
        let mut b = SignInBuckets::new(SignInLimits { max_tracked: 100, ..limits() });
        let t0 = Instant::now();
        b.take("10.0.0.1".parse().expect("ip"), &[1; 32], t0).expect("1");
        b.take("10.0.0.2".parse().expect("ip"), &[1; 32], t0).expect("2");
        let e = b.take("10.0.0.3".parse().expect("ip"), &[1; 32], t0).expect_err("the credential's burst is spent");
        assert_eq!(e, Refused { scope: "with this credential", retry_after: Duration::from_secs(10) });
        // The refusal took nothing from the third client.
        for n in 2..5u8 {
            b.take("10.0.0.3".parse().expect("ip"), &[n; 32], t0).expect("the client's own burst");
        }
    }

    #[test]
    fn the_buckets_are_bounded_and_full_ones_are_forgotten() {
        let mut b = SignInBuckets::new(limits());
        let t0 = Instant::now();
        b.take("10.0.0.1".parse().expect("ip"), &[1; 32], t0).expect("1");
        b.take("10.0.0.2".parse().expect("ip"), &[2; 32], t0).expect("2");
        let e = b.take("10.0.0.3".parse().expect("ip"), &[3; 32], t0).expect_err("two counted already");
        assert_eq!(e.scope, "too many clients are signing in");
        b.take("10.0.0.3".parse().expect("ip"), &[3; 32], t0 + Duration::from_secs(20)).expect("the others filled up");
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().expect("ip");
        assert_eq!(prefix(a), prefix(b));
        assert_ne!(prefix(a), prefix("2001:db8:1:3::1".parse().expect("ip")));
        assert_eq!(prefix("::ffff:10.0.0.1".parse().expect("ip")), "10.0.0.1".parse::<IpAddr>().expect("ip"));
    }
}
