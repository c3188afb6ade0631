//! The simulator's HTTP API, called with `Router::oneshot` (no port), plus one run
//! over a real loopback listener.

mod apply;
mod discovery;
mod faults;
mod fencing;
mod harness;
mod kube_client;
mod loopback;
mod status;
mod throughput;
mod watch;
