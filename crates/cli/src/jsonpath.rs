//! `get -o jsonpath=TEMPLATE` and `-o custom-columns=SPEC`, as kubectl writes them,
//! over the JSON `-o json` prints (a list as a `kind: List`). The paths are kubectl's
//! (`.items[*].metadata.name`), evaluated as RFC 9535 JSONPath by jsonpath-rust with a
//! `$` in front.
//!
//! A template is text with `{PATH}` (each value the path finds, space-separated; a
//! string bare, anything else as JSON) and `{"LITERAL"}` (a JSON string, e.g. `{"\n"}`).
//! kubectl's `{range}`/`{end}` are not supported: `{.items[*].metadata.name}` gives
//! every name, and custom columns give a row per item.

use anyhow::{anyhow, bail, Result};
use jsonpath_rust::JsonPath;
use serde_json::Value;

/// The most pieces a template may have, and a custom-columns spec columns.
const MAX_PIECES: usize = 64;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// A path, already `$`-prefixed.
    Path(String),
}

/// Parses a kubectl JSONPath template.
pub fn template(text: &str) -> Result<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if pieces.len() >= MAX_PIECES {
            bail!("the template has more than {MAX_PIECES} pieces");
        }
        let Some(open) = rest.find('{') else {
            pieces.push(Piece::Text(rest.to_string()));
            break;
        };
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let close = closing(&rest[open..]).map(|c| open + c).ok_or_else(|| anyhow!("unclosed {{ in {text:?}"))?;
        let inner = rest[open + 1..close].trim();
        pieces.push(if inner.starts_with('"') {
            Piece::Text(
                serde_json::from_str(inner).map_err(|e| anyhow!("the literal {inner} is not a JSON string: {e}"))?,
            )
        } else {
            Piece::Path(path(inner)?)
        });
        rest = &rest[close + 1..];
    }
    Ok(pieces)
}

/// Where the `}` closing the `{` that `piece` starts with is: the first one outside a
/// JSON string literal (so `{"}"}` is a literal `}`).
fn closing(piece: &str) -> Option<usize> {
    let (mut in_string, mut escaped) = (false, false);
    for (i, c) in piece.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '}' if !in_string => return Some(i),
            _ => {}
        }
    }
    None
}

/// A kubectl path (`.metadata.name`, `{.items[0]}`) as JSONPath (`$.metadata.name`).
fn path(p: &str) -> Result<String> {
    let p = p.trim().trim_start_matches('{').trim_end_matches('}').trim();
    match p {
        "" => bail!("an empty path"),
        "range" | "end" => bail!("{{{p}}} is not supported: a path with [*] gives every item"),
        _ if p.starts_with("range ") => bail!("{{range}} is not supported: a path with [*] gives every item"),
        _ if p.starts_with('$') => Ok(p.to_string()),
        _ if p.starts_with('.') || p.starts_with('[') => Ok(format!("${p}")),
        _ => Ok(format!("$.{p}")),
    }
}

/// What `path` finds in `value`, each as text: a string bare, anything else as JSON.
fn found(value: &Value, path: &str) -> Result<Vec<String>> {
    let values = value.query(path).map_err(|e| anyhow!("the path {path}: {e}"))?;
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect())
}

/// The template filled from `value`.
pub fn render(pieces: &[Piece], value: &Value) -> Result<String> {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Path(p) => out.push_str(&found(value, p)?.join(" ")),
        }
    }
    Ok(out)
}

/// A custom-columns spec, `HEADER:PATH,…`, as (header, JSONPath) pairs.
pub fn columns(spec: &str) -> Result<Vec<(String, String)>> {
    let columns: Vec<(String, String)> = spec
        .split(',')
        .map(|c| {
            let (header, p) = c.split_once(':').ok_or_else(|| anyhow!("the column {c:?} is not HEADER:PATH"))?;
            Ok((header.trim().to_string(), path(p)?))
        })
        .collect::<Result<_>>()?;
    if columns.is_empty() || columns.len() > MAX_PIECES {
        bail!("custom-columns takes 1 to {MAX_PIECES} columns");
    }
    Ok(columns)
}

/// The rows of a custom-columns table: one per item of a `kind: List`, else one for the
/// object; a path that finds nothing is `<none>`, several values are comma-separated.
pub fn rows(columns: &[(String, String)], value: &Value) -> Result<Vec<Vec<String>>> {
    let items = match (value["kind"].as_str(), value["items"].as_array()) {
        (Some("List"), Some(items)) => items.iter().collect(),
        _ => vec![value],
    };
    items
        .into_iter()
        .map(|item| {
            columns
                .iter()
                .map(|(_, p)| {
                    let found = found(item, p)?;
                    Ok(if found.is_empty() { "<none>".to_string() } else { found.join(",") })
                })
                .collect()
        })
        .collect()
}

/// Sorts `items` by the first value `path` (kubectl's, e.g. `.metadata.generation`)
/// finds in each: numbers by value, then strings, items where it finds nothing first;
/// the order is kept among equals.
pub fn sort_by<T: serde::Serialize>(items: &mut Vec<T>, path_text: &str) -> Result<()> {
    let p = path(path_text)?;
    let mut keyed = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        let value = serde_json::to_value(&item)?;
        let first = value.query(&p).map_err(|e| anyhow!("the path {p}: {e}"))?.first().map(|v| (*v).clone());
        keyed.push((SortKey::of(first), item));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    items.extend(keyed.into_iter().map(|(_, item)| item));
    Ok(())
}

/// A value as `--sort-by` orders it.
#[derive(Debug, PartialEq, PartialOrd)]
enum SortKey {
    Missing,
    Number(f64),
    Text(String),
}

impl SortKey {
    fn of(v: Option<Value>) -> Self {
        match v {
            None | Some(Value::Null) => SortKey::Missing,
            Some(Value::Number(n)) => SortKey::Number(n.as_f64().unwrap_or(0.0)),
            Some(Value::String(s)) => SortKey::Text(s),
            Some(other) => SortKey::Text(other.to_string()),
        }
    }

    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.partial_cmp(other).unwrap_or(std::cmp::Ordering::Equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list() -> Value {
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"kind": "Cluster", "metadata": {"name": "eu-1", "generation": 2, "labels": {"env": "prod"}}},
            {"kind": "Cluster", "metadata": {"name": "us-1", "generation": 1}},
        ]})
    }

    #[test]
    fn templates_are_read_as_kubectl_writes_them() {
        let names = template("{.items[*].metadata.name}").expect("parse");
        assert_eq!(render(&names, &list()).expect("render"), "eu-1 us-1");
        let lines = template(r#"first: {.items[0].metadata.name}{"\n"}"#).expect("parse");
        assert_eq!(render(&lines, &list()).expect("render"), "first: eu-1\n");
        assert_eq!(render(&template("{.items[0].metadata.generation}").expect("p"), &list()).expect("r"), "2");
        assert_eq!(render(&template("{.nothing}").expect("p"), &list()).expect("r"), "", "no match: nothing");
        let braces = template(r#"{"{"}{.items[0].metadata.name}{"}"}"#).expect("parse");
        assert_eq!(render(&braces, &list()).expect("render"), "{eu-1}");
        for bad in ["{.items", "{range .items[*]}{.metadata.name}{end}", "{}"] {
            assert!(template(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn custom_columns_give_a_row_per_item() {
        let cols = columns("NAME:.metadata.name,GEN:.metadata.generation,ENV:.metadata.labels.env").expect("spec");
        assert_eq!(cols[0], ("NAME".to_string(), "$.metadata.name".to_string()));
        let rows = rows(&cols, &list()).expect("rows");
        assert_eq!(rows, [vec!["eu-1", "2", "prod"], vec!["us-1", "1", "<none>"]]);
        let one = rows_of_one(&cols);
        assert_eq!(one, [vec!["eu-1", "2", "prod"]]);
        assert!(columns("NAME").is_err() && columns("").is_err());
    }

    #[test]
    fn sort_by_orders_numbers_by_value_and_keeps_equals_in_order() {
        let mut items =
            vec![json!({"n": "a", "g": 10}), json!({"n": "b", "g": 9}), json!({"n": "c"}), json!({"n": "d", "g": 10})];
        sort_by(&mut items, ".g").expect("sort");
        let names: Vec<&str> = items.iter().filter_map(|i| i["n"].as_str()).collect();
        assert_eq!(names, ["c", "b", "a", "d"], "missing first, 9 before 10, a before d as given");
        sort_by(&mut items, "{.n}").expect("sort");
        assert_eq!(items[0]["n"], "a");
        assert!(sort_by(&mut items, "{range}").is_err());
    }

    fn rows_of_one(cols: &[(String, String)]) -> Vec<Vec<String>> {
        rows(cols, &list()["items"][0]).expect("rows")
    }
}
