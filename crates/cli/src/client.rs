//! `apply`, `get` and `delete`: a thin client of the hub's HTTP API.

use crate::args::{ApplyArgs, DeleteArgs, GetArgs, Resource};
use crate::output::{clip, structured, table, text};
use anyhow::{anyhow, bail, Context, Result};
use fleetsync_model::{parse_documents, Kind};
use serde_json::Value;
use std::io::Read;
use std::path::Path;

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
    let resp = req.send().await.map_err(|e| {
        anyhow!("cannot reach the hub at {server}: {e} (is `fleetsync serve` running? set --server or FLEETSYNC_SERVER)")
    })?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let msg = body.get("error").and_then(Value::as_str).unwrap_or("no message");
        bail!("the hub answered {status}: {msg}");
    }
    Ok(body)
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
        (Resource::Events, _) => ("/v1/events?limit=10000".to_string(), false),
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
            &["CLUSTER", "SYNCSET", "PHASE", "GENERATION", "OBSERVED", "ATTEMPTS", "LAST ERROR"],
            &rows(&|k| {
                vec![
                    text(&k["cluster"]),
                    text(&k["syncset"]),
                    text(&k["phase"]),
                    text(&k["generation"]),
                    text(&k["observedGeneration"]),
                    text(&k["attempts"]),
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
