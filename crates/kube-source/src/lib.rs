//! The Kubernetes source: SyncSets and Clusters kept as custom resources
//! (`fleetsync.io/v1`, namespaced: the namespace is the tenant) in a hub cluster.
//!
//! [`KubeSource`] watches them with kube-rs's `watcher`, hands every watch event to
//! the [`SourceEventHandler`]s (each version of each object once, in order), and gives the
//! [`CrReconciler`] the latest state of an object whose spec changed;
//! [`StoreReconciler`] writes it into the fleetsync store. The reconcile's outcome
//! goes back to the object's `status` subresource, with `observedGeneration` and the
//! conditions `Synced` and `Ready` in Kubernetes' standard shape; while the spec stays
//! the same, [`CrReconciler::refresh`] keeps that status current (keys applied since).
//! The CRD definitions are generated from the types in [`crd`].
//!
//! The client comes from a URL without credentials ([`client_for`]) or from
//! credentials found as kubectl finds them ([`client_inferred`]: a kubeconfig and
//! its contexts, else the pod's service account).
//!
//! Its own status writes do not re-trigger it (status does not move
//! `metadata.generation`), and after each one it records the `resourceVersion` the
//! write returned and does not act on an older state of that object until the
//! watch delivers that version, or until [`SourceConfig::own_write_timeout`] (5 s by
//! default) passes: see [`expect`]. This is the guarantee of events and states
//! (docs/concepts.md#guarantee-events-and-states) for an external source of truth.

pub mod crd;
pub mod expect;
pub mod handler;
pub mod source;
pub mod store_reconciler;

pub use handler::{Change, CrKind, CrReconciler, ReconcileError, SourceEvent, SourceEventHandler};
pub use source::{
    api_resource, client_for, client_inferred, config_inferred, ConnectError, Credentials, KubeSource, ObjectKey,
    SourceConfig, READY, SYNCED,
};
pub use store_reconciler::{document, StoreReconciler};
