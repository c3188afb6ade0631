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
//!
//! A batch holds results of many keys, often of many tenants, so one result the store
//! cannot hold (a NUL byte in an error message: [`StoreError::Refused`]) must not cost
//! the others theirs. When the store refuses a batch, it is split in halves and each
//! half committed the same way, down to the refused result alone, which is committed
//! instead as a failed run of its key with the reason ([`refused`]): backed off, then
//! parked, like any failure. A batch with nothing refused is one transaction, as
//! before; one refused result among `n` costs about 2·log2(n) more. A failure that is
//! not the data's (the database unreachable) is never split, nor tried again here: the
//! store's runner already ran the transaction again if that could help (contention, an
//! outage of a second or so), and whatever it returns fails every completion of the
//! batch, whose keys are then claimed again when their leases expire.

use crate::metrics::RuntimeMetrics;
use fleetsync_store::{CompleteOutcome, Completion, RunOutcome, StoreError, WorkQueue};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

const MAX_BATCH: usize = 1024;
/// Store transactions committing batches at once (see the module docs).
const COMMITS_IN_FLIGHT: usize = 2;

/// Why a completion was not committed. Its key stays leased to this process until the
/// lease expires and is then claimed again (at-least-once), so nothing is lost.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    /// The store failed the transaction (shared by every completion of the batch).
    #[error("the store failed the commit: {0}")]
    Store(#[source] Arc<StoreError>),
    /// The store committed the batch but answered no outcome for this completion.
    #[error("the store answered no outcome for it")]
    NoOutcome,
    /// The commit task has ended (shutdown).
    #[error("the committer has stopped")]
    Stopped,
}

type Reply = oneshot::Sender<Result<CompleteOutcome, CommitError>>;

/// The sending side; clone it into every run.
#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<(Completion, Reply)>,
}

impl Committer {
    /// Starts the commit task. It ends when every `Committer` clone is dropped.
    pub fn spawn(store: Arc<dyn WorkQueue>, metrics: RuntimeMetrics) -> (Committer, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(MAX_BATCH * 4);
        (Committer { tx }, tokio::spawn(commit_loop(store, metrics, rx)))
    }

    /// Commits one completion; returns once it is durable (or refused as stale).
    pub async fn commit(&self, c: Completion) -> Result<CompleteOutcome, CommitError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send((c, reply)).await.map_err(|_| CommitError::Stopped)?;
        answer.await.map_err(|_| CommitError::Stopped)?
    }
}

/// Takes a batch whenever a commit slot is free (so completions queue up meanwhile
/// and batches stay large), and commits it on a task of its own.
async fn commit_loop(store: Arc<dyn WorkQueue>, metrics: RuntimeMetrics, mut rx: mpsc::Receiver<(Completion, Reply)>) {
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

async fn commit_batch(store: &dyn WorkQueue, metrics: &RuntimeMetrics, batch: Vec<(Completion, Reply)>) {
    let (completions, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let outcomes = commit_each(|c| metrics.store_call("complete", store.work_complete(c)), metrics, completions).await;
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

/// Commits `completions` through `commit` (the store's `work_complete`), in one
/// transaction unless the store refuses one of them (see the module docs); an outcome
/// for each, in order. An error for a completion means its result is not written: the
/// key stays leased to us until its lease expires and is then claimed again
/// (at-least-once), so nothing is lost.
async fn commit_each<F, Fut>(
    mut commit: F,
    metrics: &RuntimeMetrics,
    completions: Vec<Completion>,
) -> Vec<Result<CompleteOutcome, CommitError>>
where
    F: FnMut(Vec<Completion>) -> Fut,
    Fut: Future<Output = Result<Vec<CompleteOutcome>, StoreError>>,
{
    let mut outcomes: Vec<Result<CompleteOutcome, CommitError>> =
        completions.iter().map(|_| Err(CommitError::NoOutcome)).collect();
    // Ranges still to commit, the first on top.
    let mut todo: Vec<std::ops::Range<usize>> = Vec::new();
    todo.push(0..completions.len());
    while let Some(range) = todo.pop() {
        let part = &completions[range.clone()];
        match commit(part.to_vec()).await {
            Ok(out) => {
                metrics.commit_transactions.inc();
                for (slot, outcome) in outcomes[range].iter_mut().zip(out) {
                    *slot = Ok(outcome);
                }
            }
            Err(StoreError::Refused { .. }) if part.len() > 1 => {
                let middle = range.start + part.len() / 2;
                todo.push(middle..range.end);
                todo.push(range.start..middle);
            }
            Err(e @ StoreError::Refused { .. }) => {
                let failed = refused(&part[0], &e);
                tracing::warn!(key = %failed.key, error = %e, "the store refused a run's result; recording the run as failed");
                outcomes[range.start] = match commit(vec![failed]).await {
                    Ok(out) => {
                        metrics.commit_transactions.inc();
                        out.into_iter().next().ok_or(CommitError::NoOutcome)
                    }
                    Err(e) => Err(CommitError::Store(Arc::new(e))),
                };
            }
            Err(e) => {
                tracing::error!(error = %e, keys = part.len(), "committing completions failed");
                let e = Arc::new(e);
                for slot in &mut outcomes[range] {
                    *slot = Err(CommitError::Store(e.clone()));
                }
            }
        }
    }
    outcomes
}

/// Longest reason [`refused`] writes, in characters.
const MAX_REASON: usize = 300;

/// What a completion the store refused becomes: a failed run of its key — backed off,
/// then parked after the retry policy's attempts, like any failure — whose error says
/// that the result was refused and why (the refusal, without control characters, so
/// the reason itself can be stored; never the refused value), and with no per-resource
/// results (they may be what was refused). The fencing token is the run's, so a stale
/// one is still refused as stale.
pub fn refused(c: &Completion, refusal: &StoreError) -> Completion {
    let why: String = refusal.to_string().chars().filter(|ch| !ch.is_control()).take(MAX_REASON).collect();
    Completion {
        key: c.key.clone(),
        fence: c.fence,
        outcome: RunOutcome::Failed { error: format!("the run's result was not stored: {why}") },
        resources: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{Fence, Phase, ResourceOutcome, ResourceRef, ResourceResult, WorkKey};

    fn run(syncset: &str, error: Option<&str>) -> Completion {
        let outcome = match error {
            Some(error) => RunOutcome::Failed { error: error.into() },
            None => RunOutcome::Applied { generation: 1, inventory: vec![], rendered: None },
        };
        Completion { key: WorkKey::new("t", "c", syncset), fence: Fence::new(1), outcome, resources: vec![] }
    }

    /// A store that refuses any batch holding a NUL byte, else commits it (Applied or
    /// Failed, as reported), and records the size of every call.
    fn refusing(
        calls: &std::cell::RefCell<Vec<usize>>,
    ) -> impl FnMut(Vec<Completion>) -> std::future::Ready<Result<Vec<CompleteOutcome>, StoreError>> + '_ {
        move |batch| {
            calls.borrow_mut().push(batch.len());
            let nul = |c: &Completion| matches!(&c.outcome, RunOutcome::Failed { error } if error.contains('\0'));
            std::future::ready(if batch.iter().any(nul) {
                Err(StoreError::Refused { step: "completing work", reason: "NUL (SQLSTATE 22021)".into() })
            } else {
                let phase = |c: &Completion| {
                    if matches!(c.outcome, RunOutcome::Failed { .. }) {
                        Phase::Failed
                    } else {
                        Phase::Applied
                    }
                };
                Ok(batch.iter().map(|c| CompleteOutcome::Committed(phase(c))).collect())
            })
        }
    }

    #[tokio::test]
    async fn a_batch_commits_whole_and_a_refused_result_fails_alone() {
        let metrics = RuntimeMetrics::unregistered();
        let calls = std::cell::RefCell::new(Vec::new());
        let fine: Vec<Completion> = (0..16).map(|i| run(&format!("s{i:02}"), None)).collect();
        let out = commit_each(refusing(&calls), &metrics, fine.clone()).await;
        assert!(out.iter().all(|o| matches!(o, Ok(CompleteOutcome::Committed(Phase::Applied)))));
        assert_eq!(*calls.borrow(), [16], "one transaction");

        calls.borrow_mut().clear();
        let mut batch = fine;
        batch[5] = run("s05", Some("bad \0"));
        let out = commit_each(refusing(&calls), &metrics, batch).await;
        for (i, o) in out.iter().enumerate() {
            let phase = if i == 5 { Phase::Failed } else { Phase::Applied };
            assert_eq!(o.as_ref().ok(), Some(&CompleteOutcome::Committed(phase)), "{i}");
        }
        // 16 refused; 0–7 refused; 0–3 commits; 4–7 refused; 4–5 refused; 4 commits;
        // 5 refused, then commits as a failed run; 6–7 commits; 8–15 commits.
        assert_eq!(*calls.borrow(), [16, 8, 4, 4, 2, 1, 1, 1, 2, 8]);
    }

    /// The database being down is not the data's fault: the batch is neither split nor
    /// tried again here (the store's runner tried it again as far as that could help),
    /// and every completion of it gets the error; nor is an answer about the data.
    #[tokio::test]
    async fn a_failure_that_is_not_the_datas_is_sent_once_whole_and_fails_every_completion() {
        let metrics = RuntimeMetrics::unregistered();
        let calls = std::cell::RefCell::new(Vec::new());
        let failing = |transient: bool| {
            let calls = &calls;
            move |batch: Vec<Completion>| {
                calls.borrow_mut().push(batch.len());
                let cause = if transient { "connection refused" } else { "database disk image is malformed" };
                std::future::ready(Err::<Vec<CompleteOutcome>, _>(StoreError::backend(
                    "completing work",
                    transient,
                    cause,
                )))
            }
        };
        for (transient, cause) in [(true, "connection refused"), (false, "malformed")] {
            calls.borrow_mut().clear();
            let batch: Vec<Completion> = (0..8).map(|i| run(&format!("s{i}"), None)).collect();
            let out = commit_each(failing(transient), &metrics, batch).await;
            assert!(out.iter().all(|o| o.as_ref().is_err_and(|e| e.to_string().contains(cause))), "{out:?}");
            assert_eq!(*calls.borrow(), [8], "one transaction (transient: {transient})");
        }

        calls.borrow_mut().clear();
        let lease_lost = |batch: Vec<Completion>| {
            calls.borrow_mut().push(batch.len());
            std::future::ready(Err::<Vec<CompleteOutcome>, _>(StoreError::LeaseLost {
                key: batch[0].key.clone(),
                fence: Fence::new(1),
            }))
        };
        commit_each(lease_lost, &metrics, vec![run("s", None)]).await;
        assert_eq!(*calls.borrow(), [1], "an answer about the data is not tried again");
    }

    #[test]
    fn a_refused_result_becomes_a_failed_run_with_a_reason_that_can_be_stored() {
        let resource =
            ResourceRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: None, name: "a\0b".into() };
        let run = Completion {
            key: WorkKey::new("t", "c", "s"),
            fence: Fence::new(7),
            outcome: RunOutcome::Failed { error: "raw \0 value".into() },
            resources: vec![ResourceResult { resource, outcome: ResourceOutcome::Failed, error: None, duration_ms: 3 }],
        };
        let refusal = StoreError::Refused {
            step: "completing work",
            reason: "invalid byte sequence for encoding \"UTF8\": 0x00 (SQLSTATE 22021)\u{0}\n".into(),
        };
        let failed = refused(&run, &refusal);
        assert_eq!((&failed.key, failed.fence), (&run.key, Fence::new(7)));
        assert!(failed.resources.is_empty());
        let RunOutcome::Failed { error } = &failed.outcome else { panic!("{failed:?}") };
        assert_eq!(
            error,
            "the run's result was not stored: store refused the data while completing work: \
             invalid byte sequence for encoding \"UTF8\": 0x00 (SQLSTATE 22021)"
        );

        let long = StoreError::Refused { step: "completing work", reason: "x".repeat(10_000) };
        let RunOutcome::Failed { error } = refused(&run, &long).outcome else { panic!() };
        assert!(error.chars().count() < MAX_REASON + 40, "bounded: {} characters", error.len());
    }
}
