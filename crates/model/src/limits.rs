//! The one size and shape policy for documents, enforced while they are scanned.
//!
//! Every path that takes documents (`POST /v1/apply`, and `fleetsync apply`/`diff`
//! before they send) parses with [`crate::parse_documents`], and so with these limits.
//! They are chosen so that anything accepted can be stored and read back: the store
//! keeps each document as the JSON of its typed form and decodes it with `serde_json`,
//! which refuses anything nested deeper than 128 levels. Documents are refused at
//! [`MAX_DEPTH`] (64) levels, which leaves as many again for what wraps them (rows,
//! messages to agents). JSON bodies are parsed by the same scanner (JSON is YAML), so
//! they meet the same limits.
//!
//! A refused input gets [`ParseError::Limit`](crate::ParseError::Limit), whose message
//! names the limit and its value, e.g. `document 3: nesting deeper than 64 levels (the limit)`.

use std::fmt;
use std::time::Duration;

/// The largest body `POST /v1/apply` reads (the server's body limit).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// The deepest nesting of mappings and sequences in one document; the document itself
/// (its top-level mapping) is level 1. A SyncSet's manifests start at level 4.
pub const MAX_DEPTH: usize = 64;
/// The most documents one body may hold (empty ones included).
pub const MAX_DOCUMENTS: usize = 10_000;
/// The most text all scalars (keys and values) of a body may add up to once aliases
/// are expanded: each use of an alias counts the bytes it copies.
pub const MAX_EXPANDED_BYTES: usize = MAX_BODY_BYTES;
/// Aliases may expand a body to at most this many times its size, plus
/// [`EXPANSION_ALLOWANCE`] (and never beyond [`MAX_EXPANDED_BYTES`]), so that what a
/// body costs in memory stays proportional to what it costs to send.
pub const EXPANSION_FACTOR: usize = 2;
/// What every body may expand to whatever its size (see [`EXPANSION_FACTOR`]).
pub const EXPANSION_ALLOWANCE: usize = 1024 * 1024;
/// The most nodes (scalars, mappings, sequences; aliases counted by what they copy)
/// of one body: the parsed tree costs about 100 bytes a node. A body may also hold at
/// most one node per byte of it plus [`NODE_ALLOWANCE`] (no YAML without aliases comes
/// near that), so that aliases cannot make a small body cost much time.
pub const MAX_NODES: usize = 2_000_000;
/// The nodes every body may hold whatever its size (see [`MAX_NODES`]).
pub const NODE_ALLOWANCE: usize = 10_000;
/// The most alias uses (`*name`) in one body.
pub const MAX_ALIASES: usize = 10_000;
/// The longest mapping key written without `?` the scanner looks for (YAML says 1024
/// characters): JSON keys are such keys, and a key accepted once must be accepted
/// again when the stored JSON is applied back.
pub const MAX_IMPLICIT_KEY_CHARS: usize = 64 * 1024;
/// The longest mapping key a document may hold, counted as JSON writes it (escapes
/// included): well inside [`MAX_IMPLICIT_KEY_CHARS`], so that a key YAML accepted
/// without looking ahead for it (a key with no value in a flow mapping, or after `?`)
/// is still found when its stored JSON is applied again.
pub const MAX_KEY_CHARS: usize = 4096;
/// How long one body may take to parse before it is refused (the server's budget).
pub const DEFAULT_PARSE_TIME: Duration = Duration::from_secs(10);

/// The limits one parse enforces; [`Limits::DEFAULT`] is the policy every path uses.
/// Tests may shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_depth: usize,
    pub max_documents: usize,
    pub max_expanded_bytes: usize,
    pub max_nodes: usize,
    pub max_aliases: usize,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_body_bytes: MAX_BODY_BYTES,
        max_depth: MAX_DEPTH,
        max_documents: MAX_DOCUMENTS,
        max_expanded_bytes: MAX_EXPANDED_BYTES,
        max_nodes: MAX_NODES,
        max_aliases: MAX_ALIASES,
    };

    /// The expanded size a body of `input_len` bytes may reach: [`EXPANSION_FACTOR`]
    /// times its size plus [`EXPANSION_ALLOWANCE`], at most `max_expanded_bytes`.
    pub fn expanded_budget(&self, input_len: usize) -> usize {
        input_len.saturating_mul(EXPANSION_FACTOR).saturating_add(EXPANSION_ALLOWANCE).min(self.max_expanded_bytes)
    }

    /// The nodes a body of `input_len` bytes may hold: one a byte plus
    /// [`NODE_ALLOWANCE`], at most `max_nodes`.
    pub fn node_budget(&self, input_len: usize) -> usize {
        input_len.saturating_add(NODE_ALLOWANCE).min(self.max_nodes)
    }

    /// The scanner's budget for a body of `input_len` bytes.
    pub(crate) fn budget(&self, input_len: usize) -> serde_saphyr::Budget {
        let mut b = serde_saphyr::Budget::default();
        b.max_reader_input_bytes = Some(self.max_body_bytes);
        b.max_depth = self.max_depth;
        // The scanner never opens more flow collections than the depth allows.
        // (The parser stops at its limit itself, before the budget sees the depth.)
        b.flow_nesting_limit = self.max_depth.saturating_add(2);
        b.max_documents = self.max_documents;
        b.simple_key_max_lookahead = MAX_IMPLICIT_KEY_CHARS;
        b.max_nodes = self.node_budget(input_len);
        // Every event but an end or a document marker is a node: the node limit binds first.
        b.max_events =
            b.max_nodes.saturating_mul(2).saturating_add(self.max_documents.saturating_mul(2)).saturating_add(8);
        b.max_aliases = self.max_aliases;
        b.max_total_scalar_bytes = self.expanded_budget(input_len);
        b.max_recorded_anchor_bytes = self.expanded_budget(input_len);
        b
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Which limit an input broke, with the limit's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// The body is larger than the body limit.
    BodyBytes(usize),
    /// Mappings and sequences nested deeper than this.
    Depth(usize),
    /// More documents than this.
    Documents(usize),
    /// Scalars (aliases expanded) add up to more than this many bytes.
    ExpandedBytes(usize),
    /// More nodes than this (aliases expanded).
    Nodes(usize),
    /// An alias rule; the text says which (uses, anchors, expansion).
    Aliases(String),
    /// Parsing took longer than this.
    ParseTime(Duration),
}

impl Limit {
    /// Whether the limit is on size (answered 413 by the API) rather than on shape.
    pub fn is_size(&self) -> bool {
        matches!(self, Limit::BodyBytes(_) | Limit::ExpandedBytes(_) | Limit::Nodes(_))
    }

    /// The limit a breach of the scanner's budget (set by [`Limits::budget`]) broke.
    pub(crate) fn of_breach(breach: &serde_saphyr::budget::BudgetBreach, limits: &Limits, input_len: usize) -> Limit {
        use serde_saphyr::budget::BudgetBreach as B;
        match breach {
            B::Depth { .. } => Limit::Depth(limits.max_depth),
            B::Documents { .. } => Limit::Documents(limits.max_documents),
            B::Nodes { .. } | B::Events { .. } => Limit::Nodes(limits.node_budget(input_len)),
            B::ScalarBytes { .. } | B::RecordedAnchorBytes { .. } => {
                Limit::ExpandedBytes(limits.expanded_budget(input_len))
            }
            B::InputBytes { .. } => Limit::BodyBytes(limits.max_body_bytes),
            B::Aliases { .. } => Limit::Aliases(format!("more than {} alias uses", limits.max_aliases)),
            B::AliasAnchorRatio { aliases, anchors } => {
                Limit::Aliases(format!("{aliases} alias uses for {anchors} anchors (at most 10 per anchor)"))
            }
            other => Limit::Aliases(format!("{other:?}")),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::BodyBytes(n) => write!(f, "the body is larger than {n} bytes (the limit)"),
            Limit::Depth(n) => write!(f, "nesting deeper than {n} levels (the limit)"),
            Limit::Documents(n) => write!(f, "more than {n} documents in one body (the limit)"),
            Limit::ExpandedBytes(n) => write!(
                f,
                "text expands to more than {n} bytes with aliases expanded (the limit for this body: \
                 {EXPANSION_FACTOR} times its size plus {EXPANSION_ALLOWANCE} bytes, at most {MAX_EXPANDED_BYTES})"
            ),
            Limit::Nodes(n) => write!(
                f,
                "more than {n} nodes with aliases expanded (the limit for this body: one a byte plus {NODE_ALLOWANCE}, at most {MAX_NODES})"
            ),
            Limit::Aliases(rule) => write!(f, "aliases: {rule} (the limit)"),
            Limit::ParseTime(d) => write!(f, "parsing took longer than {} (the limit)", humantime::format_duration(*d)),
        }
    }
}
