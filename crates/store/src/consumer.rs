//! Durable cursors of named event consumers: how far each has acknowledged the event
//! log, so that a restarted consumer resumes where it left off (at least once: it sees
//! again what it handled but had not acknowledged yet).
//!
//! A cursor only moves forward ([`EventLog::consumer_ack`](crate::EventLog::consumer_ack)
//! keeps the larger of the stored and the acknowledged sequence number), so a late or
//! repeated acknowledgement can never make a consumer skip ahead and then fall back.

use crate::{Result, StoreError};

/// The longest consumer name, in bytes.
pub const MAX_CONSUMER_NAME: usize = 128;

/// Checks a consumer name: 1 to [`MAX_CONSUMER_NAME`] bytes, no control characters and
/// no leading or trailing whitespace (names are typed and compared by people).
pub fn check_consumer_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_CONSUMER_NAME {
        "must be at most 128 bytes long"
    } else if name.chars().any(char::is_control) {
        "must not contain control characters"
    } else if name.trim() != name {
        "must not start or end with whitespace"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidConsumerName { name: name.to_string(), reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_consumer_name("audit-log").is_ok());
        assert!(check_consumer_name(&"x".repeat(MAX_CONSUMER_NAME)).is_ok());
        for bad in ["", " padded", "tab\there", &"x".repeat(MAX_CONSUMER_NAME + 1)] {
            let err = check_consumer_name(bad).expect_err(bad);
            assert!(matches!(err, StoreError::InvalidConsumerName { .. }), "{err}");
        }
        let err = check_consumer_name("").expect_err("empty").to_string();
        assert_eq!(err, "invalid consumer name \"\": must not be empty");
    }
}
