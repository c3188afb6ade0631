//! Printing: aligned tables for people, JSON or YAML for scripts.

use crate::args::{Format, Output};
use anyhow::Result;
use serde_json::Value;
use std::io::Write;

/// Writes a line to standard output. Unlike `println!`, a failure (standard output
/// closed, e.g. piped into `head`) is returned rather than a panic: the command stops
/// and exits quietly ([`is_closed_pipe`]).
pub fn write_line(line: std::fmt::Arguments) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(line)?;
    out.write_all(b"\n")
}

/// `println!` that returns the error of a closed standard output ([`write_line`]).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write_line(format_args!($($arg)*)) };
}

/// Whether an error is that of writing to a closed pipe: the reader has gone and wants
/// no more, so the command ends quietly.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Prints rows under headers, columns padded to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    table_of(headers, rows, true)
}

/// [`table`], with its header line or without (`--no-headers`; the columns are as wide
/// as with it).
pub fn table_of(headers: &[&str], rows: &[Vec<String>], header_line: bool) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        outln!("{}", padded.join("  ").trim_end())
    };
    if header_line {
        line(headers.to_vec())?;
    }
    for row in rows {
        line(row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

/// Prints a value as JSON or YAML; returns false for `table` (the caller prints one).
pub fn structured(format: Format, value: &impl serde::Serialize) -> Result<bool> {
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(value)?)?,
        Format::Yaml => std::io::stdout().lock().write_all(serde_saphyr::to_string(value)?.as_bytes())?,
        Format::Table | Format::Wide => return Ok(false),
        Format::Name => anyhow::bail!(NAME_LISTS_OBJECTS_ONLY),
    }
    Ok(true)
}

/// Prints a value as `-o` of `get` says: a format ([`structured`]), or a template over
/// its JSON ([`crate::jsonpath`]; custom columns with their header line unless
/// `header_line` is false); returns false for `table` and `wide`.
pub fn emit(output: &Output, value: &impl serde::Serialize, header_line: bool) -> Result<bool> {
    match output {
        Output::Format(format) => structured(*format, value),
        Output::JsonPath(template) => {
            let text = crate::jsonpath::render(&crate::jsonpath::template(template)?, &serde_json::to_value(value)?)?;
            std::io::stdout().lock().write_all(text.as_bytes())?;
            Ok(true)
        }
        Output::CustomColumns(spec) => {
            let columns = crate::jsonpath::columns(spec)?;
            let rows = crate::jsonpath::rows(&columns, &serde_json::to_value(value)?)?;
            let headers: Vec<&str> = columns.iter().map(|(h, _)| h.as_str()).collect();
            table_of(&headers, &rows, header_line)?;
            Ok(true)
        }
    }
}

/// [`emit`] of a list, as a `kind: List`.
pub fn emit_list<T: serde::Serialize>(output: &Output, items: &[T], header_line: bool) -> Result<bool> {
    emit(output, &List { api_version: "v1", kind: "List", items }, header_line)
}

/// A list as kubectl prints one (`apiVersion: v1`, `kind: List`, `items`), which
/// `apply -f` takes back.
#[derive(serde::Serialize)]
pub struct List<'a, T> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    items: &'a [T],
}

/// Prints a list as a `kind: List` in JSON or YAML; returns false for the tables.
pub fn structured_list<T: serde::Serialize>(format: Format, items: &[T]) -> Result<bool> {
    structured(format, &List { api_version: "v1", kind: "List", items })
}

/// What `-o name` says where there are no objects to name.
pub const NAME_LISTS_OBJECTS_ONLY: &str =
    "-o name lists objects only (`get clusters|syncsets|secrets|sources|gitrepositories|ocirepositories|notifiers`)";

/// Prints objects as `kind/name`, one per line (`-o name`), as `apply` names them.
pub fn names(objects: &[Value]) -> std::io::Result<()> {
    for object in objects {
        let kind = text(&object["kind"]).to_ascii_lowercase();
        outln!("{kind}/{}", text(&object["metadata"]["name"]))?;
    }
    Ok(())
}

/// A JSON field as display text: strings bare, missing as `-`.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value as display text, as its JSON shows it (e.g. a timestamp in RFC 3339).
pub fn text_of(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v).map_or_else(|_| "-".into(), |v| text(&v))
}

/// How long ago `t` was, as kubectl writes an AGE (`45s`, `3m4s`, `5h`, `3d4h`);
/// `in …` for a time still to come. Tables show times this way; `-o json|yaml` keep
/// the timestamps.
pub fn age(t: &fleetsync_model::Timestamp) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let now = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
    match now - t.millis() {
        ms if ms < 0 => format!("in {}", human(std::time::Duration::from_millis(ms.unsigned_abs()))),
        ms => human(std::time::Duration::from_millis(ms.unsigned_abs())),
    }
}

/// A duration as kubectl's `HumanDuration` writes it: the two largest units while they
/// are few, one unit after.
pub fn human(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let (m, h, days) = (s / 60, s / 3600, s / 86_400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => match s % 60 {
            0 => format!("{m}m"),
            rest => format!("{m}m{rest}s"),
        },
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => match m % 60 {
            0 => format!("{h}h"),
            rest => format!("{h}h{rest}m"),
        },
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 => match h % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        },
        _ if days < 730 => format!("{days}d"),
        _ => match days % 365 {
            0 => format!("{}y", days / 365),
            rest => format!("{}y{rest}d", days / 365),
        },
    }
}

/// Shortens long cells (errors) so tables stay readable; `-o json` has the full text.
pub fn clip(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::human;
    use fleetsync_model::parse_documents;
    use std::time::Duration;

    #[test]
    fn durations_read_as_kubectl_writes_ages() {
        let h = |s: u64| human(Duration::from_secs(s));
        assert_eq!([h(0), h(45), h(119), h(120), h(184), h(600)], ["0s", "45s", "119s", "2m", "3m4s", "10m"]);
        assert_eq!([h(3 * 3600 + 60), h(5 * 3600 + 120), h(30 * 3600)], ["3h1m", "5h2m", "30h"]);
        assert_eq!([h(3 * 86_400 + 4 * 3600), h(45 * 86_400), h(800 * 86_400)], ["3d4h", "45d", "2y70d"]);
    }

    #[test]
    fn yaml_output_applies_again() {
        let text = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s, labels: {env: prod}}\nspec:\n  clusterNames: [a]\n  resources:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: x}, data: {n: \"42\", t: \"yes\", e: \"\", m: \"a: b\\nc\"}}\n";
        let docs = parse_documents(text).expect("valid");
        let shown = serde_saphyr::to_string(&docs[0].to_value()).expect("YAML");
        assert_eq!(parse_documents(&shown).expect("the printed YAML parses"), docs, "{shown}");
    }
}
