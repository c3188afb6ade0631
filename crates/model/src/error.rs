//! The error of a rule a value broke: the field it is about (a path such as
//! `spec.rollout.steps[1].percent`, or none when the value is a whole) and what the
//! rule is; and an error with its causes as one line ([`causes`]).

use std::fmt;

/// A broken rule: `field` names where (empty when the rule is about the value as a
/// whole, e.g. a grant's text), `message` what the rule is. Shown as `field: message`,
/// or as the message alone when there is no field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FieldError {
    /// The path of the offending field, e.g. `metadata.name`; empty for the whole value.
    pub field: String,
    /// What the rule is, e.g. `must be at least 1`.
    pub message: String,
}

impl FieldError {
    /// The rule `message` broken at `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }

    /// A broken rule about the value as a whole: no field.
    pub fn message(message: impl Into<String>) -> Self {
        Self::new(String::new(), message)
    }

    /// The same rule, said of `field` (for a check that does not know where its value is).
    pub fn at(self, field: impl Into<String>) -> Self {
        Self { field: field.into(), ..self }
    }

    /// The same rule, its field a child of `parent` (`ref` and `commit`: `ref.commit`).
    pub fn under(self, parent: &str) -> Self {
        let field = if self.field.is_empty() { parent.to_string() } else { format!("{parent}.{}", self.field) };
        Self { field, ..self }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// The texts of `e` and its causes (`source()`), from the outermost to the innermost,
/// joined by `: `. A text another one already says (a wrapper that repeats its cause,
/// or a cause its wrapper printed) appears once; control characters become spaces.
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut kept: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text: String = err.to_string().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let text = text.trim().to_string();
        next = err.source();
        if text.is_empty() || kept.iter().any(|k| k.contains(&text)) {
            continue;
        }
        // A cause that repeats what was kept before it (`outer: inner` then `inner`
        // is handled above; `inner` kept, then a cause that says more) replaces it.
        kept.retain(|k| !text.contains(k.as_str()));
        kept.push(text);
    }
    kept.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_field_then_the_message_or_the_message_alone() {
        let e = FieldError::new("spec.rollout.steps[0].count", "must be at least 1");
        assert_eq!(e.to_string(), "spec.rollout.steps[0].count: must be at least 1");
        let e = FieldError::message("an agent credential is for one cluster: name it");
        assert_eq!(e.to_string(), "an agent credential is for one cluster: name it");
        assert_eq!(e.clone().at("cluster"), FieldError::new("cluster", e.message));
    }
}
