//! Worker processes and their heartbeats.

use super::{query, PgResult, Tx};
use crate::{Member, MemberBeat};
use deadpool_postgres::GenericClient;
use fleetsync_model::Timestamp;
use tokio_postgres::Row;

const LIVE: &str = "SELECT id, started_at, heartbeat_at, expires_at, in_flight, max_in_flight FROM members WHERE expires_at > $1 ORDER BY id";

pub(super) async fn heartbeat(tx: &mut Tx<'_>, beat: MemberBeat) -> PgResult<Vec<Member>> {
    let now = tx.now.millis();
    let expires = tx.now.plus(beat.ttl).millis();
    let in_flight = i64::try_from(beat.in_flight).unwrap_or(i64::MAX);
    let max_in_flight = i64::try_from(beat.max_in_flight).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO members (id, started_at, heartbeat_at, expires_at, in_flight, max_in_flight) VALUES ($1, $2, $2, $3, $4, $5)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = $2, expires_at = $3, in_flight = $4, max_in_flight = $5",
        &[&beat.id, &now, &expires, &in_flight, &max_in_flight],
    )
    .await?;
    tx.execute("DELETE FROM members WHERE expires_at <= $1", &[&now]).await?;
    // The keys' counts are folded here: every process beats every few seconds.
    super::counts::fold(tx).await?;
    tx.query(LIVE, &[&now]).await?.iter().map(member).collect()
}

pub(super) async fn leave(tx: &mut Tx<'_>, id: String) -> PgResult<()> {
    tx.execute("DELETE FROM members WHERE id = $1", &[&id]).await?;
    Ok(())
}

pub(super) async fn list<C: GenericClient>(c: &C, now: Timestamp) -> PgResult<Vec<Member>> {
    query(c, LIVE, &[&now.millis()]).await?.iter().map(member).collect()
}

fn member(r: &Row) -> PgResult<Member> {
    Ok(Member {
        id: r.try_get(0)?,
        started_at: Timestamp(r.try_get(1)?),
        heartbeat_at: Timestamp(r.try_get(2)?),
        expires_at: Timestamp(r.try_get(3)?),
        in_flight: u64::try_from(r.try_get::<_, i64>(4)?).unwrap_or(0),
        max_in_flight: u64::try_from(r.try_get::<_, i64>(5)?).unwrap_or(0),
    })
}
