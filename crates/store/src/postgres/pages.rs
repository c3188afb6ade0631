//! Pages of every list on PostgreSQL (see [`crate::page`]): keyset pagination on the
//! primary key, in the database's collation (the comparison and the order agree).

use super::{live, query, rows, PgResult};
use crate::page::{LiveFilter, ObjectKey, Page, PageRequest, Scan};
use crate::sealed::{decode_stored, Keyring};
use crate::stored::{decode, table, WithGeneration};
use crate::{LiveResource, StatusFilter};
use deadpool_postgres::GenericClient;
use fleetsync_model::{KeyStatus, Kind, LabelQuery, Timestamp, WorkKey};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use tokio_postgres::types::ToSql;

/// A page of objects of `kind` (of `tenant`, if given); `labels`: Clusters only, the
/// selector their labels must match (read from the `labels` column, before the document
/// is decoded); Secrets opened with `keys`.
pub(super) async fn objects<T, C>(
    c: &C,
    kind: Kind,
    tenant: Option<&str>,
    labels: Option<&LabelQuery>,
    req: &PageRequest<ObjectKey>,
    keys: Option<&Keyring>,
) -> PgResult<Page<T, ObjectKey>>
where
    T: DeserializeOwned + WithGeneration,
    C: GenericClient,
{
    let labels = labels.filter(|l| !l.is_empty());
    let label_column = if labels.is_some() { "labels" } else { "NULL::text" };
    let mut scan = Scan::new(req, labels.is_some());
    loop {
        let after = scan.cursor().cloned();
        let limit = i64::try_from(scan.chunk() + 1).unwrap_or(i64::MAX);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&tenant, &limit];
        let keyset = match &after {
            Some(k) => {
                params.extend([&k.tenant as &(dyn ToSql + Sync), &k.name]);
                "AND (tenant, name) > ($3, $4)"
            }
            None => "",
        };
        let sql = format!(
            "SELECT tenant, name, {label_column}, doc, generation FROM {} WHERE ($1::text IS NULL OR tenant = $1) {keyset}
             ORDER BY tenant, name LIMIT $2",
            table(kind)
        );
        let raw = query(c, &sql, &params).await?;
        let mut chunk = Vec::with_capacity(raw.len());
        for r in &raw {
            let selected = match (labels, r.try_get::<_, Option<&str>>(2)?) {
                (Some(q), Some(l)) => q.matches(&decode::<BTreeMap<String, String>>(table(kind), l)?),
                _ => true,
            };
            let key = ObjectKey { tenant: r.try_get(0)?, name: r.try_get(1)? };
            let item = match selected {
                true => Some(decode_stored(kind, keys, &key.tenant, &key.name, r.try_get(3)?, r.try_get(4)?)?),
                false => None,
            };
            chunk.push((key, item));
        }
        if !scan.feed(chunk) {
            return Ok(scan.finish());
        }
    }
}

/// A page of status; every filter is in the SQL, so one chunk is the page.
pub(super) async fn status<C: GenericClient>(
    c: &C,
    now: Timestamp,
    f: &StatusFilter,
    req: &PageRequest<WorkKey>,
) -> PgResult<Page<KeyStatus, WorkKey>> {
    let mut scan = Scan::new(req, false);
    let mut statuses = rows::status_rows(c, now, f, scan.cursor(), Some(scan.chunk() + 1)).await?;
    let range = statuses.first().map(|s| s.key.clone()).zip(statuses.last().map(|s| s.key.clone()));
    if let Some((first, last)) = &range {
        crate::live::attach_drift(&mut statuses, live::drifts(c, f, Some((first, last))).await?);
    }
    scan.feed(statuses.into_iter().map(|s| (s.key.clone(), Some(s))).collect());
    Ok(scan.finish())
}

/// A page of a cluster's live state, by the resources' stored identities.
pub(super) async fn live<C: GenericClient>(
    c: &C,
    f: &LiveFilter,
    req: &PageRequest<String>,
) -> PgResult<Page<LiveResource, String>> {
    let mut scan = Scan::new(req, false);
    let rows = live::rows(c, &f.tenant, &f.cluster, scan.cursor().map(String::as_str), Some(scan.chunk() + 1)).await?;
    scan.feed(rows.into_iter().map(|(id, r)| (id, Some(r))).collect());
    Ok(scan.finish())
}
