//! Until when a run may still reach its target: its lease's end, less a safety margin,
//! by this process's clock. The runtime makes one per run and moves it later when the
//! lease is renewed; the run checks it before every call, and the Kubernetes applier
//! checks it once more just before a request's body leaves the process, so that a
//! process paused between the two (SIGSTOP, a starved runtime) sends nothing once its
//! lease may be someone else's.

use std::sync::{Arc, Mutex, PoisonError};
use tokio::time::Instant;

/// A run's deadline, shared: clones see the same, moved, value. [`Deadline::none`]
/// never passes (calls made outside a lease: benchmarks, tests).
#[derive(Debug, Clone, Default)]
pub struct Deadline(Option<Arc<Mutex<Instant>>>);

impl Deadline {
    pub fn at(at: Instant) -> Self {
        Self(Some(Arc::new(Mutex::new(at))))
    }

    pub fn none() -> Self {
        Self(None)
    }

    /// When it passes; `None` for a deadline that never does.
    pub fn instant(&self) -> Option<Instant> {
        self.0.as_ref().map(|d| *d.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether it has passed: no call may start, and no request may leave, any more.
    pub fn passed(&self) -> bool {
        self.instant().is_some_and(|at| Instant::now() >= at)
    }

    /// Moves it later (a renewal); never earlier.
    pub fn extend_to(&self, at: Instant) {
        if let Some(d) = &self.0 {
            let mut d = d.lock().unwrap_or_else(PoisonError::into_inner);
            *d = (*d).max(at);
        }
    }
}

/// Two deadlines are equal when they are the same shared one (or both none).
impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for Deadline {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn passes_at_its_instant_and_renewals_only_move_it_later() {
        let d = Deadline::at(Instant::now() + Duration::from_secs(1));
        let seen_by_the_request = d.clone();
        d.extend_to(Instant::now() + Duration::from_secs(3));
        d.extend_to(Instant::now() + Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(2_999)).await;
        assert!(!seen_by_the_request.passed(), "the renewal moved the shared deadline");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(seen_by_the_request.passed());
        assert!(!Deadline::none().passed());
        assert_eq!(d, seen_by_the_request);
        assert_ne!(d, Deadline::none());
    }
}
