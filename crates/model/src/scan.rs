//! Building each document's JSON value from the scanner, checking the parse's time
//! budget and cancellation flag at every node, and remembering where the scan was
//! when it failed (which document, which field) for the error message.
//!
//! The YAML library calls `Deserialize::deserialize`, which takes no arguments, once per
//! document; the state of the parse under way is therefore kept for this thread by
//! [`Scan::run`] while it runs.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// How often (in nodes) the clock is read; the cancellation flag is read at every node.
const CLOCK_EVERY: u32 = 256;

/// Why a scan stopped on its own account (not for a fault in the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Cancelled,
    Deadline,
}

/// The state of one parse.
#[derive(Debug)]
pub(crate) struct Scan {
    deadline: Instant,
    cancel: Option<Arc<AtomicBool>>,
    ticks: u32,
    /// Documents whose value was begun, and finished.
    pub started: usize,
    pub finished: usize,
    /// Why the scan stopped, if it stopped itself.
    pub stop: Option<Stop>,
    /// A rule a value broke (text YAML cannot carry), for the error message.
    pub refused: Option<String>,
    /// The path to the node that failed, innermost segment first.
    pub path: Vec<Segment>,
}

#[derive(Debug)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

thread_local! {
    static CURRENT: RefCell<Option<Scan>> = const { RefCell::new(None) };
}

impl Scan {
    pub fn new(deadline: Instant, cancel: Option<Arc<AtomicBool>>) -> Self {
        Scan { deadline, cancel, ticks: 0, started: 0, finished: 0, stop: None, refused: None, path: Vec::new() }
    }

    /// Whether the scan must stop now (flag set or deadline passed), and why.
    pub fn must_stop(&self) -> Option<Stop> {
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Some(Stop::Cancelled);
        }
        (Instant::now() >= self.deadline).then_some(Stop::Deadline)
    }

    /// Runs `f` with this scan as the thread's current one; returns what `f` returned and
    /// the scan's final state.
    pub fn run<R>(self, f: impl FnOnce() -> R) -> (R, Scan) {
        CURRENT.with(|c| *c.borrow_mut() = Some(self));
        let r = f();
        let scan = CURRENT.with(|c| c.borrow_mut().take()).unwrap_or_else(|| Scan::new(Instant::now(), None));
        (r, scan)
    }

    /// The field path of the failed node, as `spec.resources[0].data.x`.
    pub fn field(&self) -> String {
        let mut out = String::new();
        for seg in self.path.iter().rev() {
            match seg {
                Segment::Key(k) if out.is_empty() => out.push_str(k),
                Segment::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

fn with_scan<R>(f: impl FnOnce(&mut Scan) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow_mut().as_mut().map(f))
}

/// Counts one node; an error if the scan must stop.
fn tick<E: de::Error>() -> Result<(), E> {
    let stop = with_scan(|s| {
        if s.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            s.stop = Some(Stop::Cancelled);
            return s.stop;
        }
        s.ticks = s.ticks.wrapping_add(1);
        if s.ticks.is_multiple_of(CLOCK_EVERY) && Instant::now() >= s.deadline {
            s.stop = Some(Stop::Deadline);
        }
        s.stop
    });
    match stop.flatten() {
        Some(_) => Err(E::custom("parsing stopped")),
        None => Ok(()),
    }
}

/// A mapping key: printable text (see [`check_text`]) of at most
/// [`MAX_KEY_CHARS`](crate::limits::MAX_KEY_CHARS) characters as JSON writes it, each
/// control character counted at its longest escape (`\u00XX`).
fn check_key<E: de::Error>(key: &str) -> Result<(), E> {
    use crate::limits::MAX_KEY_CHARS;
    check_text(key)?;
    let as_json: usize = key
        .chars()
        .map(|c| match c {
            '"' | '\\' => 2,
            c if u32::from(c) < 0x20 => 6,
            _ => 1,
        })
        .sum();
    if as_json <= MAX_KEY_CHARS {
        return Ok(());
    }
    let rule =
        format!("a mapping key may be at most {MAX_KEY_CHARS} characters as JSON writes it; this one is {as_json}");
    with_scan(|s| s.refused = Some(rule.clone()));
    Err(E::custom(rule))
}

/// A key as a path shows it: a long one cut short.
fn shown_key(key: String) -> String {
    if key.chars().count() <= 64 {
        return key;
    }
    format!("{}…", key.chars().take(64).collect::<String>())
}

/// Text must be printable YAML (no DEL, C1 controls but NEL, BOM, U+FFFE/U+FFFF; the
/// C0 controls JSON escapes): an escape in YAML could put them in, and the JSON that
/// shows the document would then not apply again.
fn check_text<E: de::Error>(v: &str) -> Result<(), E> {
    let bad = v.chars().find(
        |&c| matches!(c, '\u{7f}' | '\u{80}'..='\u{84}' | '\u{86}'..='\u{9f}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'),
    );
    match bad {
        None => Ok(()),
        Some(c) => {
            let rule = format!("contains U+{:04X}, a character YAML cannot carry as text", c as u32);
            with_scan(|s| s.refused = Some(rule.clone()));
            Err(E::custom(rule))
        }
    }
}

fn push(seg: Segment) {
    with_scan(|s| s.path.push(seg));
}

/// One document's value, built under the current scan.
#[derive(Debug)]
pub(crate) struct Document(pub Value);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        with_scan(|s| {
            s.started += 1;
            s.path.clear();
        });
        let v = Node.deserialize(d)?;
        with_scan(|s| s.finished += 1);
        Ok(Document(v))
    }
}

/// A node of the tree: serde_json's `Value`, built with a tick per node and the path
/// remembered on failure.
#[derive(Clone, Copy)]
struct Node;

impl<'de> DeserializeSeed<'de> for Node {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        tick()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        tick()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        tick()?;
        Ok(Value::from(v))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) => self.visit_f64(v as f64),
        }
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => self.visit_f64(v as f64),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        tick()?;
        // The scanner refuses `.nan` and `.inf` already; this keeps any other way out.
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number (JSON has no NaN or infinity)")))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        tick()?;
        check_text(v)?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        tick()?;
        check_text(&v)?;
        Ok(Value::String(v))
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        tick()?;
        Ok(Value::Null)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        tick()?;
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        tick()?;
        let mut out = Vec::new();
        loop {
            match seq.next_element_seed(self) {
                Ok(Some(v)) => out.push(v),
                Ok(None) => return Ok(Value::Array(out)),
                Err(e) => {
                    push(Segment::Index(out.len()));
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        tick()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if let Err(e) = check_key(&key) {
                push(Segment::Key(shown_key(key)));
                return Err(e);
            }
            match map.next_value_seed(self) {
                Ok(v) => {
                    out.insert(key, v);
                }
                Err(e) => {
                    push(Segment::Key(key));
                    return Err(e);
                }
            }
        }
        Ok(Value::Object(out))
    }
}
