//! Fetching sources as work: a GitRepository's or OCIRepository's fetch is a key of the work queue
//! ([`WorkKey::source`](fleetsync_model::WorkKey::source)), so one process at a time fetches it, under a lease with a
//! fencing token, with the backoff, parking, take-over and metrics of any key.
//!
//! [`SourceReconciler`] runs such a key: it asks the remote for the ref's revision and
//! downloads it only when it is not the one stored; a new revision is stored with
//! [`source_fetched`](fleetsync_store::Artifacts::source_fetched) (own writes,
//! refused once the lease is lost), which makes a new generation of each SyncSet that
//! reads the source, one transaction each; a run that finds the remote unchanged
//! applies any SyncSet still behind the stored revision (its fetcher died between
//! those writes). The key then runs again at the source's `interval` (the safety
//! net behind push notifications, which make it run at once). A fetch that fails
//! leaves the stored revision as it is, and the key's status says why.
//!
//! [`WithSources`] puts it in front of another reconciler (the SyncSet applier): source
//! keys go to the fetcher, notifier keys to the [`NotifierReconciler`], every other key
//! to the reconciler it wraps.

use crate::git::{Basic, Fetch, GitError, GitSource, Reach};
use crate::limits::Limits;
use crate::notify::NotifierReconciler;
use crate::oci::{OciError, OciSource};
use async_trait::async_trait;
use fleetsync_model::{Secret, Source};
use fleetsync_runtime::reconciler::{Action, Context, ReconcileError, Reconciler};
use fleetsync_store::{OwnWrite, RunOutcome};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How long one fetch may take, from the first request to the last byte read.
pub const FETCH_TIME: Duration = Duration::from_secs(300);

/// Runs source keys: see the module docs.
#[derive(Debug, Clone, Default)]
pub struct SourceReconciler {
    pub reach: Reach,
    pub limits: Limits,
}

/// Source keys to a [`SourceReconciler`], notifier keys to a [`NotifierReconciler`],
/// every other key to `rest`.
pub struct WithSources<R> {
    pub sources: SourceReconciler,
    pub notifiers: NotifierReconciler,
    pub rest: R,
}

impl<R> WithSources<R> {
    /// `rest` behind `sources`, and notifiers held to the egress policy sources are.
    pub fn new(sources: SourceReconciler, rest: R) -> Self {
        let notifiers = NotifierReconciler::new(sources.reach.egress.clone());
        Self { sources, notifiers, rest }
    }
}

#[async_trait]
impl<R: Reconciler> Reconciler for WithSources<R> {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        if let Some(name) = ctx.key().notifier_name() {
            return self.notifiers.reconcile(ctx, name).await;
        }
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
        let Some(source) = ctx.store().source_get(&key.tenant, name).await? else { return Ok(removed) };
        let next = Action::Requeue(source.interval().0);
        let secret = self.secret(ctx, &source).await?;
        let failed = |e: GitError| ReconcileError::Failed(e.to_string());
        let known = source.revision().map(String::from);
        let (reach, limits) = (self.reach.clone(), self.limits);
        let fetch: Pin<Box<dyn Future<Output = Result<Fetch, Failed>> + Send + '_>> = match source {
            Source::Git(repo) => {
                let git = GitSource::from_spec(&repo.spec);
                let git = match &secret {
                    Some(s) => git.with_secret(s).map_err(failed)?,
                    None => git,
                };
                Box::pin(async move {
                    let fetch = tokio::task::spawn_blocking(move || git.fetch(known.as_deref(), &reach, &limits));
                    match fetch.await {
                        Ok(fetched) => fetched.map_err(|e| match e {
                            GitError::Url { .. } | GitError::Egress { .. } => Failed::Park(e.to_string()),
                            e => Failed::Retry(e.to_string()),
                        }),
                        Err(e) => Err(Failed::Retry(format!("fetching {name}: {e}"))),
                    }
                })
            }
            Source::Oci(repo) => {
                let auth = secret.as_ref().map(Basic::from_secret).transpose().map_err(failed)?;
                let oci = OciSource { auth, ..OciSource::from_spec(&repo.spec) };
                Box::pin(async move {
                    oci.fetch(known.as_deref(), &reach, &limits).await.map_err(|e| match e {
                        OciError::Egress { .. } | OciError::Layer { .. } => Failed::Park(e.to_string()),
                        e => Failed::Retry(e.to_string()),
                    })
                })
            }
        };
        let fetched = tokio::select! {
            done = tokio::time::timeout(FETCH_TIME, fetch) => match done {
                Ok(fetched) => fetched,
                Err(_) => return Err(ReconcileError::Failed(format!("fetching {name} took longer than {FETCH_TIME:?}"))),
            },
            () = ctx.cancelled().cancelled() => return Err(ReconcileError::Cancelled),
        };
        let own = OwnWrite { key: key.clone(), fence: ctx.item().fence };
        match fetched {
            // SyncSets a fetcher that died left behind take the revision now.
            Ok(Fetch::Unchanged { .. }) => {
                let caught_up = ctx.store().source_catch_up(&key.tenant, name, own).await?;
                if !caught_up.is_empty() {
                    tracing::info!(source = %key, syncsets = caught_up.len(), "SyncSets caught up with the stored revision");
                }
                Ok(next)
            }
            Ok(Fetch::Fetched(artifact)) => {
                let stored = ctx.store().source_fetched(&key.tenant, name, &artifact, own).await?;
                tracing::info!(
                    source = %key, revision = %artifact.revision, files = stored.artifact.files,
                    new_bytes = stored.artifact.new_bytes, syncsets = stored.syncsets.len(),
                    "stored a new revision"
                );
                Ok(next)
            }
            // What trying again cannot change until the source or the hub's policy does.
            Err(Failed::Park(e)) => Ok(parked(e)),
            Err(Failed::Retry(e)) => Err(ReconcileError::Failed(e)),
        }
    }
}

/// How a fetch failed: for good until the source, its Secret or the hub changes, or
/// maybe not on the next try.
enum Failed {
    Park(String),
    Retry(String),
}

impl SourceReconciler {
    /// The Secret the source's `secretRef` names, if it names one. A Secret that is
    /// missing (or unusable, when its credentials are read) fails the run (retried
    /// with backoff, so that it is fetched once the Secret is there); the error names
    /// the Secret, never a value of it.
    async fn secret(&self, ctx: &Context, source: &Source) -> Result<Option<Secret>, ReconcileError> {
        let Some(secret_ref) = source.secret_ref() else { return Ok(None) };
        let tenant = source.metadata().tenant();
        let Some(secret) = ctx.store().secret_get(tenant, &secret_ref.name).await? else {
            let missing = format!("the Secret {tenant}/{} it names does not exist", secret_ref.name);
            return Err(ReconcileError::Failed(missing));
        };
        Ok(Some(secret))
    }
}

/// Parked at once: runs again when the source, its Secret or the hub changes, or on a
/// retry (`fleetsync reconcile source`).
fn parked(error: String) -> Action {
    Action::Report { outcome: RunOutcome::Parked { error }, resources: Vec::new() }
}
