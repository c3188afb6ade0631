//! The publisher process of the RabbitMQ baseline: the ClusterSync controller's part.
//! It publishes one message per (cluster, SyncSet) of the fleet, says
//! `published N` on stdout, then takes commands on stdin, one a line: `churn` (edit
//! the churned SyncSets: tell the consumers' caches through the fanout, then publish
//! their (cluster, SyncSet) pairs again; says `churned N`) and `stop`. With
//! `--dlq-scan`, it also moves the dead-letter queue back to the work queue that
//! often (the proposal's scanner). Every publish is confirmed by the broker.
//! Its counts are its last line on stdout, as JSON.

use super::{connect, edited, properties, syncset_index, Edit, Names, Work, TENANT};
use anyhow::{bail, Context, Result};
use fleetsync_testkit::{cluster_name, syncset_name};
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel};
use serde::Serialize;
use std::io::{BufRead, Write};
use std::time::Duration;
use tokio::sync::mpsc;

/// Publishes in batches of this many, then waits for their confirms.
const CONFIRM_BATCH: usize = 1000;

#[derive(Debug, clap::Args)]
pub struct PublisherArgs {
    #[arg(long)]
    pub amqp_url: String,
    #[command(flatten)]
    pub names: Names,
    #[arg(long)]
    pub clusters: usize,
    #[arg(long)]
    pub syncsets: usize,
    /// Move the dead-letter queue back to the work queue this often.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub dlq_scan: Option<Duration>,
}

#[derive(Debug, Default, Serialize)]
struct Counts {
    published: u64,
    moved_back: u64,
}

pub async fn run(a: PublisherArgs) -> Result<()> {
    let conn = connect(&a.amqp_url).await?;
    let channel = conn.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let mut counts = Counts::default();
    let pairs = (0..a.clusters).flat_map(|c| (0..a.syncsets).map(move |s| (c, s)));
    counts.published += publish_work(&channel, &a.names, pairs, 1).await?;
    say(&format!("published {}", counts.published))?;

    let mut commands = stdin_lines();
    let mut scan = tokio::time::interval(a.dlq_scan.unwrap_or(Duration::from_secs(3600)));
    scan.tick().await;
    loop {
        tokio::select! {
            line = commands.recv() => match line.as_deref().map(str::trim) {
                Some("churn") => {
                    let n = churn(&channel, &a).await?;
                    counts.published += n;
                    say(&format!("churned {n}"))?;
                }
                Some("stop") | None => break,
                Some(other) => bail!("unknown command {other:?}"),
            },
            _ = scan.tick(), if a.dlq_scan.is_some() => counts.moved_back += move_back(&channel, &a.names).await?,
        }
    }
    say(&serde_json::to_string(&counts)?)?;
    Ok(())
}

/// The edit: every churned SyncSet at generation 2, told to the consumers' caches
/// first, then its pairs published again.
async fn churn(channel: &Channel, a: &PublisherArgs) -> Result<u64> {
    let changed: Vec<usize> = (0..a.syncsets).filter(|s| edited(*s)).collect();
    for s in &changed {
        let body = serde_json::to_vec(&Edit { syncset: *s, generation: 2 })?;
        let props = BasicProperties::default().with_delivery_mode(2);
        channel
            .basic_publish(a.names.exchange.as_str().into(), "".into(), BasicPublishOptions::default(), &body, props)
            .await?;
    }
    channel.wait_for_confirms().await?;
    let pairs = (0..a.clusters).flat_map(|c| changed.iter().map(move |s| (c, *s)));
    publish_work(channel, &a.names, pairs, 2).await
}

/// Publishes one message per pair, confirmed in batches; returns how many.
async fn publish_work(
    channel: &Channel,
    names: &Names,
    pairs: impl Iterator<Item = (usize, usize)>,
    generation: i64,
) -> Result<u64> {
    let mut n = 0u64;
    for (c, s) in pairs {
        let work = Work { tenant: TENANT.into(), cluster: cluster_name(c), syncset: syncset_name(s), generation };
        let body = serde_json::to_vec(&work)?;
        channel
            .basic_publish("".into(), names.queue.as_str().into(), BasicPublishOptions::default(), &body, properties(0))
            .await
            .context("publishing")?;
        n += 1;
        if n.is_multiple_of(CONFIRM_BATCH as u64) {
            confirmed(channel).await?;
        }
    }
    confirmed(channel).await?;
    Ok(n)
}

async fn confirmed(channel: &Channel) -> Result<()> {
    let returned = channel.wait_for_confirms().await.context("waiting for the broker's confirms")?;
    if !returned.is_empty() {
        bail!("the broker returned {} messages", returned.len());
    }
    Ok(())
}

/// The scanner: every message of the dead-letter queue back to the work queue, with
/// a fresh count of attempts.
async fn move_back(channel: &Channel, names: &Names) -> Result<u64> {
    let mut moved = 0;
    while let Some(m) = channel.basic_get(names.dlq.as_str().into(), BasicGetOptions::default()).await? {
        let d = m.delivery;
        let valid = serde_json::from_slice::<Work>(&d.data).ok().filter(|w| syncset_index(&w.syncset).is_some());
        if valid.is_some() {
            channel
                .basic_publish(
                    "".into(),
                    names.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    &d.data,
                    properties(0),
                )
                .await?;
            confirmed(channel).await?;
            moved += 1;
        }
        d.ack(BasicAckOptions::default()).await?;
    }
    Ok(moved)
}

/// Lines of stdin, read on a thread of their own (`None` at its end).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}
