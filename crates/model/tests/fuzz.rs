//! A fuzzer that runs on stable: mutates a seed corpus (the repository's examples and
//! every hostile input found so far) with byte- and token-level mutations for
//! `FLEETSYNC_FUZZ_SECONDS` seconds (default 3), and asserts for every input that the
//! parse does not panic, finishes within a bound, and that anything accepted
//! round-trips: its stored form (the JSON of the typed document, as the store keeps it)
//! decodes again with serde_json, and parses again to equal documents.
//! `FLEETSYNC_FUZZ_SEED` replays a run.

mod common;

use fleetsync_model::{parse_documents, Document, Kind, API_VERSION};
use fleetsync_testkit::fuzz::Fuzz;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// No single parse may take longer (they take milliseconds).
const PARSE_BOUND: Duration = Duration::from_secs(2);

fn seeds() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut seeds: Vec<String> = std::fs::read_dir(dir)
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| std::fs::read_to_string(p).expect("an example"))
        .collect();
    assert!(!seeds.is_empty(), "no examples/*.yaml");
    seeds.extend(common::small_hostile_seeds().into_iter().map(|(_, s)| s));
    seeds.push(common::CLUSTER.into());
    seeds
}

/// The document as JSON as the user writes it (`apiVersion`, `kind`), with a Secret's
/// values in the clear (what `to_value` would redact).
fn as_json(doc: &Document) -> serde_json::Value {
    let body = match doc {
        Document::Cluster(c) => serde_json::to_value(c),
        Document::SyncSet(s) => serde_json::to_value(s),
        Document::Secret(s) => serde_json::to_value(s),
        Document::GitRepository(g) => serde_json::to_value(g),
        Document::OCIRepository(o) => serde_json::to_value(o),
        Document::Notifier(n) => serde_json::to_value(n),
    }
    .expect("a document encodes");
    let mut v = serde_json::json!({"apiVersion": API_VERSION, "kind": doc.kind().as_str()});
    v.as_object_mut().expect("an object").extend(body.as_object().expect("an object").clone());
    v
}

/// The store's round trip: to a string with serde_json, back with serde_json::from_str.
fn assert_stored_form_reads_back(doc: &Document, input: &str) {
    let stored = match doc {
        Document::Cluster(c) => serde_json::to_string(c),
        Document::SyncSet(s) => serde_json::to_string(s),
        Document::Secret(s) => serde_json::to_string(s),
        Document::GitRepository(g) => serde_json::to_string(g),
        Document::OCIRepository(o) => serde_json::to_string(o),
        Document::Notifier(n) => serde_json::to_string(n),
    }
    .expect("a document encodes");
    let back = match doc.kind() {
        Kind::Cluster => serde_json::from_str(&stored).map(Document::Cluster),
        Kind::SyncSet => serde_json::from_str(&stored).map(Document::SyncSet),
        Kind::Secret => serde_json::from_str(&stored).map(Document::Secret),
        Kind::GitRepository => serde_json::from_str(&stored).map(Document::GitRepository),
        Kind::OCIRepository => serde_json::from_str(&stored).map(Document::OCIRepository),
        Kind::Notifier => serde_json::from_str(&stored).map(Document::Notifier),
    };
    match back {
        Ok(back) => assert_eq!(&back, doc, "stored form differs for input {input:?}"),
        Err(e) => panic!("stored form does not decode ({e}) for input {input:?}"),
    }
}

fn check(input: &str) -> bool {
    let t = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| parse_documents(input)));
    let took = t.elapsed();
    let Ok(r) = r else { panic!("parse panicked on input {input:?}") };
    assert!(took < PARSE_BOUND, "parse took {took:?} on input {input:?}");
    let Ok(docs) = r else { return false };
    for doc in &docs {
        assert_stored_form_reads_back(doc, input);
    }
    let json: Vec<String> = docs.iter().map(|d| as_json(d).to_string()).collect();
    let again = parse_documents(&json.join("\n---\n"));
    assert_eq!(again.as_ref(), Ok(&docs), "accepted input does not parse again from its JSON: {input:?}");
    true
}

#[test]
fn fuzz_parse_documents() {
    let seeds = seeds();
    for s in &seeds {
        check(s);
    }
    let mut fuzz = Fuzz::new(seeds);
    let (mut tried, mut accepted) = (0u64, 0u64);
    while let Some(input) = fuzz.next_input() {
        tried += 1;
        if check(&input) {
            accepted += 1;
            // Accepted inputs are good places to mutate from.
            fuzz.keep(input);
        }
    }
    eprintln!("fuzz: tried {tried} inputs in {}s (seed {}), {accepted} accepted", fuzz.seconds, fuzz.seed);
    assert!(tried > 0);
}
