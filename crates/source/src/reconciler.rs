//! Fetching sources as work: a GitRepository's fetch is a key of the work queue
//! ([`WorkKey::source`](fleetsync_model::WorkKey::source)), so one process at a time fetches it, under a lease with a
//! fencing token, with the backoff, parking, take-over and metrics of any key.
//!
//! [`SourceReconciler`] runs such a key: it asks the remote for the ref's revision and
//! downloads it only when it is not the one stored; a new revision is stored with
//! [`source_fetched`](fleetsync_store::Artifacts::source_fetched) (an own write,
//! refused once the lease is lost), which makes a new generation of each SyncSet that
//! reads the source. The key then runs again at the source's `interval` (the safety
//! net behind push notifications, which make it run at once). A fetch that fails
//! leaves the stored revision as it is, and the key's status says why.
//!
//! [`WithSources`] puts it in front of another reconciler (the SyncSet applier): source
//! keys go to the fetcher, every other key to the reconciler it wraps.

use crate::git::{Basic, Fetch, GitError, GitSource, Reach};
use crate::limits::Limits;
use async_trait::async_trait;
use fleetsync_model::GitRepository;
use fleetsync_runtime::reconciler::{Action, Context, ReconcileError, Reconciler};
use fleetsync_store::{OwnWrite, RunOutcome};
use std::time::Duration;

/// How long one fetch may take, from the first request to the last byte read.
pub const FETCH_TIME: Duration = Duration::from_secs(300);

/// Runs source keys: see the module docs.
#[derive(Debug, Clone, Default)]
pub struct SourceReconciler {
    pub reach: Reach,
    pub limits: Limits,
}

/// Source keys to a [`SourceReconciler`], every other key to `rest`.
pub struct WithSources<R> {
    pub sources: SourceReconciler,
    pub rest: R,
}

#[async_trait]
impl<R: Reconciler> Reconciler for WithSources<R> {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        match ctx.key().source_name() {
            Some(_) => self.sources.reconcile(ctx).await,
            None => self.rest.reconcile(ctx).await,
        }
    }
}

#[async_trait]
impl Reconciler for SourceReconciler {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        let key = ctx.key();
        let Some(name) = key.source_name() else {
            return Err(ReconcileError::Failed(format!("{key} is not a source's key")));
        };
        let removed = Action::Report { outcome: RunOutcome::Removed, resources: Vec::new() };
        if !ctx.item().desired {
            return Ok(removed);
        }
        // Deleted after the claim: its removal is enqueued, and ends the key.
        let Some(repo) = ctx.store().git_repository_get(&key.tenant, name).await? else { return Ok(removed) };
        let next = Action::Requeue(repo.spec.interval.0);
        let source = self.source(ctx, &repo).await?;
        let known = repo.status.as_ref().and_then(|s| s.revision.clone());
        let (reach, limits) = (self.reach.clone(), self.limits);
        let fetch = tokio::task::spawn_blocking(move || source.fetch(known.as_deref(), &reach, &limits));
        let fetched = tokio::select! {
            done = tokio::time::timeout(FETCH_TIME, fetch) => match done {
                Ok(joined) => joined.map_err(|e| ReconcileError::Failed(format!("fetching {name}: {e}")))?,
                Err(_) => return Err(ReconcileError::Failed(format!("fetching {name} took longer than {FETCH_TIME:?}"))),
            },
            () = ctx.cancelled().cancelled() => return Err(ReconcileError::Cancelled),
        };
        match fetched {
            Ok(Fetch::Unchanged { .. }) => Ok(next),
            Ok(Fetch::Fetched(artifact)) => {
                let own = OwnWrite { key: key.clone(), fence: ctx.item().fence };
                let stored = ctx.store().source_fetched(&key.tenant, name, &artifact, own).await?;
                tracing::info!(
                    source = %key, revision = %artifact.revision, files = stored.artifact.files,
                    new_bytes = stored.artifact.new_bytes, syncsets = stored.syncsets.len(),
                    "stored a new revision"
                );
                Ok(next)
            }
            // What trying again cannot change until the source or the hub's policy does.
            Err(e @ (GitError::Url { .. } | GitError::Egress { .. })) => Ok(parked(e.to_string())),
            Err(e) => Err(ReconcileError::Failed(e.to_string())),
        }
    }
}

impl SourceReconciler {
    /// What to fetch: the repository's ref, with the credentials of the Secret its
    /// `secretRef` names. A Secret that is missing or unusable fails the run (retried
    /// with backoff, so that it is fetched once the Secret is there); the error names
    /// the Secret, never a value of it.
    async fn source(&self, ctx: &Context, repo: &GitRepository) -> Result<GitSource, ReconcileError> {
        let mut source = GitSource::from_spec(&repo.spec);
        let Some(secret_ref) = &repo.spec.secret_ref else { return Ok(source) };
        let tenant = repo.metadata.tenant();
        let Some(secret) = ctx.store().secret_get(tenant, &secret_ref.name).await? else {
            let missing = format!("the Secret {tenant}/{} it names does not exist", secret_ref.name);
            return Err(ReconcileError::Failed(missing));
        };
        source.auth = Some(Basic::from_secret(&secret).map_err(|e| ReconcileError::Failed(e.to_string()))?);
        Ok(source)
    }
}

/// Parked at once: runs again when the source, its Secret or the hub changes, or on a
/// retry (`fleetsync reconcile source`).
fn parked(error: String) -> Action {
    Action::Report { outcome: RunOutcome::Parked { error }, resources: Vec::new() }
}
