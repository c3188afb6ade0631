//! The SQLite file holds no hub-issued token, only its SHA-256: every text and blob of
//! every table is searched for the token after it was stored and used.

use fleetsync_model::{Grant, Timestamp, TokenRecord};
use fleetsync_store::conformance::cluster;
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Objects, StoreConfig, Tokens};
use rusqlite::types::ValueRef;
use sha2::{Digest, Sha256};

const TOKEN: &str = "fst_marker_7c1e0b9d4a2f46e3b8a1";

/// The tables of the file and, of each, the rows of every column that hold `needle`.
fn find_in_file(path: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let c = rusqlite::Connection::open(path).expect("open the file");
    let tables: Vec<String> = {
        let mut stmt = c.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").expect("tables");
        stmt.query_map([], |r| r.get(0)).expect("tables").collect::<Result<_, _>>().expect("tables")
    };
    assert!(tables.iter().any(|t| t == "tokens"), "{tables:?}");
    let mut found = Vec::new();
    for table in tables {
        let mut stmt = c.prepare(&format!("SELECT * FROM \"{table}\"")).expect("select");
        let columns = stmt.column_count();
        let mut rows = stmt.query([]).expect("rows");
        while let Some(row) = rows.next().expect("row") {
            for i in 0..columns {
                let bytes = match row.get_ref(i).expect("value") {
                    ValueRef::Text(b) | ValueRef::Blob(b) => b,
                    _ => continue,
                };
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(format!("{table} column {i}"));
                }
            }
        }
    }
    found
}

#[tokio::test]
async fn the_file_holds_the_tokens_hash_not_the_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fleetsync.db");
    let store = SqliteStore::open(&path, StoreConfig::default()).expect("open");
    let hash: [u8; 32] = Sha256::digest(TOKEN.as_bytes()).into();
    let record = TokenRecord {
        name: "ci".into(),
        grant: Grant::parse("team-a:editor").expect("grant"),
        created_at: Timestamp(1),
        expires_at: None,
        created_by: "cli".into(),
    };
    assert!(store.token_create(&record, &hash).await.expect("create"));
    let found = store.token_find(&hash).await.expect("find").expect("found");
    store.objects_apply_by(vec![cluster("c1", &[])], Some(&found.name)).await.expect("apply as the token's holder");

    assert_eq!(find_in_file(&path, &hash), ["tokens column 0"], "the search sees the hash");
    assert_eq!(find_in_file(&path, TOKEN.as_bytes()), Vec::<String>::new(), "the token is nowhere");
}
