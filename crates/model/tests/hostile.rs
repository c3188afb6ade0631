//! Every hostile input found against `POST /v1/apply`, refused quickly with the limit
//! named, and what sits exactly at a limit accepted and storable.

mod common;

use common::*;
use fleetsync_model::limits::{EXPANSION_ALLOWANCE, MAX_DEPTH};
use fleetsync_model::{parse_documents, parse_documents_with, Document, Limit, ParseBudget, ParseError, SyncSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parses `text`, asserting it takes under five seconds (it should take milliseconds).
fn timed(text: &str) -> Result<Vec<Document>, ParseError> {
    let t = Instant::now();
    let r = parse_documents(text);
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    r
}

fn limit_of(r: Result<Vec<Document>, ParseError>) -> (usize, Limit, String) {
    match r {
        Err(e @ ParseError::Limit { .. }) => {
            let msg = e.to_string();
            let ParseError::Limit { index, limit } = e else { unreachable!() };
            (index, limit, msg)
        }
        other => panic!("expected a limit, got {other:?}"),
    }
}

#[test]
fn alias_bomb_is_refused_naming_the_expanded_size() {
    let bomb = alias_bomb(4 * 1024 * 1024, 1000);
    let (index, limit, msg) = limit_of(timed(&bomb));
    assert_eq!(index, 1);
    assert!(matches!(limit, Limit::ExpandedBytes(n) if n == 2 * bomb.len() + EXPANSION_ALLOWANCE), "{limit:?}");
    assert!(limit.is_size());
    assert!(msg.starts_with("document 1: text expands to more than"), "{msg}");
}

#[test]
fn billion_laughs_are_refused() {
    let (_, limit, msg) = limit_of(timed(&laughs(9)));
    assert!(matches!(limit, Limit::Nodes(_) | Limit::Aliases(_) | Limit::ExpandedBytes(_)), "{msg}");
}

#[test]
fn deep_mapping_nesting_is_refused_quickly_naming_the_depth() {
    let (index, limit, msg) = limit_of(timed(&nesting("{a: ", 100_000)));
    assert_eq!((index, limit), (1, Limit::Depth(MAX_DEPTH)));
    assert_eq!(msg, "document 1: nesting deeper than 64 levels (the limit)");
}

#[test]
fn deep_sequence_nesting_is_refused_quickly_naming_the_depth() {
    let (_, limit, _) = limit_of(timed(&nesting("[", 100_000)));
    assert_eq!(limit, Limit::Depth(MAX_DEPTH));
}

#[test]
fn deep_json_nesting_is_refused_quickly_naming_the_depth() {
    let (_, limit, _) = limit_of(timed(&nesting("{\"a\":", 100_000)));
    assert_eq!(limit, Limit::Depth(MAX_DEPTH));
    let (_, limit, _) = limit_of(timed(&nesting("[", 100_000)));
    assert_eq!(limit, Limit::Depth(MAX_DEPTH));
}

#[test]
fn deep_block_nesting_is_refused() {
    let text: String = (0..200).map(|i| format!("{}a:\n", " ".repeat(i))).collect();
    let (_, limit, _) = limit_of(timed(&text));
    assert_eq!(limit, Limit::Depth(MAX_DEPTH));
}

#[test]
fn depth_at_the_limit_is_accepted_and_its_stored_form_reads_back() {
    let docs = parse_documents(&deep_syncset(MAX_DEPTH - 4)).expect("64 levels are accepted");
    let Document::SyncSet(s) = &docs[0] else { panic!("a SyncSet") };
    // What the store keeps, and how it reads it.
    let stored = serde_json::to_string(s).expect("encodes");
    let back: SyncSet = serde_json::from_str(&stored).expect("the stored form decodes");
    assert_eq!(&back, s);
    // As the API shows it, and applied again as JSON.
    let shown = docs[0].to_value().to_string();
    let _: serde_json::Value = serde_json::from_str(&shown).expect("the shown form decodes");
    assert_eq!(parse_documents(&shown).expect("JSON is accepted"), docs);

    let (index, limit, _) = limit_of(parse_documents(&deep_syncset(MAX_DEPTH - 3)));
    assert_eq!((index, limit), (1, Limit::Depth(MAX_DEPTH)));
}

#[test]
fn the_depth_limit_names_the_document() {
    let text = format!("{CLUSTER}---\n{}", deep_syncset(MAX_DEPTH));
    let (index, _, msg) = limit_of(parse_documents(&text));
    assert_eq!(index, 2);
    assert!(msg.starts_with("document 2: nesting deeper than 64 levels"), "{msg}");
}

#[test]
fn an_object_twice_in_one_body_is_refused_naming_both() {
    let Err(ParseError::Invalid(e)) = parse_documents(&duplicate_documents()) else { panic!("refused") };
    assert_eq!(e.document, "document 3 (Cluster default/c1)");
    assert_eq!(e.field, "metadata.name");
    assert!(e.rule.contains("also document 1"), "{e}");
    // The same name in another tenant, or of another kind, is another object.
    let other = format!("{CLUSTER}---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1, namespace: t2}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n");
    assert_eq!(parse_documents(&other).expect("two tenants").len(), 2);
}

#[test]
fn numbers_that_are_not_finite_are_refused_naming_the_field() {
    for v in [".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1e999"] {
        let Err(ParseError::Invalid(e)) = parse_documents(&syncset_with_value(v)) else { panic!("{v} refused") };
        assert_eq!(e.field, "spec.resources[0].data.k", "{v}");
        assert!(e.rule.contains("not a finite number"), "{e}");
        assert_eq!(e.document, "document 1");
    }
    // Quoted, they are text.
    let docs = parse_documents(&syncset_with_value("\".nan\"")).expect("text");
    let Document::SyncSet(s) = &docs[0] else { panic!("a SyncSet") };
    assert_eq!(s.spec.resources[0].0["data"]["k"], ".nan");
}

#[test]
fn a_leading_byte_order_mark_is_ignored() {
    let docs = parse_documents(&format!("\u{feff}{CLUSTER}")).expect("BOM ignored");
    assert_eq!(docs[0].metadata().name, "c1");
}

#[test]
fn a_set_cancellation_flag_stops_the_parse() {
    let flag = Arc::new(AtomicBool::new(true));
    let budget = ParseBudget::default().with_cancel(flag);
    assert_eq!(parse_documents_with(CLUSTER, &budget), Err(ParseError::Cancelled));
}

#[test]
fn a_flag_set_during_the_parse_stops_it() {
    let flag = Arc::new(AtomicBool::new(false));
    let body: String = (0..20_000).map(|i| format!("---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n")).collect();
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let t = Instant::now();
    let r = parse_documents_with(&body, &ParseBudget::default().with_cancel(flag));
    setter.join().expect("setter");
    // Either the parse ended before the flag was set (a fast machine), or it stopped.
    if r.is_err() {
        assert_eq!(r, Err(ParseError::Cancelled));
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}

#[test]
fn a_deadline_in_the_past_refuses_naming_the_time_limit() {
    let budget = ParseBudget::default().with_deadline(Instant::now() - Duration::from_secs(1));
    let (index, limit, msg) = limit_of(parse_documents_with(CLUSTER, &budget));
    assert_eq!((index, limit), (0, Limit::ParseTime(Duration::ZERO)));
    assert!(msg.contains("parsing took longer than"), "{msg}");
    let budget = ParseBudget::default().with_time_limit(Duration::ZERO);
    assert!(matches!(
        parse_documents_with(CLUSTER, &budget),
        Err(ParseError::Limit { limit: Limit::ParseTime(_), .. })
    ));
}

#[test]
fn the_time_limit_stops_a_long_parse() {
    let body: String = (0..20_000).map(|i| format!("---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n")).collect();
    let mut limits = fleetsync_model::Limits::DEFAULT;
    limits.max_documents = 100_000;
    let budget = ParseBudget::default().with_limits(limits).with_time_limit(Duration::from_millis(1));
    let (_, limit, msg) = limit_of(parse_documents_with(&body, &budget));
    assert_eq!(limit, Limit::ParseTime(Duration::from_millis(1)));
    assert!(msg.ends_with("parsing took longer than 1ms (the limit)"), "{msg}");
}

#[test]
fn too_many_documents_are_refused() {
    let mut limits = fleetsync_model::Limits::DEFAULT;
    limits.max_documents = 2;
    let body = format!("{CLUSTER}---\n{CLUSTER}---\n{CLUSTER}");
    let (_, limit, _) = limit_of(parse_documents_with(&body, &ParseBudget::default().with_limits(limits)));
    assert_eq!(limit, Limit::Documents(2));
}

#[test]
fn a_body_over_the_limit_is_refused_before_scanning() {
    let mut limits = fleetsync_model::Limits::DEFAULT;
    limits.max_body_bytes = 10;
    let (index, limit, msg) = limit_of(parse_documents_with(CLUSTER, &ParseBudget::default().with_limits(limits)));
    assert_eq!((index, limit), (0, Limit::BodyBytes(10)));
    assert_eq!(msg, "the body: the body is larger than 10 bytes (the limit)");
}

#[test]
fn json_and_several_documents_still_parse() {
    let json = r#"{"apiVersion": "fleetsync.io/v1", "kind": "Cluster", "metadata": {"name": "j"}, "spec": {"endpoint": {"simulator": {}}}}"#;
    assert_eq!(parse_documents(json).expect("JSON")[0].metadata().name, "j");
    let text = format!("---\n{CLUSTER}...\n---\n---\n{json}\n");
    let docs = parse_documents(&text).expect("documents");
    assert_eq!(docs.len(), 2);
    // Errors count documents that have content.
    let bad = format!("{CLUSTER}---\n---\nfoo: [unclosed\n");
    assert!(matches!(parse_documents(&bad), Err(ParseError::Yaml { index: 2, .. })), "{:?}", parse_documents(&bad));
}

#[test]
fn yaml_1_1_words_stay_text() {
    let docs = parse_documents(&syncset_with_value("yes")).expect("valid");
    let Document::SyncSet(s) = &docs[0] else { panic!("a SyncSet") };
    assert_eq!(s.spec.resources[0].0["data"]["k"], "yes");
}

#[test]
fn a_long_key_accepted_in_yaml_is_accepted_again_as_json() {
    // Found by the fuzzer: a plain key of 2,000 characters, shown as JSON, must apply again.
    let key = "k".repeat(2_000);
    let docs = parse_documents(&syncset_with_value(&format!("{{{key}: v}}"))).expect("a long key");
    let json = docs[0].to_value().to_string();
    assert_eq!(parse_documents(&json).expect("its JSON applies again"), docs);
}

#[test]
fn text_yaml_cannot_carry_is_refused_naming_the_field() {
    // Found by the fuzzer: an escape put a DEL in a value; its JSON would not apply again.
    let Err(ParseError::Invalid(e)) = parse_documents(&syncset_with_value("\"30\\x7f\"")) else { panic!("refused") };
    assert_eq!(e.field, "spec.resources[0].data.k");
    assert!(e.rule.contains("U+007F"), "{e}");
    // Control characters JSON escapes are fine.
    assert!(parse_documents(&syncset_with_value("\"a\\tb\\x01\"")).is_ok());
}

#[test]
fn a_key_too_long_to_be_found_again_as_json_is_refused_naming_the_limit() {
    use fleetsync_model::limits::MAX_KEY_CHARS;
    // Found by the fuzzer: a key with no value in a flow mapping needs no look-ahead in
    // YAML, but its JSON (`{"AAA…": null}`) does, and was not found again when applied.
    let key = "A".repeat(100_000);
    let Err(ParseError::Invalid(e)) = parse_documents(&syncset_with_value(&format!("{{{key}}}"))) else {
        panic!("refused")
    };
    assert_eq!(e.field, format!("spec.resources[0].data.k.{}…", "A".repeat(64)));
    assert!(
        e.rule.contains(&format!("at most {MAX_KEY_CHARS} characters as JSON writes it; this one is 100000")),
        "{e}"
    );
    // Escapes count as JSON writes them: 700 control characters are 4,200.
    let escaped = "\\x01".repeat(700);
    let Err(ParseError::Invalid(e)) = parse_documents(&syncset_with_value(&format!("{{\"{escaped}\": v}}"))) else {
        panic!("refused")
    };
    assert!(e.rule.contains("this one is 4200"), "{e}");
    // A key at the limit is accepted, and its JSON applies again.
    let key = "k".repeat(MAX_KEY_CHARS);
    let docs = parse_documents(&syncset_with_value(&format!("{{{key}}}"))).expect("a key at the limit");
    let json = docs[0].to_value().to_string();
    assert_eq!(parse_documents(&json).expect("its JSON applies again"), docs);
}
