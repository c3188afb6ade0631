//! Turns the command line's engine knobs into store and runtime configuration,
//! rejecting combinations that cannot work with a message that says what to fix.

use crate::args::EngineArgs;
use anyhow::{bail, Result};
use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::{Applier, ByEndpoint};
use fleetsync_k8s_sim::fleet::SimFleet;
use fleetsync_runtime::secrets::StoreSecrets;
use fleetsync_runtime::{default_worker_id, RuntimeConfig};
use fleetsync_source::{Limits, Reach, SourceReconciler};
use fleetsync_store::{RetryPolicy, Store, StoreConfig};
use std::sync::Arc;
use std::time::Duration;

pub fn store_config(a: &EngineArgs) -> Result<StoreConfig> {
    if a.max_attempts == 0 {
        bail!("--max-attempts must be at least 1");
    }
    if a.backoff_base.is_zero() || a.backoff_base > a.backoff_cap {
        bail!(
            "--backoff-base ({:?}) must be above zero and at most --backoff-cap ({:?})",
            a.backoff_base,
            a.backoff_cap
        );
    }
    let retry = RetryPolicy {
        base: a.backoff_base,
        cap: a.backoff_cap,
        max_attempts: a.max_attempts,
        ..RetryPolicy::default()
    };
    Ok(StoreConfig { retry, ..StoreConfig::default() })
}

pub fn runtime_config(a: &EngineArgs) -> Result<RuntimeConfig> {
    if a.max_in_flight == 0 {
        bail!("--max-in-flight must be at least 1");
    }
    if a.renew_every.is_zero() || a.renew_every >= a.lease_ttl {
        bail!(
            "--renew-every ({:?}) must be above zero and shorter than --lease-ttl ({:?})",
            a.renew_every,
            a.lease_ttl
        );
    }
    if a.member_ttl < Duration::from_millis(300) {
        bail!("--member-ttl must be at least 300ms, got {:?}", a.member_ttl);
    }
    if a.poll_interval < Duration::from_millis(10) {
        bail!("--poll-interval must be at least 10ms");
    }
    let worker_id = match &a.worker_id {
        Some(id) if id.trim().is_empty() || id.chars().any(char::is_control) => {
            bail!("--worker-id must be a non-empty name without control characters, got {id:?}")
        }
        Some(id) => id.clone(),
        None => default_worker_id(),
    };
    Ok(RuntimeConfig {
        worker_id,
        max_in_flight: a.max_in_flight,
        member_ttl: a.member_ttl,
        max_per_cluster: (a.max_per_cluster > 0).then_some(a.max_per_cluster),
        lease_ttl: a.lease_ttl,
        renew_every: a.renew_every,
        poll_interval: a.poll_interval,
        steal_after: (!a.steal_after.is_zero()).then_some(a.steal_after),
        resync_every: (!a.resync_every.is_zero()).then_some(a.resync_every),
        ..RuntimeConfig::default()
    })
}

pub fn check_fail_rate(rate: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&rate) {
        bail!("the fail rate must be between 0 and 1, got {rate}");
    }
    Ok(rate)
}

/// The egress policy of `--egress-allow` and `--egress-deny`.
pub fn egress_policy(a: &EngineArgs) -> Result<EgressPolicy> {
    Ok(EgressPolicy::parse(&a.egress_allow, &a.egress_deny)?)
}

/// How the workers fetch GitRepositories: held to the same `egress` policy as cluster
/// endpoints, `file://` URLs only with `--allow-local-sources`.
pub fn sources(a: &EngineArgs, egress: EgressPolicy) -> SourceReconciler {
    let reach = Reach { egress: Arc::new(egress), local_files: a.allow_local_sources };
    SourceReconciler { reach, limits: Limits::default() }
}

/// The appliers this build has: the simulated fleet for `simulator` endpoints and the
/// Kubernetes applier for `http`, `kubeconfig` (Secrets read from `store`) and
/// `inCluster` endpoints, held to the `egress` policy.
pub fn appliers(sim: SimFleet, store: Arc<dyn Store>, egress: EgressPolicy) -> Arc<dyn Applier> {
    let config = KubeConfig { egress, ..KubeConfig::default() };
    let kube: Arc<dyn Applier> = Arc::new(KubeApplier::new(config).with_credentials(Arc::new(StoreSecrets(store))));
    Arc::new(ByEndpoint { simulator: Some(Arc::new(sim)), http: Some(kube.clone()), kubeconfig: Some(kube) })
}
