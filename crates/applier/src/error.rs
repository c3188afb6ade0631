//! Typed apply errors, so status can say what went wrong and the runtime can tell
//! what is worth retrying.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// The target saw a newer fencing token for this key: this worker lost its lease.
    #[error("fenced: token {token} is older than {newest} already seen by the target")]
    Fenced { token: i64, newest: i64 },
    /// A transient failure of the target (5xx, injected failure).
    #[error("transient: {0}")]
    Transient(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl ApplyError {
    /// Whether trying again may succeed without anyone changing anything. Permanent
    /// errors still go through backoff (a human may fix the target), but are reported
    /// as such.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ApplyError::Conflict(_) | ApplyError::Unreachable(_) | ApplyError::Timeout(_) | ApplyError::Transient(_))
    }
}
