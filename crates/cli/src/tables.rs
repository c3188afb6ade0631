//! The tables of `get`: which columns each resource shows, with `-o wide` adding more
//! and `-A` a TENANT column first (as kubectl adds NAMESPACE).

use crate::args::Resource;
use crate::details::Details;
use crate::output::{age, clip, table_of, text, text_of};
use fleetsync_api::{Event, Member};
use fleetsync_model::KeyStatus;
use serde_json::Value;

/// Which columns a table shows beyond the usual ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct Columns {
    /// `-o wide`.
    pub wide: bool,
    /// `-A`: the tenant of each row, first.
    pub tenant: bool,
    /// `--no-headers`: the rows alone.
    pub no_headers: bool,
    /// `--show-labels`: a LABELS column for objects other than clusters (which always
    /// show theirs).
    pub show_labels: bool,
}

/// Prints rows, each with its tenant, under `headers`; the TENANT column only if asked.
fn print(cols: Columns, headers: &[&str], rows: Vec<(String, Vec<String>)>) -> std::io::Result<()> {
    let (headers, rows): (Vec<&str>, Vec<Vec<String>>) = match cols.tenant {
        false => (headers.to_vec(), rows.into_iter().map(|(_, r)| r).collect()),
        true => (
            std::iter::once("TENANT").chain(headers.iter().copied()).collect(),
            rows.into_iter().map(|(t, r)| std::iter::once(t).chain(r).collect()).collect(),
        ),
    };
    table_of(&headers, &rows, !cols.no_headers)
}

/// Objects as users write them (JSON documents), one row each, with what `details`
/// read beside them: a SyncSet's progress, a cluster's reachability (`-o wide`).
pub fn objects(resource: Resource, items: &[Value], cols: Columns, details: &Details) -> std::io::Result<()> {
    // Clusters show their labels always; the others with --show-labels, last.
    let labelled = cols.show_labels && !matches!(resource, Resource::Clusters);
    let row = |o: &Value, mut cells: Vec<String>| {
        if labelled {
            cells.push(labels_of(o));
        }
        (text(&o["metadata"]["namespace"]), cells)
    };
    let print = |headers: &[&str], rows| {
        let headers: Vec<&str> = headers.iter().copied().chain(labelled.then_some("LABELS")).collect();
        print(cols, &headers, rows)
    };
    let name_gen = |o: &Value| vec![text(&o["metadata"]["name"]), text(&o["metadata"]["generation"])];
    match resource {
        Resource::Clusters => {
            let rows = items.iter().map(|c| {
                let endpoint = c["spec"]["endpoint"].as_object().and_then(|o| o.iter().next());
                let ep = endpoint.map(|(k, _)| k.clone()).unwrap_or_default();
                let mut cells = name_gen(c);
                cells.extend([ep, labels_of(c)]);
                if cols.wide {
                    // Where it points: the URL, or the Secret holding the kubeconfig.
                    let target = endpoint.and_then(|(_, v)| v.get("url").or_else(|| v.get("secretRef")));
                    cells.push(target.map_or("-".into(), text));
                    // `-`: no key failed to reach it; `describe cluster` says why it is not.
                    let at = (text(&c["metadata"]["namespace"]), text(&c["metadata"]["name"]));
                    let unreachable = details
                        .unreachable
                        .get(&at)
                        .and_then(|r| r.since.as_ref())
                        .map(|since| format!("No (for {})", age(since)));
                    cells.push(unreachable.unwrap_or_else(|| "-".into()));
                }
                row(c, cells)
            });
            let headers: &[&str] = if cols.wide {
                &["NAME", "GENERATION", "ENDPOINT", "LABELS", "TARGET", "REACHABLE"]
            } else {
                &["NAME", "GENERATION", "ENDPOINT", "LABELS"]
            };
            print(headers, rows.collect())
        }
        Resource::Syncsets => {
            let rows = items.iter().enumerate().map(|(i, s)| {
                let resources = s["spec"]["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
                let mode = s["spec"].get("resourceApplyMode").map_or("Upsert".into(), text);
                let p = details.progress.get(i).and_then(Option::as_ref);
                let mut cells = name_gen(s);
                // Resources read from a source: where, and at which revision.
                let count = match s["spec"].get("sourceRef") {
                    Some(r) => format!("{}@{}", text(&r["name"]), short(&s["status"]["sourceRevision"])),
                    None => resources.len().to_string(),
                };
                cells.extend([mode, count]);
                cells.extend(match p {
                    Some(p) => [p.clusters.to_string(), format!("{}/{}", p.applied, p.clusters), p.reason.to_string()],
                    None => ["-".into(), "-".into(), "-".into()],
                });
                if cols.wide {
                    cells.extend([targets(&s["spec"]), kinds(resources), p.map_or("-".into(), |p| p.message.clone())]);
                }
                row(s, cells)
            });
            let headers: &[&str] = if cols.wide {
                &[
                    "NAME",
                    "GENERATION",
                    "MODE",
                    "RESOURCES",
                    "CLUSTERS",
                    "APPLIED",
                    "STATUS",
                    "TARGETS",
                    "KINDS",
                    "MESSAGE",
                ]
            } else {
                &["NAME", "GENERATION", "MODE", "RESOURCES", "CLUSTERS", "APPLIED", "STATUS"]
            };
            print(headers, rows.collect())
        }
        Resource::GitRepositories | Resource::OciRepositories | Resource::Sources => {
            let both = matches!(resource, Resource::Sources);
            let rows = items.iter().map(|g| {
                let reference = g["spec"]["ref"].as_object().and_then(|r| r.iter().next());
                let mut cells = name_gen(g);
                if both {
                    cells.insert(1, text(&g["kind"]));
                }
                cells.extend([
                    text(&g["spec"]["url"]),
                    reference.map_or("-".into(), |(k, v)| format!("{k}:{}", text(v))),
                    text(&g["status"]["revision"]),
                    text(&g["status"]["fetchedAt"]),
                ]);
                row(g, cells)
            });
            let headers: &[&str] = match both {
                true => &["NAME", "KIND", "GENERATION", "URL", "REF", "REVISION", "FETCHED"],
                false => &["NAME", "GENERATION", "URL", "REF", "REVISION", "FETCHED"],
            };
            print(headers, rows.collect())
        }
        Resource::Notifiers => {
            let rows = items.iter().map(|n| {
                let spec = &n["spec"];
                let parsed = serde_json::from_value::<fleetsync_model::NotifierSpec>(spec.clone());
                let target = parsed.map_or_else(|_| "-".into(), |s| s.target());
                let mut cells = name_gen(n);
                cells.extend([target, notifier_filters(&spec["filters"])]);
                row(n, cells)
            });
            print(&["NAME", "GENERATION", "TARGET", "FILTERS"], rows.collect())
        }
        _ => {
            let rows = items.iter().map(|s| {
                let keys = s["stringData"].as_object().map(|d| d.keys().cloned().collect::<Vec<_>>().join(","));
                let mut cells = name_gen(s);
                cells.push(keys.unwrap_or_default());
                row(s, cells)
            });
            print(&["NAME", "GENERATION", "KEYS"], rows.collect())
        }
    }
}

/// A notifier's filters in short: `kinds=Status,SyncSet syncSets=web severity=error`,
/// `-` for none (every event).
pub(crate) fn notifier_filters(filters: &Value) -> String {
    let list = |v: &Value| v.as_array().map(|a| a.iter().map(text).collect::<Vec<_>>().join(","));
    let mut parts = Vec::new();
    for (key, value) in [("kinds", list(&filters["kinds"])), ("syncSets", list(&filters["syncSets"]))] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            parts.push(format!("{key}={v}"));
        }
    }
    if let Some(s) = filters["severity"].as_str() {
        parts.push(format!("severity={s}"));
    }
    if parts.is_empty() {
        return "-".into();
    }
    parts.join(" ")
}

/// An object's labels as `k=v,…` (empty when it has none).
fn labels_of(o: &Value) -> String {
    let labels = o["metadata"]["labels"].as_object();
    labels.map(|l| l.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(",")).unwrap_or_default()
}

/// A revision as people read it: a commit id's first 12 digits, `-` while there is none.
fn short(revision: &Value) -> String {
    text(revision).chars().take(12).collect()
}

/// Which clusters a SyncSet spec targets: its names, its selector, or both.
fn targets(spec: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(names) = spec["clusterNames"].as_array() {
        parts.push(names.iter().map(text).collect::<Vec<_>>().join(","));
    }
    if let Some(sel) = spec.get("clusterSelector").filter(|s| !s.is_null()) {
        let labels = sel["matchLabels"]
            .as_object()
            .map(|l| l.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>());
        let exprs = sel["matchExpressions"].as_array().map_or(0, Vec::len);
        let mut s = labels.unwrap_or_default().join(",");
        if exprs > 0 {
            s = format!("{s}{}+{exprs} expression(s)", if s.is_empty() { "" } else { "," });
        }
        parts.push(format!("selector({s})"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// The distinct kinds of a SyncSet's resources, in first-seen order.
fn kinds(resources: &[Value]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for kind in resources.iter().map(|r| text(&r["kind"])) {
        if !seen.contains(&kind) {
            seen.push(kind);
        }
    }
    if seen.is_empty() {
        "-".into()
    } else {
        seen.join(",")
    }
}

pub fn status(items: &[KeyStatus], cols: Columns) -> std::io::Result<()> {
    let rows = items.iter().map(|k| {
        let error = k.last_error.clone().unwrap_or_else(|| "-".into());
        let mut cells = vec![
            k.key.cluster.clone(),
            k.key.syncset.clone(),
            k.phase.as_str().to_string(),
            k.generation.to_string(),
            k.observed_generation.to_string(),
            k.attempts.to_string(),
            k.drift.len().to_string(),
        ];
        if cols.wide {
            let when = |t: &Option<fleetsync_model::Timestamp>| t.as_ref().map_or("-".into(), age);
            let rendered = k.rendered_hash.clone().unwrap_or_else(|| "-".into());
            cells.extend([when(&k.last_applied_at), when(&k.next_attempt_at), rendered, error]);
        } else {
            cells.push(clip(error, 60));
        }
        (k.key.tenant.clone(), cells)
    });
    let headers: &[&str] = if cols.wide {
        &[
            "CLUSTER",
            "SYNCSET",
            "PHASE",
            "GENERATION",
            "OBSERVED",
            "ATTEMPTS",
            "DRIFT",
            "LAST APPLIED",
            "NEXT ATTEMPT",
            "RENDERED",
            "LAST ERROR",
        ]
    } else {
        &["CLUSTER", "SYNCSET", "PHASE", "GENERATION", "OBSERVED", "ATTEMPTS", "DRIFT", "LAST ERROR"]
    };
    print(cols, headers, rows.collect())
}

pub fn members(items: &[Member], cols: Columns) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|m| {
            let w = &m.member;
            let limit = if w.max_in_flight == 0 { "-".to_string() } else { w.max_in_flight.to_string() };
            vec![
                w.id.clone(),
                m.shards.to_string(),
                w.in_flight.to_string(),
                limit,
                age(&w.heartbeat_at),
                age(&w.started_at),
            ]
        })
        .collect();
    table_of(&["MEMBER", "SHARDS", "IN-FLIGHT", "LIMIT", "HEARTBEAT", "STARTED"], &rows, !cols.no_headers)
}

pub fn events(items: &[Event], cols: Columns) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = items.iter().map(event_cells).collect();
    table_of(&EVENT_COLUMNS.map(|(h, _)| h), &rows, !cols.no_headers)
}

/// An event's cells, in the order of [`EVENT_COLUMNS`].
pub fn event_cells(e: &Event) -> Vec<String> {
    let at = text_of(&e.at);
    let actor = e.actor.clone().unwrap_or_else(|| "-".into());
    vec![
        e.seq.to_string(),
        at,
        e.tenant.clone(),
        e.kind.clone(),
        e.name.clone(),
        e.action.clone(),
        e.generation.to_string(),
        actor,
    ]
}

/// Columns of the event table, and the width each is padded to when streaming (rows
/// are printed as they come, so widths cannot be measured first).
pub const EVENT_COLUMNS: [(&str, usize); 8] = [
    ("SEQ", 8),
    ("AT", 24),
    ("TENANT", 10),
    ("KIND", 8),
    ("NAME", 28),
    ("ACTION", 9),
    ("GENERATION", 10),
    ("ACTOR", 0),
];
