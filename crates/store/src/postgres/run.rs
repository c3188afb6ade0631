//! How a call runs: a write transaction ([`PgStore::write`]), a read or a one-statement
//! write on a pooled connection, and when each is tried again ([`Again`]).

use super::failure::{Failure, PgResult};
use super::tx::{BoxFuture, Committed, Tx};
use super::{due, listen, PgStore};
use crate::retry::write_again;
use crate::{Commit, Result};
use fleetsync_model::Timestamp;
use std::time::Duration;

impl PgStore {
    /// Runs `f` in a transaction and commits it, retrying what is safe to retry.
    pub(super) async fn write<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send,
        F: for<'t, 'c> FnMut(&'t mut Tx<'c>) -> BoxFuture<'t, PgResult<T>> + Send,
    {
        self.write_ending(step, Commit::Yes, f).await
    }

    /// [`write`](Self::write), whose transaction `commit` says whether to commit or to
    /// roll back once `f` has run (a dry run: no event appended, nothing moved in `due`,
    /// no one notified).
    pub(super) async fn write_ending<T, F>(&self, step: &'static str, commit: Commit, mut f: F) -> Result<T>
    where
        T: Send,
        F: for<'t, 'c> FnMut(&'t mut Tx<'c>) -> BoxFuture<'t, PgResult<T>> + Send,
    {
        let mut attempt = 1;
        loop {
            match self.write_once(commit, &mut f).await {
                Ok((out, committed)) => {
                    if let Some(run_at) = committed.wake_at {
                        self.inner.cursors.lower(Some(run_at));
                        listen::bump(&self.inner.wake);
                    }
                    if committed.logged {
                        listen::bump(&self.inner.events);
                    }
                    return Ok(out);
                }
                Err(e) => match Again::Write.after(&e, attempt) {
                    Some(pause) => {
                        tracing::debug!(step, attempt, error = %e.message(), "retrying a transaction");
                        tokio::time::sleep(pause).await;
                        attempt += 1;
                    }
                    None => return Err(e.into_store(step)),
                },
            }
        }
    }

    async fn write_once<T, F>(&self, commit: Commit, f: &mut F) -> PgResult<(T, Committed)>
    where
        F: for<'t, 'c> FnMut(&'t mut Tx<'c>) -> BoxFuture<'t, PgResult<T>>,
    {
        let mut client = self.inner.pool.get().await?;
        let tx = client.transaction().await?;
        let mut tx = Tx {
            tx,
            now: self.inner.clock.now(),
            schema: &self.inner.schema,
            events: Vec::new(),
            wake_at: None,
            due: due::DueMoves::default(),
        };
        let out = match f(&mut tx).await {
            Ok(out) => out,
            Err(e) => {
                tx.rollback().await;
                return Err(e);
            }
        };
        let committed = match commit {
            Commit::Yes => tx.commit().await?,
            Commit::No => {
                tx.rollback().await;
                Committed::NOTHING
            }
        };
        Ok((out, committed))
    }

    /// Runs `f` on a pooled connection (no transaction), retrying once if the
    /// connection turns out to be dead.
    pub(super) async fn read<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(&'c deadpool_postgres::Client, Timestamp) -> BoxFuture<'c, PgResult<T>> + Send,
    {
        self.on_client(step, Again::Read, f).await
    }

    /// Runs a write that is one statement (it appends no event, moves nothing in `due`
    /// and wakes no one) outside [`Tx`], with what `f` sends around it. Retried like
    /// [`write`](Self::write); also when the connection was lost, whether or not the
    /// statement took effect, so `f` must be safe to run again (a claim is: the leases of
    /// one whose answer was lost expire).
    pub(super) async fn write_statement<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(&'c deadpool_postgres::Client, Timestamp) -> BoxFuture<'c, PgResult<T>> + Send,
    {
        self.on_client(step, Again::Write, f).await
    }

    /// Runs `f` on a pooled connection, trying again as `again` says.
    async fn on_client<T, F>(&self, step: &'static str, again: Again, mut f: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(&'c deadpool_postgres::Client, Timestamp) -> BoxFuture<'c, PgResult<T>> + Send,
    {
        let mut attempt = 1;
        loop {
            let result = match self.inner.pool.get().await {
                Ok(client) => f(&client, self.inner.clock.now()).await,
                Err(e) => Err(Failure::Pool(e)),
            };
            let e = match result {
                Ok(out) => return Ok(out),
                Err(e) => e,
            };
            match again.after(&e, attempt) {
                Some(pause) => {
                    tracing::debug!(step, attempt, error = %e.message(), "trying again");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                None => return Err(e.into_store(step)),
            }
        }
    }
}

/// When a call on a pooled connection is tried again.
#[derive(Debug, Clone, Copy)]
enum Again {
    /// A read: once more, at once, if the connection turned out to be dead.
    Read,
    /// A write: after a transient failure (contention or an outage, never a failed
    /// COMMIT), as [`write_again`] says.
    Write,
}

impl Again {
    /// The pause before running the call again after its `attempt`th failure `e`, or
    /// `None` to return the error.
    fn after(self, e: &Failure, attempt: u32) -> Option<Duration> {
        match self {
            Again::Read => (e.connection_lost() && attempt < 2).then_some(Duration::ZERO),
            Again::Write => write_again(e.again_as(), attempt, rand::random::<f64>()),
        }
    }
}
