//! Failures grouped by cause: a hundred keys that fail for one reason are one line to
//! read and one retry to make, not a hundred.
//!
//! A key's cause is its last error with what differs from key to key taken out
//! ([`cause`]): its own cluster and SyncSet names become `<cluster>` and `<syncset>`,
//! every run of digits `#` (ports, addresses, counts, generations, times), every
//! hexadecimal word of 8 characters or more with a digit in it `#` (digests, ids),
//! whitespace one space (digits right after a letter stay: `v1`, `sha256`). So `cluster-00017: connect 10.0.0.17:6443: connection refused`
//! and `cluster-00042: connect 10.0.0.42:6443: connection refused` share the cause
//! `<cluster>: connect #.#.#.#:#: connection refused`. [`group`] counts the failed and
//! parked keys of each cause, most keys first, with the SyncSets and the first clusters
//! behind it.

use crate::{KeyStatus, Phase};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The longest cause kept, in characters (a longer error is cut, and grouped by its start).
pub const MAX_CAUSE_CHARS: usize = 300;

/// The cause of a key that failed with `error` on `cluster` for `syncset` (see the module docs).
pub fn cause(error: &str, cluster: &str, syncset: &str) -> String {
    let mut text = error.to_string();
    // The longer name first, so that a name that contains the other is taken out whole.
    let mut names = [(cluster, "<cluster>"), (syncset, "<syncset>")];
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, placeholder) in names {
        text = replace_word(&text, name, placeholder);
    }
    let mut out = String::with_capacity(text.len().min(MAX_CAUSE_CHARS));
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if is_hex_id(word) {
            out.push('#');
        } else {
            without_digits(word, &mut out);
        }
        if out.chars().count() >= MAX_CAUSE_CHARS {
            return out.chars().take(MAX_CAUSE_CHARS).collect();
        }
    }
    out
}

/// `text` with each occurrence of `name` that is a whole name (not part of a longer one:
/// no letter, digit, `-` or `_` either side) written as `placeholder`.
fn replace_word(text: &str, name: &str, placeholder: &str) -> String {
    if name.is_empty() {
        return text.to_string();
    }
    let part_of_name = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let (before, after) = (&rest[..at], &rest[at + name.len()..]);
        out.push_str(before);
        let whole = !part_of_name(out.chars().next_back()) && !part_of_name(after.chars().next());
        out.push_str(if whole { placeholder } else { name });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The cause of a failing `key`: [`cause`] of its last error ([`NO_ERROR`] without one).
pub fn cause_of(key: &KeyStatus) -> String {
    cause(key.last_error.as_deref().unwrap_or(NO_ERROR), &key.key.cluster, &key.key.syncset)
}

/// A word that is an id or digest: 8 or more hexadecimal characters, a digit among them
/// (after an optional `sha256:`-style prefix).
fn is_hex_id(word: &str) -> bool {
    let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let word = word.rsplit(':').next().unwrap_or(word);
    word.len() >= 8 && word.chars().all(|c| c.is_ascii_hexdigit()) && word.chars().any(|c| c.is_ascii_digit())
}

/// `word` with each run of digits written as one `#`, unless it follows a letter (`v1`,
/// `sha256`, `ipv4` are names, not numbers).
fn without_digits(word: &str, out: &mut String) {
    let mut prev: Option<char> = None;
    let mut number = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !prev.is_some_and(|p| p.is_ascii_digit()) {
                number = !prev.is_some_and(char::is_alphanumeric);
                if number {
                    out.push('#');
                }
            }
            if !number {
                out.push(c);
            }
        } else {
            out.push(c);
        }
        prev = Some(c);
    }
}

/// The failed and parked keys of one cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureGroup {
    pub cause: String,
    /// Keys with this cause.
    pub keys: u64,
    /// Of them, by phase (`Failed`, `Parked`).
    pub phases: BTreeMap<Phase, u64>,
    /// The SyncSets of those keys (at most [`GROUP_NAMES`]).
    pub syncsets: Vec<String>,
    /// The first clusters of those keys, by name (at most [`GROUP_NAMES`]).
    pub clusters: Vec<String>,
    /// Distinct clusters of those keys.
    pub cluster_count: u64,
    /// One key's whole error, as it was written.
    pub example: String,
}

/// The cause of a failing key without an error text.
pub const NO_ERROR: &str = "(no error recorded)";

/// Names kept per group, of SyncSets and of clusters.
pub const GROUP_NAMES: usize = 20;

/// The failed and parked keys of `keys` grouped by [`cause`], most keys first (then by
/// cause). A failing key without an error text has the cause [`NO_ERROR`].
pub fn group<'a>(keys: impl IntoIterator<Item = &'a KeyStatus>) -> Vec<FailureGroup> {
    struct Acc {
        keys: u64,
        phases: BTreeMap<Phase, u64>,
        syncsets: BTreeSet<String>,
        clusters: BTreeSet<String>,
        example: String,
    }
    let mut by_cause: HashMap<String, Acc> = HashMap::new();
    for key in keys.into_iter().filter(|k| matches!(k.phase, Phase::Failed | Phase::Parked)) {
        let error = key.last_error.as_deref().unwrap_or(NO_ERROR);
        let acc = by_cause.entry(cause_of(key)).or_insert_with(|| Acc {
            keys: 0,
            phases: BTreeMap::new(),
            syncsets: BTreeSet::new(),
            clusters: BTreeSet::new(),
            example: error.to_string(),
        });
        acc.keys += 1;
        *acc.phases.entry(key.phase).or_default() += 1;
        acc.syncsets.insert(key.key.syncset.clone());
        acc.clusters.insert(key.key.cluster.clone());
    }
    let mut groups: Vec<FailureGroup> = by_cause
        .into_iter()
        .map(|(cause, acc)| FailureGroup {
            cause,
            keys: acc.keys,
            phases: acc.phases,
            syncsets: acc.syncsets.into_iter().take(GROUP_NAMES).collect(),
            cluster_count: acc.clusters.len() as u64,
            clusters: acc.clusters.into_iter().take(GROUP_NAMES).collect(),
            example: acc.example,
        })
        .collect();
    groups.sort_by(|a, b| b.keys.cmp(&a.keys).then_with(|| a.cause.cmp(&b.cause)));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::key_status;
    use crate::WorkKey;

    fn failing(cluster: &str, syncset: &str, phase: Phase, error: Option<&str>) -> KeyStatus {
        let mut key = key_status(WorkKey::new("t", cluster, syncset), phase);
        key.last_error = error.map(str::to_string);
        key
    }

    #[test]
    fn names_numbers_and_ids_are_taken_out() {
        let a = cause("cluster-00017: connect 10.0.0.17:6443: connection refused", "cluster-00017", "base");
        let b = cause("cluster-00042: connect 10.0.0.42:6443: connection refused", "cluster-00042", "base");
        assert_eq!(a, "<cluster>: connect #.#.#.#:#: connection refused");
        assert_eq!(a, b);
        assert_eq!(
            cause("ConfigMap apps/base-cm: image sha256:0a1b2c3d4e5f rejected by base", "c1", "base"),
            "ConfigMap apps/base-cm: image # rejected by <syncset>"
        );
        // A word of hex letters only is a word, not an id.
        assert_eq!(cause("deadbeefcafe  is\tfine", "c", "s"), "deadbeefcafe is fine");
        // Digits after a letter are part of a name; after anything else, a number.
        assert_eq!(
            cause("v1/ConfigMap x-12 sha256 ipv4 (os error 111) 3rd", "c", "s"),
            "v1/ConfigMap x-# sha256 ipv4 (os error #) #rd"
        );
        // Only whole names: a cluster named inside the SyncSet's name, or inside a word, stays.
        assert_eq!(cause("eu-base on eu failed (europe)", "eu", "eu-base"), "<syncset> on <cluster> failed (europe)");
        assert_eq!(cause("c.example.com: cs down", "c", "s"), "<cluster>.example.com: cs down");
    }

    #[test]
    fn a_long_error_is_cut_at_the_limit() {
        let long = "x".repeat(MAX_CAUSE_CHARS * 2);
        assert_eq!(cause(&long, "c", "s").chars().count(), MAX_CAUSE_CHARS);
        let words = "word ".repeat(MAX_CAUSE_CHARS);
        assert_eq!(cause(&words, "c", "s").chars().count(), MAX_CAUSE_CHARS);
    }

    #[test]
    fn keys_are_grouped_by_cause_most_first() {
        let mut keys: Vec<KeyStatus> = (0..5)
            .map(|i| {
                let cluster = format!("cluster-{i:05}");
                let error = format!("{cluster}: dial tcp 10.0.0.{i}:443: i/o timeout");
                failing(&cluster, if i % 2 == 0 { "base" } else { "apps" }, Phase::Failed, Some(&error))
            })
            .collect();
        keys[4].phase = Phase::Parked;
        keys.push(failing("cluster-00001", "quotas", Phase::Parked, Some("quota exceeded: 5 of 4 used")));
        keys.push(failing("cluster-00002", "quotas", Phase::Failed, None));
        keys.push(failing("cluster-00003", "fine", Phase::Applied, Some("an old error of an applied key")));

        let groups = group(&keys);
        assert_eq!(groups.len(), 3, "{groups:#?}");
        let first = &groups[0];
        assert_eq!(first.cause, "<cluster>: dial tcp #.#.#.#:#: i/o timeout");
        assert_eq!((first.keys, first.cluster_count), (5, 5));
        assert_eq!(first.phases, BTreeMap::from([(Phase::Failed, 4), (Phase::Parked, 1)]));
        assert_eq!(first.syncsets, ["apps", "base"]);
        assert_eq!(first.clusters[0], "cluster-00000");
        assert_eq!(first.example, "cluster-00000: dial tcp 10.0.0.0:443: i/o timeout");
        // Ties by cause; the applied key is no failure.
        assert_eq!(groups[1].cause, NO_ERROR);
        assert_eq!(groups[2].cause, "quota exceeded: # of # used");
        assert_eq!(groups.iter().map(|g| g.keys).sum::<u64>(), 7);
    }

    #[test]
    fn names_are_bounded_per_group() {
        let keys: Vec<KeyStatus> = (0..GROUP_NAMES + 5)
            .map(|i| failing(&format!("c{i:03}"), &format!("s{i:03}"), Phase::Failed, Some("boom")))
            .collect();
        let groups = group(&keys);
        assert_eq!(groups.len(), 1);
        assert_eq!((groups[0].clusters.len(), groups[0].syncsets.len()), (GROUP_NAMES, GROUP_NAMES));
        assert_eq!(groups[0].cluster_count, (GROUP_NAMES + 5) as u64);
    }
}
