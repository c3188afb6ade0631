//! Desired state from where it lives: a source is fetched into an [`Artifact`] — the
//! files of one revision — within [`Limits`], and a SyncSet's manifests are read from
//! a path of it.
//!
//! * [`git`]: a Git repository's ref (a branch, a tag, a version range over tags, or a
//!   commit) resolved against what the remote advertises, and fetched (one commit,
//!   shallow) only when its revision is not the one already held.
//! * [`Artifact`] (the model's): the files of a revision, each with its content digest
//!   (what the store keeps once however many revisions hold it), and the manifests
//!   under a path.
//! * [`oci`]: an OCI artifact's tag, version range over tags, or digest, resolved
//!   against the registry, and its layer pulled (digests verified) only when the
//!   manifest's digest is not the one already held.
//! * [`tarball`]: an artifact from a gzipped tarball (an OCI layer), read as a
//!   stream within the limits (gzip bombs, links, paths out of it refused).
//! * [`ssh`]: Git over SSH with the source's key and known hosts alone.
//! * [`webhook`]: whether a push notification comes from the source's host (GitHub's
//!   and the generic HMAC-SHA256 signature, GitLab's token).
//! * [`reconciler`]: a source's fetch as a key of the work queue, and the new
//!   revision stored for every process and taken up by the SyncSets that read it.
//! * [`notify`]: a Notifier's deliveries as a key of the work queue: the tenant's
//!   events, from a durable cursor, POSTed in order to a webhook or Slack.
//! * [`limits`]: how much a source may download, hold and nest; a source over a limit
//!   is refused with an error naming the limit, and nothing of it is kept.
//!
//! Every call of [`git`] and [`tarball`] blocks (network and disk); an async caller
//! runs it with `tokio::task::spawn_blocking`, as the [`reconciler`] does. [`oci`] is
//! async. No error carries a credential: URLs are shown without
//! their user information.

pub mod git;
pub mod limits;
pub mod notify;
pub mod oci;
pub mod reconciler;
pub mod ssh;
pub mod tarball;
pub mod webhook;

pub use fleetsync_model::artifact::{Artifact, ArtifactError};
pub use git::{Basic, Fetch, GitError, GitRef, GitSource, Reach};
pub use limits::{Limit, Limits};
pub use notify::NotifierReconciler;
pub use oci::{OciError, OciRef, OciSource};
pub use reconciler::{SourceReconciler, WithSources};
pub use ssh::SshKey;
