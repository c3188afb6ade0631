//! The fleet's clusters as a list to search and a map to look at: each cluster with
//! its labels and its keys counted ([`ClusterRow`], one row the store keeps per
//! cluster, no key read), found by name, label selector, condition and staleness
//! ([`ClusterQuery`]), sorted, and counted by condition per value of a label
//! ([`heat_map`]).
//!
//! A cluster's condition is [`ClusterStatus::roll_up`](crate::ClusterStatus::roll_up)'s
//! rule on its counts: `Degraded` if a key failed or parked, else `Ready` if every key
//! is applied, else `Progressing`; a cluster no SyncSet selects has `NoKeys`. It is
//! stale when the later of its newest sign of life (a successful run, an agent's
//! report) and its first key is older than the stale-after window.

use crate::{LabelQuery, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A cluster's condition, from its keys' counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Condition {
    Degraded,
    Progressing,
    Ready,
    /// No SyncSet selects the cluster.
    NoKeys,
}

impl Condition {
    pub const ALL: [Condition; 4] = [Condition::Degraded, Condition::Progressing, Condition::Ready, Condition::NoKeys];

    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Degraded => "Degraded",
            Condition::Progressing => "Progressing",
            Condition::Ready => "Ready",
            Condition::NoKeys => "NoKeys",
        }
    }

    /// The condition named `s`, in any case.
    pub fn parse(s: &str) -> Option<Condition> {
        Condition::ALL.into_iter().find(|c| c.as_str().eq_ignore_ascii_case(s))
    }
}

/// One cluster of the list: its labels and its keys' counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Keys of the cluster (SyncSets that select it).
    pub keys: u64,
    /// Of them, failed or parked.
    pub failing: u64,
    /// Of them, applied and wanted.
    pub applied: u64,
    /// When the cluster got its first key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Its newest successful run or agent report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Timestamp>,
}

impl ClusterRow {
    pub fn condition(&self) -> Condition {
        if self.keys == 0 {
            Condition::NoKeys
        } else if self.failing > 0 {
            Condition::Degraded
        } else if self.applied >= self.keys {
            Condition::Ready
        } else {
            Condition::Progressing
        }
    }

    /// Whether the cluster has keys and showed no sign of life since `cutoff` (nor got
    /// its first key since then).
    pub fn stale(&self, cutoff: Timestamp) -> bool {
        let last = match (self.seen, self.since) {
            (Some(seen), Some(since)) => Some(seen.max(since)),
            (seen, since) => seen.or(since),
        };
        self.keys > 0 && last.is_some_and(|t| t < cutoff)
    }
}

/// How the list is sorted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SortBy {
    #[default]
    Name,
    /// Worst first: degraded, progressing, ready, no keys; then by name.
    Condition,
    /// Most failing keys first; then by name.
    Failing,
    /// Longest without a sign of life first (never seen first); then by name.
    Seen,
}

impl SortBy {
    pub fn parse(s: &str) -> Option<SortBy> {
        match s.to_ascii_lowercase().as_str() {
            "name" => Some(SortBy::Name),
            "condition" => Some(SortBy::Condition),
            "failing" => Some(SortBy::Failing),
            "seen" => Some(SortBy::Seen),
            _ => None,
        }
    }
}

/// Which clusters the list shows, and in which order.
#[derive(Debug, Clone, Default)]
pub struct ClusterQuery {
    /// Part of the name, in any case.
    pub name: Option<String>,
    pub labels: LabelQuery,
    pub condition: Option<Condition>,
    /// `Some(true)`: stale clusters only; `Some(false)`: those not stale.
    pub stale: Option<bool>,
    pub sort: SortBy,
}

impl ClusterQuery {
    /// Whether `row` is shown, with `cutoff` the time before which a cluster is stale.
    pub fn matches(&self, row: &ClusterRow, cutoff: Timestamp) -> bool {
        self.name.as_ref().is_none_or(|part| row.name.to_lowercase().contains(&part.to_lowercase()))
            && self.labels.matches(&row.labels)
            && self.condition.is_none_or(|c| row.condition() == c)
            && self.stale.is_none_or(|stale| row.stale(cutoff) == stale)
    }

    /// The rows `self` shows, in its order.
    pub fn select(&self, rows: Vec<ClusterRow>, cutoff: Timestamp) -> Vec<ClusterRow> {
        let mut rows: Vec<ClusterRow> = rows.into_iter().filter(|r| self.matches(r, cutoff)).collect();
        match self.sort {
            SortBy::Name => rows.sort_by(|a, b| a.name.cmp(&b.name)),
            SortBy::Condition => {
                rows.sort_by(|a, b| a.condition().cmp(&b.condition()).then_with(|| a.name.cmp(&b.name)))
            }
            SortBy::Failing => rows.sort_by(|a, b| b.failing.cmp(&a.failing).then_with(|| a.name.cmp(&b.name))),
            SortBy::Seen => rows.sort_by(|a, b| {
                let last = |r: &ClusterRow| r.seen.map(|s| s.0).unwrap_or(i64::MIN);
                last(a).cmp(&last(b)).then_with(|| a.name.cmp(&b.name))
            }),
        }
        rows
    }
}

/// The clusters of one value of the heat map's label, by condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeatRow {
    /// The label's value; `None` for the clusters without the label.
    pub value: Option<String>,
    pub clusters: u64,
    pub by_condition: BTreeMap<Condition, u64>,
    pub stale: u64,
}

/// Values of the label shown at most; the clusters of the others are summed in one
/// last row whose value is `(N other values)`.
pub const MAX_HEAT_ROWS: usize = 200;

/// The clusters counted by condition (and stale) per value of the label `label`, the
/// values with the most degraded clusters first (then by value); clusters without the
/// label last. Past [`MAX_HEAT_ROWS`] values, the rest are one row.
pub fn heat_map(rows: &[ClusterRow], label: &str, cutoff: Timestamp) -> Vec<HeatRow> {
    let mut by_value: BTreeMap<Option<&str>, HeatRow> = BTreeMap::new();
    for row in rows {
        let value = row.labels.get(label).map(String::as_str);
        let heat =
            by_value.entry(value).or_insert_with(|| HeatRow { value: value.map(str::to_string), ..HeatRow::default() });
        heat.clusters += 1;
        *heat.by_condition.entry(row.condition()).or_default() += 1;
        heat.stale += u64::from(row.stale(cutoff));
    }
    let unlabelled = by_value.remove(&None);
    let mut heat: Vec<HeatRow> = by_value.into_values().collect();
    let degraded = |h: &HeatRow| h.by_condition.get(&Condition::Degraded).copied().unwrap_or(0);
    heat.sort_by(|a, b| degraded(b).cmp(&degraded(a)).then_with(|| a.value.cmp(&b.value)));
    if heat.len() > MAX_HEAT_ROWS {
        let rest = heat.split_off(MAX_HEAT_ROWS - 1);
        let mut other = HeatRow { value: Some(format!("({} other values)", rest.len())), ..HeatRow::default() };
        for h in rest {
            other.clusters += h.clusters;
            other.stale += h.stale;
            for (c, n) in h.by_condition {
                *other.by_condition.entry(c).or_default() += n;
            }
        }
        heat.push(other);
    }
    heat.extend(unlabelled);
    heat
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, labels: &[(&str, &str)], counts: (u64, u64, u64), seen: Option<i64>) -> ClusterRow {
        ClusterRow {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            keys: counts.0,
            failing: counts.1,
            applied: counts.2,
            since: (counts.0 > 0).then_some(Timestamp(0)),
            seen: seen.map(Timestamp),
        }
    }

    fn fleet() -> Vec<ClusterRow> {
        vec![
            row("eu-1", &[("region", "eu")], (3, 1, 2), Some(100)),
            row("eu-2", &[("region", "eu")], (3, 0, 3), Some(500)),
            row("us-1", &[("region", "us")], (3, 0, 1), None),
            row("US-2", &[("region", "us")], (0, 0, 0), None),
            row("lab", &[], (2, 0, 2), Some(900)),
        ]
    }

    #[test]
    fn conditions_follow_the_roll_up_rule() {
        let got: Vec<(String, Condition)> = fleet().iter().map(|r| (r.name.clone(), r.condition())).collect();
        let want = [
            ("eu-1", Condition::Degraded),
            ("eu-2", Condition::Ready),
            ("us-1", Condition::Progressing),
            ("US-2", Condition::NoKeys),
            ("lab", Condition::Ready),
        ];
        assert_eq!(got, want.map(|(n, c)| (n.to_string(), c)));
    }

    #[test]
    fn staleness_is_the_later_of_first_key_and_last_sign_of_life() {
        let f = fleet();
        let stale: Vec<&str> = f.iter().filter(|r| r.stale(Timestamp(600))).map(|r| r.name.as_str()).collect();
        // us-1 never seen: its first key (at 0) is older than the cutoff; US-2 has no keys.
        assert_eq!(stale, ["eu-1", "eu-2", "us-1"]);
        assert!(f.iter().all(|r| !r.stale(Timestamp(0))));
    }

    #[test]
    fn the_list_is_filtered_and_sorted() {
        let names = |q: &ClusterQuery| -> Vec<String> {
            q.select(fleet(), Timestamp(600)).into_iter().map(|r| r.name).collect()
        };
        let by_name = ClusterQuery { name: Some("us".into()), ..ClusterQuery::default() };
        assert_eq!(names(&by_name), ["US-2", "us-1"], "any case, sorted by name");
        let eu = ClusterQuery { labels: LabelQuery::parse("region=eu").expect("selector"), ..ClusterQuery::default() };
        assert_eq!(names(&eu), ["eu-1", "eu-2"]);
        let degraded = ClusterQuery { condition: Some(Condition::Degraded), ..ClusterQuery::default() };
        assert_eq!(names(&degraded), ["eu-1"]);
        let fresh = ClusterQuery { stale: Some(false), ..ClusterQuery::default() };
        assert_eq!(names(&fresh), ["US-2", "lab"]);
        let worst = ClusterQuery { sort: SortBy::Condition, ..ClusterQuery::default() };
        assert_eq!(names(&worst), ["eu-1", "us-1", "eu-2", "lab", "US-2"]);
        let seen = ClusterQuery { sort: SortBy::Seen, ..ClusterQuery::default() };
        assert_eq!(names(&seen), ["US-2", "us-1", "eu-1", "eu-2", "lab"]);
        assert_eq!(SortBy::parse("Failing"), Some(SortBy::Failing));
        assert_eq!(Condition::parse("degraded"), Some(Condition::Degraded));
    }

    #[test]
    fn the_heat_map_counts_each_value_by_condition() {
        let heat = heat_map(&fleet(), "region", Timestamp(600));
        let values: Vec<Option<&str>> = heat.iter().map(|h| h.value.as_deref()).collect();
        assert_eq!(values, [Some("eu"), Some("us"), None], "most degraded first, unlabelled last");
        assert_eq!(heat[0].by_condition, BTreeMap::from([(Condition::Degraded, 1), (Condition::Ready, 1)]));
        assert_eq!((heat[0].clusters, heat[0].stale), (2, 2));
        assert_eq!(heat[1].by_condition, BTreeMap::from([(Condition::Progressing, 1), (Condition::NoKeys, 1)]));
        assert_eq!(heat.iter().map(|h| h.clusters).sum::<u64>(), 5);
    }

    #[test]
    fn values_past_the_cap_are_one_row() {
        let rows: Vec<ClusterRow> = (0..MAX_HEAT_ROWS + 10)
            .map(|i| row(&format!("c{i}"), &[("zone", &format!("z{i:04}"))], (1, 0, 1), Some(1)))
            .collect();
        let heat = heat_map(&rows, "zone", Timestamp(0));
        assert_eq!(heat.len(), MAX_HEAT_ROWS);
        let last = heat.last().expect("a last row");
        assert_eq!((last.value.as_deref(), last.clusters), (Some("(11 other values)"), 11));
    }
}
