//! The PostgreSQL backend: many worker processes on many machines, one database.
//!
//! Same rows and the same key lifecycle as SQLite (`lifecycle.rs`); what differs
//! is how many processes share them safely:
//!
//! - **Connections.** [`PgStore::connect`] takes a URL or `key=value` string plus the
//!   usual `PG*` environment variables (precedence, defaults and what is not supported
//!   are in `conninfo.rs`), an optional schema (made the `search_path`), and uses a pool of
//!   [`PgOptions::pool_size`] connections (default 16), plus one for LISTEN. All of them
//!   use TLS as `sslmode` says (`tls.rs`).
//! - **Time.** "Now" — in leases, member TTLs, due times, every timestamp written — is
//!   the database server's clock, the one clock every process shares: [`DbClock`]
//!   (`clock.rs`) samples it at connect and every few seconds and carries it forward on
//!   this machine's monotonic clock, so no transaction spends a round trip on it and
//!   no machine's wall clock is ever read. [`WorkQueue::clock`] hands the same clock to the
//!   runtime. A store opened with [`StoreConfig::clock`] (tests) uses that clock instead.
//! - **Transactions** are READ COMMITTED with the server's `synchronous_commit` (on by
//!   default): a call returns after its commit is durable. `now` is read from the
//!   store's clock once per transaction and passed as a parameter. A transaction
//!   that fails before its commit in a way that may pass — a deadlock or a serialization
//!   failure (after a few milliseconds), a dropped connection or the server shutting
//!   down or starting up (after 50, 200, 800 ms) — is retried with a fresh connection,
//!   up to 4 attempts in all (`failure.rs` judges, `retry::write_again` paces); this is
//!   the only layer that retries a store call. Any other failure (a syntax error, a
//!   constraint) fails at once, as a permanent [`StoreError::Backend`]. One the
//!   server refuses for the data it was given (SQLSTATE class 22, a data exception, e.g.
//!   a NUL byte in text) fails as [`StoreError::Refused`].
//! - **Claims** take a batch in one statement (`claim.rs`): due keys are found in the
//!   `due` table (`due.rs`) in `due_at, tenant, cluster, syncset` order — each key at its
//!   `run_at`, a leased one too, whose expiry the claimer's cursor remembers and comes
//!   back to (`cursor.rs`) — then `FOR UPDATE SKIP LOCKED` locks
//!   their `work` rows and an `UPDATE … RETURNING` leases them with tokens from a
//!   SEQUENCE. Concurrent claimers skip each other's rows instead of waiting.
//! - **Completions** of one call commit in one transaction, with set-based statements
//!   (`complete.rs`). They find their rows by the ids this process's claims remembered
//!   (`locations.rs`), and by key otherwise.
//! - **Lock order.** Row locks on `work` are taken in id order everywhere a writer may
//!   wait for them (enqueues, completions, renewals, resyncs, cluster deletions), one
//!   statement each, so concurrent writers do not deadlock. A statement that locks rows
//!   in a CTE and then writes them names them by id, never by `ctid`: a lock that waited
//!   for another writer holds the row's newest version, which the statement's own
//!   snapshot cannot see by `ctid` (it would skip the row); a row in `due` is only
//!   written by the holder of its key's `work` row lock, and claims never wait for a
//!   `work` row (`SKIP LOCKED`), so `due` adds no wait that could close a cycle; object
//!   writes take a
//!   per-tenant advisory lock first (so a cluster and a SyncSet applied at the same time
//!   by two processes both see each other, and enqueue their common key).
//! - **The event log** is in commit order: a transaction appends its events last, under
//!   a per-schema advisory lock held until it commits, so a reader following the log
//!   by `seq` never sees a later number commit before an earlier one. The price: the
//!   commits of transactions that append events (object writes, completions) are
//!   serialized per schema, which is one more reason completions come in batches.
//! - **Wake-ups** go through LISTEN/NOTIFY (`listen.rs`) to every process, and directly
//!   to this process's own waiters: one channel for claimable work, one for appended
//!   events (event watchers).
//! - **Retention** deletes the oldest events in chunks and records the log's horizon in
//!   `events_horizon` in the same transaction (`rows.rs`).
//! - **Table bloat.** `schema.rs` explains the fill factor, which updates are HOT and
//!   why each index exists.
//!
//! The files by concern: `connect.rs` opens a store ([`PgOptions`], the pool, schema
//! preparation, `migrate`); `run.rs` runs a call as a transaction or on a pooled
//! connection and retries it; `tx.rs` is the transaction (`Tx`: its statements,
//! pipelining, and the events, `due` moves and wake-ups its commit carries out);
//! `failure.rs` says why a call failed and whether a retry can help; `store.rs` is the
//! [`Store`] implementation, whose writes hand over to the workflows written once for
//! every backend ([`crate::write`]), over the storage operations of `write.rs`;
//! `testing.rs` (the `conformance` feature) is test support.
//!
//! [`DbClock`]: clock::DbClock
//! [`Store`]: crate::Store
//! [`WorkQueue::clock`]: crate::WorkQueue::clock
//! [`StoreConfig::clock`]: crate::StoreConfig::clock
//! [`StoreError::Refused`]: crate::StoreError::Refused

mod artifacts;
mod claim;
pub mod clock;
mod complete;
mod connect;
mod conninfo;
mod consumers;
mod counts;
mod cursor;
mod due;
mod failure;
mod listen;
mod live;
mod locations;
mod members;
mod objects;
mod pages;
mod queue;
mod rollouts;
mod rows;
mod run;
mod schema;
mod store;
mod summary;
#[cfg(feature = "conformance")]
pub mod testing;
#[cfg(test)]
mod tests;
mod tls;
mod tokens;
mod tx;
mod write;

pub use connect::{PgOptions, PgStore};

use failure::{describe, Failure, PgResult};
use tx::{query, BoxFuture, Tx};
