//! Keyset pagination: every list is read in pages in the order of its primary key,
//! each page starting strictly after the last key of the one before
//! (`WHERE (cols) > (last) ORDER BY cols LIMIT n + 1`), never by offset. An item present
//! for a whole walk is therefore returned exactly once, whatever is added, changed or
//! removed meanwhile, and no item twice.
//!
//! Filters that SQL cannot evaluate (cluster labels, stored as JSON text) are applied
//! while walking: [`Scan`] reads rows in chunks until the page holds `limit` matches or
//! it examined [`SCAN_FACTOR`] × `limit` rows. Then it ends the page after the last row
//! it *examined*, so a page may hold fewer items (even none) and still have a next one —
//! but each page moves the cursor forward by at least one row, so a walk always ends.
//! This is the pure part, shared by the backends and tested without a database.

use fleetsync_model::{LabelQuery, Phase, WorkKey};

/// The largest page a caller may ask for.
pub const MAX_PAGE_LIMIT: usize = 5_000;
/// The page size when a caller pages without saying how big.
pub const DEFAULT_PAGE_LIMIT: usize = 500;
/// How many rows a filtered page examines at most, per item it may return.
pub const SCAN_FACTOR: usize = 10;

/// Where a page starts (strictly after `after`; `None`: at the beginning) and how many
/// items it holds at most (1..=[`MAX_PAGE_LIMIT`]; backends clamp to that range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest<K> {
    pub after: Option<K>,
    pub limit: usize,
}

impl<K> PageRequest<K> {
    pub fn first(limit: usize) -> Self {
        Self { after: None, limit }
    }

    /// The limit within 1..=[`MAX_PAGE_LIMIT`].
    pub fn bounded_limit(&self) -> usize {
        self.limit.clamp(1, MAX_PAGE_LIMIT)
    }
}

/// One page: its items in key order, and the key to continue after (`None`: this was
/// the last page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T, K> {
    pub items: Vec<T>,
    pub next: Option<K>,
}

/// The key of a Cluster, SyncSet or Secret, in list order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub tenant: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(tenant: impl Into<String>, name: impl Into<String>) -> Self {
        Self { tenant: tenant.into(), name: name.into() }
    }
}

/// Which SyncSets or Secrets a list returns; `tenant: None` matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectFilter {
    pub tenant: Option<String>,
}

/// Which Clusters a list returns: of `tenant` (`None`: all) whose labels `labels`
/// selects (empty: all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFilter {
    pub tenant: Option<String>,
    pub labels: LabelQuery,
}

/// Whose live state a list returns: one cluster's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFilter {
    pub tenant: String,
    pub cluster: String,
}

/// Pages of status, by [`WorkKey`].
pub type StatusPage = Page<fleetsync_model::KeyStatus, WorkKey>;

/// The SQL condition (on `work`'s columns, the same in every backend) of keys whose
/// status phase is one of `phases`; `None` if `phases` is empty (no condition). The
/// inverse of [`status_phase`](fleetsync_policy::lifecycle::status_phase) — tested
/// against it in the conformance suite.
///
/// A Failed or Parked key always has an error (only a failed run fails or parks a key),
/// so a condition on those phases alone also says `last_error IS NOT NULL` as a term of
/// its own: both backends then read the index of keys with an error, in page order
/// (`work_errors_by_key`), instead of walking every key for the few that failed.
pub fn phase_condition(phases: &[Phase]) -> Option<String> {
    const FAILED: &str = "attempts > 0 AND last_error IS NOT NULL";
    let one = |p: &Phase| match p {
        Phase::Applying => "phase = 'running'".to_string(),
        Phase::Parked => "phase = 'parked'".to_string(),
        Phase::Applied => "phase = 'idle'".to_string(),
        Phase::Failed => format!("(phase = 'ready' AND {FAILED})"),
        Phase::Pending => format!("(phase = 'ready' AND NOT ({FAILED}))"),
    };
    let any = phases.iter().map(one).collect::<Vec<_>>().join(" OR ");
    let failures_only = phases.iter().all(|p| matches!(p, Phase::Failed | Phase::Parked));
    (!phases.is_empty()).then(|| match failures_only {
        true => format!("(last_error IS NOT NULL AND ({any}))"),
        false => format!("({any})"),
    })
}

/// A filtered walk over rows in key order, collecting one page (see the module docs).
///
/// Ask [`Scan::chunk`] how many rows to read next (after [`Scan::cursor`]), read that
/// many *plus one*, and give them to [`Scan::feed`] (`Some(item)` for a row that matches,
/// `None` for one that does not); repeat while it returns `true`; then [`Scan::finish`].
#[derive(Debug)]
pub struct Scan<T, K> {
    limit: usize,
    budget: usize,
    cursor: Option<K>,
    items: Vec<T>,
    next: Option<K>,
}

impl<T, K: Clone> Scan<T, K> {
    /// A scan for `request`; `filtered`: whether rows may fail to match (else one chunk
    /// of `limit` rows is the page).
    pub fn new(request: &PageRequest<K>, filtered: bool) -> Self {
        let limit = request.bounded_limit();
        let budget = if filtered { limit * SCAN_FACTOR } else { limit };
        Self { limit, budget, cursor: request.after.clone(), items: Vec::new(), next: None }
    }

    /// Where the next chunk starts (strictly after it).
    pub fn cursor(&self) -> Option<&K> {
        self.cursor.as_ref()
    }

    /// How many rows the next chunk examines (read one more, to know if there are more).
    pub fn chunk(&self) -> usize {
        self.limit.min(self.budget).max(1)
    }

    /// Takes the rows of a chunk read with `LIMIT chunk() + 1`; `true` if another chunk
    /// is to be read.
    pub fn feed(&mut self, rows: Vec<(K, Option<T>)>) -> bool {
        let n = self.chunk();
        let more_rows = rows.len() > n;
        let mut rows = rows.into_iter().take(n).peekable();
        while let Some((key, item)) = rows.next() {
            self.budget -= 1;
            if let Some(item) = item {
                self.items.push(item);
            }
            let rest = rows.peek().is_some() || more_rows;
            if self.items.len() == self.limit || self.budget == 0 {
                self.next = rest.then_some(key);
                return false;
            }
            self.cursor = Some(key);
        }
        more_rows
    }

    pub fn finish(self) -> Page<T, K> {
        Page { items: self.items, next: self.next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks `rows` (key, matches) as a backend would, returning the pages' items.
    fn walk(rows: &[(u32, bool)], limit: usize, filtered: bool) -> Vec<Vec<u32>> {
        let mut pages = Vec::new();
        let mut after = None;
        loop {
            let mut scan = Scan::new(&PageRequest { after, limit }, filtered);
            loop {
                let start = scan.cursor().copied();
                let chunk: Vec<(u32, Option<u32>)> = rows
                    .iter()
                    .filter(|(k, _)| start.is_none_or(|s| *k > s))
                    .take(scan.chunk() + 1)
                    .map(|(k, m)| (*k, m.then_some(*k)))
                    .collect();
                if !scan.feed(chunk) {
                    break;
                }
            }
            let page = scan.finish();
            pages.push(page.items);
            match page.next {
                Some(k) => after = Some(k),
                None => return pages,
            }
        }
    }

    #[test]
    fn unfiltered_pages_hold_limit_items_and_the_last_has_no_next() {
        let rows: Vec<(u32, bool)> = (1..=5).map(|k| (k, true)).collect();
        assert_eq!(walk(&rows, 2, false), vec![vec![1, 2], vec![3, 4], vec![5]]);
        // An exact multiple: the last full page says there is no more.
        assert_eq!(walk(&rows[..4], 2, false), vec![vec![1, 2], vec![3, 4]]);
        assert_eq!(walk(&[], 2, false), vec![Vec::<u32>::new()]);
    }

    #[test]
    fn filtered_pages_fill_up_across_chunks() {
        let rows: Vec<(u32, bool)> = (1..=12).map(|k| (k, k % 3 == 0)).collect();
        assert_eq!(walk(&rows, 2, true), vec![vec![3, 6], vec![9, 12]]);
    }

    #[test]
    fn a_sparse_filter_ends_pages_at_the_scan_budget_and_still_terminates() {
        // One match in 50 rows, limit 1: a page examines at most 10 rows.
        let rows: Vec<(u32, bool)> = (1..=50).map(|k| (k, k == 37)).collect();
        let pages = walk(&rows, 1, true);
        assert_eq!(pages.concat(), vec![37]);
        assert_eq!(pages.len(), 6, "{pages:?}");
        assert!(pages[..3].iter().all(Vec::is_empty), "{pages:?}");
        assert_eq!(pages[3], vec![37]);
        // No match at all: still ends.
        let rows: Vec<(u32, bool)> = (1..=25).map(|k| (k, false)).collect();
        assert_eq!(walk(&rows, 1, true).len(), 3);
    }

    #[test]
    fn limits_are_bounded() {
        assert_eq!(PageRequest::<u32>::first(0).bounded_limit(), 1);
        assert_eq!(PageRequest::<u32>::first(MAX_PAGE_LIMIT + 1).bounded_limit(), MAX_PAGE_LIMIT);
    }

    #[test]
    fn phase_conditions() {
        assert_eq!(phase_condition(&[]), None);
        assert_eq!(
            phase_condition(&[Phase::Parked, Phase::Applied]).as_deref(),
            Some("(phase = 'parked' OR phase = 'idle')")
        );
        assert_eq!(
            phase_condition(&[Phase::Parked]).as_deref(),
            Some("(last_error IS NOT NULL AND (phase = 'parked'))"),
            "failures alone name the indexed term"
        );
    }
}
