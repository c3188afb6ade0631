//! Hostile inputs found against `POST /v1/apply`, shared by the regression tests,
//! the memory test and the fuzzer (which starts from them).

#![allow(dead_code)]

/// A valid SyncSet whose one manifest's `data` is a mapping nested `levels` deep, so
/// that its deepest mapping is at level `4 + levels` of the document.
pub fn deep_syncset(levels: usize) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: deep}}\nspec:\n  clusterNames: [a]\n  resources:\n  - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}, data: {}x{}}}\n",
        "{a: ".repeat(levels),
        "}".repeat(levels)
    )
}

/// One anchor of `anchor_bytes` bytes, used `uses` times: small to send, huge expanded.
pub fn alias_bomb(anchor_bytes: usize, uses: usize) -> String {
    let mut s = String::with_capacity(anchor_bytes + uses * 4 + 32);
    s.push_str("x: &x \"");
    s.push_str(&"A".repeat(anchor_bytes));
    s.push_str("\"\ny: [");
    for i in 0..uses {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str("*x");
    }
    s.push_str("]\n");
    s
}

/// Nested anchors, each a list of ten uses of the one before ("billion laughs").
pub fn laughs(levels: usize) -> String {
    let mut s = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..=levels {
        let p = i - 1;
        s.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    s
}

/// `open` repeated `n` times, never closed.
pub fn nesting(open: &str, n: usize) -> String {
    open.repeat(n)
}

pub const CLUSTER: &str =
    "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c1}\nspec: {endpoint: {simulator: {}}}\n";

/// The same Cluster twice, with another between.
pub fn duplicate_documents() -> String {
    format!("{CLUSTER}---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c2}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n{CLUSTER}")
}

/// A SyncSet with `value` as a ConfigMap's `data.k`.
pub fn syncset_with_value(value: &str) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s}}\nspec:\n  clusterNames: [a]\n  resources:\n  - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}, data: {{k: {value}}}}}\n"
    )
}

/// Every hostile input, at a size the fuzzer can mutate quickly, by name.
pub fn small_hostile_seeds() -> Vec<(&'static str, String)> {
    vec![
        ("alias bomb", alias_bomb(64 * 1024, 1000)),
        ("laughs", laughs(9)),
        ("map nesting", nesting("{a: ", 2_000)),
        ("seq nesting", nesting("[", 2_000)),
        ("json nesting", nesting("{\"a\":", 2_000)),
        ("deep at the limit", deep_syncset(60)),
        ("deep past the limit", deep_syncset(61)),
        ("duplicate documents", duplicate_documents()),
        ("nan", syncset_with_value(".nan")),
        ("inf", syncset_with_value(".inf")),
        ("minus inf", syncset_with_value("-.inf")),
        ("bom", format!("\u{feff}{CLUSTER}")),
    ]
}
