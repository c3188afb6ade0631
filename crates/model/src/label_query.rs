//! Label selectors in kubectl's string syntax (`?labelSelector=`, `-l`):
//! `env=prod,tier in (a,b),!canary`.
//!
//! Terms are joined by commas and must all hold. A term is `key`, `!key`, `key=value`
//! (or `==`), `key!=value`, `key in (v1,v2)` or `key notin (v1,v2)`, with Kubernetes'
//! meaning: `!=` and `notin` also match objects without the label. Keys and values
//! follow Kubernetes' label syntax. The empty selector matches everything.
//!
//! kube's `Selector` has the same terms but does not parse this syntax, so the parser
//! is here; the terms mirror its `Expression`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The longest selector accepted (query strings are small; this bounds parsing).
pub const MAX_SELECTOR_LEN: usize = 4096;

/// One term of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelTerm {
    Equal(String, String),
    NotEqual(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl LabelTerm {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            LabelTerm::Equal(k, v) => labels.get(k) == Some(v),
            LabelTerm::NotEqual(k, v) => labels.get(k) != Some(v),
            LabelTerm::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            LabelTerm::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            LabelTerm::Exists(k) => labels.contains_key(k),
            LabelTerm::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed selector: every term must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelQuery {
    pub terms: Vec<LabelTerm>,
}

/// Why a selector does not parse; the message names the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LabelQueryError(String);

impl LabelQuery {
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|t| t.matches(labels))
    }

    /// Parses kubectl's syntax (see the module docs).
    pub fn parse(text: &str) -> Result<Self, LabelQueryError> {
        if text.len() > MAX_SELECTOR_LEN {
            return Err(LabelQueryError(format!("longer than {MAX_SELECTOR_LEN} bytes")));
        }
        let mut terms = Vec::new();
        for part in split_terms(text)? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(LabelQueryError("empty term (two commas in a row, or a comma at an end)".into()));
            }
            terms.push(term(part)?);
        }
        Ok(LabelQuery { terms })
    }
}

impl fmt::Display for LabelQuery {
    /// The canonical text: equal selectors print the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |vs: &BTreeSet<String>| vs.iter().cloned().collect::<Vec<_>>().join(",");
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match t {
                LabelTerm::Equal(k, v) => write!(f, "{k}={v}")?,
                LabelTerm::NotEqual(k, v) => write!(f, "{k}!={v}")?,
                LabelTerm::In(k, vs) => write!(f, "{k} in ({})", set(vs))?,
                LabelTerm::NotIn(k, vs) => write!(f, "{k} notin ({})", set(vs))?,
                LabelTerm::Exists(k) => f.write_str(k)?,
                LabelTerm::DoesNotExist(k) => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

/// Splits at the commas outside parentheses.
fn split_terms(text: &str) -> Result<Vec<&str>, LabelQueryError> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err(LabelQueryError("nested parentheses".into())),
            ')' if depth == 1 => depth = 0,
            ')' => return Err(LabelQueryError("unbalanced `)`".into())),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(LabelQueryError("unbalanced `(`".into()));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn term(part: &str) -> Result<LabelTerm, LabelQueryError> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(LabelTerm::DoesNotExist(key_of(key.trim(), part)?));
    }
    for (op, not) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let (key, value) = (key_of(k.trim(), part)?, value_of(v.trim(), part)?);
            return Ok(if not { LabelTerm::NotEqual(key, value) } else { LabelTerm::Equal(key, value) });
        }
    }
    if let Some(open) = part.find('(') {
        let head = part[..open].trim_end();
        let (key, op) = head
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| bad(part, "expected `key in (...)` or `key notin (...)`"))?;
        let body = part[open + 1..].strip_suffix(')').ok_or_else(|| bad(part, "text after `)`"))?;
        let values = body.split(',').map(|v| value_of(v.trim(), part)).collect::<Result<BTreeSet<_>, _>>()?;
        let key = key_of(key.trim(), part)?;
        return match op {
            "in" => Ok(LabelTerm::In(key, values)),
            "notin" => Ok(LabelTerm::NotIn(key, values)),
            other => Err(bad(part, &format!("unknown operator `{other}` (in, notin)"))),
        };
    }
    if part.contains(char::is_whitespace) || part.contains(['<', '>']) {
        return Err(bad(part, "expected key, !key, key=value, key!=value, key in (...) or key notin (...)"));
    }
    Ok(LabelTerm::Exists(key_of(part, part)?))
}

fn bad(part: &str, why: &str) -> LabelQueryError {
    LabelQueryError(format!("term `{part}`: {why}"))
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain, the name a label value
/// that is not empty.
fn key_of(key: &str, part: &str) -> Result<String, LabelQueryError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(bad(part, &format!("key prefix `{p}` is not a DNS subdomain")));
        }
    }
    if name.is_empty() {
        return Err(bad(part, "empty key"));
    }
    value_of(name, part).map_err(|_| {
        bad(part, &format!("key `{key}` is not a label key (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)"))
    })?;
    Ok(key.to_string())
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn value_of(value: &str, part: &str) -> Result<String, LabelQueryError> {
    let body_ok = value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let ends_ok = value.is_empty()
        || (value.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && value.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric()));
    if value.len() > 63 || !body_ok || !ends_ok {
        return Err(bad(
            part,
            &format!("value `{value}` is not a label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)"),
        ));
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn set(vs: &[&str]) -> BTreeSet<String> {
        vs.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn parses_every_kind_of_term() {
        let q = LabelQuery::parse(
            " env=prod , tier in (a, b),!canary,zone notin (x),team==x,stage!=dev,example.com/owned ",
        )
        .expect("parses");
        assert_eq!(
            q.terms,
            vec![
                LabelTerm::Equal("env".into(), "prod".into()),
                LabelTerm::In("tier".into(), set(&["a", "b"])),
                LabelTerm::DoesNotExist("canary".into()),
                LabelTerm::NotIn("zone".into(), set(&["x"])),
                LabelTerm::Equal("team".into(), "x".into()),
                LabelTerm::NotEqual("stage".into(), "dev".into()),
                LabelTerm::Exists("example.com/owned".into()),
            ]
        );
        assert_eq!(q.to_string(), "env=prod,tier in (a,b),!canary,zone notin (x),team=x,stage!=dev,example.com/owned");
        assert_eq!(LabelQuery::parse(&q.to_string()), Ok(q));
    }

    #[test]
    fn empty_matches_everything() {
        for text in ["", "  "] {
            let q = LabelQuery::parse(text).expect("empty");
            assert!(q.is_empty());
            assert!(q.matches(&labels(&[("a", "b")])));
        }
    }

    #[test]
    fn kubernetes_semantics() {
        let prod = labels(&[("env", "prod"), ("tier", "a")]);
        let dev = labels(&[("env", "dev")]);
        let none = labels(&[]);
        let m = |sel: &str, l: &BTreeMap<String, String>| LabelQuery::parse(sel).expect(sel).matches(l);
        assert!(m("env=prod", &prod) && !m("env=prod", &dev) && !m("env=prod", &none));
        // `!=` and `notin` match objects without the label.
        assert!(m("env!=prod", &dev) && m("env!=prod", &none) && !m("env!=prod", &prod));
        assert!(m("env notin (prod)", &none) && m("env notin (prod)", &dev) && !m("env notin (prod,dev)", &dev));
        assert!(m("tier in (a,b)", &prod) && !m("tier in (a,b)", &dev));
        assert!(m("tier", &prod) && !m("tier", &dev) && m("!tier", &dev) && !m("!tier", &prod));
        assert!(m("env=prod,tier in (a),!canary", &prod) && !m("env=prod,tier in (b)", &prod));
        assert!(m("env=", &labels(&[("env", "")])) && !m("env=", &none));
    }

    #[test]
    fn bad_selectors_are_refused_naming_the_term() {
        for (text, needle) in [
            ("env=prod,,x", "empty term"),
            ("env=prod,", "empty term"),
            ("tier in (a,b", "unbalanced `(`"),
            ("tier in a,b)", "unbalanced `)`"),
            ("tier within (a)", "unknown operator `within`"),
            ("in (a)", "expected `key in"),
            ("tier in (a) x", "text after `)`"),
            ("Env=Pr od", "not a label value"),
            ("-env=x", "not a label key"),
            ("env>3", "expected key"),
            ("a b", "expected key"),
            ("!", "empty key"),
            ("UP.com/x=y", "not a DNS subdomain"),
            ("tier in (a,(b))", "nested parentheses"),
        ] {
            let err = LabelQuery::parse(text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        assert!(LabelQuery::parse(&"a".repeat(MAX_SELECTOR_LEN + 1)).is_err());
        assert!(LabelQuery::parse(&format!("k={}", "v".repeat(64))).is_err());
    }
}
