//! Delivering events to notifiers as work: a Notifier's deliveries are a key of the
//! work queue ([`WorkKey::notifier`](fleetsync_model::WorkKey::notifier)), so one
//! process at a time sends its events, under a lease with a fencing token, with the
//! backoff, parking, status and metrics of any key.
//!
//! [`NotifierReconciler`] runs such a key. Its durable cursor is the event consumer
//! [`consumer_name`] (`notifier:TENANT/NAME`): the last event of the tenant's log it
//! is done with. A run reads the events after it, a page at a time, sends each one
//! the notifier's filters take (one POST each, in order), and moves the cursor past
//! each event sent and each one the filters leave out; then it waits for new events
//! for up to [`WATCH`] and sends those (it ends early once the Notifier is changed or
//! deleted), and the key runs again after [`AGAIN`]. A send
//! that fails fails the run, the cursor left before the event: the key retries with
//! backoff, never parked by failed sends (the backoff holds at its cap, so a receiver
//! down for an hour catches up), and the event is sent again — at least once, in
//! order, never skipped. A target the hub's egress policy denies parks the key at once.
//!
//! A notifier's first run starts its cursor at its own `Created` event (or, once that
//! has been trimmed, at the log's head): it sends what happens from its creation on,
//! never the history before it. Its key's removal run (once it is deleted) forgets the
//! cursor, so a notifier created again later starts afresh.
//!
//! No error, log line or status names a secret: a webhook URL is shown without user
//! information or query ([`shown_url`]), a Slack URL (read from its Secret) by its host
//! alone.

use fleetsync_applier::egress::{EgressError, EgressPolicy};
use fleetsync_model::notifier::{render, severity, shown_url, SLACK_URL_KEY};
use fleetsync_model::{Event, Notifier};
use fleetsync_runtime::reconciler::{Action, Context, ReconcileError};
use fleetsync_store::{EventObject, RunOutcome, StoreError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The most events read at once.
pub const PAGE: usize = 100;
/// How long one POST may take, from connecting to the answer.
pub const SEND_TIME: Duration = Duration::from_secs(10);
/// How long a run waits for new events once it has sent all there were.
pub const WATCH: Duration = Duration::from_secs(10);
/// How soon the key runs again after a run that sent everything.
pub const AGAIN: Duration = Duration::from_secs(1);

/// The event consumer whose cursor is the notifier `tenant/name`'s.
pub fn consumer_name(tenant: &str, name: &str) -> String {
    format!("notifier:{tenant}/{name}")
}

/// Why a delivery failed. Never holds a secret part of a URL.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The Slack target's Secret, or its key, is missing or unusable.
    #[error("{0}")]
    Secret(String),
    /// The URL (the Slack Secret's) does not parse as an http(s) URL.
    #[error("the {target} is not an http:// or https:// URL")]
    Url { target: String },
    /// The hub's egress policy denies the target.
    #[error("{target}: {source}")]
    Egress { target: String, source: EgressError },
    /// The target's host name did not resolve.
    #[error("{target}: resolving {host}: {message}")]
    Resolve { target: String, host: String, message: String },
    /// The POST failed before an answer (connection, timeout).
    #[error("sending event {seq} to the {target}: {message}")]
    Send { target: String, seq: u64, message: String },
    /// The target answered with an error status.
    #[error("sending event {seq} to the {target}: HTTP {status}")]
    Status { target: String, seq: u64, status: u16 },
}

/// Runs notifier keys: see the module docs.
#[derive(Debug, Clone)]
pub struct NotifierReconciler {
    egress: Arc<EgressPolicy>,
    client: reqwest::Client,
}

impl NotifierReconciler {
    /// Sends within `egress`: each target's host and every address it resolves to must
    /// be allowed, checked before a run sends (a refusal parks the key) and again at
    /// each connection (a name re-pointed meanwhile is refused); redirects are not
    /// followed.
    pub fn new(egress: Arc<EgressPolicy>) -> Self {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(PolicyDns(egress.clone())))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(SEND_TIME)
            .no_proxy()
            .build()
            .unwrap_or_default();
        Self { egress, client }
    }
}

/// The system's resolver, its answer refused as a whole if the policy denies any
/// address in it: what the client connects with.
struct PolicyDns(Arc<EgressPolicy>);

impl reqwest::dns::Resolve for PolicyDns {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            policy.check_resolved(&host, &addrs)?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// Where a notifier's events go, resolved for this run.
struct Target {
    url: reqwest::Url,
    /// How errors name it: `webhook http://host/path`, `Slack webhook at host`.
    shown: String,
    slack: bool,
}

impl NotifierReconciler {
    pub async fn reconcile(&self, ctx: &Context, name: &str) -> Result<Action, ReconcileError> {
        let tenant = ctx.key().tenant.clone();
        let consumer = consumer_name(&tenant, name);
        let removed = Action::Report { outcome: RunOutcome::Removed, resources: Vec::new() };
        let store = ctx.store();
        let notifier = match ctx.item().desired {
            true => store.notifier_get(&tenant, name).await?,
            false => None,
        };
        let Some(notifier) = notifier else {
            store.consumer_delete(&consumer).await?;
            return Ok(removed);
        };
        let target = match self.target(ctx, &notifier).await {
            Ok(target) => target,
            Err(e @ NotifyError::Egress { .. }) => return Ok(parked(e.to_string())),
            Err(e) => return Err(ReconcileError::Failed(e.to_string())),
        };
        let mut cursor = match store.consumer_get(&consumer).await? {
            Some(seq) => seq,
            None => {
                let start = start(ctx, &tenant, name).await?;
                store.consumer_ack(&consumer, start).await?
            }
        };
        let tenants = [tenant.clone()];
        let until = tokio::time::Instant::now() + WATCH;
        let mut wake = store.events_subscribe();
        loop {
            wake.borrow_and_update();
            let events = match store.events_read_of(&tenants, cursor, PAGE).await {
                Err(StoreError::CursorExpired { horizon, .. }) => {
                    tracing::warn!(notifier = %consumer, cursor, horizon, "events trimmed before they were sent");
                    cursor = store.consumer_ack(&consumer, horizon).await?;
                    continue;
                }
                read => read?,
            };
            for event in &events {
                if notifier.spec.filters.takes(event) {
                    ctx.until_cancelled(self.send(&notifier, &target, event))
                        .await?
                        .map_err(|e| ReconcileError::Failed(e.to_string()))?;
                    cursor = store.consumer_ack(&consumer, event.seq).await?;
                }
            }
            if let Some(last) = events.last().filter(|e| e.seq > cursor) {
                cursor = store.consumer_ack(&consumer, last.seq).await?;
            }
            if events.len() == PAGE {
                continue;
            }
            tokio::select! {
                changed = wake.changed() => if changed.is_err() { return Ok(Action::Requeue(AGAIN)) },
                () = tokio::time::sleep_until(until) => return Ok(Action::Requeue(AGAIN)),
                () = ctx.cancelled().cancelled() => return Err(ReconcileError::Cancelled),
            }
            // Changed or deleted meanwhile: the key runs again at once with what it is now.
            let now = store.notifier_get(&tenant, name).await?;
            if now.is_none_or(|n| n.metadata.generation != notifier.metadata.generation) {
                return Ok(Action::Requeue(AGAIN));
            }
        }
    }

    /// The notifier's URL (a Slack target's from its Secret), its host and every
    /// address it resolves to checked against the egress policy.
    async fn target(&self, ctx: &Context, notifier: &Notifier) -> Result<Target, NotifyError> {
        let (text, shown, slack) = match (&notifier.spec.webhook, &notifier.spec.slack) {
            (Some(w), _) => (w.url.clone(), format!("webhook {}", shown_url(&w.url)), false),
            (None, Some(s)) => {
                let (tenant, secret) = (notifier.metadata.tenant(), &s.secret_ref.name);
                let found = ctx.store().secret_get(tenant, secret).await.map_err(|e| {
                    NotifyError::Secret(format!(
                        "reading the Secret {tenant}/{secret}: {}",
                        fleetsync_model::error::causes(&e)
                    ))
                })?;
                let Some(found) = found else {
                    return Err(NotifyError::Secret(format!("the Secret {tenant}/{secret} it names does not exist")));
                };
                let Some(url) = found.get(SLACK_URL_KEY) else {
                    return Err(NotifyError::Secret(format!("the Secret {tenant}/{secret} has no `{SLACK_URL_KEY}`")));
                };
                let host = reqwest::Url::parse(url.expose()).ok().and_then(|u| u.host_str().map(String::from));
                (url.expose().to_string(), format!("Slack webhook at {}", host.unwrap_or_default()), true)
            }
            (None, None) => return Err(NotifyError::Url { target: "notifier's target".into() }),
        };
        let url = reqwest::Url::parse(&text)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| NotifyError::Url { target: shown.clone() })?;
        let host = url.host_str().unwrap_or_default().to_string();
        let egress = |source| NotifyError::Egress { target: shown.clone(), source };
        self.egress.check_host(&host).map_err(egress)?;
        let port = url.port_or_known_default().unwrap_or(443);
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare.as_str(), port))
            .await
            .map_err(|e| NotifyError::Resolve { target: shown.clone(), host: host.clone(), message: e.to_string() })?
            .collect();
        self.egress.check_resolved(&host, &addrs).map_err(egress)?;
        Ok(Target { url, shown, slack })
    }

    /// One POST of `event`: Slack's `{"text": …}`, or the webhook's JSON of the event
    /// with its severity, the notifier's name and the text.
    async fn send(&self, notifier: &Notifier, target: &Target, event: &Event) -> Result<(), NotifyError> {
        let text = render(notifier.spec.template.as_deref(), event);
        let body = match target.slack {
            true => serde_json::json!({ "text": text }),
            false => serde_json::json!({
                "notifier": notifier.metadata.name,
                "seq": event.seq,
                "at": event.at.to_rfc3339(),
                "tenant": event.tenant,
                "kind": event.kind,
                "name": event.name,
                "action": event.action,
                "generation": event.generation,
                "actor": event.actor,
                "severity": severity(event).as_str(),
                "text": text,
            }),
        };
        let seq = event.seq;
        let sent = self.client.post(target.url.clone()).json(&body).send().await.map_err(|e| NotifyError::Send {
            target: target.shown.clone(),
            seq,
            message: scrub(&fleetsync_model::error::causes(&e.without_url()), target.url.as_str()),
        })?;
        let status = sent.status();
        if !status.is_success() {
            return Err(NotifyError::Status { target: target.shown.clone(), seq, status: status.as_u16() });
        }
        Ok(())
    }
}

/// Where a notifier's cursor starts: at its own newest `Created` event, or at the
/// log's head when that is gone.
async fn start(ctx: &Context, tenant: &str, name: &str) -> Result<u64, StoreError> {
    let store = ctx.store();
    let object = EventObject { tenant: tenant.into(), kind: "Notifier".into(), name: name.into() };
    let created = store.events_of(&object, None, 20).await?.into_iter().find(|e| e.action == "Created");
    match created {
        Some(e) => Ok(e.seq),
        None => store.events_head().await,
    }
}

/// `message` with any trace of `url` (whole, or its query) taken out.
fn scrub(message: &str, url: &str) -> String {
    let mut out = message.replace(url, "<url>");
    if let Some((_, query)) = url.split_once('?') {
        out = out.replace(query, fleetsync_model::secret::REDACTED);
    }
    out
}

/// Parked at once: runs again when the Notifier or the hub changes, or on a retry.
fn parked(error: String) -> Action {
    Action::Report { outcome: RunOutcome::Parked { error }, resources: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_the_url_and_its_query() {
        let url = "https://hooks.example/T0/B0/s3cret?token=abc";
        assert_eq!(
            scrub(&format!("error sending request for url ({url}): refused"), url),
            "error sending request for url (<url>): refused"
        );
        assert_eq!(scrub("bad token=abc", url), "bad <redacted>");
        assert_eq!(consumer_name("t", "ops"), "notifier:t/ops");
    }
}
