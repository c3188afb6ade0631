//! Group commit: completions from every run in this process go through one task that
//! commits whatever is queued in one store transaction, then the next batch. There is
//! no batching window — a lone completion commits at once; under load, one fsync
//! serves hundreds of keys.

use crate::metrics::RuntimeMetrics;
use fleetsync_store::{CompleteOutcome, Completion, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

const MAX_BATCH: usize = 1024;
const TRIES: u32 = 4;

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

async fn commit_loop(store: Arc<dyn Store>, metrics: RuntimeMetrics, mut rx: mpsc::Receiver<(Completion, Reply)>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (completions, replies): (Vec<_>, Vec<_>) = batch.drain(..).unzip();
        match commit_with_retries(&*store, completions).await {
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
