//! fleetsync's HTTP API as types: every body the hub answers with, defined once
//! ([`wire`]; the server serializes them), and [`Client`], a typed async client of the
//! hub with one method per route.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fleetsync_api::ClientError> {
//! let hub = fleetsync_api::Client::new("http://127.0.0.1:8080");
//! for key in hub.status(&Default::default()).await? {
//!     println!("{} {:?}", key.key, key.phase);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`Client::build`] also speaks https, trusting the CA and presenting the client
//! certificate a [`ClientTls`] names.
//!
//! Every failure is a [`ClientError`]: the hub cannot be reached, it refused (with its
//! status and message), an event cursor expired (with the log's horizon), or its answer
//! was not understood.

pub mod client;
pub mod pages;
pub mod tls;
pub mod wire;

pub use client::{describe, Client, ClientError, EventWatch, StatusFilter};
pub use pages::{all_pages, first_items, PageParams, DEFAULT_PAGE_LIMIT};
pub use tls::{ClientBuildError, ClientTls};
pub use wire::{
    Ack, Acks, ApplyResponse, ApplyResult, ClusterList, ClusterListItem, DeleteResponse, Deleted, ErrorBody, Event,
    FailureGroups, Health, HeatMap, IssuedToken, Items, LiveResource, Member, Rendered, ReportResult, Retried,
    RetriedKeys, Revoked, SchemaVersion, ServerVersion, SyncSetStatus, TenantStatus, TokenCreate, WatchError,
    WatchLine, WhoAmI,
};
