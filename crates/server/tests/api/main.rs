//! The HTTP API end to end: the router over a real SQLite store, called with
//! `oneshot`.

mod access;
mod agent;
mod broken;
mod dry_run;
mod events;
mod fuzz;
mod fanout;
mod harness;
mod manifests;
mod objects;
mod paging;
mod role_names;
mod ops;
mod status;
mod tokens;
mod ui;
mod watch_limits;
