//! Printing: aligned tables for people, JSON or YAML for scripts.

use crate::args::Format;
use anyhow::Result;
use serde_json::Value;

/// Prints rows under headers, columns padded to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Prints a value as JSON or YAML; returns false for `table` (the caller prints one).
pub fn structured(format: Format, value: &impl serde::Serialize) -> Result<bool> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml => print!("{}", serde_saphyr::to_string(value)?),
        Format::Table => return Ok(false),
    }
    Ok(true)
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
    use fleetsync_model::parse_documents;

    #[test]
    fn yaml_output_applies_again() {
        let text = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s, labels: {env: prod}}\nspec:\n  clusterNames: [a]\n  resources:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: x}, data: {n: \"42\", t: \"yes\", e: \"\", m: \"a: b\\nc\"}}\n";
        let docs = parse_documents(text).expect("valid");
        let shown = serde_saphyr::to_string(&docs[0].to_value()).expect("YAML");
        assert_eq!(parse_documents(&shown).expect("the printed YAML parses"), docs, "{shown}");
    }
}
