//! Durable cursors of named event consumers on PostgreSQL (see [`crate::consumer`]).

use super::{query, PgResult, Tx};
use deadpool_postgres::GenericClient;

pub(super) async fn get<C: GenericClient>(c: &C, name: String) -> PgResult<Option<u64>> {
    let rows = query(c, "SELECT acked_seq FROM consumers WHERE name = $1", &[&name]).await?;
    let Some(row) = rows.first() else { return Ok(None) };
    Ok(Some(u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0)))
}

/// Forgets the cursor.
pub(super) async fn delete(tx: &mut Tx<'_>, name: String) -> PgResult<()> {
    tx.execute("DELETE FROM consumers WHERE name = $1", &[&name]).await?;
    Ok(())
}

/// Moves the cursor forward to `seq` (never back); returns where it is now. Concurrent
/// acknowledgements of one name serialize on its row and the larger wins.
pub(super) async fn ack(tx: &mut Tx<'_>, name: String, seq: u64) -> PgResult<u64> {
    let seq = i64::try_from(seq).unwrap_or(i64::MAX);
    let row = tx
        .query_opt(
            "INSERT INTO consumers AS c (name, acked_seq, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET acked_seq = GREATEST(c.acked_seq, EXCLUDED.acked_seq),
                 updated_at = EXCLUDED.updated_at
             RETURNING acked_seq",
            &[&name, &seq, &tx.now.millis()],
        )
        .await?;
    let at: i64 = match row {
        Some(r) => r.try_get(0)?,
        None => seq,
    };
    Ok(u64::try_from(at).unwrap_or(0))
}
