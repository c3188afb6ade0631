//! Validating documents. A file holds several YAML documents separated by `---`
//! ([parsed](crate::parse) within [limits](crate::limits)); each is a Cluster, a SyncSet, a Secret, a
//! GitRepository, an OCIRepository or a Notifier. Every error names the document (its position
//! and, where known, its kind and name), the field, and the rule that was broken.

use crate::cluster::{Cluster, Endpoint};
use crate::error::FieldError;
use crate::names::{check_dns1123_label, check_label};
use crate::notifier::Notifier;
use crate::oci::OCIRepository;
pub use crate::parse::{parse_documents, ParseError};
use crate::secret::{validate_secret, Secret};
use crate::source::GitRepository;
use crate::syncset::{SyncSet, SyncSetSpec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The one API version fleetsync documents carry.
pub const API_VERSION: &str = "fleetsync.io/v1";
/// The tenant of a document that names none.
pub const DEFAULT_TENANT: &str = "default";
/// The largest resource manifest, as compact JSON.
pub const MAX_RESOURCE_BYTES: usize = 1024 * 1024;
/// The largest SyncSet (all its resources together), as compact JSON.
pub const MAX_SYNCSET_BYTES: usize = 8 * 1024 * 1024;

/// Metadata shared by Clusters and SyncSets. `namespace` is the tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMeta {
    pub name: String,
    #[serde(default = "default_tenant")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Notes that select nothing; a cluster's are seen by templates
    /// (`cluster.annotations`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Set by the store; bumped when the object's labels or spec change. Ignored on input.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
}

fn default_tenant() -> String {
    DEFAULT_TENANT.to_string()
}

fn is_zero(g: &i64) -> bool {
    *g == 0
}

impl ObjectMeta {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: default_tenant(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            generation: 0,
        }
    }

    /// The tenant this object belongs to.
    pub fn tenant(&self) -> &str {
        &self.namespace
    }
}

/// The kinds of document fleetsync accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    Cluster,
    SyncSet,
    Secret,
    GitRepository,
    OCIRepository,
    Notifier,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Cluster => "Cluster",
            Kind::SyncSet => "SyncSet",
            Kind::Secret => "Secret",
            Kind::GitRepository => "GitRepository",
            Kind::OCIRepository => "OCIRepository",
            Kind::Notifier => "Notifier",
        }
    }

    /// Parses a kind as the CLI takes it: as documents write it, lowercase, plural, or
    /// by its short name (`cl`, `ss`, `gitrepo`, `ocirepo`), as kubectl takes `deploy`.
    pub fn parse(s: &str) -> Option<Kind> {
        match s.to_ascii_lowercase().as_str() {
            "cluster" | "clusters" | "cl" => Some(Kind::Cluster),
            "syncset" | "syncsets" | "ss" => Some(Kind::SyncSet),
            "secret" | "secrets" => Some(Kind::Secret),
            "gitrepository" | "gitrepositories" | "gitrepo" => Some(Kind::GitRepository),
            "ocirepository" | "ocirepositories" | "ocirepo" => Some(Kind::OCIRepository),
            "notifier" | "notifiers" => Some(Kind::Notifier),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One accepted document.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    Cluster(Cluster),
    SyncSet(SyncSet),
    Secret(Secret),
    GitRepository(GitRepository),
    OCIRepository(OCIRepository),
    Notifier(Notifier),
}

impl Document {
    pub fn kind(&self) -> Kind {
        match self {
            Document::Cluster(_) => Kind::Cluster,
            Document::SyncSet(_) => Kind::SyncSet,
            Document::Secret(_) => Kind::Secret,
            Document::GitRepository(_) => Kind::GitRepository,
            Document::OCIRepository(_) => Kind::OCIRepository,
            Document::Notifier(_) => Kind::Notifier,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Document::Cluster(c) => &c.metadata,
            Document::SyncSet(s) => &s.metadata,
            Document::Secret(s) => &s.metadata,
            Document::GitRepository(g) => &g.metadata,
            Document::OCIRepository(o) => &o.metadata,
            Document::Notifier(n) => &n.metadata,
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Document::Cluster(c) => &mut c.metadata,
            Document::SyncSet(s) => &mut s.metadata,
            Document::Secret(s) => &mut s.metadata,
            Document::GitRepository(g) => &mut g.metadata,
            Document::OCIRepository(o) => &mut o.metadata,
            Document::Notifier(n) => &mut n.metadata,
        }
    }

    /// The document as a JSON value with `apiVersion` and `kind`, as users write it,
    /// except that a Secret's values, and the `data` and `stringData` values of the
    /// Kubernetes Secret manifests of a SyncSet, and the query of a Notifier's webhook URL, are
    /// [redacted](crate::secret::REDACTED):
    /// this is what the API and the CLI show. Applying it back is refused.
    pub fn to_value(&self) -> serde_json::Value {
        let body = match self {
            Document::Cluster(c) => serde_json::to_value(c),
            Document::SyncSet(s) => serde_json::to_value(s.redacted()),
            Document::Secret(s) => serde_json::to_value(s.redacted()),
            Document::GitRepository(g) => serde_json::to_value(g),
            Document::OCIRepository(o) => serde_json::to_value(o),
            Document::Notifier(n) => serde_json::to_value(n.redacted()),
        };
        let mut v = body.unwrap_or(serde_json::Value::Null);
        if let Some(obj) = v.as_object_mut() {
            let mut typed = serde_json::Map::new();
            typed.insert("apiVersion".into(), API_VERSION.into());
            typed.insert("kind".into(), self.kind().as_str().into());
            typed.append(obj);
            return serde_json::Value::Object(typed);
        }
        v
    }

    /// Checks every rule that does not need the store. Called by [`parse_documents`];
    /// call it yourself for documents built in code.
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_meta(self.metadata())?;
        match self {
            Document::Cluster(c) => validate_cluster(c),
            Document::SyncSet(s) => validate_syncset(s).and_then(|()| s.refuse_redacted()),
            Document::Secret(s) => validate_secret(s),
            Document::GitRepository(g) => g.spec.validate().map_err(|e| e.under("spec")),
            Document::OCIRepository(o) => o.spec.validate().map_err(|e| e.under("spec")),
            Document::Notifier(n) => n.spec.validate().map_err(|e| e.under("spec")),
        }
    }
}

/// A document that was parsed but broke a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{document}: field `{field}`: {rule}")]
pub struct ValidationError {
    /// Which document, e.g. `document 2 (SyncSet default/base)`.
    pub document: String,
    /// The path of the offending field, e.g. `spec.resources[3].metadata.name`.
    pub field: String,
    /// What the rule is.
    pub rule: String,
}

/// The kinds a document may have, for messages.
const KINDS: &str = "Cluster, SyncSet, Secret, GitRepository, OCIRepository or Notifier";

/// Parses and validates one document given as a JSON value; `index` is its 1-based
/// position in its file, for messages.
pub fn parse_value(index: usize, mut value: serde_json::Value) -> Result<Document, ValidationError> {
    let label = describe(index, &value);
    let err = |field: &str, rule: String| ValidationError { document: label.clone(), field: field.into(), rule };
    let obj = value.as_object_mut().ok_or_else(|| err("", "a document must be a mapping".into()))?;
    match obj.remove("apiVersion") {
        Some(serde_json::Value::String(v)) if v == API_VERSION => {}
        Some(other) => return Err(err("apiVersion", format!("must be {API_VERSION:?}, got {other}"))),
        None => return Err(err("apiVersion", format!("is required (use {API_VERSION:?})"))),
    }
    let kind = match obj.remove("kind") {
        Some(serde_json::Value::String(k)) => match k.as_str() {
            "Cluster" => Kind::Cluster,
            "SyncSet" => Kind::SyncSet,
            "Secret" => Kind::Secret,
            "GitRepository" => Kind::GitRepository,
            "OCIRepository" => Kind::OCIRepository,
            "Notifier" => Kind::Notifier,
            other => {
                return Err(err("kind", format!("unknown kind {other:?}: expected {KINDS}")));
            }
        },
        _ => return Err(err("kind", format!("is required: {KINDS}"))),
    };
    let doc = match kind {
        Kind::Cluster => typed(value).map(Document::Cluster),
        Kind::SyncSet => typed(value).map(Document::SyncSet),
        // Never `typed`: serde's messages quote what they found, and this is a secret.
        Kind::Secret => crate::secret::parse_secret(value).map(Document::Secret),
        Kind::GitRepository => typed(value).map(Document::GitRepository),
        Kind::OCIRepository => typed(value).map(Document::OCIRepository),
        Kind::Notifier => typed(value).map(Document::Notifier),
    }
    .map_err(|e| err(&e.field, e.message))?;
    doc.validate().map_err(|e| err(&e.field, e.message))?;
    Ok(doc)
}

fn typed<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        FieldError::new(if path == "." { String::new() } else { path }, e.into_inner().to_string())
    })
}

/// `document N (Kind tenant/name)`, with as much as can be read from a raw value.
fn describe(index: usize, v: &serde_json::Value) -> String {
    let kind = v.get("kind").and_then(|k| k.as_str());
    let meta = v.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(|n| n.as_str());
    let ns = meta.and_then(|m| m.get("namespace")).and_then(|n| n.as_str()).unwrap_or(DEFAULT_TENANT);
    match (kind, name) {
        (Some(k), Some(n)) => format!("document {index} ({k} {ns}/{n})"),
        (Some(k), None) => format!("document {index} ({k})"),
        _ => format!("document {index}"),
    }
}

fn validate_meta(m: &ObjectMeta) -> Result<(), FieldError> {
    check_dns1123_label(&m.name).map_err(|r| FieldError::new("metadata.name", r.to_string()))?;
    check_dns1123_label(&m.namespace).map_err(|r| FieldError::new("metadata.namespace", r.to_string()))?;
    for (k, v) in &m.labels {
        check_label(k, v).map_err(|r| FieldError::new(format!("metadata.labels.{k}"), r.to_string()))?;
    }
    let mut total = 0;
    for (k, v) in &m.annotations {
        // The key follows the label key rule; the value is any text.
        check_label(k, "").map_err(|r| FieldError::new(format!("metadata.annotations.{k}"), r.to_string()))?;
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return Err(FieldError::new(
            "metadata.annotations",
            format!("annotations total {total} bytes; the limit is {MAX_ANNOTATIONS_BYTES} bytes (256 KiB)"),
        ));
    }
    Ok(())
}

/// The most bytes an object's annotations (keys and values) may add up to, as in Kubernetes.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Refuses values larger than [`template::MAX_VALUES_BYTES`](crate::template::MAX_VALUES_BYTES).
fn check_values_len(field: &str, len: usize) -> Result<(), FieldError> {
    let max = crate::template::MAX_VALUES_BYTES;
    match len > max {
        true => Err(FieldError::new(field, format!("values total {len} bytes; the limit is {max} bytes (256 KiB)"))),
        false => Ok(()),
    }
}

fn validate_cluster(c: &Cluster) -> Result<(), FieldError> {
    /// Longest cluster URL accepted.
    const MAX_URL_LEN: usize = 2048;

    /// A cluster's API URL, strictly: `http` or `https`, a host, an optional port and
    /// path, and nothing else (no user info, query or fragment, no characters a lenient
    /// parser would drop or rewrite).
    fn check_target_url(url: &str) -> Result<(), FieldError> {
        // A URL with user info is never quoted: it may carry a password.
        let url_shown = if url.contains('@') { "(not shown: it has an @)" } else { url };
        if url.len() > MAX_URL_LEN {
            return Err(FieldError::message(format!("must be at most {MAX_URL_LEN} bytes, got {}", url.len())));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(FieldError::message(format!("must be an http:// or https:// URL, got {url_shown:?}")));
        }
        if url.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
            return Err(FieldError::message(format!(
                "must not contain whitespace, control characters or backslashes, got {url_shown:?}"
            )));
        }
        let parsed = url::Url::parse(url)
            .map_err(|e| FieldError::message(format!("is not a valid URL ({e}), got {url_shown:?}")))?;
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(FieldError::message(format!("must name a host, got {url_shown:?}")));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(FieldError::message(
                "must not carry user info (user:password@): give credentials with a kubeconfig endpoint",
            ));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(FieldError::message(format!("must not have a query or fragment, got {url_shown:?}")));
        }
        Ok(())
    }

    check_values_len("spec.values", c.spec.values.encoded_len())?;
    match &c.spec.endpoint {
        Endpoint::Http { url } => check_target_url(url).map_err(|e| e.at("spec.endpoint.http.url")),
        Endpoint::Kubeconfig { secret_ref } => check_dns1123_label(secret_ref)
            .map_err(|r| FieldError::new("spec.endpoint.kubeconfig.secretRef", r.to_string())),
        _ => Ok(()),
    }
}

fn validate_syncset(s: &SyncSet) -> Result<(), FieldError> {
    match (&s.spec.cluster_selector, &s.spec.cluster_names) {
        (Some(_), Some(_)) => {
            return Err(FieldError::new("spec", "set only one of clusterSelector and clusterNames"));
        }
        (None, None) => return Err(FieldError::new("spec", "one of clusterSelector or clusterNames is required")),
        (Some(sel), None) => sel.validate().map_err(|e| e.under("spec.clusterSelector"))?,
        (None, Some(names)) => {
            for (i, n) in names.iter().enumerate() {
                check_dns1123_label(n)
                    .map_err(|r| FieldError::new(format!("spec.clusterNames[{i}]"), r.to_string()))?;
            }
        }
    }
    if let Some(rollout) = &s.spec.rollout {
        rollout.validate()?;
    }
    if let Some(source) = &s.spec.source_ref {
        if !s.spec.resources.is_empty() {
            return Err(FieldError::new("spec", "set only one of resources and sourceRef"));
        }
        check_dns1123_label(&source.name).map_err(|r| FieldError::new("spec.sourceRef.name", r.to_string()))?;
        crate::artifact::check_path(&source.path).map_err(|e| FieldError::new("spec.sourceRef.path", e.to_string()))?;
    }
    crate::dependency::validate(&s.metadata.name, &s.spec.depends_on)?;
    if let Some(health) = &s.spec.health {
        health.validate()?;
    }
    validate_templating(&s.spec)?;
    validate_resources(&s.spec)
}

/// Values and customizations go with `templated`, within their size; each
/// customization's selector is valid.
fn validate_templating(spec: &SyncSetSpec) -> Result<(), FieldError> {
    if !spec.templated {
        if !spec.values.is_empty() {
            return Err(FieldError::new("spec.values", "is for templates: set `templated: true` to use it"));
        }
        if !spec.target_customizations.is_empty() {
            return Err(FieldError::new(
                "spec.targetCustomizations",
                "is for templates: set `templated: true` to use it",
            ));
        }
        return Ok(());
    }
    let mut total = spec.values.encoded_len();
    for (i, c) in spec.target_customizations.iter().enumerate() {
        c.cluster_selector
            .validate()
            .map_err(|e| e.under(&format!("spec.targetCustomizations[{i}].clusterSelector")))?;
        total = total.saturating_add(c.values.encoded_len());
    }
    check_values_len("spec.values", total)
}

/// Checks the resources a SyncSet's source holds at a revision, read into `s`: the
/// same rules as resources given inline, the fields named as `spec.resources[N]`.
pub fn validate_sourced(s: &SyncSet) -> Result<(), FieldError> {
    validate_resources(&s.spec).and_then(|()| s.refuse_redacted())
}

/// The resources' identities, sizes and (in a templated SyncSet) templates.
fn validate_resources(spec: &SyncSetSpec) -> Result<(), FieldError> {
    let resources = &spec.resources;
    if spec.templated {
        crate::template::check(resources)?;
    }
    let mut seen = HashSet::new();
    let mut total = 0usize;
    for (i, m) in resources.iter().enumerate() {
        let at =
            |f: &str| if f.is_empty() { format!("spec.resources[{i}]") } else { format!("spec.resources[{i}].{f}") };
        let r = m.resource_ref().map_err(|e| FieldError::new(at(&e.field), e.message))?;
        let len = m.encoded_len();
        if len > MAX_RESOURCE_BYTES {
            return Err(FieldError::new(
                at(""),
                format!("resource {r} is {len} bytes; the limit is {MAX_RESOURCE_BYTES} bytes (1 MiB)"),
            ));
        }
        total += len;
        if !seen.insert(r.clone()) {
            return Err(FieldError::new(at(""), format!("resource {r} is listed twice")));
        }
    }
    if total > MAX_SYNCSET_BYTES {
        return Err(FieldError::new(
            "spec.resources",
            format!("resources total {total} bytes; the limit is {MAX_SYNCSET_BYTES} bytes (8 MiB)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: c1, labels: {env: prod}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: base, namespace: team-a}
spec:
  clusterSelector: {matchLabels: {env: prod}}
  resourceApplyMode: Sync
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: app}, data: {k: v}}
"#;

    /// The validation error `text` is refused with (a test fails on anything else).
    pub(crate) fn invalid(text: &str) -> ValidationError {
        match parse_documents(text) {
            Err(ParseError::Invalid(e)) => e,
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn parses_several_documents() {
        let docs = parse_documents(GOOD).expect("valid");
        assert_eq!(docs.len(), 2);
        let Document::SyncSet(s) = &docs[1] else { panic!("second is a SyncSet") };
        assert_eq!(s.metadata.tenant(), "team-a");
        assert_eq!(s.spec.resources.len(), 2);
        assert_eq!(docs[0].metadata().tenant(), DEFAULT_TENANT);
        assert_eq!(docs[1].to_value()["kind"], "SyncSet");
    }

    #[test]
    fn malformed_yaml_names_the_document() {
        let err = parse_documents(&format!("{GOOD}---\nfoo: [unclosed\n")).expect_err("bad yaml");
        assert!(matches!(err, ParseError::Yaml { index: 3, .. }), "{err}");
    }

    #[test]
    fn unknown_kind_is_rejected() {
        let e = invalid("apiVersion: fleetsync.io/v1\nkind: Deployment\nmetadata: {name: x}\n");
        assert_eq!(e.field, "kind");
        assert!(e.rule.contains("unknown kind \"Deployment\""), "{e}");
    }

    #[test]
    fn invalid_name_names_field_and_rule() {
        let e = invalid("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec: {endpoint: {simulator: {}}}\n");
        assert_eq!(e.field, "metadata.name");
        assert!(e.rule.contains("DNS-1123"), "{e}");
        assert!(e.document.contains("Cluster default/Bad_Name"), "{e}");
    }

    #[test]
    fn unknown_field_is_named() {
        let e = invalid("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: a}\nspec: {endpoint: {simulator: {}}, colour: red}\n");
        assert_eq!(e.field, "spec.colour");
        assert!(e.rule.contains("unknown field `colour`"), "{e}");
    }

    #[test]
    fn oversized_resource_is_rejected() {
        let big = "x".repeat(MAX_RESOURCE_BYTES + 1);
        let text = format!(
            "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s}}\nspec:\n  clusterNames: [a]\n  resources:\n  - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: big}}, data: {{k: {big}}}}}\n"
        );
        let e = invalid(&text);
        assert_eq!(e.field, "spec.resources[0]");
        assert!(e.rule.contains("1 MiB"), "{e}");
    }

    #[test]
    fn selector_rules() {
        let both = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s}\nspec: {clusterNames: [a], clusterSelector: {}}\n";
        assert!(invalid(both).rule.contains("only one"));
        let none = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s}\nspec: {}\n";
        assert!(invalid(none).rule.contains("required"));
        let dup = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s}\nspec:\n  clusterNames: [a]\n  resources: [{apiVersion: v1, kind: A, metadata: {name: x}}, {apiVersion: v1, kind: A, metadata: {name: x}}]\n";
        let e = invalid(dup);
        assert_eq!(e.field, "spec.resources[1]");
        assert!(e.rule.contains("twice"));
    }

    #[test]
    fn secrets_parse_and_show_redacted() {
        let text = "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: prod-kc, namespace: team-a}\nstringData: {kubeconfig: MARKER-xyz}\n";
        let docs = parse_documents(text).expect("valid");
        let Document::Secret(s) = &docs[0] else { panic!("a Secret") };
        assert_eq!(s.get(crate::secret::KUBECONFIG_KEY).map(|v| v.expose()), Some("MARKER-xyz"));
        let shown = docs[0].to_value().to_string();
        assert!(!shown.contains("MARKER"), "{shown}");
        assert!(shown.contains("kubeconfig"), "{shown}");
        let bad =
            invalid("apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: s}\nstringData: {\"bad key\": x}\n");
        assert_eq!(bad.field, "stringData.bad key");
        let data = invalid("apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: eA==}\n");
        assert!(data.rule.contains("unknown field `data`"), "{data}");
    }

    #[test]
    fn wrong_api_version_and_empty_input() {
        assert_eq!(invalid("apiVersion: v2\nkind: Cluster\n").field, "apiVersion");
        assert_eq!(parse_documents("---\n"), Err(ParseError::Empty));
    }
}
