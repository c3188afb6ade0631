//! Per-cluster templates. A SyncSet with `templated: true` has the strings of its
//! resources rendered for each cluster it goes to, when that cluster's key runs.
//!
//! A template is text with Jinja expressions in `{{ … }}` (evaluated by minijinja):
//! `region: "{{ cluster.labels.region }}"`. A string that is exactly one expression
//! takes the value's own type (`replicas: "{{ values.replicas }}"` with `replicas: 3`
//! gives the number 3; `| string` makes it text); any other string is text with each
//! expression printed into it. Expressions see
//!
//! - `cluster.name`, `cluster.namespace` (the tenant), `cluster.labels`,
//!   `cluster.annotations`, `cluster.values`: the cluster's;
//! - `values`: the SyncSet's `spec.values` with the `values` of each
//!   `spec.targetCustomizations` entry whose `clusterSelector` matches the cluster laid
//!   over them in order (maps merged key by key, anything else replaced; later wins).
//!
//! What a template may do is bounded so that no SyncSet can make a hub spend unbounded
//! time or memory: expressions only (no `{% … %}` statements, so no loops or
//! assignments), at most [`MAX_EXPRESSION_BYTES`] each, no `*` operator (string
//! repetition), the filters `abs bool capitalize d default dictsort first float int items
//! last length lower max min reverse round sort string title trim upper` and the tests
//! `boolean defined endingwith eq false in integer mapping none number sequence
//! startingwith string true undefined` (no filter that multiplies its input), each
//! evaluation within [`FUEL`] steps, and the rendered resources of one key at most
//! [`MAX_RENDERED_BYTES`]. A value that is not there is an error (strict undefined),
//! unless the expression asks for a fallback (`| default("eu")`, `is defined`). A
//! literal `{{` is written `{{ "{{" }}`.
//!
//! The identity of a resource (`apiVersion`, `kind`, `metadata.name`,
//! `metadata.namespace`) is never templated: it is the same on every cluster, so that
//! inventories, removal and diffs name the same objects everywhere.

use crate::cluster::Cluster;
use crate::error::FieldError;
use crate::manifest::Manifest;
use crate::selector::LabelSelector;
use crate::syncset::{SyncSet, SyncSetSpec};
use minijinja::{Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::sync::OnceLock;

/// The longest expression (the text between `{{` and `}}`).
pub const MAX_EXPRESSION_BYTES: usize = 512;
/// The most steps one expression's evaluation may take.
pub const FUEL: u64 = 20_000;
/// The most bytes one key's rendered resources may add up to (as compact JSON, counted
/// leaf by leaf): the size of the largest SyncSet.
pub const MAX_RENDERED_BYTES: usize = crate::document::MAX_SYNCSET_BYTES;
/// The most bytes a cluster's `spec.values`, or a SyncSet's `spec.values` and all its
/// customizations' values together, may take as compact JSON.
pub const MAX_VALUES_BYTES: usize = 256 * 1024;
/// A map of values given to templates: any YAML below string keys.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Values(pub Map<String, Value>);

impl Values {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Its size as compact JSON.
    pub fn encoded_len(&self) -> usize {
        serde_json::to_vec(&self.0).map_or(usize::MAX, |v| v.len())
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Values {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Values".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Values for templates: any mapping.",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// Values laid over a SyncSet's defaults on the clusters a selector matches.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetCustomization {
    /// The clusters (of those the SyncSet selects) that get these values.
    pub cluster_selector: LabelSelector,
    pub values: Values,
}

/// Why a key's resources could not be rendered for its cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RenderError {
    /// The resource, e.g. `v1/ConfigMap apps/web`.
    pub resource: String,
    /// The field in it, e.g. `data.region`.
    pub field: String,
    /// The line of the template (within the field's text) where the expression starts.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template {} {} line {}: {}", self.resource, self.field, self.line, self.message)
    }
}

/// The template's values for a cluster with these labels: the SyncSet's defaults with
/// each matching customization merged over them in order.
pub fn values_for(spec: &SyncSetSpec, labels: &std::collections::BTreeMap<String, String>) -> Map<String, Value> {
    let mut values = spec.values.0.clone();
    for c in spec.target_customizations.iter().filter(|c| c.cluster_selector.matches(labels)) {
        merge(&mut values, &c.values.0);
    }
    values
}

/// Lays `over` onto `base`: maps merge key by key, anything else is replaced.
fn merge(base: &mut Map<String, Value>, over: &Map<String, Value>) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// What a cluster's templates see.
fn context(spec: &SyncSetSpec, cluster: &Cluster) -> minijinja::Value {
    let m = &cluster.metadata;
    minijinja::Value::from_serialize(serde_json::json!({
        "cluster": {
            "name": m.name,
            "namespace": m.namespace,
            "labels": m.labels,
            "annotations": m.annotations,
            "values": cluster.spec.values,
        },
        "values": values_for(spec, &m.labels),
    }))
}

/// Renders `resources` (a SyncSet's, inline or read from its source) for `cluster`.
/// Deterministic: the same SyncSet and cluster give the same output.
pub fn render(spec: &SyncSetSpec, resources: &[Manifest], cluster: &Cluster) -> Result<Vec<Manifest>, RenderError> {
    let ctx = context(spec, cluster);
    let mut budget = MAX_RENDERED_BYTES;
    resources
        .iter()
        .map(|m| {
            let resource = m.resource_ref().map_or_else(|_| "(invalid resource)".to_string(), |r| r.to_string());
            let mut at = Leaf { resource: &resource, path: String::new(), ctx: &ctx, budget: &mut budget };
            at.value(&m.0).map(Manifest)
        })
        .collect()
}

/// The resources `set` applies to `cluster`: its own, or — a templated SyncSet — their
/// rendering for the cluster. The one way every reader (the applier, `render`, the
/// agents' drift) gets them.
pub fn resources_for<'a>(set: &'a SyncSet, cluster: &Cluster) -> Result<Cow<'a, [Manifest]>, RenderError> {
    match set.spec.templated {
        false => Ok(Cow::Borrowed(&set.spec.resources)),
        true => render(&set.spec, &set.spec.resources, cluster).map(Cow::Owned),
    }
}

/// The hash of rendered resources, as `fleetsync render` and status show it: the first
/// 12 hex digits of the SHA-256 of their JSON.
pub fn rendered_hash(resources: &[Manifest]) -> String {
    let json = serde_json::to_vec(resources).unwrap_or_default();
    Sha256::digest(&json).iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Checks every template of `resources` without a cluster: each parses, stays within
/// the rules above, and no identity field holds one. The field is named as
/// `spec.resources[N].…`. Called when a templated SyncSet is applied, and on the
/// resources of each new revision of its source.
pub fn check(resources: &[Manifest]) -> Result<(), FieldError> {
    for (i, m) in resources.iter().enumerate() {
        let at = |field: &str| format!("spec.resources[{i}]{}{field}", if field.is_empty() { "" } else { "." });
        for field in ["apiVersion", "kind", "metadata.name", "metadata.namespace"] {
            let v = field.split('.').try_fold(&m.0, |v, k| v.get(k));
            if v.and_then(Value::as_str).is_some_and(|s| s.contains("{{") || s.contains("{%")) {
                return Err(FieldError::new(
                    at(field),
                    "is the resource's identity, the same on every cluster: it cannot be templated",
                ));
            }
        }
        check_value(&m.0, &mut String::new()).map_err(|(field, message)| FieldError::new(at(&field), message))?;
    }
    Ok(())
}

fn check_value(v: &Value, path: &mut String) -> Result<(), (String, String)> {
    match v {
        Value::String(s) => {
            let parts = split(s).map_err(|m| (path.clone(), m))?;
            for part in parts {
                if let Part::Expr { text, line } = part {
                    env().compile_expression(text).map_err(|e| (path.clone(), compile_message(&e, line)))?;
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let r = check_value(item, path);
            path.truncate(len);
            r
        }),
        Value::Object(map) => map.iter().try_for_each(|(k, item)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(k);
            let r = check_value(item, path);
            path.truncate(len);
            r
        }),
        _ => Ok(()),
    }
}

fn compile_message(e: &minijinja::Error, line: usize) -> String {
    format!("line {line}: {}", e.detail().unwrap_or("invalid expression"))
}

/// One place in a manifest being rendered.
struct Leaf<'a> {
    resource: &'a str,
    path: String,
    ctx: &'a minijinja::Value,
    /// Bytes the key's rendered resources may still take.
    budget: &'a mut usize,
}

impl Leaf<'_> {
    fn value(&mut self, v: &Value) -> Result<Value, RenderError> {
        match v {
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let len = self.path.len();
                    self.path.push_str(&format!("[{i}]"));
                    out.push(self.value(item)?);
                    self.path.truncate(len);
                }
                Ok(Value::Array(out))
            }
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                for (k, item) in map {
                    let len = self.path.len();
                    if !self.path.is_empty() {
                        self.path.push('.');
                    }
                    self.path.push_str(k);
                    self.spend(1, k.len() + 4)?;
                    out.insert(k.clone(), self.value(item)?);
                    self.path.truncate(len);
                }
                Ok(Value::Object(out))
            }
            other => {
                self.spend(1, 8)?;
                Ok(other.clone())
            }
        }
    }

    fn string(&mut self, s: &str) -> Result<Value, RenderError> {
        if !s.contains('{') || (!s.contains("{{") && !s.contains("{%") && !s.contains("{#")) {
            self.spend(1, s.len() + 2)?;
            return Ok(Value::String(s.to_string()));
        }
        let parts = split(s).map_err(|m| self.error(1, m))?;
        // Exactly one expression: the value keeps its type.
        if let [Part::Expr { text, line }] = parts.as_slice() {
            let v = self.eval(text, *line)?;
            let json = serde_json::to_value(&v).map_err(|e| self.error(*line, e.to_string()))?;
            self.spend(*line, serde_json::to_vec(&json).map_or(usize::MAX, |b| b.len()))?;
            return Ok(json);
        }
        let mut out = String::new();
        for part in parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Expr { text, line } => {
                    let v = self.eval(text, line)?;
                    let printed = v.to_string();
                    self.spend(line, printed.len())?;
                    out.push_str(&printed);
                }
            }
        }
        self.spend(1, out.len() + 2)?;
        Ok(Value::String(out))
    }

    fn eval(&self, text: &str, line: usize) -> Result<minijinja::Value, RenderError> {
        let expr = compiled(text).map_err(|e| self.error(line, compile_message(&e, line)))?;
        let missing = || missing_value(&expr, self.ctx).unwrap_or_else(|| text.trim().to_string());
        match expr.eval(self.ctx) {
            Ok(v) if v.is_undefined() => Err(self.error(line, format!("undefined value {}", missing()))),
            Ok(v) => Ok(v),
            Err(e) if e.kind() == minijinja::ErrorKind::UndefinedError => {
                Err(self.error(line, format!("undefined value {}", missing())))
            }
            Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => {
                Err(self.error(line, format!("evaluation took more than {FUEL} steps (the limit)")))
            }
            Err(e) => Err(self.error(line, format!("{}: {}", e.kind(), e.detail().unwrap_or("failed")))),
        }
    }

    /// Counts `bytes` against the key's budget.
    fn spend(&mut self, line: usize, bytes: usize) -> Result<(), RenderError> {
        match self.budget.checked_sub(bytes) {
            Some(left) => {
                *self.budget = left;
                Ok(())
            }
            None => {
                Err(self.error(line, format!("the rendered resources exceed {MAX_RENDERED_BYTES} bytes (the limit)")))
            }
        }
    }

    fn error(&self, line: usize, message: String) -> RenderError {
        RenderError { resource: self.resource.to_string(), field: self.path.clone(), line, message }
    }
}

/// The expression compiled, from this thread's cache: every cluster's key of a SyncSet
/// evaluates the same expressions, and compiling costs more than evaluating.
fn compiled(text: &str) -> Result<Rc<minijinja::Expression<'static, 'static>>, minijinja::Error> {
    /// Expressions kept per thread; the cache starts over when it is full.
    const KEPT: usize = 4096;
    thread_local! {
        static CACHE: RefCell<HashMap<String, Rc<minijinja::Expression<'static, 'static>>>> = RefCell::default();
    }
    if let Some(hit) = CACHE.with_borrow(|c| c.get(text).cloned()) {
        return Ok(hit);
    }
    let expr = Rc::new(env().compile_expression_owned(text.to_string())?);
    CACHE.with_borrow_mut(|c| {
        if c.len() >= KEPT {
            c.clear();
        }
        c.insert(text.to_string(), expr.clone());
    });
    Ok(expr)
}

/// The first variable path the expression reads that the context lacks
/// (`cluster.labels.region`).
fn missing_value(expr: &minijinja::Expression<'_, '_>, ctx: &minijinja::Value) -> Option<String> {
    let mut names: Vec<String> = expr.undeclared_variables(true).into_iter().collect();
    names.sort();
    names.into_iter().find(|path| {
        let mut v = ctx.clone();
        path.split('.').any(|k| match v.get_attr(k) {
            Ok(next) if !next.is_undefined() => {
                v = next;
                false
            }
            _ => true,
        })
    })
}

/// A piece of a template string.
#[derive(Debug, PartialEq)]
enum Part<'a> {
    Text(&'a str),
    /// An expression's text (between `{{` and `}}`) and the line it starts on.
    Expr {
        text: &'a str,
        line: usize,
    },
}

/// Splits a template string into text and expressions, refusing what is not allowed.
fn split(s: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = s;
    let mut offset = 0;
    loop {
        let line = |at: usize| s[..at].matches('\n').count() + 1;
        if let Some(at) = [rest.find("{%"), rest.find("{#")].into_iter().flatten().min() {
            if rest.find("{{").is_none_or(|open| at < open) {
                return Err(format!(
                    "line {}: statements ({{% … %}}) and comments ({{# … #}}) are not supported: a template is text with {{{{ expressions }}}}",
                    line(offset + at)
                ));
            }
        }
        let Some(open) = rest.find("{{") else {
            if !rest.is_empty() {
                parts.push(Part::Text(rest));
            }
            return Ok(parts);
        };
        if open > 0 {
            parts.push(Part::Text(&rest[..open]));
        }
        let body = &rest[open + 2..];
        let start = offset + open;
        let close = expression_end(body).ok_or_else(|| format!("line {}: `{{{{` without `}}}}`", line(start)))?;
        let text = &body[..close];
        if text.len() > MAX_EXPRESSION_BYTES {
            return Err(format!(
                "line {}: an expression is longer than {MAX_EXPRESSION_BYTES} bytes (the limit)",
                line(start)
            ));
        }
        if has_operator(text, '*') {
            return Err(format!("line {}: the `*` operator is not available in templates", line(start)));
        }
        parts.push(Part::Expr { text, line: line(start) });
        let consumed = open + 2 + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
}

/// Where an expression's closing `}}` is, outside its string literals.
fn expression_end(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        match (quote, bytes[i]) {
            (Some(_), b'\\') => i += 1,
            (Some(q), c) if c == q => quote = None,
            (None, c @ (b'"' | b'\'')) => quote = Some(c),
            (None, b'}') if bytes.get(i + 1) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether `op` occurs in an expression outside its string literals.
fn has_operator(text: &str, op: char) -> bool {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == op => return true,
            None => {}
        }
    }
    false
}

/// The one environment: strict undefined values, fuel, and only the filters and tests
/// the module docs list.
fn env() -> &'static Environment<'static> {
    use minijinja::{filters as f, tests as t};
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::empty();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        env.add_filter("abs", f::abs);
        env.add_filter("bool", f::bool);
        env.add_filter("capitalize", f::capitalize);
        env.add_filter("d", f::default);
        env.add_filter("default", f::default);
        env.add_filter("dictsort", f::dictsort);
        env.add_filter("first", f::first);
        env.add_filter("float", f::float);
        env.add_filter("int", f::int);
        env.add_filter("items", f::items);
        env.add_filter("last", f::last);
        env.add_filter("length", f::length);
        env.add_filter("lower", f::lower);
        env.add_filter("max", f::max);
        env.add_filter("min", f::min);
        env.add_filter("reverse", f::reverse);
        env.add_filter("round", f::round);
        env.add_filter("sort", f::sort);
        env.add_filter("string", f::string);
        env.add_filter("title", f::title);
        env.add_filter("trim", f::trim);
        env.add_filter("upper", f::upper);
        env.add_test("boolean", t::is_boolean);
        env.add_test("defined", t::is_defined);
        env.add_test("endingwith", t::is_endingwith);
        env.add_test("eq", t::is_eq);
        env.add_test("false", t::is_false);
        env.add_test("in", t::is_in);
        env.add_test("integer", t::is_integer);
        env.add_test("mapping", t::is_mapping);
        env.add_test("none", t::is_none);
        env.add_test("number", t::is_number);
        env.add_test("sequence", t::is_sequence);
        env.add_test("startingwith", t::is_startingwith);
        env.add_test("string", t::is_string);
        env.add_test("true", t::is_true);
        env.add_test("undefined", t::is_undefined);
        env
    })
}

#[cfg(test)]
mod tests;
