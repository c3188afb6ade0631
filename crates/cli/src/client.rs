//! `apply` and `get`: a thin front of the hub's API client ([`fleetsync_api::Client`]),
//! printing its answers for people or scripts; and what the client commands share
//! (errors explained, lists printed).

use crate::args::{ApplyArgs, DryRun, Format, GetArgs, Output, Resource};
use crate::context::connect;
use crate::inputs;
use crate::output::{emit, emit_list, names, NAME_LISTS_OBJECTS_ONLY};
use crate::tables::{self, Columns};
use crate::{details, events};
use crate::{status, tenants};
use anyhow::{anyhow, bail, Result};
use fleetsync::outln;
use fleetsync_api::{describe, first_items, Client, ClientError, PageParams};
use fleetsync_model::Kind;
use serde_json::Value;

/// What to tell the user about a failed call: for an unreachable hub, where to point
/// the client; for an expired event cursor, what to do.
pub(crate) fn explain(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::TimedOut { .. } => anyhow!("{e} (--request-timeout)"),
        ClientError::Unreachable { .. } => {
            anyhow!("{} (is `fleetsync serve` running? set --server or FLEETSYNC_SERVER)", describe(&e))
        }
        ClientError::Refused { status, .. } if status.as_u16() == 401 => anyhow!(
            "{e} (give a token: --token, FLEETSYNC_TOKEN, a context of the config file, or, for a hub on this \
             machine, its admin token file, looked for at {}: run where its database is or set FLEETSYNC_DB \
             to the database's path)",
            crate::context::local_token_file().display()
        ),
        ClientError::CursorExpired { cursor, horizon } => anyhow!(cursor_gone(cursor, horizon)),
        other => other.into(),
    }
}

pub(crate) fn cursor_gone(cursor: u64, horizon: u64) -> String {
    format!(
        "the cursor {cursor} fell off the log (oldest kept is {}): re-list with `fleetsync get events`",
        horizon + 1
    )
}

/// `apply -f`, or with `--dry-run` what it would do: `server`, as the hub answers a dry
/// run (`syncset/web updated (server dry run: generation 2, 3 keys would be
/// enqueued)`); `client`, the objects the files hold, checked here and not sent.
pub async fn apply(a: ApplyArgs) -> Result<()> {
    let (docs, body) = inputs::documents_and_body(inputs::read(&a.files, a.recursive)?)?;
    if a.dry_run == DryRun::Client {
        for doc in &docs {
            outln!(
                "{}/{} valid (client dry run, not sent)",
                doc.kind().as_str().to_ascii_lowercase(),
                doc.metadata().name
            )?;
        }
        return Ok(());
    }
    let hub = connect(&a.conn)?.client;
    if a.dry_run == DryRun::Server {
        for r in hub.apply_dry_run(body).await.map_err(explain)? {
            let kind = r.kind.as_str().to_ascii_lowercase();
            outln!(
                "{kind}/{} {} (server dry run: generation {}, {} keys would be enqueued)",
                r.name,
                r.result,
                r.generation,
                r.enqueued
            )?;
            warn(&kind, &r)?;
        }
        return Ok(());
    }
    for r in hub.apply(body).await.map_err(explain)? {
        let kind = r.kind.as_str().to_ascii_lowercase();
        match &r.staged {
            Some(staged) => outln!("{kind}/{} {} (generation {}, staged: {staged})", r.name, r.result, r.generation)?,
            None => {
                outln!("{kind}/{} {} (generation {}, {} keys enqueued)", r.name, r.result, r.generation, r.enqueued)?
            }
        }
        warn(&kind, &r)?;
    }
    Ok(())
}

/// An apply's warnings on standard error, as kubectl prints them: the apply succeeded.
fn warn(kind: &str, r: &fleetsync_api::ApplyResult) -> std::io::Result<()> {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    for w in &r.warnings {
        writeln!(err, "Warning: {kind}/{} {w}", r.name)?;
    }
    Ok(())
}

/// Prints a list as a `kind: List` in JSON or YAML, or as a table.
pub(crate) fn print_list<T: serde::Serialize>(
    output: &Output,
    header_line: bool,
    items: &[T],
    rows: impl Fn(&[T]) -> std::io::Result<()>,
) -> Result<()> {
    if !emit_list(output, items, header_line)? {
        rows(items)?;
    }
    Ok(())
}

/// Refuses flags given where they do not apply, naming where they do.
fn check_flags(a: &GetArgs) -> Result<()> {
    if a.watch && !matches!(a.resource, Resource::Events | Resource::Status) {
        bail!("--watch applies to `get events` and `get status` only");
    }
    if a.sort_by.is_some()
        && (a.watch || a.name.is_some() || matches!(a.resource, Resource::Events | Resource::Members))
    {
        bail!("--sort-by sorts the lists of `get` (not one object, events, members or --watch)");
    }
    if a.watch && !matches!(a.output, Output::Format(_)) {
        bail!("--watch prints tables, JSON or YAML, not -o jsonpath= or custom-columns=");
    }
    match &a.output {
        Output::JsonPath(template) => drop(fleetsync::jsonpath::template(template)?),
        Output::CustomColumns(spec) => drop(fleetsync::jsonpath::columns(spec)?),
        Output::Format(_) => {}
    }
    if (a.after.is_some() || a.since.is_some()) && !matches!(a.resource, Resource::Events) {
        bail!("--after and --since apply to `get events` only");
    }
    if a.after.is_some() && a.since.is_some() {
        bail!("--after and --since both say where to start: give one");
    }
    if a.selector.is_some()
        && (matches!(a.resource, Resource::Status | Resource::Events | Resource::Members) || a.name.is_some())
    {
        bail!("-l/--selector lists objects (clusters, syncsets, secrets, sources) by their labels: give no name");
    }
    if (a.phase.is_some() || a.stale) && !(matches!(a.resource, Resource::Status) && a.name.is_none()) {
        bail!("--phase and --stale apply to `get status` (without a name) only");
    }
    if a.all_tenants && a.name.is_some() {
        bail!("-A/--all-tenants lists; to get one object by name, give its tenant with -n");
    }
    Ok(())
}

pub async fn get(a: GetArgs) -> Result<()> {
    check_flags(&a)?;
    let object_kinds: &[Kind] = match a.resource {
        Resource::Clusters => &[Kind::Cluster],
        Resource::Syncsets => &[Kind::SyncSet],
        Resource::Secrets => &[Kind::Secret],
        Resource::Sources => &[Kind::GitRepository, Kind::OCIRepository],
        Resource::GitRepositories => &[Kind::GitRepository],
        Resource::OciRepositories => &[Kind::OCIRepository],
        Resource::Notifiers => &[Kind::Notifier],
        Resource::Status | Resource::Members | Resource::Events => &[],
    };
    let object_kind = object_kinds.first().copied();
    if a.output.format() == Format::Name && object_kind.is_none() {
        bail!(NAME_LISTS_OBJECTS_ONLY);
    }
    let conn = connect(&a.conn)?;
    let hub = &conn.client;
    if matches!(a.resource, Resource::Events) {
        return events::get(hub, &a, Columns { no_headers: a.no_headers, ..Columns::default() }).await;
    }
    let per_tenant = object_kind.is_some() || matches!(a.resource, Resource::Status);
    let tenants = match a.all_tenants && per_tenant {
        true => tenants::visible(hub, &conn.tenant).await?,
        false => vec![conn.tenant_or(&a.tenant)],
    };
    let (t, format) = (tenants.first().map_or("", String::as_str), a.output.format());
    let cols = Columns {
        wide: format == Format::Wide,
        tenant: a.all_tenants,
        no_headers: a.no_headers,
        show_labels: a.show_labels,
    };
    match (a.resource, object_kind, &a.name) {
        (_, Some(_), Some(n)) => {
            let object = get_one(hub, object_kinds, t, n).await?;
            if format == Format::Name {
                names(std::slice::from_ref(&object))?;
            } else if !emit(&a.output, &object, !a.no_headers)? {
                let details = details::read(hub, a.resource, std::slice::from_ref(&object), cols.wide).await?;
                tables::objects(a.resource, std::slice::from_ref(&object), cols, &details)?;
            }
            Ok(())
        }
        (_, Some(_), None) => {
            let selector = a.selector.as_deref();
            let mut items = Vec::new();
            for (t, &kind) in tenants.iter().flat_map(|t| object_kinds.iter().map(move |k| (t, k))) {
                let left = a.limit.map(|max| usize::try_from(max).unwrap_or(usize::MAX).saturating_sub(items.len()));
                if left == Some(0) {
                    break;
                }
                let listed = first_items(left, |token| hub.list_page(kind, t, selector, page(a.chunk_size, token)));
                items.extend(listed.await.map_err(explain)?);
            }
            if let Some(path) = &a.sort_by {
                fleetsync::jsonpath::sort_by(&mut items, path)?;
            }
            if format == Format::Name {
                return Ok(names(&items)?);
            }
            let details = match format {
                Format::Table | Format::Wide => details::read(hub, a.resource, &items, cols.wide).await?,
                _ => details::Details::default(),
            };
            print_list(&a.output, !a.no_headers, &items, |items| tables::objects(a.resource, items, cols, &details))
        }
        (Resource::Status, _, _) if a.watch => status::watch(hub, &tenants, &a, cols).await,
        (Resource::Status, _, _) => status::print(hub, &tenants, &a, cols).await,
        _ => print_list(&a.output, !a.no_headers, &hub.members().await.map_err(explain)?, |m| tables::members(m, cols)),
    }
}

/// The object `name` of the first of `kinds` that has one (sources of both kinds share
/// one name space); not found names the first kind.
pub(crate) async fn get_one(hub: &Client, kinds: &[Kind], tenant: &str, name: &str) -> Result<Value> {
    for (i, &kind) in kinds.iter().enumerate() {
        match hub.get(kind, tenant, name).await {
            Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) && i + 1 < kinds.len() => continue,
            found => return found.map_err(explain),
        }
    }
    unreachable!("called with at least one kind")
}

/// The page of `limit` items after the one whose token is `token`.
pub(crate) fn page(limit: u16, token: Option<String>) -> PageParams {
    PageParams { limit: Some(usize::from(limit)), continue_: token }
}
