//! Pages of every list (see [`crate::page`]): keyset pagination on the primary key.

use super::{live, rows};
use crate::page::{LiveFilter, ObjectKey, Page, PageRequest, Scan};
use crate::sealed::{decode_stored, Keyring};
use crate::stored::{decode, table, WithGeneration};
use crate::{LiveResource, Result, StatusFilter};
use fleetsync_model::{KeyStatus, Kind, LabelQuery, Timestamp, WorkKey};
use rusqlite::{params, Connection};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

/// A page of objects of `kind` (of `tenant`, if given); `labels`: Clusters only, the
/// selector their labels must match (read from the `labels` column, before the document
/// is decoded); Secrets opened with `keys`.
pub(super) fn objects<T: DeserializeOwned + WithGeneration>(
    c: &Connection,
    kind: Kind,
    tenant: Option<&str>,
    labels: Option<&LabelQuery>,
    req: &PageRequest<ObjectKey>,
    keys: Option<&Keyring>,
) -> Result<Page<T, ObjectKey>> {
    let labels = labels.filter(|l| !l.is_empty());
    let label_column = if labels.is_some() { "labels" } else { "NULL" };
    let from = |after: bool| {
        format!(
            "SELECT tenant, name, {label_column}, doc, generation FROM {} WHERE (?1 IS NULL OR tenant = ?1) {} ORDER BY tenant, name LIMIT ?4",
            table(kind),
            if after { "AND (tenant, name) > (?2, ?3)" } else { "" }
        )
    };
    let mut scan = Scan::new(req, labels.is_some());
    loop {
        let after = scan.cursor().cloned();
        let mut stmt = c.prepare_cached(&from(after.is_some()))?;
        let (t, n) = after.as_ref().map(|k| (k.tenant.as_str(), k.name.as_str())).unwrap_or_default();
        let limit = i64::try_from(scan.chunk() + 1).unwrap_or(i64::MAX);
        let raw = stmt
            .query_map(params![tenant, t, n, limit], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut chunk = Vec::with_capacity(raw.len());
        for (tenant, name, row_labels, doc, generation) in raw {
            let selected = match (labels, row_labels) {
                (Some(q), Some(l)) => q.matches(&decode::<BTreeMap<String, String>>(table(kind), &l)?),
                _ => true,
            };
            let item = if selected { Some(decode_stored(kind, keys, &tenant, &name, &doc, generation)?) } else { None };
            chunk.push((ObjectKey { tenant, name }, item));
        }
        if !scan.feed(chunk) {
            return Ok(scan.finish());
        }
    }
}

/// A page of status; every filter is in the SQL, so one chunk is the page.
pub(super) fn status(
    c: &Connection,
    now: Timestamp,
    f: &StatusFilter,
    req: &PageRequest<WorkKey>,
) -> Result<Page<KeyStatus, WorkKey>> {
    let mut scan = Scan::new(req, false);
    let mut statuses = rows::status_rows(c, now, f, scan.cursor(), Some(scan.chunk() + 1))?;
    let range = statuses.first().map(|s| s.key.clone()).zip(statuses.last().map(|s| s.key.clone()));
    if let Some((first, last)) = &range {
        crate::live::attach_drift(&mut statuses, live::drifts(c, f, Some((first, last)))?);
    }
    scan.feed(statuses.into_iter().map(|s| (s.key.clone(), Some(s))).collect());
    Ok(scan.finish())
}

/// A page of a cluster's live state, by the resources' stored identities.
pub(super) fn live(c: &Connection, f: &LiveFilter, req: &PageRequest<String>) -> Result<Page<LiveResource, String>> {
    let mut scan = Scan::new(req, false);
    let limit = scan.chunk() + 1;
    let rows = live::rows(c, &f.tenant, &f.cluster, scan.cursor().map(String::as_str), Some(limit))?;
    scan.feed(rows.into_iter().map(|(id, r)| (id, Some(r))).collect());
    Ok(scan.finish())
}
