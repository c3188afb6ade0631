//! Why an operation failed ([`Failure`]), whether trying again can help, and how it is
//! described to the caller as a [`StoreError`].

use super::connect::POOL_WAIT;
use super::tls;
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

impl Failure {
    /// Safe to run the whole transaction again: nothing of it committed, and trying
    /// again can succeed.
    pub(super) fn retryable(&self) -> bool {
        let Failure::Pg(e) = self else { return false };
        let transient = [SqlState::T_R_DEADLOCK_DETECTED, SqlState::T_R_SERIALIZATION_FAILURE];
        e.code().is_some_and(|c| transient.contains(c)) || self.connection_lost()
    }

    /// The connection died under the statement (server restart, network).
    pub(super) fn connection_lost(&self) -> bool {
        let Failure::Pg(e) = self else { return false };
        let shutdown = [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN];
        e.is_closed()
            || e.code().is_some_and(|c| shutdown.contains(c))
            || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
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
        match self {
            Failure::Store(e) => e,
            other => StoreError::Backend { step, message: other.message() },
        }
    }
}

/// An error with its causes, e.g. `db error: ERROR: relation "x" does not exist`.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            s.push_str(&format!("; {detail}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

/// `message`, and what to check if the server's certificate was the trouble.
pub(super) fn with_hint(message: String, tls: &tls::TlsSettings, e: Option<&tokio_postgres::Error>) -> String {
    match e.and_then(|e| tls.hint(e)) {
        Some(hint) => format!("{message} ({hint})"),
        None => message,
    }
}

pub(super) fn backend_error(e: &PoolError) -> Option<&tokio_postgres::Error> {
    match e {
        PoolError::Backend(e) => Some(e),
        _ => None,
    }
}

pub(super) fn pool_error(e: &PoolError) -> String {
    match e {
        PoolError::Backend(e) => describe(e),
        PoolError::Timeout(_) => format!("no free connection in the pool within {POOL_WAIT:?} (pool too small or connections stuck)"),
        other => other.to_string(),
    }
}
