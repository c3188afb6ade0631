//! `apply`, `get` and `delete`: a thin client of the hub's HTTP API.

use crate::args::{ApplyArgs, DeleteArgs, Format, GetArgs, Resource};
use crate::output::{clip, structured, table, text};
use anyhow::{anyhow, bail, Context, Result};
use fleetsync_model::{parse_documents, Kind};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

fn read_input(path: &Path) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Sends a request; returns the JSON body of a 2xx answer, or an error carrying the
/// hub's own message.
async fn send(server: &str, req: reqwest::RequestBuilder) -> Result<Value> {
    let resp = req.send().await.map_err(|e| unreachable(server, &e))?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!(refusal(status, &body));
    }
    Ok(body)
}

/// What to tell the user about an error answer; for an expired event cursor, what to do.
fn refusal(status: reqwest::StatusCode, body: &Value) -> String {
    if let (reqwest::StatusCode::GONE, Some(cursor), Some(horizon)) = (status, body["cursor"].as_u64(), body["horizon"].as_u64()) {
        return cursor_gone(cursor, horizon);
    }
    let msg = body.get("error").and_then(Value::as_str).unwrap_or("no message");
    format!("the hub answered {status}: {msg}")
}

fn cursor_gone(cursor: u64, horizon: u64) -> String {
    format!("the cursor {cursor} fell off the log (oldest kept is {}): re-list with `fleetsync get events`", horizon + 1)
}

fn unreachable(server: &str, e: &reqwest::Error) -> anyhow::Error {
    anyhow!("cannot reach the hub at {server}: {e} (is `fleetsync serve` running? set --server or FLEETSYNC_SERVER)")
}

pub async fn apply(server: &str, a: ApplyArgs) -> Result<()> {
    let body = read_input(&a.file)?;
    // Validate here first: a bad file fails fast, without a hub, naming the problem.
    parse_documents(&body).map_err(|e| anyhow!("{}: {e}", a.file.display()))?;
    let req = http().post(format!("{server}/v1/apply")).header("content-type", "application/yaml").body(body);
    let body = send(server, req).await?;
    for r in body["results"].as_array().into_iter().flatten() {
        let kind = text_lower(&r["kind"]);
        println!("{kind}/{} {} (generation {}, {} keys enqueued)", text(&r["name"]), text(&r["result"]), r["generation"], r["enqueued"]);
    }
    Ok(())
}

fn text_lower(v: &Value) -> String {
    text(v).to_ascii_lowercase()
}

pub async fn get(server: &str, a: GetArgs) -> Result<()> {
    if (a.watch || a.after.is_some()) && !matches!(a.resource, Resource::Events) {
        bail!("--watch and --after apply to `get events` only");
    }
    if a.watch {
        return watch_events(server, a.after, a.output).await;
    }
    let t = &a.tenant;
    let (path, name) = match (a.resource, &a.name) {
        (Resource::Clusters, None) => (format!("/v1/clusters?tenant={t}"), false),
        (Resource::Clusters, Some(n)) => (format!("/v1/clusters/{n}?tenant={t}"), true),
        (Resource::Syncsets, None) => (format!("/v1/syncsets?tenant={t}"), false),
        (Resource::Syncsets, Some(n)) => (format!("/v1/syncsets/{n}?tenant={t}"), true),
        (Resource::Secrets, None) => (format!("/v1/secrets?tenant={t}"), false),
        (Resource::Secrets, Some(n)) => (format!("/v1/secrets/{n}?tenant={t}"), true),
        (Resource::Status, None) => (format!("/v1/status?tenant={t}"), false),
        (Resource::Status, Some(n)) => (format!("/v1/status/clusters/{n}?tenant={t}"), true),
        (Resource::Members, _) => ("/v1/members".to_string(), false),
        (Resource::Events, _) => (format!("/v1/events?limit=10000{}", a.after.map(|c| format!("&after={c}")).unwrap_or_default()), false),
    };
    let body = send(server, http().get(format!("{server}{path}"))).await?;
    if structured(a.output, &body)? {
        return Ok(());
    }
    let items: Vec<Value> = match (name, a.resource) {
        (true, Resource::Status) => {
            let c = &body["condition"];
            println!("cluster {}: ready={} reason={} ({})", text(&body["cluster"]), c["ready"], text(&c["reason"]), text(&c["message"]));
            body["syncsets"].as_array().cloned().unwrap_or_default()
        }
        (true, _) => vec![body],
        (false, _) => body["items"].as_array().cloned().unwrap_or_default(),
    };
    print_table(a.resource, &items);
    Ok(())
}

fn print_table(resource: Resource, items: &[Value]) {
    let rows = |f: &dyn Fn(&Value) -> Vec<String>| items.iter().map(f).collect::<Vec<_>>();
    match resource {
        Resource::Clusters => table(
            &["NAME", "GENERATION", "ENDPOINT", "LABELS"],
            &rows(&|c| {
                let ep = c["spec"]["endpoint"].as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_default();
                let labels = c["metadata"]["labels"].as_object().map(|l| {
                    l.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(",")
                });
                vec![text(&c["metadata"]["name"]), text(&c["metadata"]["generation"]), ep, labels.unwrap_or_default()]
            }),
        ),
        Resource::Syncsets => table(
            &["NAME", "GENERATION", "MODE", "RESOURCES"],
            &rows(&|s| {
                let n = s["spec"]["resources"].as_array().map_or(0, Vec::len);
                let mode = s["spec"].get("resourceApplyMode").map_or("Upsert".into(), text);
                vec![text(&s["metadata"]["name"]), text(&s["metadata"]["generation"]), mode, n.to_string()]
            }),
        ),
        Resource::Secrets => table(
            &["NAME", "GENERATION", "KEYS"],
            &rows(&|s| {
                let keys = s["stringData"].as_object().map(|d| d.keys().cloned().collect::<Vec<_>>().join(","));
                vec![text(&s["metadata"]["name"]), text(&s["metadata"]["generation"]), keys.unwrap_or_default()]
            }),
        ),
        Resource::Members => table(
            &["MEMBER", "SHARDS", "IN-FLIGHT", "HEARTBEAT", "STARTED"],
            &rows(&|m| {
                ["id", "shards", "inFlight", "heartbeatAt", "startedAt"].iter().map(|f| text(&m[*f])).collect()
            }),
        ),
        Resource::Status => table(
            &["CLUSTER", "SYNCSET", "PHASE", "GENERATION", "OBSERVED", "ATTEMPTS", "DRIFT", "LAST ERROR"],
            &rows(&|k| {
                vec![
                    text(&k["cluster"]),
                    text(&k["syncset"]),
                    text(&k["phase"]),
                    text(&k["generation"]),
                    text(&k["observedGeneration"]),
                    text(&k["attempts"]),
                    k["drift"].as_array().map_or(0, Vec::len).to_string(),
                    clip(text(&k["lastError"]), 60),
                ]
            }),
        ),
        Resource::Events => table(
            &["SEQ", "AT", "TENANT", "KIND", "NAME", "ACTION", "GENERATION"],
            &rows(&|e| {
                ["seq", "at", "tenant", "kind", "name", "action", "generation"].iter().map(|f| text(&e[*f])).collect()
            }),
        ),
    }
}

/// Columns of the event table, and the width each is padded to when streaming (rows
/// are printed as they come, so widths cannot be measured first).
const EVENT_COLUMNS: [(&str, &str, usize); 7] = [
    ("SEQ", "seq", 8),
    ("AT", "at", 24),
    ("TENANT", "tenant", 10),
    ("KIND", "kind", 8),
    ("NAME", "name", 28),
    ("ACTION", "action", 9),
    ("GENERATION", "generation", 0),
];

/// First delay before reconnecting a watch; doubles up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// How a watch stream ended.
enum Ended {
    /// The stream ended or broke (hub shutting down or gone, store failure): reconnect.
    Closed(String),
    /// The cursor fell off the log.
    Gone(String),
    /// Standard output is closed (e.g. piped into `head`): stop quietly.
    StdoutClosed,
}

/// `get events --watch`: prints the log from the cursor, then each event as the hub
/// commits it, until interrupted. When the stream ends (the hub restarts) it
/// reconnects from the last cursor it saw, so nothing is missed or printed twice. Fails
/// when the hub cannot be reached at first, or when the cursor fell off the log.
async fn watch_events(server: &str, after: Option<u64>, format: Format) -> Result<()> {
    let mut printer = EventPrinter { format, header_done: false };
    let mut cursor = after;
    let mut connected = false;
    let mut backoff = RECONNECT_MIN;
    loop {
        let url = format!("{server}/v1/events?watch=true{}", cursor.map(|c| format!("&after={c}")).unwrap_or_default());
        let resp = match http().get(&url).send().await {
            Ok(resp) => resp,
            Err(e) if !connected => return Err(unreachable(server, &e)),
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_MAX);
                continue;
            }
        };
        let status = resp.status();
        if !status.is_success() {
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            if status.is_server_error() && connected {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_MAX);
                continue;
            }
            bail!(refusal(status, &body));
        }
        connected = true;
        backoff = RECONNECT_MIN;
        match follow(resp, &mut cursor, &mut printer).await {
            Ended::Gone(msg) => bail!(msg),
            Ended::StdoutClosed => return Ok(()),
            Ended::Closed(why) => {
                let from = cursor.map_or("the start".to_string(), |c| format!("seq {c}"));
                eprintln!("watch: {why}; reconnecting after {from}");
            }
        }
    }
}

/// Reads one watch stream to its end, printing events and advancing `cursor`.
async fn follow(mut resp: reqwest::Response, cursor: &mut Option<u64>, printer: &mut EventPrinter) -> Ended {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ended::Closed("the hub ended the stream".into()),
            Err(e) => return Ended::Closed(format!("the stream broke ({e})")),
        };
        buf.extend_from_slice(&chunk);
        let mut stdout = std::io::stdout().lock();
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                return Ended::Closed(format!("the hub sent a line that is not JSON: {}", String::from_utf8_lossy(&line).trim_end()));
            };
            match v["type"].as_str() {
                Some("EVENT") => {
                    if printer.print(&mut stdout, &v["event"]).is_err() {
                        return Ended::StdoutClosed;
                    }
                    *cursor = v["event"]["seq"].as_u64().or(*cursor);
                }
                Some("BOOKMARK") => *cursor = v["seq"].as_u64().or(*cursor),
                Some("ERROR") if v["code"].as_u64() == Some(410) => {
                    let (c, h) = (v["cursor"].as_u64().unwrap_or_default(), v["horizon"].as_u64().unwrap_or_default());
                    return Ended::Gone(cursor_gone(c, h));
                }
                Some("ERROR") => return Ended::Closed(format!("the hub reported: {}", text(&v["error"]))),
                _ => {} // unknown line types are for newer clients
            }
        }
        if stdout.flush().is_err() {
            return Ended::StdoutClosed;
        }
    }
}

/// Prints events one at a time: table rows under a header printed once, or one JSON
/// object per line, or YAML documents.
struct EventPrinter {
    format: Format,
    header_done: bool,
}

impl EventPrinter {
    fn print(&mut self, out: &mut impl Write, event: &Value) -> std::io::Result<()> {
        match self.format {
            Format::Json => writeln!(out, "{event}"),
            Format::Yaml => write!(out, "---\n{}", serde_yaml_ng::to_string(event).unwrap_or_default()),
            Format::Table => {
                if !self.header_done {
                    self.header_done = true;
                    let header: Vec<String> = EVENT_COLUMNS.iter().map(|(h, _, _)| h.to_string()).collect();
                    writeln!(out, "{}", padded(&header))?;
                }
                let cells: Vec<String> = EVENT_COLUMNS.iter().map(|(_, f, _)| text(&event[*f])).collect();
                writeln!(out, "{}", padded(&cells))
            }
        }
    }
}

fn padded(cells: &[String]) -> String {
    let cols = cells.iter().zip(EVENT_COLUMNS).map(|(c, (_, _, w))| format!("{c:<w$}")).collect::<Vec<_>>();
    cols.join("  ").trim_end().to_string()
}

pub async fn delete(server: &str, a: DeleteArgs) -> Result<()> {
    let targets: Vec<(Kind, String, String)> = match (&a.file, &a.kind, &a.name) {
        (Some(file), _, _) => {
            let text = read_input(file)?;
            let docs = parse_documents(&text).map_err(|e| anyhow!("{}: {e}", file.display()))?;
            docs.iter().map(|d| (d.kind(), d.metadata().tenant().to_string(), d.metadata().name.clone())).collect()
        }
        (None, Some(kind), Some(name)) => {
            let kind = Kind::parse(kind).ok_or_else(|| anyhow!("unknown kind {kind:?}: use cluster, syncset or secret"))?;
            vec![(kind, a.tenant.clone(), name.clone())]
        }
        _ => bail!("say what to delete: `delete cluster NAME`, `delete syncset NAME`, `delete secret NAME` or `delete -f FILE`"),
    };
    let mut failed = 0;
    for (kind, tenant, name) in targets {
        let plural = match kind {
            Kind::Cluster => "clusters",
            Kind::SyncSet => "syncsets",
            Kind::Secret => "secrets",
        };
        let url = format!("{server}/v1/{plural}/{name}?tenant={tenant}");
        match send(server, http().delete(url)).await {
            Ok(_) => println!("{}/{name} deleted", kind.as_str().to_ascii_lowercase()),
            Err(e) => {
                eprintln!("error: {}/{name}: {e:#}", kind.as_str().to_ascii_lowercase());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} deletion(s) failed");
    }
    Ok(())
}
