//! Paged lists: one page per call (`limit`, and the `continue` token of the page
//! before), and [`all_pages`], which follows the tokens to the end.

use crate::client::{plural, Client, Result, StatusFilter};
use crate::wire::{Items, LiveResource};
use fleetsync_model::{KeyStatus, Kind};
use serde_json::Value;
use std::future::Future;

/// The hub's page size when a request gives a `continue` token but no `limit`; also
/// the page size the CLI asks for by default.
pub const DEFAULT_PAGE_LIMIT: usize = 500;

/// Which page to ask for: at most `limit` items (`None`: the hub's default, 500, once a
/// token is given), after the page whose `continue` token is `continue_` (`None`: the
/// first page).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageParams {
    pub limit: Option<usize>,
    pub continue_: Option<String>,
}

impl PageParams {
    fn push(&self, query: &mut Vec<(&'static str, String)>) {
        if let Some(limit) = self.limit {
            query.push(("limit", limit.to_string()));
        }
        if let Some(token) = &self.continue_ {
            query.push(("continue", token.clone()));
        }
    }
}

impl Client {
    /// `GET /v1/<plural>?limit=&continue=`: one page of the objects of `kind` in
    /// `tenant`, selected by their labels if `label_selector` is given (kubectl's syntax).
    pub async fn list_page(
        &self,
        kind: Kind,
        tenant: &str,
        label_selector: Option<&str>,
        page: PageParams,
    ) -> Result<Items<Value>> {
        let mut query = vec![("tenant", tenant.to_string())];
        if let Some(selector) = label_selector {
            query.push(("labelSelector", selector.to_string()));
        }
        page.push(&mut query);
        self.get_page(&format!("/v1/{}", plural(kind)), &query).await
    }

    /// `GET /v1/status?limit=&continue=`: one page of key status.
    pub async fn status_page(&self, filter: &StatusFilter, page: PageParams) -> Result<Items<KeyStatus>> {
        let mut query = filter.query();
        page.push(&mut query);
        self.get_page("/v1/status", &query).await
    }

    /// `GET /v1/status/syncsets/{name}?limit=&continue=`: a SyncSet's summary (of all
    /// its keys, whatever the page) and one page of its keys.
    pub async fn syncset_status_page(
        &self,
        tenant: &str,
        syncset: &str,
        page: PageParams,
    ) -> Result<crate::SyncSetStatus> {
        let mut query = vec![("tenant", tenant.to_string())];
        page.push(&mut query);
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.get_json(&format!("/v1/status/syncsets/{syncset}"), &query).await
    }

    /// `GET /v1/live?limit=&continue=`: one page of a cluster's live state.
    pub async fn live_page(&self, tenant: &str, cluster: &str, page: PageParams) -> Result<Items<LiveResource>> {
        let mut query = vec![("tenant", tenant.to_string()), ("cluster", cluster.to_string())];
        page.push(&mut query);
        self.get_page("/v1/live", &query).await
    }

    async fn get_page<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&'static str, String)],
    ) -> Result<Items<T>> {
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.get_json(path, &query).await
    }
}

/// Every item of a paged list: calls `page` with the token of the page before (`None`
/// first) until a page has no `continue` token.
pub async fn all_pages<T, F, Fut>(page: F) -> Result<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Items<T>>>,
{
    first_items(None, page).await
}

/// The first `max` items of a paged list (all of them with `None`): pages are read, as
/// [`all_pages`] reads them, only until that many are in.
pub async fn first_items<T, F, Fut>(max: Option<usize>, mut page: F) -> Result<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Items<T>>>,
{
    let (mut items, mut token) = (Vec::new(), None);
    loop {
        let p = page(token).await?;
        items.extend(p.items);
        if let Some(max) = max.filter(|max| items.len() >= *max) {
            items.truncate(max);
            return Ok(items);
        }
        match p.continue_ {
            Some(next) => token = Some(next),
            None => return Ok(items),
        }
    }
}
