//! `fleetsync-bench sim` (also run as `fleetsync sim`): the Kubernetes-API-compatible
//! target simulator, for tests and benchmarks, out of the production binary. Prints
//! `listening on ADDR` as its first line so a parent can find it.

use crate::args::SimArgs;
use anyhow::{bail, Context, Result};
use fleetsync::engine::check_fail_rate;
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use std::io::Write;

pub async fn run(a: SimArgs) -> Result<()> {
    if !(a.latency_scale.is_finite() && a.latency_scale >= 0.0) {
        bail!("--latency-scale must be a number of at least 0, got {}", a.latency_scale);
    }
    if !(400..=599).contains(&a.fail_status) {
        bail!("--fail-status must be an HTTP error status (400 to 599), got {}", a.fail_status);
    }
    let config = SimConfig {
        latency: LatencyModel::hive_fleet_scaled(a.latency_scale),
        fail_rate: check_fail_rate(a.fail_rate)?,
        fail_status: a.fail_status,
    };
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .with_context(|| format!("cannot listen on {} (is the port in use? set --listen)", a.listen))?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    SimServer::new(config).serve(listener, shutdown).await.context("the simulator's server failed")
}
