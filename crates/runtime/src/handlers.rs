//! Event handlers: code that must see *every* event of the store's log — an audit
//! trail, a notifier, a projection into another system — as opposed to a
//! [`Reconciler`](crate::reconciler::Reconciler), which only needs the latest state.
//!
//! A [`Consumer`] drives one [`EventHandler`] under a durable name. It resumes from the
//! cursor the store keeps for that name ([`EventLog::consumer_get`]), delivers the events
//! after it in log order (so in order per key), one at a time, and acknowledges
//! ([`EventLog::consumer_ack`]) after each page of events the handler has finished — never
//! past an event it has not. Delivery is therefore *at least once*: a consumer stopped
//! between handling and acknowledging sees those events again when it restarts. A
//! handler that fails is retried with capped exponential backoff, and the events after
//! it wait: nothing is skipped.
//!
//! There is no polling window: the consumer waits on [`EventLog::events_subscribe`], which
//! every commit that appends events wakes, and reads at once.
//!
//! If the log was trimmed past the cursor (the consumer was away longer than the
//! retention), the events it missed are gone: by default the consumer stops with
//! [`ConsumerError::CursorExpired`]; with [`OnExpired::RestartAtHorizon`] it logs an
//! error naming the lost range and carries on from the oldest event left.

use async_trait::async_trait;
use fleetsync_store::{check_consumer_name, Event, EventLog, RetryPolicy, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a handler's failure carries: any error (`?` works on most).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Receives every event, in log order, at least once. An `Err` makes the consumer try
/// the same event again later; it never moves past an event the handler failed.
#[async_trait]
pub trait EventHandler: Send + Sync + 'static {
    async fn handle(&self, event: &Event) -> Result<(), HandlerError>;
}

/// What a consumer does when the events after its cursor were trimmed from the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExpired {
    /// Stop with [`ConsumerError::CursorExpired`]: someone must decide (re-list, rebuild).
    #[default]
    Stop,
    /// Log the lost range as an error, move the cursor to the log's horizon, carry on.
    RestartAtHorizon,
}

/// How a [`Consumer`] runs.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// The durable name its cursor is kept under (see [`check_consumer_name`]).
    pub name: String,
    /// Events read per store call; the cursor is acknowledged after each such page.
    pub page: usize,
    /// Delays between tries of a failing handler (and of failed store reads). Only
    /// `base`, `cap` and `jitter` are used: a handler is tried until it succeeds, since
    /// giving up would skip an event.
    pub retry: RetryPolicy,
    pub on_expired: OnExpired,
    /// The safety-net poll, should a wake-up ever be missed.
    pub poll_interval: Duration,
}

impl ConsumerConfig {
    /// Defaults for the consumer `name`: pages of 256, retries from 50 ms up to 30 s,
    /// stop on an expired cursor, a 5 s safety poll.
    pub fn new(name: impl Into<String>) -> Self {
        let retry = RetryPolicy {
            base: Duration::from_millis(50),
            cap: Duration::from_secs(30),
            max_attempts: u32::MAX,
            jitter: 0.2,
        };
        Self { name: name.into(), page: 256, retry, on_expired: OnExpired::Stop, poll_interval: Duration::from_secs(5) }
    }
}

/// Why a consumer stopped before it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Events after its cursor were trimmed before it handled them.
    #[error(
        "consumer {name}: events {first}..={horizon} were trimmed from the log before it handled them; \
         re-list what it tracks and restart it, or run it with OnExpired::RestartAtHorizon",
        first = .cursor.saturating_add(1)
    )]
    CursorExpired { name: String, cursor: u64, horizon: u64 },
    /// The consumer could not start (e.g. an invalid name).
    #[error("consumer {name}: {source}")]
    Store { name: String, source: StoreError },
}

/// One named consumer of the event log driving one handler. See the module docs.
pub struct Consumer {
    store: Arc<dyn EventLog>,
    handler: Arc<dyn EventHandler>,
    config: ConsumerConfig,
}

impl Consumer {
    /// A consumer named `name` with the default [`ConsumerConfig`].
    pub fn new(store: Arc<dyn EventLog>, name: impl Into<String>, handler: Arc<dyn EventHandler>) -> Self {
        Self::with_config(store, ConsumerConfig::new(name), handler)
    }

    pub fn with_config(store: Arc<dyn EventLog>, config: ConsumerConfig, handler: Arc<dyn EventHandler>) -> Self {
        Self { store, handler, config }
    }

    /// Delivers events until `shutdown` fires (then acknowledges what was handled and
    /// returns the cursor) or the cursor expires under [`OnExpired::Stop`].
    pub async fn run(self, shutdown: CancellationToken) -> Result<u64, ConsumerError> {
        let Some(mut cursor) = self.start(&shutdown).await? else { return Ok(0) };
        let mut wake = self.store.events_subscribe();
        let mut failures = 0;
        while !shutdown.is_cancelled() {
            wake.borrow_and_update();
            let page = match self.store.events_read(cursor, self.config.page.max(1)).await {
                Ok(page) => page,
                Err(StoreError::CursorExpired { horizon, .. }) => {
                    cursor = self.expired(cursor, horizon).await?;
                    continue;
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(consumer = %self.config.name, error = %e, "reading events failed; trying again");
                    self.pause(failures, &shutdown).await;
                    continue;
                }
            };
            failures = 0;
            if page.is_empty() {
                self.wait(&mut wake, &shutdown).await;
                continue;
            }
            if let Some(seq) = self.deliver(&page, &shutdown).await {
                cursor = seq;
                self.ack(seq).await;
            }
        }
        Ok(cursor)
    }

    /// The stored cursor (0 for a new consumer); `None` if shut down while the store
    /// was unreachable.
    async fn start(&self, shutdown: &CancellationToken) -> Result<Option<u64>, ConsumerError> {
        let name = &self.config.name;
        check_consumer_name(name).map_err(|source| ConsumerError::Store { name: name.clone(), source })?;
        let mut failures = 0;
        loop {
            match self.store.consumer_get(name).await {
                Ok(cursor) => return Ok(Some(cursor.unwrap_or(0))),
                Err(e @ StoreError::InvalidConsumerName { .. }) => {
                    return Err(ConsumerError::Store { name: name.clone(), source: e })
                }
                Err(e) => tracing::warn!(consumer = %name, error = %e, "reading the cursor failed; trying again"),
            }
            failures += 1;
            if !self.pause(failures, shutdown).await {
                return Ok(None);
            }
        }
    }

    /// Hands each event of `page` to the handler, retrying one that fails until it
    /// succeeds. Returns the last event handled; stops early (between events, or while
    /// waiting to retry) on shutdown.
    async fn deliver(&self, page: &[Event], shutdown: &CancellationToken) -> Option<u64> {
        let mut handled = None;
        for event in page {
            let mut failures = 0;
            loop {
                if shutdown.is_cancelled() {
                    return handled;
                }
                match self.handler.handle(event).await {
                    Ok(()) => break,
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(consumer = %self.config.name, seq = event.seq, failures, error = %e, "handler failed; retrying");
                        self.pause(failures, shutdown).await;
                    }
                }
            }
            handled = Some(event.seq);
        }
        handled
    }

    /// Acknowledges up to `seq`. A failure is logged only: the next acknowledgement
    /// covers this one, and until then a restart merely sees these events again.
    async fn ack(&self, seq: u64) {
        if let Err(e) = self.store.consumer_ack(&self.config.name, seq).await {
            tracing::warn!(consumer = %self.config.name, seq, error = %e, "acknowledging failed; a restart would see these events again");
        }
    }

    /// The cursor fell off the log: stop, or say loudly what was lost and go on.
    async fn expired(&self, cursor: u64, horizon: u64) -> Result<u64, ConsumerError> {
        let name = self.config.name.clone();
        if self.config.on_expired == OnExpired::Stop {
            return Err(ConsumerError::CursorExpired { name, cursor, horizon });
        }
        tracing::error!(
            consumer = %name, first_lost = cursor.saturating_add(1), last_lost = horizon,
            "events were trimmed from the log before this consumer handled them: they are LOST to it; restarting at the horizon"
        );
        self.ack(horizon).await;
        Ok(horizon)
    }

    /// Sleeps until the log grows, the safety poll fires, or shutdown.
    async fn wait(&self, wake: &mut tokio::sync::watch::Receiver<u64>, shutdown: &CancellationToken) {
        let poll = self.config.poll_interval;
        tokio::select! {
            changed = wake.changed() => if changed.is_err() { self.sleep(poll, shutdown).await; },
            () = tokio::time::sleep(poll) => {}
            () = shutdown.cancelled() => {}
        }
    }

    /// Backs off after the `failures`-th failure in a row; false if shut down meanwhile.
    async fn pause(&self, failures: u32, shutdown: &CancellationToken) -> bool {
        self.sleep(self.config.retry.next_delay(failures), shutdown).await
    }

    async fn sleep(&self, d: Duration, shutdown: &CancellationToken) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            () = shutdown.cancelled() => false,
        }
    }
}
