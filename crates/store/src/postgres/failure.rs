//! Why an operation failed ([`Failure`]), whether trying again can help
//! ([`transience`]), and how it is described to the caller as a [`StoreError`].

use super::connect::POOL_WAIT;
use super::tls;
use crate::retry::Transience;
use crate::StoreError;
use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

/// Why an operation failed, before it is named for the caller.
pub(super) enum Failure {
    /// A statement failed; the transaction did not commit.
    Pg(tokio_postgres::Error),
    /// COMMIT itself failed: the outcome is unknown, so it is never retried.
    Commit(tokio_postgres::Error),
    /// No connection could be had.
    Pool(PoolError),
    Store(StoreError),
}

pub(super) type PgResult<T> = std::result::Result<T, Failure>;

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

impl From<PoolError> for Failure {
    fn from(e: PoolError) -> Self {
        Failure::Pool(e)
    }
}

/// What PostgreSQL (or the pool in front of it) failed with, as the source of a
/// [`StoreError::Backend`]: shown with the server's message and SQLSTATE (see
/// [`describe`]), the driver's or the pool's error as its own source.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// A statement (or the connection under it) failed.
    #[error("{}", describe(.0))]
    Statement(#[source] tokio_postgres::Error),
    /// COMMIT failed: whether the transaction took effect is unknown.
    #[error("commit failed, so whether it took effect is unknown: {}", describe(.0))]
    Commit(#[source] tokio_postgres::Error),
    /// No connection could be had from the pool.
    #[error("{}", pool_error(.0))]
    Pool(#[source] PoolError),
}

/// PostgreSQL could not be reached at `target` (host, port, database: never the
/// password), with what to check if its certificate was the trouble.
#[derive(Debug, thiserror::Error)]
#[error("{target}: {cause}{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
pub struct Unreachable {
    pub target: String,
    pub hint: Option<String>,
    #[source]
    pub cause: crate::error::Cause,
}

impl Unreachable {
    /// `cause` at `target`, with the hint `tls` has for it.
    pub(super) fn new(target: String, tls: &tls::TlsSettings, cause: PgError) -> Self {
        let driver = match &cause {
            PgError::Statement(e) | PgError::Commit(e) | PgError::Pool(PoolError::Backend(e)) => Some(e),
            PgError::Pool(_) => None,
        };
        let hint = driver.and_then(|e| tls.hint(e));
        Unreachable { target, hint, cause: Box::new(cause) }
    }
}

impl PgError {
    /// How this failure counts for trying again.
    pub(super) fn transience(&self) -> Transience {
        match self {
            PgError::Statement(e) | PgError::Commit(e) => pg_transience(e),
            PgError::Pool(e) => pool_transience(e),
        }
    }
}

/// How a failure to get a pooled connection counts for trying again: as the driver's
/// error when connecting failed; transient but not to be tried again at once when the
/// call already waited [`POOL_WAIT`] for a free one; else (the pool closed) permanent.
fn pool_transience(e: &PoolError) -> Transience {
    match e {
        PoolError::Backend(e) => pg_transience(e),
        PoolError::Timeout(_) => Transience::Waited,
        _ => Transience::Permanent,
    }
}

/// How an error of the driver counts for trying again: from its SQLSTATE and whether
/// the connection was lost under it.
pub(super) fn pg_transience(e: &tokio_postgres::Error) -> Transience {
    transience(e.code().map(SqlState::code), lost(e))
}

/// Whether the connection died under the statement (server restart, network), or could
/// not be made.
fn lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// How a PostgreSQL failure counts for trying again, from its SQLSTATE (`code`, when
/// the server sent one) and whether the connection was lost (`lost`): a lost
/// connection, a shutdown or a server starting up (57P01–57P03), a connection
/// exception (class 08) or insufficient resources (class 53) is an outage; a
/// serialization failure (40001) or a deadlock (40P01) is contention. Anything else —
/// a syntax error or an undefined object (class 42), an integrity violation (class 23),
/// an internal error (XX000), an error with no code (a value that does not decode) —
/// would fail the same way again.
pub(super) fn transience(code: Option<&str>, lost: bool) -> Transience {
    if lost {
        return Transience::Outage;
    }
    match code {
        Some("40001" | "40P01") => Transience::Contention,
        Some("57P01" | "57P02" | "57P03") => Transience::Outage,
        Some(c) if c.starts_with("08") || c.starts_with("53") => Transience::Outage,
        _ => Transience::Permanent,
    }
}

impl Failure {
    /// How this failure counts for running the call again: never a failed COMMIT (its
    /// outcome is unknown) nor the store's own answer.
    pub(super) fn again_as(&self) -> Transience {
        match self {
            Failure::Pg(e) => pg_transience(e),
            Failure::Pool(e) => pool_transience(e),
            Failure::Commit(_) | Failure::Store(_) => Transience::Permanent,
        }
    }

    /// The connection died under the statement (server restart, network).
    pub(super) fn connection_lost(&self) -> bool {
        let Failure::Pg(e) = self else { return false };
        let shutdown = [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN];
        lost(e) || e.code().is_some_and(|c| shutdown.contains(c))
    }

    pub(super) fn message(&self) -> String {
        match self {
            Failure::Pg(e) => describe(e),
            Failure::Commit(e) => format!("commit failed, so whether it took effect is unknown: {}", describe(e)),
            Failure::Pool(e) => pool_error(e),
            Failure::Store(e) => e.to_string(),
        }
    }

    /// Why the server refused the data a statement was given (SQLSTATE class 22, a data
    /// exception; the same statement would be refused again), if it did: its message
    /// and code, without the detail (which may quote the value).
    fn refusal(&self) -> Option<String> {
        let Failure::Pg(e) = self else { return None };
        let db = e.as_db_error().filter(|db| db.code().code().starts_with("22"))?;
        Some(format!("{} (SQLSTATE {})", db.message(), db.code().code()))
    }

    pub(super) fn into_store(self, step: &'static str) -> StoreError {
        if let Some(reason) = self.refusal() {
            return StoreError::Refused { step, reason };
        }
        let cause = match self {
            Failure::Store(e) => return e,
            Failure::Pg(e) => PgError::Statement(e),
            Failure::Commit(e) => PgError::Commit(e),
            Failure::Pool(e) => PgError::Pool(e),
        };
        StoreError::backend(step, cause.transience().is_transient(), cause)
    }
}

/// An error with its causes, e.g. `ERROR: relation "x" does not exist (SQLSTATE 42P01)`.
/// A server error shows its severity, message and code, never its detail (which may
/// quote a row's values).
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

pub(super) fn pool_error(e: &PoolError) -> String {
    match e {
        PoolError::Backend(e) => describe(e),
        PoolError::Timeout(_) => {
            format!("no free connection in the pool within {POOL_WAIT:?} (pool too small or connections stuck)")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contention_and_outages_are_transient_and_everything_else_is_permanent() {
        use Transience::*;
        let cases = [
            (Some("40001"), false, Contention),
            (Some("40P01"), false, Contention),
            (Some("57P01"), false, Outage),
            (Some("57P02"), false, Outage),
            (Some("57P03"), false, Outage),
            (Some("53300"), false, Outage),
            (Some("08006"), false, Outage),
            (None, true, Outage),
            (Some("42601"), true, Outage),
            (Some("42P01"), false, Permanent),
            (Some("23505"), false, Permanent),
            (Some("XX000"), false, Permanent),
            (Some("XX001"), false, Permanent),
            (Some("25006"), false, Permanent),
            (None, false, Permanent),
        ];
        for (code, lost, expected) in cases {
            assert_eq!(transience(code, lost), expected, "{code:?} lost={lost}");
        }
    }

    #[test]
    fn a_pool_timeout_is_transient_but_not_tried_again_at_once() {
        let timeout = PgError::Pool(PoolError::Timeout(deadpool_postgres::TimeoutType::Wait));
        assert_eq!(timeout.transience(), Transience::Waited);
        assert!(timeout.transience().is_transient());
        assert_eq!(PgError::Pool(PoolError::Closed).transience(), Transience::Permanent);
    }
}
