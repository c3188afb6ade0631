//! Notifications: the `Notifier` document (where each event of its tenant's log is
//! sent, which events, and in what words), and the pure rules of delivery: an event's
//! [`Severity`], whether a notifier's filters take an event ([`NotifierFilters::takes`]),
//! the text a template makes of it ([`render`]), and the URL as it may be shown
//! ([`shown_url`]).

use crate::document::ObjectMeta;
use crate::error::FieldError;
use crate::event::Event;
use crate::key::WorkKey;
use crate::names::check_dns1123_label;
use crate::source::LocalRef;
use serde::{Deserialize, Serialize};

/// A `Notifier` document: every event of its namespace that its filters take, sent in
/// order, at least once, to a generic webhook (a JSON POST) or a Slack-compatible
/// incoming webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notifier {
    pub metadata: ObjectMeta,
    pub spec: NotifierSpec,
}

/// Where events go, which ones, and in what words.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotifierSpec {
    /// A generic JSON POST of each event. Exactly one of `webhook` and `slack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookTarget>,
    /// A Slack-compatible incoming webhook, its URL in a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackTarget>,
    /// The text of each notification (Slack's `text`, the webhook body's `text`), with
    /// placeholders among [`PLACEHOLDERS`] (`{{kind}} {{name}} {{action}}`); none:
    /// [`DEFAULT_TEMPLATE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Which events: all of them when empty.
    #[serde(default, skip_serializing_if = "NotifierFilters::is_empty")]
    pub filters: NotifierFilters,
}

/// A generic webhook: `http://` or `https://`, no user information (a token may be in
/// the query, which is never shown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookTarget {
    pub url: String,
}

/// A Slack-compatible incoming webhook: the Secret `secretRef` names holds its URL
/// under [`SLACK_URL_KEY`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlackTarget {
    pub secret_ref: LocalRef,
}

/// The key of a Slack target's Secret that holds the incoming webhook's URL.
pub const SLACK_URL_KEY: &str = "address";

/// Which events a notifier sends: those of one of `kinds` (none: any), about one of
/// `syncSets` (none: any object), of at least `severity` (none: `info`, every event).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotifierFilters {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_sets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
}

/// How much an event matters: see [`severity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Error => "error",
        }
    }
}

/// The kinds of event the log holds, which `filters.kinds` may name.
pub const EVENT_KINDS: [&str; 8] =
    ["Cluster", "SyncSet", "Secret", "GitRepository", "OCIRepository", "Notifier", "Status", "Rollout"];
/// The placeholders a template may use, each written `{{name}}`.
pub const PLACEHOLDERS: [&str; 9] =
    ["tenant", "kind", "name", "action", "generation", "seq", "at", "actor", "severity"];
/// The text of a notifier without a template.
pub const DEFAULT_TEMPLATE: &str =
    "[{{severity}}] {{kind}} {{tenant}}/{{name}}: {{action}} (generation {{generation}})";

/// The longest webhook URL and template, in bytes; the most kinds and SyncSets a filter names.
pub const MAX_URL: usize = 2048;
pub const MAX_TEMPLATE: usize = 1024;
pub const MAX_KINDS: usize = EVENT_KINDS.len();
pub const MAX_SYNCSETS: usize = 64;

/// An event's severity, the one rule every filter and notification reads: `error` for
/// a key that failed (`Status` events `Failed` and `Parked`) and a rollout that
/// failed or rolled back (`Rollout` events `Failed` and `RolledBack`); `info` for
/// every other event.
pub fn severity(event: &Event) -> Severity {
    match (event.kind.as_str(), event.action.as_str()) {
        ("Status", "Failed" | "Parked") | ("Rollout", "Failed" | "RolledBack") => Severity::Error,
        _ => Severity::Info,
    }
}

/// Whether `event` is the status of a notifier's own delivery key: never sent (a
/// notifier's failures are in its status and metrics, and sending its own runs would
/// make an event of each send).
pub fn is_delivery_status(event: &Event) -> bool {
    event.kind == "Status"
        && event.name.split_once('/').is_some_and(|(cluster, syncset)| {
            WorkKey { tenant: event.tenant.clone(), cluster: cluster.into(), syncset: syncset.into() }
                .notifier_name()
                .is_some()
        })
}

impl NotifierFilters {
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.sync_sets.is_empty() && self.severity.is_none()
    }

    /// Whether the notifier sends `event`: its kind is one of `kinds`, it is about one
    /// of `syncSets` (a SyncSet or Rollout event of that name, or a Status event of one
    /// of its keys), and its severity is at least `severity`. The status of a delivery
    /// key ([`is_delivery_status`]) is never taken.
    pub fn takes(&self, event: &Event) -> bool {
        if is_delivery_status(event) {
            return false;
        }
        let kind = self.kinds.is_empty() || self.kinds.contains(&event.kind);
        let syncset = match event.kind.as_str() {
            "SyncSet" | "Rollout" => Some(event.name.as_str()),
            "Status" => event.name.split_once('/').map(|(_, s)| s),
            _ => None,
        };
        let about =
            self.sync_sets.is_empty() || syncset.is_some_and(|s| self.sync_sets.iter().any(|n| n.as_str() == s));
        kind && about && severity(event) >= self.severity.unwrap_or(Severity::Info)
    }

    fn validate(&self) -> Result<(), FieldError> {
        if self.kinds.len() > MAX_KINDS {
            return Err(FieldError::new("kinds", format!("at most {MAX_KINDS} kinds")));
        }
        for (i, k) in self.kinds.iter().enumerate() {
            if !EVENT_KINDS.contains(&k.as_str()) {
                let known = EVENT_KINDS.join(", ");
                return Err(FieldError::new(
                    format!("kinds[{i}]"),
                    format!("unknown event kind {k:?}: one of {known}"),
                ));
            }
        }
        if self.sync_sets.len() > MAX_SYNCSETS {
            return Err(FieldError::new("syncSets", format!("at most {MAX_SYNCSETS} SyncSets")));
        }
        for (i, s) in self.sync_sets.iter().enumerate() {
            check_dns1123_label(s).map_err(|rule| FieldError::new(format!("syncSets[{i}]"), rule.to_string()))?;
        }
        Ok(())
    }
}

impl NotifierSpec {
    /// Checks every rule; the first broken one, with its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        match (&self.webhook, &self.slack) {
            (Some(w), None) => check_webhook_url(&w.url).map_err(|e| e.at("webhook.url"))?,
            (None, Some(s)) => check_dns1123_label(&s.secret_ref.name)
                .map_err(|rule| FieldError::new("slack.secretRef.name", rule.to_string()))?,
            _ => return Err(FieldError::message("exactly one of webhook and slack")),
        }
        if let Some(t) = &self.template {
            check_template(t).map_err(|e| e.at("template"))?;
        }
        self.filters.validate().map_err(|e| e.under("filters"))
    }

    /// What the notifier sends to, for tables: `webhook HOST` or `slack`.
    pub fn target(&self) -> String {
        match &self.webhook {
            Some(w) => format!(
                "webhook {}",
                url::Url::parse(&w.url).ok().and_then(|u| u.host_str().map(String::from)).unwrap_or_default()
            ),
            None => "slack".into(),
        }
    }
}

impl Notifier {
    /// The notifier as it may be shown: its webhook URL's query (where a token may
    /// be) replaced by [`REDACTED`](crate::secret::REDACTED).
    pub fn redacted(&self) -> Notifier {
        let mut shown = self.clone();
        if let Some(w) = &mut shown.spec.webhook {
            w.url = shown_url(&w.url);
        }
        shown
    }
}

/// A URL as it may be shown (errors, logs, status, the API): no user information, and
/// its query, if any, [`REDACTED`](crate::secret::REDACTED). A URL that does not parse
/// is shown as `<invalid URL>`.
pub fn shown_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else { return "<invalid URL>".into() };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_fragment(None);
    let query = u.query().is_some();
    u.set_query(None);
    match query {
        true => format!("{u}?{}", crate::secret::REDACTED),
        false => u.to_string(),
    }
}

fn check_webhook_url(url: &str) -> Result<(), FieldError> {
    if url.len() > MAX_URL || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(FieldError::message(format!("at most {MAX_URL} characters, no spaces or control characters")));
    }
    if url.contains(crate::secret::REDACTED) {
        return Err(FieldError::message(crate::secret::REDACTED_APPLIED));
    }
    let parsed = url::Url::parse(url).map_err(|e| FieldError::message(format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(FieldError::message("an http:// or https:// URL"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(FieldError::message("no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(FieldError::message("credentials before the host: put a token in the query, which is never shown"));
    }
    Ok(())
}

/// A template: at most [`MAX_TEMPLATE`] bytes, every `{{…}}` one of [`PLACEHOLDERS`].
fn check_template(template: &str) -> Result<(), FieldError> {
    if template.len() > MAX_TEMPLATE {
        return Err(FieldError::message(format!("at most {MAX_TEMPLATE} bytes")));
    }
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start..].find("}}") else { return Err(FieldError::message("a `{{` without `}}`")) };
        let name = rest[start + 2..start + end].trim();
        if !PLACEHOLDERS.contains(&name) {
            let known = PLACEHOLDERS.join(", ");
            return Err(FieldError::message(format!("unknown placeholder {{{{{name}}}}}: one of {known}")));
        }
        rest = &rest[start + end + 2..];
    }
    Ok(())
}

/// The text `template` (none: [`DEFAULT_TEMPLATE`]) makes of `event`: each placeholder
/// replaced by the event's value (`actor` by `-` when there is none).
pub fn render(template: Option<&str>, event: &Event) -> String {
    let mut out = String::new();
    let mut rest = template.unwrap_or(DEFAULT_TEMPLATE);
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start..].find("}}") else { break };
        out.push_str(&rest[..start]);
        let value = match rest[start + 2..start + end].trim() {
            "tenant" => event.tenant.clone(),
            "kind" => event.kind.clone(),
            "name" => event.name.clone(),
            "action" => event.action.clone(),
            "generation" => event.generation.to_string(),
            "seq" => event.seq.to_string(),
            "at" => event.at.to_rfc3339(),
            "actor" => event.actor.clone().unwrap_or_else(|| "-".into()),
            "severity" => severity(event).as_str().into(),
            other => format!("{{{{{other}}}}}"),
        };
        out.push_str(&value);
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn event(kind: &str, name: &str, action: &str) -> Event {
        let (kind, name, action) = (kind.into(), name.into(), action.into());
        Event { seq: 7, at: Timestamp(0), tenant: "t".into(), kind, name, action, generation: 3, actor: None }
    }

    fn spec(yaml: &str) -> Result<NotifierSpec, String> {
        let spec: NotifierSpec = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }

    #[test]
    fn severity_is_error_for_failed_keys_and_failed_or_rolled_back_rollouts() {
        for (kind, action) in
            [("Status", "Failed"), ("Status", "Parked"), ("Rollout", "RolledBack"), ("Rollout", "Failed")]
        {
            assert_eq!(severity(&event(kind, "c/s", action)), Severity::Error, "{kind} {action}");
        }
        for (kind, action) in
            [("Status", "Applied"), ("Status", "Retry"), ("Rollout", "Completed"), ("SyncSet", "Failed")]
        {
            assert_eq!(severity(&event(kind, "c/s", action)), Severity::Info, "{kind} {action}");
        }
    }

    #[test]
    fn filters_take_kinds_syncsets_and_severity() {
        let all = NotifierFilters::default();
        assert!(all.takes(&event("Cluster", "c1", "Created")));
        let f = NotifierFilters { kinds: vec!["Status".into(), "SyncSet".into()], ..Default::default() };
        assert!(f.takes(&event("Status", "c1/web", "Applied")) && !f.takes(&event("Cluster", "c1", "Created")));
        let f = NotifierFilters { sync_sets: vec!["web".into()], ..Default::default() };
        assert!(f.takes(&event("Status", "c1/web", "Applied")));
        assert!(f.takes(&event("SyncSet", "web", "Updated")) && f.takes(&event("Rollout", "web", "Completed")));
        assert!(!f.takes(&event("Status", "c1/api", "Applied")) && !f.takes(&event("Cluster", "web", "Created")));
        let f = NotifierFilters { severity: Some(Severity::Error), ..Default::default() };
        assert!(f.takes(&event("Status", "c1/web", "Parked")) && !f.takes(&event("Status", "c1/web", "Applied")));
        assert!(!all.takes(&event("Status", "notifier:n/notifier:n", "Failed")), "a delivery key's own status");
    }

    #[test]
    fn templates_render_each_placeholder() {
        let e = Event { actor: Some("token:ci".into()), ..event("SyncSet", "web", "Updated") };
        assert_eq!(
            render(Some("{{kind}} {{ name }} {{action}} by {{actor}} #{{seq}}"), &e),
            "SyncSet web Updated by token:ci #7"
        );
        assert_eq!(render(None, &e), "[info] SyncSet t/web: Updated (generation 3)");
        assert_eq!(render(Some("{{kind}} {{"), &e), "SyncSet {{");
    }

    #[test]
    fn specs_need_one_target_a_clean_url_and_known_placeholders_and_kinds() {
        assert!(spec("webhook: {url: 'https://hooks.example/x?token=s3cret'}").is_ok());
        assert!(spec("slack: {secretRef: {name: slack}}\ntemplate: '{{kind}} {{name}}'").is_ok());
        let bad = [
            ("{}", "exactly one of webhook and slack"),
            ("{webhook: {url: 'https://h/'}, slack: {secretRef: {name: s}}}", "exactly one"),
            ("webhook: {url: 'ftp://h/x'}", "webhook.url: an http:// or https:// URL"),
            ("webhook: {url: 'https://u:p@h/x'}", "webhook.url: credentials"),
            ("webhook: {url: 'https://h/x?<redacted>'}", "webhook.url"),
            ("slack: {secretRef: {name: Bad_Name}}", "slack.secretRef.name"),
            ("{webhook: {url: 'https://h/'}, template: '{{secret}}'}", "template: unknown placeholder {{secret}}"),
            ("{webhook: {url: 'https://h/'}, filters: {kinds: [Pod]}}", "filters.kinds[0]: unknown event kind"),
            ("{webhook: {url: 'https://h/'}, filters: {severity: warn}}", "severity"),
        ];
        for (yaml, want) in bad {
            let e = spec(yaml).expect_err(yaml);
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let long = format!("{{webhook: {{url: 'https://h/'}}, template: '{}'}}", "x".repeat(MAX_TEMPLATE + 1));
        assert!(spec(&long).expect_err("long").contains("at most 1024 bytes"));
    }

    #[test]
    fn urls_are_shown_without_credentials_or_query() {
        assert_eq!(
            shown_url("https://u:p@hooks.example:8443/a/b?token=s3cret#f"),
            "https://hooks.example:8443/a/b?<redacted>"
        );
        assert_eq!(shown_url("http://127.0.0.1:9/hook"), "http://127.0.0.1:9/hook");
        let spec = spec("webhook: {url: 'https://hooks.example/x?token=s3cret'}").expect("valid");
        assert_eq!(spec.target(), "webhook hooks.example");
    }
}
