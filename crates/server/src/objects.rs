//! Objects: applying documents, and listing, reading and deleting Clusters, SyncSets
//! and Secrets.
//!
//! Every kind is served by the same generic handlers, parameterised by a marker type
//! ([`Clusters`], [`SyncSets`], [`Secrets`]), so the kinds cannot drift apart. Objects
//! are returned as users write them (`Document::to_value`: `apiVersion`, `kind`, and
//! `metadata.generation`), so a `GET` can be edited and applied again — except a
//! Secret's values, which `to_value` replaces with `<redacted>`: the API never
//! returns them.

use crate::access::{Access, Caller, Right};
use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, default_tenant, ApiPath, ApiQuery, ApiText, TenantQuery};
use crate::paging::{self, Scope, Want};
use crate::{AppState, Items};
use axum::extract::State;
use axum::Json;
use fleetsync_api::{ApplyResponse, DeleteResponse, Deleted};
use fleetsync_model::{parse_documents_with, Cluster, Document, Endpoint, Kind, LabelQuery, ParseBudget};
use fleetsync_store::{
    ClusterFilter, Commit, ObjectFilter, ObjectKey, Objects, PageRequest, Store, StoreError, MAX_PAGE_LIMIT,
};
use serde::Deserialize;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A kind of object served under `/v1/<plural>`.
pub trait ObjectKind: Send + Sync + 'static {
    const KIND: Kind;
    /// How a name of this kind is called in messages about the path.
    const PATH_NAME: &'static str;
}

/// `/v1/clusters`.
#[derive(Debug)]
pub enum Clusters {}

impl ObjectKind for Clusters {
    const KIND: Kind = Kind::Cluster;
    const PATH_NAME: &'static str = "cluster name in the path";
}

/// `/v1/syncsets`.
#[derive(Debug)]
pub enum SyncSets {}

impl ObjectKind for SyncSets {
    const KIND: Kind = Kind::SyncSet;
    const PATH_NAME: &'static str = "SyncSet name in the path";
}

/// `/v1/secrets` (values redacted).
#[derive(Debug)]
pub enum Secrets {}

impl ObjectKind for Secrets {
    const KIND: Kind = Kind::Secret;
    const PATH_NAME: &'static str = "Secret name in the path";
}

/// `/v1/gitrepositories`.
#[derive(Debug)]
pub enum GitRepositories {}

impl ObjectKind for GitRepositories {
    const KIND: Kind = Kind::GitRepository;
    const PATH_NAME: &'static str = "GitRepository name in the path";
}

/// `/v1/ocirepositories`.
#[derive(Debug)]
pub enum OciRepositories {}

impl ObjectKind for OciRepositories {
    const KIND: Kind = Kind::OCIRepository;
    const PATH_NAME: &'static str = "OCIRepository name in the path";
}

/// `/v1/notifiers`.
#[derive(Debug)]
pub enum Notifiers {}

impl ObjectKind for Notifiers {
    const KIND: Kind = Kind::Notifier;
    const PATH_NAME: &'static str = "Notifier name in the path";
}

/// `POST /v1/apply?dryRun=All`: `dryRun` is the only query parameter. Each document
/// names its own tenant (`metadata.namespace`), so a `?tenant=` would only mislead.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyQuery {
    #[serde(rename = "dryRun")]
    pub dry_run: Option<String>,
}

impl ApplyQuery {
    /// Whether the apply commits: `dryRun=All` (Kubernetes' one value) runs it whole
    /// and rolls it back.
    fn commit(&self) -> Result<Commit> {
        match self.dry_run.as_deref() {
            None => Ok(Commit::Yes),
            Some("All") => Ok(Commit::No),
            Some(other) => Err(ApiError::InvalidParam {
                param: "query parameter `dryRun`".into(),
                rule: format!("`{other}` is not a dry run this hub knows: the one accepted value is `All` (leave it out to apply)"),
            }),
        }
    }
}

/// `POST /v1/apply`: parses every document, then applies them all in one store
/// transaction (all or nothing), within the tenants' quotas. A dry run does all of it,
/// rights and quotas included, and rolls the transaction back.
pub async fn apply(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ApplyQuery>,
    ApiText(text): ApiText,
) -> Result<Json<ApplyResponse>> {
    let commit = query.commit()?;
    // Parsing up to 64 MiB of YAML is CPU work: keep it off the async workers, within a
    // time budget, and stop it when this future is dropped (the client hung up, or shutdown).
    let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
    let budget = ParseBudget::default().with_time_limit(PARSE_TIME).with_cancel(cancel.0.clone());
    let docs = tokio::task::spawn_blocking(move || parse_documents_with(&text, &budget))
        .await
        .map_err(|e| ApiError::Internal { step: "parsing documents", message: e.to_string() })??;
    for doc in &docs {
        may_write(&caller, &state.access, doc)?;
    }
    let batch = crate::targets::Batch::of(&docs);
    let results = state.store.objects_apply_within(docs, Some(&caller.subject), &state.quotas, commit).await?;
    let mut results: Vec<_> = results.into_iter().map(crate::wire::apply_result).collect();
    batch.annotate(state.store.as_ref(), &mut results, commit == Commit::Yes).await?;
    Ok(Json(ApplyResponse { results, dry_run: commit == Commit::No }))
}

/// How long parsing one `POST /v1/apply` body may take.
const PARSE_TIME: std::time::Duration = fleetsync_model::limits::DEFAULT_PARSE_TIME;

/// Sets its flag when dropped: the parse it was given to stops.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The right writing an object of `kind` needs: Secrets are an admin's.
pub fn write_right(kind: Kind) -> Right {
    match kind {
        Kind::Secret => Right::Admin,
        Kind::Cluster | Kind::SyncSet | Kind::GitRepository | Kind::OCIRepository | Kind::Notifier => Right::Edit,
    }
}

/// Whether `caller` may write `doc`: the right its kind needs in its tenant, and for a
/// Cluster on the `inCluster` endpoint (the hub's own cluster, with the hub's
/// credentials), a tenant the operator allowed.
fn may_write(caller: &Caller, access: &Access, doc: &Document) -> Result<()> {
    let (tenant, name) = (doc.metadata().tenant(), &doc.metadata().name);
    let right = write_right(doc.kind());
    if !caller.allows(right, tenant) {
        return Err(ApiError::Forbidden(format!(
            "{} {tenant}/{name}: {}",
            doc.kind().as_str(),
            caller.refusal(right, tenant)
        )));
    }
    if let Document::Cluster(c) = doc {
        if matches!(c.spec.endpoint, Endpoint::InCluster {}) && !access.in_cluster_tenants.contains(tenant) {
            return Err(ApiError::Forbidden(format!(
                "Cluster {tenant}/{name}: the inCluster endpoint (the hub's own cluster) is not allowed for tenant {tenant} (serve --allow-in-cluster-tenant)"
            )));
        }
    }
    Ok(())
}

/// `GET /v1/<plural>?tenant=&labelSelector=&limit=&continue=`: `labelSelector` in
/// kubectl's syntax, on the objects' `metadata.labels`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(rename = "labelSelector")]
    pub label_selector: Option<String>,
    pub limit: Option<usize>,
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
}

/// `GET /v1/<plural>`: every object of the kind in the tenant, or one page of them.
pub async fn list<K: ObjectKind>(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Items<Value>>> {
    let tenant = check_tenant(&q.tenant)?;
    let labels = match &q.label_selector {
        None => LabelQuery::default(),
        Some(text) => LabelQuery::parse(text).map_err(|e| ApiError::InvalidParam {
            param: "query parameter `labelSelector`".into(),
            rule: e.to_string(),
        })?,
    };
    let scope = Scope::new(&format!("/v1/{}", K::KIND.as_str()), tenant, &labels.to_string());
    let (store, objects) = (state.store.as_ref(), ObjectFilter { tenant: Some(tenant.into()) });
    // Clusters are selected by the store (an index on their labels); other kinds are
    // few per tenant and selected here, a page keeping its continue token when some of
    // its items are left out (as Kubernetes' lists may).
    let selects = |v: &Value| labels.is_empty() || labels.matches(&labels_of(v));
    let clusters = ClusterFilter { tenant: Some(tenant.into()), labels: labels.clone() };
    let mut items = match paging::want::<ObjectKey>(q.limit, q.continue_.as_deref(), &scope)? {
        Want::All => {
            let docs: Vec<Document> = match K::KIND {
                Kind::Cluster if clusters.labels.is_empty() => {
                    store.cluster_list(Some(tenant)).await?.into_iter().map(Document::Cluster).collect()
                }
                Kind::Cluster => all_clusters(store, &clusters).await?.into_iter().map(Document::Cluster).collect(),
                Kind::SyncSet => store.syncset_list(Some(tenant)).await?.into_iter().map(Document::SyncSet).collect(),
                Kind::Secret => store.secret_list(Some(tenant)).await?.into_iter().map(Document::Secret).collect(),
                Kind::GitRepository => {
                    store.git_repository_list(Some(tenant)).await?.into_iter().map(Document::GitRepository).collect()
                }
                Kind::OCIRepository => {
                    store.oci_repository_list(Some(tenant)).await?.into_iter().map(Document::OCIRepository).collect()
                }
                Kind::Notifier => {
                    store.notifier_list(Some(tenant)).await?.into_iter().map(Document::Notifier).collect()
                }
            };
            Items::all(docs.iter().map(Document::to_value).collect())
        }
        Want::Page(page) => match K::KIND {
            Kind::Cluster => {
                paging::items(store.cluster_page(&clusters, &page).await?, &scope, |c| Document::Cluster(c).to_value())
            }
            Kind::SyncSet => {
                paging::items(store.syncset_page(&objects, &page).await?, &scope, |s| Document::SyncSet(s).to_value())
            }
            Kind::Secret => {
                paging::items(store.secret_page(&objects, &page).await?, &scope, |s| Document::Secret(s).to_value())
            }
            Kind::GitRepository => paging::items(store.git_repository_page(&objects, &page).await?, &scope, |g| {
                Document::GitRepository(g).to_value()
            }),
            Kind::OCIRepository => paging::items(store.oci_repository_page(&objects, &page).await?, &scope, |o| {
                Document::OCIRepository(o).to_value()
            }),
            Kind::Notifier => {
                paging::items(store.notifier_page(&objects, &page).await?, &scope, |n| Document::Notifier(n).to_value())
            }
        },
    };
    if K::KIND != Kind::Cluster {
        items.items.retain(selects);
    }
    Ok(Json(items))
}

/// The `metadata.labels` of an object as the API shows it.
fn labels_of(v: &Value) -> std::collections::BTreeMap<String, String> {
    let labels = v.pointer("/metadata/labels").and_then(Value::as_object);
    labels.into_iter().flatten().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()
}

/// Every Cluster the filter selects, read a page of [`MAX_PAGE_LIMIT`] at a time (the
/// store's pages evaluate label selectors).
async fn all_clusters(store: &dyn Store, filter: &ClusterFilter) -> Result<Vec<Cluster>> {
    let (mut clusters, mut after) = (Vec::new(), None);
    loop {
        let page = store.cluster_page(filter, &PageRequest { after, limit: MAX_PAGE_LIMIT }).await?;
        clusters.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(clusters),
        }
    }
}

/// `GET /v1/<plural>/{name}`.
pub async fn get<K: ObjectKind>(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<Value>> {
    check_name(K::PATH_NAME, &name)?;
    let tenant = q.tenant()?;
    let doc = fetch(state.store.as_ref(), K::KIND, tenant, &name).await?;
    let doc = doc.ok_or_else(|| StoreError::not_found(K::KIND, tenant, &name))?;
    Ok(Json(doc.to_value()))
}

/// `DELETE /v1/<plural>/{name}`: 404 if it does not exist.
pub async fn delete<K: ObjectKind>(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<DeleteResponse>> {
    check_name(K::PATH_NAME, &name)?;
    let tenant = q.tenant()?;
    state.store.object_delete_by(K::KIND, tenant, &name, Some(&caller.subject)).await?;
    Ok(Json(DeleteResponse { deleted: Deleted { kind: K::KIND, tenant: tenant.to_string(), name } }))
}

/// Reads one object of any kind (a Secret with its values: show `to_value`).
pub async fn fetch(store: &dyn Objects, kind: Kind, tenant: &str, name: &str) -> Result<Option<Document>> {
    Ok(match kind {
        Kind::Cluster => store.cluster_get(tenant, name).await?.map(Document::Cluster),
        Kind::SyncSet => store.syncset_get(tenant, name).await?.map(Document::SyncSet),
        Kind::Secret => store.secret_get(tenant, name).await?.map(Document::Secret),
        Kind::GitRepository => store.git_repository_get(tenant, name).await?.map(Document::GitRepository),
        Kind::OCIRepository => store.oci_repository_get(tenant, name).await?.map(Document::OCIRepository),
        Kind::Notifier => store.notifier_get(tenant, name).await?.map(Document::Notifier),
    })
}
