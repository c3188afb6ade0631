//! Group commit: completions from every run in this process go through one task that
//! commits whatever is queued in one store transaction. There is no batching window —
//! a lone completion commits at once; under load, one fsync serves hundreds of keys.
//!
//! Up to [`COMMITS_IN_FLIGHT`] batches commit at once: while one transaction waits for
//! the database (its statements, its fsync), the next batch is already on its way.
//! With one at a time, the commits were the pipeline's narrowest point: the claim loop
//! waited for slots they had not freed yet while a core sat idle (a quarter of the
//! machine, measured on the PostgreSQL drain). Batches usually hold different keys (a
//! key is claimed again only after its completion committed); after a take-over one may
//! hold a stale lease's completion beside another's of the new lease, and then one
//! waits for the other's row (the store locks in one order, so they never deadlock).

use crate::metrics::RuntimeMetrics;
use fleetsync_store::{CompleteOutcome, Completion, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

const MAX_BATCH: usize = 1024;
const TRIES: u32 = 4;
/// Store transactions committing batches at once (see the module docs).
const COMMITS_IN_FLIGHT: usize = 2;

type Reply = oneshot::Sender<Result<CompleteOutcome, String>>;

/// The sending side; clone it into every run.
#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<(Completion, Reply)>,
}

impl Committer {
    /// Starts the commit task. It ends when every `Committer` clone is dropped.
    pub fn spawn(store: Arc<dyn Store>, metrics: RuntimeMetrics) -> (Committer, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(MAX_BATCH * 4);
        (Committer { tx }, tokio::spawn(commit_loop(store, metrics, rx)))
    }

    /// Commits one completion; returns once it is durable (or refused as stale).
    pub async fn commit(&self, c: Completion) -> Result<CompleteOutcome, String> {
        let (reply, answer) = oneshot::channel();
        self.tx.send((c, reply)).await.map_err(|_| "committer stopped".to_string())?;
        answer.await.map_err(|_| "committer stopped".to_string())?
    }
}

/// Takes a batch whenever a commit slot is free (so completions queue up meanwhile
/// and batches stay large), and commits it on a task of its own.
async fn commit_loop(store: Arc<dyn Store>, metrics: RuntimeMetrics, mut rx: mpsc::Receiver<(Completion, Reply)>) {
    let slots = Arc::new(Semaphore::new(COMMITS_IN_FLIGHT));
    let mut commits = JoinSet::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let mut batch = Vec::with_capacity(MAX_BATCH);
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            break;
        }
        while commits.try_join_next().is_some() {}
        let (store, metrics) = (store.clone(), metrics.clone());
        commits.spawn(async move {
            commit_batch(&*store, &metrics, batch).await;
            drop(slot);
        });
    }
    while commits.join_next().await.is_some() {}
}

async fn commit_batch(store: &dyn Store, metrics: &RuntimeMetrics, batch: Vec<(Completion, Reply)>) {
    let (completions, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    match commit_with_retries(store, completions).await {
        Ok(outcomes) => {
            metrics.commit_transactions.inc();
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(e) => {
            // The keys stay leased to us until their leases expire; then they are
            // claimed again (at-least-once), so nothing is lost.
            tracing::error!(error = %e, "committing completions failed");
            for reply in replies {
                let _ = reply.send(Err(e.to_string()));
            }
        }
    }
}

async fn commit_with_retries(store: &dyn Store, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>, StoreError> {
    let mut delay = Duration::from_millis(50);
    let mut tries = 1;
    loop {
        match store.work_complete(completions.clone()).await {
            Ok(out) => return Ok(out),
            Err(e) if tries < TRIES => {
                tracing::warn!(error = %e, tries, "commit failed; trying again");
                tokio::time::sleep(delay).await;
                delay *= 4;
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
