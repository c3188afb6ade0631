//! The HTTP API end to end: the router over a real SQLite store, called with
//! `oneshot`.

mod access;
mod agent;
mod broken;
mod cluster_list;
mod dry_run;
mod events;
mod fanout;
mod fuzz;
mod harness;
mod hook;
mod manifests;
mod objects;
mod ops;
mod paging;
mod role_names;
mod status;
mod tokens;
mod ui;
mod watch_limits;
