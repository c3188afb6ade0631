//! Parsing a body of documents: YAML (or JSON, which is YAML) scanned within the
//! [limits](crate::limits), a time budget and a cancellation flag, then each document
//! typed and validated.

use crate::document::{parse_value, Document, Kind, ValidationError};
use crate::limits::{Limit, Limits, DEFAULT_PARSE_TIME};
use crate::manifest::Manifest;
use crate::scan::{self, Scan, Stop};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a body of documents was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text is not YAML; `index` is the document (1-based, empty ones not counted)
    /// where the scanner stopped.
    #[error("document {index}: malformed YAML: {message}")]
    Yaml { index: usize, message: String },
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("no documents found: expected at least one Cluster, SyncSet or Secret")]
    Empty,
    /// The body broke one of the [limits](crate::limits) (or the time budget) while it was
    /// scanned; `index` is the document being scanned (0: the body as a whole).
    #[error("{}", limit_message(*index, limit))]
    Limit { index: usize, limit: Limit },
    /// The parse's cancellation flag was set (the client went away, or the server stops).
    #[error("parsing was cancelled")]
    Cancelled,
}

fn limit_message(index: usize, limit: &Limit) -> String {
    if index == 0 {
        format!("the body: {limit}")
    } else {
        format!("document {index}: {limit}")
    }
}

/// What one parse may spend: the [`Limits`], a time limit (or a deadline), and an
/// optional flag that, once set, stops the parse within a few nodes.
#[derive(Debug, Clone)]
pub struct ParseBudget {
    pub limits: Limits,
    /// How long the parse may take from its start.
    pub time_limit: Duration,
    /// An absolute deadline, for callers that already spent part of their time.
    pub deadline: Option<Instant>,
    /// Set it (from any thread) to stop the parse with [`ParseError::Cancelled`].
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for ParseBudget {
    fn default() -> Self {
        ParseBudget { limits: Limits::DEFAULT, time_limit: DEFAULT_PARSE_TIME, deadline: None, cancel: None }
    }
}

impl ParseBudget {
    pub fn with_time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit;
        self
    }

    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// Parses every document of a YAML (or JSON) text with the default [`ParseBudget`]:
/// see [`parse_documents_with`].
pub fn parse_documents(text: &str) -> Result<Vec<Document>, ParseError> {
    parse_documents_with(text, &ParseBudget::default())
}

/// Parses every document of a YAML (or JSON) text, validating each, within `budget`.
/// Empty documents (e.g. `---` twice) are skipped and not counted in positions. A leading
/// UTF-8 byte order mark is ignored. The same object (kind, tenant, name) twice is
/// refused, as are numbers that are not finite (`.nan`, `.inf`). The first error is
/// returned.
pub fn parse_documents_with(text: &str, budget: &ParseBudget) -> Result<Vec<Document>, ParseError> {
    let values = scan_values(text, budget)?;
    let mut docs = Vec::with_capacity(values.len());
    let mut seen: HashMap<(Kind, String, String), usize> = HashMap::new();
    for (i, value) in values.into_iter().enumerate() {
        let index = i + 1;
        let doc = parse_value(index, value)?;
        let (kind, meta) = (doc.kind(), doc.metadata());
        if let Some(first) = seen.insert((kind, meta.namespace.clone(), meta.name.clone()), index) {
            return Err(ValidationError {
                document: format!("document {index} ({kind} {}/{})", meta.namespace, meta.name),
                field: "metadata.name".into(),
                rule: format!(
                    "{kind} {}/{} is also document {first}: an object may appear once in a body",
                    meta.namespace, meta.name
                ),
            }
            .into());
        }
        docs.push(doc);
    }
    if docs.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(docs)
}

/// Parses the Kubernetes manifests of a YAML (or JSON) text — what a file of a source
/// holds — within `budget`, as [`parse_documents_with`] scans a body: each document
/// must be a mapping whose identity ([`Manifest::resource_ref`]) is valid. Empty
/// documents are skipped; a text of none gives none.
pub fn parse_manifests_with(text: &str, budget: &ParseBudget) -> Result<Vec<Manifest>, ParseError> {
    let values = scan_values(text, budget)?;
    let mut manifests = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        let document = format!("document {}", i + 1);
        if !value.is_object() {
            let rule = "a manifest must be a mapping".to_string();
            return Err(ValidationError { document, field: String::new(), rule }.into());
        }
        let manifest = Manifest(value);
        if let Err(e) = manifest.resource_ref() {
            return Err(ValidationError { document, field: e.field, rule: e.message }.into());
        }
        manifests.push(manifest);
    }
    Ok(manifests)
}

/// Scans every document of a text within `budget`, empty ones skipped.
fn scan_values(text: &str, budget: &ParseBudget) -> Result<Vec<serde_json::Value>, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let limits = &budget.limits;
    if text.len() > limits.max_body_bytes {
        return Err(ParseError::Limit { index: 0, limit: Limit::BodyBytes(limits.max_body_bytes) });
    }
    let start = Instant::now();
    let deadline = budget.deadline.map_or(start + budget.time_limit, |d| d.min(start + budget.time_limit));
    let time_limit = deadline.saturating_duration_since(start);
    let scan = Scan::new(deadline, budget.cancel.clone());
    if let Some(stop) = scan.must_stop() {
        return Err(stopped(stop, 0, time_limit));
    }
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(limits.budget(text.len()));
    options.with_snippet = false;
    // YAML 1.2: only `true` and `false` are booleans (`yes`, `on` stay text).
    options.strict_booleans = true;
    let (values, scan) = scan.run(|| serde_saphyr::from_multiple_with_options::<scan::Document>(text, options));
    let values = values.map_err(|e| scan_error(&e, &scan, limits, text.len(), time_limit))?;
    Ok(values.into_iter().map(|scan::Document(value)| value).collect())
}

fn stopped(stop: Stop, index: usize, time_limit: Duration) -> ParseError {
    match stop {
        Stop::Cancelled => ParseError::Cancelled,
        Stop::Deadline => ParseError::Limit { index, limit: Limit::ParseTime(time_limit) },
    }
}

/// What a failed scan means: a stop of our own, a broken limit, a number JSON cannot
/// hold, or malformed YAML.
fn scan_error(
    e: &serde_saphyr::Error,
    scan: &Scan,
    limits: &Limits,
    input_len: usize,
    time_limit: Duration,
) -> ParseError {
    use serde_saphyr::Error as E;
    // The document the scanner was in: one begun and not finished, else the next one.
    let index = if scan.started > scan.finished { scan.started } else { scan.finished + 1 };
    if let Some(stop) = scan.stop {
        return stopped(stop, index, time_limit);
    }
    if let Some(rule) = &scan.refused {
        return ValidationError { document: format!("document {index}"), field: scan.field(), rule: rule.clone() }
            .into();
    }
    let mut inner = e;
    while let E::AliasError { error, .. } | E::WithSnippet { error, .. } = inner {
        inner = error;
    }
    let limit = match inner {
        E::Budget { breach, .. } => Limit::of_breach(breach, limits, input_len),
        E::AliasReplayLimitExceeded { .. } | E::AliasExpansionLimitExceeded { .. } => Limit::Aliases(format!(
            "aliases expand to more than {} nodes",
            serde_saphyr::options::AliasLimits::default().max_total_replayed_events
        )),
        E::AliasReplayStackDepthExceeded { .. } => Limit::Depth(limits.max_depth),
        // The scanner reads ahead of the budget, so deep nesting may reach the parser's own
        // nesting limit (set just above ours) first.
        E::ExternalMessage { msg, .. } if msg.starts_with("recursion limit exceeded") => Limit::Depth(limits.max_depth),
        E::NonFiniteFloat { value, .. } => {
            return ValidationError {
                document: format!("document {index}"),
                field: scan.field(),
                rule: format!(
                    "`{value}` is not a finite number: JSON has no NaN or infinity (quote it to keep it as text)"
                ),
            }
            .into();
        }
        _ => return ParseError::Yaml { index, message: crate::secret::yaml_message_without_values(&e.to_string()) },
    };
    ParseError::Limit { index, limit }
}
