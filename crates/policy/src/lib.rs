//! What the store decides, without a database: the pure rules the backends write the
//! answers of.
//!
//! - [`lifecycle`]: a key's life in the work queue, and what a completion does to it;
//! - [`retry`]: backoff and parking after failures, and when a failed write runs again;
//! - [`quota`]: what a tenant may hold, checked against its usage;
//! - [`summary`]: a SyncSet's or tenant's status summed up from counted groups of keys;
//! - [`rollout`]: what a progressive rollout does next.
//!
//! Nothing here opens a connection or names a driver, so each rule is tested on its
//! own; `fleetsync-store` re-exports every module under its old path.

pub mod completion;
pub mod lifecycle;
pub mod quota;
pub mod retry;
pub mod rollout;
pub mod summary;

pub use completion::{CompleteOutcome, Completion, RunOutcome};
pub use quota::{Quota, QuotaExceeded, Quotas, Usage};
pub use retry::RetryPolicy;
