//! Typed apply errors, so status can say what went wrong and the runtime can tell
//! what is worth retrying.

/// Longest text an error of the applier's own making carries (a transport failure's
/// target and causes, an egress refusal): longer texts lose their middle
/// ([`shorten`]), so that the target named first and the cause or hint given last
/// both stay whole.
pub const MAX_ERROR: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The hub's egress policy refuses the cluster's endpoint; the text names the rule.
    /// Shown as `forbidden:` like a refusal by the target, but nothing is sent, and
    /// trying again cannot succeed until the policy or the cluster changes
    /// ([`parks_at_once`](Self::parks_at_once)).
    #[error("forbidden: {0}")]
    Egress(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("invalid: {0}")]
    Invalid(String),
    /// The target could not be reached: the text names the address tried and the
    /// innermost cause (connection refused, a DNS failure, a TLS certificate problem).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// No answer in time; `target` is the address of the request.
    #[error("timed out: {target}: no answer within {ms} ms")]
    Timeout { target: String, ms: u64 },
    /// The target saw a newer fencing token for this key: this worker lost its lease.
    #[error("fenced: token {token} is older than {newest} already seen by the target")]
    Fenced { token: i64, newest: i64 },
    /// A transient failure of the target (5xx, injected failure).
    #[error("transient: {0}")]
    Transient(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl ApplyError {
    /// Whether trying again may succeed without anyone changing anything. Permanent
    /// errors still go through backoff (a human may fix the target), but are reported
    /// as such.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApplyError::Conflict(_)
                | ApplyError::Unreachable(_)
                | ApplyError::Timeout { .. }
                | ApplyError::Transient(_)
        )
    }

    /// Whether the key should be parked at once rather than backed off: trying again
    /// cannot succeed until something the hub hears of changes — the Cluster (a change
    /// runs its keys again), the hub's egress policy (a restart with other flags), or an
    /// explicit retry. The one rule for it: an egress refusal.
    pub fn parks_at_once(&self) -> bool {
        matches!(self, ApplyError::Egress(_))
    }
}

/// How an egress refusal reads in a key's `lastError` (after the resource it stopped at).
const EGRESS_REFUSAL: &str = "forbidden: egress to ";

/// Whether a key's `lastError` is an egress refusal ([`ApplyError::Egress`]): such a
/// key was parked at once and runs again when a process with a (maybe new) policy
/// starts.
pub fn is_egress_refusal(last_error: &str) -> bool {
    last_error.starts_with(EGRESS_REFUSAL) || last_error.contains(&format!(": {EGRESS_REFUSAL}"))
}

/// `text` at most `max` bytes long: if longer, its middle is replaced by `…` (cut on
/// character boundaries), keeping the first and the last parts — the address an error
/// names first and the cause or hint it gives last — whole whenever `max` leaves room
/// for them.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let budget = max.saturating_sub('…'.len_utf8());
    // The end carries the innermost cause or the hint: give it the larger half.
    let mut head = budget / 3;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (budget - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}…{}", &text[..head], &text[tail..])
}

pub use fleetsync_model::error::causes;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    fn chain(texts: &[&'static str]) -> Layer {
        let mut inner: Option<Box<Layer>> = None;
        for t in texts.iter().rev() {
            inner = Some(Box::new(Layer(t, inner)));
        }
        *inner.expect("a layer")
    }

    #[test]
    fn causes_walk_to_the_innermost_and_say_each_text_once() {
        let e = chain(&["client error (Connect)", "tcp connect error", "Connection refused (os error 111)"]);
        assert_eq!(causes(&e), "client error (Connect): tcp connect error: Connection refused (os error 111)");
        let repeated = chain(&["invalid peer certificate: UnknownIssuer", "invalid peer certificate: UnknownIssuer"]);
        assert_eq!(causes(&repeated), "invalid peer certificate: UnknownIssuer");
        let wrapper_says_it =
            chain(&["error sending request: dns error: no such host", "dns error: no such host", "no such host"]);
        assert_eq!(causes(&wrapper_says_it), "error sending request: dns error: no such host");
        assert_eq!(causes(&chain(&["a\nb"])), "a b");
    }

    #[test]
    fn shortening_cuts_the_middle_and_keeps_both_ends() {
        let hint = "(loopback; allow it with --egress-allow)";
        let text = format!("egress to {} is denied {hint}", "ü".repeat(400));
        let short = shorten(&text, 200);
        assert!(short.len() <= 200, "{}", short.len());
        assert!(short.starts_with("egress to ü"), "{short}");
        assert!(short.ends_with(hint), "the hint stays whole: {short}");
        assert!(short.contains('…'));
        assert_eq!(shorten("short", 200), "short");
    }

    #[test]
    fn only_an_egress_refusal_parks_at_once() {
        assert!(ApplyError::Egress("egress to 127.0.0.1 is denied".into()).parks_at_once());
        for other in [
            ApplyError::Forbidden("403 Forbidden".into()),
            ApplyError::Unreachable("x".into()),
            ApplyError::Invalid("x".into()),
        ] {
            assert!(!other.parks_at_once(), "{other}");
        }
        let refused = ApplyError::Egress("egress to x is denied".into());
        assert_eq!(refused.to_string(), "forbidden: egress to x is denied");
        assert!(is_egress_refusal(&format!("v1/ConfigMap apps/a: {refused}")));
        assert!(is_egress_refusal(&format!("deleting v1/ConfigMap apps/a: {refused}")));
        assert!(!is_egress_refusal("v1/ConfigMap apps/a: forbidden: 403 Forbidden"));
    }
}
