//! A write transaction ([`Tx`]): its statements, `now` for all of them, and what it
//! records for its commit (events appended in commit order, rows moved in `due`,
//! wake-ups); pipelined statements.

use super::failure::{Failure, PgResult};
use super::{due, listen};
use deadpool_postgres::GenericClient;
use fleetsync_model::Timestamp;
use std::future::Future;
use std::pin::Pin;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// A boxed future, as the transaction closures return.
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A write transaction: the statements, `now` for all of them, and what to do at
/// commit (append events in commit order, notify waiters).
pub(super) struct Tx<'c> {
    pub(super) tx: deadpool_postgres::Transaction<'c>,
    pub(super) now: Timestamp,
    pub(super) schema: &'c str,
    pub(super) events: Vec<NewEvent>,
    /// The earliest `run_at` of the keys this transaction made ready, if any.
    pub(super) wake_at: Option<i64>,
    /// How the keys written move in `due`, applied at commit.
    pub(super) due: due::DueMoves,
}

/// What a commit is to tell this process's waiters.
pub(super) struct Committed {
    /// Work may have become claimable, due from this `run_at` on.
    pub(super) wake_at: Option<i64>,
    /// Events were appended.
    pub(super) logged: bool,
}

impl Committed {
    /// What a transaction rolled back tells: nothing.
    pub(super) const NOTHING: Committed = Committed { wake_at: None, logged: false };
}

/// An event to append at commit.
pub(super) struct NewEvent {
    tenant: String,
    kind: &'static str,
    name: String,
    action: &'static str,
    generation: i64,
    actor: Option<String>,
}

impl Tx<'_> {
    pub(super) async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
        query(&self.tx, sql, params).await
    }

    pub(super) async fn query_opt(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Option<Row>> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query_opt(&stmt, params).await?)
    }

    pub(super) async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<u64> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.execute(&stmt, params).await?)
    }

    /// The transaction as a client, for the readers shared with reads.
    pub(super) fn client(&self) -> &deadpool_postgres::Transaction<'_> {
        &self.tx
    }

    /// Appends an event to the log when the transaction commits.
    pub(super) fn event(&mut self, e: crate::write::NewEvent<'_>) {
        let (tenant, name, actor) = (e.tenant.into(), e.name.into(), e.actor.map(str::to_string));
        self.events.push(NewEvent { tenant, kind: e.kind, name, action: e.action, generation: e.generation, actor });
    }

    /// Takes what object writes announce ([`Announce`](crate::plan::Announce)): their
    /// events are in the log already (see [`Tx::event`]), so only the wake-up is left.
    pub(super) fn announce(&mut self, a: crate::plan::Announce) {
        if let Some(at) = a.work_at {
            self.wake_at(at);
        }
    }

    /// Wakes waiting workers (in every process) when the transaction commits, and
    /// moves their claim cursors back to `run_at`, when the keys made ready are due.
    pub(super) fn wake_at(&mut self, run_at: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(run_at.millis(), |at| at.min(run_at.millis())));
    }

    /// Serializes object writes within a tenant, across processes, until commit.
    pub(super) async fn lock_tenant(&self, tenant: &str) -> PgResult<()> {
        let name = format!("fleetsync objects {} {tenant}", self.schema);
        self.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&name]).await?;
        Ok(())
    }

    /// Ends the transaction without effect, now: the connection goes back to the pool
    /// clean (dropping it would only queue a ROLLBACK for whenever the connection task
    /// next runs). A failure here means the connection is gone, which ends it too.
    pub(super) async fn rollback(self) {
        let _ = self.tx.rollback().await;
    }

    /// Runs `statements` pipelined (see [`pipeline`]).
    pub(super) async fn pipeline(&self, statements: &[Statement<'_>]) -> PgResult<Vec<Vec<Row>>> {
        pipeline(&self.tx, statements).await
    }

    /// Moves the keys' rows in `due`, appends the events under the log's lock (held
    /// until commit, so `seq` follows commit order), notifies, commits. Returns which
    /// waiters are to be woken.
    ///
    /// The statements before COMMIT need nothing from each other's results: they go out
    /// pipelined, one round trip, not four, while this transaction holds its rows and the
    /// log's lock.
    pub(super) async fn commit(self) -> PgResult<Committed> {
        let logged = !self.events.is_empty();
        let lock = format!("fleetsync events {}", self.schema);
        let tenants: Vec<&str> = self.events.iter().map(|e| e.tenant.as_str()).collect();
        let kinds: Vec<&str> = self.events.iter().map(|e| e.kind).collect();
        let names: Vec<&str> = self.events.iter().map(|e| e.name.as_str()).collect();
        let actions: Vec<&str> = self.events.iter().map(|e| e.action).collect();
        let generations: Vec<i64> = self.events.iter().map(|e| e.generation).collect();
        let actors: Vec<Option<&str>> = self.events.iter().map(|e| e.actor.as_deref()).collect();
        let now = self.now.millis();
        let work_payload = self.wake_at.map(|run_at| listen::work_payload(self.schema, run_at));
        let due = self.due.to_apply();
        let due_params = due.as_ref().map(due::Columns::params);
        let lock_params: [&(dyn ToSql + Sync); 1] = [&lock];
        let event_params: [&(dyn ToSql + Sync); 7] = [&now, &tenants, &kinds, &names, &actions, &generations, &actors];
        let work_params: [&(dyn ToSql + Sync); 2] = [&listen::CHANNEL, &work_payload];
        let events_params: [&(dyn ToSql + Sync); 2] = [&listen::EVENTS_CHANNEL, &self.schema];
        let mut statements: Vec<Statement<'_>> = Vec::with_capacity(5);
        if let Some(params) = &due_params {
            statements.push((due::APPLY, params));
        }
        if logged {
            statements.push(("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &lock_params));
            statements.push((
                "INSERT INTO events (at, tenant, kind, name, action, generation, actor)
                 SELECT $1::bigint, u.tenant, u.kind, u.name, u.action, u.generation, u.actor
                 FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[])
                      WITH ORDINALITY AS u(tenant, kind, name, action, generation, actor, n)
                 ORDER BY u.n",
                &event_params,
            ));
        }
        if work_payload.is_some() {
            statements.push(("SELECT pg_notify($1, $2)", &work_params));
        }
        if logged {
            statements.push(("SELECT pg_notify($1, $2)", &events_params));
        }
        self.pipeline(&statements).await?;
        self.tx.commit().await.map_err(Failure::Commit)?;
        Ok(Committed { wake_at: self.wake_at, logged })
    }
}

/// A statement and its parameters.
pub(super) type Statement<'a> = (&'a str, &'a [&'a (dyn ToSql + Sync)]);

/// Runs statements of one session that need nothing from each other's results, sent
/// together: one round trip (tokio-postgres pipelines queries polled at once). The server
/// runs them in the order given, which is also the order they are sent in: they are all
/// prepared first (a statement not yet in this connection's cache costs a round trip of
/// its own, one that is costs none, so sending each as soon as it is prepared could send
/// a later one first), and the queries are then polled in order (each sends its request
/// on its first poll). If one fails, the transaction is aborted and those after it fail
/// too; the first failure is the one returned.
pub(super) async fn pipeline<C: GenericClient>(c: &C, statements: &[Statement<'_>]) -> PgResult<Vec<Vec<Row>>> {
    let mut prepared = Vec::with_capacity(statements.len());
    for (sql, _) in statements {
        prepared.push(c.prepare_cached(sql).await?);
    }
    let queries = prepared.iter().zip(statements).map(|(statement, (_, params))| c.query(statement, params));
    Ok(futures_util::future::try_join_all(queries).await?)
}

/// Runs a query through the connection's statement cache.
pub(super) async fn query<C: GenericClient>(c: &C, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}
