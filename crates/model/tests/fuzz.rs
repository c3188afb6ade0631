//! A fuzzer that runs on stable: mutates a seed corpus (the repository's examples and
//! every hostile input found so far) with byte- and token-level mutations for
//! `FLEETSYNC_FUZZ_SECONDS` seconds (default 3), and asserts for every input that the
//! parse does not panic, finishes within a bound, and that anything accepted
//! round-trips: its stored form (the JSON of the typed document, as the store keeps it)
//! decodes again with serde_json, and parses again to equal documents.
//! `FLEETSYNC_FUZZ_SEED` replays a run.

mod common;

use fleetsync_model::{parse_documents, Document, Kind, API_VERSION};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// No single parse may take longer (they take milliseconds).
const PARSE_BOUND: Duration = Duration::from_secs(2);

/// Fragments that mean something to a YAML scanner.
const TOKENS: &[&str] = &[
    "{", "}", "[", "]", ": ", ", ", "- ", "\n", "\n  ", "---\n", "...\n", "&a ", "*a", "<<: *a\n", "!!str ", "!!binary ", "!t ",
    "\"", "'", "|\n", ">-\n", "# c\n", "? ", "~", "null", ".nan", ".inf", "-.inf", "1e999", "0x1F", "0o17", "-0", "1.5e300",
    "\u{feff}", "\\u0000", "\\x7f", "\t", "%YAML 1.2\n", "yes", "\"\\L\"", "apiVersion: fleetsync.io/v1\n", "kind: SyncSet\n",
    "kind: Cluster\n", "kind: Secret\n", "metadata: {name: n}\n", "spec: {clusterNames: [a], resources: []}\n",
];

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

/// Where tokens start: at every change between letters/digits and anything else.
fn token_bounds(b: &[u8]) -> Vec<usize> {
    let mut out = vec![0];
    for i in 1..b.len() {
        if b[i].is_ascii_alphanumeric() != b[i - 1].is_ascii_alphanumeric() || !b[i].is_ascii_alphanumeric() {
            out.push(i);
        }
    }
    out.push(b.len());
    out
}

fn mutate(rng: &mut StdRng, input: &[u8], corpus: &[String]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = b.len();
        let at = if len == 0 { 0 } else { rng.random_range(0..=len) };
        match rng.random_range(0..9) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                b[i] ^= 1 << rng.random_range(0..8);
            }
            1 => b.insert(at, rng.random()),
            2 if len > 0 => {
                let end = (at + rng.random_range(1..16)).min(len);
                b.drain(at.min(end)..end);
            }
            3 => {
                let t = TOKENS[rng.random_range(0..TOKENS.len())];
                b.splice(at..at, t.bytes());
            }
            4 if len > 0 => {
                // Duplicate a range (repeats structure, anchors, documents).
                let from = rng.random_range(0..len);
                let end = (from + rng.random_range(1..256)).min(len);
                let piece = b[from..end].to_vec();
                b.splice(at..at, piece);
            }
            5 => {
                // Swap two tokens.
                let bounds = token_bounds(&b);
                if bounds.len() > 3 {
                    let i = rng.random_range(0..bounds.len() - 1);
                    let j = rng.random_range(0..bounds.len() - 1);
                    let (i, j) = (i.min(j), i.max(j));
                    if i < j && bounds[i + 1] <= bounds[j] {
                        let first = b[bounds[i]..bounds[i + 1]].to_vec();
                        let second = b[bounds[j]..bounds[j + 1]].to_vec();
                        b.splice(bounds[j]..bounds[j + 1], first);
                        b.splice(bounds[i]..bounds[i + 1], second);
                    }
                }
            }
            6 => {
                // Delete or repeat a token.
                let bounds = token_bounds(&b);
                if bounds.len() > 2 {
                    let i = rng.random_range(0..bounds.len() - 1);
                    let tok = b[bounds[i]..bounds[i + 1]].to_vec();
                    if rng.random() {
                        b.drain(bounds[i]..bounds[i + 1]);
                    } else {
                        let n = rng.random_range(1..64);
                        b.splice(bounds[i]..bounds[i], tok.repeat(n));
                    }
                }
            }
            7 => {
                // Splice in part of another seed.
                let other = corpus[rng.random_range(0..corpus.len())].as_bytes();
                if !other.is_empty() {
                    let from = rng.random_range(0..other.len());
                    let end = (from + rng.random_range(1..512)).min(other.len());
                    b.splice(at..at, other[from..end].iter().copied());
                }
            }
            _ => {
                // Replace a byte with a structural one.
                if len > 0 {
                    let i = rng.random_range(0..len);
                    b[i] = b"{}[],:-&*!|>'\"#\n "[rng.random_range(0..17)];
                }
            }
        }
    }
    b
}

/// The document as JSON as the user writes it (`apiVersion`, `kind`), with a Secret's
/// values in the clear (what `to_value` would redact).
fn as_json(doc: &Document) -> serde_json::Value {
    let body = match doc {
        Document::Cluster(c) => serde_json::to_value(c),
        Document::SyncSet(s) => serde_json::to_value(s),
        Document::Secret(s) => serde_json::to_value(s),
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
    }
    .expect("a document encodes");
    let back = match doc.kind() {
        Kind::Cluster => serde_json::from_str(&stored).map(Document::Cluster),
        Kind::SyncSet => serde_json::from_str(&stored).map(Document::SyncSet),
        Kind::Secret => serde_json::from_str(&stored).map(Document::Secret),
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
    let seconds: u64 = std::env::var("FLEETSYNC_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let seed: u64 = std::env::var("FLEETSYNC_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut corpus = seeds();
    for s in corpus.clone() {
        check(&s);
    }
    let stop = Instant::now() + Duration::from_secs(seconds);
    let (mut tried, mut accepted) = (0u64, 0u64);
    while Instant::now() < stop {
        let base = corpus[rng.random_range(0..corpus.len())].as_bytes().to_vec();
        let input = String::from_utf8_lossy(&mutate(&mut rng, &base, &corpus)).into_owned();
        tried += 1;
        if check(&input) {
            accepted += 1;
            // Accepted inputs are good places to mutate from.
            if corpus.len() < 512 && input.len() < 64 * 1024 {
                corpus.push(input);
            }
        }
    }
    println!("fuzz: tried {tried} inputs in {seconds}s (seed {seed}), {accepted} accepted");
    eprintln!("fuzz: tried {tried} inputs in {seconds}s (seed {seed}), {accepted} accepted");
    assert!(tried > 0);
}
